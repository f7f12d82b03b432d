"""verify() reports agreement for correct closed forms and disagreement for wrong ones; Table 1."""

import sys
import types

import numpy as np
import pytest

from cvfl_sim.commands.cli import main
from cvfl_theory import IndependentEncoder
from cvfl_theory.section5 import table1
from cvfl_theory.verify import verify


class WrongMSE(IndependentEncoder):
    """An encoder whose stated MSE is 20% too high: verify must catch it."""

    def mse(self, X):
        return 1.2 * super().mse(X)


class Biased(IndependentEncoder):
    """Forgets the 1/p scaling on one coordinate: unbiasedness fails there."""

    def _values(self, x_sel, idx, i, x, centre):
        v = super()._values(x_sel, idx, i, x, centre)
        v[idx == 0] = x[0]
        return v


def test_verify_passes_for_correct_and_fails_for_wrong_closed_form():
    X = np.random.default_rng(0).normal(size=(6, 20))
    good = verify(IndependentEncoder(0.3), X, trials=1500, rng=1)
    assert good.passed and good.mse.z <= good.mse.threshold
    bad = verify(WrongMSE(0.3), X, trials=1500, rng=1)
    assert not bad.mse.passed and not bad.passed
    biased = verify(Biased(0.3), X, trials=1500, rng=1)
    assert not biased.check("bias (worst j=0)").passed


def test_verify_renders_text_and_html():
    res = verify(IndependentEncoder(0.5), np.eye(3), trials=50, rng=0)
    text, page = str(res), res._repr_html_()
    assert "MSE" in text and "bits sparse (r=64)" in text
    assert page.startswith("<table>") and "closed form" in page


def test_table1_rows_follow_the_k4_formulas():
    n, d, r = 6, 32, 32
    t = table1(n=n, d=d, r=r, p_general=(0.5,), trials=200, rng=2)
    ps = t.column("p")
    assert ps == [1.0, 1 / r, 1 / d, 0.5]
    # MSE in units of R/n: 1/p - 1 -> 0, r-1, d-1, 1
    assert t.column("MSE·n/R (K4)") == pytest.approx([0.0, r - 1, d - 1, 1.0])
    # seeded sparse cost n(r + r_s) + n d p r with the node mean sent
    assert t.column("C seeded (K4)") == pytest.approx([n * 64 + n * d * p * r for p in ps])
    assert t.column("C naive") == [n * d * r] * 4
    assert all(t.column("verdict"))


def test_cli_verify_runs_and_reports(capsys):
    assert main(["verify", "--trials", "40", "--checks", "k1"]) == 0
    out = capsys.readouterr().out
    assert "K1.1" in out and "K1.2" in out and "digits" in out and "0 failed" in out


def test_cli_verify_exits_nonzero_when_a_check_fails(monkeypatch, capsys):
    import proofs_checks
    from proofs_checks import CheckResult

    failing = CheckResult("K0", "a false claim", "test", None, 1.0, 0.0, 0.1)
    module = types.ModuleType("proofs_checks.k0_false")
    module.check = lambda: failing  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "proofs_checks.k0_false", module)
    monkeypatch.setattr(proofs_checks.result, "check_names", lambda: ["k0_false"])
    monkeypatch.setattr(proofs_checks, "check_names", lambda: ["k0_false"])
    # in this process (--jobs 1): a worker would not see the monkeypatched registry
    assert main(["verify", "--trials", "20", "--checks", "k0", "--jobs", "1"]) == 1
    assert "FAILED: K0" in capsys.readouterr().out
