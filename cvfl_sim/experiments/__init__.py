r"""The paper's experiments, one module each, their sweeps, tables, plots and reference data.

May import :mod:`cvfl_sim.bounds` and :mod:`cvfl_sim.vfl`; no experiment imports another: this
registry is the only place that knows them all. Importing any of them does not import torch.

The experiments (each module has ``specs(opt)``, its training runs, and ``run(opt)``, which builds
its tables and plots from those runs and returns its result):

``compressors`` (Tables 2–4, :mod:`.compressors`)
    every data set × {scalar, hexagonal lattice, top-k} × ``b ∈ {2, 3, 4}`` and the ``b = 32``
    baseline, several seeds: max metric mean ± std and bits to reach the target; and the headline
    claim of [CVFL] measured on ``digits-quadrants``.
``local-steps`` (Table 5, :mod:`.local_steps`)
    ``Q ∈ {1, 10, 25}`` with lattice quantization at ``b = 3`` on the F1 task; wall time to target
    under the C7 time model for round trips of 1/10/50/200 ms.
``parties`` (Figure 4, :mod:`.parties`)
    ``digits-views`` with 4 vs 12 parties, lattice quantization at ``b ∈ {2, 3, 4, 32}``.
``curves`` (Figure 3, :mod:`.curves`)
    metric vs epochs and vs bits with mean ± std bands on ``digits-quadrants``.
``bounds`` (:mod:`.theorem_runs`)
    Theorems 4.2/4.4 term by term on 20 runs; its own study, no sweep.
``schedules`` (:mod:`.schedule_check`)
    the C4.3 rate and the C4.4 conditions checked empirically; its own study, no sweep.

:func:`run_experiments` lists the training runs of every requested experiment, computes them as
*one* sweep (:func:`~.specs.run_sweep`), then builds each experiment's tables and plots from them.

Targets: the paper fixes a target per data set; here the target of a sweep is
``target_fraction`` (default 0.95) × the mean over seeds of the reference configuration's maximum
metric (``b = 32`` for compressors and parties, the best ``Q`` for local steps), stated in every
table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from types import ModuleType
from typing import Any

from .specs import Options, RunSpec, run_sweep

__all__ = [
    "EXPERIMENTS",
    "STUDIES",
    "experiment",
    "sweep_specs",
    "run_experiments",
    "run_experiment",
]

EXPERIMENTS: dict[str, str] = {
    "compressors": "compressors",
    "local-steps": "local_steps",
    "parties": "parties",
    "curves": "curves",
    "bounds": "theorem_runs",
    "schedules": "schedule_check",
}
"""Each experiment's name (``cvfl reproduce NAME``) and its module in this package."""

STUDIES = frozenset({"bounds", "schedules"})
"""The experiments that train their own runs in the calling process (no sweep)."""


def experiment(name: str) -> ModuleType:
    """The module of experiment ``name`` (with its ``specs(opt)`` and ``run(opt)``)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"{__name__}.{EXPERIMENTS[name]}")


def sweep_specs(name: str, opt: Options) -> list[RunSpec]:
    """Every :class:`~.specs.RunSpec` that experiment ``name`` trains with ``opt``.

    ``[]`` for ``bounds`` and ``schedules``, which run their own studies. A command lists the runs
    of all its experiments up front and computes them as one sweep (one progress bar, every
    worker busy); the experiments then find them in :attr:`~.specs.Options.known`.
    """
    specs: list[RunSpec] = experiment(name).specs(opt)
    return specs


def run_experiments(
    names: Sequence[str], *, bar: Any = None, **options: Any
) -> Iterator[tuple[str, Callable[[], dict[str, Any]]]]:
    """The experiments ``names`` with :class:`~.specs.Options` keyword arguments, as one sweep.

    The first step lists the training runs of every experiment (:func:`sweep_specs`) and
    computes or loads them with *one* :func:`~.specs.run_sweep`, so every worker of ``executor``
    stays busy across experiments and data sets, and one progress bar (``bar``, shared with the
    caller, or the options' ``progress``) covers them. Then it yields ``(name, build)`` per
    experiment: ``build()`` writes its tables and plots from those runs and returns its result (a
    caller announces and times each one).
    """
    modules = [experiment(name) for name in names]
    opt = Options(**options)
    specs = [spec for module in modules for spec in module.specs(opt)]
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
    for name, module in zip(names, modules):
        yield name, partial(module.run, opt)


def run_experiment(name: str, **options: Any) -> dict[str, Any]:
    """Run one experiment by name with :class:`~.specs.Options` keyword arguments.

    Its training runs are computed first as one sweep (:func:`run_experiments`).
    """
    ((_, build),) = run_experiments([name], **options)
    return build()
