"""``cvfl compare``: exact vs Monte Carlo vs published compression error for each C5 compressor."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``compare`` subcommand."""
    p = subparsers.add_parser(
        "compare",
        help="compare each compressor's exact error with the paper's table (C5)",
        description="For a random (B, P) embedding, print compare_with_published for the scalar "
        "quantizer, the hexagonal lattice quantizer and top-k at the given bits: exact error, "
        "Monte Carlo error with its standard error, the published bound and their ratio. A "
        "compressor that cannot work at the given bits (the dithered lattice needs b >= 2) is "
        "reported as not available, without a comparison.",
    )
    p.add_argument("--bits", type=int, default=2, help="bits per component")
    p.add_argument("--batch", type=int, default=32, help="rows B")
    p.add_argument("--width", type=int, default=64, help="embedding width P")
    p.add_argument("--trials", type=int, default=200, help="Monte Carlo trials")
    p.add_argument("--seed", type=int, default=0, help="seed")
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document on stdout: the embedding's description, one record per "
        "compressor and the compressors not available; notes go to stderr",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print one report per compressor; return 0."""
    import numpy as np

    from cvfl_theory.compressors import (
        HexLatticeQuantizer,
        ScalarQuantizer,
        TopK,
        compare_with_published,
    )

    if args.batch < 1 or args.width < 1:
        raise ValueError(f"--batch and --width must be >= 1, got {args.batch} and {args.width}")
    if args.trials < 2:
        raise ValueError(f"--trials must be >= 2, got {args.trials}")
    if args.bits < 1:
        raise ValueError(f"--bits must be >= 1, got {args.bits}")
    makers = [
        ("scalar quantizer (C5.1)", lambda: ScalarQuantizer(args.bits, range=(-1.0, 1.0))),
        ("hexagonal lattice (C5.2)", lambda: HexLatticeQuantizer(args.bits, range=(-1.0, 1.0))),
        ("top-k (C5.4)", lambda: TopK(bits=args.bits)),
    ]
    built, unavailable = [], []
    for label, make in makers:
        try:
            built.append(make())
        except ValueError as exc:
            unavailable.append(f"{label}: not available at b = {args.bits} ({exc}); no comparison")
    if not built:
        raise ValueError(
            f"--bits {args.bits}: no compressor works at this rate; " + "; ".join(unavailable)
        )
    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1.0, 1.0, size=(args.batch, args.width))
    reports = [compare_with_published(comp, x, trials=args.trials, rng=rng) for comp in built]
    if args.json:
        import json

        from cvfl_theory._export import json_safe

        for line in unavailable:
            print(line, file=sys.stderr)
        doc = {
            "embedding": {
                "distribution": "uniform(-1, 1)",
                "batch": args.batch,
                "width": args.width,
                "seed": args.seed,
            },
            "bits": args.bits,
            "trials": args.trials,
            "reports": [r.to_dict() for r in reports],
            "unavailable": unavailable,
        }
        print(json.dumps(json_safe(doc), indent=1))
        return 0
    print(f"uniform(-1, 1) embedding, B={args.batch}, P={args.width}, b={args.bits}\n")
    for report in reports:
        print(report)
        print()
    for line in unavailable:
        print(line)
    return 0
