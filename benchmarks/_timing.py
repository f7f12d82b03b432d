"""Shared timing helpers for the ratio benchmarks (ratios measured in one run)."""

from __future__ import annotations

import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], repeats: int = 7, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs, after ``warmup`` untimed runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def verdict(value: float, target: float, smaller_is_better: bool = True) -> str:
    """``PASS``/``MISS`` against a target."""
    ok = value <= target if smaller_is_better else value >= target
    return "PASS" if ok else "MISS"
