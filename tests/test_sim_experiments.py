"""Sweeps resume without recomputation; the reproduce CLI; the headline-claim verdict; C7."""

import math
import os

import pytest
import torch
from _helpers import record_training

import cvfl_sim.experiments as ex
import cvfl_sim.experiments.compressors as exc
import cvfl_sim.experiments.specs as exs
import cvfl_sim.experiments.tables as ext
from cvfl_sim.commands.cli import main
from cvfl_sim.experiments.timing import time_to_target
from cvfl_sim.vfl.results import RunResult

torch.set_num_threads(1)


def _specs():
    return [
        exs.RunSpec("breast-cancer", k, b, 2, 0, 1)
        for k, b in (("none", 32), ("scalar", 2), ("lattice", 3))
    ]


def test_interrupted_sweep_resumes_without_recomputing(tmp_path, monkeypatch):
    first = exs.run_sweep(_specs(), tmp_path, progress=False)
    runs = tmp_path / "runs"
    files = sorted(os.listdir(runs))
    assert len(files) == 6  # one JSON + one CSV per finished run, no temporary files
    # simulate an interruption before the last run finished
    victim = _specs()[-1].key()
    os.remove(runs / (victim + ".json"))
    calls = record_training(monkeypatch)  # the train that run_spec calls
    second = exs.run_sweep(_specs(), tmp_path, progress=False)
    assert len(calls) == 1
    assert calls[0].compressor.config()["bits"] == 3
    for spec in _specs():
        assert second[spec] == first[spec]  # cached and recomputed runs equal the originals
    exs.run_sweep(_specs(), tmp_path, progress=False)
    assert len(calls) == 1


def test_spec_key_changes_with_settings(monkeypatch):
    spec = _specs()[0]
    k = spec.key()
    monkeypatch.setitem(exs.SETTINGS, "breast-cancer", {**exs.SETTINGS["breast-cancer"], "lr": 0.5})
    assert spec.key() != k


def test_reproduce_cli_local_steps(tmp_path, monkeypatch, capsys, one_epoch):
    sweeps = []
    real_run_specs = exs.run_specs

    def counting(specs, *a, **k):
        sweeps.append(len(specs))
        return real_run_specs(specs, *a, **k)

    monkeypatch.setattr(exs, "run_specs", counting)
    code = main(
        [
            "reproduce",
            "local-steps",
            "--quick",
            "--seeds",
            "1",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    folder = tmp_path / "local-steps"
    assert {"table.csv", "table.md", "f1_vs_round.png"} <= set(os.listdir(folder))
    table = (folder / "table.md").read_text()
    assert table.count("\n") == 2 + 3  # header, rule, Q = 1, 10, 25
    assert "local-steps: results in" in capsys.readouterr().out
    assert sweeps == [3]  # one sweep of the command's 3 runs; the tables read them, no rerun


def test_reproduce_cli_rejects_bad_arguments(tmp_path):
    with pytest.raises(SystemExit):
        main(["reproduce", "no-such-experiment"])
    assert main(["reproduce", "curves", "--seeds", "0", "--out", str(tmp_path)]) == 2


def _row(kind, b, mean, std, bits, reached=5):
    return {
        "dataset": "d",
        "compressor": kind,
        "bits_per_component": b,
        "max_metric_mean": mean,
        "max_metric_std": std,
        "bits_to_target_mean": bits,
        "target": 0.8,
        "reached": reached,
        "seeds": 5,
    }


def test_headline_claim_verdicts():
    rows = [
        _row("none", 32, 0.90, 0.01, 1000.0),
        _row("scalar", 2, 0.89, 0.01, 90.0),
        _row("lattice", 2, 0.85, 0.01, 50.0),
        _row("topk", 2, 0.90, 0.0, 150.0),
    ]
    h = exc.headline_claim(rows, "d")
    verdict = {
        r["compressor"]: (r["fewer_bits_90pct"], r["metric_within_spread"])
        for r in h["per_compressor"]
    }
    assert verdict == {"scalar": (True, True), "lattice": (True, False), "topk": (False, True)}
    assert h["holds"] is False
    h2 = exc.headline_claim(rows[:2], "d")
    assert h2["holds"] is True
    rows_inf = [rows[0], _row("scalar", 2, 0.5, 0.01, math.inf, reached=0)]
    assert exc.headline_claim(rows_inf, "d")["per_compressor"][0]["fewer_bits_90pct"] is False


def test_headline_claim_reports_error_feedback_rows_apart():
    rows = [
        _row("none", 32, 0.90, 0.01, 1000.0),
        _row("scalar", 2, 0.89, 0.01, 90.0),
        _row("scalar+ef", 2, 0.70, 0.01, 90.0),  # fails, but is not part of the paper's claim
        _row("lattice+ef", 2, 0.90, 0.01, 80.0),
    ]
    h = exc.headline_claim(rows, "d")
    assert [r["compressor"] for r in h["per_compressor"]] == ["scalar", "scalar+ef", "lattice+ef"]
    assert h["holds"] is True
    md = exc._headline_markdown(h)
    assert "holds for: lattice+ef; fails for: scalar+ef." in md


def test_error_feedback_spec_runs_with_error_feedback():
    spec = exs.RunSpec("digits-quadrants", "scalar+ef", 2, 10, 0, 1)
    cfg = spec.config()
    assert cfg.error_feedback is True and cfg.compressor.name == "scalar"
    assert exs.RunSpec("digits-quadrants", "scalar", 2, 10, 0, 1).config().error_feedback is False
    assert spec.key() != exs.RunSpec("digits-quadrants", "scalar", 2, 10, 0, 1).key()


def test_time_model_c7():
    # R (Q t_c + t_comm): 40 rounds, Q = 25, 10 ms compute, 200 ms round trip
    assert time_to_target(40, 25, 0.2) == pytest.approx(40 * (25 * 0.01 + 0.2))
    assert time_to_target(math.inf, 1, 0.001) == math.inf
    with pytest.raises(ValueError, match="Q must be"):
        time_to_target(1, 0, 0.1)


def test_aggregate_bits_to_target(tmp_path):
    res = exs.run_sweep(_specs()[:1], tmp_path, progress=False)
    (r,) = res.values()
    assert isinstance(r, RunResult)
    rows = ext.aggregate(res, target=0.0)
    assert rows[0]["bits_to_target_mean"] == 0.0  # reached at the first evaluation
    rows = ext.aggregate(res, target=2.0)
    assert rows[0]["reached"] == 0 and math.isinf(rows[0]["bits_to_target_mean"])


def test_train_cli(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "train",
                "breast-cancer",
                "--epochs",
                "1",
                "--compressor",
                "scalar",
                "--bits",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "test_f1" in text and out.exists()
    assert RunResult.load(out).config["compressor"]["bits"] == 2
    assert main(["train", "breast-cancer", "--Q", "0"]) == 2
    assert "Q must be >= 1" in capsys.readouterr().err


def test_write_table_csv_quotes_fields_with_commas(tmp_path):
    import csv

    from cvfl_sim.experiments.tables import write_table

    write_table([{"window": "[0, 2)", "value": 1.5}], str(tmp_path), "t")
    with open(tmp_path / "t.csv", newline="") as fh:
        assert list(csv.reader(fh)) == [["window", "value"], ["[0, 2)", "1.5"]]


@pytest.mark.parametrize("progress", [True, False, None])
def test_bounds_and_schedules_print_lines_only_when_asked(monkeypatch, progress):
    # Options.progress None lets a bar decide (by terminal); the two experiments' own lines are
    # then off, so they receive a plain bool: True only for True
    import cvfl_sim.experiments.schedule_check as sc
    import cvfl_sim.experiments.theorem_runs as tr

    seen = []
    monkeypatch.setattr(tr, "run_theorem_experiment", lambda out, **kw: seen.append(kw) or {})
    monkeypatch.setattr(sc, "run_schedule_experiment", lambda out, **kw: seen.append(kw) or {})
    opt = exs.Options(out="unused", progress=progress)
    ex.experiment("bounds").run(opt)
    ex.experiment("schedules").run(opt)
    assert [kw["progress"] for kw in seen] == [progress is True] * 2
    assert all(type(kw["progress"]) is bool for kw in seen)


def test_a_run_file_holding_another_run_is_recomputed(tmp_path):
    """A run file edited (Q = 999) or overwritten by another run is not trusted (issue 20)."""
    import json

    specs = _specs()
    first = exs.run_sweep(specs, tmp_path, progress=False)
    runs = tmp_path / "runs"
    edited = runs / f"{specs[1].key()}.json"
    doc = json.loads(edited.read_text())
    doc["config"]["Q"] = 999
    edited.write_text(json.dumps(doc))
    other = runs / f"{specs[2].key()}.json"
    other.write_text((runs / f"{specs[0].key()}.json").read_text())  # another run's file
    with pytest.warns(RuntimeWarning, match="holds another run"):
        again = exs.run_sweep(specs, tmp_path, progress=False)
    for s in specs:
        assert again[s] == first[s]  # recomputed: the same run as before the edits
    assert json.loads(edited.read_text())["config"]["Q"] == 2


def test_the_bounds_table_marks_the_tight_estimates(tmp_path):
    """``reproduce bounds``: the sampled ratios are bounds at Q = 1 only, and so are the tight
    ones except for the analytic model with a dithered quantizer, whose later local steps C4.9
    bounds; elsewhere at Q > 1 they read ``est.``; C4.8 does not take top-k (``n/a``)."""
    import csv

    import cvfl_sim.experiments.theorem_runs as tr

    tr.run_theorem_experiment(str(tmp_path), quick=True, progress=False)
    folder = tmp_path / "bounds"
    with open(folder / "table.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    lines = (folder / "table.md").read_text().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    col, col_s = header.index("tight/obs"), header.index("sampled/obs")
    assert len(cells) == len(rows) and {int(r["Q"]) for r in rows} >= {1, 5}
    seen, seen_t = set(), set()
    for row, md in zip(rows, cells):
        compressed = row["compressor"] != "none"
        want = "estimate" if int(row["Q"]) > 1 and compressed else "bound"
        drift = row["model"] == "linear" and row["compressor"] in ("scalar", "lattice")
        want_t = "bound" if drift else want
        assert row["tight_kind"] == want_t, row["run"]
        assert md[col].endswith(" est.") == (want_t == "estimate"), row["run"]
        seen_t.add((want_t, int(row["Q"]) > 1))
        want_s = "" if row["compressor"] == "topk" else want
        assert row["sampled_kind"] == want_s, row["run"]
        assert (md[col_s] == "n/a") == (want_s == ""), row["run"]
        assert md[col_s].endswith(" est.") == (want_s == "estimate"), row["run"]
        assert ("biased" in row["sampled_skipped"] or "dithered" in row["sampled_skipped"]) == (
            want_s == ""
        ), row["run"]
        if want_s:
            # term 3 from C4.8 is a total of the same terms 1 and 2
            total = float(row["term1"]) + float(row["term2"]) + float(row["term3_sampled"])
            assert math.isclose(float(row["total_sampled"]), total, rel_tol=1e-9), row["run"]
            seen.add((want_s, compressed))
    assert seen >= {("bound", True), ("estimate", True), ("bound", False)}
    assert seen_t >= {("bound", True), ("estimate", True)}  # C4.9 at Q > 1; MLP or top-k not
