"""K6.2 water-filling: exactness, KKT certificate, edge cases, bad input."""

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from cvfl_theory.waterfill import water_fill

EPS = np.finfo(np.float64).eps


def reference_threshold(a, budget, caps=None):
    """Independent reference: geometric bisection on f(lam) = sum min(c, a/lam) = B.

    lam* lies in [min_S a/c, sum(a)/B] (f >= sum c > B at the left end, f <= sum(a)/lam).
    """
    a = np.asarray(a, dtype=np.float64).ravel()
    c = np.ones_like(a) if caps is None else np.broadcast_to(caps, a.shape).astype(float).ravel()
    on = a > 0
    a, c = a[on], c[on]
    lo, hi = float(np.min(a / c)), float(np.sum(a) / budget)
    for _ in range(400):
        mid = math.exp(0.5 * (math.log(lo) + math.log(hi)))  # geometric mean without underflow
        if not lo < mid < hi:
            break
        if np.sum(np.minimum(c, a / mid)) > budget:
            lo = mid
        else:
            hi = mid
    return hi


def tol_for(n):
    """Round-off allowance of the certificate: sums of n terms, a few ulps each."""
    return max(1e-12, 16 * n * EPS)


# ---------------------------------------------------------------------------- examples
def test_small_examples():
    res = water_fill(np.array([1.0, 1.0, 1.0, 0.0]), 3.0)  # B = |S|
    np.testing.assert_array_equal(res.p, [1.0, 1.0, 1.0, 0.0])
    assert res.saturated and res.threshold == 0.0 and res.objective == 0.0
    res = water_fill(np.array([3.0, 1.0, 0.0]), 1.0)
    assert res.threshold == 4.0 and res.low_budget
    np.testing.assert_allclose(res.p, [0.75, 0.25, 0.0])
    # objective (1/0.75 - 1) 9 + (4 - 1) 1 = 6
    assert res.objective == pytest.approx(6.0, rel=1e-15)


def test_capped_example():
    # a = (10, 1, 1), B = 2: entry 0 capped, lam = 2/(2-1) = 2, p = (1, .5, .5)
    res = water_fill(np.array([10.0, 1.0, 1.0]), 2.0)
    np.testing.assert_allclose(res.p, [1.0, 0.5, 0.5])
    assert res.threshold == pytest.approx(2.0)
    assert res.n_capped == 1 and not res.low_budget
    assert res.certificate.holds()


# ---------------------------------------------------------------------------- properties
def weight_arrays():
    """Non-negative weights with zeros, ties, a huge dynamic range, a single non-zero."""
    mags = st.one_of(
        st.just(0.0),
        st.floats(1e-3, 1e3, allow_subnormal=False),
        st.sampled_from([1.0, 2.0, 3.0]),  # ties
        st.builds(lambda m, e: m * 10.0**e, st.floats(1, 10), st.integers(-100, 100)),
    )
    return st.integers(1, 60).flatmap(lambda n: arrays(np.float64, n, elements=mags))


@given(a=weight_arrays(), frac=st.floats(0.01, 1.3))
def test_certificate_holds_and_matches_reference(a, frac):
    s = int(np.count_nonzero(a))
    assume(s > 0)
    budget = frac * s
    res = water_fill(a, budget)
    cert = res.certificate
    assert cert.holds(tol_for(a.size)), str(cert)
    assert np.all(res.p[a == 0] == 0)
    if budget >= s:
        assert res.saturated and res.objective == 0.0
        np.testing.assert_array_equal(res.p[a > 0], 1.0)
    else:
        assert not res.saturated
        ref = reference_threshold(a, budget)
        assert res.threshold == pytest.approx(ref, rel=1e-12)
        assert np.sum(res.p) == pytest.approx(budget, rel=tol_for(a.size))


def test_single_nonzero():
    a = np.zeros(1000)
    a[17] = 5.0
    res = water_fill(a, 0.25)
    assert res.p[17] == 0.25 and res.threshold == 20.0 and res.certificate.holds()
    assert res.objective == pytest.approx((1 / 0.25 - 1) * 25)
    res = water_fill(a, 1.0)
    assert res.saturated and res.objective == 0.0 and "saturated" in res.status


@given(
    a=arrays(np.float64, st.integers(1, 40), elements=st.floats(0, 100, allow_subnormal=False)),
    c=st.floats(0.05, 1.0),
    frac=st.floats(0.01, 0.99),
    data=st.data(),
)
def test_caps(a, c, frac, data):
    s = int(np.count_nonzero(a))
    assume(s > 0)
    caps = data.draw(arrays(np.float64, a.shape, elements=st.floats(c, 1.0)))
    budget = frac * float(np.sum(caps[a > 0]))
    res = water_fill(a, budget, caps=caps)
    assert res.certificate.holds(tol_for(a.size)), str(res.certificate)
    assert np.all(res.p <= caps)
    assert res.threshold == pytest.approx(reference_threshold(a, budget, caps), rel=1e-12)


@pytest.mark.parametrize(
    "kind", ["lognormal", "ties", "geometric", "exponential-with-zeros", "caps"]
)
@pytest.mark.parametrize("frac", [1e-4, 0.02, 0.5, 0.97])
def test_large_selection_path(kind, frac):
    """N > the sorting cut-off exercises the sampled-bracket selection."""
    rng = np.random.default_rng(7)
    n = 60_000
    caps = None
    if kind == "lognormal":
        a = rng.lognormal(0, 3, n)
    elif kind == "ties":
        a = rng.integers(0, 4, n).astype(float)
    elif kind == "geometric":
        a = 1.001 ** -np.arange(n)
    elif kind == "caps":
        a = rng.exponential(size=n)
        caps = rng.uniform(0.1, 1.0, n)
    else:
        a = rng.exponential(size=n) * (rng.random(n) < 0.3)
    s = float(np.sum(a > 0) if caps is None else np.sum(caps[a > 0]))
    res = water_fill(
        a.reshape(300, 200), frac * s, caps=None if caps is None else caps.reshape(300, 200)
    )
    assert res.p.shape == (300, 200)
    assert res.certificate.holds(tol_for(n)), str(res.certificate)
    assert res.threshold == pytest.approx(reference_threshold(a, frac * s, caps), rel=1e-11)


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    a = torch.tensor([[3.0, 1.0], [0.0, 4.0]], dtype=torch.float64)
    res = water_fill(a, 1.0)
    assert isinstance(res.p, torch.Tensor) and res.p.shape == (2, 2)
    np.testing.assert_allclose(res.p.numpy(), [[0.375, 0.125], [0.0, 0.5]])


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "a, budget, match",
    [
        ([1.0, np.nan], 1.0, "finite"),
        ([1.0, np.inf], 1.0, "finite"),
        ([1.0, -2.0], 1.0, "non-negative"),
        ([1.0, 2.0], 0.0, "budget"),
        ([1.0, 2.0], -1.0, "budget"),
        ([1.0, 2.0], np.nan, "budget"),
        ([1.0, 2.0], np.inf, "budget"),
        ([], 1.0, "empty"),
    ],
)
def test_bad_input(a, budget, match):
    with pytest.raises(ValueError, match=match):
        water_fill(np.array(a), budget)


def test_bad_caps_and_types():
    with pytest.raises(ValueError, match="caps"):
        water_fill(np.ones(3), 1.0, caps=0.0)
    with pytest.raises(ValueError, match="caps"):
        water_fill(np.ones(3), 1.0, caps=np.ones(4))
    with pytest.raises(TypeError):
        water_fill(np.array(["a"]), 1.0)
    with pytest.raises(TypeError):
        water_fill(np.ones(3), "one")


def test_all_zero_is_saturated():
    res = water_fill(np.zeros((3, 4)), 2.0)
    assert res.saturated and res.support_size == 0 and res.objective == 0.0
    assert res.certificate.holds()


def test_extreme_dynamic_range():
    # a subnormal entry next to 1: still solved, p stays positive
    res = water_fill(np.array([1.0, 2.2e-311]), 1.5)
    assert res.certificate.holds() and res.p[1] == 0.5
    # p = a/lambda underflows to 0: refused with an explanation, never a silently biased p
    with pytest.raises(ValueError, match="dynamic range"):
        water_fill(np.array([1.0, 1e-300, 5e-324]), 0.5)
