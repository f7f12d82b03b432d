"""``cvfl optimize X.npy --bits 2e5``: optimal sampling probabilities for a bit budget (K6)."""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any

from cvfl_theory.store import result_path

from ._common import check_output_file

__all__ = ["register", "run"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``optimize`` subcommand."""
    p = subparsers.add_parser(
        "optimize",
        help="optimal sampling probabilities (and centres) for a bit budget (K6)",
        description="Load an (n, d) array from a .npy file, compute the optimal probabilities "
        "p_ij for the bit budget by exact water-filling (or cvxpy), print a summary (budget, MSE, "
        "K6.4 bounds, certificate residuals, time) and optionally save p, mu and the numbers to "
        "an .npz file.",
    )
    p.add_argument("data", help="path to a .npy file holding X of shape (n, d)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--bits", type=float, help="bit budget C_max (converted by the protocol)")
    g.add_argument("--budget", type=float, help="entry budget B (expected entries sent)")
    p.add_argument(
        "--protocol",
        choices=["sparse", "varying-length"],
        default="sparse",
        help="K3 protocol that converts --bits to entries",
    )
    p.add_argument("--mu", default="mean", help="centres mu_i: mean, zero, min or a number")
    p.add_argument("--r", type=int, default=32, help="bits per float")
    p.add_argument(
        "--method", choices=["exact", "cvxpy"], default="exact", help="water-filling or cvxpy"
    )
    p.add_argument("--optimize-centres", action="store_true", help="alternate p and mu (K6.5)")
    p.add_argument("--max-iter", type=int, default=50, help="alternating-minimisation cap")
    p.add_argument("--max-cvxpy-size", type=int, default=100_000, help="largest n*d given to cvxpy")
    p.add_argument(
        "--out",
        default=None,
        help="save the result: PATH.npz writes p, mu and the summary numbers as numpy arrays; "
        "any other PATH the result file that OptimalResult.load reads (.json added)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the summary numbers as one JSON document on stdout (mu as a list; p is "
        "saved with --out); notes go to stderr",
    )
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
    """Write an .npz atomically with the shared helper (mode 0666 minus the umask)."""
    import numpy as np

    from cvfl_theory._atomic import atomic_write_bytes

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def run(args: argparse.Namespace) -> int:
    """Solve, print the summary, save the result; bad input raises ``ValueError`` (exit 2)."""
    import numpy as np

    from cvfl_theory.optimal import mse_bounds, optimal_probabilities

    if args.out:
        check_output_file(args.out, "--out")
        if not args.out.endswith(".npz"):
            check_output_file(result_path(args.out), "--out")
    from ..vfl.files import read_matrix

    X = read_matrix(args.data)
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
    n, d = X.shape
    if args.json:
        import json

        from cvfl_theory._export import json_safe

        doc: dict[str, Any] = {"data": args.data, "n": n, "d": d, "dtype": str(X.dtype)}
        doc["bits"] = args.bits
        doc.update(res.key_numbers())
        doc["mu"] = np.asarray(res.mu, dtype=np.float64)
        doc["history"] = list(res.history)
        doc["solver_status"] = res.solver_status
        doc["lower_bound"] = res.lower_bound
        doc["certificate"] = _certificate_numbers(res.certificate)
        doc["mse_lower"] = None if bounds is None else bounds.lower
        doc["mse_upper"] = None if bounds is None else bounds.upper
        doc["k6_3_closed_form_applies"] = None if bounds is None else bounds.low_budget
        doc["out"] = args.out
    else:
        print(f"cvfl optimize {args.data}: X of shape ({n}, {d}), dtype {X.dtype}")
        if args.bits is not None:
            print(
                f"bit budget {args.bits:.6g} -> entry budget B = {res.budget:.6g} ({args.protocol})"
            )
        print(res.summary())
        if bounds is not None:
            print(
                f"K6.4 bounds (fixed final centres): {bounds.lower:.6g} <= MSE* <= "
                f"{bounds.upper:.6g}; K6.3 closed form applies: {bounds.low_budget}"
            )
    if args.out and not args.out.endswith(".npz"):
        print(f"saved {res.save(args.out)}", file=sys.stderr if args.json else sys.stdout)
    elif args.out:
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
            **(_certificate_numbers(res.certificate) or {}),
        )
        print(f"saved {args.out}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(json_safe(doc), indent=1))
    return 0


def _certificate_numbers(cert: Any) -> dict[str, Any] | None:
    """The KKT certificate's numbers of a global-budget exact solve (``None`` otherwise)."""
    if cert is None or isinstance(cert, tuple):
        return None
    return {
        "threshold": cert.threshold,
        "budget_residual": cert.budget_residual,
        "stationarity_residual": cert.stationarity_residual,
        "cap_residual": cert.cap_residual,
    }
