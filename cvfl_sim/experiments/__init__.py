r"""The paper's experiments on offline stand-in data (THEORY C7, C8), resumable.

Four sweeps, each writing a results folder (CSV, markdown table, PNG plots):

``compressors`` (Tables 2–4)
    every data set × {scalar, hexagonal lattice, top-k} × ``b ∈ {2, 3, 4}`` and the ``b = 32``
    baseline, several seeds: max metric mean ± std and bits to reach the target; and the headline
    claim of [CVFL] measured on ``digits-quadrants`` (:func:`headline_claim`).
``local-steps`` (Table 5)
    ``Q ∈ {1, 10, 25}`` with lattice quantization at ``b = 3`` on the F1 task; wall time to target
    under the C7 time model for round trips of 1/10/50/200 ms.
``parties`` (Figure 4)
    ``digits-views`` with 4 vs 12 parties, lattice quantization at ``b ∈ {2, 3, 4, 32}``.
``curves`` (Figure 3)
    metric vs epochs and vs bits with mean ± std bands on ``digits-quadrants``.

Every finished run is one JSON file under ``<out>/runs/`` named by its specification (including a
hash of the training settings), written atomically; an interrupted sweep rerun with the same
arguments loads the finished runs and computes only the missing ones.

:func:`run_experiments` lists the training runs of every requested experiment, computes them as
*one* sweep (:func:`run_sweep`), then builds each experiment's tables and plots from them.
Importing this module does not import torch (a run imports it): ``cvfl reproduce`` prepares the
data sets and hands the first runs to its worker processes before it imports torch itself.

Targets: the paper fixes a target per data set; here the target of a sweep is
``target_fraction`` (default 0.95) × the mean over seeds of the reference configuration's maximum
metric (``b = 32`` for compressors and parties, the best ``Q`` for local steps), stated in every
table.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from .data import VerticalDataset, load_dataset
from .plotting import seed_bands
from .results import RunResult, atomic_write_text
from .sweep import Executor, run_specs
from .timing import LATENCIES, T_COMPUTE, time_to_target

if TYPE_CHECKING:
    from .algorithm import CVFLConfig

__all__ = [
    "RunSpec",
    "SETTINGS",
    "EXPERIMENTS",
    "make_compressor",
    "run_spec",
    "run_sweep",
    "sweep_specs",
    "aggregate",
    "headline_claim",
    "run_experiment",
    "run_experiments",
]

COMPRESSORS = ("scalar", "lattice", "topk")
BITS = (2, 3, 4)

SETTINGS: dict[str, dict[str, Any]] = {
    "digits-quadrants": {
        "lr": 0.05,
        "Q": 10,
        "batch_size": 64,
        "embedding_size": 16,
        "epochs": 20,
        "quick_epochs": 8,
        "eval_every": 5,
    },
    "breast-cancer": {
        "lr": 0.05,
        "Q": 10,
        "batch_size": 64,
        "embedding_size": 16,
        "epochs": 20,
        "quick_epochs": 8,
        "eval_every": 5,
    },
    "digits-views-4": {
        "lr": 0.05,
        "Q": 10,
        "batch_size": 64,
        "embedding_size": 16,
        "epochs": 15,
        "quick_epochs": 5,
        "eval_every": 5,
    },
    "digits-views-12": {
        "lr": 0.05,
        "Q": 10,
        "batch_size": 64,
        "embedding_size": 16,
        "epochs": 15,
        "quick_epochs": 5,
        "eval_every": 5,
    },
}
"""Training settings per data set (MLP parties, linear server head, plain SGD; evaluation every
``eval_every`` rounds, so bits and rounds to target are resolved to 5 rounds)."""

WORK_PER_EPOCH = {
    "digits-quadrants": 1797 * 4,
    "breast-cancer": 569 * 4,
    "digits-views-4": 1797 * 4,
    "digits-views-12": 1797 * 12,
}
"""Samples × parties of each data set: a run's cost is about ``epochs`` times this (digits-views
with 12 parties measured at ~2.4× the 4-party runs). Only the order of computation uses it
(:meth:`RunSpec.cost`); it is not part of a run's key."""

RANGE = "minmax-tensor"
"""Quantizer range: min–max of each message, sent as two float32 per message (C5.5)."""


EF_SUFFIX = "+ef"
"""A compressor kind ending in this (``"scalar+ef"``) runs with error feedback (C9)."""


def make_compressor(kind: str, bits: int) -> Any:
    """The compressor of a sweep cell; ``bits = 32`` is the uncompressed ``Identity()`` baseline.

    ``scalar``: :class:`ScalarQuantizer` (C5.1); ``lattice``: :class:`HexLatticeQuantizer`
    (C5.2); ``topk``: :class:`TopK` with ``k = P b / 32`` (C5.4, index bits counted). Quantizers use
    the min–max range of each message (:data:`RANGE`). A kind ending in :data:`EF_SUFFIX` is the
    same compressor (the run adds error feedback).
    """
    from cvfl_theory.compressors import Identity

    kind = kind.removesuffix(EF_SUFFIX)
    if bits == 32 or kind == "none":
        return Identity()
    if kind == "scalar":
        from cvfl_theory.compressors import ScalarQuantizer

        return ScalarQuantizer(bits, range=RANGE)
    if kind == "lattice":
        from cvfl_theory.compressors import HexLatticeQuantizer

        return HexLatticeQuantizer(bits=bits, range=RANGE)
    if kind == "topk":
        from cvfl_theory.compressors import TopK

        return TopK(bits=bits)
    raise ValueError(f"compressor kind must be one of {COMPRESSORS} or 'none', got {kind!r}")


@dataclass(frozen=True)
class RunSpec:
    """One training run of a sweep (a cell × a seed)."""

    dataset: str
    compressor: str
    bits: int
    Q: int
    seed: int
    epochs: int
    eval_every: int | None = None

    def __post_init__(self) -> None:
        if self.bits == 32:  # the uncompressed baseline is one run whatever the sweep calls it
            object.__setattr__(self, "compressor", "none")

    @property
    def cell(self) -> tuple[str, str, int, int]:
        """The sweep cell (everything but the seed)."""
        return (self.dataset, self.compressor, self.bits, self.Q)

    def config(self) -> CVFLConfig:
        """The :class:`CVFLConfig` of this run."""
        from .algorithm import CVFLConfig

        st = SETTINGS[self.dataset]
        return CVFLConfig(
            Q=self.Q,
            lr=st["lr"],
            epochs=self.epochs,
            batch_size=st["batch_size"],
            embedding_size=st["embedding_size"],
            compressor=make_compressor(self.compressor, self.bits),
            error_feedback=self.compressor.endswith(EF_SUFFIX),
            seed=self.seed,
            eval_every=self.eval_every if self.eval_every is not None else st.get("eval_every"),
        )

    def key(self) -> str:
        """File name stem: readable fields plus a hash of the data set's training settings."""
        h = hashlib.sha1(
            json.dumps([asdict(self), SETTINGS[self.dataset], RANGE], sort_keys=True).encode()
        ).hexdigest()[:8]
        comp = "none" if self.bits == 32 else self.compressor
        return f"{self.dataset}_{comp}-b{self.bits}_Q{self.Q}_e{self.epochs}_s{self.seed}_{h}"

    def cost(self) -> float:
        """Relative compute time (epochs × :data:`WORK_PER_EPOCH`): longest runs go first."""
        return float(self.epochs * WORK_PER_EPOCH.get(self.dataset, 1))


_DATA_CACHE: dict[str, VerticalDataset] = {}


def _dataset(name: str) -> VerticalDataset:
    if name not in _DATA_CACHE:
        _DATA_CACHE[name] = load_dataset(name)
    return _DATA_CACHE[name]


def spec_dataset(spec: RunSpec) -> VerticalDataset:
    """The data set of ``spec``, built once per process (what :func:`run_sweep` sends a worker)."""
    return _dataset(spec.dataset)


def run_spec(spec: RunSpec, ds: VerticalDataset | None = None) -> RunResult:
    """Train one run of a sweep on ``ds`` (default: :func:`spec_dataset`), as a worker does.

    torch is imported here, by the first run of a process, not with this module.
    """
    from .algorithm import train

    return train(spec_dataset(spec) if ds is None else ds, spec.config())


def run_sweep(
    specs: Sequence[RunSpec],
    out: str | os.PathLike[str],
    force: bool = False,
    progress: bool | None = None,
    *,
    executor: Executor | None = None,
    known: dict[RunSpec, RunResult] | None = None,
    bar: Any = None,
) -> dict[RunSpec, RunResult]:
    """Run (or load) every spec; one atomically written file per finished run.

    The engine is :func:`cvfl_sim.sweep.run_specs`: missing runs are computed on ``executor``
    (in this process by default; ``Executor(jobs=4)`` on 4 local processes; a Dask cluster),
    each with one torch intra-op thread unless ``Executor(threads=...)`` says otherwise, and the
    result is in the order of ``specs`` whatever order the runs finished in. The longest runs
    are computed first (:meth:`RunSpec.cost`), so that the processes finish together.

    Parameters
    ----------
    specs : sequence of RunSpec
    out : path-like
        Results root; runs go to ``<out>/runs/<key>.json``.
    force : bool
        Recompute even if a run file exists. A run file that cannot be read is recomputed (and
        rewritten) with a ``RuntimeWarning``.
    progress : bool or None
        A tqdm bar on stderr: ``None`` when stderr is a terminal, ``True`` always, ``False`` never.
    executor : Executor, optional
        Where missing runs are computed.
    known : dict, optional
        Runs already at hand (computed earlier by the same command): reused as they are.
    bar : tqdm, optional
        A bar shared by several sweeps (``cvfl reproduce all``), used instead of ``progress``.
    """
    folder = os.path.join(os.fspath(out), "runs")
    return run_specs(
        specs,
        folder,
        run_spec,
        inputs=spec_dataset,  # built here once, sent with each task: workers skip scipy
        cost=RunSpec.cost,
        executor=executor,
        force=force,
        known=known,
        progress=progress,
        bar=bar,
        warm="cvfl_sim.algorithm",  # torch and the model (run_spec's own module imports neither)
    )


# ---------------------------------------------------------------------------------------------
# aggregation
# ---------------------------------------------------------------------------------------------
def _mean_std(v: Sequence[float]) -> tuple[float, float]:
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
        m, s = _mean_std(maxes)
        bm, bs = _mean_std(bits)
        rm, rs = _mean_std(rounds)
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
                "paper_bits_to_target_mean": _mean_std(paper)[0],
                "rounds_to_target_mean": rm,
                "rounds_to_target_std": rs,
                "total_bits_mean": float(np.mean([r.summary["total_bits"] for _, r in items])),
            }
        )
    return rows


def _fmt(v: Any, digits: int = 4) -> str:
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
    """Write ``<stem>.csv`` and ``<stem>.md`` (atomic)."""
    if not rows:
        return
    cols = list(columns or rows[0].keys())
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")  # quotes fields holding commas, e.g. "[0, 2)"
    writer.writerow(cols)
    writer.writerows([[r.get(c, "") for c in cols] for r in rows])
    atomic_write_text(os.path.join(folder, stem + ".csv"), buf.getvalue())
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    atomic_write_text(os.path.join(folder, stem + ".md"), "\n".join(md) + "\n")


def _plot(
    groups: dict[str, list[RunResult]], path: str, title: str, xkeys: Sequence[str] = ("bits",)
) -> None:
    """Save one :func:`~cvfl_sim.plotting.plot_runs` panel per x axis to ``path`` (atomic).

    The figure is made without pyplot, so no backend is switched and a notebook is unaffected.
    """
    from matplotlib.figure import Figure

    from .plotting import plot_runs

    wide = len(groups) > 6
    fig = Figure(figsize=(5.5 * len(xkeys) + (2.0 if wide else 0.0), 4.2), layout="constrained")
    axes = fig.subplots(1, len(xkeys), squeeze=False)[0]
    for k, (ax, xkey) in enumerate(zip(axes, xkeys)):
        plot_runs(groups, x=xkey, ax=ax, legend=k == len(xkeys) - 1)
    fig.suptitle(title)
    from .plotting import save_figure

    save_figure(fig, path)


# ---------------------------------------------------------------------------------------------
# the headline claim
# ---------------------------------------------------------------------------------------------
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
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
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


# ---------------------------------------------------------------------------------------------
# the four experiments
# ---------------------------------------------------------------------------------------------
@dataclass
class Options:
    """Sweep options shared by the experiments."""

    out: str = "results"
    quick: bool = False
    seeds: int | None = None
    force: bool = False
    target_fraction: float = 0.95
    progress: bool | None = True
    executor: Executor = field(default_factory=Executor)
    """Where the sweeps' runs are computed (:class:`cvfl_sim.sweep.Executor`)."""
    known: dict[RunSpec, RunResult] = field(default_factory=dict)
    """The finished runs: :func:`run_experiments` adds the runs it computes or loads (those
    already here are reused as they are, even with ``force``); the experiments read theirs here."""

    def n_seeds(self) -> int:
        """Seeds per cell: 5 (the paper), 2 with ``quick``, or as given."""
        return self.seeds if self.seeds is not None else (2 if self.quick else 5)

    def epochs(self, dataset: str) -> int:
        """Epochs of a data set in this mode."""
        st = SETTINGS[dataset]
        return int(st["quick_epochs"] if self.quick else st["epochs"])


def _folder(opt: Options, name: str) -> str:
    f = os.path.join(opt.out, name)
    os.makedirs(f, exist_ok=True)
    return f


def _target(
    results: dict[RunSpec, RunResult], ref: Callable[[RunSpec], bool], fraction: float
) -> float:
    maxes = [r.max_metric() for s, r in results.items() if ref(s)]
    return round(fraction * float(np.mean(maxes)), 4)


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


def _runs(opt: Options, specs: Sequence[RunSpec]) -> dict[RunSpec, RunResult]:
    """The finished runs of ``specs``, computed by :func:`run_experiments` (in ``opt.known``)."""
    return {spec: opt.known[spec] for spec in specs}


def _compressor_specs(opt: Options, ds: str, ef: bool = False) -> list[RunSpec]:
    """The uncompressed baseline and every compressor at every bit width on ``ds``.

    With ``ef``, also every compressor at ``b = 2`` with error feedback.
    """
    st = SETTINGS[ds]
    seeds = range(opt.n_seeds())
    specs = [RunSpec(ds, "none", 32, st["Q"], s, opt.epochs(ds)) for s in seeds]
    specs += [
        RunSpec(ds, k, b, st["Q"], s, opt.epochs(ds))
        for k in COMPRESSORS
        for b in BITS
        for s in seeds
    ]
    if ef:
        specs += [
            RunSpec(ds, k + EF_SUFFIX, 2, st["Q"], s, opt.epochs(ds))
            for k in COMPRESSORS
            for s in seeds
        ]
    return specs


COMPRESSOR_DATASETS = ("digits-quadrants", "breast-cancer", "digits-views-4")
"""Data sets of the ``compressors`` experiment (error feedback also runs on the first)."""


def exp_compressors(opt: Options) -> dict[str, Any]:
    """Tables 2–4: compressors × bits on every data set, plus the headline claim.

    The claim is checked on ``digits-quadrants``, where the ``b = 2`` compressors also run with
    error feedback.
    """
    folder = _folder(opt, "compressors")
    all_rows: list[dict[str, Any]] = []
    headline: dict[str, Any] = {}
    for ds in COMPRESSOR_DATASETS:
        res = _runs(opt, _compressor_specs(opt, ds, ef=ds == "digits-quadrants"))
        target = _target(res, lambda s: s.bits == 32, opt.target_fraction)
        rows = aggregate(res, target)
        all_rows += rows
        groups: dict[str, list[RunResult]] = {}
        for s, r in res.items():
            label = "b=32" if s.bits == 32 else f"{s.compressor} b={s.bits}"
            groups.setdefault(label, []).append(r)
        _plot(groups, os.path.join(folder, f"{ds}.png"), f"{ds}: metric vs bits")
        if ds == "digits-quadrants":
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


def _table_and_curves(
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
    _plot(groups, os.path.join(folder, png), title, xkeys=xkeys)
    return {"rows": rows, "folder": folder}


LOCAL_STEPS = (1, 10, 25)
"""``Q`` of the ``local-steps`` experiment (on breast-cancer, lattice ``b = 3``)."""


def _local_steps_specs(opt: Options) -> list[RunSpec]:
    ds = "breast-cancer"
    return [
        RunSpec(ds, "lattice", 3, Q, s, opt.epochs(ds), eval_every=1)
        for Q in LOCAL_STEPS
        for s in range(opt.n_seeds())
    ]


def exp_local_steps(opt: Options) -> dict[str, Any]:
    """Table 5: time to target for Q = 1, 10, 25 under the C7 time model (lattice, b = 3)."""
    folder = _folder(opt, "local-steps")
    Qs = LOCAL_STEPS
    res = _runs(opt, _local_steps_specs(opt))
    best = max(Qs, key=lambda Q: np.mean([r.max_metric() for s, r in res.items() if s.Q == Q]))
    target = _target(res, lambda s: s.Q == best, opt.target_fraction)
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
        row["rounds_mean"], row["rounds_std"] = _mean_std(rounds)
        for name, lat in LATENCIES.items():
            times = [time_to_target(x, Q, lat, T_COMPUTE) for x in rounds]
            m, s = _mean_std(times)
            row[f"time_{name}_{int(lat * 1000)}ms"] = m
            row[f"time_{name}_std"] = s
        rows.append(row)
    groups = {f"Q={Q}": [r for s, r in res.items() if s.Q == Q] for Q in Qs}
    return _table_and_curves(
        rows,
        folder,
        None,
        groups,
        "f1_vs_round.png",
        "breast-cancer, lattice b=3",
        ("round", "bits"),
    )


PARTIES_DATASETS = ("digits-views-4", "digits-views-12")
"""Data sets of the ``parties`` experiment (4 and 12 parties)."""


def _parties_specs(opt: Options, ds: str) -> list[RunSpec]:
    return [
        RunSpec(ds, "lattice", b, SETTINGS[ds]["Q"], s, opt.epochs(ds))
        for b in (*BITS, 32)
        for s in range(opt.n_seeds())
    ]


def exp_parties(opt: Options) -> dict[str, Any]:
    """Figure 4: 4 vs 12 parties on digits-views, lattice quantization at b = 2, 3, 4, 32."""
    folder = _folder(opt, "parties")
    rows = []
    groups: dict[str, list[RunResult]] = {}
    for ds in PARTIES_DATASETS:
        res = _runs(opt, _parties_specs(opt, ds))
        target = _target(res, lambda s: s.bits == 32, opt.target_fraction)
        rows += aggregate(res, target)
        for s, r in res.items():
            groups.setdefault(f"M={ds.rsplit('-', 1)[1]} b={s.bits}", []).append(r)
    return _table_and_curves(
        rows,
        folder,
        TABLE_COLUMNS,
        groups,
        "parties.png",
        "digits-views: 4 vs 12 parties (lattice)",
    )


def exp_curves(opt: Options) -> dict[str, Any]:
    """Figure 3: metric vs epochs and vs bits, mean ± std bands, on digits-quadrants."""
    ds = "digits-quadrants"
    folder = _folder(opt, "curves")
    res = _runs(opt, _compressor_specs(opt, ds))
    curve_rows = []
    for kind in COMPRESSORS:
        groups: dict[str, list[RunResult]] = {}
        for s, r in res.items():
            if s.bits == 32 or s.compressor == kind:
                groups.setdefault("b=32" if s.bits == 32 else f"{kind} b={s.bits}", []).append(r)
        _plot(groups, os.path.join(folder, f"{kind}.png"), f"{ds}: {kind}", xkeys=("epoch", "bits"))
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


def exp_bounds(opt: Options) -> dict[str, Any]:
    """Theorems 4.2/4.4 term by term on 20 runs (one seed), three forms of term 3.

    See :mod:`cvfl_sim.theorem_runs`; ``seeds`` and ``target_fraction`` do not apply.
    """
    from .theorem_runs import run_theorem_experiment

    # progress lines only when asked for: None (a bar's choice, by terminal) prints none
    progress = bool(opt.progress)
    return run_theorem_experiment(opt.out, quick=opt.quick, force=opt.force, progress=progress)


def exp_schedules(opt: Options) -> dict[str, Any]:
    """The C4.3 rate and the C4.4 conditions checked empirically (:mod:`cvfl_sim.schedule_check`)."""
    from .schedule_check import run_schedule_experiment

    progress = bool(opt.progress)  # as in exp_bounds
    return run_schedule_experiment(opt.out, quick=opt.quick, progress=progress, seeds=opt.seeds)


SWEEPS: dict[str, Callable[[Options], list[RunSpec]]] = {
    "compressors": lambda opt: [
        s
        for ds in COMPRESSOR_DATASETS
        for s in _compressor_specs(opt, ds, ef=ds == "digits-quadrants")
    ],
    "local-steps": _local_steps_specs,
    "parties": lambda opt: [s for ds in PARTIES_DATASETS for s in _parties_specs(opt, ds)],
    "curves": lambda opt: _compressor_specs(opt, "digits-quadrants"),
}
"""The training runs of each experiment made of :class:`RunSpec` sweeps."""


def sweep_specs(name: str, opt: Options) -> list[RunSpec]:
    """Every :class:`RunSpec` that experiment ``name`` trains with ``opt``.

    ``[]`` for ``bounds`` and ``schedules``, which run their own studies. A command lists the runs
    of all its experiments up front and computes them as one sweep (one progress bar, every
    worker busy); the experiments then find them in :attr:`Options.known`.
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")
    return SWEEPS[name](opt) if name in SWEEPS else []


EXPERIMENTS: dict[str, Callable[[Options], dict[str, Any]]] = {
    "compressors": exp_compressors,
    "local-steps": exp_local_steps,
    "parties": exp_parties,
    "curves": exp_curves,
    "bounds": exp_bounds,
    "schedules": exp_schedules,
}


def run_experiments(
    names: Sequence[str], *, bar: Any = None, **options: Any
) -> Iterator[tuple[str, Callable[[], dict[str, Any]]]]:
    """The experiments ``names`` with :class:`Options` keyword arguments, their runs as one sweep.

    The first step lists the training runs of every experiment (:func:`sweep_specs`) and
    computes or loads them with *one* :func:`run_sweep`, so every worker of ``executor`` stays
    busy across experiments and data sets, and one progress bar (``bar``, shared with the caller,
    or the options' ``progress``) covers them. Then it yields ``(name, build)`` per experiment:
    ``build()`` writes its tables and plots from those runs and returns its result (a caller
    announces and times each one).
    """
    for name in names:
        if name not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")
    opt = Options(**options)
    specs = [spec for name in names for spec in sweep_specs(name, opt)]
    opt.known.update(
        run_sweep(
            specs,
            opt.out,
            opt.force,
            opt.progress,
            executor=opt.executor,
            known=opt.known,
            bar=bar,
        )
    )
    for name in names:
        yield name, partial(EXPERIMENTS[name], opt)


def run_experiment(name: str, **options: Any) -> dict[str, Any]:
    """Run one experiment by name with :class:`Options` keyword arguments.

    Its training runs are computed first as one sweep (:func:`run_experiments`).
    """
    ((_, build),) = run_experiments([name], **options)
    return build()
