"""``cvfl optimize X.npy --bits 2e5``: optimal sampling probabilities for a bit budget (K6)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

import numpy as np

__all__ = ["register", "run"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``optimize`` subcommand."""
    p = subparsers.add_parser(
        "optimize",
        help="optimal sampling probabilities (and centres) for a bit budget (THEORY K6)",
        description="Load an (n, d) array from a .npy file, compute the optimal probabilities "
        "p_ij for the bit budget by exact water-filling (or cvxpy), print a summary (budget, MSE, "
        "K6.4 bounds, certificate residuals, time) and optionally save p, mu and the numbers to "
        "an .npz file.",
    )
    p.add_argument("data", help="path to a .npy file holding X of shape (n, d)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--bits", type=float, help="bit budget C_max (converted by the protocol)")
    g.add_argument("--budget", type=float, help="entry budget B (expected entries sent)")
    p.add_argument("--protocol", choices=["sparse", "varying-length"], default="sparse")
    p.add_argument("--mu", default="mean", help="centres: mean, zero, min or a number")
    p.add_argument("--r", type=int, default=32, help="bits per float (default 32)")
    p.add_argument("--method", choices=["exact", "cvxpy"], default="exact")
    p.add_argument("--optimize-centres", action="store_true", help="alternate p and mu (K6.5)")
    p.add_argument("--max-iter", type=int, default=50, help="alternating-minimisation cap")
    p.add_argument("--max-cvxpy-size", type=int, default=100_000)
    p.add_argument("--out", default=None, help="write p, mu and the summary numbers (.npz)")
    p.set_defaults(func=run)
    return p


def _mu(text: str) -> Any:
    if text in ("mean", "zero", "min"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--mu must be mean, zero, min or a number, got {text!r}") from None


def _save_npz(path: str, **arrays: Any) -> None:
    """Write an .npz atomically: a temporary file in the same folder, then ``os.replace``."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def run(args: argparse.Namespace) -> int:
    """Solve, print the summary, save the result; returns the exit code (2 on bad input)."""
    from cvfl_theory.optimal import mse_bounds, optimal_probabilities

    try:
        X = np.load(args.data, allow_pickle=False)
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args.data!r} as a .npy array: {exc}", file=sys.stderr)
        return 2
    try:
        res = optimal_probabilities(
            X,
            args.budget,
            bits=args.bits,
            protocol=args.protocol,
            mu=_mu(args.mu),
            method=args.method,
            optimize_centres=args.optimize_centres,
            r=args.r,
            max_iter=args.max_iter,
            max_cvxpy_size=args.max_cvxpy_size,
        )
        bounds = mse_bounds(X, res.budget, mu=np.asarray(res.mu)) if res.budget else None
    except (ValueError, TypeError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n, d = X.shape
    print(f"cvfl optimize {args.data}: X of shape ({n}, {d}), dtype {X.dtype}")
    if args.bits is not None:
        print(f"bit budget {args.bits:.6g} -> entry budget B = {res.budget:.6g} ({args.protocol})")
    print(res.summary())
    if bounds is not None:
        print(
            f"K6.4 bounds (fixed final centres): {bounds.lower:.6g} <= MSE* <= {bounds.upper:.6g}"
            f"; K6.3 closed form applies: {bounds.low_budget}"
        )
    if args.out:
        cert = res.certificate
        extra: dict[str, Any] = {}
        if cert is not None and not isinstance(cert, tuple):
            extra = {
                "threshold": cert.threshold,
                "budget_residual": cert.budget_residual,
                "stationarity_residual": cert.stationarity_residual,
                "cap_residual": cert.cap_residual,
            }
        _save_npz(
            args.out,
            p=np.asarray(res.p),
            mu=np.asarray(res.mu, dtype=np.float64),
            mse=res.mse,
            expected_bits=res.expected_bits,
            budget=np.nan if res.budget is None else res.budget,
            history=np.asarray(res.history),
            seconds=res.seconds,
            method=res.method,
            protocol=res.protocol,
            mse_lower=np.nan if bounds is None else bounds.lower,
            mse_upper=np.nan if bounds is None else bounds.upper,
            **extra,
        )
        print(f"saved {args.out}")
    return 0
