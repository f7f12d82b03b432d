"""A user's files are hostile bytes (issue 20): sizes and fields are checked before allocating."""

import io
import tracemalloc
import zipfile

import numpy as np
import pytest

from cvfl_sim.vfl.data import load_csv, load_npz
from cvfl_sim.vfl.files import MAX_FIELD_CHARS, read_csv_rows, read_npz, read_records


def _npz_with_member(path, name, payload):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(name, payload)


def _npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def test_a_header_claiming_45_gib_from_192_bytes_allocates_nothing(tmp_path):
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (80000, 75000), }"
    header = header.ljust(117) + "\n"  # magic (6) + version (2) + length (2) + 118 = 128 bytes
    raw = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\0" * 64
    p = tmp_path / "forged.npz"
    _npz_with_member(p, "X.npy", raw)  # 192 bytes claiming 8 * 80000 * 75000 = 44.7 GiB
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"forged\.npz.*'X'.*MAX_ARRAY_BYTES"):
            read_npz(p, ["X"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def test_a_header_disagreeing_with_its_member_is_refused(tmp_path):
    raw = _npy_bytes(np.arange(10.0))
    p = tmp_path / "short.npz"
    _npz_with_member(p, "X.npy", raw[:-16])  # two values short
    with pytest.raises(ValueError, match="claims 80 data bytes .* holds 64"):
        read_npz(p, ["X"])


def test_object_arrays_and_non_archives_are_refused(tmp_path):
    p = tmp_path / "obj.npz"
    np.savez(p, X=np.array([{"a": 1}], dtype=object), y=np.zeros(1))
    with pytest.raises(ValueError, match="not a number type"):
        read_npz(p, ["X"])
    q = tmp_path / "text.npz"
    q.write_text("hello")
    with pytest.raises(ValueError, match="not an .npz archive"):
        load_npz(q)
    r = tmp_path / "ok.npz"
    np.savez(r, X=np.ones((6, 4)), y=np.arange(6) % 2)
    with pytest.raises(ValueError, match=r"has no array\(s\) \['Z'\]"):
        read_npz(r, ["Z"])
    got = read_npz(r, ["X", "y"])
    assert got["X"].shape == (6, 4) and got["y"].tolist() == [0, 1, 0, 1, 0, 1]


def test_compressed_and_fortran_arrays_round_trip(tmp_path):
    p = tmp_path / "c.npz"
    X = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    np.savez_compressed(p, X=X, y=np.array([1, 0, 1], dtype=np.int8))
    got = read_npz(p, ["X", "y"])
    assert np.array_equal(got["X"], X) and got["y"].dtype == np.int8


def test_binary_bytes_are_not_a_csv(tmp_path):
    p = tmp_path / "bin.csv"
    p.write_bytes(bytes(range(256)))
    with pytest.raises(
        ValueError, match=r"bin\.csv.* not a UTF-8 text CSV \(byte 0x80 at offset 128\)"
    ):
        load_csv(p)
    q = tmp_path / "nul.csv"
    q.write_bytes(b"1,2\n3,\x004\n")
    with pytest.raises(ValueError, match="NUL"):
        read_csv_rows(q)


def test_a_50_mb_field_is_refused_with_its_line(tmp_path):
    p = tmp_path / "long.csv"
    with open(p, "w") as fh:
        fh.write("1,2,3\n")
        fh.write('4,"' + "9" * (50 * 10**6) + '",6\n')
    with pytest.raises(
        ValueError, match=rf"long\.csv', line \d+: .*MAX_FIELD_CHARS = {MAX_FIELD_CHARS}"
    ):
        read_csv_rows(p)


def test_records_must_be_whole(tmp_path):
    p = tmp_path / "r.bin"
    p.write_bytes(b"\1" * 3073 * 2 + b"\0")
    with pytest.raises(ValueError, match="not a whole number of 3073-byte records"):
        read_records(p, 3073)
    p.write_bytes(b"\1" * 3073 * 2)
    assert read_records(p, 3073).shape == (2, 3073)
    with pytest.raises(ValueError, match="holds 2 records, expected 3"):
        read_records(p, 3073, expected=3)
