"""Results you can keep: ``save``/``load`` round trips are exact and damaged files are refused.

Every result object (OptimalResult, VerifyResult, VerifyReport, BitsSweep) writes one result file
(:mod:`cvfl_theory.store`: JSON with raw arrays, never a pickle); loading it back gives the same
numbers, and a file that is truncated, forged or of another kind is refused naming the file.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from cvfl_sim.experiments.verify_suite import VerifyReport, run_suite
from cvfl_theory.compressors import BitsSweep, compare_bits
from cvfl_theory.encoders import IndependentEncoder
from cvfl_theory.optimal import OptimalResult, optimal_probabilities
from cvfl_theory.store import read_result, write_result
from cvfl_theory.verify import VerifyResult, verify
from proofs_checks import k1_2_mse

X = np.random.default_rng(0).standard_t(3, size=(5, 12))


def test_store_round_trip_keeps_every_value_and_dtype(tmp_path):
    arrays = {
        "f8": np.linspace(-1, 1, 7),
        "f4": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i8": np.array([-(2**62), 3]),
        "b": np.array([True, False]),
        "scalar": np.array(2.5),
        "big_endian": np.arange(3, dtype=">f8"),
    }
    fields = {"inf": float("inf"), "nan": float("nan"), "text": "inf", "nested": [{"a": None}]}
    path = write_result(tmp_path / "r", "demo", fields, arrays)
    assert path.endswith("r.json")
    got_fields, got = read_result(path, "demo")
    assert got_fields["inf"] == float("inf") and np.isnan(got_fields["nan"])
    assert got_fields["text"] == "inf" and got_fields["nested"] == [{"a": None}]  # no collision
    for k, a in arrays.items():
        assert got[k].shape == a.shape and np.array_equal(got[k], a)
    assert got["scalar"].ndim == 0 and got["big_endian"].dtype == np.dtype("<f8")
    with pytest.raises(TypeError, match="cannot be stored"):
        write_result(tmp_path / "o", "demo", {}, {"c": np.array([1j])})


def _doc(path):
    with open(path) as f:
        return json.load(f)


def _rewrite(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)


def _write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d.update(kind="OptimalResult"), "holds a 'OptimalResult', not a 'demo'"),
        (lambda d: d.update(version=2), "version 2"),
        (lambda d: d.pop("format"), "not a cvfl result file"),
        (lambda d: d["arrays"]["a"].update(shape=[4]), r"declares shape \[4\].*carries"),
        (lambda d: d["arrays"]["a"].update(shape=[10**9, 10**9]), "declares shape"),
        (lambda d: d["arrays"]["a"].update(dtype="|O"), "dtype '|O'"),
        (lambda d: d["arrays"]["a"].update(data="!!!!" * 8), "not base64"),
        (lambda d: d["fields"].update(x={"$float": "1e400"}), "is not a non-finite float"),
    ],
)
def test_damaged_or_forged_result_files_are_refused(tmp_path, damage, message):
    path = write_result(tmp_path / "r", "demo", {"x": 1.0}, {"a": np.arange(3.0)})
    doc = _doc(path)
    damage(doc)
    _rewrite(path, doc)
    with pytest.raises(ValueError, match=message):
        read_result(path, "demo")


def test_truncated_and_non_json_files_are_refused(tmp_path):
    path = write_result(tmp_path / "r", "demo", {"x": 1.0}, {"a": np.arange(3.0)})
    with open(path, "rb") as f:
        raw = f.read()
    _write_bytes(path, raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="not JSON"):
        read_result(path, "demo")
    _write_bytes(path, b"\x80\x04\x95pickle")
    with pytest.raises(ValueError, match="not JSON"):
        read_result(path, "demo")


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"mu": "zero", "protocol": "varying-length"}, {"per_node_budget": [2.0, 3, 1, 4, 2]}],
)
def test_optimal_result_round_trip(tmp_path, kwargs):
    budget = None if "per_node_budget" in kwargs else 20.0
    res = optimal_probabilities(X, budget, **kwargs)
    back = OptimalResult.load(res.save(tmp_path / "opt"))
    assert np.array_equal(back.p, res.p) and np.array_equal(back.mu, res.mu)
    assert back.key_numbers() | {"seconds": 0} == res.key_numbers() | {"seconds": 0}
    assert back.certified() and back.history == res.history
    # the loaded result still builds the encoder it describes: the same closed-form MSE
    assert back.encoder().mse(X) == res.encoder().mse(X)
    df = back.to_dataframe()
    assert len(df) == X.size and df["p"].sum() == pytest.approx(float(np.sum(res.p)))


def test_optimal_result_refuses_wrong_meaning(tmp_path):
    path = optimal_probabilities(X, 20.0).save(tmp_path / "opt")
    doc = _doc(path)
    p = np.frombuffer(base64.b64decode(doc["arrays"]["p"]["data"]), "<f8").copy()
    p[3] = 1.5  # a probability above 1
    doc["arrays"]["p"]["data"] = base64.b64encode(p.tobytes()).decode()
    _rewrite(path, doc)
    with pytest.raises(ValueError, match=r"p must hold probabilities in \[0, 1\]"):
        OptimalResult.load(path)
    doc = _doc(optimal_probabilities(X, 20.0).save(tmp_path / "opt2"))
    doc["fields"]["r"] = 48
    _rewrite(tmp_path / "opt2.json", doc)
    with pytest.raises(ValueError, match="r must be one of"):
        OptimalResult.load(tmp_path / "opt2.json")
    doc["fields"]["r"] = 32
    doc["fields"]["certificate"]["threshold"] = "big"
    _rewrite(tmp_path / "opt2.json", doc)
    with pytest.raises(ValueError, match="a certificate must have the numbers"):
        OptimalResult.load(tmp_path / "opt2.json")


def test_verify_result_and_report_round_trip(tmp_path):
    res = verify(IndependentEncoder(0.3), X, trials=60, rng=1)
    back = VerifyResult.load(res.save(tmp_path / "v"))
    assert back.to_dict() == res.to_dict() and back.passed == res.passed
    report = VerifyReport(suite=list(run_suite(trials=20))[:3], checks=[k1_2_mse.check()])
    again = VerifyReport.load(report.save(tmp_path / "rep"))
    assert again.to_dict() == report.to_dict() and again.passed == report.passed
    assert list(again.to_dataframe().columns)[:2] == ["data", "encoder"]
    doc = _doc(tmp_path / "rep.json")
    doc["fields"]["proofs_checks"][0]["passed"] = not report.checks[0].passed
    _rewrite(tmp_path / "rep.json", doc)
    with pytest.raises(ValueError, match="stored verdict contradicts"):
        VerifyReport.load(tmp_path / "rep.json")


def test_bits_sweep_round_trip_and_plot(tmp_path):
    sweep = compare_bits(X, bits=range(1, 5), trials=30, rng=2)
    assert ("lattice", 1) in sweep.unavailable and ("lattice", 2) in sweep.reports
    back = BitsSweep.load(sweep.save(tmp_path / "s"))
    assert back.to_dict() == sweep.to_dict()
    assert len(back.to_dataframe()) == len(sweep.reports) == 11
    fig = back.plot()
    assert len(fig.axes[0].lines) >= 6  # exact and published per compressor
    doc = _doc(tmp_path / "s.json")
    doc["fields"]["reports"][0]["standard_error"] = -1
    _rewrite(tmp_path / "s.json", doc)
    with pytest.raises(ValueError, match="standard_error must be >= 0"):
        BitsSweep.load(tmp_path / "s.json")


@pytest.mark.parametrize(
    "change",
    [
        lambda f: f["unavailable"].append(dict(f["unavailable"][0])),  # the same pair twice
        lambda f: f["unavailable"].append({**f["reports"][0], "reason": "x"}),  # also a report
        lambda f: f["unavailable"][0].update(bits=99),  # not a width of the sweep
        lambda f: f["unavailable"][0].update(kind="gzip"),  # not a compressor of the sweep
    ],
)
def test_bits_sweep_refuses_unavailable_entries_that_are_not_new_pairs(tmp_path, change):
    sweep = compare_bits(X, bits=range(1, 3), trials=20, rng=2)
    sweep.save(tmp_path / "s")
    doc = _doc(tmp_path / "s.json")
    change(doc["fields"])
    _rewrite(tmp_path / "s.json", doc)
    with pytest.raises(ValueError, match="is not a new pair of the sweep"):
        BitsSweep.load(tmp_path / "s.json")
