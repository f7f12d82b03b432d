"""Algorithm 1 (C1): the joint-SGD oracle, staleness, determinism, bad input."""

import copy

import numpy as np
import pytest
import torch
from _helpers import max_diff, model_params, run_params, tiny_dataset
from torch import nn

from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import VerticalDataset, load_dataset
from cvfl_sim.vfl.joint_sgd import joint_sgd
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import Identity, ScalarQuantizer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def quadrants():
    return load_dataset("digits-quadrants")


def test_q1_identity_is_joint_minibatch_sgd(quadrants):
    # C1: identity compressors and Q = 1 reduce C-VFL to mini-batch SGD on the joint model.
    # In float64 the two differ only by summation order (~1e-16 per operation), so after
    # 3 epochs (69 steps) 1e-6 (the bound) is a very loose limit.
    cfg = CVFLConfig(
        Q=1,
        lr=0.3,
        epochs=3,
        batch_size=64,
        compressor=Identity(64),
        server_compressor=Identity(64),
        dtype="float64",
        parties_model="mlp",
        server_model="mlp",
        seed=3,
    )
    res = train(quadrants, cfg)
    jp, js, _ = joint_sgd(quadrants, cfg)
    c = run_params(res)
    j = model_params(jp, js)
    assert max_diff(c, j) <= 1e-6
    # the comparison is not vacuous: the parameters moved far more than the tolerance
    init = model_params(*joint_sgd(quadrants, CVFLConfig(**{**cfg.__dict__, "lr": 1e-300}))[:2])
    assert max_diff(c, init) > 1e-2


def _reference_round(parties, server, xb, yb, Q, lr, fresh_others):
    """Algorithm 1 for one round with identity compressors, written out step by step."""
    parties = [copy.deepcopy(p) for p in parties]
    server = copy.deepcopy(server)
    frozen_server = copy.deepcopy(server)  # C_0(θ_0^{t0}) with C_0 = identity
    with torch.no_grad():
        stale = [p(x) for p, x in zip(parties, xb)]
    M = len(parties)
    for _ in range(Q):
        grads = []
        for m in range(M):
            with torch.no_grad():
                others = [p(x) for p, x in zip(parties, xb)] if fresh_others else stale
            own = parties[m](xb[m])
            z = torch.cat([own if j == m else others[j] for j in range(M)], 1)
            loss = nn.functional.cross_entropy(frozen_server(z), yb)
            grads.append(torch.autograd.grad(loss, list(parties[m].parameters())))
        loss0 = nn.functional.cross_entropy(server(torch.cat(stale, 1)), yb)
        g0 = torch.autograd.grad(loss0, list(server.parameters()))
        with torch.no_grad():
            for m in range(M):
                for p, g in zip(parties[m].parameters(), grads[m]):
                    p -= lr * g
            for p, g in zip(server.parameters(), g0):
                p -= lr * g
    return model_params(parties, server)


def test_local_steps_use_stale_embeddings():
    # One round (batch = whole training set) with Q = 4 local steps.
    ds = tiny_dataset(40, (3, 2))
    cfg = CVFLConfig(
        Q=4,
        lr=0.5,
        epochs=1,
        batch_size=ds.n_train,
        compressor=Identity(64),
        server_compressor=Identity(64),
        dtype="float64",
        seed=1,
        server_model="mlp",
    )
    res = train(ds, cfg)
    init_cfg = CVFLConfig(**{**cfg.__dict__, "lr": 1e-300})
    p0, s0, _ = joint_sgd(ds, init_cfg)  # the same initial modules (lr ~ 0: no movement)
    xb = [torch.as_tensor(p, dtype=torch.float64) for p in ds.train_parts]
    yb = torch.as_tensor(ds.y_train)
    stale = _reference_round(p0, s0, xb, yb, 4, 0.5, fresh_others=False)
    fresh = _reference_round(p0, s0, xb, yb, 4, 0.5, fresh_others=True)
    got = run_params(res)
    # the batch is a permutation of the training set: only the order of summation differs
    assert max_diff(got, stale) <= 1e-10
    # and the test can fail: using fresh embeddings of the other parties gives other parameters
    assert max_diff(got, fresh) > 1e-4


def test_deterministic_under_seed(quadrants):
    cfg = CVFLConfig(Q=3, lr=0.2, epochs=1, compressor=ScalarQuantizer(2), seed=7, eval_every=5)
    a, b = train(quadrants, cfg), train(quadrants, cfg)
    assert a.history == b.history
    assert a.rounds == b.rounds
    assert (
        max_diff(
            run_params(a),
            run_params(b),
        )
        == 0.0
    )
    c = train(quadrants, CVFLConfig(**{**cfg.__dict__, "seed": 8}))
    assert c.history != a.history


def test_error_feedback_with_identity_changes_nothing():
    ds = tiny_dataset(40, (3, 2))
    cfg = CVFLConfig(
        Q=2,
        epochs=2,
        batch_size=10,
        compressor=Identity(64),
        server_compressor=Identity(64),
        dtype="float64",
    )
    a = train(ds, cfg)
    b = train(ds, CVFLConfig(**{**cfg.__dict__, "error_feedback": True}))
    # mem + (h - mem) equals h up to one float64 rounding per entry (|h| ~ 1, eps = 2.2e-16):
    # the squared error summed over <= 40 x 16 entries is below 40 * 16 * (4 eps)^2 < 1e-27.
    for ra, rb in zip(a.history, b.history):
        assert rb["train_loss"] == pytest.approx(ra["train_loss"], rel=1e-9)
        assert (rb["embedding_error"] or 0.0) < 1e-27
        assert ra["bits"] == rb["bits"]


def test_error_feedback_runs_with_quantizer_and_records_error():
    ds = tiny_dataset(40, (3, 2))
    res = train(
        ds,
        CVFLConfig(
            Q=2, epochs=2, batch_size=10, compressor=ScalarQuantizer(2), error_feedback=True
        ),
    )
    errs = [r["embedding_error"] for r in res.history[1:]]
    assert all(e > 0 for e in errs)


@pytest.mark.parametrize("name", ["breast-cancer", "digits-views-12"])
def test_default_config_works_on_builtin_sets(name):
    ds = load_dataset(name)
    res = train(ds, CVFLConfig(Q=10, lr=0.1, epochs=1))
    assert len(res.history) == 2
    assert np.isfinite(res.history[-1]["train_loss"])


def test_compression_error_is_measured(quadrants):
    res = train(quadrants, CVFLConfig(Q=1, epochs=1, compressor=ScalarQuantizer(2)))
    row = res.history[-1]
    assert row["compression_error"] == pytest.approx(
        row["embedding_error"] + row["server_model_error"]
    )
    assert np.mean(res.rounds["embedding_error"]) == pytest.approx(row["embedding_error"])
    ident = train(quadrants, CVFLConfig(Q=1, epochs=1))
    assert ident.history[-1]["compression_error"] == 0.0


def test_round_embedding_error_is_the_sum_of_the_parties(quadrants):
    # C2: a round's logged ||eps^{t0}||_F^2 is the sum of the parties' blocks, exactly (train
    # computes the sum once, for its finiteness check and the log); lossless parties log 0.
    comps = [Identity(), ScalarQuantizer(2), Identity(), ScalarQuantizer(3)]
    res = train(quadrants, CVFLConfig(Q=2, epochs=1, compressor=comps))
    by_party = res.rounds["embedding_error_by_party"]
    assert len(by_party) == len(res.rounds["embedding_error"]) == 23
    for total, parts in zip(res.rounds["embedding_error"], by_party):
        assert total == float(sum(parts))
        assert parts[0] == parts[2] == 0.0 and parts[1] > 0.0 and parts[3] > 0.0


def test_public_names_are_exported():
    import cvfl_sim.vfl.record as record

    for name in ("RunRecord", "resume", "checkpoint_arrays", "checkpoint_identity"):
        assert name in record.__all__ and callable(getattr(record, name))


# ---------------------------------------------------------------------------------- bad input
def _parts():
    g = np.random.default_rng(0)
    return [g.normal(size=(20, 3)), g.normal(size=(20, 2))], np.arange(20) % 2


def test_different_sample_counts_refused():
    parts, y = _parts()
    with pytest.raises(ValueError, match="sample counts"):
        VerticalDataset.from_arrays([parts[0], parts[1][:-1]], y)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_features_refused(bad):
    parts, y = _parts()
    parts[1][3, 1] = bad
    with pytest.raises(ValueError, match=r"parts\[1\] must be finite"):
        VerticalDataset.from_arrays(parts, y)


def test_labels_out_of_range_refused():
    parts, y = _parts()
    with pytest.raises(ValueError, match="labels must be in"):
        VerticalDataset.from_arrays(parts, y, n_classes=1 + 0 * 2)
    ds = VerticalDataset.from_arrays(parts, y)
    ds.y_train = ds.y_train.copy()
    ds.y_train[0] = 5
    with pytest.raises(ValueError, match="y_train labels must be in"):
        train(ds, CVFLConfig(epochs=1))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"Q": 0}, "Q must be"),
        ({"batch_size": 10_000}, "batch_size must be"),
        ({"lr": -1.0}, "lr must be"),
        ({"epochs": 0}, "epochs must be"),
        ({"embedding_size": [4, 4, 4]}, "embedding_size lists 3"),
        ({"compressor": [Identity()] * 3}, "lists 3 compressors"),
        ({"dtype": "float16"}, "dtype must be"),
        ({"server_model": nn.Linear(7, 2)}, "embedding size mismatch"),
        ({"server_model": nn.Linear(16, 5)}, "n_classes=2"),
    ],
)
def test_bad_config_refused_before_training(kwargs, match):
    parts, y = _parts()
    ds = VerticalDataset.from_arrays(parts, y)
    with pytest.raises((ValueError, TypeError), match=match):
        train(ds, CVFLConfig(**{"epochs": 1, "batch_size": 8, **kwargs}))


def test_unknown_dataset_lists_names():
    with pytest.raises(ValueError, match="digits-quadrants"):
        load_dataset("cifar-100")


def test_divergence_is_reported_not_hidden():
    ds = tiny_dataset(40, (3, 2))
    with pytest.raises(FloatingPointError, match="diverged"):
        train(ds, CVFLConfig(Q=5, lr=1e30, epochs=3, batch_size=10, server_model="mlp"))
