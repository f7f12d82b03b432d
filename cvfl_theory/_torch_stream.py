r"""The shared dither stream of the compiled kernels, generated with torch on any device.

The stream (see :mod:`cvfl_theory._kernels`) is ``xoshiro256**`` on 16 lanes: lane :math:`l`
starts from the SplitMix64 outputs :math:`w_{4l}, \dots, w_{4l+3}` of the message seed, and word
:math:`n` is the output of lane :math:`n \bmod 16` at its step :math:`\lfloor n/16\rfloor`. The
compiled kernels run the lanes one step after the other; a GPU needs the steps in parallel.

The state transition of ``xoshiro256**`` is linear over :math:`\mathrm{GF}(2)`: the 256 state
bits after one step are :math:`M s` for a fixed :math:`256 \times 256` binary matrix :math:`M`
(xor, shifts and rotations only; the ``**`` scrambler acts on the output, not the state). So the
state after :math:`m` steps is :math:`M^m s`, and the words are generated in blocks of
:math:`L_b` steps:

1. the state at the start of every block, :math:`M^{jL_b} s` for :math:`j = 0, \dots, n_b - 1`,
   by doubling: from the first :math:`2^i` block starts, one product with
   :math:`M^{2^i L_b}` gives the next :math:`2^i` (:math:`\lceil\log_2 n_b\rceil` matrix products,
   each a float32 matrix product of 0/1 entries whose sums, at most 256, are exact in float32);
2. then :math:`L_b` ordinary steps of all :math:`16\,n_b` lane states at once, in 64-bit integer
   arithmetic (torch's ``int64`` wraps around like ``uint64``; a logical right shift is an
   arithmetic one masked to its low bits).

Every word is the kernels' word, bit for bit (``tests/test_torch_path.py`` compares them); the
matrices :math:`M^{2^i L_b}` are built once in numpy (exact integer arithmetic) and cached.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["as_int64", "seed_lanes", "srl", "stream_words", "words_to_halves"]

LANES = 16
_GAMMA = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1
#: Steps per block (the sequential part); the block starts come from the jump matrices.
BLOCK_STEPS = 128


def _mix64(z: int) -> int:
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def as_int64(u: int) -> int:
    """The int64 with the bits of the uint64 ``u``."""
    return u - (1 << 64) if u >> 63 else u


def seed_lanes(seed: int) -> np.ndarray:
    r"""The 16 lane states of the message seed: ``(16, 4)`` int64 (the uint64 bits).

    Lane :math:`l`, word :math:`i`: :math:`\mathrm{mix64}(\text{seed} + (4l + i + 1)\gamma)`.
    """
    st = [
        [as_int64(_mix64(seed + (4 * lane + i + 1) * _GAMMA)) for i in range(4)]
        for lane in range(LANES)
    ]
    return np.array(st, dtype=np.int64)


def _step_python(s: list[int]) -> list[int]:
    """One xoshiro256 state transition of the uint64 words ``s`` (Python ints)."""
    s0, s1, s2, s3 = s
    t = (s1 << 17) & _M64
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = ((s3 << 45) | (s3 >> 19)) & _M64
    return [s0, s1, s2, s3]


@lru_cache(maxsize=1)
def _one_step_matrix() -> np.ndarray:
    """:math:`M` (``uint8``, 256 x 256): column ``b`` is the step of the unit state ``e_b``.

    State bit ``64 i + j`` is bit ``j`` of word ``i``.
    """
    m = np.zeros((256, 256), np.uint8)
    for b in range(256):
        s = [0, 0, 0, 0]
        s[b // 64] = 1 << (b % 64)
        out = _step_python(s)
        for i in range(4):
            for j in range(64):
                m[64 * i + j, b] = (out[i] >> j) & 1
    return m


def _gf2_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` over GF(2) for 0/1 ``uint8`` matrices (exact: sums <= 256 in int64)."""
    return (a.astype(np.int64) @ b.astype(np.int64) % 2).astype(np.uint8)


def _gf2_power(m: np.ndarray, e: int) -> np.ndarray:
    """``m ** e`` over GF(2) by binary powering."""
    out = np.eye(256, dtype=np.uint8)
    while e:
        if e & 1:
            out = _gf2_matmul(out, m)
        e >>= 1
        if e:
            m = _gf2_matmul(m, m)
    return out


#: :math:`M^{2^i L_b}` for ``i = 0, 1, ...`` (``L_b`` = :data:`BLOCK_STEPS`), grown on demand.
_JUMPS: list[np.ndarray] = []
#: The same, transposed, as float32 tensors, per device.
_JUMPS_ON: dict[str, list[Any]] = {}


def _jump(device: Any, i: int) -> Any:
    r"""The transposed :math:`M^{2^i L_b}` as a float32 tensor on ``device`` (cached)."""
    import torch

    while len(_JUMPS) <= i:
        _JUMPS.append(
            _gf2_power(_one_step_matrix(), BLOCK_STEPS)
            if not _JUMPS
            else _gf2_matmul(_JUMPS[-1], _JUMPS[-1])
        )
    on = _JUMPS_ON.setdefault(str(device), [])
    while len(on) <= i:
        on.append(torch.from_numpy(_JUMPS[len(on)].T.astype(np.float32)).to(device))
    return on[i]


def _bit_positions(device: Any) -> Any:
    import torch

    return torch.arange(64, dtype=torch.int64, device=device)


def _to_bits(states: Any) -> Any:
    """``(n, 4)`` int64 states -> ``(n, 256)`` float32 bits (bit ``64 i + j`` of word ``i``)."""
    pos = _bit_positions(states.device)
    bits = (states.unsqueeze(-1) >> pos) & 1  # arithmetic shift, but bit j is bit j
    return bits.reshape(states.shape[0], 256).float()


def _from_bits(bits: Any) -> Any:
    """Inverse of :func:`_to_bits` for 0/1 float tensors (the sum of distinct bits is their or)."""
    import torch

    pos = _bit_positions(bits.device)
    b = bits.reshape(bits.shape[0], 4, 64).to(torch.int64)
    return (b << pos).sum(dim=-1)  # int64 sums wrap: bit 63 lands as the sign bit


def srl(x: Any, k: int) -> Any:
    """Logical right shift of int64 ``x`` by ``k`` in ``[1, 63]``."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _rotl(x: Any, k: int) -> Any:
    return (x << k) | srl(x, 64 - k)


def stream_words(seed: int, n: int, device: Any = "cpu") -> Any:
    """Words ``0 .. n - 1`` of the dither stream of ``seed``: an int64 tensor on ``device``.

    Each entry holds the bits of the uint64 word (``view`` it as two 32-bit halves with
    :func:`words_to_halves`). Bit-identical to the compiled kernels' stream.
    """
    import torch

    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    steps = -(-n // LANES)
    if steps == 0:
        return torch.empty(0, dtype=torch.int64, device=device)
    block = min(BLOCK_STEPS, steps)  # one block (no jump) for a short stream
    nblocks = -(-steps // block)
    states = torch.from_numpy(seed_lanes(seed)).to(device)  # (16, 4): block 0
    filled, i = 1, 0
    while filled < nblocks:  # blocks filled .. 2 filled - 1 from blocks 0 .. filled - 1
        take = min(filled, nblocks - filled)
        src = states[: take * LANES]
        nxt = _from_bits(torch.remainder(_to_bits(src) @ _jump(device, i), 2.0))
        states = torch.cat([states, nxt])
        filled += take
        i += 1
    s0, s1, s2, s3 = (states[:, i].clone() for i in range(4))  # (nblocks * 16,)
    out = torch.empty((block, nblocks * LANES), dtype=torch.int64, device=device)
    for k in range(block):
        r = _rotl((s1 << 2) + s1, 7)
        out[k] = (r << 3) + r
        t = s1 << 17
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = _rotl(s3, 45)
    # out[k, j * 16 + lane] is lane `lane` at step j * block + k: word (j * block + k) * 16 + lane
    words = out.reshape(block, nblocks, LANES).transpose(0, 1).reshape(-1)
    return words[:n]


def words_to_halves(words: Any, n: int) -> Any:
    """The first ``n`` 32-bit halves (low half of each word first) as int64 values in [0, 2^32)."""
    import torch

    halves = torch.stack([words & 0xFFFFFFFF, srl(words, 32)], dim=1).reshape(-1)
    return halves[:n]
