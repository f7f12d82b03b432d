r"""Figure 3 of [CVFL]: metric vs epochs and vs bits with mean ± std bands on digits-quadrants."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..vfl.compressors import COMPRESSORS
from ..vfl.results import RunResult
from .plotting import plot_panels, seed_bands
from .specs import Options, RunSpec, compressor_specs
from .tables import write_table

__all__ = ["specs", "run"]


def specs(opt: Options) -> list[RunSpec]:
    """Every run of the experiment."""
    ((ds, source),) = opt.datasets(("digits-quadrants",))
    return compressor_specs(opt, ds, source=source)


def run(opt: Options) -> dict[str, Any]:
    """Figure 3: metric vs epochs and vs bits, mean ± std bands, on digits-quadrants."""
    planned = specs(opt)
    ds = planned[0].dataset
    folder = opt.folder("curves")
    res = opt.runs(planned)
    curve_rows = []
    for kind in COMPRESSORS:
        groups: dict[str, list[RunResult]] = {}
        for s, r in res.items():
            if s.bits == 32 or s.compressor == kind:
                groups.setdefault("b=32" if s.bits == 32 else f"{kind} b={s.bits}", []).append(r)
        plot_panels(
            groups, os.path.join(folder, f"{kind}.png"), f"{ds}: {kind}", xkeys=("epoch", "bits")
        )
        for label, runs in groups.items():
            x, m, sd = seed_bands(runs, "epoch")
            bits = np.mean([[row["bits"] for row in r.history[: len(x)]] for r in runs], axis=0)
            for e, b, mm, ss in zip(x, bits, m, sd):
                curve_rows.append(
                    {
                        "compressor": kind,
                        "config": label,
                        "epoch": float(e),
                        "bits": float(b),
                        "metric_mean": float(mm),
                        "metric_std": float(ss),
                    }
                )
    write_table(curve_rows, folder, "curves")
    return {"rows": curve_rows, "folder": folder}
