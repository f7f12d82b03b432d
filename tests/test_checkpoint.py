"""The pickle-free checkpoint of ``train(..., checkpoint=...)``: exact resume, hostile files refused."""

import dataclasses
import json
import os
import pickle
import struct
import zlib

import numpy as np
import pytest
import torch
from _helpers import (
    StopTraining,
    array_layout,
    checkpoint_header,
    header_length,
    run_params,
    stop_after,
    tiny_dataset,
)

from cvfl_sim.vfl.checkpoint import MAX_HEADER_BYTES, read_checkpoint, write_checkpoint
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import HexLatticeQuantizer

torch.set_num_threads(1)


CFG = CVFLConfig(
    Q=2,
    epochs=3,
    batch_size=4,
    compressor=HexLatticeQuantizer(2, range="minmax-tensor"),
    dtype="float64",
    seed=7,
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A real checkpoint after one of three epochs, and the uninterrupted run."""
    ds = tiny_dataset(12, (4, 6), seed=1, y=np.arange(12) % 3, split_seed=0)
    path = tmp_path_factory.mktemp("ck") / "run.ckpt"
    with pytest.raises(StopTraining):
        train(ds, CFG, checkpoint=path, on_epoch_end=stop_after(1))
    return ds, path, path.read_bytes(), train(ds, CFG)


def test_interrupted_run_resumes_bit_identical(saved, tmp_path):
    ds, _, data, full = saved
    ck = tmp_path / "run.ckpt"
    ck.write_bytes(data)
    seen = []

    def stop_at_2(epoch):
        seen.append(epoch)
        if epoch == 2:
            raise StopTraining

    with pytest.raises(StopTraining):  # a second interruption, from the resumed state
        train(ds, CFG, checkpoint=ck, on_epoch_end=stop_at_2)
    resumed = train(ds, CFG, checkpoint=ck, on_epoch_end=seen.append)
    assert seen == [2, 3]  # each call started where the file said, not from scratch
    assert resumed == full  # history, per-round log, ledger totals
    for a, b in zip(run_params(full), run_params(resumed)):
        assert a.dtype == torch.float64 and torch.equal(a, b)


def test_a_progress_bar_does_not_change_which_run_a_checkpoint_belongs_to(saved, tmp_path, capsys):
    ds, _, data, full = saved
    ck = tmp_path / "run.ckpt"
    ck.write_bytes(data)  # written by a run without a bar
    resumed = train(ds, dataclasses.replace(CFG, progress=True), checkpoint=ck)
    assert resumed.history == full.history
    assert "C-VFL" in capsys.readouterr().err  # the bar was shown, on stderr


def test_file_is_not_a_pickle_and_holds_no_pickle_opcodes(saved):
    data = saved[2]
    assert data[:8] == b"CVFLCKPT"
    header = checkpoint_header(data)  # plain JSON, parsed here independently
    assert header["state"]["epoch"] == 1
    assert {e["dtype"] for e in header["arrays"]} <= {"float64"}
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(data)


def test_write_read_round_trip_of_every_dtype_and_exact_floats(tmp_path):
    g = np.random.default_rng(3)
    arrays = {
        "f16": g.normal(size=(2, 3)).astype(np.float16),
        "f32": g.normal(size=(5,)).astype(np.float32),
        "f64": np.array([0.1 + 0.2, 5e-324, -0.0, np.inf, np.nan]),
        "i64": np.array([[-(2**63), 2**63 - 1]]),
        "i32": np.arange(6, dtype=np.int32).reshape(3, 2)[::-1],  # a strided view
        "u8": np.array([0, 255], dtype=np.uint8),
        "b": np.array([True, False]),
        "empty": np.zeros((0, 4)),
        "t": torch.arange(4, dtype=torch.int16).reshape(2, 2).t(),  # a torch view
    }
    state = {"big": 2**128 + 1, "x": 0.1 + 0.2, "tiny": 5e-324, "nested": {"a": [1, [2.5]]}}
    path = tmp_path / "x.ckpt"
    write_checkpoint(path, identity="id", state=state, arrays=arrays)
    layout = {k: (str(v.dtype).removeprefix("torch."), tuple(v.shape)) for k, v in arrays.items()}
    st, out = read_checkpoint(path, identity="id", arrays=layout)
    assert st == state
    for k, v in arrays.items():
        v = v.numpy() if isinstance(v, torch.Tensor) else v
        assert out[k].dtype == v.dtype and out[k].shape == v.shape
        assert out[k].tobytes() == np.ascontiguousarray(v).tobytes()
        assert out[k].flags.writeable


def test_refuses_other_dtypes(tmp_path):
    with pytest.raises(ValueError, match="dtype"):
        write_checkpoint(tmp_path / "x", identity="", state={}, arrays={"a": np.array(["s"])})
    with pytest.raises(ValueError, match="dtype"):
        write_checkpoint(
            tmp_path / "x", identity="", state={}, arrays={"a": np.zeros(2, dtype=complex)}
        )


class _Armed:
    """Unpickling this runs ``os.mkdir(marker)``: the payload of a malicious checkpoint."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.mark.parametrize("kind", ["pickle", "torch.save"])
def test_crafted_code_running_file_is_refused_and_never_runs(saved, tmp_path, kind):
    ds = saved[0]

    def craft(marker):
        if kind == "pickle":
            return pickle.dumps({"identity": "x", "evil": _Armed(marker)})
        path = tmp_path / "tmp.pt"
        torch.save({"evil": _Armed(marker)}, path)
        return path.read_bytes()

    # the payload is armed: unpickling it does run code
    control = tmp_path / "control-marker"
    if kind == "pickle":
        pickle.loads(craft(control))
    else:
        (tmp_path / "control.pt").write_bytes(craft(control))
        torch.load(tmp_path / "control.pt", weights_only=False)
    assert control.exists()

    marker = tmp_path / "marker"
    ck = tmp_path / "evil.ckpt"
    ck.write_bytes(craft(marker))
    with pytest.raises(ValueError, match="not a cvfl checkpoint") as info:
        train(ds, CFG, checkpoint=ck)
    assert str(ck) in str(info.value)
    assert ("pickle" if kind == "pickle" else "zip archive") in str(info.value)
    assert not marker.exists()


def _layout(saved):
    header = checkpoint_header(saved[2])
    return header, array_layout(header)


def _expect_refused(path, saved, *words):
    header, layout = _layout(saved)
    with pytest.raises(ValueError) as info:
        read_checkpoint(path, identity=header["identity"], arrays=layout)
    msg = str(info.value)
    assert str(path) in msg and "\n" not in msg
    assert any(w in msg for w in words), msg


def test_truncated_files_are_refused(saved, tmp_path):
    data = saved[2]
    hlen = header_length(data)
    path = tmp_path / "t.ckpt"
    for n in [0, 3, 8, 19, 20, 21, 20 + hlen // 2, 20 + hlen, 20 + hlen + 5, len(data) - 1]:
        path.write_bytes(data[:n])
        _expect_refused(path, saved, "truncated", "CRC", "not a cvfl checkpoint")
    path.write_bytes(data + b"\0")  # extended
    _expect_refused(path, saved, "CRC", "extended")


def test_a_huge_file_is_refused_before_it_is_read(saved, tmp_path):
    """A 5 GiB file (sparse: no disk used) with a valid prefix: refused from its size alone."""
    import tracemalloc

    data = saved[2]
    path = tmp_path / "huge.ckpt"
    with open(path, "wb") as fh:
        fh.write(data)
        fh.truncate(5 * 2**30)
    tracemalloc.start()
    try:
        _expect_refused(path, saved, "has exactly")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20  # the reader allocated nothing near the file's claimed size


def test_bit_flips_are_refused(saved, tmp_path):
    data = saved[2]
    g = np.random.default_rng(0)
    positions = list(range(24)) + sorted(g.choice(len(data), size=150, replace=False).tolist())
    path = tmp_path / "f.ckpt"
    for pos in positions:
        flipped = bytearray(data)
        flipped[pos] ^= 1 << int(g.integers(8))
        path.write_bytes(bytes(flipped))
        _expect_refused(
            path, saved, "CRC", "version", "header length", "not a cvfl checkpoint", "truncated"
        )


def test_wrong_identity_is_refused_before_loading(saved, tmp_path):
    ds, _, data, _ = saved
    ck = tmp_path / "c.ckpt"
    ck.write_bytes(data)
    with pytest.raises(ValueError, match="another data set or configuration"):
        train(ds, CVFLConfig(Q=3, epochs=3, batch_size=4, dtype="float64"), checkpoint=ck)


def _forge(path, header, data=b"", *, header_len=None, version=1):
    """A file with a *valid* CRC, built here without the module's writer."""
    hb = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(hb) if header_len is None else header_len
    body = struct.pack("<8sIQ", b"CVFLCKPT", version, n) + hb + data
    path.write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    return path


def test_oversized_header_length_is_refused_before_allocating(saved, tmp_path):
    p = tmp_path / "h.ckpt"
    for n in [2**64 - 1, MAX_HEADER_BYTES + 1]:
        _forge(p, b"{}", header_len=n)
        _expect_refused(p, saved, "MAX_HEADER_BYTES")
    _forge(p, b"{}", header_len=1000)  # within the bound, beyond the file
    _expect_refused(p, saved, "truncated")
    _forge(p, b"{}", version=2)
    _expect_refused(p, saved, "version 2")


def test_forged_headers_with_valid_crc_are_refused(saved, tmp_path):
    header, layout = _layout(saved)
    name, (dtype, shape) = next(iter(layout.items()))
    nbytes = int(np.prod(shape)) * 8
    p = tmp_path / "x.ckpt"

    def variant(**arrays_entry):
        e = {"name": name, "dtype": dtype, "shape": list(shape), "offset": 0, "nbytes": nbytes}
        e.update(arrays_entry)
        return {**header, "arrays": [e]}

    cases = [
        (b"[" * 100_000, "JSON"),  # nesting bomb
        (b"\xff\xfe", "JSON"),
        (json.dumps({**header, "format": "pickle"}).encode(), "format"),
        (json.dumps([1, 2]).encode(), "format"),
        (json.dumps({**header, "state": []}).encode(), "state"),
        (json.dumps(variant(dtype="object")).encode(), "dtype"),
        (json.dumps(variant(shape=[2**40, 2**40])).encode(), "expected"),
        (json.dumps(variant(shape=[-1])).encode(), "shape"),
        (json.dumps(variant(name="evil")).encode(), "unexpected array"),
        (json.dumps(variant(offset=8)).encode(), "offset"),
        (json.dumps(variant(nbytes=2**62)).encode(), "offset"),
    ]
    total = _total_bytes(header)
    for hb, word in cases:  # the file has this run's length: the header's checks decide
        _forge(p, hb, b"\0" * total)
        _expect_refused(p, saved, word)
    _forge(p, json.dumps(header).encode(), b"\0" * total + b"\0")  # one data byte too many
    _expect_refused(p, saved, "has exactly")
    _forge(p, json.dumps({**header, "arrays": header["arrays"][1:]}).encode(), b"\0" * total)
    _expect_refused(p, saved, "offset", "missing")


def _total_bytes(header):
    return sum(e["nbytes"] for e in header["arrays"])


@pytest.mark.parametrize(
    "change",
    [
        {"epoch": "one"},
        {"batch_gen": {"bit_generator": "MT19937", "state": 5}},
        {"comp_gens": []},
        {"log": {"bits": 3}},
        {"history": [1, 2]},
        {"ledger": [[1, 2]]},
    ],
)
def test_malformed_training_state_with_valid_crc_is_a_value_error(saved, tmp_path, change):
    ds, _, data, _ = saved
    header, _ = _layout(saved)
    header = {**header, "state": {**header["state"], **change}}
    ck = _forge(
        tmp_path / "m.ckpt", json.dumps(header).encode(), data[-4 - _total_bytes(header) : -4]
    )
    with pytest.raises(ValueError, match="malformed training state"):
        train(ds, CFG, checkpoint=ck)


def _with_state(saved, tmp_path, **change):
    ds, _, data, _ = saved
    header, _ = _layout(saved)
    header = {**header, "state": {**header["state"], **change}}
    return _forge(
        tmp_path / "s.ckpt", json.dumps(header).encode(), data[-4 - _total_bytes(header) : -4]
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"epoch": 10**6}, "epoch"),
        ({"epoch": -3}, "epoch"),
        ({"epoch": 1.9}, "epoch"),  # never int()-ed
        ({"epoch": "1"}, "epoch"),
        ({"epoch": True}, "epoch"),
        ({"round": -100}, "round"),
        ({"round": 4}, "round"),  # one epoch is 3 rounds here: round 4 does not end an epoch
        ({"history": []}, "history"),
        ({"train_time": float("nan")}, "train_time"),
        ({"err_since": [[1.0, 2.0]] * 5}, "err_since"),
    ],
)
def test_a_state_that_means_nothing_for_this_run_is_refused(saved, tmp_path, change, field):
    """Valid format and CRC, but a field that cannot belong to this run (issue 20)."""
    ds = saved[0]
    ck = _with_state(saved, tmp_path, **change)
    with pytest.raises(ValueError, match=rf"malformed training state .*{field}") as info:
        train(ds, CFG, checkpoint=ck)
    assert str(ck) in str(info.value)


def test_history_rows_must_be_the_evaluations_so_far(saved, tmp_path):
    header, _ = _layout(saved)
    rows = header["state"]["history"]
    ds = saved[0]
    for bad in (
        rows + rows[-1:],
        [rows[0], {**rows[-1], "round": 2}],
        [{**r, "bits": 1.5} for r in rows],
    ):
        with pytest.raises(ValueError, match="history"):
            train(ds, CFG, checkpoint=_with_state(saved, tmp_path, history=bad))


def test_a_checkpoint_holding_nan_weights_is_refused(saved, tmp_path):
    ds, _, data, _ = saved
    header, _ = _layout(saved)
    first = header["arrays"][0]
    body = bytearray(data[-4 - _total_bytes(header) : -4])
    body[first["offset"] : first["offset"] + 8] = np.array([np.nan]).tobytes()
    ck = _forge(tmp_path / "n.ckpt", json.dumps(header).encode(), bytes(body))
    with pytest.raises(ValueError, match="non-finite values"):
        train(ds, CFG, checkpoint=ck)
