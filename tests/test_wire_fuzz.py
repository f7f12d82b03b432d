"""Hostile bytes: a derandomised fuzz of both wire formats (K3 protocols, C5 compressor messages).

Every corruption of a valid message must end in a ``ValueError`` or in a correct decode: equal to
the original when the bytes are unchanged, finite and of the expected shape otherwise. Never
another exception, and never more memory than a bound linear in the message length plus the
output the caller fixed (measured with ``tracemalloc``, which tracks numpy's allocations).

Corruptions (fixed seed, so the same bytes every run): single bit flips, truncations,
extensions, byte-range overwrites and random bytes, each with the original CRC (which must catch
them) and with the CRC **recomputed** (a forger's message, which the header and payload checks
must catch), plus every header field set to boundary and random values with the CRC recomputed,
and, for the compressor format, forged configuration and device strings: about 20 000 messages.
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from cvfl_theory import (
    BinaryQuantizationEncoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
    decode,
)
from cvfl_theory.bitpack import BitReader, BitWriter
from cvfl_theory.compressors import (
    Compressed,
    HexLatticeQuantizer,
    Identity,
    ScalarQuantizer,
    TopK,
)
from cvfl_theory.encoded import average
from cvfl_theory.protocols import PROTOCOLS, Protocol, applicable_protocols

SEED = 20261130
N_EACH = 12  # random corruptions of each kind per message

# Memory bound: peak <= K_MSG * len(message) + C_OUT * (output entries) + CONST bytes.
# Parsing keeps at most a copy of the message and unpacks bit fields to one byte per bit (8 bytes
# per message byte), hence K_MSG = 16. The decoded output is fixed by the caller (d, or the
# expected shape): support indices, values and the dense Y, and for the rotation the float64
# transform with its sign vector, are a few 8-byte arrays of that size, hence C_OUT = 8 entries of
# 8 bytes per output entry. CONST = 8 KiB covers Python objects (header tuples, exception
# messages), independent of any size. (Measured worst case: 4.8 KiB above 8 len + 32 out.)
K_MSG = 16
C_OUT = 8 * 8
CONST = 8 * 1024


def with_crc(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "big")


def flip(data: bytes, bit: int) -> bytes:
    b = bytearray(data)
    b[bit // 8] ^= 0x80 >> (bit % 8)
    return bytes(b)


def interesting(width: int, rng: np.random.Generator) -> list[bytes]:
    """Boundary and random values of a big-endian unsigned field of ``width`` bytes."""
    top = (1 << (8 * width)) - 1
    vals = {0, 1, 2, 3, 7, 8, 255 & top, top, top >> 1, (top >> 1) + 1, top - 1}
    vals |= {int(v) for v in rng.integers(0, top, size=3, dtype=np.uint64, endpoint=True)}
    return [v.to_bytes(width, "big") for v in sorted(vals)]


def double_values() -> list[bytes]:
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 0.5, 1e-300, 5e-324, 2.0, 3.0, 7.5, 1e300]
    return [struct.pack(">d", v) for v in vals]


def corruptions(
    msg: bytes, fields: list[tuple[int, int]], rng: np.random.Generator
) -> Iterator[tuple[str, bytes]]:
    """Corrupted copies of ``msg`` (``fields``: header ``(offset, width)`` to forge)."""
    body, n = msg[:-4], len(msg)
    for _ in range(N_EACH):
        yield "flip", flip(msg, int(rng.integers(8 * n)))
        yield "flip+crc", with_crc(flip(body, int(rng.integers(8 * len(body)))))
        yield "truncate", msg[: int(rng.integers(n))]
        yield "truncate+crc", with_crc(body[: int(rng.integers(len(body)))])
        extra = rng.bytes(int(rng.integers(1, 17)))
        yield "extend", msg + extra
        yield "extend+crc", with_crc(body + extra)
        yield "extend-zeros+crc", with_crc(body + bytes(int(rng.integers(1, 9))))
        a, k = int(rng.integers(len(body))), int(rng.integers(1, 9))
        over = bytearray(body)
        over[a : a + k] = rng.bytes(len(over[a : a + k]))
        yield "overwrite+crc", with_crc(bytes(over))
        yield "random", rng.bytes(int(rng.integers(0, 2 * n)))
        yield "random+crc", with_crc(rng.bytes(int(rng.integers(0, 2 * n))))
    for off, width in fields:
        values = double_values() if width == -8 else interesting(width, rng)
        width = abs(width)
        for v in values:
            forged = bytearray(body)
            forged[off : off + width] = v
            yield f"field@{off}", with_crc(bytes(forged))
    yield "unchanged", msg


class Budget:
    """tracemalloc peak of one call, above what was allocated before it."""

    def __enter__(self) -> Budget:
        tracemalloc.reset_peak()
        self.base = tracemalloc.get_traced_memory()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = tracemalloc.get_traced_memory()[1] - self.base


@pytest.fixture(scope="module")
def traced():
    import torch  # noqa: F401 - imported before tracing starts (an import under tracemalloc is slow)

    tracemalloc.start()
    yield
    tracemalloc.stop()


def run_fuzz(
    original: bytes,
    fields: list[tuple[int, int]],
    parse: Callable[[bytes], object],
    check: Callable[[object, bool], None],
    bound: Callable[[int], int],
    rng: np.random.Generator,
    extra: Iterator[tuple[str, bytes]] = iter(()),
) -> dict[str, int]:
    """Feed every corruption to ``parse``; return counts of ``accepted``/``refused``."""
    counts = {"accepted": 0, "refused": 0}
    for label, bad in (*corruptions(original, fields, rng), *extra):
        with Budget() as b:
            try:
                out = parse(bad)
            except ValueError:
                out = None
            except Exception as exc:  # pragma: no cover - the failure being tested for
                pytest.fail(f"{label}: {type(exc).__name__}: {exc}")
        assert b.peak <= bound(len(bad)), f"{label}: {b.peak} bytes for a {len(bad)}-byte message"
        if out is None:
            assert bad != original, "the unchanged message was refused"
            counts["refused"] += 1
        else:
            check(out, bad == original)
            counts["accepted"] += 1
    return counts


# ----------------------------------------------------------------------------- K3 protocols
# header: magic(2) version(1) protocol(1) r-code(1) flags(1) scheme(1) data-dtype(1) d(4)
# original_d(4) count(4) rate(8, a double: forged with special values) rotation_seed(8)
K3_FIELDS = [(0, 2), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (7, 1), (8, 4), (12, 4), (16, 4)]
K3_FIELDS += [(20, -8), (20, 8), (28, 8)]

ENCODERS = [
    IndependentEncoder(0.4, mu="zero"),
    IndependentEncoder(np.array([[0.3], [0.9], [0.6]]), mu="mean"),
    IndependentEncoder(np.linspace(0.1, 1.0, 13)[None, :].repeat(3, axis=0)),
    FixedSizeEncoder(np.array([3, 1, 13]), mu="mean"),
    BinaryQuantizationEncoder(),
    RotatedBinaryEncoder(rotation_seed=5),
]
K3_CASES = [
    (cls, enc, r)
    for cls in PROTOCOLS.values()
    for enc in ENCODERS
    for r in (32, 16)
    if cls.name in {p.name for p in applicable_protocols(enc, r=r)}
]


@pytest.mark.parametrize(
    "cls,encoder,r", K3_CASES, ids=[f"{c.name}-{e!r}-r{r}" for c, e, r in K3_CASES]
)
def test_k3_messages_survive_hostile_bytes(traced, cls, encoder, r):
    d, n = 13, 3
    dtype = np.float32 if r == 32 else np.float16
    X = np.random.default_rng(1).normal(size=(n, d)).astype(dtype)
    X[1, 4] = 0.0
    encoded = encoder.encode(X, rng=7)
    proto: Protocol = cls(r=r)
    msgs = proto.to_bytes(encoded)
    Y0 = np.asarray(decode(encoded))
    d_coded = encoded.d

    def parse(bad: bytes) -> tuple[np.ndarray, np.ndarray]:
        back = proto.from_bytes([bad, *msgs[1:]], d)
        return np.asarray(decode(back)), np.asarray(average(back))

    def check(out: object, unchanged: bool) -> None:
        Y, avg = out  # type: ignore[misc]
        assert Y.shape == (n, d) and avg.shape == (d,)
        if unchanged:
            np.testing.assert_array_equal(Y, Y0)
        else:
            assert np.isfinite(Y).all() and np.isfinite(avg).all()

    def bound(length: int) -> int:
        return K_MSG * (length + sum(map(len, msgs))) + C_OUT * n * d_coded + CONST

    rng = np.random.default_rng([SEED, cls.code, ENCODERS.index(encoder), r])
    counts = run_fuzz(msgs[0], K3_FIELDS, parse, check, bound, rng)
    assert counts["refused"] > 0 and counts["accepted"] >= 1


def forge_k3(msg: bytes, **fields: object) -> bytes:
    """``msg`` with header fields replaced (by struct position name) and the CRC recomputed."""
    names = "magic ver proto rcode flags scheme reserved d_coded d count rate rseed".split()
    fmt = struct.Struct(">2sBBBBBBIIIdQ")
    values = dict(zip(names, fmt.unpack_from(msg)))
    values.update(fields)
    return with_crc(fmt.pack(*(values[k] for k in names)) + msg[fmt.size : -4])


def seeded_message(d: int = 8) -> tuple[bytes, Protocol]:
    X = np.random.default_rng(0).normal(size=(1, d)).astype(np.float32)
    proto = PROTOCOLS["seeded-sparse"](r=32)
    return proto.to_bytes(IndependentEncoder(0.5, mu="zero").encode(X, rng=1))[0], proto


@pytest.mark.parametrize(
    "fields,match",
    [
        ({"d_coded": 2**32 - 1}, "coded dimension"),  # the 56-byte, 16-32 GiB message
        ({"d_coded": 16}, "coded dimension"),
        ({"count": 2**32 - 1}, "more than the dimension"),
        ({"count": 3}, "payload bits|regenerated"),
        ({"rate": float("nan")}, "sampling parameter"),
        ({"rate": 2.0}, "sampling parameter"),
        ({"rate": 0.0}, "sampling parameter"),
        ({"rate": float("inf")}, "sampling parameter"),
        ({"reserved": 9}, "data-dtype code"),  # the data-dtype byte: unknown code
        ({"reserved": 2}, "data-dtype code"),  # the wire's own width, which is written as 0
        ({"reserved": 1}, "not float16 numbers"),  # float16 data: these values are not
        ({"flags": 0x84}, "unknown flags"),
        ({"rseed": 9}, "rotation seed"),
        ({"scheme": 1}, "scheme"),
        ({"scheme": 7}, "scheme"),
        ({"d": 9}, "d=8"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_k3_forged_header_fields_are_refused_quickly(traced, fields, match):
    msg, proto = seeded_message()
    forged = [forge_k3(msg, **fields)]
    with pytest.raises(ValueError, match=match):  # the regex is matched outside the budget
        with Budget() as b:
            proto.from_bytes(forged, 8)
    assert b.peak < CONST


def test_k3_rotated_dimension_must_be_the_padded_power_of_two():
    X = np.random.default_rng(2).normal(size=(2, 5))
    enc = RotatedBinaryEncoder(rotation_seed=1).encode(X, rng=0)
    proto = PROTOCOLS["binary"](r=64)
    msgs = proto.to_bytes(enc)
    assert proto.from_bytes(msgs, 5).d == 8
    for d_coded in (5, 16, 2**31):
        with pytest.raises(ValueError, match="needs 8"):
            proto.from_bytes([forge_k3(msgs[0], d_coded=d_coded), msgs[1]], 5)


def test_k3_rate_forgery_within_range_is_caught_by_the_regenerated_support():
    msg, proto = seeded_message(d=400)
    back = proto.from_bytes([msg], 400)
    with pytest.raises(ValueError, match="regenerated support"):
        proto.from_bytes([forge_k3(msg, rate=0.9)], 400)
    assert back.nodes[0].rate == 0.5


def test_k3_non_finite_payload_values_are_refused():
    X = np.ones((1, 4), np.float32)
    proto = PROTOCOLS["naive"](r=32)
    msg = proto.to_bytes(IndependentEncoder(1.0).encode(X, rng=0))[0]
    body = bytearray(msg[:-4])
    body[36:40] = struct.pack(">f", np.inf)
    with pytest.raises(ValueError, match="non-finite"):
        proto.from_bytes([with_crc(bytes(body))], 4)


@pytest.mark.parametrize("d", [0, -1, 2**32, True, 2.0, "8"])
def test_k3_receiver_dimension_is_checked(d):
    msg, proto = seeded_message()
    with pytest.raises((ValueError, TypeError), match="d must be"):
        proto.from_bytes([msg], d)


# ----------------------------------------------------------------------------- C5 compressors
# header: magic(4) version(1) dtype(1) ndim(1) B(4) P(4) torch(1) has-seed(1) seed(8)
# clipped(8) payload-length(8) config-length(2); then config, device length(1), device
C5_FIELDS = [(0, 4), (4, 1), (5, 1), (6, 1), (7, 4), (11, 4), (15, 1), (16, 1), (17, 8)]
C5_FIELDS += [(25, 8), (33, 8), (41, 2)]

COMPRESSORS = [
    (Identity(), (3, 7)),
    (ScalarQuantizer(2), (2, 3), "torch"),
    (Identity(r=16), (9,)),
    (ScalarQuantizer(1), (3, 7)),
    (ScalarQuantizer(3, range="minmax-tensor"), (2, 9)),
    (ScalarQuantizer(8, range=(-2.0, 2.0), dither=False), (4, 5)),
    (HexLatticeQuantizer(2, range=(-2.0, 2.0)), (3, 7)),
    (HexLatticeQuantizer(3), (2, 6)),
    (HexLatticeQuantizer(1, range=(-2.0, 2.0), dither=False), (2, 5)),  # 0-bit codebook
    (TopK(k=2), (3, 40)),
    (TopK(bits=16, r=16), (2, 6)),  # positions as a mask
]
COMPRESSORS = [(c[0], c[1], len(c) == 3) for c in COMPRESSORS]


def splice(msg: bytes, config: bytes | None = None, device: bytes | None = None) -> bytes:
    """``msg`` with its configuration and/or device string replaced, CRC recomputed."""
    clen = int.from_bytes(msg[41:43], "big")
    cfg = msg[43 : 43 + clen]
    dlen = msg[43 + clen]
    dev = msg[44 + clen : 44 + clen + dlen]
    rest = msg[44 + clen + dlen : -4]
    config = cfg if config is None else config
    device = dev if device is None else device
    head = msg[:41] + len(config).to_bytes(2, "big") + config + bytes([len(device)]) + device
    return with_crc(head + rest)


def config_forgeries(msg: bytes) -> Iterator[tuple[str, bytes]]:
    clen = int.from_bytes(msg[41:43], "big")
    cfg = msg[43 : 43 + clen]
    texts = [
        b"[" * 2000,
        b"[" * 500 + b"]" * 500,
        b'{"args": {"a": [[[[1]]]]}, "name": "identity"}',
        b'{"args": {"r": NaN}, "name": "identity"}',
        b'{"args": {"r": 1e999}, "name": "identity"}',
        b'{"args": {"r": 32.0}, "name": "identity"}',
        b'{"args": {"r": 32}, "name": "identity", "x": 1}',
        b'{"args": {"r":32}, "name": "identity"}',
        b'{"args": {"k": 2, "bits": null, "r": 32}, "name": "topk"}',
        b'{"args": {"bits": 3, "range": [0, 1, 2, 3, 4]}, "name": "scalar"}',
        b'{"args": {}, "name": "nope"}',
        b'{"args": {"__class__": 1}, "name": "identity"}',
        b"\xff\xfe",
        b"",
        b'"' + b"a" * 1020 + b'"',
        cfg.replace(b"32", b"64"),
        cfg.replace(b"true", b"false"),
        cfg.replace(b'"bits": 1', b'"bits": 2'),
    ]
    for t in texts:
        yield "config", splice(msg, config=t)
    for dev in (b"meta", b"cuda:7", b"cpu\x00", b"\xff", b"cpu" * 20, b"cpu", b""):
        yield "device", splice(msg, device=dev)


@pytest.mark.parametrize("expect", [True, False], ids=["expected", "bare"])
@pytest.mark.parametrize(
    "comp,shape,use_torch",
    COMPRESSORS,
    ids=[repr(c) + ("-torch" if t else "") for c, _, t in COMPRESSORS],
)
def test_compressor_messages_survive_hostile_bytes(traced, comp, shape, use_torch, expect):
    x = np.random.default_rng(3).uniform(-1.5, 1.5, size=shape)
    if use_torch:
        import torch

        x = torch.from_numpy(x)
    c = comp.compress(x, rng=11)
    msg = c.to_bytes()
    y0 = np.asarray(c.decompress())
    B, P = (1, shape[0]) if len(shape) == 1 else shape

    def parse(bad: bytes) -> tuple[object, tuple[int, ...], object]:
        kwargs = {"compressor": comp, "shape": shape, "dtype": np.float64} if expect else {}
        got = Compressed.from_bytes(bad, **kwargs)
        return got.compressor, got.shape, got.decompress()

    def check(out: object, unchanged: bool) -> None:
        comp2, shape2, y = out  # type: ignore[misc]
        if use_torch and unchanged:
            assert type(y).__name__ == "Tensor" and str(y.device) == "cpu"
        y = np.asarray(y)
        assert y.shape == shape2 and np.isfinite(y).all()
        if expect:
            assert comp2 is comp and shape2 == shape
        if unchanged:
            assert comp2 == comp and shape2 == shape
            np.testing.assert_array_equal(y, y0)

    def bound(length: int) -> int:
        # the output is fixed by the caller's shape, or by the header's within the documented
        # cap of 256 components per message byte
        out = B * P if expect else max(B * P, 256 * length)
        return K_MSG * 2 * length + C_OUT * out + CONST

    rng = np.random.default_rng([SEED, COMPRESSORS.index((comp, shape, use_torch)), expect])
    counts = run_fuzz(msg, C5_FIELDS, parse, check, bound, rng, config_forgeries(msg))
    assert counts["refused"] > 0 and counts["accepted"] >= 1


def forge_c5(msg: bytes, offset: int, value: int, width: int) -> bytes:
    """``msg`` with the header field at ``offset`` set to ``value``, CRC recomputed."""
    body = bytearray(msg[:-4])
    body[offset : offset + width] = value.to_bytes(width, "big")
    return with_crc(bytes(body))


def scalar_message(**kwargs: object) -> tuple[bytes, Compressed]:
    c = ScalarQuantizer(3, **kwargs).compress(np.linspace(-1, 1, 12).reshape(3, 4), rng=2)
    return c.to_bytes(), c


@pytest.mark.parametrize(
    "config,match",
    [
        (b"[" * 2000, "longer than 1024"),
        (b"[" * 600 + b"]" * 600, "longer than 1024"),
        (b"[" * 500, "nested deeper"),
        (b'{"args": {"bits": [[[3]]]}, "name": "scalar"}', "nested deeper"),
        (b'{"args": {"bits": 3}, "name": "scalar", "x": 1}', "keys 'args' and 'name'"),
        (b'{"args": {"bits": NaN}, "name": "scalar"}', "non-finite"),
        (b'{"args": {"bits": {"a": 1}}, "name": "scalar"}', "short lists"),
        (b'{"args": {}, "name": "pickle"}', "unknown compressor"),
        (b'{"args": {"bits": 3.0}, "name": "scalar"}', "refused by scalar"),
        (b'{"args": {"bits": 3}, "name": "scalar"}', "canonical"),
        (b"\xff", "not ASCII"),
    ],
    ids=lambda v: str(v)[:24],
)
def test_c5_config_is_parsed_with_a_bounded_grammar(config, match):
    msg, _ = scalar_message()
    with pytest.raises(ValueError, match=match):
        Compressed.from_bytes(splice(msg, config=config))


def test_c5_config_must_match_the_receiving_compressor():
    msg, c = scalar_message()
    assert Compressed.from_bytes(msg, compressor=c.compressor).compressor is c.compressor
    for other in (ScalarQuantizer(4), ScalarQuantizer(3, dither=False), Identity()):
        with pytest.raises(ValueError, match="not produced by"):
            Compressed.from_bytes(msg, compressor=other)
    with pytest.raises(TypeError, match="compressor must be a Compressor"):
        Compressed.from_bytes(msg, compressor="scalar")


def test_c5_no_later_class_changes_what_a_name_decodes_to():
    """A message names its compressor; the name must build the library's class whatever a
    process defines later: a subclass inheriting the name leaves it alone, and a class that
    claims a registered name is refused at its definition."""
    msg, _ = scalar_message()

    class Logged(ScalarQuantizer):  # a user's wrapper: inherits name = "scalar"
        pass

    assert type(Logged(3).compress(np.ones((2, 4)), rng=0).compressor) is Logged
    assert type(Compressed.from_bytes(msg).compressor) is ScalarQuantizer
    with pytest.raises(TypeError, match="'scalar' is taken by .*ScalarQuantizer"):

        class Impostor(Identity):
            name = "scalar"

    with pytest.raises(TypeError, match="'topk' is taken by .*TopK"):

        class Renamed(ScalarQuantizer):
            name = "topk"

    assert type(Compressed.from_bytes(msg).compressor) is ScalarQuantizer


def test_c5_a_reloaded_compressor_module_replaces_its_own_classes():
    """importlib.reload (or IPython's autoreload) defines the same classes again: allowed,
    and the name then decodes to the new definition (in a fresh interpreter, so this test
    session keeps its classes)."""
    import subprocess
    import sys

    code = (
        "import importlib, numpy as np\n"
        "import cvfl_theory.compressors.scalar as m\n"
        "from cvfl_theory.compressors import Compressed\n"
        "old = m.ScalarQuantizer\n"
        "msg = old(3).compress(np.ones((2, 4)), rng=0).to_bytes()\n"
        "importlib.reload(m)\n"
        "assert m.ScalarQuantizer is not old\n"
        "assert type(Compressed.from_bytes(msg).compressor) is m.ScalarQuantizer\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("device", [b"meta", b"cuda:7", b"cpu\x00", b"\xff", b"", b"x" * 65])
def test_c5_device_strings_come_from_an_allow_list(device):
    torch = pytest.importorskip("torch")
    c = ScalarQuantizer(3).compress(torch.ones(2, 4), rng=0)
    msg = c.to_bytes()
    assert str(Compressed.from_bytes(msg).decompress().device) == "cpu"
    with pytest.raises(ValueError, match="device"):
        Compressed.from_bytes(splice(msg, device=device))
    numpy_msg, _ = scalar_message()
    with pytest.raises(ValueError, match="numpy message names a device"):
        Compressed.from_bytes(splice(numpy_msg, device=b"cpu"))


def test_c5_caller_may_allow_its_own_device():
    torch = pytest.importorskip("torch")
    msg = splice(ScalarQuantizer(3).compress(torch.ones(2, 4), rng=0).to_bytes(), device=b"meta")
    assert Compressed.from_bytes(msg, device="meta").kind.device == "meta"
    with pytest.raises(TypeError, match="device must be a str"):
        Compressed.from_bytes(msg, device=0)


def test_c5_dtype_comes_from_an_allow_list():
    msg, c = scalar_message()
    assert Compressed.from_bytes(msg, dtype="float64").dtype == np.float64
    for code in (3, 7, 255):
        with pytest.raises(ValueError, match="dtype code"):
            Compressed.from_bytes(forge_c5(msg, 5, code, 1))
    with pytest.raises(ValueError, match="expected dtype"):
        Compressed.from_bytes(msg, dtype=np.float32)
    for bad in ("int32", np.int64, "complex64", "float8", object()):
        with pytest.raises((ValueError, TypeError), match="dtype must be float16, float32 or f"):
            Compressed.from_bytes(msg, dtype=bad)


@pytest.mark.parametrize(
    "offset,value,width,match",
    [
        (7, 2**32 - 1, 4, "components per message byte"),  # B
        (11, 2**32 - 1, 4, "components per message byte"),  # P
        (7, 5, 4, "payload length"),
        (11, 5, 4, "payload length"),
        (7, 0, 4, "invalid shape"),
        (6, 1, 1, "invalid shape"),  # a vector with B = 3
        (33, 2**64 - 1, 8, "payload length"),
        (25, 10**6, 8, "clipped"),
    ],
)
def test_c5_shape_forgery_is_refused_before_allocating(traced, offset, value, width, match):
    msg, _ = scalar_message()
    forged = forge_c5(msg, offset, value, width)
    with pytest.raises(ValueError, match=match):  # the regex is matched outside the budget
        with Budget() as b:
            Compressed.from_bytes(forged)
    assert b.peak < CONST


def test_c5_zero_bit_payload_cannot_claim_any_shape(traced):
    """A 0-bit codebook (hex, bits=1, no dither) makes the payload empty for every shape."""
    q = HexLatticeQuantizer(1, range=(0.0, 1.0), dither=False)
    msg = q.compress(np.full((2, 4), 0.5)).to_bytes()
    forged = forge_c5(forge_c5(msg, 7, 2**20, 4), 11, 2**20, 4)
    with pytest.raises(ValueError, match="components per message byte"):
        with Budget() as b:
            Compressed.from_bytes(forged)
        with pytest.raises(ValueError, match="expected shape"):
            Compressed.from_bytes(forged, shape=(2, 4))
    assert b.peak < CONST
    assert Compressed.from_bytes(msg, shape=(2, 4)).decompress().shape == (2, 4)


@pytest.mark.parametrize(
    "offset,value,width,match",
    [
        (4, 2, 1, "version"),
        (15, 2, 1, "invalid flags"),  # torch flag
        (16, 2, 1, "invalid flags"),  # has-seed flag
        (16, 0, 1, "invalid flags"),  # a seed without the has-seed flag
        (17, 2**63, 8, "invalid flags"),  # seed beyond 63 bits
    ],
)
def test_c5_reserved_values_and_flags_are_refused(offset, value, width, match):
    msg, _ = scalar_message()
    with pytest.raises(ValueError, match=match):
        Compressed.from_bytes(forge_c5(msg, offset, value, width))


def test_c5_seed_flag_must_match_the_dither():
    msg = ScalarQuantizer(3, dither=False).compress(np.ones((2, 4)), rng=0).to_bytes()
    with pytest.raises(ValueError, match="does not dither"):
        Compressed.from_bytes(forge_c5(forge_c5(msg, 16, 1, 1), 17, 5, 8))


def test_c5_forged_payload_fields_are_refused():
    # a min-max range that is not finite or has lo > hi
    msg, c = scalar_message()
    start = len(msg) - 4 - (c.payload_bits + 7) // 8
    for lo, hi in ((np.inf, 1.0), (1.0, np.nan), (2.0, 1.0)):
        body = bytearray(msg[:-4])
        body[start : start + 8] = struct.pack(">ff", lo, hi)
        with pytest.raises(ValueError, match="range"):
            Compressed.from_bytes(with_crc(bytes(body)))
    # non-finite identity values; top-k indices not increasing
    ident = Identity().compress(np.ones((1, 3))).to_bytes()
    body = bytearray(ident[:-4])
    body[-4:] = struct.pack(">f", np.nan)
    with pytest.raises(ValueError, match="non-finite"):
        Compressed.from_bytes(with_crc(bytes(body)))
    t = TopK(k=2).compress(np.array([[0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -4.0]]))
    body = bytearray(t.to_bytes()[:-4])
    # values (2 x 32 bits) then two 4-bit indices 1, 9 in the last byte: swap them to 9, 1
    assert body[-1] == 0x19
    body[-1] = 0x91
    with pytest.raises(ValueError, match="not increasing"):
        Compressed.from_bytes(with_crc(bytes(body)))


def test_c5_decoded_overflow_of_the_dtype_is_refused():
    # a float32 range forged up to 3e38 for a float16 message decodes beyond float16: refused
    msg, c = scalar_message(range="minmax-tensor")
    start = len(msg) - 4 - (c.payload_bits + 7) // 8
    body = bytearray(msg[:-4])
    body[5] = 0  # dtype code float16
    body[start : start + 8] = struct.pack(">ff", -3e38, 3e38)
    got = Compressed.from_bytes(with_crc(bytes(body)))
    with pytest.raises(ValueError, match="overflow float16"):
        got.decompress()


def test_k3_rotated_decode_overflow_is_refused():
    """Finite forged levels whose inverse rotation leaves the float range: an error, not inf."""
    X = np.random.default_rng(2).normal(size=(1, 5)).astype(np.float32)
    proto = PROTOCOLS["binary"](r=32)
    msg = proto.to_bytes(RotatedBinaryEncoder(rotation_seed=1).encode(X, rng=0))[0]
    body = bytearray(msg[:-4])
    body[36:44] = struct.pack(">ff", 3e38, -3e38)  # lo, hi: the payload starts after the header
    back = proto.from_bytes([with_crc(bytes(body))], 5)
    with pytest.raises(ValueError, match="overflow float32"):
        decode(back)


# ----------------------------------------------------------------------------- the bit reader
@pytest.mark.parametrize("width", [1, 3, 7, 8, 9, 13, 16, 31, 32, 33, 64])
@pytest.mark.parametrize("offset", [0, 5])
def test_reader_narrow_dtype_equals_uint64_path(width, offset):
    rng = np.random.default_rng([width, offset])
    vals = rng.integers(0, 2**width, size=50, dtype=np.uint64, endpoint=False)
    if width == 64:
        vals = rng.integers(0, 2**63, size=50, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    w = BitWriter()
    w.write_uint([0] * offset, 1)
    w.write_uint(vals, width)
    narrow = next(
        dt for dt in (np.uint8, np.uint16, np.uint32, np.uint64) if width <= 8 * dt().itemsize
    )
    got = BitReader(w.getvalue(), start_bit=offset).read_uint(50, width, narrow)
    assert got.dtype == narrow and got.tolist() == vals.tolist()
    assert BitReader(w.getvalue(), start_bit=offset).read_uint(50, width).tolist() == vals.tolist()


def test_reader_refuses_before_allocating(traced):
    r = BitReader(bytes(8))
    with Budget() as b:
        for call in (
            lambda: r.read_uint(2**40, 8),
            lambda: r.read_uint(2**30, 3),
            lambda: r.read_floats(2**40, 64),
            lambda: r.read_flags(2**40),
        ):
            with pytest.raises(ValueError, match="truncated"):
                call()
    assert b.peak < 4096
    with pytest.raises(ValueError, match="width must be in"):
        r.read_uint(1, 9, np.uint8)
    with pytest.raises(ValueError, match="count must be"):
        r.read_uint(-1, 8)
    with pytest.raises(ValueError, match="truncated"):
        BitReader(bytes(2), start_bit=17)


def test_reader_padding_check():
    assert BitReader(b"\xf0", start_bit=4).padding_is_zero()
    assert not BitReader(b"\xf1", start_bit=4).padding_is_zero()
    assert BitReader(b"\xff", start_bit=8).padding_is_zero()
