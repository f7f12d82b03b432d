r"""Figure 4 of [CVFL]: 4 vs 12 parties on digits-views, lattice quantization at ``b = 2, 3, 4, 32``."""

from __future__ import annotations

from typing import Any

from ..vfl.results import RunResult
from .specs import BITS, SETTINGS, Options, RunSpec
from .tables import TABLE_COLUMNS, aggregate, table_and_curves

__all__ = ["DATASETS", "specs", "run"]

DATASETS = ("digits-views-4", "digits-views-12")
"""Data sets of the ``parties`` experiment (4 and 12 parties)."""


def _specs(opt: Options, ds: str) -> list[RunSpec]:
    return [
        RunSpec(ds, "lattice", b, SETTINGS[ds]["Q"], s, opt.epochs(ds))
        for b in (*BITS, 32)
        for s in range(opt.n_seeds())
    ]


def specs(opt: Options) -> list[RunSpec]:
    """Every run of the experiment."""
    return [s for ds in DATASETS for s in _specs(opt, ds)]


def run(opt: Options) -> dict[str, Any]:
    """Figure 4: 4 vs 12 parties on digits-views, lattice quantization at b = 2, 3, 4, 32."""
    folder = opt.folder("parties")
    rows = []
    groups: dict[str, list[RunResult]] = {}
    for ds in DATASETS:
        res = opt.runs(_specs(opt, ds))
        target = opt.target(res, lambda s: s.bits == 32)
        rows += aggregate(res, target)
        for s, r in res.items():
            groups.setdefault(f"M={ds.rsplit('-', 1)[1]} b={s.bits}", []).append(r)
    return table_and_curves(
        rows,
        folder,
        TABLE_COLUMNS,
        groups,
        "parties.png",
        "digits-views: 4 vs 12 parties (lattice)",
    )
