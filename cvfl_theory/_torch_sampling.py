r"""The supports of :mod:`cvfl_theory.sampling`, drawn with torch on any device, bit for bit.

A node's support comes from ``numpy.random.SFC64(seed)``; a receiver regenerates it from the seed.
So a sender drawing on a GPU and a receiver drawing on a CPU must read the same stream and make
the same decisions. This module does what numpy does, in torch, for many nodes at once (one
*lane* per node):

- **SFC64.** A lane's state is four 64-bit words :math:`(a, b, c, k)` (int64 tensors: additions
  wrap around like uint64, a logical right shift is an arithmetic one masked to its low bits).
  One step outputs :math:`t = a + b + k` and moves to
  :math:`(b \oplus (b \gg 11),\ c + (c \ll 3),\ \mathrm{rotl}(c, 24) + t,\ k + 1)`. The steps of a
  lane are sequential (the addition makes the map non-linear); the lanes run in parallel. The
  starting states come from the compiled ``_kernels.sfc64_state`` (numpy's seeding arithmetic),
  four words per node, computed on the host.
- **Uniforms** (``Generator.random``): :math:`(t \gg 11)\,2^{-53}`.
- **Standard exponentials** (``Generator.standard_exponential``, numpy's ziggurat): from a word
  :math:`t`, :math:`r = t \gg 3`, the layer :math:`i = r \bmod 256` and :math:`r \gg 8`, a
  53-bit integer :math:`u`; :math:`x = u \cdot w_i`. If :math:`u < k_i` the value is :math:`x`
  (about 98.9 % of words). Otherwise one more uniform :math:`v` is drawn: in the base layer
  (:math:`i = 0`) the value is :math:`x_R - \log(1 - v)` (the tail beyond
  :math:`x_R \approx 7.697`); above it the value is :math:`x` if
  :math:`(f_{i-1} - f_i)\,v + f_i < e^{-x}`, else the draw starts again with a new word. Each lane
  consumes words at its own pace, so every lane keeps its own place in this small state machine.
- **Bounded integers** (K2's ``k``-subsets, numpy's ``choice`` without replacement): 32-bit
  draws that split a word in two halves, as numpy's ``next_uint32`` does, and Lemire's
  multiply-and-reject (:meth:`SFC64Lanes.bounded`).
- **Geometric gaps** (:func:`cvfl_theory.sampling.bernoulli_support`): gap
  :math:`g = \lfloor \lambda^{-1} E + 1 \rfloor` (the product, then the sum, each rounded to
  float64, then the floor), positions :math:`\text{last} + g_1 + \dots + g_j` below :math:`d`, in
  chunks of the same size and with the same stopping rule as the compiled kernel.

The ziggurat's tables (:math:`k_i`, :math:`w_i`, :math:`f_i`, :math:`x_R`) are not exposed by
numpy; :func:`ziggurat_tables` reads them off numpy's own generator, by setting its state so that
its next words are chosen ones (a threshold found by bisection, a value returned unchanged, and
each :math:`f_i` the one float64 near :math:`e^{-2^{53} w_i}` that makes numpy's slow-path
decisions; 114 of the 255 are not that exponential to the bit). The operations are numpy's, one
rounding each, in the same order, with no fused multiply-add. The two transcendental values,
:math:`e^{-x}` in the acceptance test and :math:`\log(1 - v)` in the tail, are taken from the
host's C library (``math.exp``, ``math.log1p``, which numpy calls too) for the lanes that need
them (about 1 word in 90): torch's own differ from it in the last bit for about 1 value in 150,
which flips a decision at a threshold. So the words, the exponentials and the supports are
numpy's (``tests/test_torch_sampling.py`` compares them over seeds and probabilities, on every
slow path with crafted words, and at near-ties of the gaps, where a reordered formula fails).
The exponentials are drawn in blocks of words (a sequential loop of SFC64 steps, then one pass
that classifies every word of the block), so a GPU synchronises with the host a few times per
block, not per word. The supports are small (``p d`` indices): this path is about getting
numpy's bits on any device, not speed (on a CPU, 64 nodes at ``d = 4096``: 8 to 140 times
numpy's time, ``benchmarks/bench_gpu.py --device cpu``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from . import _kernels
from ._torch_stream import as_int64, srl

__all__ = [
    "SFC64Lanes",
    "bernoulli_supports",
    "bernoulli_supports_varying",
    "geometric_positions",
    "k_subset_supports",
    "sfc64_step",
    "standard_exponentials",
    "ziggurat_tables",
]

_TWO_M53 = 2.0**-53
_TWO_53 = 2.0**53
_TWO_52 = 2.0**52


def sfc64_step(a: Any, b: Any, c: Any, k: Any) -> tuple[Any, tuple[Any, Any, Any, Any]]:
    r"""One SFC64 step of int64 lane states: the word :math:`a + b + k` and the next state."""
    out = a + b + k
    return out, (b ^ srl(b, 11), c + (c << 3), ((c << 24) | srl(c, 40)) + out, k + 1)


class SFC64Lanes:
    """One SFC64 stream per lane, stepped together (a lane can be held still).

    Parameters
    ----------
    states : sequence of 4-tuples of int
        Each lane's state words ``(a, b, c, counter)`` as numpy's ``SFC64.state`` gives them,
        uint64 values in ``[0, 2**64)``.
    device : str or torch.device
        Where the lanes live.
    """

    def __init__(self, states: Sequence[Sequence[int]], device: Any = "cpu") -> None:
        import torch

        words = [[as_int64(int(w)) for w in s] for s in states]
        if any(len(s) != 4 for s in words):
            raise ValueError("each SFC64 state has 4 words")
        t = torch.tensor(words, dtype=torch.int64, device=device).reshape(-1, 4)
        self.a, self.b, self.c, self.k = (t[:, j].clone() for j in range(4))
        # numpy's 32-bit draws: the high half of a word is kept for the next one
        self.has32 = torch.zeros(t.shape[0], dtype=torch.bool, device=device)
        self.buf32 = torch.zeros(t.shape[0], dtype=torch.int64, device=device)

    @classmethod
    def from_seeds(cls, seeds: Sequence[int], device: Any = "cpu") -> SFC64Lanes:
        """The lanes ``numpy.random.SFC64(seed)`` starts from, one per seed in ``[0, 2**64)``."""
        return cls([_kernels.sfc64_state(int(s)) for s in seeds], device)

    def __len__(self) -> int:
        return int(self.a.shape[0])

    def next(self, active: Any = None) -> Any:
        """Every lane's next word (int64 with the uint64 bits); lanes not ``active`` stay put.

        Their entry of the result is the word they *would* output, and is to be ignored.
        """
        import torch

        a, b, c, k = self.a, self.b, self.c, self.k
        out, (na, nb, nc, nk) = sfc64_step(a, b, c, k)
        if active is None:
            self.a, self.b, self.c, self.k = na, nb, nc, nk
        else:
            self.a = torch.where(active, na, a)
            self.b = torch.where(active, nb, b)
            self.c = torch.where(active, nc, c)
            self.k = torch.where(active, nk, k)
        return out

    def next32(self, active: Any) -> Any:
        """Every ``active`` lane's next 32-bit draw (numpy's ``next_uint32``), in ``[0, 2**32)``.

        A lane holding the high half of its last word returns it; otherwise it reads a word,
        returns its low half and keeps the high half.
        """
        import torch

        kept = active & self.has32
        fresh = active & ~self.has32
        word = self.next(fresh)
        out = torch.where(kept, self.buf32, word & 0xFFFFFFFF)
        self.buf32 = torch.where(fresh, srl(word, 32), self.buf32)
        self.has32 = (self.has32 & ~kept) | fresh
        return out

    def bounded(self, top: Any, active: Any) -> Any:
        r"""Integers uniform on ``[0, top]`` (``1 <= top < 2**32 - 1``), numpy's way (Lemire).

        numpy's ``random_bounded_uint64(0, top)`` for a 32-bit range: :math:`m = u (t + 1)`
        for a 32-bit draw :math:`u`; while the low half of :math:`m` is below
        :math:`(2^{32} - 1 - t) \bmod (t + 1)` it draws again; the value is the high half.
        The product wraps in int64 with the bits of the uint64 product.
        """
        import torch

        span = top + 1
        threshold = (0xFFFFFFFF - top) % span
        m = self.next32(active) * span
        again = active & ((m & 0xFFFFFFFF) < threshold)
        while bool(again.any()):
            m = torch.where(again, self.next32(again) * span, m)
            again = again & ((m & 0xFFFFFFFF) < threshold)
        return srl(m, 32)

    def block(self, steps: int) -> tuple[Any, Any]:
        """The next ``steps`` words of every lane, ``(steps, lanes)``, and the states after each.

        The states are ``(4, steps, lanes)``; the lanes themselves do not move until
        :meth:`rewind` says how many of the words each one used.
        """
        import torch

        n = len(self)
        words = torch.empty((steps, n), dtype=torch.int64, device=self.a.device)
        states = torch.empty((4, steps, n), dtype=torch.int64, device=self.a.device)
        a, b, c, k = self.a, self.b, self.c, self.k
        for i in range(steps):
            out, (a, b, c, k) = sfc64_step(a, b, c, k)
            words[i] = out
            states[0, i], states[1, i], states[2, i], states[3, i] = a, b, c, k
        return words, states

    def rewind(self, states: Any, used: Any) -> None:
        """Put each lane after its first ``used[l]`` words of a :meth:`block` (0: unmoved)."""
        import torch

        last = (used - 1).clamp(min=0)[None]
        moved = used > 0
        self.a, self.b, self.c, self.k = (
            torch.where(moved, states[j].gather(0, last)[0], word)
            for j, word in enumerate((self.a, self.b, self.c, self.k))
        )

    def states(self) -> list[tuple[int, int, int, int]]:
        """Each lane's state as uint64 words (numpy's ``SFC64.state["state"]["state"]``)."""
        cols = [x.cpu().tolist() for x in (self.a, self.b, self.c, self.k)]
        m = (1 << 64) - 1
        return [(a & m, b & m, c & m, k & m) for a, b, c, k in zip(*cols)]


@lru_cache(maxsize=1)
def ziggurat_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    r"""The exponential ziggurat of numpy: ``(k, w, f, x_R)``, read off its generator.

    ``k`` (int64, 256), ``w`` and ``f`` (float64, 256) and the tail start ``x_R``. With the
    generator's state set to :math:`(t, 0, c, 0)` its next word is :math:`t` and the word after
    it :math:`9c + 1`, any word. Then for layer :math:`i`:

    - :math:`k_i` is the smallest 53-bit :math:`u` whose word takes the slow path, which reads a
      second word (the state's counter says how many were read), found by bisection;
    - :math:`w_i` is the value for :math:`u = 1` (:math:`1 \cdot w_i`, exact; in a layer
      :math:`i \ge 1` whose slow path it takes, the uniform 0 accepts it);
    - :math:`x_R` is the base layer's slow-path value with the uniform 0,
      :math:`x_R - \log(1 - 0)`;
    - :math:`f_0 = 1`, and :math:`f_i` is the float64 within 16 units in the last place of
      :math:`e^{-2^{53} w_i}` (numpy's table is not that value to the bit: up to 3 ulp off in
      the outer layers) that makes the slow path's decisions numpy's: for slow words
      :math:`u` spread over the layer, the bisected uniform at which numpy starts to reject
      must be where :math:`(f_{i-1} - f_i) v + f_i < e^{-x}` starts to fail.

    About 0.2 s, once per process.
    """
    gen = np.random.Generator(np.random.SFC64(0))
    bit_gen = gen.bit_generator
    inv9 = pow(9, -1, 1 << 64)

    def draw(u: int, layer: int, v_bits: int = 0) -> tuple[float, int]:
        """The value and the words read, from the word of (u, layer) and a uniform v_bits/2**53."""
        c = ((((v_bits << 11) | 1) - 1) * inv9) & ((1 << 64) - 1)
        bit_gen.state = {
            "bit_generator": "SFC64",
            "state": {"state": [(u << 11) | (layer << 3), 0, c, 0]},
            "has_uint32": 0,
            "uinteger": 0,
        }
        value = float(gen.standard_exponential())
        return value, int(bit_gen.state["state"]["state"][3])

    def first_true(test: Any, lo: int, hi: int) -> int:
        """The smallest n in (lo, hi] with test(n), for test monotone and test(hi) taken true."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if test(mid):
                hi = mid
            else:
                lo = mid
        return hi

    k = np.empty(256, dtype=np.int64)
    w = np.empty(256, dtype=np.float64)
    for layer in range(256):
        k[layer] = first_true(lambda u: draw(u, layer)[1] > 1, -1, 1 << 53)
        w[layer] = draw(1, layer)[0]
    x_tail = draw((1 << 53) - 1, 0)[0]
    f = [1.0]
    for layer in range(1, 256):
        span = (1 << 53) - int(k[layer])
        guess = math.exp(-(float(w[layer]) * _TWO_53))
        candidates = [guess]
        for _ in range(16):
            candidates = [math.nextafter(candidates[0], 0.0), *candidates]
            candidates.append(math.nextafter(candidates[-1], 1.0))
        for parts in (4, 8, 16):
            for j in range(1, parts):
                u = int(k[layer]) + j * span // parts
                x = u * float(w[layer])
                e = math.exp(-x)
                t = first_true(lambda v, u=u, x=x: draw(u, layer, v)[0] != x, -1, 1 << 53)
                candidates = [
                    c
                    for c in candidates
                    if (t == 0 or (f[-1] - c) * ((t - 1) * _TWO_M53) + c < e)
                    and (t == 1 << 53 or not (f[-1] - c) * (t * _TWO_M53) + c < e)
                ]
            if len(candidates) <= 1:
                break
        if len(candidates) != 1:
            raise RuntimeError(
                f"numpy's exponential ziggurat, layer {layer}: {len(candidates)} table values "
                "fit its decisions; this numpy draws exponentials some other way"
            )
        f.append(candidates[0])
    return k, w, np.array(f), x_tail


def standard_exponentials(lanes: SFC64Lanes, need: Any) -> Any:
    """The next ``need[l]`` standard exponentials of each lane, as numpy's ziggurat draws them.

    ``need`` is an int64 tensor, one count per lane. Returns a float64 ``(lanes, max(need))``
    tensor whose row ``l`` starts with lane ``l``'s values (the rest is 0). A lane reads exactly
    the words numpy would, so it is left where numpy's generator would be.

    The words come in blocks (:meth:`SFC64Lanes.block`, a little more than the largest count
    still needed). In a block, each word's role follows from the one before: a first word
    whose :math:`u` is not below :math:`k_i` makes the next word its slow path's uniform, and
    that uniform makes the next a first word again. A lane's values are those of its words up
    to the one that completes its count, and the lane is rewound to just after that word; a
    lane that uses its whole block carries a pending slow path into the next.
    """
    import torch

    device = lanes.a.device
    k_np, w_np, f_np, x_tail = ziggurat_tables()
    kt, wt, ft = (torch.as_tensor(v, device=device) for v in (k_np, w_np, f_np))
    n = len(lanes)
    need = need.to(device=device, dtype=torch.int64)
    width = int(need.max()) if n else 0
    out = torch.zeros((n, width), dtype=torch.float64, device=device)
    have = torch.zeros(n, dtype=torch.int64, device=device)
    # a slow path left open at a block's end: its layer, x and exp(-x)
    pending = torch.zeros(n, dtype=torch.bool, device=device)
    p_layer = torch.zeros(n, dtype=torch.int64, device=device)
    p_x = torch.zeros(n, dtype=torch.float64, device=device)
    p_exp = torch.zeros(n, dtype=torch.float64, device=device)
    while True:
        remaining = need - have
        active = remaining > 0
        if not bool(active.any()):
            return out
        steps = min(max(int(int(remaining.max()) * 1.02) + 4, 8), 1024)
        words, states = lanes.block(steps)
        # every word read as a first word: the layer and the 53-bit u; and as a uniform v
        r = srl(words, 3)
        layer = r & 0xFF
        u = srl(r, 8)
        x = u.to(torch.float64) * wt[layer]  # u < 2**53: converted exactly
        fast = u < kt[layer]
        v = srl(words, 11).to(torch.float64) * _TWO_M53
        second = torch.empty_like(fast)  # the word is a slow path's uniform
        prev = pending
        for i in range(steps):
            second[i] = prev
            prev = ~prev & ~fast[i]
        opens = ~second & ~fast  # a first word taking the slow path
        e = torch.zeros_like(x)
        if bool(opens.any()):  # about 1 word in 90: libm's exp, as numpy's (torch's may differ)
            at = opens.nonzero(as_tuple=True)
            e[at] = _host(math.exp, -x[at], device)
        before_layer = torch.cat([p_layer[None], layer[:-1]])
        before_x = torch.cat([p_x[None], x[:-1]])
        before_exp = torch.cat([p_exp[None], e[:-1]])
        tail = second & (before_layer == 0)
        below = before_layer.clamp(min=1)
        accept = (
            second
            & (before_layer != 0)
            & ((ft[below - 1] - ft[below]) * v + ft[below] < before_exp)
        )
        value = torch.where(accept, before_x, x)
        if bool(tail.any()):  # about 1 word in 2000: libm's log1p, as numpy's
            at = tail.nonzero(as_tuple=True)
            value[at] = x_tail - _host(math.log1p, -v[at], device)
        emit = (~second & fast) | tail | accept
        count = torch.cumsum(emit.to(torch.int64), dim=0)
        reached = count >= remaining
        used = torch.where(reached[-1], reached.to(torch.int8).argmax(dim=0) + 1, steps)
        used = torch.where(active, used, 0)
        keep = emit & (torch.arange(steps, device=device)[:, None] < used)
        at_word, at_lane = keep.nonzero(as_tuple=True)
        out[at_lane, have[at_lane] + count[at_word, at_lane] - 1] = value[at_word, at_lane]
        have = have + keep.sum(dim=0)
        lanes.rewind(states, used)
        pending = (used == steps) & opens[-1]
        p_layer, p_x, p_exp = layer[-1], x[-1], e[-1]


def _host(fn: Any, values: Any, device: Any) -> Any:
    """``fn`` (a function of a float) of each of ``values``, computed on the host, on ``device``."""
    import torch

    return torch.tensor([fn(z) for z in values.tolist()], dtype=torch.float64, device=device)


def geometric_positions(e: Any, count: Any, scale: Any, d: int, last: Any) -> tuple[Any, Any]:
    r"""Positions from exponentials, as the compiled ``geometric_positions`` makes them, per row.

    Row ``l`` of the float64 ``e`` holds ``count[l]`` exponentials :math:`E_j`; the gaps are
    :math:`g_j = \lfloor \text{scale}_l E_j + 1 \rfloor` (the product, then the sum, each rounded
    to float64, then the floor; a sum :math:`\ge 2^{52}` or NaN reaches past :math:`d`) and the
    positions :math:`\text{last}_l + g_1 + \dots + g_j`. Returns ``(pos, kept)``: the int64
    positions (entries past ``count[l]`` lie at or past ``d``) and, per row, how many lie below
    ``d``, which are its first ones.
    """
    import torch

    t = scale.unsqueeze(1) * e
    t = t + 1.0
    past = d + 1  # any gap this long ends the support, from last >= -1
    gaps = torch.where(t < _TWO_52, torch.floor(t), float(past)).to(torch.int64).clamp(max=past)
    cols = torch.arange(e.shape[1], device=e.device)
    gaps = torch.where(cols < count.unsqueeze(1), gaps, past)
    pos = last.unsqueeze(1) + torch.cumsum(gaps, dim=1)
    return pos, (pos < d).sum(dim=1)


def bernoulli_supports(seeds: Sequence[int], p: Sequence[float], d: int, device: Any) -> list[Any]:
    r"""Node ``l``'s :func:`~cvfl_theory.sampling.bernoulli_support` ``(seeds[l], p[l], d)``.

    The same sorted int64 indices, drawn on ``device``. ``p[l]`` lies in ``(0, 1]`` and ``d`` in
    ``[1, 2**53]`` (checked by the caller, as for ``validate=False``); ``d`` times the chunk
    must stay below ``2**62`` (the positions are summed in int64 before the cut at ``d``).
    """
    import torch

    n = len(seeds)
    out: list[Any] = [None] * n
    drawn = [j for j in range(n) if p[j] < 1.0]
    for j in range(n):
        if p[j] >= 1.0:  # numpy returns every index without touching the stream
            out[j] = torch.arange(d, dtype=torch.int64, device=device)
    if not drawn:
        return out
    chunks = [int(d * p[j] + 2.0 * math.sqrt(d * p[j]) + 16) for j in drawn]
    if max(chunks) * (d + 1) >= 2**62:
        raise ValueError(f"d = {d} is too large for the torch path at p = {max(p)}")
    lanes = SFC64Lanes.from_seeds([seeds[j] for j in drawn], device)
    chunk = torch.tensor(chunks, dtype=torch.int64, device=device)
    scale = torch.tensor(
        [-1.0 / math.log1p(-p[j]) for j in drawn], dtype=torch.float64, device=device
    )
    last = torch.full((len(drawn),), -1, dtype=torch.int64, device=device)
    pieces: list[list[Any]] = [[] for _ in drawn]
    todo = torch.ones(len(drawn), dtype=torch.bool, device=device)
    while bool(todo.any()):
        need = torch.where(todo, chunk, 0)
        e = standard_exponentials(lanes, need)
        pos, kept = geometric_positions(e, need, scale, d, last)
        full = kept == chunk
        end = pos[torch.arange(len(drawn), device=device), (chunk - 1).clamp(max=e.shape[1] - 1)]
        for j in todo.nonzero().flatten().tolist():
            pieces[j].append(pos[j, : int(kept[j])])
        last = torch.where(todo & full, end, last)
        todo = todo & full & (end < d - 1)
    for j, node in enumerate(drawn):
        out[node] = torch.cat(pieces[j]) if len(pieces[j]) > 1 else pieces[j][0]
    return out


def k_subset_supports(seeds: Sequence[int], k: Sequence[int], d: int, device: Any) -> list[Any]:
    r"""Node ``l``'s :func:`~cvfl_theory.sampling.k_subset_support` ``(seeds[l], k[l], d)``.

    numpy's ``choice(d, k, replace=False, shuffle=False)``, whose set is all a support uses:

    - for ``d > 10000`` and ``k > d // 20``, a tail shuffle: for :math:`i = d-1` down to
      :math:`\max(d - k, 1)`, swap entries :math:`i` and :math:`j`, :math:`j` uniform on
      :math:`[0, i]`, of :math:`(0, \dots, d-1)`; the support is the last :math:`k` entries;
    - otherwise Floyd's algorithm: for :math:`j = d - k, \dots, d - 1`, :math:`v` uniform on
      :math:`[0, j]`; add :math:`v`, or :math:`j` if :math:`v` is in already.

    The uniform integers are :meth:`SFC64Lanes.bounded`'s. ``1 <= k[l]`` and
    ``1 <= d < 2**32 - 1`` (checked by the caller); ``k[l] >= d`` gives every index without
    touching the stream, as numpy's caller does.
    """
    import torch

    n = len(seeds)
    out: list[Any] = [None] * n
    for j in range(n):
        if k[j] >= d:
            out[j] = torch.arange(d, dtype=torch.int64, device=device)
    shuffled = [j for j in range(n) if k[j] < d and d > 10000 and k[j] > d // 20]
    floyd = [j for j in range(n) if k[j] < d and not (d > 10000 and k[j] > d // 20)]
    if floyd:
        lanes = SFC64Lanes.from_seeds([seeds[j] for j in floyd], device)
        start = torch.tensor([d - k[j] for j in floyd], dtype=torch.int64, device=device)
        chosen = torch.zeros((len(floyd), d), dtype=torch.bool, device=device)
        rows = torch.arange(len(floyd), device=device)
        for step in range(int(start.min()), d):
            active = start <= step
            top = torch.full_like(start, step)
            v = lanes.bounded(top, active)
            pick = torch.where(chosen[rows, v], top, v)
            chosen[rows[active], pick[active]] = True
        for j, node in enumerate(floyd):
            out[node] = torch.nonzero(chosen[j]).flatten()
    if shuffled:
        lanes = SFC64Lanes.from_seeds([seeds[j] for j in shuffled], device)
        first = torch.tensor([max(d - k[j], 1) for j in shuffled], dtype=torch.int64, device=device)
        data = torch.arange(d, dtype=torch.int64, device=device).repeat(len(shuffled), 1)
        rows = torch.arange(len(shuffled), device=device)
        for step in range(d - 1, int(first.min()) - 1, -1):
            active = first <= step
            top = torch.full_like(first, step)
            v = lanes.bounded(top, active)
            at = torch.where(active, v, top)  # a held lane swaps entry `step` with itself
            here, there = data[:, step].clone(), data[rows, at]
            data[rows, at] = here
            data[:, step] = there
        for j, node in enumerate(shuffled):
            out[node] = torch.sort(data[j, d - k[node] :]).values
    return out


def bernoulli_supports_varying(seeds: Sequence[int], p: Any) -> list[Any]:
    r"""Node ``l``'s :func:`~cvfl_theory.sampling.bernoulli_support_varying` ``(seeds[l], p[l])``.

    ``p`` is a float64 ``(n, d)`` tensor with entries in ``[0, 1]``, on the device the supports
    are drawn on: index ``j`` of node ``l`` is selected when the lane's ``j``-th uniform
    :math:`(t \gg 11)\,2^{-53}` is below ``p[l, j]``.
    """
    import torch

    lanes = SFC64Lanes.from_seeds(seeds, p.device)
    d = p.shape[1]
    u = torch.empty(p.shape, dtype=torch.float64, device=p.device)
    for j in range(d):
        u[:, j] = srl(lanes.next(), 11).to(torch.float64) * _TWO_M53
    chosen = u < p
    return [torch.nonzero(row).flatten() for row in chosen]
