"""Mutation tests of ``proofs_checks``: every check must fail when its formula is broken.

Each mutation monkeypatches one formula or sampler of the package (a deliberate bug) and asserts
that the ``proofs_checks`` modules guarding it report a failure when run in-process. The
unmutated checks must pass. A check that survives its mutation cannot see that bug, so it would
also pass a wrong implementation in ``cvfl verify``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np
import pytest

import cvfl_theory.encoders as encoders
import cvfl_theory.waterfill as waterfill
from cvfl_theory.compressors import HexLatticeQuantizer, ScalarQuantizer, TopK
from cvfl_theory.lattice import SQRT3, A2BoxCodebook
from cvfl_theory.protocols import SparseProtocol, index_bits

GUARDED = [
    "k1_1_unbiased",
    "k1_2_mse",
    "k2_1_unbiased",
    "k2_2_mse",
    "k3_payload_bits",
    "k5_1_binary",
    "k6_2_waterfill",
    "c5_1_scalar_dither",
    "c5_2_hex_lattice",
    "c5_3_hex_codebook",
    "c5_4_topk",
]


def run_check(module: str):
    """Run ``proofs_checks.<module>.check()`` in-process and return its result."""
    return importlib.import_module(f"proofs_checks.{module}").check()


# ------------------------------------------------------------------------------- mutations
def mse_over_n(mp: pytest.MonkeyPatch) -> None:
    """K1.2 with a wrong factor: divide by n instead of n^2."""
    orig = encoders._mse_from_marginals
    mp.setattr(encoders, "_mse_from_marginals", lambda X, p, c: orig(X, p, c) * X.shape[0])


def sampler_095p(mp: pytest.MonkeyPatch) -> None:
    """The Bernoulli samplers draw with 0.95 p (the values are still scaled by 1/p)."""
    fixed, varying = encoders.bernoulli_support, encoders.bernoulli_support_varying
    mp.setattr(encoders, "bernoulli_support", lambda seed, p, d: fixed(seed, 0.95 * p, d))
    mp.setattr(encoders, "bernoulli_support_varying", lambda seed, p: varying(seed, 0.95 * p))


def encoder_095p(mp: pytest.MonkeyPatch) -> None:
    """A consistent 0.95 p encoder: samples, scales, marginals and mse all use 0.95 p."""
    orig = encoders.check_probabilities
    mp.setattr(encoders, "check_probabilities", lambda p, *a, **k: 0.95 * orig(p, *a, **k))


def k_subset_biased(mp: pytest.MonkeyPatch) -> None:
    """The k-subset sampler favours index 0 (weight 1.5 against 1)."""

    def biased(seed: int, k: int, d: int) -> np.ndarray:
        w = np.ones(d)
        w[0] = 1.5
        pick = np.random.default_rng(seed).choice(d, size=k, replace=False, p=w / w.sum())
        return np.sort(pick).astype(np.int64)

    mp.setattr(encoders, "k_subset_support", biased)


def sparse_payload_bits_plus_one(mp: pytest.MonkeyPatch) -> None:
    """K3 sparse protocol: payload bits count ceil(log2 d) + 1 bits per index."""
    mp.setattr(
        SparseProtocol,
        "_bits",
        lambda self, d, centre_sent, count: (
            self.r_bar(centre_sent) + (index_bits(d) + 1 + self.r) * count
        ),
    )


def sparse_wire_index_plus_one(mp: pytest.MonkeyPatch) -> None:
    """K3.1: the sparse wire writes (and reads) ceil(log2 d) + 1-bit indices, payload_bits unchanged."""
    import cvfl_theory.protocols as protocols

    def wider(method: Callable) -> Callable:
        def run(*args, **kwargs):
            narrow = protocols.index_bits
            protocols.index_bits = lambda d: narrow(d) + 1
            try:
                return method(*args, **kwargs)
            finally:
                protocols.index_bits = narrow

        return run

    mp.setattr(SparseProtocol, "_write_payload", wider(SparseProtocol._write_payload))
    mp.setattr(SparseProtocol, "_read_payload", wider(SparseProtocol._read_payload))


def waterfill_lambda(mp: pytest.MonkeyPatch) -> None:
    """K6.2: the water level lambda perturbed by 0.1 %."""
    orig = waterfill._threshold
    mp.setattr(waterfill, "_threshold", lambda *a, **k: 1.001 * orig(*a, **k))


def scalar_published_law(mp: pytest.MonkeyPatch) -> None:
    """C5.1: expected_error uses the published 2^{-2q} instead of 1/(2^q - 1)^2."""

    def law(self, x):
        q = self.bits
        return self._error_law(
            x, lambda steps, P: float(P * np.sum((steps * (2**q - 1)) ** 2) * 2.0 ** (-2 * q) / 12)
        )

    mp.setattr(ScalarQuantizer, "expected_error", law)


def hex_v_over_24(mp: pytest.MonkeyPatch) -> None:
    """C5.2: expected_error uses the published V/24 per component."""
    mp.setattr(
        HexLatticeQuantizer,
        "expected_error",
        lambda self, x: self._error_law(x, lambda areas, P: float(P * np.sum(areas) / 24.0)),
    )


def hex_per_pair_constant(mp: pytest.MonkeyPatch) -> None:
    """C5.2: the per-pair constant 5V/(18 sqrt 3) used per component."""
    mp.setattr(
        HexLatticeQuantizer,
        "expected_error",
        lambda self, x: self._error_law(
            x, lambda areas, P: float(P * np.sum(areas) * 5.0 / (18.0 * SQRT3))
        ),
    )


def published_swapped(mp: pytest.MonkeyPatch) -> None:
    """published_bound returns the exact law (scalar, lattice and top-k)."""
    for cls in (ScalarQuantizer, HexLatticeQuantizer, TopK):
        mp.setattr(cls, "published_bound", cls.expected_error)


def _lattice_scaled(factor: float) -> Callable[[pytest.MonkeyPatch], None]:
    def mutate(mp: pytest.MonkeyPatch) -> None:
        orig = A2BoxCodebook.for_bits

        def for_bits(bits: int, dither: bool = True) -> A2BoxCodebook:
            cb = orig(bits, dither)
            return A2BoxCodebook.for_lattice(cb.a * factor, cb.widen)

        mp.setattr(A2BoxCodebook, "for_bits", staticmethod(for_bits))

    mutate.__doc__ = f"C5.3: the lattice's minimum distance times {factor}."
    return mutate


MUTATIONS: list[tuple[str, Callable[[pytest.MonkeyPatch], None], list[str]]] = [
    ("k1.2-mse-over-n", mse_over_n, ["k1_2_mse", "k2_2_mse"]),
    ("sampler-0.95p", sampler_095p, ["k1_1_unbiased", "k1_2_mse", "k5_1_binary"]),
    ("encoder-0.95p", encoder_095p, ["k1_1_unbiased", "k1_2_mse"]),
    ("k-subset-biased", k_subset_biased, ["k2_1_unbiased", "k2_2_mse"]),
    ("k3-index-bits+1", sparse_payload_bits_plus_one, ["k3_payload_bits"]),
    ("k3.1-wire-index+1", sparse_wire_index_plus_one, ["k3_payload_bits"]),
    ("k6.2-lambda", waterfill_lambda, ["k6_2_waterfill"]),
    ("c5.1-2^-2q", scalar_published_law, ["c5_1_scalar_dither"]),
    ("c5.2-V/24", hex_v_over_24, ["c5_2_hex_lattice"]),
    ("c5.2-per-pair", hex_per_pair_constant, ["c5_2_hex_lattice"]),
    (
        "published-swapped",
        published_swapped,
        ["c5_1_scalar_dither", "c5_2_hex_lattice", "c5_4_topk"],
    ),
    ("lattice-coarser", _lattice_scaled(1.01), ["c5_3_hex_codebook"]),
    ("lattice-finer", _lattice_scaled(0.99), ["c5_3_hex_codebook"]),
]


@pytest.mark.parametrize("module", GUARDED)
def test_check_passes_unmutated(module):
    result = run_check(module)
    assert result.passed, result.row()


@pytest.mark.parametrize(
    ("mutate", "module"),
    [pytest.param(m, mod, id=f"{name}:{mod}") for name, m, mods in MUTATIONS for mod in mods],
)
def test_check_fails_under_mutation(monkeypatch, mutate, module):
    mutate(monkeypatch)
    result = run_check(module)
    assert not result.passed, f"{mutate.__doc__} survived: {result.row()}"


def test_frequency_test_sees_a_095p_sampler_without_certain_entries(monkeypatch):
    """No p = 1 entry (so no impossible outcome is drawn): the binomial counts alone detect it."""
    from cvfl_theory import IndependentEncoder
    from cvfl_theory.testing.exact import support_frequency_test

    X = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    p = np.array([[0.3, 0.5, 0.8], [0.6, 0.2, 0.9]])
    assert support_frequency_test(IndependentEncoder(p), X, inclusion=p).passed()
    sampler_095p(monkeypatch)
    ft = support_frequency_test(IndependentEncoder(p), X, inclusion=p)
    assert not ft.passed() and np.isfinite(ft.max_z), ft
