r"""Differentiation primitives shared by the C3 constants and the Lemma-1 probe (C3, C4.1).

The loss of C0 is seen here as a function of the server parameters :math:`\theta_0` (one flat
vector) and the concatenated embeddings :math:`Z = [h_1, \dots, h_M]` of a batch, ``(B, ΣP_m)``:
:math:`F_B(\theta_0, Z) = \frac1B\sum_i \ell(\theta_0, Z_i; y_i)` (cross-entropy, a batch
**mean**). Every Hessian and Jacobian below is computed exactly as a dense matrix with
:mod:`torch.autograd` (one batched vector-Jacobian product per row), and its norms exactly:
operator (spectral) norms from the singular values, Frobenius norms from the entries. The blocks
are small (a batch's embeddings), so a dense matrix costs less than a power iteration.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import nn

__all__: list[str] = []


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
    eye = torch.eye(K, dtype=out.dtype).reshape(K, *out.shape)
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


def op_norm(A: torch.Tensor) -> float:
    r"""Spectral norm (largest singular value) of a matrix; 0 for an empty one.

    :math:`\sqrt{\lambda_{\max}(A A^\top)}` from the Gram matrix of the shorter side (in
    float64), several times faster than an SVD of the wide blocks used here.
    """
    if A.numel() == 0:
        return 0.0
    a = A.detach().to(torch.float64)
    gram = a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a
    return math.sqrt(max(float(torch.linalg.eigvalsh(gram)[-1]), 0.0))


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
    if [n for n, _ in layer.named_parameters()] not in (["weight", "bias"], ["weight"]):
        return None
    if len(list(module.parameters())) != len(list(layer.parameters())):
        return None
    from torch.nn.modules import module as torch_module

    hooks = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    registered = [fn for h in holders for name in hooks for fn in getattr(h, name, {}).values()]
    # torch.nn.modules.module.register_module_forward_hook and the like
    registered += [fn for name in hooks for fn in getattr(torch_module, f"_global{name}").values()]
    if not all(_observing(fn) for fn in registered):
        return None
    return layer


def _observing(hook: Any) -> bool:
    """Whether ``hook`` is one of the toolkit's recording hooks (they return None: observe only)."""
    return str(getattr(hook, "__module__", "")).startswith("cvfl_sim.")


def _linear_head_blocks(
    layer: nn.Linear,
    theta0: torch.Tensor,
    Z: torch.Tensor,
    y: torch.Tensor,
    sizes: Sequence[int],
    blocks: Sequence[int] | None,
) -> list[torch.Tensor]:
    r""":func:`embedding_hessian_blocks` of a linear softmax head, in closed form.

    With :math:`u_i = A z_i + c`, :math:`p_i = \mathrm{softmax}(u_i)`, :math:`g_i = p_i - e_{y_i}`
    and :math:`S_i = \mathrm{diag}(p_i) - p_i p_i^\top`, the batch-mean cross entropy has

    .. math::
       \frac{\partial^2 F_B}{\partial z_{ia}\,\partial z_{kq}} = \frac{\delta_{ik}}{B}
       (A^\top S_i A)_{aq}, \quad
       \frac{\partial^2 F_B}{\partial z_{ia}\,\partial A_{cq}} = \frac1B\bigl((S_i A)_{ca}
       z_{iq} + g_{ic}\delta_{aq}\bigr), \quad
       \frac{\partial^2 F_B}{\partial z_{ia}\,\partial c_c} = \frac1B (S_i A)_{ca},

    assembled in the same row and column order as the autograd path (``θ_0 = [vec(A), c]``,
    row-major; ``vec(Z)`` row-major), at the point ``theta0`` (not the module's own values).
    """
    B, P = Z.shape
    C = layer.out_features
    z = Z.detach()
    t = theta0.detach().reshape(-1).to(z.dtype)
    A = t[: C * P].reshape(C, P)
    c = t[C * P :] if layer.bias is not None else torch.zeros(C, dtype=z.dtype)
    p = torch.softmax(z @ A.T + c, dim=1)
    g = p.clone()
    g[torch.arange(B), y] -= 1.0
    S = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]  # (B, C, C)
    SA = S @ A  # (B, C, P): (S_i A)_{ca}
    # d^2 F / d z_{ia} d A_{cq}, as (B, P(a), C, P(q)); the bias part (B, P(a), C)
    eye = torch.eye(P, dtype=z.dtype)
    dA = (SA.transpose(1, 2)[:, :, :, None] * z[:, None, None, :]) + (
        g[:, None, :, None] * eye[None, :, None, :]
    )
    parts = [dA.reshape(B, P, C * P)]
    if layer.bias is not None:
        parts.append(SA.transpose(1, 2))
    theta_cols = torch.cat(parts, dim=2) / B  # (B, P, n0): rows (i, a)
    n0 = theta_cols.shape[2]
    zz = (A.T @ SA) / B  # (B, P, P): (A^T S_i A)_{aq} / B
    off = [0, *itertools.accumulate(sizes)]
    out = []
    for m in range(len(sizes) + 1) if blocks is None else blocks:
        if m == 0:
            out.append(theta_cols.permute(2, 0, 1).reshape(n0, B * P))
            continue
        a = slice(off[m - 1], off[m])
        Pm = off[m] - off[m - 1]
        rows_t = theta_cols[:, a, :].reshape(B * Pm, n0)
        # the other blocks' columns of every sample k: nonzero only for k = i
        other = torch.cat([zz[:, a, : off[m - 1]], zz[:, a, off[m] :]], dim=2)  # (B, Pm, P-Pm)
        Q = P - Pm
        rows_z = torch.zeros(B, Pm, B, Q, dtype=z.dtype)
        idx = torch.arange(B)
        rows_z[idx, :, idx, :] = other
        out.append(torch.cat([rows_t, rows_z.reshape(B * Pm, B * Q)], dim=1))
    return out


def embedding_jacobian(party: nn.Module, x: torch.Tensor) -> torch.Tensor:
    r"""Dense :math:`\nabla_{\theta_m} h_m(\theta_m; x)`: ``(B P_m, |θ_m|)`` (C3.5)."""
    params = [q for q in party.parameters()]
    with torch.enable_grad():
        h = party(x)
        return jacobian(h, params)
