"""``cvfl bound``: the Theorem 4.2 bound (C4.2, as recovered) beside a real run (THEORY C9)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._run_args import add_run_arguments, config_from_args

__all__ = ["register", "run"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``bound`` subcommand."""
    p = subparsers.add_parser(
        "bound",
        help="estimate the C3 constants on a run and compare the C4.2 bound with it",
        description="Train one C-VFL run with gradient norms recorded every round, estimate the "
        "C3 constants (L, L_m, sigma_m^2, H_m, G_m; empirical maxima at the initial and final "
        "parameters, not global constants) and print Theorem 4.2's terms (constants as "
        "recovered) beside the observed average ||grad F||^2 and the ratio bound/observed.",
    )
    p.add_argument("--dataset", default="breast-cancer", help="built-in data set")
    add_run_arguments(p, Q=1, lr=0.01, embedding_size=4, compressor="scalar")
    p.add_argument(
        "--split",
        choices=["party", "equal", "max"],
        default="party",
        help="parties' errors: each its own (default), the total shared equally, or charged to each",
    )
    p.add_argument("--reading", choices=["literal", "chain"], default="literal")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Train, estimate, compare and print; returns an exit code (2 for bad arguments)."""
    from ..algorithm import train
    from ..bound_check import bound_vs_observed, estimate_constants
    from ..data import load_dataset

    try:
        ds = load_dataset(args.dataset)
        cfg = config_from_args(args, eval_every=1, track_grad_norm=True)
        res = train(ds, cfg)
        consts = estimate_constants(ds, cfg, res, seed=args.seed)
        check = bound_vs_observed(res, consts, split=args.split, reading=args.reading)
    except (ValueError, TypeError) as err:
        print(f"cvfl bound: {err}", file=sys.stderr)
        return 2
    print(consts)
    print()
    print(check)
    return 0
