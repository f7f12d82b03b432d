"""Fingerprints of C-VFL runs: digests of everything a run records, so a refactor is shown to change
no bit of any result.

Each entry of :data:`RUNS` trains one small run (every backend; compressors, error feedback,
step-size and compression schedules, per-party and server compressors, float64, checkpoint and
resume, a probed run) or one ``cvfl reproduce --quick`` experiment, and digests what it records:
the trained parameters, the history, the per-round log and ledger, the summary without its wall
times, the checkpoint file after the first epoch and at the end (its ``train_time`` field, a wall
time, left out), the probe's report and the experiment's tables.

The runs are made in a child process whose libraries are pinned to their portable code
(:data:`PINNED_ENV`: torch's ATen kernels, MKL's conditional numerical reproducibility, the
compressors' kernel path; numpy without its AVX-512 loops), so the digests do not depend on which
x86-64 CPU runs them. The float64 *analysis* of the probe and of the bounds experiment also goes
through numpy's BLAS, whose kernels are not pinned (the machine's own setting is left alone): those
values are digested rounded to 10 significant digits; every training result is digested exactly.

Usage::

    python tests/fingerprints.py           # compare with tests/data/fingerprints.json (exit 1 on a change)
    python tests/fingerprints.py --write   # record them anew (only for an intended change of results)
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "data" / "fingerprints.json"
TIMING = frozenset({"train_seconds", "wall_seconds", "round_seconds"})


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return []


def pinned_env() -> dict[str, str]:
    """The child's environment: every library's SIMD dispatch pinned to portable code."""
    env = dict(os.environ)
    env.update(
        CVFL_FINGERPRINT_CHILD="1",
        ATEN_CPU_CAPABILITY="default",  # torch's vectorised kernels: the plain ones
        MKL_CBWR="COMPATIBLE",  # MKL (torch's BLAS): the same results on every x86-64 CPU
        CVFL_KERNEL_PATH="portable",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONHASHSEED="0",
    )
    if "avx512f" in _cpu_flags():  # numpy refuses to disable features the CPU lacks
        env["NPY_DISABLE_CPU_FEATURES"] = "X86_V4 AVX512_ICL AVX512_SPR"
    return env


# ---------------------------------------------------------------------------------------- digests
def _canon(v: Any, digits: int | None) -> Any:
    """JSON-able ``v``; floats exact (``repr``) or rounded to ``digits`` significant digits."""
    if isinstance(v, float):
        if digits is None or not math.isfinite(v) or v == 0.0:
            return repr(v)
        return f"{v:.{digits - 1}e}"
    if isinstance(v, dict):
        return {str(k): _canon(x, digits) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [_canon(x, digits) for x in v]
    if hasattr(v, "tolist"):  # numpy arrays and scalars
        return _canon(v.tolist(), digits)
    return v


def digest(v: Any, digits: int | None = None) -> str:
    """sha256 (first 16 hex digits) of ``v``'s canonical JSON."""
    text = json.dumps(_canon(v, digits), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def params_digest(modules: Any) -> str:
    """sha256 of every tensor of ``modules``' state dicts: names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for net in modules:
        for k, t in net.state_dict().items():
            h.update(f"{k}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def checkpoint_digest(data: bytes) -> str:
    """A checkpoint file's header (without the wall time ``train_time``) and array bytes.

    Read by the documented layout (magic, version, header length, JSON header, data, CRC).
    """
    magic, version, n = struct.unpack_from("<8sIQ", data)
    assert magic == b"CVFLCKPT", magic
    start = struct.calcsize("<8sIQ")
    header = json.loads(data[start : start + n])
    header["state"].pop("train_time")
    return digest([version, header, hashlib.sha256(data[start + n : -4]).hexdigest()])


def result_digests(res: Any) -> dict[str, str]:
    """Digests of a :class:`RunResult`: parameters, history, per-round log, summary, config."""
    out = {
        "history": digest(res.history),
        "rounds": digest(res.rounds),
        "summary": digest({k: v for k, v in res.summary.items() if k not in TIMING}),
        "config": digest([res.config, res.dataset]),
    }
    if res.models is not None:
        out["params"] = params_digest([*res.models["parties"], res.models["server"]])
    return out


# ---------------------------------------------------------------------------------------- the runs
@functools.cache
def data(name: str) -> Any:
    from cvfl_sim.vfl.data import load_dataset

    return load_dataset(name)


def cfg(**kw: Any) -> Any:
    from cvfl_sim.vfl.config import CVFLConfig

    base = {"epochs": 2, "batch_size": 128, "eval_every": 2, "embedding_size": 4, "lr": 0.05}
    return CVFLConfig(**{**base, **kw})


def compressors() -> Any:
    import cvfl_theory.compressors as c

    return c


def run(ds: str, backend: str = "inprocess", **kw: Any) -> dict[str, str]:
    from cvfl_sim.vfl.train import train

    return result_digests(train(data(ds), cfg(**kw), backend=backend))


def run_checkpointed(ds: str, backend: str, **kw: Any) -> dict[str, str]:
    """A run writing a checkpoint: the file after epoch 1 and at the end, and the result."""
    from cvfl_sim.vfl.train import train

    snaps: list[bytes] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.ckpt")
        res = train(
            data(ds),
            cfg(**kw),
            checkpoint=path,
            backend=backend,
            on_epoch_end=lambda e: snaps.append(Path(path).read_bytes()),
        )
    out = result_digests(res)
    out.update({f"checkpoint_epoch{i + 1}": checkpoint_digest(b) for i, b in enumerate(snaps)})
    return out


class _Stop(Exception):
    pass


def run_resumed(ds: str, **kw: Any) -> dict[str, str]:
    """A run stopped after epoch 1 (its checkpoint kept), then resumed to the end."""
    from cvfl_sim.vfl.train import train

    def stop(epoch: int) -> None:
        if epoch == 1:
            raise _Stop

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.ckpt")
        try:
            train(data(ds), cfg(**kw), checkpoint=path, on_epoch_end=stop)
        except _Stop:
            pass
        first = checkpoint_digest(Path(path).read_bytes())
        res = train(data(ds), cfg(**kw), checkpoint=path)
        out = result_digests(res)
        out["checkpoint_epoch1"] = first
        out["checkpoint_end"] = checkpoint_digest(Path(path).read_bytes())
    return out


def run_probed() -> dict[str, str]:
    from cvfl_sim.bounds.lemma1 import Lemma1Probe
    from cvfl_sim.vfl.train import train

    c = compressors()
    probe = Lemma1Probe(every=2, steps="ends", tight=True)
    res = train(data("breast-cancer"), cfg(Q=3, compressor=c.ScalarQuantizer(2)), probe=probe)
    rep = probe.report()
    fields = ("rounds", "steps", "left", "H_point", "G_point", "E_realised", "E_expected", "tight")
    out = result_digests(res)
    out["probe"] = digest({f: getattr(rep, f) for f in fields}, digits=10)
    return out


def run_joint_sgd() -> dict[str, str]:
    from cvfl_sim.vfl.config import build_models
    from cvfl_sim.vfl.joint_sgd import joint_sgd

    parties, server, _ = joint_sgd(data("breast-cancer"), cfg(Q=1))
    p0, s0 = build_models(data("digits-quadrants"), cfg(server_model="mlp"))
    return {"params": params_digest([*parties, server]), "initial": params_digest([*p0, s0])}


def reproduce(name: str, digits: int | None) -> dict[str, str]:
    """``cvfl reproduce NAME --quick``: every table it writes (CSV and markdown)."""
    import contextlib
    import io

    from cvfl_sim.commands.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["reproduce", name, "--quick", "--out", tmp])
        assert code in (0, None), f"cvfl reproduce {name} exited {code}: {err.getvalue()[-2000:]}"
        folder = Path(tmp) / name
        out = {}
        for f in sorted(folder.glob("*.csv")):
            import csv

            rows = list(csv.reader(f.read_text().splitlines()))
            out[f.name] = digest([[_number(x) for x in r] for r in rows], digits)
        for f in sorted(folder.glob("*.md")):
            out[f.name] = digest(f.read_text() if digits is None else len(f.read_text()))
    return out


def _number(x: str) -> Any:
    try:
        return float(x)
    except ValueError:
        return x


def _schedule() -> Any:
    from cvfl_sim.vfl.schedules import CompressionSchedule

    c = compressors()
    return CompressionSchedule(
        [2, 2, 3, 3, 4], functools.partial(c.ScalarQuantizer, range="minmax-row")
    )


def _runs() -> dict[str, Callable[[], dict[str, str]]]:
    c = compressors()
    from cvfl_sim.vfl.schedules import InverseSqrt, StepDecay

    hex3 = c.HexLatticeQuantizer(bits=3, range="minmax-tensor")
    return {
        "inprocess-identity-Q1": lambda: run("breast-cancer", Q=1),
        "inprocess-scalar2-Q5": lambda: run("breast-cancer", Q=5, compressor=c.ScalarQuantizer(2)),
        "inprocess-lattice3-Q10": lambda: run("digits-quadrants", Q=10, compressor=hex3),
        "inprocess-topk3-Q2": lambda: run("digits-quadrants", Q=2, compressor=c.TopK(bits=3)),
        "inprocess-scalar2-ef": lambda: run(
            "breast-cancer", Q=3, compressor=c.ScalarQuantizer(2), error_feedback=True
        ),
        "inprocess-lattice2-ef": lambda: run(
            "digits-quadrants", Q=2, compressor=c.HexLatticeQuantizer(bits=2), error_feedback=True
        ),
        "inprocess-compression-schedule": lambda: run("breast-cancer", Q=2, compressor=_schedule()),
        "inprocess-inverse-sqrt-lr": lambda: run(
            "breast-cancer", Q=4, lr=InverseSqrt(0.2), compressor=c.ScalarQuantizer(3)
        ),
        "inprocess-step-decay-lr": lambda: run(
            "digits-quadrants", Q=3, lr=StepDecay(0.1, 5, 0.5), compressor=c.TopK(bits=4)
        ),
        "inprocess-per-party": lambda: run(
            "breast-cancer",
            Q=2,
            compressor=[c.ScalarQuantizer(2), c.ScalarQuantizer(3), hex3, c.TopK(bits=4)],
            server_compressor=c.ScalarQuantizer(8),
        ),
        "inprocess-server-compressor": lambda: run(
            "breast-cancer", Q=2, compressor=c.ScalarQuantizer(4), server_compressor=None
        ),
        "inprocess-float64": lambda: run(
            "breast-cancer", Q=2, dtype="float64", compressor=c.ScalarQuantizer(3)
        ),
        "inprocess-linear-gradnorm": lambda: run(
            "breast-cancer",
            Q=2,
            parties_model="linear",
            compressor=c.ScalarQuantizer(2),
            track_grad_norm=True,
        ),
        "inprocess-mlp-server": lambda: run(
            "digits-quadrants", Q=2, server_model="mlp", compressor=c.ScalarQuantizer(3)
        ),
        "inprocess-views-12": lambda: run("digits-views-12", Q=2, compressor=hex3, epochs=1),
        "inprocess-checkpoint": lambda: run_checkpointed(
            "breast-cancer", "inprocess", Q=2, compressor=c.ScalarQuantizer(2), error_feedback=True
        ),
        "inprocess-resume": lambda: run_resumed(
            "breast-cancer", Q=2, compressor=c.ScalarQuantizer(2), error_feedback=True
        ),
        "roles-scalar3": lambda: run(
            "breast-cancer", "roles", Q=2, compressor=c.ScalarQuantizer(3)
        ),
        "roles-checkpoint-ef": lambda: run_checkpointed(
            "breast-cancer", "roles", Q=2, compressor=hex3, error_feedback=True
        ),
        "distributed-scalar2": lambda: run(
            "breast-cancer", "distributed", Q=2, epochs=1, compressor=c.ScalarQuantizer(2)
        ),
        "probed-lemma1": run_probed,
        "joint-sgd-and-initial-models": run_joint_sgd,
        "reproduce-local-steps-quick": lambda: reproduce("local-steps", None),
        "reproduce-bounds-quick": lambda: reproduce("bounds", 10),
    }


def compute(names: list[str] | None = None) -> dict[str, dict[str, str]]:
    """Every run's digests (in this process, whatever its environment)."""
    import torch

    torch.set_num_threads(1)
    runs = _runs()
    return {name: runs[name]() for name in (names or runs)}


def child_digests() -> dict[str, dict[str, str]]:
    """The digests computed by a child process in :func:`pinned_env`."""
    proc = subprocess.run(
        [sys.executable, __file__, "--child"],
        env=pinned_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the fingerprint runs failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def differences(got: dict[str, dict[str, str]], want: dict[str, dict[str, str]]) -> list[str]:
    """One line per run and record whose digest differs, is missing or is new."""
    lines = []
    for name in sorted(set(got) | set(want)):
        g, w = got.get(name, {}), want.get(name, {})
        for key in sorted(set(g) | set(w)):
            if g.get(key) != w.get(key):
                lines.append(f"{name}: {key} {w.get(key)} -> {g.get(key)}")
    return lines


def main(argv: list[str]) -> int:
    """Compare (default), ``--write`` or, in the child, ``--child`` (print the digests)."""
    if "--child" in argv:
        print(json.dumps(compute()))
        return 0
    got = child_digests()
    if "--write" in argv:
        EXPECTED.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(got)} runs' fingerprints to {EXPECTED}")
        return 0
    diff = differences(got, json.loads(EXPECTED.read_text()))
    print("\n".join(diff) or f"{len(got)} runs: every fingerprint is identical")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
