"""Plain helpers shared by several test files (fixtures live in ``conftest.py``).

Imported as ``from _helpers import ...``: pytest puts ``tests/`` on ``sys.path`` (rootdir
``conftest.py``, no package ``__init__``).
"""

import json
import math
import shutil
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

import cvfl_sim.experiments.specs as exs
import cvfl_sim.vfl.train as vfl_train
from cvfl_sim.commands.cli import main
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import VerticalDataset
from cvfl_sim.vfl.transport import FRAME_BYTES
from cvfl_theory.compressors import ScalarQuantizer

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (the folder holding ``tests/`` and ``docs/``)."""

KERNEL_SRC = ROOT / "cvfl_theory" / "_kernels.c"
# setup.py's flags; -ffp-contract=off is the one the bits depend on
KERNEL_CFLAGS = ["-shared", "-fPIC", "-ffp-contract=off", "-fno-strict-aliasing"]


# ------------------------------------------------------------------------------ kernel builds
def build_kernels(cc_names, out_dir, extra):
    """The kernels compiled again with the first compiler of ``cc_names`` found, or None."""
    cc = next((shutil.which(c) for c in cc_names if shutil.which(c)), None)
    if cc is None or not KERNEL_SRC.exists():
        return None
    out = out_dir / ("_kernels" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [cc, *KERNEL_CFLAGS, *extra, f"-I{sysconfig.get_paths()['include']}", str(KERNEL_SRC)]
    res = subprocess.run([*cmd, "-o", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stderr[-3000:]}"
    return out


def use_kernels_build(path_expr):
    """Python source that makes ``cvfl_theory._kernels`` the build at ``path_expr`` (an expression
    of a script: a path, or a false value for the installed build), before anything imports it."""
    return f"""
import importlib.util, sys
_so = {path_expr}
if _so:
    _spec = importlib.util.spec_from_file_location("cvfl_theory._kernels", _so)
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    sys.modules["cvfl_theory._kernels"] = _mod
"""


# ------------------------------------------------------------------------------ tiny data sets
def tiny_dataset(n, dims, *, seed=0, y=None, classes=3, test_fraction=0.25, split_seed=None):
    """Standard normal features, one ``(n, d)`` block per party of ``dims``, drawn with ``seed``.

    ``y`` given: those labels. Otherwise ``classes`` random labels drawn after the features,
    the first ``classes`` samples set to ``0..classes-1`` so that every class is present. The
    train/test split is seeded with ``split_seed`` (default: ``seed``).
    """
    g = np.random.default_rng(seed)
    parts = [g.normal(size=(n, d)) for d in dims]
    if y is None:
        y = g.integers(0, classes, size=n)
        y[:classes] = np.arange(classes)
    split = seed if split_seed is None else split_seed
    return VerticalDataset.from_arrays(parts, y, test_fraction=test_fraction, rng=split)


# ------------------------------------------------------------------------------ model parameters
def model_params(parties, server):
    """Detached copies of every parameter of the party models, then of the server model."""
    return [q.detach().clone() for net in [*parties, server] for q in net.parameters()]


def run_params(res):
    """:func:`model_params` of a ``train`` result's models."""
    return model_params(res.models["parties"], res.models["server"])


def max_diff(a, b):
    """Largest absolute entry difference between two parameter lists."""
    return max(float((p - q).abs().max()) for p, q in zip(a, b))


# ------------------------------------------------------------------------------ interruptions
class StopTraining(Exception):
    """Raised by :func:`stop_after` to interrupt ``train`` from its epoch callback."""


def stop_after(n):
    """An ``on_epoch_end`` callback that raises :class:`StopTraining` after epoch ``n``."""

    def cb(epoch):
        if epoch == n:
            raise StopTraining

    return cb


# ------------------------------------------------------------------------------ checkpoint files
def header_length(data):
    """The header length field of checkpoint bytes, read here from the documented layout.

    Magic (8 bytes), version (uint32), header length (uint64 little-endian), then the header.
    """
    (n,) = struct.unpack("<Q", data[12:20])
    return n


def checkpoint_header(data):
    """The JSON header of checkpoint bytes (plain JSON, parsed here independently)."""
    return json.loads(data[20 : 20 + header_length(data)])


def array_layout(header):
    """``{name: (dtype, shape)}`` of a checkpoint header's array table."""
    return {e["name"]: (e["dtype"], tuple(e["shape"])) for e in header["arrays"]}


# ------------------------------------------------------------------------------ sweeps
def set_one_epoch(mp):
    """Quick runs of one epoch on breast-cancer, through the monkeypatch ``mp``.

    Only the epochs change, and they travel inside each RunSpec, so worker processes (which do
    not see this monkeypatch) train exactly what the serial run trains.
    """
    st = {**exs.SETTINGS["breast-cancer"], "quick_epochs": 1}
    mp.setitem(exs.SETTINGS, "breast-cancer", st)


def record_training(mp):
    """Patch (through ``mp``) the ``train`` that sweeps call to log each run's configuration.

    Returns the list the configurations are appended to, one per run trained in this process.
    """
    calls = []
    real = vfl_train.train

    def recording(ds, cfg):
        calls.append(cfg)
        return real(ds, cfg)

    mp.setattr(vfl_train, "train", recording)
    return calls


# ------------------------------------------------------------------------------ command line
def run_json(capsys, argv):
    """Exit code, parsed stdout and stderr of ``cvfl argv`` (its stdout: one JSON document)."""
    code = main(argv)
    out, err = capsys.readouterr()

    def strict(name: str) -> float:  # NaN and Infinity are not JSON
        raise ValueError(f"cvfl {' '.join(argv)} wrote {name}, which is not JSON")

    # fails unless stdout is exactly one strict JSON document
    return code, json.loads(out, parse_constant=strict), err


# ------------------------------------------------------------------------------ subprocesses
def python_stdout(code, timeout=None):
    """The stripped stdout of ``python -c code`` in a fresh interpreter (which must exit 0)."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=timeout
    )
    return out.stdout.strip()


# ------------------------------------------------------------------------------ C1 roles runs
def roles_dataset(parties, n=60, seed=0):
    """The roles/distributed tests' data set: ``parties`` parties of 2, 3, 4, 2, ... features."""
    return tiny_dataset(n, [2 + m % 3 for m in range(parties)], seed=seed)


def roles_config(**kw):
    """The roles/distributed tests' configuration, with ``kw`` overriding its fields."""
    base = dict(
        Q=3,
        lr=0.3,
        epochs=2,
        batch_size=16,
        embedding_size=4,
        compressor=ScalarQuantizer(3),
        error_feedback=True,
        seed=5,
    )
    return CVFLConfig(**{**base, **kw})


def assert_same_history(a, b):
    """Equal history rows, float entries up to float32 summation order (rel. 1e-6)."""
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for k in ra:
            if isinstance(ra[k], float):
                # the measured errors are float32 sums taken in another order: rel. 1e-6
                assert rb[k] == pytest.approx(ra[k], rel=1e-6, abs=1e-12), k
            else:
                assert ra[k] == rb[k], k


def wire_bytes(compressor, payload_bits):
    """Length of a to_bytes() message from the documented wire format (base.py table)."""
    cfg = json.dumps({"name": compressor.name, "args": compressor.config()}, sort_keys=True)
    header = 44 + len(cfg) + len("cpu")  # fixed fields, configuration, torch device name
    return header + math.ceil(payload_bits / 8) + 4  # padded payload, CRC-32


def expected_algorithm_bytes(rounds, compressor, M):
    """Per rank: every frame of C1 from the rounds' payload bits plus the documented framing."""
    out = [0] * (M + 1)
    for uploads, server_model in rounds:
        up = [FRAME_BYTES + wire_bytes(compressor, u) for u in uploads]
        model = FRAME_BYTES + wire_bytes(compressor, server_model)
        for m in range(1, M + 1):
            out[m] += up[m - 1]  # the upload C_m(h_m)
            out[0] += sum(up) - up[m - 1] + model  # relayed Φ̂_{-m} and C_0(θ_0) to party m
    return out


def payloads(res, q, M, epochs):
    """(uploads, server model) payload bits of every round, from the compressor's formula."""
    sizes = [16, 16, 13]  # N_train = 45: batches of 16, 16 and 13 per epoch
    theta0 = res.summary["theta0_size"]
    return [([q.payload_bits((b, 4))] * M, q.payload_bits((1, theta0))) for b in sizes * epochs]
