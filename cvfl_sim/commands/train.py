"""``cvfl train DATASET``: one C-VFL run (Algorithm 1, C1) from the command line.

``DATASET`` is a built-in name, one of the paper's data sets read from ``--data-dir``, or a path
to the researcher's own ``.csv`` or ``.npz`` (:class:`~cvfl_sim.vfl.sources.DataSource`).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ._common import check_output_file
from ._run_args import add_data_arguments, add_run_arguments, config_from_args, source_from_args

__all__ = ["register", "run"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``train`` subcommand."""
    p = subparsers.add_parser(
        "train",
        help="train one C-VFL model on a data set (built-in, the paper's, or yours) and print its history",
        description="One C-VFL run: prints one line per evaluation (loss, metric, bits on the "
        "wire, measured compression error) and optionally saves the RunResult (JSON + CSV). "
        "With --checkpoint the training state is saved after every epoch and an interrupted "
        "run resumes when the same command is run again.",
    )
    add_data_arguments(p, default=None, positional=True)
    add_run_arguments(p, Q=10, lr=0.05, embedding_size=16, compressor="none")
    p.add_argument(
        "--model",
        choices=("mlp", "linear", "cnn", "gru"),
        default=None,
        help="party models (default: the data set's own: cnn for the paper's image sets, gru "
        "for mimic3-mortality, mlp otherwise)",
    )
    p.add_argument("--error-feedback", action="store_true", help="EF-VFL error feedback (C9)")
    p.add_argument(
        "--backend",
        choices=("inprocess", "roles", "distributed"),
        default="inprocess",
        help="execution of Algorithm 1 (same results): inprocess = vectorised (default), roles = "
        "parties and server exchanging wire bytes in this process, distributed = one process "
        "per role over torch.distributed (gloo) on this machine",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="torch device of the models and data: cpu (default), cuda or cuda:<i>; needs "
        "--backend inprocess (CVFLConfig.device)",
    )
    p.add_argument(
        "--eval-every", type=int, default=None, help="rounds between evaluations (default: epoch)"
    )
    p.add_argument("--out", default=None, help="save the RunResult to this path (.json)")
    p.add_argument(
        "--checkpoint",
        default=None,
        metavar="PATH",
        help="save the training state here after every epoch; resume from it if it exists",
    )
    p.set_defaults(func=run, on_interrupt=interrupted)
    return p


def _json_path(out: str) -> str:
    """The JSON path :meth:`RunResult.save` writes for ``--out`` (``.json`` appended if missing)."""
    return out if out.endswith(".json") else out + ".json"


def _dims(dims: list[int]) -> str:
    """``[16, 16, 16, 16]`` as ``4 x 16``, else the list (cut after 6 parties)."""
    if len(set(dims)) == 1:
        return f"{len(dims)} x {dims[0]}"
    shown = ", ".join(map(str, dims[:6]))
    return f"[{shown}{', ...' if len(dims) > 6 else ''}]"


def interrupted(args: argparse.Namespace) -> str:
    """What Ctrl-C leaves behind, and how to resume."""
    ck = getattr(args, "checkpoint", None)
    if ck is None:
        return "nothing was saved (add --checkpoint PATH to make a run resumable)"
    if os.path.exists(ck):
        return f"the state after the last finished epoch is in {ck!r}; rerun the same command to resume"
    return f"no epoch had finished, so {ck!r} was not written; rerun the same command to start over"


def run(args: argparse.Namespace) -> int:
    """Train and print; returns an exit code (bad arguments raise ``ValueError``: exit 2)."""
    # every path is checked before the data is loaded or a step is taken
    if args.out is not None:
        check_output_file(args.out, "--out")  # a folder is refused, not turned into folder.json
        check_output_file(_json_path(args.out), "--out")
    if args.checkpoint is not None:
        check_output_file(args.checkpoint, "--checkpoint")
    source = source_from_args(args)
    from ..vfl.config import resolve_device
    from ..vfl.threads import check_threads, torch_threads
    from ..vfl.train import train

    check_threads(args.threads, "--threads")
    if resolve_device(args.device, "--device").type != "cpu" and args.backend != "inprocess":
        raise ValueError(f"--device {args.device} needs --backend inprocess, got {args.backend}")
    cfg = config_from_args(
        args,
        device=args.device,
        error_feedback=args.error_feedback,
        eval_every=args.eval_every,
        parties_model=args.model or source.party_model,
    )
    ds = source.load()
    with torch_threads(args.threads):
        res = train(ds, cfg, checkpoint=args.checkpoint, backend=args.backend)
    col = "test_f1" if ds.metric == "f1" else "test_accuracy"
    print(
        f"{ds.name}: {ds.n_parties} parties (D_m = {_dims(ds.feature_dims)}), {ds.n_train} "
        f"train / {ds.n_test} test samples, {ds.n_classes} classes, metric {ds.metric}"
    )
    print(
        f"{'epoch':>7} {'round':>6} {'train_loss':>10} {col:>13} {'bits':>11} "
        f"{'paper_bits':>11} {'comp_error':>11}"
    )
    for row in res.history:
        ce = row["compression_error"]
        print(
            f"{row['epoch']:7.2f} {row['round']:6d} {row['train_loss']:10.4f} {row[col]:13.4f} "
            f"{row['bits']:11.4e} {row['bits_paper_model']:11.4e} "
            f"{'' if ce is None else format(ce, '11.4e'):>11}"
        )
    if args.out:
        print(f"saved {res.save(args.out)}")
    return 0
