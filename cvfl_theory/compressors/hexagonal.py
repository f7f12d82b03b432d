r"""Dithered hexagonal (:math:`A_2`) lattice vector quantization (THEORY C5.2, C5.3, C5.5)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..bitpack import BitReader
from ..lattice import SQRT3, A2BoxCodebook, _tables, nearest_scaled_inplace, voronoi_dither
from ._common import DITHER_OFFSET, DitherStream, F32Ops, range_bits, row_blocks, super_blocks
from .base import shape2d
from .quantizer import RangeQuantizer

__all__ = ["HexLatticeQuantizer"]


@dataclass(frozen=True)
class _F32Tables:
    """Constants of the float32 kernels for one codebook (see ``_f32_tables``)."""

    lut: np.ndarray  # flat (rows * width) codeword index table, the payload's index dtype
    width: int  # columns of the 2-D table (i - i0)
    nrows: int  # rows of the 2-D table (j - j0)
    i0: float
    j0: float
    px: np.ndarray  # float32 codeword coordinates (unit box centred at 0)
    py: np.ndarray


@lru_cache(maxsize=64)
def _f32_tables(cb: A2BoxCodebook) -> _F32Tables:
    lut, (j0, i0), px, py = _tables(cb)
    dt = np.uint8 if cb.index_bits <= 8 else np.uint16
    return _F32Tables(
        lut=lut.ravel().astype(dt),
        width=int(lut.shape[1]),
        nrows=int(lut.shape[0]),
        i0=float(i0),
        j0=float(j0),
        px=px.astype(np.float32),
        py=py.astype(np.float32),
    )


def _uniform_groups(B: int, P: int) -> list[list[slice]]:
    """:func:`super_blocks` split so that every group's row blocks have the same height."""
    groups = []
    for grp in super_blocks(B, P):
        heights = [sl.stop - sl.start for sl in grp]
        if len(set(heights)) > 1:
            groups += [grp[:-1], grp[-1:]]
        else:
            groups.append(grp)
    return groups


class HexLatticeQuantizer(RangeQuantizer):
    r"""Hexagonal-lattice quantizer of component pairs with subtractive dither (C5.2, C5.3).

    Each row is scaled to the unit box (by its range, C5.5), split into pairs
    :math:`(h_{2i}, h_{2i+1})`, and every pair is quantized to the :math:`A_2` lattice
    :math:`\Lambda_a` of :mod:`cvfl_theory.lattice`. The dither :math:`u = z - Q(z)` with
    :math:`z` uniform in the fundamental parallelogram is uniform over the Voronoi cell, and
    :math:`C(x) = Q(x + u) - u`. The error :math:`C(x) - x` is uniform on the cell, independent
    of :math:`x`:

    .. math:: \mathbb{E}\|C(h) - h\|_F^2 = \sum_{\text{rows}} P \frac{5 V_b}{36\sqrt3}
              \approx 0.0802\, V B P,

    where :math:`V_b` is the cell area for row :math:`b` in data units. The paper's table gives
    :math:`V B P / 24 \approx 0.0417\, V B P`: the exact value is :math:`\frac{10}{3\sqrt3}
    \approx 1.92` times larger.

    Parameters
    ----------
    bits : int
        Bits per component, in ``[1, 8]``: a pair gets at most :math:`2^{2\,\mathrm{bits}}`
        codewords. With dither, ``bits = 1`` is refused (the dithered quantizer, lattice centred
        on the box, needs at least 7 codewords per pair, see
        :meth:`cvfl_theory.lattice.A2BoxCodebook.for_bits`).
    range : (float, float) or {"minmax-row", "minmax-tensor"}
        As for :class:`~cvfl_theory.compressors.ScalarQuantizer` (range sent and counted in
        the min-max modes).
    dither : bool
        Subtractive dither (default) or plain nearest-point quantization (error measured on x).
    out_of_range : {"clip", "raise"}
        Fixed range only: clip into the range and count in :attr:`Compressed.n_clipped`, or
        raise ``ValueError``.

    Notes
    -----
    The cell area is the smallest for which the codewords reachable from the dither-widened box,
    :math:`\Lambda_a \cap (R \oplus 2V_0)`, number at most :math:`2^{2\,\mathrm{bits}}`,
    counted exactly (C5.3); codeword indices are packed in
    :math:`\lceil\log_2(\text{codebook size})\rceil \le 2\,\mathrm{bits}` bits. An odd ``P`` is
    padded by one component (the box centre), whose index bits are counted; its error is
    discarded, and each real component carries exactly half the pair's second moment (the hexagon's
    covariance is isotropic). Payload bits: :math:`B \lceil P/2 \rceil \lceil \log_2 N \rceil`
    plus the transmitted range. The dither seed is framing (shared randomness).

    Precision: dithered float32 data (with a float32-representable range) uses a float32 kernel
    in lattice coordinates (``_kernel_f32``): the same dither values as the float64 kernel used
    for float16/float64 data and without dither; indices differ only for points within float32
    rounding of a Voronoi-cell boundary (about 1e-5 of the pairs at ``bits = 8``, none at low
    rates in practice) and the reconstruction by a few float32 ulps, far below what changes the
    error law (the KS and second-moment tests run on both kernels). ``roundtrip`` is a fused
    kernel (one dither draw instead of one per side), bit-identical to ``decompress(compress(x))``.

    At the low rates of the paper the codewords spent on the dither margin
    (:math:`R \oplus 2V_0` is much larger than :math:`R`) cost more than the lattice's
    space-filling gain: per component, the exact error is 3.50, 1.56, 1.11, 1.09, 1.02 times the
    dithered scalar quantizer's at ``bits`` = 2, 3, 4, 5, 6 on the same range, and only from
    ``bits = 7`` is it smaller (0.978; the asymptotic ratio is :math:`G(A_2)/G(\mathbb{Z}) =
    5/(3\sqrt3) \approx 0.962`).

    References
    ----------
    1. J. H. Conway and N. J. A. Sloane, *Sphere Packings, Lattices and Groups*, ch. 2, 20.
    2. R. Zamir and M. Feder, On universal quantization by randomized uniform/lattice
       quantizers, IEEE Trans. Inf. Theory 38 (1992).

    Examples
    --------
    >>> q = HexLatticeQuantizer(3, range=(-1.0, 1.0))
    >>> q.codebook_size <= 64, q.payload_bits((2, 5))
    (True, 36)
    >>> round(q.expected_error((2, 5)) / q.published_bound((2, 5)), 4)
    1.9245
    """

    name = "hex"
    _max_bits = 8
    _f32_max_bits = 8  # every rate: the float32 kernel works in lattice coordinates

    def _setup(self) -> None:
        self.codebook = A2BoxCodebook.for_bits(self.bits, self.dither)

    @property
    def codebook_size(self) -> int:
        r"""Number of codewords per pair (:math:`\le 2^{2\,\mathrm{bits}}`)."""
        return self.codebook.size

    @property
    def index_bits(self) -> int:
        r"""Bits per pair, :math:`\lceil\log_2(\text{codebook size})\rceil`."""
        return self.codebook.index_bits

    @property
    def cell_area(self) -> float | None:
        """Cell area :math:`V` in data units for a fixed range, else ``None`` (see :meth:`cell_areas`)."""
        if isinstance(self.range, str):
            return None
        span = self.range[1] - self.range[0]
        return self.codebook.cell_area * span * span

    def cell_areas(self, x: Any) -> np.ndarray:
        """Cell areas used for ``x``: one per row (``minmax-row``) or a single one."""
        return (self.codebook.cell_area * self._data_spans(x, "cell_areas") ** 2).ravel()

    def payload_bits(self, shape: tuple[int, ...]) -> int:
        r""":math:`B\lceil P/2\rceil\lceil\log_2 N\rceil` plus the transmitted range."""
        B, P = shape2d(shape)
        return B * ((P + 1) // 2) * self.index_bits + range_bits(self.range, B)

    # ---- error laws (cell parameter: the cell area) -------------------------------------------
    def _fixed_cell(self) -> float | None:
        return self.cell_area

    def _data_cells(self, a: np.ndarray) -> np.ndarray:
        return self.cell_areas(a)

    def expected_error(self, x_or_shape: Any) -> float:
        r"""Exact :math:`\mathbb{E}\|C(x) - x\|_F^2 = P\sum_b 5V_b/(36\sqrt3)` (+ clipping), C5.2.

        Without dither: the deterministic error measured on ``x``.
        """
        return self._error_law(
            x_or_shape, lambda areas, P: float(P * np.sum(areas) * 5.0 / (36.0 * SQRT3))
        )

    def published_bound(self, x_or_shape: Any) -> float:
        r"""The paper's :math:`V B P / 24` (summed over rows when the cell area varies)."""
        areas, P, _ = self._row_cells(x_or_shape, "published_bound")
        return float(P * np.sum(areas) / 24.0)

    # ---- kernels -----------------------------------------------------------------------------
    def _dither(
        self, stream: DitherStream, rows: int, npairs: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Dither ``u = z - Q(z)``, uniform on the Voronoi cell (normalised units), C5.2."""
        ab = stream.take((2, rows, npairs)).astype(np.float64)
        ab -= DITHER_OFFSET
        return voronoi_dither(ab[0], ab[1], self.codebook.a)

    _unit_scale = 1.0  # the unit box

    @property
    def _index_bits(self) -> int:
        return self.index_bits

    def _index_shape(self, shape: tuple[int, int]) -> tuple[int, int]:
        return shape[0], (shape[1] + 1) // 2

    @staticmethod
    def _dither_f32(
        ops: F32Ops,
        stream: DitherStream,
        nb: int,
        rb: int,
        npairs: int,
        g: np.ndarray,
        c: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        r"""Lattice coordinates :math:`(u_1, u_2)` of the dither :math:`u = z - Q(z)`.

        float32, shape ``(nb, rb, npairs)`` (``nb`` row blocks of ``rb`` rows; the stream is drawn
        as in the float64 kernel: ``(2, rb, npairs)`` per block); ``g`` and ``c`` are scratch
        buffers of that shape. :math:`z = \alpha b_1 + \beta b_2` with :math:`\alpha, \beta`
        the exact float32 uniforms ``f - DITHER_OFFSET``; :math:`Q(z)` is the corner of the
        rhombus nearest to :math:`z` (:meth:`_nearest_f32` with :math:`n = 0`).
        """
        ab = stream.take((nb, 2, rb, npairs))
        ops.sub(ab, np.float32(DITHER_OFFSET), out=ab)  # exact (Sterbenz)
        al, be = ab[:, 0], ab[:, 1]
        ops.sub(al, be, out=g)
        ops.ceil(g)
        ops.add(be, g, out=c)
        ops.mul(c, np.float32(0.5), out=c)
        ops.add(c, al, out=c)
        ops.floor(c)  # c1
        ops.sub(al, g, out=g)
        ops.add(g, np.float32(1.0), out=g)
        ops.mul(g, np.float32(0.5), out=g)
        ops.add(g, be, out=g)
        ops.floor(g)  # c2
        ops.sub(al, c, out=al)
        ops.sub(be, g, out=be)
        return al, be

    @staticmethod
    def _nearest_f32(
        ops: F32Ops, v1: np.ndarray, v2: np.ndarray, f1: np.ndarray, f2: np.ndarray, g: np.ndarray
    ) -> None:
        r"""Nearest :math:`A_2` point in lattice coordinates, in place: ``(v1, v2) <- Q(v)``.

        With :math:`n = \lfloor v \rfloor`, :math:`f = v - n` the point lies in the rhombus
        :math:`n + [0, 1)^2` (two equilateral triangles), whose nearest corner is
        :math:`n + c(f)`: :math:`c_1 = \lfloor f_1 + (f_2 + g)/2 \rfloor`, :math:`c_2 =
        \lfloor f_2 + (f_1 + 1 - g)/2 \rfloor` with :math:`g = \lceil f_1 - f_2 \rceil =
        [f_1 > f_2]` (the corner 0 wins iff :math:`2f_1 + f_2 < 1` and :math:`f_1 + 2f_2 < 1`,
        :math:`b_1 + b_2` iff both exceed 2, else :math:`b_1` iff :math:`f_1 > f_2`). So
        :math:`Q_1 = \lfloor v_1 + (f_2 + g)/2 \rfloor`, :math:`Q_2 = \lfloor v_2 + (f_1 + 1 -
        g)/2 \rfloor`. Exact up to float32 rounding of points within an ulp of a cell boundary.
        ``f1``, ``f2``, ``g`` are scratch buffers.
        """
        half = np.float32(0.5)
        ops.floor(v1, out=f1)
        ops.sub(v1, f1, out=f1)
        ops.floor(v2, out=f2)
        ops.sub(v2, f2, out=f2)
        ops.sub(f1, f2, out=g)
        ops.ceil(g)
        ops.add(f2, g, out=f2)
        ops.mul(f2, half, out=f2)
        ops.add(v1, f2, out=v1)
        ops.floor(v1)
        ops.sub(f1, g, out=f1)
        ops.add(f1, np.float32(1.0), out=f1)
        ops.mul(f1, half, out=f1)
        ops.add(v2, f1, out=v2)
        ops.floor(v2)

    def _kernel_f32(
        self,
        lo: np.ndarray,
        hi: np.ndarray,
        stream: DitherStream,
        shape: tuple[int, int],
        a: np.ndarray | None = None,
        idx: np.ndarray | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        r"""float32 kernel: compress, decompress or both fused.

        ``a`` given: compute the indices (returned); ``out`` given: write the reconstruction of
        ``idx`` (or of the indices just computed from ``a``: the fused roundtrip) into it.

        Works in lattice coordinates: a centred unit-box pair :math:`(x, y)` has coordinates
        :math:`w_2 = 2y/(\sqrt3 a)`, :math:`w_1 = x/a - w_2/2` in the basis :math:`b_1, b_2`;
        the codeword is :math:`Q(w + u)` (:meth:`_nearest_f32`, computed shifted by the table
        origin ``(i0, j0)``, an integer vector, so that it indexes the lookup table directly) and
        the reconstruction is the codeword minus the dither, in Cartesian coordinates, as in the
        float64 kernel. The dither values are the float64 kernel's (same stream, exactly the same
        uniforms); the indices and the float32 output may differ from it only through float32
        rounding (points within an ulp of a cell boundary; the last bits of the output).
        """
        tb = _f32_tables(self.codebook)
        la = self.codebook.a
        ops = F32Ops()
        B, P = shape
        npairs, half = (P + 1) // 2, P // 2
        per_row = lo.shape[0] > 1
        span = hi - lo
        inv = np.divide(1.0, span, out=np.zeros_like(span), where=span > 0)
        f32 = np.float32
        lo32 = lo.astype(f32)
        ke = (inv / la).astype(f32)
        ko = (inv * (2.0 / (la * SQRT3))).astype(f32)
        c_o = f32(-1.0 / (la * SQRT3) - tb.j0)  # w2 - j0 = t_o * ko + c_o
        c_e = f32(-0.5 / la - 0.5 * tb.j0 - tb.i0)  # w1 - i0 = t_e * ke - (w2 - j0)/2 + c_e
        pad = f32(-tb.j0)  # w2 - j0 of the padding component (the box centre: w2 = 0)
        sp32 = span.astype(f32)
        mid32 = (lo + 0.5 * span).astype(f32)
        ax, ay = f32(la), f32(la * SQRT3 / 2.0)
        if idx is None:
            idx = np.empty((B, npairs), tb.lut.dtype)
        groups = _uniform_groups(B, P)
        rmax = max(grp[-1].stop - grp[0].start for grp in groups)
        bufs = np.empty((6, rmax * npairs), f32)
        flat = np.empty(rmax * npairs, np.intp)
        for grp in groups:
            nb, rb = len(grp), grp[0].stop - grp[0].start
            r0, r1 = grp[0].start, grp[-1].stop
            R = r1 - r0
            rs = slice(r0, r1) if per_row else slice(0, 1)
            X, Y, T1, T2, T3, T4 = (b[: R * npairs].reshape(R, npairs) for b in bufs)
            X3, Y3, T13, T23, T33, T43 = (v.reshape(nb, rb, npairs) for v in (X, Y, T1, T2, T3, T4))
            u1, u2 = self._dither_f32(ops, stream, nb, rb, npairs, T13, T23)
            if a is not None:
                blk = a[r0:r1]
                np.copyto(X, blk[:, 0::2])
                np.copyto(Y[:, :half], blk[:, 1::2])
                ops.sub(Y[:, :half], lo32[rs], out=Y[:, :half])
                ops.mul(Y[:, :half], ko[rs], out=Y[:, :half])
                ops.add(Y[:, :half], c_o, out=Y[:, :half])
                if half < npairs:
                    Y[:, half:] = pad
                ops.sub(X, lo32[rs], out=X)
                ops.mul(X, ke[rs], out=X)
                ops.mul(Y, f32(0.5), out=T1)
                ops.sub(X, T1, out=X)
                ops.add(X, c_e, out=X)
                ops.add(X3, u1, out=X3)
                ops.add(Y3, u2, out=Y3)
                self._nearest_f32(ops, X3, Y3, T13, T23, T33)
                ops.clamp(X, 0.0, float(tb.width - 1))
                ops.clamp(Y, 0.0, float(tb.nrows - 1))
                ops.mul(Y, f32(tb.width), out=Y)
                ops.add(Y, X, out=Y)
                fl = flat[: R * npairs].reshape(R, npairs)
                ops.copy(fl, Y)
                np.take(tb.lut, fl, out=idx[r0:r1], mode="clip")
            if out is None:
                continue
            # reconstruction: codeword - u (Cartesian, centred unit box), then data units
            k = idx[r0:r1]
            np.take(tb.px, k, out=X)
            np.take(tb.py, k, out=Y)
            ops.mul(u2, f32(0.5), out=T43)
            ops.add(u1, T43, out=u1)
            ops.mul(u1, ax, out=u1)
            ops.mul(u2, ay, out=u2)
            ops.sub(X3, u1, out=X3)
            ops.sub(Y3, u2, out=Y3)
            ops.mul(X, sp32[rs], out=X)
            ops.add(X, mid32[rs], out=X)
            ops.mul(Y[:, :half], sp32[rs], out=Y[:, :half])
            ops.add(Y[:, :half], mid32[rs], out=Y[:, :half])
            ob = out[r0:r1]
            np.copyto(ob[:, 0::2], X)
            np.copyto(ob[:, 1::2], Y[:, :half])
        return idx

    def _quantize_f32(
        self,
        a: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        stream: DitherStream,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        return self._kernel_f32(lo, hi, stream, a.shape, a=a, out=out)

    def _dequantize_f32(
        self, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray, stream: DitherStream, out: np.ndarray
    ) -> None:
        self._kernel_f32(lo, hi, stream, out.shape, idx=idx, out=out)

    def _compress_f64(
        self,
        a: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        seed: int | None,
    ) -> np.ndarray:
        span = hi - lo
        inv = np.divide(1.0, span, out=np.zeros_like(span), where=span > 0)
        B, P = a.shape
        npairs = (P + 1) // 2
        per_row = lo.shape[0] > 1
        stream = None if seed is None else DitherStream(seed)
        la = self.codebook.a
        idx = np.empty((B, npairs), self._index_dtype)
        for sl in row_blocks(B, P):
            rows = sl.stop - sl.start
            t = np.empty((rows, 2 * npairs))
            t[:, :P] = a[sl]
            t[:, :P] -= lo[sl] if per_row else lo
            t[:, :P] *= inv[sl] if per_row else inv
            t[:, P:] = 0.5  # padding component: the box centre
            t -= 0.5  # unit box centred at the origin
            X = t[:, 0::2]
            Y = t[:, 1::2]
            if stream is not None:
                ux, uy = self._dither(stream, rows, npairs)
                ux += X
                uy += Y
                X, Y = ux, uy
            else:
                X = X.copy()
                Y = Y.copy()
            X *= 1.0 / la
            Y *= 1.0 / (la * SQRT3)
            i, j = nearest_scaled_inplace(X, Y)
            idx[sl] = self.codebook.index_of(i, j)
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
        B, P = shape
        span = hi - lo
        offset = lo + 0.5 * span
        per_row = lo.shape[0] > 1
        px, py = _tables(self.codebook)[2:]
        npairs = idx.shape[1]
        stream = None if seed is None else DitherStream(seed)
        out = np.empty(shape, dtype)
        for sl in row_blocks(B, P):
            rows = sl.stop - sl.start
            k = idx[sl].astype(np.intp)
            t = np.empty((rows, 2 * npairs))
            np.take(px, k, out=t[:, 0::2])
            np.take(py, k, out=t[:, 1::2])
            if stream is not None:
                ux, uy = self._dither(stream, rows, npairs)
                t[:, 0::2] -= ux
                t[:, 1::2] -= uy
            body = t[:, :P]
            body *= span[sl] if per_row else span
            body += offset[sl] if per_row else offset
            out[sl] = body
        return out

    def _read_payload(self, r: BitReader, shape: tuple[int, int]) -> dict[str, np.ndarray]:
        data = super()._read_payload(r, shape)
        if np.any(data["idx"] >= self.codebook_size):
            raise ValueError(f"corrupted codeword index: >= codebook size {self.codebook_size}")
        return data
