r"""Plots of C-VFL runs: metric curves with seed bands (:func:`plot_runs`), and figure files.

:func:`plot_runs` behaves like an ordinary matplotlib helper: without ``ax`` it draws on a new
:func:`matplotlib.pyplot.subplots` figure (pyplot-managed, so it shows in a notebook cell), with
``ax`` it draws into it; it returns the Axes. :func:`plot_panels` saves one panel per x axis to a
PNG file without pyplot. matplotlib is imported inside the functions, so importing this module
costs nothing.

Styles of :func:`plot_runs`: a group label such as ``"scalar b=2"`` or ``"M=4 b=32"`` is read as
*setting* and *bit level*: the ``b=<int>`` token picks the line style (solid for the most bits,
then dashed, dash-dot, dotted), the rest of the label picks the colour (fixed colours for the
compressors of :func:`cvfl_sim.vfl.compressors.make_compressor`: black for the uncompressed
``b = 32`` baseline). When that gives two groups the same (colour, line style) -- or more
settings or bit levels than there are colours or styles -- every group gets its own pair
instead (10 colours × 4 line styles), so up to 40 curves stay distinct.

Bands are mean ± sample standard deviation over the seeds of a group, clipped to the metric's
range (:math:`[0, 1]` for accuracy and F1, :math:`[0, \infty)` for losses, errors and bits), and
the legend says over how many seeds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..bounds.plotting import new_axes
from ..vfl.results import HISTORY_COLUMNS, RunResult

__all__ = ["plot_runs", "plot_panels", "save_figure", "seed_bands", "metric_range", "X_AXES"]

X_AXES = {
    "round": "communication round $t_0$",
    "epoch": "epoch",
    "bits": "bits communicated (C6 ledger)",
    "bits_paper_model": "bits, the paper's formula (C6)",
}
"""History columns :func:`plot_runs` can put on the x axis, with their axis labels."""

_METRIC_COLUMNS = {"accuracy": "test_accuracy", "f1": "test_f1"}
_BOUNDED = frozenset({"test_accuracy", "test_f1"})
_Y_COLUMNS = tuple(c for c in HISTORY_COLUMNS if c not in ("epoch", "round"))

_PALETTE = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
)
_FIXED_COLOURS = {
    "": "black",
    "none": "black",
    "scalar": "tab:blue",
    "lattice": "tab:orange",
    "topk": "tab:green",
    "scalar+ef": "tab:purple",
    "lattice+ef": "tab:brown",
    "topk+ef": "tab:pink",
}
_LINESTYLES = ("-", "--", "-.", ":")
_BITS_TOKEN = re.compile(r"(?:^|\s)b\s*=\s*(\d+)(?=\s|$)")


def _column(metric: str | None, runs: Sequence[RunResult]) -> str:
    """The history column of ``metric`` (``None``: the data set's headline metric)."""
    name = metric if metric is not None else runs[0].metric
    col = _METRIC_COLUMNS.get(name, name)
    if col not in _Y_COLUMNS:
        allowed = ", ".join([*_METRIC_COLUMNS, *_Y_COLUMNS])
        raise ValueError(f"metric must be one of {allowed}, got {name!r}")
    return col


def metric_range(column: str) -> tuple[float, float]:
    r"""The range a history column lives in.

    :math:`[0, 1]` for test accuracy and F1, else :math:`[0, \infty)` (losses, squared errors and
    bits are non-negative).

    >>> metric_range("test_accuracy"), metric_range("train_loss")
    ((0.0, 1.0), (0.0, inf))
    """
    return (0.0, 1.0) if column in _BOUNDED else (0.0, math.inf)


def seed_bands(
    runs: Sequence[RunResult], x: str = "epoch", metric: str | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and sample standard deviation over seeds of a metric, row by row of the histories.

    The runs of a group share their evaluation schedule; longer histories are cut to the shortest.
    The x values are the mean over runs (bits differ slightly between seeds for some compressors).

    Parameters
    ----------
    runs : sequence of RunResult
        The seeds of one configuration.
    x : {"round", "epoch", "bits", "bits_paper_model"}
        History column for the x axis.
    metric : str, optional
        ``"accuracy"``, ``"f1"`` or a numeric history column (default: the data set's metric).

    Returns
    -------
    x, mean, std : numpy.ndarray
        ``std`` uses ``ddof = 1`` (0 for a single run); rows with a missing value are dropped.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")
    col = _column(metric, runs)
    n = min(len(r.history) for r in runs)
    xs = np.array([[_num(row[x]) for row in r.history[:n]] for r in runs], dtype=float)
    ys = np.array([[_num(row[col]) for row in r.history[:n]] for r in runs], dtype=float)
    keep = np.isfinite(xs).all(axis=0) & np.isfinite(ys).all(axis=0)
    xs, ys = xs[:, keep], ys[:, keep]
    std = ys.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(ys.shape[1])
    return xs.mean(axis=0), ys.mean(axis=0), std


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def _split_label(label: str) -> tuple[str, int | None]:
    """``"scalar b=2"`` → ``("scalar", 2)``; a label without ``b=`` has no bit level."""
    m = _BITS_TOKEN.search(label)
    if m is None:
        return label.strip(), None
    return (label[: m.start()] + " " + label[m.end() :]).strip(), int(m.group(1))


def _styles(labels: Sequence[str]) -> dict[str, tuple[str, Any]]:
    """(colour, line style) per label, distinct for up to 40 labels (see the module docstring)."""
    parts = {lab: _split_label(lab) for lab in labels}
    settings = list(dict.fromkeys(s for s, _ in parts.values()))
    levels = sorted({b for _, b in parts.values() if b is not None}, reverse=True)
    pairs = [(s, b) for s, b in parts.values()]
    if (
        len(set(pairs)) == len(pairs)
        and len(settings) <= len(_PALETTE)
        and len(levels) <= len(_LINESTYLES)
    ):
        fixed = {s: _FIXED_COLOURS[s] for s in settings if s in _FIXED_COLOURS}
        free = iter(c for c in _PALETTE if c not in fixed.values())
        colour = {s: fixed[s] if s in fixed else next(free, "tab:gray") for s in settings}
        if len(set(colour.values())) == len(settings):
            style = {b: _LINESTYLES[k] for k, b in enumerate(levels)}
            return {
                lab: (colour[s], style[b] if b is not None else "-")
                for lab, (s, b) in parts.items()
            }
    P = len(_PALETTE)
    return {
        lab: (_PALETTE[k % P], _LINESTYLES[(k // P) % len(_LINESTYLES)])
        for k, lab in enumerate(labels)
    }


def _check_groups(groups: Any) -> dict[str, list[RunResult]]:
    if not isinstance(groups, Mapping) or not groups:
        raise TypeError(
            "groups must be a non-empty mapping of label -> list of RunResult, "
            f"got {type(groups).__name__}"
        )
    out = {}
    for label, runs in groups.items():
        runs = [runs] if isinstance(runs, RunResult) else list(runs)
        if not runs or not all(isinstance(r, RunResult) for r in runs):
            raise TypeError(f"groups[{label!r}] must be a non-empty list of RunResult")
        if any(not r.history for r in runs):
            raise ValueError(f"groups[{label!r}] holds a run with an empty history")
        out[str(label)] = runs
    return out


def plot_runs(
    groups: Mapping[str, Sequence[RunResult]],
    *,
    x: str = "epoch",
    metric: str | None = None,
    ax: Any = None,
    title: str | None = None,
    legend: bool = True,
) -> Any:
    r"""Metric against rounds, epochs or bits, one curve per group with a mean ± std seed band.

    Parameters
    ----------
    groups : mapping of str to sequence of RunResult
        One entry per curve: label → the runs (seeds) of one configuration. Labels of the form
        ``"<setting> b=<bits>"`` get colour by setting and line style by bit level (module
        docstring); ``"b=32"`` alone is the uncompressed baseline (black).
    x : {"epoch", "round", "bits", "bits_paper_model"}
        x axis (bits on a log scale, leaving out the evaluation before the first message).
    metric : str, optional
        ``"accuracy"``, ``"f1"`` or a history column such as ``"train_loss"`` (default: the data
        set's headline metric, C7).
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new pyplot-managed figure otherwise.
    title : str, optional
        Axes title.
    legend : bool
        Draw the legend; its title is ``"mean ± std over n seeds"``.

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> from cvfl_sim.vfl.results import RunResult
    >>> def run(acc):
    ...     rows = [dict(epoch=e, round=e, bits=100 * e, test_accuracy=a) for e, a in enumerate(acc)]
    ...     return RunResult(config={}, dataset={"metric": "accuracy"}, history=rows)
    >>> ax = plot_runs({"scalar b=2": [run([0.5, 0.9]), run([0.7, 1.0])]})
    >>> ax.get_legend().get_title().get_text()
    'mean ± std over 2 seeds'
    >>> import matplotlib.pyplot as plt
    >>> plt.close(ax.figure)
    """
    groups = _check_groups(groups)
    if not isinstance(legend, bool):
        raise TypeError(f"legend must be a bool, got {type(legend).__name__}")
    first = next(iter(groups.values()))
    col = _column(metric, first)
    lo, hi = metric_range(col)
    seeds = {label: len(runs) for label, runs in groups.items()}
    same_n = len(set(seeds.values())) == 1
    ax = new_axes(ax, (7.5, 4.5) if len(groups) > 6 else (6.0, 4.0))
    for label, (colour, ls) in _styles(list(groups)).items():
        runs = groups[label]
        xs, m, s = seed_bands(runs, x, metric)
        if x.startswith("bits"):  # log axis: leave out the evaluation before any message
            keep = xs > 0
            xs, m, s = xs[keep], m[keep], s[keep]
        name = label if same_n else f"{label} (n={seeds[label]})"
        ax.plot(xs, m, color=colour, linestyle=ls, linewidth=1.4, label=name)
        if len(runs) > 1:
            ax.fill_between(
                xs, np.maximum(m - s, lo), np.minimum(m + s, hi), color=colour, alpha=0.15, lw=0
            )
    if x.startswith("bits"):
        ax.set_xscale("log")
    ax.set_xlabel(X_AXES[x])
    ylabel = {"test_accuracy": "test accuracy", "test_f1": "test F1"}.get(col, col)
    ax.set_ylabel(ylabel)
    if col in _BOUNDED:
        top = max(
            (float(np.max(ln.get_ydata())) for ln in ax.get_lines() if len(ln.get_ydata())),
            default=0.0,
        )
        ax.set_ylim(0.0, max(1.0, top) + 0.02 if top > 0.9 else None)
    else:
        ax.set_ylim(bottom=0.0)
    ax.grid(alpha=0.3)
    if title is not None:
        ax.set_title(title)
    if legend:
        counts = sorted(set(seeds.values()))
        n = str(counts[0]) if same_n else f"{counts[0]}–{counts[-1]}"
        ax.legend(
            title=f"mean ± std over {n} seed{'s' if counts[-1] > 1 else ''}",
            fontsize="x-small",
            title_fontsize="small",
            handlelength=3.0,  # long enough to tell dash patterns apart
            **(
                {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0}
                if len(groups) > 6
                else {}
            ),
        )
    return ax


def save_figure(fig: Any, path: str) -> None:
    """Write ``fig`` as a PNG (110 dpi) atomically, with the project's one atomic writer."""
    import io

    from cvfl_theory._atomic import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())


def plot_panels(
    groups: dict[str, list[RunResult]], path: str, title: str, xkeys: Sequence[str] = ("bits",)
) -> None:
    """Save one :func:`plot_runs` panel per x axis to ``path`` (atomic).

    The figure is made without pyplot, so no backend is switched and a notebook is unaffected.
    """
    from matplotlib.figure import Figure

    wide = len(groups) > 6
    fig = Figure(figsize=(5.5 * len(xkeys) + (2.0 if wide else 0.0), 4.2), layout="constrained")
    axes = fig.subplots(1, len(xkeys), squeeze=False)[0]
    for k, (ax, xkey) in enumerate(zip(axes, xkeys)):
        plot_runs(groups, x=xkey, ax=ax, legend=k == len(xkeys) - 1)
    fig.suptitle(title)
    save_figure(fig, path)
