r"""What the dithered range quantizers share (THEORY C5.1, C5.2, C5.5).

:class:`RangeQuantizer` is the base of :class:`~cvfl_theory.compressors.ScalarQuantizer` and
:class:`~cvfl_theory.compressors.HexLatticeQuantizer`: the constructor arguments ``(bits, range,
dither, out_of_range)``, the fixed or min-max range (sent in the payload in the min-max modes,
C5.5) with the codeword indices after it, the per-row *cell parameter* their exact error laws are
written in (the step :math:`\Delta_b`, the cell area :math:`V_b`), and the dispatch between the
float32 kernels (dithered float32 data) and the float64 ones.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from .._rng import RNGLike
from .._validate import check_int_in_range
from ..bitpack import BitReader, BitWriter
from ._common import (
    DitherStream,
    parse_range,
    read_range,
    received_range,
    resolve_range,
    write_range,
)
from .base import Compressor, _shape_or_x, draw_seed

__all__ = ["RangeQuantizer"]


class RangeQuantizer(Compressor):
    """Base of the quantizers of a fixed or min-max range with optional subtractive dither.

    Subclasses set :attr:`_max_bits` and :attr:`_f32_max_bits` and implement the hooks: the cell
    parameter (``_fixed_cell``, ``_data_cells``), the index layout (``_index_bits``,
    ``_index_shape``) and the kernels (``_quantize_f32``, ``_dequantize_f32``, ``_compress_f64``,
    ``_decompress_f64``). The payload is the range fields of C5.5 followed by the codeword
    indices, ``_index_bits`` bits each.
    """

    _max_bits: ClassVar[int]
    """Largest accepted ``bits``."""
    _f32_max_bits: ClassVar[int]
    """Dithered float32 data uses the float32 kernels only for ``bits`` up to this."""
    _checks_finite = True

    def __init__(
        self,
        bits: int,
        range: Any = "minmax-row",  # noqa: A002 - the issue's argument name
        dither: bool = True,
        out_of_range: str = "clip",
    ) -> None:
        self.bits = check_int_in_range(bits, "bits", 1, self._max_bits)
        self.range = parse_range(range)
        if not isinstance(dither, (bool, np.bool_)):
            raise TypeError(f"dither must be True or False, got {dither!r}")
        self.dither = bool(dither)
        if out_of_range not in ("clip", "raise"):
            raise ValueError(f"out_of_range must be 'clip' or 'raise', got {out_of_range!r}")
        self.out_of_range = out_of_range
        self._setup()

    def _setup(self) -> None:
        """Build what derives from the validated arguments (e.g. a codebook); may raise."""

    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        rng = self.range if isinstance(self.range, str) else list(self.range)
        return {
            "bits": self.bits,
            "range": rng,
            "dither": self.dither,
            "out_of_range": self.out_of_range,
        }

    # ---- cell parameter and error laws -------------------------------------------------------
    @abstractmethod
    def _fixed_cell(self) -> float | None:
        """The cell parameter of a fixed range (``None`` in the min-max modes)."""

    @abstractmethod
    def _data_cells(self, a: np.ndarray) -> np.ndarray:
        """The cell parameters used for ``a``: one per row (``minmax-row``) or a single one."""

    def _data_spans(self, x: Any, what: str) -> np.ndarray:
        """Range widths ``hi - lo`` used for the data ``x`` (``what`` names the caller)."""
        _, a = _shape_or_x(x)
        if a is None:
            raise TypeError(f"{what} needs the data x, not a shape")
        lo, hi, _, _, _ = resolve_range(a, self.range, "clip")
        return hi - lo

    def _row_cells(self, x_or_shape: Any, what: str) -> tuple[np.ndarray, int, np.ndarray | None]:
        """Per-row cell parameters broadcast to B rows, P, and the data (or None)."""
        (B, P), a = _shape_or_x(x_or_shape)
        if a is None:
            if isinstance(self.range, str):
                raise ValueError(
                    f"{what} of a min-max quantizer depends on the data range: pass x, not a shape"
                )
            cell = self._fixed_cell()
            assert cell is not None
            return np.full(B, cell), P, None
        return np.broadcast_to(self._data_cells(a), (B,)), P, a

    def _error_law(self, x_or_shape: Any, law: Callable[[np.ndarray, int], float]) -> float:
        """``expected_error``: ``law(cells, P)`` plus the squared clipping distances with dither.

        Without dither the error is deterministic and measured on ``x``.
        """
        cells, P, a = self._row_cells(x_or_shape, "expected_error")
        if not self.dither:
            if a is None:
                raise ValueError("expected_error without dither is measured on x: pass x")
            out = self._decompress(*self._compress_np(a, None)[:2], a.shape)
            return float(np.sum((out - a.astype(np.float64)) ** 2))
        err = law(cells, P)
        if a is not None and not isinstance(self.range, str):
            c = np.clip(a.astype(np.float64), *self.range) - a
            err += float(np.sum(c * c))
        return err

    # ---- kernels -----------------------------------------------------------------------------
    @property
    @abstractmethod
    def _unit_scale(self) -> float:
        """The quantizer's units per range width (``(a - lo) * _unit_scale / span``)."""

    @property
    @abstractmethod
    def _index_bits(self) -> int:
        """Payload bits per codeword index."""

    @abstractmethod
    def _index_shape(self, shape: tuple[int, int]) -> tuple[int, int]:
        """Shape of the index array for data of shape ``(B, P)``."""

    @property
    def _index_dtype(self) -> type[np.unsignedinteger[Any]]:
        """The index array dtype: the smallest unsigned type holding ``_index_bits`` bits."""
        return np.uint8 if self._index_bits <= 8 else np.uint16

    def _f32_compress_ok(self, a: np.ndarray, lo: np.ndarray, hi: np.ndarray, seed: Any) -> bool:
        """Whether :meth:`_quantize_f32` applies: dithered float32 data whose range is float32."""
        if seed is None or a.dtype != np.float32 or self.bits > self._f32_max_bits:
            return False
        span = hi - lo
        with np.errstate(over="ignore"):
            lo32, hi32 = lo.astype(np.float32), hi.astype(np.float32)
            span32 = hi32 - lo32
            inv = np.divide(self._unit_scale, span, out=np.zeros_like(span), where=span > 0)
            inv32 = inv.astype(np.float32)
        return bool(
            np.all(lo32 == lo)
            and np.all(hi32 == hi)
            and np.isfinite(span32).all()
            and np.isfinite(inv32).all()
        )

    def _f32_decompress_ok(self, seed: Any, dtype: Any) -> bool:
        return (
            seed is not None and np.dtype(dtype) == np.float32 and self.bits <= self._f32_max_bits
        )

    @abstractmethod
    def _quantize_f32(
        self,
        a: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        stream: DitherStream,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """float32 kernel: the indices of ``a``; with ``out``, its reconstruction (fused)."""

    @abstractmethod
    def _dequantize_f32(
        self, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray, stream: DitherStream, out: np.ndarray
    ) -> None:
        """float32 kernel: write the reconstruction of ``idx`` into ``out`` (float32, (B, P))."""

    @abstractmethod
    def _compress_f64(
        self, a: np.ndarray, lo: np.ndarray, hi: np.ndarray, seed: int | None
    ) -> np.ndarray:
        """float64 kernel: the indices of ``a`` (dithered from ``seed``, or deterministic)."""

    @abstractmethod
    def _decompress_f64(
        self,
        idx: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype | type,
    ) -> np.ndarray:
        """float64 kernel: the reconstruction of ``idx`` (float64 arithmetic, stored in dtype)."""

    def _compress_np(
        self, a: np.ndarray, seed: int | None, check_finite: bool = False
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        lo, hi, sent, a, n_clip = resolve_range(a, self.range, self.out_of_range, check_finite)
        if seed is not None and self._f32_compress_ok(a, lo, hi, seed):
            idx = self._quantize_f32(a, lo, hi, DitherStream(seed))
        else:
            idx = self._compress_f64(a, lo, hi, seed)
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
        lo, hi = received_range(self.range, data, shape[0])
        if seed is not None and self._f32_decompress_ok(seed, dtype):
            out = np.empty(shape, np.float32)
            self._dequantize_f32(data["idx"], lo, hi, DitherStream(seed), out)
            return out
        return self._decompress_f64(data["idx"], lo, hi, seed, shape, dtype)

    def _write_payload(
        self, w: BitWriter, data: dict[str, np.ndarray], shape: tuple[int, int]
    ) -> None:
        write_range(w, self.range, data)
        w.write_uint(data["idx"].ravel(), self._index_bits)

    def _read_payload(self, r: BitReader, shape: tuple[int, int]) -> dict[str, np.ndarray]:
        data = read_range(r, self.range, shape[0])
        rows, cols = self._index_shape(shape)
        idx = r.read_uint(rows * cols, self._index_bits).reshape(rows, cols)
        data["idx"] = idx.astype(self._index_dtype)
        return data
