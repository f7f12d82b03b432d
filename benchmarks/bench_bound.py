"""Cost of the convergence checks (C4.1, C4.2), as ratios and wall times (never asserted in tests).

1. **Lemma-1 probe overhead**: the time :class:`cvfl_sim.bounds.lemma1.Lemma1Probe` spends at one probed
   local step (exact left side, chain-reading constants at both points, expected errors, and the
   tight term of C4.5 when ``tight=True``) ÷ the time of one plain round of the same run
   (breast cancer, 4 MLP parties, B = 64, Q = 1, 2-bit scalar quantizer; again with the
   quantizer's range per row, whose error laws the tight term reads row by row). Minimum over
   interleaved repeats, so background load affects both sides alike. Target <= 10. The
   14 operator norms (12 of 256 x 256 Gram matrices) are taken together by a batched Lanczos
   iteration on operators that never form the matrices; the docs' Speed page says where the
   rest of the time goes.
2. **Trajectory certificate overhead**: the time :class:`cvfl_sim.bounds.certificate.TrajectoryProbe`
   spends at one local step (full-data loss and gradient, batch gradient, the segment's
   smoothness) ÷ the time of one plain local step of the same run (breast cancer, B = 64,
   Q = 5, 2-bit scalar quantizer): the analytic model (certified, closed-form gradients) and
   4 MLP parties (estimated smoothness, autograd and power iteration). Target <= 10.
3. **``cvfl bound --quick``** (the default) wall time, as a user runs it (a fresh process,
   imports included): target <= 60 s.
4. **``cvfl reproduce bounds --quick --jobs 2``** wall time into a fresh folder, as a user runs
   it (6 runs with both probes, the tables and the figure): target <= 2 min on 2 cores.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

import torch
from _timing import cpu_line, verdict

from cvfl_sim.bounds.certificate import TrajectoryProbe
from cvfl_sim.bounds.lemma1 import Lemma1Probe
from cvfl_sim.vfl.compressors import make_compressor
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import load_dataset
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import ScalarQuantizer

REPEATS = 3
QUICK_TARGET = 60.0
REPRODUCE_TARGET = 120.0
CERTIFICATE_TARGET = 10.0
PROBE_TARGET = 10.0


def _config(Q: int, lr: float, parties: str = "mlp", rows: bool = False) -> CVFLConfig:
    """The measured runs: breast cancer's 4 parties, B = 64, 2-bit scalar quantizer, one epoch.

    ``rows``: the quantizer's range per row (``"minmax-row"``) instead of per tensor.
    """
    return CVFLConfig(
        Q=Q,
        lr=lr,
        epochs=1,
        batch_size=64,
        embedding_size=4,
        parties_model=parties,
        server_model="linear",
        compressor=ScalarQuantizer(2, range="minmax-row") if rows else make_compressor("scalar", 2),
    )


def _probe_ratio(tight: bool, rows: bool = False) -> tuple[float, float]:
    ds = load_dataset("breast-cancer")
    cfg = _config(Q=1, lr=0.01, rows=rows)
    train(ds, cfg, probe=Lemma1Probe(every=4, tight=tight))  # warm-up (imports, allocator)
    plain, probe = [], []
    for _ in range(REPEATS):  # interleaved
        res = train(ds, cfg)
        plain.append(float(res.summary["train_seconds"]) / len(res.rounds["lr"]))
        pr = Lemma1Probe(every=1, steps="first", tight=tight)
        train(ds, cfg, probe=pr)
        probe.append(pr.seconds / pr.report().left.shape[0])
    return min(probe), min(plain)


def _certificate_ratio(parties: str) -> tuple[float, float]:
    """Seconds per certified local step and per plain local step (minima over repeats)."""
    ds = load_dataset("breast-cancer")
    cfg = _config(Q=5, lr=0.02, parties=parties)
    probe = TrajectoryProbe(ds, cfg, progress=False)  # warm-up
    probe.certificate(train(ds, cfg, probe=probe))
    plain, cert = [], []
    for _ in range(REPEATS):  # interleaved
        res = train(ds, cfg)
        steps = len(res.rounds["lr"]) * cfg.Q
        plain.append(float(res.summary["train_seconds"]) / steps)
        probe = TrajectoryProbe(ds, cfg, progress=False)
        probe.certificate(train(ds, cfg, probe=probe))
        cert.append(probe.seconds / probe.sums.steps)
    return min(cert), min(plain)


def main() -> int:
    torch.set_num_threads(1)
    print(cpu_line())
    print("Lemma-1 probe: seconds per probed step / seconds per plain round (min of interleaved)")
    print(f"{'probe':<22} {'probe s':>9} {'round s':>9} {'ratio':>7}")
    for tight, rows in ((False, False), (True, False), (True, True)):
        p, r = _probe_ratio(tight, rows)
        name = "left side + constants"
        name = ("tight, minmax-row" if rows else "with tight term") if tight else name
        print(
            f"{name:<22} {p:9.4f} {r:9.5f} {p / r:7.1f}  (target <= {PROBE_TARGET:g}) "
            f"{verdict(p / r, PROBE_TARGET)}"
        )
    print("trajectory certificate: seconds per local step / seconds per plain local step")
    print(f"{'model':<22} {'cert s':>9} {'step s':>9} {'ratio':>7}")
    for parties, name in (("linear", "analytic (certified)"), ("mlp", "MLP (estimated)")):
        c, r = _certificate_ratio(parties)
        print(
            f"{name:<22} {c:9.5f} {r:9.5f} {c / r:7.1f}  (target <= {CERTIFICATE_TARGET:g}) "
            f"{verdict(c / r, CERTIFICATE_TARGET)}"
        )
    ok = _command(["bound", "--quick", "--json"], "cvfl bound --quick", QUICK_TARGET)
    with tempfile.TemporaryDirectory() as out:
        args = ["reproduce", "bounds", "--quick", "--no-progress", "--jobs", "2", "--out", out]
        ok &= _command(args, "cvfl reproduce bounds --quick --jobs 2", REPRODUCE_TARGET)
    return 0 if ok else 1  # the per-step targets are reported (MISS), as in the other benches


def _command(args: list[str], name: str, target: float) -> bool:
    """Run ``cvfl args`` in a fresh process, print its wall time against ``target``."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "cvfl_sim.commands.cli", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    ok = done.returncode == 0 and wall <= target
    print(f"{name}: {wall:.1f} s (target <= {target:.0f} s) {'ok' if ok else 'MISS'}")
    if done.returncode != 0:
        print(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    return ok


if __name__ == "__main__":
    sys.exit(main())
