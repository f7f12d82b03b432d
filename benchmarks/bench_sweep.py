"""Sweeps on every core (cvfl_sim.experiments.sweep): a whole command's cold start, ``--jobs 2`` ÷ serial.

1. ``cvfl reproduce parties --quick --seeds 1`` (8 quick runs: digits-views with 4 and 12
   parties, lattice quantization at ``b = 2, 3, 4, 32``) into a fresh folder, each time in a
   fresh process, as a user runs it: the wall time includes starting Python, importing torch,
   building the data sets, starting the worker processes, and writing the tables and plots.
   ``--jobs 2`` and ``--jobs 1`` alternate (1, 2, 1, 2, ...), so both see the same load on a
   shared machine; the ratio is that of the medians of ``REPEATS`` each. Target <= 0.55.
2. ``cvfl reproduce compressors --quick --jobs 2`` wall time into a fresh folder, as a user runs
   it (66 runs). Target <= 4 min on 2 cores. Skipped with ``--no-reproduce``.

On a machine shared with other work, the ratio also measures how many cores the other work
leaves: with one other busy process on 2 cores, two processes of ours get ~2/3 of a core each
against a whole core for the serial run, so the best possible ratio is then ~0.75, not 0.5. The
load average printed before and after says how busy the machine was. The CPU seconds of each
command (its own and its workers', ``RUSAGE_CHILDREN``) depend much less on the load: their
difference is what the parallel run adds (starting the workers, their imports).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from _timing import verdict

RATIO_TARGET = 0.55
REPRODUCE_TARGET = 240.0
REPEATS = 3
SWEEP = ["reproduce", "parties", "--quick", "--seeds", "1", "--no-progress"]
"""The 8-run command of part 1 (``--jobs`` and ``--out`` are added)."""

CVFL = os.path.join(os.path.dirname(sys.executable), "cvfl")


def _cpu() -> float:
    """CPU seconds of the finished child processes (and of the workers they reaped)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cli_seconds(args: list[str]) -> tuple[float, float]:
    """Wall and CPU time of ``cvfl *args --out <fresh folder>`` in a fresh process.

    Raises on failure.
    """
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as out:
        cpu0, t0 = _cpu(), time.perf_counter()
        proc = subprocess.run(
            [CVFL, *args, "--out", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
        if proc.returncode != 0:
            raise RuntimeError(f"cvfl {' '.join(args)} failed: {proc.stderr.decode()[-2000:]}")
        return seconds, cpu


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


def main() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores, load average {_load()} at the start (a shared machine skews the ratio)")
    serial: list[float] = []
    jobs2: list[float] = []
    cpu1: list[float] = []
    cpu2: list[float] = []
    for _ in range(REPEATS):  # interleaved: both see the same load
        for walls, cpus, jobs in ((serial, cpu1, "1"), (jobs2, cpu2, "2")):
            wall, cpu = _cli_seconds([*SWEEP, "--jobs", jobs])
            walls.append(wall)
            cpus.append(cpu)
    s, p = statistics.median(serial), statistics.median(jobs2)
    c1, c2 = statistics.median(cpu1), statistics.median(cpu2)
    ratio = p / s
    print(f"cvfl {' '.join(SWEEP)} (8 quick runs), fresh process each, cold start included:")
    print(f"  --jobs 1: {' '.join(f'{t:.1f}' for t in serial)} s; median {s:.1f} s")
    print(f"  --jobs 2: {' '.join(f'{t:.1f}' for t in jobs2)} s; median {p:.1f} s")
    print(
        f"  CPU seconds (median): --jobs 1 {c1:.1f}, --jobs 2 {c2:.1f} (this process and its "
        f"workers): the parallel run adds {c2 - c1:.1f} s"
    )
    print(
        f"  ratio of medians {ratio:.2f} (target <= {RATIO_TARGET}) {verdict(ratio, RATIO_TARGET)}"
        f"; load average {_load()} at the end"
    )
    if "--no-reproduce" in sys.argv[1:]:
        print("cvfl reproduce compressors --quick: skipped (--no-reproduce)")
        return 0
    seconds, _ = _cli_seconds(["reproduce", "compressors", "--quick", "--jobs", "2"])
    print(
        f"cvfl reproduce compressors --quick --jobs 2: {seconds:.0f} s wall "
        f"(target <= {REPRODUCE_TARGET:.0f} s on 2 cores) {verdict(seconds, REPRODUCE_TARGET)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
