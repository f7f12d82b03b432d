"""Sweeps on every core and on a cluster (cvfl_sim.experiments.sweep): same results and tables as a serial
run, in spec order whatever the completion order; a SIGKILLed sweep resumes; one progress bar."""

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import cloudpickle
import pytest
import torch
from _helpers import record_training, set_one_epoch

import cvfl_sim.experiments.specs as exs
import cvfl_sim.experiments.sweep as sweep
from cvfl_sim.commands import reproduce
from cvfl_sim.commands._run_args import config_from_args
from cvfl_sim.commands.cli import build_parser, main
from cvfl_sim.experiments.sweep import (
    BACKENDS,
    Executor,
    _longest_first,
    _pool,
    run_specs,
    start_workers,
    worker_pool,
)
from cvfl_sim.vfl.progress import progress_bar
from cvfl_sim.vfl.results import RunResult


@pytest.fixture(scope="module", autouse=True)
def _no_idle_workers():
    """Shut the loky workers down after this module (they would idle for minutes otherwise)."""
    yield
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)


def _reproduce(out, *extra):
    args = ["reproduce", "local-steps", "--quick", "--out", str(out), "--no-progress", *extra]
    assert main(args) == 0


@pytest.fixture(scope="module")
def serial_sweep(tmp_path_factory):
    """The serial sweep (two seeds, one epoch) that the joblib and Dask sweeps must reproduce."""
    out = tmp_path_factory.mktemp("serial")
    with pytest.MonkeyPatch.context() as mp:
        set_one_epoch(mp)
        _reproduce(out, "--seeds", "2")
    return out


@contextmanager
def _pickled_by_value():
    """Let worker processes unpickle this module's functions (they cannot import tests/)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _runs(folder):
    return {
        f: RunResult.load(folder / "runs" / f)
        for f in sorted(os.listdir(folder / "runs"))
        if f.endswith(".json")
    }


def _same_outputs(a, b):
    """Equal run files (RunResult equality ignores wall-clock timings) and identical tables."""
    ra, rb = _runs(a), _runs(b)
    assert len(ra) == 6 and ra.keys() == rb.keys()
    for name in ra:
        assert ra[name] == rb[name], name
    for table in ("table.csv", "table.md"):
        assert (a / "local-steps" / table).read_bytes() == (b / "local-steps" / table).read_bytes()


# ------------------------------------------------------------------------------ joblib
def test_parallel_sweep_gives_the_serial_results_and_tables(tmp_path, one_epoch, serial_sweep):
    _reproduce(tmp_path / "jobs2", "--seeds", "2", "--jobs", "2")
    _same_outputs(serial_sweep, tmp_path / "jobs2")


@dataclass(frozen=True)
class _Sleepy:
    """A spec whose run takes ``delay`` seconds."""

    name: str
    delay: float

    def key(self):
        return self.name


def _sleep_then_result(spec):
    time.sleep(spec.delay)
    row = {"epoch": 0, "round": 0, "train_loss": 1.0, "test_accuracy": 0.5, "test_f1": 0.5}
    return RunResult({"name": spec.name}, {"name": "toy"}, [{**row, "bits": 0}])


def test_results_follow_the_specs_not_the_completion_order(tmp_path):
    slow, fast = _Sleepy("slow", 2.0), _Sleepy("fast", 0.0)
    with _pickled_by_value():
        res = run_specs(
            [slow, fast], tmp_path, _sleep_then_result, executor=Executor(jobs=2), progress=False
        )
    # the fast run finished (and was written) first, yet the result keeps the specs' order
    assert (tmp_path / "fast.json").stat().st_mtime_ns < (tmp_path / "slow.json").stat().st_mtime_ns
    assert list(res) == [slow, fast]
    assert [r.config["name"] for r in res.values()] == ["slow", "fast"]


def _heavy_modules():
    """This process's id and the data libraries it has imported (run in a worker)."""
    return os.getpid(), sorted({m.split(".")[0] for m in sys.modules} & {"sklearn", "scipy"})


def test_jobs_2_is_this_process_and_one_worker_fed_the_data(tmp_path, one_epoch, monkeypatch):
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)  # a fresh worker: nothing imported before
    specs = [exs.RunSpec("breast-cancer", "scalar", 2, 2, s, 1) for s in range(2)]
    calls = record_training(monkeypatch)
    res = exs.run_sweep(specs, tmp_path, progress=False, executor=Executor(jobs=2))
    assert [c.seed for c in calls] == [1]  # this process took the last run; the worker the first
    assert list(res) == specs and len(list((tmp_path / "runs").glob("*.json"))) == 2
    with _pickled_by_value():
        pid, heavy = _pool(Executor(jobs=2)).submit(_heavy_modules).result()
    assert pid != os.getpid()
    assert heavy == []  # it trained on the data set built here: no scikit-learn, no scipy


def test_workers_warm_up_by_importing_the_module_asked_for(tmp_path, monkeypatch):
    submitted = []
    real_pool = sweep._pool

    class Recording:  # the pool, recording what is submitted to it
        def __init__(self, pool):
            self.pool = pool

        def submit(self, fn, *args):
            submitted.append((fn.__name__, args[0]))
            return self.pool.submit(fn, *args)

    monkeypatch.setattr(sweep, "_pool", lambda ex_: Recording(real_pool(ex_)))
    specs = [_Sleepy("one", 0.0), _Sleepy("two", 0.0)]
    with _pickled_by_value():
        for warm, module in ((None, __name__), ("cvfl_sim.vfl.train", "cvfl_sim.vfl.train")):
            submitted.clear()
            kw = {"executor": Executor(jobs=2), "progress": False, "force": True, "warm": warm}
            run_specs(specs, tmp_path, _sleep_then_result, **kw)
            assert submitted[0] == ("_ready", module)  # first, before any run
            assert {name for name, _ in submitted[1:]} <= {"_compute"}  # then runs only


def test_run_sweep_workers_warm_up_with_torch(tmp_path, monkeypatch):
    """``run_sweep``'s runs live in a module that does not import torch; its workers warm up with
    one that does (else each worker's first run would pay the import)."""
    code = "import sys, {}; print('torch' in sys.modules)"
    for module, imports_torch in (
        ("cvfl_sim.experiments", "False"),
        ("cvfl_sim.vfl.train", "True"),
    ):
        res = subprocess.run(
            [sys.executable, "-c", code.format(module)], capture_output=True, text=True, check=True
        )
        assert res.stdout.strip() == imports_torch, module
    seen = {}
    monkeypatch.setattr(exs, "run_specs", lambda *a, **k: seen.update(k) or {})
    exs.run_sweep([], tmp_path, progress=False)
    assert seen["warm"] == "cvfl_sim.vfl.train"


def test_longest_runs_first_at_both_ends_of_the_list(tmp_path):
    costs = {"a": 1.0, "b": 5.0, "c": 3.0, "d": 5.0, "e": 2.0}
    specs = [_Sleepy(name, 0.0) for name in costs]
    # by decreasing cost (b and d tie: list order) b, d, c, e, a; the workers take the front,
    # this process the back: b then c then a at the front, d then e at the back
    order = _longest_first(specs, lambda s: costs[s.name])
    assert [s.name for s in order] == ["b", "c", "a", "e", "d"]
    assert _longest_first(specs, None) == specs
    computed = []

    def compute(spec):
        computed.append(spec.name)
        return _sleep_then_result(spec)

    res = run_specs(specs, tmp_path, compute, cost=lambda s: costs[s.name], progress=False)
    assert computed == ["b", "c", "a", "e", "d"]  # serial: the list front to back
    assert list(res) == specs  # the results keep the specs' order


def _alive(pid):
    """Whether process ``pid`` runs (a zombie left to reap counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_started_for_a_command_stop_when_its_sweep_ends(tmp_path):
    executor = Executor(jobs=2)
    start_workers(executor, "json")
    with _pickled_by_value():
        pid, _ = _pool(executor).submit(_heavy_modules).result()  # the same (reusable) pool
        specs = [_Sleepy("one", 0.0), _Sleepy("two", 0.0)]
        run_specs(specs, tmp_path, _sleep_then_result, executor=executor, progress=False)
    deadline = time.monotonic() + 60
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)  # killed after the sweep, not left to exit with the command


class _WritesWhenTornDown:
    def __init__(self, path):
        self.path = path

    def __del__(self, open=open):  # bound now: the builtins may be gone in the teardown
        with open(self.path, "w") as fh:
            fh.write("torn down")


def _exit_handler_writes(path):
    import atexit

    def write():
        with open(path, "w") as fh:
            fh.write("ran")

    atexit.register(write)
    json.cvfl_test_object = _WritesWhenTornDown(path + ".teardown")  # freed in the teardown only
    print("written by a worker, no newline", end="")  # flushed at the quick exit
    return os.getpid()


def test_worker_exit_skips_teardown_but_runs_the_tasks_exit_handlers(tmp_path, capfd):
    path = tmp_path / "handler.txt"
    pool = worker_pool(1)
    with _pickled_by_value():
        pid = pool.submit(_exit_handler_writes, str(path)).result()
    pool.shutdown(wait=True)
    assert not _alive(pid)
    assert path.read_text() == "ran"  # handlers registered after the quick exit's still run
    assert not (tmp_path / "handler.txt.teardown").exists()  # the module teardown was skipped
    assert "written by a worker, no newline" in capfd.readouterr().out


def _fail_on_first(spec):
    if spec.name == "first":
        raise ValueError("run 'first' failed")
    return _sleep_then_result(spec)


def test_a_failed_run_in_a_worker_ends_the_sweep_with_its_error(tmp_path):
    specs = [_Sleepy("first", 0.0), _Sleepy("last", 0.0)]
    with _pickled_by_value():
        with pytest.raises(ValueError, match="run 'first' failed"):
            run_specs(specs, tmp_path, _fail_on_first, executor=Executor(jobs=2), progress=False)
    assert not (tmp_path / "first.json").exists()


_KILLED_SWEEP = """
import json, sys
import cvfl_sim.experiments.specs as exs
from cvfl_sim.experiments.sweep import Executor
specs = [exs.RunSpec(**d) for d in json.loads(sys.argv[2])]
exs.run_sweep(specs, sys.argv[1], progress=False, executor=Executor(jobs=2))
"""


def test_sweep_killed_mid_way_resumes_without_a_corrupted_file(tmp_path, monkeypatch):
    specs = [exs.RunSpec("breast-cancer", "scalar", 2, 2, s, 12) for s in range(8)]
    cmd = [sys.executable, "-c", _KILLED_SWEEP, str(tmp_path)]
    cmd.append(json.dumps([asdict(s) for s in specs]))
    runs = tmp_path / "runs"

    def finished():
        """Run files; a ``.tmp-`` file is a write cut short by the kill, never loaded."""
        if not runs.exists():
            return []
        return sorted(f for f in os.listdir(runs) if f.endswith(".json") and f[0] != ".")

    # its own process group: SIGKILL takes the sweep and its workers down at once
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not finished() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        assert finished(), proc.stderr.read() if proc.poll() is not None else "no run finished"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stderr.close()
    kept = finished()
    assert 0 < len(kept) < len(specs), kept  # killed mid-sweep
    for name in kept:
        RunResult.load(runs / name)  # every file left behind is complete
    calls = record_training(monkeypatch)
    res = exs.run_sweep(specs, tmp_path, progress=False)  # a damaged file would warn (an error)
    done = {s.seed for s in specs if s.key() + ".json" in kept}
    assert sorted(c.seed for c in calls) == sorted(set(range(8)) - done)  # only the missing runs
    assert list(res) == specs and len(finished()) == len(specs)
    for s in specs:
        assert RunResult.load(runs / (s.key() + ".json")) == res[s]


# ------------------------------------------------------------------------------ Dask
def test_dask_backend_on_a_loopback_cluster_gives_the_serial_results(
    tmp_path, one_epoch, serial_sweep
):
    from distributed import LocalCluster

    # workers as threads of this process, reached over TCP on loopback (tasks and results are
    # serialised as on a real cluster; worker processes would take ~15 s to start here)
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:")
        _reproduce(tmp_path / "dask", "--seeds", "2", "--backend", "dask", "--scheduler", address)
    _same_outputs(serial_sweep, tmp_path / "dask")


def test_dask_backend_without_dask_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    args = ["reproduce", "local-steps", "--out", str(tmp_path), "--backend", "dask"]
    assert main([*args, "--scheduler", "tcp://127.0.0.1:8786"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cvfl: error: --backend dask needs dask")
    assert "pip install 'cvfl[cluster]'" in err
    assert not (tmp_path / "runs").exists()  # refused before any work


# ------------------------------------------------------------------------------ options
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"jobs": 0}, "jobs must be >= 1, got 0"),
        ({"threads": 0}, "threads must be >= 1, got 0"),
        ({"backend": "mpi"}, "backend must be one of"),
        ({"backend": "dask"}, "needs a scheduler address"),
        ({"scheduler": "tcp://h:1"}, "needs backend 'dask'"),
    ],
)
def test_executor_refuses_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Executor(**kwargs)


def test_cli_refuses_bad_jobs_and_threads(tmp_path, capsys):
    assert main(["reproduce", "local-steps", "--out", str(tmp_path), "--jobs", "0"]) == 2
    assert "--jobs must be >= 1, got 0" in capsys.readouterr().err
    assert main(["train", "breast-cancer", "--threads", "0"]) == 2
    assert "--threads must be >= 1, got 0" in capsys.readouterr().err
    assert reproduce.BACKEND_NAMES == BACKENDS


# ------------------------------------------------------------------------------ progress
def test_one_bar_for_the_whole_command_counts_only_runs_to_compute(tmp_path, one_epoch, capsys):
    specs = [exs.RunSpec("breast-cancer", "scalar", 2, 2, s, 1) for s in range(3)]
    exs.run_sweep(specs[:1], tmp_path, progress=False)  # finished before: not counted
    bar = progress_bar(progress=True, desc="two sweeps")
    exs.run_sweep(specs[:2], tmp_path, bar=bar)
    exs.run_sweep(specs, tmp_path, bar=bar)  # grows the same bar
    bar.close()
    assert (bar.n, bar.total) == (2, 2)
    capsys.readouterr()
    args = ["reproduce", "local-steps", "--quick", "--seeds", "1", "--out", str(tmp_path)]
    assert main([*args, "--progress"]) == 0  # forced on although stderr is not a terminal
    err = capsys.readouterr().err
    bars = [part for part in err.replace("\r", "\n").splitlines() if "|" in part]
    assert bars and bars[-1].startswith("cvfl reproduce local-steps: 100%|"), err
    assert all(b.startswith("cvfl reproduce local-steps:") and "/3 [" in b for b in bars), err
    assert main(args) == 0  # not a terminal, not forced: no bar
    assert "|" not in capsys.readouterr().err


def test_train_threads_and_progress(capsys):
    before = torch.get_num_threads()
    assert main(["train", "breast-cancer", "--epochs", "1", "--progress", "--threads", "1"]) == 0
    assert torch.get_num_threads() == before  # restored
    err = capsys.readouterr().err
    assert "C-VFL breast-cancer" in err and "8/8" in err  # a bar over the rounds, on stderr
    args = build_parser().parse_args(["bound", "--progress"])
    assert config_from_args(args).progress is True
    args = build_parser().parse_args(["bound"])
    assert config_from_args(args).progress is False
