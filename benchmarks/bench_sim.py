"""C-VFL simulator speed, as ratios measured in one run (never timed assertions).

Epoch time of C-VFL (Algorithm 1, C1) with ``Q = 1`` ÷ epoch time of plain joint-model
mini-batch SGD on the same data, models, batches and initialisation: target <= 1.5 with identity
compressors and <= 3 with ``HexLatticeQuantizer(bits=2)`` on every message.

Two set-ups are reported:

- ``cnn/views``: digits-views-4 with small CNN parties and a linear server, the stand-in of the
  paper's ModelNet10 experiment;
- ``mlp/quadrants``: digits-quadrants with tiny MLP parties (16 → 32 → 8), where a step costs about
  a millisecond, so per-message overhead (compressor calls, the stacked server copies) dominates.

Both are judged against the same targets; a MISS on either is printed as such.

Each timing is the minimum over interleaved repeats, so background load affects both sides alike.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import load_dataset
from cvfl_sim.vfl.joint_sgd import joint_sgd
from cvfl_sim.vfl.train import train

REPEATS = 5

SETUPS: dict[str, tuple[str, dict[str, Any]]] = {
    "cnn/views": ("digits-views-4", {"parties_model": "cnn", "batch_size": 64, "epochs": 1}),
    "mlp/quadrants": ("digits-quadrants", {"batch_size": 128, "epochs": 4}),
}


def _ratio(ds, cfg) -> tuple[float, float]:
    train(ds, cfg)  # warm-up (imports, allocator)
    joint_sgd(ds, cfg)
    cs, js = [], []
    for _ in range(REPEATS):  # interleaved
        cs.append(float(train(ds, cfg).summary["train_seconds"]) / cfg.epochs)
        js.append(joint_sgd(ds, cfg)[2] / cfg.epochs)
    return min(cs), min(js)


def main() -> int:
    torch.set_num_threads(1)
    from cvfl_theory.compressors import HexLatticeQuantizer, Identity

    comps = [
        ("identity", Identity(), 1.5),
        ("HexLattice(bits=2)", HexLatticeQuantizer(bits=2), 3.0),
    ]
    print(
        f"C-VFL (Q=1) epoch time / joint-model SGD epoch time; min of {REPEATS} interleaved repeats"
    )
    print(
        f"{'set-up':<15} {'compressor':<20} {'C-VFL s/ep':>10} {'joint s/ep':>10} {'ratio':>6} "
        f"{'target':>7}"
    )
    misses = []
    for setup, (name, extra) in SETUPS.items():
        ds = load_dataset(name)
        for cname, comp, target in comps:
            cfg = CVFLConfig(Q=1, lr=0.05, eval_every=10**9, compressor=comp, **extra)
            c, j = _ratio(ds, cfg)
            verdict = "PASS" if c / j <= target else "MISS"
            if verdict == "MISS":
                misses.append(f"{setup} {cname}")
            print(
                f"{setup:<15} {cname:<20} {c:10.4f} {j:10.4f} {c / j:6.2f} "
                f"{'<= ' + str(target):>7} {verdict}"
            )
    print("all targets met" if not misses else "MISS: " + ", ".join(misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
