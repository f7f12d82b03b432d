"""A C-VFL run across hosts: the server and each party in its own network namespace (C1, C6).

The roles find each other through ``MASTER_ADDR`` = the server's address on a bridge (not
loopback), started as torchrun starts them (:func:`cvfl_sim.vfl.distributed.role_from_env`). The
run must be the in-process one: the same history and per-round log, exactly (the same roles, the
same arithmetic), and each role must have sent the bytes it sends on loopback. Skipped, with the
reason, where namespaces cannot be made (not root, no ``ip``, a container without the rights).
"""

import json
import textwrap

import pytest
import torch

from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import load_dataset
from cvfl_sim.vfl.namespaces import (
    NamespaceHosts,
    namespaces_unavailable,
    run_roles_on_hosts,
)
from cvfl_sim.vfl.results import RunResult
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import ScalarQuantizer

torch.set_num_threads(1)

WHY_NOT = namespaces_unavailable()
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=f"no namespaces: {WHY_NOT}")

ROLE = """
import json, os, sys, torch
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import load_dataset
from cvfl_sim.vfl.distributed import role_from_env
from cvfl_theory.compressors import ScalarQuantizer
torch.set_num_threads(1)
cfg = CVFLConfig(Q=2, lr=0.05, epochs=1, batch_size=57, embedding_size=4,
                 compressor=ScalarQuantizer(3), error_feedback=True, seed=7)
out = role_from_env(load_dataset("breast-cancer"), cfg, timeout=60)
rank = os.environ["RANK"]
with open(os.path.join(sys.argv[1], f"sent{rank}.json"), "w") as f:
    json.dump(out.bytes_sent, f)
if out.result is not None:  # the server
    out.result.save(os.path.join(sys.argv[1], "server.json"))
"""


def _config() -> CVFLConfig:
    return CVFLConfig(
        Q=2,
        lr=0.05,
        epochs=1,
        batch_size=57,
        embedding_size=4,
        compressor=ScalarQuantizer(3),
        error_feedback=True,
        seed=7,
    )


@needs_namespaces
def test_a_run_across_namespaces_is_the_in_process_run(tmp_path):
    ds = load_dataset("breast-cancer")
    script = tmp_path / "role.py"
    script.write_text(textwrap.dedent(ROLE))
    with NamespaceHosts(ds.n_parties + 1) as hosts:
        assert hosts.address(0) != "127.0.0.1"
        run_roles_on_hosts(hosts, str(script), [str(tmp_path)], timeout=120)
    multi = RunResult.load(tmp_path / "server.json")
    roles = train(ds, _config(), backend="roles")
    assert multi.history == roles.history
    assert multi.rounds == roles.rounds
    loopback = train(ds, _config(), backend="distributed", backend_options={"timeout": 30})
    # every role reports its own sends (the server's result knows only the server's)
    for rank in range(ds.n_parties + 1):
        sent = json.loads((tmp_path / f"sent{rank}.json").read_text())
        assert sent == loopback.summary["bytes_sent"][rank], rank
        assert sent["algorithm"] > 0, rank
    assert multi.summary["bytes_sent"][0] == loopback.summary["bytes_sent"][0]


@needs_namespaces
def test_a_failing_role_is_named_with_its_error_and_the_others_end(tmp_path):
    script = tmp_path / "role.py"
    script.write_text(
        "import os, sys, time\n"
        "if os.environ['RANK'] == '2':\n"
        "    sys.exit('party 2 refuses')\n"
        "time.sleep(60)\n"
    )
    with NamespaceHosts(3) as hosts:
        with pytest.raises(RuntimeError, match=r"role 2 on host 10\.231\.0\.3 exited with 1: "
                           "party 2 refuses"):  # fmt: skip
            run_roles_on_hosts(hosts, str(script), timeout=30)
        names = list(hosts.names)
    import subprocess

    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in left for n in names)  # the namespaces are gone


def test_bad_host_counts_are_refused():
    for n in (0, 201, 2.0, True):
        with pytest.raises(ValueError, match=r"n \(hosts\) must be an integer in \[1, 200\]"):
            NamespaceHosts(n)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next(ln for ln in f if ln.startswith("State:"))
    except (FileNotFoundError, StopIteration):
        return False
    return "Z" not in state.split()[1]


@needs_namespaces
def test_a_process_in_a_namespace_ends_when_its_starter_dies(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    starter = tmp_path / "starter.py"
    starter.write_text(
        "import sys, time\n"
        "from cvfl_sim.vfl.namespaces import NamespaceHosts\n"
        "hosts = NamespaceHosts(1).__enter__()\n"
        "p = hosts.popen(0, [sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(p.pid, hosts.names[0], hosts.bridge, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, str(starter)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid, *names = parent.stdout.readline().split()
    try:
        assert _alive(int(pid))
        parent.send_signal(signal.SIGKILL)  # no cleanup can run
        parent.wait()
        deadline = time.monotonic() + 5
        while _alive(int(pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(int(pid))
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        for ns in names:  # the killed starter could not delete them
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
