"""Reading a user's files as hostile bytes: every size and field is checked before it is used.

The readers bound their work before allocating: an ``.npz`` member's array header must agree
with the member's own size in the archive (and stay under :data:`MAX_ARRAY_BYTES`), a CSV must
be text under :data:`MAX_TEXT_BYTES` with fields under :data:`MAX_FIELD_CHARS`, and a binary
record file must be a whole number of records. Every refusal is a ``ValueError`` naming the file
and what is wrong. Nothing is unpickled: ``allow_pickle`` is never set.
"""

from __future__ import annotations

import csv
import io
import math
import os
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "MAX_ARRAY_BYTES",
    "MAX_TEXT_BYTES",
    "MAX_FIELD_CHARS",
    "check_file",
    "read_npz",
    "read_csv_rows",
    "read_records",
    "read_matrix",
]

MAX_ARRAY_BYTES = 8 * 2**30
"""Largest array a reader allocates (8 GiB)."""

MAX_TEXT_BYTES = 2 * 2**30
"""Largest text (CSV) file read (2 GiB)."""

MAX_FIELD_CHARS = 1 << 16
"""Longest CSV field (64 Ki characters): a number never needs more."""

_NUMERIC_KINDS = "biuf"


def check_file(path: str | os.PathLike[str], what: str = "path") -> str:
    """``path`` as a string if it is an existing regular file, else ``FileNotFoundError``."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(
            f"{what} {p!r} is not a file (nothing is downloaded; give a local file)"
        )
    return p


def _npy_header(fh: Any, where: str) -> tuple[np.dtype[Any], tuple[int, ...], bool, int]:
    """``(dtype, shape, fortran_order, header bytes)`` of an ``.npy`` stream, checked."""
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = npy.read_array_header_1_0(fh, max_header_size=10000)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npy.read_array_header_2_0(fh, max_header_size=10000)
        else:
            raise ValueError(f"npy format version {version}")
    except (ValueError, SyntaxError, EOFError) as exc:
        raise ValueError(f"{where}: not a numpy array ({exc})") from None
    if dtype.hasobject or dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(f"{where}: dtype {dtype} is not a number type (no object arrays)")
    return dtype, tuple(int(s) for s in shape), bool(fortran), fh.tell()


def read_npz(path: str | os.PathLike[str], keys: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays ``keys`` of a local ``.npz``, each checked against its member's size first.

    Raises
    ------
    ValueError
        Not a zip archive, a missing key, a member whose header claims more (or fewer) bytes
        than it holds, an object or non-numeric dtype, or an array over
        :data:`MAX_ARRAY_BYTES`; the message names the file.
    """
    p = check_file(path)
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ValueError(f"{p!r} is not an .npz archive ({exc})") from None
    out = {}
    with zf:
        names = {n[:-4] if n.endswith(".npy") else n: n for n in zf.namelist()}
        missing = [k for k in keys if k not in names]
        if missing:
            raise ValueError(f"{p!r} has no array(s) {missing}; it holds {sorted(names)}")
        for k in keys:
            info = zf.getinfo(names[k])
            where = f"{p!r}, array {k!r}"
            with zf.open(info) as fh:
                dtype, shape, fortran, hlen = _npy_header(fh, where)
                nbytes = (
                    int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                    if shape
                    else dtype.itemsize
                )
                if any(s < 0 for s in shape) or nbytes > MAX_ARRAY_BYTES:
                    raise ValueError(
                        f"{where}: shape {shape} of {dtype} is {nbytes} bytes, over "
                        f"MAX_ARRAY_BYTES = {MAX_ARRAY_BYTES}"
                    )
                if info.file_size != hlen + nbytes:
                    raise ValueError(
                        f"{where}: the header claims {nbytes} data bytes for shape {shape}, the "
                        f"member holds {info.file_size - hlen} (damaged or forged)"
                    )
                try:
                    data = fh.read(nbytes)
                except (zipfile.BadZipFile, OSError, EOFError) as exc:
                    raise ValueError(f"{where}: damaged ({exc})") from None
            if len(data) != nbytes:
                raise ValueError(f"{where}: truncated ({len(data)} of {nbytes} bytes)")
            arr = np.frombuffer(data, dtype=dtype)
            out[k] = arr.reshape(shape, order="F" if fortran else "C").copy()
    return out


def read_csv_rows(path: str | os.PathLike[str]) -> list[list[str]]:
    """The rows of a local CSV text file, bounded in size and field length.

    Raises
    ------
    ValueError
        A file over :data:`MAX_TEXT_BYTES`, bytes that are not UTF-8 text (a binary file, say,
        with the offset of the first bad byte), a NUL byte, or a field over
        :data:`MAX_FIELD_CHARS` characters (with its line).
    """
    p = check_file(path)
    size = os.path.getsize(p)
    if size > MAX_TEXT_BYTES:
        raise ValueError(f"{p!r} has {size} bytes, over MAX_TEXT_BYTES = {MAX_TEXT_BYTES}")
    with open(p, "rb") as fh:
        raw = fh.read(MAX_TEXT_BYTES + 1)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{p!r} is not a UTF-8 text CSV (byte {raw[exc.start]:#04x} at offset {exc.start})"
        ) from None
    if "\0" in text:
        raise ValueError(
            f"{p!r} is not a text CSV (it holds NUL bytes at offset {text.index(chr(0))})"
        )
    old = csv.field_size_limit()
    try:
        csv.field_size_limit(MAX_FIELD_CHARS)
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            return list(reader)
        except csv.Error as exc:
            raise ValueError(
                f"{p!r}, line {reader.line_num}: not a CSV row ({exc}; fields are at most "
                f"MAX_FIELD_CHARS = {MAX_FIELD_CHARS} characters)"
            ) from None
    finally:
        csv.field_size_limit(old)


def read_records(
    path: str | os.PathLike[str], record_bytes: int, *, expected: int | None = None
) -> np.ndarray:
    """A binary file of fixed-size records as a ``(records, record_bytes)`` ``uint8`` array.

    Raises
    ------
    ValueError
        A length that is not a whole number of records (truncated or another format), or not
        ``expected`` records when given, or over :data:`MAX_ARRAY_BYTES`.
    """
    p = check_file(path)
    size = os.path.getsize(p)
    if size > MAX_ARRAY_BYTES:
        raise ValueError(f"{p!r} has {size} bytes, over MAX_ARRAY_BYTES = {MAX_ARRAY_BYTES}")
    if size == 0 or size % record_bytes:
        raise ValueError(
            f"{p!r} has {size} bytes, not a whole number of {record_bytes}-byte records "
            "(truncated or another format)"
        )
    n = size // record_bytes
    if expected is not None and n != expected:
        raise ValueError(f"{p!r} holds {n} records, expected {expected}")
    data = np.fromfile(p, dtype=np.uint8, count=size)
    if data.size != size:
        raise ValueError(f"{p!r} changed while it was read")
    return data.reshape(n, record_bytes)


def read_matrix(path: str | os.PathLike[str], name: str = "X") -> np.ndarray:
    """Read a matrix ``name`` of shape ``(n, d)`` from a ``.npy`` file, refusing anything else clearly.

    The file's kind is told from its first bytes (an ``.npz`` archive, a pickle, text, an empty
    file are each named), the ``.npy`` header is checked against the file's size before the array
    is read (and must stay under :data:`MAX_ARRAY_BYTES`), and pickled object arrays are never
    loaded (``allow_pickle=False``).

    Raises
    ------
    ValueError
        Naming the file and what is wrong with it.
    """
    fmt = np.lib.format
    path = os.fspath(path)
    what = f"{path!r}"
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(len(fmt.MAGIC_PREFIX))
            header: Any = None
            if head == fmt.MAGIC_PREFIX:
                fh.seek(0)
                try:
                    version = fmt.read_magic(fh)
                    read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
                    header = read[version](fh) if version in read else version
                except ValueError as exc:
                    header = exc
            data_bytes = size - fh.tell()
    except OSError as exc:
        raise ValueError(f"cannot read {what}: {exc.strerror or exc}") from None
    if head != fmt.MAGIC_PREFIX:
        if not head:
            kind = "is empty (0 bytes)"
        elif head[:4] == b"PK\x03\x04":
            kind = f"is an .npz archive; save the one array {name} with numpy.save(path, {name})"
        elif head[:1] == b"\x80":
            kind = "is a Python pickle; it is not loaded, since unpickling can run code"
        else:
            kind = f"is not a .npy file (it starts with {head!r})"
        raise ValueError(f"{what} {kind}")
    if isinstance(header, ValueError):
        raise ValueError(f"{what} has a damaged .npy header ({header})")
    if not isinstance(header, tuple) or len(header) != 3:
        raise ValueError(f"{what} is a .npy file of version {header}; need 1.0 or 2.0")
    shape, _, dtype = header
    if dtype.hasobject:
        raise ValueError(
            f"{what} holds an object array (Python objects stored as a pickle); it is not "
            "loaded, since unpickling can run code; save a numeric array"
        )
    if dtype.kind not in "fiu":
        raise ValueError(
            f"{what} holds dtype {dtype}; {name} must hold real numbers (float or int)"
        )
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"{what}: {name} must be a non-empty 2-D array (n, d), got shape {shape}")
    if math.prod(shape) * dtype.itemsize > MAX_ARRAY_BYTES:
        raise ValueError(
            f"{what}: {shape} of {dtype} is over MAX_ARRAY_BYTES = {MAX_ARRAY_BYTES} bytes"
        )
    if math.prod(shape) * dtype.itemsize != data_bytes:
        raise ValueError(
            f"{what}: the header promises {shape} {dtype} but the file holds {data_bytes} data "
            "bytes (truncated or damaged)"
        )
    arr = np.load(path, allow_pickle=False)
    if arr.shape != tuple(shape):
        raise ValueError(f"{what} changed while it was read")
    return np.asarray(arr)
