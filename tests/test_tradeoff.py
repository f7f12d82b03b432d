"""Trade-off curve (K1, K2, K5, K6), its plot, the data helpers and the ``cvfl optimize`` CLI."""

import math

import numpy as np
import pytest

from cvfl_sim.commands.cli import main
from cvfl_sim.experiments.reference_data import heavy_tailed, logistic_gradients
from cvfl_theory.encoders import IndependentEncoder
from cvfl_theory.optimal import mse_bounds
from cvfl_theory.tradeoff import METHODS, plot_tradeoff, tradeoff_curve


@pytest.fixture(scope="module")
def table():
    X = heavy_tailed(6, 40, rng=3)
    n, d = X.shape
    return X, tradeoff_curve(X, np.geomspace(n * 32 + 500, n * d * 30, 5), max_iter=10)


def test_table_shape_and_order(table):
    X, t = table
    assert t.columns == ["method", "protocol", "bits_target", "bits", "budget", "mse"]
    assert set(t.column("method")) == set(METHODS)
    by = {}
    for m, _, c, bits, _, mse in t.rows:
        assert mse >= 0 and math.isfinite(mse)
        if m not in ("binary", "rotation"):
            assert bits <= c * (1 + 1e-12)  # never more than the budget
        by.setdefault(m, {})[c] = mse
    for c, u in by["uniform"].items():
        # optimal <= uniform (uniform p is feasible for (17)); centres only help
        assert by["optimal"][c] <= u * (1 + 1e-12)
        assert by["optimal-centres"][c] <= by["optimal"][c] * (1 + 1e-12)
    n, d = X.shape
    assert t.column("bits")[t.column("method").index("binary")] == n * (2 * 32 + d)


def test_uniform_row_is_k64_upper_bound(table):
    X, t = table
    row = t.rows[0]
    assert row[0] == "uniform"
    b = mse_bounds(X, row[4], mu="mean")
    assert row[5] == pytest.approx(b.upper, rel=1e-12)


def test_table_renders(table, tmp_path):
    _, t = table
    assert "optimal" in str(t) and "<table>" in t._repr_html_()
    text = t.to_csv(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text() == text


def test_plot(table):
    _, t = table
    ax = plot_tradeoff(t, title="demo")
    assert ax.get_xscale() == "log" and ax.get_title() == "demo"
    assert {line.get_label() for line in ax.get_lines()} >= {"uniform", "optimal", "binary"}
    import matplotlib.pyplot as plt

    plt.close(ax.figure)  # a pyplot-managed figure (tests/test_plotting.py)


def test_bad_methods_and_grid():
    X = heavy_tailed(2, 8, rng=0)
    with pytest.raises(ValueError, match="unknown methods"):
        tradeoff_curve(X, [1000.0], methods=("nope",))
    with pytest.raises(ValueError, match="bits_grid"):
        tradeoff_curve(X, [-1.0])


@pytest.mark.parametrize("dataset, d", [("breast_cancer", 30), ("digits", 64)])
def test_logistic_gradients(dataset, d):
    G = logistic_gradients(5, dataset=dataset)
    assert G.shape == (5, d) and np.isfinite(G).all()
    assert np.abs(G).max() > 0


def test_heavy_tailed_kinds():
    assert heavy_tailed(3, 4, kind="lognormal", rng=1).shape == (3, 4)
    with pytest.raises(ValueError, match="kind"):
        heavy_tailed(3, 4, kind="cauchy")


# ---------------------------------------------------------------------------- CLI
def test_cli_optimize(tmp_path, capsys):
    X = heavy_tailed(8, 50, rng=4)
    path = tmp_path / "X.npy"
    np.save(path, X)
    out = tmp_path / "res.npz"
    assert main(["optimize", str(path), "--bits", "8000", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "certificate holds: True" in text and "K6.4 bounds" in text
    z = np.load(out)
    assert z["p"].shape == X.shape
    assert float(z["expected_bits"]) == pytest.approx(8000.0)
    enc = IndependentEncoder(np.where(z["p"] > 0, z["p"], 1.0), mu=z["mu"])
    assert enc.mse(X) == pytest.approx(float(z["mse"]), rel=1e-12)
    assert float(z["mse_lower"]) <= float(z["mse"]) <= float(z["mse_upper"])
    assert not list(tmp_path.glob(".tmp-*"))  # atomic write left nothing behind


def test_cli_options_and_errors(tmp_path, capsys):
    X = heavy_tailed(3, 10, rng=5)
    path = tmp_path / "X.npy"
    np.save(path, X)
    assert (
        main(
            [
                "optimize",
                str(path),
                "--budget",
                "5",
                "--optimize-centres",
                "--method",
                "cvxpy",
                "--protocol",
                "varying-length",
            ]
        )
        == 0
    )
    assert "cvxpy" in capsys.readouterr().out
    assert main(["optimize", str(path), "--bits", "10"]) == 2
    assert "bits > " in capsys.readouterr().err
    assert main(["optimize", str(tmp_path / "missing.npy"), "--bits", "1e4"]) == 2
    assert main(["optimize", str(path), "--budget", "5", "--mu", "median"]) == 2
