"""The closed-form Gram matrices and per-sample Jacobians of the probes, against autograd.

The Lemma-1 probe and the tight term read the spectral norms of the embedding Jacobians and of
the Hessian cross blocks from Gram matrices built in closed form for the toolkit's plain models
(MLP parties, linear head). Each is compared here with the Gram of the dense autograd matrix
(``torch.autograd`` row by row, or ``torch.func.jacrev``, on a subclass of the model where the
closed form would otherwise be taken), which shares no code with the closed forms, at points
that include a ReLU exactly at 0 and a saturated softmax. Each test also makes the autograd
path raise while the closed form runs, so that it cannot compare autograd with itself. A
dropped or swapped bias term, a wrong factor or a transposed index changes entries by O(1), far
above the 1e-12 tolerances (float64 rounding of sums of a few hundred terms). The spectral norms
from the Lanczos iteration are checked one-sided: at least the exact norm and at most
``LANCZOS_TOL / 2`` relative above it (:func:`_norm_close`).
"""

from __future__ import annotations

import copy
import math
import threading

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info
from torch import nn
from torch.func import functional_call, jacrev, vmap

from cvfl_sim.bounds import _autodiff, _jacobians, _spectral
from cvfl_sim.bounds._autodiff import (
    embedding_hessian_blocks,
    embedding_hessian_factors_at,
    embedding_jacobian,
    plain_mlp,
)
from cvfl_sim.bounds._jacobians import EmbeddingJacobian, embedding_jacobians
from cvfl_sim.bounds._spectral import GramFactors, gram, gram_op_norm, op_norms
from cvfl_sim.vfl.models import GRUEmbedding, LinearHead, MLPEmbedding
from cvfl_sim.vfl.threads import blas_threads

F64 = torch.float64


BIASES = [(True, True), (False, False), (True, False), (False, True)]
"""(first layer, last layer) has a bias: mixed ones too, so a swapped bias term shows."""


def _party(D: int, P: int, hidden: int, bias: bool | tuple[bool, bool], seed: int) -> MLPEmbedding:
    torch.manual_seed(seed)
    net = MLPEmbedding(D, P, hidden).to(F64)
    keep = (bias, bias) if isinstance(bias, bool) else bias
    layers = [q for q in net.modules() if isinstance(q, nn.Linear)]
    for layer, k in zip(layers if hidden else layers * 2, keep):
        if not k:
            layer.bias = None
    return net


def _no_autograd(monkeypatch, *names):
    """Make the named autograd routines of ``_autodiff`` raise: the closed form must not need them."""

    def fail(*args, **kwargs):
        raise AssertionError("the closed form was expected here, not autograd")

    for name in names:
        monkeypatch.setattr(_autodiff, name, fail)


def _inputs(B: int, D: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = 2.0 * torch.randn(B, D, dtype=F64, generator=g)
    x[0] = 0.0  # with a zero first-layer bias entry: a pre-activation exactly 0
    return x


def _close(a: torch.Tensor, b: torch.Tensor, rel: float = 1e-12) -> None:
    assert a.shape == b.shape
    scale = float(b.abs().max())
    assert float((a - b).abs().max()) <= rel * max(scale, 1e-300)


def _norm_close(norm: float, exact: float) -> None:
    """A spectral norm from ``op_norms``: not below ``exact`` (but for round-off) on these
    spectra, and above it by at most ``LANCZOS_TOL / 2`` relative (``sqrt(theta + r)``,
    ``r <= LANCZOS_TOL theta``). A start vector that hardly meets the top eigenvector of a
    near-tie can read low by about the gap (``_spectral.LANCZOS_TOL``): not these."""
    assert exact * (1 - 1e-12) - 1e-300 <= norm <= exact * (1 + _spectral.LANCZOS_TOL / 2 + 1e-12)


def _np_close(a, b, rel: float = 1e-12) -> None:
    def t(v):
        return v.detach().clone() if isinstance(v, torch.Tensor) else torch.tensor(np.array(v))

    _close(t(a), t(b), rel)


@pytest.mark.parametrize("bias", BIASES)
@pytest.mark.parametrize("hidden", [16, 3, 0])
def test_jacobian_operator_equals_autograd(hidden, bias, monkeypatch):
    """Every product of the closed-form Jacobian operator against autograd's dense Jacobian."""
    party = _party(6, 3, hidden, bias, seed=hidden + sum(bias))
    first = party.net[0] if hidden else party.net
    if first.bias is not None:
        with torch.no_grad():
            first.bias[0] = 0.0  # x[0] = 0: u[0, 0] == 0 exactly (relu's derivative 0 there)
    B, P = 5, 3
    x = _inputs(B, 6, seed=1)
    J = embedding_jacobian(party, x)  # (B P, N), autograd
    with monkeypatch.context() as mp:
        mp.setattr(_jacobians, "jacobian", lambda *a, **k: pytest.fail("autograd was used"))
        op = EmbeddingJacobian.of(party, x)
    assert type(op).__name__ != "_DenseJacobian"
    Jn = J.numpy()
    N = Jn.shape[1]
    assert (op.B, op.P, op.N) == (B, P, N)
    _np_close(op.dense().reshape(B * P, N), Jn)
    rng = np.random.default_rng(2)
    V = rng.normal(size=(3, B, P))
    U = rng.normal(size=(3, N))
    _np_close(op.rmatmat(V), V.reshape(3, -1) @ Jn)
    # as the tight term passes it: a strided view of a (B, R, P') array, and R = 1
    for W in (rng.normal(size=(B, 3, P + 2))[:, :, 1 : P + 1].transpose(1, 0, 2), V[:1]):
        want = np.sum((W.reshape(len(W), -1) @ Jn) ** 2)
        assert op.rmatmat_sq_norm(W) == pytest.approx(want, rel=1e-12)
    _np_close(op.matmat(U), (U @ Jn.T).reshape(3, B, P))
    blocks = Jn.reshape(B, P, N)
    _np_close(op.sample_grams(), blocks @ blocks.transpose(0, 2, 1))
    G = Jn @ Jn.T
    _np_close(op.gram_diagonal(), np.diag(G))
    _np_close(op.gram_dense(), G)
    v = rng.normal(size=(2, B * P))
    _np_close(type(op).stacked_matvec([op, op])(v), v @ G)
    sv = np.linalg.svd(Jn, compute_uv=False)
    _norm_close(op_norms([op])[0], sv[0])


@pytest.mark.parametrize("B", [5, 20])
def test_stacked_jacobians_of_different_widths(B):
    """Parties with different input widths and biases share one batch.

    At ``B = 5`` through the inputs' ``B``-square kernels; at ``B = 20`` (twice the widest
    ``[X | 1]``, 7 columns, is below ``B``) through the inputs themselves, zero-padded to one
    width (a party without a first-layer bias among them).
    """
    parties = [
        _party(4, 3, 7, True, seed=30),
        _party(6, 3, 7, (True, False), seed=31),
        _party(5, 3, 7, (False, True), seed=34),
    ]
    xs = [_inputs(B, 4, seed=32), _inputs(B, 6, seed=33), _inputs(B, 5, seed=35)]
    ops = embedding_jacobians(parties, xs)
    assert ops[0].stack_key() == ops[1].stack_key() == ops[2].stack_key()
    v = np.random.default_rng(3).normal(size=(3, 3 * B))
    got = type(ops[0]).stacked_matvec(ops)(v)
    for k, (party, x) in enumerate(zip(parties, xs)):
        J = embedding_jacobian(party, x).numpy()
        _np_close(got[k], J @ (J.T @ v[k]))


def test_jacobians_of_other_modules_are_autograds():
    """A module the closed forms do not know: autograd's Jacobian of the batch, per sample."""
    odd = _party(6, 3, 8, True, seed=4)
    odd.net[1] = nn.Tanh()
    hooked = _party(6, 3, 8, True, seed=4)
    hooked.net[2].register_forward_hook(lambda mod, inp, out: 2.0 * out)
    own = _party(6, 3, 8, True, seed=4)  # its own forward (an instance attribute): not plain
    plain_forward = own.net[0].forward
    own.net[0].forward = lambda z: plain_forward(2.0 * z)
    torch.manual_seed(6)
    gru = GRUEmbedding((2, 3), 3).to(F64)  # torch.func.vmap fails on nn.GRU's shape check
    x = _inputs(5, 6, seed=5)
    assert plain_mlp(odd) is None and plain_mlp(hooked) is None and plain_mlp(own) is None
    for net in (odd, hooked, own, gru):
        op = EmbeddingJacobian.of(net, x)
        assert type(op).__name__ == "_DenseJacobian"
        params = list(net.parameters())
        for i in (0, 3):  # row (i, a) is sample i's own Jacobian, from its forward alone
            h = net(x[i : i + 1])[0]
            ref = torch.stack(
                [
                    torch.cat(
                        [
                            g.reshape(-1)
                            for g in torch.autograd.grad(h[a], params, retain_graph=True)
                        ]
                    )
                    for a in range(3)
                ]
            )
            _np_close(op.dense()[i], ref.numpy(), rel=1e-10)


class _Head(LinearHead):
    """Not the toolkit's own type: autograd builds its blocks (the reference)."""


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("sizes", [[2, 3], [4, 4, 4, 4], [1], [5]])
def test_hessian_factors_equal_autograd_blocks(bias, sizes, monkeypatch):
    gen = torch.Generator().manual_seed(len(sizes) + 2 * bias)
    P, C, B = sum(sizes), 3, 9
    head, ref = LinearHead(P, C).to(F64), _Head(P, C).to(F64)
    if not bias:
        head.net.bias = ref.net.bias = None
    n0 = sum(q.numel() for q in head.parameters())
    thetas = [torch.randn(n0, dtype=F64, generator=gen) for _ in range(2)]
    Zs = [4.0 * torch.randn(B, P, dtype=F64, generator=gen) for _ in range(2)]
    Zs[0][1] *= 30.0  # a sample near a softmax vertex
    y = torch.randint(0, C, (B,), generator=gen)
    # every block at two different points, in one call (batched per block)
    points = [(t, Z, m) for m in range(len(sizes) + 1) for t, Z in zip(thetas, Zs)]
    with monkeypatch.context() as mp:
        _no_autograd(mp, "embedding_hessian_blocks", "jacobian")
        factors = embedding_hessian_factors_at(head, points, y, sizes)
    assert len(factors) == len(points)
    for (t, Z, m), f in zip(points, factors):
        (A,) = embedding_hessian_blocks(ref, t, Z, y, sizes, [m])  # autograd
        _close(f.gram_dense(), gram(A))
        _norm_close(op_norms([f])[0], float(np.linalg.norm(A.numpy(), 2)))


def test_hessian_factors_of_other_heads_are_the_dense_blocks():
    """An MLP head: the factors of each autograd block (no closed form for it)."""
    gen = torch.Generator().manual_seed(7)
    sizes, C, B = [2, 3], 3, 6
    mlp = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, C)).to(F64)
    t = torch.cat([q.detach().reshape(-1) for q in mlp.parameters()])
    Z = torch.randn(B, 5, dtype=F64, generator=gen)
    y = torch.randint(0, C, (B,), generator=gen)
    blocks = embedding_hessian_blocks(mlp, t, Z, y, sizes)
    factors = embedding_hessian_factors_at(mlp, [(t, Z, m) for m in range(3)], y, sizes)
    for A, f in zip(blocks, factors):
        _close(f.gram_dense(), gram(A))


def test_gram_op_norm_edges():
    assert gram_op_norm(torch.zeros(0, 0, dtype=F64)) == 0.0
    bad = torch.eye(3, dtype=F64)
    bad[1, 1] = float("nan")
    assert np.isnan(gram_op_norm(bad))
    bad[1, 1] = float("inf")
    assert np.isnan(gram_op_norm(bad))
    # a repeated top eigenvalue and a rank-one matrix
    assert gram_op_norm(4.0 * torch.eye(5, dtype=F64)) == pytest.approx(2.0, rel=1e-15)
    v = torch.arange(1.0, 5.0, dtype=F64)
    assert gram_op_norm(torch.outer(v, v)) == pytest.approx(float(v.norm()), rel=1e-14)


def _spectrum_factor(n: int, top: np.ndarray, rest: float, seed: int) -> np.ndarray:
    """``R`` with ``R R^T`` of the given top eigenvalues, the others in [0, rest], random basis."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    ev = np.concatenate([top, rng.uniform(0.0, rest, n - len(top))])
    return Q * np.sqrt(ev)


SPECTRA = {
    "separated": (np.array([10.0]), 1.0),
    "tied top": (np.array([5.0, 5.0, 5.0]), 4.0),
    "gap 3e-8": (np.array([3.0 + 3e-8, 3.0]), 2.9),
    "flat": (np.array([1.0]), 1.0),
    "rank one": (np.array([7.0]), 0.0),
}


def _no_lapack(monkeypatch):
    """Make op_norms' LAPACK fallback fail: the values must be Lanczos's own."""
    monkeypatch.setattr(
        _spectral, "gram_op_norm", lambda *a: pytest.fail("Lanczos fell back to LAPACK")
    )


@pytest.mark.parametrize("n", [65, 100, 256])
@pytest.mark.parametrize("spectrum", list(SPECTRA))
def test_op_norms_lanczos_equals_the_known_top(n, spectrum, monkeypatch):
    """The batched Lanczos path (n > 64) against a known top eigenvalue, near ties included.

    A Ritz value from a subspace that misses the top eigenvector, a residual read on the wrong
    Ritz pair or a stop before convergence is off by up to the spectral gap or the residual:
    far above the tolerance (at the 3e-8 gap the second eigenvalue is 5e-9 off in the norm).
    The rank-one case reaches an invariant subspace after one step and goes on from restarts.
    """
    top, rest = SPECTRA[spectrum]
    R = [_spectrum_factor(n, top * (k + 1), rest * (k + 1), seed=k + n) for k in range(3)]
    exact = [gram_op_norm(torch.from_numpy(r @ r.T)) for r in R]
    _no_lapack(monkeypatch)
    got = op_norms([GramFactors(torch.from_numpy(r)) for r in R])
    for k, (norm, lapack) in enumerate(zip(got, exact)):
        _norm_close(norm, math.sqrt(top.max() * (k + 1)))
        _norm_close(norm, lapack)


def test_a_near_tie_the_start_vector_hardly_meets_is_within_the_gap(monkeypatch):
    """The documented limit of accepting at ``LANCZOS_TOL``: top eigenvalues 1 and 1 - 1e-5.

    With a start vector whose component on the top eigenvector (1.2e-3, seed 52) is 77 times
    smaller than on the second, the accepted Ritz pair is a mix of the two: its value read
    0.99999046, below the top eigenvalue by less than the gap (a Ritz value of the next
    eigenvalue, 0.9, or a residual read on the wrong pair would be off by far more), and it may
    not be above the top by more than the tolerance.
    """
    n, gap = 100, 1e-5
    rng = np.random.default_rng(52)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    ev = np.concatenate([[1.0, 1.0 - gap, 0.9, 0.85], rng.uniform(0.0, 0.5, n - 4)])
    start = _spectral._start_vector(n)
    assert abs(start @ Q[:, 0]) < abs(start @ Q[:, 1]) / 50  # the case: hardly meets the top
    _no_lapack(monkeypatch)
    norm = op_norms([GramFactors(torch.from_numpy(Q * np.sqrt(ev)))])[0]
    assert 1.0 - gap <= norm**2 <= 1.0 + _spectral.LANCZOS_TOL


def test_lanczos_restarts_where_the_start_vector_misses_the_top(monkeypatch):
    """Start vector along an eigenvector of value 0.5, the top (2.0) orthogonal to it.

    The Krylov space of the start vector is invariant after one step and holds 0.5 only; the
    diagonal (at most 0.24) cannot tell. Accepting the invariant subspace returns 0.5.
    """
    n = 100
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(np.column_stack([_spectral._start_vector(n), rng.normal(size=(n, n - 1))]))
    ev = np.concatenate([[0.5, 2.0, 1.9], rng.uniform(0.0, 0.1, n - 3)])
    f = GramFactors(torch.from_numpy(Q * np.sqrt(ev)))
    assert f.gram_diagonal().max() < 0.5
    _no_lapack(monkeypatch)
    _norm_close(op_norms([f])[0], math.sqrt(2.0))


def test_lanczos_top_refuses_a_ritz_value_below_the_diagonal():
    """The diagonal check: a product map that understates the matrix gives nan (LAPACK then)."""
    rng = np.random.default_rng(5)
    R = rng.normal(size=(2, 80, 10))
    G = R @ R.transpose(0, 2, 1)
    diag = np.diagonal(G, axis1=1, axis2=2)
    right = _spectral.lanczos_top(lambda V, rows: (G[rows] @ V[:, :, None])[:, :, 0], diag)
    for got, exact in zip(right, np.linalg.eigvalsh(G)[:, -1]):  # eigenvalues: theta + r
        _norm_close(math.sqrt(got), math.sqrt(exact))
    wrong = _spectral.lanczos_top(lambda V, rows: 0.01 * (G[rows] @ V[:, :, None])[:, :, 0], diag)
    assert np.isnan(wrong).all()


def test_op_norms_blocks_mixed_batches_and_the_fallback(monkeypatch):
    """Factors with diagonal blocks, of several widths and sizes, in one call; then LAPACK."""
    rng = np.random.default_rng(11)
    ops = []
    for n, k, s in [(160, 30, 4), (160, 12, 4), (160, 30, 0), (96, 20, 3), (40, 7, 4)]:
        R = torch.from_numpy(rng.normal(size=(n, k)))
        D = None
        if s:
            E = rng.normal(size=(n // s, s, s))
            D = torch.from_numpy(E @ E.transpose(0, 2, 1))
        ops.append(GramFactors(R, D))
    exact = [gram_op_norm(op.gram_dense()) for op in ops]
    with monkeypatch.context() as mp:
        _no_lapack(mp)
        for norm, e in zip(op_norms(ops), exact):
            _norm_close(norm, e)
    for op in ops:  # the dense form against one built here
        G = (op.R @ op.R.T).numpy()
        if op.blocks is not None:
            s = op.blocks.shape[1]
            for b in range(op.blocks.shape[0]):
                G[b * s : (b + 1) * s, b * s : (b + 1) * s] += op.blocks[b].numpy()
        _np_close(op.gram_dense(), G)
    monkeypatch.setattr(_spectral, "LANCZOS_MAX_STEPS", 3)  # no convergence: LAPACK instead
    np.testing.assert_allclose(op_norms(ops), exact, rtol=1e-12)
    bad = GramFactors(torch.full((70, 3), float("nan"), dtype=F64))
    assert np.isnan(op_norms([ops[2], bad])[1]) and op_norms([ops[2], bad])[0] > 0
    assert op_norms([GramFactors(torch.zeros(0, 3, dtype=F64))]) == [0.0]


@pytest.mark.parametrize("hidden", [7, 0])
@pytest.mark.parametrize("bias", BIASES)
def test_per_sample_jacobian_equals_jacrev(hidden, bias):
    party = _party(4, 3, hidden, bias, seed=10 + hidden)
    if hidden and bias[0]:
        with torch.no_grad():
            party.net[0].bias[0] = 0.0  # x[0] = 0: a pre-activation exactly 0
    x = _inputs(6, 4, seed=11)
    params = {k: v.detach() for k, v in party.named_parameters()}

    def h(p: dict[str, torch.Tensor], xi: torch.Tensor) -> torch.Tensor:
        return functional_call(party, p, (xi.unsqueeze(0),))[0]

    ref = vmap(jacrev(h), in_dims=(None, 0))(params, x)
    dense = torch.cat([ref[k].reshape(6, 3, -1) for k in params], dim=2)
    op = EmbeddingJacobian.of(party, x)
    assert type(op).__name__ != "_DenseJacobian"
    # the same products; only u = Vx + b is summed by another library (numpy): round-off
    _np_close(op.dense(), dense.numpy(), rel=1e-14)


def test_tight_term_closed_form_equals_torch_func(monkeypatch):
    """The tight term from the closed-form derivatives == from torch.func (a subclassed head)."""
    from cvfl_sim.bounds import tight_term
    from cvfl_sim.bounds.tight_term import tight_lemma1_bound

    class Head(LinearHead):
        """Not the toolkit's own type: the torch.func derivatives are used for it."""

    torch.manual_seed(5)
    parties = [_party(3, 2, 6, True, seed=20), _party(2, 3, 0, True, seed=21)]
    plain = LinearHead(5, 3).to(F64)
    sub = Head(5, 3).to(F64)
    sub.load_state_dict(plain.state_dict())
    xs = [_inputs(8, 3, seed=22), _inputs(8, 2, seed=23)]
    y = torch.randint(0, 3, (8,))
    args = (xs, y, [1e-3, 2e-3])
    ref = tight_lemma1_bound(parties, sub, *args, server_error_var=1e-4, remainder=False)
    with monkeypatch.context() as mp:
        mp.setattr(tight_term, "vmap", None)  # the closed form must not need torch.func
        fast = tight_lemma1_bound(parties, plain, *args, server_error_var=1e-4, remainder=False)
    np.testing.assert_allclose(fast.first_order, ref.first_order, rtol=1e-12, atol=0)
    assert np.all(fast.first_order > 0)


def _blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_blas_threads_limits_and_restores():
    before = _blas_threads()
    if not before:
        pytest.skip("threadpoolctl sees no BLAS library here (e.g. Apple Accelerate)")
    with blas_threads(1):
        assert set(_blas_threads()) == {1}
        with blas_threads(1):  # nested
            assert set(_blas_threads()) == {1}
        assert set(_blas_threads()) == {1}
    assert _blas_threads() == before
    with pytest.raises(RuntimeError, match="inside"):
        with blas_threads(1):
            raise RuntimeError("inside")
    assert _blas_threads() == before
    with pytest.raises(ValueError, match="threads must be >= 1"):
        with blas_threads(0):
            pass


def test_blas_threads_overlapping_threads(monkeypatch):
    """A enters, B enters, A leaves, B leaves: one limit, set at A's entry, restored at B's exit.

    A recording controller stands in for threadpoolctl's (OpenBLAS keeps a thread count per
    calling thread in some builds, so the real counts cannot be read across threads here).
    """
    from cvfl_sim.vfl import threads as threads_module

    events: list[str] = []

    class Limiter:
        def restore_original_limits(self) -> None:
            events.append("restore")

    class Controller:
        def limit(self, limits: int, user_api: str) -> Limiter:
            events.append(f"limit {limits} {user_api}")
            return Limiter()

    monkeypatch.setattr(threads_module, "_controller", lambda: Controller())
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    inside_b: list[list[str]] = []

    def a() -> None:
        with blas_threads(1):
            a_in.set()
            assert b_in.wait(10)
        a_out.set()

    def b() -> None:
        assert a_in.wait(10)
        with blas_threads(1):
            b_in.set()
            assert a_out.wait(10)
            inside_b.append(list(events))

    workers = [threading.Thread(target=f) for f in (a, b)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(20)
    assert inside_b == [["limit 1 blas"]]  # A's exit restored nothing while B was inside
    assert events == ["limit 1 blas", "restore"]


def test_blas_threads_restore_failure_never_hides_the_error(monkeypatch):
    from cvfl_sim.vfl import threads as threads_module

    class Limiter:
        def restore_original_limits(self) -> None:
            raise OSError("restore failed")

    class Controller:
        def limit(self, limits: int, user_api: str) -> Limiter:
            return Limiter()

    monkeypatch.setattr(threads_module, "_controller", lambda: Controller())
    with pytest.raises(KeyError, match="the block's own"):
        with blas_threads(1):
            raise KeyError("the block's own")
    with pytest.raises(OSError, match="restore failed"):  # without an error of its own
        with blas_threads(1):
            pass


def test_loss_gradients_at_equal_autograd():
    """The closed-form head gradients (linear head) and the autograd path (any head)."""
    gen = torch.Generator().manual_seed(12)
    P, C, B = 5, 3, 7
    y = torch.randint(0, C, (B,), generator=gen)
    heads = [LinearHead(P, C).to(F64), _Head(P, C).to(F64)]  # closed form; autograd (subclass)
    heads.append(nn.Sequential(nn.Linear(P, 4), nn.Tanh(), nn.Linear(4, C)).to(F64))
    for head in heads:
        n0 = sum(q.numel() for q in head.parameters())
        points = [
            (
                torch.randn(n0, dtype=F64, generator=gen),
                3.0 * torch.randn(B, P, dtype=F64, generator=gen),
            )
            for _ in range(3)
        ]
        points[1][1][0] *= 20.0  # a sample near a softmax vertex
        got = _autodiff.loss_gradients_at(head, points, y)
        for (t, Z), (g_t, g_z) in zip(points, got):
            ref = copy.deepcopy(head)
            with torch.no_grad():  # the module at theta0, its own parameters
                torch.nn.utils.vector_to_parameters(t, ref.parameters())
            z = Z.clone().requires_grad_(True)
            loss = nn.functional.cross_entropy(ref(z), y)
            *gp, gz = torch.autograd.grad(loss, [*ref.parameters(), z])
            _close(g_t, torch.cat([g.reshape(-1) for g in gp]))
            _close(g_z, gz)


def test_float64_mirror_follows_values_flags_and_replaced_tensors():
    """Refreshed in place while the same tensors are held; copied again when one is replaced."""
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    mirror = _autodiff.Float64Mirror()
    first = mirror([model])[0]
    assert all(p.dtype == F64 for p in first.parameters())
    with torch.no_grad():
        model[0].weight.add_(1.0)
        model[1].running_mean.add_(2.0)  # a buffer
    model.eval()
    again = mirror([model])[0]
    assert again is first  # refreshed, not copied again
    for p, q in zip(
        (*again.parameters(), *again.buffers()), (*model.parameters(), *model.buffers())
    ):
        assert torch.equal(p, q.to(F64))
    assert not again.training and not again[1].training
    model[2].weight = nn.Parameter(torch.zeros(2, 4))  # a new tensor object: a new copy
    third = mirror([model])[0]
    assert third is not first and torch.equal(third[2].weight, torch.zeros(2, 4, dtype=F64))
    with torch.no_grad():
        model[2].bias.data = torch.ones(5)  # the same object, another shape: a new copy
    fourth = mirror([model])[0]
    assert fourth is not third and fourth[2].bias.shape == (5,)
    model[1] = nn.BatchNorm1d(4)  # a new submodule of the same shapes: a new copy
    fifth = mirror([model])[0]
    assert fifth is not fourth
    # a hook registered after the copy: a new copy, which has it (the closed forms refuse it)
    model[0].register_forward_hook(lambda mod, args, out: out * 2.0)
    sixth = mirror([model])[0]
    assert sixth is not fifth and len(sixth[0]._forward_hooks) == 1
    assert mirror([model])[0] is sixth
