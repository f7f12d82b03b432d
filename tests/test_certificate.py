"""The trajectory certificate (C4.7, ours): its smoothness against float64 Hessians, its value
against an independent implementation, and >= the observed value on runs it was not tuned on.

The independent implementation (``_reference``) records every iterate and batch of a run with its
own probe, recomputes every gradient with ``torch.func`` and sums the certificate's terms from
those arrays, so a wrong sum, sign, factor or step index in the module is seen as a difference.
"""

import math

import numpy as np
import pytest
import torch
from _helpers import tiny_dataset
from torch import nn
from torch.func import functional_call, grad

from cvfl_sim.bounds.certificate import CERTIFICATE_TERMS, TrajectoryProbe, best_alpha
from cvfl_sim.bounds.probes import probes
from cvfl_sim.vfl.compressors import make_compressor
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import load_dataset
from cvfl_sim.vfl.train import train

F64 = torch.float64


def _cfg(comp="scalar", bits=2, Q=3, lr=0.05, model="linear", **kw):
    base = dict(
        Q=Q,
        lr=lr,
        epochs=1,
        batch_size=16,
        embedding_size=2,
        parties_model=model,
        server_model="linear",
        compressor=make_compressor(comp, bits),
        seed=11,
    )
    return CVFLConfig(**{**base, **kw})


class _Record:
    """Every iterate (float64), step size and batch a run's local steps see."""

    def __init__(self):
        self.rows = []

    def __call__(self, *, round_index, step, eta, parties, server, x, y, **_):
        flat = torch.cat(
            [q.detach().reshape(-1).to(F64) for n in [*parties, server] for q in n.parameters()]
        )
        self.rows.append((round_index, step, eta, flat, [t.detach().to(F64) for t in x], y.clone()))


def _flat(nets):
    return torch.cat([q.detach().reshape(-1).to(F64) for n in nets for q in n.parameters()])


def _loss_fn(res, ds):
    """``loss(theta, X, y)`` of the run's architecture in float64, from a flat vector."""
    parties = [p.to(F64) for p in res.models["parties"]]
    server = res.models["server"].to(F64)
    nets = [*parties, server]
    names = [[n for n, _ in net.named_parameters()] for net in nets]
    shapes = [[q.shape for q in net.parameters()] for net in nets]

    def loss(theta, X, y):
        off, Z = 0, []
        params = []
        for net, nm, sh in zip(nets, names, shapes):
            d = {}
            for k, s in zip(nm, sh):
                n = int(np.prod(s))
                d[k] = theta[off : off + n].reshape(s)
                off += n
            params.append(d)
        for p, d, x in zip(parties, params, X):
            Z.append(functional_call(p, d, (x,)))
        return nn.functional.cross_entropy(
            functional_call(server, params[-1], (torch.cat(Z, 1),)), y
        )

    return loss


def _reference(ds, res, rec):
    """The certificate computed from the recorded iterates, independently of the module."""
    loss = _loss_fn(res, ds)
    X = [torch.as_tensor(p, dtype=F64) for p in ds.train_parts]
    y = torch.as_tensor(ds.y_train)
    thetas = [r[3] for r in rec.rows] + [_flat([*res.models["parties"], res.models["server"]])]
    gF = [grad(loss)(th, X, y) for th in thetas[:-1]]
    gB = [grad(loss)(r[3], r[4], r[5]) for r in rec.rows]
    eta = np.array([r[2] for r in rec.rows])
    S = eta.sum()
    obs = sum(e * float(g @ g) for e, g in zip(eta, gF)) / S
    err = reuse_sq = reuse_cross = sampling = 0.0
    start = {}
    for t, (r, step, e, *_rest) in enumerate(rec.rows):
        if step == 0:
            start[r] = t
        k = start[r]
        g = (thetas[t] - thetas[t + 1]) / e
        s_t, s_0 = gB[t] - gF[t], gB[k] - gF[k]
        err += e * float((g - gB[t]) @ (g - gB[t]))
        reuse_sq += e * float((s_t - s_0) @ (s_t - s_0))
        reuse_cross += e * float((gF[t] - gF[k]).norm() * s_0.norm())
        sampling -= e * float(gF[k] @ s_0)
    F0, FT = float(loss(thetas[0], X, y)), float(loss(thetas[-1], X, y))
    return dict(
        obs=obs, err=err, reuse_sq=reuse_sq, reuse_cross=reuse_cross, sampling=sampling,
        F0=F0, FT=FT, S=S, thetas=thetas, eta=eta, loss=loss,
    )  # fmt: skip


@pytest.fixture(scope="module")
def ds():
    return tiny_dataset(120, (3, 2, 4), seed=4, classes=3)


@pytest.mark.parametrize(
    ("comp", "bits", "Q"), [("scalar", 2, 3), ("topk", 2, 1), ("lattice", 3, 4)]
)
def test_certificate_equals_an_independent_computation(ds, comp, bits, Q):
    cfg = _cfg(comp, bits, Q)
    rec, probe = _Record(), TrajectoryProbe(ds, cfg, progress=False)
    res = train(ds, cfg, probe=probes(rec, probe))
    cert = probe.certificate(res)
    ref = _reference(ds, res, rec)
    assert cert.observed == pytest.approx(ref["obs"], rel=1e-10)
    curvature = sum(
        0.5 * L * e**2 * float(((a - b) / e) @ ((a - b) / e))
        for L, e, a, b in zip(probe.segments, ref["eta"], ref["thetas"][:-1], ref["thetas"][1:])
    )
    c = 0.5 * (ref["err"] + ref["reuse_sq"])
    K = ref["F0"] - ref["FT"] + curvature + ref["reuse_cross"] + ref["sampling"]
    alphas = np.linspace(1e-4, 1 - 1e-4, 200001)
    grid_min = float(np.min((K + c / alphas) / ((1 - alphas) * ref["S"])))
    assert cert.bound == pytest.approx(grid_min, rel=1e-6)  # the closed-form alpha is the best
    assert cert.bound <= grid_min * (1 + 1e-12)
    assert sum(cert.terms.values()) == pytest.approx(cert.bound, rel=1e-12)
    assert cert.bound >= cert.observed
    assert cert.certified
    assert set(cert.to_dict()["terms"]) == set(CERTIFICATE_TERMS)
    if Q == 1:
        assert cert.terms.batch_reuse == 0.0  # one step per batch: nothing reused


def test_certified_smoothness_bounds_the_hessian_on_every_segment(ds):
    """Exact float64 Hessians at both ends and inside every segment are below L_t."""
    cfg = _cfg("lattice", 2, Q=2, lr=0.3)  # a large step: segments long, iterates far apart
    rec, probe = _Record(), TrajectoryProbe(ds, cfg, progress=False)
    res = train(ds, cfg, probe=probes(rec, probe))
    probe.certificate(res)
    ref = _reference(ds, res, rec)
    loss = ref["loss"]
    X = [torch.as_tensor(p, dtype=F64) for p in ds.train_parts]
    y = torch.as_tensor(ds.y_train)
    worst = 0.0
    for L, a, b in zip(probe.segments, ref["thetas"][:-1], ref["thetas"][1:]):
        for tau in (0.0, 0.37, 1.0):
            H = torch.autograd.functional.hessian(lambda th: loss(th, X, y), a + tau * (b - a))
            top = float(torch.linalg.eigvalsh(H).abs().max())
            assert top <= L
            worst = max(worst, top / L)
    assert worst > 0.02  # the bound is not vacuous: within a factor 50 of the true curvature


@pytest.mark.parametrize("power_iters", [4, 40])
def test_the_mlp_smoothness_estimate_is_a_hessian_norm_from_below(ds, power_iters):
    """Power iteration (warm-started, stopping once settled) is ||H v|| for a unit v: never above
    the exact ||H||_2 at its point, so an estimated segment value never exceeds the larger of the
    two ends' exact norms. A wrong Hessian (a batch's instead of the full data's, a missing
    normalisation, a stale point) breaks that; with enough iterations it also reaches the norm."""
    cfg = _cfg("scalar", 2, Q=2, lr=0.2, model="mlp")
    rec = _Record()
    probe = TrajectoryProbe(ds, cfg, progress=False, power_iters=power_iters)
    res = train(ds, cfg, probe=probes(rec, probe))
    probe.certificate(res)
    loss = _loss_fn(res, ds)
    X = [torch.as_tensor(p, dtype=F64) for p in ds.train_parts]
    y = torch.as_tensor(ds.y_train)
    thetas = [r[3] for r in rec.rows]
    exact = [
        float(
            torch.linalg.eigvalsh(torch.autograd.functional.hessian(lambda t: loss(t, X, y), th))
            .abs()
            .max()
        )
        for th in thetas
    ]
    # segments[t] joins the recorded points t and t + 1 (the last one, to the run end, is left out)
    ratios = [L / max(a, b) for L, a, b in zip(probe.segments, exact[:-1], exact[1:])]
    assert max(ratios) <= 1.0 + 1e-9
    if power_iters == 40:
        assert min(ratios) > 0.5  # converged: not a vanishing under-estimate


def test_the_smoothness_bound_needs_both_of_its_branches(ds):
    """With the head scaled up, max ||Z~||^2 / N alone is below the true curvature: the
    ||A||^2 lambda_X branch of the bound is needed (a bound without it would fail here)."""
    from cvfl_sim.bounds.certificate import _DataConstants, _point_value

    cfg = _cfg("none", 32, Q=1)
    res = train(ds, cfg)
    with torch.no_grad():
        res.models["server"].net.weight.mul_(30.0)
    theta = _flat([*res.models["parties"], res.models["server"]])
    loss = _loss_fn(res, ds)
    X = [torch.as_tensor(p, dtype=F64) for p in ds.train_parts]
    y = torch.as_tensor(ds.y_train)
    H = torch.autograd.functional.hessian(lambda th: loss(th, X, y), theta)
    top = float(torch.linalg.eigvalsh(H).abs().max())
    parties = [p.to(F64) for p in res.models["parties"]]
    with torch.no_grad():
        Z = torch.cat([p(x) for p, x in zip(parties, X)], 1)
    data = _DataConstants.of(ds.train_parts)
    Zt = torch.cat([Z, torch.ones(len(Z), 1, dtype=F64)], 1)
    z_only = float(torch.linalg.matrix_norm(Zt, 2)) ** 2 / len(Z) + data.bilinear
    assert z_only < top
    assert (
        _point_value(Z, res.models["server"].net.weight.to(F64), data.lam_x) + data.bilinear >= top
    )


def test_held_out_runs_are_certified_and_above_observed():
    """Runs not used to choose anything: another data set, seeds and a step of 0.1."""
    ds = load_dataset("breast-cancer")
    for seed, (comp, bits, Q) in enumerate([("scalar", 3, 7), ("topk", 3, 2), ("lattice", 2, 3)]):
        cfg = _cfg(comp, bits, Q, lr=0.1, seed=100 + seed, batch_size=40, embedding_size=3)
        probe = TrajectoryProbe(ds, cfg, progress=False)
        cert = probe.certificate(train(ds, cfg, probe=probe))
        assert cert.certified and cert.bound >= cert.observed, cert


def test_an_mlp_certificate_is_an_estimate(ds):
    cfg = _cfg("scalar", 2, Q=2, model="mlp")
    probe = TrajectoryProbe(ds, cfg, progress=False)
    cert = probe.certificate(train(ds, cfg, probe=probe))
    assert not cert.certified
    assert "estimate" in cert.title and "certified" not in cert.title.replace("not certified", "")
    assert cert.to_dict()["certified"] is False


def test_best_alpha_minimises():
    for K, c in [(1.0, 0.25), (0.3, 2.0), (10.0, 1e-3), (1e-6, 1.0)]:
        a = best_alpha(K, c)
        f = lambda x: (K + c / x) / (1 - x)  # noqa: E731
        grid = np.linspace(1e-6, 1 - 1e-6, 100001)
        assert f(a) <= np.min(f(grid)) * (1 + 1e-9)
    assert best_alpha(-1.0, 0.5) > 0.99  # K <= 0: the bound falls towards alpha = 1
    assert best_alpha(1.0, 0.0) == pytest.approx(0.0, abs=1e-9)


def test_probe_refuses_bad_input_and_reuse(ds):
    with pytest.raises(TypeError, match="dataset"):
        TrajectoryProbe("breast-cancer", _cfg())
    with pytest.raises(ValueError, match="power_iters"):
        TrajectoryProbe(ds, _cfg(), power_iters=0)
    cfg = _cfg(Q=1)
    probe = TrajectoryProbe(ds, cfg, progress=False)
    res = train(ds, cfg, probe=probe)
    probe.certificate(res)
    with pytest.raises(ValueError, match="new one"):
        train(ds, cfg, probe=probe)
    with pytest.raises(ValueError, match="no local step"):
        TrajectoryProbe(ds, cfg).certificate(res)
    assert math.isfinite(res.summary["train_seconds"])


def test_a_certificate_is_kept_and_loaded_exactly(ds, tmp_path):
    import json

    from cvfl_sim.bounds.certificate import Certificate

    cfg = _cfg()
    probe = TrajectoryProbe(ds, cfg, progress=False)
    cert = probe.certificate(train(ds, cfg, probe=probe))
    back = Certificate.load(cert.save(tmp_path / "cert"))
    assert back.to_dict() == cert.to_dict() and str(back) == str(cert)
    path = tmp_path / "cert.json"
    doc = json.loads(path.read_text())
    doc["fields"]["alpha"] = 1.5
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"alpha in \(0, 1\)"):
        Certificate.load(path)
    doc["fields"]["alpha"] = cert.alpha
    doc["fields"]["terms"]["curvature"] = "small"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="curvature must be a number"):
        Certificate.load(path)


class _Linear(nn.Linear):
    """A subclass of nn.Linear: not the analytic model's type, so autograd takes the gradients."""


def test_closed_form_gradients_without_bias_equal_autograd():
    """Bias-free linear parties and head: the observed average ||grad F||^2 of the certified
    certificate (closed-form gradients) equals the estimated one's (autograd), same run."""
    ds = tiny_dataset(48, [3, 2, 4], seed=2)
    out = {}
    for cls in (nn.Linear, _Linear):
        torch.manual_seed(5)
        parties = [cls(d, 2, bias=False) for d in ds.feature_dims]
        server = cls(2 * len(parties), ds.n_classes, bias=False)
        cfg = _cfg(parties_model=parties, server_model=server)
        probe = TrajectoryProbe(ds, cfg, progress=False)
        out[cls] = probe.certificate(train(ds, cfg, probe=probe))
    assert out[nn.Linear].certified and not out[_Linear].certified
    a, b = out[nn.Linear].observed, out[_Linear].observed
    assert a == pytest.approx(b, rel=1e-12) and a > 0
