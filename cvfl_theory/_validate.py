"""Validation at the public boundary: one place, errors that name the argument and the range.

Every public entry of :mod:`cvfl_theory` checks its arguments here *before any work*: types (a
``bool`` is never a number, a list is never a shape), shapes, ranges, non-finite values, and
whether values fit the float width of a wire format. Errors are ``TypeError`` (wrong kind of
object) or ``ValueError`` (right kind, bad value), and name the argument, the bad value and what
is allowed.

Layout independence (same values, same ``rng`` -> same bits): arrays leave :func:`to_numpy`
C-contiguous in native byte order, so every reduction downstream (row sums, means) runs in one
fixed order whatever the strides, order or byte order of the caller's array.

Float width (K3, C5): a value that is finite in the data but beyond the largest finite
float of the wire's width ``r`` is **refused** (:func:`check_fits_float`), never turned into
``inf`` on the wire nor silently clipped.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _kernels
from ._backend import ArrayKind, to_numpy

__all__ = [
    "FLOAT_BITS",
    "as_float_array",
    "as_matrix",
    "as_real_float",
    "check_bool",
    "check_choice",
    "check_fits_float",
    "check_float_width",
    "check_int_in_range",
    "check_matrix",
    "check_matrix_and_row_sums",
    "check_matrix_row_sums",
    "check_probabilities",
    "check_real",
    "raise_not_finite",
    "row_sums",
    "squared_deviations",
    "abs_deviations",
    "raise_mse_overflow",
]

FLOAT_BITS = {np.dtype(np.float16): 16, np.dtype(np.float32): 32, np.dtype(np.float64): 64}
_F64_MAX = float(np.finfo(np.float64).max)
_FLOAT_OF_BITS: dict[int, np.dtype[Any]] = {
    16: np.dtype(np.float16),
    32: np.dtype(np.float32),
    64: np.dtype(np.float64),
}


# ----------------------------------------------------------------------------- scalars
def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def check_int_in_range(value: Any, name: str, low: int, high: int) -> int:
    """Return ``value`` as an int in ``[low, high]`` or raise naming ``name`` and the range.

    A ``bool`` and a float (even an integral one) are refused with ``TypeError``.
    """
    if _is_bool(value) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    if not low <= int(value) <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {int(value)}")
    return int(value)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    lo = "-inf" if low is None else f"{low:g}"
    hi = "inf" if high is None else f"{high:g}"
    return f"{'(' if low_open or low is None else '['}{lo}, {hi}{')' if high_open or high is None else ']'}"


def check_real(
    value: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a finite float in the given interval, or raise naming ``name``.

    ``bool``, strings, complex numbers and arrays are refused with ``TypeError``; NaN, inf and
    values outside ``[low, high]`` (open ends with ``low_open``/``high_open``) with ``ValueError``.
    """
    where = _interval(low, high, low_open, high_open)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # 0-d array or tensor
        value = value.item()
    if _is_bool(value) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number in {where}, got {value!r}")
    v = float(value)
    ok = math.isfinite(v)
    if ok and low is not None:
        ok = v > low if low_open else v >= low
    if ok and high is not None:
        ok = v < high if high_open else v <= high
    if not ok:
        raise ValueError(f"{name} must be in {where} (a finite number), got {v!r}")
    return v


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` if it is ``True``/``False`` (Python or numpy), else raise ``TypeError``."""
    if not _is_bool(value):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_choice(value: Any, name: str, choices: tuple[Any, ...]) -> Any:
    """Return ``value`` if it is one of ``choices`` (same type: ``True`` is not ``1``)."""
    for c in choices:
        if type(value) is type(c) and value == c:
            return c
        if isinstance(c, int) and not _is_bool(c) and isinstance(value, np.integer):
            if int(value) == c:
                return c
    raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_float_width(r: Any, name: str = "r") -> int:
    """The float width ``r`` (bits per value) as an int in ``{16, 32, 64}``."""
    if _is_bool(r) or not isinstance(r, (int, np.integer)):
        raise TypeError(f"{name} must be one of 16, 32, 64 (bits per float), got {r!r}")
    if int(r) not in _FLOAT_OF_BITS:
        raise ValueError(f"{name} must be one of 16, 32, 64 (bits per float), got {int(r)}")
    return int(r)


# ----------------------------------------------------------------------------- arrays
def as_real_float(a: np.ndarray, name: str, accepted: str) -> np.ndarray:
    """Return ``a`` with float16/32/64 kept and other real dtypes (integers) as float64.

    Non-native byte order is converted to the native dtype of the same width (same values, same
    path). Raises ``TypeError`` for boolean, complex or non-numeric data; the message lists
    ``accepted``.
    """
    if a.dtype == bool or a.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers ({accepted}), got dtype {a.dtype}")
    if a.dtype.kind == "f" and not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if a.dtype not in FLOAT_BITS:
        a = a.astype(np.float64)
    return a


def raise_not_finite(a: np.ndarray, name: str = "x") -> None:
    """Raise ``ValueError`` naming the first NaN/inf of ``a`` and its index (if there is one)."""
    if a.ndim == 0:
        if not np.isfinite(a):
            raise ValueError(f"{name} must be finite, got {a[()]}")
        return
    bad = np.argwhere(~np.isfinite(a))
    if bad.size:
        idx = tuple(int(b) for b in bad[0])
        raise ValueError(f"{name} must be finite; found {a[idx]} at index {idx}")


def as_float_array(
    value: Any, name: str, ndims: tuple[int, ...] = (0, 1, 2), finite: bool = True
) -> np.ndarray:
    """A parameter (number, array or tensor) as a C-contiguous float64 array.

    Raises
    ------
    TypeError
        ``bool``/boolean arrays, strings, complex or object data, or an unconvertible object.
    ValueError
        A number of dimensions not in ``ndims``, or NaN/inf entries (with ``finite``).
    """
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"{name} must be a number or an array of numbers, got {value!r}")
    a, _ = to_numpy(value, name)
    if a.dtype == bool or a.dtype.kind not in "fiu":
        raise TypeError(
            f"{name} must be a number or an array of real numbers (not bool, complex or "
            f"objects), got {value!r} of dtype {a.dtype}"
        )
    a = np.asarray(a, dtype=np.float64, order="C")
    if a.ndim not in ndims:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndims))} dimensions, got {a.shape}"
        )
    if finite:
        raise_not_finite(a, name)
    return a


def row_sums(a: np.ndarray) -> np.ndarray:
    r"""Row sums of a C-contiguous 2-D float array, in float64 and in one fixed order.

    The sum of a row :math:`x_0, \dots, x_{d-1}` (every entry widened exactly to float64) is
    defined, addition by addition, as

    1. 16 lanes :math:`a_l = (((+0 + x_l) + x_{l+16}) + x_{l+32}) + \cdots` for
       :math:`l = 0, \dots, 15`: entry :math:`j` goes to lane :math:`j \bmod 16`, the entries of a
       lane are added in increasing :math:`j`, a lane without entries stays :math:`+0`;
    2. the lanes halved: :math:`a_l \leftarrow a_l + a_{l+h}` for :math:`l < h`,
       :math:`h = 8, 4, 2, 1`; the sum is :math:`a_0`.

    Every operation is a correctly rounded float64 addition, so the result has the same bits on
    every machine, kernel path (``avx512``, ``avx2``, ``portable``), compiler and thread count
    (the compiled kernel ``_kernels.row_sums``; no BLAS). It defines the centre ``mu="mean"`` of
    the encoders (K1, K2: :math:`\mu_i = \mathrm{fl}(s_i / d)`, see
    :meth:`~cvfl_theory.encoders.Encoder.centres`) and doubles as the finiteness check of
    :func:`check_matrix_row_sums`: a NaN or inf entry makes its row sum NaN or inf. A float64
    row may also overflow to ``inf`` (silently, the caller decides); float16/32 rows cannot.

    Raises
    ------
    TypeError
        ``a`` is not a float16/32/64 array.
    ValueError
        ``a`` is not 2-D.
    """
    if not isinstance(a, np.ndarray) or a.dtype.kind != "f" or a.dtype.itemsize not in (2, 4, 8):
        raise TypeError(
            f"row_sums needs a float16/32/64 numpy array, got {getattr(a, 'dtype', type(a))}"
        )
    if a.ndim != 2:
        raise ValueError(f"row_sums needs a 2-D array, got shape {a.shape}")
    # float16 -> float32 is exact; a copy only for float16, another byte order or layout
    a = np.ascontiguousarray(a, dtype=np.float64 if a.dtype.itemsize == 8 else np.float32)
    out = np.empty(a.shape[0], dtype=np.float64)
    _kernels.row_sums(a, 1 if a.dtype == np.float32 else 2, a.shape[0], a.shape[1], out)
    return out


def check_matrix_row_sums(a: np.ndarray, name: str = "X") -> np.ndarray:
    """Check a 2-D float array for NaN/inf and return its :func:`row_sums`.

    One reduction does both jobs: NaN and inf propagate into a row sum, so the full element scan
    runs only when some row sum is not finite (a NaN/inf entry, or a finite overflow).
    """
    sums = row_sums(a)
    if not np.isfinite(sums).all():
        raise_not_finite(a, name)
    return sums


def as_matrix(X: Any, name: str = "X") -> tuple[np.ndarray, ArrayKind]:
    """:func:`check_matrix` without the NaN/inf check: type and shape only, no pass over ``X``.

    For a caller that checks the values on its own single pass (and raises with
    :func:`raise_not_finite`, the same error).
    """
    a, kind = to_numpy(X, name)
    a = as_real_float(a, name, "float16/32/64 or integers")
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D with shape (n, d), got ndim={a.ndim} {a.shape}")
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"{name} must have n >= 1 rows and d >= 1 columns, got shape {a.shape}")
    return a, kind


def check_matrix_and_row_sums(X: Any, name: str = "X") -> tuple[np.ndarray, ArrayKind, np.ndarray]:
    """:func:`check_matrix` plus the row sums it computed on the way (see :func:`row_sums`)."""
    a, kind = as_matrix(X, name)
    return a, kind, check_matrix_row_sums(a, name)


def check_matrix(X: Any, name: str = "X") -> tuple[np.ndarray, ArrayKind]:
    """Return ``X`` as a finite, non-empty, C-contiguous 2-D float numpy array plus its kind.

    Integer inputs are converted to float64; float16/32/64 keep their dtype (in native byte
    order). See :func:`check_matrix_and_row_sums` for a variant that also returns the row sums.

    Raises
    ------
    TypeError
        Non-numeric, boolean or complex input.
    ValueError
        Wrong number of dimensions, an empty axis, or NaN/inf entries.
    """
    a, kind, _ = check_matrix_and_row_sums(X, name)
    return a, kind


def check_probabilities(p: Any, name: str = "p") -> np.ndarray:
    """Validate sampling probabilities in ``(0, 1]``; scalar, ``(n, 1)`` or ``(n, d)``."""
    arr = as_float_array(p, name, ndims=tuple(range(33)), finite=False)
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


# ----------------------------------------------------------------------------- derived values
def check_fits_float(values: np.ndarray, r: int, name: str, show_index: bool = True) -> np.ndarray:
    """``values`` rounded to ``r``-bit IEEE floats (native order); refuse what would become inf.

    A finite value whose rounding to ``r`` bits overflows (e.g. ``1e6`` with ``r = 16``, whose
    largest finite value is 65504) raises ``ValueError`` naming ``name``, the value, its index and
    the representable range: the wire never carries an ``inf`` that was not in the data.
    ``show_index=False`` leaves out the index (when ``values`` is not the caller's array).
    """
    dt = _FLOAT_OF_BITS[r]
    arr = np.asarray(values)
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(dt, copy=False)
    if out.size and not np.isfinite(out).all():
        bad = np.argwhere(~np.isfinite(out) & np.isfinite(arr))
        if bad.size:
            idx = tuple(int(b) for b in bad[0])
            big = float(np.finfo(dt).max)
            at = f" (at index {idx})" if show_index else ""
            raise ValueError(
                f"{name} has a value {float(arr[idx])!r}{at} that overflows {r}-bit floats: "
                f"the representable range is [-{big:g}, {big:g}]; use a wider float (r=32 or "
                "r=64) or rescale the data"
            )
    return out


def abs_deviations(X: np.ndarray, centres: np.ndarray, name: str = "X") -> np.ndarray:
    r""":math:`a_{ij} = |X_i(j) - \mu_i|` in float64; refuse data whose squares overflow float64.

    The closed-form MSEs (K1.2, K6) are sums of :math:`a_{ij}^2`: :meth:`Encoder.mse`,
    :func:`~cvfl_theory.optimal.optimal_probabilities`, :func:`~cvfl_theory.optimal.mse_bounds`
    and :func:`~cvfl_theory.optimal.low_budget_solution` refuse the same data through this
    function (:math:`|X - \mu| > 1.34 \cdot 10^{154}`) instead of returning ``inf``.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        a = X.astype(np.float64) - centres[:, None]
        np.abs(a, out=a)
        top = float(a.max())
        ok = math.isfinite(top * top)
    if not ok:
        i, j = (int(b) for b in np.argwhere(~(a <= math.sqrt(_F64_MAX)))[0])
        raise ValueError(
            f"{name} is too large: (X - mu)^2 overflows float64 at index ({i}, {j}) "
            f"(X = {float(X[i, j])!r}, mu = {float(centres[i])!r}); the closed-form MSE needs "
            f"|X - mu| <= {math.sqrt(_F64_MAX):.4g}: rescale X"
        )
    return a


def squared_deviations(X: np.ndarray, centres: np.ndarray, name: str = "X") -> np.ndarray:
    r""":math:`(X_i(j) - \mu_i)^2` in float64, refused as in :func:`abs_deviations`."""
    a = abs_deviations(X, centres, name)
    a *= a
    return a


def raise_mse_overflow(name: str = "X") -> None:
    """The error of an MSE sum that overflows float64 although each term is finite."""
    raise ValueError(
        f"{name} is too large: the MSE sum of (1/p - 1)(X - mu)^2 / n^2 overflows float64; "
        "rescale X or use larger probabilities"
    )
