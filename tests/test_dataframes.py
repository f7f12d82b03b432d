"""``to_dataframe()``: the same columns, in the same order, and the same values as the CSV.

Each DataFrame is compared with pandas' own reading of the object's CSV, so the CSV writer (not
the code under test) decides what the expected frame is.
"""

import io
import math
import sys

import numpy as np
import pandas as pd
import pytest
from _helpers import python_stdout, tiny_dataset
from pandas.testing import assert_frame_equal

from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.results import HISTORY_COLUMNS, RunResult
from cvfl_sim.vfl.train import train
from cvfl_theory import IndependentEncoder
from cvfl_theory.compressors import HexLatticeQuantizer, ScalarQuantizer, TopK
from cvfl_theory.compressors.report import (
    REPORT_COLUMNS,
    compare_with_published,
    comparison_table,
)
from cvfl_theory.table import Table
from cvfl_theory.tradeoff import tradeoff_curve
from cvfl_theory.verify import verify


def _from_csv(text):
    return pd.read_csv(io.StringIO(text))


def _tiny_run():
    ds = tiny_dataset(24, (3, 2), y=np.arange(24) % 3)
    cfg = CVFLConfig(Q=2, lr=0.1, epochs=2, batch_size=8, compressor=ScalarQuantizer(4), seed=0)
    return train(ds, cfg)


def test_run_history_frame_matches_its_csv():
    run = _tiny_run()
    df = run.to_dataframe()
    assert list(df.columns) == list(HISTORY_COLUMNS)
    assert len(df) == len(run.history) >= 2
    assert_frame_equal(df, _from_csv(run.history_csv()))
    # the reported issue: a plain DataFrame of the history orders the columns differently
    assert list(pd.DataFrame(run.history).columns) != list(HISTORY_COLUMNS)


def test_run_history_frame_orders_keys_and_fills_missing_values():
    rows = [
        {"bits": 64, "round": 1, "epoch": 0, "train_loss": 1.5, "grad_norm_sq": None},
        {"round": 2, "epoch": 0, "bits": 128, "train_loss": math.inf, "test_f1": 0.25},
    ]
    run = RunResult({}, {"name": "toy"}, rows)
    df = run.to_dataframe()
    assert list(df.columns) == list(HISTORY_COLUMNS)
    assert df["bits"].tolist() == [64, 128]
    assert df["train_loss"].iloc[1] == math.inf
    assert df["grad_norm_sq"].isna().all() and math.isnan(df["test_f1"].iloc[0])
    assert_frame_equal(df, _from_csv(run.history_csv()))


def test_tradeoff_curve_frame_matches_its_csv():
    X = np.random.default_rng(0).standard_t(2.5, size=(4, 32))
    t = tradeoff_curve(X, [2000.0, 4000.0], methods=("uniform", "fixed-size", "optimal", "binary"))
    df = t.to_dataframe()
    assert list(df.columns) == ["method", "protocol", "bits_target", "bits", "budget", "mse"]
    assert len(df) == len(t) == 7
    assert df.attrs["title"] == t.title
    assert_frame_equal(df, _from_csv(t.to_csv()))
    assert math.isnan(df.loc[df["method"] == "binary", "bits_target"].item())


def test_table_frame_keeps_types():
    t = Table(["name", "n", "x", "ok"], [["a", 1, 0.5, True], ["b", 2, math.nan, False]])
    df = t.to_dataframe()
    assert df["n"].dtype == np.int64 and df["ok"].dtype == bool
    assert_frame_equal(df, _from_csv(t.to_csv()))


def test_verify_result_frame_matches_its_table_csv():
    res = verify(IndependentEncoder(0.5), np.arange(12.0).reshape(3, 4), trials=200, rng=0)
    df = res.to_dataframe()
    assert list(df.columns) == res.table().columns
    assert len(df) == len(res.checks)
    assert df.attrs["encoder"] == res.encoder and df.attrs["passed"] == res.passed
    assert_frame_equal(df, _from_csv(res.table().to_csv()))


def test_compressor_comparison_frames():
    x = np.random.default_rng(1).uniform(-1, 1, size=(4, 6))
    comps = [ScalarQuantizer(2, range=(-1, 1)), HexLatticeQuantizer(3, range=(-1, 1)), TopK(k=2)]
    reports = [compare_with_published(c, x, trials=20, rng=2) for c in comps]
    one = reports[0].to_dataframe()
    assert list(one.columns) == list(REPORT_COLUMNS) and len(one) == 1
    assert one["exact"].item() == reports[0].exact
    assert one["ratio"].item() == pytest.approx((2**2 / (2**2 - 1)) ** 2)  # C5.1
    t = comparison_table(reports)
    df = t.to_dataframe()
    assert list(df.columns) == list(REPORT_COLUMNS) and len(df) == 3
    assert_frame_equal(df, _from_csv(t.to_csv()))
    assert_frame_equal(df.iloc[[0]], one)
    with pytest.raises(TypeError, match="ComparisonReport"):
        comparison_table([reports[0], "not a report"])


def test_missing_pandas_gives_an_install_hint(monkeypatch):
    run = RunResult({}, {"name": "toy"}, [{"epoch": 0, "round": 1, "bits": 8}])
    res = verify(IndependentEncoder(0.5), np.eye(2), trials=10, rng=0)
    x = np.ones((1, 4))
    report = compare_with_published(TopK(k=1), x, trials=2, rng=0)
    objects = [run, res, Table(["a"], [[1]]), report, comparison_table([report])]
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` now raises ImportError
    for obj in objects:
        with pytest.raises(ImportError, match=r"pip install pandas.*cvfl\[dataframe\]"):
            obj.to_dataframe()


def test_importing_the_packages_does_not_import_pandas():
    code = (
        "import sys, cvfl_theory, cvfl_theory.verify, cvfl_theory.tradeoff, "
        "cvfl_theory.compressors, cvfl_sim.vfl.results; print('pandas' in sys.modules)"
    )
    assert python_stdout(code) == "False"
