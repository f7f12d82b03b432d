"""Short text reprs (no whole arrays) and HTML reprs of the objects users look at in Jupyter."""

import re

import numpy as np

from cvfl_sim.vfl.results import HISTORY_COLUMNS, RunResult
from cvfl_theory import IndependentEncoder, RotatedBinaryEncoder
from cvfl_theory.optimal import optimal_probabilities
from cvfl_theory.table import Table


def test_table_repr_names_title_size_and_first_rows():
    t = Table(["method", "mse"], [[f"m{i}", i / 7] for i in range(3)], title="curve")
    text = repr(t)
    assert "object at 0x" not in text
    assert text.splitlines()[0] == "<Table 'curve': 3 rows x 2 columns>"
    assert (
        text.splitlines()[-1] == "m2      0.285714"
    )  # all rows of a short table, formatted as in str()
    long = Table(["k"], [[i] for i in range(100)], title="long")
    lines = repr(long).splitlines()
    assert lines[0] == "<Table 'long': 100 rows x 1 columns>"
    assert lines[-1] == "... 95 more rows" and len(lines) == 1 + 2 + 5 + 1


def test_optimal_result_repr_is_one_short_line():
    X = np.random.default_rng(0).normal(size=(50, 200))  # 10 000 probabilities
    res = optimal_probabilities(X, bits=40_000.0)
    text = repr(res)
    assert "\n" not in text and len(text) < 250 and "array" not in text
    assert text.startswith("OptimalResult(p: (50, 200), method='exact', protocol='sparse'")
    for key, value in [
        ("mse", res.mse),
        ("expected_bits", res.expected_bits),
        ("budget", res.budget),
        ("threshold", res.threshold),
    ]:
        shown = re.search(rf"\b{key}=([^,)]+)", text).group(1)
        assert float(shown) == float(f"{value:.6g}")
    assert "certified=True" in text
    per_node = optimal_probabilities(X[:3, :5], per_node_budget=[1.0, 2.0, 3.0])
    assert "budget=per-node" in repr(per_node) and "threshold=per-node (3,)" in repr(per_node)


def test_optimal_result_html_lists_key_numbers():
    res = optimal_probabilities(np.arange(12.0).reshape(3, 4), budget=2.0)
    html = res._repr_html_()
    assert html.startswith("<table>") and "<caption>OptimalResult (K6)</caption>" in html
    for name in ("mse", "expected_bits", "budget", "threshold", "certified"):
        assert f"<td>{name}</td>" in html
    assert f"<td>{res.mse:.6g}</td>" in html
    assert "<td>False</td>" in html and "FAIL" not in html  # booleans are not verdicts


def test_encoded_repr_shows_sizes_not_arrays():
    X = np.random.default_rng(1).normal(size=(4, 1000))
    enc = IndependentEncoder(0.25).encode(X, rng=0)
    text = repr(enc)
    sent = sum(len(m.support) for m in enc.nodes)
    assert text == (
        f"Encoded(scheme='bernoulli', n=4, d=1000, dtype=float64, sent={sent}, nnz={sent}, "
        "centre_sent=True)"
    )
    rot = RotatedBinaryEncoder(7).encode(np.ones((2, 5)), rng=0)
    assert "d=8, original_d=5" in repr(rot) and "rotation_seed=7" in repr(rot)


def test_run_result_html_shows_the_last_history_row():
    rows = [
        {"epoch": 0, "round": 5, "bits": 100, "test_accuracy": 0.5, "train_loss": 2.0},
        {"epoch": 1, "round": 10, "bits": 200, "test_accuracy": 0.75, "train_loss": 1.25},
    ]
    html = RunResult({}, {"name": "toy"}, rows)._repr_html_()
    assert "RunResult: toy, 2 evaluations" in html
    header = re.findall(r"<th>(.*?)</th>", html)
    assert header == list(HISTORY_COLUMNS)
    cells = re.findall(r"<td>(.*?)</td>", html)
    assert cells[:4] == ["1", "10", "1.25", "0.75"] and cells[5] == "200"
    assert cells[HISTORY_COLUMNS.index("grad_norm_sq")] == "-"
