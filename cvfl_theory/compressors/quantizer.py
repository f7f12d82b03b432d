r"""What the dithered range quantizers share (C5.1, C5.2, C5.5).

:class:`RangeQuantizer` is the base of :class:`~cvfl_theory.compressors.ScalarQuantizer` and
:class:`~cvfl_theory.compressors.HexLatticeQuantizer`: the constructor arguments ``(bits, range,
dither, out_of_range)``, the fixed or min-max range (sent in the payload in the min-max modes,
C5.5) with the codeword indices after it, the per-row *cell parameter* their exact error laws are
written in (the step :math:`\Delta_b`, the cell area :math:`V_b`), and the calls of the compiled
kernels (:mod:`cvfl_theory._kernels`): one fused pass per side, float64 arithmetic for every
input dtype, the shared dither generated from the seed inside the kernel.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from .._rng import RNGLike
from .._validate import check_int_in_range, raise_not_finite
from ..bitpack import BitReader, BitWriter
from . import _torch_kernels as tk
from ._common import (
    check_counts,
    check_sent_range,
    data_range,
    kernel_dtype,
    kernel_input,
    parse_range,
    read_range,
    received_range,
    sent_fields,
    type_code,
    write_range,
)
from .base import Compressor, draw_seed, shape_or_x

#: Smallest cell length of a fixed range: the 2**-32 dither grid on it stays a normal float64.
_MIN_CELL = float(np.finfo(np.float64).tiny) * 2.0**32

__all__ = ["RangeQuantizer"]


class RangeQuantizer(Compressor):
    """Base of the quantizers of a fixed or min-max range with optional subtractive dither.

    Subclasses set :attr:`_max_bits`, the two kernels (``_kernel_quantize``,
    ``_kernel_dequantize``) and implement the hooks: the cell parameter (``_fixed_cell``,
    ``_span_cells``), the index layout (``_index_bits``, ``_index_shape``) and the kernels'
    parameter (``_kernel_param``). The payload is the range fields of C5.5 followed by
    the codeword indices, ``_index_bits`` bits each.
    """

    _max_bits: ClassVar[int]
    """Largest accepted ``bits``."""
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
        self._check_fixed_cell()

    def _setup(self) -> None:
        """Build what derives from the validated arguments (e.g. a codebook); may raise."""

    @abstractmethod
    def _cell_length(self, span: float) -> float:
        """Distance between neighbouring reconstruction points for a range of width ``span``."""

    def _check_fixed_cell(self) -> None:
        r"""Refuse a fixed range too narrow for float64 to resolve the quantizer's cells.

        The cell length (the step, or the lattice's minimum distance) must be a normal float64
        even at the dither's resolution (:math:`2^{-32}` of it: at least :math:`2^{32}` times
        the smallest normal, about :math:`9.6 \cdot 10^{-299}`), and at least 4 float64 spacings
        at the range's endpoints, so that reconstructions :math:`h_{\min} + t\Delta` are
        distinct, inside the dithered range, and follow the exact error law.
        """
        if isinstance(self.range, str):
            return
        lo, hi = self.range
        span = hi - lo
        cell = self._cell_length(span)
        floor = max(_MIN_CELL, 4.0 * float(np.spacing(max(abs(lo), abs(hi)))))
        if not cell >= floor:
            raise ValueError(
                f"range ({lo:g}, {hi:g}) is too narrow for bits={self.bits}: its cell length "
                f"{cell:g} is below {floor:g}, the smallest float64 resolves there (a subnormal "
                f"or under-resolved step); use a range with hi - lo >= {floor * (span / cell):.3g}"
            )

    def _uses_seed(self) -> bool:
        return self.dither

    def _can_clip(self) -> bool:
        return not isinstance(self.range, str)

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
    def _span_cells(self, spans: np.ndarray) -> np.ndarray:
        """The cell parameters of ranges of widths ``spans`` (``hi - lo``)."""

    def _data_cells(self, a: np.ndarray) -> np.ndarray:
        """The cell parameters used for the checked ``(B, P)`` data ``a``.

        One per row (``minmax-row``) or a single one.
        """
        lo, hi = data_range(a, self.range)
        return self._span_cells(hi - lo).ravel()

    def _data_cells_of(self, x: Any, what: str) -> np.ndarray:
        """:meth:`_data_cells` of the data ``x`` once checked (``what`` names the caller)."""
        _, a = shape_or_x(x)
        if a is None:
            raise TypeError(f"{what} needs the data x, not a shape")
        return self._data_cells(a)

    def _row_cells(self, x_or_shape: Any, what: str) -> tuple[np.ndarray, int, np.ndarray | None]:
        """Per-row cell parameters broadcast to B rows, P, and the data (or None)."""
        (B, P), a = shape_or_x(x_or_shape)
        if a is None:
            if isinstance(self.range, str):
                raise ValueError(
                    f"{what} of a min-max quantizer depends on the data range: pass x, not a shape"
                )
            cell = self._fixed_cell()
            assert cell is not None
            return np.full(B, cell), P, None
        return np.broadcast_to(self._data_cells(a), (B,)), P, a

    @abstractmethod
    def _row_law(self, cells: np.ndarray, P: int) -> np.ndarray:
        r"""Exact dithered :math:`\mathbb{E}\|e_b\|^2` of a row of ``P`` components, per cell."""

    def expected_row_errors(self, x_or_shape: Any) -> np.ndarray:
        r"""Exact :math:`\mathbb{E}\|C(x)_b - x_b\|^2` of each row ``b``, ``(B,)``.

        They sum to :meth:`expected_error`. With dither: the error law of a row of :math:`P`
        components at the row's cell parameter (its own in ``"minmax-row"``, the shared one
        otherwise), plus the row's squared clipping distances (a fixed range). Without dither:
        the deterministic error of each row, measured on ``x``. One pass for all rows (the
        per-row error variances of the tight Lemma-1 term).
        """
        cells, P, a = self._row_cells(x_or_shape, "expected_error")
        if not self.dither:
            if a is None:
                raise ValueError("expected_error without dither is measured on x: pass x")
            out = self._decompress(*self._compress_np(a, None)[:2], a.shape)
            return np.sum((out - a.astype(np.float64)) ** 2, axis=1)
        err = self._row_law(np.asarray(cells, dtype=np.float64), P)
        if a is not None and not isinstance(self.range, str):
            c = np.clip(a.astype(np.float64), *self.range) - a
            err = err + np.sum(c * c, axis=1)
        return err

    def expected_error(self, x_or_shape: Any) -> float:
        r"""Exact :math:`\mathbb{E}\|C(x) - x\|_F^2`: the sum of :meth:`expected_row_errors`."""
        return float(np.sum(self.expected_row_errors(x_or_shape)))

    # ---- kernels -----------------------------------------------------------------------------
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

    _kernel_quantize: ClassVar[Callable[..., tuple[int, int]]]
    """``cvfl_theory._kernels`` function ``f(x, xt, B, P, rowmode, lo, hi, param, dither, seed,
    idx, it, y, yt) -> (clipped, non-finite)``."""
    _kernel_dequantize: ClassVar[Callable[..., None]]
    """``cvfl_theory._kernels`` function ``f(idx, it, B, P, lo, hi, param, dither, seed, y, yt)``."""

    @property
    @abstractmethod
    def _kernel_param(self) -> Any:
        """The quantizer's parameter for the kernels (level count, codebook tables)."""

    def _quantize(
        self,
        a: np.ndarray,
        rowmode: bool,
        lo: np.ndarray,
        hi: np.ndarray,
        seed: int | None,
        idx: np.ndarray | None,
        out: np.ndarray | None,
    ) -> tuple[int, int]:
        """Kernel call: the indices of ``a`` into ``idx`` and/or its reconstruction into ``out``.

        ``a`` is C-contiguous float32/float64. ``rowmode``: the kernel computes each row's
        min-max range (as :func:`~._common.row_ranges` does) and writes it into ``lo``/``hi``
        (float64, ``B`` values); else ``lo``/``hi`` hold 1 or ``B`` given values and entries
        outside are clipped. ``seed`` is the dither seed (``None``: no dither); ``out``
        (float32/float64) receives exactly what :meth:`_dequantize` computes from ``idx`` (the
        fused roundtrip). Returns the numbers of clipped and of non-finite entries.
        """
        B, P = a.shape
        return type(self)._kernel_quantize(
            a, type_code(a), B, P, rowmode, lo, hi, self._kernel_param, seed is not None,
            seed or 0, idx, type_code(idx), out, type_code(out),
        )  # fmt: skip

    def _dequantize(
        self, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray, seed: int | None, out: np.ndarray
    ) -> None:
        """Kernel call: write the reconstruction of ``idx`` into ``out`` (float32/float64)."""
        B, P = out.shape
        type(self)._kernel_dequantize(
            idx, type_code(idx), B, P, lo, hi, self._kernel_param, seed is not None, seed or 0,
            out, type_code(out),
        )  # fmt: skip

    def _run(
        self, a: np.ndarray, seed: int | None, idx: np.ndarray | None, out: np.ndarray | None
    ) -> tuple[dict[str, np.ndarray], int]:
        """Quantize ``a`` (one kernel pass); return the sent range fields and the clipped count."""
        a = kernel_input(a)
        rowmode = self.range == "minmax-row"
        if rowmode:
            lo, hi = np.empty(a.shape[0]), np.empty(a.shape[0])
        else:
            lo, hi = data_range(a, self.range)
        n_clip, n_bad = self._quantize(a, rowmode, lo, hi, seed, idx, out)
        check_counts(a, self.range, self.out_of_range, n_clip, n_bad)
        if rowmode:
            check_sent_range(a, lo, hi)
        return sent_fields(self.range, lo, hi), n_clip

    def _compress_np(
        self, a: np.ndarray, seed: int | None
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        idx = np.empty(self._index_shape(a.shape), self._index_dtype)
        sent, n_clip = self._run(a, seed, idx, None)
        return {**sent, "idx": idx}, seed, n_clip

    def _compress(
        self, a: np.ndarray, rng: RNGLike
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        return self._compress_np(a, draw_seed(rng) if self.dither else None)

    def _roundtrip(self, a: np.ndarray, rng: RNGLike, dtype: np.dtype) -> np.ndarray:
        # Fused: the kernel reconstructs from the index it has just computed, with the range as
        # the receiver gets it (float32 values), so the result is decompress(compress(a)).
        seed = draw_seed(rng) if self.dither else None
        out = np.empty(a.shape, kernel_dtype(dtype))
        self._run(a, seed, None, out)
        return out

    def _decompress(
        self,
        data: dict[str, np.ndarray],
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype | type = np.float64,
    ) -> np.ndarray:
        lo, hi = received_range(self.range, data)
        out = np.empty(shape, kernel_dtype(dtype))
        idx = np.ascontiguousarray(data["idx"], dtype=self._index_dtype)
        self._dequantize(idx, lo, hi, seed, out)
        return out

    # ---- torch path (the same bits on any device) --------------------------------------------
    def _torch_kernel_quantize(
        self, x: Any, lo: Any, hi: Any, seed: int | None, clamp: bool
    ) -> tuple[Any, Any, int]:
        """The torch kernel of :meth:`_quantize`: ``(indices, dither or None, clipped count)``.

        ``x`` is a finite float32/float64 ``(B, P)`` tensor, ``lo``/``hi`` float64 tensors of 1
        or ``B`` values; ``clamp``: entries are clamped into the range and counted (every mode
        but ``"minmax-row"``, whose rows lie in their own range).
        """
        raise NotImplementedError

    def _torch_kernel_dequantize(
        self, k: Any, lo: Any, hi: Any, seed: int | None, shape: tuple[int, int], aux: Any
    ) -> Any:
        """The float64 ``(B, P)`` reconstruction of the indices ``k``.

        ``aux`` is the dither :meth:`_torch_kernel_quantize` returned, or None to draw it from
        ``seed``.
        """
        raise NotImplementedError

    def _torch_run(self, t: Any, seed: int | None) -> tuple[Any, Any, Any, Any, int]:
        """Quantize the tensor ``t``: indices, dither, range ``lo``/``hi`` and clipped count.

        The range and the checks of :meth:`_run`, on the tensor's device.
        """
        import torch

        x = tk.kernel_input(t)
        if not bool(torch.isfinite(x).all()):
            raise_not_finite(x.cpu().numpy(), "x")
        if isinstance(self.range, str):
            lo, hi = tk.row_ranges(x)
            if not bool(torch.isfinite(lo).all() and torch.isfinite(hi).all()):
                check_sent_range(x.cpu().numpy(), lo.cpu().numpy(), hi.cpu().numpy())
            if self.range == "minmax-tensor":
                lo, hi = tk.tensor_range(lo, hi)
        else:
            lo, hi = (
                torch.tensor([float(v)], dtype=torch.float64, device=x.device) for v in self.range
            )
        clamp = self.range != "minmax-row"
        k, aux, n_clip = self._torch_kernel_quantize(x, lo, hi, seed, clamp)
        if n_clip and self.out_of_range == "raise":
            check_counts(x.cpu().numpy(), self.range, self.out_of_range, n_clip, 0)
        return k, aux, lo, hi, n_clip

    def _compress_torch(
        self, t: Any, rng: RNGLike
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        import torch

        seed = draw_seed(rng) if self.dither else None
        k, _, lo, hi, n_clip = self._torch_run(t, seed)
        idx = k.to(torch.int32).cpu().numpy().astype(self._index_dtype)
        return (
            {**sent_fields(self.range, lo.cpu().numpy(), hi.cpu().numpy()), "idx": idx},
            seed,
            n_clip,
        )

    def _decompress_torch(
        self,
        data: dict[str, np.ndarray],
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype,
        device: Any,
    ) -> Any:
        import torch

        lo, hi = (torch.from_numpy(v).to(device) for v in received_range(self.range, data))
        idx = np.ascontiguousarray(data["idx"], dtype=np.int32).reshape(self._index_shape(shape))
        k = torch.from_numpy(idx).to(device)
        return tk.to_output_dtype(
            self._torch_kernel_dequantize(k, lo, hi, seed, shape, None), dtype
        )

    def _roundtrip_torch(self, t: Any, rng: RNGLike, dtype: np.dtype) -> Any:
        seed = draw_seed(rng) if self.dither else None
        k, aux, lo, hi, _ = self._torch_run(t, seed)
        y = self._torch_kernel_dequantize(k, lo, hi, seed, tuple(t.shape), aux)
        return tk.to_output_dtype(y, dtype)

    @abstractmethod
    def _reach(self) -> float:
        """``R`` with ``|y - lo| <= R |hi - lo|`` for every reconstruction ``y`` of a row.

        For any index array the kernel may be given (:attr:`_index_dtype`; exact reals: the
        margin for rounding is added by :meth:`_output_bound`).
        """

    def _output_bound(self, data: dict[str, np.ndarray]) -> float:
        """``max |lo| + R max |hi - lo|`` (:meth:`_reach`) times ``1 + 2^-20``, from O(B) fields.

        The margin covers the kernels' float64 roundings (a few units in 2^-52, relative), so a
        bound at most the output dtype's largest value excludes an overflow; NaN/inf ranges give
        a NaN/inf bound (no exclusion).
        """
        lo, hi = received_range(self.range, data)
        with np.errstate(over="ignore", invalid="ignore"):
            span = float(np.abs(hi - lo).max())
            return (float(np.abs(lo).max()) + self._reach() * span) * (1.0 + 2.0**-20)

    def _write_payload(
        self, w: BitWriter, data: dict[str, np.ndarray], shape: tuple[int, int]
    ) -> None:
        write_range(w, self.range, data)
        w.write_uint(data["idx"].ravel(), self._index_bits)

    def _read_payload(self, r: BitReader, shape: tuple[int, int]) -> dict[str, np.ndarray]:
        data = read_range(r, self.range, shape[0])
        if data and not (
            np.isfinite(data["lo"]).all()
            and np.isfinite(data["hi"]).all()
            and np.all(data["lo"] <= data["hi"])
        ):
            raise ValueError("corrupted range in the payload: not finite with lo <= hi")
        rows, cols = self._index_shape(shape)
        idx = r.read_uint(rows * cols, self._index_bits, self._index_dtype)
        data["idx"] = idx.reshape(rows, cols)
        return data
