"""C4.5 (ours): the tight bound on Lemma 1's left side, cvfl_sim.bounds.tight_term."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

import cvfl_sim.bounds.tight_term as tt
from cvfl_theory.bounds import theorem_4_2, theorem_4_4
from cvfl_theory.compressors import HexLatticeQuantizer, Identity, ScalarQuantizer, TopK
from proofs_checks.c4_5_tight_term import measured_lemma1

Z = 5.0  # standard errors allowed in the Monte Carlo comparisons


def _quadratic(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """0.5 ||u - onehot(y)||^2: the gradient in the embeddings is affine in them."""
    k = torch.arange(logits.shape[1]).unsqueeze(0)
    t = (k == y.unsqueeze(1)).to(logits.dtype)  # one-hot without data-dependent sizes (vmap)
    return 0.5 * ((logits - t) ** 2).sum()


def _linear_setup(seed: int = 0, B: int = 6):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    dims, P, K = (3, 2, 4), (2, 3, 2), 3
    parties = [nn.Linear(d, p).double() for d, p in zip(dims, P)]
    server = nn.Linear(sum(P), K).double()
    xs = [torch.randn(B, d, generator=gen, dtype=torch.float64) for d in dims]
    y = torch.randint(0, K, (B,), generator=gen)
    return parties, server, xs, y


def _closed_form_parties(server, xs, s2):
    r"""E||D_m||^2 for linear parties h = V x + c, a linear head and the quadratic loss.

    grad_{h_m} l_i = W_m^T (W z_i + b - t_i), so with party errors only the perturbation of
    block m is (1/B) sum_i J_i^T W_m^T sum_{j != m} W_j eps_{j,i}, and J_i^T v = (v x_i^T, v):
    ||J_i^T M||_F^2 = ||M||_F^2 (||x_{m,i}||^2 + 1). Independent errors with variance s_j^2 give
    E||D_m||^2 = (1/B^2) sum_i (||x_{m,i}||^2 + 1) sum_{j != m} s_{j,i}^2 ||W_m^T W_j||_F^2.
    """
    W = server.weight.detach().numpy()
    P = [0, *np.cumsum([2, 3, 2])]
    Wb = [W[:, P[k] : P[k + 1]] for k in range(3)]
    B = xs[0].shape[0]
    out = []
    for m in range(3):
        x2 = (xs[m].numpy() ** 2).sum(axis=1) + 1.0
        tot = 0.0
        for j in range(3):
            if j != m:
                tot += float(np.sum(x2 * np.broadcast_to(s2[j], (B,)))) * float(
                    np.sum((Wb[m].T @ Wb[j]) ** 2)
                )
        out.append(tot / B**2)
    return np.array(out)


def test_first_order_is_the_exact_expectation_when_the_gradient_is_linear():
    parties, server, xs, y = _linear_setup()
    s2 = [0.01, np.linspace(0.001, 0.02, 6), 0.003]  # one party with per-row variances
    r = tt.tight_lemma1_bound(parties, server, xs, y, s2, loss=_quadratic, remainder=False)
    exact = _closed_form_parties(server, xs, s2)
    np.testing.assert_allclose(r.first_order[1:], exact, rtol=1e-10)
    assert not r.rigorous and "NOT a bound" in str(r)


def _server_mixed_hessian(parties, server, xs, y, m, loss=None):
    r"""(1/B) sum_i J_i^T A_{m0,i} = d/dtheta_0 grad_{theta_m} F_B, by full-batch autograd."""
    names = [k for k, _ in server.named_parameters()]
    shapes = [v.shape for _, v in server.named_parameters()]
    theta0 = torch.cat([v.detach().reshape(-1) for v in server.parameters()])

    def grad_m(flat):
        parts = flat.split([math.prod(s) for s in shapes])
        params = {k: v.reshape(s) for k, v, s in zip(names, parts, shapes)}
        H = [p(x) for p, x in zip(parties, xs)]
        logits = torch.func.functional_call(server, params, (torch.cat(H, 1),))
        ell = _quadratic if loss is None else loss
        F = sum(ell(logits[i : i + 1], y[i : i + 1]) for i in range(len(y))) / len(y)
        g = torch.autograd.grad(F, list(parties[m - 1].parameters()), create_graph=True)
        return torch.cat([t.reshape(-1) for t in g])

    return torch.autograd.functional.jacobian(grad_m, theta0).numpy()


def _server_error_part(parties, server, xs, y, s0, loss=_quadratic):
    zero = tt.tight_lemma1_bound(
        parties, server, xs, y, [0.0] * 3, server_error_var=0.0, loss=loss, remainder=False
    )
    with_s0 = tt.tight_lemma1_bound(
        parties, server, xs, y, [0.0] * 3, server_error_var=s0, loss=loss, remainder=False
    )
    return with_s0.first_order - zero.first_order


@pytest.mark.parametrize("loss", [_quadratic, None])
def test_server_error_adds_coherently_with_mlp_parties(loss):
    """As below with MLP parties: their Jacobians differ per sample, so the order in which the
    per-sample blocks are summed shows (with linear parties any reshuffling of the blocks gives
    the same norm). Cross entropy with the toolkit's head takes the closed-form derivatives."""
    from cvfl_sim.vfl.models import LinearHead, MLPEmbedding

    torch.manual_seed(3)
    dims, P = (3, 2, 4), (2, 3, 2)
    parties = [MLPEmbedding(d, p, 5).double() for d, p in zip(dims, P)]
    server = LinearHead(sum(P), 3).double()
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(6, d, generator=gen, dtype=torch.float64) for d in dims]
    y = torch.randint(0, 3, (6,), generator=gen)
    s0 = 0.02
    got = _server_error_part(parties, server, xs, y, s0, loss=loss)
    ce = lambda logits, t: nn.functional.cross_entropy(logits, t)  # noqa: E731
    for m in (1, 2, 3):
        H = _server_mixed_hessian(parties, server, xs, y, m, loss=ce if loss is None else loss)
        assert got[m] == pytest.approx(s0 * float(np.sum(H**2)), rel=1e-9)


def test_server_error_adds_coherently():
    parties, server, xs, y = _linear_setup(1)
    s0 = 0.02
    got = _server_error_part(parties, server, xs, y, s0)
    assert got[0] == 0.0  # the server's own block never sees its compression error
    for m in (1, 2, 3):
        H = _server_mixed_hessian(parties, server, xs, y, m)
        assert got[m] == pytest.approx(s0 * float(np.sum(H**2)), rel=1e-9)


def _incoherent_server_part(J, A_m0, s0):
    B = J.B
    return s0 * float(np.sum(np.einsum("bpn,bkp->bnk", J.dense(), A_m0) ** 2)) / B**2


def _party_part_without_b2(K, A, s2):
    fro = np.sum(A**2, axis=1) if K is None else np.einsum("bpq,bpc,bqc->bc", K, A, A)
    return float(np.sum(s2 * fro))


def test_mutations_are_caught(monkeypatch):
    parties, server, xs, y = _linear_setup(1)
    s2 = [0.01, 0.02, 0.003]
    with monkeypatch.context() as mp:
        mp.setattr(tt, "_party_part", _party_part_without_b2)
        r = tt.tight_lemma1_bound(parties, server, xs, y, s2, loss=_quadratic, remainder=False)
        exact = _closed_form_parties(server, xs, s2)
        assert not np.allclose(r.first_order[1:], exact, rtol=1e-6)
    with monkeypatch.context() as mp:
        mp.setattr(tt, "_server_part", _incoherent_server_part)
        got = _server_error_part(parties, server, xs, y, 0.02)
        H = _server_mixed_hessian(parties, server, xs, y, 1)
        assert got[1] != pytest.approx(0.02 * float(np.sum(H**2)), rel=1e-6)


def _ce_setup(seed: int, scale: float, B: int = 12):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    parties = [nn.Sequential(nn.Linear(d, 6), nn.Tanh(), nn.Linear(6, 4)).double() for d in (4, 3)]
    server = nn.Linear(8, 3).double()
    with torch.no_grad():
        server.weight.mul_(scale)
    xs = [torch.randn(B, d, generator=gen, dtype=torch.float64) for d in (4, 3)]
    y = torch.randint(0, 3, (B,), generator=gen)
    return parties, server, xs, y


def test_bound_holds_where_the_remainder_matters():
    # server block, coarse lattice errors, a sharp head and a large batch: the first-order term
    # falls like 1/B but the remainder's mean adds coherently, so the first order is below the truth
    parties, server, xs, y = _ce_setup(5, 3.0, B=256)
    q = HexLatticeQuantizer(2)
    r = tt.tight_lemma1_bound_for(parties, server, xs, y, q, Identity())
    mc = measured_lemma1(parties, server, xs, y, q, Identity(), 200, seed=3)
    mean, se = mc.mean(axis=0), mc.std(axis=0, ddof=1) / math.sqrt(len(mc))
    assert np.all(r.bound >= mean - Z * se)
    assert r.first_order[0] < mean[0] - Z * se[0]  # the remainder is needed here
    assert r.rigorous and np.all(r.remainder > 0)


def test_fine_quantizer_first_order_matches_monte_carlo():
    parties, server, xs, y = _ce_setup(2, 1.0)
    q = ScalarQuantizer(6)
    r = tt.tight_lemma1_bound_for(parties, server, xs, y, q, ScalarQuantizer(6))
    mc = measured_lemma1(parties, server, xs, y, q, ScalarQuantizer(6), 300, seed=4)
    mean, se = mc.mean(axis=0), mc.std(axis=0, ddof=1) / math.sqrt(len(mc))
    # two-sided by Minkowski: sqrt F - sqrt R <= sqrt(truth) <= sqrt F + sqrt R
    lo = (np.sqrt(r.first_order) - np.sqrt(r.remainder)) ** 2
    assert np.all(r.bound >= mean - Z * se) and np.all(lo <= mean + Z * se)
    assert np.all(r.remainder < 0.05 * r.first_order)
    assert np.all(r.sup_form >= r.first_order)  # the sup-constant corollary is weaker


def test_realised_bound_for_topk_is_deterministic_and_holds():
    parties, server, xs, y = _ce_setup(7, 2.0)
    comp = TopK(k=2)
    with torch.no_grad():
        H = [p(x) for p, x in zip(parties, xs)]
        theta0 = torch.cat([q.reshape(-1) for q in server.parameters()]).reshape(1, -1)
    eps = [comp.roundtrip(h) - h for h in H]
    e0 = (comp.roundtrip(theta0) - theta0).reshape(-1)
    r = tt.realised_lemma1_bound(parties, server, xs, y, eps, e0)
    truth = measured_lemma1(parties, server, xs, y, comp, comp, 1, seed=0)[0]
    assert np.all(r.bound >= truth * (1 - 1e-9))
    assert r.method == "realised" and np.all(np.isnan(r.sup_form))


def test_theorem_4_2_with_the_tight_term_by_hand():
    parties, server, xs, y = _ce_setup(2, 1.0)
    r = tt.tight_lemma1_bound_for(parties, server, xs, y, ScalarQuantizer(4), ScalarQuantizer(4))
    U = np.stack([r.bound, 2 * r.bound])  # two rounds
    kw = dict(F_gap=1.0, Q=3, L=1.0, sigma2=[1.0] * 3, B=12)
    b42 = theorem_4_2(eta=0.01, T=6, lemma1=U, **kw)
    assert b42.compression == pytest.approx(92 * 9 / 2 * 3 * float(np.sum(r.bound)))
    b44 = theorem_4_4(etas=[0.02, 0.01], lemma1=U, **kw)
    s = float(np.sum(r.bound))
    assert b44.compression == pytest.approx(92 * 27 * (0.02 * s + 0.01 * 2 * s) / (3 * 0.03))


def test_error_variances_by_hand():
    x = np.array([[0.0, 1.0, 3.0], [-1.0, 1.0, 0.5]])
    s2 = tt.error_variances(ScalarQuantizer(2, range="minmax-row"), x)
    np.testing.assert_allclose(s2, [(3.0 / 3) ** 2 / 12, (2.0 / 3) ** 2 / 12], rtol=1e-6)
    assert np.all(tt.error_variances(Identity(), x) == 0)
    # a fixed range: one step shared by every row (its value is checked by simulation below)
    h = tt.error_variances(HexLatticeQuantizer(3, range=(-1.0, 3.0)), x)
    assert h[0] == h[1] > 0
    with pytest.raises(ValueError, match="realised_lemma1_bound"):
        tt.error_variances(TopK(k=1), x)
    with pytest.raises(ValueError, match="clip"):
        tt.error_variances(ScalarQuantizer(2, range=(0.0, 1.0)), x)


def test_bad_input():
    parties, server, xs, y = _ce_setup(2, 1.0)
    with pytest.raises(ValueError, match="one entry per party"):
        tt.tight_lemma1_bound(parties, server, xs, y, [0.1])
    with pytest.raises(ValueError, match=r"error_var\[1\] must be finite"):
        tt.tight_lemma1_bound(parties, server, xs, y, [0.1, -1.0])
    with pytest.raises(ValueError, match=r"error_var\[0\] must be a scalar or have B = 12"):
        tt.tight_lemma1_bound(parties, server, xs, y, [np.ones(5), 0.1])
    with pytest.raises(ValueError, match="kind must be one of"):
        tt.tight_lemma1_bound(parties, server, xs, y, [0.1, 0.1], kind="gauss")
    with pytest.raises(ValueError, match="y must be"):
        tt.tight_lemma1_bound(parties, server, xs, y[:3], [0.1, 0.1])
    mlp = nn.Sequential(nn.Linear(8, 5), nn.ReLU(), nn.Linear(5, 3)).double()
    with pytest.raises(ValueError, match="linear server head"):
        tt.tight_lemma1_bound(parties, mlp, xs, y, [0.1, 0.1])
    r = tt.tight_lemma1_bound(parties, mlp, xs, y, [0.1, 0.1], remainder=False)
    assert not r.rigorous and np.all(r.first_order > 0)
    with pytest.raises(TypeError, match="server must be"):
        tt.tight_lemma1_bound(parties, "x", xs, y, [0.1, 0.1])


def test_given_embeddings_are_the_ones_computed_and_are_checked():
    """``embeddings=`` (the probe's own forward pass) gives the same bits; wrong ones refused."""
    parties, server, xs, y = _ce_setup(2, 1.0)
    q = ScalarQuantizer(3)
    with torch.no_grad():
        H = [p(x) for p, x in zip(parties, xs)]
    own = tt.tight_lemma1_bound_for(parties, server, xs, y, q, q)
    given = tt.tight_lemma1_bound_for(parties, server, xs, y, q, q, embeddings=H)
    assert np.array_equal(own.bound, given.bound) and np.all(own.bound > 0)
    with pytest.raises(ValueError, match="embeddings must be M = 2 tensors of B = 12 rows"):
        tt.tight_lemma1_bound_for(parties, server, xs, y, q, q, embeddings=H[:1])
    with pytest.raises(ValueError, match="embeddings must be M = 2 tensors of B = 12 rows"):
        tt.tight_lemma1_bound_for(parties, server, xs, y, q, q, embeddings=[H[0], H[1][:5]])


class _SquashedHead(nn.Module):
    """A head whose ``.net`` is an ``nn.Linear`` but whose output is not linear in it."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 3).double()

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return 4.0 * torch.tanh(self.net(z))


class _ScaledLinear(nn.Linear):
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return 3.0 * super().forward(z)


def _hooked_linear() -> nn.Module:
    head = nn.Linear(8, 3).double()
    head.register_forward_hook(lambda m, i, o: 3.0 * o)
    return head


def _own_forward_linear() -> nn.Module:
    # an instance attribute replacing the class's forward: not a hook, the same type
    head = nn.Linear(8, 3).double()
    plain = head.forward
    head.forward = lambda z: 3.0 * plain(z)
    return head


def _bias_buffer_linear() -> nn.Module:
    # the bias moved to a buffer: nn.Linear.forward still adds it, the parameters do not show it
    head = nn.Linear(8, 3).double()
    b = head.bias.detach() + 1.0
    del head.bias
    head.register_buffer("bias", b)
    return head


def _weight_normed_linear() -> nn.Module:
    # still of type nn.Linear, but its parameters are weight_g, weight_v and bias
    with pytest.warns(FutureWarning):
        return torch.nn.utils.weight_norm(nn.Linear(8, 3).double())


@pytest.mark.parametrize(
    "head",
    [
        _SquashedHead,
        lambda: _ScaledLinear(8, 3).double(),
        _hooked_linear,
        _own_forward_linear,
        _bias_buffer_linear,
        _weight_normed_linear,
    ],
)
def test_a_head_that_only_looks_linear_gets_no_remainder_bound(head):
    # the remainder's constants are those of a linear softmax head: a module holding an
    # nn.Linear, a subclass, a hooked or reparametrised one may compute something else
    parties, _, xs, y = _ce_setup(2, 1.0)
    with pytest.raises(ValueError, match="linear server head"):
        tt.tight_lemma1_bound(parties, head(), xs, y, [0.1, 0.1])
    with pytest.raises(ValueError, match="linear server head"):
        tt.realised_lemma1_bound(parties, head(), xs, y, [torch.zeros(12, 4)] * 2)


def test_the_proofs_check_passes_and_catches_the_mutations(monkeypatch):
    import proofs_checks.c4_5_tight_term as check_module

    assert check_module.check().passed
    with monkeypatch.context() as mp:
        mp.setattr(tt, "_party_part", _party_part_without_b2)
        assert not check_module.check().passed
    with monkeypatch.context() as mp:
        mp.setattr(tt, "_server_part", _incoherent_server_part)
        assert not check_module.check().passed


@pytest.mark.parametrize("range_", ["minmax-row", "minmax-tensor", (-4.0, 4.0)])
@pytest.mark.parametrize("kind", ["scalar", "hex"])
def test_error_variances_match_the_compressor_by_simulation(range_, kind):
    # Per-row error variance vs the compressor's real reconstructions (400 dither draws, 5 SE).
    # A per-row formula applied to a whole-tensor range (one shared step) is ~8x too small here.
    comp = (ScalarQuantizer if kind == "scalar" else HexLatticeQuantizer)(2, range=range_)
    h = np.clip(np.random.default_rng(0).normal(size=(16, 4)), -3.9, 3.9)
    s2 = tt.error_variances(comp, h)
    draws = np.array(
        [((comp.decompress(comp.compress(h, rng=k)) - h) ** 2).mean(axis=1) for k in range(400)]
    )
    mean, se = draws.mean(axis=0), draws.std(axis=0, ddof=1) / np.sqrt(len(draws))
    assert np.all(np.abs(mean - s2) <= 5 * se + 1e-12), (mean, s2, se)


def test_off_top_probability_survives_saturation():
    """delta at a logit gap of 50: e^-50/(1 + e^-50), where 1 - max p rounds to 0."""
    from cvfl_sim.bounds.tight_term import off_top_probability

    gap = 50.0
    d = off_top_probability([[0.0, -gap], [1.0, 1.0], [3.0, 0.0]])
    exact = math.exp(-gap) / (1.0 + math.exp(-gap))
    assert d[0] == pytest.approx(exact, rel=1e-14)
    assert d[1] == 0.5  # a tie for the top
    assert d[2] == pytest.approx(1.0 / (1.0 + math.exp(3.0)), rel=1e-14)


def test_local_constants_at_a_saturated_sample_cover_the_ball():
    """Step 3's lambda_r must bound ||J_p|| on the whole ball, also where the top class flips.

    Two classes, logits (0, -50) and a ball of radius 40: moving along (-1, 1)/sqrt2 closes the
    gap (50 - 40 sqrt2 < 0), and on the way ||J_p|| = 2 p (1 - p) reaches 1/2 (at the tie).
    With delta = 1 - max p (0 in float64) lambda_r was 0.
    """
    from cvfl_sim.bounds.tight_term import local_softmax_constants, off_top_probability

    u = np.array([0.0, -50.0])
    radius = 40.0
    lam_r, _ = local_softmax_constants(off_top_probability(u[None, :]), radius)
    w = np.array([-1.0, 1.0]) / math.sqrt(2.0)
    worst = 0.0
    for t in np.linspace(0.0, radius, 40001):
        v = u + t * w
        p = np.exp(v - v.max())
        p /= p.sum()
        worst = max(worst, float(np.linalg.eigvalsh(np.diag(p) - np.outer(p, p))[-1]))
    assert worst > 0.49
    assert lam_r[0] >= worst


@pytest.mark.parametrize("bad", [[0.0, 1.0], [[0.0, np.inf]], [[np.nan, 0.0]]])
def test_off_top_probability_refuses_what_is_not_finite_logits(bad):
    from cvfl_sim.bounds.tight_term import off_top_probability

    with pytest.raises(ValueError, match="logits must be a finite"):
        off_top_probability(bad)


class _Fixed(nn.Module):
    """A party whose embedding is a given matrix (plus 0 * a parameter, so it has a Jacobian)."""

    def __init__(self, h: torch.Tensor) -> None:
        super().__init__()
        self.h = h.detach().clone()
        self.w = nn.Parameter(torch.zeros(1, dtype=h.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.h + 0.0 * self.w


@pytest.mark.parametrize("realised", [False, True])
def test_later_steps_evaluate_each_block_at_its_own_point(realised):
    """With a round start (stale, theta0): block m at (party m now, the others stale, theta0).

    The reference evaluates each block with the default (round-start) call on a model set built
    to sit exactly at that block's point: the other parties replaced by fixed stale embeddings,
    and for a party block a server holding theta0 (the server block keeps the current server).
    Using the current parties' embeddings for the others, or the current server for a party
    block, changes every block's value.
    """
    parties, server, xs, y = _ce_setup(9, 2.0, B=10)
    start_parties = [copy.deepcopy(p) for p in parties]
    start_server = copy.deepcopy(server)
    with torch.no_grad():  # the local steps since the round start moved every model
        for net in [*parties, server]:
            for q in net.parameters():
                q.add_(0.05 * torch.randn_like(q))
        stale = torch.cat([p(x) for p, x in zip(start_parties, xs)], dim=1)
        theta0 = torch.cat([q.reshape(-1) for q in start_server.parameters()])
    q2 = ScalarQuantizer(2) if not realised else TopK(2)
    sizes = [4, 4]
    errors = [torch.full((10, 4), 0.01 * (k + 1), dtype=torch.float64) for k in range(2)]
    server_error = torch.full_like(theta0, -0.003)

    # a dithered server compressor: its error law is read at the round start's theta0
    q0 = ScalarQuantizer(3)

    def bound(ps, srv, **start):
        if realised:
            return tt.realised_lemma1_bound(ps, srv, xs, y, errors, server_error, **start).bound
        return tt.tight_lemma1_bound_for(ps, srv, xs, y, q2, q0, **start).bound

    got = bound(parties, server, stale=stale, theta0=theta0)
    fixed = [_Fixed(b) for b in stale.split(sizes, 1)]
    ref = [bound(fixed, server)[0]]
    for m in range(2):
        ps = [parties[k] if k == m else fixed[k] for k in range(2)]
        ref.append(bound(ps, start_server)[m + 1])
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    now = bound(parties, server)  # all blocks at the current models: another value
    assert np.all(np.abs(now - got) > 1e-6 * np.abs(got))
    with pytest.raises(ValueError, match="both or neither"):
        bound(parties, server, stale=stale)
    with pytest.raises(ValueError, match="round-start"):
        bound(parties, server, stale=stale[:, :5], theta0=theta0)


def test_a_saturated_head_with_a_wide_ball_gives_no_nan():
    """Logit gaps above ~745 (the off-top probability underflows to 0) and a ball of radius
    above ~500 (its exponential overflows): 0 * inf must not make the bound nan.

    The local constants there must be the global ones (the top class can change on the ball).
    """
    parties, server, xs, y = _ce_setup(3, 2e4, B=8)  # logit gaps 80 to 6000
    r = tt.tight_lemma1_bound_for(parties, server, xs, y, ScalarQuantizer(2), ScalarQuantizer(2))
    assert not np.isnan(r.bound).any() and np.all(r.bound >= r.first_order)
    W, b = server.weight.detach().numpy(), server.bias.detach().numpy()
    with torch.no_grad():
        z = torch.cat([p(x) for p, x in zip(parties, xs)], 1).numpy()
    sm = tt._softmax_at(W, b, z)
    assert np.all(sm.delta > 0)  # an upper bound even where it underflowed
    lam, kap = tt._local_constants(sm, np.full(len(z), 1e3))
    np.testing.assert_array_equal(lam, tt.SOFTMAX_LIPSCHITZ)
    np.testing.assert_array_equal(kap, tt.CE_THIRD)
