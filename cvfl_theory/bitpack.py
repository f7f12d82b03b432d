r"""Bit-exact packing of unsigned integers, IEEE floats and flags (MSB first).

The wire formats of :mod:`cvfl_theory.protocols` and :mod:`cvfl_theory.compressors` are built from
these two classes, so a payload of :math:`\beta` bits occupies exactly :math:`\beta` bits of the
message (K3.1); only the header, checksum and the final padding to whole bytes are framing.

Fields whose width is a multiple of 8 written at a byte boundary take a fast path (plain big-endian
bytes); everything else is packed bit by bit, vectorised in chunks.

Examples
--------
>>> w = BitWriter()
>>> w.write_uint([5, 0, 3], width=3)
>>> w.write_floats(np.array([1.5], dtype=np.float32), r=32)
>>> w.nbits
41
>>> r = BitReader(w.getvalue())
>>> r.read_uint(3, width=3).tolist(), r.read_floats(1, r=32).tolist()
([5, 0, 3], [1.5])
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["BitWriter", "BitReader", "FLOAT_DTYPES", "float_dtype"]

FLOAT_DTYPES: dict[int, np.dtype] = {16: np.dtype(">f2"), 32: np.dtype(">f4"), 64: np.dtype(">f8")}
_UINT_BE: dict[int, np.dtype] = {
    8: np.dtype(">u1"),
    16: np.dtype(">u2"),
    32: np.dtype(">u4"),
    64: np.dtype(">u8"),
}
_CHUNK = 1 << 16
_READ_CHUNK_BITS = 1 << 20


def float_dtype(r: int) -> np.dtype:
    """Return the big-endian IEEE dtype of ``r`` bits (16, 32 or 64)."""
    try:
        return FLOAT_DTYPES[int(r)]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"r must be one of 16, 32, 64 (bits per float), got {r!r}") from None


def _uint_bits(values: np.ndarray, width: int) -> np.ndarray:
    """Expand ``values`` into a flat 0/1 ``uint8`` array, ``width`` bits each, MSB first."""
    shifts = np.arange(width - 1, -1, -1, dtype=np.uint64)
    out = np.empty(values.size * width, dtype=np.uint8)
    for start in range(0, values.size, _CHUNK):
        block = values[start : start + _CHUNK]
        bits = (block[:, None] >> shifts) & np.uint64(1)
        out[start * width : (start + block.size) * width] = bits.ravel()
    return out


class BitWriter:
    """Append fields to a bit string; :meth:`getvalue` pads with zeros to whole bytes."""

    def __init__(self) -> None:
        self._segments: list[tuple[bool, np.ndarray]] = []  # (is_bytes, data)
        self.nbits = 0

    def _append_bits(self, bits: np.ndarray) -> None:
        if bits.size:
            self._segments.append((False, bits.astype(np.uint8, copy=False)))
            self.nbits += int(bits.size)

    def _append_bytes(self, raw: np.ndarray) -> None:
        if raw.size:
            self._segments.append((True, raw))
            self.nbits += 8 * int(raw.size)

    def write_uint(self, values: Iterable[int] | np.ndarray, width: int) -> None:
        """Write unsigned integers of ``width`` bits each (``0 <= width <= 64``).

        Raises
        ------
        ValueError
            If a value does not fit in ``width`` bits.
        """
        v = np.asarray(values, dtype=np.uint64).ravel()
        if not 0 <= width <= 64:
            raise ValueError(f"width must be in [0, 64], got {width}")
        if width == 0 or v.size == 0:
            if width == 0 and v.size and v.max() != 0:
                raise ValueError("a value does not fit in 0 bits")
            return
        if width < 64 and v.size and int(v.max()) >> width:
            raise ValueError(f"value {int(v.max())} does not fit in {width} bits")
        if width in _UINT_BE and self.nbits % 8 == 0:
            self._append_bytes(v.astype(_UINT_BE[width]).view(np.uint8))
        else:
            self._append_bits(_uint_bits(v, width))

    def write_floats(self, values: np.ndarray, r: int) -> None:
        """Write floats as IEEE ``r``-bit patterns (values are cast to that precision)."""
        dt = float_dtype(r)
        raw = np.ascontiguousarray(np.asarray(values).astype(dt)).reshape(-1).view(np.uint8)
        if self.nbits % 8 == 0:
            self._append_bytes(raw)
        else:
            self._append_bits(np.unpackbits(raw))

    def write_flags(self, flags: np.ndarray) -> None:
        """Write a boolean array, one bit per element."""
        self._append_bits(np.asarray(flags, dtype=bool).astype(np.uint8).ravel())

    def chunks(self) -> list[memoryview]:
        """The packed bytes as a list of buffers (no copy when every field was byte-aligned).

        ``b"".join(w.chunks()) == w.getvalue()``; a caller assembling a larger message can join
        them with its own header in one copy.
        """
        if all(is_bytes for is_bytes, _ in self._segments):
            return [seg.data for _, seg in self._segments]
        return [memoryview(self.getvalue())]

    def getvalue(self) -> bytes:
        """Return the bits packed into bytes, zero-padded at the end."""
        if all(is_bytes for is_bytes, _ in self._segments):
            return b"".join(self.chunks())
        parts = [np.unpackbits(seg) if is_bytes else seg for is_bytes, seg in self._segments]
        bits = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        return np.packbits(bits).tobytes()


class BitReader:
    """Read fields written by :class:`BitWriter`, in the same order.

    Every read checks that the message holds the bits it asks for *before* allocating anything,
    and the temporary memory of a read is bounded (bits are unpacked in chunks of at most
    ``2**20``), so the work and memory of parsing a hostile message are bounded by its length.

    Raises
    ------
    ValueError
        When a read runs past the end of the data (a truncated message).
    """

    def __init__(self, data: bytes | bytearray | memoryview, start_bit: int = 0) -> None:
        self._buf = np.frombuffer(data, np.uint8)
        if not 0 <= start_bit <= 8 * int(self._buf.size):
            raise ValueError(f"message truncated: {8 * self._buf.size} bits, start at {start_bit}")
        self.pos = start_bit

    @property
    def nbits(self) -> int:
        """Total number of bits available."""
        return 8 * int(self._buf.size)

    @property
    def remaining(self) -> int:
        """Bits not read yet."""
        return self.nbits - self.pos

    def require(self, n: int, what: str = "fields") -> None:
        """Raise ``ValueError`` unless at least ``n`` more bits are available (``what`` names them)."""
        if n < 0 or self.pos + n > self.nbits:
            raise ValueError(
                f"message truncated: {what} need {n} more bits at bit {self.pos}, "
                f"have {self.nbits - self.pos}"
            )

    def padding_is_zero(self) -> bool:
        """True if the bits after :attr:`pos` up to the next byte boundary are all zero."""
        if self.pos % 8 == 0 or self.pos >= self.nbits:
            return True
        byte = int(self._buf[self.pos // 8])
        return byte & ((1 << (8 - self.pos % 8)) - 1) == 0

    def _take_bits(self, n: int) -> np.ndarray:
        self.require(n)
        first, last = self.pos // 8, (self.pos + n + 7) // 8
        bits = np.unpackbits(self._buf[first:last])
        off = self.pos - 8 * first
        self.pos += n
        return bits[off : off + n]

    def _take_bytes(self, n: int) -> np.ndarray:
        self.require(8 * n)
        b = self._buf[self.pos // 8 : self.pos // 8 + n]
        self.pos += 8 * n
        return b

    def read_uint(self, count: int, width: int, dtype: type | np.dtype = np.uint64) -> np.ndarray:
        """Read ``count`` unsigned integers of ``width`` bits into an unsigned ``dtype`` array.

        ``dtype`` (default ``uint64``) must hold ``width`` bits; a narrower result saves memory.
        """
        out_dt = np.dtype(dtype)
        if out_dt.kind != "u" or not 0 <= width <= 8 * out_dt.itemsize:
            raise ValueError(
                f"width must be in [0, {8 * out_dt.itemsize}] for {out_dt}, got {width}"
            )
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        self.require(count * width)
        if width == 0 or count == 0:
            return np.zeros(count, out_dt)
        if width in _UINT_BE and self.pos % 8 == 0:
            return self._take_bytes(count * width // 8).view(_UINT_BE[width]).astype(out_dt)
        out = np.empty(count, out_dt)
        step = max(1, _READ_CHUNK_BITS // width)
        for start in range(0, count, step):
            m = min(step, count - start)
            bits = self._take_bits(m * width).reshape(m, width)
            acc = out[start : start + m]
            acc[...] = bits[:, 0]
            for col in range(1, width):  # shift in place, in the narrow dtype: no temporaries
                acc <<= out_dt.type(1)
                acc |= bits[:, col]
        return out

    def read_floats(self, count: int, r: int) -> np.ndarray:
        """Read ``count`` IEEE floats of ``r`` bits; returns native-endian floats of that size."""
        dt = float_dtype(r)
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if self.pos % 8 == 0:
            raw = self._take_bytes(count * r // 8)  # a view of the message: no copy
        else:
            raw = np.packbits(self._take_bits(count * r))
        return raw.view(dt).astype(dt.newbyteorder("="))

    def read_flags(self, count: int) -> np.ndarray:
        """Read ``count`` one-bit flags as a boolean array."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        return self._take_bits(count).view(bool)
