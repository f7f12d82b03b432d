"""A researcher's own data in every command: ``train``, ``bound`` and ``reproduce`` on a CSV and an
NPZ, ``reproduce --data-dir`` on the paper's CIFAR-10 files, and one-line refusals before work."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_paper_files import write_cifar

from cvfl_sim.commands.cli import main
from cvfl_sim.vfl.results import RunResult


@pytest.fixture
def user_files(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 7))
    y = (X[:, 0] - X[:, 4] > 0).astype(int)
    header = ",".join([*(f"x{j}" for j in range(3)), "label", *(f"x{j}" for j in range(3, 7))])
    table = np.c_[X[:, :3], y, X[:, 3:]]
    csv = tmp_path / "mine.csv"
    np.savetxt(csv, table, delimiter=",", header=header, comments="")
    npz = tmp_path / "mine.npz"
    np.savez(npz, features=X.reshape(90, 7, 1), target=y)
    return X, y, csv, npz


def test_train_on_a_csv_splits_its_columns_over_the_parties(user_files, tmp_path, capsys):
    X, y, csv, _ = user_files
    out = tmp_path / "run.json"
    argv = ["train", "--dataset", str(csv), "--label-column", "label", "--parties", "3"]
    assert main([*argv, "--epochs", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mine: 3 parties (D_m = [3, 2, 2]), " in text
    res = RunResult.load(out)
    assert res.dataset["n_parties"] == 3 and res.dataset["n_train"] + res.dataset["n_test"] == 90
    assert len(res.history) == 3


def test_train_and_bound_on_an_npz(user_files, capsys):
    *_, npz = user_files
    common = ["--x-key", "features", "--y-key", "target", "--split-axis", "1", "--parties", "2"]
    assert main(["train", str(npz), *common, "--epochs", "1"]) == 0
    assert "mine: 2 parties (D_m = [4, 3])" in capsys.readouterr().out
    assert main(["bound", "--dataset", str(npz), *common, "--quick", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dataset"]["name"] == "mine" and doc["dataset"]["feature_dims"] == [4, 3]
    assert doc["certificate"]["observed"] > 0


def test_reproduce_on_your_own_csv(user_files, tmp_path, capsys):
    *_, csv, _ = user_files
    out = tmp_path / "results"
    argv = ["reproduce", "local-steps", "--quick", "--seeds", "1", "--no-progress"]
    argv += ["--dataset", str(csv), "--label-column", "3", "--out", str(out)]
    assert main(argv) == 0
    assert "data: mine (csv) for every run" in capsys.readouterr().err
    runs = sorted((out / "runs").glob("*.json"))
    assert len(runs) == 3 and all(p.name.startswith("mine_lattice-b3_Q") for p in runs)
    assert RunResult.load(runs[0]).dataset["name"] == "mine"


def test_reproduce_reads_the_paper_data_from_data_dir(tmp_path, capsys):
    # 150 training images: enough for the CIFAR-10 settings' B = 100
    write_cifar(tmp_path / "data" / "cifar-10-batches-bin", counts=(30,) * 5, test=20)
    out = tmp_path / "results"
    argv = ["reproduce", "curves", "--quick", "--seeds", "1", "--no-progress"]
    assert main([*argv, "--data-dir", str(tmp_path / "data"), "--out", str(out)]) == 0
    assert "cifar10-quadrants from" in capsys.readouterr().err
    runs = sorted((out / "runs").glob("cifar10-quadrants_*.json"))
    assert len(runs) == 10  # b = 32 and three compressors at three bit widths
    res = RunResult.load(runs[0])
    assert res.config["parties_model"] == "cnn" and res.dataset["feature_dims"] == [768] * 4


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["train", "nosuch"], ["unknown data set 'nosuch'", "built-in names"]),
        (["train", "x.csv"], ["'x.csv' does not exist"]),
        (["train", "breast-cancer", "--dataset", "digits-quadrants"], ["two data sets named"]),
        (["train"], ["name a data set"]),
        (["train", "cifar10-quadrants"], ["--data-dir"]),
        (["train", "digits-quadrants", "--parties", "3"], ["--parties does not apply"]),
        (["bound", "--dataset", "breast-cancer", "--x-key", "Z"], ["apply to a .npz"]),
        (["reproduce", "bounds", "--dataset", "breast-cancer"], ["take no --dataset"]),
        (["reproduce", "curves", "--parties", "3"], ["--parties need --dataset"]),
    ],
)
def test_bad_data_options_are_one_line_exit_2(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cvfl: error: "), err
    for w in words:
        assert w in err[0]


def test_reproduce_data_dir_without_the_data_is_refused(tmp_path, capsys):
    argv = ["reproduce", "curves", "--data-dir", str(tmp_path), "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "holds none of the paper's data sets that curves uses" in capsys.readouterr().err


def test_compare_on_your_embeddings_over_a_bits_range(tmp_path, capsys):
    H = np.random.default_rng(3).normal(size=(6, 10))
    np.save(tmp_path / "H.npy", H)
    out, png = tmp_path / "sweep", tmp_path / "sweep.png"
    argv = ["compare", "--embeddings", str(tmp_path / "H.npy"), "--bits", "1-3", "--trials", "20"]
    assert main([*argv, "--plot", str(png), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "embedding 6x10" in text and f"range [{H.min():.4g}, {H.max():.4g}]" in text
    assert png.stat().st_size > 1000
    from cvfl_theory.compressors import BitsSweep

    sweep = BitsSweep.load(str(out) + ".json")
    assert sweep.bits == (1, 2, 3) and sweep.shape == (6, 10)
    assert sweep.range == (float(H.min()), float(H.max()))
    # the scalar quantizer's exact error at b bits on the embedding's own range (C5.1): 2^b
    # levels, step = (max - min) / (2^b - 1); subtractive dither makes each component's error
    # uniform on a cell, variance step^2 / 12
    for b in (1, 2, 3):
        step = (H.max() - H.min()) / (2**b - 1)
        assert sweep.reports[("scalar", b)].exact == pytest.approx(H.size * step**2 / 12)
    assert all(len(line) <= 100 for line in text.splitlines() if "±" not in line)


def test_verify_on_your_matrix(tmp_path, capsys):
    X = np.random.default_rng(4).lognormal(size=(4, 9))
    np.save(tmp_path / "X.npy", X)
    argv = ["verify", str(tmp_path / "X.npy"), "--trials", "200", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "report")]) == 0
    text = capsys.readouterr().out
    assert "X.npy 4x9 float64: closed forms vs simulation" in " ".join(text.split())
    assert "proofs checks skipped" in text and "5 passed, 0 failed" in text
    from cvfl_sim.experiments.verify_suite import VerifyReport

    report = VerifyReport.load(tmp_path / "report.json")
    assert len(report.suite) == 5 and report.checks == [] and report.passed
    assert all(r.shape == (4, 9) for _, r in report.suite)
    np.save(tmp_path / "bad.npy", np.array([[1.0, np.nan]]))
    assert main(["verify", str(tmp_path / "bad.npy")]) == 2
    assert "must be finite" in capsys.readouterr().err


def test_tables_print_in_panels_of_100_columns_unless_wide(capsys):
    from cvfl_theory.table import Table, text_width

    cols = ["key", *(f"column {i}" for i in range(14))]
    t = Table(cols, [["row", *range(14)]], groups=[("", 1), ("first", 7), ("second", 7)])
    lines = str(t).splitlines()
    assert max(map(len, lines)) <= 100 and lines.count("") == 1  # two panels
    second_panel = lines[lines.index("") + 1 :]
    # a panel ends where a group ends when it can: the groups stay whole
    assert lines[0].split() == ["first"] and second_panel[0].split() == ["second"]
    assert sum(line.startswith("row") for line in lines) == 2  # the key column in each panel
    with text_width(None):
        assert len(str(t).splitlines()) == 4 and max(map(len, str(t).splitlines())) > 100
    argv = ["compare", "--bits", "2-3", "--trials", "5", "--batch", "2", "--width", "3"]
    assert main([*argv, "--wide"]) == 0 and main(["--wide", *argv]) == 0


def test_verify_gives_the_same_report_on_workers_as_in_process(tmp_path, capsys):
    argv = ["verify", "--trials", "30", "--checks", "k1", "--no-progress", "--json"]
    assert main([*argv, "--jobs", "1"]) == 0
    serial = json.loads(capsys.readouterr().out)
    assert main([*argv, "--jobs", "2"]) == 0
    parallel = json.loads(capsys.readouterr().out)
    serial.pop("seconds"), parallel.pop("seconds")
    assert parallel == serial and serial["passed"] == 20 + 2
    assert [c["label"] for c in serial["proofs_checks"]] == ["K1.1", "K1.2"]
