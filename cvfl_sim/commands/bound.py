"""``cvfl bound``: Lemma 1 measured and Theorem 4.2 term by term beside a real run (C4.1, C4.2, C9).

Registering the command imports nothing heavy; torch is imported when it runs. The command runs
with ``--threads`` torch intra-op threads (default one, restored afterwards): its models are
tiny and its cost is many small double-backward passes, which extra threads only slow down.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TypedDict

from ._run_args import add_data_arguments, add_run_arguments, config_from_args, source_from_args

__all__ = ["register", "run"]

_READINGS = {
    "chain": "chain",
    "chain-frobenius": "chain-frobenius",
    "theta-hessian": "theta-hessian (double-counts G)",
}


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``bound`` subcommand."""
    p = subparsers.add_parser(
        "bound",
        help="check Theorem 4.2 on a run (hypotheses first) beside its trajectory certificate",
        description="Train one C-VFL run (default: the analytic model, linear parties and a "
        "linear softmax head, with 2-bit scalar quantization) with gradient norms recorded every "
        "round, a Lemma-1 probe and the trajectory certificate. Then: the theorem's hypotheses "
        "with the run's own constants (proved for the analytic model, estimated for the MLP), "
        "Theorem 4.2 (constants as recovered) term by term beside the observed average "
        "||grad F||^2 -- with the recovered term 3, with the tight term (C4.5, ours; a bound "
        "at Q = 1 with every round start probed, at any Q for the analytic model with later "
        "steps probed (C4.9, ours), or for top-k with every local step probed; else an "
        "estimate) and, as an estimate, with "
        "the measured Lemma-1 left side -- and our certificate of the run's own "
        "average gradient (C4.7). A bound whose hypotheses fail is reported as 'does not apply' "
        "with the numbers. Progress goes to stderr.",
    )
    add_data_arguments(p, default="breast-cancer")
    add_run_arguments(p, Q=1, lr=0.01, embedding_size=4, compressor="scalar", bits=2)
    p.add_argument(
        "--model",
        choices=["linear", "mlp"],
        default="linear",
        help="party models: linear (the analytic model: proved constants, certified "
        "certificate) or mlp (ReLU: estimated constants, and C3.1 fails)",
    )
    p.add_argument(
        "--theory-step",
        action="store_true",
        help="take the step from the run's own proved constants (largest the step condition "
        "allows on the trajectory it gives; needs --model linear), so that Theorem 4.2 applies",
    )
    p.add_argument(
        "--split",
        choices=["party", "equal", "max"],
        default="party",
        help="parties' errors: each its own, the total shared equally, or charged to each",
    )
    p.add_argument(
        "--reading",
        choices=sorted(_READINGS),
        default="chain",
        help="H_m, G_m of term 3: chain = Lemma 1 (embedding Hessian, operator norms); the "
        "others only show the cost of Frobenius norms / of the theta-Hessian, which "
        "double-counts G",
    )
    p.add_argument(
        "--every", type=int, default=1, help="probe Lemma 1 every this many rounds (from round 0)"
    )
    p.add_argument(
        "--steps",
        choices=["first", "ends", "all"],
        default="ends",
        help="local steps probed in a probed round: 0, {0, Q-1} or all",
    )
    p.add_argument(
        "--sampled",
        type=int,
        default=0,
        metavar="DRAWS",
        help="also the confidence bound of C4.8 (ours) on Lemma 1's left side from DRAWS dither "
        "draws (>= 100, e.g. 4000) at every probed round start, as a column of the Lemma-1 "
        "table and a form of term 3; all its bounds of the run hold at once with probability "
        ">= 0.95. About 1 s per probed round at 4000 draws (B = 64); 80000 draws (10-20 s) "
        "bring it within x10 of the truth at 2 bits with a compressed server model "
        "(default 0: off)",
    )
    p.add_argument(
        "--sampled-later",
        action="store_true",
        help="with --sampled and Q > 1, the analytic model (--model linear) and later steps "
        "probed (--steps ends or all): the confidence bound at every local step of a probed "
        "round too (C4.9, ours: C4.8 on the round's uncompressed local path plus the drift), "
        "so that its form of term 3 is a bound at any Q; it costs 1 + (Q - 1)(M + 1) C4.8 "
        "evaluations a probed round (each later one for one block), up to (M + 1) Q times the "
        "round start's",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="one epoch, Lemma 1 at round starts, one batch and 20 power iterations per point "
        "for the estimated constants (a few seconds)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: applies, why, certificate {bound, observed, ratio, "
        "certified}, the theorem's terms, the constants and the Lemma-1 summary",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Train with the probes, check the hypotheses, compare and print; bad input raises ``ValueError``."""
    from ..vfl.threads import check_threads, torch_threads

    if args.every < 1:
        raise ValueError(f"--every must be >= 1, got {args.every}")
    if args.epochs < 1:
        raise ValueError(f"--epochs must be >= 1, got {args.epochs}")
    if args.sampled != 0 and not 100 <= args.sampled <= 10**8:
        raise ValueError(f"--sampled must be 0 (off) or in [100, 1e8] draws, got {args.sampled}")
    if args.sampled_later and args.sampled == 0:
        raise ValueError("--sampled-later needs --sampled DRAWS (the confidence bound's draws)")
    if args.theory_step and args.model != "linear":
        raise ValueError("--theory-step needs --model linear (proved constants)")
    args.source = source_from_args(args)
    check_threads(args.threads, "--threads")
    with torch_threads(args.threads):
        return _run(args)


class _Effort(TypedDict, total=False):
    """How hard :func:`cvfl_sim.bounds.theorems.estimate_constants` works (its keyword arguments)."""

    batches: int
    power_iters: int
    tol: float


def _run(args: argparse.Namespace) -> int:
    import dataclasses

    from ..bounds.analytic_constants import analytic_constants, step_from_constants, train_recorded
    from ..bounds.certificate import TrajectoryProbe
    from ..bounds.lemma1 import Lemma1Probe
    from ..bounds.probes import probes
    from ..bounds.theorems import Constants, bound_vs_observed, estimate_constants
    from ..vfl.config import setup_run
    from ..vfl.train import train

    start = time.perf_counter()

    def say(msg: str) -> None:
        print(f"cvfl bound [{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr)

    if args.quick:
        args.epochs = 1
    ds = args.source.load()
    cfg = config_from_args(args, eval_every=1, track_grad_norm=True, parties_model=args.model)
    setup_run(ds, cfg)  # every setting against the data (e.g. the batch size), before any work
    if args.theory_step:
        say("choosing the step from the run's own proved constants")
        eta, tries = step_from_constants(ds, cfg)
        cfg = dataclasses.replace(cfg, lr=eta)
        say(f"step {eta:.4g} after {tries} training(s)")
    lemma = Lemma1Probe(
        every=args.every,
        steps="first" if args.quick else args.steps,
        progress=True,
        sampled=args.sampled,
        seed=args.seed,
        sampled_later=args.sampled_later,
    )
    traj = TrajectoryProbe(ds, cfg, power_iters=2, progress=True)
    say(f"training {ds.name}: {cfg.epochs} epoch(s), {args.model} parties, both probes")

    def on_epoch(e: int) -> None:
        say(f"epoch {e} done")

    if args.model == "linear":
        res, points = train_recorded(ds, cfg, probe=probes(lemma, traj), on_epoch_end=on_epoch)
        ac = analytic_constants(ds, points, cfg.batch_size)
        consts = Constants.from_analytic(ac)
    else:
        res = train(ds, cfg, probe=probes(lemma, traj), on_epoch_end=on_epoch)
        effort = _Effort(batches=1, power_iters=20, tol=1e-3) if args.quick else _Effort(tol=1e-4)
        consts = estimate_constants(ds, cfg, res, seed=args.seed, progress=say, **effort)
    report = lemma.report()
    cert = traj.certificate(res)
    say(f"trained; probes {lemma.seconds + traj.seconds:.1f} s")
    check = bound_vs_observed(
        res, consts, split=args.split, reading=_READINGS[args.reading], lemma1=report
    )
    say("done")
    if args.json:
        out = {
            "applies": check.applies,
            "why": check.why,
            "certificate": cert.to_dict(),
            "dataset": ds.describe(),
            "config": cfg.to_dict(),
            "constants": consts.to_dict(),
            "lemma1": report.summary(),
            "bound": check.to_dict(),
            "seconds": time.perf_counter() - start,
        }
        from cvfl_theory._export import json_safe

        # strict JSON: a nan (an estimate's standard error from fewer than two rounds, a ratio
        # without an observed value) is written as the string "nan"
        print(json.dumps(json_safe(out), indent=1, default=str))
        return 0
    print(consts)
    print()
    print(report)
    print()
    print(check)
    print()
    print(cert)
    return 0
