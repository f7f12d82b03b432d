"""C4.9 (ours): Lemma 1's tight bound at every local step of a round (cvfl_sim.bounds.drift).

The Monte Carlo comparison and the pathwise inequalities are in ``proofs_checks/c4_9_drift.py``
(run by ``tests/test_mutations.py``); here: the recursion against its closed forms, the reference
path against the training loop's own steps, and the probe and theorem wiring.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from cvfl_sim import CVFLConfig, train
from cvfl_sim.bounds.drift import (
    contraction,
    drift_bounds,
    drift_constants,
    reference_path,
    round_tight_bounds,
)
from cvfl_sim.bounds.lemma1 import Lemma1Probe
from cvfl_sim.bounds.theorems import bound_vs_observed, estimate_constants
from cvfl_sim.vfl.data import VerticalDataset
from cvfl_theory.compressors import Identity, ScalarQuantizer


def _data(n: int = 40, seed: int = 0) -> VerticalDataset:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 7)) + 0.5
    y = rng.integers(0, 3, size=n)
    parts = [X[:, :3], X[:, 3:]]
    return VerticalDataset(
        train_parts=[p[:30] for p in parts],
        test_parts=[p[30:] for p in parts],
        y_train=y[:30],
        y_test=y[30:],
        n_classes=3,
    )


class _Capture:
    """Records a deep copy of every state ``train`` hands the probe, then calls the probe."""

    def __init__(self, probe: Lemma1Probe):
        self.probe = probe
        self.states: list[dict] = []

    def __call__(self, **kw):
        self.states.append({k: copy.deepcopy(v) for k, v in kw.items()})
        self.probe(**kw)


def _config(compressor, Q: int = 4, parties_model: str = "linear", **kw) -> CVFLConfig:
    return CVFLConfig(
        Q=Q,
        lr=0.3,
        epochs=1,
        batch_size=10,
        parties_model=parties_model,
        embedding_size=2,
        compressor=compressor,
        dtype="float64",
        seed=5,
        **kw,
    )


# ------------------------------------------------------------------------------- the recursion
@pytest.mark.parametrize("rho", [1.0, 1.7])
def test_recursion_matches_its_closed_form(rho):
    """Constant t: A_k = t + Lambda eta t (q^k - 1)/(q - 1), q = rho + eta Lambda (q^k at rho = 1)."""
    t, lam, eta = 0.6, 4.0, 0.05
    got = drift_bounds(np.full((12, 2), t**2), eta, [lam, 0.0], [rho, rho])
    q = rho + eta * lam
    k = np.arange(12)
    want = t + lam * eta * t * (q**k - 1) / (q - 1)
    np.testing.assert_allclose(np.sqrt(got[:, 0]), want, rtol=1e-13)
    np.testing.assert_allclose(got[:, 1], t**2, rtol=1e-15)  # Lambda = 0: no drift
    if rho == 1.0:
        np.testing.assert_allclose(np.sqrt(got[:, 0]), t * (1 + eta * lam) ** k, rtol=1e-13)


def test_recursion_uses_each_steps_reference():
    """A_k reads t_k of its own step: zero reference bounds after step 0 still carry the drift."""
    got = drift_bounds([[1.0], [0.0], [0.0]], 0.5, [2.0], [1.0])
    # A_0 = 1, D_1 = 0.5, A_1 = 0 + 2 (0.5) = 1, D_2 = 0.5 + 0.5 = 1, A_2 = 2
    np.testing.assert_allclose(got.ravel(), [1.0, 1.0, 4.0])


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([[-1.0]], 0.1, [1.0], [1.0]), "reference"),
        (([[np.nan]], 0.1, [1.0], [1.0]), "reference"),
        (([[1.0]], 0.0, [1.0], [1.0]), "eta"),
        (([[1.0]], 0.1, [-1.0], [1.0]), "lipschitz"),
        (([[1.0]], 0.1, [1.0], [0.9]), "contraction"),
        (([[1.0]], 0.1, [1.0, 1.0], [1.0]), "lipschitz"),
        ((np.ones((0, 1)), 0.1, [1.0], [1.0]), "reference"),
    ],
)
def test_recursion_refuses_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        drift_bounds(*args)


def test_contraction_is_one_unless_the_step_overshoots():
    np.testing.assert_allclose(contraction(0.5, [1.0, 3.9, 6.0]), [1.0, 1.0, 2.0])


# ------------------------------------------------------------------------------- the path
def test_reference_path_is_the_training_loops_uncompressed_steps():
    """Without compression the run's own local steps are the reference path, step by step."""
    ds = _data()
    cap = _Capture(Lemma1Probe(every=1, steps="first", tight=False, progress=False))
    cfg = _config(Identity(64), Q=4)  # float64 values sent exactly
    train(ds, cfg, probe=cap)
    start = cap.states[0]
    path = reference_path(start["parties"], start["server"], start["x"], start["y"], cfg.lr, 4)
    assert len(path) == 4
    for k in range(1, 4):
        state = cap.states[k]
        assert (state["round_index"], state["step"]) == (0, k)
        for ref, now in zip([*path[k][0], path[k][1]], [*state["parties"], state["server"]]):
            for a, b in zip(ref.parameters(), now.parameters()):
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_without_compression_every_step_is_bounded_by_zero():
    ds = _data()
    cap = _Capture(Lemma1Probe(every=1, steps="first", tight=False, progress=False))
    train(ds, _config(Identity(), Q=3), probe=cap)
    s = cap.states[0]
    res = round_tight_bounds(s["parties"], s["server"], s["x"], s["y"], Identity(), None, 0.3, 3)
    assert res.bound.shape == (3, 3) and np.all(res.bound == 0.0)


def test_constants_refuse_models_that_are_not_the_analytic_one():
    ds = _data()
    cap = _Capture(Lemma1Probe(every=1, steps="first", tight=False, progress=False))
    train(ds, _config(Identity(), Q=1, parties_model="mlp"), probe=cap)
    s = cap.states[0]
    with pytest.raises(ValueError, match="analytic model"):
        drift_constants(s["parties"], s["server"], s["x"], [None, None], None, 0.1)


def test_constants_bound_the_exact_hessians_at_a_trained_point():
    """L_m >= the largest eigenvalue of each block's exact float64 Hessian, Lambda_m >= L_m."""
    ds = _data()
    cap = _Capture(Lemma1Probe(every=1, steps="first", tight=False, progress=False))
    cfg = _config(ScalarQuantizer(3), Q=2)
    cfg.epochs = 3
    train(ds, cfg, probe=cap)
    s = cap.states[-1]
    parties, server, x, y = s["parties"], s["server"], s["x"], s["y"]
    c = drift_constants(parties, server, x, [ScalarQuantizer(3)] * 2, None, 0.3)
    with torch.no_grad():
        Z = torch.cat([p(xm) for p, xm in zip(parties, x)], 1)
    flat0 = torch.cat([q.detach().reshape(-1) for q in server.parameters()])
    shapes = [q.shape for q in server.parameters()]

    def server_loss(v):
        Wv = v[: shapes[0].numel()].reshape(shapes[0])
        return nn.functional.cross_entropy(Z @ Wv.T + v[shapes[0].numel() :], y)

    H0 = torch.autograd.functional.hessian(server_loss, flat0)
    assert float(torch.linalg.eigvalsh(H0)[-1]) <= c.smoothness[0] * (1 + 1e-12)
    sizes = [int(h.shape[1]) for h in Z.split([2, 2], 1)]
    for m, (p, xm) in enumerate(zip(parties, x)):
        flat = torch.cat([q.detach().reshape(-1) for q in p.parameters()])
        pshapes = [q.shape for q in p.parameters()]

        def party_loss(v, m=m, xm=xm, pshapes=pshapes):
            A = v[: pshapes[0].numel()].reshape(pshapes[0])
            h = xm @ A.T + v[pshapes[0].numel() :]
            cols = list(Z.split(sizes, 1))
            cols[m] = h
            return nn.functional.cross_entropy(server(torch.cat(cols, 1)), y)

        H = torch.autograd.functional.hessian(party_loss, flat)
        eig = torch.linalg.eigvalsh(H)
        assert float(eig[0]) >= -1e-12  # convex in the block
        assert float(eig[-1]) <= c.smoothness[m + 1] * (1 + 1e-12)
    assert np.all(c.lipschitz >= c.smoothness)


# ------------------------------------------------------------------------------- the wiring
def test_probe_takes_the_round_bound_at_later_steps():
    """An analytic run: C4.9 at the later steps, equal to a direct call from the round start."""
    ds = _data()
    comp = ScalarQuantizer(3)
    cap = _Capture(Lemma1Probe(every=2, steps="ends", progress=False))
    cfg = _config(comp, Q=4)
    train(ds, cfg, probe=cap)
    rep = cap.probe.report()
    assert sorted(rep.tight_rounds) == [0, 2]
    for r, whole in rep.tight_rounds.items():
        s = next(st for st in cap.states if st["round_index"] == r and st["step"] == 0)
        direct = round_tight_bounds(
            s["parties"], s["server"], s["x"], s["y"], comp, s["server_compressor"], cfg.lr, 4
        )
        np.testing.assert_allclose(whole, direct.bound, rtol=1e-10)
        rows = rep.rounds == r
        np.testing.assert_allclose(rep.tight[rows], whole[[0, 3]], rtol=1e-12)
        assert [k for k, ok in zip(rep.tight_kinds, rows) if ok] == ["dithered", "dithered, drift"]
        assert np.all(np.diff(whole, axis=0) >= -1e-12 * whole[1:])  # the drift only adds


def test_probe_keeps_the_estimate_for_an_mlp():
    ds = _data()
    probe = Lemma1Probe(every=1, steps="ends", progress=False)
    train(ds, _config(ScalarQuantizer(3), Q=3, parties_model="mlp"), probe=probe)
    rep = probe.report()
    assert rep.tight_rounds == {} and set(rep.tight_kinds) == {"dithered"}


@pytest.mark.parametrize("parties_model", ["linear", "mlp"])
def test_theorem_reads_the_tight_form_as_a_bound_only_where_c4_9_applies(parties_model):
    ds = _data()
    cfg = _config(
        ScalarQuantizer(3), Q=3, parties_model=parties_model, track_grad_norm=True, eval_every=1
    )
    probe = Lemma1Probe(every=1, steps="ends", progress=False)
    run = train(ds, cfg, probe=probe)
    rep = probe.report()
    check = bound_vs_observed(run, estimate_constants(ds, cfg, run), lemma1=rep)
    name = "tight (C4.5, ours)"
    if parties_model == "linear":
        assert name in check.forms and name not in check.estimates
        # term 3 charges each round the mean over all Q steps of C4.9, not over the 2 probed
        R = len(run.rounds["lr"])
        means = np.array([rep.tight_rounds[r].mean(axis=0) for r in range(R)])
        probed = np.array([rep.tight[rep.rounds == r].mean(axis=0) for r in range(R)])
        assert not np.allclose(means, probed)
        # Theorem 4.2's term 3 with the recovered c_3 = 92: c_3 Q^2 / R sum_t0 sum_m U_m^t0
        want = 92.0 * 3**2 / R * float(means.sum())
        assert np.isclose(check.forms[name].compression, want, rtol=1e-12)
    else:
        assert name in check.estimates and name not in check.forms
        assert any("depend on the round's dither" in str(row[-1]) for row in check.rows)


# ------------------------------------------------------------------------------- C4.8 on the path
def _round_start(Q: int = 3, server_compressor=None):
    ds = _data()
    cap = _Capture(Lemma1Probe(every=1, steps="first", tight=False, progress=False))
    cfg = _config(ScalarQuantizer(2), Q=Q, server_compressor=server_compressor)
    train(ds, cfg, probe=cap)
    return cap.states[0], cfg


def test_sampled_blocks_are_the_full_calls_entries():
    """``blocks=[m]``: the same draws, block m's bound unchanged, the others nan."""
    from cvfl_sim.bounds.sampled_lemma1 import sampled_lemma1_bound

    s, _ = _round_start(server_compressor="same")
    args = (s["parties"], s["server"], s["x"], s["y"], ScalarQuantizer(2), s["server_compressor"])
    full = sampled_lemma1_bound(*args, draws=200, seed=3).bound
    for m in range(3):
        got = sampled_lemma1_bound(*args, draws=200, seed=3, blocks=[m]).bound
        assert got[m] == full[m]
        assert np.isnan(np.delete(got, m)).all()
    with pytest.raises(ValueError, match="blocks"):
        sampled_lemma1_bound(*args, draws=200, blocks=[3])


def test_round_sampled_bounds_take_c4_8_at_each_blocks_reference_point():
    """Row 0: C4.8 at the round start; later rows: the drift over C4.8 at block m's point of the
    uncompressed path (the others at the round start), each at level delta / (K (M + 1))."""
    from cvfl_sim.bounds.drift import round_sampled_bounds
    from cvfl_sim.bounds.sampled_lemma1 import sampled_lemma1_bound

    s, cfg = _round_start(Q=3, server_compressor="same")
    comp, comp0 = ScalarQuantizer(2), s["server_compressor"]
    args = (s["parties"], s["server"], s["x"], s["y"])
    res = round_sampled_bounds(*args, comp, comp0, cfg.lr, 3, draws=200, delta=0.3, seed=4)
    level = 0.3 / (3 * 3)
    start = sampled_lemma1_bound(*args, comp, comp0, draws=200, delta=level, seed=4).bound
    np.testing.assert_array_equal(res.reference[0], start)
    path = reference_path(*args, cfg.lr, 3)
    ps, srv = path[2]
    want = sampled_lemma1_bound(
        [ps[0], s["parties"][1]], s["server"], s["x"], s["y"], comp, comp0,
        draws=200, delta=level, seed=4 + 2 * 3 + 1, blocks=[1],
    ).bound[1]  # fmt: skip
    assert res.reference[2, 1] == want
    np.testing.assert_allclose(
        res.bound,
        drift_bounds(res.reference, cfg.lr, res.constants.lipschitz, res.constants.contraction),
    )
    assert np.all(res.bound[1:] >= res.reference[1:])


def test_probe_sampled_later_makes_the_sampled_form_a_bound():
    ds = _data()
    cfg = _config(ScalarQuantizer(2), Q=3, track_grad_norm=True, eval_every=1)
    for later in (True, False):
        probe = Lemma1Probe(every=1, steps="ends", progress=False, sampled=100, sampled_later=later)
        run = train(ds, cfg, probe=probe)
        rep = probe.report()
        check = bound_vs_observed(run, estimate_constants(ds, cfg, run), lemma1=rep)
        name = "sampled (C4.8, ours)"
        if later:
            R = len(run.rounds["lr"])
            assert sorted(rep.sampled_rounds) == list(range(R))
            rows = rep.rounds == 0
            np.testing.assert_array_equal(rep.sampled[rows], rep.sampled_rounds[0][[0, 2]])
            assert name in check.forms and name not in check.estimates
        else:
            assert rep.sampled_rounds == {} and np.isnan(rep.sampled[rep.steps > 0]).all()
            assert name in check.estimates and name not in check.forms


def test_probe_refuses_a_non_boolean_sampled_later():
    with pytest.raises(TypeError, match="sampled_later"):
        Lemma1Probe(sampled_later=1)
