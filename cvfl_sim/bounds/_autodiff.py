r"""Differentiation primitives shared by the C3 constants and the Lemma-1 probe (C3, C4.1).

The loss of C0 is seen here as a function of the server parameters :math:`\theta_0` (one flat
vector) and the concatenated embeddings :math:`Z = [h_1, \dots, h_M]` of a batch, ``(B, ΣP_m)``:
:math:`F_B(\theta_0, Z) = \frac1B\sum_i \ell(\theta_0, Z_i; y_i)` (cross-entropy, a batch
**mean**). Every Hessian and Jacobian below is computed exactly: as a dense matrix with
:mod:`torch.autograd` (one batched vector-Jacobian product per row), or in closed form for the
toolkit's plain models (a linear softmax head, MLP parties; :func:`plain_linear`,
:func:`plain_mlp`), checked against autograd in the tests. Norms are exact too: the spectral
norm from the largest eigenvalue of the Gram matrix of the shorter side (:func:`gram`,
:func:`gram_op_norm`), the Frobenius norm from the entries. The blocks are small (a batch's
embeddings), so a dense matrix costs less than a power iteration; the probes build the Gram
matrices directly where the closed forms allow, without the dense blocks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import nn

__all__: list[str] = []


def check_all_trained(parties: Sequence[nn.Module], server: nn.Module, what: str) -> None:
    r"""Raise ``ValueError`` naming the first frozen parameter (``requires_grad=False``).

    The C3 constants, Lemma 1 and the certificates are derivatives in every parameter
    :math:`\theta_m` of the models, the vector the run trains and the server compresses. The
    simulator leaves a frozen parameter out of its updates, so a frozen one is a constant of the
    run that these measurements would treat as trained (or autograd refuses to differentiate).
    ``what`` names the measurement in the message.
    """
    models = [("the server model", server)]
    models += [(f"party {m}'s model", p) for m, p in enumerate(parties, start=1)]
    for label, net in models:
        for name, q in net.named_parameters():
            if not q.requires_grad:
                raise ValueError(
                    f"{what} needs every parameter of the models trained, but {label} has the "
                    f"frozen parameter {name!r} (requires_grad=False): unfreeze it, or apply "
                    "the frozen part to the data before training"
                )


def check_lemma1_models(parties: Any, server: Any, inputs: Any, y: Any) -> tuple[int, int]:
    """``(M, B)`` after checking the models, features and labels of a Lemma-1 bound (C4.1)."""
    if not isinstance(server, nn.Module):
        raise TypeError(f"server must be a torch.nn.Module, got {type(server).__name__}")
    if not isinstance(parties, Sequence) or not all(isinstance(p, nn.Module) for p in parties):
        raise TypeError("parties must be a sequence of torch.nn.Module (one per party)")
    M = len(parties)
    if M < 1:
        raise ValueError("parties must hold at least one party model")
    check_all_trained(parties, server, "the tight Lemma-1 term")
    if not isinstance(inputs, Sequence) or len(inputs) != M:
        raise ValueError(f"inputs must hold one feature tensor per party (M = {M})")
    if not all(isinstance(x, torch.Tensor) and x.ndim >= 1 for x in inputs):
        raise TypeError("inputs must be torch tensors with the batch along dimension 0")
    B = int(inputs[0].shape[0])
    if B < 1 or any(int(x.shape[0]) != B for x in inputs):
        raise ValueError(f"inputs must share one batch size B >= 1, got {[len(x) for x in inputs]}")
    if not isinstance(y, torch.Tensor) or y.shape != (B,):
        raise ValueError(f"y must be a tensor of B = {B} class labels")
    return M, B


def linear_softmax_head(server: nn.Module) -> nn.Linear | None:
    """The server's ``nn.Linear`` with bias if the server is exactly one (or a ``LinearHead``).

    A subclass or another wrapper could apply a function its parameters do not show, and the
    remainder's constants are proved for a linear softmax head only (the same test as the
    closed-form Hessian blocks make).
    """
    from ..vfl.models import LinearHead

    lin = plain_linear(server, LinearHead)
    return lin if lin is not None and lin.bias is not None else None


def grad(
    out: torch.Tensor | Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], **kw: Any
) -> list[torch.Tensor]:
    """``torch.autograd.grad`` with zeros (not ``None``) for inputs the output does not use."""
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    gs = torch.autograd.grad(outs, list(inputs), allow_unused=True, **kw)
    return [torch.zeros_like(x) if g is None else g for g, x in zip(gs, inputs)]


def sq(ts: Sequence[torch.Tensor | None]) -> float:
    r""":math:`\sum \|t\|^2` over the tensors (``None`` skipped)."""
    return float(sum(float((t.detach() ** 2).sum()) for t in ts if t is not None))


def jacobian(out: torch.Tensor, wrt: Sequence[torch.Tensor]) -> torch.Tensor:
    r"""Dense Jacobian :math:`\partial\,\mathrm{vec}(\mathrm{out}) / \partial\,\mathrm{vec}(\mathrm{wrt})`.

    ``out`` must carry a graph to ``wrt`` (built with ``create_graph=True`` when it is itself a
    gradient). Returns ``(out.numel(), Σ w.numel())``, columns in the order of ``wrt`` (each
    flattened row-major). One batched vector-Jacobian product over the identity
    (``is_grads_batched``), or one product per row if an operator has no batching rule.
    """
    K = out.numel()
    eye = torch.eye(K, dtype=out.dtype, device=out.device).reshape(K, *out.shape)
    try:
        rows = grad(out, wrt, grad_outputs=eye, retain_graph=True, is_grads_batched=True)
        return torch.cat([r.reshape(K, -1) for r in rows], dim=1)
    except RuntimeError:  # pragma: no cover - an op without a batching rule
        return torch.stack(
            [
                torch.cat(
                    [g.reshape(-1) for g in grad(out, wrt, grad_outputs=e, retain_graph=True)]
                )
                for e in eye
            ]
        )


def gram(A: torch.Tensor) -> torch.Tensor:
    r"""The Gram matrix of ``A``'s shorter side, in float64: :math:`AA^\top` or :math:`A^\top A`.

    Both have the nonzero eigenvalues :math:`\sigma_i(A)^2`, so :func:`gram_op_norm` of either
    is ``A``'s spectral norm.
    """
    a = A.detach().to(torch.float64)
    return a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a


def gram_op_norm(G: torch.Tensor) -> float:
    r""":math:`\sqrt{\lambda_{\max}(G)}` of a Gram matrix :math:`G = AA^\top`: ``A``'s 2-norm.

    Only the largest eigenvalue is computed (LAPACK ``dsyevx``: tridiagonal reduction, then
    bisection to :math:`\epsilon\|G\|` absolute accuracy, as a full ``eigvalsh``), about twice
    as fast as all of them. 0 for an empty matrix; ``nan`` if ``G`` has a non-finite entry
    (also where a finite ``A``'s Gram overflowed).
    """
    import scipy.linalg

    n = int(G.shape[0])
    if n == 0:
        return 0.0
    g = G.detach().to(torch.float64).cpu().numpy()
    if not np.isfinite(g).all():
        return math.nan
    top = scipy.linalg.eigh(
        g, eigvals_only=True, subset_by_index=[n - 1, n - 1], driver="evx", check_finite=False
    )
    return math.sqrt(max(float(top[0]), 0.0))


def op_norm(A: torch.Tensor) -> float:
    r"""Spectral norm (largest singular value) of a matrix; 0 for an empty one.

    :func:`gram_op_norm` of :func:`gram` (float64): several times faster than an SVD of the wide
    blocks used here.
    """
    if A.numel() == 0:
        return 0.0
    return gram_op_norm(gram(A))


def flat_params(module: nn.Module) -> torch.Tensor:
    """The module's parameters as one detached flat vector (a copy)."""
    return torch.cat([q.detach().reshape(-1) for q in module.parameters()])


def server_loss(
    server: nn.Module, theta0: torch.Tensor | None, Z: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    r""":math:`F_B(\theta_0, Z)`: cross-entropy (batch mean) of ``server`` on embeddings ``Z``.

    ``theta0`` is a flat parameter vector used in place of the server's own parameters (it may be
    a leaf that requires grad); ``None`` uses the module's parameters.
    """
    if theta0 is None:
        return nn.functional.cross_entropy(server(Z), y)
    params, off = {}, 0
    for name, q in server.named_parameters():
        params[name] = theta0[off : off + q.numel()].reshape(q.shape)
        off += q.numel()
    logits = torch.func.functional_call(server, params, (Z,))
    return nn.functional.cross_entropy(logits, y)


def column_blocks(sizes: Sequence[int], B: int) -> list[torch.Tensor]:
    """Indices of each party's entries in ``vec(Z)`` for ``Z`` of shape ``(B, ΣP_m)`` (row-major)."""
    total = sum(sizes)
    out, off = [], 0
    for P in sizes:
        cols = torch.arange(off, off + P)
        out.append((torch.arange(B)[:, None] * total + cols[None, :]).reshape(-1))
        off += P
    return out


def embedding_hessian_blocks(
    server: nn.Module,
    theta0: torch.Tensor,
    Z: torch.Tensor,
    y: torch.Tensor,
    sizes: Sequence[int],
    blocks: Sequence[int] | None = None,
) -> list[torch.Tensor]:
    r"""The cross blocks :math:`\nabla^2_{h_m, \Phi_{-m}} F_B` at :math:`(\theta_0, Z)` (C3.4, chain).

    One row per entry of :math:`h_m` (``h_0 = θ_0``, so ``m = 0`` has one row per server parameter)
    and one column per entry of everything else block ``m`` sees, :math:`\Phi_{-m}`: for ``m >= 1``
    :math:`\theta_0` and the other parties' embeddings of the batch, in the order
    ``[θ_0, vec(Z)]`` with block ``m``'s own columns removed; for ``m = 0`` every embedding.
    This is the Hessian in the **embeddings** of C3.4 (the chain reading of Lemma 1).

    The gradient graph of :math:`F_B` is built once and serves every block of ``blocks``
    (default ``0..M``), returned in that order.
    """
    from ..vfl.models import LinearHead

    layer = plain_linear(server, LinearHead)
    if layer is not None:
        return _linear_head_blocks(layer, theta0, Z, y, sizes, blocks)
    t = theta0.detach().clone().requires_grad_(True)
    z = Z.detach().clone().requires_grad_(True)
    g_t, g_z = grad(server_loss(server, t, z, y), [t, z], create_graph=True)
    cols = column_blocks(sizes, Z.shape[0])
    out = []
    for m in range(len(sizes) + 1) if blocks is None else blocks:
        if m == 0:
            out.append(jacobian(g_t, [z]))
            continue
        idx = cols[m - 1]
        rows = jacobian(g_z.reshape(-1)[idx], [t, z])
        keep = torch.ones(rows.shape[1], dtype=torch.bool)
        keep[t.numel() + idx] = False
        out.append(rows[:, keep])
    return out


def plain_linear(module: nn.Module, wrapper: type) -> nn.Linear | None:
    """The ``nn.Linear`` that ``module`` is, or that exactly a ``wrapper`` holds as its ``net``.

    ``wrapper`` is one of the toolkit's modules (``LinearHead``, ``MLPEmbedding``). Only these
    types, with the parameters ``weight`` and ``bias`` (or ``weight`` alone) and no hooks but
    the toolkit's own recording ones (they only observe the output): a subclass, a custom
    module, a forward hook or a reparametrisation (``weight_norm``) could compute something
    its parameters do not show, and then only autograd knows its derivatives.
    """
    inner = getattr(module, "net", None)
    holders: list[nn.Module]
    if type(module) is nn.Linear:
        layer, holders = cast(nn.Linear, module), [module]
    elif type(module) is wrapper and type(inner) is nn.Linear:
        layer = cast(nn.Linear, inner)
        holders = [module, layer]
    else:
        return None
    if not _plain_params(layer):
        return None
    if len(list(module.parameters())) != len(list(layer.parameters())):
        return None
    return layer if _unhooked(holders) else None


def _plain_params(layer: nn.Linear) -> bool:
    """Whether ``layer`` has the parameters ``weight`` and ``bias``, or ``weight`` alone.

    And no buffer: a ``bias`` moved to a buffer still enters ``nn.Linear.forward``, and the
    closed forms, which read the parameters only, would leave it out.
    """
    if any(True for _ in layer.named_buffers()):
        return False
    return [n for n, _ in layer.named_parameters()] in (["weight", "bias"], ["weight"])


def _unhooked(holders: Sequence[nn.Module]) -> bool:
    """Whether no hook but the toolkit's recording ones is on ``holders`` or registered globally.

    And no holder has its own ``forward`` (an instance attribute replacing the class's).
    """
    from torch.nn.modules import module as torch_module

    if any("forward" in vars(h) for h in holders):
        return False

    hooks = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    registered = [fn for h in holders for name in hooks for fn in getattr(h, name, {}).values()]
    # torch.nn.modules.module.register_module_forward_hook and the like
    registered += [fn for name in hooks for fn in getattr(torch_module, f"_global{name}").values()]
    return all(_observing(fn) for fn in registered)


def plain_mlp(module: nn.Module) -> tuple[nn.Linear, nn.Linear] | None:
    """The two layers of a toolkit ``MLPEmbedding`` that is exactly ``Linear → ReLU → Linear``.

    The same conditions as :func:`plain_linear`: these types only, plain parameters, no hooks
    but the toolkit's recording ones; ``None`` otherwise (then only autograd knows its
    derivatives).
    """
    from ..vfl.models import MLPEmbedding

    net = getattr(module, "net", None)
    if type(module) is not MLPEmbedding or type(net) is not nn.Sequential:
        return None
    layers = list(cast(nn.Sequential, net).children())
    if [type(q) for q in layers] != [nn.Linear, nn.ReLU, nn.Linear]:
        return None
    first, last = cast(nn.Linear, layers[0]), cast(nn.Linear, layers[2])
    if not (_plain_params(first) and _plain_params(last)):
        return None
    if len(list(module.parameters())) != len(list(first.parameters())) + len(
        list(last.parameters())
    ):
        return None
    return (first, last) if _unhooked([module, net, *layers]) else None


def _observing(hook: Any) -> bool:
    """Whether ``hook`` is one of the toolkit's recording hooks (they return None: observe only)."""
    return str(getattr(hook, "__module__", "")).startswith("cvfl_sim.")


def linear_head_second_derivatives(
    layer: nn.Linear, theta0: torch.Tensor, Z: torch.Tensor, y: torch.Tensor, mean: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The two kinds of second derivative of a linear softmax head's batch-mean cross entropy.

    With :math:`u_i = A z_i + c`, :math:`p_i = \mathrm{softmax}(u_i)`, :math:`g_i = p_i - e_{y_i}`
    and :math:`S_i = \mathrm{diag}(p_i) - p_i p_i^\top`,

    .. math::
       \frac{\partial^2 F_B}{\partial z_{ia}\,\partial z_{kq}} = \frac{\delta_{ik}}{B}
       (A^\top S_i A)_{aq}, \quad
       \frac{\partial^2 F_B}{\partial z_{ia}\,\partial A_{cq}} = \frac1B\bigl((S_i A)_{ca}
       z_{iq} + g_{ic}\delta_{aq}\bigr), \quad
       \frac{\partial^2 F_B}{\partial z_{ia}\,\partial c_c} = \frac1B (S_i A)_{ca},

    at the point ``theta0`` (``θ_0 = [vec(A), c]``, row-major; not the module's own values).
    Returns ``theta_cols`` ``(B, P, n0)``, the θ_0 columns of row ``(i, a)``, and ``zz``
    ``(B, P, P)``, :math:`(A^\top S_i A)_{aq} / B` (the embedding columns of sample ``i``).
    ``mean=False`` leaves out the factor :math:`1/B`: the per-sample loss's derivatives.
    """
    B, P = Z.shape
    C = layer.out_features
    z = Z.detach()
    t = theta0.detach().reshape(-1).to(z.dtype)
    A = t[: C * P].reshape(C, P)
    c = t[C * P :] if layer.bias is not None else torch.zeros(C, dtype=z.dtype, device=z.device)
    p = torch.softmax(z @ A.T + c, dim=1)
    g = p.clone()
    g[torch.arange(B, device=z.device), y] -= 1.0
    S = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]  # (B, C, C)
    SA = S @ A  # (B, C, P): (S_i A)_{ca}
    # d^2 F / d z_{ia} d A_{cq}, as (B, P(a), C, P(q)); the bias part (B, P(a), C)
    eye = torch.eye(P, dtype=z.dtype, device=z.device)
    dA = (SA.transpose(1, 2)[:, :, :, None] * z[:, None, None, :]) + (
        g[:, None, :, None] * eye[None, :, None, :]
    )
    parts = [dA.reshape(B, P, C * P)]
    if layer.bias is not None:
        parts.append(SA.transpose(1, 2))
    theta_cols = torch.cat(parts, dim=2)  # (B, P, n0): rows (i, a)
    zz = A.T @ SA  # (B, P, P): (A^T S_i A)_{aq}
    return (theta_cols / B, zz / B) if mean else (theta_cols, zz)


def _linear_head_rows(
    theta_cols: torch.Tensor, zz: torch.Tensor, off: Sequence[int], m: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block ``m >= 1``'s θ_0 columns and, per sample, its other-embedding columns.

    Returns ``(B P_m, n0)`` and ``(B, P_m, P - P_m)``: row ``(i, a)`` of the block is nonzero
    only in the θ_0 columns and in sample ``i``'s own other-embedding columns.
    """
    B, _, n0 = theta_cols.shape
    a = slice(off[m - 1], off[m])
    rows_t = theta_cols[:, a, :].reshape(B * (off[m] - off[m - 1]), n0)
    other = torch.cat([zz[:, a, : off[m - 1]], zz[:, a, off[m] :]], dim=2)
    return rows_t, other


def _linear_head_block(
    theta_cols: torch.Tensor, zz: torch.Tensor, off: Sequence[int], m: int
) -> torch.Tensor:
    """Dense block ``m`` from :func:`linear_head_second_derivatives` (``off``: block offsets)."""
    B, _, n0 = theta_cols.shape
    if m == 0:
        return theta_cols.permute(2, 0, 1).reshape(n0, -1)
    rows_t, other = _linear_head_rows(theta_cols, zz, off, m)
    Pm, Q = other.shape[1], other.shape[2]
    rows_z = torch.zeros(B, Pm, B, Q, dtype=zz.dtype, device=zz.device)
    idx = torch.arange(B, device=zz.device)
    rows_z[idx, :, idx, :] = other
    return torch.cat([rows_t, rows_z.reshape(B * Pm, B * Q)], dim=1)


def _linear_head_blocks(
    layer: nn.Linear,
    theta0: torch.Tensor,
    Z: torch.Tensor,
    y: torch.Tensor,
    sizes: Sequence[int],
    blocks: Sequence[int] | None,
) -> list[torch.Tensor]:
    r""":func:`embedding_hessian_blocks` of a linear softmax head, in closed form.

    From :func:`linear_head_second_derivatives`, assembled in the same row and column order as
    the autograd path (``vec(Z)`` row-major).
    """
    theta_cols, zz = linear_head_second_derivatives(layer, theta0, Z, y)
    off = [0, *itertools.accumulate(sizes)]
    chosen = range(len(sizes) + 1) if blocks is None else blocks
    return [_linear_head_block(theta_cols, zz, off, m) for m in chosen]


def embedding_hessian_grams(
    server: nn.Module,
    theta0: torch.Tensor,
    Z: torch.Tensor,
    y: torch.Tensor,
    sizes: Sequence[int],
    blocks: Sequence[int] | None = None,
) -> list[torch.Tensor]:
    r""":func:`gram` of each block of :func:`embedding_hessian_blocks`, float64, same arguments.

    For a linear softmax head block ``m >= 1`` is :math:`[R_m \mid D_m]`: ``B P_m`` rows, the
    θ_0 columns :math:`R_m` and the other embeddings' columns :math:`D_m`, which are block
    diagonal (row ``(i, a)`` sees only sample ``i``'s other entries, through
    :math:`A^\top S_i A / B`). So its Gram is :math:`R_m R_m^\top + \mathrm{blockdiag}_i(D_i
    D_i^\top)`, formed without the dense block (``B`` times fewer products). Block 0, and a
    block whose column side is the shorter (one party, say), take the :func:`gram` of the dense
    closed-form block. Other heads: the dense autograd blocks' :func:`gram`.
    """
    from ..vfl.models import LinearHead

    layer = plain_linear(server, LinearHead)
    if layer is None:
        return [gram(A) for A in embedding_hessian_blocks(server, theta0, Z, y, sizes, blocks)]
    B = Z.shape[0]
    theta_cols, zz = linear_head_second_derivatives(
        layer, theta0.to(torch.float64), Z.to(torch.float64), y
    )
    n0 = theta_cols.shape[2]
    off = [0, *itertools.accumulate(sizes)]
    out = []
    for m in range(len(sizes) + 1) if blocks is None else blocks:
        Pm = off[m] - off[m - 1] if m else 0
        if m == 0 or B * Pm > n0 + B * (off[-1] - Pm):  # the column side is the shorter
            out.append(gram(_linear_head_block(theta_cols, zz, off, m)))
            continue
        rows_t, other = _linear_head_rows(theta_cols, zz, off, m)
        G = rows_t @ rows_t.T
        idx = torch.arange(B, device=G.device)
        G.view(B, Pm, B, Pm)[idx, :, idx, :] += other @ other.transpose(1, 2)
        out.append(G)
    return out


def embedding_jacobian(party: nn.Module, x: torch.Tensor) -> torch.Tensor:
    r"""Dense :math:`\nabla_{\theta_m} h_m(\theta_m; x)`: ``(B P_m, |θ_m|)`` (C3.5)."""
    params = [q for q in party.parameters()]
    with torch.enable_grad():
        h = party(x)
        return jacobian(h, params)


def _plain_party(party: nn.Module) -> tuple[tuple[nn.Linear, nn.Linear] | None, nn.Linear | None]:
    """``(plain_mlp(party), None)``, ``(None, its single plain layer)`` or ``(None, None)``."""
    from ..vfl.models import MLPEmbedding

    layers = plain_mlp(party)
    return layers, None if layers is not None else plain_linear(party, MLPEmbedding)


def _relu_parts(
    first: nn.Linear, last: nn.Linear, X: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""A plain MLP's pre-activations and its output weights masked by relu's derivative.

    Returns :math:`u = X V^\top + b` ``(B, h)`` and :math:`W_{aj} s_{ij}` ``(B, P, h)``, with
    :math:`s_{ij} = 1[u_{ij} > 0]`, in ``X``'s dtype.
    """
    V, W = first.weight.detach().to(X.dtype), last.weight.detach().to(X.dtype)
    u = X @ V.T
    if first.bias is not None:
        u = u + first.bias.detach().to(X.dtype)
    return u, (u > 0).to(X.dtype)[:, None, :] * W[None, :, :]


def per_sample_embedding_jacobian(party: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    r"""Per-sample :math:`\nabla_{\theta_m} h_m(\theta_m; x_i)`, ``(B, P_m, |θ_m|)``, closed form.

    For the plain MLPs (:func:`plain_mlp`, :func:`plain_linear`; notation of
    :func:`embedding_jacobian_gram`): :math:`\partial h_a / \partial V_{jl} = W_{aj} s_{ij}
    x_{il}`, :math:`\partial h_a / \partial b_j = W_{aj} s_{ij}`, :math:`\partial h_a /
    \partial W_{a'j} = \delta_{aa'} r_{ij}`, :math:`\partial h_a / \partial c_{a'} =
    \delta_{aa'}`; columns in the order of ``party.named_parameters()`` (each row-major), in
    the party's dtype. ``None`` for any other module (use autograd).
    """
    layers, single = _plain_party(party)
    X = x.detach()
    B = X.shape[0]

    def linear_part(layer: nn.Linear, inp: torch.Tensor) -> list[torch.Tensor]:
        P, D = layer.out_features, inp.shape[1]
        eye = torch.eye(P, dtype=inp.dtype, device=inp.device)
        cols = [(eye[None, :, :, None] * inp[:, None, None, :]).reshape(B, P, P * D)]
        if layer.bias is not None:
            cols.append(eye.expand(B, P, P))
        return cols

    if single is not None:
        return torch.cat(linear_part(single, X), dim=2)
    if layers is None:
        return None
    first, last = layers
    u, Ws = _relu_parts(first, last, X)
    cols = [(Ws[:, :, :, None] * X[:, None, None, :]).reshape(B, last.out_features, -1)]
    if first.bias is not None:
        cols.append(Ws)
    return torch.cat(cols + linear_part(last, torch.relu(u)), dim=2)


def embedding_jacobian_gram(party: nn.Module, x: torch.Tensor) -> torch.Tensor:
    r""":func:`gram` of :func:`embedding_jacobian` (float64), in closed form for the plain MLPs.

    For :math:`h_a(x_i) = \sum_j W_{aj}\, r_{ij} + c_a`, :math:`r_{ij} = \mathrm{relu}(u_{ij})`,
    :math:`u_i = V x_i + b` (:func:`plain_mlp`), with :math:`s_{ij} = 1[u_{ij} > 0]` (autograd's
    derivative of relu, 0 at 0), the Jacobian's rows :math:`(i, a)` have the inner products

    .. math::
       (J J^\top)_{(i,a),(k,b)} = \delta_{ab}\,(r_i^\top r_k + 1)
       + \sum_j W_{aj} W_{bj}\, s_{ij} s_{kj}\,(x_i^\top x_k + 1)

    (the terms ``+ 1`` from the biases ``c`` and ``b``, where the layers have them): the
    ``(B P_m)``-square Gram without the ``(B P_m, |θ_m|)`` Jacobian. A single linear map
    (:func:`plain_linear`) has :math:`\delta_{ab}(x_i^\top x_k + 1)`. Any other module, or
    more rows than parameters (the other Gram is the smaller): the autograd Jacobian's
    :func:`gram`.
    """
    layers, single = _plain_party(party)
    out = layers[1] if layers is not None else single
    n_params = sum(q.numel() for q in party.parameters())
    if out is None or x.shape[0] * out.out_features > n_params:
        return gram(embedding_jacobian(party, x))  # (or the parameter side is the shorter)
    f64 = torch.float64
    X = x.detach().to(f64)
    B = X.shape[0]

    def inner(a: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return a @ a.T + (1.0 if bias is not None else 0.0)

    if single is not None:
        eye = torch.eye(single.out_features, dtype=f64, device=X.device)
        return torch.kron(inner(X, single.bias), eye)
    assert layers is not None
    first, last = layers
    u, Ws3 = _relu_parts(first, last, X)
    r = torch.relu(u)
    P = last.out_features
    Ws = Ws3.reshape(B * P, -1)  # rows (i, a)
    G = (Ws @ Ws.T).view(B, P, B, P) * inner(X, first.bias)[:, None, :, None]
    G += (
        inner(r, last.bias)[:, None, :, None]
        * torch.eye(P, dtype=f64, device=X.device)[None, :, None, :]
    )
    return G.reshape(B * P, B * P)


def party_jacobians(
    parties: Sequence[nn.Module], inputs: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    r"""Per-sample :math:`J_{m,i} = \partial h_m(\theta_m; x_i)/\partial\theta_m`, ``(B, P_m, |θ_m|)`` each.

    Closed form for the plain models (:func:`per_sample_embedding_jacobian`), else
    :mod:`torch.func` (``vmap`` of ``jacrev``); columns in the order of ``named_parameters()``.
    """
    from torch.func import functional_call, jacrev, vmap

    out = []
    for net, x in zip(parties, inputs):
        closed = per_sample_embedding_jacobian(net, x)
        if closed is not None:
            out.append(closed)
            continue
        pp = {k: v.detach() for k, v in net.named_parameters()}

        def h(params: dict[str, torch.Tensor], xi: torch.Tensor, net: nn.Module = net) -> Any:
            return functional_call(net, params, (xi.unsqueeze(0),))[0]

        Jd = vmap(jacrev(h), in_dims=(None, 0))(pp, x)
        B = int(x.shape[0])
        out.append(torch.cat([Jd[k].reshape(B, Jd[k].shape[1], -1) for k in pp], dim=2))
    return out
