"""Issues 2 and 13: encode + serialise, and parse + average, as ratios to ``X.copy()``.

X is float32 of shape (100, 100000), ``IndependentEncoder(p=0.1)``, ``SeededSparseProtocol(r=32)``:
(a) ``to_bytes(encode(X))`` and (b) ``average(from_bytes(msgs))``, each divided by the time of
``X.copy()`` (target <= 3), median of 11 runs interleaved with the copy (see
``_timing.paired_ratio``), so it means the same on a busy machine.

numpy dispatches its own SIMD code at run time, and so do OpenBLAS and our kernels, so the ratio
depends on the instruction sets in use. Each configuration is measured in its own subprocess and
printed side by side:

- ``native``: whatever this machine uses by default;
- ``avx2``: an AVX2-only machine emulated on an AVX-512 one (``_timing.kernel_env``: numpy
  without its AVX-512 code, ``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"``,
  OpenBLAS's Haswell kernels, torch's AVX2 kernels, our kernels' AVX2 path);
- ``avx512``: numpy and OpenBLAS defaults with ``CVFL_KERNEL_PATH=avx512``, when the CPU has it
  (otherwise ``not measurable here``).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from _timing import cpu_line, kernel_env, paired_ratio, verdict, worker_json

import cvfl_theory
from cvfl_theory import IndependentEncoder, _kernels
from cvfl_theory.protocols import SeededSparseProtocol

TARGET = 3.0
SHAPE = (100, 100_000)
P = 0.1
CONFIGS: dict[str, str | None] = {"native": None, "avx2": "avx2", "avx512": "avx512"}
"""Each configuration's kernel path (``_timing.kernel_env``; ``None``: the machine's defaults)."""


def _numpy_simd() -> str:
    """The widest x86 SIMD level numpy dispatches to in this process."""
    from numpy._core._multiarray_umath import __cpu_features__ as f

    if f.get("AVX512_SKX"):
        return "AVX-512"
    return "AVX2" if f.get("AVX2") else "below AVX2"


def _run(X, copy, backend: str, mu: str) -> list[dict[str, object]]:
    n, d = X.shape
    enc = IndependentEncoder(p=P, mu=mu)
    proto = SeededSparseProtocol(r=32)
    seed = iter(range(10**6))
    a, _, t_copy = paired_ratio(lambda: proto.to_bytes(enc.encode(X, rng=next(seed))), copy)
    encoded = enc.encode(X, rng=12345)
    msgs = proto.to_bytes(encoded)
    b, _, _ = paired_ratio(lambda: enc.average(proto.from_bytes(msgs, d)), copy)
    bits = {
        "payload": float(proto.payload_bits(encoded).sum()) / (n * d),
        "framing": 8.0 * sum(len(m) for m in msgs) / (n * d),
        "formula": proto.expected_bits(enc, X) / (n * d),
    }
    case = f"{backend:<5} mu={mu:<4}"
    return [
        {"case": f"{case} (a) encode+to_bytes", "ratio": a, "copy_ms": 1e3 * t_copy, **bits},
        {"case": f"{case} (b) from_bytes+average", "ratio": b, "copy_ms": 1e3 * t_copy, **bits},
    ]


def measure() -> dict:
    """All cases in this process (its numpy, OpenBLAS and kernel paths)."""
    X = np.random.default_rng(0).standard_normal(SHAPE, dtype=np.float32)
    proto = SeededSparseProtocol(r=32)
    for _ in range(5):  # process warm-up: grow the heap to its steady state before timing
        X.copy()
        proto.from_bytes(proto.to_bytes(IndependentEncoder(P).encode(X, rng=0)), X.shape[1])
    # and one untimed pass of the whole measurement: glibc's malloc adapts its mmap and trim
    # thresholds to the sizes freed, and until it has, the first decode measured in a process
    # paid page faults for buffers that a loop's later calls reuse (measured 1.5x slower; raising
    # both thresholds from the start with GLIBC_TUNABLES removes the difference too)
    _run(X, X.copy, "numpy", "zero")
    rows = [r for mu in ("zero", "mean") for r in _run(X, X.copy, "numpy", mu)]
    import torch

    torch.set_num_threads(1)
    T = torch.from_numpy(X.copy())
    rows += [r for mu in ("zero", "mean") for r in _run(T, T.clone, "torch", mu)]
    return {"numpy_simd": _numpy_simd(), "kernel_path": _kernels.path(), "rows": rows}


def _measure_config(name: str) -> dict:
    """:func:`measure` in a subprocess with the configuration's environment."""
    return worker_json(__file__, [], kernel_env(CONFIGS[name]), name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    if parser.parse_args(argv).worker:
        print(json.dumps(measure()))
        return 0
    print(f"== IndependentEncoder(p={P}) + SeededSparseProtocol(r=32), X float32 {SHAPE}")
    print(f"package: {cvfl_theory.__file__}")
    print(cpu_line())
    print(f"time / copy time (wall), median of 11 interleaved; target <= {TARGET}")
    available = _kernels.paths()
    results = {
        name: _measure_config(name)
        for name in CONFIGS
        if CONFIGS[name] is None or CONFIGS[name] in available
    }
    cell = 30
    print(f"{'case':<38}" + "".join(f" | {name:<{cell}}" for name in CONFIGS))
    setup = [
        f"numpy {r['numpy_simd']}, kernels {r['kernel_path']}" if (r := results.get(name)) else "-"
        for name in CONFIGS
    ]
    print(f"{'(configuration in use)':<38}" + "".join(f" | {t:<{cell}}" for t in setup))
    rows0: list[dict] = results["native"]["rows"]
    for i, row in enumerate(rows0):
        line = f"{row['case']:<38}"
        for name in CONFIGS:
            if name not in results:
                text = "not measurable here"
            else:
                r = results[name]["rows"][i]
                text = (
                    f"{r['ratio']:5.2f} {verdict(r['ratio'], TARGET)} (copy {r['copy_ms']:.1f}ms)"
                )
            line += f" | {text:<{cell}}"
        print(line)
    for row in rows0[::2]:
        print(
            f"bits/element {row['case'][:14]}: payload {row['payload']:.4f}, with framing "
            f"{row['framing']:.4f}, K3 formula E[C]/(nd) {row['formula']:.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
