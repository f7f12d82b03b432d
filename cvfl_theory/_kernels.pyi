"""Type stubs of the compiled kernels (``cvfl_theory/_kernels.c``).

Buffers are C-contiguous numpy arrays; ``xt``/``it``/``yt``/``vt`` are the element type codes of
:func:`cvfl_theory.compressors._common.type_code` (1 float32, 2 float64, 3 uint8, 4 uint16,
5 int32; 0 for an absent optional buffer). Per-row parameters hold 1 or ``B`` float64 values.
"""

from typing import Any

import numpy as np

_Buf = np.ndarray[Any, Any]

def row_ranges(x: _Buf, xt: int, B: int, P: int, lo: _Buf, hi: _Buf) -> None: ...
def scalar_quantize(
    x: _Buf,
    xt: int,
    B: int,
    P: int,
    rowmode: bool,
    lo: _Buf,
    hi: _Buf,
    L: int,
    dither: bool,
    seed: int,
    idx: _Buf | None,
    it: int,
    y: _Buf | None,
    yt: int,
) -> tuple[int, int]: ...
def scalar_dequantize(
    idx: _Buf,
    it: int,
    B: int,
    P: int,
    lo: _Buf,
    hi: _Buf,
    L: int,
    dither: bool,
    seed: int,
    y: _Buf,
    yt: int,
) -> None: ...
def hex_quantize(
    x: _Buf,
    xt: int,
    B: int,
    P: int,
    rowmode: bool,
    lo: _Buf,
    hi: _Buf,
    codebook: tuple[Any, ...],
    dither: bool,
    seed: int,
    idx: _Buf | None,
    it: int,
    y: _Buf | None,
    yt: int,
) -> tuple[int, int]: ...
def hex_dequantize(
    idx: _Buf,
    it: int,
    B: int,
    P: int,
    lo: _Buf,
    hi: _Buf,
    codebook: tuple[Any, ...],
    dither: bool,
    seed: int,
    y: _Buf,
    yt: int,
) -> None: ...
def hex_dither(seed: int, g0: int, n: int, a: float, ux: _Buf, uy: _Buf) -> None: ...
def a2_nearest(X: _Buf, Y: _Buf, n: int, i: _Buf, j: _Buf) -> None: ...
def dither_words(seed: int, e0: int, n: int, out: _Buf) -> None: ...
def topk_select(x: _Buf, xt: int, B: int, P: int, k: int, cols: _Buf, vals: _Buf) -> int: ...
def topk_scatter(cols: _Buf, vals: _Buf, vt: int, B: int, P: int, k: int, y: _Buf) -> None: ...
def path() -> str: ...
def paths() -> list[str]: ...
def geometric_positions(
    e: _Buf, n: int, scale: float, d: float, start: float
) -> tuple[int, float]: ...
def sparse_values(
    x: _Buf, xt: int, d: int, idx: _Buf, k: int, centre: float, p: float, out: _Buf, check: bool
) -> int: ...
def scatter_add(
    acc: _Buf, d: int, idx: _Buf, k: int, vals: _Buf, vt: int, centre: float, scale: float
) -> bool: ...
def sfc64_state(seed: int) -> tuple[int, int, int, int]: ...
def row_sums(x: _Buf, xt: int, n: int, d: int, out: _Buf) -> None: ...
