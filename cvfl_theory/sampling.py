r"""Random supports drawn from a per-node seed, so a receiver can regenerate them.

Each function takes the node's seed and the sampling parameter and returns the sorted support
:math:`D_i \subseteq \{0, \dots, d-1\}`. The same seed always gives the same support; this is what the
seeded sparse protocol of K3 relies on.

- :func:`bernoulli_support` — every index independently with one probability ``p`` (K1, uniform
  ``p`` per node). It draws only what is selected: geometric gaps between selected indices, so the
  cost is :math:`O(pd)` rather than :math:`O(d)`.
- :func:`bernoulli_support_varying` — index ``j`` with its own probability ``p[j]`` (K1, general).
- :func:`k_subset_support` — a uniformly random ``k``-subset (K2).

Each also takes, instead of the seed, the node's generator as :func:`node_generators` gives it:
an encoder seeds one stream per node, and re-seeding one generator costs about 2 µs where
building a new one costs about 9-13 µs. The draws are the same. Given a seed (a receiver
regenerating one support per message), each re-seeds one generator kept by the calling thread.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from . import _kernels
from ._validate import as_float_array, check_int_in_range, check_real

__all__ = [
    "bernoulli_support",
    "bernoulli_support_varying",
    "k_subset_support",
    "node_generator",
    "node_generators",
]


def node_generator(seed: int) -> np.random.Generator:
    """Return the generator a node's support is drawn from (SFC64 seeded by ``seed``).

    ``seed`` is an integer in ``[0, 2**64 - 1]``.
    """
    return np.random.Generator(np.random.SFC64(check_int_in_range(seed, "seed", 0, 2**64 - 1)))


def node_generators(seeds: Iterable[int]) -> Iterator[np.random.Generator]:
    """For each seed in turn, a generator in the state :func:`node_generator` starts from.

    It is one generator, re-seeded at every step: use it before taking the next (a caller that
    keeps it past that step sees the next seed's stream). Only its bit stream is the seed's:
    its ``bit_generator.seed_seq`` (and so ``spawn``) is not. The state of
    ``numpy.random.SFC64(seed)`` comes from the compiled ``_kernels.sfc64_state``, numpy's
    seeding arithmetic in C (``tests/test_sampling.py`` compares them across the seed range).
    Each seed is an integer in ``[0, 2**64 - 1]``, checked as it is reached.
    """
    gen = np.random.Generator(np.random.SFC64(0))
    for seed in seeds:
        yield _reseed(gen, seed)


def _reseed(gen: np.random.Generator, seed: int | np.integer[Any]) -> np.random.Generator:
    """``gen`` (over SFC64) put in the state ``numpy.random.SFC64(seed)`` starts from."""
    if type(seed) is not int:  # plain ints are range-checked by the kernel itself
        seed = check_int_in_range(seed, "seed", 0, 2**64 - 1)
    try:
        words = _kernels.sfc64_state(seed)
    except OverflowError:  # the same message as node_generator's
        check_int_in_range(seed, "seed", 0, 2**64 - 1)
        raise
    gen.bit_generator.state = {
        "bit_generator": "SFC64",
        "state": {"state": words},  # any 4 ints
        "has_uint32": 0,
        "uinteger": 0,
    }
    return gen


_THREAD = threading.local()
"""This thread's generator for the functions below when they are given a seed (``.gen``)."""


def _generator(seed: int | np.random.Generator) -> np.random.Generator:
    """The node's generator: from its seed, or as given (an SFC64 one, as node_generators').

    From a seed it is this thread's one generator, re-seeded (as :func:`node_generators` does):
    the functions below draw from it at once and never hand it out, so no caller sees it.
    """
    if not isinstance(seed, np.random.Generator):
        gen = getattr(_THREAD, "gen", None)
        if gen is None:
            gen = _THREAD.gen = np.random.Generator(np.random.SFC64(0))
        return _reseed(gen, seed)
    if not isinstance(seed.bit_generator, np.random.SFC64):
        # a receiver regenerates supports from a seed with SFC64: any other stream is not one
        raise TypeError(
            "seed must be an integer or an SFC64 Generator from node_generators, got a "
            f"Generator over {type(seed.bit_generator).__name__}"
        )
    return seed


def bernoulli_support(
    seed: int | np.random.Generator, p: float, d: int, *, validate: bool = True
) -> np.ndarray:
    r"""Indices selected independently with probability ``p``, drawn via geometric gaps.

    If :math:`G_1, G_2, \dots` are i.i.d. geometric on :math:`\{1, 2, \dots\}` with success
    probability :math:`p`, the partial sums :math:`G_1 - 1, G_1 + G_2 - 1, \dots` that fall below
    :math:`d` have exactly the law of a Bernoulli(:math:`p`) selection of each index. Each gap is
    drawn as :math:`G = 1 + \lfloor E/\lambda \rfloor` with :math:`E` standard exponential and
    :math:`\lambda = -\log(1-p)`, since :math:`P(\lfloor E/\lambda \rfloor \ge k) = e^{-k\lambda}
    = (1-p)^k`. The work is :math:`O(pd)` rather than :math:`O(d)`.

    Parameters
    ----------
    seed : int or numpy.random.Generator
        The node's seed, or its generator from :func:`node_generators`.
    p : float
        Selection probability in ``(0, 1]``.
    d : int
        Dimension.
    validate : bool
        ``False`` skips the checks of ``p`` and ``d`` (then a float in ``(0, 1]`` and an int in
        ``[1, 2**53]``), for callers that have made them once (the encoders, at every node of
        every encoding).

    Returns
    -------
    numpy.ndarray
        Sorted ``int64`` indices.

    Examples
    --------
    >>> a = bernoulli_support(7, 0.25, 20)
    >>> bool(np.array_equal(a, bernoulli_support(7, 0.25, 20)))
    True
    """
    if validate:
        p = check_real(p, "p", 0.0, 1.0, low_open=True)
        d = check_int_in_range(d, "d", 1, 2**53)
    if p >= 1.0:
        return np.arange(d, dtype=np.int64)
    gen = _generator(seed)
    mean = d * p
    # one chunk suffices with probability ~0.98; the loop draws more only when it does not
    chunk = int(mean + 2.0 * math.sqrt(mean) + 16)
    scale = -1.0 / math.log1p(-p)
    pieces = []
    last = -1.0
    while True:
        # standard exponentials E; one compiled pass turns them, in place, into the positions
        # last + G_1, last + G_1 + G_2, ... below d as int64, with G = floor(scale * E + 1)
        # rounded step by step as the numpy definition (gen.exponential(scale), + 1, floor,
        # cumsum in float64: exact integers as d < 2**53) rounds them, so the same seed gives
        # the same support (tests/test_encoders.py compares the two). Adding 1 before the floor
        # differs from adding it after only when E / lambda lies within one ulp below an
        # integer, an event as rare as the generator's own 2**-53 resolution.
        e = gen.standard_exponential(chunk)
        count, last = _kernels.geometric_positions(e, chunk, scale, float(d), last)
        pieces.append(e.view(np.int64)[:count])
        if count < chunk or last >= d - 1:
            break
    return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]


def bernoulli_support_varying(
    seed: int | np.random.Generator, p: np.ndarray, *, validate: bool = True
) -> np.ndarray:
    """Indices ``j`` selected independently with probability ``p[j]`` (``p[j] = 0`` never).

    ``validate=False`` skips the checks of ``p`` (then a float64 vector in ``[0, 1]``), for
    callers that have made them once (the encoders, at every node of every encoding).
    """
    if validate:
        p = as_float_array(p, "p", ndims=(1,), finite=False)
        if p.size and not (p.min() >= 0 and p.max() <= 1):  # NaN fails too
            raise ValueError(f"p must lie in [0, 1]; got {p[~((p >= 0) & (p <= 1))][0]}")
    gen = _generator(seed)
    return np.flatnonzero(gen.random(p.shape[0]) < p).astype(np.int64)


def k_subset_support(
    seed: int | np.random.Generator, k: int, d: int, *, validate: bool = True
) -> np.ndarray:
    """A uniformly random ``k``-subset of ``{0, ..., d-1}``, sorted (K2); ``1 <= k``, ``1 <= d``.

    ``validate=False`` skips the checks of ``k`` and ``d`` (then ints in ``[1, 2**53]``), for
    callers that have made them once (the encoders).
    """
    if validate:
        d = check_int_in_range(d, "d", 1, 2**53)
        k = check_int_in_range(k, "k", 1, 2**53)
    if k >= d:
        return np.arange(d, dtype=np.int64)
    gen = _generator(seed)
    return np.sort(gen.choice(d, size=k, replace=False, shuffle=False)).astype(np.int64)
