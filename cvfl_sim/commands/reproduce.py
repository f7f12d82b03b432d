"""``cvfl reproduce NAME``: the paper's experiments on offline stand-in data (THEORY C7, C8)."""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

__all__ = ["register", "run"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``reproduce`` subcommand."""
    from ..experiments import EXPERIMENTS

    p = subparsers.add_parser(
        "reproduce",
        help="reproduce a C-VFL experiment of the paper (compressors, local-steps, parties, "
        "curves)",
        description="Run one of the paper's experiments on offline data: results folder with "
        "CSV, markdown table and PNG plots. Finished runs are kept (one file each), so an "
        "interrupted sweep resumes where it stopped.",
    )
    p.add_argument("name", choices=[*EXPERIMENTS, "all"], help="experiment to run")
    p.add_argument("--quick", action="store_true", help="CI-sized runs (fewer seeds and epochs)")
    p.add_argument("--out", default="results", help="results root folder (default: results)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per cell (default 5; 2 quick)")
    p.add_argument("--force", action="store_true", help="recompute finished runs")
    p.add_argument(
        "--target-fraction",
        type=float,
        default=0.95,
        help="target = this × mean max metric of the reference (default 0.95)",
    )
    p.add_argument("--no-progress", action="store_true", help="no per-run progress lines")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the requested experiment(s); print where the results are. Returns an exit code."""
    from ..experiments import EXPERIMENTS, run_experiment

    if args.seeds is not None and args.seeds < 1:
        print(f"error: --seeds must be >= 1, got {args.seeds}", file=sys.stderr)
        return 2
    if not 0 < args.target_fraction <= 1:
        print(
            f"error: --target-fraction must be in (0, 1], got {args.target_fraction}",
            file=sys.stderr,
        )
        return 2
    names = list(EXPERIMENTS) if args.name == "all" else [args.name]
    for name in names:
        tick = time.perf_counter()
        print(f"== cvfl reproduce {name}{' --quick' if args.quick else ''}", file=sys.stderr)
        out = run_experiment(
            name,
            out=args.out,
            quick=args.quick,
            seeds=args.seeds,
            force=args.force,
            target_fraction=args.target_fraction,
            progress=not args.no_progress,
        )
        print(f"{name}: results in {out['folder']} ({time.perf_counter() - tick:.1f}s)")
        head = out.get("headline")
        if head:
            for r in head["per_compressor"]:
                red = r["bit_reduction"]
                red_s = (
                    f"target reached by only {r['b2_reached']} seeds"
                    if math.isinf(red)
                    else f"{100 * red:.1f}% fewer bits"
                )
                print(
                    f"  headline {head['dataset']} {r['compressor']:<8} b=2 vs b=32: {red_s}; "
                    f"max metric {r['b2_max_metric']} vs {r['b32_max_metric']} -> "
                    f"{'holds' if r['holds'] else 'does not hold'}"
                )
            good = [r["compressor"] for r in head["per_compressor"] if r["holds"]]
            bad = [r["compressor"] for r in head["per_compressor"] if not r["holds"]]
            print(
                f"  headline claim holds for: {', '.join(good) or 'none'}; "
                f"does NOT hold for: {', '.join(bad) or 'none'}"
            )
    return 0
