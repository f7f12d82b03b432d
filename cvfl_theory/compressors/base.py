r"""The compressor interface of C-VFL (THEORY C2, C5) and the :class:`Compressed` wire format.

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
from typing import Any, ClassVar

import numpy as np

from .._backend import ArrayKind, to_numpy
from .._rng import RNGLike, as_generator
from .._validate import as_real_float, raise_not_finite
from ..bitpack import BitReader, BitWriter

__all__ = ["Compressor", "Compressed", "as_matrix", "shape2d"]

_MAGIC = 0x43564643  # "CVFC"
_VERSION = 1
_DTYPES: dict[int, np.dtype] = {
    0: np.dtype(np.float16),
    1: np.dtype(np.float32),
    2: np.dtype(np.float64),
}
_DTYPE_CODES = {v: k for k, v in _DTYPES.items()}
_REGISTRY: dict[str, type[Compressor]] = {}


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


def _shape_or_x(x_or_shape: Any) -> tuple[tuple[int, int], np.ndarray | None]:
    """Split the ``x_or_shape`` argument into ``((B, P), array or None)``."""
    if isinstance(x_or_shape, tuple):
        return shape2d(x_or_shape, "x_or_shape"), None
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
        config = json.dumps(
            {"name": self.compressor.name, "args": self.compressor.config()}, sort_keys=True
        ).encode()
        device = (self.kind.device or "").encode()
        if len(config) >= 1 << 16 or len(device) >= 1 << 8:
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
    def from_bytes(cls, data: bytes) -> Compressed:
        """Parse a message written by :meth:`to_bytes`.

        Raises
        ------
        ValueError
            Truncated or corrupted data (bad magic, checksum, length or configuration).
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < 4 + 4:
            raise ValueError(f"message truncated: {len(data)} bytes is shorter than any header")
        body, crc = data[:-4], int.from_bytes(data[-4:], "big")
        if zlib.crc32(body) != crc:
            raise ValueError("message corrupted or truncated: CRC-32 checksum mismatch")
        r = BitReader(body)
        if int(r.read_uint(1, 32)[0]) != _MAGIC:
            raise ValueError("not a compressed-embedding message (bad magic number)")
        version, dcode, ndim = (int(v) for v in r.read_uint(3, 8))
        if version != _VERSION or dcode not in _DTYPES or ndim not in (1, 2):
            raise ValueError(f"unsupported header: version {version}, dtype {dcode}, ndim {ndim}")
        B, P = (int(v) for v in r.read_uint(2, 32))
        is_torch = bool(r.read_uint(1, 8)[0])
        has_seed = bool(r.read_uint(1, 8)[0])
        seed = int(r.read_uint(1, 64)[0])
        n_clipped, nbits = (int(v) for v in r.read_uint(2, 64))
        clen = int(r.read_uint(1, 16)[0])
        config_raw = r.read_uint(clen, 8).astype(np.uint8).tobytes()
        dlen = int(r.read_uint(1, 8)[0])
        device = r.read_uint(dlen, 8).astype(np.uint8).tobytes().decode("ascii", "replace")
        try:
            config = json.loads(config_raw)
            comp = _REGISTRY[config["name"]](**config["args"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"bad compressor configuration in header: {exc}") from None
        shape = (P,) if ndim == 1 else (B, P)
        if ndim == 1 and B != 1:
            raise ValueError(f"header says a vector but B = {B}")
        if nbits != comp.payload_bits(shape):
            raise ValueError(
                f"payload length {nbits} does not match {comp.payload_bits(shape)} for {shape}"
            )
        start = r.pos
        fields = comp._read_payload(r, (B, P))
        if r.pos - start != nbits or (r.nbits - r.pos) >= 8:
            raise ValueError("message length does not match its payload length")
        kind = ArrayKind(torch=is_torch, device=device or None) if is_torch else ArrayKind()
        return cls(
            compressor=comp,
            shape=shape,
            dtype=_DTYPES[dcode],
            kind=kind,
            data=fields,
            seed=seed if has_seed else None,
            n_clipped=n_clipped,
            _bytes=data,
        )


class Compressor(ABC):
    r"""A C-VFL compressor :math:`C_m` (THEORY C2, C5): ``compress``, ``decompress`` and its laws.

    Subclasses implement the numpy kernels ``_compress`` / ``_decompress``, the payload coding
    ``_write_payload`` / ``_read_payload``, ``payload_bits`` and the error formulas. Inputs are
    numpy arrays or torch tensors of shape ``(P,)`` or ``(B, P)``; the output of
    :meth:`decompress` has the input's kind, dtype, device and shape. Compression is never
    differentiated (tensors are detached).
    """

    name: ClassVar[str] = ""
    _checks_finite: ClassVar[bool] = False
    """True if ``_compress``/``_roundtrip`` raise on NaN/inf themselves (from reductions they
    compute anyway), so :meth:`compress` can skip the separate full scan of :func:`as_matrix`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            _REGISTRY[cls.name] = cls

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
        a, kind, shape, dtype = as_matrix(x, "x", check_finite=not self._checks_finite)
        self._check_shape(a.shape)
        data, seed, n_clipped = self._compress(a, rng)
        return Compressed(self, shape, dtype, kind, data, seed, n_clipped)

    def decompress(self, c: Compressed) -> Any:
        """Reconstruct the tensor from ``c`` (same kind, dtype, device and shape as the input)."""
        if not isinstance(c, Compressed):
            raise TypeError(f"c must be a Compressed, got {type(c).__name__}")
        if c.compressor != self:
            raise ValueError(f"c was produced by {c.compressor!r}, not by {self!r}")
        out = self._decompress(c.data, c.seed, c.shape2d, c.dtype)
        return c.kind.wrap(out.astype(c.dtype, copy=False).reshape(c.shape))

    def roundtrip(self, x: Any, rng: RNGLike = None) -> Any:
        """``decompress(compress(x, rng))``, bit for bit.

        Some compressors fuse the two kernels (e.g. the dithered quantizers draw the shared dither
        once instead of once per side), with the same result.
        """
        a, kind, shape, dtype = as_matrix(x, "x", check_finite=not self._checks_finite)
        self._check_shape(a.shape)
        out = self._roundtrip(a, rng, dtype)
        return kind.wrap(out.astype(dtype, copy=False).reshape(shape))

    @abstractmethod
    def payload_bits(self, shape: tuple[int, ...]) -> int:
        """Exact payload bits of the message for a tensor of this shape."""

    @abstractmethod
    def expected_error(self, x_or_shape: Any) -> float:
        r"""Exact :math:`\mathbb{E}\|C(x) - x\|_F^2` (THEORY C2), from ``x`` or a shape tuple."""

    @abstractmethod
    def published_bound(self, x_or_shape: Any) -> float:
        """The error bound of the paper's table (C5) for this input."""

    # ---- hooks ---------------------------------------------------------------------------
    def _check_shape(self, shape: tuple[int, int]) -> None:
        """Raise if this compressor cannot handle ``(B, P)`` (e.g. ``k > P``)."""

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
    return int(as_generator(rng).integers(0, 2**63 - 1))
