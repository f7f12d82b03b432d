"""``cvfl compare``: exact vs Monte Carlo vs published compression error for each C5 compressor."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``compare`` subcommand."""
    p = subparsers.add_parser(
        "compare",
        help="compare each compressor's exact error with the paper's table (THEORY C5)",
        description="For a random (B, P) embedding, print compare_with_published for the scalar "
        "quantizer, the hexagonal lattice quantizer and top-k at the given bits: exact error, "
        "Monte Carlo error with its standard error, the published bound and their ratio.",
    )
    p.add_argument("--bits", type=int, default=2, help="bits per component (default 2)")
    p.add_argument("--batch", type=int, default=32, help="rows B (default 32)")
    p.add_argument("--width", type=int, default=64, help="embedding width P (default 64)")
    p.add_argument("--trials", type=int, default=200, help="Monte Carlo trials (default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
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
        raise SystemExit("cvfl compare: --batch and --width must be >= 1")
    if args.trials < 2:
        raise SystemExit(f"cvfl compare: --trials must be >= 2, got {args.trials}")
    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1.0, 1.0, size=(args.batch, args.width))
    try:
        compressors = [
            ScalarQuantizer(args.bits, range=(-1.0, 1.0)),
            HexLatticeQuantizer(args.bits, range=(-1.0, 1.0), dither=args.bits > 1),
            TopK(bits=args.bits),
        ]
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"cvfl compare: {exc}") from None
    print(f"uniform(-1, 1) embedding, B={args.batch}, P={args.width}, b={args.bits}\n")
    for comp in compressors:
        print(compare_with_published(comp, x, trials=args.trials, rng=rng))
        print()
    return 0
