"""Reading the paper's CIFAR-10 binary files: the reader against ``numpy.fromfile`` (issue 21).

Full-size synthetic batches (5 × 10 000 training and 10 000 test records of 3073 bytes, 184 MB)
are written to a temporary folder; then, interleaved so that both see the same page cache and
load (:func:`_timing.paired_ratio`):

- ``read_cifar10`` (every file's size, record count and labels checked, the images read into one
  array) ÷ ``numpy.fromfile`` of the same six files, keeping the six arrays as a loader keeps
  them (target ≤ 2);
- building the vertically partitioned data set (four 16×16 quadrants as float64, 1.5 GB) ÷
  ``numpy.fromfile``, reported, no target: it is bounded by writing eight times the bytes read.

A roofline line beside the ratios: the bytes read per second of ``numpy.fromfile`` itself.
Run with ``python benchmarks/bench_data.py`` (``make bench``); nothing here is asserted in tests.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from _timing import cpu_line, paired_ratio, verdict

from cvfl_sim.vfl.data import cifar10_quadrants
from cvfl_sim.vfl.paper_files import (
    CIFAR10_RECORD_BYTES,
    CIFAR10_TEST_FILE,
    CIFAR10_TRAIN_FILES,
    read_cifar10,
)

TARGET = 2.0


def write_batches(folder: str) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for name in (*CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE):
        rec = rng.integers(0, 256, size=(10_000, CIFAR10_RECORD_BYTES), dtype=np.uint8)
        rec[:, 0] %= 10
        path = os.path.join(folder, name)
        rec.tofile(path)
        paths.append(path)
    return paths


def main() -> int:
    print(f"{cpu_line()}; numpy {np.__version__}")
    with tempfile.TemporaryDirectory() as folder:
        paths = write_batches(folder)
        total = sum(os.path.getsize(p) for p in paths)

        def fromfile() -> list[np.ndarray]:
            # the six arrays are kept, as a loader keeps them (not freed one by one and reused)
            return [np.fromfile(p, dtype=np.uint8) for p in paths]

        ratio, t_read, t_base = paired_ratio(lambda: read_cifar10(folder), fromfile, repeats=9)
        print(
            f"read_cifar10 / numpy.fromfile: {ratio:.2f} (target <= {TARGET:g}: "
            f"{verdict(ratio, TARGET)}); {t_read * 1e3:.0f} ms vs "
            f"{t_base * 1e3:.0f} ms for {total / 1e6:.0f} MB "
            f"(fromfile at {total / t_base / 1e9:.2f} GB/s)"
        )
        build, t_build, t_base2 = paired_ratio(
            lambda: cifar10_quadrants(folder), fromfile, repeats=3, warmup=1
        )
        print(
            f"cifar10_quadrants (float64 data set) / numpy.fromfile: {build:.1f} "
            f"({t_build:.2f} s; writes {8 * total / 1e9:.1f} GB of float64), no target"
        )
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
