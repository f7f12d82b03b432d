"""The ``cvfl`` command fails politely: one-line errors before any work, resumable Ctrl-C, fast help."""

import json
import os
import pickle
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from _helpers import checkpoint_header, python_stdout, record_training

import cvfl_sim.experiments as ex
import cvfl_sim.experiments.specs as exs
from cvfl_sim.commands.cli import main
from cvfl_sim.commands.reproduce import EXPERIMENT_NAMES
from cvfl_sim.vfl.results import RunResult
from cvfl_theory._atomic import atomic_write_bytes

HEAVY = ("torch", "scipy", "cvxpy", "sklearn", "matplotlib")


def _one_error_line(capsys, *words):
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cvfl: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------------------ help and imports
def test_registering_the_subcommands_imports_nothing_heavy():
    code = (
        "import sys, json\n"
        "import cvfl_sim, cvfl_sim.commands.cli\n"
        "cvfl_sim.commands.cli.build_parser().format_help()\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    assert json.loads(python_stdout(code, timeout=120)) == []


def test_public_names_still_import_from_the_package():
    from cvfl_sim import CVFLConfig, RunResult, VerticalDataset, load_dataset, train

    assert callable(train) and callable(load_dataset)
    assert CVFLConfig.__name__ == "CVFLConfig" and VerticalDataset.__name__ == "VerticalDataset"
    assert RunResult.__module__ == "cvfl_sim.vfl.results"
    with pytest.raises(AttributeError, match="no attribute"):
        import cvfl_sim

        cvfl_sim.no_such_name  # noqa: B018


def test_reproduce_choices_are_the_experiments():
    assert EXPERIMENT_NAMES == tuple(ex.EXPERIMENTS)


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("train", ["local steps per round (default: 10)", "(default: none)", "(default: 0.05)"]),
        ("compare", ["e.g. 1-8 (default: 2)", "Monte Carlo trials (default: 200)"]),
        ("optimize", ["(default: sparse)", "bits per float (default: 32)"]),
        ("reproduce", ["(default: results)", "(default: 0.95)"]),
        ("verify", ["Monte Carlo trials (default: 1000)"]),
    ],
)
def test_help_shows_defaults(capsys, command, shown):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for s in shown:
        assert s in text
    assert "(default: None)" not in text


# ------------------------------------------------------------------------------ one-line errors
@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if a command starts loading data or training."""

    def boom(*a, **k):
        raise AssertionError("work started before the arguments were checked")

    import cvfl_sim.vfl.data
    import cvfl_sim.vfl.sources
    import cvfl_sim.vfl.train

    monkeypatch.setattr(cvfl_sim.vfl.train, "train", boom)
    monkeypatch.setattr(cvfl_sim.vfl.data, "load_dataset", boom)
    monkeypatch.setattr(cvfl_sim.vfl.sources.DataSource, "load", boom)
    monkeypatch.setattr(ex, "run_experiment", boom)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["train", "breast-cancer", "--bits", "2"], ["--bits 2 has no effect", "--compressor"]),
        (["train", "breast-cancer", "--compressor", "scalar"], ["needs --bits"]),
        (["train", "breast-cancer", "--compressor", "topk", "--bits", "40"], ["[1, 32]"]),
        (["compare", "--trials", "1"], ["--trials must be >= 2"]),
        (["compare", "--bits", "0"], ["--bits must be in [1, 32]"]),
        (["compare", "--bits", "40"], ["--bits must be in [1, 32]"]),
        (["compare", "--bits", "3-1"], ["--bits must be a width, a range A-B"]),
        (["train", "breast-cancer", "--device", "tpu"], ["--device must be 'cpu', 'cuda'"]),
        (["verify", "--trials", "1"], ["--trials must be >= 2"]),
        (["reproduce", "curves", "--seeds", "0"], ["--seeds must be >= 1"]),
        (["reproduce", "curves", "--target-fraction", "nan"], ["--target-fraction"]),
    ],
)
def test_bad_options_are_one_line_exit_2(capsys, no_training, argv, words):
    assert main(argv) == 2
    _one_error_line(capsys, *words)


@pytest.mark.parametrize("command", ["bound", "train"])
def test_a_batch_larger_than_the_data_is_one_line_before_any_progress(capsys, command):
    # breast cancer has 456 training rows: the data are read to know it, nothing else runs
    argv = [command, "--batch-size", "457"]
    argv += ["--quick", "--dataset", "breast-cancer"] if command == "bound" else ["breast-cancer"]
    assert main(argv) == 2
    _one_error_line(capsys, "batch_size must be <= the training set size N_train=456", "457")


def test_bad_output_paths_are_refused_before_any_work(tmp_path, capsys, no_training):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    missing = str(tmp_path / "no" / "such" / "r.json")
    cases = [
        (["train", "breast-cancer", "--out", missing], "does not exist"),
        (["train", "breast-cancer", "--out", str(tmp_path)], "is a folder"),
        (["train", "breast-cancer", "--out", str(a_file / "r.json")], "is not a folder"),
        (["train", "breast-cancer", "--checkpoint", missing], "does not exist"),
        (["train", "breast-cancer", "--checkpoint", str(tmp_path)], "is a folder"),
        (["optimize", str(a_file), "--bits", "1e4", "--out", missing], "does not exist"),
        (["reproduce", "curves", "--out", str(a_file)], "is a file"),
        (["reproduce", "curves", "--out", str(a_file / "sub")], "a file"),
    ]
    for argv, word in cases:
        assert main(argv) == 2, argv
        opt = argv[argv.index("--out" if "--out" in argv else "--checkpoint")]
        _one_error_line(capsys, opt, word)


def test_train_out_path_gets_json_suffix_checked(tmp_path, capsys, no_training):
    (tmp_path / "r.json").mkdir()  # --out r saves r.json: a folder there must be refused first
    assert main(["train", "breast-cancer", "--out", str(tmp_path / "r")]) == 2
    _one_error_line(capsys, "is a folder")


def test_debug_shows_the_traceback_and_unexpected_errors_name_their_type(capsys, monkeypatch):
    with pytest.raises(ValueError, match="--seeds"):
        main(["--debug", "reproduce", "curves", "--seeds", "0"])
    with pytest.raises(ValueError, match="--seeds"):
        main(["reproduce", "curves", "--seeds", "0", "--debug"])
    import cvfl_sim.commands.compare as compare

    def broken(args):
        raise KeyError("oops\nsecond line")

    monkeypatch.setattr(compare, "run", broken)  # registered afresh by every main()
    assert main(["compare"]) == 2
    line = _one_error_line(capsys, "KeyError", "--debug")
    assert "second line" in line


def test_warnings_are_one_line(capsys, monkeypatch):
    import cvfl_sim.commands.compare as compare

    def warns(args):
        warnings.warn("a cached run\nis damaged", RuntimeWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(compare, "run", warns)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["compare"]) == 0
    assert capsys.readouterr().err == "cvfl: warning: a cached run is damaged\n"


def test_interrupted_reproduce_says_how_to_resume(tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ex, "run_experiment", interrupted)
    monkeypatch.setattr(ex, "run_sweep", interrupted)  # the command's runs are computed first
    assert main(["reproduce", "curves", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    last = err.splitlines()[-1]  # after the "== cvfl reproduce curves" banner
    assert "Traceback" not in err and last.startswith("cvfl: interrupted; ")
    assert str(tmp_path / "runs") in last and "rerun the same command" in last


# ------------------------------------------------------------------------------ optimize inputs
def _npy_cases(tmp_path):
    def w(name, data):
        p = tmp_path / name
        p.write_bytes(data)
        return p

    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    npz = tmp_path / "x.npz"
    np.savez(npz, X=np.ones((2, 2)))
    empty_arr = tmp_path / "empty_arr.npy"
    np.save(empty_arr, np.zeros((0, 3)))
    one_d = tmp_path / "one_d.npy"
    np.save(one_d, np.ones(4))
    cplx = tmp_path / "c.npy"
    np.save(cplx, np.ones((2, 2), dtype=complex))
    good = tmp_path / "good.npy"
    np.save(good, np.ones((3, 4)))
    return [
        (w("empty.npy", b""), "is empty"),
        (npz, ".npz archive"),
        (w("text.npy", b"1 2 3\n4 5 6\n"), "is not a .npy file"),
        (w("p.npy", pickle.dumps([1, 2])), "Python pickle"),
        (obj, "object array"),
        (empty_arr, "non-empty 2-D"),
        (one_d, "non-empty 2-D"),
        (cplx, "real numbers"),
        (w("trunc.npy", good.read_bytes()[:-5]), "truncated"),
        (w("header.npy", good.read_bytes()[:10] + b"{garbage" + good.read_bytes()[18:]), "header"),
        (tmp_path / "missing.npy", "cannot read"),
        (tmp_path, "cannot read"),
    ]


def test_optimize_refuses_files_that_are_not_a_numeric_npy(tmp_path, capsys):
    for path, word in _npy_cases(tmp_path):
        assert main(["optimize", str(path), "--budget", "2"]) == 2, path
        line = _one_error_line(capsys, word)
        if "text" in path.name:
            assert "pickle" not in line


# ------------------------------------------------------------------------------ result files
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_results_are_written_with_mode_0666_minus_umask(tmp_path, capsys, umask, mode):
    X = tmp_path / "X.npy"
    np.save(X, np.arange(1.0, 13.0).reshape(3, 4))
    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "a.bin", b"x")
        assert main(["optimize", str(X), "--budget", "4", "--out", str(tmp_path / "o.npz")]) == 0
    finally:
        os.umask(old)
    for name in ("a.bin", "o.npz"):
        assert os.stat(tmp_path / name).st_mode & 0o777 == mode
    assert not list(tmp_path.glob(".tmp-*"))


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # truncated
        lambda b: b"\xff" + b[1:],  # not UTF-8
        lambda b: b"[" * 100_000,  # nested too deeply
        lambda b: json.dumps({"config": {}, "dataset": {}, "history": []}).encode(),
        lambda b: json.dumps({"config": {}, "dataset": {}, "history": [{"round": 0}]}).encode(),
        lambda b: json.dumps([1]).encode(),
    ],
)
def test_damaged_cache_entry_is_recomputed_with_a_warning(tmp_path, monkeypatch, damage):
    spec = exs.RunSpec("breast-cancer", "scalar", 2, 2, 0, 1)
    first = ex.run_sweep([spec], tmp_path, progress=False)[spec]
    path = tmp_path / "runs" / (spec.key() + ".json")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=str(path)):
        RunResult.load(path)
    calls = record_training(monkeypatch)
    with pytest.warns(RuntimeWarning, match="recomputing this run"):
        again = ex.run_sweep([spec], tmp_path, progress=False)[spec]
    assert len(calls) == 1 and again == first
    assert RunResult.load(path) == first  # rewritten


def test_compare_reports_the_lattice_as_unavailable_at_one_bit(capsys):
    assert main(["compare", "--bits", "1", "--trials", "2", "--batch", "2", "--width", "4"]) == 0
    out = capsys.readouterr().out
    assert "hexagonal lattice (C5.2): not available at b = 1" in out
    assert "HexLatticeQuantizer" not in out  # no report, no verdict for it
    assert "ScalarQuantizer" in out and "TopK" in out


# ------------------------------------------------------------------------------ Ctrl-C
def test_sigint_saves_a_resumable_checkpoint_and_exits_130(tmp_path):
    ck = tmp_path / "run.ckpt"
    cmd = [sys.executable, "-m", "cvfl_sim.commands.cli", "train", "breast-cancer"]
    cmd += ["--epochs", "100000", "--Q", "1", "--checkpoint", str(ck)]
    # a shell's background job starts with SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: the child gets the default disposition back, as from a terminal
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while not ck.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert ck.exists(), proc.stderr.read() if proc.poll() is not None else "no checkpoint"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        f"cvfl: interrupted; the state after the last finished epoch is in {str(ck)!r}; "
        "rerun the same command to resume"
    ]
    data = ck.read_bytes()
    assert data[:8] == b"CVFLCKPT"
    assert checkpoint_header(data)["state"]["epoch"] >= 1


@pytest.mark.parametrize(
    "argv", [["train", "breast-cancer", "--Q", "x"], ["nope"], [], ["reproduce"], ["compare", "-z"]]
)
def test_usage_errors_are_one_line_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    line = _one_error_line(capsys)
    assert line.endswith("--help)")


def test_closed_stdout_is_not_an_error():
    # `cvfl compare | head -1`: the reader closes the pipe early; exit 0, nothing on stderr.
    import subprocess
    import sys

    code = "import sys; from cvfl_sim.commands.cli import main; sys.exit(main(['compare', '--trials', '2']))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.stderr is not None
    with proc.stderr:
        err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0
    assert b"Broken pipe" not in err and b"Traceback" not in err
