r"""Theorems 4.2/4.4 term by term on real runs, in three forms (THEORY C4.1, C4.2, C4.5, C9).

Each run of :data:`PLANS` trains with a :class:`~cvfl_sim.bounds.lemma1.Lemma1Probe` on every round
(local steps ``0`` and ``Q - 1``) and evaluates Theorem 4.2 (constant step; against the average
observed :math:`\|\nabla F\|^2`) or Theorem 4.4 (diminishing step; against the smallest) with
:func:`cvfl_sim.bounds.theorems.bound_vs_observed` in three forms of term 3:

``recovered``
    Lemma 1's right side :math:`H_m^2 G_m^2 \sum_{j\ne m}E_j^{t_0}` (chain reading, operator
    norms; realised errors). For the **analytic** model (linear parties, linear head) the
    constants are the proved bounds of :mod:`cvfl_sim.bounds.analytic_constants` over every point the
    run visits; for the **MLP** they are estimated (:func:`cvfl_sim.bounds.theorems.estimate_constants`,
    maxima at the initial and final points) and raised to the probe's maxima.
``tight (C4.5, ours)``
    The tight bound of :mod:`cvfl_sim.bounds.tight_term` at each round start (not the paper's).
``measured Lemma 1``
    The probe's exact left side :math:`\|\nabla_m F_B(\Phi_m^t) - \nabla_m F_B(\hat\Phi_m^t)\|^2`
    (mean over the probed steps of a round).

Every form is shown beside the observed :math:`\|\nabla F(\Theta^{t_0})\|^2`, with its
three terms and the share of term 3. :func:`run_theorem_experiment` writes ``table.csv``,
``table.md`` and ``bounds.png``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cvfl_theory._atomic import atomic_write_text

from ..vfl.data import load_dataset
from .specs import Options, RunSpec

__all__ = [
    "RunPlan",
    "PLANS",
    "QUICK_PLANS",
    "theorem_run",
    "run_theorem_experiment",
    "COLUMNS",
    "specs",
    "run",
]

FORMS = ("recovered", "tight (C4.5, ours)", "measured Lemma 1")
SHORT = {"recovered": "rec", "tight (C4.5, ours)": "tight", "measured Lemma 1": "meas"}
BATCH = {"breast-cancer": 57, "digits-quadrants": 64}
LR = 0.02
EMBEDDING = 4


@dataclass(frozen=True)
class RunPlan:
    """One run of the theorem table."""

    dataset: str
    model: str  # "linear" (analytic constants) or "mlp" (estimated constants)
    compressor: str  # "none", "scalar", "lattice", "topk"
    bits: int
    Q: int
    epochs: int = 1
    step: str = "constant"  # "constant" (Theorem 4.2) or "diminishing" (Theorem 4.4)

    def key(self) -> str:
        """File-name stem."""
        tail = "" if self.step == "constant" else f"_{self.step}"
        return (
            f"{self.dataset}_{self.model}_{self.compressor}-b{self.bits}_Q{self.Q}_e{self.epochs}"
            + tail
        )


def _plans() -> list[RunPlan]:
    """16 constant-step runs, then 4 diminishing-step runs.

    Each data set and model sees every compressor and every Q once; the bits rotate.
    """
    comps = ("none", "scalar", "lattice", "topk")
    Qs = (1, 5, 10, 25)
    out = []
    for k, (ds, model) in enumerate(
        [
            ("breast-cancer", "linear"),
            ("breast-cancer", "mlp"),
            ("digits-quadrants", "linear"),
            ("digits-quadrants", "mlp"),
        ]
    ):
        for j, comp in enumerate(comps):
            bits = 32 if comp == "none" else (2, 3, 4)[(j + k) % 3]
            out.append(
                RunPlan(ds, model, comp, bits, Qs[(j + k) % 4], 2 if ds == "breast-cancer" else 1)
            )
    out += [
        RunPlan("breast-cancer", "linear", "scalar", 2, 1, 2, "diminishing"),
        RunPlan("breast-cancer", "mlp", "topk", 3, 5, 2, "diminishing"),
        RunPlan("digits-quadrants", "linear", "lattice", 3, 10, 1, "diminishing"),
        RunPlan("digits-quadrants", "mlp", "scalar", 4, 1, 1, "diminishing"),
    ]
    return out


PLANS: tuple[RunPlan, ...] = tuple(_plans())
"""The full table: 2 data sets × 2 models × 4 compressors, Q in {1, 5, 10, 25}, b in {2, 3, 4},
with the constant step :data:`LR` (Theorem 4.2); and 4 runs with the diminishing step
:func:`diminishing_step` (Theorem 4.4)."""


def diminishing_step(t: int) -> float:
    r""":math:`\eta^{t_0} = 0.05\,(t_0 + 1)^{-3/4}`: :math:`\sum\eta = \infty`, :math:`\sum\eta^2 < \infty` (C4.4)."""
    return 0.05 / (t + 1) ** 0.75


QUICK_PLANS: tuple[RunPlan, ...] = (
    RunPlan("breast-cancer", "linear", "scalar", 2, 5),
    RunPlan("breast-cancer", "linear", "topk", 3, 1),
    RunPlan("breast-cancer", "mlp", "lattice", 3, 10),
    RunPlan("breast-cancer", "mlp", "none", 32, 1),
)
"""``--quick``: four one-epoch runs on breast-cancer (both models, all compressor kinds but one)."""


def _analytic_as_constants(c: Any) -> Any:
    """A :class:`cvfl_sim.bounds.theorems.Constants` holding the analytic (proved) constants."""
    from ..bounds.theorems import Constants

    nan = tuple(math.nan for _ in c.G)
    return Constants(
        L=c.L,
        L_m=c.L_m,
        sigma2=c.sigma2,
        H=c.H,
        G=c.G,
        H_frob=nan,
        G_frob=nan,
        H_theta=nan,
        B=c.B,
        points=c.points,
        batches=0,
    )


def theorem_run(plan: RunPlan, seed: int = 0) -> dict[str, Any]:
    r"""Train one plan with a Lemma-1 probe and return its table row (all three forms).

    The row holds the run's settings, the observed average :math:`\|\nabla F\|^2`, terms 1 and 2,
    and for every form term 3, the total, the share of term 3 and total / observed; plus the
    Lemma-1 probe's smallest right / left ratio and, for the analytic model, whether every
    proved constant is at least the probe's value at every probed point.
    """
    from ..bounds.analytic_constants import analytic_constants, train_recorded
    from ..bounds.lemma1 import Lemma1Probe
    from ..bounds.theorems import bound_vs_observed, estimate_constants
    from ..vfl.compressors import make_compressor
    from ..vfl.config import CVFLConfig
    from ..vfl.train import train

    ds = load_dataset(plan.dataset)
    B = BATCH[plan.dataset]
    if plan.step not in ("constant", "diminishing"):
        raise ValueError(f"step must be 'constant' or 'diminishing', got {plan.step!r}")
    cfg = CVFLConfig(
        Q=plan.Q,
        lr=LR if plan.step == "constant" else diminishing_step,
        epochs=plan.epochs,
        batch_size=B,
        parties_model=plan.model,
        embedding_size=EMBEDDING,
        compressor=make_compressor(plan.compressor, plan.bits),
        eval_every=1,
        track_grad_norm=True,
        seed=seed,
    )
    probe = Lemma1Probe(every=1, steps="ends")
    tick = time.perf_counter()
    consistent: bool | None = None
    if plan.model == "linear":
        res, traj = train_recorded(ds, cfg, probe=probe)
        ac = analytic_constants(ds, traj, B)
        consts = _analytic_as_constants(ac)
        source = "analytic (proved bounds over the run)"
    else:
        res = train(ds, cfg, probe=probe)
        consts = estimate_constants(ds, cfg, res, batches=2, seed=seed)
        source = "estimated (max over points)"
    rep = probe.report()
    if plan.model == "linear":
        consistent = bool(
            np.all(np.asarray(consts.H) >= rep.H) and np.all(np.asarray(consts.G) >= rep.G)
        )
    check = bound_vs_observed(res, consts, lemma1=rep)
    R = len(res.rounds["lr"])
    rec = check.forms["recovered"]
    row: dict[str, Any] = {
        "dataset": plan.dataset,
        "model": plan.model,
        "constants": source,
        "compressor": plan.compressor,
        "bits": plan.bits,
        "Q": plan.Q,
        "B": B,
        "R": R,
        "T": R * plan.Q,
        "theorem": check.theorem,
        "eta": LR if plan.step == "constant" else "0.05/(t0+1)^0.75",
        "step_ok": rec.step_ok,
        "L": consts.L,
        "observed": check.observed,
        "term1": rec.optimization,
        "term2": rec.variance,
    }
    for form in FORMS:
        s = SHORT[form]
        t = check.forms.get(form)
        if t is None:
            row.update(
                {
                    f"term3_{s}": math.nan,
                    f"total_{s}": math.nan,
                    f"share3_{s}": math.nan,
                    f"ratio_{s}": math.nan,
                }
            )
            continue
        row[f"term3_{s}"] = t.compression
        row[f"total_{s}"] = t.total
        row[f"share3_{s}"] = t.compression / t.total if t.total > 0 else 0.0
        row[f"ratio_{s}"] = check.ratios[form]
    from ..bounds.lemma1 import finite_stats

    tight, tight_sums = rep.tight_ratios(), rep.tight_sum_ratios()
    row["lemma1_min_ratio"] = finite_stats(rep.ratios("realised"))[0]
    row["tight_min_ratio"] = finite_stats(tight)[0] if tight is not None else math.nan
    row["tight_sum_ratio"] = finite_stats(tight_sums)[0] if tight_sums is not None else math.nan
    row["analytic_ge_probe"] = consistent
    row["seconds"] = time.perf_counter() - tick
    return row


COLUMNS = [
    "dataset",
    "model",
    "compressor",
    "bits",
    "Q",
    "R",
    "T",
    "theorem",
    "eta",
    "step_ok",
    "L",
    "observed",
    "term1",
    "term2",
    "term3_rec",
    "share3_rec",
    "total_rec",
    "ratio_rec",
    "term3_tight",
    "share3_tight",
    "total_tight",
    "ratio_tight",
    "term3_meas",
    "share3_meas",
    "total_meas",
    "ratio_meas",
    "lemma1_min_ratio",
    "tight_min_ratio",
    "tight_sum_ratio",
    "analytic_ge_probe",
]


def _plot(rows: Sequence[dict[str, Any]], path: str) -> None:
    from matplotlib.figure import Figure

    labels = [
        f"{r['dataset'][:6]} {r['model']} {r['compressor']}"
        + ("" if r["compressor"] == "none" else f"{r['bits']}")
        + f" Q{r['Q']}"
        + (" (4.4)" if r.get("theorem") == "4.4" else "")
        for r in rows
    ]
    x = np.arange(len(rows))
    fig = Figure(figsize=(max(8, 0.6 * len(rows) + 3), 7))  # no pyplot: no backend switch
    axes = fig.subplots(2, 1, sharex=True)
    ax = axes[0]
    ax.plot(
        x,
        [r["observed"] for r in rows],
        "k_",
        ms=16,
        mew=2,
        label="observed ||grad F||^2 (avg; min for 4.4)",
    )
    for form, marker in zip(FORMS, ("o", "s", "^")):
        s = SHORT[form]
        ax.plot(x, [r[f"total_{s}"] for r in rows], marker, ls="", label=f"bound: {form}")
    ax.set_yscale("log")
    ax.set_ylabel("bounds (markers), observed (dash)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax = axes[1]
    width = 0.27
    for k, form in enumerate(FORMS):
        s = SHORT[form]
        ax.bar(x + (k - 1) * width, [r[f"share3_{s}"] for r in rows], width, label=form)
    ax.set_ylabel("share of term 3 (compression)")
    ax.set_xticks(x, labels, rotation=70, fontsize=7)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.suptitle("Theorem 4.2 term by term: recovered, tight (ours) and measured Lemma-1 forms")
    fig.tight_layout()
    from .plotting import save_figure

    save_figure(fig, path)


def run_theorem_experiment(
    out: str, *, quick: bool = False, force: bool = False, progress: bool = True
) -> dict[str, Any]:
    """Run (or load) every plan, write ``<out>/bounds/table.{csv,md}`` and ``bounds.png``.

    Each finished run's row is kept in ``<out>/bounds/runs/<key>.json`` and reused unless
    ``force``.
    """
    import sys

    from .tables import write_table

    folder = os.path.join(os.fspath(out), "bounds")
    runs = os.path.join(folder, "runs")
    os.makedirs(runs, exist_ok=True)
    plans = QUICK_PLANS if quick else PLANS
    rows = []
    for k, plan in enumerate(plans, start=1):
        path = os.path.join(runs, plan.key() + ".json")
        if os.path.exists(path) and not force:
            with open(path, encoding="utf-8") as fh:
                row = json.load(fh)
            status = "cached"
        else:
            row = theorem_run(plan)
            atomic_write_text(path, json.dumps(row, indent=1, default=str))
            status = f"{row['seconds']:.1f}s"
        rows.append(row)
        if progress:
            print(
                f"[{k}/{len(plans)}] {plan.key():<48} bound/observed rec {row['ratio_rec']:.3g} "
                f"tight {row['ratio_tight']:.3g} meas {row['ratio_meas']:.3g}  {status}",
                file=sys.stderr,
                flush=True,
            )
    write_table(rows, folder, "table", COLUMNS)
    _plot(rows, os.path.join(folder, "bounds.png"))
    return {"rows": rows, "folder": folder, "plans": [dataclasses.asdict(p) for p in plans]}


def specs(opt: Options) -> list[RunSpec]:
    """No sweep: the experiment trains its own probed runs (:data:`PLANS`)."""
    return []


def run(opt: Options) -> dict[str, Any]:
    """Theorems 4.2/4.4 term by term on 20 runs (one seed), three forms of term 3.

    ``seeds`` and ``target_fraction`` do not apply.
    """
    # progress lines only when asked for: None (a bar's choice, by terminal) prints none
    progress = bool(opt.progress)
    return run_theorem_experiment(opt.out, quick=opt.quick, force=opt.force, progress=progress)
