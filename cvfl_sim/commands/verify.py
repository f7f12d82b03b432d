"""``cvfl verify [X.npy]``: closed forms vs simulation, then the proofs checks.

Without a file the suite runs on its built-in data sets; with ``X.npy`` the same encoders run on
the researcher's ``(n, d)`` matrix (the proofs checks, which do not depend on it, are then
skipped unless ``--checks`` names some). A progress bar goes to stderr (a widget in Jupyter).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import as_completed
from typing import Any

from ._common import check_output_file


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``verify`` subcommand."""
    p = subparsers.add_parser(
        "verify",
        help="check every closed form against simulation and run the proofs checks",
        description="Run verify() for each encoder on the default data sets (Gaussian, "
        "heavy-tailed, scikit-learn digits and breast-cancer) or on your matrix X.npy, then every "
        "proofs check. Exits 1 if any check fails.",
    )
    p.add_argument(
        "data",
        nargs="?",
        default=None,
        metavar="X.npy",
        help="your (n, d) matrix in a .npy file: the encoders' closed forms are checked on it",
    )
    p.add_argument("--trials", type=int, default=1000, help="Monte Carlo trials")
    p.add_argument("--seed", type=int, default=0, help="simulation seed")
    p.add_argument("--details", action="store_true", help="print every check of every run")
    p.add_argument(
        "--checks",
        default=None,
        metavar="PREFIX",
        help="only proofs checks whose module starts with PREFIX (e.g. k, c5); default all "
        "(none with X.npy)",
    )
    p.add_argument("--out", default=None, help="save the report (VerifyReport.load reads it)")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes (default: every core; 1: all in this process); the results "
        "are the same whatever the number",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document on stdout (suite runs, proofs checks, verdict) instead of "
        'the tables; non-finite numbers are strings such as "inf"',
    )
    p.set_defaults(func=run)


_SLOW_FIRST = {
    name: rank
    for rank, name in enumerate(
        [
            "c4_7_certificate",
            "c4_1_lemma1_measured",
            "c4_3_rate_slope",
            "c4_4_diminishing",
            "c4_5_tight_term",
            "c4_8_sampled_lemma1",
            "c4_9_drift",
            "k3_2_low_communication",
            "c4_6_pep",
        ]
    )
}
"""The proofs checks that train models or solve SDPs, longest first (as measured): started first
so that the workers end together. The order changes the wall time only, not the results."""

_ONE_WORKER = (
    "c4_1_lemma1_measured",
    "c4_5_tight_term",
    "c4_5_tight_points",
    "c4_8_sampled_lemma1",
)
"""Checks run one after the other in one worker: each calls :mod:`torch.func`, whose first
transform imports ``torch._dynamo`` (about 1.5 s of CPU); one worker pays for it, not two."""


def _in_turn(tasks: list[tuple[Any, ...]], trials: int) -> list[tuple[Any, ...]]:
    """Run ``tasks`` one after the other (in one worker) and return their results."""
    from ..experiments.verify_suite import run_task

    return [run_task(task, trials) for task in tasks]


def _wrapped(text: str, indent: int) -> str:
    """``text`` wrapped at the table width (``--wide``: not at all), continuation indented."""
    from cvfl_theory import table

    width = table.TEXT_WIDTH
    if width is None:
        return text
    return textwrap.fill(
        text,
        width,
        initial_indent=" " * indent,
        subsequent_indent=" " * (indent + (2 if indent else 8)),
    )


def _results(
    groups: list[list[tuple[Any, ...]]], trials: int, jobs: int
) -> Iterator[tuple[Any, ...]]:
    """The results of every task as they finish: in this process, or on ``jobs`` workers.

    The tasks of one group run in turn on one worker.
    """
    if jobs <= 1:
        for group in groups:
            yield from _in_turn(group, trials)
        return
    from ..experiments.sweep import worker_pool

    pool = worker_pool(jobs, threads=1)  # one native thread each: the work is many small ops
    futures = [pool.submit(_in_turn, group, trials) for group in groups]
    try:
        for future in as_completed(futures):
            yield from future.result()  # a worker's error reaches the user with its cause
    finally:
        for future in futures:
            future.cancel()


def run(args: argparse.Namespace) -> int:
    """Run the suite and the proofs checks; return 0 if everything passed."""
    if args.trials < 2:
        raise ValueError(f"--trials must be >= 2, got {args.trials}")
    from cvfl_theory.store import result_path

    if args.out is not None:
        check_output_file(result_path(args.out), "--out")
    datasets = None
    if args.data is not None:
        import numpy as np

        from ..vfl.files import read_matrix

        X = read_matrix(args.data)
        if not np.isfinite(X).all():
            raise ValueError(f"{args.data!r}: X must be finite")
        if X.dtype.kind != "f":
            X = X.astype(np.float64)
        datasets = {f"{args.data} {X.shape[0]}x{X.shape[1]} {X.dtype}": X}
    from proofs_checks import check_names

    from ..experiments.verify_suite import VerifyReport, suite_runs, summary_tables
    from ..vfl.progress import progress_bar
    from ..vfl.threads import check_threads

    if args.jobs is not None:
        check_threads(args.jobs, "--jobs")
    jobs = (os.cpu_count() or 1) if args.jobs is None else args.jobs
    prefix = args.checks if args.checks is not None else ("" if args.data is None else None)
    checks = [] if prefix is None else [n for n in check_names() if n.startswith(prefix)]
    if prefix and not checks:
        labels = ", ".join(dict.fromkeys(n.split("_")[0] for n in check_names()))
        raise ValueError(f"--checks {prefix!r} matches no proofs check (labels: {labels})")
    runs = suite_runs(args.seed, datasets)
    # the longest checks first, then the others, then the suite: the workers finish together
    order = sorted(range(len(checks)), key=lambda i: _SLOW_FIRST.get(checks[i], len(_SLOW_FIRST)))
    together: list[tuple[Any, ...]] = [
        ("check", i, checks[i]) for i in order if checks[i] in _ONE_WORKER
    ]
    groups: list[list[tuple[Any, ...]]] = [together] if together else []
    groups += [[("check", i, checks[i])] for i in order if checks[i] not in _ONE_WORKER]
    groups += [[("run", i, *run)] for i, run in enumerate(runs)]
    tasks = [task for group in groups for task in group]
    # With --json, stdout carries the JSON document only; the text report goes to stderr.
    out = sys.stderr if args.json else sys.stdout
    t0 = time.perf_counter()
    report = VerifyReport(trials=args.trials, seed=args.seed, data=args.data or "built-in")
    done: dict[tuple[str, int], tuple[Any, ...]] = {}
    shown = False if args.no_progress else None
    with progress_bar(len(tasks), shown, "cvfl verify", unit="check") as bar:
        for result in _results(groups, args.trials, min(jobs, len(groups))):
            done[result[0], result[1]] = result
            bar.update(1)

        def say(text: str = "") -> None:
            bar.write(text, out)

        for i in range(len(runs)):
            _, _, name, res = done["run", i]
            report.suite.append((name, res))
            if args.details:
                say(f"{res}\n")
        for table in summary_tables(report.suite):
            say(f"{table}\n")
        if checks:
            say("claims of the theory pages (proofs_checks): symbolic derivation + numeric pair")
        for i in range(len(checks)):
            _, _, r, printed = done["check", i]
            report.checks.append(r)
            say(_wrapped(r.row(), 0))
            notes = [*printed.splitlines(), *([f"note: {r.note}"] if r.note else [])]
            for line in notes:
                say(_wrapped(line.strip(), 8))
    seconds = time.perf_counter() - t0
    if args.out is not None:
        print(f"saved {report.save(args.out)}", file=out)
    failed = report.failures
    total = len(report.suite) + len(report.checks)
    if args.json:
        from cvfl_theory._export import json_safe

        doc = {
            "trials": args.trials,
            "seed": args.seed,
            "data": report.data,
            "checks_prefix": prefix,
            "suite": report.to_dict()["suite"],
            "proofs_checks": report.to_dict()["proofs_checks"],
            "passed": total - len(failed),
            "failed": len(failed),
            "failures": failed,
            "seconds": seconds,
        }
        print(json.dumps(json_safe(doc), indent=1))
        return 1 if failed else 0
    if prefix is None:
        print(
            "proofs checks skipped (they do not depend on X; add --checks '' to run them)", file=out
        )
    print(f"\n{total - len(failed)} passed, {len(failed)} failed ({seconds:.1f} s)", file=out)
    for f in failed:
        print(f"FAILED: {f}", file=out)
    return 1 if failed else 0
