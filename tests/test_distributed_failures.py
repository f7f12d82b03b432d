"""A distributed run that fails says why and leaves nothing behind (issue 20, the launcher).

Each case is one class of failure: bad options and fault hooks refused before any process starts;
a configuration that cannot travel to the role processes; a main module the roles cannot import
(standard input) or that starts the run at its top level (no ``__main__`` guard); a garbage
checkpoint; a role that fails inside the run (its exception type, message and last frame reach
the user with the role and the round); and the launcher killed by SIGTERM or SIGKILL, whose role
processes must end within 5 s.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from _helpers import ROOT, roles_config, roles_dataset

from cvfl_sim.vfl.distributed import DistributedRunError
from cvfl_sim.vfl.train import train

torch.set_num_threads(1)


def distributed(ds, cfg, checkpoint=None, **options):
    return train(
        ds,
        cfg,
        checkpoint=checkpoint,
        backend="distributed",
        backend_options={"timeout": 20, **options},
    )


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"timeout": 0.001}, ValueError, r"timeout must be a number of seconds in \[1, 86400\]"),
        ({"timeout": True}, TypeError, "timeout must be a number"),
        ({"timeout": float("nan")}, ValueError, "timeout"),
        ({"delay": -1}, ValueError, r"delay must be a number of seconds in \[0, 20\)"),
        ({"delay": float("nan")}, ValueError, "delay"),
        ({"delay": 30}, ValueError, "delay"),
        ({"fault": (1, 2)}, TypeError, r"fault must be a tuple \(rank, round"),
        ({"fault": (7, 1, "kill")}, ValueError, r"fault rank must be an integer in \[0, 2\]"),
        ({"fault": (1, 10**6, "kill")}, ValueError, "fault round must be an integer in"),
        ({"fault": (1, 1, "explode")}, ValueError, "fault kind"),
    ],
)
def test_bad_options_are_refused_before_any_process(options, error, match):
    ds, cfg = roles_dataset(2), roles_config()
    tick = time.monotonic()
    with pytest.raises(error, match=match):
        distributed(ds, cfg, **options)
    assert time.monotonic() - tick < 2  # no process was started


def test_a_schedule_that_cannot_travel_is_refused_with_the_fix():
    import dataclasses

    ds, cfg = roles_dataset(2), roles_config()
    with pytest.raises(ValueError, match="use a picklable schedule from cvfl_sim.vfl.schedules"):
        distributed(ds, dataclasses.replace(cfg, lr=lambda t: 0.05))


def test_a_garbage_checkpoint_is_refused_naming_the_file(tmp_path):
    ds, cfg = roles_dataset(2), roles_config()
    ck = tmp_path / "ck.bin"
    ck.write_bytes(b"CVFLCKPT" + os.urandom(200))
    with pytest.raises(ValueError, match=str(ck)):
        distributed(ds, cfg, checkpoint=ck)


def test_a_role_failing_inside_the_run_reaches_the_user_with_its_cause():
    import dataclasses

    ds, cfg = roles_dataset(2), roles_config()
    with pytest.raises(DistributedRunError) as info:
        distributed(ds, dataclasses.replace(cfg, lr=1e8))  # diverges in the first rounds
    msg = str(info.value)
    assert "failed at round" in msg and "FloatingPointError" in msg and "training diverged" in msg
    assert " (at " in msg and ".py:" in msg  # the last frame


_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from _helpers import roles_config, roles_dataset
from cvfl_sim import train
train(roles_dataset(2), roles_config(), backend="distributed",
      backend_options={{"timeout": 20}})
print("finished")
"""


def _run_script(tmp_path, how, timeout=120):
    code = _SCRIPT.format(tests=str(ROOT / "tests"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if how == "stdin":
        return subprocess.run(
            [sys.executable, "-"], input=code, capture_output=True, text=True, env=env,
            timeout=timeout, cwd=tmp_path,
        )  # fmt: skip
    path = tmp_path / "unguarded.py"
    path.write_text(code)
    return subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_a_main_read_from_standard_input_is_refused(tmp_path):
    res = _run_script(tmp_path, "stdin")
    assert res.returncode != 0
    assert "cannot be imported: save it to a file" in res.stderr
    assert "finished" not in res.stdout


def test_an_unguarded_main_script_is_named_as_the_cause(tmp_path):
    res = _run_script(tmp_path, "file")
    assert res.returncode != 0
    assert "DistributedRunError" in res.stderr
    assert 'if __name__ == "__main__":' in res.stderr  # the cause and its fix reach the user


_LAUNCHER = """
import sys
sys.path.insert(0, {tests!r})
from _helpers import roles_config, roles_dataset
from cvfl_sim import train

if __name__ == "__main__":
    train(roles_dataset(2), roles_config(epochs=200), backend="distributed",
          backend_options={{"timeout": 60}})
"""


def _children(pid):
    """Every descendant of ``pid`` (from /proc)."""
    out, frontier = set(), {pid}
    while frontier:
        nxt = set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid in frontier and int(entry) not in out:
                nxt.add(int(entry))
        out |= nxt
        frontier = nxt
    return out


def _alive(pids):
    alive = set()
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.add(p)
        except OSError:
            pass
    return alive


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to list the role processes")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_roles_end_within_5_s_of_the_launchers_death(tmp_path, sig):
    path = tmp_path / "launcher.py"
    path.write_text(_LAUNCHER.format(tests=str(ROOT / "tests")))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(path)], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        descendants: set[int] = set()
        while time.monotonic() < deadline and len(descendants) < 4:  # fork server, 3 roles
            time.sleep(0.2)
            descendants = _children(proc.pid)
        time.sleep(2.0)  # the roles are training (200 epochs: far from done)
        descendants = _children(proc.pid)
        assert len(descendants) >= 4, f"the role processes did not start: {descendants}"
        os.kill(proc.pid, sig)
        proc.wait(timeout=10)
        tick = time.monotonic()
        while _alive(descendants) and time.monotonic() - tick < 5:
            time.sleep(0.1)
        assert not _alive(descendants), f"orphans after {sig.name}: {_alive(descendants)}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in _alive(_children(proc.pid)):
            os.kill(p, signal.SIGKILL)
