"""C9 measured constants and the C4.2 bound on a real run (cvfl_sim.bounds.theorems)."""

import math

import numpy as np
import pytest
import torch
from _helpers import run_json

from cvfl_sim import train
from cvfl_sim.bounds.theorems import bound_vs_observed, estimate_constants
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import load_dataset
from cvfl_sim.vfl.results import RunResult
from cvfl_theory.compressors import ScalarQuantizer

torch.set_num_threads(1)

FAST = {"batches": 1, "power_iters": 40}


@pytest.fixture(scope="module")
def ds():
    return load_dataset("breast-cancer")


def _cfg(comp=None, **kw):
    base = dict(
        Q=1,
        lr=0.01,
        epochs=2,
        batch_size=64,
        embedding_size=4,
        compressor=comp,
        track_grad_norm=True,
        eval_every=1,
    )
    base.update(kw)
    return CVFLConfig(**base)


@pytest.fixture(scope="module")
def runs(ds):
    out = {}
    for name, comp in [("identity", None), ("scalar2", ScalarQuantizer(2, range="minmax-tensor"))]:
        cfg = _cfg(comp)
        run = train(ds, cfg)
        out[name] = (cfg, run, estimate_constants(ds, cfg, run, **FAST))
    return out


def test_estimates_finite_positive(runs):
    _, _, c = runs["identity"]
    assert math.isfinite(c.L) and c.L > 0
    for vals in (c.L_m, c.sigma2, c.H, c.G, c.H_frob, c.G_frob, c.H_theta):
        assert len(vals) == 5  # server + 4 parties
        assert all(math.isfinite(v) and v > 0 for v in vals)
    assert c.G[0] == 1.0
    assert c.points == 2
    assert "estimates, not global constants" in " ".join(str(c).split())


def test_compression_term_zero_for_identity_positive_for_quantizer(runs):
    _, run_id, c_id = runs["identity"]
    _, run_q, c_q = runs["scalar2"]
    chk_id = bound_vs_observed(run_id, c_id)
    chk_q = bound_vs_observed(run_q, c_q)
    assert chk_id.terms.compression == 0.0
    assert chk_q.terms.compression > 0.0
    for chk in (chk_id, chk_q):
        assert chk.observed > 0
        assert chk.ratio == pytest.approx(chk.terms.total / chk.observed)
        assert chk.terms.optimization > 0 and chk.terms.variance > 0
        assert "ratio bound/observed [recovered]" in chk.column("quantity")
    # "max" split over-estimates every sum_{j != m} E_j: never a smaller term 3
    assert bound_vs_observed(run_q, c_q, split="max").terms.compression >= chk_q.terms.compression


def test_per_party_errors_are_logged_and_used(runs):
    _, run_q, c_q = runs["scalar2"]
    by_party = np.asarray(run_q.rounds["embedding_error_by_party"])
    total = np.asarray(run_q.rounds["embedding_error"])
    M = len(c_q.G) - 1
    assert by_party.shape == (total.size, M)
    assert np.all(by_party > 0)  # a 2-bit quantizer errs on every party every round
    assert np.allclose(by_party.sum(axis=1), total, rtol=1e-12, atol=0)
    party = bound_vs_observed(run_q, c_q)  # default: each party's own errors
    assert party.terms.compression <= bound_vs_observed(run_q, c_q, split="max").terms.compression
    # an older run without the per-party log: "party" refuses, "equal" still works
    old = RunResult(
        run_q.config,
        run_q.dataset,
        run_q.history,
        {k: v for k, v in run_q.rounds.items() if k != "embedding_error_by_party"},
        run_q.summary,
    )
    with pytest.raises(ValueError, match="per-party"):
        bound_vs_observed(old, c_q)
    assert bound_vs_observed(old, c_q, split="equal").terms.compression > 0


def test_refuses_run_without_grad_norms(ds, runs):
    _, _, c = runs["identity"]
    run = train(ds, _cfg(track_grad_norm=False, epochs=1))
    with pytest.raises(ValueError, match="track_grad_norm=True"):
        bound_vs_observed(run, c)


def test_varying_step_uses_theorem_4_4(ds, runs):
    _, _, c = runs["identity"]
    run = train(ds, _cfg(lr=lambda t: 0.01 / (1 + t), epochs=1))
    chk = bound_vs_observed(run, c)
    assert "Theorem 4.4" in chk.title
    norms = [row["grad_norm_sq"] for row in run.history if row["round"] < len(run.rounds["lr"])]
    assert chk.observed == pytest.approx(min(norms))  # 4.4 bounds the minimum
    etas = np.asarray(run.rounds["lr"])
    Q = run.config["Q"]
    # term 1 with F(0) - F* replaced by F(0) (non-negative loss), over sum_t eta = Q sum eta^t0
    f0 = run.history[0]["train_loss"]
    assert chk.terms.optimization == pytest.approx(4 * f0 / (Q * etas.sum()))
    assert chk.ratio == pytest.approx(chk.terms.total / chk.observed)


def test_power_iteration_matches_dense_hessian():
    """Independent check: L by power iteration == max |eig| of the dense autograd Hessian."""
    ds = load_dataset("breast-cancer", parties=2)
    cfg = _cfg(parties_model="linear", embedding_size=1, dtype="float64", epochs=1)
    run = train(ds, cfg)
    c = estimate_constants(
        ds, cfg, run, include_initial=False, batches=1, power_iters=500, tol=1e-12
    )
    parties, server = run.models["parties"], run.models["server"]
    mods = [server, *parties]
    named = [(k, dict(m.named_parameters())) for k, m in enumerate(mods)]
    shapes = [[(n, p.shape) for n, p in d.items()] for _, d in named]
    flat0 = torch.cat([p.detach().reshape(-1) for _, d in named for p in d.values()])
    X = [torch.as_tensor(p, dtype=torch.float64) for p in ds.train_parts]
    y = torch.as_tensor(ds.y_train)

    def loss(flat):
        params, off = [], 0
        for sh in shapes:
            d = {}
            for n, s in sh:
                k = int(np.prod(s))
                d[n] = flat[off : off + k].reshape(s)
                off += k
            params.append(d)
        emb = [
            torch.func.functional_call(p, params[i + 1], (x,))
            for i, (p, x) in enumerate(zip(parties, X))
        ]
        logits = torch.func.functional_call(server, params[0], (torch.cat(emb, dim=1),))
        return torch.nn.functional.cross_entropy(logits, y)

    assert float(loss(flat0)) == pytest.approx(run.history[-1]["train_loss"], rel=1e-10)
    Hd = torch.autograd.functional.hessian(loss, flat0)
    lam = float(torch.linalg.eigvalsh(Hd).abs().max())
    assert c.L == pytest.approx(lam, rel=1e-4)


def test_refuses_mismatched_constants(ds, runs):
    cfg, run, c = runs["identity"]
    c2 = estimate_constants(ds, _cfg(batch_size=32), run, include_initial=False, **FAST)
    with pytest.raises(ValueError, match="batch_size"):
        bound_vs_observed(run, c2)
    with pytest.raises(ValueError, match="split"):
        bound_vs_observed(run, c, split="nope")


def test_cli_bad_dataset_exit_code(capsys):
    from cvfl_sim.commands.cli import main

    assert main(["bound", "--dataset", "no-such-data"]) == 2
    assert capsys.readouterr().err.startswith("cvfl: error: unknown data set 'no-such-data'")
    assert main(["bound", "--every", "0"]) == 2
    assert "--every" in capsys.readouterr().err
    assert main(["bound", "--sampled", "50"]) == 2
    assert "--sampled must be 0 (off) or in [100, 1e8]" in capsys.readouterr().err
    assert main(["bound", "--sampled-later"]) == 2
    assert "--sampled-later needs --sampled DRAWS" in capsys.readouterr().err


def test_dense_jacobian_and_norms_match_autograd_functional():
    from cvfl_sim.bounds._autodiff import jacobian
    from cvfl_sim.bounds._spectral import op_norm

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(4, 2, dtype=torch.float64, generator=g, requires_grad=True)
    J = jacobian(torch.tanh(x @ w), [x, w])
    ref = torch.autograd.functional.jacobian(lambda a, b: torch.tanh(a @ b), (x, w))
    dense = torch.cat([r.reshape(6, -1) for r in ref], dim=1)
    assert torch.allclose(J, dense, rtol=1e-12, atol=0)
    sv = np.linalg.svd(dense.numpy(), compute_uv=False)
    assert op_norm(J) == pytest.approx(sv[0], rel=1e-10)
    assert op_norm(J.T) == pytest.approx(sv[0], rel=1e-10)


def test_cli_quick_json(capsys):
    args = ["bound", "--quick", "--json", "--compressor", "scalar", "--bits", "2", "--model", "mlp"]
    threads = torch.get_num_threads()
    code, data, err = run_json(capsys, [*args, "--batch-size", "128", "--embedding-size", "2"])
    assert code == 0
    assert torch.get_num_threads() == threads  # one thread only while the command runs
    assert set(data["bound"]["forms"]) == {"recovered", "tight (C4.5, ours)"}
    assert set(data["bound"]["estimates"]) == {"plug-in (measured Lemma 1)"}
    assert data["lemma1"]["probes"] == 4  # one epoch of 456 samples at B = 128, round starts
    assert data["bound"]["reading"] == "chain"
    assert "constants: point 2/2" in err  # progress on stderr


def test_cli_json_is_strict_where_a_standard_error_is_nan(capsys):
    """One round (B = the whole data set): no spread to read, so the standard errors are nan,
    written as the string "nan" (run_json refuses a bare NaN, which is not JSON)."""
    code, data, _ = run_json(capsys, ["bound", "--quick", "--json", "--batch-size", "456"])
    assert code == 0 and data["lemma1"]["probes"] == 1
    assert data["bound"]["forms"]["recovered"]["se"] == "nan"
    assert data["bound"]["estimates"]["plug-in (measured Lemma 1)"]["se"] == "nan"


def test_cli_sampled_later_json(capsys):
    """``--sampled-later`` at Q = 3 (the analytic model, steps 0 and Q - 1 probed): the tight and
    sampled forms are bounds (C4.9 at every local step); without it the sampled one is not."""
    args = ["bound", "--json", "--Q", "3", "--epochs", "1", "--batch-size", "128"]
    for later in (True, False):
        flags = ["--sampled", "100"] + (["--sampled-later"] if later else [])
        code, data, _ = run_json(capsys, [*args, *flags])
        assert code == 0
        forms = set(data["bound"]["forms"])
        assert "tight (C4.5, ours)" in forms
        assert ("sampled (C4.8, ours)" in forms) == later
        assert ("sampled (C4.8, ours)" in data["bound"]["estimates"]) == (not later)
        rounds = data["lemma1"]["every_step_rounds"]
        assert rounds["tight"] == data["lemma1"]["probes"] // 2  # steps 0 and 2 of each round
        assert rounds["sampled"] == (rounds["tight"] if later else 0)


@pytest.fixture(scope="module")
def probed(ds):
    from cvfl_sim.bounds.lemma1 import Lemma1Probe

    cfg = _cfg(ScalarQuantizer(2, range="minmax-tensor"), epochs=1)
    probe = Lemma1Probe(every=1, steps="first")
    run = train(ds, cfg, probe=probe)
    return run, estimate_constants(ds, cfg, run, **FAST), probe.report()


def test_readings_and_chain_identity(probed):
    run, c, _ = probed
    R = len(run.rounds["lr"])
    E = np.zeros((R, 5))
    E[:, 0] = run.rounds["server_model_error"]
    E[:, 1:] = run.rounds["embedding_error_by_party"]
    others = E.sum(axis=1, keepdims=True) - E
    for reading, (h, g) in [
        ("chain", ("H", "G")),
        ("chain-frobenius", ("H_frob", "G_frob")),
        ("theta-hessian (double-counts G)", ("H_theta", "G_frob")),
    ]:
        H, G = np.asarray(getattr(c, h)), np.asarray(getattr(c, g))
        expect = 92 * 1**2 / R * float(np.sum(H**2 * G**2 * others))
        got = bound_vs_observed(run, c, reading=reading).terms.compression
        assert got == pytest.approx(expect, rel=1e-12)
    assert bound_vs_observed(run, c).reading == "chain"
    # chain rule: grad^2_{theta_m, Phi_-m} F = J_m^T grad^2_{h_m, Phi_-m} F, so its Frobenius
    # norm is at most ||J_m||_2 ||A_m||_F (one batch, one point: the maxima are over the same set)
    H_t, G, H_f = (np.asarray(v) for v in (c.H_theta, c.G, c.H_frob))
    assert np.all(H_t[1:] <= G[1:] * H_f[1:] * (1 + 1e-9))
    assert np.all(H_t[1:] > H_f[1:])  # ... and G_m > 1 here: the old reading inflated term 3
    with pytest.raises(ValueError, match="reading"):
        bound_vs_observed(run, c, reading="literal")


def test_measured_lemma1_is_an_estimate_not_a_bound(probed):
    run, c, rep = probed
    R = len(run.rounds["lr"])
    chk = bound_vs_observed(run, c, lemma1=rep)
    assert list(rep.rounds) == list(range(R))  # every round probed at its start
    assert "plug-in (measured Lemma 1)" not in chk.forms  # not among the bounds
    measured = chk.estimates["plug-in (measured Lemma 1)"]
    assert measured.compression == pytest.approx(92 / R * float(rep.left.sum()), rel=1e-12)
    assert measured.optimization == chk.terms.optimization
    # the recovered form takes H_m, G_m as maxima over the probed points as well
    base = bound_vs_observed(run, c)
    assert chk.terms.compression >= base.terms.compression
    assert chk.ratios["plug-in (measured Lemma 1)"] == pytest.approx(measured.total / chk.observed)
    assert "estimate [plug-in (measured Lemma 1)]" in chk.column("quantity")
    assert "bound [plug-in (measured Lemma 1)]" not in chk.column("quantity")
    assert "plug-in (measured Lemma 1)" in chk._repr_html_()


def test_the_plug_in_carries_the_standard_error_of_its_realised_sum(probed, tmp_path):
    """Every round probed at its start (Q = 1, one step): term 3 = 92/R sum_t Y_t, so its
    standard error is 92 s / sqrt(R), s the spread of the rounds' summed left sides; the
    recovered form's over its rounds' realised errors likewise."""
    from cvfl_sim.bounds.theorems import BoundCheck

    run, c, rep = probed
    R = len(run.rounds["lr"])
    chk = bound_vs_observed(run, c, lemma1=rep)
    se = chk.realised_se["plug-in (measured Lemma 1)"]
    Y = rep.left.sum(axis=1)
    assert se == pytest.approx(92 * np.std(Y, ddof=1) / np.sqrt(R), rel=1e-12)
    assert chk.to_dict()["estimates"]["plug-in (measured Lemma 1)"]["se"] == se
    assert f"standard error {se:.3g}" in str(chk.rows)
    assert BoundCheck.load(chk.save(tmp_path / "se")).realised_se == chk.realised_se
    # the recovered form sums each round's realised errors: 92/R sum_t X_t, every round drawn,
    # with the H_m, G_m its term 3 takes (raised to the probe's maxima with the probe)
    E = np.zeros((R, 5))
    E[:, 0] = run.rounds["server_model_error"]
    E[:, 1:] = run.rounds["embedding_error_by_party"]
    for check, consts in ((bound_vs_observed(run, c), c), (chk, c.with_lemma1(rep))):
        w = np.asarray(consts.H) ** 2 * np.asarray(consts.G) ** 2
        X = np.sum(w * (E.sum(axis=1, keepdims=True) - E), axis=1)
        assert 92 / R * X.sum() == pytest.approx(check.terms.compression, rel=1e-12)
        want = 92 * np.std(X, ddof=1) / np.sqrt(R)
        assert check.realised_se["recovered"] == pytest.approx(want, rel=1e-12)
        assert check.to_dict()["forms"]["recovered"]["se"] == check.realised_se["recovered"]


def test_the_realised_standard_error_counts_the_unprobed_rounds_fill():
    """Rounds 1, 4, 6 of 7 without a probe (filled with the mean of every probe, a probe of
    round 8 >= R included), 1 to 3 probes a round, an uneven linear term 3: the standard error
    is s times the norm of c, c_t = sum of term 3's gradient over round t's probes times k_t,
    the gradient read from the fill rule itself."""
    from cvfl_sim.bounds.theorems import realised_term3_se

    R, w = 7, np.arange(1.0, 8.0)
    rounds = np.array([0, 2, 2, 2, 3, 5, 5, 8])
    left = np.random.default_rng(0).random((rounds.size, 3))

    def term3(z):  # the probes' summed left sides -> term 3, by the fill rule
        per = np.array([z[rounds == t].mean() if t in rounds else z.mean() for t in range(R)])
        return float(w @ per)

    grad = np.array([term3(np.eye(rounds.size)[p]) for p in range(rounds.size)])
    drawn = np.unique(rounds)
    c = np.array([grad[rounds == t].sum() for t in drawn])  # Y_t = mean: d/dY_t = k_t grad_p
    Y = np.array([left.sum(axis=1)[rounds == t].mean() for t in drawn])
    assert term3(left.sum(axis=1)) == pytest.approx(c @ Y, rel=1e-12)  # linear in the Y_t
    got = realised_term3_se(left.sum(axis=1), rounds, w)
    assert got == pytest.approx(np.std(Y, ddof=1) * np.linalg.norm(c), rel=1e-12)
    one = realised_term3_se(left[:2].sum(axis=1), np.array([0, 0]), w)
    assert np.isnan(one)  # one round: no spread to read


def test_the_tight_form_is_a_bound_only_where_it_was_evaluated_at_every_step_charged(ds, probed):
    from cvfl_sim.bounds.lemma1 import Lemma1Probe

    name = "tight (C4.5, ours)"
    run, c, rep = probed
    R = len(run.rounds["lr"])
    chk = bound_vs_observed(run, c, lemma1=rep)  # Q = 1, every round start probed
    assert name in chk.forms and name not in chk.estimates
    assert f"bound [{name}]" in chk.column("quantity")
    cases = [
        ({}, 2, "first", f"{(R + 1) // 2} of {R} rounds probed, the others at their mean"),
        ({"Q": 2}, 1, "first", "evaluated at 1 of the 2 local steps of a probed round"),
        ({"Q": 2}, 1, "all", "an expectation at points that depend on the round's dither"),
    ]
    for kw, every, steps, why in cases:
        cfg = _cfg(ScalarQuantizer(2, range="minmax-tensor"), epochs=1, **kw)
        probe = Lemma1Probe(every=every, steps=steps)
        other = bound_vs_observed(train(ds, cfg, probe=probe), c, lemma1=probe.report())
        assert name in other.estimates and name not in other.forms, kw
        assert f"estimate [{name}]" in other.column("quantity")
        assert f"bound [{name}]" not in other.column("quantity")
        assert any(why in str(note) for note in other.column("note")), kw
        assert name in other.to_dict()["estimates"] and name not in other.to_dict()["forms"]
    # top-k: the realised form has no dither, so evaluated at every local step it is a bound
    from cvfl_theory.compressors import TopK

    cfg = _cfg(TopK(k=2), epochs=1, Q=2)
    probe = Lemma1Probe(every=1, steps="all")
    topk = bound_vs_observed(train(ds, cfg, probe=probe), c, lemma1=probe.report())
    assert set(probe.report().tight_kinds) == {"realised"}
    assert name in topk.forms and name not in topk.estimates
    probe_first = Lemma1Probe(every=1, steps="first")  # step 0 only, charged to step 1 too
    first = bound_vs_observed(train(ds, cfg, probe=probe_first), c, lemma1=probe_first.report())
    assert name in first.estimates
    # a dithered quantizer that clips: the expectation is not covered, so the realised errors of
    # the run's one dither draw stand in for it, an estimate even at Q = 1 with every step probed
    for kw in ({}, {"Q": 2}):
        cfg = _cfg(ScalarQuantizer(2, range=(-0.05, 0.05)), epochs=1, **kw)
        probe = Lemma1Probe(every=1, steps="all")
        clipped = bound_vs_observed(train(ds, cfg, probe=probe), c, lemma1=probe.report())
        assert set(probe.report().tight_kinds) == {"realised draw"}, kw
        assert name in clipped.estimates and name not in clipped.forms, kw
        assert any("dither draw" in str(note) for note in clipped.column("note")), kw
    # without compression Lemma 1's left side is 0 at every step: the tight form is exact
    cfg = _cfg(None, epochs=1, Q=2)
    probe = Lemma1Probe(every=2, steps="first")
    exact = bound_vs_observed(train(ds, cfg, probe=probe), c, lemma1=probe.report())
    assert name in exact.forms and exact.forms[name].compression == 0.0


def test_json_html_and_plot(probed):
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run, c, rep = probed
    chk = bound_vs_observed(run, c, lemma1=rep)
    d = json.loads(json.dumps(chk.to_dict()))
    assert d["forms"]["recovered"]["total"] == pytest.approx(chk.terms.total)
    json.dumps(c.to_dict())
    json.dumps(rep.summary())
    assert "<table" in c._repr_html_() and "<table" in rep._repr_html_()
    fig, ax = plt.subplots()
    assert chk.plot(ax=ax) is ax
    # three terms and the total per form and per estimate; the estimates' bars hatched
    assert len(ax.patches) == 4 * (len(chk.forms) + len(chk.estimates))
    assert sum(bool(p.get_hatch()) for p in ax.patches) == 4 * len(chk.estimates) > 0
    plt.close(fig)
    ax2 = chk.plot()
    assert ax2.figure.number in plt.get_fignums()  # a pyplot-managed figure
    plt.close("all")


def test_cli_threads_is_checked_before_work(capsys):
    from cvfl_sim.commands.cli import main

    assert main(["bound", "--threads", "0"]) == 2  # refused before any data is loaded
    assert "--threads must be >= 1, got 0" in capsys.readouterr().err


def test_a_bound_check_is_kept_and_loaded_exactly(runs, tmp_path):
    import json

    _, run_q, c_q = runs["scalar2"]
    chk = bound_vs_observed(run_q, c_q)
    from cvfl_sim.bounds.theorems import BoundCheck

    back = BoundCheck.load(chk.save(tmp_path / "check"))
    assert back.to_dict() == chk.to_dict() and str(back) == str(chk)
    assert back.applies == chk.applies and back.why == chk.why
    assert list(back.to_dataframe().columns) == ["quantity", "value", "note"]
    path = tmp_path / "check.json"
    doc = json.loads(path.read_text())
    # a verdict that says "holds" where the stored hypotheses fail (or the reverse) is refused
    doc["fields"]["verdict"] = "holds" if not chk.applies else "does not apply: forged"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="contradicts the hypotheses"):
        BoundCheck.load(path)
    doc["fields"]["verdict"] = chk.verdict
    name = next(iter(doc["fields"]["ratios"]))
    doc["fields"]["ratios"][name] *= 0.5  # a ratio that is not total / observed
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="not its total over the observed"):
        BoundCheck.load(path)


def test_the_sampled_form_is_a_bound_only_where_it_was_evaluated_at_every_step_charged(ds, probed):
    """C4.8 in term 3: a bound (at its stated confidence) at Q = 1 with every round start probed."""
    from cvfl_sim.bounds.lemma1 import Lemma1Probe

    name = "sampled (C4.8, ours)"
    _, c, _ = probed
    cases = [({}, 1, True), ({}, 2, False), ({"Q": 2}, 1, False)]
    for kw, every, is_bound in cases:
        cfg = _cfg(ScalarQuantizer(2, range="minmax-tensor"), epochs=1, **kw)
        probe = Lemma1Probe(every=every, steps="first", tight=False, sampled=200, delta=0.1)
        chk = bound_vs_observed(train(ds, cfg, probe=probe), c, lemma1=probe.report())
        assert (name in chk.forms) is is_bound and (name in chk.estimates) is not is_bound, kw
        kind = "bound" if is_bound else "estimate"
        assert f"{kind} [{name}]" in chk.column("quantity"), kw
        notes = [str(n) for n in chk.column("note")]
        assert any("probability >= 0.9" in n for n in notes), kw
        if is_bound:  # the form's term 3 is the per-round sampled bounds through 92 Q^2 / R
            rep = probe.report()
            R = len(rep.rounds)
            assert chk.forms[name].compression == pytest.approx(
                92 / R * float(rep.sampled.sum()), rel=1e-12
            )
    # top-k is biased: the sampled bound does not apply, so there is no such form
    from cvfl_theory.compressors import TopK

    cfg = _cfg(TopK(k=2), epochs=1)
    probe = Lemma1Probe(every=1, steps="first", tight=False, sampled=200)
    rep = probe.report() if train(ds, cfg, probe=probe) else None
    assert rep is not None and np.isnan(rep.sampled).all()
    assert len(rep.sampled_skipped) == len(rep.rounds)  # every round start, with its reason
    assert "round 0: compressor must be a dithered" in rep.sampled_skipped[0]
    assert f"C4.8 does not apply at {len(rep.rounds)} round start(s)" in " ".join(str(rep).split())
    assert rep.summary()["sampled_skipped"] == rep.sampled_skipped
    chk = bound_vs_observed(train(ds, cfg), c, lemma1=rep)
    assert name not in chk.forms and name not in chk.estimates
