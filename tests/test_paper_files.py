"""The paper's data sets from a researcher's files (CIFAR-10 binary, ModelNet10 views, MIMIC-III).

Every loader is run on small synthetic files written here in the exact format, and its output is
compared with what the bytes say (a pixel, a view, a feature at an hour), not with the loader's
own arithmetic; truncated and damaged files must be refused naming the file.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

from cvfl_sim.vfl.data import (
    cifar10_quadrants,
    load_dataset,
    mimic3_mortality,
    modelnet10_views,
)
from cvfl_sim.vfl.paper_files import (
    CIFAR10_RECORD_BYTES,
    MODELNET10_CLASSES,
    read_cifar10_batch,
)
from cvfl_sim.vfl.sources import DataSource

PIL = pytest.importorskip("PIL.Image")


# ------------------------------------------------------------------------------- CIFAR-10
def write_cifar(folder, counts=(6, 5, 7, 4, 3), test=8, seed=0):
    """The six binary batches with random pixels; labels cycle through 0..9."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    records = {}
    for name, n in zip(names, (*counts, test)):
        rec = rng.integers(0, 256, size=(n, CIFAR10_RECORD_BYTES), dtype=np.uint8)
        rec[:, 0] = (np.arange(n) + len(records)) % 10
        rec.tofile(os.path.join(folder, name))
        records[name] = rec
    return records


def test_cifar10_quadrants_match_the_bytes(tmp_path):
    records = write_cifar(tmp_path / "cifar-10-batches-bin")
    ds = load_dataset("cifar10-quadrants", data_dir=tmp_path)  # the parent folder works too
    assert ds.n_parties == 4 and ds.feature_dims == [768] * 4
    assert ds.party_shapes == [(3, 16, 16)] * 4
    assert (ds.n_train, ds.n_test, ds.n_classes, ds.metric) == (25, 8, 10, "accuracy")
    train = np.concatenate([records[f"data_batch_{i}.bin"] for i in range(1, 6)])
    test = records["test_batch.bin"]
    assert np.array_equal(ds.y_train, train[:, 0]) and np.array_equal(ds.y_test, test[:, 0])
    # sample 7 (the second record of batch 2), channel c, row r, column x, as the format says:
    # byte 1 + 1024 c + 32 r + x; quadrant (r // 16, x // 16) -> party 2 (r // 16) + x // 16
    for c, r, x in [(0, 0, 0), (2, 31, 31), (1, 3, 20), (0, 17, 5), (2, 16, 16)]:
        byte = train[7, 1 + 1024 * c + 32 * r + x]
        party = 2 * (r // 16) + x // 16
        pixel = ds.train_parts[party][7].reshape(3, 16, 16)[c, r % 16, x % 16]
        assert pixel == byte / 255.0
    assert (
        ds.test_parts[3][0].reshape(3, 16, 16)[1, 15, 15] == test[0, 1 + 1024 + 32 * 31 + 31] / 255
    )


def test_cifar10_subset_keeps_the_first_images(tmp_path):
    write_cifar(tmp_path)
    full = cifar10_quadrants(tmp_path)
    part = cifar10_quadrants(tmp_path, max_train=10, max_test=3)
    assert (part.n_train, part.n_test) == (10, 3)
    assert np.array_equal(part.train_parts[1], full.train_parts[1][:10])
    with pytest.raises(ValueError, match="max_train"):
        cifar10_quadrants(tmp_path, max_train=0)


def test_cifar10_truncated_and_damaged_batches_are_refused(tmp_path):
    records = write_cifar(tmp_path)
    path = tmp_path / "data_batch_3.bin"
    path.write_bytes(records["data_batch_3.bin"].tobytes()[:-100])
    with pytest.raises(ValueError, match=r"data_batch_3\.bin.*not a whole number of 3073"):
        cifar10_quadrants(tmp_path)
    bad = records["data_batch_3.bin"].copy()
    bad[4, 0] = 11
    bad.tofile(path)
    with pytest.raises(ValueError, match=r"data_batch_3\.bin.*record 4: label byte 11"):
        cifar10_quadrants(tmp_path)
    with pytest.raises(ValueError, match="record 4"):
        read_cifar10_batch(path)
    big = np.zeros((10_001, CIFAR10_RECORD_BYTES), np.uint8)
    big.tofile(path)
    with pytest.raises(ValueError, match="10001 records; a CIFAR-10 batch holds at most 10000"):
        cifar10_quadrants(tmp_path)


def test_cifar10_missing_files_and_the_pickled_version(tmp_path):
    write_cifar(tmp_path)
    os.remove(tmp_path / "test_batch.bin")
    with pytest.raises(FileNotFoundError, match="missing: test_batch.bin"):
        cifar10_quadrants(tmp_path)
    py = tmp_path / "other" / "cifar-10-batches-py"
    py.mkdir(parents=True)
    (py / "data_batch_1").write_bytes(b"\x80\x04not read")
    with pytest.raises(FileNotFoundError, match="pickled python version.*never read"):
        cifar10_quadrants(tmp_path / "other")
    with pytest.raises(FileNotFoundError, match="not a folder"):
        cifar10_quadrants(tmp_path / "nowhere")


# ------------------------------------------------------------------------------- ModelNet10
def grey(path, value, size=8):
    PIL.fromarray(np.full((size, size), value, np.uint8), mode="L").save(path)


def write_modelnet(root, classes, per_split=2, flat=False, size=8):
    """Object ``o`` of class ``k``, view ``v``: a constant image of grey value ``20 k + 10 o + v``."""
    for k, c in enumerate(classes):
        for split in ("train", "test"):
            d = root / c / split
            d.mkdir(parents=True)
            for o in range(per_split):
                obj = f"{c}_{o + 1:04d}"
                for v in range(12):
                    if flat:
                        grey(d / f"{obj}.obj.shaded_v{v + 1:03d}.png", 20 * k + 10 * o + v, size)
                    else:
                        (d / obj).mkdir(exist_ok=True)
                        grey(d / obj / f"view_{v + 1:02d}.png", 20 * k + 10 * o + v, size)


@pytest.mark.parametrize("flat", [False, True])
def test_modelnet_views_are_split_over_parties_in_view_order(tmp_path, flat):
    write_modelnet(tmp_path, ["chair", "sofa"], flat=flat)
    ds = modelnet10_views(tmp_path, parties=4, image_size=8, progress=False)
    assert ds.feature_dims == [3 * 64] * 4 and ds.party_shapes == [(3, 8, 8)] * 4
    assert (ds.n_train, ds.n_test, ds.n_classes) == (4, 4, 2)
    assert ds.y_train.tolist() == [0, 0, 1, 1]  # sorted class folders
    # party p holds views 3p .. 3p + 2 as its channels; object 1 of class 1 = training sample 3
    for p in range(4):
        for ch in range(3):
            v = 3 * p + ch
            img = ds.train_parts[p][3].reshape(3, 8, 8)[ch]
            assert np.all(img == (20 + 10 + v) / 255.0)
    twelve = modelnet10_views(tmp_path, parties=12, image_size=8, progress=False)
    assert twelve.feature_dims == [64] * 12
    assert np.all(twelve.test_parts[11][0] == 11 / 255.0)


def test_modelnet_reads_only_the_ten_classes_and_resizes(tmp_path):
    write_modelnet(tmp_path, [*MODELNET10_CLASSES, "airplane"], per_split=1, size=12)
    ds = modelnet10_views(tmp_path, parties=12, image_size=6, max_per_class=1, progress=False)
    assert ds.n_classes == 10 and ds.info["classes"] == list(MODELNET10_CLASSES)
    assert ds.y_train.tolist() == list(range(10)) and ds.feature_dims == [36] * 12
    assert np.all(ds.train_parts[4][2] == (40 + 4) / 255.0)  # a constant image stays constant


def test_modelnet_damaged_images_and_missing_views_are_refused(tmp_path):
    write_modelnet(tmp_path, ["bed", "desk"])
    view = tmp_path / "desk" / "test" / "desk_0002" / "view_07.png"
    view.write_bytes(view.read_bytes()[:30])
    with pytest.raises(ValueError, match=r"view_07\.png.*not a readable image"):
        modelnet10_views(tmp_path, image_size=8, progress=False)
    view.unlink()
    with pytest.raises(ValueError, match=r"desk_0002.*holds 11 view images"):
        modelnet10_views(tmp_path, image_size=8, progress=False)
    grey(view, 0)
    wide = tmp_path / "bed" / "train" / "bed_0001" / "view_01.png"
    PIL.fromarray(np.zeros((1, 5000), np.uint8), mode="L").save(wide)
    with pytest.raises(ValueError, match=r"5000×1 pixels; sides must be in \[1, 4096\]"):
        modelnet10_views(tmp_path, image_size=8, progress=False)
    with pytest.raises(ValueError, match="parties must be 4 or 12"):
        modelnet10_views(tmp_path, parties=3)


# ------------------------------------------------------------------------------- MIMIC-III
def mimic_arrays(n, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 48, 76)), (np.arange(n) % 3 == 0).astype(np.int64)


def write_long_csv(path, X, y, order):
    header = ["episode", "hour", *[f"f{j}" for j in range(76)], "y"]
    lines = [",".join(header)]
    for e, t in order:
        lines.append(",".join([f"ep{e}", str(t), *map(repr, X[e, t].tolist()), str(y[e])]))
    path.write_text("\n".join(lines) + "\n")


def test_mimic3_npz_gives_four_parties_of_19_features(tmp_path):
    (Xtr, ytr), (Xte, yte) = mimic_arrays(9, 0), mimic_arrays(4, 1)
    np.savez(tmp_path / "train.npz", X=Xtr, y=ytr)
    np.savez(tmp_path / "test.npz", X=Xte, y=yte)
    ds = load_dataset("mimic3-mortality", data_dir=tmp_path)
    assert ds.feature_dims == [48 * 19] * 4 and ds.party_shapes == [(48, 19)] * 4
    assert (ds.n_train, ds.n_test, ds.metric, ds.n_classes) == (9, 4, "f1", 2)
    # party m, hour t, its feature j is feature 19 m + j of the matrix
    for m, t, j in [(0, 0, 0), (1, 47, 3), (3, 20, 18), (2, 5, 0)]:
        assert ds.train_parts[m][6].reshape(48, 19)[t, j] == Xtr[6, t, 19 * m + j]
    assert np.array_equal(ds.y_test, yte)


def test_mimic3_long_csv_in_any_row_order_equals_the_npz(tmp_path):
    (Xtr, ytr), (Xte, yte) = mimic_arrays(3, 2), mimic_arrays(2, 3)
    rng = np.random.default_rng(4)
    first = {}
    for name, X, y in (("train", Xtr, ytr), ("test", Xte, yte)):
        order = [(e, t) for e in range(len(y)) for t in range(48)]
        rng.shuffle(order)
        write_long_csv(tmp_path / f"{name}.csv", X, y, order)
        first[name] = list(dict.fromkeys(e for e, _ in order))  # episodes as they first appear
    ds = mimic3_mortality(tmp_path)
    episodes = first["train"]
    assert sorted(episodes) == [0, 1, 2] and episodes != [0, 1, 2]  # the order is exercised
    assert np.array_equal(ds.train_parts[2], Xtr[episodes][:, :, 38:57].reshape(3, -1))
    assert np.array_equal(ds.y_train, ytr[episodes])
    assert np.array_equal(ds.test_parts[0], Xte[first["test"]][:, :, :19].reshape(2, -1))


def test_mimic3_damaged_files_are_refused(tmp_path):
    X, y = mimic_arrays(2, 5)
    order = [(e, t) for e in range(2) for t in range(48)]
    write_long_csv(tmp_path / "train.csv", X, y, order[:-1])
    write_long_csv(tmp_path / "test.csv", X, y, order)
    with pytest.raises(ValueError, match=r"train\.csv.*95 data rows is not 48 hours"):
        mimic3_mortality(tmp_path)
    write_long_csv(tmp_path / "train.csv", X, y, order[:-1] + [order[0]])
    with pytest.raises(ValueError, match="has hour 0 twice"):
        mimic3_mortality(tmp_path)
    np.savez(tmp_path / "train.npz", X=X[:, :47], y=y)
    np.savez(tmp_path / "test.npz", X=X, y=y + 1)
    with pytest.raises(ValueError, match=r"train\.npz.*shape \(N, 48, 76\).*got \(2, 47, 76\)"):
        mimic3_mortality(tmp_path)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    with pytest.raises(ValueError, match=r"test\.npz.*labels 0 and 1.*found 2"):
        mimic3_mortality(tmp_path)
    # a member whose header claims more bytes than it holds
    with zipfile.ZipFile(tmp_path / "test.npz", "w") as zf:
        zf.writestr("X.npy", _npy_header(X) + X.tobytes()[:100])
        zf.writestr("y.npy", _npy_header(y) + y.tobytes())
    with pytest.raises(ValueError, match="header claims"):
        mimic3_mortality(tmp_path)
    os.remove(tmp_path / "train.csv")
    for f in ("train.npz", "test.npz"):
        os.remove(tmp_path / f)
    with pytest.raises(FileNotFoundError, match="neither train.npz and test.npz nor"):
        mimic3_mortality(tmp_path)


def _npy_header(a):
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(a))
    return buf.getvalue()


# ------------------------------------------------------------------------------- sources
def test_a_source_refuses_options_that_do_not_apply(tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text("a,b,label\n1,2,0\n3,4,1\n")
    assert DataSource(str(csv), parties=2).check().kind == "csv"
    with pytest.raises(ValueError, match="--parties does not apply to digits-quadrants"):
        DataSource("digits-quadrants", parties=3).check()
    with pytest.raises(ValueError, match="needs|read from your own files"):
        DataSource("cifar10-quadrants").check()
    with pytest.raises(ValueError, match="--data-dir is for the paper's data sets"):
        DataSource(str(csv), data_dir=str(tmp_path)).check()
    with pytest.raises(ValueError, match="--label-column applies to a .csv"):
        DataSource("breast-cancer", label_column="y").check()
    with pytest.raises(ValueError, match="--x-key, --y-key and --split-axis apply to a .npz"):
        DataSource(str(csv), x_key="Z").check()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        DataSource(str(tmp_path / "nope.npz")).check()
    with pytest.raises(ValueError, match="a file must end in .csv or .npz"):
        DataSource(str(tmp_path / "data.txt")).check()
    with pytest.raises(ValueError, match="unknown data set 'mnist'.*built-in names"):
        DataSource("mnist").check()
