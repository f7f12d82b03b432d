r"""K3 — communication protocols: exact payload bits and a real bit-packed wire format.

Each protocol :math:`\beta` turns one node's :math:`Y_i` into a byte message. The message is

``header | payload | padding | crc32``

where the *payload* holds exactly :math:`\beta(Y_i)` bits of K3 (:meth:`Protocol.payload_bits`), and
the header (magic, protocol, float width, dimension, counts, the sampling parameter the seeded
protocol needs), the zero padding to whole bytes and the CRC-32 checksum are *framing*
(:meth:`Protocol.framing_bits`), reported separately (K3.1).

With :math:`\bar r = r` when the centre is data-dependent (``0`` for ``mu="zero"``),
:math:`\bar r_s` the seed width, :math:`s_i = |\{j : Y_i(j) \ne \mu_i\}|` and
:math:`S = \{(i, j) : X_i(j) \ne \mu_i\}`:

- naive: :math:`\beta(Y_i) = dr`, :math:`C = ndr`;
- varying-length: :math:`\beta(Y_i) = \bar r + d + r s_i`,
  :math:`C = n(\bar r + d) + r \sum_S p_{ij}`;
- sparse: :math:`\beta(Y_i) = \bar r + (\lceil\log_2 d\rceil + r) s_i`,
  :math:`C = n\bar r + (\lceil\log_2 d\rceil + r)\sum_S p_{ij}`;
- seeded sparse: :math:`\beta(Y_i) = \bar r + \bar r_s + r|D_i|`,
  :math:`C = n(\bar r + \bar r_s) + r \sum_{i,j} p_{ij}`;
- binary: :math:`\beta(Y_i) = 2r + d`, :math:`C = n(2r + d)`.

Values are written as IEEE floats of ``r`` bits; the round trip is bit-exact when the data dtype has
at most ``r`` bits (wider data are rounded to ``r`` bits, as the paper's :math:`r` implies).

Examples
--------
>>> import numpy as np
>>> from cvfl_theory import IndependentEncoder
>>> X = np.arange(12, dtype=np.float32).reshape(2, 6)
>>> enc = IndependentEncoder(p=0.5, mu="zero").encode(X, rng=1)
>>> proto = SparseProtocol(r=32)
>>> msgs = proto.to_bytes(enc)
>>> back = proto.from_bytes(msgs, d=6)
>>> bool(np.array_equal(decode(back), decode(enc)))
True
>>> [int(b) for b in proto.payload_bits(enc)] == [35 * m.n_nonzero for m in enc.nodes]
True
"""

from __future__ import annotations

import struct
import zlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from .bitpack import BitReader, BitWriter, float_dtype
from .encoded import SEEDED_SCHEMES, Encoded, NodeMessage, decode
from .encoders import BinaryQuantizationEncoder, Encoder
from .sampling import bernoulli_support, k_subset_support

__all__ = [
    "Protocol",
    "NaiveProtocol",
    "VaryingLengthProtocol",
    "SparseProtocol",
    "SeededSparseProtocol",
    "BinaryProtocol",
    "index_bits",
    "PROTOCOLS",
    "applicable_protocols",
    "decode",
]

_MAGIC = b"KR"
_VERSION = 1
_R_CODES = {16: 0, 32: 1, 64: 2}
_R_FROM_CODE = {v: k for k, v in _R_CODES.items()}
_SCHEMES = ("bernoulli", "bernoulli-varying", "k-subset")
# magic(2) version(1) protocol(1) r-code(1) flags(1) scheme(1) reserved(1) d(4) original_d(4)
# count(4) rate(8) rotation_seed(8)
_HEADER = struct.Struct(">2sBBBBBBIIIdQ")
_CRC_BYTES = 4


def index_bits(d: int) -> int:
    r""":math:`\lceil \log_2 d \rceil`, the width of one index (0 for ``d = 1``)."""
    return int(d - 1).bit_length()


class Protocol(ABC):
    r"""A communication protocol β of K3.

    Parameters
    ----------
    r : {16, 32, 64}
        Bits of one floating-point value.
    r_seed : int
        Bits of a random seed, :math:`\\bar r_s` (1..64, default 32).
    """

    name: ClassVar[str]
    code: ClassVar[int]

    def __init__(self, r: int = 32, r_seed: int = 32) -> None:
        if isinstance(r, bool) or r not in _R_CODES:
            raise ValueError(f"r must be one of 16, 32, 64 (bits per float), got {r!r}")
        if isinstance(r_seed, bool) or not isinstance(r_seed, (int, np.integer)):
            raise TypeError(f"r_seed must be an integer in [1, 64], got {r_seed!r}")
        if not 1 <= r_seed <= 64:
            raise ValueError(f"r_seed must be in [1, 64], got {r_seed}")
        self.r = int(r)
        self.r_seed = int(r_seed)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(r={self.r}, r_seed={self.r_seed})"

    # --------------------------------------------------------------- formulas
    def r_bar(self, centre_sent: bool) -> int:
        r""":math:`\bar r`: ``r`` if the centre is sent, else 0."""
        return self.r if centre_sent else 0

    def check_applicable(self, encoded: Encoded) -> None:
        """Raise ``ValueError`` if this protocol cannot carry ``encoded`` (default: any)."""

    @abstractmethod
    def _node_payload_bits(self, m: NodeMessage, encoded: Encoded) -> int:
        """β(Y_i) for one node."""

    def payload_bits(self, encoded: Encoded) -> np.ndarray:
        r"""Per-node payload bits :math:`\beta(Y_i)` for this realisation, shape ``(n,)``."""
        self.check_applicable(encoded)
        return np.array([self._node_payload_bits(m, encoded) for m in encoded.nodes], np.int64)

    @abstractmethod
    def _expected(self, n: int, d: int, p: np.ndarray, on_s: np.ndarray, r_bar: int) -> float:
        """Closed-form :math:`C` from the inclusion probabilities."""

    def check_encoder(self, encoder: Encoder) -> None:
        """Raise ``ValueError`` if the protocol cannot carry this encoder's messages."""

    def expected_bits(self, encoder: Encoder, X: Any) -> float:
        r"""The closed-form expected total :math:`C = \mathbb E\sum_i \beta(Y_i)` of K3."""
        self.check_encoder(encoder)
        Z = encoder.domain(X)
        p, centres = encoder.marginals(X)
        on_s = Z.astype(np.float64) != centres[:, None]
        n, d = Z.shape
        return float(self._expected(n, d, p, on_s, self.r_bar(encoder.centre_sent)))

    # --------------------------------------------------------------- wire format
    @abstractmethod
    def _write_payload(self, w: BitWriter, m: NodeMessage, encoded: Encoded) -> int:
        """Write the payload; return the header ``count`` field."""

    @abstractmethod
    def _read_payload(
        self, rd: BitReader, d: int, centre_sent: bool, count: int, scheme: str, rate: float
    ) -> tuple[np.ndarray, np.ndarray, float, int]:
        """Read the payload; return ``(support, values, centre, seed)``."""

    def to_bytes(self, encoded: Encoded) -> list[bytes]:
        """Serialise every node's message; one ``bytes`` per node."""
        self.check_applicable(encoded)
        out = []
        flags = int(encoded.centre_sent) | (int(encoded.rotation_seed is not None) << 1)
        for m in encoded.nodes:
            w = BitWriter()
            count = self._write_payload(w, m, encoded)
            header = _HEADER.pack(
                _MAGIC,
                _VERSION,
                self.code,
                _R_CODES[self.r],
                flags,
                _SCHEMES.index(encoded.scheme),
                0,
                encoded.d,
                encoded.original_d,
                count,
                m.rate,
                encoded.rotation_seed or 0,
            )
            chunks = w.chunks()
            crc = zlib.crc32(header)
            for chunk in chunks:
                crc = zlib.crc32(chunk, crc)
            out.append(b"".join((header, *chunks, struct.pack(">I", crc))))
        return out

    def framing_bits(self, encoded: Encoded) -> np.ndarray:
        """Per-node framing bits: message length in bits minus :meth:`payload_bits`."""
        lengths = np.array([8 * len(b) for b in self.to_bytes(encoded)], dtype=np.int64)
        return lengths - self.payload_bits(encoded)

    def from_bytes(self, messages: list[bytes], d: int) -> Encoded:
        """Parse messages produced by :meth:`to_bytes` back into an :class:`Encoded`.

        Parameters
        ----------
        messages : list of bytes
            One message per node.
        d : int
            Dimension the receiver expects (checked against each header).

        Raises
        ------
        ValueError
            Truncated, corrupted (CRC mismatch) or foreign messages, or a dimension mismatch.
        TypeError
            ``messages`` is not a list of bytes.
        """
        if isinstance(messages, (bytes, bytearray)) or not isinstance(messages, (list, tuple)):
            raise TypeError("messages must be a list of bytes objects, one per node")
        if len(messages) == 0:
            raise ValueError("messages must hold at least one node's message, got an empty list")
        nodes, meta = [], None
        for i, msg in enumerate(messages):
            if not isinstance(msg, (bytes, bytearray)):
                raise TypeError(f"messages[{i}] must be bytes, got {type(msg).__name__}")
            node, this_meta = self._parse(msg, d, i)
            if meta is not None and this_meta != meta:
                raise ValueError(f"messages[{i}] header disagrees with messages[0]: {this_meta}")
            meta = this_meta
            nodes.append(node)
        assert meta is not None
        centre_sent, rotated, scheme, d_coded, original_d, rotation_seed = meta
        return Encoded(
            scheme=scheme,
            d=d_coded,
            dtype=float_dtype(self.r).newbyteorder("="),
            nodes=tuple(nodes),
            centre_sent=centre_sent,
            rotation_seed=rotation_seed if rotated else None,
            original_d=original_d,
        )

    def _parse(self, msg: bytes, d: int, i: int) -> tuple[NodeMessage, tuple]:
        where = f"messages[{i}]"
        if len(msg) < _HEADER.size + _CRC_BYTES:
            raise ValueError(f"{where} is truncated: {len(msg)} bytes, shorter than the header")
        body = memoryview(msg)[:-_CRC_BYTES]  # no copy
        crc = struct.unpack(">I", msg[-_CRC_BYTES:])[0]
        if zlib.crc32(body) != crc:
            raise ValueError(f"{where} is corrupted or truncated: CRC-32 mismatch")
        magic, ver, proto, rcode, flags, scheme_code, _, d_coded, original_d, count, rate, rseed = (
            _HEADER.unpack_from(body)
        )
        if magic != _MAGIC or ver != _VERSION:
            raise ValueError(f"{where} is not a cvfl K3 message (magic {magic!r}, version {ver})")
        if proto != self.code:
            raise ValueError(f"{where} was written by protocol code {proto}, not {self.name}")
        if _R_FROM_CODE.get(rcode) != self.r:
            raise ValueError(f"{where} has float width code {rcode}; this protocol has r={self.r}")
        if scheme_code >= len(_SCHEMES):
            raise ValueError(f"{where} has an unknown sampling scheme code {scheme_code}")
        if original_d != d:
            raise ValueError(f"d={d} does not match the message's dimension {original_d}")
        centre_sent, rotated = bool(flags & 1), bool(flags & 2)
        scheme = _SCHEMES[scheme_code]
        rd = BitReader(body, start_bit=8 * _HEADER.size)
        support, values, centre, seed = self._read_payload(
            rd, d_coded, centre_sent, count, scheme, rate
        )
        if len(body) != (rd.pos + 7) // 8:
            raise ValueError(f"{where} has {len(body) - (rd.pos + 7) // 8} unexpected extra bytes")
        node = NodeMessage(support, values, centre, seed, rate)
        return node, (centre_sent, rotated, scheme, d_coded, original_d, rseed)

    # --------------------------------------------------------------- helpers
    def _write_centre(self, w: BitWriter, m: NodeMessage, encoded: Encoded) -> None:
        if encoded.centre_sent:
            w.write_floats(np.array([m.centre]), self.r)

    def _read_centre(self, rd: BitReader, centre_sent: bool) -> float:
        return float(rd.read_floats(1, self.r)[0]) if centre_sent else 0.0

    def _rounded(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values).astype(float_dtype(self.r).newbyteorder("="), copy=False)


def _nonzero(m: NodeMessage) -> tuple[np.ndarray, np.ndarray]:
    keep = m.values != m.values.dtype.type(m.centre)
    return m.support[keep], m.values[keep]


class NaiveProtocol(Protocol):
    r"""Send every :math:`Y_i(j)` as an ``r``-bit float: :math:`\beta(Y_i) = dr`."""

    name = "naive"
    code = 0

    def _node_payload_bits(self, m, encoded):
        return encoded.d * self.r

    def _expected(self, n, d, p, on_s, r_bar):
        return n * d * self.r

    def _write_payload(self, w, m, encoded):
        Y = np.full(encoded.d, m.centre, dtype=encoded.dtype)
        Y[m.support] = m.values
        w.write_floats(Y, self.r)
        return encoded.d

    def _read_payload(self, rd, d, centre_sent, count, scheme, rate):
        Y = rd.read_floats(d, self.r)
        return np.arange(d, dtype=np.int64), Y, 0.0, 0


class VaryingLengthProtocol(Protocol):
    r"""One flag bit per entry, then ``r`` bits for each :math:`Y_i(j) \ne \mu_i`.

    :math:`\beta(Y_i) = \bar r + d + r s_i`.
    """

    name = "varying-length"
    code = 1

    def _node_payload_bits(self, m, encoded):
        return self.r_bar(encoded.centre_sent) + encoded.d + self.r * m.n_nonzero

    def _expected(self, n, d, p, on_s, r_bar):
        return n * (r_bar + d) + self.r * float(np.sum(p[on_s]))

    def _write_payload(self, w, m, encoded):
        idx, vals = _nonzero(m)
        self._write_centre(w, m, encoded)
        flags = np.zeros(encoded.d, dtype=bool)
        flags[idx] = True
        w.write_flags(flags)
        w.write_floats(vals, self.r)
        return int(idx.size)

    def _read_payload(self, rd, d, centre_sent, count, scheme, rate):
        centre = self._read_centre(rd, centre_sent)
        idx = np.flatnonzero(rd.read_flags(d)).astype(np.int64)
        return idx, rd.read_floats(idx.size, self.r), centre, 0


class SparseProtocol(Protocol):
    r"""(index, value) pairs of the entries :math:`Y_i(j) \ne \mu_i`.

    :math:`\beta(Y_i) = \bar r + (\lceil \log_2 d \rceil + r) s_i`; the count :math:`s_i` is framing.
    """

    name = "sparse"
    code = 2

    def _node_payload_bits(self, m, encoded):
        return self.r_bar(encoded.centre_sent) + (index_bits(encoded.d) + self.r) * m.n_nonzero

    def _expected(self, n, d, p, on_s, r_bar):
        return n * r_bar + (index_bits(d) + self.r) * float(np.sum(p[on_s]))

    def _write_payload(self, w, m, encoded):
        idx, vals = _nonzero(m)
        self._write_centre(w, m, encoded)
        w.write_uint(idx.astype(np.uint64), index_bits(encoded.d))
        w.write_floats(vals, self.r)
        return int(idx.size)

    def _read_payload(self, rd, d, centre_sent, count, scheme, rate):
        centre = self._read_centre(rd, centre_sent)
        if count > d:
            raise ValueError(f"message claims {count} entries, more than d={d}")
        idx = rd.read_uint(count, index_bits(d)).astype(np.int64)
        if idx.size and (idx.max() >= d or np.any(np.diff(idx) <= 0)):
            raise ValueError("message indices are out of range or not increasing: corrupted")
        return idx, rd.read_floats(count, self.r), centre, 0


class SeededSparseProtocol(Protocol):
    r"""Send the centre, the node's seed and every selected value; indices are regenerated.

    :math:`\beta(Y_i) = \bar r + \bar r_s + r |D_i|` — for K2 (``k``-subsets) and for K1 with one
    :math:`p` per node. The sampling parameter (:math:`p_i` or :math:`k_i`) travels in the header.
    """

    name = "seeded-sparse"
    code = 3

    def check_applicable(self, encoded):
        """Supports must be regenerable from a seed, and seeds must fit in ``r_seed`` bits."""
        if encoded.scheme not in SEEDED_SCHEMES:
            raise ValueError(
                "SeededSparseProtocol needs supports regenerable from a seed: a FixedSizeEncoder "
                f"or an IndependentEncoder with one p per node; got scheme {encoded.scheme!r} "
                "(per-entry probabilities)"
            )
        limit = (1 << self.r_seed) - 1
        if any(m.seed > limit for m in encoded.nodes):
            raise ValueError(f"a node seed does not fit in r_seed={self.r_seed} bits")

    def check_encoder(self, encoder):
        """Only K2 and K1 with one ``p`` per node (scheme ``bernoulli``/``k-subset``)."""
        if getattr(encoder, "scheme", None) not in SEEDED_SCHEMES:
            raise ValueError(
                f"SeededSparseProtocol does not apply to {encoder!r}: it needs a FixedSizeEncoder "
                "or an IndependentEncoder whose p is a scalar or one value per node (n, 1)"
            )

    def _node_payload_bits(self, m, encoded):
        return self.r_bar(encoded.centre_sent) + self.r_seed + self.r * int(m.support.size)

    def _expected(self, n, d, p, on_s, r_bar):
        return n * (r_bar + self.r_seed) + self.r * float(np.sum(p))

    def _write_payload(self, w, m, encoded):
        self._write_centre(w, m, encoded)
        w.write_uint([m.seed], self.r_seed)
        w.write_floats(m.values, self.r)
        return int(m.support.size)

    def _read_payload(self, rd, d, centre_sent, count, scheme, rate):
        centre = self._read_centre(rd, centre_sent)
        seed = int(rd.read_uint(1, self.r_seed)[0])
        if scheme == "bernoulli" and 0 < rate <= 1:
            idx = bernoulli_support(seed, rate, d)
        elif scheme == "k-subset" and rate == int(rate) and 1 <= rate <= d:
            idx = k_subset_support(seed, int(rate), d)
        else:
            raise ValueError(f"message has an invalid sampling parameter {rate} for {scheme!r}")
        if idx.size != count:
            raise ValueError(
                f"regenerated support has {idx.size} entries but the message has {count}: corrupted"
            )
        return idx, rd.read_floats(count, self.r), centre, seed


class BinaryProtocol(Protocol):
    r"""Two values per node and one bit per entry: :math:`\beta(Y_i) = 2r + d` (K5.1).

    Applies whenever :math:`Y_i` takes at most two distinct values.
    """

    name = "binary"
    code = 4

    @staticmethod
    def _levels(m: NodeMessage, d: int) -> np.ndarray:
        vals = np.unique(m.values)
        if m.support.size < d:
            vals = np.unique(np.append(vals, m.values.dtype.type(m.centre)))
        return vals

    def check_applicable(self, encoded):
        """Each :math:`Y_i` must take at most two distinct values."""
        for i, m in enumerate(encoded.nodes):
            if self._levels(m, encoded.d).size > 2:
                raise ValueError(
                    f"BinaryProtocol needs each Y_i to take at most two values; node {i} takes "
                    f"{self._levels(m, encoded.d).size} (use BinaryQuantizationEncoder)"
                )

    def check_encoder(self, encoder):
        """Only K5.1 encoders (and the K5.2 rotation baseline) guarantee two values."""
        if not isinstance(encoder, BinaryQuantizationEncoder):
            raise ValueError(
                f"BinaryProtocol's cost applies to encoders whose Y_i takes two values (K5.1), "
                f"not {encoder!r}"
            )

    def _node_payload_bits(self, m, encoded):
        return 2 * self.r + encoded.d

    def _expected(self, n, d, p, on_s, r_bar):
        return n * (2 * self.r + d)

    def _write_payload(self, w, m, encoded):
        levels = self._levels(m, encoded.d)
        centre = m.values.dtype.type(m.centre)
        lo = centre if centre in levels else levels[0]
        hi = levels[levels != lo][0] if levels.size == 2 else lo
        Y = np.full(encoded.d, centre, dtype=encoded.dtype)
        Y[m.support] = m.values
        w.write_floats(np.array([lo, hi], dtype=encoded.dtype), self.r)
        w.write_flags(Y == hi if hi != lo else np.zeros(encoded.d, bool))
        return 0

    def _read_payload(self, rd, d, centre_sent, count, scheme, rate):
        lo, hi = rd.read_floats(2, self.r)
        idx = np.flatnonzero(rd.read_flags(d)).astype(np.int64)
        return idx, np.full(idx.size, hi, dtype=lo.dtype), float(lo), 0


PROTOCOLS: dict[str, type[Protocol]] = {
    cls.name: cls
    for cls in (
        NaiveProtocol,
        VaryingLengthProtocol,
        SparseProtocol,
        SeededSparseProtocol,
        BinaryProtocol,
    )
}
"""Protocol classes by name."""


def applicable_protocols(encoder: Encoder, r: int = 32, r_seed: int = 32) -> list[Protocol]:
    """One instance of every protocol that can carry ``encoder``'s messages (K3 "usable with").

    Examples
    --------
    >>> from cvfl_theory import FixedSizeEncoder
    >>> [p.name for p in applicable_protocols(FixedSizeEncoder(2))]
    ['naive', 'varying-length', 'sparse', 'seeded-sparse']
    """
    found = []
    for cls in PROTOCOLS.values():
        proto = cls(r=r, r_seed=r_seed)
        try:
            proto.check_encoder(encoder)
        except ValueError:
            continue
        found.append(proto)
    return found
