"""C4.1 (Lemma 1), measured on a real run: right side / left side >= 1 for every block.

A short C-VFL run (breast cancer, 4 MLP parties, linear head, 2-bit dithered scalar quantizer on
every message, Q = 2) with :class:`cvfl_sim.bounds.lemma1.Lemma1Probe` at the first and last local step
of every round. The left side :math:`\\|\\nabla_m F_B(\\Phi_m^t) - \\nabla_m F_B(\\hat\\Phi_m^t)\\|^2`
is computed exactly (two gradients on the round's batch, float64); the right side is
:math:`H_m^2 G_m^2 \\sum_{j\\ne m} E_j` with the chain reading's constants (operator norms of the
embedding Hessian and of the embedding Jacobian), maxima over every probed point, and the round's
realised or expected errors. The check passes iff every ratio is >= 1.
"""

from __future__ import annotations

import numpy as np
import torch

from .result import CheckResult, Comparison


def _stats(r: np.ndarray) -> tuple[float, float, float]:
    f = r[np.isfinite(r)]
    return float(f.min()), float(np.median(f)), float(f.max())


def check() -> CheckResult:
    from cvfl_sim.bounds.lemma1 import Lemma1Probe
    from cvfl_sim.vfl.config import CVFLConfig
    from cvfl_sim.vfl.data import load_dataset
    from cvfl_sim.vfl.train import train
    from cvfl_theory.compressors import ScalarQuantizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        probe = Lemma1Probe(every=1, steps="ends", tight=False)
        cfg = CVFLConfig(
            Q=2,
            lr=0.05,
            epochs=1,
            batch_size=64,
            embedding_size=4,
            compressor=ScalarQuantizer(2, range="minmax-tensor"),
            seed=0,
        )
        train(load_dataset("breast-cancer"), cfg, probe=probe)
    finally:
        torch.set_num_threads(threads)
    rep = probe.report()
    comparisons = []
    lines = []
    worst = np.inf
    for errors in ("realised", "expected"):
        r = rep.ratios(errors)
        for m in range(r.shape[1]):
            lo, med, hi = _stats(r[:, m])
            worst = min(worst, lo)
            who = "server" if m == 0 else f"party {m}"
            comparisons.append(
                Comparison(f"min right/left, {who}, {errors} E", lo, 1.0, 0.0, relation=">=")
            )
            lines.append(f"{who} ({errors} E) min/median/max {lo:.3g}/{med:.3g}/{hi:.3g}")
    return CheckResult(
        label="C4.1",
        claim="Lemma 1: ||grad_m F_B(Phi) - grad_m F_B(Phi_hat)||^2 <= H_m^2 G_m^2 sum_{j!=m} E_j "
        "(chain reading, operator norms) at every probed step of a real run",
        method=f"exact left side at {rep.left.shape[0]} probes (rounds x local steps 0 and Q-1) "
        "of a 2-bit scalar run on breast cancer; constants = maxima over every probed point",
        symbolic=None,
        empirical=float(worst),
        theoretical=1.0,
        tolerance=0.0,
        relation=">=",
        note="right/left per block: " + "; ".join(lines),
        comparisons=tuple(comparisons),
    )
