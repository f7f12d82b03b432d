r"""Tables 2–4 of [CVFL]: every compressor at every bit width on every data set; the headline claim.

The claim (C8): at ``b = 2`` each compressor reaches the ``b = 32`` target with at least 90% fewer
bits, at a maximum metric within the seeds' spread.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from cvfl_theory._atomic import atomic_write_text

from ..vfl.compressors import COMPRESSORS, EF_SUFFIX
from ..vfl.results import RunResult
from .plotting import plot_panels
from .specs import Options, RunSpec, compressor_specs
from .tables import TABLE_COLUMNS, aggregate, format_cell, write_table

__all__ = ["DATASETS", "specs", "run", "headline_claim"]

DATASETS = ("digits-quadrants", "breast-cancer", "digits-views-4")
"""Data sets of the ``compressors`` experiment (error feedback also runs on the first)."""


def _specs(opt: Options) -> list[tuple[str, list[RunSpec]]]:
    """``(data set, its runs)`` in order; error feedback at ``b = 2`` on the first data set."""
    return [
        (ds, compressor_specs(opt, ds, ef=i == 0, source=source))
        for i, (ds, source) in enumerate(opt.datasets(DATASETS))
    ]


def specs(opt: Options) -> list[RunSpec]:
    """Every run of the experiment (error feedback at ``b = 2`` on the first data set)."""
    return [s for _, runs in _specs(opt) for s in runs]


def run(opt: Options) -> dict[str, Any]:
    """Tables 2–4: compressors × bits on every data set, plus the headline claim.

    The claim is checked on the first data set (``digits-quadrants``, or CIFAR-10 from
    ``data_dir``, or the researcher's own), where the ``b = 2`` compressors also run with error
    feedback.
    """
    folder = opt.folder("compressors")
    all_rows: list[dict[str, Any]] = []
    headline: dict[str, Any] = {}
    for i, (ds, runs) in enumerate(_specs(opt)):
        res = opt.runs(runs)
        target = opt.target(res, lambda s: s.bits == 32)
        rows = aggregate(res, target)
        all_rows += rows
        groups: dict[str, list[RunResult]] = {}
        for s, r in res.items():
            label = "b=32" if s.bits == 32 else f"{s.compressor} b={s.bits}"
            groups.setdefault(label, []).append(r)
        plot_panels(groups, os.path.join(folder, f"{ds}.png"), f"{ds}: metric vs bits")
        if i == 0:
            headline = headline_claim(rows, ds)
    write_table(all_rows, folder, "table", TABLE_COLUMNS)
    atomic_write_text(os.path.join(folder, "headline.md"), _headline_markdown(headline))
    atomic_write_text(
        os.path.join(folder, "headline.json"), json.dumps(_jsonable(headline), indent=1)
    )
    return {"rows": all_rows, "headline": headline, "folder": folder}


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def headline_claim(rows: list[dict[str, Any]], dataset: str = "digits-quadrants") -> dict[str, Any]:
    r"""Check the headline claim of [CVFL] on one data set (C8).

    At ``b = 2`` each compressor reaches the ``b = 32`` target with at least 90% fewer bits, at a
    maximum metric within the seeds' spread.

    "Within the seeds' spread" is taken as: the ``b = 2`` mean max metric is at least the ``b = 32``
    mean minus the sum of the two standard deviations (the ±1 std intervals overlap, or ``b = 2``
    is better).

    Returns
    -------
    dict
        ``per_compressor`` verdict rows and ``holds`` (True only if every compressor passes).
    """
    base = [r for r in rows if r["dataset"] == dataset and r["bits_per_component"] == 32]
    if not base:
        raise ValueError(f"no b = 32 baseline for {dataset!r} in the rows")
    b = base[0]
    out = []
    for kind in COMPRESSORS + tuple(k + EF_SUFFIX for k in COMPRESSORS):
        cand = [
            r
            for r in rows
            if r["dataset"] == dataset and r["compressor"] == kind and r["bits_per_component"] == 2
        ]
        if not cand:
            continue
        c = cand[0]
        reduction = (
            1.0 - c["bits_to_target_mean"] / b["bits_to_target_mean"]
            if math.isfinite(c["bits_to_target_mean"]) and math.isfinite(b["bits_to_target_mean"])
            else -math.inf
        )
        paper_reduction = (
            1.0 - c["paper_bits_to_target_mean"] / b["paper_bits_to_target_mean"]
            if math.isfinite(c.get("paper_bits_to_target_mean", math.inf))
            and math.isfinite(b.get("paper_bits_to_target_mean", math.inf))
            else -math.inf
        )
        gap = b["max_metric_mean"] - c["max_metric_mean"]
        spread = b["max_metric_std"] + c["max_metric_std"]
        out.append(
            {
                "compressor": kind,
                "target": b["target"],
                "b2_reached": f"{c['reached']}/{c['seeds']}",
                "b32_bits_to_target": b["bits_to_target_mean"],
                "b2_bits_to_target": c["bits_to_target_mean"],
                "bit_reduction": reduction,
                "paper_model_bit_reduction": paper_reduction,
                "b32_max_metric": f"{b['max_metric_mean']:.4f} ± {b['max_metric_std']:.4f}",
                "b2_max_metric": f"{c['max_metric_mean']:.4f} ± {c['max_metric_std']:.4f}",
                "metric_gap": gap,
                "seed_spread": spread,
                "fewer_bits_90pct": bool(reduction >= 0.9),
                "metric_within_spread": bool(gap <= spread),
            }
        )
        out[-1]["holds"] = out[-1]["fewer_bits_90pct"] and out[-1]["metric_within_spread"]
    plain = [r for r in out if not r["compressor"].endswith(EF_SUFFIX)]
    return {
        "dataset": dataset,
        "per_compressor": out,
        "holds": bool(plain) and all(r["holds"] for r in plain),
    }


def _headline_markdown(h: dict[str, Any]) -> str:
    lines = [
        f"# Headline claim on {h['dataset']}",
        "",
        "Claim [CVFL]: b = 2 reaches the b = 32 target with ≥ 90% fewer bits, at a maximum "
        "metric within the seeds' spread (b=2 mean ≥ b=32 mean − (std_32 + std_2)).",
        "",
    ]
    cols = [
        "compressor",
        "target",
        "b2_reached",
        "b32_bits_to_target",
        "b2_bits_to_target",
        "bit_reduction",
        "paper_model_bit_reduction",
        "b32_max_metric",
        "b2_max_metric",
        "metric_gap",
        "seed_spread",
        "holds",
    ]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in h["per_compressor"]:
        lines.append("| " + " | ".join(format_cell(r[c]) for c in cols) + " |")
    verdict = "HOLDS" if h["holds"] else "DOES NOT HOLD"
    plain = [r for r in h["per_compressor"] if not r["compressor"].endswith(EF_SUFFIX)]
    lines += [
        "",
        f"**Verdict: the claim {verdict} for every compressor.**"
        if h["holds"]
        else f"**Verdict: the claim {verdict} for: "
        + ", ".join(r["compressor"] for r in plain if not r["holds"])
        + ".**",
    ]
    ef = [r for r in h["per_compressor"] if r["compressor"].endswith(EF_SUFFIX)]
    if ef:
        lines += [
            "",
            f"With error feedback (C9, `{EF_SUFFIX}` rows, not part of the paper's claim) it "
            + "holds for: "
            + (", ".join(r["compressor"] for r in ef if r["holds"]) or "none")
            + "; fails for: "
            + (", ".join(r["compressor"] for r in ef if not r["holds"]) or "none")
            + ".",
        ]
    return "\n".join(lines) + "\n"
