r"""Figure 4 of [CVFL]: 4 vs 12 parties on digits-views, lattice quantization at ``b = 2, 3, 4, 32``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..vfl.results import RunResult
from ..vfl.sources import DataSource
from .specs import BITS, Options, RunSpec, settings_of
from .tables import TABLE_COLUMNS, aggregate, table_and_curves

__all__ = ["DATASETS", "specs", "run"]

DATASETS = ("digits-views-4", "digits-views-12")
"""Data sets of the ``parties`` experiment (4 and 12 parties)."""


def _datasets(opt: Options) -> list[tuple[str, DataSource | None]]:
    """4 and 12 parties: digits-views, ModelNet10 from ``data_dir``, or the researcher's data."""
    if opt.dataset is None:
        return opt.datasets(DATASETS)
    if opt.dataset.parties is not None:
        raise ValueError(
            "the parties experiment compares 4 and 12 parties of one data set: drop --parties"
        )
    return [(f"{opt.dataset.label}-{m}", replace(opt.dataset, parties=m)) for m in (4, 12)]


def _specs(opt: Options, ds: str, source: DataSource | None) -> list[RunSpec]:
    return [
        RunSpec(ds, "lattice", b, settings_of(ds)["Q"], s, opt.epochs(ds), source=source)
        for b in (*BITS, 32)
        for s in range(opt.n_seeds())
    ]


def specs(opt: Options) -> list[RunSpec]:
    """Every run of the experiment."""
    return [s for ds, source in _datasets(opt) for s in _specs(opt, ds, source)]


def run(opt: Options) -> dict[str, Any]:
    """Figure 4: 4 vs 12 parties on digits-views, lattice quantization at b = 2, 3, 4, 32."""
    folder = opt.folder("parties")
    rows = []
    groups: dict[str, list[RunResult]] = {}
    for ds, source in _datasets(opt):
        res = opt.runs(_specs(opt, ds, source))
        target = opt.target(res, lambda s: s.bits == 32)
        rows += aggregate(res, target)
        for s, r in res.items():
            groups.setdefault(f"M={r.dataset['n_parties']} b={s.bits}", []).append(r)
    return table_and_curves(
        rows,
        folder,
        TABLE_COLUMNS,
        groups,
        "parties.png",
        f"{_datasets(opt)[0][0].rsplit('-', 1)[0]}: 4 vs 12 parties (lattice)",
    )
