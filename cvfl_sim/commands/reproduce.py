"""``cvfl reproduce NAME``: the paper's experiments on offline stand-in data (C7, C8).

The training runs of every requested experiment are listed first and computed as one sweep
(:func:`cvfl_sim.experiments.run_experiments`, :mod:`cvfl_sim.experiments.sweep`): in this process, on
``--jobs`` local worker processes, or on a Dask cluster, each run with ``--threads`` torch
intra-op threads, under one progress bar with an ETA for the whole command; the experiments then
build their tables and plots from them.

Start-up: the worker processes start first (they import torch meanwhile); this process builds
the data sets and hands out the first runs before it imports torch (its own first run does).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

from ._common import check_output_dir

__all__ = ["register", "run", "EXPERIMENT_NAMES"]

EXPERIMENT_NAMES = ("compressors", "local-steps", "parties", "curves", "bounds", "schedules")
"""The keys of :data:`cvfl_sim.experiments.EXPERIMENTS` (a test keeps them equal), listed here so
that registering the subcommand does not import the experiments (and torch)."""

BACKEND_NAMES = ("loky", "dask")
"""The keys of :data:`cvfl_sim.experiments.sweep.BACKENDS` (a test keeps them equal)."""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``reproduce`` subcommand."""
    p = subparsers.add_parser(
        "reproduce",
        help="reproduce a C-VFL experiment of the paper (compressors, local-steps, parties, "
        "curves) or a convergence check (bounds, schedules)",
        description="Run one of the paper's experiments on offline data: results folder with "
        "CSV, markdown table and PNG plots. Finished runs are kept (one file each), so an "
        "interrupted sweep resumes where it stopped.",
    )
    p.add_argument("name", choices=[*EXPERIMENT_NAMES, "all"], help="experiment to run")
    p.add_argument("--quick", action="store_true", help="CI-sized runs (fewer seeds and epochs)")
    p.add_argument("--out", default="results", help="results root folder")
    p.add_argument(
        "--seeds", type=int, default=None, help="seeds per cell (default: 5; 2 with --quick)"
    )
    p.add_argument("--force", action="store_true", help="recompute finished runs")
    p.add_argument(
        "--target-fraction",
        type=float,
        default=0.95,
        help="target = this × mean max metric of the reference",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs computed at once in local worker processes (joblib/loky)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads per run (one is the fastest for these small models)",
    )
    p.add_argument(
        "--backend",
        choices=BACKEND_NAMES,
        default="loky",
        help="loky: local processes (--jobs); dask: the Dask cluster at --scheduler "
        "(pip install 'cvfl[cluster]')",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="Dask scheduler address for --backend dask, e.g. tcp://10.0.0.5:8786",
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--progress",
        action="store_true",
        help="show the progress bar even when stderr is not a terminal",
    )
    shown.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    p.set_defaults(func=run, on_interrupt=interrupted)
    return p


def interrupted(args: argparse.Namespace) -> str:
    """What Ctrl-C leaves behind, and how to resume."""
    runs = os.path.join(args.out, "runs")
    return f"every finished run is kept in {runs!r}; rerun the same command to resume from them"


def run(args: argparse.Namespace) -> int:
    """Run the requested experiment(s); print where the results are. Returns an exit code."""
    if args.seeds is not None and args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    if not 0 < args.target_fraction <= 1:
        raise ValueError(f"--target-fraction must be in (0, 1], got {args.target_fraction}")
    check_output_dir(args.out, "--out")
    from ..experiments.sweep import Executor, start_workers
    from ..vfl.progress import progress_bar
    from ..vfl.threads import check_threads, torch_threads

    check_threads(args.jobs, "--jobs")
    check_threads(args.threads, "--threads")
    try:
        executor = Executor(
            jobs=args.jobs, backend=args.backend, scheduler=args.scheduler, threads=args.threads
        )
    except ImportError as exc:  # the cluster extra is missing: a bad option here, one line
        raise ValueError(str(exc)) from None
    start_workers(executor, "cvfl_sim.vfl.train")  # they import torch while this process starts
    _import_plotting()
    from .. import experiments

    names = list(experiments.EXPERIMENTS) if args.name == "all" else [args.name]
    studies = [name for name in names if name in experiments.STUDIES]  # bounds, schedules
    progress = False if args.no_progress else (True if args.progress else None)
    with progress_bar(len(studies), progress, f"cvfl reproduce {args.name}") as bar:
        steps = experiments.run_experiments(  # the first step computes every run: one sweep
            names,
            bar=bar,
            out=args.out,
            quick=args.quick,
            seeds=args.seeds,
            target_fraction=args.target_fraction,
            executor=executor,
            force=args.force,
            progress=bar.disable and not args.no_progress,  # own lines only without the bar
        )
        for name, build in steps:
            tick = time.perf_counter()
            bar.write(f"== cvfl reproduce {name}{' --quick' if args.quick else ''}", sys.stderr)
            if name in studies:  # they train in this process
                with torch_threads(args.threads):
                    out = build()
                bar.update(1)
            else:  # tables and plots from the sweep's runs: no torch needed
                out = build()
            _report(name, out, time.perf_counter() - tick, bar.write)
    return 0


def _import_plotting() -> None:
    """Import what the experiments' PNG plots need (a third of a second) now, not after the runs.

    With ``--jobs 2`` this process does it while its worker imports torch (the other core), so
    it costs the command half as much as when the plots are drawn after the last run.
    """
    import matplotlib.figure  # noqa: F401
    from matplotlib.backends import backend_agg  # noqa: F401


def _report(name: str, out: dict[str, Any], seconds: float, write: Any) -> None:
    """Print where the results of ``name`` are, and the headline claim if it has one.

    ``write(line, file)`` prints above the progress bar (:meth:`tqdm.tqdm.write`).
    """

    def say(line: str) -> None:
        write(line, sys.stdout)

    say(f"{name}: results in {out['folder']} ({seconds:.1f}s)")
    head = out.get("headline")
    if not head:
        return
    for r in head["per_compressor"]:
        red = r["bit_reduction"]
        red_s = (
            f"target reached by only {r['b2_reached']} seeds"
            if math.isinf(red)
            else f"{100 * red:.1f}% fewer bits"
        )
        say(
            f"  headline {head['dataset']} {r['compressor']:<8} b=2 vs b=32: {red_s}; "
            f"max metric {r['b2_max_metric']} vs {r['b32_max_metric']} -> "
            f"{'holds' if r['holds'] else 'does not hold'}"
        )
    good = [r["compressor"] for r in head["per_compressor"] if r["holds"]]
    bad = [r["compressor"] for r in head["per_compressor"] if not r["holds"]]
    say(
        f"  headline claim holds for: {', '.join(good) or 'none'}; "
        f"does NOT hold for: {', '.join(bad) or 'none'}"
    )
