r"""Algorithm 1 of [CVFL] (C-VFL), exactly as THEORY C1, with the C6 ledger and C2 error log.

For every global round :math:`t_0` (every ``Q`` local iterations):

1. one mini-batch :math:`\mathcal{B}^{t_0}` is drawn (shuffled epochs, without replacement);
2. every party :math:`m \ge 1` sends :math:`C_m(h_m(\theta_m^{t_0}; X_m^{\mathcal{B}}))`; the server
   forms :math:`\hat\Phi^{t_0} = \{C_0(\theta_0^{t_0}), C_1(h_1), \dots, C_M(h_M)\}` and sends it to
   every party (the bits of every message go to the ledger, C6);
3. for ``Q`` local steps, in parallel: party :math:`m` steps on
   :math:`\nabla_m F_{\mathcal{B}}(\hat\Phi_m^t)` with
   :math:`\hat\Phi_m^t = \{\hat\Phi_{-m}^{t_0}; h_m(\theta_m^t; X_m^{\mathcal{B}})\}` — its own
   *fresh* embedding, the others' *stale compressed* ones and the *compressed frozen* server model
   :math:`C_0(\theta_0^{t_0})`; the server steps its own uncompressed :math:`\theta_0` on the
   compressed embeddings :math:`\hat\Phi^{t_0}`. The step size :math:`\eta^{t_0}` is fixed within
   the round.

With identity compressors and ``Q = 1`` this is mini-batch SGD on the joint model (C1), which
:func:`joint_sgd` implements independently as the test oracle. Optional error feedback (C9,
EF-VFL style): each party keeps, per training sample, the embedding the server last
reconstructed, and sends the compressed *difference* to it.

The simulation is sequential but exact: the blocks' updates within a local step are independent
(each depends only on round-start messages and its own parameters). All ``M`` party gradients of a
local step come from one backward pass through ``M`` stacked copies of the server head, so the cost
stays close to one joint SGD step (see ``benchmarks/bench_sim.py``). When a round's messages are
lossless (checked value by value, e.g. identity compressors at the data's precision) and the
server head is row-wise (built from linear layers and activations), the ``M + 1`` objectives of
the round's first local step coincide and are evaluated once, as one joint SGD step; the identity
compressor at the data's precision is not called at all (it returns its input's values and draws
no randomness). Neither shortcut changes any result.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from .checkpoint import array_layout, read_checkpoint, write_checkpoint
from .data import VerticalDataset
from .ledger import BitLedger, RoundBits, paper_cost_model, round_bits
from .models import build_party_models, build_server_model, count_parameters
from .results import RunResult
from .schedules import as_step_size

__all__ = [
    "CVFLConfig",
    "train",
    "build_models",
    "joint_sgd",
    "minibatches",
    "evaluate",
    "nominal_bits",
    "RunRecord",
    "resume",
    "checkpoint_arrays",
]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_GLOBAL_RNG = threading.Lock()
"""Held while the models are initialised from torch's global generator: runs in threads of one
process (a Dask worker's) would otherwise draw from each other's seeds."""


@dataclass
class CVFLConfig:
    r"""Configuration of a C-VFL run (THEORY C1).

    Parameters
    ----------
    Q : int
        Local steps per global round (``Q >= 1``); ``T = R Q``.
    lr : float or callable
        Step size :math:`\eta`, or a schedule ``lr(t) -> float`` evaluated at each round's first
        iteration :math:`t_0` (see :mod:`cvfl_sim.schedules`).
    epochs : int
        Passes over the training set; one epoch is ``ceil(N_train / batch_size)`` rounds.
    batch_size : int
        Mini-batch size ``B`` (``1 <= B <= N_train``).
    parties_model : str, callable or list of nn.Module
        ``"mlp"`` (default), ``"linear"``, ``"cnn"``, ``"gru"``, a factory ``(m, D_m, shape)`` or one
        module per party (deep-copied; the caller's modules are not modified).
    server_model : str, callable or nn.Module
        ``"linear"`` (default) or ``"mlp"``, a factory ``(ΣP_m, n_classes)`` or a module taking the
        concatenated embeddings ``(B, ΣP_m)``.
    embedding_size : int or list of int
        :math:`P_m` for the built-in party models (one for all, or one per party).
    compressor : Compressor, list of Compressor, callable or None
        :math:`C_m`: one for all parties, one per party, or a compression schedule
        ``round -> Compressor | list`` (e.g. :class:`cvfl_sim.schedules.CompressionSchedule`). ``None`` is
        ``Identity()`` (32-bit floats).
    server_compressor : Compressor, callable, "same" or None
        :math:`C_0` for the server model (flattened to one row). ``"same"`` (default) uses the
        parties' compressor when a single one is given (the paper compresses all messages with the
        same ``b``) and ``Identity()`` otherwise; ``None`` is ``Identity()``.
    error_feedback : bool
        EF-VFL style error feedback on the embeddings (C9).
    seed : int
        Seeds initialisation, batches and the compressors' dither (independent streams).
    eval_every : int or None
        Rounds between evaluations; ``None`` evaluates once per epoch. Round 0 and the last round
        are always evaluated.
    track_grad_norm : bool
        Also record the full-data :math:`\|\nabla F(\Theta^{t_0})\|^2` (one extra backward over the
        training set per evaluation).
    dtype : {"float32", "float64"}
        Model and data precision.
    progress : bool
        Print one line per evaluation to stderr.
    """

    Q: int = 1
    lr: Any = 0.1
    epochs: int = 10
    batch_size: int = 64
    parties_model: Any = "mlp"
    server_model: Any = "linear"
    embedding_size: Any = 8
    compressor: Any = None
    server_compressor: Any = "same"
    error_feedback: bool = False
    seed: int = 0
    eval_every: int | None = None
    track_grad_norm: bool = False
    dtype: str = "float32"
    progress: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (compressors by class and constructor arguments)."""
        return {f.name: _describe(getattr(self, f.name)) for f in fields(self)}


def _describe(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        return {str(k): _describe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_describe(x) for x in v]
    cfg = getattr(v, "config", None)
    if callable(cfg):
        try:
            return {"class": type(v).__name__, **_describe(cfg())}
        except TypeError:
            pass
    if isinstance(v, nn.Module):
        return {"module": type(v).__name__}
    return {"callable": getattr(v, "__qualname__", type(v).__name__)}


def _identity() -> Any:
    from cvfl_theory.compressors import Identity

    return Identity()


def _is_compressor(c: Any) -> bool:
    return hasattr(c, "payload_bits") and hasattr(c, "roundtrip")


def nominal_bits(c: Any) -> float:
    """Nominal bits per component ``b`` of a compressor (for the paper's cost model, C6).

    ``bits`` from its configuration, ``r`` for :class:`Identity` (32).
    """
    cfg = c.config() if hasattr(c, "config") else {}
    for key in ("bits", "r"):
        if cfg.get(key) is not None:
            return float(cfg[key])
    return 32.0


def minibatches(n: int, batch_size: int, gen: np.random.Generator) -> list[np.ndarray]:
    """One epoch of mini-batch indices: a permutation of ``range(n)`` cut into chunks of ``B``."""
    perm = gen.permutation(n)
    return [perm[i : i + batch_size] for i in range(0, n, batch_size)]


# ---------------------------------------------------------------------------------------------
# validation and set-up
# ---------------------------------------------------------------------------------------------
def _check_int(v: Any, name: str, lo: int, hi: float = math.inf) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {v!r}")
    if not lo <= v <= hi:
        bound = f"in [{lo}, {hi}]" if math.isfinite(hi) else f">= {lo}"
        raise ValueError(f"{name} must be {bound}, got {v}")
    return int(v)


@dataclass
class _Setup:
    parties: list[nn.Module]
    server: nn.Module
    emb_sizes: list[int]
    compressor_at: Callable[[int], list[Any]]
    server_compressor_at: Callable[[int], Any]
    lr: Callable[[int], float]
    dtype: torch.dtype
    rounds_per_epoch: int
    seeds: list[np.random.SeedSequence]  # init, batches, compressors
    total_rounds: int  # R
    eval_every: int  # rounds between evaluations

    def evaluates_after(self, r: int) -> bool:
        """Whether the models are evaluated after round ``r`` (every ``eval_every``, and last)."""
        return r % self.eval_every == 0 or r == self.total_rounds

    def step_size(self, t0: int) -> float:
        r"""The round's step size :math:`\eta^{t_0}` (C1), refused unless finite and positive."""
        eta = float(self.lr(t0))
        if not (math.isfinite(eta) and eta > 0):
            raise ValueError(f"lr schedule gave a step size {eta} at t0={t0}; need > 0")
        return eta


def _compressor_schedule(spec: Any, M: int) -> Callable[[int], list[Any]]:
    def normalise(c: Any, where: str) -> list[Any]:
        if c is None:
            return [_identity()] * M
        if _is_compressor(c):
            return [c] * M
        if isinstance(c, (list, tuple)):
            if len(c) != M:
                raise ValueError(f"{where} lists {len(c)} compressors for {M} parties")
            if not all(_is_compressor(x) for x in c):
                raise TypeError(f"{where} must hold compressors (with payload_bits and roundtrip)")
            return list(c)
        raise TypeError(
            f"{where} must be a compressor, a list of M compressors or a schedule round -> "
            f"compressor; got {type(c).__name__}"
        )

    if spec is None or _is_compressor(spec) or isinstance(spec, (list, tuple)):
        fixed = normalise(spec, "compressor")
        return lambda r: fixed
    if callable(spec):
        return lambda r: normalise(spec(r), f"compressor schedule at round {r}")
    normalise(spec, "compressor")  # raises
    raise AssertionError  # pragma: no cover


def _server_compressor_schedule(spec: Any, party_spec: Any) -> Callable[[int], Any]:
    if isinstance(spec, str):
        if spec != "same":
            raise ValueError(
                f"server_compressor must be a compressor, 'same' or None, got {spec!r}"
            )
        if party_spec is None:
            spec = None
        elif _is_compressor(party_spec):
            spec = party_spec
        elif isinstance(party_spec, (list, tuple)):
            spec = None
        elif callable(party_spec):

            def same(r: int) -> Any:
                c = party_spec(r)
                return c if _is_compressor(c) else _identity()

            return same
    if spec is None:
        ident = _identity()
        return lambda r: ident
    if _is_compressor(spec):
        return lambda r: spec
    if callable(spec):
        return spec
    raise TypeError(f"server_compressor must be a compressor or a schedule, got {type(spec)}")


def _setup(dataset: VerticalDataset, config: CVFLConfig) -> _Setup:
    """Validate everything and build models — before any training (bad input → clear errors)."""
    if not isinstance(dataset, VerticalDataset):
        raise TypeError(f"dataset must be a VerticalDataset, got {type(dataset).__name__}")
    if not isinstance(config, CVFLConfig):
        raise TypeError(f"config must be a CVFLConfig, got {type(config).__name__}")
    dataset.validate()
    M = dataset.n_parties
    _check_int(config.Q, "Q", 1)
    _check_int(config.epochs, "epochs", 1)
    if (
        not isinstance(config.batch_size, bool)
        and isinstance(config.batch_size, int)
        and (config.batch_size > dataset.n_train)
    ):
        raise ValueError(
            f"batch_size must be <= the training set size N_train={dataset.n_train}, "
            f"got {config.batch_size}"
        )
    _check_int(config.batch_size, "batch_size", 1, dataset.n_train)
    _check_int(config.seed, "seed", 0)
    if config.eval_every is not None:
        _check_int(config.eval_every, "eval_every", 1)
    if config.dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {config.dtype!r}")
    dtype = _DTYPES[config.dtype]
    lr = as_step_size(config.lr)
    es = config.embedding_size
    if isinstance(es, (list, tuple)):
        if len(es) != M:
            raise ValueError(f"embedding_size lists {len(es)} sizes for {M} parties")
        emb = [_check_int(e, f"embedding_size[{i}]", 1) for i, e in enumerate(es)]
    else:
        emb = [_check_int(es, "embedding_size", 1)] * M
    compressor_at = _compressor_schedule(config.compressor, M)
    server_compressor_at = _server_compressor_schedule(config.server_compressor, config.compressor)
    compressor_at(0)
    server_compressor_at(0)

    seeds = np.random.SeedSequence(config.seed).spawn(3)
    init_seed = int(seeds[0].generate_state(1)[0])
    user_parties = not isinstance(config.parties_model, str) and not callable(config.parties_model)
    with _GLOBAL_RNG, torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        parties = build_party_models(
            config.parties_model, dataset.feature_dims, emb, dataset.party_shapes
        )
        if user_parties:
            parties = [copy.deepcopy(p) for p in parties]
        # probe the embedding sizes
        probe = [torch.as_tensor(p[:2], dtype=dtype) for p in dataset.train_parts]  # two samples
        parties = [p.to(dtype) for p in parties]
        sizes = []
        for m, (net, x) in enumerate(zip(parties, probe)):
            try:
                with torch.no_grad():
                    h = net(x)
            except Exception as err:  # noqa: BLE001 - re-raised with context
                raise ValueError(
                    f"parties_model[{m}] cannot embed party {m}'s block of D_m="
                    f"{dataset.feature_dims[m]} features: {err}"
                ) from err
            if h.ndim != 2 or h.shape[0] != x.shape[0]:
                raise ValueError(
                    f"parties_model[{m}] must return (B, P_m) embeddings, got shape {tuple(h.shape)}"
                )
            sizes.append(int(h.shape[1]))
        server = build_server_model(config.server_model, sum(sizes), dataset.n_classes)
        if isinstance(config.server_model, nn.Module):
            server = copy.deepcopy(server)
        server = server.to(dtype)
    z = torch.zeros(2, sum(sizes), dtype=dtype)
    try:
        with torch.no_grad():
            out = server(z)
    except Exception as err:  # noqa: BLE001
        raise ValueError(
            f"embedding size mismatch: the party models output P_m={sizes} (sum {sum(sizes)}) but "
            f"server_model does not accept (B, {sum(sizes)}) inputs: {err}"
        ) from err
    if tuple(out.shape) != (2, dataset.n_classes):
        raise ValueError(
            f"server_model must map (B, {sum(sizes)}) to (B, n_classes={dataset.n_classes}) "
            f"logits, got {tuple(out.shape)}"
        )
    if count_parameters(server) == 0:
        raise ValueError("server_model must have parameters (theta_0)")
    rpe = math.ceil(dataset.n_train / config.batch_size)
    return _Setup(
        parties,
        server,
        sizes,
        compressor_at,
        server_compressor_at,
        lr,
        dtype,
        rpe,
        seeds,
        total_rounds=rpe * config.epochs,
        eval_every=config.eval_every or rpe,
    )


def build_models(dataset: VerticalDataset, config: CVFLConfig) -> tuple[list[nn.Module], nn.Module]:
    r"""The initial models :math:`\Theta^0` of ``train(dataset, config)``: ``(parties, server)``.

    Validated and built exactly as :func:`train` builds them (same seed, same values).
    """
    s = _setup(dataset, config)
    return s.parties, s.server


# ---------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------
def _f1(y: np.ndarray, pred: np.ndarray, n_classes: int) -> float:
    """Binary F1 of class 1 (two classes) or macro F1 over the classes present or predicted.

    Classes neither in ``y`` nor in ``pred`` (absent from the test split) are left out of the
    macro mean, so a perfect classifier scores 1.0; the binary F1 of a class 1 that is neither
    present nor predicted is 1.0 too (no errors; ``0/0`` otherwise).
    """
    cm = np.bincount(y * n_classes + pred, minlength=n_classes * n_classes).reshape(
        n_classes, n_classes
    )
    tp = np.diag(cm).astype(float)
    denom = cm.sum(0) + cm.sum(1)
    f1 = np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 1.0)
    return float(f1[1]) if n_classes == 2 else float(f1[denom > 0].mean())


def _forward(parties: Sequence[nn.Module], server: nn.Module, X: Sequence[torch.Tensor]) -> Any:
    return server(torch.cat([p(x) for p, x in zip(parties, X)], dim=1))


def evaluate(
    parties: Sequence[nn.Module],
    server: nn.Module,
    dataset: VerticalDataset,
    dtype: torch.dtype = torch.float32,
    grad_norm: bool = False,
) -> dict[str, float | None]:
    r"""Full training loss :math:`F(\Theta)`, test accuracy and F1 of the uncompressed model.

    With ``grad_norm`` also :math:`\|\nabla F(\Theta)\|^2` over all blocks (C4).
    """
    Xtr = [torch.as_tensor(p, dtype=dtype) for p in dataset.train_parts]
    Xte = [torch.as_tensor(p, dtype=dtype) for p in dataset.test_parts]
    ytr = torch.as_tensor(dataset.y_train)
    params = [q for m in [*parties, server] for q in m.parameters()]
    g2: float | None = None
    if grad_norm:
        loss = nn.functional.cross_entropy(_forward(parties, server, Xtr), ytr)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        g2 = float(sum(float((g * g).sum()) for g in grads if g is not None))
        train_loss = float(loss.detach())
    with torch.no_grad():
        if not grad_norm:
            train_loss = float(nn.functional.cross_entropy(_forward(parties, server, Xtr), ytr))
        pred = _forward(parties, server, Xte).argmax(1).numpy()
    acc = float(np.mean(pred == dataset.y_test))
    return {
        "train_loss": train_loss,
        "test_accuracy": acc,
        "test_f1": _f1(dataset.y_test, pred, dataset.n_classes),
        "grad_norm_sq": g2,
    }


# ---------------------------------------------------------------------------------------------
# Algorithm 1
# ---------------------------------------------------------------------------------------------
def _own_mask(sizes: Sequence[int]) -> torch.Tensor:
    """``(M, 1, ΣP)`` boolean mask of party ``m``'s own block of columns in row block ``m``."""
    mask = torch.zeros(len(sizes), 1, sum(sizes), dtype=torch.bool)
    off = 0
    for m, p in enumerate(sizes):
        mask[m, 0, off : off + p] = True
        off += p
    return mask


# Modules whose forward is deterministic and acts on each row (sample) separately, without
# buffers: a server head built from them gives every row the same output whether it is evaluated
# alone or stacked with other rows, which the lossless fast path of :func:`train` relies on.
_ROWWISE = (
    nn.Linear,
    nn.Sequential,
    nn.Identity,
    nn.ReLU,
    nn.LeakyReLU,
    nn.ELU,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.Softplus,
)


def _rowwise(server: nn.Module) -> bool:
    """Whether ``server`` is built only from :data:`_ROWWISE` modules (and the built-in heads)."""
    from .models import LinearHead, MLPHead

    kinds = (*_ROWWISE, LinearHead, MLPHead)
    return all(type(mod) in kinds for mod in server.modules()) and not any(
        True for _ in server.buffers()
    )


def _exact_identity(c: Any, dtype: torch.dtype) -> bool:
    """Whether ``c.roundtrip(x)`` returns ``x``'s values exactly for finite ``x`` of ``dtype``.

    True for :class:`~cvfl_theory.compressors.Identity` at the data's own precision (``r = 32``
    for float32, ``r = 64`` for float64): it sends every component as that IEEE float and draws
    no randomness (THEORY C5), so skipping the call changes neither the result nor any generator.
    """
    from cvfl_theory.compressors import Identity

    bits = {torch.float32: 32, torch.float64: 64}.get(dtype)
    return type(c) is Identity and c.config().get("r") == bits


def _flat_params(module: nn.Module) -> torch.Tensor | None:
    """Make ``module``'s (contiguous) parameters views of one flat tensor, returned; values kept.

    ``None`` (nothing changed) if a parameter is not contiguous: its layout is kept.
    """
    params = list(module.parameters())
    if not all(q.is_contiguous() for q in params):
        return None
    flat = torch.cat([q.detach().reshape(-1) for q in params])
    off = 0
    for q in params:
        n = q.numel()
        q.data = flat[off : off + n].view(q.shape)
        off += n
    return flat


def _sgd_step(
    params: list[torch.Tensor], grads: tuple[torch.Tensor | None, ...], lr: float
) -> None:
    with torch.no_grad():
        if all(g is not None for g in grads):
            torch._foreach_add_(params, cast("tuple[torch.Tensor, ...]", grads), alpha=-lr)
        else:
            ps = [p for p, g in zip(params, grads) if g is not None]
            gs = [g for g in grads if g is not None]
            if ps:
                torch._foreach_add_(ps, gs, alpha=-lr)


def _diverged(m: int, r: int, t0: int) -> FloatingPointError:
    return FloatingPointError(
        f"training diverged: party {m}'s embedding is not finite at round {r} (t0={t0}); "
        "lower lr or use more bits"
    )


# ---------------------------------------------------------------------------------------------
# the run's bookkeeping: one implementation for every execution strategy
# ---------------------------------------------------------------------------------------------
_LOG_KEYS = ("bits", "embedding_error", "embedding_error_by_party", "server_model_error", "lr")


def checkpoint_identity(dataset: VerticalDataset, config: CVFLConfig) -> str:
    """The identity a checkpoint of ``train(dataset, config)`` is checked against on resume."""
    return json.dumps([config.to_dict(), dataset.describe()], sort_keys=True, default=str)


def checkpoint_arrays(
    parties: Sequence[nn.Module], server: nn.Module, memory: Sequence[torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The tensors of a training state under their checkpoint names.

    The models' parameters and buffers, then the EF-VFL memories (C9; one table per party, or
    none). The values are views: copying into them restores the state.
    """
    out = {
        f"models.{i}.{k}": v
        for i, net in enumerate([*parties, server])
        for k, v in net.state_dict().items()
    }
    out.update({f"memory.{m}": v for m, v in enumerate(memory)})
    return out


class RunRecord:
    r"""What a run records beside Algorithm 1 (THEORY C1): C6 ledger, C2 error log, history.

    Shared by every execution strategy — :func:`train`'s vectorised loop and the roles of
    :mod:`cvfl_sim.roles`, in one process or one per role — so that their ledgers, per-round
    logs, histories, checkpoints and results are built by the same code.

    Parameters
    ----------
    s : _Setup
        The run's set-up (embedding sizes :math:`P_m`, the server model, rounds per epoch).
    dataset, config
        As for :func:`train`.

    Attributes
    ----------
    ledger : BitLedger
        The bits of every round (C6).
    log : dict of list
        The per-round log of :attr:`RunResult.rounds`.
    history : list of dict
        One row per evaluation.
    train_time : float
        Seconds spent in the rounds (the strategy adds them up).
    """

    def __init__(self, s: _Setup, dataset: VerticalDataset, config: CVFLConfig) -> None:
        self.s, self.dataset, self.config = s, dataset, config
        self.theta0_size = count_parameters(s.server)  # |θ_0|, fixed
        self.ledger = BitLedger()
        self.log: dict[str, list[Any]] = {k: [] for k in _LOG_KEYS}
        self.history: list[dict[str, Any]] = []
        self.err_since: list[tuple[float, float]] = []  # (embedding, server) errors since a row
        self.train_time = 0.0
        self.t_start = time.perf_counter()
        self._costs: dict[tuple[Any, ...], tuple[RoundBits, float, int, Any]] = {}
        self._last: tuple[Any, ...] = (None, None, 0, None)

    def account(self, comps: Sequence[Any], c0: Any, bsz: int) -> int:
        """Count one round's messages in the ledger (C6); return the round's total bits.

        A round's bits depend only on its compressors and batch size, so they are computed once
        per ``(compressors, B)``: the cache holds the compressors, so their ids stay unique.
        """
        last = self._last
        if comps is not last[0] or c0 is not last[1] or bsz != last[2]:
            key = (tuple(id(c) for c in comps), id(c0), bsz)
            if key not in self._costs:
                sizes, size0 = self.s.emb_sizes, self.theta0_size
                rb = round_bits(comps, c0, bsz, sizes, size0)
                b_nom = float(np.mean([nominal_bits(c) for c in comps]))
                paper = paper_cost_model(b_nom, float(np.mean(sizes)), bsz, len(sizes), size0)
                self._costs[key] = (rb, paper, rb.total, (tuple(comps), c0))
            self._last = last = (comps, c0, bsz, self._costs[key])
        rb, paper, total, _ = last[3]
        self.ledger.record(rb, paper)
        return int(total)

    def log_round(
        self,
        bits: int,
        e_party: list[float],
        e_srv: float,
        eta: float,
        e_emb: float | None = None,
    ) -> None:
        r"""Log one round: its bits, the measured :math:`\|\varepsilon_m^{t_0}\|_F^2` (C2), η.

        ``e_emb`` is ``float(sum(e_party))`` when the caller has it already (it is computed
        here otherwise).
        """
        if e_emb is None:
            e_emb = float(sum(e_party))
        self.log["bits"].append(bits)
        self.log["embedding_error"].append(e_emb)
        self.log["embedding_error_by_party"].append(e_party)
        self.log["server_model_error"].append(e_srv)
        self.log["lr"].append(eta)
        self.err_since.append((e_emb, e_srv))

    def add_row(self, r: int, parties: Sequence[nn.Module], server: nn.Module) -> None:
        """Append the history row after round ``r``, evaluating the models ``parties, server``.

        The mean embedding and server-model errors of the rounds since the last row, the
        ledger's bits so far and the evaluation of the models; printed to stderr if
        ``config.progress``.
        """
        config, dataset, rpe = self.config, self.dataset, self.s.rounds_per_epoch
        row: dict[str, Any] = {"epoch": r / rpe, "round": r}
        row.update(evaluate(parties, server, dataset, self.s.dtype, config.track_grad_norm))
        row["bits"] = self.ledger.total
        row["bits_paper_model"] = self.ledger.total_paper
        if self.err_since:
            e_emb = float(np.mean([e[0] for e in self.err_since]))
            e_srv = float(np.mean([e[1] for e in self.err_since]))
            row.update(
                compression_error=e_emb + e_srv, embedding_error=e_emb, server_model_error=e_srv
            )
        else:
            row.update(compression_error=None, embedding_error=None, server_model_error=None)
        self.err_since.clear()
        self.history.append(row)
        if config.progress:
            metric = "test_f1" if dataset.metric == "f1" else "test_accuracy"
            print(
                f"  round {r}/{self.s.total_rounds} epoch {row['epoch']:.2f} "
                f"loss {row['train_loss']:.4f} {metric} {row[metric]:.4f} bits {row['bits']:.3e}",
                file=sys.stderr,
            )

    def save(
        self,
        path: str | os.PathLike[str],
        arrays: dict[str, torch.Tensor],
        epoch: int,
        r: int,
        batch_gen: np.random.Generator,
        comp_gen_states: list[Any],
    ) -> None:
        """Write the checkpoint after ``epoch`` epochs (``r`` rounds); :func:`resume` reads it.

        ``arrays`` from :func:`checkpoint_arrays`; ``comp_gen_states`` the ``M + 1`` compressor
        generators' states (party 1..M, then the server).
        """
        write_checkpoint(
            path,
            identity=checkpoint_identity(self.dataset, self.config),
            arrays=arrays,
            state={
                "epoch": epoch,
                "round": r,
                "train_time": self.train_time,
                "batch_gen": batch_gen.bit_generator.state,
                "comp_gens": comp_gen_states,
                "ledger": [
                    [list(rb.uploads), rb.server_model, pb]
                    for rb, pb in zip(self.ledger.rounds, self.ledger.paper)
                ],
                "log": self.log,
                "history": self.history,
                "err_since": self.err_since,
            },
        )

    def restore(self, state: dict[str, Any]) -> None:
        """Take the ledger, log, history and training time of a checkpoint's ``state``.

        Raises ``KeyError``, ``TypeError`` or ``ValueError`` on a malformed state (:func:`resume`
        names the file).
        """
        for ups, srv, paper in state["ledger"]:
            self.ledger.record(RoundBits(tuple(int(u) for u in ups), int(srv)), float(paper))
        log = state["log"]
        if set(log) != set(self.log) or not all(isinstance(v, list) for v in log.values()):
            raise ValueError(f"log keys {sorted(log)}")
        self.log.update(log)
        if not all(isinstance(row, dict) for row in state["history"]):
            raise ValueError("history rows")
        self.history.extend(state["history"])
        self.err_since.extend((float(a), float(b)) for a, b in state["err_since"])
        self.train_time = float(state["train_time"])

    def finish(self, parties: Sequence[nn.Module], server: nn.Module, **extra: Any) -> RunResult:
        """The run's :class:`RunResult` with the trained models; ``extra`` ends the summary.

        Raises
        ------
        FloatingPointError
            A parameter is not finite (the run diverged).
        """
        for net in [*parties, server]:
            for q in net.parameters():
                if not bool(torch.isfinite(q).all()):
                    raise FloatingPointError(
                        "training diverged (non-finite parameters); lower lr or check the "
                        "compressor"
                    )
        res = RunResult(
            self.config.to_dict(),
            self.dataset.describe(),
            self.history,
            self.log,
            models={"parties": parties, "server": server},
        )
        values = res.metric_values()
        res.summary = {
            **self.ledger.summary(),
            "train_seconds": self.train_time,
            "wall_seconds": time.perf_counter() - self.t_start,
            "embedding_sizes": self.s.emb_sizes,
            "theta0_size": self.theta0_size,
            "rounds_per_epoch": self.s.rounds_per_epoch,
            "final_metric": values[-1],
            "max_metric": max(values),
            **extra,
        }
        return res


def resume(
    path: str | os.PathLike[str],
    dataset: VerticalDataset,
    config: CVFLConfig,
    arrays: dict[str, torch.Tensor],
    batch_gen: np.random.Generator,
    comp_gens: Sequence[np.random.Generator | None],
    record: RunRecord | None,
) -> tuple[int, int]:
    """Restore a run from the checkpoint ``path``; return the epochs and rounds it completed.

    The file's identity, sizes and array table are checked before anything is loaded (it holds
    no pickle). Then its arrays are copied into ``arrays`` (:func:`checkpoint_arrays` of the
    live tensors), and the batch generator, the ``M + 1`` compressor generators (``None`` for
    one another process holds) and, given a ``record``, the bookkeeping are restored.

    Raises
    ------
    ValueError
        The file is not a checkpoint of this data set and configuration, or it holds a
        malformed training state (the message names the file).
    """
    st, saved = read_checkpoint(
        path, identity=checkpoint_identity(dataset, config), arrays=array_layout(arrays)
    )
    try:
        with torch.no_grad():
            for name, t in arrays.items():
                t.copy_(torch.from_numpy(saved[name]))
        batch_gen.bit_generator.state = st["batch_gen"]
        if len(st["comp_gens"]) != len(comp_gens):
            raise ValueError(f"{len(st['comp_gens'])} compressor generators")
        for g, gs in zip(comp_gens, st["comp_gens"]):
            if g is not None:
                g.bit_generator.state = gs
        if record is not None:
            record.restore(st)
        return int(st["epoch"]), int(st["round"])
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
        raise ValueError(
            f"checkpoint {os.fspath(path)!r} holds a malformed training state "
            f"({type(exc).__name__}: {exc}); remove it or pass another path"
        ) from None


def train(
    dataset: VerticalDataset,
    config: CVFLConfig | None = None,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    on_epoch_end: Callable[[int], None] | None = None,
    probe: Callable[..., None] | None = None,
    backend: str = "inprocess",
    backend_options: dict[str, Any] | None = None,
) -> RunResult:
    r"""Run C-VFL (Algorithm 1, THEORY C1) and return its history, ledger and error log.

    The models are small, so one torch intra-op thread trains fastest (measured: 80 steps of the
    tiny MLP took 0.05 s with one thread, 7.5 s with two on a busy 2-core machine); ``cvfl
    train`` and sweeps train under :func:`cvfl_sim.threads.torch_threads` (one thread unless
    ``--threads`` says otherwise); from Python, call ``train`` inside ``with torch_threads(1):``.

    Parameters
    ----------
    dataset : VerticalDataset
        The vertically partitioned data (C0).
    config : CVFLConfig, optional
        Defaults to ``CVFLConfig()``; ``CVFLConfig(Q=10, lr=0.1, epochs=20)`` works on any data
        set (an MLP per party sized from its features, a linear server head).
    checkpoint : path-like, optional
        After every epoch the complete training state (models, random generators, ledger,
        history) is written here atomically; if the file exists when ``train`` starts, the run
        resumes from it and ends exactly as an uninterrupted run would. The file must come from
        the same data set and configuration (checked). Compressor schedules must be stateless.
    on_epoch_end : callable, optional
        Called with the number of finished epochs after each epoch (and checkpoint).
    probe : callable, optional
        A measurement hook called with keyword arguments (the round's batch, its stale and
        compressed messages, the current models) before every local step, e.g.
        :class:`cvfl_sim.lemma1.Lemma1Probe` (C4.1). It must not modify what it is given.
    backend : {"inprocess", "roles", "distributed"}
        How Algorithm 1 is executed (same result, tested): ``"inprocess"`` (default) the
        vectorised single-backward strategy below; ``"roles"`` a :class:`~cvfl_sim.roles.Party`
        and :class:`~cvfl_sim.roles.Server` per role exchanging the compressors' wire bytes in
        this process (:func:`cvfl_sim.roles.train_roles`); ``"distributed"`` one process per
        role over ``torch.distributed`` (gloo) on this machine
        (:func:`cvfl_sim.distributed.train_distributed`). ``probe`` needs ``"inprocess"``.
    backend_options : dict, optional
        Keyword arguments of the backend's function (e.g. ``{"timeout": 30, "delay": 0.01}``).

    Returns
    -------
    RunResult
        ``history`` (one row per evaluation), per-round ``rounds`` log and ``summary``; the trained
        modules are attached as ``result.models`` (``{"parties": [...], "server": ...}``; not saved).

    Raises
    ------
    ValueError, TypeError
        For any bad configuration, before training starts (the message names the argument).

    Examples
    --------
    >>> from cvfl_sim.data import load_dataset
    >>> res = train(load_dataset("digits-quadrants"), CVFLConfig(Q=2, epochs=1, eval_every=None))
    >>> [round(r["epoch"]) for r in res.history]
    [0, 1]
    """
    config = CVFLConfig() if config is None else config
    if backend != "inprocess" or backend_options:
        from .distributed import dispatch  # the roles-based executions (roles.py, distributed.py)

        return dispatch(dataset, config, backend, checkpoint, on_epoch_end, probe, backend_options)
    s = _setup(dataset, config)
    M = dataset.n_parties
    dtype = s.dtype
    parties, server = s.parties, s.server
    all_params: list[torch.Tensor] = [
        q for net in [*parties, server] for q in net.parameters() if q.requires_grad
    ]
    server_params = list(server.parameters())
    # the parties' copy of the server, C_0(θ_0^{t0}), frozen for a round; its parameters are
    # views of one flat tensor, so a round refreshes it with one copy
    server_hat = copy.deepcopy(server)
    for q in server_hat.parameters():
        q.requires_grad_(False)
    hat_flat = _flat_params(server_hat)
    hat_params = list(server_hat.parameters())
    numels = [q.numel() for q in server_params]
    hat_buffers = list(zip(server_hat.buffers(), server.buffers()))
    own_block = _own_mask(s.emb_sizes)  # (M, 1, ΣP): party m's own block in row block m
    rowwise = _rowwise(server)

    Xtr = [torch.as_tensor(p, dtype=dtype) for p in dataset.train_parts]
    ytr = torch.as_tensor(dataset.y_train)
    n = dataset.n_train
    B = config.batch_size
    Q = config.Q
    ss_batches, ss_comp = s.seeds[1], s.seeds[2]
    batch_gen = np.random.default_rng(ss_batches)
    comp_gens = [np.random.default_rng(c) for c in ss_comp.spawn(M + 1)]
    memory = [torch.zeros(n, P, dtype=dtype) for P in s.emb_sizes] if config.error_feedback else []

    rec = RunRecord(s, dataset, config)
    start_epoch, r = 0, 0
    if checkpoint is not None and os.path.exists(checkpoint):
        arrays = checkpoint_arrays(parties, server, memory)
        start_epoch, r = resume(checkpoint, dataset, config, arrays, batch_gen, comp_gens, rec)
    else:
        rec.add_row(0, parties, server)
    last: tuple[Any, ...] = (None, None)
    for _epoch in range(start_epoch, config.epochs):
        batches = minibatches(n, B, batch_gen)
        tick = time.perf_counter()
        # one gather per epoch: a round's mini-batch is then a contiguous slice (same values)
        order = torch.from_numpy(np.concatenate(batches))
        X_ep = [X[order] for X in Xtr]
        y_ep = ytr[order]
        rec.train_time += time.perf_counter() - tick
        lo = 0
        for batch in batches:
            tick = time.perf_counter()
            t0 = r * Q
            eta = s.step_size(t0)
            comps = s.compressor_at(r)
            c0 = s.server_compressor_at(r)
            bsz = len(batch)
            hi = lo + bsz
            idx = order[lo:hi]
            xb = [X[lo:hi] for X in X_ep]
            yb = y_ep[lo:hi]
            lo = hi
            if comps is not last[0] or c0 is not last[1]:  # which messages are lossless
                exact = [_exact_identity(c, dtype) for c in comps]
                any_exact = any(exact)
                all_exact = all(exact) and not config.error_feedback
                exact0 = _exact_identity(c0, dtype)
                last = (comps, c0)

            # -- round start: fresh embeddings h_m(θ_m^{t0}) (kept with graph for local step 0)
            H = [p(x) for p, x in zip(parties, xb)]
            Hc = torch.cat(H, dim=1)
            Hhat = []
            skip = [e and H[m].dtype == dtype for m, e in enumerate(exact)]
            for m in range(M):
                h = H[m].detach()
                if skip[m]:  # C_m(h) = h exactly: the call is skipped (finiteness checked below)
                    if config.error_feedback:
                        mem = memory[m][idx]
                        hh = mem + (h - mem)
                        memory[m][idx] = hh
                    else:
                        hh = h
                    Hhat.append(hh)
                    continue
                try:
                    if config.error_feedback:
                        mem = memory[m][idx]
                        hh = mem + comps[m].roundtrip(h - mem, rng=comp_gens[m])
                        memory[m][idx] = hh
                    else:
                        hh = comps[m].roundtrip(h, rng=comp_gens[m])
                except ValueError:
                    if not bool(torch.isfinite(h).all()):
                        raise _diverged(m, r, t0) from None
                    raise
                Hhat.append(hh.to(dtype))
            with torch.no_grad():
                Hd = Hc.detach()
                lossless = all_exact and all(skip)
                Zhat = Hd if lossless else torch.cat(Hhat, dim=1)  # Φ̂^{t0} embeddings, (B, ΣP)
                # NaN here also flags a diverged embedding (checked just below)
                sq = (Zhat - Hd) ** 2
                e_party = [float(blk.sum()) for blk in sq.split(s.emb_sizes, dim=1)]
                e_emb = float(sum(e_party))
                if any_exact and not math.isfinite(e_emb):
                    for m in range(M):
                        if skip[m] and not bool(torch.isfinite(H[m]).all()):
                            raise _diverged(m, r, t0)
                theta0 = torch.cat([q.reshape(-1) for q in server_params]).reshape(1, -1)
                if exact0:
                    theta0_hat = theta0.reshape(-1)
                else:
                    theta0_hat = c0.roundtrip(theta0, rng=comp_gens[M]).to(dtype).reshape(-1)
                e_srv = float(((theta0_hat - theta0.reshape(-1)) ** 2).sum())
                if exact0 and not math.isfinite(e_srv):
                    c0.roundtrip(theta0, rng=comp_gens[M])  # raises the compressor's ValueError
                # the parties' copy of the server: C_0(θ_0^{t0}), frozen for the round
                if hat_flat is not None:
                    hat_flat.copy_(theta0_hat)
                else:
                    for v, dst in zip(theta0_hat.split(numels), hat_params):
                        dst.copy_(v.reshape(dst.shape))
                for b_hat, b_srv in hat_buffers:
                    b_hat.copy_(b_srv)
                # lossless round start (e.g. identity compressors): every party's view
                # Φ̂_m^{t0} = {Φ̂_{-m}^{t0}; h_m} is the fresh Φ^{t0} and C_0(θ_0^{t0}) = θ_0^{t0},
                # so the M + 1 objectives of local step 0 coincide with one joint F_B(Φ^{t0}; θ_0)
                # (a nonzero error rules it out without comparing the tensors)
                joint0 = (
                    rowwise
                    and (lossless or (e_emb == 0.0 and bool(torch.equal(Zhat, Hd))))
                    and (exact0 or (e_srv == 0.0 and bool(torch.equal(theta0_hat, theta0[0]))))
                )
                if Q > 1 or not joint0:
                    yrep = yb.repeat(M + 1)
                    Zhat3 = Zhat.unsqueeze(0)
            bits = rec.account(comps, c0, bsz)

            # -- Q local steps on the same mini-batch
            for step in range(Q):
                if probe is not None:  # measures only: reads the state, changes nothing
                    probe(
                        round_index=r,
                        step=step,
                        Q=Q,
                        parties=parties,
                        server=server,
                        x=xb,
                        y=yb,
                        stale=Hd,
                        stale_hat=Zhat,
                        theta0=theta0,
                        theta0_hat=theta0_hat,
                        compressors=comps,
                        server_compressor=c0,
                        error_feedback=config.error_feedback,
                    )
                if step == 0 and joint0:
                    loss = nn.functional.cross_entropy(server(Hc), yb, reduction="sum") / bsz
                else:
                    if step > 0:
                        H = [p(x) for p, x in zip(parties, xb)]
                        Hc = torch.cat(H, dim=1)
                    # rows m*B..(m+1)*B: party m's view Φ̂_m^t = {Φ̂_{-m}^{t0}; h_m(θ_m^t)}
                    # (the others' stale compressed blocks, its own fresh block: a selection)
                    Zp = torch.where(own_block, Hc.unsqueeze(0), Zhat3).reshape(M * bsz, -1)
                    # Σ_m F_B(Φ̂_m^t; C_0(θ_0^{t0})) + F_B(Φ̂^{t0}; θ_0): the blocks' parameters
                    # are disjoint, so one backward gives every ∇_m F_B of Algorithm 1 (each a mean)
                    logits = torch.cat([server_hat(Zp), server(Zhat)], dim=0)
                    loss = nn.functional.cross_entropy(logits, yrep, reduction="sum") / bsz
                grads = torch.autograd.grad(loss, all_params, allow_unused=True)
                _sgd_step(all_params, grads, eta)
            r += 1
            rec.log_round(bits, e_party, e_srv, eta, e_emb)
            rec.train_time += time.perf_counter() - tick
            if s.evaluates_after(r):
                rec.add_row(r, parties, server)
        if checkpoint is not None:
            rec.save(
                checkpoint,
                checkpoint_arrays(parties, server, memory),
                _epoch + 1,
                r,
                batch_gen,
                [g.bit_generator.state for g in comp_gens],
            )
        if on_epoch_end is not None:
            on_epoch_end(_epoch + 1)

    return rec.finish(parties, server)


def joint_sgd(
    dataset: VerticalDataset, config: CVFLConfig
) -> tuple[list[nn.Module], nn.Module, float]:
    r"""Plain mini-batch SGD on the joint model :math:`\Theta` (the C1 oracle and benchmark baseline).

    Same initialisation, batches and step sizes as :func:`train` under the same ``config``; no
    compression, no local steps (``config.Q`` and the compressors are ignored).

    Returns
    -------
    parties, server, seconds
        The trained modules and the training time (excluding set-up).
    """
    s = _setup(dataset, config)
    parties, server = s.parties, s.server
    params = [q for net in [*parties, server] for q in net.parameters()]
    Xtr = [torch.as_tensor(p, dtype=s.dtype) for p in dataset.train_parts]
    ytr = torch.as_tensor(dataset.y_train)
    batch_gen = np.random.default_rng(s.seeds[1])
    opt = torch.optim.SGD(params, lr=1.0)
    r = 0
    seconds = 0.0
    for _ in range(config.epochs):
        for batch in minibatches(dataset.n_train, config.batch_size, batch_gen):
            tick = time.perf_counter()
            for g in opt.param_groups:
                g["lr"] = float(s.lr(r))
            idx = torch.from_numpy(batch)
            loss = nn.functional.cross_entropy(
                _forward(parties, server, [X[idx] for X in Xtr]), ytr[idx]
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            r += 1
            seconds += time.perf_counter() - tick
    return parties, server, seconds
