"""``cvfl optimize X.npy --bits 2e5``: optimal sampling probabilities for a bit budget (K6)."""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
from typing import Any

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
    p.add_argument("--out", default=None, help="write p, mu and the summary numbers (.npz)")
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


def load_matrix(path: str) -> Any:
    """Read ``X`` of shape ``(n, d)`` from a ``.npy`` file, refusing anything else clearly.

    The file's kind is told from its first bytes (an ``.npz`` archive, a pickle, text, an empty
    file are each named), the ``.npy`` header is checked against the file's size before the array
    is read, and pickled object arrays are never loaded (``allow_pickle=False``).

    Raises
    ------
    ValueError
        Naming the file and what is wrong with it.
    """
    import numpy as np

    fmt = np.lib.format
    what = f"{path!r}"
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(len(fmt.MAGIC_PREFIX))
            header: Any = None
            if head == fmt.MAGIC_PREFIX:
                fh.seek(0)
                try:
                    version = fmt.read_magic(fh)
                    read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
                    header = read[version](fh) if version in read else version
                except ValueError as exc:
                    header = exc
            data_bytes = size - fh.tell()
    except OSError as exc:
        raise ValueError(f"cannot read {what}: {exc.strerror or exc}") from None
    if head != fmt.MAGIC_PREFIX:
        if not head:
            kind = "is empty (0 bytes)"
        elif head[:4] == b"PK\x03\x04":
            kind = "is an .npz archive; save the one array X with numpy.save(path, X)"
        elif head[:1] == b"\x80":
            kind = "is a Python pickle; it is not loaded, since unpickling can run code"
        else:
            kind = f"is not a .npy file (it starts with {head!r})"
        raise ValueError(f"{what} {kind}")
    if isinstance(header, ValueError):
        raise ValueError(f"{what} has a damaged .npy header ({header})")
    if not isinstance(header, tuple) or len(header) != 3:
        raise ValueError(f"{what} is a .npy file of version {header}; need 1.0 or 2.0")
    shape, _, dtype = header
    if dtype.hasobject:
        raise ValueError(
            f"{what} holds an object array (Python objects stored as a pickle); it is not "
            "loaded, since unpickling can run code; save a numeric array"
        )
    if dtype.kind not in "fiu":
        raise ValueError(f"{what} holds dtype {dtype}; X must hold real numbers (float or int)")
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"{what}: X must be a non-empty 2-D array (n, d), got shape {shape}")
    if math.prod(shape) * dtype.itemsize != data_bytes:
        raise ValueError(
            f"{what}: the header promises {shape} {dtype} but the file holds {data_bytes} data "
            "bytes (truncated or damaged)"
        )
    return np.load(path, allow_pickle=False)


def run(args: argparse.Namespace) -> int:
    """Solve, print the summary, save the result; bad input raises ``ValueError`` (exit 2)."""
    import numpy as np

    from cvfl_theory.optimal import mse_bounds, optimal_probabilities

    if args.out:
        check_output_file(args.out, "--out")
    X = load_matrix(args.data)
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
    if args.out:
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
