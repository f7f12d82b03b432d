"""The torch path of the compressors: the same bytes as the compiled kernels, on the CPU.

The torch path (``cvfl_theory.compressors._torch_kernels``) runs for CUDA tensors;
``CVFL_KERNEL_PATH=torch`` forces it for every tensor, which is how these tests run it on the CPU.
A message's bytes do not say which path made them, so each check compresses the *same* tensor with
the path forced and without it (the compiled kernels) and compares ``to_bytes()``, the
reconstruction and the fused round trip byte for byte.

Where a random input has slack, the inputs are also built at the quantizer's decision points
(``t + U`` an integer to within a few float64 spacings, top-k magnitudes tied across the cut), and
a deliberately reordered formula is shown to fail there: the digests have the power to see one
rounding.
"""

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from cvfl_theory import _kernels
from cvfl_theory._torch_stream import stream_words, words_to_halves
from cvfl_theory.compressors import HexLatticeQuantizer, Identity, ScalarQuantizer, TopK
from cvfl_theory.compressors import _torch_kernels as tk


@pytest.fixture
def torch_path(monkeypatch):
    """Run the body with ``CVFL_KERNEL_PATH=torch`` (read on every call)."""

    def force(on: bool) -> None:
        if on:
            monkeypatch.setenv("CVFL_KERNEL_PATH", "torch")
        else:
            monkeypatch.delenv("CVFL_KERNEL_PATH", raising=False)

    return force


def _kernel_halves(seed: int, n: int) -> np.ndarray:
    out = np.empty(n, np.uint32)
    _kernels.dither_words(seed, 0, n, out.view(np.int32))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2**63 - 2, 0x9E3779B97F4A7C15 >> 1])
@pytest.mark.parametrize("n", [1, 2, 31, 32, 33, 4095, 4096 + 33, 70_001])
def test_stream_is_the_kernels_stream(seed, n):
    # lengths inside the first step, across lane steps, across blocks and across several
    # doublings of the block starts (70 001 halves: 35 001 words, 2188 steps, 18 blocks)
    halves = words_to_halves(stream_words(seed, -(-n // 2)), n).numpy()
    np.testing.assert_array_equal(halves.astype(np.uint32), _kernel_halves(seed, n))


def test_stream_refuses_a_negative_length():
    with pytest.raises(ValueError, match="n must be >= 0"):
        stream_words(1, -1)


def _both(comp, x: np.ndarray, seed: int, force) -> tuple[list[bytes], list[bytes]]:
    """Bytes of message, reconstruction and round trip: kernels, then torch path."""
    out = []
    for on in (False, True):
        force(on)
        t = torch.from_numpy(x.copy())
        c = comp.compress(t, rng=seed)
        y = comp.decompress(c)
        r = comp.roundtrip(t, rng=seed)
        assert isinstance(y, torch.Tensor) and isinstance(r, torch.Tensor)
        assert y.dtype == r.dtype == t.dtype and y.shape == r.shape == t.shape
        out.append([c.to_bytes(), y.numpy().tobytes(), r.numpy().tobytes()])
    force(False)
    return out[0], out[1]


_COMPRESSORS = [
    ScalarQuantizer(1),
    ScalarQuantizer(3),
    ScalarQuantizer(8, range="minmax-tensor"),
    ScalarQuantizer(16),
    ScalarQuantizer(4, range=(-0.5, 0.5)),
    ScalarQuantizer(2, dither=False),
    ScalarQuantizer(12, range=(-2.0, 3.0), dither=False),
    HexLatticeQuantizer(2),
    HexLatticeQuantizer(3),
    HexLatticeQuantizer(4, range="minmax-tensor"),
    HexLatticeQuantizer(2, range=(-0.4, 0.6)),
    HexLatticeQuantizer(3, dither=False),
    HexLatticeQuantizer(6),
    TopK(k=1),
    TopK(bits=4),
    TopK(k=3, r=16),
    TopK(bits=9, r=64),
    Identity(),
    Identity(16),
    Identity(64),
]


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    x = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 50.0], shape)
    x = x.astype(dtype)
    if x.size > 3:  # a signed zero, a repeated value and its negative (a magnitude tie)
        x.flat[1] = -0.0
        x.flat[2] = x.flat[0]
        x.flat[3] = -x.flat[0]
    return x


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (17, 33), (9, 300)])
def test_torch_path_gives_the_kernels_bytes(dtype, shape, torch_path):
    rng = np.random.default_rng([np.dtype(dtype).itemsize, *shape])
    x = _data(rng, shape, dtype)
    digests = {}
    for comp in _COMPRESSORS:
        if isinstance(comp, TopK) and comp.k is not None and comp.k > shape[-1]:
            continue
        for seed in (0, 11):
            ref, got = _both(comp, x, seed, torch_path)
            for what, a, b in zip(("message", "decompress", "roundtrip"), ref, got):
                assert a == b, f"{comp!r} seed {seed}: {what} differs"
            digests[repr(comp), seed] = hashlib.sha256(b"".join(ref)).hexdigest()
    # every compressor tested something different, and a dithered one with each seed
    assert (
        len({digests[repr(c), 0] for c in _COMPRESSORS if (repr(c), 0) in digests})
        == len(digests) // 2
    )
    for c in _COMPRESSORS:
        if getattr(c, "dither", False):
            assert digests[repr(c), 0] != digests[repr(c), 11]


@given(
    B=st.integers(1, 6),
    P=st.integers(1, 40),
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    seed=st.integers(0, 2**63 - 2),
    data_seed=st.integers(0, 2**32 - 1),
    which=st.integers(0, len(_COMPRESSORS) - 1),
)
def test_torch_path_bytes_on_any_small_input(B, P, dtype, seed, data_seed, which):
    comp = _COMPRESSORS[which]
    if isinstance(comp, TopK) and comp.k is not None and comp.k > P:
        comp = TopK(k=P, r=comp.r)
    x = _data(np.random.default_rng(data_seed), (B, P), dtype)
    with pytest.MonkeyPatch.context() as mp:

        def force(on: bool) -> None:
            if on:
                mp.setenv("CVFL_KERNEL_PATH", "torch")
            else:
                mp.delenv("CVFL_KERNEL_PATH", raising=False)

        ref, got = _both(comp, x, seed, force)
    assert ref == got


def _near_ties(
    rng_seed: int, B: int, P: int, lo: float, hi: float, L: int, dither: bool
) -> np.ndarray:
    """float64 entries whose ``t + U`` (``t + 1/2`` without dither) is within 3 spacings of an integer."""
    rng = np.random.default_rng(rng_seed)
    if dither:
        u = (_kernel_halves(seed_for(rng_seed), B * P).astype(np.float64) + 0.5) * 2.0**-32
    else:
        u = np.full(B * P, 0.5)
    k = rng.integers(1, L + 1, B * P).astype(np.float64)
    x = lo + (k - u) * ((hi - lo) / L)
    x = x + rng.integers(-3, 4, B * P) * np.spacing(x)
    return np.clip(x, lo, hi).reshape(B, P)


def seed_for(rng_seed: int) -> int:
    """The dither seed ``compress(..., rng=rng_seed)`` draws (the header carries it)."""
    c = ScalarQuantizer(2, range=(0.0, 1.0)).compress(np.zeros((1, 1)), rng=rng_seed)
    assert c.seed is not None
    return c.seed


def _divided(x, lo, hi, L, seed, clamp):
    """The scalar quantizer with t = (x - l) / Δ instead of (x - l) * (L / span)."""
    B, P = x.shape
    v = x.double()
    t = (v - lo[:, None]) / ((hi - lo) / L)[:, None]
    if seed is None:
        u = torch.full_like(t, 0.5)
    else:
        n = B * P
        u = (words_to_halves(stream_words(seed, -(-n // 2)), n).double() + 0.5) * 2.0**-32
        u = u.reshape(B, P)
    k = (t + u).to(torch.int64)
    return torch.clamp(k, max=L), (u if seed is not None else None), 0


@pytest.mark.parametrize("dither", [True, False])
@pytest.mark.parametrize("bits", [3, 7])
def test_scalar_decisions_at_near_ties_match_and_a_reordered_formula_does_not(
    bits, dither, torch_path, monkeypatch
):
    L = (1 << bits) - 1
    lo, hi = -1.3, 0.7
    comp = ScalarQuantizer(bits, range=(lo, hi), dither=dither)
    x = _near_ties(5, 64, 64, lo, hi, L, dither)
    ref, got = _both(comp, x, 5, torch_path)
    assert ref == got
    monkeypatch.setattr(tk, "scalar_quantize", _divided)
    _, wrong = _both(comp, x, 5, torch_path)
    assert wrong[0] != ref[0]  # some index flips: one rounding of t decides it


def test_a_row_centred_on_zero_decides_its_midpoint_like_the_kernels(torch_path):
    # t = (0 - l) * (3 / (h - l)) = 1.5 up to one rounding of 3 / (h - l): the rounding decides
    # the nearest level of a zero entry (torch's `3.0 / span` is a reciprocal times 3: wrong here)
    x = np.array([[91.33783, -0.0, -91.33783]], np.float32)
    for comp in (ScalarQuantizer(2, dither=False), ScalarQuantizer(2, range="minmax-tensor")):
        ref, got = _both(comp, x, 0, torch_path)
        assert ref == got


@pytest.mark.parametrize(
    "rows",
    [
        [[0.0, -0.0, 1.0], [-1.0, -0.0, 0.0], [-1.0, -0.0, -0.0]],  # zero extremes of both signs
        [[0.0, 1.0], [-0.0, 1.0]],  # the tensor's zero minimum: -0 in one row, +0 in another
        [[-0.0, 1.0], [0.0, 1.0]],
        [[-1.0, 0.0], [-1.0, -0.0]],  # its zero maximum
        [[-0.0, -0.0], [0.0, 0.0]],
    ],
)
@pytest.mark.parametrize("mode", ["minmax-row", "minmax-tensor"])
def test_signed_zero_extremes_follow_the_kernels_order(rows, mode, torch_path):
    # a range is sent as float32, so its zero's sign is on the wire: -0 is below +0 (the
    # kernels compare a row's floats by their sortable integer keys), in a row and across rows
    x = np.array(rows, np.float32)
    for comp in (ScalarQuantizer(3, range=mode), HexLatticeQuantizer(2, range=mode)):
        ref, got = _both(comp, x, 1, torch_path)
        assert ref == got, f"{comp!r} on {rows}"
    lo = ScalarQuantizer(3, range=mode).compress(x, rng=1).data["lo"]
    hi = ScalarQuantizer(3, range=mode).compress(x, rng=1).data["hi"]
    expect_lo = [min(r, key=lambda v: (v, not np.signbit(v))) for r in rows]
    expect_hi = [max(r, key=lambda v: (v, not np.signbit(v))) for r in rows]
    if mode == "minmax-tensor":
        expect_lo = [min(expect_lo, key=lambda v: (v, not np.signbit(v)))]
        expect_hi = [max(expect_hi, key=lambda v: (v, not np.signbit(v)))]
    np.testing.assert_array_equal(np.signbit(lo), np.signbit(expect_lo))
    np.testing.assert_array_equal(np.signbit(hi), np.signbit(expect_hi))


def test_integer_and_strided_tensors_take_the_same_bytes(torch_path):
    base = np.arange(-40, 44, dtype=np.int64).reshape(12, 7)
    for comp in (ScalarQuantizer(3), HexLatticeQuantizer(2), TopK(k=3), Identity()):
        out = []
        for on in (False, True):
            torch_path(on)
            t = torch.from_numpy(base)
            strided = torch.from_numpy(base.astype(np.float32).T.copy()).T  # not contiguous
            out.append(
                [
                    comp.compress(t, rng=2).to_bytes(),
                    comp.roundtrip(strided[:, ::2], rng=2).numpy().tobytes(),
                ]
            )
        torch_path(False)
        assert out[0] == out[1], repr(comp)


def test_a_bool_tensor_is_refused_alike(torch_path):
    messages = []
    for on in (False, True):
        torch_path(on)
        with pytest.raises(TypeError) as err:
            ScalarQuantizer(3).compress(torch.ones(2, 2, dtype=torch.bool))
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_topk_ties_across_the_cut_keep_the_lower_columns(torch_path):
    # magnitudes 3 (x2), 2 (x5, both signs), 1, 0 and -0: k = 4 cuts inside the tie at 2
    row = np.array([2.0, -3.0, 1.0, -2.0, 0.0, 2.0, -0.0, 3.0, -2.0, 2.0])
    x = np.stack([row, row[::-1], -row, np.zeros_like(row)])
    for k in (1, 2, 3, 4, 6, 7, 10):
        ref, got = _both(TopK(k=k), x, 0, torch_path)
        assert ref == got, f"k={k}"
    torch_path(True)
    c = TopK(k=4).compress(torch.from_numpy(x))
    np.testing.assert_array_equal(c.data["idx"][0], [0, 1, 3, 7])


def test_float16_output_is_rounded_once():
    # v = 1 + 2^-11 + 2^-40: nearest float16 is 1 + 2^-10; through float32 it rounds to the
    # midpoint 1 + 2^-11 first and then to 1.0 (ties to even). torch's own conversion does that.
    v = np.array([1.0 + 2.0**-11 + 2.0**-40, -(1.0 + 2.0**-11 + 2.0**-40), 65519.99, 1e-8])
    rng = np.random.default_rng(3)
    w = rng.standard_normal(200_000) * rng.choice([1e-6, 1e-3, 1.0, 1e4], 200_000)
    for a in (v, w):
        got = tk.to_output_dtype(torch.from_numpy(a), np.dtype(np.float16)).numpy()
        np.testing.assert_array_equal(got.view(np.uint16), a.astype(np.float16).view(np.uint16))
    naive = torch.from_numpy(v).to(torch.float16).numpy()
    assert naive[0] != v.astype(np.float16)[0]  # the case the rounding to odd exists for


@pytest.mark.parametrize(
    "comp, x, match",
    [
        (ScalarQuantizer(3), np.array([[1.0, np.nan]]), "must be finite"),
        (TopK(k=1), np.array([[1.0, np.inf]]), "must be finite"),
        (ScalarQuantizer(3, range=(0, 1), out_of_range="raise"), np.array([[2.0]]), "outside"),
        (ScalarQuantizer(3), np.array([[1e39, 0.0]]), "float32 range"),
        (TopK(k=1, r=16), np.array([[1e6, 0.0]]), "overflows 16-bit"),
        (Identity(16), np.array([[1e6, 0.0]]), "overflows 16-bit"),
    ],
)
def test_torch_path_refuses_what_the_kernels_refuse(comp, x, match, torch_path):
    messages = []
    for on in (False, True):
        torch_path(on)
        with pytest.raises(ValueError, match=match) as err:
            comp.compress(torch.from_numpy(x))
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_a_cpu_tensor_takes_the_kernels_unless_forced(torch_path, monkeypatch):
    calls = []
    real = tk.scalar_quantize
    monkeypatch.setattr(tk, "scalar_quantize", lambda *a: calls.append(1) or real(*a))
    x = torch.ones(2, 3)
    ScalarQuantizer(3).roundtrip(x, rng=1)
    assert calls == []
    torch_path(True)
    ScalarQuantizer(3).roundtrip(x, rng=1)
    ScalarQuantizer(3).roundtrip(x.numpy(), rng=1)  # numpy arrays keep the compiled kernels
    assert calls == [1]


def test_forcing_torch_keeps_the_widest_compiled_path_for_numpy():
    code = "import cvfl_theory._kernels as k; print(k.path(), k.paths()[0])"
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "CVFL_KERNEL_PATH": "torch"},
    )
    assert res.returncode == 0, res.stderr
    used, widest = res.stdout.split()
    assert used == widest


@pytest.mark.parametrize("comp", [ScalarQuantizer(3), HexLatticeQuantizer(2), TopK(bits=8)])
def test_a_cvfl_run_on_the_torch_path_is_the_default_run_bit_for_bit(comp, torch_path, monkeypatch):
    # the simulator's compressors on the torch path (what a run with device="cuda" takes),
    # with the models on the CPU: the same messages, so the same run, bit for bit
    from cvfl_sim.vfl.config import CVFLConfig
    from cvfl_sim.vfl.data import load_dataset
    from cvfl_sim.vfl.train import train

    ds = load_dataset("digits-quadrants")
    cfg = dict(Q=2, epochs=1, compressor=comp, eval_every=8, error_feedback=True)
    ref = train(ds, CVFLConfig(**cfg))
    calls = []
    real = type(comp)._roundtrip_torch
    monkeypatch.setattr(
        type(comp), "_roundtrip_torch", lambda self, *a: calls.append(1) or real(self, *a)
    )
    torch_path(True)
    got = train(ds, CVFLConfig(**cfg))
    assert len(calls) > 10  # the run did take the torch path
    assert got.history == ref.history
    assert got.rounds == ref.rounds
    models = [(ref.models["server"], got.models["server"])]
    for a, b in models + list(zip(ref.models["parties"], got.models["parties"])):
        for x, y in zip(a.parameters(), b.parameters()):
            assert torch.equal(x, y)
