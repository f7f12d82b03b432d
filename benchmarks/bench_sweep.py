"""Sweeps on every core (cvfl_sim.sweep): parallel ÷ serial wall time, and a whole reproduce.

1. A sweep of 8 quick runs (digits-quadrants, 8 epochs, the ``compressors --quick`` settings:
   uncompressed, scalar, lattice and top-k at ``b = 2``, two seeds) with ``Executor(jobs=2)``
   ÷ the same sweep in one process; both with one torch intra-op thread per run, each into a
   fresh folder. Measured serial, parallel on a cold pool (the time includes starting the
   worker processes, as a user's first sweep pays), parallel on the warm pool, serial again; each
   parallel time is divided by the mean serial time. Target <= 0.6.
2. ``cvfl reproduce compressors --quick --jobs 2`` wall time into a fresh folder, as a user runs
   it (66 runs). Target <= 4 min on 2 cores. Skipped with ``--no-reproduce``.

The ratio is measured in one run on the same machine, but the two halves run one after the
other: on a machine shared with other work, load that changes between them moves it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from _timing import verdict

from cvfl_sim.experiments import RunSpec, run_sweep
from cvfl_sim.sweep import Executor

RATIO_TARGET = 0.6
REPRODUCE_TARGET = 240.0


def _specs() -> list[RunSpec]:
    kinds = (("none", 32), ("scalar", 2), ("lattice", 2), ("topk", 2))
    return [RunSpec("digits-quadrants", k, b, 10, s, 8) for k, b in kinds for s in (0, 1)]


def _sweep_seconds(executor: Executor) -> float:
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as out:
        t0 = time.perf_counter()
        run_sweep(_specs(), out, progress=False, executor=executor)
        return time.perf_counter() - t0


def _reproduce_seconds() -> tuple[float, int]:
    cvfl = os.path.join(os.path.dirname(sys.executable), "cvfl")
    with tempfile.TemporaryDirectory(prefix="bench_reproduce_") as out:
        cmd = [cvfl, "reproduce", "compressors", "--quick", "--jobs", "2", "--out", out]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return time.perf_counter() - t0, proc.returncode


def main() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{cores} cores, load average {load:.2f} at the start (a shared machine skews both)")
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)  # a cold pool: no worker started yet
    first = _sweep_seconds(Executor())
    cold = _sweep_seconds(Executor(jobs=2))
    warm = _sweep_seconds(Executor(jobs=2))
    serial = (first + _sweep_seconds(Executor())) / 2
    get_reusable_executor().shutdown(wait=True)
    print(f"sweep of {len(_specs())} quick runs: serial {serial:.1f} s (mean of two)")
    for name, seconds in (("cold pool", cold), ("warm pool", warm)):
        ratio = seconds / serial
        print(
            f"  --jobs 2, {name}: {seconds:.1f} s; ratio {ratio:.2f} (target <= {RATIO_TARGET}) "
            f"{verdict(ratio, RATIO_TARGET)}"
        )
    if "--no-reproduce" in sys.argv[1:]:
        print("cvfl reproduce compressors --quick: skipped (--no-reproduce)")
        return 0
    seconds, code = _reproduce_seconds()
    status = "" if code == 0 else f" (exit code {code})"
    print(
        f"cvfl reproduce compressors --quick --jobs 2: {seconds:.0f} s wall{status} "
        f"(target <= {REPRODUCE_TARGET:.0f} s on 2 cores) {verdict(seconds, REPRODUCE_TARGET)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
