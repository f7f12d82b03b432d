r"""K3.1 and C5 bit counts of the real bytes, parsed independently of the package's wire code.

``8 * len(message) == payload_bits + framing_bits`` holds by construction (framing is defined as
the difference), so it cannot catch a wire that writes wider fields. This module parses the bytes
itself, from the documented layouts only (the module docstrings of :mod:`cvfl_theory.protocols`
and :mod:`cvfl_theory.compressors.base`), with :mod:`struct` and Python integers — no
``BitReader``, no ``payload_bits``, no ``_read_payload``:

1. locate the payload: after the fixed header (K3: 36 bytes; C5: 41 bytes, then the configuration
   and device strings whose lengths the header gives), before the 4-byte CRC;
2. count the bits K3 prescribes, from the *encoder output* (K3: :math:`s_i` counted on the
   decoded :math:`Y_i`, the support size :math:`|D_i|`, ``d``, ``r``, :math:`\bar r`,
   :math:`\bar r_s`; C5: :math:`qBP` plus the range floats, :math:`\lceil\log_2 N\rceil` bits per
   pair, top-k values plus positions as the compressor documents);
3. require ``payload region = prescribed bits + padding`` with fewer than 8 zero padding bits;
4. read every field at the prescribed width and compare it with the encoder output (indices with
   the support, flags with :math:`Y_i \ne \mu_i`, values, seeds, ranges).

Each function returns the list of discrepancies (empty: the wire is exactly as prescribed).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

K3_HEADER_BYTES = 36  # magic 2, version, protocol, r-code, flags, scheme, reserved, 3 x 4, 8, 8
C5_FIXED_BYTES = 41  # magic 4, version, dtype, ndim, B 4, P 4, torch, has-seed, seed 8, 8, 8
CRC_BYTES = 4
_FLOAT = {16: ">e", 32: ">f", 64: ">d"}


class _Bits:
    """An MSB-first cursor over ``data`` reading integers of any width with Python ints."""

    def __init__(self, data: bytes, start: int, end: int) -> None:
        self.data, self.pos, self.end = data, start, end

    def uint(self, width: int) -> int:
        if width == 0:
            return 0
        if self.pos + width > self.end:
            raise ValueError("field runs past the payload region")
        first, last = self.pos // 8, (self.pos + width + 7) // 8
        chunk = int.from_bytes(self.data[first:last], "big")
        shift = 8 * (last - first) - (self.pos - 8 * first) - width
        self.pos += width
        return (chunk >> shift) & ((1 << width) - 1)

    def float(self, r: int) -> float:
        return float(struct.unpack(_FLOAT[r], self.uint(r).to_bytes(r // 8, "big"))[0])


def _ceil_log2(n: int) -> int:
    return 0 if n <= 1 else math.ceil(math.log2(n))


def _region(msg: bytes, start_byte: int, prescribed: int, what: str) -> tuple[list[str], int]:
    """Compare the payload region with the prescribed bits; return (errors, region end bit)."""
    end = 8 * (len(msg) - CRC_BYTES)
    region = end - 8 * start_byte
    errors = []
    if not 0 <= region - prescribed < 8:
        errors.append(f"{what}: payload region has {region} bits, prescribed {prescribed} (+<8)")
    else:
        pad = _Bits(msg, 8 * start_byte + prescribed, end).uint(region - prescribed)
        if pad:
            errors.append(f"{what}: padding bits are not zero")
    return errors, end


def k3_prescribed_bits(name: str, r: int, r_seed: int, d: int, rbar: int, s: int, D: int) -> int:
    r"""β(Y_i) of K3 (``s`` = :math:`s_i`, ``D`` = :math:`|D_i|`)."""
    return {
        "naive": d * r,
        "varying-length": rbar + d + r * s,
        "sparse": rbar + (_ceil_log2(d) + r) * s,
        "seeded-sparse": rbar + r_seed + r * D,
        "binary": 2 * r + d,
    }[name]


def k3_layout_errors(proto: Any, encoded: Any, messages: list[bytes]) -> list[str]:
    """Discrepancies between K3 messages and the layout K3 prescribes (K3.1).

    ``encoded`` is the encoder output the messages were written from; ``proto`` gives only the
    protocol's name, ``r`` and ``r_seed``.
    """
    from cvfl_theory.encoded import dense_coded  # the encoder output as (n, d), not wire code

    name, r, r_seed = proto.name, int(proto.r), int(proto.r_seed)
    d = int(encoded.d)
    rbar = r if encoded.centre_sent else 0
    Y = dense_coded(encoded)
    ft = np.dtype(_FLOAT[r])
    errors: list[str] = []
    for i, (m, msg) in enumerate(zip(encoded.nodes, messages)):
        where = f"{name} node {i}"
        centre = ft.type(m.centre)
        y = Y[i].astype(ft)
        off = y != centre
        s_i = int(np.count_nonzero(off))
        prescribed = k3_prescribed_bits(name, r, r_seed, d, rbar, s_i, int(m.support.size))
        errs, end = _region(msg, K3_HEADER_BYTES, prescribed, where)
        errors += errs
        if errs:
            continue
        b = _Bits(msg, 8 * K3_HEADER_BYTES, end)
        try:
            if name != "binary" and name != "naive" and rbar and b.float(r) != centre:
                errors.append(f"{where}: centre field differs")
            if name == "naive":
                got = np.array([b.float(r) for _ in range(d)], ft)
                if not np.array_equal(got, y):
                    errors.append(f"{where}: values differ")
            elif name == "varying-length":
                flags = np.array([b.uint(1) for _ in range(d)], bool)
                vals = np.array([b.float(r) for _ in range(s_i)], ft)
                if not np.array_equal(flags, off) or not np.array_equal(vals, y[off]):
                    errors.append(f"{where}: flags or values differ")
            elif name == "sparse":
                width = _ceil_log2(d)
                idx = np.array([b.uint(width) for _ in range(s_i)], np.int64)
                vals = np.array([b.float(r) for _ in range(s_i)], ft)
                if not np.array_equal(idx, np.flatnonzero(off)) or not np.array_equal(vals, y[off]):
                    errors.append(f"{where}: indices or values differ from the support")
            elif name == "seeded-sparse":
                if b.uint(r_seed) != int(m.seed):
                    errors.append(f"{where}: seed field differs")
                vals = np.array([b.float(r) for _ in range(m.support.size)], ft)
                if not np.array_equal(vals, y[m.support]):
                    errors.append(f"{where}: values differ")
            else:  # binary
                lo, hi = ft.type(b.float(r)), ft.type(b.float(r))
                flags = np.array([b.uint(1) for _ in range(d)], bool)
                if not np.array_equal(np.where(flags, hi, lo), y):
                    errors.append(f"{where}: levels or flags differ from Y")
        except ValueError as exc:
            errors.append(f"{where}: {exc}")
    return errors


def c5_prescribed_bits(comp: Any, B: int, P: int) -> int:
    """Payload bits of C5 for a compressor's documented wire (values, indices, sent ranges)."""
    kind = type(comp).__name__
    if kind == "Identity":
        return comp.r * B * P
    if kind == "TopK":
        k = comp.k if comp.k is not None else max(1, P * comp.bits // 32)
        return B * (k * comp.r + min(P, k * _ceil_log2(P)))
    ranges = {"minmax-row": 64 * B, "minmax-tensor": 64}.get(comp.range, 0)
    if kind == "ScalarQuantizer":
        return comp.bits * B * P + ranges
    return B * ((P + 1) // 2) * _ceil_log2(comp.codebook_size) + ranges  # hexagonal


def c5_layout_errors(c: Any, msg: bytes) -> list[str]:
    """Discrepancies between a compressor message and the layout C5 prescribes."""
    comp = c.compressor
    kind = type(comp).__name__
    B, P = (1, c.shape[0]) if len(c.shape) == 1 else c.shape
    clen = int.from_bytes(msg[C5_FIXED_BYTES : C5_FIXED_BYTES + 2], "big")
    dlen = msg[C5_FIXED_BYTES + 2 + clen]
    start = C5_FIXED_BYTES + 2 + clen + 1 + dlen
    errors, end = _region(msg, start, c5_prescribed_bits(comp, B, P), kind)
    if errors:
        return errors
    b = _Bits(msg, 8 * start, end)
    data = c.data
    try:
        if kind == "Identity":
            got = np.array([b.float(comp.r) for _ in range(B * P)])
            if not np.array_equal(got, data["values"].ravel().astype(np.float64)):
                errors.append("identity: values differ")
        elif kind == "TopK":
            k = data["values"].shape[1]
            vals = np.array([b.float(comp.r) for _ in range(B * k)])
            if not np.array_equal(vals, data["values"].ravel().astype(np.float64)):
                errors.append("top-k: values differ")
            width = _ceil_log2(P)
            if P <= k * width:  # positions as a P-bit mask per row
                mask = np.array([b.uint(1) for _ in range(B * P)], bool).reshape(B, P)
                cols = np.array([np.flatnonzero(row) for row in mask], dtype=object)
                ok = all(np.array_equal(cc, ii) for cc, ii in zip(cols, data["idx"]))
            else:
                cols = np.array([b.uint(width) for _ in range(B * k)]).reshape(B, k)
                ok = np.array_equal(cols, data["idx"])
            if not ok:
                errors.append("top-k: positions differ")
        else:
            if isinstance(comp.range, str):
                n = B if comp.range == "minmax-row" else 1
                pairs = np.array([b.float(32) for _ in range(2 * n)]).reshape(n, 2)
                if not (
                    np.array_equal(pairs[:, 0], data["lo"].astype(np.float64))
                    and np.array_equal(pairs[:, 1], data["hi"].astype(np.float64))
                ):
                    errors.append(f"{kind}: transmitted range differs")
            width = comp.bits if kind == "ScalarQuantizer" else _ceil_log2(comp.codebook_size)
            idx = np.array([b.uint(width) for _ in range(data["idx"].size)])
            if not np.array_equal(idx, data["idx"].ravel()):
                errors.append(f"{kind}: codeword indices differ")
    except ValueError as exc:
        errors.append(f"{kind}: {exc}")
    return errors
