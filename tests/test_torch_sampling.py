"""The torch path of support sampling: numpy's words, exponentials and supports, bit for bit.

``cvfl_theory._torch_sampling`` draws the supports of ``cvfl_theory.sampling`` with torch (CUDA
tensors, or any tensor with ``CVFL_KERNEL_PATH=torch``). Each check compares it with numpy's own
generator: the words and the generator's state afterwards, the exponentials (every path of the
ziggurat, reached on purpose through crafted states), the supports, and the encoders' messages.
The geometric gaps are also checked at near-ties, where a reordered formula is shown to fail.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cvfl_theory import _kernels
from cvfl_theory import _torch_sampling as ts
from cvfl_theory import encoders as encoders_module
from cvfl_theory.encoders import (
    BinaryQuantizationEncoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
)
from cvfl_theory.sampling import (
    bernoulli_support,
    bernoulli_support_varying,
    k_subset_support,
    node_generator,
)

M64 = (1 << 64) - 1
INV9 = pow(9, -1, 1 << 64)


def numpy_generator(state):
    gen = np.random.Generator(np.random.SFC64(0))
    gen.bit_generator.state = {
        "bit_generator": "SFC64",
        "state": {"state": list(state)},
        "has_uint32": 0,
        "uinteger": 0,
    }
    return gen


def state_for(first: int, second: int) -> tuple[int, int, int, int]:
    """An SFC64 state whose next two words are ``first`` and ``second``.

    With ``(a, 0, c, 0)`` the first word is ``a`` and the second ``9 c + 1``.
    """
    return (first & M64, 0, ((second - 1) * INV9) & M64, 0)


def test_crafted_states_give_the_words_asked_for():
    for first, second in [(5, 1), (M64, 12345), (1 << 63, M64), (0, 0)]:
        words = numpy_generator(state_for(first, second)).bit_generator.random_raw(2)
        assert [int(w) for w in words] == [first, second]


@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1, 2**63 + 7, 2**64 - 1])
def test_lanes_give_numpys_words_and_end_in_its_state(seed):
    gen = node_generator(seed)
    want = [int(w) for w in gen.bit_generator.random_raw(300)]
    lanes = ts.SFC64Lanes.from_seeds([seed, 3])
    got = [int(lanes.next()[0]) & M64 for _ in range(300)]
    assert got == want
    assert lanes.states()[0] == tuple(int(w) for w in gen.bit_generator.state["state"]["state"])


def test_a_held_lane_does_not_move():
    lanes = ts.SFC64Lanes.from_seeds([11, 12])
    before = lanes.states()
    lanes.next(torch.tensor([False, True]))
    after = lanes.states()
    assert after[0] == before[0] and after[1] != before[1]


def test_the_tables_are_an_exponential_ziggurat():
    """Independent of numpy's code: the read-off tables satisfy the ziggurat's own relations.

    Layers of equal area ``v`` under exp(-x): ``x_j (f_{j-1} - f_j) = v`` for the layers
    ``j = 2 .. 255``, the base ``x_R f_R + f_R = v`` (its rectangle and the tail), the
    fast-path thresholds ``k_j = 2**53 x_{j-1} / x_j`` and ``k_0 = 2**53 x_R f_R / v``.
    """
    k, w, f, x_tail = ts.ziggurat_tables()
    x = w * 2.0**53  # the layers' right edges (the base layer's is v / f_R)
    v = 0.0039496598225815571993  # the area of each layer (Marsaglia and Tsang, 2000)
    assert x_tail == pytest.approx(7.69711747013104972, rel=1e-15)
    assert x[255] == pytest.approx(x_tail, rel=1e-15) and x[0] == pytest.approx(v / f[255])
    assert np.all(np.diff(x[1:]) > 0) and f[0] == 1.0
    assert np.allclose(x[2:256] * (f[1:255] - f[2:256]), v, rtol=1e-9, atol=0)
    assert x_tail * f[255] + f[255] == pytest.approx(v, rel=1e-9)
    assert np.allclose(k[2:256], 2.0**53 * x[1:255] / x[2:256], rtol=1e-12, atol=0)
    assert k[0] == pytest.approx(2.0**53 * x_tail * f[255] / v, rel=1e-12)
    assert k[1] == 0  # the top layer always takes the slow path


def test_exponentials_and_the_words_they_read_are_numpys():
    seeds = list(range(1000, 1300))
    lanes = ts.SFC64Lanes.from_seeds(seeds)
    need = torch.tensor([600 - (s % 7) * 50 for s in seeds])
    got = ts.standard_exponentials(lanes, need).numpy()
    states = lanes.states()
    tails = extra_words = 0
    _, _, _, x_tail = ts.ziggurat_tables()
    for j, s in enumerate(seeds):
        gen = node_generator(s)
        want = gen.standard_exponential(int(need[j]))
        assert np.array_equal(got[j, : int(need[j])], want), s
        assert np.all(got[j, int(need[j]) :] == 0)
        end = tuple(int(v) for v in gen.bit_generator.state["state"]["state"])
        assert states[j] == end, s
        tails += int((want > x_tail).sum())
        extra_words += (
            end[3] - node_generator(s).bit_generator.state["state"]["state"][3] - len(want)
        )
    # the slow paths were taken: the tail, and words beyond one per value (rejections or v's)
    assert tails >= 20 and extra_words >= 1000


def test_exponentials_across_blocks_are_numpys():
    """Counts above the block cap (1024 words): every lane crosses two block boundaries.

    About 1.1 % of first words take the slow path, so of the 800 crossings about 9 fall
    between a slow first word and its uniform, which the next block then has to finish.
    """
    seeds = list(range(7000, 7400))
    lanes = ts.SFC64Lanes.from_seeds(seeds)
    got = ts.standard_exponentials(lanes, torch.full((len(seeds),), 2500)).numpy()
    for j, s in enumerate(seeds):
        gen = node_generator(s)
        assert np.array_equal(got[j], gen.standard_exponential(2500)), s
        assert lanes.states()[j] == tuple(int(v) for v in gen.bit_generator.state["state"]["state"])


@pytest.mark.parametrize("layer", [0, 1, 2, 17, 128, 200, 254, 255])
def test_every_slow_path_of_the_ziggurat_is_numpys(layer):
    """Crafted first and second words: the tail, acceptance, rejection, and v at its threshold."""
    k, w, f, _ = ts.ziggurat_tables()
    us = sorted({int(k[layer]), int(k[layer]) + 1, (1 << 53) - 1, (int(k[layer]) + (1 << 53)) // 2})
    us = [u for u in us if u < (1 << 53)]
    cases = []
    for u in us:
        first = (u << 11) | (layer << 3) | 5
        x = u * w[layer]
        vs = [0.0, 0.25, 0.5, 0.999, 1.0 - 2.0**-53]
        if layer > 0:  # v where (f_{i-1} - f_i) v + f_i meets exp(-x)
            star = (math.exp(-x) - f[layer]) / (f[layer - 1] - f[layer])
            if 0 < star < 1:
                vs += [star + i * 2.0**-53 for i in range(-3, 4)]
        for v in vs:
            v = min(max(v, 0.0), 1.0 - 2.0**-53)
            cases.append(state_for(first, (int(v * 2.0**53) << 11) | 1))
    lanes = ts.SFC64Lanes(cases)
    got = ts.standard_exponentials(lanes, torch.full((len(cases),), 3)).numpy()
    for j, state in enumerate(cases):
        gen = numpy_generator(state)
        assert np.array_equal(got[j], gen.standard_exponential(3)), (layer, j)
        assert lanes.states()[j] == tuple(int(v) for v in gen.bit_generator.state["state"]["state"])


def test_gaps_match_the_kernel_at_near_ties_and_a_reordered_formula_does_not():
    """``floor(scale E + 1)`` against ``floor(scale E) + 1`` where ``scale E`` is just below k."""
    rng = np.random.default_rng(5)
    d = 10**6
    rows = []
    for _ in range(64):
        p = float(rng.uniform(1e-3, 0.5))
        scale = -1.0 / math.log1p(-p)
        ks = rng.integers(1, 40, size=32)
        e = np.array([np.nextafter(k / scale, 0) for k in ks])
        e = np.concatenate([e, np.nextafter(e, 0), np.nextafter(e, np.inf)])
        rows.append((scale, e))
    reordered_differs = False
    for scale, e in rows:
        count = torch.tensor([e.size])
        pos, kept = ts.geometric_positions(
            torch.from_numpy(e)[None],
            count,
            torch.tensor([scale], dtype=torch.float64),
            d,
            torch.tensor([-1]),
        )
        want = e.copy()
        n, _ = _kernels.geometric_positions(want, e.size, scale, float(d), -1.0)
        assert int(kept[0]) == n
        assert np.array_equal(pos[0, :n].numpy(), want.view(np.int64)[:n])
        reordered = np.cumsum(np.floor(scale * e) + 1).astype(np.int64) - 1
        reordered_differs |= not np.array_equal(reordered[:n], want.view(np.int64)[:n])
    assert reordered_differs  # the inputs reach the decision points


def test_supports_are_numpys_over_seeds_rates_and_sizes():
    rng = np.random.default_rng(1)
    for _ in range(60):
        n = int(rng.integers(1, 16))
        d = int(rng.choice([1, 2, 7, 64, 1000, 5000]))
        p = [float(x) for x in rng.choice([1e-4, 1e-3, 0.01, 0.3, 0.9, 0.999, 1.0], n)]
        seeds = [int(x) for x in rng.integers(0, 2**64, n, dtype=np.uint64)]
        got = ts.bernoulli_supports(seeds, p, d, "cpu")
        for j in range(n):
            want = bernoulli_support(seeds[j], p[j], d)
            assert got[j].dtype == torch.int64
            assert np.array_equal(got[j].numpy(), want), (seeds[j], p[j], d)


def test_a_support_longer_than_one_chunk_is_numpys():
    """The loop's second chunk: seeds whose support outgrows ``dp + 2 sqrt(dp) + 16``.

    About 0.5 % of seeds at d = 20000, p = 0.05; they are found with numpy, then drawn with
    torch in lanes beside seeds that stop in their first chunk.
    """
    d, p = 20000, 0.05
    chunk = int(d * p + 2 * math.sqrt(d * p) + 16)
    long = [s for s in range(3000) if bernoulli_support(s, p, d).size > chunk][:4]
    assert len(long) == 4
    seeds = long + [1, 2]
    got = ts.bernoulli_supports(seeds, [p] * len(seeds), d, "cpu")
    for s, g in zip(seeds, got):
        assert np.array_equal(g.numpy(), bernoulli_support(s, p, d)), s


@settings(max_examples=40, deadline=None)
@given(
    seeds=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=6),
    d=st.integers(1, 300),
    data=st.data(),
)
def test_varying_supports_are_numpys(seeds, d, data):
    rows = data.draw(
        st.lists(
            st.lists(
                st.sampled_from([0.0, 1.0, 0.5, 1e-9, 1 - 1e-12, 0.3]), min_size=d, max_size=d
            ),
            min_size=len(seeds),
            max_size=len(seeds),
        )
    )
    p = np.array(rows, dtype=np.float64)
    got = ts.bernoulli_supports_varying(seeds, torch.from_numpy(p))
    for j, s in enumerate(seeds):
        assert np.array_equal(got[j].numpy(), bernoulli_support_varying(s, p[j]))


ENCODERS = [
    IndependentEncoder(0.1),
    IndependentEncoder(np.linspace(0.05, 1.0, 5)[:, None]),
    IndependentEncoder(np.random.default_rng(0).uniform(0.05, 1.0, (5, 96))),
    BinaryQuantizationEncoder(),
    RotatedBinaryEncoder(),
]


@pytest.mark.parametrize("enc", ENCODERS, ids=repr)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_encoders_torch_path_sends_the_same_messages(enc, dtype, monkeypatch):
    calls = []
    for name in ("bernoulli_supports", "bernoulli_supports_varying"):
        real = getattr(encoders_module, name)

        def counted(*args, _real=real, **kwargs):
            calls.append(1)
            return _real(*args, **kwargs)

        monkeypatch.setattr(encoders_module, name, counted)
    X = torch.from_numpy(np.random.default_rng(3).normal(size=(5, 96))).to(dtype)
    monkeypatch.delenv("CVFL_KERNEL_PATH", raising=False)
    host = enc.encode(X, rng=7)
    assert calls == []
    monkeypatch.setenv("CVFL_KERNEL_PATH", "torch")
    device = enc.encode(X, rng=7)
    assert calls == [1]  # the supports were drawn by torch
    for a, b in zip(host.nodes, device.nodes):
        assert np.array_equal(a.support, b.support)
        assert np.array_equal(a.values, b.values) and a.seed == b.seed
    assert torch.equal(enc.decode(host), enc.decode(device))


@pytest.mark.parametrize("top", [1, 2, 1000, 2**31, 3 * 2**30, 2**32 - 3])
def test_bounded_integers_are_numpys_with_their_rejections_and_half_words(top):
    """Against ``Generator.integers(0, top, endpoint=True)``; near 2**31 half the draws reject."""
    seeds = list(range(40))
    lanes = ts.SFC64Lanes.from_seeds(seeds)
    every = torch.ones(len(seeds), dtype=torch.bool)
    got = torch.stack([lanes.bounded(torch.full((40,), top), every) for _ in range(30)], 1)
    for j, s in enumerate(seeds):
        gen = node_generator(s)
        assert got[j].tolist() == [int(gen.integers(0, top, endpoint=True)) for _ in range(30)]
        state = gen.bit_generator.state
        assert lanes.states()[j] == tuple(int(v) for v in state["state"]["state"])
        assert bool(lanes.has32[j]) == bool(state["has_uint32"])


@pytest.mark.parametrize(
    "d, ks",
    [
        (1, [1]),
        (10, [1, 3, 9, 10]),
        (300, [1, 5, 100, 299]),
        # numpy's choice switches from Floyd's algorithm to a tail shuffle at k > d // 20 for
        # d > 10000: both sides of the switch
        (20000, [10, 1000, 1001, 19999]),
        (10001, [500, 501, 9000]),
    ],
)
def test_k_subsets_are_numpys_on_both_of_its_algorithms(d, ks):
    seeds = [int(s) for s in np.random.default_rng(d).integers(0, 2**64, len(ks), dtype=np.uint64)]
    got = ts.k_subset_supports(seeds, ks, d, "cpu")
    for s, k, g in zip(seeds, ks, got):
        want = k_subset_support(s, k, d)
        assert g.dtype == torch.int64 and np.array_equal(g.numpy(), want), (s, k, d)


def test_k_subsets_encoder_sends_the_same_messages_from_torch(monkeypatch):
    calls = []
    real = encoders_module.k_subset_supports
    monkeypatch.setattr(
        encoders_module, "k_subset_supports", lambda *a: calls.append(1) or real(*a)
    )
    X = torch.from_numpy(np.random.default_rng(4).normal(size=(3, 50)))
    enc = FixedSizeEncoder(np.array([4, 50, 17]))
    host = enc.encode(X, rng=0)
    monkeypatch.setenv("CVFL_KERNEL_PATH", "torch")
    forced = enc.encode(X, rng=0)
    assert calls == [1]
    for a, b in zip(host.nodes, forced.nodes):
        assert np.array_equal(a.support, b.support) and np.array_equal(a.values, b.values)
