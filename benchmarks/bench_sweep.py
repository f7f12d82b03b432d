"""Sweeps on every core (cvfl_sim.sweep): a whole command's cold start, ``--jobs 2`` ÷ serial.

1. ``cvfl reproduce parties --quick --seeds 1`` (8 quick runs: digits-views with 4 and 12
   parties, lattice quantization at ``b = 2, 3, 4, 32``) into a fresh folder, each time in a
   fresh process, as a user runs it: the wall time includes starting Python, importing torch,
   building the data sets, starting the worker processes, and writing the tables and plots.
   ``--jobs 2`` and ``--jobs 1`` alternate (1, 2, 1, 2, ...), so both see the same load on a
   shared machine; the ratio is that of the medians of ``REPEATS`` each. Target <= 0.6.
2. ``cvfl reproduce compressors --quick --jobs 2`` wall time into a fresh folder, as a user runs
   it (66 runs). Target <= 4 min on 2 cores. Skipped with ``--no-reproduce``.

On a machine shared with other work, the ratio also measures how many cores the other work
leaves: with one other busy process on 2 cores, two processes of ours get ~2/3 of a core each
against a whole core for the serial run, so the best possible ratio is then ~0.75, not 0.5. The
load average printed before and after says how busy the machine was.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from _timing import verdict

RATIO_TARGET = 0.6
REPRODUCE_TARGET = 240.0
REPEATS = 3
SWEEP = ["reproduce", "parties", "--quick", "--seeds", "1", "--no-progress"]
"""The 8-run command of part 1 (``--jobs`` and ``--out`` are added)."""

CVFL = os.path.join(os.path.dirname(sys.executable), "cvfl")


def _cli_seconds(args: list[str]) -> float:
    """Wall time of ``cvfl *args --out <fresh folder>`` in a fresh process; raises on failure."""
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as out:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [CVFL, *args, "--out", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"cvfl {' '.join(args)} failed: {proc.stderr.decode()[-2000:]}")
        return seconds


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


def main() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores, load average {_load()} at the start (a shared machine skews the ratio)")
    serial: list[float] = []
    jobs2: list[float] = []
    for _ in range(REPEATS):  # interleaved: both see the same load
        serial.append(_cli_seconds([*SWEEP, "--jobs", "1"]))
        jobs2.append(_cli_seconds([*SWEEP, "--jobs", "2"]))
    s, p = statistics.median(serial), statistics.median(jobs2)
    ratio = p / s
    print(f"cvfl {' '.join(SWEEP)} (8 quick runs), fresh process each, cold start included:")
    print(f"  --jobs 1: {' '.join(f'{t:.1f}' for t in serial)} s; median {s:.1f} s")
    print(f"  --jobs 2: {' '.join(f'{t:.1f}' for t in jobs2)} s; median {p:.1f} s")
    print(
        f"  ratio of medians {ratio:.2f} (target <= {RATIO_TARGET}) {verdict(ratio, RATIO_TARGET)}"
        f"; load average {_load()} at the end"
    )
    if "--no-reproduce" in sys.argv[1:]:
        print("cvfl reproduce compressors --quick: skipped (--no-reproduce)")
        return 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_reproduce_") as out:
        cmd = [CVFL, "reproduce", "compressors", "--quick", "--jobs", "2", "--out", out]
        code = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    seconds = time.perf_counter() - t0
    status = "" if code == 0 else f" (exit code {code})"
    print(
        f"cvfl reproduce compressors --quick --jobs 2: {seconds:.0f} s wall{status} "
        f"(target <= {REPRODUCE_TARGET:.0f} s on 2 cores) {verdict(seconds, REPRODUCE_TARGET)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
