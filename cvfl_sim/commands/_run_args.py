"""Command-line options shared by the subcommands that train one C-VFL run.

``train`` and ``bound`` use one definition of the options and of the
:class:`~cvfl_sim.vfl.config.CVFLConfig` they build. Options without an effect are refused: ``--bits``
with no compressor, or a compressor named with ``--compressor`` but no ``--bits``.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_run_arguments", "config_from_args", "compressor_from_args"]

_KINDS = ("none", "scalar", "lattice", "topk")


def add_run_arguments(
    p: argparse.ArgumentParser,
    *,
    Q: int,
    lr: float,
    embedding_size: int,
    compressor: str,
    bits: int = 32,
) -> None:
    """Add the options of one run (``--Q``, ``--epochs`` ... ``--progress``, ``--threads``).

    ``compressor`` and ``bits`` are the subcommand's default compressor and its bits per
    component (``32`` = uncompressed), used when neither ``--compressor`` nor ``--bits`` is given.
    """
    p.add_argument("--Q", type=int, default=Q, help="local steps per round")
    p.add_argument("--epochs", type=int, default=5, help="passes over the training set")
    p.add_argument("--lr", type=float, default=lr, help="step size")
    p.add_argument("--batch-size", type=int, default=64, help="mini-batch size B")
    p.add_argument("--embedding-size", type=int, default=embedding_size, help="P per party")
    p.add_argument(
        "--compressor",
        choices=_KINDS,
        default=None,
        help=f"compressor of the messages; needs --bits (default: {compressor})",
    )
    p.add_argument(
        "--bits",
        type=int,
        default=None,
        help=f"bits per component, needs a compressor; 32 = uncompressed (default: {bits})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the run")
    p.add_argument(
        "--progress",
        action="store_true",
        help="print one line per evaluation to stderr while training (CVFLConfig.progress)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (one is the fastest for these small models)",
    )
    p.set_defaults(default_compressor=compressor, default_bits=bits)


def compressor_from_args(args: argparse.Namespace) -> Any:
    """The compressor of ``--compressor``/``--bits``; ``ValueError`` for an option without effect."""
    from ..vfl.compressors import make_compressor

    kind = args.compressor or args.default_compressor
    if kind == "none" and args.bits is not None:
        raise ValueError(
            f"--bits {args.bits} has no effect without a compressor; add --compressor scalar, "
            "lattice or topk"
        )
    if args.compressor not in (None, "none") and args.bits is None:
        raise ValueError(
            f"--compressor {args.compressor} needs --bits B (bits per component; 32 = uncompressed)"
        )
    if args.bits is not None:
        bits = args.bits
    else:
        bits = args.default_bits if args.compressor is None else 32
    if not 1 <= bits <= 32:
        raise ValueError(f"--bits must be in [1, 32], got {bits}")
    return make_compressor(kind, bits)


def config_from_args(args: argparse.Namespace, **extra: Any) -> Any:
    """The :class:`~cvfl_sim.vfl.config.CVFLConfig` of the parsed options (plus ``extra``)."""
    from ..vfl.config import CVFLConfig

    return CVFLConfig(
        Q=args.Q,
        lr=args.lr,
        epochs=args.epochs,
        batch_size=args.batch_size,
        embedding_size=args.embedding_size,
        compressor=compressor_from_args(args),
        seed=args.seed,
        progress=args.progress,
        **extra,
    )
