"""Algorithm 1 over torch.distributed (gloo, loopback) beside the C7 time model: a small Table 5.

For ``Q = 1, 10, 25`` and a per-message delay of 0, 1, 10, 50, 200 ms (one hop; a round is an
upload then a broadcast, so its round trip is twice the delay), one distributed run of
breast-cancer (4 parties, 3-bit hexagonal lattice on every message, as in C7) per cell: the
measured seconds per round at the server, the C7 model ``Q t_c + t_comm`` with the compute time
``t_c`` per local iteration measured in process, the paper's model with ``t_c = 10 ms``, and the
distributed round time ÷ the in-process (vectorised) round time. The ``delay 0`` rows are the
distributed overhead per round.

Then the same run across hosts: the server and each party in its own network namespace
(:mod:`cvfl_sim.vfl.namespaces`, veth links to a bridge, ``MASTER_ADDR`` the server's address),
beside the loopback run and the roles in one process: the median seconds per round at the server,
and the overhead per round over the loopback run. Where namespaces cannot be made (not root), the
reason is printed instead. Measurements only: nothing is asserted.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

import torch

from cvfl_sim.experiments.latency import format_latency_table, latency_table
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import load_dataset
from cvfl_sim.vfl.namespaces import NamespaceHosts, namespaces_unavailable, run_roles_on_hosts
from cvfl_sim.vfl.results import RunResult
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import HexLatticeQuantizer


def main() -> int:
    torch.set_num_threads(1)
    ds = load_dataset("breast-cancer")
    cfg = CVFLConfig(
        lr=0.05, epochs=1, batch_size=57, embedding_size=8, compressor=HexLatticeQuantizer(3)
    )
    rows = latency_table(ds, cfg)
    print(f"{ds!r}; {rows[0]['rounds']} rounds per run")
    print(format_latency_table(rows))
    print()
    multi_host()
    return 0


_ROLE = """
import sys, torch
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import load_dataset
from cvfl_sim.vfl.distributed import run_from_env
from cvfl_theory.compressors import HexLatticeQuantizer
torch.set_num_threads(1)
cfg = CVFLConfig(Q=5, lr=0.05, epochs=2, batch_size=57, embedding_size=8,
                 compressor=HexLatticeQuantizer(3), seed=0)
res = run_from_env(load_dataset("breast-cancer"), cfg)
if res is not None:
    res.save(sys.argv[1])
"""


def multi_host() -> None:
    """Seconds per round: roles in one process, loopback gloo, one namespace per role."""
    why = namespaces_unavailable()
    print("across hosts (one network namespace per role, veth + bridge):")
    if why is not None:
        print(f"  not measured: {why}")
        return
    cfg = CVFLConfig(
        Q=5, lr=0.05, epochs=2, batch_size=57, embedding_size=8,
        compressor=HexLatticeQuantizer(3), seed=0,
    )  # fmt: skip
    data = load_dataset("breast-cancer")
    per_round = {
        "roles, one process": train(data, cfg, backend="roles"),
        "loopback, M + 1 processes": train(data, cfg, backend="distributed"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        script, out = Path(tmp) / "role.py", Path(tmp) / "server.json"
        script.write_text(textwrap.dedent(_ROLE))
        with NamespaceHosts(data.n_parties + 1) as hosts:
            run_roles_on_hosts(hosts, str(script), [str(out)])
        per_round["namespaces, M + 1 hosts"] = RunResult.load(out)
    same = per_round["namespaces, M + 1 hosts"].history == per_round["roles, one process"].history
    median = {k: statistics.median(r.summary["round_seconds"]) for k, r in per_round.items()}
    for name, sec in median.items():
        print(f"  {name:28s} {1e3 * sec:8.2f} ms per round")
    over = median["namespaces, M + 1 hosts"] - median["loopback, M + 1 processes"]
    print(
        f"  overhead of the namespaces over loopback: {1e3 * over:+.2f} ms per round; "
        f"history {'identical to' if same else 'DIFFERENT from'} the in-process run"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
