r"""What a run records beside Algorithm 1 (C1): ledger (C6), error log (C2), history, checkpoint.

One implementation for every execution strategy.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from .checkpoint import array_layout, read_checkpoint, write_checkpoint
from .config import CVFLConfig, RunSetup
from .data import VerticalDataset
from .evaluate import evaluate
from .ledger import BitLedger, RoundBits, nominal_bits, paper_cost_model, round_bits
from .models import count_parameters
from .results import RunResult

__all__ = ["RunRecord", "checkpoint_identity", "checkpoint_arrays", "resume"]

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
