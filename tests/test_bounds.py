"""C4 bound calculators, C5 parameter choices and bits schedules."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvfl_theory.bounds import (
    bits_schedule,
    c5_parameters,
    compression_term,
    compression_weights,
    hex_round_error,
    max_step_size,
    scalar_round_error,
    step_sizes,
    theorem_4_2,
    theorem_4_4,
)
from cvfl_theory.compressors import HexLatticeQuantizer, ScalarQuantizer


def base_args(M=2, R=5, Q=2, E=0.1):
    return dict(
        F_gap=3.0,
        Q=Q,
        L=2.0,
        sigma2=[1.0] * (M + 1),
        B=4,
        H=[0.5] * (M + 1),
        G=[2.0] * (M + 1),
        E=np.full((R, M + 1), E),
    )


def test_theorem_4_2_terms_by_hand():
    # M = 1 (two blocks), R = 2 rounds, Q = 2, T = 4
    E = np.array([[1.0, 2.0], [3.0, 0.0]])
    r = theorem_4_2(
        F_gap=2.0,
        eta=0.01,
        T=4,
        Q=2,
        L=1.0,
        sigma2=[1.0, 3.0],
        B=2,
        H=[1.0, 2.0],
        G=[1.0, 1.0],
        E=E,
    )
    assert r.optimization == pytest.approx(4 * 2.0 / (0.01 * 4))
    assert r.variance == pytest.approx(6 * 0.01 * 2 * 1.0 * 4.0 / 2)
    # sum_t0 sum_m H^2 G^2 sum_{j != m} E_j: round 0: 1*2 + 4*1 = 6; round 1: 1*0 + 4*3 = 12
    assert r.compression == pytest.approx(92 * 4 / 2 * 18)
    assert r.total == pytest.approx(r.optimization + r.variance + r.compression)
    assert r.step_ok is True  # 0.01 <= 1/(16*2*1)
    assert "Theorem 4.2" in str(r)


def test_constants_are_explicit():
    r = theorem_4_2(eta=0.01, T=10, c_opt=1.0, c_var=0.0, c_comp=0.0, **base_args(R=5, Q=2))
    assert r.optimization == pytest.approx(3.0 / (0.01 * 10))
    assert r.variance == 0 and r.compression == 0


def test_step_condition():
    assert max_step_size(2, 1.0, [4.0, 2.0]) == pytest.approx(1 / (16 * 2 * 4))
    assert max_step_size(1, 3.0) == pytest.approx(1 / 48)
    r = theorem_4_2(eta=1.0, T=10, L_m=[1.0, 1.0, 1.0], **base_args(R=5, Q=2))
    assert r.step_ok is False
    with pytest.raises(ValueError, match="Q must be in"):
        max_step_size(0, 1.0)
    with pytest.raises(ValueError, match=r"L must be in \(0, inf\)"):
        max_step_size(1, -1.0)


@given(
    Qs=st.lists(st.sampled_from([1, 2, 3, 4, 5, 6, 8, 9, 10]), min_size=2, max_size=2, unique=True)
)
def test_monotone_in_Q_at_fixed_T(Qs):
    q1, q2 = sorted(Qs)
    T = 720  # divisible by every Q here
    lo = theorem_4_2(eta=1e-3, T=T, **base_args(R=T // q1, Q=q1))
    hi = theorem_4_2(eta=1e-3, T=T, **base_args(R=T // q2, Q=q2))
    assert hi.variance > lo.variance and hi.compression > lo.compression
    assert hi.optimization == pytest.approx(lo.optimization)


@given(M=st.integers(1, 6), E=st.floats(1e-6, 10.0), dE=st.floats(1e-6, 10.0))
def test_monotone_in_M_and_E(M, E, dE):
    small = theorem_4_2(eta=1e-3, T=10, **base_args(M=M, R=5, Q=2, E=E))
    more_e = theorem_4_2(eta=1e-3, T=10, **base_args(M=M, R=5, Q=2, E=E + dE))
    more_m = theorem_4_2(eta=1e-3, T=10, **base_args(M=M + 1, R=5, Q=2, E=E))
    assert more_e.compression > small.compression and more_e.total > small.total
    assert more_m.compression > small.compression and more_m.variance > small.variance


def test_theorem_4_4_reduces_to_4_2_for_constant_steps():
    args = base_args(R=6, Q=3)
    args["E"] = np.random.default_rng(0).uniform(0, 1, (6, 3))
    r2 = theorem_4_2(eta=0.005, T=18, **args)
    r4 = theorem_4_4(etas=[0.005] * 6, **args)
    for name in ("optimization", "variance", "compression"):
        assert getattr(r4, name) == pytest.approx(getattr(r2, name), rel=1e-12)


def test_theorem_4_4_diminishing():
    args = base_args(R=50, Q=1)
    r = theorem_4_4(etas=step_sizes(50, 0.01, 0.5), **args)
    assert r.optimization > 0 and r.variance > 0 and r.compression > 0 and r.step_ok
    assert r.theorem == "4.4"


def test_compression_term():
    E = np.array([[1.0, 2.0, 4.0]])
    w = np.array([1.0, 2.0, 3.0])
    got = compression_term(E, np.sqrt(w), np.ones(3))
    assert got[0] == pytest.approx(1 * 6 + 2 * 5 + 3 * 3)


def test_bad_bound_inputs():
    with pytest.raises(ValueError, match="multiple of Q"):
        theorem_4_2(eta=0.1, T=7, **base_args(Q=2))
    with pytest.raises(ValueError, match="shape"):
        theorem_4_2(eta=0.1, T=10, **{**base_args(R=5, Q=2), "E": np.ones((4, 3))})
    with pytest.raises(ValueError, match="M \\+ 1"):
        theorem_4_2(eta=0.1, T=10, **{**base_args(R=5, Q=2), "H": [1.0]})
    with pytest.raises(ValueError, match=r"eta must be in \(0, inf\)"):
        theorem_4_2(eta=-0.1, T=10, **base_args(R=5, Q=2))
    with pytest.raises(ValueError, match=r"F_gap must be in \[0, inf\)"):
        theorem_4_2(eta=0.1, T=10, **{**base_args(R=5, Q=2), "F_gap": math.nan})
    with pytest.raises(TypeError, match=r"L must be a real number in \(0, inf\), got '1'"):
        theorem_4_2(eta=0.1, T=10, **{**base_args(R=5, Q=2), "L": "1"})
    with pytest.raises(ValueError, match="E must be finite and >= 0"):
        theorem_4_2(eta=0.1, T=10, **{**base_args(R=5, Q=2), "E": [0.1, -0.1, 0.0]})
    with pytest.raises(ValueError):
        theorem_4_2(eta=0.1, T=10, **{**base_args(R=5, Q=2), "E": np.full((5, 3), np.nan)})


# ---------------------------------------------------------------- C5 parameters and schedules
def test_round_errors_match_the_compressors():
    x = np.random.default_rng(0).uniform(-1, 1, (4, 6))
    assert scalar_round_error(3, 4, 6, 2.0) == pytest.approx(
        ScalarQuantizer(3, range=(-1, 1)).expected_error(x)
    )
    assert hex_round_error(3, 4, 6, 2.0) == pytest.approx(
        HexLatticeQuantizer(3, range=(-1, 1)).expected_error(x)
    )


def test_c5_parameters():
    p = c5_parameters(T=10_000, B=10, P=16, span=2.0, h_norm2_max=4.0)
    assert p.q == math.ceil(math.log2(10 * 16 * 4 * 100))
    assert p.V == pytest.approx(1 / (10 * 16 * 100))
    assert p.k == min(16, math.ceil(16 - 16 / (10 * 4 * 100)))
    assert p.scalar_exact / p.scalar_published == pytest.approx((2**p.q / (2**p.q - 1)) ** 2)
    assert p.hex_exact / p.hex_published == pytest.approx(10 / (3 * math.sqrt(3)))
    # q_min: fewest bits with exact per-round error <= c / sqrt(T) (c = 1)
    exact = lambda q: 10 * 16 * 4 / (12 * (2**q - 1) ** 2)  # noqa: E731
    assert exact(p.q_min) <= 1 / 100 < exact(p.q_min - 1)
    assert p.q_min < p.q
    # the published choice makes the per-round published error O(1/sqrt T) (here <= 1/sqrt T)
    assert p.scalar_published * math.sqrt(10_000) <= 1
    assert p.hex_published * math.sqrt(10_000) <= 1


def test_bits_schedule_is_minimal_and_summable():
    etas = step_sizes(30, 0.1, 0.5)
    s = bits_schedule(etas, compressor="scalar", B=8, P=16, span=2.0, c=1e-2, power=1.5)
    assert s.all_feasible
    assert np.all(s.products <= s.targets * (1 + 1e-12))
    assert np.all(np.diff(s.partial_sums) > 0) and s.partial_sums[-1] <= s.envelope_sum
    assert np.all(np.diff(s.bits) >= 0)
    for t, b in enumerate(s.bits):  # one bit fewer would break the target
        if b > 1:
            assert etas[t] * scalar_round_error(int(b) - 1, 8, 16, 2.0) > s.targets[t]
    h = bits_schedule(etas, compressor="hex", B=8, P=16, span=2.0, c=1e-2, power=1.5)
    assert np.all(h.bits >= 2) and np.all(h.bits <= 8)


def test_bits_schedule_flags_infeasible_rounds():
    s = bits_schedule(step_sizes(5, 1.0), compressor="scalar", B=1000, P=1000, c=1e-12, max_bits=4)
    assert not s.all_feasible and np.all(s.bits == 4)
    with pytest.raises(ValueError, match="power must be > 1"):
        bits_schedule([0.1], power=1.0)
    for call in (lambda e: bits_schedule(e), lambda e: theorem_4_4(etas=e, **base_args(R=2))):
        with pytest.raises(ValueError, match="etas must be > 0"):
            call([0.1, 0.0])
    with pytest.raises(ValueError, match="min_bits"):
        bits_schedule([0.1], compressor=lambda b: 2.0**-b)
    s = bits_schedule([0.1, 0.1], compressor=lambda b: 2.0**-b, min_bits=1, max_bits=30, c=1e-3)
    assert s.bits.tolist() == [7, 9]  # 0.1 * 2^-b <= 1e-3 / (t+1)^2


# ---------------------------------------------------------------- term 3 from supplied bounds
def test_theorem_4_2_with_supplied_lemma1_by_hand():
    # M = 1, R = 2, Q = 2, T = 4; U[t0, m] are bounds on E||grad_m F_B(Phi) - grad_m F_B(Phi^)||^2
    U = np.array([[0.5, 1.5], [2.0, 0.0]])
    r = theorem_4_2(F_gap=2.0, eta=0.01, T=4, Q=2, L=1.0, sigma2=[1.0, 3.0], B=2, lemma1=U)
    assert r.optimization == pytest.approx(4 * 2.0 / (0.01 * 4))
    assert r.variance == pytest.approx(6 * 0.01 * 2 * 1.0 * 4.0 / 2)
    assert r.compression == pytest.approx(92 * 2**2 / 2 * (0.5 + 1.5 + 2.0 + 0.0))
    assert r.compression_form == "supplied" and "supplied form" in str(r)
    rec = theorem_4_2(
        F_gap=2.0, eta=0.01, T=4, Q=2, L=1.0, sigma2=[1.0, 3.0], B=2, H=[1, 1], G=[1, 1], E=U
    )
    assert rec.compression_form == "recovered"
    # one (M + 1,) row means the same bound every round
    r1 = theorem_4_2(F_gap=2.0, eta=0.01, T=4, Q=2, L=1.0, sigma2=[1.0, 3.0], B=2, lemma1=[1, 2])
    assert r1.compression == pytest.approx(92 * 4 / 2 * 6.0)


def test_supplied_lemma1_equal_to_the_recovered_right_side_gives_the_same_bound():
    args = base_args(M=2, R=6, Q=3)
    E = np.random.default_rng(1).uniform(0, 1, (6, 3))
    H, G = np.array([0.5, 1.0, 2.0]), np.array([1.0, 3.0, 0.5])
    args.update(E=E, H=H, G=G)
    U = H**2 * G**2 * (E.sum(axis=1, keepdims=True) - E)  # H_m^2 G_m^2 sum_{j != m} E_j
    sup = {k: v for k, v in args.items() if k not in ("H", "G", "E")}
    for thm, kw in ((theorem_4_2, {"eta": 0.004, "T": 18}), (theorem_4_4, {"etas": [0.004] * 6})):
        a = thm(**kw, **args)
        b = thm(**kw, **sup, lemma1=U)
        assert b.compression == pytest.approx(a.compression, rel=1e-12)
        assert (a.compression_form, b.compression_form) == ("recovered", "supplied")


def test_theorem_4_4_with_supplied_lemma1_by_hand():
    etas = np.array([0.02, 0.01])
    U = np.array([[1.0, 3.0], [4.0, 4.0]])
    r = theorem_4_4(F_gap=1.0, etas=etas, Q=2, L=1.0, sigma2=[1.0, 1.0], B=2, lemma1=U)
    denom = 2 * (0.02 + 0.01)
    assert r.compression == pytest.approx(92 * 8 * (0.02 * 4.0 + 0.01 * 8.0) / denom)


@pytest.mark.parametrize("fixed", [True, False])
def test_compression_weights_give_each_theorems_term_3(fixed):
    """Term 3 = sum_t a_t A_t for both theorems, with uneven per-round values (and steps)."""
    rng = np.random.default_rng(3)
    R, Q = 6, 3
    A = rng.random((R, 2))
    etas = np.full(R, 0.01) if fixed else rng.uniform(0.001, 0.1, R)
    common = {"F_gap": 1.0, "Q": Q, "L": 1.0, "sigma2": [0.0, 0.0], "B": 1, "lemma1": A}
    if fixed:
        t = theorem_4_2(eta=0.01, T=R * Q, **common)
    else:
        t = theorem_4_4(etas=etas, **common)
    a = compression_weights(Q, etas, fixed_step=fixed)
    assert a @ A.sum(axis=1) == pytest.approx(t.compression, rel=1e-13)
    assert compression_weights(Q, etas, fixed, c_comp=46.0) @ A.sum(axis=1) == pytest.approx(
        t.compression / 2, rel=1e-13
    )


def test_lemma1_and_hge_are_exclusive():
    args = base_args(R=5, Q=2)
    with pytest.raises(ValueError, match="not both"):
        theorem_4_2(eta=0.01, T=10, lemma1=np.ones((5, 3)), **args)
    no_h = {k: v for k, v in args.items() if k != "H"}
    with pytest.raises(ValueError, match="missing H"):
        theorem_4_2(eta=0.01, T=10, **no_h)
    bare = {k: v for k, v in args.items() if k not in ("H", "G", "E")}
    with pytest.raises(ValueError, match="missing E, G, H"):
        theorem_4_4(etas=[0.01] * 5, **bare)
    with pytest.raises(ValueError, match="lemma1 must have shape"):
        theorem_4_2(eta=0.01, T=10, lemma1=np.ones((4, 3)), **bare)
    with pytest.raises(ValueError, match="lemma1 must be finite"):
        theorem_4_2(eta=0.01, T=10, lemma1=[1.0, -1.0, 0.0], **bare)
