"""Several probes of one run: :func:`~cvfl_sim.vfl.train.train` takes one ``probe`` callable.

Examples
--------
>>> seen = []
>>> both = probes(lambda **kw: seen.append("a"), lambda **kw: seen.append("b"))
>>> both(round_index=0, step=0)
>>> seen
['a', 'b']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["probes"]


def probes(*each: Callable[..., None] | None) -> Callable[..., None]:
    """One probe that calls every given probe (``None`` skipped) in order, with the same arguments."""
    called = [p for p in each if p is not None]
    for p in called:
        if not callable(p):
            raise TypeError(f"a probe must be callable, got {type(p).__name__}")

    def call(**kwargs: Any) -> None:
        for p in called:
            p(**kwargs)

    return call
