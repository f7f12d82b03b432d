r"""The configuration of a C-VFL run and its validation into a run set-up (C1).

:class:`CVFLConfig` says what to run; :func:`setup_run` checks all of it against the data set and
builds the initial models (:class:`RunSetup`) before any training, so bad input is refused with
an error naming the argument. Every execution strategy starts from the same set-up, seeded the same
way (``SeedSequence(seed).spawn(3)``: initialisation, batches, compressors).
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from .data import VerticalDataset
from .models import build_party_models, build_server_model, count_parameters
from .schedules import as_step_size

__all__ = [
    "CVFLConfig",
    "DTYPES",
    "RunSetup",
    "setup_run",
    "build_models",
    "is_compressor",
    "resolve_device",
]

DTYPES = {"float32": torch.float32, "float64": torch.float64}
"""The model and data precisions of :attr:`CVFLConfig.dtype`."""

GLOBAL_RNG = threading.Lock()
"""Held while the models are initialised from torch's global generator: runs in threads of one
process (a Dask worker's) would otherwise draw from each other's seeds."""


@dataclass
class CVFLConfig:
    r"""Configuration of a C-VFL run (C1).

    Parameters
    ----------
    Q : int
        Local steps per global round (``Q >= 1``); ``T = R Q``.
    lr : float or callable
        Step size :math:`\eta`, or a schedule ``lr(t) -> float`` evaluated at each round's first
        iteration :math:`t_0` (see :mod:`cvfl_sim.vfl.schedules`).
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
        ``round -> Compressor | list`` (e.g. :class:`~cvfl_sim.vfl.schedules.CompressionSchedule`). ``None`` is
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
        A progress bar over the rounds on stderr (a widget in Jupyter), showing the last
        evaluation (loss, metric, bits); ``False`` is silent.
    device : str
        The torch device of the models, the data and the training arithmetic: ``"cpu"``
        (default), ``"cuda"`` or ``"cuda:i"`` (``train``'s ``"inprocess"`` backend; the others
        and the probes need ``"cpu"``). The models are initialised on the CPU and then moved, so
        every device starts from the same :math:`\Theta^0`. On a GPU the compressors run in
        torch on the device, with the compiled kernels' bytes for the same input, so the ledger
        is the CPU's. A GPU's model arithmetic still differs from the CPU's in the last bits.
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
    device: str = "cpu"
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


def is_compressor(c: Any) -> bool:
    """Whether ``c`` is a compressor (it has ``payload_bits`` and ``roundtrip``, C5)."""
    return hasattr(c, "payload_bits") and hasattr(c, "roundtrip")


def resolve_device(device: Any, name: str = "device") -> torch.device:
    """The torch device ``device`` names (``"cpu"``, ``"cuda"``, ``"cuda:i"``), checked usable.

    Raises ``TypeError`` for a non-string and ``ValueError`` for any other device type, a CUDA
    device when torch sees none, or an index beyond ``torch.cuda.device_count()``.
    """
    if not isinstance(device, str):
        raise TypeError(f"{name} must be a string such as 'cpu' or 'cuda', got {device!r}")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{name} must be 'cpu', 'cuda' or 'cuda:<i>', got {device!r}") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ValueError(f"{name} must be 'cpu', 'cuda' or 'cuda:<i>', got {device!r}")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ValueError(f"{name}={device!r}, but torch sees no CUDA device: use 'cpu'")
    index = 0 if dev.index is None else dev.index
    if index >= count:
        raise ValueError(
            f"{name}={device!r}: the CUDA device index must be in [0, {count - 1}], got {index}"
        )
    return torch.device("cuda", index)


def _check_int(v: Any, name: str, lo: int, hi: float = math.inf) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {v!r}")
    if not lo <= v <= hi:
        bound = f"in [{lo}, {hi}]" if math.isfinite(hi) else f">= {lo}"
        raise ValueError(f"{name} must be {bound}, got {v}")
    return int(v)


@dataclass
class RunSetup:
    r"""A validated run: the initial models :math:`\Theta^0`, schedules, seeds and round counts.

    Made by :func:`setup_run`; every execution strategy starts from it, so all build the same
    models from the seed and draw from the same streams.
    """

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
    device: torch.device = torch.device("cpu")  # of the models and the data

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
        if is_compressor(c):
            return [c] * M
        if isinstance(c, (list, tuple)):
            if len(c) != M:
                raise ValueError(f"{where} lists {len(c)} compressors for {M} parties")
            if not all(is_compressor(x) for x in c):
                raise TypeError(f"{where} must hold compressors (with payload_bits and roundtrip)")
            return list(c)
        raise TypeError(
            f"{where} must be a compressor, a list of M compressors or a schedule round -> "
            f"compressor; got {type(c).__name__}"
        )

    if spec is None or is_compressor(spec) or isinstance(spec, (list, tuple)):
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
        elif is_compressor(party_spec):
            spec = party_spec
        elif isinstance(party_spec, (list, tuple)):
            spec = None
        elif callable(party_spec):

            def same(r: int) -> Any:
                c = party_spec(r)
                return c if is_compressor(c) else _identity()

            return same
    if spec is None:
        ident = _identity()
        return lambda r: ident
    if is_compressor(spec):
        return lambda r: spec
    if callable(spec):
        return spec
    raise TypeError(f"server_compressor must be a compressor or a schedule, got {type(spec)}")


_SCALE_ROWS = 256
"""Rows (the largest in magnitude) on which the initial models must give finite logits."""


def _check_scale(
    dataset: VerticalDataset, parties: list[nn.Module], server: nn.Module, dtype: Any, name: str
) -> None:
    """Refuse data the run cannot represent, before training (not as a divergence later).

    Every feature must be finite in the run's precision, and the initial models' logits finite
    on the :data:`_SCALE_ROWS` training rows of largest magnitude.
    """
    limit = float(torch.finfo(dtype).max)
    top = np.zeros(dataset.n_train)
    for m, part in enumerate(dataset.train_parts):
        a = np.abs(np.asarray(part, dtype=np.float64)).reshape(dataset.n_train, -1).max(axis=1)
        big = float(a.max()) if a.size else 0.0
        if big > limit:
            raise ValueError(
                f"party {m}'s features reach {big:.3g}, beyond {name}'s largest value "
                f"{limit:.3g}: rescale the data or use dtype='float64'"
            )
        top = np.maximum(top, a)
    rows = np.argsort(-top, kind="stable")[:_SCALE_ROWS]
    with torch.no_grad():
        X = [torch.as_tensor(np.asarray(p)[rows], dtype=dtype) for p in dataset.train_parts]
        out = server(torch.cat([p(x) for p, x in zip(parties, X)], dim=1))
    if not bool(torch.isfinite(out).all()):
        raise ValueError(
            f"the initial models' logits are not finite on the training data (features up to "
            f"{float(top.max()):.3g} in magnitude): rescale the features (e.g. standardise them)"
        )


def setup_run(
    dataset: VerticalDataset, config: CVFLConfig, cpu_only: str | None = None
) -> RunSetup:
    """Validate everything and build models — before any training (bad input → clear errors).

    ``cpu_only`` names a caller that runs on the CPU only (e.g. ``"backend='roles'"``): a
    ``config.device`` other than the CPU is then refused.
    """
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
    if config.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {config.dtype!r}")
    dtype = DTYPES[config.dtype]
    device = resolve_device(config.device)
    if cpu_only is not None and device.type != "cpu":
        raise ValueError(
            f"device={config.device!r} needs backend='inprocess': {cpu_only} runs on the CPU"
        )
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
    with GLOBAL_RNG, torch.random.fork_rng(devices=[]):
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
    _check_scale(dataset, parties, server, dtype, config.dtype)
    # initialised (and checked) on the CPU, then moved: the same Θ^0 on every device
    parties = [p.to(device) for p in parties]
    server = server.to(device)
    rpe = math.ceil(dataset.n_train / config.batch_size)
    return RunSetup(
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
        device=device,
    )


def build_models(dataset: VerticalDataset, config: CVFLConfig) -> tuple[list[nn.Module], nn.Module]:
    r"""The initial models :math:`\Theta^0` of ``train(dataset, config)``: ``(parties, server)``.

    Validated and built exactly as :func:`train` builds them (same seed, same values).
    """
    s = setup_run(dataset, config)
    return s.parties, s.server
