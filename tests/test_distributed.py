"""Algorithm 1 over torch.distributed (gloo, loopback): equivalence, bytes, faults, resume (C1, C6)."""

import time

import pytest
import torch
from _helpers import (
    array_layout,
    assert_same_history,
    checkpoint_header,
    expected_algorithm_bytes,
    max_diff,
    payloads,
    roles_config,
    roles_dataset,
    run_params,
)

from cvfl_sim.vfl.checkpoint import read_checkpoint
from cvfl_sim.vfl.distributed import DistributedRunError, run_from_env
from cvfl_sim.vfl.record import checkpoint_identity
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import ScalarQuantizer

torch.set_num_threads(1)


def distributed(ds, cfg, checkpoint=None, **options):
    return train(
        ds,
        cfg,
        checkpoint=checkpoint,
        backend="distributed",
        backend_options={"timeout": 20, **options},
    )


@pytest.mark.parametrize("M", [2, 4])
def test_distributed_equals_inprocess(M):
    ds, cfg = roles_dataset(M), roles_config()
    dist = distributed(ds, cfg)
    vec = train(ds, cfg)
    roles = train(ds, cfg, backend="roles")
    assert max_diff(run_params(vec), run_params(dist)) <= 1e-6
    assert_same_history(vec.history, dist.history)
    # the same roles in one process or in M + 1 processes: the same arithmetic, exactly
    assert dist.history == roles.history
    assert dist.rounds == roles.rounds
    # each process counted its own sends: the ledger's payload plus the framing, exactly
    q = ScalarQuantizer(3)
    sent = [b["algorithm"] for b in dist.summary["bytes_sent"]]
    assert sent == expected_algorithm_bytes(payloads(dist, q, M, cfg.epochs), q, M)


def test_spawn_start_method_gives_the_same_run():
    # start_method="spawn" (fresh interpreters, no preload) computes what the roles compute
    ds, cfg = roles_dataset(2), roles_config()
    dist = distributed(ds, cfg, start_method="spawn")
    roles = train(ds, cfg, backend="roles")
    assert dist.history == roles.history
    assert dist.rounds == roles.rounds
    with pytest.raises(ValueError, match="start_method must be 'forkserver' or 'spawn'"):
        distributed(ds, cfg, start_method="fork")


def test_killed_party_ends_the_run_with_its_name_and_round():
    ds, cfg = roles_dataset(2), roles_config()
    tick = time.monotonic()
    with pytest.raises(DistributedRunError, match=r"party 2 was killed by signal 9 .* at round 3"):
        distributed(ds, cfg, timeout=10, fault=(2, 3, "kill"))
    assert time.monotonic() - tick < 10


def test_hung_party_ends_the_run_within_the_timeout():
    ds, cfg = roles_dataset(2), roles_config()
    tick = time.monotonic()
    with pytest.raises(DistributedRunError, match=r"party 1 failed at round 2: .*timeout"):
        distributed(ds, cfg, timeout=3, fault=(1, 2, "hang"))
    assert time.monotonic() - tick < 3 + 10  # the timeout, the watchdog's grace, start-up


def test_restart_resumes_from_the_completed_epochs(tmp_path):
    ds, cfg = roles_dataset(2), roles_config(epochs=3)
    ck = tmp_path / "ck.bin"
    with pytest.raises(DistributedRunError, match="party 1 was killed"):
        distributed(ds, cfg, checkpoint=ck, fault=(1, 5, "kill"))  # during epoch 2 (rounds 3-5)
    layout = array_layout(checkpoint_header(ck.read_bytes()))
    state, _ = read_checkpoint(ck, identity=checkpoint_identity(ds, cfg), arrays=layout)
    assert (state["epoch"], state["round"]) == (1, 3)
    resumed = distributed(ds, cfg, checkpoint=ck)
    full = train(ds, cfg)
    assert max_diff(run_params(full), run_params(resumed)) <= 1e-6
    assert_same_history(full.history, resumed.history)


def test_run_from_env_checks_the_torchrun_variables(monkeypatch):
    ds, cfg = roles_dataset(2), roles_config()
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ValueError, match=r"environment variables \['RANK', 'WORLD_SIZE'"):
        run_from_env(ds, cfg)
    env = {"RANK": "0", "WORLD_SIZE": "5", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(
        ValueError, match="WORLD_SIZE must be M \\+ 1 = 3 .* got RANK=0 WORLD_SIZE=5"
    ):
        run_from_env(ds, cfg)


def test_latency_table_sets_measurements_beside_the_c7_model():
    from cvfl_sim.experiments.latency import format_latency_table, latency_table

    ds, cfg = roles_dataset(2), roles_config(epochs=1)
    rows = latency_table(ds, cfg, delays=(0.001,), Qs=(2,))
    assert [(r["Q"], r["delay_ms"], r["rounds"]) for r in rows] == [(2, 0.0, 3), (2, 1.0, 3)]
    for r in rows:  # C7: R (Q t_c + t_comm) per round, a round trip being two hops
        t_c = r["inprocess_s"] / 2
        assert r["model_s"] == pytest.approx(2 * t_c + 2 * r["delay_ms"] / 1000)
        assert r["paper_model_s"] == pytest.approx(2 * 0.010 + 2 * r["delay_ms"] / 1000)
        assert r["measured_s"] > 0 and r["overhead"] == r["measured_s"] / r["inprocess_s"]
    assert format_latency_table(rows).count("\n") == 2
