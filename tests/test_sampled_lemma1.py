"""C4.8 (ours): the confidence bound on Lemma 1's left side, cvfl_sim.bounds.sampled_lemma1.

The settings here are not the proofs check's (other seeds, sizes, ranges and models), so the
bound is checked where none of its choices were made.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom
from torch import nn

import cvfl_sim.bounds.sampled_lemma1 as sl
from cvfl_theory.compressors import HexLatticeQuantizer, Identity, ScalarQuantizer, TopK
from proofs_checks.c4_5_tight_term import measured_lemma1

Z = 5.0  # standard errors allowed in the Monte Carlo comparisons


def _softmax(u: np.ndarray) -> np.ndarray:
    e = np.exp(u - u.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _model(seed: int, B: int, confident: float = 4.0, mlp: bool = True):
    """Three parties (linear, MLP, linear), a linear head with 4 classes; labels as predicted
    for most samples and one wrong, the head scaled by ``confident`` (near a vertex)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    dims, P, K = (4, 3, 2), (2, 3, 2), 4
    parties: list[nn.Module] = [nn.Linear(dims[0], P[0]).double()]
    parties.append(
        nn.Sequential(nn.Linear(dims[1], 5), nn.Tanh(), nn.Linear(5, P[1])).double()
        if mlp
        else nn.Linear(dims[1], P[1]).double()
    )
    parties.append(nn.Linear(dims[2], P[2]).double())
    server = nn.Linear(sum(P), K).double()
    xs = [torch.randn(B, d, generator=gen, dtype=torch.float64) * 1.5 for d in dims]
    with torch.no_grad():
        z = torch.cat([p(x) for p, x in zip(parties, xs)], 1)
        y = server(z).argmax(1)
        y[0] = (y[0] + 1) % K  # one misclassified sample
        server.weight.mul_(confident)
        server.bias.mul_(confident)
    return parties, server, xs, y


# ---------------------------------------------------------------------------- softmax_box
@settings(max_examples=60, deadline=None)
@given(
    K=st.integers(2, 7),
    scale=st.floats(0.1, 40.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_softmax_box_contains_every_point_of_the_box(K, scale, seed):
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(1, K)) * scale
    r = rng.uniform(0.0, 2.0, size=K)
    p, up, lo = sl.softmax_box(u, (r[:, None] + r[None, :])[None])
    np.testing.assert_allclose(p, _softmax(u), rtol=1e-12)
    D = rng.uniform(-1.0, 1.0, size=(500, K)) * r
    D[:250] = np.sign(D[:250]) * r
    q = _softmax(u + D)
    assert (q <= up * (1 + 1e-12) + 1e-300).all() and (q >= lo * (1 - 1e-12)).all()
    assert (lo <= p).all() and (p <= up).all()


def test_softmax_box_is_exact_for_two_classes_and_trivial_for_no_change():
    for m, rho in ((1.0, 0.4), (-7.0, 2.0), (25.0, 1e-3)):
        _, up, lo = sl.softmax_box(np.array([[m, 0.0]]), np.full((1, 2, 2), rho))
        sig = lambda t: 1.0 / (1.0 + math.exp(-t))  # noqa: E731
        assert up[0, 0] == pytest.approx(sig(m + rho), rel=1e-13)
        assert lo[0, 0] == pytest.approx(sig(m - rho), rel=1e-13)
        assert up[0, 1] == pytest.approx(sig(-m + rho), rel=1e-13)
    u = np.array([[3.0, -1.0, 0.5]])
    p, up, lo = sl.softmax_box(u, np.zeros((1, 3, 3)))
    np.testing.assert_array_equal(up, p)
    np.testing.assert_array_equal(lo, p)


def test_softmax_box_keeps_a_confident_sample_s_small_changes():
    # p_top = 1 - 1e-20: 1 - p rounds to 0 in float64, but the change bound must not
    u = np.array([[46.0, 0.0, 0.0]])
    p, up, lo = sl.softmax_box(u, np.full((1, 3, 3), 0.1))
    off = p[0, 1]
    assert off > 0 and up[0, 1] == pytest.approx(off * math.exp(0.2), rel=1e-6)
    assert lo[0, 1] == pytest.approx(off * math.exp(-0.2), rel=1e-6)


# ---------------------------------------------------------------------------- Maurer's bound
def test_nonnegative_mean_bound_solves_maurer_s_quadratic():
    for mean, c, d, k, L in (
        (0.3, 2.0, 0.0, 500, 2.0),
        (1.0, 0.5, 1.0, 300, 3.5),
        (0.0, 1, 1, 100, 1),
    ):
        U = sl.nonnegative_mean_bound(mean, c, d, k, L)
        assert U >= mean
        assert (U - mean) ** 2 == pytest.approx(2 * L / k * (c * U + d * U * U), rel=1e-10)
    assert sl.nonnegative_mean_bound(1.0, 1.0, 1.0, 10, 5.0) == math.inf  # 2 L d / k >= 1


@pytest.mark.parametrize("k", [50, 250])
def test_nonnegative_mean_bound_misses_with_probability_at_most_delta(k):
    """Exact enumeration for Z = c * Bernoulli(pi): E Z^2 = c E Z, the second moment's tight case."""
    delta, c = 0.1, 3.0
    L = math.log(1 / delta)
    n = np.arange(k + 1)
    for pi in (0.02, 0.05, 0.2, 0.5, 0.9):
        miss = np.array([sl.nonnegative_mean_bound(c * j / k, c, 0.0, k, L) < c * pi for j in n])
        assert binom.pmf(n, k, pi)[miss].sum() <= delta


# ---------------------------------------------------------------------------- the ranges
def _sample_grad(block, parties, server, xs, y, i, eps, e0):
    """Sample i's gradient of block (0: server) at the view: rows + eps (others), server + e0."""
    M = len(parties)
    loss_of = nn.functional.cross_entropy
    with torch.no_grad():
        H = [p(x[i : i + 1]) for p, x in zip(parties, xs)]
    if block == 0:
        srv = server
        z = torch.cat([h + e for h, e in zip(H, eps)], 1)
        loss = loss_of(srv(z), y[i : i + 1])
        params = list(srv.parameters())
    else:
        m = block - 1
        srv = nn.Linear(server.in_features, server.out_features).double()
        flat = torch.cat([v.detach().reshape(-1) for v in server.parameters()]) + e0
        nw = server.weight.numel()
        with torch.no_grad():
            srv.weight.copy_(flat[:nw].reshape(server.weight.shape))
            srv.bias.copy_(flat[nw:])
        own = parties[m](xs[m][i : i + 1])
        z = torch.cat([own if j == m else H[j] + eps[j] for j in range(M)], 1)
        loss = loss_of(srv(z), y[i : i + 1])
        params = list(parties[m].parameters())
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])


def _half_widths(comp, x, draws=200):
    rng = np.random.default_rng(9)
    e = torch.stack([comp.roundtrip(x, rng=rng) - x for _ in range(draws)])
    return e.abs().amax(dim=(0, 2))


@pytest.mark.parametrize("comp", [ScalarQuantizer(2), ScalarQuantizer(3, range="minmax-tensor")])
def test_per_sample_ranges_cover_the_corners_of_the_support(comp):
    parties, server, xs, y = _model(11, 4)
    c0 = ScalarQuantizer(2)
    ranges = sl.per_sample_ranges(parties, server, xs, y, comp, c0)
    assert len(ranges) == 4 and ranges[0][1] is None
    with torch.no_grad():
        H = [p(x) for p, x in zip(parties, xs)]
    theta0 = torch.cat([v.detach().reshape(-1) for v in server.parameters()]).reshape(1, -1)
    hw = [_half_widths(comp, h) for h in H]
    hw0 = float(_half_widths(c0, theta0)[0])
    gen = torch.Generator().manual_seed(4)

    def corner(n, w):
        return (torch.randint(0, 2, (1, n), generator=gen, dtype=torch.float64) * 2 - 1) * w

    worst = 0.0
    for i in range(4):
        for _ in range(40):
            eps = [corner(h.shape[1], w[i]) for h, w in zip(H, hw)]
            zero = [torch.zeros_like(e) for e in eps]
            e0, e0b = corner(theta0.shape[1], hw0)[0], corner(theta0.shape[1], hw0)[0]
            for block, (beta, gamma) in enumerate(ranges):
                a = _sample_grad(block, parties, server, xs, y, i, eps, e0)
                s = (a - _sample_grad(block, parties, server, xs, y, i, zero, e0)).norm()
                assert float(s) <= beta[i], (block, i)
                worst = max(worst, float(s) / beta[i])
                if gamma is not None:
                    t = (a - _sample_grad(block, parties, server, xs, y, i, eps, e0b)).norm()
                    assert float(t) <= gamma[i], (block, i)
    assert worst > 0.2  # the corners reach a fair part of the range (the search has power)


# ---------------------------------------------------------------------------- the bound
_CASES = [
    ("hex, server uncompressed", HexLatticeQuantizer(2), None, 12, 5.0),
    (
        "scalar tensor range, server scalar",
        ScalarQuantizer(2, range="minmax-tensor"),
        ScalarQuantizer(3),
        12,
        2.0,
    ),
    ("scalar, B = 1", ScalarQuantizer(2), None, 1, 5.0),
    ("server only, hex", Identity(64), HexLatticeQuantizer(2), 12, 3.0),
]


@pytest.mark.parametrize("name,comp,comp0,B,confident", _CASES, ids=[c[0] for c in _CASES])
def test_bound_is_above_the_monte_carlo_truth(name, comp, comp0, B, confident):
    parties, server, xs, y = _model(23, B, confident)
    r = sl.sampled_lemma1_bound(parties, server, xs, y, comp, comp0, draws=1500, seed=2)
    draws = 500
    mc = measured_lemma1(parties, server, xs, y, comp, comp0 or Identity(64), draws, seed=77)
    mean, se = mc.mean(axis=0), mc.std(axis=0, ddof=1) / math.sqrt(draws)
    assert (r.bound >= mean - Z * se).all(), (r.bound, mean, se)
    # the parts add up, and the estimate is the draws' mean of the same quantity
    np.testing.assert_allclose(r.variance_part + r.server_part + r.mean_part, r.bound, rtol=1e-12)
    tol = Z * np.sqrt(se**2 + r.standard_error**2)
    assert (np.abs(r.estimate - mean) <= tol + 1e-20).all()  # (0 vs round-off)
    if comp0 is None:  # tight without a compressed server model
        on = mean > 0
        assert (r.bound[on] / mean[on] <= 10).all(), r.bound / mean


def test_the_server_error_term_is_needed():
    """Server-only compression: without T the bound would fall below the truth."""
    parties, server, xs, y = _model(5, 12, 3.0)
    c0 = ScalarQuantizer(2)
    r = sl.sampled_lemma1_bound(parties, server, xs, y, Identity(64), c0, draws=1500, seed=8)
    draws = 500
    mc = measured_lemma1(parties, server, xs, y, Identity(64), c0, draws, seed=3)
    mean, se = mc.mean(axis=0), mc.std(axis=0, ddof=1) / math.sqrt(draws)
    assert (r.variance_part[1:] < 1e-20).all()  # no party error: S = 0
    assert (r.bound[1:] >= mean[1:] - Z * se[1:]).all()
    # bound less T (and less T in the Chebyshev term): the squared mean of the draws only
    assert (r.mean_part[1:] - r.server_part[1:] < mean[1:] - Z * se[1:]).any()


def test_more_draws_tighten_the_bound_and_the_seed_reproduces_it():
    parties, server, xs, y = _model(31, 10)
    c = ScalarQuantizer(2)
    few = sl.sampled_lemma1_bound(parties, server, xs, y, c, draws=200, seed=4)
    again = sl.sampled_lemma1_bound(parties, server, xs, y, c, draws=200, seed=4)
    many = sl.sampled_lemma1_bound(parties, server, xs, y, c, draws=3000, seed=4)
    np.testing.assert_array_equal(few.bound, again.bound)
    assert (many.bound < few.bound).all()
    assert "C4.8" in str(many) and "<table" in many._repr_html_()
    assert all(len(line) <= 100 for line in str(many).splitlines())


def test_float32_models_are_not_changed():
    parties, server, xs, y = _model(2, 6)
    parties = [p.float() for p in parties]
    server = server.float()
    xs = [x.float() for x in xs]
    before = [v.detach().clone() for v in server.parameters()]
    r = sl.sampled_lemma1_bound(parties, server, xs, y, ScalarQuantizer(3), draws=100)
    assert np.isfinite(r.bound).all()
    assert all(v.dtype == torch.float32 for v in server.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, server.parameters()))


def test_float32_identity_has_no_error_on_the_float64_copies():
    """Identity() sends float32; on the bound's float64 copies its rounding is no error (the
    training's embeddings are float32 already), so no realised error leaves a zero support."""
    parties, server, xs, y = _model(4, 6)
    parties = [p.float() for p in parties]
    xs = [x.float() for x in xs]
    none = sl.sampled_lemma1_bound(parties, server.float(), xs, y, Identity(), draws=100)
    assert (none.bound >= 0).all() and (none.bound < 1e-30).all(), none.bound
    half = [Identity(), ScalarQuantizer(2), Identity()]
    r = sl.sampled_lemma1_bound(parties, server.float(), xs, y, half, draws=100)
    # the server's block and the other parties' see party 2's error; its own block does not
    assert (r.bound[[0, 1, 3]] > 1e-6).all() and r.bound[2] < 1e-30, r.bound


def test_bad_input_is_refused_before_any_work():
    parties, server, xs, y = _model(1, 4)
    c = ScalarQuantizer(2)
    with pytest.raises(ValueError, match="draws"):
        sl.sampled_lemma1_bound(parties, server, xs, y, c, draws=99)
    with pytest.raises(ValueError, match="delta"):
        sl.sampled_lemma1_bound(parties, server, xs, y, c, delta=1.0)
    with pytest.raises(ValueError, match="delta"):
        sl.sampled_lemma1_bound(parties, server, xs, y, c, delta=0.0)
    with pytest.raises(ValueError, match="compressors"):
        sl.sampled_lemma1_bound(parties, server, xs, y, [c, c])
    with pytest.raises(ValueError, match="dithered"):
        sl.sampled_lemma1_bound(parties, server, xs, y, TopK(bits=3))
    with pytest.raises(ValueError, match="dithered"):
        sl.sampled_lemma1_bound(parties, server, xs, y, c, ScalarQuantizer(2, dither=False))
    mlp_head = nn.Sequential(nn.Linear(7, 4), nn.Tanh(), nn.Linear(4, 4)).double()
    with pytest.raises(ValueError, match="linear server head"):
        sl.sampled_lemma1_bound(parties, mlp_head, xs, y, c)
    with pytest.raises(ValueError, match="class labels"):
        sl.sampled_lemma1_bound(parties, server, xs, y + 4, c)
    with pytest.raises(ValueError, match="y must"):
        sl.sampled_lemma1_bound(parties, server, xs, y[:2], c)


def test_an_error_outside_the_support_is_refused(monkeypatch):
    """Overload is refused up front; draws that leave the dither's support, on every draw."""
    parties, server, xs, y = _model(1, 4)
    clip = ScalarQuantizer(2, range=(-0.01, 0.01), out_of_range="clip")
    with pytest.raises(ValueError, match="overload"):
        sl.sampled_lemma1_bound(parties, server, xs, y, clip, draws=100)
    # dithered in name, but its error twice the support (patched on the instance only: a
    # subclass would join the wire format's registry of compressors)
    wide = ScalarQuantizer(2)
    plain = wide.roundtrip
    monkeypatch.setattr(wide, "roundtrip", lambda x, rng=None: x + 2.0 * (plain(x, rng=rng) - x))
    with pytest.raises(ValueError, match="outside the dither's support"):
        sl.sampled_lemma1_bound(parties, server, xs, y, wide, draws=100)


def test_poincare_constants_cover_the_jacobian_on_a_held_out_model():
    """T's Poincaré constant: None where there is no server error, and Lambda never exceeded."""
    from proofs_checks.c4_8_sampled_lemma1 import poincare_coverage, tiny_model

    parties, server, xs, y = tiny_model(13, 5)
    c = ScalarQuantizer(3)
    with_server = sl.poincare_constants(parties, server, xs, y, c, ScalarQuantizer(2))
    assert with_server[0] is None and all(v is not None and v > 0 for v in with_server[1:])
    assert sl.poincare_constants(parties, server, xs, y, c, None) == [None, None, None]
    worst = poincare_coverage(seed=9, points=8)  # another seed than the proofs check's
    assert 0.0 < worst <= 1.0
