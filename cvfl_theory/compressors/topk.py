r"""Per-row magnitude top-k sparsification (C5.4).

A kept value beyond the largest finite float of the wire's width ``r`` is refused with a
``ValueError`` naming the value and the representable range (never sent as ``inf``, never clipped).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _kernels
from .._rng import RNGLike
from .._validate import check_fits_float, check_float_width, check_int_in_range, raise_not_finite
from ..bitpack import BitReader, BitWriter
from . import _torch_kernels as tk
from ._common import kernel_input, type_code
from .base import Compressor, shape2d, shape_or_x

__all__ = ["TopK"]


def _index_dtype(P: int) -> type[np.unsignedinteger[Any]]:
    """The smallest unsigned dtype holding a column index of a row of length ``P``."""
    return np.uint8 if P <= 256 else (np.uint16 if P <= 65536 else np.uint32)


def _log2_binomial_ceil(P: int, k: int) -> int:
    r""":math:`\lceil \log_2 \binom{P}{k} \rceil` exactly (integer arithmetic)."""
    c = math.comb(P, k)
    return (c - 1).bit_length()


class TopK(Compressor):
    r"""Keep the ``k`` largest-magnitude components of every row (C5.4).

    The error is deterministic: :math:`\|C(h) - h\|_F^2 = \sum_{\text{dropped}} h_{bj}^2 \le
    \sum_b (1 - k/P)\|h_b\|^2` (the dropped components are the smallest), plus the rounding of
    the kept values to ``r``-bit floats (0 for float32 input and ``r = 32``).

    Parameters
    ----------
    k : int, optional
        Components kept per row, :math:`1 \le k \le P` (checked when the shape is known).
    bits : int, optional
        Instead of ``k``: the paper's budget of ``bits`` per component, :math:`k = \lfloor P\,
        \text{bits}/32 \rfloor` (rounded **down** so the value bits :math:`32k` never exceed
        :math:`P\,\text{bits}`), and at least 1. ``bits`` in ``[1, 32]``.
    r : {32, 16, 64}
        Bits per transmitted value. A kept value beyond the largest finite ``r``-bit float
        (65504 for ``r = 16``) is refused with ``ValueError``, never sent as ``inf``.

    Notes
    -----
    Payload accountings (``payload_bits(shape, accounting=...)``), per row:

    - ``"paper"``: :math:`k r` (values only, as in the paper);
    - ``"honest"`` (default, what :meth:`Compressed.to_bytes` actually writes): :math:`k r +
      \min(P, k\lceil\log_2 P\rceil)` -- the positions as a ``P``-bit mask or as ``k`` indices of
      :math:`\lceil\log_2 P\rceil` bits, whichever is shorter;
    - ``"entropy"``: :math:`k r + \lceil\log_2\binom{P}{k}\rceil`, the information-theoretic
      minimum for the positions (a lower bound; not the wire format).

    Ties in magnitude are broken towards the lower column index.

    Examples
    --------
    >>> import numpy as np
    >>> t = TopK(k=2)
    >>> t.roundtrip(np.array([[3.0, -1.0, 0.5, -4.0]])).tolist()
    [[3.0, 0.0, 0.0, -4.0]]
    >>> [t.payload_bits((1, 4), accounting=a) for a in ("paper", "honest", "entropy")]
    [64, 68, 67]
    """

    name = "topk"
    _has_torch_path = True
    _checks_finite = True  # the selection kernel flags rows holding NaN/inf

    def __init__(self, k: int | None = None, bits: int | None = None, r: int = 32) -> None:
        if (k is None) == (bits is None):
            raise ValueError(f"give exactly one of k and bits, got k={k!r}, bits={bits!r}")
        self.k = None if k is None else check_int_in_range(k, "k", 1, 2**31 - 1)
        self.bits = None if bits is None else check_int_in_range(bits, "bits", 1, 32)
        self.r = check_float_width(r)

    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        return {"k": self.k, "bits": self.bits, "r": self.r}

    def __repr__(self) -> str:
        """``TopK(k=3, r=32)`` or ``TopK(bits=4, r=32)``: the argument given, not the other."""
        given = f"k={self.k!r}" if self.k is not None else f"bits={self.bits!r}"
        return f"TopK({given}, r={self.r!r})"

    def k_for(self, P: int) -> int:
        r"""Components kept in a row of length ``P``.

        Raises
        ------
        ValueError
            If an explicit ``k`` exceeds ``P``.
        """
        if self.k is not None:
            if self.k > P:
                raise ValueError(f"k must be in [1, P] = [1, {P}], got k={self.k}")
            return self.k
        assert self.bits is not None
        return max(1, (P * self.bits) // 32)

    def _check_shape(self, shape: tuple[int, int]) -> None:
        self.k_for(shape[1])

    def _index_bits(self, P: int, k: int) -> int:
        return min(P, k * (P - 1).bit_length())

    def payload_bits(self, shape: tuple[int, ...], accounting: str = "honest") -> int:
        """Payload bits under ``accounting`` in ``{"honest", "paper", "entropy"}`` (see Notes)."""
        B, P = shape2d(shape)
        k = self.k_for(P)
        if accounting == "paper":
            return B * k * self.r
        if accounting == "honest":
            return B * (k * self.r + self._index_bits(P, k))
        if accounting == "entropy":
            return B * (k * self.r + _log2_binomial_ceil(P, k))
        raise ValueError(f"accounting must be 'honest', 'paper' or 'entropy', got {accounting!r}")

    def expected_error(self, x_or_shape: Any) -> float:
        r"""Exact (deterministic) error on ``x``: the dropped energy plus value rounding (C5.4)."""
        _, a = shape_or_x(x_or_shape)
        if a is None:
            raise ValueError("top-k error depends on the data: pass x, not a shape")
        self._check_shape(a.shape)
        out = self._decompress(self._compress(a, None)[0], None, a.shape)
        return float(np.sum((out.astype(np.float64) - a) ** 2))

    def published_bound(self, x_or_shape: Any) -> float:
        r"""The paper's :math:`B (1 - k/P) (\|h\|^2)_{\max}` (largest squared row norm)."""
        (B, P), a = shape_or_x(x_or_shape)
        if a is None:
            raise ValueError("the published top-k bound needs max ||h||^2: pass x, not a shape")
        k = self.k_for(P)
        h2max = float(np.max(np.sum(a.astype(np.float64) ** 2, axis=1)))
        return B * (1.0 - k / P) * h2max

    def _compress(
        self, a: np.ndarray, rng: RNGLike
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        # Compiled selection (cvfl_theory._kernels): the k-th largest |a| of each row by a
        # search on the count of |a|'s bit patterns above a threshold (the IEEE bits of a
        # non-negative float are monotone in it), ties broken towards the lower column;
        # columns come out in increasing order.
        a = kernel_input(a)
        B, P = a.shape
        k = self.k_for(P)
        cols = np.empty((B, k), np.int32)
        vals = np.empty((B, k), a.dtype)
        if _kernels.topk_select(a, type_code(a), B, P, k, cols, vals):
            raise_not_finite(a, "x")
        return self._fields(cols, vals, P), None, 0

    def _fields(self, cols: np.ndarray, vals: np.ndarray, P: int) -> dict[str, np.ndarray]:
        """The payload fields of the kept columns and values (refusing an ``r``-bit overflow)."""
        return {
            "idx": cols.astype(_index_dtype(P)),
            "values": check_fits_float(vals, self.r, "x", False),
        }

    def _decompress(
        self,
        data: dict[str, np.ndarray],
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype | type = np.float64,
    ) -> np.ndarray:
        B, P = shape
        k = self.k_for(P)
        vals = kernel_input(data["values"])
        out = np.empty(shape, vals.dtype)
        cols = np.ascontiguousarray(data["idx"], dtype=np.int32)
        _kernels.topk_scatter(cols, vals, type_code(vals), B, P, k, out)
        return out

    def _compress_torch(
        self, t: Any, rng: RNGLike
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        x = tk.kernel_input(t)
        P = x.shape[1]
        cols, vals, bad = tk.topk_select(x, self.k_for(P))
        if bad:
            raise_not_finite(x.cpu().numpy(), "x")
        return self._fields(cols.cpu().numpy(), vals.cpu().numpy(), P), None, 0

    def _decompress_torch(
        self,
        data: dict[str, np.ndarray],
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype,
        device: Any,
    ) -> Any:
        import torch

        vals = torch.from_numpy(kernel_input(data["values"])).to(device)
        cols = torch.from_numpy(data["idx"].astype(np.int64)).to(device)
        return tk.to_output_dtype(tk.topk_scatter(cols, vals, shape[1]), dtype)

    def _output_bound(self, data: dict[str, np.ndarray]) -> float:
        # every output entry is 0 or one of the B k sent values (converted exactly, or rounded
        # once for a non-float array built in-process: the margin covers it)
        with np.errstate(over="ignore", invalid="ignore"):
            top = float(np.abs(data["values"]).max(initial=0.0))
        return top * (1.0 + 2.0**-20)

    def _write_payload(
        self, w: BitWriter, data: dict[str, np.ndarray], shape: tuple[int, int]
    ) -> None:
        B, P = shape
        k = self.k_for(P)
        w.write_floats(data["values"].ravel(), self.r)
        width = (P - 1).bit_length()
        if P <= k * width:
            mask = np.zeros(shape, bool)
            np.put_along_axis(mask, data["idx"].astype(np.intp), True, axis=1)
            w.write_flags(mask)
        else:
            w.write_uint(data["idx"].ravel(), width)

    def _read_payload(self, r: BitReader, shape: tuple[int, int]) -> dict[str, np.ndarray]:
        B, P = shape
        k = self.k_for(P)
        vals = r.read_floats(B * k, self.r).reshape(B, k)
        if not np.isfinite(vals).all():
            raise ValueError("corrupted top-k payload: non-finite values")
        width = (P - 1).bit_length()
        if P <= k * width:
            mask = r.read_flags(B * P).reshape(B, P)
            counts = np.count_nonzero(mask, axis=1)
            if np.any(counts != k):
                raise ValueError(f"corrupted top-k mask: a row does not have k={k} entries")
            cols = np.nonzero(mask)[1].reshape(B, k).astype(_index_dtype(P))
        else:
            cols = r.read_uint(B * k, width, _index_dtype(P)).reshape(B, k)
            if np.any(cols >= P) or np.any(np.diff(cols.astype(np.int64), axis=1) <= 0):
                raise ValueError(
                    f"corrupted top-k indices: an index is >= P={P} or a row is not increasing"
                )
        return {"idx": cols, "values": vals}
