"""cvfl_sim — small C-VFL training runs that check the bounds and schedules of [CVFL] empirically.

Entry points: :func:`train` (Algorithm 1 of THEORY C1), :class:`CVFLConfig`,
:class:`VerticalDataset` / :func:`load_dataset` and :class:`RunResult`. They are imported lazily,
so ``cvfl`` subcommands that do not train never pay for importing torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["train", "CVFLConfig", "VerticalDataset", "load_dataset", "RunResult"]

_WHERE = {
    "train": "algorithm",
    "CVFLConfig": "algorithm",
    "VerticalDataset": "data",
    "load_dataset": "data",
    "RunResult": "results",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
