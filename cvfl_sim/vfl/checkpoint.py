r"""A pickle-free checkpoint file: a JSON header and raw little-endian arrays, checked on read.

:func:`cvfl_sim.train` saves its complete state after every epoch (C1: models, random
generator states, the C6 ledger, the C2 error log, the history) so an interrupted run resumes and
ends exactly as an uninterrupted one. The file never holds pickled objects, so loading it can never
run code, and every field is checked against the file's length and the caller's expectations before
anything is allocated.

Layout (all integers little-endian)::

    magic        8 bytes   b"CVFLCKPT"
    version      u32       1
    header_len   u64       length of the UTF-8 JSON header, <= MAX_HEADER_BYTES
    header       JSON      {"format", "identity", "state", "arrays": [{"name", "dtype",
                           "shape", "offset", "nbytes"}, ...]}
    data         bytes     the arrays, C order, little-endian, back to back from offset 0
    crc32        u32       zlib.crc32 of everything above

Reading checks, in order: magic (a pickle or ``torch.save`` file is named as such and refused),
version, ``header_len`` against :data:`MAX_HEADER_BYTES` and the file length, the CRC, the JSON
(bounded size and nesting), the format tag, the identity, and then the array table against the
arrays the caller expects (names, dtypes from :data:`DTYPES`, shapes, contiguous offsets that
account for every data byte). Any failure is a :class:`ValueError` naming the file and the fault.
"""

from __future__ import annotations

import json
import math
import os
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from cvfl_theory._atomic import atomic_write_bytes

__all__ = [
    "MAGIC",
    "VERSION",
    "MAX_HEADER_BYTES",
    "DTYPES",
    "write_checkpoint",
    "read_checkpoint",
    "array_layout",
]

MAGIC = b"CVFLCKPT"
"""The first 8 bytes of every checkpoint file."""

VERSION = 1
"""The layout version written (and the only one read)."""

MAX_HEADER_BYTES = 64 * 2**20
"""Largest JSON header accepted (64 MiB: the per-round log of ~10^6 rounds)."""

DTYPES = frozenset(
    {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"}
)
"""Array dtypes a checkpoint may hold (names as numpy and torch spell them)."""

_FORMAT = "cvfl-checkpoint"
_PREFIX = struct.Struct("<8sIQ")  # magic, version, header_len
_CRC = struct.Struct("<I")
_MAX_NDIM = 32


def _dtype_name(a: Any) -> str:
    """The allow-listed dtype name of a numpy array or torch tensor (``ValueError`` otherwise)."""
    name = str(a.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"checkpoint arrays must have a dtype in {sorted(DTYPES)}, got {name}")
    return name


def array_layout(arrays: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{name: (dtype name, shape)}`` of the arrays a reader expects (``read_checkpoint(arrays=)``)."""
    return {k: (_dtype_name(v), tuple(v.shape)) for k, v in arrays.items()}


def write_checkpoint(
    path: str | os.PathLike[str],
    *,
    identity: str,
    state: Mapping[str, Any],
    arrays: Mapping[str, Any],
) -> None:
    """Write a checkpoint atomically (temporary file in the same folder, then :func:`os.replace`).

    Parameters
    ----------
    path : path-like
        The checkpoint file.
    identity : str
        What the state belongs to (e.g. the JSON of the configuration and data set); reading
        refuses a file whose identity differs.
    state : mapping
        JSON-able values (numbers, strings, lists, dicts; Python ints of any size, so numpy
        ``PCG64`` states fit). Floats round-trip exactly (shortest ``repr``).
    arrays : mapping of str to numpy.ndarray or torch.Tensor
        Named arrays with a dtype in :data:`DTYPES`.

    Raises
    ------
    ValueError
        An array of another dtype, a state that is not JSON-able, or a header too large.
    """
    table: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    offset = 0
    for name, a in arrays.items():
        dtype = _dtype_name(a)
        arr = a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)
        blob = np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
        table.append(
            {
                "name": str(name),
                "dtype": dtype,
                "shape": [int(s) for s in arr.shape],
                "offset": offset,
                "nbytes": len(blob),
            }
        )
        blobs.append(blob)
        offset += len(blob)
    try:
        header = json.dumps(
            {"format": _FORMAT, "identity": identity, "state": state, "arrays": table},
            sort_keys=True,
        ).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint state must be JSON-able: {exc}") from None
    if len(header) > MAX_HEADER_BYTES:
        raise ValueError(
            f"checkpoint header of {len(header)} bytes exceeds MAX_HEADER_BYTES={MAX_HEADER_BYTES}"
        )
    body = b"".join([_PREFIX.pack(MAGIC, VERSION, len(header)), header, *blobs])
    atomic_write_bytes(path, body + _CRC.pack(zlib.crc32(body)))


def _data_bytes(arrays: Mapping[str, tuple[str, tuple[int, ...]]]) -> int:
    """The data bytes of the arrays a reader expects (refusing a dtype the format does not hold)."""
    total = 0
    for name, (dtype, shape) in arrays.items():
        if dtype not in DTYPES:
            raise ValueError(f"array {name!r}: dtype {dtype!r} is not one of {sorted(DTYPES)}")
        total += math.prod(int(v) for v in shape) * np.dtype(dtype).itemsize
    return total


def _other_identity(header: bytes, identity: str) -> bool:
    """Whether an (unchecked) header parses and names another identity than ``identity``."""
    try:
        parsed = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(parsed, dict) and parsed.get("identity") not in (None, identity)


def _what_it_is(head: bytes) -> str:
    """A short description of a file that does not start with :data:`MAGIC`."""
    if head[:1] == b"\x80":
        return "a Python pickle"
    if head[:4] == b"PK\x03\x04":
        return "a zip archive (torch.save writes these; it holds pickled objects)"
    if len(head) < len(MAGIC):
        return f"only {len(head)} bytes long"
    return f"starts with {head[:8]!r}"


def read_checkpoint(
    path: str | os.PathLike[str],
    *,
    identity: str,
    arrays: Mapping[str, tuple[str, tuple[int, ...]]],
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a checkpoint written by :func:`write_checkpoint`, checking everything first.

    Parameters
    ----------
    path : path-like
        The checkpoint file.
    identity : str
        The identity the file must carry (checked before the state or any array is read).
    arrays : mapping of str to (dtype, shape)
        The arrays the caller expects: the file must hold exactly these names with these dtypes
        and shapes (checked before any array is allocated).

    Returns
    -------
    state : dict
        The JSON state.
    arrays : dict of str to numpy.ndarray
        Writable native-order copies of the arrays.

    Raises
    ------
    ValueError
        Naming the file and what is wrong: not a checkpoint (e.g. a pickle), another version,
        truncated or extended, a failed CRC, a bad header, another identity, or an array table
        that does not match ``arrays``.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "ck.bin")
    >>> write_checkpoint(path, identity="run-1", state={"epoch": 2}, arrays={"w": np.eye(2)})
    >>> state, arr = read_checkpoint(path, identity="run-1", arrays={"w": ("float64", (2, 2))})
    >>> state["epoch"], arr["w"].tolist()
    (2, [[1.0, 0.0], [0.0, 1.0]])
    >>> read_checkpoint(path, identity="run-2", arrays={"w": ("float64", (2, 2))})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: checkpoint '...' belongs to another data set or configuration; ...
    """
    p = os.fspath(path)

    def bad(what: str) -> ValueError:
        return ValueError(f"checkpoint {p!r} is not usable: {what}; remove it or pass another path")

    with open(p, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(_PREFIX.size)
        if head[: len(MAGIC)] != MAGIC:
            raise bad(
                f"not a cvfl checkpoint ({_what_it_is(head)}); it is not loaded, since "
                "unpickling a file can run code"
            )
        if len(head) < _PREFIX.size:
            raise bad(f"truncated ({size} bytes)")
        _, version, header_len = _PREFIX.unpack(head)
        if version != VERSION:
            raise bad(f"layout version {version}, this cvfl reads version {VERSION}")
        room = size - _PREFIX.size - _CRC.size
        if header_len > MAX_HEADER_BYTES:
            raise bad(f"header length {header_len} exceeds MAX_HEADER_BYTES={MAX_HEADER_BYTES}")
        if header_len > room:
            raise bad(
                f"header length {header_len} exceeds the {max(room, 0)} bytes the file has left "
                "(truncated?)"
            )
        expected = _PREFIX.size + header_len + _data_bytes(arrays) + _CRC.size
        if size != expected:
            if _other_identity(fh.read(header_len), identity):  # the likelier story, if true
                raise ValueError(
                    f"checkpoint {p!r} belongs to another data set or configuration; remove it "
                    "or pass another path"
                )
            raise bad(
                f"the file has {size} bytes, and a checkpoint of this run with a {header_len}-byte "
                f"header has exactly {expected} (truncated, extended, or another run's)"
            )
        rest = fh.read(size - _PREFIX.size)  # the expected length, checked above
    if len(rest) != size - _PREFIX.size:
        raise bad("the file changed while it was read")
    body, (crc,) = head + rest[: -_CRC.size], _CRC.unpack(rest[-_CRC.size :])
    if zlib.crc32(body) != crc:
        raise bad("CRC mismatch (the file is damaged or was truncated)")
    try:
        header = json.loads(body[_PREFIX.size : _PREFIX.size + header_len].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise bad(f"the header is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise bad("the header has no cvfl-checkpoint format tag")
    if header.get("identity") != identity:
        raise ValueError(
            f"checkpoint {p!r} belongs to another data set or configuration; remove it or pass "
            "another path"
        )
    state, table = header.get("state"), header.get("arrays")
    if not isinstance(state, dict) or not isinstance(table, list):
        raise bad("the header lacks a 'state' object or an 'arrays' list")
    data = memoryview(body)[_PREFIX.size + header_len :]
    specs: dict[str, tuple[np.dtype[Any], tuple[int, ...], int]] = {}
    offset = 0
    for i, e in enumerate(table):
        if not isinstance(e, dict) or set(e) != {"name", "dtype", "shape", "offset", "nbytes"}:
            raise bad(f"array entry {i} is not a (name, dtype, shape, offset, nbytes) record")
        name, dtype, shape = e["name"], e["dtype"], e["shape"]
        if not isinstance(name, str) or name in specs:
            raise bad(f"array entry {i} has a bad or repeated name {name!r}")
        if name not in arrays:
            raise bad(f"unexpected array {name!r}")
        if dtype not in DTYPES:
            raise bad(f"array {name!r} has dtype {dtype!r}, not one of {sorted(DTYPES)}")
        if (
            not isinstance(shape, list)
            or len(shape) > _MAX_NDIM
            or not all(type(s) is int and s >= 0 for s in shape)
        ):
            raise bad(f"array {name!r} has a bad shape {shape!r}")
        want_dtype, want_shape = arrays[name]
        if (dtype, tuple(shape)) != (want_dtype, tuple(want_shape)):
            raise bad(
                f"array {name!r} is {dtype} {tuple(shape)}, expected {want_dtype} "
                f"{tuple(want_shape)}"
            )
        dt = np.dtype(dtype).newbyteorder("<")
        nbytes = math.prod(shape) * dt.itemsize
        if e["offset"] != offset or e["nbytes"] != nbytes or offset + nbytes > len(data):
            raise bad(f"array {name!r} has offset/nbytes inconsistent with the table or the file")
        specs[name] = (dt, tuple(shape), offset)
        offset += nbytes
    missing = sorted(set(arrays) - set(specs))
    if missing:
        raise bad(f"arrays {missing} are missing")
    if offset != len(data):
        raise bad(f"{len(data) - offset} data bytes are not accounted for by the array table")
    out = {
        name: np.frombuffer(data, dtype=dt, count=math.prod(shape), offset=off)
        .astype(dt.newbyteorder("="), copy=True)
        .reshape(shape)
        for name, (dt, shape, off) in specs.items()
    }
    return state, out
