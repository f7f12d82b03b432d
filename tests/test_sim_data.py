"""Data sets (C0, C8), models, schedules."""

import gzip

import numpy as np
import pytest
import torch
from _helpers import python_stdout, tiny_dataset
from sklearn.datasets import load_breast_cancer, load_digits

from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import (
    VerticalDataset,
    _read_table,
    breast_cancer_arrays,
    digit_views,
    digits_arrays,
    load_csv,
    load_dataset,
    load_npz,
    load_original,
)
from cvfl_sim.vfl.models import CNNEmbedding, GRUEmbedding, build_party_models
from cvfl_sim.vfl.schedules import CompressionSchedule, Constant, InverseSqrt, StepDecay
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import Identity, ScalarQuantizer

torch.set_num_threads(1)


def test_quadrants_reassemble_the_digits():
    ds = load_dataset("digits-quadrants")
    assert ds.feature_dims == [16] * 4 and ds.n_train + ds.n_test == 1797
    q = [np.concatenate([ds.train_parts[m], ds.test_parts[m]]) for m in range(4)]
    y = np.concatenate([ds.y_train, ds.y_test])
    img = np.block(
        [
            [q[0].reshape(-1, 4, 4), q[1].reshape(-1, 4, 4)],
            [q[2].reshape(-1, 4, 4), q[3].reshape(-1, 4, 4)],
        ]
    )
    d = load_digits()
    # the same multiset of (image, label) pairs as scikit-learn's digits, scaled by 1/16
    a = sorted(map(tuple, np.column_stack([img.reshape(-1, 64) * 16, y]).round(6)))
    b = sorted(map(tuple, np.column_stack([d.data, d.target]).astype(float)))
    assert a == b


def test_bundled_files_read_without_scikit_learn_equal_its_loaders():
    pixels, y = digits_arrays()
    d = load_digits()
    assert pixels.dtype == d.data.dtype == np.float64 and y.dtype == d.target.dtype
    assert np.array_equal(pixels, d.data) and np.array_equal(y, d.target)  # bit for bit
    X, t = breast_cancer_arrays()
    c = load_breast_cancer()
    assert X.dtype == c.data.dtype and t.dtype == c.target.dtype
    assert np.array_equal(X, c.data) and np.array_equal(t, c.target)
    assert not pixels.flags.writeable and not X.flags.writeable  # cached, shared: read-only


def test_built_in_sets_do_not_import_scikit_learn_or_torch():
    code = (
        "import sys\n"
        "import cvfl_sim.experiments\n"
        "from cvfl_sim.vfl import data\n"
        "for name in ('digits-quadrants', 'breast-cancer', 'digits-views-4'):\n"
        "    data.load_dataset(name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'torch'}))\n"
    )
    assert python_stdout(code) == "[]"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "no rows"),
        ("3,1,a,b\n1,2,0\n", "must hold 2 rows of 3 finite numbers"),
        ("1,2,0\n1,2\n", "cannot read"),
        ("1,2,0\n1,x,1\n", "cannot read"),
        ("1,nan,0\n1,2,1\n", "finite numbers"),
        ("1,1e999,0\n1,2,1\n", "finite numbers"),
        ("1,2,0\n1,2,2\n", "labels must be integers 0..1"),
        ("1,2,0.5\n1,2,1\n", "labels must be integers 0..1"),
        ("1,2,-1\n1,2,1\n", "labels must be integers 0..1"),
    ],
)
def test_bundled_file_reader_refuses_bad_bytes(tmp_path, text, match):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        _read_table(str(path), 2, 2, 2)
    features, y = _read_table(str(_write(tmp_path / "ok.csv", "h,e\n1,2,0\n3,4,1\n")), 2, 2, 2)
    assert features.tolist() == [[1.0, 2.0], [3.0, 4.0]] and y.tolist() == [0, 1]


@pytest.mark.parametrize("data", [b"not gzip at all", gzip.compress(b"1,2,0\n1,2,1\n")[:-9]])
def test_bundled_file_reader_refuses_a_damaged_gz(tmp_path, data):
    path = tmp_path / "t.csv.gz"
    path.write_bytes(data)
    with pytest.raises(ValueError, match="cannot read the data file"):
        _read_table(str(path), 2, 2, 2)


def _write(path, text):
    path.write_text(text)
    return path


def test_views_are_deterministic_rotations():
    img = load_digits().images[:5] / 16.0
    v = digit_views(img)
    assert v.shape == (5, 12, 8, 8)
    np.testing.assert_allclose(v[:, 0], img, atol=1e-12)  # view 0: no rotation
    np.testing.assert_allclose(v[:, 6], img[:, ::-1, ::-1], atol=1e-12)  # 180°
    assert np.array_equal(v, digit_views(img))
    ds4, ds12 = load_dataset("digits-views", parties=4), load_dataset("digits-views-12")
    assert ds4.feature_dims == [192] * 4 and ds12.feature_dims == [64] * 12
    with pytest.raises(ValueError, match="parties must be 4 or 12"):
        load_dataset("digits-views", parties=5)


def test_breast_cancer_split_and_labels():
    ds = load_dataset("breast-cancer")
    assert ds.feature_dims == [8, 8, 7, 7] and ds.metric == "f1"
    y = np.concatenate([ds.y_train, ds.y_test])
    assert y.sum() == (load_breast_cancer().target == 0).sum() == 212  # malignant = 1
    # standardised with training statistics
    np.testing.assert_allclose(np.concatenate(ds.train_parts, 1).mean(0), 0, atol=1e-12)


def test_from_arrays_split_is_stratified_and_seeded():
    g = np.random.default_rng(1)
    X = g.normal(size=(100, 5))
    y = np.r_[np.zeros(80, int), np.ones(20, int)]
    a = VerticalDataset.from_arrays([X[:, :2], X[:, 2:]], y, test_fraction=0.25, rng=3)
    b = VerticalDataset.from_arrays([X[:, :2], X[:, 2:]], y, test_fraction=0.25, rng=3)
    assert np.array_equal(a.train_parts[0], b.train_parts[0])
    assert a.n_test == 25 and a.y_test.sum() == 5
    # rows stay aligned across parties
    full = np.concatenate(a.train_parts, 1)
    assert all(any(np.array_equal(r, x) for x in X) for r in full[:5])


def test_local_loaders(tmp_path):
    g = np.random.default_rng(0)
    X = g.normal(size=(30, 6, 8))
    y = np.arange(30) % 3
    p = tmp_path / "seq.npz"
    np.savez(p, X=X, y=y)
    ds = load_npz(p, parties=4, split_axis=-1)
    assert ds.feature_dims == [12, 12, 12, 12] and ds.party_shapes == [(6, 2)] * 4
    mimic = load_original("mimic3", p)
    assert mimic.metric == "f1"
    res = train(mimic, CVFLConfig(parties_model="gru", epochs=1, batch_size=8))
    assert len(res.history) == 2
    c = tmp_path / "t.csv"
    c.write_text("a,b,c,label\n" + "\n".join(f"{i},{i * 2},{-i},{i % 2}" for i in range(10)))
    ds2 = load_csv(c, label_column="label", parties=2)
    assert ds2.feature_dims == [2, 1]
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        load_npz(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="no array"):
        load_npz(p, x_key="images")
    with pytest.raises(ValueError, match="unknown original"):
        load_original("imagenet", p)


def test_cnn_and_gru_embeddings_shapes():
    cnn = CNNEmbedding((3, 8, 8), 5)
    assert cnn(torch.zeros(4, 192)).shape == (4, 5)
    gru = GRUEmbedding((6, 2), 7)
    assert gru(torch.zeros(3, 12)).shape == (3, 7)
    with pytest.raises(ValueError, match="party_shapes"):
        build_party_models("cnn", [16], [4], None)


def test_cnn_parties_train_on_views():
    ds = load_dataset("digits-views-4")
    res = train(ds, CVFLConfig(parties_model="cnn", epochs=1, batch_size=256, Q=2))
    assert np.isfinite(res.history[-1]["train_loss"])


def test_step_size_schedules():
    assert Constant(0.1)(100) == 0.1
    assert InverseSqrt(1.0)(3) == pytest.approx(0.5)
    assert [StepDecay(1.0, every=10, gamma=0.5)(t) for t in (0, 9, 10, 25)] == [1, 1, 0.5, 0.25]


def test_schedule_drives_training_and_ledger():
    ds = tiny_dataset(50, (3, 2), y=np.arange(50) % 2, test_fraction=0.2)
    sched = CompressionSchedule([2, 2, 4], lambda b: ScalarQuantizer(b, range="minmax-tensor"))
    res = train(
        ds,
        CVFLConfig(
            Q=3,
            lr=StepDecay(0.2, every=6, gamma=0.5),
            epochs=1,
            batch_size=10,
            compressor=sched,
            embedding_size=4,
        ),
    )
    # t0 = 0, 3, 6, 9: step decays after 6 local iterations
    assert res.rounds["lr"] == [0.2, 0.2, 0.1, 0.1]
    # per round: M (ΣU + bits(C_0)); U = b*10*4 + 64, server (1, 8*2+2=18): b*18 + 64
    expect = [2 * (2 * (b * 40 + 64) + b * 18 + 64) for b in (2, 2, 4, 4)]
    assert res.rounds["bits"] == expect


def test_user_modules_are_not_modified():
    ds = tiny_dataset(40, (3, 2), y=np.arange(40) % 2, test_fraction=0.2)
    parts = [torch.nn.Linear(3, 4), torch.nn.Linear(2, 4)]
    before = [p.weight.detach().clone() for p in parts]
    train(ds, CVFLConfig(parties_model=parts, epochs=2, batch_size=8, compressor=Identity()))
    assert all(torch.equal(b, p.weight) for b, p in zip(before, parts))


def test_schedules_from_cvfl_theory_bounds():
    from cvfl_theory.bounds import bits_schedule, max_step_size, step_sizes

    assert Constant.from_bound(10, 2.0)(0) == pytest.approx(max_step_size(10, 2.0))
    bs = bits_schedule(step_sizes(4, 0.1, 0.5), B=8, P=16, c=1e-3)
    cs = CompressionSchedule.from_bounds(bs, lambda b: ScalarQuantizer(b))
    assert [cs(r).bits for r in range(6)] == [*bs.bits.tolist(), bs.bits[-1], bs.bits[-1]]


def test_grad_norm_tracking_matches_autograd():
    ds = tiny_dataset(30, (3, 2), y=np.arange(30) % 2, test_fraction=0.2)
    res = train(ds, CVFLConfig(epochs=1, batch_size=8, track_grad_norm=True, dtype="float64"))
    parties, server = res.models["parties"], res.models["server"]
    X = [torch.as_tensor(p) for p in ds.train_parts]
    loss = torch.nn.functional.cross_entropy(
        server(torch.cat([p(x) for p, x in zip(parties, X)], 1)), torch.as_tensor(ds.y_train)
    )
    params = [q for n in [*parties, server] for q in n.parameters()]
    g2 = sum(float((gr**2).sum()) for gr in torch.autograd.grad(loss, params))
    assert res.history[-1]["grad_norm_sq"] == pytest.approx(g2, rel=1e-12)
    assert res.history[-1]["train_loss"] == pytest.approx(float(loss.detach()), rel=1e-12)


def test_original_image_loaders(tmp_path):
    g = np.random.default_rng(0)
    y = np.arange(12) % 3
    p = tmp_path / "cifar.npz"
    np.savez(p, X=g.integers(0, 255, size=(12, 32, 32, 3)).astype(np.uint8), y=y)
    c = load_original("cifar10", p)
    assert c.party_shapes == [(3, 16, 16)] * 4 and c.feature_dims == [768] * 4
    q = tmp_path / "mn.npz"
    np.savez(q, X=g.random((12, 12, 8, 8)), y=y)
    m = load_original("modelnet10", q, parties=12)
    assert m.party_shapes == [(1, 8, 8)] * 12
    res = train(m, CVFLConfig(parties_model="cnn", epochs=1, batch_size=4))
    assert len(res.history) == 2


# ---------------------------------------------------------------------------- labels (issue 10)
def _feats(n=12):
    return [np.random.default_rng(0).normal(size=(n, 3))]


@pytest.mark.parametrize(
    ("y", "err", "match"),
    [
        ([0, 2, 4] * 4, ValueError, r"labels 0\.\.K-1.*up to 4 \(missing \[1, 3\]\)"),
        ([0, 1, 10**9] * 4, ValueError, r"3 distinct labels up to 1000000000"),
        ([0.0, 1.5] * 6, ValueError, r"integer class labels; found 1\.5 at sample 1"),
        ([0.0, np.nan] * 6, ValueError, r"integer class labels; found nan at sample 1"),
        ([0.0, 1e30] * 6, ValueError, "integer class labels"),
        ([0, -1] * 6, ValueError, r"labels must be >= 0; found -1 at sample 1"),
        ([3] * 12, ValueError, r"single class \(3\)"),
        ([True, False] * 6, TypeError, "dtype bool"),
        (["a", "b"] * 6, TypeError, "dtype <U1"),
    ],
)
def test_bad_labels_are_refused_naming_y(y, err, match):
    with pytest.raises(err, match=match):
        VerticalDataset.from_arrays(_feats(), np.array(y))


def test_remapped_or_declared_labels_are_accepted():
    y = np.array([0, 2, 4] * 4)
    ds = VerticalDataset.from_arrays(_feats(), np.unique(y, return_inverse=True)[1])
    assert ds.n_classes == 3
    ds5 = VerticalDataset.from_arrays(_feats(), y, n_classes=5)  # declared: absent classes allowed
    assert ds5.n_classes == 5
    assert VerticalDataset.from_arrays(_feats(), np.array([0.0, 1.0] * 6)).n_classes == 2
    with pytest.raises(TypeError, match="n_classes must be an int"):
        VerticalDataset.from_arrays(_feats(), np.array([0, 1] * 6), n_classes=True)
    with pytest.raises(TypeError, match="n_classes must be an int"):
        VerticalDataset.from_arrays(_feats(), np.array([0, 1] * 6), n_classes=2.5)


def test_nonfinite_features_in_a_user_csv_are_refused(tmp_path):
    c = tmp_path / "nan.csv"
    c.write_text(
        "a,b,label\n" + "\n".join(f"{i},{'nan' if i == 3 else i},{i % 2}" for i in range(8))
    )
    with pytest.raises(
        ValueError, match=r"must be finite; found nan at \(sample, feature\) \(3, 0\)"
    ):
        load_csv(c, label_column="label", parties=2)


def test_macro_f1_averages_over_present_or_predicted_classes():
    from cvfl_sim.vfl.evaluate import f1_score

    y = np.array([0, 0, 2, 2, 4])
    assert f1_score(y, y.copy(), 5) == 1.0  # perfect: classes 1 and 3 absent from y and predictions
    # class 0: tp 1, fn 1 -> 2/3; class 2: tp 2, fp 1 -> 4/5; class 4: tp 1 -> 1; class 1: fn... none
    pred = np.array([0, 2, 2, 2, 4])
    assert f1_score(y, pred, 5) == pytest.approx((2 / 3 + 4 / 5 + 1) / 3, abs=1e-15)
    # a class predicted but absent counts (F1 0), one neither present nor predicted does not
    pred = np.array([0, 0, 2, 2, 1])
    assert f1_score(y, pred, 5) == pytest.approx((1 + 1 + 0 + 0) / 4, abs=1e-15)
    # binary: F1 of class 1
    assert f1_score(np.array([1, 0, 1]), np.array([1, 0, 0]), 2) == pytest.approx(2 / 3)
    assert f1_score(np.array([0, 0]), np.array([0, 0]), 2) == 1.0  # no positives, none predicted


def test_perfect_classifier_scores_one_in_training_on_noncontiguous_classes():
    # three well-separated classes declared as 5 (labels 0, 2, 4): the test split lacks 1 and 3
    g = np.random.default_rng(1)
    y = np.repeat([0, 2, 4], 20)
    X = g.normal(scale=0.01, size=(60, 2)) + np.stack([y, -y], axis=1).astype(float)
    ds = VerticalDataset.from_arrays([X[:, :1], X[:, 1:]], y, n_classes=5, metric="f1", rng=0)
    res = train(ds, CVFLConfig(Q=1, lr=0.5, epochs=60, batch_size=16, seed=0))
    last = res.history[-1]
    assert last["test_accuracy"] == 1.0
    assert last["test_f1"] == 1.0


def test_n_classes_none_is_refused_by_name():
    X = np.zeros((4, 2))
    y = np.array([0, 1, 0, 1])
    with pytest.raises(TypeError, match="n_classes must be an int"):
        VerticalDataset([X], [X], y, y, n_classes=None)
