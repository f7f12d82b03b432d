"""cvfl_sim — small C-VFL training runs that check the bounds and schedules of [CVFL] empirically.

Entry points: :func:`train` (Algorithm 1 of THEORY C1), :class:`CVFLConfig`,
:class:`VerticalDataset` / :func:`load_dataset`, :class:`RunResult` and the plots
:func:`~cvfl_sim.plotting.plot_runs` / :func:`~cvfl_sim.plotting.plot_bound`, used as
``from cvfl_sim import train, CVFLConfig, load_dataset``. They are imported lazily on first use
(PEP 562 module ``__getattr__``), so ``import cvfl_sim`` and ``cvfl --help`` never pay for
importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names resolve lazily
    from .algorithm import CVFLConfig, train
    from .data import VerticalDataset, load_dataset
    from .plotting import plot_bound, plot_runs
    from .results import RunResult

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
    "train": "algorithm",
    "CVFLConfig": "algorithm",
    "VerticalDataset": "data",
    "load_dataset": "data",
    "RunResult": "results",
    "plot_runs": "plotting",
    "plot_bound": "plotting",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
