"""Algorithm 1 as roles exchanging wire bytes (C1, C6): the same run as the vectorised train."""

import numpy as np
import pytest
import torch
from _helpers import (
    StopTraining,
    assert_same_history,
    expected_algorithm_bytes,
    max_diff,
    model_params,
    payloads,
    roles_config,
    roles_dataset,
    run_params,
    stop_after,
)

from cvfl_sim.vfl.config import build_models
from cvfl_sim.vfl.roles import decode, train_roles
from cvfl_sim.vfl.train import train
from cvfl_sim.vfl.transport import InProcessTransport, PeerError
from cvfl_theory.compressors import ScalarQuantizer

torch.set_num_threads(1)


@pytest.mark.parametrize("M", [2, 4])
def test_roles_equal_vectorised_train(M):
    # C1: the same algorithm, two executions; the roles draw the same batches and dithers
    ds, cfg = roles_dataset(M), roles_config()
    vec = train(ds, cfg)
    rol = train(ds, cfg, backend="roles")
    assert max_diff(run_params(vec), run_params(rol)) <= 1e-6
    parties0, server0 = build_models(ds, cfg)
    init = model_params(parties0, server0)
    assert max_diff(run_params(vec), init) > 1e-2  # the comparison is not vacuous
    assert_same_history(vec.history, rol.history)
    assert rol.rounds["bits"] == vec.rounds["bits"]
    np.testing.assert_allclose(
        rol.rounds["embedding_error_by_party"], vec.rounds["embedding_error_by_party"], rtol=1e-6
    )
    assert rol.rounds["server_model_error"] == vec.rounds["server_model_error"]
    assert {k: v for k, v in rol.summary.items() if k.endswith("bits")} == {
        k: v for k, v in vec.summary.items() if k.endswith("bits")
    }


@pytest.mark.parametrize("M", [2, 4])
def test_bytes_sent_are_ledger_payload_plus_framing(M):
    ds, cfg = roles_dataset(M), roles_config()
    assert ds.n_train == 45
    res = train_roles(ds, cfg)
    q = ScalarQuantizer(3)
    rounds = payloads(res, q, M, cfg.epochs)
    # the C6 ledger counts exactly these payloads ...
    assert res.summary["total_bits"] == sum(M * sum(u) + M * s for u, s in rounds)
    # ... and every process sent them plus the framing, byte for byte
    sent = [b["algorithm"] for b in res.summary["bytes_sent"]]
    assert sent == expected_algorithm_bytes(rounds, q, M)


def test_checkpoints_interchange_between_backends(tmp_path):
    # a roles run interrupted after epoch 1 resumes (with either backend) to the uninterrupted run
    ds, cfg = roles_dataset(2), roles_config(epochs=3)
    full = train(ds, cfg)
    ck = tmp_path / "ck.bin"

    with pytest.raises(StopTraining):
        train(ds, cfg, checkpoint=ck, backend="roles", on_epoch_end=stop_after(1))
    ck2 = tmp_path / "ck2.bin"
    ck2.write_bytes(ck.read_bytes())
    resumed_roles = train(ds, cfg, checkpoint=ck, backend="roles")
    resumed_vec = train(ds, cfg, checkpoint=ck2)
    for res in (resumed_roles, resumed_vec):
        assert max_diff(run_params(full), run_params(res)) <= 1e-6
        assert_same_history(full.history, res.history)


def test_received_bytes_are_checked():
    q = ScalarQuantizer(3)
    msg = q.compress(torch.ones(2, 4), rng=0).to_bytes()
    assert decode(msg, q, (2, 4), torch.float32, 1, 0).shape == (2, 4)
    bad = bytearray(msg)
    bad[60] ^= 0xFF
    with pytest.raises(PeerError, match="party 1 failed at round 7: .*checksum"):
        decode(bytes(bad), q, (2, 4), torch.float32, 1, 7)
    with pytest.raises(PeerError, match="party 2 .*shape"):
        decode(msg, q, (4, 2), torch.float32, 2, 0)
    t = InProcessTransport(3)
    t.send_phase(1, [(0, msg)], "algorithm")
    with pytest.raises(PeerError, match="party 1 .* expected at most 10"):
        t.recv(1, 0, max_bytes=10)
    with pytest.raises(RuntimeError, match="never sent"):
        t.recv(2, 0, max_bytes=10)


def test_bad_backend_arguments():
    ds, cfg = roles_dataset(2), roles_config(epochs=1)
    with pytest.raises(ValueError, match="backend must be one of"):
        train(ds, cfg, backend="mpi")
    with pytest.raises(ValueError, match="probe needs backend='inprocess'"):
        train(ds, cfg, backend="roles", probe=lambda **kw: None)
    with pytest.raises(ValueError, match=r"backend_options \['timeout'\]"):
        train(ds, cfg, backend="roles", backend_options={"timeout": 3})
    with pytest.raises(ValueError, match="delay must be"):
        train(ds, cfg, backend="roles", backend_options={"delay": -1})


def test_cli_train_backend_roles(capsys):
    from cvfl_sim.commands.cli import main

    argv = ["train", "breast-cancer", "--epochs", "1", "--batch-size", "228", "--Q", "2"]
    assert main([*argv, "--compressor", "scalar", "--bits", "3", "--backend", "roles"]) == 0
    roles = capsys.readouterr().out
    assert main([*argv, "--compressor", "scalar", "--bits", "3"]) == 0
    assert roles == capsys.readouterr().out  # the same table, line for line
