r"""The figure of a bound check: each form's terms beside the observed value (C4.2, C4.4, C4.5).

:func:`plot_bound` behaves like an ordinary matplotlib helper: without ``ax`` it draws on a new
pyplot-managed figure (so it shows in a notebook cell), with ``ax`` into it; it returns the Axes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .theorems import BoundCheck

__all__ = ["plot_bound", "new_axes"]


def new_axes(ax: Any, figsize: tuple[float, float]) -> Any:
    """``ax`` itself, or the Axes of a new pyplot-managed figure (shown by Jupyter)."""
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def plot_bound(check: BoundCheck, ax: Any = None) -> Any:
    r"""Bar chart of the terms of a bound beside the observed value (C4.2, C4.4, C4.5).

    Each form of a :class:`~cvfl_sim.bounds.theorems.BoundCheck` gets its three terms and total on a
    log scale, then each estimate (hatched bars, "(estimate)" under them: not bounds); a dashed
    line is the observed :math:`\|\nabla F\|^2`.

    A zero term (no compression: term 3 is 0) cannot be drawn on a log scale; its bar is empty.

    Parameters
    ----------
    check : BoundCheck
        Output of :func:`cvfl_sim.bounds.theorems.bound_vs_observed`.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new pyplot-managed figure otherwise.

    Returns
    -------
    matplotlib.axes.Axes
    """
    forms = getattr(check, "forms", None)
    if not isinstance(forms, dict) or not forms or not hasattr(check, "observed"):
        raise TypeError(
            f"check must be the BoundCheck of bound_vs_observed, got {type(check).__name__}"
        )
    ax = new_axes(ax, (7.0, 3.5))
    estimates = dict(getattr(check, "estimates", None) or {})
    shown = {**forms, **estimates}
    names = list(shown)
    parts = ("optimization", "variance", "compression", "total")
    width = 0.8 / len(parts)
    pos = np.arange(len(names))
    hatch = ["//" if n in estimates else "" for n in names]
    for k, part in enumerate(parts):
        vals = [float(getattr(shown[n], part)) for n in names]
        bars = ax.bar(pos + (k - 1.5) * width, vals, width, label=part)
        colour = bars.patches[0].get_facecolor() if bars.patches else None
        for bar, h in zip(bars.patches, hatch):
            if h:  # an estimate: hatched, its edge in the term's colour
                bar.set_hatch(h)
                bar.set_edgecolor(colour)
                bar.set_facecolor("none")
    ax.axhline(check.observed, color="k", ls="--", label="observed")
    ax.set_yscale("log")
    ax.set_xticks(pos, [n + ("\n(estimate)" if n in estimates else "") for n in names])
    ax.set_ylabel(r"$\|\nabla F\|^2$ bound terms")
    ax.set_title(f"Theorem {check.theorem} term by term vs the run")
    ax.legend(fontsize="small")
    return ax
