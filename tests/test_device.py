"""``CVFLConfig(device=...)``: the simulator's device code path, run on the CPU.

On the CPU the path must give the default run bit for bit (the same lines move the models, the
data, the EF memories and the batch indices). The refusals (bad names, missing CUDA, a backend or
a probe that runs on the CPU only) are checked with torch's CUDA queries patched, so they run
without a GPU; the run on a real GPU is checked where one exists.
"""

import json

import pytest
import torch

from cvfl_sim.bounds.lemma1 import Lemma1Probe
from cvfl_sim.vfl.config import CVFLConfig, resolve_device
from cvfl_sim.vfl.data import load_dataset
from cvfl_sim.vfl.joint_sgd import joint_sgd
from cvfl_sim.vfl.record import checkpoint_identity
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import ScalarQuantizer


@pytest.fixture(scope="module")
def ds():
    return load_dataset("digits-quadrants")


def _config(**kw):
    base = dict(Q=3, epochs=2, compressor=ScalarQuantizer(3), track_grad_norm=True, eval_every=4)
    return CVFLConfig(**{**base, **kw})


@pytest.mark.parametrize("ef", [False, True])
@pytest.mark.parametrize("device", ["cpu", "cpu:0"])
def test_an_explicit_cpu_device_is_the_default_run_bit_for_bit(ds, ef, device):
    a = train(ds, _config(error_feedback=ef))
    b = train(ds, _config(error_feedback=ef, device=device))
    assert json.dumps(a.history) == json.dumps(b.history)
    assert a.rounds == b.rounds
    for p, q in zip(
        a.models["parties"] + [a.models["server"]], b.models["parties"] + [b.models["server"]]
    ):
        for x, y in zip(p.parameters(), q.parameters()):
            assert y.device == torch.device("cpu") and torch.equal(x, y)


def test_joint_sgd_on_an_explicit_cpu_device_is_the_default(ds):
    cfg = dict(epochs=1)
    pa, sa, _ = joint_sgd(ds, CVFLConfig(**cfg))
    pb, sb, _ = joint_sgd(ds, CVFLConfig(**cfg, device="cpu"))
    for x, y in zip(sa.parameters(), sb.parameters()):
        assert torch.equal(x, y)


@pytest.mark.parametrize(
    ("device", "error", "words"),
    [
        (3, TypeError, "device must be a string"),
        (None, TypeError, "device must be a string"),
        ("tpu", ValueError, "device must be 'cpu', 'cuda' or 'cuda:<i>', got 'tpu'"),
        ("mps", ValueError, "got 'mps'"),
        ("meta", ValueError, "got 'meta'"),
        ("cuda:-1", ValueError, "device must be"),
    ],
)
def test_bad_devices_are_refused_naming_the_argument(ds, device, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace("[", r"\[")):
        train(ds, CVFLConfig(device=device, epochs=1))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_a_gpu_is_refused_before_work(ds):
    with pytest.raises(ValueError, match="torch sees no CUDA device"):
        train(ds, CVFLConfig(device="cuda", epochs=1))


@pytest.fixture
def one_fake_gpu(monkeypatch):
    """torch reports one CUDA device (nothing may compute on it: every use must be refused)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_a_cuda_index_beyond_the_devices_is_refused(one_fake_gpu):
    assert resolve_device("cuda") == torch.device("cuda", 0)
    with pytest.raises(ValueError, match=r"index must be in \[0, 0\], got 1"):
        resolve_device("cuda:1")


@pytest.mark.parametrize("backend", ["roles", "distributed"])
def test_the_cpu_backends_refuse_a_gpu_device(ds, one_fake_gpu, backend):
    with pytest.raises(ValueError, match=f"needs backend='inprocess': backend='{backend}'"):
        train(ds, CVFLConfig(device="cuda", epochs=1), backend=backend)


def test_a_probe_refuses_a_gpu_device(ds, one_fake_gpu):
    with pytest.raises(ValueError, match="probe needs device='cpu'"):
        train(ds, CVFLConfig(device="cuda", epochs=1), probe=Lemma1Probe())


def test_the_checkpoint_identity_names_a_gpu_not_the_cpu(ds, one_fake_gpu):
    cpu = checkpoint_identity(ds, CVFLConfig())
    assert checkpoint_identity(ds, CVFLConfig(device="cpu:0")) == cpu
    assert '"device"' not in cpu  # checkpoints written before the option existed still resume
    gpu = checkpoint_identity(ds, CVFLConfig(device="cuda"))
    assert gpu == checkpoint_identity(ds, CVFLConfig(device="cuda:0")) != cpu
    assert '"device": "cuda:0"' in gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gpu_run_sends_the_cpu_runs_messages_at_the_start(ds):
    """On a GPU: the same Θ^0 and the same ledger; the losses agree to float32 arithmetic."""
    cfg = dict(compressor=ScalarQuantizer(3), epochs=1, eval_every=1, track_grad_norm=True)
    a = train(ds, CVFLConfig(**cfg))
    b = train(ds, CVFLConfig(**cfg, device="cuda"))
    assert [r["bits"] for r in a.history] == [r["bits"] for r in b.history]
    assert a.history[0]["train_loss"] == pytest.approx(b.history[0]["train_loss"], rel=1e-5)
    assert all(p.device.type == "cuda" for p in b.models["server"].parameters())
