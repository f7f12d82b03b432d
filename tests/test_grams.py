"""The closed-form Gram matrices and per-sample Jacobians of the probes, against autograd.

The Lemma-1 probe and the tight term read the spectral norms of the embedding Jacobians and of
the Hessian cross blocks from Gram matrices built in closed form for the toolkit's plain models
(MLP parties, linear head). Each is compared here with the Gram of the dense autograd matrix
(``torch.autograd`` row by row, or ``torch.func.jacrev``, on a subclass of the model where the
closed form would otherwise be taken), which shares no code with the closed forms, at points
that include a ReLU exactly at 0 and a saturated softmax. Each test also makes the autograd
path raise while the closed form runs, so that it cannot compare autograd with itself. A
dropped or swapped bias term, a wrong factor or a transposed index changes entries by O(1), far
above the 1e-12 tolerances (float64 rounding of sums of a few hundred terms).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info
from torch import nn
from torch.func import functional_call, jacrev, vmap

from cvfl_sim.bounds import _autodiff
from cvfl_sim.bounds._autodiff import (
    embedding_hessian_blocks,
    embedding_hessian_grams,
    embedding_jacobian,
    embedding_jacobian_gram,
    gram,
    gram_op_norm,
    per_sample_embedding_jacobian,
    plain_mlp,
)
from cvfl_sim.vfl.models import LinearHead, MLPEmbedding
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


@pytest.mark.parametrize("bias", BIASES)
@pytest.mark.parametrize("hidden", [16, 3, 0])
def test_jacobian_gram_equals_autograd(hidden, bias, monkeypatch):
    party = _party(6, 3, hidden, bias, seed=hidden + sum(bias))
    first = party.net[0] if hidden else party.net
    if first.bias is not None:
        with torch.no_grad():
            first.bias[0] = 0.0  # x[0] = 0: u[0, 0] == 0 exactly (relu's derivative 0 there)
    x = _inputs(5, 6, seed=1)
    J = embedding_jacobian(party, x)
    assert J.shape[0] <= J.shape[1]  # rows are the shorter side: the closed form's case
    with monkeypatch.context() as mp:
        _no_autograd(mp, "embedding_jacobian", "jacobian")
        G = embedding_jacobian_gram(party, x)
    _close(G, J @ J.T)
    sv = np.linalg.svd(J.numpy(), compute_uv=False)
    assert gram_op_norm(G) == pytest.approx(sv[0], rel=1e-12)


def test_jacobian_gram_other_side_and_other_modules():
    # more rows than parameters: the parameter-side Gram (smaller), still the same norms
    party = _party(2, 3, 0, True, seed=3)
    x = _inputs(40, 2, seed=2)
    J = embedding_jacobian(party, x)
    G = embedding_jacobian_gram(party, x)
    assert G.shape == (J.shape[1], J.shape[1])
    _close(G, J.T @ J)

    # a module the closed form does not know (tanh), or a hooked MLP: autograd's Gram
    odd = _party(6, 3, 8, True, seed=4)
    odd.net[1] = nn.Tanh()
    hooked = _party(6, 3, 8, True, seed=4)
    hooked.net[2].register_forward_hook(lambda mod, inp, out: 2.0 * out)
    own = _party(6, 3, 8, True, seed=4)  # its own forward (an instance attribute): not plain
    plain_forward = own.net[0].forward
    own.net[0].forward = lambda z: plain_forward(2.0 * z)
    x = _inputs(5, 6, seed=5)
    assert plain_mlp(odd) is None and plain_mlp(hooked) is None and plain_mlp(own) is None
    for net in (odd, hooked, own):
        J = embedding_jacobian(net, x)
        _close(embedding_jacobian_gram(net, x), J @ J.T)


class _Head(LinearHead):
    """Not the toolkit's own type: autograd builds its blocks (the reference)."""


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("sizes", [[2, 3], [4, 4, 4, 4], [1], [5]])
def test_hessian_grams_equal_autograd_blocks(bias, sizes, monkeypatch):
    gen = torch.Generator().manual_seed(len(sizes) + 2 * bias)
    P, C, B = sum(sizes), 3, 9
    head, ref = LinearHead(P, C).to(F64), _Head(P, C).to(F64)
    if not bias:
        head.net.bias = ref.net.bias = None
    theta0 = torch.randn(sum(q.numel() for q in head.parameters()), dtype=F64, generator=gen)
    Z = 4.0 * torch.randn(B, P, dtype=F64, generator=gen)
    Z[1] *= 30.0  # a sample near a softmax vertex
    y = torch.randint(0, C, (B,), generator=gen)
    dense = embedding_hessian_blocks(ref, theta0, Z, y, sizes)  # autograd
    with monkeypatch.context() as mp:
        _no_autograd(mp, "embedding_hessian_blocks", "jacobian")
        grams = embedding_hessian_grams(head, theta0, Z, y, sizes)
        last = embedding_hessian_grams(head, theta0, Z, y, sizes, [len(sizes)])
    assert len(grams) == len(sizes) + 1
    for A, G in zip(dense, grams):
        _close(G, gram(A))
        assert gram_op_norm(G) == pytest.approx(
            float(np.linalg.norm(A.numpy(), 2)), rel=1e-10, abs=1e-300
        )
    assert len(last) == 1
    _close(last[0], grams[-1], rel=0.0)


def test_hessian_grams_of_other_heads_are_the_dense_blocks_grams():
    """An MLP head: the Gram of each autograd block (no closed form for it)."""
    gen = torch.Generator().manual_seed(7)
    sizes, C, B = [2, 3], 3, 6
    mlp = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, C)).to(F64)
    t = torch.cat([q.detach().reshape(-1) for q in mlp.parameters()])
    Z = torch.randn(B, 5, dtype=F64, generator=gen)
    y = torch.randint(0, C, (B,), generator=gen)
    blocks = embedding_hessian_blocks(mlp, t, Z, y, sizes)
    for A, G in zip(blocks, embedding_hessian_grams(mlp, t, Z, y, sizes)):
        _close(G, gram(A))


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
    fast = per_sample_embedding_jacobian(party, x)
    assert fast is not None
    _close(fast, dense, rel=0.0)  # the same products: bit-identical entries
    plain_layer = nn.Linear(4, 3).to(F64)
    assert per_sample_embedding_jacobian(plain_layer, x) is not None
    odd = _party(4, 3, 7, True, seed=12)
    odd.net[1] = nn.Tanh()
    assert per_sample_embedding_jacobian(odd, x) is None


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
