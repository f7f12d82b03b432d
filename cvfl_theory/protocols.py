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
at most ``r`` bits (wider data are rounded to ``r`` bits, as the paper's :math:`r` implies). A value
or centre beyond the largest finite ``r``-bit float (65504 for ``r = 16``) is refused by
:meth:`Protocol.to_bytes` with a ``ValueError`` naming it and the representable range: the wire
never carries an ``inf`` that was not in the data, and nothing is clipped.

Examples
--------
>>> import numpy as np
>>> from cvfl_theory import IndependentEncoder
>>> from cvfl_theory.encoded import decode
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

import math
import struct
import zlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from ._validate import check_fits_float, check_float_width, check_int_in_range
from .bitpack import BitReader, BitWriter, float_dtype
from .encoded import SEEDED_SCHEMES, Encoded, NodeMessage
from .encoders import BinaryQuantizationEncoder, Encoder, check_encoded
from .rotation import padded_dimension
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
]

_MAGIC = b"KR"
_VERSION = 1
_R_CODES = {16: 0, 32: 1, 64: 2}
_R_FROM_CODE = {v: k for k, v in _R_CODES.items()}
_SCHEMES = ("bernoulli", "bernoulli-varying", "k-subset")
_DTYPE_CODES = {"float16": 1, "float32": 2, "float64": 3}
_DTYPE_FROM_CODE = {v: np.dtype(k) for k, v in _DTYPE_CODES.items()}
# magic(2) version(1) protocol(1) r-code(1) flags(1) scheme(1) data-dtype(1) d(4) original_d(4)
# count(4) rate(8) rotation_seed(8). The data-dtype byte is 0 when the data's float has the wire's
# width r (every message of data at the wire's width is as before), else the code of the data's
# float (1 float16, 2 float32, 3 float64), so a receiver rebuilds the sender's dtype exactly.
_HEADER = struct.Struct(">2sBBBBBBIIIdQ")
_CRC_BYTES = 4
_FLAG_CENTRE, _FLAG_ROTATED = 1, 2
_MAX_D = (1 << 32) - 1  # the header's dimension fields are 32 bits wide


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
        self.r = check_float_width(r)
        self.r_seed = check_int_in_range(r_seed, "r_seed", 1, 64)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(r={self.r}, r_seed={self.r_seed})"

    # --------------------------------------------------------------- formulas
    def r_bar(self, centre_sent: bool) -> int:
        r""":math:`\bar r`: ``r`` if the centre is sent, else 0."""
        return self.r if centre_sent else 0

    def check_applicable(self, encoded: Encoded) -> None:
        """Raise ``ValueError`` if this protocol cannot carry ``encoded`` (default: any)."""

    @abstractmethod
    def _bits(self, d: int, centre_sent: bool, count: int) -> int:
        """β(Y_i) of a node whose header says dimension ``d`` and ``count`` (K3)."""

    @abstractmethod
    def _count(self, m: NodeMessage, encoded: Encoded) -> int:
        """The header ``count`` field of one node's message."""

    def _node_payload_bits(self, m: NodeMessage, encoded: Encoded) -> int:
        """β(Y_i) for one node."""
        return self._bits(encoded.d, encoded.centre_sent, self._count(m, encoded))

    def payload_bits(self, encoded: Encoded) -> np.ndarray:
        r"""Per-node payload bits :math:`\beta(Y_i)` for this realisation, shape ``(n,)``."""
        check_encoded(encoded)
        self.check_applicable(encoded)
        return np.array([self._node_payload_bits(m, encoded) for m in encoded.nodes], np.int64)

    @abstractmethod
    def _expected(self, n: int, d: int, p: np.ndarray, on_s: np.ndarray, r_bar: int) -> float:
        """Closed-form :math:`C` from the inclusion probabilities."""

    def check_encoder(self, encoder: Encoder) -> None:
        """Raise ``ValueError`` if the protocol cannot carry this encoder's messages."""

    def expected_bits(self, encoder: Encoder, X: Any) -> float:
        r"""The closed-form expected total :math:`C = \mathbb E\sum_i \beta(Y_i)` of K3."""
        if not isinstance(encoder, Encoder):
            raise TypeError(f"encoder must be an Encoder, got {type(encoder).__name__}")
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
        """Serialise every node's message; one ``bytes`` per node.

        Raises
        ------
        ValueError
            The protocol cannot carry ``encoded``, or a value or centre overflows the ``r``-bit
            float of the wire (e.g. ``1e6`` with ``r = 16``): refused, never sent as ``inf``.
        """
        check_encoded(encoded)
        self.check_applicable(encoded)
        self._check_fits(encoded)
        out = []
        flags = int(encoded.centre_sent) | (int(encoded.rotation_seed is not None) << 1)
        data = np.dtype(encoded.dtype)
        dcode = 0 if data.itemsize * 8 == self.r else _DTYPE_CODES.get(data.name, 0)
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
                dcode,
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

    def _check_fits(self, encoded: Encoded) -> None:
        """Refuse values and centres that overflow this protocol's ``r``-bit floats."""
        for i, m in enumerate(encoded.nodes):
            check_fits_float(m.values, self.r, f"node {i}'s encoded values")
            if encoded.centre_sent or self.name in ("naive", "binary"):
                check_fits_float(np.array([m.centre]), self.r, f"node {i}'s centre mu")

    def framing_bits(self, encoded: Encoded) -> np.ndarray:
        """Per-node framing bits: message length in bits minus :meth:`payload_bits`."""
        lengths = np.array([8 * len(b) for b in self.to_bytes(encoded)], dtype=np.int64)
        return lengths - self.payload_bits(encoded)

    def from_bytes(self, messages: list[bytes], d: int) -> Encoded:
        r"""Parse messages produced by :meth:`to_bytes` back into an :class:`Encoded`.

        Parameters
        ----------
        messages : list of bytes
            One message per node.
        d : int
            Dimension the receiver expects (checked against each header): the data's, or for a
            rotated message (K5.2) either the data's or its padded one (``Encoded.d``), so
            ``from_bytes(to_bytes(e), d=e.d)`` gives back ``e``.

        Raises
        ------
        ValueError
            Truncated, extended, corrupted (CRC mismatch) or foreign messages, a header that
            disagrees with ``d`` or with the message length, or an invalid payload.
        TypeError
            ``messages`` is not a list of bytes, or ``d`` is not an integer.

        Notes
        -----
        Bytes from outside are hostile. Before anything is allocated or generated, every header
        field is checked against ``d`` and this protocol: magic, version, protocol and float
        width codes, known flags only, the data-dtype code (the sender's float, rebuilt exactly:
        0 for the wire's own width), the dimension (``d``, or its power of
        two when the rotation flag is set, K5.2), no rotation seed without the rotation flag, the
        sampling parameter against its scheme (:math:`p \in (0, 1]`, an integer
        :math:`k \in [1, d]`, or NaN), ``count`` against the dimension, and the payload length
        the header implies (K3: :math:`\beta(Y_i)` from ``d``, ``count`` and the flags) against the
        message length, up to the final padding, which must be zero. The payload is then checked
        too: finite values, indices in range and increasing, flag counts equal to ``count``, a
        regenerated support of ``count`` entries. The work is :math:`O(\text{len} + d)`.
        """
        if isinstance(messages, (bytes, bytearray)) or not isinstance(messages, (list, tuple)):
            raise TypeError("messages must be a list of bytes objects, one per node")
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise TypeError(f"d must be an integer in [1, {_MAX_D}], got {d!r}")
        if not 1 <= d <= _MAX_D:
            raise ValueError(f"d must be in [1, {_MAX_D}], got {d}")
        d = int(d)
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
        centre_sent, rotated, scheme, d_coded, original_d, rotation_seed, dtype = meta
        return Encoded(
            scheme=scheme,
            d=d_coded,
            dtype=dtype,
            nodes=tuple(nodes),
            centre_sent=centre_sent,
            rotation_seed=rotation_seed if rotated else None,
            original_d=original_d,
        )

    def _parse(self, msg: bytes, d: int, i: int) -> tuple[NodeMessage, tuple]:
        where = f"messages[{i}]"
        try:
            return self._parse_checked(msg, d)
        except ValueError as exc:
            raise ValueError(f"{where} {exc}") from None

    def _parse_checked(self, msg: bytes, d: int) -> tuple[NodeMessage, tuple]:
        """Check the header against ``d`` and the message length, then read the payload.

        Every header field is checked before anything of its size is allocated or generated:
        the payload length the header implies (:meth:`_bits`) must equal the message's, so the
        work is bounded by the message length and the receiver's ``d``.
        """
        if len(msg) < _HEADER.size + _CRC_BYTES:
            raise ValueError(f"is truncated: {len(msg)} bytes, shorter than the header")
        body = memoryview(msg)[:-_CRC_BYTES]  # no copy
        crc = struct.unpack(">I", msg[-_CRC_BYTES:])[0]
        if zlib.crc32(body) != crc:
            raise ValueError("is corrupted or truncated: CRC-32 mismatch")
        (
            magic,
            ver,
            proto,
            rcode,
            flags,
            scheme_code,
            dcode,
            d_coded,
            original_d,
            count,
            rate,
            rseed,
        ) = _HEADER.unpack_from(body)
        if magic != _MAGIC or ver != _VERSION:
            raise ValueError(f"is not a cvfl K3 message (magic {magic!r}, version {ver})")
        if proto != self.code:
            raise ValueError(f"was written by protocol code {proto}, not {self.name}")
        if _R_FROM_CODE.get(rcode) != self.r:
            raise ValueError(f"has float width code {rcode}; this protocol has r={self.r}")
        if flags & ~(_FLAG_CENTRE | _FLAG_ROTATED):
            raise ValueError(f"has unknown flags {flags:#04x} (allowed: 0x01 centre, 0x02 rotated)")
        if scheme_code >= len(_SCHEMES):
            raise ValueError(f"has an unknown sampling scheme code {scheme_code}")
        if dcode == 0:
            dtype = float_dtype(self.r).newbyteorder("=")
        elif dcode in _DTYPE_FROM_CODE and _DTYPE_FROM_CODE[dcode].itemsize * 8 != self.r:
            dtype = _DTYPE_FROM_CODE[dcode]
        else:  # unknown, or the wire's own width (which is written as 0): not a cvfl writer's
            raise ValueError(f"has a bad data-dtype code {dcode}")
        centre_sent, rotated = bool(flags & _FLAG_CENTRE), bool(flags & _FLAG_ROTATED)
        # the receiver's d is the data's dimension, or for a rotated message its padded one
        if original_d != d and not (rotated and d == d_coded == padded_dimension(original_d)):
            raise ValueError(f"has dimension {original_d}, which does not match d={d}")
        expected_coded = padded_dimension(original_d) if rotated else original_d
        if d_coded != expected_coded:
            raise ValueError(
                f"has coded dimension {d_coded}; d={d} needs {expected_coded}"
                + (" (padded to a power of two for the rotation)" if rotated else "")
            )
        if not rotated and rseed != 0:
            raise ValueError(f"has a rotation seed {rseed} but no rotation flag")
        scheme = _SCHEMES[scheme_code]
        _check_rate(scheme, rate, d_coded)
        if count > d_coded:
            raise ValueError(f"claims {count} entries, more than the dimension {d_coded}")
        self._check_count(d_coded, count)
        self._check_scheme(scheme, rate, count)
        rd = BitReader(body, start_bit=8 * _HEADER.size)
        need = self._bits(d_coded, centre_sent, count)
        if not 0 <= rd.remaining - need < 8:
            raise ValueError(
                f"has {rd.remaining} payload and padding bits; its header implies {need} "
                f"payload bits (d={d_coded}, count={count}): truncated, extended or corrupted"
            )
        support, values, centre, seed = self._read_payload(
            rd, d_coded, centre_sent, count, scheme, rate
        )
        if rd.pos != 8 * _HEADER.size + need or not rd.padding_is_zero():
            raise ValueError("has a payload that does not end where its header says: corrupted")
        typed = values  # read as the wire's floats: the sender's dtype when the code is 0
        if dtype != values.dtype:  # a narrower sender: each value must be one of its numbers
            typed = values.astype(dtype)
            if not np.array_equal(typed.astype(values.dtype), values):
                raise ValueError(
                    f"has values that are not {dtype.name} numbers, as its header says"
                )
        node = NodeMessage(support, typed, centre, seed, rate)
        return node, (centre_sent, rotated, scheme, d_coded, original_d, rseed, dtype)

    def _check_count(self, d: int, count: int) -> None:
        """Raise ``ValueError`` if the header ``count`` is impossible for dimension ``d``."""

    def _check_scheme(self, scheme: str, rate: float, count: int) -> None:
        """Raise ``ValueError`` if this protocol cannot have carried ``scheme``."""

    # --------------------------------------------------------------- helpers
    def _write_centre(self, w: BitWriter, m: NodeMessage, encoded: Encoded) -> None:
        if encoded.centre_sent:
            w.write_floats(np.array([m.centre]), self.r)

    def _read_centre(self, rd: BitReader, centre_sent: bool) -> float:
        return float(_finite(rd.read_floats(1, self.r), "centre")[0]) if centre_sent else 0.0


def _finite(values: np.ndarray, what: str) -> np.ndarray:
    """``values`` if all finite, else ``ValueError`` (no encoder sends NaN or inf)."""
    if not np.isfinite(values).all():
        raise ValueError(f"has non-finite {what} (NaN or inf): corrupted")
    return values


def _check_rate(scheme: str, rate: float, d: int) -> None:
    """The header's sampling parameter must fit its scheme (see :attr:`NodeMessage.rate`)."""
    if scheme == "bernoulli":
        ok = 0.0 < rate <= 1.0  # False for NaN
        allowed = "p in (0, 1]"
    elif scheme == "k-subset":
        ok = rate == rate // 1 and 1 <= rate <= d  # False for NaN and inf
        allowed = f"an integer k in [1, {d}]"
    else:
        ok = math.isnan(rate)
        allowed = "NaN (per-entry probabilities)"
    if not ok:
        raise ValueError(
            f"has sampling parameter {rate!r} for scheme {scheme!r}; allowed: {allowed}"
        )


def _nonzero(m: NodeMessage) -> tuple[np.ndarray, np.ndarray]:
    keep = m.values != m.values.dtype.type(m.centre)
    return m.support[keep], m.values[keep]


class NaiveProtocol(Protocol):
    r"""Send every :math:`Y_i(j)` as an ``r``-bit float: :math:`\beta(Y_i) = dr`."""

    name = "naive"
    code = 0

    def _bits(self, d, centre_sent, count):
        return d * self.r

    def _count(self, m, encoded):
        return encoded.d

    def _expected(self, n, d, p, on_s, r_bar):
        return n * d * self.r

    def _write_payload(self, w, m, encoded):
        Y = np.full(encoded.d, m.centre, dtype=encoded.dtype)
        Y[m.support] = m.values
        w.write_floats(Y, self.r)
        return encoded.d

    def _check_count(self, d, count):
        if count != d:
            raise ValueError(f"has count {count}; the naive protocol sends all d={d} entries")

    def _read_payload(self, rd, d, centre_sent, count, scheme, rate):
        Y = _finite(rd.read_floats(d, self.r), "values")
        return np.arange(d, dtype=np.int64), Y, 0.0, 0


class VaryingLengthProtocol(Protocol):
    r"""One flag bit per entry, then ``r`` bits for each :math:`Y_i(j) \ne \mu_i`.

    :math:`\beta(Y_i) = \bar r + d + r s_i`.
    """

    name = "varying-length"
    code = 1

    def _bits(self, d, centre_sent, count):
        return self.r_bar(centre_sent) + d + self.r * count

    def _count(self, m, encoded):
        return m.n_nonzero

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
        if idx.size != count:
            raise ValueError(f"has {idx.size} flags set but count {count}: corrupted")
        return idx, _finite(rd.read_floats(count, self.r), "values"), centre, 0


class SparseProtocol(Protocol):
    r"""(index, value) pairs of the entries :math:`Y_i(j) \ne \mu_i`.

    :math:`\beta(Y_i) = \bar r + (\lceil \log_2 d \rceil + r) s_i`; the count :math:`s_i` is framing.
    """

    name = "sparse"
    code = 2

    def _bits(self, d, centre_sent, count):
        return self.r_bar(centre_sent) + (index_bits(d) + self.r) * count

    def _count(self, m, encoded):
        return m.n_nonzero

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
        idx = rd.read_uint(count, index_bits(d)).astype(np.int64)
        if idx.size and (idx.max() >= d or np.any(np.diff(idx) <= 0)):
            raise ValueError("has indices out of range or not increasing: corrupted")
        return idx, _finite(rd.read_floats(count, self.r), "values"), centre, 0


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

    def _bits(self, d, centre_sent, count):
        return self.r_bar(centre_sent) + self.r_seed + self.r * count

    def _count(self, m, encoded):
        return int(m.support.size)

    def _check_scheme(self, scheme, rate, count):
        if scheme not in SEEDED_SCHEMES:
            raise ValueError(
                f"has sampling scheme {scheme!r}; the seeded protocol needs one of {SEEDED_SCHEMES}"
            )
        if scheme == "k-subset" and count != int(rate):
            raise ValueError(f"has count {count} but k = {int(rate)}: corrupted")

    def _expected(self, n, d, p, on_s, r_bar):
        return n * (r_bar + self.r_seed) + self.r * float(np.sum(p))

    def _write_payload(self, w, m, encoded):
        self._write_centre(w, m, encoded)
        w.write_uint([m.seed], self.r_seed)
        w.write_floats(m.values, self.r)
        return int(m.support.size)

    def _read_payload(self, rd, d, centre_sent, count, scheme, rate):
        # the header was checked (scheme, rate range, count <= d, exact payload length), so the
        # regeneration below costs O(d) for the receiver's own d
        centre = self._read_centre(rd, centre_sent)
        seed = int(rd.read_uint(1, self.r_seed)[0])
        if scheme == "bernoulli":
            idx = bernoulli_support(seed, rate, d)
        else:
            idx = k_subset_support(seed, int(rate), d)
        if idx.size != count:
            raise ValueError(
                f"regenerated support has {idx.size} entries but the message has {count}: corrupted"
            )
        return idx, _finite(rd.read_floats(count, self.r), "values"), centre, seed


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

    @staticmethod
    def _two_levels(m: NodeMessage, d: int) -> bool:
        """Whether :math:`Y_i` surely takes at most two values: every one is its min or max.

        ``False`` is not a verdict (NaN compares unequal): :meth:`_levels` then decides.
        """
        v = m.values
        if m.support.size < d:
            v = np.append(v, v.dtype.type(m.centre))
        if v.size == 0:
            return True
        lo, hi = v.min(), v.max()
        return bool(((v == lo) | (v == hi)).all())

    def check_applicable(self, encoded):
        """Each :math:`Y_i` must take at most two distinct values."""
        for i, m in enumerate(encoded.nodes):
            if not self._two_levels(m, encoded.d) and self._levels(m, encoded.d).size > 2:
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

    def _bits(self, d, centre_sent, count):
        return 2 * self.r + d

    def _count(self, m, encoded):
        return 0

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

    def _check_count(self, d, count):
        if count != 0:
            raise ValueError(f"has count {count}; the binary protocol's count field is 0")

    def _read_payload(self, rd, d, centre_sent, count, scheme, rate):
        lo, hi = _finite(rd.read_floats(2, self.r), "levels")
        idx = np.flatnonzero(rd.read_flags(d)).astype(np.int64)
        if lo == hi and idx.size:
            raise ValueError("has flags set although its two levels are equal: corrupted")
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
