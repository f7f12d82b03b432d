"""Plot helpers: pyplot-managed figures or a given Axes, distinct styles, clipped seed bands."""

import math

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display in tests

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from cvfl_sim import plot_bound, plot_runs  # noqa: E402
from cvfl_sim.vfl.results import RunResult
from cvfl_theory import plot_tradeoff, tradeoff_curve  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _run(values, metric="accuracy", column="test_accuracy", bits_per_round=1000):
    """A RunResult whose history has ``values`` of ``column``, one row per round."""
    rows = [
        {"epoch": k / 4, "round": k, "bits": bits_per_round * k, column: float(v)}
        for k, v in enumerate(values)
    ]
    return RunResult(config={}, dataset={"metric": metric}, history=rows)


# the 13 curves of the compressors figure of digits-quadrants
LABELS_13 = (
    ["b=32"]
    + [f"{k} b={b}" for k in ("scalar", "lattice", "topk") for b in (2, 3, 4)]
    + [f"{k}+ef b=2" for k in ("scalar", "lattice", "topk")]
)


def _style(line):
    return to_rgba(line.get_color()), line.get_linestyle()


# ---------------------------------------------------------------------------------- plot_tradeoff
@pytest.fixture(scope="module")
def tradeoff_table():
    X = np.random.default_rng(0).standard_t(2.5, size=(4, 32))
    return tradeoff_curve(X, [2000.0, 4000.0], methods=("uniform", "binary"))


def test_plot_tradeoff_without_ax_makes_a_pyplot_figure(tradeoff_table):
    before = set(plt.get_fignums())
    ax = plot_tradeoff(tradeoff_table)
    assert isinstance(ax, matplotlib.axes.Axes)
    assert set(plt.get_fignums()) - before == {ax.figure.number}  # pyplot shows it in a notebook


def test_plot_tradeoff_draws_into_the_given_axes(tradeoff_table):
    fig, ax = plt.subplots()
    n_figs = len(plt.get_fignums())
    assert plot_tradeoff(tradeoff_table, ax=ax) is ax
    assert len(plt.get_fignums()) == n_figs
    assert sorted(line.get_label() for line in ax.get_lines()) == ["binary", "uniform"]


# ------------------------------------------------------------------------------------- plot_runs
def test_plot_runs_13_series_have_distinct_colour_and_linestyle():
    rng = np.random.default_rng(1)
    groups = {lab: [_run(rng.uniform(0.2, 0.9, 6)) for _ in range(2)] for lab in LABELS_13}
    ax = plot_runs(groups, x="bits")
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == set(LABELS_13)
    styles = {lab: _style(line) for lab, line in lines.items()}
    assert len(set(styles.values())) == 13
    # the convention: colour is the compressor, line style the bit level
    for lab, (colour, ls) in styles.items():
        kind, _, bits = lab.rpartition(" ")
        for other, (colour2, ls2) in styles.items():
            kind2, _, bits2 = other.rpartition(" ")
            assert (colour == colour2) == (kind == kind2), (lab, other)
            assert (ls == ls2) == (bits == bits2), (lab, other)


def test_plot_runs_40_unstructured_labels_stay_distinct():
    groups = {f"run {k}": [_run([0.5, 0.6])] for k in range(40)}
    ax = plot_runs(groups, x="round")
    assert len({_style(line) for line in ax.get_lines()}) == 40


def _band(ax, label):
    """The (x, low, high) of the band drawn with the line ``label``."""
    line = next(ln for ln in ax.get_lines() if ln.get_label() == label)
    k = ax.get_lines().index(line)
    verts = ax.collections[k].get_paths()[0].vertices
    n = len(line.get_xdata())
    # fill_between traces the lower edge forwards, then the upper edge backwards
    low = verts[1 : n + 1, 1]
    high = verts[n + 2 : 2 * n + 2, 1][::-1]
    return low, high


def test_accuracy_bands_are_clipped_to_zero_one():
    # two seeds: accuracy 0.0 and 0.3 at round 0, 0.8 and 1.0 at round 1
    groups = {"scalar b=2": [_run([0.0, 0.8]), _run([0.3, 1.0])]}
    ax = plot_runs(groups, x="round")
    low, high = _band(ax, "scalar b=2")
    # sample std (ddof = 1) of two values a, b is |a - b| / sqrt(2)
    s0, s1 = 0.3 / math.sqrt(2), 0.2 / math.sqrt(2)
    assert 0.15 - s0 < 0 and 0.9 + s1 > 1  # the unclipped band would leave [0, 1] ...
    np.testing.assert_allclose(low, [0.0, 0.9 - s1])  # ... the drawn one does not
    np.testing.assert_allclose(high, [0.15 + s0, 1.0])
    for coll in ax.collections:
        y = coll.get_paths()[0].vertices[:, 1]
        assert y.min() >= 0.0 and y.max() <= 1.0


def test_loss_bands_are_clipped_at_zero_only():
    runs = [_run([0.0, 5.0], column="train_loss"), _run([0.4, 9.0], column="train_loss")]
    groups = {"lattice b=3": runs}
    ax = plot_runs(groups, x="round", metric="train_loss")
    low, high = _band(ax, "lattice b=3")
    s0, s1 = 0.4 / math.sqrt(2), 4.0 / math.sqrt(2)
    np.testing.assert_allclose(low, [0.0, 7.0 - s1])
    np.testing.assert_allclose(high, [0.2 + s0, 7.0 + s1])  # above 1: not clipped
    assert ax.get_ylabel() == "train_loss"


@pytest.mark.parametrize("n", [1, 3])
def test_legend_says_over_how_many_seeds(n):
    groups = {lab: [_run([0.1, 0.5, 0.7]) for _ in range(n)] for lab in ("b=32", "topk b=2")}
    ax = plot_runs(groups)
    title = ax.get_legend().get_title().get_text()
    assert title == f"mean ± std over {n} seed{'s' if n > 1 else ''}"
    assert len(ax.collections) == (2 if n > 1 else 0)  # a single run has no band


def test_legend_with_unequal_seed_counts_names_each_n():
    groups = {"b=32": [_run([0.1, 0.5])] * 5, "topk b=2": [_run([0.1, 0.5])] * 3}
    ax = plot_runs(groups)
    assert ax.get_legend().get_title().get_text() == "mean ± std over 3–5 seeds"
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {
        "b=32 (n=5)",
        "topk b=2 (n=3)",
    }


def test_plot_runs_axes_and_figures():
    groups = {"b=32": [_run([0.1, 0.5, 0.7])]}
    before = set(plt.get_fignums())
    ax = plot_runs(groups, x="bits")
    assert len(set(plt.get_fignums()) - before) == 1
    assert ax.get_xscale() == "log"
    assert list(ax.get_lines()[0].get_xdata()) == [1000.0, 2000.0]  # bits 0 left out on log x
    fig, ax2 = plt.subplots()
    assert plot_runs(groups, ax=ax2, x="epoch") is ax2
    assert ax2.get_xlabel() == "epoch"


def test_plot_runs_bad_input():
    with pytest.raises(TypeError, match="groups must be a non-empty mapping"):
        plot_runs({})
    with pytest.raises(TypeError, match=r"groups\['a'\] must be a non-empty list of RunResult"):
        plot_runs({"a": [1.0]})
    with pytest.raises(ValueError, match="x must be one of round, epoch, bits.*got 'time'"):
        plot_runs({"a": [_run([0.1])]}, x="time")
    with pytest.raises(ValueError, match="metric must be one of .*got 'auc'"):
        plot_runs({"a": [_run([0.1])]}, metric="auc")


def test_experiment_figures_leave_pyplot_alone(tmp_path):
    from cvfl_sim.experiments.plotting import plot_panels

    before = plt.get_fignums()
    backend = matplotlib.get_backend()
    path = str(tmp_path / "f.png")
    plot_panels(
        {lab: [_run([0.2, 0.6, 0.8])] * 2 for lab in LABELS_13}, path, "t", ("round", "bits")
    )
    assert plt.get_fignums() == before and matplotlib.get_backend() == backend
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------ plot_bound
class _Terms:
    def __init__(self, opt, var, comp):
        self.optimization, self.variance, self.compression = opt, var, comp
        self.total = opt + var + comp


class _Check:
    theorem = "4.2"
    observed = 0.5
    forms = {"recovered": _Terms(2.0, 0.1, 0.0), "tight (C4.5, ours)": _Terms(2.0, 0.1, 30.0)}


def test_plot_bound_pyplot_figure_and_given_axes():
    before = set(plt.get_fignums())
    ax = plot_bound(_Check())
    assert len(set(plt.get_fignums()) - before) == 1
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == sorted([2.0, 0.1, 0.0, 2.1, 2.0, 0.1, 30.0, 32.1])
    assert [line.get_ydata()[0] for line in ax.get_lines()] == [0.5]  # the observed value
    lo, hi = ax.get_ylim()
    assert 1e-3 < lo < 0.1 and hi > 32.1  # the zero term does not stretch the log axis
    fig, ax2 = plt.subplots()
    assert plot_bound(_Check(), ax=ax2) is ax2
    with pytest.raises(TypeError, match="check must be the BoundCheck"):
        plot_bound("check")


# ---------------------------------------------------------------------------------- in a notebook
def test_plot_runs_and_plot_bound_show_an_image_in_a_notebook(run_notebook):
    # plot_tradeoff in a notebook: tests/test_notebook.py
    cells = [
        "from cvfl_sim import RunResult, plot_bound, plot_runs\n"
        "rows = [dict(epoch=e, round=e, bits=9 * e, test_accuracy=a) for e, a in "
        "enumerate([0.2, 0.7])]\n"
        "plot_runs({'b=32': [RunResult({}, {'metric': 'accuracy'}, rows)] * 2})",
        "from types import SimpleNamespace as NS\n"
        "t = NS(optimization=1.0, variance=0.5, compression=2.0, total=3.5)\n"
        "plot_bound(NS(forms={'recovered': t}, observed=0.2, theorem='4.2'))",
    ]
    for cell in run_notebook(cells):
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(images) == 1, cell.outputs
