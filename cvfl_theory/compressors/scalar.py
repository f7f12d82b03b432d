r"""Dithered uniform scalar quantization (THEORY C5.1, C5.5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import DITHER_OFFSET, DitherStream, F32Ops, range_bits, row_blocks, super_blocks
from .base import shape2d
from .quantizer import RangeQuantizer

__all__ = ["ScalarQuantizer"]

_F32_MAX_BITS = 8
"""float32 inputs with ``bits <= 8`` and dither use float32 kernels (see ``_quantize_f32``)."""


class ScalarQuantizer(RangeQuantizer):
    r"""Uniform scalar quantizer with :math:`2^q` levels and optional subtractive dither (C5.1).

    Levels are :math:`\ell_k = h_{\min} + k\Delta`, :math:`k = 0, \dots, 2^q - 1`, with step
    :math:`\Delta = (h_{\max} - h_{\min})/(2^q - 1)`. With dither :math:`u \sim U[-\Delta/2,
    \Delta/2]` shared by both sides, :math:`C(x) = Q_\Delta(x + u) - u`; since
    :math:`x + u \in [h_{\min} - \Delta/2, h_{\max} + \Delta/2]` the quantizer never overloads and
    the error is exactly uniform on :math:`[-\Delta/2, \Delta/2]`, independent of :math:`x`:

    .. math:: \mathbb{E}\|C(h) - h\|_F^2 = \sum_{\text{rows}} P \frac{\Delta^2}{12}
              = \frac{B P (h_{\max} - h_{\min})^2}{12 (2^q - 1)^2},

    larger than the published :math:`B P (h_{\max} - h_{\min})^2 2^{-2q}/12` by
    :math:`(2^q/(2^q-1))^2` (:math:`16/9 \approx 1.78` at :math:`q = 2`).

    Parameters
    ----------
    bits : int
        :math:`q`, bits per component, in ``[1, 16]``.
    range : (float, float) or {"minmax-row", "minmax-tensor"}
        A fixed range :math:`[h_{\min}, h_{\max}]`, or min-max scaling per row / per tensor
        (C5.5): the range is then sent as two float32 per row / per tensor and counted in the
        payload. It is rounded outwards to float32, so min-max modes never clip.
    dither : bool
        Subtractive dither (default) or deterministic rounding to the nearest level.
    out_of_range : {"clip", "raise"}
        With a fixed range, entries outside it are clipped to the range and counted in
        :attr:`Compressed.n_clipped` (``"clip"``, default), or refused with ``ValueError``.

    Notes
    -----
    Payload bits: :math:`q B P` plus 64 per row (``"minmax-row"``) or 64 (``"minmax-tensor"``).
    The dither is drawn from a 64-bit seed carried in the header and counted as framing (shared
    randomness; see :mod:`cvfl_theory.compressors.base`); its uniforms lie on a grid of
    :math:`2^{23}` equally spaced midpoints of :math:`(0, 1)` (so the error is uniform on the
    corresponding grid of :math:`[-\Delta/2, \Delta/2]`, second moment
    :math:`\Delta^2(1 - 2^{-46})/12`; the difference is below float64 resolution of the sum). Without dither the error is deterministic and ``expected_error(x)`` returns the
    exact error measured on ``x``. Clipped entries add their squared clipping distance to the
    exact error (the dither noise has zero mean and is independent of it).

    Precision: float16/float64 data, ``bits > 8`` and the deterministic quantizer use float64
    kernels (the result is rounded to the input dtype once, at the end). Dithered float32 data
    with ``bits <= 8`` (and a float32-representable range) uses float32 kernels: the same dither
    values and formulas, rounded to float32 at each step. The index can then differ from the
    float64 kernel's only for values within :math:`O(L\,2^{-24})\Delta` of a level boundary
    (about 1e-5 of the entries at ``bits = 8``), and the reconstruction by a few float32 ulps --
    the order of the rounding of the float32 output that both kernels incur, and far below what
    changes the error law (KS/second-moment tests run on both kernels). ``roundtrip`` is a fused
    kernel (one dither draw instead of one per side), bit-identical to ``decompress(compress(x))``.

    References
    ----------
    1. Castiglia et al., Compressed-VFL, ICML 2022, Table (THEORY C5).
    2. L. Schuchman, Dither signals and their effect on quantization noise, 1964.

    Examples
    --------
    >>> import numpy as np
    >>> q = ScalarQuantizer(2, range=(0.0, 3.0))
    >>> q.step, q.payload_bits((4, 10)), q.expected_error((4, 10))
    (1.0, 80, 3.3333333333333335)
    >>> round(q.expected_error((4, 10)) / q.published_bound((4, 10)), 4)
    1.7778
    """

    name = "scalar"
    _max_bits = 16
    _f32_max_bits = _F32_MAX_BITS

    @property
    def levels(self) -> int:
        """Number of levels :math:`2^q`."""
        return 1 << self.bits

    @property
    def step(self) -> float | None:
        r"""Step :math:`\Delta = (h_{\max} - h_{\min})/(2^q - 1)` for a fixed range, else ``None``.

        In the min-max modes the step depends on the data: see :meth:`steps`.
        """
        if isinstance(self.range, str):
            return None
        return (self.range[1] - self.range[0]) / (self.levels - 1)

    def steps(self, x: Any) -> np.ndarray:
        """Steps actually used for ``x``: one per row (``minmax-row``) or a single one."""
        return (self._data_spans(x, "steps") / (self.levels - 1)).ravel()

    def payload_bits(self, shape: tuple[int, ...]) -> int:
        """:math:`q B P` plus the transmitted range (C5.5)."""
        B, P = shape2d(shape)
        return self.bits * B * P + range_bits(self.range, B)

    # ---- error laws (cell parameter: the step) ------------------------------------------------
    def _fixed_cell(self) -> float | None:
        return self.step

    def _data_cells(self, a: np.ndarray) -> np.ndarray:
        return self.steps(a)

    def expected_error(self, x_or_shape: Any) -> float:
        r"""Exact :math:`\mathbb{E}\|C(x)-x\|_F^2` (C5.1); from the data for min-max or no dither.

        With dither: :math:`P\sum_b \Delta_b^2/12` plus the squared clipping distances.
        Without dither: the deterministic error measured on ``x``.
        """
        return self._error_law(x_or_shape, lambda steps, P: float(P * np.sum(steps**2) / 12.0))

    def published_bound(self, x_or_shape: Any) -> float:
        r"""The paper's :math:`B P (h_{\max} - h_{\min})^2 2^{-2q} / 12` (summed over row ranges)."""
        steps, P, _ = self._row_cells(x_or_shape, "published_bound")
        spans = steps * (self.levels - 1)
        return float(P * np.sum(spans**2) * 2.0 ** (-2 * self.bits) / 12.0)

    # ---- kernels -----------------------------------------------------------------------------
    @property
    def _unit_scale(self) -> float:
        return self.levels - 1  # t = (a - lo)/Delta in [0, L]

    @property
    def _index_bits(self) -> int:
        return self.bits

    def _index_shape(self, shape: tuple[int, int]) -> tuple[int, int]:
        return shape

    def _f32_consts(
        self, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """float32 ``(lo, 1/Delta, Delta, lo + (DITHER_OFFSET + 1/2) Delta)`` per row."""
        top = self.levels - 1
        span = hi - lo
        inv = np.divide(top, span, out=np.zeros_like(span), where=span > 0)
        step = span / top
        offset = lo + (DITHER_OFFSET + 0.5) * step
        return (
            lo.astype(np.float32),
            inv.astype(np.float32),
            step.astype(np.float32),
            offset.astype(np.float32),
        )

    def _quantize_f32(
        self,
        a: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        stream: DitherStream,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        r"""Dithered indices of float32 ``a`` in float32 arithmetic.

        With ``out``, the reconstruction instead, exactly as :meth:`_dequantize_f32` computes it
        (a fused roundtrip).

        :math:`k = \min(\lfloor \tilde t + f \rfloor, L + 1) - 1` with :math:`\tilde t =
        \mathrm{fl}(\mathrm{fl}(a - lo) / \Delta)` and the dither :math:`f \in [1, 2)`, i.e.
        :math:`k = \lfloor \tilde t + U \rfloor` (``U = f - DITHER_OFFSET``) except when the
        float32 sum :math:`\tilde t + f` rounds up onto an integer. Both deviations from the
        float64 kernel (the rounding of :math:`\tilde t` and of the sum) are at most a few units
        in the last place of :math:`\tilde t \le L`, i.e. :math:`O(L\,2^{-24})` in units of
        :math:`\Delta` -- the same order as the unavoidable rounding of the float32 output, which
        is why this path is used only for float32 data and ``bits <= 8`` (the level arithmetic
        stays exact: :math:`\tilde t \ge 0` and the clamp keeps :math:`0 \le k \le L`). The
        dither values are those of the float64 kernel, so the payload differs from it only in
        the rare indices where the two roundings disagree.
        """
        lo32, inv32, step32, off32 = self._f32_consts(lo, hi)
        cap = float(self.levels)  # L + 1
        u8_clamp = self.levels + 1 <= 255  # floor(t) <= L + 2 fits in uint8: clamp after the cast
        B, P = a.shape
        per_row = lo.shape[0] > 1
        ops = F32Ops()
        idx = np.empty((B, P) if out is None else (0, 0), np.uint8)
        for grp in super_blocks(B, P):
            r0, r1 = grp[0].start, grp[-1].stop
            rs = slice(r0, r1) if per_row else slice(0, 1)
            f = stream.take_blocks(grp, P)
            t = out[r0:r1] if out is not None else np.empty((r1 - r0, P), np.float32)
            ops.sub(a[r0:r1], lo32[rs], out=t)
            ops.mul(t, inv32[rs], out=t)
            ops.add(t, f, out=t)  # in [1, L + 2]
            if out is None:
                if not u8_clamp:
                    ops.clamp(t, None, cap)
                ops.copy(idx[r0:r1], t)  # truncation = floor (t >= 1)
            else:
                ops.clamp(t, None, cap)
                ops.floor(t)
                ops.add(t, -1.0, out=t)  # float32(k): what _dequantize_f32 starts from
                self._dequantize_block(ops, t, f, step32[rs], off32[rs])
        if out is None:
            idx -= np.uint8(1)
            if u8_clamp:  # min(floor(t), L + 1) - 1 == min(floor(t) - 1, L), cheaper on uint8
                np.minimum(idx, np.uint8(self.levels - 1), out=idx)
        return idx

    @staticmethod
    def _dequantize_block(ops: F32Ops, k: Any, f: Any, step: Any, offset: Any) -> None:
        """``k <- (k - f) * step + offset`` in place (float32)."""
        ops.sub(k, f, out=k)
        ops.mul(k, step, out=k)
        ops.add(k, offset, out=k)

    def _dequantize_f32(
        self, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray, stream: DitherStream, out: np.ndarray
    ) -> None:
        r"""float32 reconstruction into ``out`` (three float32 roundings instead of one).

        :math:`\mathrm{fl}(\mathrm{fl}((k - f)\Delta) + lo + (\mathtt{DITHER\_OFFSET} +
        1/2)\Delta)`; see :meth:`_quantize_f32`.
        """
        _, _, step32, off32 = self._f32_consts(lo, hi)
        B, P = idx.shape
        per_row = lo.shape[0] > 1
        ops = F32Ops()
        for grp in super_blocks(B, P):
            r0, r1 = grp[0].start, grp[-1].stop
            rs = slice(r0, r1) if per_row else slice(0, 1)
            o = out[r0:r1]
            ops.copy(o, idx[r0:r1])
            f = stream.take_blocks(grp, P)
            self._dequantize_block(ops, o, f, step32[rs], off32[rs])

    def _compress_f64(
        self, a: np.ndarray, lo: np.ndarray, hi: np.ndarray, seed: int | None
    ) -> np.ndarray:
        # t = (a - lo)/Delta in [0, L] (L = 2^q - 1), then k = floor(t + U - 1/2 + 1/2); with
        # U = f - DITHER_OFFSET this is floor(t + f - DITHER_OFFSET). In float64 the argument lies
        # in (0, L + 1): t <= L(1 + 3 eps) and f - DITHER_OFFSET <= 1 - 2^-24, so the floor
        # (a truncating cast, since the argument is positive) is always a valid level.
        top = self.levels - 1
        span = hi - lo
        inv = np.divide(top, span, out=np.zeros_like(span), where=span > 0)
        B, P = a.shape
        idx = np.empty((B, P), self._index_dtype)
        stream = None if seed is None else DitherStream(seed)
        per_row = lo.shape[0] > 1
        blocks = row_blocks(B, P)
        buf = np.empty((blocks[0].stop - blocks[0].start, P))
        shift = -DITHER_OFFSET if stream is not None else 0.5
        for sl in blocks:
            t = buf[: sl.stop - sl.start]
            np.subtract(a[sl], lo[sl] if per_row else lo, out=t)
            t *= inv[sl] if per_row else inv
            if stream is not None:
                t += stream.take(t.shape)
            t += shift
            idx[sl] = t
        return idx

    def _decompress_f64(
        self,
        idx: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype | type,
    ) -> np.ndarray:
        # x = lo + (k - (U - 1/2)) Delta = lo + (k - f + DITHER_OFFSET + 1/2) Delta
        B, P = shape
        step = (hi - lo) / (self.levels - 1)
        offset = lo + (DITHER_OFFSET + 0.5) * step if seed is not None else lo
        per_row = lo.shape[0] > 1
        out = np.empty(shape, dtype)
        stream = None if seed is None else DitherStream(seed)
        blocks = row_blocks(B, P)
        buf = np.empty((blocks[0].stop - blocks[0].start, P))
        for sl in blocks:
            t = buf[: sl.stop - sl.start]
            t[...] = idx[sl]
            if stream is not None:
                t -= stream.take(t.shape)
            t *= step[sl] if per_row else step
            t += offset[sl] if per_row else offset
            out[sl] = t
        return out
