r"""The compressor interface of C-VFL (C2, C5) and the :class:`Compressed` wire format.

A :class:`Compressor` maps an embedding matrix :math:`h \in \mathbb{R}^{B \times P}` (or a vector of
length :math:`P`) to a :class:`Compressed` message and back. Every compressor knows

- ``payload_bits(shape)`` -- the exact number of payload bits of its message (all compressors of
  this package are fixed-rate: the count depends on the shape only);
- ``expected_error(x_or_shape)`` -- the exact :math:`E_m = \mathbb{E}\|C(h) - h\|_F^2` (C2);
- ``published_bound(x_or_shape)`` -- the bound printed in the paper's table (C5).

Wire format
-----------
``Compressed.to_bytes()`` writes, MSB first with :class:`~cvfl_theory.bitpack.BitWriter`:

======================  =======================  ===================================================
field                   bits                     counted as
======================  =======================  ===================================================
magic ``b"CVFC"``       32                       framing
version                 8                        framing
dtype code, ndim        8 + 8                    framing
``B``, ``P``            32 + 32                  framing
torch flag              8                        framing
has-seed flag, seed     8 + 64                   framing (shared randomness, see below)
clipped count           64                       framing
payload length          64                       framing
config length, config   16 + 8 n                 framing (JSON of the compressor's constructor arguments)
device length, device   8 + 8 n                  framing
payload                 ``payload_bits(shape)``  **payload**
zero padding            0..7                     framing
CRC-32 (zlib)           32                       framing (over every byte before it)
======================  =======================  ===================================================

Bytes from outside are hostile: :meth:`Compressed.from_bytes` checks every header field before it
allocates anything of the size the header claims (see its Notes). The configuration is parsed with
a bounded grammar: at most 1024 ASCII bytes and nesting depth 3 (checked by a linear scan before
:func:`json.loads` runs), a flat object ``{"args": {name: int | float | bool | null | str |
[at most 4 numbers]}, "name": str}`` of a registered compressor, and it must be byte-for-byte the
canonical encoding of the compressor it builds (so one compressor has one header). The device
string comes from an allow-list: empty for numpy, ``"cpu"`` or the device the caller expects for
torch; the dtype code from float16/32/64.

The dither of the dithered quantizers is *shared randomness*: sender and receiver run the same
pseudo-random generator from a 64-bit seed. The seed is carried in the header and counted as
**framing**, not payload, because in a deployment it is agreed once (e.g. derived from the round
number) rather than sent with every message; the published bit counts do not include it either.
"""

from __future__ import annotations

import json
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from .._backend import ArrayKind, checked_tensor, to_numpy
from .._rng import RNGLike, as_generator
from .._validate import as_real_float, raise_not_finite
from ..bitpack import BitReader, BitWriter
from ._torch_kernels import uses_torch_path

__all__ = ["Compressor", "Compressed", "as_matrix", "as_tensor_matrix", "shape2d"]

_MAGIC = 0x43564643  # "CVFC"
_VERSION = 1
_DTYPES: dict[int, np.dtype] = {
    0: np.dtype(np.float16),
    1: np.dtype(np.float32),
    2: np.dtype(np.float64),
}
_DTYPE_CODES = {v: k for k, v in _DTYPES.items()}
_DTYPE_MAX = {v: float(np.finfo(v).max) for v in _DTYPES.values()}
_REGISTRY: dict[str, type[Compressor]] = {}
_MAX_CONFIG_BYTES = 1024
_MAX_CONFIG_DEPTH = 3  # {"args": {"range": [lo, hi]}}
_MAX_CONFIG_LIST = 4
_MAX_DEVICE_BYTES = 64
_MAX_SEED = 1 << 63  # draw_seed gives seeds in [0, 2**63 - 1)
_MIN_HEADER_BYTES = 44  # the fixed fields of the table above, with empty config and device
# Without an expected shape, a message may decode to at most this many components per byte (2 KiB
# of float64 per byte): the dense compressors send >= 1 bit per component (8 per byte), top-k
# reaches 256 only below k/P ~ 1/1000, while a 0-bit codebook (hex, bits=1, no dither) or a
# forged P would otherwise make a tiny message decode to any size.
_MAX_ELEMENTS_PER_BYTE = 256


def _config_bytes(comp: Compressor) -> bytes:
    """The canonical header encoding of a compressor's configuration."""
    return json.dumps({"name": comp.name, "args": comp.config()}, sort_keys=True).encode()


def _json_depth(text: str) -> int:
    """Maximum nesting depth of ``[``/``{`` outside strings (linear scan, no recursion)."""
    depth = deepest = 0
    in_str = escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _flat_value(v: Any) -> bool:
    """A configuration value of the bounded grammar: a scalar or a short list of numbers."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    return (
        isinstance(v, list)
        and len(v) <= _MAX_CONFIG_LIST
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
    )


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-finite number {name} in the configuration")


def _parse_config(raw: bytes) -> Compressor:
    """Rebuild the compressor of a header's configuration bytes, with a bounded grammar.

    Raises
    ------
    ValueError
        Longer than 1024 bytes, not ASCII, nested deeper than 3, not JSON of the form
        ``{"args": {...}, "name": ...}`` with flat values, an unknown compressor, arguments its
        constructor refuses, or not the canonical encoding of the compressor it builds.
    """
    if len(raw) > _MAX_CONFIG_BYTES:
        raise ValueError(f"configuration of {len(raw)} bytes, longer than {_MAX_CONFIG_BYTES}")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("configuration is not ASCII") from None
    if _json_depth(text) > _MAX_CONFIG_DEPTH:
        raise ValueError(f"configuration nested deeper than {_MAX_CONFIG_DEPTH}")
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ValueError(f"configuration is not valid JSON: {exc}") from None
    if not isinstance(obj, dict) or set(obj) != {"args", "name"}:
        raise ValueError("configuration must be an object with the keys 'args' and 'name'")
    name, args = obj["name"], obj["args"]
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown compressor {name!r} (known: {sorted(_REGISTRY)})")
    if not isinstance(args, dict) or not all(_flat_value(v) for v in args.values()):
        raise ValueError("configuration 'args' must map names to numbers, strings or short lists")
    try:
        comp = _REGISTRY[name](**args)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"configuration refused by {name}: {exc}") from None
    if _config_bytes(comp) != raw:
        raise ValueError("configuration is not in the canonical form of the compressor it builds")
    return comp


def shape2d(shape: Any, name: str = "shape") -> tuple[int, int]:
    """Return ``(B, P)`` for a shape ``(P,)`` or ``(B, P)``; raise on anything else.

    Raises
    ------
    ValueError
        Wrong number of dimensions or an empty axis.
    TypeError
        Entries that are not integers.
    """
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"{name} must be a tuple (P,) or (B, P), got {shape!r}") from None
    if len(dims) not in (1, 2):
        raise ValueError(f"{name} must have 1 or 2 dimensions ((P,) or (B, P)), got {dims}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise TypeError(f"{name} entries must be integers, got {dims}")
    if min(dims) < 1:
        raise ValueError(f"{name} must have B >= 1 and P >= 1 (no empty tensors), got {dims}")
    if len(dims) == 1:
        return 1, int(dims[0])
    return int(dims[0]), int(dims[1])


def as_matrix(
    x: Any, name: str = "x", check_finite: bool = True
) -> tuple[np.ndarray, ArrayKind, tuple[int, ...], np.dtype]:
    """Validate an embedding and view it as a ``(B, P)`` float array.

    ``check_finite=False`` skips the NaN/inf scan for callers that run :func:`check_finite`
    themselves on cheaper reductions (the quantizers check the row or tensor min/max they
    compute anyway).

    Returns
    -------
    a : numpy.ndarray
        The input viewed as ``(B, P)`` (float16/32/64 kept; integers become float64).
    kind : ArrayKind
        numpy or torch (and device) of the input.
    shape : tuple of int
        The original shape, ``(P,)`` or ``(B, P)``.
    dtype : numpy.dtype
        The dtype the result is returned in.

    Raises
    ------
    TypeError
        Non-numeric, boolean or complex input.
    ValueError
        Not 1-D or 2-D, empty, or containing NaN/inf.
    """
    a, kind = to_numpy(x, name)
    a = as_real_float(a, name, "float16/32/64")
    if a.ndim not in (1, 2):
        raise ValueError(f"{name} must have shape (P,) or (B, P), got ndim={a.ndim} {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} must not be empty (B >= 1 and P >= 1), got shape {a.shape}")
    if check_finite and not np.isfinite(a).all():
        raise_not_finite(a, name)
    shape = tuple(int(s) for s in a.shape)
    return a.reshape(shape2d(shape)), kind, shape, a.dtype


def as_tensor_matrix(
    x: Any, name: str = "x", check_finite: bool = True
) -> tuple[Any, ArrayKind, tuple[int, ...], np.dtype]:
    """:func:`as_matrix` for the torch path: the same checks, the tensor kept on its device.

    Returns the ``(B, P)`` view of the detached tensor (float16/32/64 kept, integers as
    float64), its kind, its original shape and the numpy dtype of the result.
    """
    import torch

    t = checked_tensor(x, name)
    if t.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers (float16/32/64), got dtype bool")
    if not t.dtype.is_floating_point:
        t = t.to(torch.float64)
    if t.ndim not in (1, 2):
        raise ValueError(
            f"{name} must have shape (P,) or (B, P), got ndim={t.ndim} {tuple(t.shape)}"
        )
    if t.numel() == 0:
        raise ValueError(
            f"{name} must not be empty (B >= 1 and P >= 1), got shape {tuple(t.shape)}"
        )
    if check_finite and not bool(torch.isfinite(t).all()):
        raise_not_finite(t.cpu().numpy(), name)
    shape = tuple(int(s) for s in t.shape)
    dtype = np.dtype(str(t.dtype).removeprefix("torch."))
    return t.reshape(shape2d(shape)).contiguous(), ArrayKind(True, str(x.device)), shape, dtype


def shape_or_x(x_or_shape: Any) -> tuple[tuple[int, int], np.ndarray | None]:
    """Split the ``x_or_shape`` argument into ``((B, P), array or None)``.

    A ``tuple`` is a shape, a numpy array or torch tensor is data; a ``list`` is refused, since
    ``[4, 5]`` could mean either (pass ``np.asarray(...)`` for data, ``tuple(...)`` for a shape).
    """
    if isinstance(x_or_shape, tuple):
        return shape2d(x_or_shape, "x_or_shape"), None
    if isinstance(x_or_shape, list):
        raise TypeError(
            f"x_or_shape is a list ({x_or_shape!r:.60}), which is ambiguous: pass the data as a "
            "numpy array or torch tensor, or the shape as a tuple (P,) or (B, P)"
        )
    a, _, _, _ = as_matrix(x_or_shape, "x_or_shape")
    B, P = a.shape
    return (B, P), a


@dataclass(eq=False)
class Compressed:
    """A compressed embedding: what travels on the wire plus what the receiver needs.

    Attributes
    ----------
    compressor : Compressor
        The compressor (its configuration is part of the header).
    shape : tuple of int
        Shape of the original tensor, ``(P,)`` or ``(B, P)``.
    dtype : numpy.dtype
        dtype of the original tensor (the decompressed tensor has it too).
    kind : ArrayKind
        numpy array or torch tensor (and device) of the original.
    data : dict of str to numpy.ndarray
        The payload fields (codeword indices, values, transmitted ranges, ...).
    seed : int or None
        Seed of the shared dither generator (framing; ``None`` without dither).
    n_clipped : int
        Number of entries clipped into a fixed quantizer range (0 unless ``range=(lo, hi)`` and
        the input left it).
    """

    compressor: Compressor
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: ArrayKind
    data: dict[str, np.ndarray]
    seed: int | None = None
    n_clipped: int = 0
    _bytes: bytes | None = field(default=None, repr=False)

    @property
    def shape2d(self) -> tuple[int, int]:
        """The ``(B, P)`` view of :attr:`shape`."""
        return shape2d(self.shape)

    @property
    def payload_bits(self) -> int:
        """Exact payload bits (``compressor.payload_bits(shape)``)."""
        return self.compressor.payload_bits(self.shape)

    @property
    def framing_bits(self) -> int:
        """Header, checksum and padding bits of :meth:`to_bytes` (everything but the payload)."""
        return 8 * len(self.to_bytes()) - self.payload_bits

    @property
    def total_bits(self) -> int:
        """Length of :meth:`to_bytes` in bits (payload + framing)."""
        return 8 * len(self.to_bytes())

    def decompress(self) -> Any:
        """Shortcut for ``self.compressor.decompress(self)``."""
        return self.compressor.decompress(self)

    def to_bytes(self) -> bytes:
        """Serialise to the bit-packed wire format described in the module docstring."""
        if self._bytes is not None:
            return self._bytes
        B, P = self.shape2d
        w = BitWriter()
        w.write_uint([_MAGIC], 32)
        w.write_uint([_VERSION, _DTYPE_CODES[np.dtype(self.dtype)], len(self.shape)], 8)
        w.write_uint([B, P], 32)
        w.write_uint([int(self.kind.torch)], 8)
        w.write_uint([int(self.seed is not None)], 8)
        w.write_uint([0 if self.seed is None else self.seed], 64)
        w.write_uint([self.n_clipped, self.payload_bits], 64)
        config = _config_bytes(self.compressor)
        device = (self.kind.device or "").encode()
        if len(config) > _MAX_CONFIG_BYTES or len(device) > _MAX_DEVICE_BYTES:
            raise ValueError("compressor configuration or device name too long for the header")
        w.write_uint([len(config)], 16)
        w.write_uint(np.frombuffer(config, np.uint8), 8)
        w.write_uint([len(device)], 8)
        w.write_uint(np.frombuffer(device, np.uint8), 8)
        start = w.nbits
        self.compressor._write_payload(w, self.data, (B, P))
        if w.nbits - start != self.payload_bits:  # pragma: no cover - internal invariant
            raise AssertionError(
                f"payload wrote {w.nbits - start} bits, payload_bits says {self.payload_bits}"
            )
        body = w.getvalue()
        self._bytes = body + zlib.crc32(body).to_bytes(4, "big")
        return self._bytes

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        compressor: Compressor | None = None,
        shape: tuple[int, ...] | None = None,
        dtype: Any = None,
        device: str | None = None,
    ) -> Compressed:
        """Parse a message written by :meth:`to_bytes`, checking it against what the caller expects.

        Parameters
        ----------
        data : bytes
            The message.
        compressor : Compressor, optional
            The compressor the receiver expects: the header's configuration must be its canonical
            encoding (no configuration is parsed then), and the result uses this object.
            Default: rebuilt from the header with a bounded grammar (see the module docstring).
        shape : tuple of int, optional
            The expected ``(P,)`` or ``(B, P)``. Default: any shape of at most 256 components
            per message byte (a top-k message sparser than ``k/P`` ~ 1/1000 needs ``shape``).
        dtype : numpy dtype, optional
            The expected dtype (float16/32/64); default: any of them.
        device : str, optional
            A torch device the receiver accepts besides ``"cpu"`` (e.g. ``"cuda:0"``); default:
            a torch message must be for ``"cpu"``. A numpy message must name no device.

        Returns
        -------
        Compressed

        Raises
        ------
        ValueError
            Truncated, extended or corrupted data (bad magic, checksum, length, a header field
            out of range or not what the caller expects, a bad configuration or payload).
        TypeError
            ``data`` is not bytes, or an expectation argument has the wrong type.

        Notes
        -----
        Bytes from outside are hostile. Every header field is checked before the payload is read:
        magic, version, dtype code, ``ndim`` (1 with ``B = 1``, or 2), ``B, P >= 1``, flags that
        are 0 or 1, no seed without the seed flag and a seed exactly when the compressor dithers,
        a clipped count ``<= B P`` and 0 unless the compressor has a fixed range, the
        configuration (bounded grammar, canonical form), the device (allow-list), the shape
        against the compressor (e.g. ``k <= P``), the payload length against
        ``payload_bits(shape)`` **and** against the message length (up to zero padding), so the
        memory and work of parsing are bounded by the message length. The payload fields are
        checked by the compressor (finite values and ranges, indices in range).

        Examples
        --------
        >>> from cvfl_theory.compressors import ScalarQuantizer
        >>> q = ScalarQuantizer(3)
        >>> msg = q.compress(np.ones((2, 4)), rng=0).to_bytes()
        >>> Compressed.from_bytes(msg, compressor=q, shape=(2, 4)).shape
        (2, 4)
        >>> Compressed.from_bytes(msg, shape=(4, 2))
        Traceback (most recent call last):
        ...
        ValueError: header shape (2, 4) is not the expected shape (4, 2)
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        if compressor is not None and not isinstance(compressor, Compressor):
            raise TypeError(f"compressor must be a Compressor, got {type(compressor).__name__}")
        if shape is not None:
            B_, P_ = shape2d(shape, "shape")
            shape = (P_,) if len(tuple(shape)) == 1 else (B_, P_)
        if dtype is not None:
            try:
                dtype = np.dtype(dtype)
            except TypeError:
                raise TypeError(
                    f"dtype must be float16, float32 or float64, got {dtype!r}"
                ) from None
            if dtype not in _DTYPE_CODES:
                raise ValueError(f"dtype must be float16, float32 or float64, got {dtype}")
        if device is not None and not isinstance(device, str):
            raise TypeError(f"device must be a str such as 'cuda:0', got {device!r}")
        raw = data if isinstance(data, bytes) else bytes(data)
        if len(raw) < _MIN_HEADER_BYTES + 4:
            raise ValueError(f"message truncated: {len(raw)} bytes is shorter than any header")
        body = memoryview(raw)[:-4]
        if zlib.crc32(body) != int.from_bytes(raw[-4:], "big"):
            raise ValueError("message corrupted or truncated: CRC-32 checksum mismatch")
        r = BitReader(body)
        if int(r.read_uint(1, 32)[0]) != _MAGIC:
            raise ValueError("not a compressed-embedding message (bad magic number)")
        version, dcode, ndim = (int(v) for v in r.read_uint(3, 8))
        if version != _VERSION or dcode not in _DTYPES or ndim not in (1, 2):
            raise ValueError(
                f"unsupported header: version {version} (allowed {_VERSION}), dtype code {dcode} "
                f"(allowed {sorted(_DTYPES)}), ndim {ndim} (allowed 1, 2)"
            )
        B, P = (int(v) for v in r.read_uint(2, 32))
        if B < 1 or P < 1 or (ndim == 1 and B != 1):
            raise ValueError(f"header has an invalid shape: ndim {ndim}, B = {B}, P = {P}")
        hdr_shape = (P,) if ndim == 1 else (B, P)
        if shape is not None and hdr_shape != shape:
            raise ValueError(f"header shape {hdr_shape} is not the expected shape {shape}")
        if shape is None and B * P > _MAX_ELEMENTS_PER_BYTE * len(raw):
            raise ValueError(
                f"header shape {hdr_shape} has more than {_MAX_ELEMENTS_PER_BYTE} components per "
                f"message byte ({len(raw)} bytes); pass the expected shape=... to accept it"
            )
        if dtype is not None and _DTYPES[dcode] != dtype:
            raise ValueError(f"header dtype {_DTYPES[dcode]} is not the expected dtype {dtype}")
        is_torch, has_seed = (int(v) for v in r.read_uint(2, 8))
        seed = int(r.read_uint(1, 64)[0])
        if is_torch > 1 or has_seed > 1 or (not has_seed and seed) or seed >= _MAX_SEED:
            raise ValueError(
                f"header has invalid flags: torch {is_torch}, has-seed {has_seed}, seed {seed}"
            )
        n_clipped, nbits = (int(v) for v in r.read_uint(2, 64))
        if n_clipped > B * P:
            raise ValueError(f"header claims {n_clipped} clipped entries, more than B*P = {B * P}")
        clen = int(r.read_uint(1, 16)[0])
        if clen > _MAX_CONFIG_BYTES:
            raise ValueError(f"configuration of {clen} bytes, longer than {_MAX_CONFIG_BYTES}")
        config_raw = r.read_uint(clen, 8, np.uint8).tobytes()
        dlen = int(r.read_uint(1, 8)[0])
        if dlen > _MAX_DEVICE_BYTES:
            raise ValueError(f"device name of {dlen} bytes, longer than {_MAX_DEVICE_BYTES}")
        dev = _check_device(r.read_uint(dlen, 8, np.uint8).tobytes(), bool(is_torch), device)
        if compressor is not None:
            if config_raw != _config_bytes(compressor):
                raise ValueError(f"message was not produced by {compressor!r}")
            comp = compressor
        else:
            comp = _parse_config(config_raw)
        if has_seed != comp._uses_seed():
            raise ValueError(
                f"header {'has' if has_seed else 'lacks'} a dither seed; {comp!r} "
                f"{'does not dither' if has_seed else 'dithers'}"
            )
        if n_clipped and not comp._can_clip():
            raise ValueError(f"header claims {n_clipped} clipped entries; {comp!r} never clips")
        comp._check_shape((B, P))
        expected_bits = comp.payload_bits(hdr_shape)
        if nbits != expected_bits:
            raise ValueError(
                f"payload length {nbits} does not match {expected_bits} for {hdr_shape}"
            )
        if not 0 <= r.remaining - nbits < 8:
            raise ValueError(
                f"message length does not match its payload length: {r.remaining} bits after "
                f"the header for a payload of {nbits}"
            )
        start = r.pos
        fields = comp._read_payload(r, (B, P))
        if r.pos - start != nbits or not r.padding_is_zero():
            raise ValueError("message length does not match its payload length")
        kind = ArrayKind(torch=True, device=dev) if is_torch else ArrayKind()
        return cls(
            compressor=comp,
            shape=hdr_shape,
            dtype=_DTYPES[dcode],
            kind=kind,
            data=fields,
            seed=seed if has_seed else None,
            n_clipped=n_clipped,
            _bytes=raw,
        )


def _check_device(raw: bytes, is_torch: bool, expected: str | None) -> str:
    """The header's device string if it is on the allow-list (see :meth:`Compressed.from_bytes`)."""
    try:
        dev = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("header device name is not ASCII") from None
    if not is_torch:
        if dev:
            raise ValueError(f"header of a numpy message names a device {dev!r}")
        return dev
    allowed = {"cpu"} if expected is None else {"cpu", expected}
    if dev not in allowed:
        raise ValueError(
            f"header device {dev!r} is not allowed (allowed: {sorted(allowed)}; pass "
            "device=... to from_bytes to accept another)"
        )
    return dev


class Compressor(ABC):
    r"""A C-VFL compressor :math:`C_m` (C2, C5): ``compress``, ``decompress`` and its laws.

    Subclasses implement the numpy kernels ``_compress`` / ``_decompress``, the payload coding
    ``_write_payload`` / ``_read_payload``, ``payload_bits`` and the error formulas. Inputs are
    numpy arrays or torch tensors of shape ``(P,)`` or ``(B, P)``; the output of
    :meth:`decompress` has the input's kind, dtype, device and shape. Compression is never
    differentiated (tensors are detached).
    """

    name: ClassVar[str] = ""
    _has_torch_path: ClassVar[bool] = False
    """True if the compressor has a torch path (``_compress_torch``, ``_decompress_torch``),
    taken for CUDA tensors and, with ``CVFL_KERNEL_PATH=torch``, for every tensor."""
    _checks_finite: ClassVar[bool] = False
    """True if ``_compress``/``_roundtrip`` raise on NaN/inf themselves (from reductions they
    compute anyway), so :meth:`compress` can skip the separate full scan of :func:`as_matrix`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register a class that names itself as the one a message of that name decodes to.

        Only a ``name`` set in the class's own body registers: a subclass that inherits its
        parent's name (a user's wrapper of :class:`ScalarQuantizer`, say) leaves the parent
        the decoder of that name. Another class naming itself as a registered name is
        refused (``TypeError``), so no later definition can change what a message builds; the
        same class defined again (its module reloaded) replaces itself.
        """
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name", "")
        if not name:
            return
        taken = _REGISTRY.get(name)
        same = taken is not None and (taken.__module__, taken.__qualname__) == (
            cls.__module__,
            cls.__qualname__,
        )  # the class defined again: its module reloaded (importlib.reload, IPython autoreload)
        if taken is not None and not same:
            raise TypeError(
                f"compressor name {name!r} is taken by {taken.__module__}.{taken.__qualname__}: "
                f"{cls.__qualname__} must choose another name (or inherit it without setting it)"
            )
        _REGISTRY[name] = cls

    # ---- configuration -------------------------------------------------------------------
    @abstractmethod
    def config(self) -> dict[str, Any]:
        """The constructor arguments (JSON-serialisable) that rebuild this compressor."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Compressor)
            and type(other) is type(self)
            and (other.config() == self.config())
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, json.dumps(self.config(), sort_keys=True)))

    # ---- public API ----------------------------------------------------------------------
    def compress(self, x: Any, rng: RNGLike = None) -> Compressed:
        """Compress ``x`` (shape ``(P,)`` or ``(B, P)``, numpy or torch).

        Parameters
        ----------
        x : array_like or torch.Tensor
            The embedding; finite, non-empty.
        rng : int, numpy.random.Generator, torch.Generator or None
            Source of the dither seed (ignored by deterministic compressors).

        Returns
        -------
        Compressed
        """
        if self._has_torch_path and uses_torch_path(x):
            t, kind, shape, dtype = as_tensor_matrix(x, "x", not self._checks_finite)
            self._check_shape(tuple(t.shape))
            data, seed, n_clipped = self._compress_torch(t, rng)
            return Compressed(self, shape, dtype, kind, data, seed, n_clipped)
        a, kind, shape, dtype = as_matrix(x, "x", check_finite=not self._checks_finite)
        self._check_shape(a.shape)
        data, seed, n_clipped = self._compress(a, rng)
        return Compressed(self, shape, dtype, kind, data, seed, n_clipped)

    def decompress(self, c: Compressed) -> Any:
        """Reconstruct the tensor from ``c`` (same kind, dtype, device and shape as the input).

        Raises
        ------
        ValueError
            ``c`` comes from another compressor, or a reconstructed value overflows ``c.dtype``
            (a range at the edge of the dtype, or a forged message): never a silent inf.
        """
        if not isinstance(c, Compressed):
            raise TypeError(f"c must be a Compressed, got {type(c).__name__}")
        if c.compressor is not self and c.compressor != self:
            raise ValueError(f"c was produced by {c.compressor!r}, not by {self!r}")
        if self._has_torch_path and uses_torch_path(c.kind):
            t = self._decompress_torch(c.data, c.seed, c.shape2d, c.dtype, c.kind.device)
            if not self._output_bound(c.data) <= _DTYPE_MAX.get(c.dtype, -1.0) and not bool(
                t.isfinite().all()
            ):
                raise ValueError(
                    f"decompressed values overflow {np.dtype(c.dtype)}: corrupted message"
                )
            return t.reshape(c.shape)
        out = self._decompress(c.data, c.seed, c.shape2d, c.dtype)
        if out.dtype != c.dtype:  # e.g. float16 rounded from float64 by this call
            with np.errstate(over="ignore"):  # an overflow is refused just below
                out = out.astype(c.dtype)
        # O(1) when the payload's header fields bound every reconstructed value inside the
        # dtype's range (the usual case); else the O(n) scan decides.
        if (
            not self._output_bound(c.data) <= _DTYPE_MAX.get(out.dtype, -1.0)
            and not np.isfinite(out).all()
        ):
            raise ValueError(f"decompressed values overflow {np.dtype(c.dtype)}: corrupted message")
        return c.kind.wrap(out.reshape(c.shape))

    def roundtrip(self, x: Any, rng: RNGLike = None) -> Any:
        """``decompress(compress(x, rng))``, bit for bit.

        Some compressors fuse the two kernels (e.g. the dithered quantizers draw the shared dither
        once instead of once per side), with the same result.
        """
        if self._has_torch_path and uses_torch_path(x):
            t, _, shape, dtype = as_tensor_matrix(x, "x", not self._checks_finite)
            self._check_shape(tuple(t.shape))
            return self._roundtrip_torch(t, rng, dtype).reshape(shape)
        a, kind, shape, dtype = as_matrix(x, "x", check_finite=not self._checks_finite)
        self._check_shape(a.shape)
        out = self._roundtrip(a, rng, dtype)
        return kind.wrap(out.astype(dtype, copy=False).reshape(shape))

    @abstractmethod
    def payload_bits(self, shape: tuple[int, ...]) -> int:
        """Exact payload bits of the message for a tensor of this shape."""

    @abstractmethod
    def expected_error(self, x_or_shape: Any) -> float:
        r"""Exact :math:`\mathbb{E}\|C(x) - x\|_F^2` (C2), from ``x`` or a shape tuple."""

    @abstractmethod
    def published_bound(self, x_or_shape: Any) -> float:
        """The error bound of the paper's table (C5) for this input."""

    # ---- hooks ---------------------------------------------------------------------------
    def _check_shape(self, shape: tuple[int, int]) -> None:
        """Raise if this compressor cannot handle ``(B, P)`` (e.g. ``k > P``)."""

    def _uses_seed(self) -> bool:
        """True if every message of this compressor carries a dither seed."""
        return False

    def _can_clip(self) -> bool:
        """True if a message of this compressor may have clipped entries (a fixed range)."""
        return False

    def _output_bound(self, data: dict[str, np.ndarray]) -> float:
        """An upper bound on ``|value|`` of every entry :meth:`_decompress` returns for ``data``.

        Computed from O(1) (or O(B)) payload fields, with a margin for the kernels' float64
        rounding; ``inf`` or NaN when nothing cheaper than the output itself bounds it (the
        default). :meth:`decompress` scans the output for an overflow only when this bound does
        not exclude one.
        """
        return float("inf")

    @abstractmethod
    def _compress(
        self, a: np.ndarray, rng: RNGLike
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        """Return ``(payload fields, dither seed or None, clipped count)`` for ``a`` (B, P)."""

    @abstractmethod
    def _decompress(
        self,
        data: dict[str, np.ndarray],
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype | type = np.float64,
    ) -> np.ndarray:
        """Return the ``(B, P)`` reconstruction (in ``dtype`` where the kernel can)."""

    def _roundtrip(self, a: np.ndarray, rng: RNGLike, dtype: np.dtype) -> np.ndarray:
        """``_decompress(_compress(a))``; override with a fused kernel giving the same bits."""
        data, seed, _ = self._compress(a, rng)
        return self._decompress(data, seed, a.shape, dtype)

    def _compress_torch(
        self, t: Any, rng: RNGLike
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        """:meth:`_compress` of the ``(B, P)`` float tensor ``t`` (the payload fields on the host)."""
        raise NotImplementedError

    def _decompress_torch(
        self,
        data: dict[str, np.ndarray],
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype,
        device: Any,
    ) -> Any:
        """:meth:`_decompress` as a tensor of ``dtype`` on ``device``, the same bits."""
        raise NotImplementedError

    def _roundtrip_torch(self, t: Any, rng: RNGLike, dtype: np.dtype) -> Any:
        """``_decompress_torch(_compress_torch(t))``; override to stay on the device."""
        data, seed, _ = self._compress_torch(t, rng)
        return self._decompress_torch(data, seed, tuple(t.shape), dtype, t.device)

    @abstractmethod
    def _write_payload(
        self, w: BitWriter, data: dict[str, np.ndarray], shape: tuple[int, int]
    ) -> None:
        """Write exactly ``payload_bits(shape)`` bits."""

    @abstractmethod
    def _read_payload(self, r: BitReader, shape: tuple[int, int]) -> dict[str, np.ndarray]:
        """Read the fields written by ``_write_payload``."""


def draw_seed(rng: RNGLike) -> int:
    """One 63-bit dither seed from the user's ``rng`` argument."""
    if type(rng) is int:  # a fresh generator per call: the same seed every time, so cached
        return _seed_of_int(rng)
    return int(as_generator(rng).integers(0, 2**63 - 1))


@lru_cache(maxsize=256)
def _seed_of_int(rng: int) -> int:
    """:func:`draw_seed` of an ``int`` (a refused one raises and is not cached)."""
    return int(as_generator(rng).integers(0, 2**63 - 1))
