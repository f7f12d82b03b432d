"""Shared timing helpers for the ratio benchmarks (ratios measured in one run).

The machine may be shared, so :func:`paired_ratio` interleaves the operation with its baseline
(baseline, operation, baseline, operation, ...): both see the same load, and the ratio of their
medians means the same on a quiet or a busy machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


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


def paired_ratio(
    fn: Callable[[], object], base: Callable[[], object], repeats: int = 11, warmup: int = 3
) -> tuple[float, float, float]:
    """Interleaved timing: ``(median fn time / median base time, median fn, median base)``.

    ``warmup`` untimed rounds first bring the allocator and caches to their steady state (the
    first large run of a process pays for growing its heap).
    """
    for _ in range(warmup):
        fn()
        base()
    t_fn, t_base = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        base()
        t1 = time.perf_counter()
        fn()
        t2 = time.perf_counter()
        t_base.append(t1 - t0)
        t_fn.append(t2 - t1)
    t_fn.sort()
    t_base.sort()
    mid = repeats // 2
    return t_fn[mid] / t_base[mid], t_fn[mid], t_base[mid]


AVX2_MACHINE_ENV = {
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    "OPENBLAS_CORETYPE": "Haswell",
    "ATEN_CPU_CAPABILITY": "avx2",
    "CVFL_KERNEL_PATH": "avx2",
}
"""The environment that makes an AVX-512 machine run like an AVX2-only one: numpy without its
AVX-512 code, OpenBLAS's Haswell kernels, torch's AVX2 kernels and our kernels' AVX2 path (all
four libraries pick their SIMD code at run time)."""


def kernel_env(path: str | None) -> dict[str, str]:
    """The environment of a measurement on kernel ``path`` (``None``: this machine's defaults).

    ``"avx2"`` on an AVX-512 CPU is :data:`AVX2_MACHINE_ENV` (an AVX2-only machine emulated);
    elsewhere only the kernel path is forced (the libraries already run their AVX2 code, and
    numpy refuses to disable features it does not dispatch).
    """
    env = {k: v for k, v in os.environ.items() if k not in AVX2_MACHINE_ENV}
    if path == "avx2" and "avx512f" in _cpu_flags():
        env.update(AVX2_MACHINE_ENV)
    elif path is not None:
        env["CVFL_KERNEL_PATH"] = path
    return env


def worker_json(script: str, args: list[str], env: dict[str, str], label: str) -> Any:
    """Run ``python script --worker *args`` in ``env`` and parse the JSON it prints."""
    cmd = [sys.executable, os.path.abspath(script), "--worker", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"the {label} run failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout)


def _cpu_flags() -> list[str]:
    """The CPU's flags from ``/proc/cpuinfo`` (empty if it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return []


def _cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (empty if it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), ""
            )
    except OSError:
        return ""


def cpu_line() -> str:
    """One line naming the CPU model, its AVX2/AVX-512 flags and cores (``/proc/cpuinfo``)."""
    flags = _cpu_flags()
    if not flags:
        return "cpu: unknown (no /proc/cpuinfo)"
    has = [name for name in ("avx512f", "avx512dq", "avx2") if name in flags]
    model = _cpu_model()
    return (
        f"cpu: {model + '; ' if model else ''}{', '.join(has) or 'no AVX2/AVX-512'}; "
        f"{os.cpu_count()} cores"
    )


def verdict(value: float, target: float, smaller_is_better: bool = True) -> str:
    """``PASS``/``MISS`` against a target."""
    ok = value <= target if smaller_is_better else value >= target
    return "PASS" if ok else "MISS"
