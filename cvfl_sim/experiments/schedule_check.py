r"""The schedules of C4.3/C4.4 checked empirically: the :math:`O(1/\sqrt T)` rate and its conditions.

Three experiments, each a plain function usable from Jupyter (results render as tables):

:func:`rate_experiment` (C4.3 and the C5 table)
    For each ``T`` of a grid spanning at least 1.5 decades and several seeds, one run of ``T``
    local iterations with :math:`\eta = c_\eta/\sqrt T` and each round's compressor parameter from
    the C5 table (:func:`cvfl_theory.bounds.c5_parameters`: scalar bits ``q_min(T)`` -- the
    fewest bits whose exact per-round error is :math:`\le c/\sqrt T`, so
    :math:`\sum_{t_0}\sum_m E_m^{t_0} = O(\sqrt T)` -- or the table's literal ``q(T)``). The
    measured quantity is the C4.2 left side, the average of the full-data
    :math:`\|\nabla F(\Theta^{t_0})\|^2` over every round start (the simulator's
    ``grad_norm_sq`` with ``eval_every=1``). :func:`fit_loglog_slope` fits
    :math:`\log y = a + s\log T` by ordinary least squares with a Student-t interval on ``s``,
    to compare with :math:`-1/2`.
:func:`floor_experiment` (C4.4)
    One long run per arm with the same diminishing step :math:`\eta^{t_0} = \eta_0 (t_0+1)^{-p}`
    (:math:`1/2 < p \le 1`: :math:`\sum\eta = \infty`, :math:`\sum\eta^2 < \infty`):
    *summable* -- bits from :func:`cvfl_theory.bounds.bits_schedule` keep :math:`\eta^{t_0}
    E^{t_0}` under a summable envelope (Theorem 4.4's condition); *fixed* -- a fixed coarse
    quantizer (1 bit on a fixed range), so :math:`\sum\eta^{t_0} E = \infty`. The
    :math:`\|\nabla F\|^2` curve is summarised by window means over log-spaced windows and the
    log-log slope over the later windows.

Runs use the analytic model (linear parties, linear head; :mod:`cvfl_sim.bounds.analytic_constants`)
where ``T = 2000`` costs a few seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from cvfl_theory.table import Table

from ..vfl.compressors import make_compressor
from ..vfl.data import VerticalDataset, load_dataset
from .specs import Options, RunSpec

if TYPE_CHECKING:
    from ..vfl.config import CVFLConfig

__all__ = [
    "SlopeFit",
    "fit_loglog_slope",
    "RateResult",
    "rate_experiment",
    "FloorResult",
    "floor_experiment",
    "FLOOR_ARMS",
    "run_schedule_experiment",
    "DEFAULT_TS",
    "specs",
    "run",
]

DEFAULT_TS = (48, 96, 200, 496, 1000, 2000)
"""T grid (1.6 decades); multiples of 8 rounds, one epoch of breast-cancer at ``B = 57``."""


# ---------------------------------------------------------------------------------------------
# the slope fit
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SlopeFit:
    r"""Ordinary least squares of :math:`\log y` on :math:`\log T` with a t-interval on the slope.

    Attributes
    ----------
    slope, intercept : float
        :math:`s` and :math:`a` of :math:`\log y = a + s \log T` (natural logarithms).
    se : float
        Standard error of ``slope``.
    low, high : float
        The ``level`` confidence interval :math:`s \pm t_{n-2} \,\mathrm{se}`.
    n : int
        Number of points (seeds × T values).
    level : float
        Confidence level.
    """

    slope: float
    intercept: float
    se: float
    low: float
    high: float
    n: int
    level: float

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the confidence interval."""
        return bool(self.low <= value <= self.high)

    def __str__(self) -> str:
        return (
            f"slope {self.slope:.4f} (se {self.se:.4f}), {100 * self.level:g}% CI "
            f"[{self.low:.4f}, {self.high:.4f}], n = {self.n}"
        )


def fit_loglog_slope(T: Sequence[float], y: Sequence[float], level: float = 0.95) -> SlopeFit:
    r"""Fit :math:`\log y = a + s \log T` by OLS; t-interval on :math:`s` with ``n - 2`` d.o.f.

    Every ``(T, y)`` pair is one point (give each seed's value as its own point: the residual
    spread then includes the seed-to-seed variation).

    Parameters
    ----------
    T, y : sequence of float
        Positive values, same length ``n >= 3``, at least two distinct ``T``.
    level : float
        Confidence level in ``(0, 1)``.

    Returns
    -------
    SlopeFit

    Examples
    --------
    >>> f = fit_loglog_slope([1, 10, 100, 1000], [1.0, 0.1, 0.01, 0.001])
    >>> round(f.slope, 12), round(f.se, 12)
    (-1.0, 0.0)
    """
    from scipy.special import stdtrit  # Student t quantile; scipy.stats costs ~1 s to import

    x = np.asarray(T, dtype=np.float64)
    v = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or x.shape != v.shape or x.size < 3:
        raise ValueError(f"T and y must be 1-D of the same length >= 3, got {x.shape}, {v.shape}")
    if not (np.all(np.isfinite(x)) and np.all(x > 0) and np.all(np.isfinite(v)) and np.all(v > 0)):
        raise ValueError("T and y must be finite and > 0 (a log-log fit)")
    if np.unique(x).size < 2:
        raise ValueError("T must take at least two distinct values")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    lx, ly = np.log(x), np.log(v)
    xm = lx.mean()
    sxx = float(np.sum((lx - xm) ** 2))
    slope = float(np.sum((lx - xm) * (ly - ly.mean())) / sxx)
    intercept = float(ly.mean() - slope * xm)
    resid = ly - intercept - slope * lx
    n = x.size
    s2 = float(np.sum(resid**2)) / (n - 2)
    se = math.sqrt(s2 / sxx)
    q = float(stdtrit(n - 2, 0.5 + level / 2.0))
    return SlopeFit(slope, intercept, se, slope - q * se, slope + q * se, n, float(level))


# ---------------------------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------------------------
def _config(**kw: Any) -> CVFLConfig:
    base: dict[str, Any] = {
        "parties_model": "linear",
        "server_model": "linear",
        "track_grad_norm": True,
        "eval_every": 1,
    }
    base.update(kw)
    from ..vfl.config import CVFLConfig

    return CVFLConfig(**base)


def _epochs_for(T: int, Q: int, rounds_per_epoch: int) -> int:
    R, rem = divmod(T, Q)
    e, rem2 = divmod(R, rounds_per_epoch)
    if rem or rem2 or e < 1:
        raise ValueError(
            f"T={T} must be a multiple of Q * rounds per epoch = {Q * rounds_per_epoch}"
        )
    return e


@dataclass
class RateResult:
    """Rows of :func:`rate_experiment` (one per run) and the slope fit against -1/2."""

    rows: list[dict[str, Any]]
    fit: SlopeFit
    target: float = -0.5
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> bool:
        """Whether the slope's confidence interval contains the target -1/2."""
        return self.fit.contains(self.target)

    def table(self) -> Table:
        """One row per (T, seed)."""
        cols = ["T", "seed", "eta", "bits", "avg_grad_norm_sq", "final_grad_norm_sq", "mean_E"]
        return Table(
            cols,
            [[r[c] for c in cols] for r in self.rows],
            title=f"C4.3 rate check: {self.fit}; -1/2 in CI: {self.verdict}",
        )

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())


def rate_experiment(
    dataset: VerticalDataset | str = "breast-cancer",
    Ts: Sequence[int] = DEFAULT_TS,
    seeds: Sequence[int] = (0, 1, 2, 3),
    *,
    batch_size: int = 57,
    embedding_size: int = 4,
    Q: int = 1,
    eta_scale: float = 1.0,
    bits_rule: str = "q_min",
    c: float = 1.0,
    level: float = 0.95,
    progress: Callable[[str], None] | None = None,
) -> RateResult:
    r"""Average :math:`\|\nabla F\|^2` against ``T`` with the C4.3 schedule; log-log slope fit.

    Each run: ``T`` local iterations (``T / (Q · rounds per epoch)`` epochs), step
    :math:`\eta = c_\eta/\sqrt T` (``eta_scale`` is :math:`c_\eta`), a dithered scalar quantizer
    with min-max range and ``bits_rule`` bits from :func:`cvfl_theory.bounds.c5_parameters`
    (``span=1``, constant ``c``: the range's true width only rescales the constant). Returns the
    per-run rows and :func:`fit_loglog_slope` over all ``(T, seed)`` points.
    """
    from cvfl_theory.bounds import c5_parameters

    from ..vfl.train import train

    ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
    if bits_rule not in ("q_min", "q"):
        raise ValueError(f"bits_rule must be 'q_min' or 'q', got {bits_rule!r}")
    rpe = math.ceil(ds.n_train / batch_size)
    rows = []
    for T in Ts:
        epochs = _epochs_for(int(T), Q, rpe)
        par = c5_parameters(int(T), batch_size, embedding_size, c=c)
        bits = min(16, par.q_min if bits_rule == "q_min" else par.q)
        eta = eta_scale / math.sqrt(T)
        for seed in seeds:
            cfg = _config(
                Q=Q,
                lr=eta,
                epochs=epochs,
                batch_size=batch_size,
                embedding_size=embedding_size,
                compressor=make_compressor("scalar", int(bits)),
                seed=int(seed),
            )
            res = train(ds, cfg)
            R = len(res.rounds["lr"])
            g = [float(h["grad_norm_sq"]) for h in res.history if int(h["round"]) < R]
            rows.append(
                {
                    "T": int(T),
                    "seed": int(seed),
                    "eta": eta,
                    "bits": int(bits),
                    "avg_grad_norm_sq": float(np.mean(g)),
                    "final_grad_norm_sq": float(res.history[-1]["grad_norm_sq"]),
                    "mean_E": float(np.mean(res.rounds["embedding_error"])),
                }
            )
            if progress is not None:
                progress(
                    f"rate T={T} seed={seed}: avg ||grad F||^2 {rows[-1]['avg_grad_norm_sq']:.4g}"
                )
    fit = fit_loglog_slope([r["T"] for r in rows], [r["avg_grad_norm_sq"] for r in rows], level)
    settings = {
        "dataset": ds.name,
        "batch_size": batch_size,
        "embedding_size": embedding_size,
        "Q": Q,
        "eta": f"{eta_scale}/sqrt(T)",
        "bits_rule": bits_rule,
        "c": c,
    }
    return RateResult(rows, fit, settings=settings)


@dataclass
class FloorResult:
    r"""The arms of :func:`floor_experiment`: window means and late slopes of :math:`\|\nabla F\|^2`.

    Attributes
    ----------
    windows : list of tuple of int
        Round windows ``[lo, hi)``, log-spaced.
    curves : dict
        Arm name -> list of window means of :math:`\|\nabla F(\Theta^{t_0})\|^2` (mean over seeds).
    late_fits : dict
        Arm name -> :class:`SlopeFit` of the window means over the later windows (all seeds).
    sum_eta_E : dict
        Arm name -> :math:`\sum_{t_0} \eta^{t_0} \sum_m E_m^{t_0}` realised (mean over seeds).
    bits : dict
        Arm name -> bits of the first and last round.
    """

    windows: list[tuple[int, int]]
    curves: dict[str, list[float]]
    late_fits: dict[str, SlopeFit]
    sum_eta_E: dict[str, float]
    bits: dict[str, tuple[int, int]]
    settings: dict[str, Any] = field(default_factory=dict)

    def decreases(self, arm: str) -> bool:
        """The arm's late log-log slope is negative with confidence (CI entirely below 0)."""
        return self.late_fits[arm].high < 0

    def table(self) -> Table:
        """Window means per arm."""
        arms = list(self.curves)
        rows = [
            [f"[{lo}, {hi})", *(self.curves[a][k] for a in arms)]
            for k, (lo, hi) in enumerate(self.windows)
        ]
        rows.append(["late slope", *(round(self.late_fits[a].slope, 4) for a in arms)])
        rows.append(["late CI high", *(round(self.late_fits[a].high, 4) for a in arms)])
        rows.append(["sum eta E", *(self.sum_eta_E[a] for a in arms)])
        return Table(["rounds", *arms], rows, title="C4.4: mean ||grad F||^2 per window")

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())


FLOOR_ARMS = ("summable", "fixed-rounding", "fixed-dithered")
r"""Arms of :func:`floor_experiment`: bits schedule with summable :math:`\eta E`; a fixed 1-bit
quantizer on a fixed range with deterministic rounding (biased); the same with dither (unbiased)."""


def floor_experiment(
    dataset: VerticalDataset | str = "breast-cancer",
    T: int = 2000,
    seeds: Sequence[int] = (0,),
    *,
    arms: Sequence[str] = FLOOR_ARMS,
    batch_size: int = 57,
    embedding_size: int = 4,
    eta0: float = 0.5,
    power: float = 0.75,
    fixed_bits: int = 1,
    fixed_range: float = 4.0,
    envelope_c: float = 1e-3,
    envelope_power: float = 2.0,
    windows: int = 10,
    late: int = 5,
    level: float = 0.95,
) -> FloorResult:
    r"""Diminishing step, summable :math:`\eta E` versus fixed coarse quantizers (C4.4).

    Every arm uses :math:`\eta^{t_0} = \eta_0 (t_0 + 1)^{-p}` (``Q = 1``, uncompressed server
    model). ``"summable"``: per-round bits from :func:`cvfl_theory.bounds.bits_schedule`
    (envelope :math:`c (t_0+1)^{-2}`, error per unit span) -- Theorem 4.4's condition;
    ``"fixed-rounding"``: ``fixed_bits`` bits on the fixed range ``[-r, r]`` with deterministic
    rounding (biased), so :math:`\sum\eta^{t_0}E = \infty`; ``"fixed-dithered"``: the same with
    subtractive dither (unbiased, same divergent sum). The late slopes are fitted to the window
    means of the last ``late`` log-spaced windows (one point per window and seed).
    """
    from cvfl_theory.bounds import bits_schedule, step_sizes

    from ..vfl.schedules import CompressionSchedule
    from ..vfl.train import train

    unknown = set(arms) - set(FLOOR_ARMS)
    if unknown or not arms:
        raise ValueError(f"arms must be a non-empty subset of {FLOOR_ARMS}, got {list(arms)}")
    ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
    rpe = math.ceil(ds.n_train / batch_size)
    epochs = _epochs_for(int(T), 1, rpe)
    R = int(T)
    etas = step_sizes(R, eta0, power)

    def lr(t: int) -> float:
        return float(etas[min(int(t), R - 1)])

    sched = bits_schedule(
        etas,
        compressor="scalar",
        B=batch_size,
        P=embedding_size,
        c=envelope_c,
        power=envelope_power,
    )
    fixed = (-float(fixed_range), float(fixed_range))
    from cvfl_theory.compressors import ScalarQuantizer

    make: dict[str, Any] = {
        "summable": lambda: CompressionSchedule.from_bounds(
            sched, lambda b: make_compressor("scalar", int(b))
        ),
        "fixed-rounding": lambda: ScalarQuantizer(fixed_bits, range=fixed, dither=False),
        "fixed-dithered": lambda: ScalarQuantizer(fixed_bits, range=fixed),
    }
    edges = np.unique(np.geomspace(1, R, windows + 1).round().astype(int))
    edges[0] = 0
    wins = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
    late = min(late, len(wins))
    curves: dict[str, list[float]] = {}
    fits: dict[str, SlopeFit] = {}
    sums: dict[str, float] = {}
    bits: dict[str, tuple[int, int]] = {}
    mids = [math.sqrt(max(a, 1) * b) for a, b in wins]
    for name in arms:
        per_seed = []
        s_eta_e = []
        for seed in seeds:
            cfg = _config(
                Q=1,
                lr=lr,
                epochs=epochs,
                batch_size=batch_size,
                embedding_size=embedding_size,
                compressor=make[name](),
                server_compressor=None,
                seed=int(seed),
            )
            res = train(ds, cfg)
            g = np.array([float(h["grad_norm_sq"]) for h in res.history[:R]])
            per_seed.append([float(g[a:b].mean()) for a, b in wins])
            s_eta_e.append(float(np.sum(etas * np.asarray(res.rounds["embedding_error"]))))
        curves[name] = [float(v) for v in np.mean(per_seed, axis=0)]
        ks = range(len(wins) - late, len(wins))
        xs = [mids[k] for _ in per_seed for k in ks]
        ys = [row[k] for row in per_seed for k in ks]
        fits[name] = fit_loglog_slope(xs, ys, level)
        sums[name] = float(np.mean(s_eta_e))
        bits[name] = (
            (int(sched.bits[0]), int(sched.bits[-1])) if name == "summable" else (fixed_bits,) * 2
        )
    settings = {
        "dataset": ds.name,
        "T": R,
        "seeds": list(seeds),
        "eta": f"{eta0}/(t0+1)^{power}",
        "fixed": f"scalar {fixed_bits} bit on [-{fixed_range}, {fixed_range}]",
        "envelope": f"{envelope_c}/(t0+1)^{envelope_power}",
    }
    return FloorResult(wins, curves, fits, sums, bits, settings)


# ---------------------------------------------------------------------------------------------
# the `cvfl reproduce schedules` experiment
# ---------------------------------------------------------------------------------------------
def _plot_schedules(rate: RateResult, floor: FloorResult, path: str) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4))  # no pyplot: no backend switch in a notebook
    axes = fig.subplots(1, 2)
    ax = axes[0]
    T = np.array([r["T"] for r in rate.rows], dtype=float)
    y = np.array([r["avg_grad_norm_sq"] for r in rate.rows])
    ax.loglog(T, y, "o", alpha=0.6, label="runs (seeds)")
    grid = np.geomspace(T.min(), T.max(), 50)
    f = rate.fit
    ax.loglog(grid, np.exp(f.intercept) * grid**f.slope, "-", label=f"fit: slope {f.slope:.3f}")
    ref = np.exp(f.intercept) * grid[0] ** f.slope * (grid / grid[0]) ** -0.5
    ax.loglog(grid, ref, "k--", lw=1, label="slope -1/2")
    ax.set_xlabel("T (local iterations)")
    ax.set_ylabel(r"average $\|\nabla F(\Theta^{t_0})\|^2$")
    ax.set_title(f"C4.3: eta = 1/sqrt(T), bits q_min(T); CI [{f.low:.3f}, {f.high:.3f}]")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    ax = axes[1]
    mids = [math.sqrt(max(a, 1) * b) for a, b in floor.windows]
    for arm, vals in floor.curves.items():
        ax.loglog(mids, vals, "o-", label=f"{arm} (late slope {floor.late_fits[arm].slope:.2f})")
    ax.set_xlabel("round t0 (window centre)")
    ax.set_ylabel(r"window mean $\|\nabla F\|^2$")
    ax.set_title("C4.4: eta = eta0 (t0+1)^-p; summable eta E vs fixed 1-bit")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    from .plotting import save_figure

    save_figure(fig, path)


def run_schedule_experiment(
    out: str, *, quick: bool = False, progress: bool = True, seeds: int | None = None
) -> dict[str, Any]:
    """Run :func:`rate_experiment` and :func:`floor_experiment`; write tables and a figure.

    Writes ``<out>/schedules/rate.{csv,md}``, ``floor.{csv,md}``, ``summary.md`` and
    ``schedules.png``. ``quick``: 2 seeds for the rate and ``T = 1000`` with one seed for the
    floor (about a minute); otherwise 4 seeds and ``T = 4000`` with two seeds. ``seeds`` overrides
    the number of seeds of the rate experiment.
    """
    import os
    import sys

    from cvfl_theory._atomic import atomic_write_text

    from .tables import write_table

    folder = os.path.join(os.fspath(out), "schedules")
    os.makedirs(folder, exist_ok=True)
    say = (lambda s: print(s, file=sys.stderr, flush=True)) if progress else None
    n_seeds = seeds if seeds is not None else (2 if quick else 4)
    rate = rate_experiment(seeds=tuple(range(n_seeds)), progress=say)
    floor = floor_experiment(T=1000 if quick else 4000, seeds=(0,) if quick else (0, 1))
    write_table(rate.rows, folder, "rate")
    frows = [
        {"window": f"[{lo}, {hi})", **{arm: floor.curves[arm][k] for arm in floor.curves}}
        for k, (lo, hi) in enumerate(floor.windows)
    ]
    write_table(frows, folder, "floor")
    lines = [
        "# Schedules checked empirically (C4.3, C4.4, C5 table)",
        "",
        f"Rate (C4.3): {rate.settings}.",
        f"Log-log slope of the average ||grad F||^2 against T: {rate.fit}.",
        f"-1/2 inside the confidence interval: **{rate.verdict}**.",
        "",
        f"Floor (C4.4): {floor.settings}.",
    ]
    for arm in floor.curves:
        verdict = "keeps decreasing" if floor.decreases(arm) else "stalls (no significant decrease)"
        lines.append(
            f"- {arm}: late slope {floor.late_fits[arm]}; sum eta E = {floor.sum_eta_E[arm]:.4g}; "
            f"bits {floor.bits[arm]}: **{verdict}**"
        )
    atomic_write_text(os.path.join(folder, "summary.md"), "\n".join(lines) + "\n")
    _plot_schedules(rate, floor, os.path.join(folder, "schedules.png"))
    return {"rows": rate.rows, "rate": rate, "floor": floor, "folder": folder}


def specs(opt: Options) -> list[RunSpec]:
    """No sweep: the experiment trains its own runs (:func:`rate_experiment`, :func:`floor_experiment`)."""
    return []


def run(opt: Options) -> dict[str, Any]:
    """The C4.3 rate and the C4.4 conditions checked empirically (:func:`run_schedule_experiment`)."""
    progress = bool(opt.progress)  # lines only when asked for, as the bounds experiment's
    return run_schedule_experiment(opt.out, quick=opt.quick, progress=progress, seeds=opt.seeds)
