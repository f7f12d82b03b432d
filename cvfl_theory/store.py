r"""One file format for every result object that ``save(path)`` / ``load(path)`` keeps.

A result file is JSON: the result's kind, its scalar fields and its arrays as raw little-endian
bytes (base64) with their dtype and shape. No pickle, ever. :func:`read_result` treats the file
as hostile: its size is bounded before it is read, the format, version and kind must be the
expected ones, every array's dtype must be a plain number type and its declared shape must
account for exactly the bytes it carries *before* they are decoded, and non-finite floats are
spelled out (``{"$float": "inf"}``) so that they never collide with strings.

Examples
--------
>>> import numpy as np, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "r.json")
>>> _ = write_result(path, "demo", {"x": float("inf")}, {"a": np.arange(3.0)})
>>> fields, arrays = read_result(path, "demo")
>>> fields["x"], arrays["a"].tolist()
(inf, [0.0, 1.0, 2.0])
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._atomic import atomic_write_text

__all__ = [
    "FORMAT",
    "VERSION",
    "MAX_RESULT_FILE_BYTES",
    "ARRAY_DTYPES",
    "encode_value",
    "decode_value",
    "write_result",
    "read_result",
    "result_path",
    "checked_field",
    "dataclass_fields",
    "dataclass_from_fields",
]

FORMAT = "cvfl-result"
VERSION = 1
MAX_RESULT_FILE_BYTES = 2 * 2**30
"""Largest result file :func:`read_result` reads (2 GiB; arrays take 4/3 of their bytes)."""

ARRAY_DTYPES = ("<f8", "<f4", "<i8", "<i4", "<u8", "<u4", "|u1", "|i1", "|b1")
"""The array dtypes a result file may carry (little-endian numbers and booleans)."""

_MAX_DEPTH = 64


def encode_value(v: Any) -> Any:
    """``v`` as JSON values: numpy scalars as Python, non-finite floats as ``{"$float": ...}``.

    Dictionaries (string keys), lists and tuples are converted recursively; an array is refused
    (arrays go in the result's ``arrays``).
    """
    if isinstance(v, np.ndarray):
        raise TypeError("arrays go in write_result(arrays=...), not among the fields")
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return {"$float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, Mapping):
        return {str(k): encode_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [encode_value(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"cannot store a {type(v).__name__} in a result file")


def decode_value(v: Any, depth: int = 0) -> Any:
    """The inverse of :func:`encode_value`."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"nested deeper than {_MAX_DEPTH} levels")
    if isinstance(v, dict):
        if set(v) == {"$float"}:
            text = v["$float"]
            if text not in ("nan", "inf", "-inf"):
                raise ValueError(f"{{'$float': {text!r}}} is not a non-finite float")
            return float(text)
        return {k: decode_value(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [decode_value(x, depth + 1) for x in v]
    return v


def result_path(path: str | os.PathLike[str]) -> str:
    """``path`` with ``.json`` appended if it has no such suffix."""
    p = os.fspath(path)
    return p if p.endswith(".json") else p + ".json"


def write_result(
    path: str | os.PathLike[str],
    kind: str,
    fields: Mapping[str, Any],
    arrays: Mapping[str, Any] | None = None,
) -> str:
    """Write a result file atomically (``.json`` appended if missing); return its path.

    ``arrays`` are numpy arrays (or tensors, copied to the CPU) of a dtype in
    :data:`ARRAY_DTYPES` after conversion to little-endian.
    """
    stored: dict[str, Any] = {}
    for name, a in (arrays or {}).items():
        if hasattr(a, "detach"):
            a = a.detach().cpu().numpy()
        arr = np.asarray(a)  # (not ascontiguousarray, which makes a 0-d array 1-d)
        arr = arr.astype(arr.dtype.newbyteorder("<"), order="C", copy=False)
        if arr.dtype.str not in ARRAY_DTYPES:
            raise TypeError(f"array {name!r}: dtype {arr.dtype} cannot be stored")
        stored[name] = {
            "dtype": arr.dtype.str,
            "shape": list(arr.shape),
            "data": base64.b64encode(arr.tobytes()).decode("ascii"),
        }
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "fields": encode_value(dict(fields)),
        "arrays": stored,
    }
    p = result_path(path)
    atomic_write_text(p, json.dumps(doc, allow_nan=False, separators=(",", ":")))
    return p


def _array(name: str, spec: Any, where: str) -> np.ndarray:
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data"}:
        raise ValueError(f"{where}: array {name!r} must be {{dtype, shape, data}}")
    dtype, shape, data = spec["dtype"], spec["shape"], spec["data"]
    if dtype not in ARRAY_DTYPES:
        raise ValueError(f"{where}: array {name!r} has dtype {dtype!r}, not one of {ARRAY_DTYPES}")
    if (
        not isinstance(shape, list)
        or len(shape) > 8
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape)
    ):
        raise ValueError(f"{where}: array {name!r} has shape {shape!r}, not <= 8 sizes >= 0")
    if not isinstance(data, str):
        raise ValueError(f"{where}: array {name!r} data must be base64 text")
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    pad = len(data) - len(data.rstrip("="))
    if len(data) % 4 or len(data) // 4 * 3 - pad != nbytes:
        raise ValueError(
            f"{where}: array {name!r} declares shape {shape} of {dtype} ({nbytes} bytes) but "
            f"carries {max(0, len(data) // 4 * 3 - pad)} (damaged or forged)"
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{where}: array {name!r} is not base64 ({exc})") from None
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def read_result(
    path: str | os.PathLike[str], kind: str
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a result file of ``kind``: ``(fields, arrays)``, every part checked first.

    Raises
    ------
    ValueError
        Too large, not JSON, another format, version or kind, a damaged array; the message
        names the file and the fault.
    OSError
        The file cannot be read.
    """
    p = os.fspath(path)
    if not os.path.exists(p) and not p.endswith(".json"):
        p += ".json"
    where = repr(p)
    with open(p, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_RESULT_FILE_BYTES:
            raise ValueError(
                f"{where}: {size} bytes, over MAX_RESULT_FILE_BYTES = {MAX_RESULT_FILE_BYTES}"
            )
        raw = fh.read(MAX_RESULT_FILE_BYTES + 1)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{where} is not a cvfl result file: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{where} is not a cvfl result file (no format {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise ValueError(f"{where}: result file version {doc.get('version')!r}, need {VERSION}")
    if doc.get("kind") != kind:
        raise ValueError(f"{where} holds a {doc.get('kind')!r}, not a {kind!r}")
    fields, arrays = doc.get("fields"), doc.get("arrays")
    if not isinstance(fields, dict) or not isinstance(arrays, dict):
        raise ValueError(f"{where}: fields and arrays must be JSON objects")
    try:
        decoded = decode_value(fields)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    return decoded, {name: _array(name, spec, where) for name, spec in arrays.items()}


def checked_field(fields: Mapping[str, Any], name: str, kinds: Any, where: str) -> Any:
    """``fields[name]`` if it is an instance of ``kinds``, else a ``ValueError`` naming it.

    A bool counts as a number only if ``bool`` is among ``kinds``.
    """
    if name not in fields:
        raise ValueError(f"{where}: missing field {name!r}")
    v = fields[name]
    allowed = kinds if isinstance(kinds, tuple) else (kinds,)
    if (isinstance(v, bool) and bool not in allowed) or not isinstance(v, allowed):
        names = " or ".join(k.__name__ for k in allowed)
        raise ValueError(f"{where}: field {name!r} must be {names}, got {v!r}"[:300])
    return v


def dataclass_fields(obj: Any) -> dict[str, Any]:
    """A (nested) dataclass's fields as plain values, as :func:`dataclass_from_fields` reads them.

    Tuples become lists; floats stay floats, non-finite ones too.
    """
    import dataclasses

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, Mapping):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, np.generic):
            return v.item()
        return v

    return dict(plain(obj))


def dataclass_from_fields(cls: Any, d: Any, where: str) -> Any:
    """Rebuild dataclass ``cls`` from :func:`dataclass_fields`, every field checked by its hint.

    Understood hints: ``bool``, ``int``, ``float`` (an int is accepted), ``str``, ``None``
    unions (``X | None``), ``tuple[X, ...]``, ``list[X]``, ``dict[str, X]``, nested dataclasses and
    ``Any`` (any JSON value). A field with a default may be missing; an unknown field is refused,
    as is a value of the wrong kind (a bool is never a number); the message names the field.
    The class's own ``__post_init__`` checks run as usual.
    """
    import dataclasses
    import types
    import typing

    def build(hint: Any, v: Any, w: str) -> Any:
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if hint is Any:
            return v
        if origin in (typing.Union, types.UnionType):
            if v is None and type(None) in args:
                return None
            errors = []
            for a in (a for a in args if a is not type(None)):
                try:
                    return build(a, v, w)
                except ValueError as exc:
                    errors.append(str(exc))
            raise ValueError(errors[0] if errors else f"{w}: {v!r} is not allowed")
        if dataclasses.is_dataclass(hint):
            return dataclass_from_fields(hint, v, w)
        if origin is tuple or origin is list:
            if not isinstance(v, list):
                raise ValueError(f"{w} must be a list, got {type(v).__name__}")
            item = args[0] if args else Any
            out = [build(item, x, f"{w}[{i}]") for i, x in enumerate(v)]
            return tuple(out) if origin is tuple else out
        if origin is dict:
            if not isinstance(v, dict):
                raise ValueError(f"{w} must be an object, got {type(v).__name__}")
            item = args[1] if len(args) == 2 else Any
            return {str(k): build(item, x, f"{w}[{k!r}]") for k, x in v.items()}
        if hint is float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"{w} must be a number, got {v!r}"[:200])
            return float(v)
        if hint in (int, bool, str):
            if not isinstance(v, hint) or (hint is int and isinstance(v, bool)):
                raise ValueError(f"{w} must be {hint.__name__}, got {v!r}"[:200])
            return v
        raise TypeError(f"{w}: cannot read a field of type {hint!r}")

    if not isinstance(d, dict):
        raise ValueError(f"{where} must be an object, got {type(d).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown} for {cls.__name__}")
    kwargs = {}
    for name, f in known.items():
        if name not in d:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{where}: missing field {name!r} of {cls.__name__}")
            continue
        kwargs[name] = build(hints[name], d[name], f"{where}: {name}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
