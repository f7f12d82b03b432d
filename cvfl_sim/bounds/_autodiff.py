r"""Differentiation primitives shared by the C3 constants and the Lemma-1 probe (C3, C4.1).

The loss of C0 is seen here as a function of the server parameters :math:`\theta_0` (one flat
vector) and the concatenated embeddings :math:`Z = [h_1, \dots, h_M]` of a batch, ``(B, ΣP_m)``:
:math:`F_B(\theta_0, Z) = \frac1B\sum_i \ell(\theta_0, Z_i; y_i)` (cross-entropy, a batch
**mean**). Every Hessian and Jacobian below is computed exactly: as a dense matrix with
:mod:`torch.autograd` (one batched vector-Jacobian product per row), or in closed form for the
toolkit's plain models (a linear softmax head, MLP parties; :func:`plain_linear`,
:func:`plain_mlp`), checked against autograd in the tests. The probes keep the Hessian cross
blocks of a linear head as Gram factors (:func:`embedding_hessian_factors_at`) and the parties'
Jacobians as operators (:mod:`cvfl_sim.bounds._jacobians`), without the dense blocks; their
spectral norms come from :mod:`cvfl_sim.bounds._spectral`.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from ._spectral import GramFactors

__all__: list[str] = []


class Float64Mirror:
    r"""Float64 copies of a run's models: deep copies at the first call, refreshed in place after.

    A probe evaluates every probed step on float64 copies of the current models (its
    differences of close gradients need the precision). Deep-copying the modules at every
    probed step cost more than the copy itself; here the structure is copied once and the
    parameters, buffers and training flags are copied into it at each call, for as long as the
    same module objects, holding the same parameter and buffer objects of the same shapes and
    the same hooks, are passed (otherwise they are deep-copied again, hooks included). Each call
    walks each model's modules once.
    """

    def __init__(self) -> None:
        self._sources: list[nn.Module] = []
        self._copies: list[nn.Module] = []
        self._held: list[_Tensors] = []  # the sources' tensors at the deep copy
        self._mirrored: list[_Tensors] = []  # the copies' tensors, in the same order

    def __call__(self, models: Sequence[nn.Module]) -> list[nn.Module]:
        """The float64 copies of ``models``, with their current values."""
        now = [_Tensors.of(m) for m in models]
        same = len(models) == len(self._sources) and all(
            a is b and t.same_as(h) for a, b, t, h in zip(models, self._sources, now, self._held)
        )
        if not same:
            self._sources = list(models)
            self._copies = [copy.deepcopy(m).to(torch.float64) for m in models]
            self._held = now
            self._mirrored = [_Tensors.of(c) for c in self._copies]
            return self._copies
        with torch.no_grad():
            for mirror, model in zip(self._mirrored, now):
                for p, q in zip(mirror.tensors, model.tensors):
                    p.copy_(q)
                for c, d in zip(mirror.modules, model.modules):
                    if c.training != d.training:  # Module.__setattr__ is slow
                        c.training = d.training
        return self._copies


@dataclass(frozen=True)
class _Tensors:
    """A module's submodules, and its parameters then buffers, in ``parameters()`` order."""

    modules: tuple[nn.Module, ...]
    tensors: tuple[torch.Tensor, ...]
    shapes: tuple[tuple[int, ...], ...]
    hooks: tuple[Any, ...]  # per submodule: its hooks' handles and any own forward

    @classmethod
    def of(cls, model: nn.Module) -> _Tensors:
        modules = tuple(model.modules())
        tensors = (*model.parameters(), *model.buffers())
        hooks = tuple(
            (*(tuple(getattr(m, name, {})) for name in _HOOK_DICTS), vars(m).get("forward"))
            for m in modules
        )
        return cls(modules, tensors, tuple(tuple(t.shape) for t in tensors), hooks)

    def same_as(self, other: _Tensors) -> bool:
        """The same submodules and tensor objects, of the same shapes, with the same hooks."""
        return (
            len(self.tensors) == len(other.tensors)
            and len(self.modules) == len(other.modules)
            and all(a is b for a, b in zip(self.tensors, other.tensors))
            and all(a is b for a, b in zip(self.modules, other.modules))
            and self.shapes == other.shapes
            and self.hooks == other.hooks
        )


#: A module's hook dictionaries (torch's attribute names): what its forward runs besides itself.
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


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


def with_block(Z: torch.Tensor, h: torch.Tensor, sizes: Sequence[int], m: int) -> torch.Tensor:
    """``Z`` with party ``m``'s columns (``m >= 1``; ``sizes`` the parties') replaced by ``h``."""
    off = sum(sizes[: m - 1])
    return torch.cat([Z[:, :off], h, Z[:, off + sizes[m - 1] :]], dim=1)


def loss_gradients_at(
    server: nn.Module, points: Sequence[tuple[torch.Tensor, torch.Tensor]], y: torch.Tensor
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    r""":math:`(\nabla_{\theta_0} F_B, \nabla_Z F_B)` of :func:`server_loss` at each ``(θ_0, Z)``.

    For a linear softmax head (:func:`plain_linear`), with :math:`g_i = \mathrm{softmax}(A z_i
    + c) - e_{y_i}`: :math:`\nabla_A F_B = \frac1B \sum_i g_i z_i^\top`, :math:`\nabla_c F_B =
    \frac1B \sum_i g_i` and :math:`\nabla_{z_i} F_B = A^\top g_i / B`, every point in one batch
    (``θ_0 = [vec(A), c]``, row-major, as the module's parameters); other heads: autograd, point
    by point. In the dtype of the points.
    """
    from ..vfl.models import LinearHead

    layer = plain_linear(server, LinearHead)
    if layer is None:
        out = []
        for theta0, Z in points:
            t = theta0.detach().reshape(-1).requires_grad_(True)
            z = Z.detach().requires_grad_(True)
            with torch.enable_grad():
                g_t, g_z = grad(server_loss(server, t, z, y), [t, z])
            out.append((g_t, g_z))
        return out
    if not points:
        return []
    Z = torch.stack([z.detach() for _, z in points])
    t = torch.stack([t.detach().reshape(-1).to(Z.dtype) for t, _ in points])
    k, B, P = Z.shape
    C = layer.out_features
    A = t[:, : C * P].reshape(k, C, P)
    logits = Z @ A.transpose(1, 2)
    if layer.bias is not None:
        logits = logits + t[:, None, C * P :]
    g = torch.softmax(logits, dim=-1)
    g[:, torch.arange(B, device=g.device), y] -= 1.0
    g = g / B
    parts = [(g.transpose(1, 2) @ Z).reshape(k, C * P)]
    if layer.bias is not None:
        parts.append(g.sum(dim=1))
    g_theta = torch.cat(parts, dim=1)
    g_Z = g @ A
    return [(g_theta[i], g_Z[i]) for i in range(k)]


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

    registered = [
        fn for h in holders for name in _HOOK_DICTS for fn in getattr(h, name, {}).values()
    ]
    # torch.nn.modules.module.register_module_forward_hook and the like
    registered += [
        fn for name in _HOOK_DICTS for fn in getattr(torch_module, f"_global{name}").values()
    ]
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
    layer: nn.Linear,
    theta0: torch.Tensor,
    Z: torch.Tensor,
    y: torch.Tensor,
    mean: bool = True,
    rows: slice | torch.Tensor | None = None,
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
    Several points at once: ``theta0`` ``(k, n0)`` and ``Z`` ``(k, B, P)`` give ``(k, B, P,
    n0)`` and ``(k, B, P, P)``. ``rows`` keeps the embedding entries ``a`` in that slice only
    (one block's rows), or, for several points, the ``R`` entries of each point's row of an
    index tensor ``(k, R)``: ``(…, B, R, n0)`` and ``(…, B, R, P)``.
    """
    *lead, B, P = Z.shape
    C = layer.out_features
    z = Z.detach()
    t = theta0.detach().reshape(*lead, -1).to(z.dtype)
    A = t[..., : C * P].reshape(*lead, C, P)
    c = (
        t[..., C * P :]
        if layer.bias is not None
        else torch.zeros(*lead, C, dtype=z.dtype, device=z.device)
    )
    p = torch.softmax(z @ A.transpose(-1, -2) + c[..., None, :], dim=-1)
    g = p - nn.functional.one_hot(y.to(device=z.device, dtype=torch.long), C).to(p.dtype)
    S = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # (..., B, C, C)
    # (..., B, C, P): (S_i A)_{ca}, every sample's rows in one product per point (a batch of
    # B tiny products cost more)
    SA = (S.reshape(*lead, B * C, C) @ A).reshape(*lead, B, C, P)
    eye_a = None  # the (a, q) entries of delta_{aq}, where they are no diagonal of a view
    if isinstance(rows, torch.Tensor):  # each point's own rows: gather them
        idx = rows.to(device=z.device)
        SAa = SA.gather(-1, idx[:, None, None, :].expand(*SA.shape[:-1], idx.shape[-1]))
        Aa = A.gather(-1, idx[:, None, :].expand(*A.shape[:-1], idx.shape[-1]))
        eye_a = torch.eye(P, dtype=z.dtype, device=z.device)[idx][:, None, :, None, :]
    else:
        a = slice(None) if rows is None else rows
        SAa, Aa = SA[..., a], A[..., a]
        kept = range(P)[a]
        if kept.step != 1:
            eye_a = torch.eye(P, dtype=z.dtype, device=z.device)[a][:, None, :]
    R = Aa.shape[-1]
    # (..., B, R(a), n0): rows (i, a), written in place: d^2 F / d z_{ia} d A_{cq} as
    # (..., B, R(a), C, P(q)) in the first C P columns, the bias part (..., B, R(a), C) after
    bias = layer.bias is not None
    theta_cols = torch.empty(
        *lead, B, R, C * P + (C if bias else 0), dtype=z.dtype, device=z.device
    )
    dA = theta_cols[..., : C * P].unflatten(-1, (C, P))
    torch.mul(SAa.transpose(-1, -2)[..., :, :, :, None], z[..., :, None, None, :], out=dA)
    if eye_a is not None:  # + g_{ic} delta_{aq} (eye's 0/1: exact)
        dA.addcmul_(g[..., :, None, :, None], eye_a)
    else:  # rows a0, a0 + 1, ...: the entries q = a are a diagonal of the (a, q) axes
        torch.diagonal(dA, offset=kept.start, dim1=-3, dim2=-1).add_(g[..., None])
    if bias:
        theta_cols[..., C * P :] = SAa.transpose(-1, -2)
    # (..., B, R(a), P): (A^T S_i A)_{aq}, again one product per point
    SA_cols = SA.transpose(-3, -2).reshape(*lead, C, B * P)  # (..., C, (i, q))
    zz = (Aa.transpose(-1, -2) @ SA_cols).reshape(*lead, R, B, P).transpose(-3, -2)
    return (theta_cols.div_(B), zz / B) if mean else (theta_cols, zz)


def _linear_head_rows(
    theta_cols: torch.Tensor, zz: torch.Tensor, off: Sequence[int], m: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block ``m >= 1``'s θ_0 columns and, per sample, its other-embedding columns.

    ``theta_cols`` and ``zz`` hold block ``m``'s rows only (``rows`` of
    :func:`linear_head_second_derivatives`). Returns ``(B P_m, n0)`` and ``(B, P_m, P - P_m)``:
    row ``(i, a)`` of the block is nonzero only in the θ_0 columns and in sample ``i``'s own
    other-embedding columns.
    """
    B, Pm, n0 = theta_cols.shape
    rows_t = theta_cols.reshape(B * Pm, n0)
    other = torch.cat([zz[:, :, : off[m - 1]], zz[:, :, off[m] :]], dim=2)
    return rows_t, other


def _linear_head_block(
    theta_cols: torch.Tensor, zz: torch.Tensor, off: Sequence[int], m: int
) -> torch.Tensor:
    """Dense block ``m`` from :func:`linear_head_second_derivatives` (``off``: block offsets).

    For ``m >= 1``, ``theta_cols`` and ``zz`` hold block ``m``'s rows only.
    """
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
    out = []
    for m in range(len(sizes) + 1) if blocks is None else blocks:
        a = slice(off[m - 1], off[m]) if m else slice(None)
        out.append(_linear_head_block(theta_cols[:, a], zz[:, a], off, m))
    return out


def embedding_hessian_factors_at(
    server: nn.Module,
    points: Sequence[tuple[torch.Tensor, torch.Tensor, int]],
    y: torch.Tensor,
    sizes: Sequence[int],
) -> list[GramFactors]:
    r"""The Gram of block ``m`` of :func:`embedding_hessian_blocks` at each ``(θ_0, Z, m)``.

    For a linear softmax head block ``m >= 1`` is :math:`[R_m \mid D_m]`: ``B P_m`` rows, the
    θ_0 columns :math:`R_m` and the other embeddings' columns :math:`D_m`, which are block
    diagonal (row ``(i, a)`` sees only sample ``i``'s other entries, through
    :math:`A^\top S_i A / B`). So its Gram is :math:`R_m R_m^\top + \mathrm{blockdiag}_i(D_i
    D_i^\top)`, returned as :class:`GramFactors` without the dense block; the second
    derivatives of every point are computed in one batch (:func:`linear_head_second_derivatives`).
    Block 0, and a block whose column side is the shorter (one party, say), give the factors of
    the dense closed-form block (:meth:`GramFactors.of`). Other heads: those of the dense
    autograd blocks, point by point.
    """
    from ..vfl.models import LinearHead

    layer = plain_linear(server, LinearHead)
    if layer is None:
        return [
            GramFactors.of(embedding_hessian_blocks(server, t, z, y, sizes, [m])[0])
            for t, z, m in points
        ]
    f64 = torch.float64
    off = [0, *itertools.accumulate(sizes)]
    # one batch per row count: the server's points (every row), and the parties' points of
    # each block size, each with its own block's rows only
    batches: dict[int, list[int]] = {}
    for k, (_, _, m) in enumerate(points):
        batches.setdefault(off[m] - off[m - 1] if m else 0, []).append(k)
    out: list[GramFactors | None] = [None] * len(points)
    for size, ks in batches.items():
        rows = None
        if size:
            rows = torch.stack([torch.arange(off[points[k][2] - 1], off[points[k][2]]) for k in ks])
        theta_cols, zz = linear_head_second_derivatives(
            layer,
            torch.stack([points[k][0].detach().to(f64).reshape(-1) for k in ks]),
            torch.stack([points[k][1].detach().to(f64) for k in ks]),
            y,
            rows=rows,
        )
        B, Pm, n0 = theta_cols.shape[1:]
        if size and B * Pm <= n0 + B * (off[-1] - Pm):  # factors: R and per-sample blocks
            # each point's other-embedding columns (all but its own block's), gathered at once
            keep = torch.stack(
                [
                    torch.cat([torch.arange(off[m - 1]), torch.arange(off[m], off[-1])])
                    for m in (points[k][2] for k in ks)
                ]
            )
            keep = keep.to(zz.device)
            other = zz.gather(-1, keep[:, None, None, :].expand(*zz.shape[:-1], keep.shape[1]))
            blocks = other @ other.transpose(-1, -2)  # (k, B, P_m, P_m): D_i D_i^T
            for k, tc, blk in zip(ks, theta_cols, blocks):
                out[k] = GramFactors(tc.reshape(B * Pm, n0), blk)
            continue
        for k, tc, zk in zip(ks, theta_cols, zz):  # the column side is the shorter
            out[k] = GramFactors.of(_linear_head_block(tc, zk, off, points[k][2]))
    assert all(f is not None for f in out)  # every point is in one batch
    return cast(list[GramFactors], out)


def embedding_jacobian(party: nn.Module, x: torch.Tensor) -> torch.Tensor:
    r"""Dense :math:`\nabla_{\theta_m} h_m(\theta_m; x)`: ``(B P_m, |θ_m|)`` (C3.5)."""
    params = [q for q in party.parameters()]
    with torch.enable_grad():
        h = party(x)
        return jacobian(h, params)
