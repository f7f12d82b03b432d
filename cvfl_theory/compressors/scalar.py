r"""Dithered uniform scalar quantization (C5.1, C5.5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _kernels
from . import _torch_kernels as tk
from ._common import range_bits
from .base import shape2d
from .quantizer import RangeQuantizer

__all__ = ["ScalarQuantizer"]


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
    The dither is shared randomness: both sides generate it from a 64-bit seed carried in the
    header and counted as framing (see :mod:`cvfl_theory.compressors.base`). Entry :math:`e` of
    the row-major :math:`(B, P)` matrix uses :math:`U_e = (h_e + 1/2)\,2^{-32}` with :math:`h_e`
    the 32-bit half :math:`e \bmod 2` of word :math:`\lfloor e/2\rfloor` of the dither stream
    (``xoshiro256**`` on 16 lanes seeded by SplitMix64; see :mod:`cvfl_theory._kernels`), so
    the error is uniform on a grid of :math:`2^{32}` points of :math:`[-\Delta/2, \Delta/2]`,
    second moment :math:`\Delta^2(1 - 2^{-64})/12` (the difference is far below float64
    resolution). Without dither the error is deterministic and
    ``expected_error(x)`` returns the exact error measured on ``x``. Clipped entries add their
    squared clipping distance to the exact error (the dither noise has zero mean and is
    independent of it).

    Kernel: one compiled pass per side in float64 arithmetic for every input dtype, rounded once
    to the output dtype: :math:`t = (x - h_{\min})/\Delta`, :math:`k = \min(\lfloor t + U\rfloor,
    2^q - 1)`, reconstruction :math:`h_{\min} + (k + 1/2 - U)\Delta`. ``roundtrip`` fuses the two
    sides and is bit-identical to ``decompress(compress(x))``.

    References
    ----------
    1. Castiglia et al., Compressed-VFL, ICML 2022, Table (C5).
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
    _has_torch_path = True
    _kernel_quantize = staticmethod(_kernels.scalar_quantize)
    _kernel_dequantize = staticmethod(_kernels.scalar_dequantize)

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
        return self._data_cells_of(x, "steps")

    def payload_bits(self, shape: tuple[int, ...]) -> int:
        """:math:`q B P` plus the transmitted range (C5.5)."""
        B, P = shape2d(shape)
        return self.bits * B * P + range_bits(self.range, B)

    def _cell_length(self, span: float) -> float:
        return span / (self.levels - 1)

    # ---- error laws (cell parameter: the step) ------------------------------------------------
    def _fixed_cell(self) -> float | None:
        return self.step

    def _span_cells(self, spans: np.ndarray) -> np.ndarray:
        return spans / (self.levels - 1)

    def expected_error(self, x_or_shape: Any) -> float:
        r"""Exact :math:`\mathbb{E}\|C(x)-x\|_F^2` (C5.1); from the data for min-max or no dither.

        With dither: :math:`P\sum_b \Delta_b^2/12` plus the squared clipping distances.
        Without dither: the deterministic error measured on ``x``.
        """
        return super().expected_error(x_or_shape)

    def _row_law(self, cells: np.ndarray, P: int) -> np.ndarray:
        return P * cells**2 / 12.0  # uniform on a step

    def published_bound(self, x_or_shape: Any) -> float:
        r"""The paper's :math:`B P (h_{\max} - h_{\min})^2 2^{-2q} / 12` (summed over row ranges)."""
        steps, P, _ = self._row_cells(x_or_shape, "published_bound")
        spans = steps * (self.levels - 1)
        return float(P * np.sum(spans**2) * 2.0 ** (-2 * self.bits) / 12.0)

    # ---- kernels -----------------------------------------------------------------------------
    @property
    def _index_bits(self) -> int:
        return self.bits

    def _index_shape(self, shape: tuple[int, int]) -> tuple[int, int]:
        return shape

    @property
    def _kernel_param(self) -> int:
        return self.levels - 1

    def _reach(self) -> float:
        # y - lo = c Delta with c = k + 1/2 - U in (-1/2, k_max + 1/2) (or c = k without dither),
        # Delta = (hi - lo)/L, k at most the index dtype's largest value (the kernel does not clamp).
        return float(1 << 8 * np.dtype(self._index_dtype).itemsize) / (self.levels - 1)

    # ---- torch path (the same bits on any device) --------------------------------------------
    def _torch_kernel_quantize(
        self, x: Any, lo: Any, hi: Any, seed: int | None, clamp: bool
    ) -> tuple[Any, Any, int]:
        return tk.scalar_quantize(x, lo, hi, self.levels - 1, seed, clamp)

    def _torch_kernel_dequantize(
        self, k: Any, lo: Any, hi: Any, seed: int | None, shape: tuple[int, int], aux: Any
    ) -> Any:
        return tk.scalar_dequantize(k, lo, hi, self.levels - 1, seed, aux)
