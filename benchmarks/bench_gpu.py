"""The compressors and the simulator on a GPU: the same bytes as the CPU, time ÷ clone, a C-VFL run.

On a machine with a CUDA device (``--device cuda``, the default) this prints three things:

1. **Bytes.** For every compressor, dtype, shape and seed of a small grid, the message of a CUDA
   tensor (the torch path) and of the same values on the CPU (the compiled kernels) are compared
   byte for byte, and so are the reconstructions and the fused round trips. One line per
   compressor: the cases compared and how many differ (the requirement: none). The same for
   the K1 and K2 supports drawn with torch on the device against numpy's on the host.
2. **Time ÷ clone on the device.** ``decompress(compress(x))`` and ``roundtrip(x)`` of a
   (4096, 256) float32 tensor, each divided by ``torch.clone`` of ``x`` on the same device,
   synchronised, medians of interleaved repeats (reported, no target: the payload crosses to the
   host, as a message must). Beside it, the supports of 64 nodes drawn with torch on the device
   ÷ numpy on the host (reported: that path is for the bits).
3. **A C-VFL run** with ``CVFLConfig(device="cuda")`` beside the same run on the CPU: the loss
   and accuracy at every evaluation, and the bits on the wire (which must be equal). The models'
   arithmetic differs on a GPU (other kernels, other summation orders), so the histories drift
   apart by rounding; the compressors' bytes for the same input do not.

Without a CUDA device it says so and exits 0 (``make bench`` runs it everywhere). ``--device
cpu`` runs the same script on the CPU with ``CVFL_KERNEL_PATH=torch`` (the torch path against the
kernels), which is how its code path is exercised without a GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from cvfl_theory.compressors import (
    Compressed,
    Compressor,
    HexLatticeQuantizer,
    Identity,
    ScalarQuantizer,
    TopK,
)

SHAPE = (4096, 256)
REPEATS = 15


@contextmanager
def torch_path(on: bool) -> Iterator[None]:
    """``CVFL_KERNEL_PATH=torch`` (on) or unset (off) inside, restored on the way out."""
    before = os.environ.pop("CVFL_KERNEL_PATH", None)
    if on:
        os.environ["CVFL_KERNEL_PATH"] = "torch"
    try:
        yield
    finally:
        os.environ.pop("CVFL_KERNEL_PATH", None)
        if before is not None:
            os.environ["CVFL_KERNEL_PATH"] = before


def compressors() -> list[Compressor]:
    """The grid's compressors: every kind, every range mode, with and without dither."""
    return [
        ScalarQuantizer(2),
        ScalarQuantizer(3),
        ScalarQuantizer(8, range=(-6.0, 6.0)),
        ScalarQuantizer(4, range="minmax-tensor"),
        ScalarQuantizer(3, dither=False),
        HexLatticeQuantizer(2),
        HexLatticeQuantizer(3),
        HexLatticeQuantizer(4, range=(-5.0, 5.0)),
        HexLatticeQuantizer(3, dither=False),
        TopK(bits=3),
        TopK(k=7, r=16),
        Identity(),
        Identity(16),
    ]


def _sides(comp: Compressor, x: np.ndarray, seed: int, device: str) -> list[bytes]:
    """Message, reconstruction and round trip of ``x`` on ``device`` (bytes; host copies)."""
    t = torch.from_numpy(x).to(device)
    c = comp.compress(t, rng=seed)
    y = comp.decompress(c)
    r = comp.roundtrip(t, rng=seed)
    # the header names the original's device: compare the message as if made on the CPU (the
    # same fields, the same payload)
    cpu = Compressed(c.compressor, c.shape, c.dtype, type(c.kind)(True, "cpu"), c.data, c.seed,
                     c.n_clipped)  # fmt: skip
    return [cpu.to_bytes(), y.cpu().numpy().tobytes(), r.cpu().numpy().tobytes()]


def check_bytes(device: str) -> int:
    """Print one line per compressor; return the number of differing cases."""
    rng = np.random.default_rng(0)
    bad_total = 0
    for comp in compressors():
        cases = bad = 0
        digest = hashlib.sha256()
        for dtype in (np.float16, np.float32, np.float64):
            for shape in ((1, 7), (33, 65), (512, 256)):
                x = (rng.standard_normal(shape) * rng.choice([1e-2, 1.0, 30.0], shape)).astype(
                    dtype
                )
                if isinstance(comp, TopK) and comp.k is not None and comp.k > shape[1]:
                    continue
                for seed in (0, 1, 2**40 + 3):
                    with torch_path(device == "cpu"):
                        got = _sides(comp, x, seed, device)
                    with torch_path(False):
                        ref = _sides(comp, x, seed, "cpu")
                    cases += 1
                    bad += got != ref
                    digest.update(b"".join(ref))
        bad_total += bad
        verdict = "identical" if bad == 0 else f"{bad} DIFFER"
        print(f"  {comp!r:<78.78} {cases:3d} cases {verdict} ({digest.hexdigest()[:12]})")
    return bad_total


def check_supports(device: str) -> int:
    """Supports drawn with torch on ``device`` against numpy's on the host; return differences.

    K1 with uniform rates (geometric gaps over the ziggurat's exponentials) and per-entry rates
    (one uniform per entry), and K2's k-subsets (both of numpy's algorithms), over seeds, rates
    and dimensions; one line each.
    """
    from cvfl_theory._torch_sampling import (
        bernoulli_supports,
        bernoulli_supports_varying,
        k_subset_supports,
    )
    from cvfl_theory.sampling import (
        bernoulli_support,
        bernoulli_support_varying,
        k_subset_support,
    )

    rng = np.random.default_rng(1)
    seeds = [int(s) for s in rng.integers(0, 2**63, 64)]
    bad_total = 0
    cases = bad = 0
    for d in (1, 100, 4096, 100_000):
        for p in (1e-4, 0.01, 0.3, 0.99):
            got = bernoulli_supports(seeds, [p] * len(seeds), d, device)
            for s, g in zip(seeds, got):
                cases += 1
                bad += not np.array_equal(g.cpu().numpy(), bernoulli_support(s, p, d))
    print(f"  {'K1 supports, one rate per node':<78} {cases:3d} cases "
          f"{'identical' if bad == 0 else f'{bad} DIFFER'}")  # fmt: skip
    bad_total += bad
    cases = bad = 0
    for d in (1, 257, 2048):
        probs = rng.uniform(0, 1, (len(seeds), d))
        got = bernoulli_supports_varying(seeds, torch.from_numpy(probs).to(device))
        for s, g, row in zip(seeds, got, probs):
            cases += 1
            bad += not np.array_equal(g.cpu().numpy(), bernoulli_support_varying(s, row))
    print(f"  {'K1 supports, one rate per entry':<78} {cases:3d} cases "
          f"{'identical' if bad == 0 else f'{bad} DIFFER'}")  # fmt: skip
    bad_total += bad
    cases = bad = 0
    for d, ks in ((300, (1, 30, 299)), (20000, (1000, 1001))):  # Floyd's, then a tail shuffle
        for k in ks:
            got = k_subset_supports(seeds[:8], [k] * 8, d, device)
            for s, g in zip(seeds[:8], got):
                cases += 1
                bad += not np.array_equal(g.cpu().numpy(), k_subset_support(s, k, d))
    print(f"  {'K2 supports (k-subsets)':<78} {cases:3d} cases "
          f"{'identical' if bad == 0 else f'{bad} DIFFER'}")  # fmt: skip
    return bad_total + bad


def time_supports(device: str) -> None:
    """Supports of 64 nodes drawn with torch on ``device`` ÷ numpy on the host (reported)."""
    from cvfl_theory._torch_sampling import bernoulli_supports, k_subset_supports
    from cvfl_theory.sampling import bernoulli_support, k_subset_support

    seeds = list(range(64))
    cases = [
        ("K1, d = 4096, p = 0.01", lambda: bernoulli_supports(seeds, [0.01] * 64, 4096, device),
         lambda: [bernoulli_support(s, 0.01, 4096) for s in seeds]),
        ("K1, d = 4096, p = 0.3", lambda: bernoulli_supports(seeds, [0.3] * 64, 4096, device),
         lambda: [bernoulli_support(s, 0.3, 4096) for s in seeds]),
        ("K2, d = 4096, k = 64", lambda: k_subset_supports(seeds, [64] * 64, 4096, device),
         lambda: [k_subset_support(s, 64, 4096) for s in seeds]),
    ]  # fmt: skip
    for name, on_device, on_host in cases:
        on_device()  # warm-up (the ziggurat's tables, torch's first calls)
        t0 = time.perf_counter()
        on_device()
        _sync(device)
        dev = time.perf_counter() - t0
        t0 = time.perf_counter()
        on_host()
        host = time.perf_counter() - t0
        print(f"  {name:<28} {dev * 1e3:8.2f} ms  ÷ numpy {dev / host:6.1f}")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _median_ratio(op: Any, base: Any, device: str) -> tuple[float, float]:
    """Median time of ``op`` (ms) and its ratio to ``base``, interleaved and synchronised."""
    for _ in range(3):
        op(), base()
    t_op, t_base = [], []
    for _ in range(REPEATS):
        _sync(device)
        t0 = time.perf_counter()
        base()
        _sync(device)
        t1 = time.perf_counter()
        op()
        _sync(device)
        t2 = time.perf_counter()
        t_base.append(t1 - t0)
        t_op.append(t2 - t1)
    t_op.sort()
    t_base.sort()
    return 1e3 * t_op[REPEATS // 2], t_op[REPEATS // 2] / t_base[REPEATS // 2]


def time_on_device(device: str) -> None:
    x = torch.from_numpy(np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32))
    x = x.to(device)
    with torch_path(device == "cpu"):
        _time_cases(x, device)


def _time_cases(x: Any, device: str) -> None:
    print(f"  {'compressor':<40} {'c+d ms':>8} {'÷ clone':>8} {'rt ms':>8} {'÷ clone':>8}")
    for comp in compressors():
        cd = _median_ratio(lambda: comp.decompress(comp.compress(x, rng=1)), x.clone, device)
        rt = _median_ratio(lambda: comp.roundtrip(x, rng=1), x.clone, device)
        print(f"  {comp!r:<40.40} {cd[0]:8.2f} {cd[1]:8.1f} {rt[0]:8.2f} {rt[1]:8.1f}")


def cvfl_run(device: str) -> None:
    from cvfl_sim.vfl.config import CVFLConfig
    from cvfl_sim.vfl.data import load_dataset
    from cvfl_sim.vfl.train import train

    ds = load_dataset("digits-quadrants")
    cfg: dict[str, Any] = dict(Q=3, epochs=4, compressor=ScalarQuantizer(3), eval_every=8)
    with torch_path(False):
        cpu = train(ds, CVFLConfig(**cfg))
    with torch_path(device == "cpu"):
        dev = train(ds, CVFLConfig(**cfg, device=device))
    print(
        f"  {'round':>5} | {'loss cpu':>10} {'loss ' + device:>12} | {'acc cpu':>8} {'acc dev':>8}"
    )
    if device == "cpu":
        print("  (the second run: the torch path on the CPU, so the histories must be equal)")
    for a, b in zip(cpu.history, dev.history):
        print(
            f"  {a['round']:>5} | {a['train_loss']:10.6f} {b['train_loss']:12.6f} | "
            f"{a['test_accuracy']:8.4f} {b['test_accuracy']:8.4f}"
        )
    same = cpu.rounds["bits"] == dev.rounds["bits"]
    print(f"  bits on the wire, every round: {'equal' if same else 'DIFFERENT'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:i, or cpu (forced torch path)")
    parser.add_argument("--skip-run", action="store_true", help="leave out the C-VFL run")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: the GPU checks are skipped (run on a machine with one)")
        return 0
    if args.device.startswith("cuda"):
        print(f"device: {torch.cuda.get_device_name(torch.device(args.device))}")
    print("1. bytes of the torch path on the device against the compiled kernels on the CPU")
    bad = check_bytes(args.device)
    print("   supports drawn with torch on the device against numpy's on the host")
    bad += check_supports(args.device)
    print("2. time / torch.clone on the device, (4096, 256) float32")
    time_on_device(args.device)
    print("   supports of 64 nodes drawn with torch on the device ÷ numpy on the host (reported)")
    time_supports(args.device)
    if not args.skip_run:
        print(f"3. C-VFL run, device={args.device!r} beside device='cpu'")
        cvfl_run(args.device)
    print(f"{bad} differing case(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
