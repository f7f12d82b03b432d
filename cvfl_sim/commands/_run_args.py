"""Command-line options shared by the subcommands that train one C-VFL run.

``train`` and ``bound`` use one definition of the options and of the
:class:`~cvfl_sim.algorithm.CVFLConfig` they build.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_run_arguments", "config_from_args"]


def add_run_arguments(
    p: argparse.ArgumentParser, *, Q: int, lr: float, embedding_size: int, compressor: str
) -> None:
    """Add ``--Q --epochs --lr --batch-size --embedding-size --compressor --bits --seed``."""
    p.add_argument("--Q", type=int, default=Q, help=f"local steps per round (default {Q})")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--embedding-size", type=int, default=embedding_size)
    p.add_argument(
        "--compressor", choices=["none", "scalar", "lattice", "topk"], default=compressor
    )
    p.add_argument("--bits", type=int, default=32, help="bits per component (32 = uncompressed)")
    p.add_argument("--seed", type=int, default=0)


def config_from_args(args: argparse.Namespace, **extra: Any) -> Any:
    """The :class:`~cvfl_sim.algorithm.CVFLConfig` of the parsed options (plus ``extra``)."""
    from ..algorithm import CVFLConfig
    from ..experiments import make_compressor

    comp = make_compressor(args.compressor if args.bits != 32 else "none", args.bits)
    return CVFLConfig(
        Q=args.Q,
        lr=args.lr,
        epochs=args.epochs,
        batch_size=args.batch_size,
        embedding_size=args.embedding_size,
        compressor=comp,
        seed=args.seed,
        **extra,
    )
