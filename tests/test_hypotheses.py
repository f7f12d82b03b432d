"""Hypotheses first (issue 19): a theorem check says 'applies', or 'does not apply' with the
numbers, and no rendering of a bound whose hypothesis fails calls it holding."""

import json

import pytest
import torch
from _helpers import run_json, tiny_dataset
from torch import nn

from cvfl_sim.bounds.hypotheses import (
    Applicability,
    Hypothesis,
    model_smoothness,
    step_condition,
    theorem_hypotheses,
)
from cvfl_sim.bounds.theorems import Constants, bound_vs_observed
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.models import MLPEmbedding
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import ScalarQuantizer


def test_step_condition_with_its_numbers():
    bad = step_condition([0.02], 5, 1.298, None, True)
    assert bad.status == "fails"
    assert bad.detail == "eta = 0.02 > 1/(16*5*1.298) = 0.00963 (as recovered)"
    limit = 1 / (16 * 5 * 2.0)
    at = step_condition([limit], 5, 1.0, [2.0], True)  # L_m larger than L decides
    assert at.status == "holds"
    above = step_condition([limit * (1 + 1e-9)], 5, 1.0, [2.0], True)
    assert above.status == "fails"
    assert step_condition([limit / 2], 5, 1.0, [2.0], False).status == "estimated"
    varying = step_condition([0.001, 0.5], 1, 1.0, None, True)
    assert varying.status == "fails" and "max eta = 0.5" in varying.detail


def test_smoothness_of_the_models():
    lin = ([MLPEmbedding(3, 2, hidden=0)], nn.Linear(2, 2))
    assert model_smoothness(lin)[0] == "holds"
    relu = ([MLPEmbedding(3, 2)], nn.Linear(2, 2))
    status, detail = model_smoothness(relu)
    assert status == "fails" and "ReLU" in detail
    tanh = ([nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))], nn.Linear(2, 2))
    assert model_smoothness(tanh)[0] == "estimated"

    class Custom(nn.Module):  # its forward may apply anything: never called proved
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 2)

        def forward(self, x):
            return torch.relu(self.net(x))

    assert model_smoothness(([Custom()], nn.Linear(2, 2)))[0] != "holds"


def test_applicability_verdicts():
    ok = Applicability("4.2", (Hypothesis("a", "holds", "x"), Hypothesis("b", "estimated", "y")))
    assert ok.applies and not ok.certified and ok.why == ""
    assert ok.verdict == "applies (estimated constants)"
    bad = Applicability("4.2", (Hypothesis("step", "fails", "eta = 1 > 0.1"),))
    assert not bad.applies and bad.verdict == "does not apply: step: eta = 1 > 0.1"
    assert json.loads(json.dumps(bad.to_dict()))["applies"] is False
    with pytest.raises(ValueError, match="status"):
        Hypothesis("x", "maybe", "")
    with pytest.raises(ValueError, match="theorem"):
        theorem_hypotheses("4.3", lin_run(), etas=[0.1], Q=1, L=1.0, L_m=None, proved=True)


def lin_run():
    return ([MLPEmbedding(3, 2, hidden=0)], nn.Linear(2, 2))


@pytest.fixture(scope="module")
def run_and_constants():
    ds = tiny_dataset(80, (3, 2), seed=2, classes=2)
    cfg = CVFLConfig(
        Q=2, lr=0.05, epochs=1, batch_size=16, embedding_size=2, parties_model="linear",
        compressor=ScalarQuantizer(3), eval_every=1, track_grad_norm=True,
    )  # fmt: skip
    run = train(ds, cfg)

    def consts(L):
        k = (1.0, 1.0, 1.0)
        return Constants(
            L=L, L_m=(L,) * 3, sigma2=k, H=k, G=k, H_frob=k, G_frob=k, H_theta=k, B=16,
            points=1, batches=1, proved=True,
        )  # fmt: skip

    return run, consts


def test_a_failing_hypothesis_is_never_called_holding(run_and_constants):
    run, consts = run_and_constants
    chk = bound_vs_observed(run, consts(100.0))  # limit 1/(16*2*100) = 3.1e-4 < 0.05
    assert not chk.applies
    assert chk.why == "step condition (C4.2): eta = 0.05 > 1/(16*2*100) = 0.000313 (as recovered)"
    assert chk.ratio > 1  # numerically above the observed value, and still:
    assert chk.verdict.startswith("does not apply: step condition")
    text, html = str(chk), chk._repr_html_()
    assert "does not apply" in text and "does not apply" in html
    assert "holds on this run" not in text + html
    d = json.loads(json.dumps(chk.to_dict(), default=str))
    assert d["applies"] is False and d["why"] == chk.why and d["verdict"] == chk.verdict


def test_where_the_hypotheses_hold_the_verdict_is_read(run_and_constants):
    run, consts = run_and_constants
    chk = bound_vs_observed(run, consts(0.5))  # limit 1/16 > 0.05
    assert chk.applies and chk.why == ""
    assert chk.hypotheses.certified  # proved constants and the analytic model
    assert chk.verdict == "the recovered bound holds on this run"


def test_a_bound_within_two_standard_errors_of_the_observed_is_not_a_clear_verdict(
    run_and_constants,
):
    """Term 3 alone (a sum of realised errors), scaled to 1.01 (0.99) times the observed value:
    it 'holds' ('is below'), but within two of its standard errors of the observed value, so
    the verdict says that is not clear; at 3 times it is clear."""
    run, consts = run_and_constants
    base = bound_vs_observed(run, consts(0.5), c_opt=0.0, c_var=0.0)
    assert 0 < 2 * base.realised_se["recovered"] < 0.5 * base.terms.total  # a spread, not zero
    for factor, clear, word in ((1.01, False, "holds"), (3.0, True, "holds"), (0.99, False, "")):
        c3 = 92.0 * factor * base.observed / base.terms.total
        chk = bound_vs_observed(run, consts(0.5), c_opt=0.0, c_var=0.0, c_comp=c3)
        assert chk.applies and chk.ratio == pytest.approx(factor, rel=1e-9)
        se = base.realised_se["recovered"] * c3 / 92.0  # term 3 and its spread scale with c_3
        assert chk.realised_se["recovered"] == pytest.approx(se, rel=1e-12)
        assert chk.verdict.startswith(
            "the recovered bound holds on this run" if word else "BOUND BELOW OBSERVED"
        )
        assert ("not a clear verdict" in chk.verdict) == (not clear)


def test_cli_json_says_applies_why_and_the_certificate(capsys):
    code, data, err = run_json(capsys, ["bound", "--quick", "--json", "--batch-size", "128"])
    assert code == 0
    assert data["config"]["compressor"]["class"] == "ScalarQuantizer"  # compressed by default
    assert data["config"]["compressor"]["bits"] == 2
    assert data["applies"] is False and data["why"].startswith("step condition (C4.2): eta = 0.01")
    cert = data["certificate"]
    assert set(cert) >= {"bound", "observed", "ratio", "certified"}
    assert cert["certified"] is True and cert["bound"] >= cert["observed"]


def test_cli_theory_step_applies(capsys):
    code, data, _ = run_json(
        capsys, ["bound", "--quick", "--json", "--batch-size", "128", "--theory-step"]
    )
    assert code == 0
    assert data["applies"] is True and data["why"] == ""
    assert data["bound"]["verdict"].startswith("the recovered bound holds")
