r"""The compressors' kernels in torch: the compiled kernels' arithmetic on any device.

Used for CUDA tensors, and for every tensor when ``CVFL_KERNEL_PATH=torch``
(:func:`uses_torch_path`). Each function does what its compiled counterpart in
:mod:`cvfl_theory._kernels` does, with the same float64 operations in the same order, each one a
separate correctly rounded torch operation (no fused multiply-add: torch runs ``a * b + c`` as two
kernels; every division is one of two tensors, see :func:`_scalar_consts`), so messages and
reconstructions are byte-identical to the compiled kernels'
(``tests/test_torch_path.py`` compares digests):

- the shared dither stream (:mod:`cvfl_theory._torch_stream`);
- the min-max range of a row, sent as float32 rounded outwards (C5.5);
- the scalar quantizer (C5.1): :math:`t = (x - l)\,s` with :math:`s = L/(h - l)` (0 for an
  empty range), :math:`k = \min(\lfloor t + U\rfloor, L)`, reconstruction
  :math:`l + ((k + 1/2) - U)\,\Delta` with :math:`\Delta = (h - l)/L`, or :math:`k =
  \min(\lfloor t + 1/2\rfloor, L)` and :math:`l + k\Delta` without dither;
- the hexagonal quantizer (C5.2): the pair dither from the integers of a stream word, the
  centred unit-box coordinates, the nearest point of the two rectangular cosets of :math:`A_2`
  (ties to the first), the codebook's lookup table, and :math:`(c - u)\,(h - l) + (l + (h -
  l)/2)`;
- top-k by magnitude (C5.4): the keys are the IEEE bits of :math:`|x|`, kept are the keys above
  the :math:`k`-th largest key :math:`T` and then keys equal to :math:`T` in column order;
- the rounding of a float64 reconstruction to float16 (once, as numpy does: torch's own
  conversion goes through float32 and can round twice).

Arguments are validated by the compressors; these functions trust them.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._backend import ArrayKind, is_torch
from .._torch_stream import srl, stream_words, words_to_halves
from ..lattice import SQRT3

__all__ = [
    "uses_torch_path",
    "kernel_input",
    "row_ranges",
    "tensor_range",
    "scalar_quantize",
    "scalar_dequantize",
    "hex_dither",
    "hex_quantize",
    "hex_dequantize",
    "topk_select",
    "topk_scatter",
    "to_output_dtype",
]

_TWO_M32 = 2.0**-32


def uses_torch_path(x: Any) -> bool:
    """True for a CUDA tensor, or any tensor with ``CVFL_KERNEL_PATH=torch``.

    Other devices (e.g. ``mps``, which has no float64) keep the compiled kernels: their tensors
    are copied to the host and back.

    ``x`` is the data, or the :class:`~cvfl_theory._backend.ArrayKind` of a message's original.
    """
    if isinstance(x, ArrayKind):
        if not x.torch:
            return False
        device = x.device or "cpu"
    elif is_torch(x):
        device = x.device.type
    else:
        return False
    return device.split(":")[0] == "cuda" or os.environ.get("CVFL_KERNEL_PATH") == "torch"


def _torch() -> Any:
    import torch

    return torch


def kernel_input(t: Any) -> Any:
    """``t`` as float32/float64 (float16 to float32, exactly), as ``_common.kernel_input``."""
    return t.float() if t.dtype == _torch().float16 else t


def _f32_outward(v: Any, down: bool) -> Any:
    """The float32 next to the float64 ``v`` on its lower (``down``) or upper side, as float64."""
    torch = _torch()
    f = v.float()
    fd = f.double()
    if down:
        return torch.where(fd > v, torch.nextafter(f, f.new_tensor(-float("inf"))), f).double()
    return torch.where(fd < v, torch.nextafter(f, f.new_tensor(float("inf"))), f).double()


def _key_extremes(v: Any, dim: int, keepdim: bool = False) -> tuple[Any, Any]:
    """Smallest and largest of ``v`` along ``dim`` in the kernels' order, where -0 < +0.

    ``amin``/``amax`` may return either zero: a zero minimum is ``-0.0`` if a ``-0.0`` is there,
    a zero maximum ``+0.0`` if a ``+0.0`` is there.
    """
    torch = _torch()
    mn = v.amin(dim=dim, keepdim=keepdim)
    mx = v.amax(dim=dim, keepdim=keepdim)
    zero = v == 0
    neg_zero = (zero & torch.signbit(v)).any(dim=dim, keepdim=keepdim)
    pos_zero = (zero & ~torch.signbit(v)).any(dim=dim, keepdim=keepdim)
    mn = torch.where(mn == 0, torch.where(neg_zero, -0.0, 0.0).to(mn.dtype), mn)
    mx = torch.where(mx == 0, torch.where(pos_zero, 0.0, -0.0).to(mx.dtype), mx)
    return mn, mx


def row_ranges(x: Any) -> tuple[Any, Any]:
    """The sent min-max range of every row of the ``(B, P)`` float tensor ``x``: float64 ``(B,)``.

    The row's extremes in the kernels' order (:func:`_key_extremes`), rounded outwards to
    float32.
    """
    mn, mx = _key_extremes(x, 1)
    return _f32_outward(mn.double(), True), _f32_outward(mx.double(), False)


def tensor_range(lo: Any, hi: Any) -> tuple[Any, Any]:
    """The tensor's range ``(1,)`` from its rows' ranges (as ``_common.tensor_range``)."""
    return _key_extremes(lo, 0, True)[0], _key_extremes(hi, 0, True)[1]


def _dither(seed: int, n: int, device: Any) -> Any:
    r""":math:`U_e = (h_e + 1/2)\,2^{-32}` for the entries ``e = 0 .. n - 1`` (float64, exact)."""
    halves = words_to_halves(stream_words(seed, -(-n // 2), device), n)
    return (halves.double() + 0.5) * _TWO_M32


def _clamp(v: Any, low: Any, high: Any) -> tuple[Any, int]:
    """``v`` clamped into ``[low, high]`` and the number of entries that were outside."""
    torch = _torch()
    n_clip = int(((v < low) | (v > high)).sum())
    v = torch.where(v >= low, v, low)
    return torch.where(v <= high, v, high), n_clip


def _scalar_consts(lo: Any, hi: Any, L: int) -> tuple[Any, Any]:
    """Per-row ``(s, Δ)`` as ``(R, 1)`` float64 columns: ``s = L/(h - l)`` (0 if empty), ``Δ``."""
    torch = _torch()
    span = hi - lo
    # a true division of two tensors: torch computes `scalar / tensor` as a reciprocal times the
    # scalar, and on CUDA `tensor / scalar` as a product with the scalar's reciprocal (two
    # roundings each)
    levels = torch.full_like(span, float(L))
    inv = torch.where(span > 0.0, levels / span, torch.zeros_like(span))
    return inv[:, None], (span / levels)[:, None]


def scalar_quantize(
    x: Any, lo: Any, hi: Any, L: int, seed: int | None, clamp: bool
) -> tuple[Any, Any, int]:
    """Indices of the scalar quantizer and the dither used: ``(k int64 (B, P), U or None, clipped)``.

    ``lo``/``hi`` (float64, 1 or ``B`` values) is the range: each row's own min-max range, or a
    given range (``clamp``: entries are first clamped into it, NaN to ``lo``, and the clipped
    ones counted). ``x`` is finite.
    """
    torch = _torch()
    B, P = x.shape
    v = x.double()
    lo_c, hi_c = lo[:, None], hi[:, None]
    n_clip = 0
    if clamp:
        v, n_clip = _clamp(v, lo_c, hi_c)
    s, _ = _scalar_consts(lo, hi, L)
    t = (v - lo_c) * s
    t = torch.where(t >= 0.0, t, torch.zeros_like(t))
    u = _dither(seed, B * P, x.device).reshape(B, P) if seed is not None else None
    k = (t + (u if u is not None else 0.5)).to(torch.int64)
    return torch.clamp(k, max=L), u, n_clip


def scalar_dequantize(k: Any, lo: Any, hi: Any, L: int, seed: int | None, u: Any = None) -> Any:
    """The float64 reconstruction of the indices ``k`` ``(B, P)`` (the dither ``u`` if known)."""
    B, P = k.shape
    lo_c = lo[:, None]
    _, d = _scalar_consts(lo, hi, L)
    kd = k.double()
    if seed is None:
        return lo_c + kd * d
    if u is None:
        u = _dither(seed, B * P, k.device).reshape(B, P)
    return lo_c + ((kd + 0.5) - u) * d


def hex_dither(words: Any, a: float) -> tuple[Any, Any]:
    r"""The dither :math:`(u_x, u_y)` of the pairs of the stream ``words`` (float64, exact integers).

    As the kernels' ``hex_dither``: :math:`x = 2A + 1`, :math:`y = 2A' + 1` from the top 23 bits
    :math:`A, A'` of the word's halves, reduced to the Voronoi cell in integers (units
    :math:`2^{-24}`), then :math:`u_x = a 2^{-25} (2x + y)`, :math:`u_y = (a\sqrt3/2) 2^{-24} y`.
    """
    torch = _torch()
    one = 1 << 24
    x = ((words & 0xFFFFFFFF) >> 8) | 1
    y = (srl(words, 32) >> 8) | 1
    s = x + y
    t1, t2 = s + x, s + y
    f = -(s > one).to(torch.int64)
    o = -((torch.maximum(t1, t2) > one) & (torch.minimum(t1, t2) < 2 * one)).to(torch.int64)
    d = ((x - y) ^ f) - f
    g = -(d > 0).to(torch.int64)
    x = x - (((o & g) ^ f) & one)
    y = y - (((o & ~g) ^ f) & one)
    a25 = a * 2.0**-25
    c24 = (a * (SQRT3 / 2.0)) * 2.0**-24
    return (2 * x + y).double() * a25, y.double() * c24


def _hex_consts(lo: Any, hi: Any) -> tuple[Any, Any, Any]:
    """Per-row ``(1/span or 0, span, l + span/2)`` as ``(R, 1)`` columns (see _scalar_consts)."""
    torch = _torch()
    span = hi - lo
    inv = torch.where(span > 0.0, torch.ones_like(span) / span, torch.zeros_like(span))
    return inv[:, None], span[:, None], (lo + 0.5 * span)[:, None]


def _hex_pair_dither(seed: int | None, B: int, npairs: int, a: float, device: Any) -> Any:
    torch = _torch()
    if seed is None:
        z = torch.zeros((B, npairs), dtype=torch.float64, device=device)
        return z, z
    ux, uy = hex_dither(stream_words(seed, B * npairs, device), a)
    return ux.reshape(B, npairs), uy.reshape(B, npairs)


def hex_quantize(
    x: Any, lo: Any, hi: Any, codebook: tuple[Any, ...], seed: int | None, clamp: bool
) -> tuple[Any, Any, int]:
    """Codeword indices ``(B, ceil(P/2))`` int64, the dither ``(ux, uy)`` and the clipped count.

    ``codebook`` is the kernels' tuple ``(a, lut, rows, width, i0, j0, pxy, size)``. An odd
    row's last pair is ``(x, centre)``.
    """
    torch = _torch()
    a, lut, rows, width, i0, j0 = codebook[:6]
    B, P = x.shape
    npairs = (P + 1) // 2
    v = x.double()
    lo_c, hi_c = lo[:, None], hi[:, None]
    n_clip = 0
    if clamp:
        v, n_clip = _clamp(v, lo_c, hi_c)
    s, _, _ = _hex_consts(lo, hi)
    box = (v - lo_c) * s - 0.5
    box = torch.where(box >= -0.5, box, torch.full_like(box, -0.5))
    X = box[:, 0::2]
    Y = box[:, 1::2]
    if P % 2:
        Y = torch.cat([Y, torch.zeros((B, 1), dtype=Y.dtype, device=Y.device)], dim=1)
    ux, uy = _hex_pair_dither(seed, B, npairs, a, x.device)
    xs = (X + ux) * (1.0 / a)
    ys = (Y + uy) * (1.0 / (SQRT3 * a))
    m0, n0 = torch.round(xs), torch.round(ys)
    x1, y1 = xs - 0.5, ys - 0.5
    m1, n1 = torch.round(x1), torch.round(y1)
    dx0, dy0, dx1, dy1 = xs - m0, ys - n0, x1 - m1, y1 - n1
    d0 = dx0 * dx0 + 3.0 * (dy0 * dy0)
    d1 = dx1 * dx1 + 3.0 * (dy1 * dy1)
    use1 = d1 < d0
    i = torch.where(use1, m1 - n1, m0 - n0)
    j = torch.where(use1, 2.0 * n1 + 1.0, 2.0 * n0)
    ii = torch.clamp(i - i0, 0.0, float(width - 1))
    jj = torch.clamp(j - j0, 0.0, float(rows - 1))
    cell = (jj * float(width) + ii).to(torch.int64)
    table = torch.from_numpy(np.ascontiguousarray(lut, dtype=np.int64).ravel()).to(x.device)
    return table[cell], (ux, uy), n_clip


def hex_dequantize(
    k: Any,
    lo: Any,
    hi: Any,
    codebook: tuple[Any, ...],
    seed: int | None,
    P: int,
    dither: tuple[Any, Any] | None = None,
) -> Any:
    """The float64 ``(B, P)`` reconstruction of the codeword indices ``k`` ``(B, ceil(P/2))``."""
    torch = _torch()
    a, pxy, size = codebook[0], codebook[6], codebook[7]
    B, npairs = k.shape
    if bool((k >= size).any()):
        raise ValueError(f"{int((k >= size).sum())} codeword indices >= codebook size {size}")
    if dither is None:
        dither = _hex_pair_dither(seed, B, npairs, a, k.device)
    ux, uy = dither
    _, sp, md = _hex_consts(lo, hi)
    table = torch.from_numpy(np.ascontiguousarray(pxy, dtype=np.float64)).to(k.device)
    yx = (table[2 * k] - ux) * sp + md
    yy = (table[2 * k + 1] - uy) * sp + md
    return torch.stack([yx, yy], dim=2).reshape(B, 2 * npairs)[:, :P]


def topk_select(x: Any, k: int) -> tuple[Any, Any, bool]:
    """The kept columns (increasing, int64 ``(B, k)``), their values, and whether a row is bad.

    A bad row holds NaN or inf (its largest key is at least the exponent mask).
    """
    torch = _torch()
    B, P = x.shape
    if x.dtype == torch.float64:
        keys = x.view(torch.int64) & 0x7FFFFFFFFFFFFFFF
        expmask = 0x7FF0000000000000
    else:
        keys = x.view(torch.int32).to(torch.int64) & 0x7FFFFFFF
        expmask = 0x7F800000
    bad = bool((keys.amax(dim=1) >= expmask).any())
    T = torch.topk(keys, k, dim=1).values[:, k - 1 :]
    above = keys > T
    tied = keys == T
    need = k - above.sum(dim=1, keepdim=True)
    take = above | (tied & (torch.cumsum(tied.to(torch.int64), dim=1) <= need))
    cols = torch.nonzero(take)[:, 1].reshape(B, k)
    return cols, torch.gather(x, 1, cols), bad


def topk_scatter(cols: Any, vals: Any, P: int) -> Any:
    """The ``(B, P)`` tensor holding ``vals`` at ``cols`` and zeros elsewhere."""
    torch = _torch()
    out = torch.zeros((cols.shape[0], P), dtype=vals.dtype, device=vals.device)
    return out.scatter_(1, cols, vals)


def _float16_once(v: Any) -> Any:
    """float64 -> float16 rounded once to nearest-even.

    Through float32 rounded *to odd* (truncate, then set the last bit when inexact): float32 has
    13 more significand bits than float16, so the second rounding is then the correct one.
    """
    torch = _torch()
    f = v.float()
    fd = f.double()
    over = fd.abs() > v.abs()
    f = torch.where(over, torch.nextafter(f, torch.zeros_like(f)), f)
    bits = f.view(torch.int32)
    bits = torch.where((f.double() != v) & torch.isfinite(f), bits | 1, bits)
    return bits.view(torch.float32).to(torch.float16)


def to_output_dtype(y: Any, dtype: np.dtype) -> Any:
    """The float64 (or float32) reconstruction ``y`` in the caller's ``dtype``, rounded once."""
    torch = _torch()
    if dtype == np.float16:
        return _float16_once(y.double())
    target = torch.float32 if dtype == np.float32 else torch.float64
    return y.to(target)
