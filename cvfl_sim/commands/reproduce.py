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
import textwrap
import time
from typing import Any

from ._common import check_output_dir
from ._run_args import add_data_arguments, source_from_args

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
    add_data_arguments(p, default=None)
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
    names = list(EXPERIMENT_NAMES) if args.name == "all" else [args.name]
    data = _data_options(args, names)
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
            **data,
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


_STUDY_NAMES = ("bounds", "schedules")
_LOADER_OPTIONS = ("parties", "label_column")


def _data_options(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """The data set options of the experiments (``dataset`` or ``data_dir``), checked first.

    ``--dataset``: the sweep experiments run on that data set alone (``bounds`` and
    ``schedules`` keep their own plans on built-in data, so they refuse it). ``--data-dir``:
    every built-in stand-in whose paper data set is found there is replaced by it; the
    replacements are listed on stderr and the data sets read (and checked) before any run.
    """
    from ..vfl.data import PAPER_COUNTERPART

    if args.dataset is not None:
        studies = [n for n in names if n in _STUDY_NAMES]
        if studies:
            raise ValueError(
                f"{' and '.join(studies)} run their own plans on built-in data sets and take no "
                "--dataset; check a bound on your data with: cvfl bound --dataset ..."
            )
        source = source_from_args(args)
        print(f"data: {source.label} ({source.kind}) for every run", file=sys.stderr)
        return {"dataset": source}
    given = [o for o in _LOADER_OPTIONS if getattr(args, o) is not None]
    given += [
        o for o, d in (("x_key", "X"), ("y_key", "y"), ("split_axis", -1)) if getattr(args, o) != d
    ]
    if given:
        flags = ", ".join("--" + o.replace("_", "-") for o in given)
        raise ValueError(f"{flags} need --dataset (a .csv or .npz of yours)")
    if args.data_dir is None:
        return {}
    if not os.path.isdir(args.data_dir):
        raise FileNotFoundError(f"--data-dir {args.data_dir!r} is not a folder")
    from .. import experiments
    from ..experiments.specs import Options, cached_dataset

    opt = Options(data_dir=args.data_dir, quick=args.quick, seeds=args.seeds)
    used = {
        (s.dataset, s.source): None
        for n in names
        if n not in _STUDY_NAMES
        for s in experiments.sweep_specs(n, opt)
        if s.source is not None
    }
    if not used:
        raise ValueError(
            f"--data-dir {args.data_dir!r} holds none of the paper's data sets that "
            f"{' and '.join(names)} use{'s' if len(names) == 1 else ''}: looked for the CIFAR-10 "
            "binary batches, ModelNet10 class folders and MIMIC-III train/test matrices there "
            "and in its cifar-10-batches-bin, modelnet10 and mimic3 folders"
        )
    stand_in = {paper: s for s, paper in PAPER_COUNTERPART.items()}
    for name, source in used:
        print(f"data: {name} from {args.data_dir} in place of {stand_in[name]}", file=sys.stderr)
        cached_dataset(name, source)  # read and checked before any run; in-process runs reuse it
    if any(n in _STUDY_NAMES for n in names):
        print("data: bounds and schedules keep their built-in data sets", file=sys.stderr)
    return {"data_dir": args.data_dir}


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
        from cvfl_theory import table

        width = table.TEXT_WIDTH
        write(
            line if width is None else textwrap.fill(line, width, subsequent_indent="    "),
            sys.stdout,
        )

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
