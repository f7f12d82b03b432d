"""``cvfl verify``: closed forms vs simulation over the default suite, then the proofs checks."""

from __future__ import annotations

import argparse
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``verify`` subcommand."""
    p = subparsers.add_parser(
        "verify",
        help="check every closed form against simulation and run the proofs checks",
        description="Run verify() for each encoder on the default data sets (Gaussian, "
        "heavy-tailed, scikit-learn digits and breast-cancer), then every proofs check. Exits 1 "
        "if any check fails.",
    )
    p.add_argument("--trials", type=int, default=1000, help="Monte Carlo trials")
    p.add_argument("--seed", type=int, default=0, help="simulation seed")
    p.add_argument("--details", action="store_true", help="print every check of every run")
    p.add_argument(
        "--checks",
        default="",
        metavar="PREFIX",
        help="only proofs checks whose module starts with PREFIX (e.g. k, c5); default all",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the suite and the proofs checks; return 0 if everything passed."""
    if args.trials < 2:
        raise ValueError(f"--trials must be >= 2, got {args.trials}")
    from cvfl_sim.verify_suite import run_suite, summary_table
    from proofs_checks import all_checks

    t0 = time.perf_counter()
    results = []
    for name, res in run_suite(trials=args.trials, seed=args.seed):
        results.append((name, res))
        if args.details:
            print(res, end="\n\n")
    print(summary_table(results))
    print()
    print("THEORY.md claims (proofs_checks): symbolic derivation + numeric pair")
    failed = [f"{n}: {r.encoder}" for n, r in results if not r.passed]
    count = 0
    for name, fn in all_checks():
        if not name.startswith(args.checks):
            continue
        count += 1
        r = fn()
        print(r.row())
        if r.note:
            print(f"{'':8}note: {r.note}")
        if not r.passed:
            failed.append(r.label)
    total = len(results) + count
    print(
        f"\n{total - len(failed)} passed, {len(failed)} failed ({time.perf_counter() - t0:.1f} s)"
    )
    for f in failed:
        print(f"FAILED: {f}")
    return 1 if failed else 0
