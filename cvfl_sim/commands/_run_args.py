"""Command-line options shared by the subcommands that train one C-VFL run.

``train`` and ``bound`` use one definition of the options and of the
:class:`~cvfl_sim.vfl.config.CVFLConfig` they build. Options without an effect are refused: ``--bits``
with no compressor, or a compressor named with ``--compressor`` but no ``--bits``.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = [
    "add_run_arguments",
    "add_data_arguments",
    "source_from_args",
    "config_from_args",
    "compressor_from_args",
]

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
        help="a progress bar on stderr while training, with the last evaluation "
        "(CVFLConfig.progress)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (one is the fastest for these small models)",
    )
    p.set_defaults(default_compressor=compressor, default_bits=bits)


DATASET_HELP = (
    "a built-in data set (digits-quadrants, digits-views-4, digits-views-12, breast-cancer), "
    "one of the paper's read from --data-dir (cifar10-quadrants, modelnet10-views-4, "
    "modelnet10-views-12, mimic3-mortality), or a path to your own .csv or .npz"
)


def add_data_arguments(
    p: argparse.ArgumentParser, *, default: str | None, positional: bool = False
) -> None:
    """Add ``--dataset`` (or a positional ``DATASET`` and ``--dataset``) and its loader's options.

    ``default`` is the data set when none is named (``None``: the command's own choice).
    """
    if positional:
        p.add_argument("dataset", nargs="?", default=None, metavar="DATASET", help=DATASET_HELP)
        p.add_argument(
            "--dataset",
            dest="dataset_flag",
            default=None,
            metavar="DATASET",
            help="the same as DATASET",
        )
    else:
        p.add_argument(
            "--dataset",
            default=default,
            metavar="DATASET",
            help=DATASET_HELP + (f" (default: {default})" if default else ""),
        )
    g = p.add_argument_group(
        "data set options",
        "your own files: CSV (one sample per row, an optional header, one "
        "label column 0..K-1) or NPZ (arrays X, samples first, and y); the features are cut "
        "into --parties contiguous blocks",
    )
    g.add_argument(
        "--parties",
        type=int,
        default=None,
        help="parties to split the features over (.csv/.npz: default 4; breast-cancer, "
        "mimic3-mortality; digits-views: 4 or 12)",
    )
    g.add_argument(
        "--data-dir",
        default=None,
        metavar="PATH",
        help="folder of the paper's data set files (CIFAR-10 binary batches, ModelNet10 12-view "
        "images, MIMIC-III mortality matrices); nothing is downloaded",
    )
    g.add_argument(
        "--label-column",
        default=None,
        metavar="COLUMN",
        help=".csv: the label column, a header name or an index (default: the last)",
    )
    g.add_argument("--x-key", default="X", help=".npz: the features array (default: X)")
    g.add_argument("--y-key", default="y", help=".npz: the labels array (default: y)")
    g.add_argument(
        "--split-axis",
        type=int,
        default=-1,
        help=".npz: the axis of X cut into the parties' blocks (default: the last)",
    )
    p.set_defaults(dataset_default=default)


def source_from_args(args: argparse.Namespace) -> Any:
    """The checked :class:`~cvfl_sim.vfl.sources.DataSource` of the data set options."""
    from ..vfl.sources import DataSource

    name = args.dataset
    flag = getattr(args, "dataset_flag", None)
    if flag is not None:
        if name is not None and name != flag:
            raise ValueError(f"two data sets named: {name!r} and --dataset {flag!r}")
        name = flag
    if name is None:
        name = args.dataset_default
    if name is None:
        raise ValueError(f"name a data set: {DATASET_HELP}")
    return DataSource(
        name=name,
        data_dir=args.data_dir,
        parties=args.parties,
        label_column=args.label_column,
        x_key=args.x_key,
        y_key=args.y_key,
        split_axis=args.split_axis,
    ).check()


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
