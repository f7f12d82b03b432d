r"""What a run records beside Algorithm 1 (C1): ledger (C6), error log (C2), history, checkpoint.

One implementation for every execution strategy.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from .checkpoint import array_layout, read_checkpoint, write_checkpoint
from .config import CVFLConfig, RunSetup, resolve_device
from .data import VerticalDataset
from .evaluate import EvalData, eval_data, evaluate
from .ledger import BitLedger, RoundBits, nominal_bits, paper_cost_model, round_bits
from .models import count_parameters
from .results import RunResult

__all__ = ["RunRecord", "checkpoint_identity", "checkpoint_arrays", "resume", "check_state"]

_LOG_KEYS = ("bits", "embedding_error", "embedding_error_by_party", "server_model_error", "lr")


_STATE_KEYS = frozenset(
    {"epoch", "round", "train_time", "batch_gen", "comp_gens", "ledger", "log", "history",
     "err_since"}
)  # fmt: skip


def _is_int(v: Any, lo: int = 0, hi: float = math.inf) -> bool:
    return type(v) is int and lo <= v <= hi


def _is_real(v: Any, lo: float = 0.0, hi: float = math.inf) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and lo <= v <= hi


def check_state(state: Any, dataset: VerticalDataset, config: CVFLConfig) -> tuple[int, int]:
    """Check a checkpoint's training state for meaning; return its ``(epoch, round)``.

    Beyond the file format (:func:`~cvfl_sim.vfl.checkpoint.read_checkpoint`), every field must
    make sense for this run: exact JSON types (no coercion of ``1.9`` or ``"1"`` to an integer);
    the epoch in ``[0, epochs]``, the round equal to the epochs times the rounds per epoch (a
    checkpoint is written at an epoch's end); one ledger entry and one log entry per round with
    ``M`` parties; the history rows exactly the evaluations so far, at their rounds and epochs;
    the errors since the last row one per round since it; a finite training time.

    Raises
    ------
    ValueError
        Naming the field and what is wrong (:func:`resume` adds the file).
    """
    if not isinstance(state, dict) or set(state) != _STATE_KEYS:
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"state keys {keys}, expected {sorted(_STATE_KEYS)}")
    rpe = math.ceil(dataset.n_train / config.batch_size)
    every = config.eval_every or rpe
    M = dataset.n_parties
    epoch, r = state["epoch"], state["round"]
    if not _is_int(epoch, 0, config.epochs):
        raise ValueError(f"epoch {epoch!r}: must be an integer in [0, epochs={config.epochs}]")
    if not _is_int(r) or r != epoch * rpe:
        raise ValueError(f"round {r!r}: must be epoch * rounds per epoch = {epoch * rpe}")
    if not _is_real(state["train_time"]):
        raise ValueError(f"train_time {state['train_time']!r}: must be a finite number >= 0")
    if not isinstance(state["comp_gens"], list) or len(state["comp_gens"]) != M + 1:
        raise ValueError(f"comp_gens: must list M + 1 = {M + 1} generator states")
    ledger = state["ledger"]
    if not isinstance(ledger, list) or len(ledger) != r:
        raise ValueError(f"ledger: must hold one entry per round ({r})")
    for k, e in enumerate(ledger):
        ok = (
            isinstance(e, list)
            and len(e) == 3
            and isinstance(e[0], list)
            and len(e[0]) == M
            and all(_is_int(u) for u in e[0])
            and _is_int(e[1])
            and _is_real(e[2])
        )
        if not ok:
            raise ValueError(f"ledger entry {k}: must be [M = {M} upload bits, server bits, paper]")
    log = state["log"]
    if not isinstance(log, dict) or set(log) != set(_LOG_KEYS):
        raise ValueError(f"log: must have the keys {sorted(_LOG_KEYS)}")
    for key, values in log.items():
        if not isinstance(values, list) or len(values) != r:
            raise ValueError(f"log[{key!r}]: must hold one value per round ({r})")
        for v in values:
            if key == "bits":
                ok = _is_int(v)
            elif key == "embedding_error_by_party":
                ok = isinstance(v, list) and len(v) == M and all(_is_real(x) for x in v)
            elif key == "lr":
                ok = _is_real(v) and v > 0
            else:
                ok = _is_real(v)
            if not ok:
                raise ValueError(f"log[{key!r}] holds a bad value {v!r}")
    evaluations = [0] + [t for t in range(1, r + 1) if t % every == 0 or t == rpe * config.epochs]
    hist = state["history"]
    if not isinstance(hist, list) or len(hist) != len(evaluations):
        n = len(hist) if isinstance(hist, list) else type(hist).__name__
        raise ValueError(f"history: {n} rows, the evaluations so far are {len(evaluations)}")
    for row, t in zip(hist, evaluations):
        if not isinstance(row, dict) or row.get("round") != t or row.get("epoch") != t / rpe:
            raise ValueError(f"history row of round {t}: missing, or at another round or epoch")
        for key in ("train_loss", "test_accuracy", "test_f1"):
            if not _is_real(row.get(key), 0.0, 1.0 if key != "train_loss" else math.inf):
                raise ValueError(f"history row of round {t}: {key} {row.get(key)!r}")
        if not _is_int(row.get("bits")):
            raise ValueError(f"history row of round {t}: bits {row.get('bits')!r}")
        if (row.get("grad_norm_sq") is None) == bool(config.track_grad_norm):
            raise ValueError(f"history row of round {t}: grad_norm_sq does not fit the config")
    since = state["err_since"]
    want = r - (evaluations[-1] if evaluations else 0)
    if (
        not isinstance(since, list)
        or len(since) != want
        or not all(isinstance(e, list) and len(e) == 2 and all(map(_is_real, e)) for e in since)
    ):
        raise ValueError(f"err_since: must hold {want} pairs of errors (rounds since the last row)")
    return epoch, r


def checkpoint_identity(dataset: VerticalDataset, config: CVFLConfig) -> str:
    """The identity a checkpoint of ``train(dataset, config)`` is checked against on resume.

    Everything that shapes the run; not ``progress``, which only shows it. The device is named
    as resolved (``"cuda"`` is ``"cuda:0"``), and not at all for the CPU, so that checkpoints
    written before :attr:`CVFLConfig.device` existed still resume.
    """
    described = {k: v for k, v in config.to_dict().items() if k not in ("progress", "device")}
    device = resolve_device(config.device)
    if device.type != "cpu":
        described["device"] = str(device)
    return json.dumps([described, dataset.describe()], sort_keys=True, default=str)


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
    r"""What a run records beside Algorithm 1 (C1): C6 ledger, C2 error log, history.

    Shared by every execution strategy — the vectorised loop of :mod:`cvfl_sim.vfl.vectorised` and the roles of
    :mod:`cvfl_sim.vfl.roles`, in one process or one per role — so that their ledgers, per-round
    logs, histories, checkpoints and results are built by the same code.

    Parameters
    ----------
    s : RunSetup
        The run's set-up (embedding sizes :math:`P_m`, the server model, rounds per epoch).
    dataset, config
        As for :func:`~cvfl_sim.vfl.train.train`.

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

    def __init__(self, s: RunSetup, dataset: VerticalDataset, config: CVFLConfig) -> None:
        self.s, self.dataset, self.config = s, dataset, config
        self.eval_data: EvalData | None = None  # the data as tensors, made at the first row
        self.theta0_size = count_parameters(s.server)  # |θ_0|, fixed
        self.ledger = BitLedger()
        self.log: dict[str, list[Any]] = {k: [] for k in _LOG_KEYS}
        self.history: list[dict[str, Any]] = []
        self.err_since: list[tuple[float, float]] = []  # (embedding, server) errors since a row
        self.train_time = 0.0
        self.t_start = time.perf_counter()
        self._costs: dict[tuple[Any, ...], tuple[RoundBits, float, int, Any]] = {}
        self._last: tuple[Any, ...] = (None, None, 0, None)
        self.bar: Any = None
        if config.progress:  # a bar over the rounds (a widget in Jupyter), updated per evaluation
            from .progress import progress_bar

            self.bar = progress_bar(s.total_rounds, True, f"C-VFL {dataset.name}", unit="round")

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
        if self.eval_data is None:  # the server's device (it has parameters: setup_run)
            device = next(server.parameters()).device
            self.eval_data = eval_data(dataset, self.s.dtype, device)
        row.update(
            evaluate(parties, server, dataset, self.s.dtype, config.track_grad_norm, self.eval_data)
        )
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
        if self.bar is not None:
            metric = dataset.metric
            self.bar.n = r
            self.bar.set_postfix_str(
                f"epoch {row['epoch']:.2f} loss {row['train_loss']:.4f} {metric} "
                f"{row['test_' + metric]:.4f} bits {row['bits']:.3e}"
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
        if self.bar is not None:
            self.bar.close()
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
        epoch, r = check_state(st, dataset, config)
        for name, a in saved.items():
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                raise ValueError(f"array {name!r} holds non-finite values")
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
        return epoch, r
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
        raise ValueError(
            f"checkpoint {os.fspath(path)!r} holds a malformed training state "
            f"({type(exc).__name__}: {exc}); remove it or pass another path"
        ) from None
