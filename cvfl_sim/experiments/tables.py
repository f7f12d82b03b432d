r"""Tables of the experiments: one row per sweep cell (:func:`aggregate`), CSV and markdown files."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from cvfl_theory._atomic import atomic_write_text

from ..vfl.results import RunResult
from .plotting import plot_panels
from .specs import RunSpec

__all__ = [
    "TABLE_COLUMNS",
    "aggregate",
    "mean_std",
    "format_cell",
    "write_table",
    "write_csv",
    "write_markdown",
    "table_and_curves",
]

TABLE_COLUMNS = [
    "dataset",
    "compressor",
    "bits_per_component",
    "Q",
    "seeds",
    "metric",
    "max_metric_mean",
    "max_metric_std",
    "target",
    "reached",
    "bits_to_target_mean",
    "bits_to_target_std",
    "bits_to_target_reached_mean",
    "paper_bits_to_target_mean",
    "total_bits_mean",
]


def mean_std(v: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``inf`` and NaN if a value is infinite)."""
    a = np.asarray(v, dtype=float)
    if np.isinf(a).any():
        return math.inf, math.nan
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def aggregate(
    results: dict[RunSpec, RunResult], target: float, metric: str | None = None
) -> list[dict[str, Any]]:
    """One row per sweep cell: max metric mean ± std, bits and rounds to ``target``."""
    cells: dict[tuple[Any, ...], list[tuple[RunSpec, RunResult]]] = {}
    for spec, res in results.items():
        cells.setdefault(spec.cell, []).append((spec, res))
    rows = []
    for cell, items in cells.items():
        maxes = [r.max_metric(metric) for _, r in items]
        bits = [r.bits_to_target(target, metric) for _, r in items]
        rounds = [r.rounds_to_target(target, metric) for _, r in items]
        paper = [r.bits_to_target(target, metric, "bits_paper_model") for _, r in items]
        reached = [b for b in bits if math.isfinite(b)]
        m, s = mean_std(maxes)
        bm, bs = mean_std(bits)
        rm, rs = mean_std(rounds)
        rows.append(
            {
                "dataset": cell[0],
                "compressor": "none" if cell[2] == 32 else cell[1],
                "bits_per_component": cell[2],
                "Q": cell[3],
                "seeds": len(items),
                "metric": items[0][1].metric,
                "max_metric_mean": m,
                "max_metric_std": s,
                "target": target,
                "reached": len(reached),
                "bits_to_target_mean": bm,
                "bits_to_target_std": bs,
                "bits_to_target_reached_mean": float(np.mean(reached)) if reached else math.inf,
                "paper_bits_to_target_mean": mean_std(paper)[0],
                "rounds_to_target_mean": rm,
                "rounds_to_target_std": rs,
                "total_bits_mean": float(np.mean([r.summary["total_bits"] for _, r in items])),
            }
        )
    return rows


def format_cell(v: Any, digits: int = 4) -> str:
    """A markdown cell: ``digits`` significant digits, "not reached" for ``inf``, "–" for NaN."""
    if isinstance(v, float):
        if math.isinf(v):
            return "not reached"
        if math.isnan(v):
            return "–"
        if abs(v) >= 1e5:
            return f"{v:.3e}"
        return f"{v:.{digits}g}"
    return str(v)


def write_table(
    rows: list[dict[str, Any]], folder: str, stem: str, columns: Sequence[str] | None = None
) -> None:
    """Write ``<stem>.csv`` and ``<stem>.md`` with the same columns (atomic)."""
    if not rows:
        return
    cols = list(columns or rows[0].keys())
    write_csv(rows, os.path.join(folder, stem + ".csv"), cols)
    write_markdown(rows, os.path.join(folder, stem + ".md"), cols)


def write_csv(rows: Sequence[dict[str, Any]], path: str, columns: Sequence[str]) -> None:
    """Write the ``columns`` of ``rows`` as CSV with a header row (atomic, values unrounded)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")  # quotes fields holding commas, e.g. "[0, 2)"
    writer.writerow(columns)
    writer.writerows([[r.get(c, "") for c in columns] for r in rows])
    atomic_write_text(path, buf.getvalue())


def write_markdown(rows: Sequence[dict[str, Any]], path: str, columns: Sequence[str]) -> None:
    """Write the ``columns`` of ``rows`` as a markdown pipe table (atomic, :func:`format_cell`)."""
    md = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    md += ["| " + " | ".join(format_cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    atomic_write_text(path, "\n".join(md) + "\n")


def table_and_curves(
    rows: list[dict[str, Any]],
    folder: str,
    columns: Sequence[str] | None,
    groups: dict[str, list[RunResult]],
    png: str,
    title: str,
    xkeys: Sequence[str] = ("epoch", "bits"),
) -> dict[str, Any]:
    """Write ``table.csv``/``.md`` and the metric-vs-``xkeys`` plot ``png``; the result."""
    write_table(rows, folder, "table", columns)
    plot_panels(groups, os.path.join(folder, png), title, xkeys=xkeys)
    return {"rows": rows, "folder": folder}
