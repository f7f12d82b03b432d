r"""Dithered uniform scalar quantization (THEORY C5.1, C5.5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._rng import RNGLike
from .._validate import check_int_in_range
from ..bitpack import BitReader, BitWriter
from ._common import (
    DITHER_OFFSET,
    DitherStream,
    F32Ops,
    parse_range,
    range_bits,
    read_range,
    received_range,
    resolve_range,
    row_blocks,
    super_blocks,
    write_range,
)
from .base import Compressor, _shape_or_x, draw_seed, shape2d

__all__ = ["ScalarQuantizer"]

_F32_MAX_BITS = 8
"""float32 inputs with ``bits <= 8`` and dither use float32 kernels (see ``_quantize_f32``)."""


class ScalarQuantizer(Compressor):
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

    def __init__(
        self,
        bits: int,
        range: Any = "minmax-row",  # noqa: A002 - the issue's argument name
        dither: bool = True,
        out_of_range: str = "clip",
    ) -> None:
        self.bits = check_int_in_range(bits, "bits", 1, 16)
        self.range = parse_range(range)
        if not isinstance(dither, (bool, np.bool_)):
            raise TypeError(f"dither must be True or False, got {dither!r}")
        self.dither = bool(dither)
        if out_of_range not in ("clip", "raise"):
            raise ValueError(f"out_of_range must be 'clip' or 'raise', got {out_of_range!r}")
        self.out_of_range = out_of_range

    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        rng = self.range if isinstance(self.range, str) else list(self.range)
        return {
            "bits": self.bits,
            "range": rng,
            "dither": self.dither,
            "out_of_range": self.out_of_range,
        }

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
        _, a = _shape_or_x(x)
        if a is None:
            raise TypeError("steps needs the data x, not a shape")
        lo, hi, _, _, _ = resolve_range(a, self.range, "clip")
        return ((hi - lo) / (self.levels - 1)).ravel()

    def payload_bits(self, shape: tuple[int, ...]) -> int:
        """:math:`q B P` plus the transmitted range (C5.5)."""
        B, P = shape2d(shape)
        return self.bits * B * P + range_bits(self.range, B)

    # ---- error laws --------------------------------------------------------------------------
    def _row_steps(self, x_or_shape: Any, what: str) -> tuple[np.ndarray, int, np.ndarray | None]:
        """Per-row steps broadcast to B rows, P, and the data (or None)."""
        (B, P), a = _shape_or_x(x_or_shape)
        if a is None:
            if isinstance(self.range, str):
                raise ValueError(
                    f"{what} of a min-max quantizer depends on the data range: pass x, not a shape"
                )
            return np.full(B, self.step), P, None
        return np.broadcast_to(self.steps(a), (B,)), P, a

    def expected_error(self, x_or_shape: Any) -> float:
        r"""Exact :math:`\mathbb{E}\|C(x)-x\|_F^2` (C5.1); from the data for min-max or no dither.

        With dither: :math:`P\sum_b \Delta_b^2/12` plus the squared clipping distances.
        Without dither: the deterministic error measured on ``x``.
        """
        steps, P, a = self._row_steps(x_or_shape, "expected_error")
        if not self.dither:
            if a is None:
                raise ValueError("expected_error without dither is measured on x: pass x")
            out = self._decompress(*self._compress_np(a, None)[:2], a.shape)
            return float(np.sum((out - a.astype(np.float64)) ** 2))
        err = float(P * np.sum(steps**2) / 12.0)
        if a is not None and not isinstance(self.range, str):
            c = np.clip(a.astype(np.float64), *self.range) - a
            err += float(np.sum(c * c))
        return err

    def published_bound(self, x_or_shape: Any) -> float:
        r"""The paper's :math:`B P (h_{\max} - h_{\min})^2 2^{-2q} / 12` (summed over row ranges)."""
        steps, P, _ = self._row_steps(x_or_shape, "published_bound")
        spans = steps * (self.levels - 1)
        return float(P * np.sum(spans**2) * 2.0 ** (-2 * self.bits) / 12.0)

    # ---- kernels -----------------------------------------------------------------------------
    _checks_finite = True

    def _f32_compress_ok(self, a: np.ndarray, lo: np.ndarray, hi: np.ndarray, seed: Any) -> bool:
        """Whether :meth:`_quantize_f32` applies (see its docstring)."""
        if seed is None or a.dtype != np.float32 or self.bits > _F32_MAX_BITS:
            return False
        span = hi - lo
        with np.errstate(over="ignore"):
            lo32, hi32 = lo.astype(np.float32), hi.astype(np.float32)
            span32 = hi32 - lo32
            inv = np.divide(self.levels - 1, span, out=np.zeros_like(span), where=span > 0)
            inv32 = inv.astype(np.float32)
        return bool(
            np.all(lo32 == lo)
            and np.all(hi32 == hi)
            and np.isfinite(span32).all()
            and np.isfinite(inv32).all()
        )

    def _f32_decompress_ok(self, seed: Any, dtype: Any) -> bool:
        return seed is not None and np.dtype(dtype) == np.float32 and self.bits <= _F32_MAX_BITS

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
        self, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray, stream: DitherStream
    ) -> np.ndarray:
        r"""float32 reconstruction (three float32 roundings instead of one).

        :math:`\mathrm{fl}(\mathrm{fl}((k - f)\Delta) + lo + (\mathtt{DITHER\_OFFSET} +
        1/2)\Delta)`; see :meth:`_quantize_f32`.
        """
        _, _, step32, off32 = self._f32_consts(lo, hi)
        B, P = idx.shape
        per_row = lo.shape[0] > 1
        ops = F32Ops()
        out = np.empty((B, P), np.float32)
        for grp in super_blocks(B, P):
            r0, r1 = grp[0].start, grp[-1].stop
            rs = slice(r0, r1) if per_row else slice(0, 1)
            o = out[r0:r1]
            ops.copy(o, idx[r0:r1])
            f = stream.take_blocks(grp, P)
            self._dequantize_block(ops, o, f, step32[rs], off32[rs])
        return out

    def _compress_np(
        self, a: np.ndarray, seed: int | None, check_finite: bool = False
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        # t = (a - lo)/Delta in [0, L] (L = 2^q - 1), then k = floor(t + U - 1/2 + 1/2); with
        # U = f - DITHER_OFFSET this is floor(t + f - DITHER_OFFSET). In float64 the argument lies
        # in (0, L + 1): t <= L(1 + 3 eps) and f - DITHER_OFFSET <= 1 - 2^-24, so the floor
        # (a truncating cast, since the argument is positive) is always a valid level.
        lo, hi, sent, a, n_clip = resolve_range(a, self.range, self.out_of_range, check_finite)
        if seed is not None and self._f32_compress_ok(a, lo, hi, seed):
            idx = self._quantize_f32(a, lo, hi, DitherStream(seed))
            return {**sent, "idx": idx}, seed, n_clip
        top = self.levels - 1
        span = hi - lo
        inv = np.divide(top, span, out=np.zeros_like(span), where=span > 0)
        B, P = a.shape
        idx = np.empty((B, P), np.uint8 if self.bits <= 8 else np.uint16)
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
        return {**sent, "idx": idx}, seed, n_clip

    def _compress(
        self, a: np.ndarray, rng: RNGLike
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        return self._compress_np(a, draw_seed(rng) if self.dither else None, check_finite=True)

    def _roundtrip(self, a: np.ndarray, rng: RNGLike, dtype: np.dtype) -> np.ndarray:
        seed = draw_seed(rng) if self.dither else None
        lo, hi, _, a, _ = resolve_range(a, self.range, self.out_of_range, check_finite=True)
        if (
            seed is not None
            and self._f32_compress_ok(a, lo, hi, seed)
            and self._f32_decompress_ok(seed, dtype)
        ):
            # Fused: one dither draw per block for both sides (the minmax range is rounded to
            # float32 exactly as it is sent, so the receiver's lo/hi are these lo/hi).
            out = np.empty(a.shape, np.float32)
            self._quantize_f32(a, lo, hi, DitherStream(seed), out=out)
            return out
        data, seed, _ = self._compress_np(a, seed)
        return self._decompress(data, seed, a.shape, dtype)

    def _decompress(
        self,
        data: dict[str, np.ndarray],
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype | type = np.float64,
    ) -> np.ndarray:
        # x = lo + (k - (U - 1/2)) Delta = lo + (k - f + DITHER_OFFSET + 1/2) Delta
        B, P = shape
        lo, hi = received_range(self.range, data, B)
        if seed is not None and self._f32_decompress_ok(seed, dtype):
            return self._dequantize_f32(data["idx"], lo, hi, DitherStream(seed))
        step = (hi - lo) / (self.levels - 1)
        offset = lo + (DITHER_OFFSET + 0.5) * step if seed is not None else lo
        per_row = lo.shape[0] > 1
        out = np.empty(shape, dtype)
        stream = None if seed is None else DitherStream(seed)
        idx = data["idx"]
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

    def _write_payload(
        self, w: BitWriter, data: dict[str, np.ndarray], shape: tuple[int, int]
    ) -> None:
        write_range(w, self.range, data)
        w.write_uint(data["idx"].ravel(), self.bits)

    def _read_payload(self, r: BitReader, shape: tuple[int, int]) -> dict[str, np.ndarray]:
        data = read_range(r, self.range, shape[0])
        idx = r.read_uint(shape[0] * shape[1], self.bits).reshape(shape)
        data["idx"] = idx.astype(np.uint8 if self.bits <= 8 else np.uint16)
        return data
