r"""Helpers shared by the quantizers: the range options of C5.5 and the shared dither stream."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np

from .._validate import raise_not_finite
from ..bitpack import BitReader, BitWriter

__all__ = [
    "RangeSpec",
    "parse_range",
    "resolve_range",
    "range_bits",
    "DITHER_OFFSET",
    "DitherStream",
    "row_blocks",
]

RangeSpec = Any
"""``(lo, hi)`` or ``"minmax-row"`` or ``"minmax-tensor"``."""

_MODES = ("minmax-row", "minmax-tensor")


def parse_range(value: Any) -> tuple[float, float] | str:
    """Validate the ``range`` argument of a quantizer.

    Raises
    ------
    ValueError
        A fixed range that is not finite with ``lo < hi``, or an unknown mode.
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
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(
            f"range must be (lo, hi), 'minmax-row' or 'minmax-tensor'; got {value!r}"
        ) from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"range (lo, hi) must be finite with lo < hi, got ({lo}, {hi})")
    return (lo, hi)


def range_bits(spec: tuple[float, float] | str, B: int) -> int:
    """Payload bits of the transmitted range (C5.5): 64 per row, 64 per tensor, or 0 if fixed."""
    if spec == "minmax-row":
        return 64 * B
    if spec == "minmax-tensor":
        return 64
    return 0


def _f32_down(v: np.ndarray) -> np.ndarray:
    f = v.astype(np.float32)
    return np.where(f.astype(np.float64) > v, np.nextafter(f, np.float32(-np.inf)), f)


def _f32_up(v: np.ndarray) -> np.ndarray:
    f = v.astype(np.float32)
    return np.where(f.astype(np.float64) < v, np.nextafter(f, np.float32(np.inf)), f)


def row_min_max(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row minima and maxima of ``a`` (B, P), shape ``(B, 1)``, in ``a``'s dtype (NaN propagates).

    Uses torch's ``amin``/``amax`` on a zero-copy view when torch is already imported (about 2x
    faster than numpy's row reductions for short rows); the values are identical.
    """
    torch = sys.modules.get("torch")
    if (
        torch is not None
        and a.flags.c_contiguous
        and a.flags.writeable
        and a.dtype in (np.float32, np.float64)
    ):
        t = torch.from_numpy(a)
        return (
            torch.amin(t, dim=1, keepdim=True).numpy(),
            torch.amax(t, dim=1, keepdim=True).numpy(),
        )
    return a.min(axis=1, keepdims=True), a.max(axis=1, keepdims=True)


def _finite_or_raise(lo: np.ndarray, hi: np.ndarray, a: np.ndarray) -> None:
    """Raise as :func:`~.base.as_matrix` does if the reductions ``lo``/``hi`` are not finite.

    NaN propagates through min/max and an infinity is an extremum, so this detects both.
    """
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise_not_finite(a, "x")


def resolve_range(
    a: np.ndarray, spec: tuple[float, float] | str, out_of_range: str, check_finite: bool = False
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray, int]:
    """Return ``(lo, hi, sent fields, a clipped to [lo, hi], number clipped)``.

    ``lo`` and ``hi`` are float64 arrays of shape ``(B, 1)`` or ``(1, 1)``. In the min-max modes the
    range is rounded *outwards* to float32 (what is sent), so no entry is ever clipped.
    ``check_finite=True`` raises the ``ValueError`` of :func:`~.base.as_matrix` on NaN/inf (found
    from the min/max computed here anyway).

    Raises
    ------
    ValueError
        ``out_of_range == "raise"`` and an entry lies outside a fixed range; NaN/inf with
        ``check_finite``.
    """
    if spec in ("minmax-row", "minmax-tensor"):
        if spec == "minmax-row":
            mn, mx = row_min_max(a)
        else:
            mn, mx = np.array([[a.min()]]), np.array([[a.max()]])
        if check_finite:
            _finite_or_raise(mn, mx, a)
        if a.dtype.itemsize <= 4:  # float16/32 extrema are float32 already: nothing to round
            lo32, hi32 = mn.astype(np.float32), mx.astype(np.float32)
        else:
            lo32 = _f32_down(mn.astype(np.float64))
            hi32 = _f32_up(mx.astype(np.float64))
        sent = {"lo": lo32.ravel(), "hi": hi32.ravel()}
        return lo32.astype(np.float64), hi32.astype(np.float64), sent, a, 0
    assert not isinstance(spec, str)
    lo_f, hi_f = spec
    mn, mx = a.min(), a.max()
    if check_finite:
        _finite_or_raise(mn, mx, a)
    n = 0
    if mn < lo_f or mx > hi_f:
        outside = (a < lo_f) | (a > hi_f)
        n = int(np.count_nonzero(outside))
    if n:
        if out_of_range == "raise":
            bad = a[outside].ravel()[0]
            raise ValueError(
                f"x has {n} entries outside the fixed range [{lo_f}, {hi_f}] (e.g. {bad}); "
                "use out_of_range='clip' or a min-max range"
            )
        a = np.clip(a, lo_f, hi_f)
    return np.full((1, 1), lo_f), np.full((1, 1), hi_f), {}, a, n


def received_range(
    spec: tuple[float, float] | str, data: dict[str, np.ndarray], B: int
) -> tuple[np.ndarray, np.ndarray]:
    """The receiver's ``(lo, hi)`` (float64, broadcastable to ``(B, P)``)."""
    if isinstance(spec, str):
        lo = data["lo"].astype(np.float64).reshape(-1, 1)
        hi = data["hi"].astype(np.float64).reshape(-1, 1)
        return lo, hi
    return np.full((1, 1), spec[0]), np.full((1, 1), spec[1])


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


def range_spans(x_or_a: np.ndarray, spec: tuple[float, float] | str) -> np.ndarray:
    """The spans ``hi - lo`` (float64, one per row or one in total) the quantizer will use."""
    lo, hi, _, _, _ = resolve_range(x_or_a, spec, "clip")
    return (hi - lo).ravel()


DITHER_OFFSET = 1.0 - 2.0**-24
r"""``U = f - DITHER_OFFSET`` maps a :class:`DitherStream` value to a uniform (exact in float64)."""


BLOCK_ELEMENTS = 16384
"""Kernels process rows in blocks of about this many entries (temporaries stay in cache and are
recycled by the allocator). Part of the dither stream's definition: do not change lightly."""


def row_blocks(B: int, P: int) -> list[slice]:
    """Row slices of ``max(1, BLOCK_ELEMENTS // P)`` rows covering ``range(B)``."""
    rows = max(1, BLOCK_ELEMENTS // P)
    return [slice(r, min(B, r + rows)) for r in range(0, B, rows)]


class DitherStream:
    r"""Sequential shared dither: :meth:`take` returns float32 :math:`f \in [1, 2)`.

    Each call draws ``ceil(n / 2)`` 64-bit SFC64 outputs; their 32-bit halves :math:`w` become
    :math:`f = 1 + \lfloor w/2^9 \rfloor 2^{-23}` by setting the exponent bits (no float
    conversion). :math:`U = f - (1 - 2^{-24})` is uniform on the :math:`2^{23}` midpoints
    :math:`(k + 1/2) 2^{-23}` of :math:`(0, 1)`. The stream is a function of the seed and of the
    sequence of requested sizes, which sender and receiver share (the row blocks of a shape), so
    both compute bit-identical values.
    """

    def __init__(self, seed: int) -> None:
        self._bg = np.random.SFC64(seed)

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        """The next ``prod(shape)`` values, shaped."""
        n = int(np.prod(shape))
        raw = self._bg.random_raw((n + 1) // 2).view(np.uint32)[:n]
        raw >>= np.uint32(9)
        raw |= np.uint32(0x3F800000)
        return raw.view(np.float32).reshape(shape)

    def take_blocks(self, blocks: list[slice], P: int) -> np.ndarray:
        """The values of consecutive :meth:`take` calls for ``blocks``, as one array.

        ``blocks`` are row blocks of ``P`` columns; the result has shape ``(rows, P)``: a single
        draw when every block has an even size (then the concatenation is the same stream), else
        one draw per block.
        """
        sizes = [(sl.stop - sl.start) * P for sl in blocks]
        rows = sum(sl.stop - sl.start for sl in blocks)
        if all(n % 2 == 0 for n in sizes):
            return self.take((rows, P))
        return np.concatenate([self.take((sl.stop - sl.start, P)) for sl in blocks])


SUPER_ELEMENTS = 1 << 18
"""The float32 kernels work on groups of consecutive :func:`row_blocks` of about this many entries
(1 MiB of float32, in L2): fewer, larger operations. The dither stream is unchanged (see
:meth:`DitherStream.take_blocks`)."""


def super_blocks(B: int, P: int) -> list[list[slice]]:
    """:func:`row_blocks` grouped into runs of about ``SUPER_ELEMENTS`` entries."""
    blocks = row_blocks(B, P)
    per = max(1, SUPER_ELEMENTS // ((blocks[0].stop - blocks[0].start) * P))
    return [blocks[i : i + per] for i in range(0, len(blocks), per)]


class F32Ops:
    """Elementwise float32 block arithmetic on numpy arrays, broadcasts of per-row columns by torch.

    numpy runs every operation (lowest per-call overhead) except those combining a block with a
    per-row ``(rows, 1)`` column: numpy pays an inner-loop call per row there, and torch, when it
    is loaded, does them about 3x faster on zero-copy views. Only correctly rounded or exact
    operations are used (``+``, ``-``, ``*``, ``floor``, ``ceil``, ``min``/``max``, integer/float
    conversions of in-range values; never fused multiply-adds), so the result does not depend on
    which library ran an operation. torch is never imported here.
    """

    def __init__(self) -> None:
        self.torch: Any = sys.modules.get("torch")

    def _t(self, x: Any) -> Any:
        if not isinstance(x, np.ndarray):
            return x
        if not x.flags.writeable:  # only ever read: silence torch's warning about it
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return self.torch.from_numpy(x)
        return self.torch.from_numpy(x)

    def _column(self, x: np.ndarray, y: Any, out: np.ndarray) -> bool:
        """Whether ``y`` is a per-row column and torch can view every operand."""
        return (
            self.torch is not None
            and isinstance(y, np.ndarray)
            and y.ndim == 2
            and y.shape[1] == 1
            and y.shape[0] > 1
            and min(x.strides + out.strides, default=0) >= 0
        )

    def add(self, x: np.ndarray, y: Any, out: np.ndarray) -> None:
        """``out = x + y``."""
        if self._column(x, y, out):
            self.torch.add(self._t(x), self._t(y), out=self._t(out))
        else:
            np.add(x, y, out=out)

    def sub(self, x: np.ndarray, y: Any, out: np.ndarray) -> None:
        """``out = x - y``."""
        if self._column(x, y, out):
            self.torch.sub(self._t(x), self._t(y), out=self._t(out))
        else:
            np.subtract(x, y, out=out)

    def mul(self, x: np.ndarray, y: Any, out: np.ndarray) -> None:
        """``out = x * y``."""
        if self._column(x, y, out):
            self.torch.mul(self._t(x), self._t(y), out=self._t(out))
        else:
            np.multiply(x, y, out=out)

    @staticmethod
    def floor(x: np.ndarray, out: np.ndarray | None = None) -> None:
        """``out = floor(x)`` (in place without ``out``)."""
        np.floor(x, out=x if out is None else out)

    @staticmethod
    def ceil(x: np.ndarray, out: np.ndarray | None = None) -> None:
        """``out = ceil(x)`` (in place without ``out``)."""
        np.ceil(x, out=x if out is None else out)

    def clamp(self, x: np.ndarray, lo: float | None, hi: float | None) -> None:
        """``x = min(max(x, lo), hi)`` in place (no NaN here; torch's clamp is ~2x faster)."""
        if self.torch is not None:
            self._t(x).clamp_(min=lo, max=hi)
            return
        if lo is not None:
            np.maximum(x, np.float32(lo), out=x)
        if hi is not None:
            np.minimum(x, np.float32(hi), out=x)

    @staticmethod
    def copy(dst: np.ndarray, src: np.ndarray) -> None:
        """``dst[...] = src`` with conversion (float to integer truncates; values in range)."""
        np.copyto(dst, src, casting="unsafe")
