"""The C6 bit ledger against hand counts, and RunResult save/load."""

import json
import os

import numpy as np
import pytest
import torch
from _helpers import StopTraining, run_params, stop_after, tiny_dataset

from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.ledger import BitLedger, RoundBits, paper_cost_model
from cvfl_sim.vfl.results import RunResult
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import ScalarQuantizer

torch.set_num_threads(1)


def _tiny():
    # 10 samples, test_fraction 0.2 -> 8 training samples; 2 classes
    return tiny_dataset(10, (4, 6), y=np.arange(10) % 2, test_fraction=0.2)


def test_round_bits_downloads():
    rb = RoundBits((10, 20, 30), 5)
    assert rb.downloads == (55, 45, 35)
    assert rb.total == 3 * 60 + 3 * 5


def test_ledger_identity_hand_count():
    ds = _tiny()
    assert ds.n_train == 8
    # P = (3, 5), B = 4 -> 2 rounds per epoch, 2 epochs = 4 rounds.
    # Linear server head: |θ_0| = (3 + 5) * 2 + 2 = 18.
    # Uploads U_1 = 32*4*3 = 384, U_2 = 32*4*5 = 640; server model 32*18 = 576.
    # Downloads: party 1 gets 640 + 576 = 1216, party 2 gets 384 + 576 = 960.
    # Round total = 384 + 640 + 1216 + 960 = 3200; 4 rounds = 12800.
    res = train(ds, CVFLConfig(Q=3, epochs=2, batch_size=4, embedding_size=[3, 5]))
    assert res.summary["theta0_size"] == 18
    assert res.rounds["bits"] == [3200] * 4
    assert res.summary["total_bits"] == 12800
    assert res.summary["upload_bits"] == 4 * 1024
    assert res.summary["server_model_bits"] == 4 * 2 * 576
    assert [r["bits"] for r in res.history] == [0, 6400, 12800]
    # paper model per round: b (2 P B M^2 + |θ_0| M) with P = mean(3, 5) = 4:
    # 32 * (2*4*4*4 + 18*2) = 32 * 164 = 5248
    assert res.history[-1]["bits_paper_model"] == 4 * 5248


def test_ledger_quantizer_hand_count():
    ds = _tiny()
    # ScalarQuantizer(2, "minmax-row"): 2 bits per component + 2 float32 (64 bits) per row.
    # U_1 = 2*4*3 + 4*64 = 280, U_2 = 2*4*5 + 4*64 = 296; server row: 2*18 + 64 = 100.
    # Round = M * (U_1 + U_2) + M * 100 = 2*576 + 200 = 1352.
    q = ScalarQuantizer(2, range="minmax-row")
    res = train(ds, CVFLConfig(Q=1, epochs=1, batch_size=4, embedding_size=[3, 5], compressor=q))
    assert res.rounds["bits"] == [1352, 1352]
    # paper model with b = 2: 2 * 164 = 328 per round
    assert res.summary["paper_model_bits"] == 2 * 328


def test_ledger_partial_last_batch_uses_its_size():
    ds = _tiny()
    # B = 5 over 8 samples: batches of 5 and 3; identity, P = (3, 5), |θ_0| = 18
    res = train(ds, CVFLConfig(epochs=1, batch_size=5, embedding_size=[3, 5]))
    per_round = [2 * 32 * b * 8 + 2 * 576 for b in (5, 3)]
    assert res.rounds["bits"] == per_round


@pytest.mark.parametrize("backend", ["inprocess", "roles"])
def test_ledger_follows_a_schedule_of_new_compressors_each_round(backend):
    ds = _tiny()
    # a new ScalarQuantizer(b_r, "minmax-row") every round (for C_0 too), b_r = 2, 3, 4, 2: a
    # per-round bits cache keyed by the compressors must never take one for another
    # (U_1 + U_2 = 32 b + 512, server row 18 b + 64: round = M (50 b + 576) = 100 b + 1152)
    cfg = CVFLConfig(
        epochs=2,
        batch_size=4,
        embedding_size=[3, 5],
        compressor=lambda r: ScalarQuantizer(2 + r % 3, range="minmax-row"),
    )
    res = train(ds, cfg, backend=backend)
    bits = [2, 3, 4, 2]
    assert res.rounds["bits"] == [100 * b + 1152 for b in bits]
    assert res.summary["paper_model_bits"] == sum(b * 164 for b in bits)  # b (2 P B M^2 + 18 M)


def test_bitledger_cumulative():
    led = BitLedger()
    led.record(RoundBits((1, 2), 3), 10.0)
    led.record(RoundBits((1, 2), 3), 10.0)
    assert led.cumulative() == [12, 24]
    assert led.total == 24
    assert led.total_paper == 20.0


def test_paper_cost_model_formula():
    assert paper_cost_model(32, 8, 64, 4, 330, rounds=2) == 2 * 32 * (2 * 8 * 64 * 16 + 330 * 4)


def test_save_load_roundtrip(tmp_path):
    res = train(_tiny(), CVFLConfig(Q=2, epochs=2, batch_size=4, compressor=ScalarQuantizer(3)))
    path = res.save(tmp_path / "run")
    assert path.endswith(".json")
    assert os.path.exists(tmp_path / "run.csv")
    back = RunResult.load(path)
    assert back == res
    assert back.history == json.loads(json.dumps(res.history))
    assert back.config["compressor"]["class"] == "ScalarQuantizer"
    # no temporary files are left behind
    assert sorted(os.listdir(tmp_path)) == ["run.csv", "run.json"]


def test_load_rejects_other_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{}")
    with pytest.raises(ValueError, match="not a RunResult"):
        RunResult.load(p)


def test_bits_to_target():
    res = RunResult(
        {},
        {"metric": "accuracy"},
        [
            {"round": 0, "bits": 0, "test_accuracy": 0.1, "test_f1": 0.0},
            {"round": 5, "bits": 100, "test_accuracy": 0.6, "test_f1": 0.0},
            {"round": 9, "bits": 200, "test_accuracy": 0.8, "test_f1": 0.0},
        ],
    )
    assert res.bits_to_target(0.5) == 100
    assert res.rounds_to_target(0.7) == 9
    assert res.bits_to_target(0.9) == float("inf")


def test_checkpoint_resume_gives_identical_run(tmp_path):
    ds = _tiny()
    cfg = CVFLConfig(
        Q=2, epochs=3, batch_size=3, compressor=ScalarQuantizer(2), error_feedback=True, seed=4
    )
    full = train(ds, cfg)
    ck = tmp_path / "ck.pt"
    with pytest.raises(StopTraining):
        train(ds, cfg, checkpoint=ck, on_epoch_end=stop_after(1))
    assert ck.exists()
    resumed = train(ds, cfg, checkpoint=ck)
    assert resumed == full
    for a, b in zip(run_params(full), run_params(resumed)):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="another data set or configuration"):
        train(ds, CVFLConfig(Q=3, epochs=3, batch_size=3), checkpoint=ck)
