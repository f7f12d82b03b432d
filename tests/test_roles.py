"""Algorithm 1 as roles exchanging wire bytes (THEORY C1, C6): the same run as the vectorised train."""

import json
import math

import numpy as np
import pytest
import torch

from cvfl_sim.algorithm import CVFLConfig, build_models, train
from cvfl_sim.data import VerticalDataset
from cvfl_sim.roles import decode, train_roles
from cvfl_sim.transport import FRAME_BYTES, InProcessTransport, PeerError
from cvfl_theory.compressors import ScalarQuantizer

torch.set_num_threads(1)


def tiny(parties, n=60, seed=0):
    g = np.random.default_rng(seed)
    parts = [g.normal(size=(n, 2 + m % 3)) for m in range(parties)]
    y = g.integers(0, 3, size=n)
    y[:3] = np.arange(3)
    return VerticalDataset.from_arrays(parts, y, test_fraction=0.25, rng=seed)


def config(**kw):
    base = dict(
        Q=3,
        lr=0.3,
        epochs=2,
        batch_size=16,
        embedding_size=4,
        compressor=ScalarQuantizer(3),
        error_feedback=True,
        seed=5,
    )
    return CVFLConfig(**{**base, **kw})


def params(res):
    m = res.models
    return [q.detach().clone() for net in [*m["parties"], m["server"]] for q in net.parameters()]


def max_diff(a, b):
    return max(float((p - q).abs().max()) for p, q in zip(a, b))


def assert_same_history(a, b):
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for k in ra:
            if isinstance(ra[k], float):
                # the measured errors are float32 sums taken in another order: rel. 1e-6
                assert rb[k] == pytest.approx(ra[k], rel=1e-6, abs=1e-12), k
            else:
                assert ra[k] == rb[k], k


def wire_bytes(compressor, payload_bits):
    """Length of a to_bytes() message from the documented wire format (base.py table)."""
    cfg = json.dumps({"name": compressor.name, "args": compressor.config()}, sort_keys=True)
    header = 44 + len(cfg) + len("cpu")  # fixed fields, configuration, torch device name
    return header + math.ceil(payload_bits / 8) + 4  # padded payload, CRC-32


def expected_algorithm_bytes(rounds, compressor, M):
    """Per rank: every frame of C1 from the rounds' payload bits plus the documented framing."""
    out = [0] * (M + 1)
    for uploads, server_model in rounds:
        up = [FRAME_BYTES + wire_bytes(compressor, u) for u in uploads]
        model = FRAME_BYTES + wire_bytes(compressor, server_model)
        for m in range(1, M + 1):
            out[m] += up[m - 1]  # the upload C_m(h_m)
            out[0] += sum(up) - up[m - 1] + model  # relayed Φ̂_{-m} and C_0(θ_0) to party m
    return out


def payloads(res, q, M, epochs):
    """(uploads, server model) payload bits of every round, from the compressor's formula."""
    sizes = [16, 16, 13]  # N_train = 45: batches of 16, 16 and 13 per epoch
    theta0 = res.summary["theta0_size"]
    return [([q.payload_bits((b, 4))] * M, q.payload_bits((1, theta0))) for b in sizes * epochs]


@pytest.mark.parametrize("M", [2, 4])
def test_roles_equal_vectorised_train(M):
    # C1: the same algorithm, two executions; the roles draw the same batches and dithers
    ds, cfg = tiny(M), config()
    vec = train(ds, cfg)
    rol = train(ds, cfg, backend="roles")
    assert max_diff(params(vec), params(rol)) <= 1e-6
    parties0, server0 = build_models(ds, cfg)
    init = [q.detach() for net in [*parties0, server0] for q in net.parameters()]
    assert max_diff(params(vec), init) > 1e-2  # the comparison is not vacuous
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
    ds, cfg = tiny(M), config()
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
    ds, cfg = tiny(2), config(epochs=3)
    full = train(ds, cfg)
    ck = tmp_path / "ck.bin"

    class Stop(Exception):
        pass

    def stop(epoch):
        if epoch == 1:
            raise Stop

    with pytest.raises(Stop):
        train(ds, cfg, checkpoint=ck, backend="roles", on_epoch_end=stop)
    ck2 = tmp_path / "ck2.bin"
    ck2.write_bytes(ck.read_bytes())
    resumed_roles = train(ds, cfg, checkpoint=ck, backend="roles")
    resumed_vec = train(ds, cfg, checkpoint=ck2)
    for res in (resumed_roles, resumed_vec):
        assert max_diff(params(full), params(res)) <= 1e-6
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
    ds, cfg = tiny(2), config(epochs=1)
    with pytest.raises(ValueError, match="backend must be one of"):
        train(ds, cfg, backend="mpi")
    with pytest.raises(ValueError, match="probe needs backend='inprocess'"):
        train(ds, cfg, backend="roles", probe=lambda **kw: None)
    with pytest.raises(ValueError, match=r"backend_options \['timeout'\]"):
        train(ds, cfg, backend="roles", backend_options={"timeout": 3})
    with pytest.raises(ValueError, match="delay must be"):
        train(ds, cfg, backend="roles", backend_options={"delay": -1})


def test_cli_train_backend_roles(capsys):
    from cvfl_sim.cli import main

    argv = ["train", "breast-cancer", "--epochs", "1", "--batch-size", "228", "--Q", "2"]
    assert main([*argv, "--compressor", "scalar", "--bits", "3", "--backend", "roles"]) == 0
    roles = capsys.readouterr().out
    assert main([*argv, "--compressor", "scalar", "--bits", "3"]) == 0
    assert roles == capsys.readouterr().out  # the same table, line for line
