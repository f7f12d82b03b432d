"""node_generators re-seeds one generator with exactly the state numpy.random.SFC64(seed) has."""

import numpy as np
import pytest

from cvfl_theory import _kernels
from cvfl_theory.sampling import (
    bernoulli_support,
    bernoulli_support_varying,
    k_subset_support,
    node_generator,
    node_generators,
)

EDGES = [0, 1, 2, 3, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**63, 2**64 - 2, 2**64 - 1]


def _seeds() -> list[int]:
    rng = np.random.default_rng(20261202)
    wide = rng.integers(0, 2**64 - 1, size=3000, dtype=np.uint64, endpoint=True)
    narrow = rng.integers(0, 2**32, size=3000, dtype=np.uint64)
    return EDGES + [int(s) for s in wide] + [int(s) for s in narrow]


def test_kernel_state_is_numpys_sfc64_state_across_the_seed_range():
    for seed in _seeds():
        want = tuple(int(w) for w in np.random.SFC64(seed).state["state"]["state"])
        assert _kernels.sfc64_state(seed) == want, seed


def test_each_generator_draws_what_a_fresh_node_generator_draws():
    seeds = _seeds()[:400]
    for seed, gen in zip(seeds, node_generators(seeds)):
        fresh = node_generator(seed)
        # several kinds of draw, so a state that agrees on one buffer only would show
        np.testing.assert_array_equal(gen.random(5), fresh.random(5))
        np.testing.assert_array_equal(gen.integers(0, 2**40, 3), fresh.integers(0, 2**40, 3))
        np.testing.assert_array_equal(gen.standard_exponential(7), fresh.standard_exponential(7))


def test_numpy_integer_seeds_are_accepted_as_their_values():
    seeds = np.array([5, 2**64 - 1], dtype=np.uint64)
    for seed, gen in zip(seeds, node_generators(seeds)):
        np.testing.assert_array_equal(gen.random(3), node_generator(int(seed)).random(3))


def test_supports_from_a_seed_equal_supports_from_numpys_own_generator_and_ours():
    # a seed re-seeds the calling thread's generator: numpy's SFC64(seed), built fresh, is the
    # independent reference, and node_generators' re-seeded one must agree with both
    seeds = _seeds()[:200]
    p = np.linspace(0.0, 1.0, 30)
    draws = [
        lambda g: bernoulli_support(g, 0.3, 50),
        lambda g: k_subset_support(g, 7, 40),
        lambda g: bernoulli_support_varying(g, p),
    ]
    for draw in draws:
        for seed, gen in zip(seeds, node_generators(seeds)):
            want = draw(node_generator(seed))
            np.testing.assert_array_equal(draw(seed), want)
            np.testing.assert_array_equal(draw(gen), want)


def test_threads_drawing_from_seeds_at_once_each_get_their_seeds_supports():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    seeds = _seeds()[:300]
    want = [bernoulli_support(node_generator(s), 0.01, 20000) for s in seeds]
    start = threading.Barrier(4)  # the four threads draw at the same time

    def draw(offset: int) -> list[np.ndarray]:
        start.wait(timeout=30)
        order = seeds[offset:] + seeds[:offset]
        got = [bernoulli_support(s, 0.01, 20000) for s in order]
        return got[-offset:] + got[:-offset] if offset else got

    with ThreadPoolExecutor(4) as pool:
        for got in pool.map(draw, [0, 75, 150, 225]):
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)


def test_skipping_validation_draws_the_same_supports():
    for seed in _seeds()[:100]:
        for p in (0.05, 0.3, 0.9, 1.0):
            np.testing.assert_array_equal(
                bernoulli_support(seed, p, 64, validate=False), bernoulli_support(seed, p, 64)
            )
        for k in (1, 7, 40):
            np.testing.assert_array_equal(
                k_subset_support(seed, k, 40, validate=False), k_subset_support(seed, k, 40)
            )


@pytest.mark.parametrize("bad", [-1, 2**64, True, 1.5, "7"])
def test_bad_seeds_are_refused_naming_the_seed(bad):
    with pytest.raises((ValueError, TypeError), match="seed"):
        next(node_generators([bad]))
    with pytest.raises((ValueError, TypeError), match="seed"):
        bernoulli_support(bad, 0.3, 50)


def test_a_generator_that_is_not_sfc64_is_refused():
    # a receiver regenerates the support from the seed with SFC64: a PCG64 stream is not one
    with pytest.raises(TypeError, match="SFC64"):
        bernoulli_support(np.random.default_rng(7), 0.3, 50)
