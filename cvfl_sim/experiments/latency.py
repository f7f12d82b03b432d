r"""Measured seconds per round of distributed runs beside the C7 time model (a small Table 5)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..vfl.config import CVFLConfig
from ..vfl.data import VerticalDataset
from ..vfl.distributed import train_distributed
from ..vfl.train import train
from .timing import T_COMPUTE

__all__ = ["latency_table", "format_latency_table"]


def latency_table(
    dataset: VerticalDataset,
    config: CVFLConfig,
    *,
    delays: tuple[float, ...] = (0.001, 0.010, 0.050, 0.200),
    Qs: tuple[int, ...] = (1, 10, 25),
) -> list[dict[str, Any]]:
    r"""Measured seconds per round of distributed runs beside the C7 time model (a small Table 5).

    For each ``Q`` the in-process (vectorised) run of ``config`` gives the compute time per local
    iteration :math:`t_c` and its round time; then one distributed run per ``delay`` (seconds
    per message hop; a round is an upload then a broadcast, so the round trip of C7 is
    :math:`t_{comm} = 2\,\text{delay}`) gives the measured round time, set beside
    :math:`Q t_c + t_{comm}` and the paper's :math:`Q \cdot 10\,\text{ms} + t_{comm}` (C7).
    ``delay = 0`` rows give the distributed overhead per round over the in-process round time.
    A measurement, not a test: the numbers depend on the machine and its load.

    Returns
    -------
    list of dict
        One row per ``(Q, delay)``: ``Q``, ``delay_ms``, ``rounds``, ``measured_s`` (median
        over the rounds after the first, which includes the processes' start-up),
        ``model_s``, ``paper_model_s``, ``inprocess_s``, ``overhead`` (measured ÷ in-process).
    """
    rows = []
    for Q in Qs:
        cfg = dataclasses.replace(config, Q=Q, progress=False)
        ref = train(dataset, cfg)
        n_rounds = ref.summary["rounds"]
        if n_rounds < 3:
            raise ValueError(f"latency_table needs >= 3 rounds per run, config gives {n_rounds}")
        inproc = ref.summary["train_seconds"] / n_rounds
        t_c = inproc / Q
        for delay in (0.0, *delays):
            res = train_distributed(dataset, cfg, delay=delay)
            measured = float(np.median(res.summary["round_seconds"][1:]))  # after start-up
            t_comm = 2 * delay
            rows.append(
                {
                    "Q": Q,
                    "delay_ms": 1000 * delay,
                    "rounds": n_rounds,
                    "measured_s": measured,
                    "model_s": Q * t_c + t_comm,
                    "paper_model_s": Q * T_COMPUTE + t_comm,
                    "inprocess_s": inproc,
                    "overhead": measured / inproc,
                }
            )
    return rows


def format_latency_table(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`latency_table` as a fixed-width text table."""
    head = (
        f"{'Q':>3} {'delay ms':>9} {'measured s/round':>17} {'C7 model (t_c meas.)':>21} "
        f"{'C7 model (10 ms)':>17} {'in-process s/round':>19} {'dist/in-proc':>13}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['Q']:>3} {r['delay_ms']:>9.0f} {r['measured_s']:>17.4f} {r['model_s']:>21.4f} "
            f"{r['paper_model_s']:>17.4f} {r['inprocess_s']:>19.4f} {r['overhead']:>13.1f}"
        )
    return "\n".join(lines)
