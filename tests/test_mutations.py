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

import cvfl_sim.bounds.analytic_constants as analytic
import cvfl_sim.bounds.certificate as certificate
import cvfl_sim.bounds.drift as drift
import cvfl_sim.bounds.lemma1 as lemma1
import cvfl_sim.bounds.sampled_lemma1 as sampled
import cvfl_sim.bounds.theorems as theorems
import cvfl_sim.bounds.tight_term as tight
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
    "c4_1_lemma1_measured",
    "c4_2_analytic_constants",
    "c4_5_tight_points",
    "c4_7_certificate",
    "c4_8_sampled_lemma1",
    "c4_9_drift",
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
    mp.setattr(
        encoders, "bernoulli_support", lambda seed, p, d, **kw: fixed(seed, 0.95 * p, d, **kw)
    )
    mp.setattr(
        encoders, "bernoulli_support_varying", lambda seed, p, **kw: varying(seed, 0.95 * p, **kw)
    )


def encoder_095p(mp: pytest.MonkeyPatch) -> None:
    """A consistent 0.95 p encoder: samples, scales, marginals and mse all use 0.95 p."""
    orig = encoders.check_probabilities
    mp.setattr(encoders, "check_probabilities", lambda p, *a, **k: 0.95 * orig(p, *a, **k))


def k_subset_biased(mp: pytest.MonkeyPatch) -> None:
    """The k-subset sampler favours index 0 (weight 1.5 against 1)."""

    def biased(seed: np.random.Generator, k: int, d: int, *, validate: bool = True) -> np.ndarray:
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
    """C5.1: the error law uses the published 2^{-2q} instead of 1/(2^q - 1)^2."""

    def law(self, steps, P):
        q = self.bits
        return P * (steps * (2**q - 1)) ** 2 * 2.0 ** (-2 * q) / 12

    mp.setattr(ScalarQuantizer, "_row_law", law)


def hex_v_over_24(mp: pytest.MonkeyPatch) -> None:
    """C5.2: the error law uses the published V/24 per component."""
    mp.setattr(HexLatticeQuantizer, "_row_law", lambda self, areas, P: P * areas / 24.0)


def hex_per_pair_constant(mp: pytest.MonkeyPatch) -> None:
    """C5.2: the per-pair constant 5V/(18 sqrt 3) used per component."""
    mp.setattr(
        HexLatticeQuantizer,
        "_row_law",
        lambda self, areas, P: P * areas * 5.0 / (18.0 * SQRT3),
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


# ------------------------------------------------------------------ C4: Lemma 1, Theorem 4.2
def fourth_moment_factor(mp: pytest.MonkeyPatch) -> None:
    """C4.5 Step 5: E||zeta||^4 <= (tr C)^2 + tr C^2 (the factor 2 of 2 tr C^2 dropped)."""
    mp.setattr(
        tight,
        "_fourth_moment",
        lambda C: (
            np.trace(C, axis1=-2, axis2=-1) ** 2 + np.sum(C * np.swapaxes(C, -1, -2), axis=(-2, -1))
        ),
    )


def norm4_factor(mp: pytest.MonkeyPatch) -> None:
    """C4.5 Step 5: E||eps||^4 <= (sum P s^2)^2 + sum P s^4 (the factor 2 dropped)."""
    mp.setattr(tight, "_norm4_bound", lambda mean2, sum_s4: mean2**2 + sum_s4)


def ball_exponent_without_sqrt2(mp: pytest.MonkeyPatch) -> None:
    """C4.5 Step 3: the off-top mass on the ball grows like e^r instead of e^{sqrt2 r}."""

    def local(sm, radius):
        with np.errstate(over="ignore"):
            dr = np.minimum(1.0, sm.delta * np.exp(radius) / (1.0 - sm.delta))
        return np.minimum(tight.SOFTMAX_LIPSCHITZ, 2.0 * dr), np.minimum(
            tight.CE_THIRD, 4.0 * np.sqrt(2.0) * dr
        )

    mp.setattr(tight, "_local_constants", local)


def local_lipschitz_halved(mp: pytest.MonkeyPatch) -> None:
    """C4.5 Step 3: lambda_r = min(1/2, delta_r) instead of min(1/2, 2 delta_r)."""
    orig = tight._local_constants

    def local(sm, radius):
        lam, kap = orig(sm, radius)
        return np.where(lam < tight.SOFTMAX_LIPSCHITZ, 0.5 * lam, lam), kap

    mp.setattr(tight, "_local_constants", local)


def scalar_radius_s(mp: pytest.MonkeyPatch) -> None:
    """C4.5 Step 3: a scalar dither component reaches s, not Delta/2 = sqrt3 s."""
    mp.setitem(tight._MAX_SQ, "scalar", 1.0)


def hex_radius_scalar(mp: pytest.MonkeyPatch) -> None:
    """C4.5 Step 3: the hexagon's components charged 3 s^2 (the scalar's) instead of 24/5 s^2."""
    mp.setitem(tight._MAX_SQ, "hex", 3.0)
    mp.setitem(tight._MAX_SQ, "dithered", 3.0)


def remainder_incoherent(mp: pytest.MonkeyPatch) -> None:
    """C4.5 Step 2: the remainder averaged as if independent over samples (a false 1/sqrt B)."""
    orig = tight._dithered_remainder
    # positional arguments: m, W, sizes, zeta, s2 (M, B), ...
    mp.setattr(tight, "_dithered_remainder", lambda *a: orig(*a) / np.sqrt(a[4].shape[1]))


def minkowski_without_cross_term(mp: pytest.MonkeyPatch) -> None:
    """C4.5 Step 2: F + R instead of (sqrt F + sqrt R)^2."""
    mp.setattr(tight, "_minkowski", lambda first, rem: first + rem)


def hessian_server_block_over_b(mp: pytest.MonkeyPatch) -> None:
    """C3.4 analytic H_m: the coherent server block divided by b instead of sqrt b."""
    mp.setattr(analytic, "_server_block_bound", lambda a, z, b: (analytic.SQRT2 + 0.5 * a * z) / b)


def hessian_embedding_block_halved(mp: pytest.MonkeyPatch) -> None:
    """C3.4 analytic H_m: the embedding block ||A_m|| ||A_-m|| / (4 b) instead of / (2 b)."""
    orig = analytic._embedding_block_bound
    mp.setattr(analytic, "_embedding_block_bound", lambda *a: 0.5 * orig(*a))


def analytic_sqrt2_dropped(mp: pytest.MonkeyPatch) -> None:
    """C3.1/C3.4 analytic constants: ||g_i|| <= 1 instead of sqrt 2 (server block and L's bilinear part)."""
    mp.setattr(analytic, "SQRT2", 1.0)


def sigma2_population_n(mp: pytest.MonkeyPatch) -> None:
    """C3.3 analytic sigma^2: (N - b)/(b N) instead of (N - b)/(b (N - 1)) (without replacement)."""

    def factor(N, B, sizes):
        return B * max((N - b) / (b * N) for b in sizes)

    mp.setattr(analytic, "_worst_batch_factor", factor)


def jacobian_without_bias(mp: pytest.MonkeyPatch) -> None:
    """C3.5 analytic G_m: the features without their constant 1 (the bias column forgotten)."""

    def sup(X, B):
        X = np.asarray(X, dtype=np.float64)
        rows = np.sort(np.sum(X**2, axis=1))[::-1]
        return float(np.sqrt(min(np.linalg.norm(X, 2) ** 2, rows[:B].sum())))

    mp.setattr(analytic, "embedding_jacobian_sup", sup)


def segment_without_bilinear(mp: pytest.MonkeyPatch) -> None:
    """C4.7: the certified segment smoothness without its bilinear part sqrt2/N sum_i r_i."""
    mp.setattr(certificate, "segment_smoothness", lambda ends, data: max(ends))


def certificate_curvature_quarter(mp: pytest.MonkeyPatch) -> None:
    """C4.7: the curvature term L eta^2 ||g||^2 / 4 instead of / 2."""
    orig = certificate.TrajectoryProbe._segment

    def segment(self, end_value):
        before = self.sums.curvature
        orig(self, end_value)
        self.sums.curvature = before + 0.5 * (self.sums.curvature - before)

    mp.setattr(certificate.TrajectoryProbe, "_segment", segment)


def certificate_gradient_without_party_bias(mp: pytest.MonkeyPatch) -> None:
    """C4.7: the closed-form gradient of the analytic model with the parties' bias parts zero."""
    orig = certificate.TrajectoryProbe._analytic_grad

    def grad(self, X, y):
        loss, grads, Z = orig(self, X, y)
        parts = len(self._models[0])
        return loss, [g if g.ndim == 2 or i >= 2 * parts else 0 * g for i, g in enumerate(grads)], Z

    mp.setattr(certificate.TrajectoryProbe, "_analytic_grad", grad)


def certificate_gradient_of_batch_sum(mp: pytest.MonkeyPatch) -> None:
    """C4.7: the closed-form gradient of the sum over the samples, not of their mean (x N)."""
    orig = certificate.TrajectoryProbe._analytic_grad

    def grad(self, X, y):
        loss, grads, Z = orig(self, X, y)
        return loss, [g * Z.shape[0] for g in grads], Z

    mp.setattr(certificate.TrajectoryProbe, "_analytic_grad", grad)


def off_top_by_subtraction(mp: pytest.MonkeyPatch) -> None:
    """C4.5 Step 3: delta = 1 - max p, which rounds to 0 beyond a logit gap of about 37."""

    def delta(logits):
        u = np.asarray(logits, dtype=np.float64)
        p = np.exp(u - u.max(axis=1, keepdims=True))
        return 1.0 - (p / p.sum(axis=1, keepdims=True)).max(axis=1)

    mp.setattr(tight, "off_top_probability", delta)


def _certificate_sums(change: Callable) -> Callable[[pytest.MonkeyPatch], None]:
    import dataclasses

    def mutate(mp: pytest.MonkeyPatch) -> None:
        orig = certificate.Certificate.of.__func__
        mp.setattr(
            certificate.Certificate,
            "of",
            classmethod(lambda cls, S, *a: orig(cls, dataclasses.replace(S, **change(S)), *a)),
        )

    return mutate


certificate_staleness_quarter = _certificate_sums(lambda S: {"error": 0.5 * S.error})
certificate_staleness_quarter.__doc__ = (
    "C4.7: the staleness term ||b||^2 / (4 alpha), not / (2 alpha)."
)
certificate_reuse_cross_dropped = _certificate_sums(lambda S: {"reuse_cross": 0.0})
certificate_reuse_cross_dropped.__doc__ = (
    "C4.7: the batch-reuse drift ||grad F^t - grad F^t0|| ||s^t0|| dropped."
)
certificate_sampling_dropped = _certificate_sums(lambda S: {"sampling": 0.0})
certificate_sampling_dropped.__doc__ = "C4.7: the sampling term at the round starts dropped."


def report_min_over_probes(mp: pytest.MonkeyPatch) -> None:
    """C4.1: the run's H_m, G_m the minimum over the probed points instead of the maximum."""
    orig = lemma1.Lemma1Report.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        self.H, self.G = self.H_point.min(axis=0), self.G_point.min(axis=0)

    mp.setattr(lemma1.Lemma1Report, "__init__", init)


def probe_smaller_point(mp: pytest.MonkeyPatch) -> None:
    """C4.1: a probe's H_m the smaller of its two points (exact and compressed), not the larger."""
    mp.setattr(lemma1, "larger_of_two_points", lambda v: np.minimum(v[0::2], v[1::2]))


def with_lemma1_minimum(mp: pytest.MonkeyPatch) -> None:
    """C4.2: Constants.with_lemma1 takes the minimum of its constants and the probe's maxima."""
    import dataclasses

    def lowered(self, report):
        return dataclasses.replace(
            self,
            H=tuple(float(v) for v in np.minimum(np.asarray(self.H), report.H)),
            G=tuple(float(v) for v in np.minimum(np.asarray(self.G), report.G)),
            points=self.points + int(report.left.shape[0]),
        )

    mp.setattr(theorems.Constants, "with_lemma1", lowered)


def per_round_zero_fill(mp: pytest.MonkeyPatch) -> None:
    """C4.1: Lemma1Report.per_round fills the unprobed rounds with 0 instead of the probed mean."""

    def per_round(self, R):
        out = np.zeros((R, self.left.shape[1]))
        for r in np.unique(self.rounds):
            if r < R:
                out[r] = self.left[self.rounds == r].mean(axis=0)
        return out

    mp.setattr(lemma1.Lemma1Report, "per_round", per_round)


def tight_per_round_zero_fill(mp: pytest.MonkeyPatch) -> None:
    """C4.2 tight and sampled forms of term 3: the unprobed rounds' bounds 0, not the probed mean."""
    orig = theorems._bound_per_round

    def zero_filled(values, rounds, R, whole=None):
        out = orig(values, rounds, R, whole)
        if out is not None:
            probed = np.zeros(R, dtype=bool)
            probed[rounds[np.isfinite(values).all(axis=1) & (rounds < R)]] = True
            out[0][~probed] = 0.0
        return out

    mp.setattr(theorems, "_bound_per_round", zero_filled)


def sampled_server_error_ignored(mp: pytest.MonkeyPatch) -> None:
    """C4.8 without the server-error term T (and its range): as if samples stayed independent."""
    add, ranges = sampled._Sums.add, sampled._ranges
    mp.setattr(sampled._Sums, "add", lambda self, S, T, A, B: add(self, S, 0.0 * T, A, B))
    mp.setattr(sampled, "_ranges", lambda pb: [(b, None) for b, _ in ranges(pb)])


def sampled_ranges_halved(mp: pytest.MonkeyPatch) -> None:
    """C4.8's per-sample ranges beta_i halved."""
    ranges = sampled._ranges
    mp.setattr(sampled, "_ranges", lambda pb: [(0.5 * b, g) for b, g in ranges(pb)])


def sampled_softmax_box_half_rho(mp: pytest.MonkeyPatch) -> None:
    """C4.8's softmax range on a box of half the size."""
    box = sampled.softmax_box
    mp.setattr(sampled, "softmax_box", lambda u, rho: box(u, 0.5 * np.asarray(rho)))


def sampled_maurer_without_2(mp: pytest.MonkeyPatch) -> None:
    """C4.8's Maurer bound with exp(-k t^2 / E Z^2) (the 2 dropped)."""
    bound = sampled.nonnegative_mean_bound
    mp.setattr(sampled, "nonnegative_mean_bound", lambda m, c, d, k, L: bound(m, c, d, k, L / 2))


def sampled_party_ranges_halved(mp: pytest.MonkeyPatch) -> None:
    """C4.8's per-sample ranges beta_i halved for the party blocks only."""
    ranges = sampled._ranges
    mp.setattr(
        sampled,
        "_ranges",
        lambda pb: [(b if m == 0 else 0.5 * b, g) for m, (b, g) in enumerate(ranges(pb))],
    )


def sampled_chebyshev_dropped(mp: pytest.MonkeyPatch) -> None:
    """C4.8's mean-vector bound without Chebyshev's term: ||E A|| <= ||A_bar||."""
    mp.setattr(sampled, "mean_vector_bound", lambda mean_norm, trace, k, delta: mean_norm)


def sampled_server_range_max(mp: pytest.MonkeyPatch) -> None:
    """C4.8's range of T from the largest per-sample range, as if the changes were not coherent."""
    mp.setattr(sampled, "server_term_range", lambda gamma: 0.5 * float(np.max(gamma)) ** 2)


def sampled_poincare_factor_small(mp: pytest.MonkeyPatch) -> None:
    """C4.8's Poincaré factor of a uniform unit 3 w^2 / pi^2 instead of 4 w^2 / pi^2."""
    factor = sampled.poincare_factor
    mp.setattr(sampled, "poincare_factor", lambda w: 0.75 * factor(w))


def drift_eta_halved(mp: pytest.MonkeyPatch) -> None:
    """C4.9's recursion with eta / 2: D_{k+1} = rho D_k + (eta / 2) A_k."""
    bounds = drift.drift_bounds
    mp.setattr(drift, "drift_bounds", lambda t, eta, lam, rho: bounds(t, eta / 2, lam, rho))


def drift_smoothness_quarter(mp: pytest.MonkeyPatch) -> None:
    """C4.9's smoothness with diag p - p p^T <= I/4 (the softmax curvature halved again)."""
    mp.setattr(drift, "SOFTMAX_LIPSCHITZ", 0.25)


def drift_smoothness_without_bias(mp: pytest.MonkeyPatch) -> None:
    """C4.9's smoothness from the inputs without the bias column of ones."""
    mp.setattr(drift, "_augmented", lambda x, bias: x)


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
    ("c4.5-fourth-moment-factor", fourth_moment_factor, ["c4_5_tight_points"]),
    ("c4.5-norm4-factor", norm4_factor, ["c4_5_tight_points"]),
    ("c4.5-ball-exponent-e^r", ball_exponent_without_sqrt2, ["c4_5_tight_points"]),
    ("c4.5-local-lipschitz-halved", local_lipschitz_halved, ["c4_5_tight_points"]),
    ("c4.5-scalar-radius-s", scalar_radius_s, ["c4_5_tight_points"]),
    ("c4.5-hex-radius", hex_radius_scalar, ["c4_5_tight_points"]),
    ("c4.5-remainder-incoherent", remainder_incoherent, ["c4_5_tight_points"]),
    ("c4.5-minkowski-no-cross-term", minkowski_without_cross_term, ["c4_5_tight_points"]),
    ("c4.5-off-top-by-subtraction", off_top_by_subtraction, ["c4_5_tight_points"]),
    ("c3.4-server-block-over-b", hessian_server_block_over_b, ["c4_2_analytic_constants"]),
    ("c3.4-embedding-block-halved", hessian_embedding_block_halved, ["c4_2_analytic_constants"]),
    ("c3-sqrt2-dropped", analytic_sqrt2_dropped, ["c4_2_analytic_constants"]),
    ("c3.3-sigma2-over-N", sigma2_population_n, ["c4_2_analytic_constants"]),
    ("c3.5-G-without-bias", jacobian_without_bias, ["c4_2_analytic_constants"]),
    ("c4.7-segment-no-bilinear", segment_without_bilinear, ["c4_7_certificate"]),
    ("c4.7-curvature-quarter", certificate_curvature_quarter, ["c4_7_certificate"]),
    ("c4.7-staleness-quarter", certificate_staleness_quarter, ["c4_7_certificate"]),
    ("c4.7-reuse-cross-dropped", certificate_reuse_cross_dropped, ["c4_7_certificate"]),
    ("c4.7-sampling-dropped", certificate_sampling_dropped, ["c4_7_certificate"]),
    ("c4.7-gradient-no-party-bias", certificate_gradient_without_party_bias, ["c4_7_certificate"]),
    ("c4.7-gradient-of-sum", certificate_gradient_of_batch_sum, ["c4_7_certificate"]),
    ("c4.8-server-error-ignored", sampled_server_error_ignored, ["c4_8_sampled_lemma1"]),
    ("c4.8-ranges-halved", sampled_ranges_halved, ["c4_8_sampled_lemma1"]),
    ("c4.8-softmax-box-half", sampled_softmax_box_half_rho, ["c4_8_sampled_lemma1"]),
    ("c4.8-maurer-without-2", sampled_maurer_without_2, ["c4_8_sampled_lemma1"]),
    ("c4.8-party-ranges-halved", sampled_party_ranges_halved, ["c4_8_sampled_lemma1"]),
    ("c4.8-chebyshev-dropped", sampled_chebyshev_dropped, ["c4_8_sampled_lemma1"]),
    ("c4.8-server-range-max", sampled_server_range_max, ["c4_8_sampled_lemma1"]),
    ("c4.8-poincare-factor-3/4", sampled_poincare_factor_small, ["c4_8_sampled_lemma1"]),
    ("c4.9-eta-halved", drift_eta_halved, ["c4_9_drift"]),
    ("c4.9-smoothness-quarter", drift_smoothness_quarter, ["c4_9_drift"]),
    ("c4.9-smoothness-without-bias", drift_smoothness_without_bias, ["c4_9_drift"]),
    ("c4.1-min-over-probes", report_min_over_probes, ["c4_1_lemma1_measured"]),
    ("c4.1-smaller-of-two-points", probe_smaller_point, ["c4_1_lemma1_measured"]),
    ("c4.2-with-lemma1-minimum", with_lemma1_minimum, ["c4_1_lemma1_measured"]),
    ("c4.1-per-round-zero-fill", per_round_zero_fill, ["c4_1_lemma1_measured"]),
    ("c4.2-tight-term3-zero-fill", tight_per_round_zero_fill, ["c4_1_lemma1_measured"]),
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
