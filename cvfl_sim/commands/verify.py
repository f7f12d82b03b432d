"""``cvfl verify``: closed forms vs simulation over the default suite, then the proofs checks."""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from typing import Any


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
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document on stdout (suite runs, proofs checks, verdict) instead of "
        'the tables; non-finite numbers are strings such as "inf"',
    )
    p.set_defaults(func=run)


def _check_dict(r: Any) -> dict[str, Any]:
    """A proofs check's result as JSON-able values."""
    return {
        "label": r.label,
        "claim": r.claim,
        "method": r.method,
        "symbolic": r.symbolic,
        "empirical": r.empirical,
        "theoretical": r.theoretical,
        "tolerance": r.tolerance,
        "relation": r.relation,
        "note": r.note,
        "passed": r.passed,
        "comparisons": [
            {
                "name": c.name,
                "empirical": c.empirical,
                "theoretical": c.theoretical,
                "tolerance": c.tolerance,
                "relation": c.relation,
                "ok": c.ok,
            }
            for c in r.comparisons
        ],
    }


def run(args: argparse.Namespace) -> int:
    """Run the suite and the proofs checks; return 0 if everything passed."""
    if args.trials < 2:
        raise ValueError(f"--trials must be >= 2, got {args.trials}")
    from cvfl_theory._export import json_safe
    from proofs_checks import all_checks

    from ..experiments.verify_suite import run_suite, summary_table

    # With --json, stdout carries the JSON document only; the text report goes to stderr.
    say = functools.partial(print, file=sys.stderr if args.json else sys.stdout)
    t0 = time.perf_counter()
    results = []
    for name, res in run_suite(trials=args.trials, seed=args.seed):
        results.append((name, res))
        if args.details:
            say(res, end="\n\n")
    say(summary_table(results))
    say()
    say("claims of the theory pages (proofs_checks): symbolic derivation + numeric pair")
    failed = [f"{n}: {r.encoder}" for n, r in results if not r.passed]
    checks = []
    for name, fn in all_checks():
        if not name.startswith(args.checks):
            continue
        r = fn()
        checks.append(r)
        say(r.row())
        if r.note:
            say(f"{'':8}note: {r.note}")
        if not r.passed:
            failed.append(r.label)
    total = len(results) + len(checks)
    seconds = time.perf_counter() - t0
    if args.json:
        doc = {
            "trials": args.trials,
            "seed": args.seed,
            "checks_prefix": args.checks,
            "suite": [dict(data=name, **res.to_dict()) for name, res in results],
            "proofs_checks": [_check_dict(r) for r in checks],
            "passed": total - len(failed),
            "failed": len(failed),
            "failures": failed,
            "seconds": seconds,
        }
        print(json.dumps(json_safe(doc), indent=1))
        return 1 if failed else 0
    say(f"\n{total - len(failed)} passed, {len(failed)} failed ({seconds:.1f} s)")
    for f in failed:
        say(f"FAILED: {f}")
    return 1 if failed else 0
