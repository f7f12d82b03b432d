"""``cvfl compare``: exact vs Monte Carlo vs published compression error for each C5 compressor.

On a random uniform embedding or the researcher's own (``--embeddings H.npy``), at one bit
width or a range (``--bits 1-8``): :func:`cvfl_theory.compressors.compare_bits`.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from ._common import check_output_file


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``compare`` subcommand."""
    p = subparsers.add_parser(
        "compare",
        help="compare each compressor's exact error with the paper's table (C5)",
        description="For an embedding (random uniform (B, P), or yours from a .npy file), run "
        "compare_with_published for the scalar quantizer, the hexagonal lattice quantizer and "
        "top-k at each bit width: exact error, Monte Carlo error with its standard error, the "
        "published bound and their ratio. A compressor that cannot work at a width (the "
        "dithered lattice needs b >= 2) is reported as not available there.",
    )
    p.add_argument(
        "--bits",
        default="2",
        help="bits per component: a width, a range A-B or a list A,B, e.g. 1-8 (default: 2)",
    )
    p.add_argument(
        "--embeddings",
        default=None,
        metavar="H.npy",
        help="your embedding matrix (B, P) in a .npy file; the quantizers' range is its "
        "(min, max) (default: random uniform(-1, 1) of --batch x --width)",
    )
    p.add_argument("--batch", type=int, default=32, help="rows B of the random embedding")
    p.add_argument("--width", type=int, default=64, help="embedding width P of the random one")
    p.add_argument("--trials", type=int, default=200, help="Monte Carlo trials")
    p.add_argument("--seed", type=int, default=0, help="seed")
    p.add_argument("--plot", default=None, metavar="PATH.png", help="save the error-vs-bits plot")
    p.add_argument(
        "--out", default=None, help="save the result file (BitsSweep.load reads it; .json added)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document on stdout: the embedding's description, one record per "
        "compressor and width, and those not available; notes go to stderr",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the comparison; return 0."""
    import numpy as np

    from cvfl_theory.compressors import compare_bits
    from cvfl_theory.compressors.sweep import KINDS, parse_bits
    from cvfl_theory.store import result_path

    try:
        bits = parse_bits(args.bits)
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    if not 2 <= args.trials <= 10**7:
        raise ValueError(f"--trials must be >= 2 (and at most 10^7), got {args.trials}")
    if args.embeddings is None and (args.batch < 1 or args.width < 1):
        raise ValueError(f"--batch and --width must be >= 1, got {args.batch} and {args.width}")
    for opt, path in (("--plot", args.plot), ("--out", args.out)):
        if path is not None:
            check_output_file(path if opt == "--plot" else result_path(path), opt)
    if args.embeddings is not None:
        from ..vfl.files import read_matrix

        x = read_matrix(args.embeddings, "H").astype(np.float64)
        if not np.isfinite(x).all():
            raise ValueError(f"{args.embeddings!r}: the embeddings must be finite")
        described = {"file": args.embeddings, "shape": list(x.shape)}
        head = f"{args.embeddings}: embedding {x.shape[0]}x{x.shape[1]}"
    else:
        x = np.random.default_rng(args.seed).uniform(-1.0, 1.0, size=(args.batch, args.width))
        described = {"distribution": "uniform(-1, 1)", "batch": args.batch, "width": args.width}
        head = f"uniform(-1, 1) embedding, B={args.batch}, P={args.width}"
    known_range = None if args.embeddings is not None else (-1.0, 1.0)
    sweep = compare_bits(
        x, bits, range=known_range, trials=args.trials, rng=np.random.default_rng(args.seed)
    )
    notes = [
        f"{KINDS[k]}: not available at b = {b} ({why}); no comparison"
        for (k, b), why in sweep.unavailable.items()
    ]
    if not sweep.reports:
        raise ValueError(
            f"--bits {args.bits}: no compressor works at this rate; " + "; ".join(notes)
        )
    if args.out:
        path = sweep.save(args.out)
        print(f"saved {path}", file=sys.stderr if args.json else sys.stdout)
    if args.plot:
        sweep.plot().savefig(args.plot, dpi=120)
        print(f"saved {args.plot}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        import json

        from cvfl_theory._export import json_safe

        for line in notes:
            print(line, file=sys.stderr)
        doc = {
            "embedding": {**described, "seed": args.seed},
            "range": list(sweep.range),
            "bits": list(bits),
            "trials": args.trials,
            "reports": [
                {"kind": k, "bits": b, **r.to_dict()} for (k, b), r in sweep.reports.items()
            ],
            "unavailable": notes,
        }
        print(json.dumps(json_safe(doc), indent=1))
        return 0
    if len(bits) == 1:
        print(f"{head}, b={bits[0]}\n")
        for report in sweep.reports.values():
            print(report)
            print()
        for line in notes:
            print(textwrap.fill(line, 100, subsequent_indent="  "))
        return 0
    print(f"{head}\n")
    print(sweep)
    return 0
