"""cvfl_sim — small C-VFL training runs that check the bounds and schedules of [CVFL] empirically.

Four wings, each a subpackage; imports run only downward, ``commands`` → ``experiments`` →
``bounds`` → ``vfl`` → :mod:`cvfl_theory`:

- :mod:`cvfl_sim.vfl`: Algorithm 1 and what a run is (configuration, data, models, schedules,
  transports, the run record, the execution strategies and :func:`train` above them);
- :mod:`cvfl_sim.bounds`: the theory checked on runs (constants, the Lemma-1 probe, tight terms,
  the theorems and their hypotheses);
- :mod:`cvfl_sim.experiments`: the paper's experiments (one module each, a registry on top),
  sweeps, tables, plotting and reference data;
- :mod:`cvfl_sim.commands`: the ``cvfl`` command line, one module per subcommand.

Entry points: :func:`train` (Algorithm 1, C1), :class:`CVFLConfig`,
:class:`VerticalDataset` / :func:`load_dataset`, :class:`RunResult` and the plots
:func:`~cvfl_sim.experiments.plotting.plot_runs` / :func:`~cvfl_sim.bounds.plotting.plot_bound`,
used as ``from cvfl_sim import train, CVFLConfig, load_dataset``. They are imported lazily on
first use (PEP 562 module ``__getattr__``), so ``import cvfl_sim`` and ``cvfl --help`` never pay
for importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names resolve lazily
    from .bounds.plotting import plot_bound
    from .experiments.plotting import plot_runs
    from .vfl.config import CVFLConfig
    from .vfl.data import VerticalDataset, load_dataset
    from .vfl.results import RunResult
    from .vfl.train import train

__all__ = [
    "train",
    "CVFLConfig",
    "VerticalDataset",
    "load_dataset",
    "RunResult",
    "plot_runs",
    "plot_bound",
]

_WHERE = {
    "train": "vfl.train",
    "CVFLConfig": "vfl.config",
    "VerticalDataset": "vfl.data",
    "load_dataset": "vfl.data",
    "RunResult": "vfl.results",
    "plot_runs": "experiments.plotting",
    "plot_bound": "bounds.plotting",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
