r"""Dithered hexagonal (:math:`A_2`) lattice vector quantization (C5.2, C5.3, C5.5)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from .. import _kernels
from ..bitpack import BitReader
from ..lattice import SQRT3, A2BoxCodebook, codebook_tables
from . import _torch_kernels as tk
from ._common import range_bits
from .base import shape2d
from .quantizer import RangeQuantizer

__all__ = ["HexLatticeQuantizer"]


@lru_cache(maxsize=64)
def _kernel_codebook(cb: A2BoxCodebook) -> tuple[Any, ...]:
    """The codebook as the kernels take it: ``(a, lut, rows, width, i0, j0, pxy, size)``.

    ``pxy`` holds the codewords' coordinates interleaved, ``(x_0, y_0, x_1, y_1, ...)``: the
    reconstruction loads codeword ``k`` as one 16-byte pair.
    """
    lut, (j0, i0), px, py = codebook_tables(cb)
    return (
        cb.a,
        np.ascontiguousarray(lut, dtype=np.int32),
        int(lut.shape[0]),
        int(lut.shape[1]),
        float(i0),
        float(j0),
        np.ascontiguousarray(np.stack([px, py], axis=1), dtype=np.float64).ravel(),
        int(px.size),
    )


@lru_cache(maxsize=64)
def _reach(cb: A2BoxCodebook) -> float:
    """``1/2 + a +`` the largest codeword coordinate of the centred unit box."""
    t = _kernel_codebook(cb)
    return 0.5 + float(t[0]) + float(np.max(np.abs(t[6])))


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

    Kernel: one compiled pass per side in float64 arithmetic for every input dtype, rounded once
    to the output dtype (:mod:`cvfl_theory._kernels`). Pair :math:`p` of the row-major
    :math:`(B, \lceil P/2\rceil)` pair array takes the top 23 bits of the two 32-bit halves of
    word :math:`p` of the dither stream as :math:`(\alpha, \beta)`, midpoints of a
    :math:`2^{-23}` grid of the rhombus, and reduces :math:`z = \alpha b_1 + \beta b_2` to the
    Voronoi cell exactly, in integer arithmetic: the dither is uniform on :math:`2^{46}` points of
    the cell, whose second moment differs from the continuous one by a relative
    :math:`O(2^{-46})`. The nearest point is the exact two-coset search of
    :mod:`cvfl_theory.lattice`. ``roundtrip`` fuses the two sides and is bit-identical to
    ``decompress(compress(x))``. On the AVX2 kernel path, float32 rows in their own min-max
    range have their nearest points found in float32 first. A pair's float32 result is kept
    only where a proved error bound guarantees the float64 search makes the same decisions
    (both roundings and the coset choice); every other pair goes through the float64 search.
    Every path therefore sends the same indices.

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
    _has_torch_path = True
    _kernel_quantize = staticmethod(_kernels.hex_quantize)
    _kernel_dequantize = staticmethod(_kernels.hex_dequantize)

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
        return self._data_cells_of(x, "cell_areas")

    def payload_bits(self, shape: tuple[int, ...]) -> int:
        r""":math:`B\lceil P/2\rceil\lceil\log_2 N\rceil` plus the transmitted range."""
        B, P = shape2d(shape)
        return B * ((P + 1) // 2) * self.index_bits + range_bits(self.range, B)

    def _cell_length(self, span: float) -> float:
        return self.codebook.a * span

    # ---- error laws (cell parameter: the cell area) -------------------------------------------
    def _fixed_cell(self) -> float | None:
        return self.cell_area

    def _span_cells(self, spans: np.ndarray) -> np.ndarray:
        return self.codebook.cell_area * spans**2

    def expected_error(self, x_or_shape: Any) -> float:
        r"""Exact :math:`\mathbb{E}\|C(x) - x\|_F^2 = P\sum_b 5V_b/(36\sqrt3)` (+ clipping), C5.2.

        Without dither: the deterministic error measured on ``x``.
        """
        return super().expected_error(x_or_shape)

    def _row_law(self, cells: np.ndarray, P: int) -> np.ndarray:
        return P * cells * 5.0 / (36.0 * SQRT3)  # the hexagon's second moment per dimension

    def published_bound(self, x_or_shape: Any) -> float:
        r"""The paper's :math:`V B P / 24` (summed over rows when the cell area varies)."""
        areas, P, _ = self._row_cells(x_or_shape, "published_bound")
        return float(P * np.sum(areas) / 24.0)

    # ---- kernels -----------------------------------------------------------------------------
    @property
    def _index_bits(self) -> int:
        return self.index_bits

    def _index_shape(self, shape: tuple[int, int]) -> tuple[int, int]:
        return shape[0], (shape[1] + 1) // 2

    @property
    def _kernel_param(self) -> tuple[Any, ...]:
        return _kernel_codebook(self.codebook)

    def _reach(self) -> float:
        # y = (p - u) span + lo + span/2 with p a codeword of the centred unit box (the kernel
        # clamps indices into the codebook) and |u| <= a/sqrt3 < a (the Voronoi cell's radius).
        return _reach(self.codebook)

    def _torch_kernel_quantize(
        self, x: Any, lo: Any, hi: Any, seed: int | None, clamp: bool
    ) -> tuple[Any, Any, int]:
        return tk.hex_quantize(x, lo, hi, self._kernel_param, seed, clamp)

    def _torch_kernel_dequantize(
        self, k: Any, lo: Any, hi: Any, seed: int | None, shape: tuple[int, int], aux: Any
    ) -> Any:
        return tk.hex_dequantize(k, lo, hi, self._kernel_param, seed, shape[1], aux)

    def _read_payload(self, r: BitReader, shape: tuple[int, int]) -> dict[str, np.ndarray]:
        data = super()._read_payload(r, shape)
        if np.any(data["idx"] >= self.codebook_size):
            raise ValueError(f"corrupted codeword index: >= codebook size {self.codebook_size}")
        return data
