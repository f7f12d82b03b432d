"""Validation at the public boundary: one place, errors that name the argument and the range."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._backend import ArrayKind, to_numpy

__all__ = [
    "check_matrix",
    "check_matrix_row_sums",
    "check_probabilities",
    "check_int_in_range",
    "as_real_float",
    "raise_not_finite",
    "FLOAT_BITS",
]

FLOAT_BITS = {np.dtype(np.float16): 16, np.dtype(np.float32): 32, np.dtype(np.float64): 64}


def as_real_float(a: np.ndarray, name: str, accepted: str) -> np.ndarray:
    """Return ``a`` with float16/32/64 kept and other real dtypes (integers) as float64.

    Raises ``TypeError`` for boolean, complex or non-numeric data; the message lists ``accepted``.
    """
    if a.dtype == bool or a.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers ({accepted}), got dtype {a.dtype}")
    if a.dtype not in FLOAT_BITS:
        a = a.astype(np.float64)
    return a


def raise_not_finite(a: np.ndarray, name: str = "x") -> None:
    """Raise ``ValueError`` naming the first NaN/inf of ``a`` and its index (if there is one)."""
    bad = np.argwhere(~np.isfinite(a))
    if bad.size:
        idx = tuple(int(b) for b in bad[0])
        raise ValueError(f"{name} must be finite; found {a[idx]} at index {idx}")


def check_matrix(X: Any, name: str = "X") -> tuple[np.ndarray, ArrayKind]:
    """Return ``X`` as a finite, non-empty 2-D float numpy array plus its kind.

    Integer inputs are converted to float64; float16/32/64 keep their dtype. See
    :func:`check_matrix_row_sums` for a variant that also returns the row sums it computes.

    Raises
    ------
    TypeError
        Non-numeric, boolean or complex input.
    ValueError
        Wrong number of dimensions, an empty axis, or NaN/inf entries.
    """
    a, kind = to_numpy(X, name)
    a = as_real_float(a, name, "float16/32/64 or integers")
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D with shape (n, d), got ndim={a.ndim} {a.shape}")
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"{name} must have n >= 1 rows and d >= 1 columns, got shape {a.shape}")
    check_matrix_row_sums(a, name)
    return a, kind


def check_matrix_row_sums(a: np.ndarray, name: str = "X") -> np.ndarray:
    """Check a 2-D float array for NaN/inf and return its row sums (accumulated in ``a.dtype``).

    One reduction does both jobs: NaN and inf propagate into a row sum, so the full element scan
    runs only when some row sum is not finite (a NaN/inf entry, or a finite overflow). For float32
    and float64 the sums are a BLAS matrix-vector product with a vector of ones (memory-bound,
    several times faster than ``np.add.reduce`` here), accumulated in the data's precision.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # a finite overflow is re-checked below
        if a.dtype in (np.float32, np.float64):
            sums = a @ np.ones(a.shape[1], dtype=a.dtype)
        else:
            sums = np.add.reduce(a, axis=1, dtype=np.float32)
    if not np.isfinite(sums).all():
        raise_not_finite(a, name)
    return sums


def check_probabilities(p: Any, name: str = "p") -> np.ndarray:
    """Validate sampling probabilities in ``(0, 1]``; scalar, ``(n, 1)`` or ``(n, d)``."""
    try:
        arr = np.asarray(p.detach().cpu().numpy() if hasattr(p, "detach") else p, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or an array of numbers, got {p!r}") from None
    if arr.ndim not in (0, 2):
        raise ValueError(
            f"{name} must be a scalar, a per-node (n, 1) array or a full (n, d) array; got shape "
            f"{arr.shape}"
        )
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0) or np.any(arr > 1):
        bad = arr[~(np.isfinite(arr) & (arr > 0) & (arr <= 1))].ravel()[0]
        raise ValueError(f"{name} must lie in (0, 1]; got {bad}")
    return arr


def check_int_in_range(value: Any, name: str, low: int, high: int) -> int:
    """Return ``value`` as an int in ``[low, high]`` or raise naming ``name`` and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    if not low <= int(value) <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {int(value)}")
    return int(value)
