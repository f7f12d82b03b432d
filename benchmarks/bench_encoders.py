"""Issue 2 benchmark: encode + serialise, and parse + average, as ratios to ``X.copy()``.

X is float32 of shape (100, 100000), p = 0.1, SeededSparseProtocol (r = 32). Each ratio is the
median of 11 runs interleaved with the baseline copy (see ``_timing.paired_ratio``), so it means the
same on a busy machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import paired_ratio, verdict  # noqa: E402

from cvfl_theory import IndependentEncoder  # noqa: E402
from cvfl_theory.protocols import SeededSparseProtocol  # noqa: E402

TARGET = 3.0


def run(X, copy, label: str, mu: str) -> None:
    n, d = X.shape
    enc = IndependentEncoder(p=0.1, mu=mu)
    proto = SeededSparseProtocol(r=32)
    seed = iter(range(10**6))
    a, _, t_copy = paired_ratio(lambda: proto.to_bytes(enc.encode(X, rng=next(seed))), copy)
    encoded = enc.encode(X, rng=12345)
    msgs = proto.to_bytes(encoded)
    b, _, _ = paired_ratio(lambda: enc.average(proto.from_bytes(msgs, d)), copy)
    payload = proto.payload_bits(encoded).sum()
    total = 8 * sum(len(m) for m in msgs)
    formula = proto.expected_bits(enc, X)
    print(f"[{label}, mu={mu}] copy {t_copy * 1e3:.1f} ms")
    print(f"  (a) encode + to_bytes / copy   = {a:5.2f}  (target <= {TARGET}) {verdict(a, TARGET)}")
    print(
        f"  (b) from_bytes + average / copy = {b:5.2f}  (target <= {TARGET}) {verdict(b, TARGET)}"
    )
    print(
        f"  bits/element: payload {payload / (n * d):.4f}, with framing {total / (n * d):.4f}, "
        f"K3 formula E[C]/(nd) {formula / (n * d):.4f}"
    )


def main() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 100_000), dtype=np.float32)
    print("== Issue 2: IndependentEncoder(p=0.1) + SeededSparseProtocol, X float32 (100, 100000)")
    proto = SeededSparseProtocol(r=32)
    for _ in range(5):  # process warm-up: grow the heap to its steady state before timing
        X.copy()
        proto.from_bytes(proto.to_bytes(IndependentEncoder(0.1).encode(X, rng=0)), X.shape[1])
    for mu in ("zero", "mean"):
        run(X, X.copy, "numpy", mu)
    try:
        import torch
    except ImportError:  # pragma: no cover
        print("torch not installed: skipping the torch ratios")
        return
    torch.set_num_threads(1)
    T = torch.from_numpy(X.copy())
    for mu in ("zero", "mean"):
        run(T, T.clone, "torch", mu)


if __name__ == "__main__":
    main()
