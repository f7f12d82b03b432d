"""``--json`` of ``cvfl verify``, ``cvfl optimize`` and ``cvfl compare``: one JSON document on
stdout, numbers as numbers, non-finite numbers as strings, notes on stderr."""

import json
import math

import numpy as np
import pytest
from _helpers import run_json

from cvfl_sim.commands.cli import main


def test_verify_json_on_one_proofs_check(capsys):
    code, doc, err = run_json(capsys, ["verify", "--json", "--trials", "60", "--checks", "k1_2"])
    assert code == 0
    assert [c["label"] for c in doc["proofs_checks"]] == ["K1.2"]
    k12 = doc["proofs_checks"][0]
    assert k12["passed"] is True and isinstance(k12["empirical"], float)
    assert doc["failed"] == 0 and doc["passed"] == len(doc["suite"]) + 1
    assert doc["trials"] == 60 and doc["checks_prefix"] == "k1_2"
    for run in doc["suite"]:
        mse = run["checks"][0]
        assert mse["quantity"] == "MSE" and run["trials"] == 60
        assert isinstance(mse["theoretical"], float) and isinstance(run["shape"], list)
        assert abs(mse["empirical"] - mse["theoretical"]) <= mse["threshold"] * mse["se"]
    assert "K1.2" in err  # the text report went to stderr as progress


def test_verify_json_text_mode_unchanged(capsys):
    assert main(["verify", "--trials", "60", "--checks", "k1_2_"]) == 0
    out, _ = capsys.readouterr()
    assert "passed, 0 failed" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_optimize_json(tmp_path, capsys):
    X = np.array([[0.0, 1.0, 2.0, 6.0], [1.0, -1.0, 3.0, 5.0]])
    data = tmp_path / "x.npy"
    np.save(data, X)
    out_npz = tmp_path / "p.npz"
    argv = ["optimize", str(data), "--bits", "300", "--json", "--out", str(out_npz)]
    code, doc, err = run_json(capsys, argv)
    assert code == 0 and f"saved {out_npz}" in err
    # sparse protocol, centres sent: B = (300 - n*r) / (ceil(log2 d) + r) = (300 - 64) / 34
    assert doc["budget"] == pytest.approx(236 / 34)
    assert doc["expected_bits"] == pytest.approx(300.0)
    assert (doc["n"], doc["d"], doc["protocol"], doc["method"]) == (2, 4, "sparse", "exact")
    assert doc["mu"] == pytest.approx(X.mean(axis=1).tolist())
    saved = np.load(out_npz)
    assert doc["mse"] == float(saved["mse"]) and doc["certified"] is True
    assert doc["lower_bound"] == "nan"  # non-finite as a string (exact path has no dual bound)
    assert isinstance(doc["threshold"], float) and doc["threshold"] > 0


def test_compare_json(capsys):
    argv = ["compare", "--json", "--bits", "1", "--batch", "4", "--width", "6", "--trials", "20"]
    code, doc, err = run_json(capsys, argv)
    assert code == 0
    assert [r["compressor"].split("(")[0] for r in doc["reports"]] == ["ScalarQuantizer", "TopK"]
    scalar = doc["reports"][0]
    # C5.1 at q = 1: exact error (2^q/(2^q - 1))^2 = 4 times the published bound
    assert scalar["ratio"] == pytest.approx(4.0) and scalar["published_holds"] is False
    assert scalar["shape"] == [4, 6] and scalar["payload_bits"] == 4 * 6 * 1
    assert math.isfinite(scalar["z_score"])
    assert len(doc["unavailable"]) == 1 and "hexagonal" in doc["unavailable"][0]
    assert "hexagonal" in err
    assert doc["embedding"] == {
        "distribution": "uniform(-1, 1)",
        "batch": 4,
        "width": 6,
        "seed": 0,
    }
