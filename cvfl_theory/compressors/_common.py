r"""Helpers shared by the quantizers: the range options of C5.5 and the kernels' array types."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _kernels
from .._validate import check_real, raise_not_finite
from ..bitpack import BitReader, BitWriter

__all__ = [
    "parse_range",
    "data_range",
    "range_bits",
    "type_code",
    "kernel_input",
    "kernel_dtype",
    "row_ranges",
]

_MODES = ("minmax-row", "minmax-tensor")


#: Largest width ``hi - lo`` of a fixed range: its square (in the error laws) stays finite.
MAX_RANGE_WIDTH = math.sqrt(float(np.finfo(np.float64).max))


def parse_range(value: Any) -> tuple[float, float] | str:
    """Validate the ``range`` argument of a quantizer.

    A fixed range ``(lo, hi)`` must be two real numbers (not bools), finite, with ``lo < hi`` and
    a width ``hi - lo`` that is finite and at most :data:`MAX_RANGE_WIDTH` (about
    1.34e154, so the error laws, quadratic in the width, are finite). Whether
    the width is wide enough for the quantizer's step is checked by the quantizer (it depends on
    ``bits``).

    Raises
    ------
    ValueError
        A fixed range that breaks the rules above, or an unknown mode.
    TypeError
        Anything that is neither a pair of numbers nor a mode string.
    """
    if isinstance(value, str):
        if value not in _MODES:
            raise ValueError(
                f"range must be (lo, hi), 'minmax-row' or 'minmax-tensor'; got {value!r}"
            )
        return value
    try:
        pair = list(value)
    except TypeError:
        raise TypeError(
            f"range must be (lo, hi), 'minmax-row' or 'minmax-tensor'; got {value!r}"
        ) from None
    if len(pair) != 2:
        raise ValueError(f"range (lo, hi) must have 2 numbers, got {len(pair)}: {value!r}")
    lo = check_real(pair[0], "range lo")
    hi = check_real(pair[1], "range hi")
    if not lo < hi:
        raise ValueError(f"range (lo, hi) must have lo < hi, got ({lo}, {hi})")
    with np.errstate(over="ignore"):
        width = float(np.float64(hi) - np.float64(lo))
    if not width <= MAX_RANGE_WIDTH:
        raise ValueError(
            f"range ({lo:g}, {hi:g}) is too wide: hi - lo = {width:g} must be at most "
            f"{MAX_RANGE_WIDTH:.4g} (the error laws square it in float64)"
        )
    return (lo, hi)


def range_bits(spec: tuple[float, float] | str, B: int) -> int:
    """Payload bits of the transmitted range (C5.5): 64 per row, 64 per tensor, or 0 if fixed."""
    if spec == "minmax-row":
        return 64 * B
    if spec == "minmax-tensor":
        return 64
    return 0


_TYPE_CODES = {
    np.dtype(np.float32): 1,
    np.dtype(np.float64): 2,
    np.dtype(np.uint8): 3,
    np.dtype(np.uint16): 4,
    np.dtype(np.int32): 5,
}


def type_code(a: np.ndarray | None) -> int:
    """The element type code of ``cvfl_theory._kernels`` for ``a`` (0 for ``None``)."""
    return 0 if a is None else _TYPE_CODES[a.dtype]


def kernel_input(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous native float32/float64 array (float16 -> float32, exact)."""
    dt = np.float64 if a.dtype.itemsize == 8 else np.float32
    return np.ascontiguousarray(a, dtype=dt)


def kernel_dtype(dtype: Any) -> np.dtype:
    """The dtype a kernel writes a reconstruction of ``dtype`` in.

    float32 for float32, else float64 (float16 output is rounded once from float64 by the caller).
    """
    return np.dtype(np.float32) if np.dtype(dtype) == np.float32 else np.dtype(np.float64)


def row_ranges(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The min-max range of every row as sent (float32 rounded outwards), float64 ``(B,)``.

    Raises
    ------
    ValueError
        NaN/inf in ``a`` (naming the first), or float64 entries beyond the float32 range (a
        min-max range is sent as float32).
    """
    a = kernel_input(a)
    B, P = a.shape
    lo, hi = np.empty(B), np.empty(B)
    _kernels.row_ranges(a, type_code(a), B, P, lo, hi)
    check_sent_range(a, lo, hi)
    return lo, hi


def check_sent_range(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
    """Raise unless the min-max ranges ``lo``, ``hi`` computed from ``a`` are finite."""
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise_not_finite(a, "x")
        raise ValueError(
            "x has entries beyond the float32 range (|x| > 3.4e38): a min-max range is sent as "
            "float32; use a fixed range=(lo, hi)"
        )


def tensor_range(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tensor's range from its rows' ranges, ``(1,)`` each, with :math:`-0 < +0`.

    As the kernels order floats within a row (by their sortable integer keys): the smallest of
    ``lo`` is ``-0.0`` if it is a zero and some row has ``lo = -0.0``; the largest of ``hi`` is
    ``+0.0`` if it is a zero and some row has ``hi = +0.0`` (numpy's ``min``/``max`` return
    either zero, depending on the order).
    """
    mn, mx = lo.min(), hi.max()
    if mn == 0.0:
        mn = -0.0 if bool(np.any((lo == 0.0) & np.signbit(lo))) else 0.0
    if mx == 0.0:
        mx = 0.0 if bool(np.any((hi == 0.0) & ~np.signbit(hi))) else -0.0
    return np.array([mn], dtype=np.float64), np.array([mx], dtype=np.float64)


def data_range(a: np.ndarray, spec: tuple[float, float] | str) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` the quantizer uses for ``a``, float64 arrays.

    One value per row (``"minmax-row"``) or a single value (``"minmax-tensor"``, fixed range).
    """
    if spec == "minmax-row":
        return row_ranges(a)
    if spec == "minmax-tensor":
        lo, hi = row_ranges(a)  # outward rounding is monotone: min of the rounded = rounded min
        return tensor_range(lo, hi)
    assert not isinstance(spec, str)
    return np.array([float(spec[0])]), np.array([float(spec[1])])


def sent_fields(
    spec: tuple[float, float] | str, lo: np.ndarray, hi: np.ndarray
) -> dict[str, np.ndarray]:
    """The payload fields of the range (C5.5): float32 ``lo``/``hi`` in the min-max modes."""
    if isinstance(spec, str):
        return {"lo": lo.astype(np.float32), "hi": hi.astype(np.float32)}
    return {}


def check_counts(
    a: np.ndarray, spec: tuple[float, float] | str, out_of_range: str, n_clip: int, n_bad: int
) -> None:
    """Raise for what a quantize kernel counted: non-finite entries, or clipping refused.

    Raises
    ------
    ValueError
        NaN/inf in ``a``, or ``out_of_range == "raise"`` and entries outside a fixed range.
    """
    if n_bad:
        raise_not_finite(a, "x")
    if n_clip and out_of_range == "raise":
        assert not isinstance(spec, str)
        lo_f, hi_f = spec
        bad = a[(a < lo_f) | (a > hi_f)].ravel()[0]
        raise ValueError(
            f"x has {n_clip} entries outside the fixed range [{lo_f}, {hi_f}] (e.g. {bad}); "
            "use out_of_range='clip' or a min-max range"
        )


def received_range(
    spec: tuple[float, float] | str, data: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The receiver's ``(lo, hi)``: float64 arrays of one value per row or a single value."""
    if isinstance(spec, str):
        return data["lo"].astype(np.float64), data["hi"].astype(np.float64)
    return np.array([float(spec[0])]), np.array([float(spec[1])])


def write_range(w: BitWriter, spec: tuple[float, float] | str, data: dict[str, np.ndarray]) -> None:
    """Write the transmitted range (interleaved ``lo, hi`` float32 pairs)."""
    if isinstance(spec, str):
        w.write_floats(np.stack([data["lo"], data["hi"]], axis=1).ravel(), 32)


def read_range(r: BitReader, spec: tuple[float, float] | str, B: int) -> dict[str, np.ndarray]:
    """Read what :func:`write_range` wrote."""
    if not isinstance(spec, str):
        return {}
    n = B if spec == "minmax-row" else 1
    pairs = r.read_floats(2 * n, 32).reshape(n, 2)
    return {"lo": pairs[:, 0].copy(), "hi": pairs[:, 1].copy()}
