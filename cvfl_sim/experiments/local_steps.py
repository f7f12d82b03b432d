r"""Table 5 of [CVFL]: time to target for ``Q = 1, 10, 25`` under the C7 time model.

Lattice quantization at ``b = 3`` on the F1 task (breast-cancer).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .specs import Options, RunSpec
from .tables import mean_std, table_and_curves
from .timing import LATENCIES, T_COMPUTE, time_to_target

__all__ = ["LOCAL_STEPS", "specs", "run"]

LOCAL_STEPS = (1, 10, 25)
"""``Q`` of the ``local-steps`` experiment (on breast-cancer, lattice ``b = 3``)."""


def specs(opt: Options) -> list[RunSpec]:
    """Every run of the experiment."""
    ((ds, source),) = opt.datasets(("breast-cancer",))
    return [
        RunSpec(ds, "lattice", 3, Q, s, opt.epochs(ds), eval_every=1, source=source)
        for Q in LOCAL_STEPS
        for s in range(opt.n_seeds())
    ]


def run(opt: Options) -> dict[str, Any]:
    """Table 5: time to target for Q = 1, 10, 25 under the C7 time model (lattice, b = 3)."""
    folder = opt.folder("local-steps")
    Qs = LOCAL_STEPS
    planned = specs(opt)
    res = opt.runs(planned)
    best = max(Qs, key=lambda Q: np.mean([r.max_metric() for s, r in res.items() if s.Q == Q]))
    target = opt.target(res, lambda s: s.Q == best)
    rows = []
    for Q in Qs:
        runs = [r for s, r in res.items() if s.Q == Q]
        rounds = [r.rounds_to_target(target) for r in runs]
        row: dict[str, Any] = {
            "Q": Q,
            "target_f1": target,
            "seeds": len(runs),
            "reached": sum(math.isfinite(x) for x in rounds),
        }
        row["rounds_mean"], row["rounds_std"] = mean_std(rounds)
        for name, lat in LATENCIES.items():
            times = [time_to_target(x, Q, lat, T_COMPUTE) for x in rounds]
            m, s = mean_std(times)
            row[f"time_{name}_{int(lat * 1000)}ms"] = m
            row[f"time_{name}_std"] = s
        rows.append(row)
    groups = {f"Q={Q}": [r for s, r in res.items() if s.Q == Q] for Q in Qs}
    return table_and_curves(
        rows,
        folder,
        None,
        groups,
        "f1_vs_round.png",
        f"{planned[0].dataset}, lattice b=3",
        ("round", "bits"),
    )
