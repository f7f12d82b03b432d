"""The default verification suite run by ``cvfl verify``: each encoder on a few data sets.

The data (:func:`cvfl_sim.experiments.reference_data.verification_datasets`) include real vectors shipped with
scikit-learn (no download), a Gaussian set and a heavy-tailed (log-normal) set in float32.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from cvfl_theory.encoders import (
    BinaryQuantizationEncoder,
    Encoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
)
from cvfl_theory.table import Table
from cvfl_theory.verify import VerifyResult, verify

from .reference_data import verification_datasets

__all__ = ["default_encoders", "run_suite", "summary_table"]


def default_encoders(n: int, d: int, seed: int = 0) -> list[Encoder]:
    """One encoder of each kind, sized for an ``(n, d)`` data set."""
    p_full = np.random.default_rng(seed + 1).uniform(0.05, 1.0, size=(n, d))
    return [
        IndependentEncoder(0.25, mu="mean"),
        IndependentEncoder(p_full, mu="zero"),
        FixedSizeEncoder(max(1, d // 4), mu="mean"),
        BinaryQuantizationEncoder(),
        RotatedBinaryEncoder(rotation_seed=seed),
    ]


def run_suite(trials: int = 1000, seed: int = 0) -> Iterator[tuple[str, VerifyResult]]:
    """Yield ``(data set name, result)`` for every encoder on every default data set."""
    for k, (name, X) in enumerate(verification_datasets(seed).items()):
        for j, enc in enumerate(default_encoders(X.shape[0], X.shape[1], seed=seed)):
            yield name, verify(enc, X, trials=trials, rng=1000 * seed + 10 * k + j)


def summary_table(results: list[tuple[str, VerifyResult]]) -> Table:
    """One row per (data set, encoder): the MSE pair, the worst :math:`|z|` and the verdict."""
    rows = []
    for name, res in results:
        worst = max(res.checks, key=lambda c: c.z / c.threshold)
        rows.append(
            [
                name,
                res.encoder,
                res.mse.theoretical,
                res.mse.empirical,
                res.mse.se,
                round(res.mse.z, 2),
                f"{worst.quantity} {worst.z:.2f}/{worst.threshold:.2f}",
                len(res.checks),
                res.passed,
            ]
        )
    cols = [
        "data",
        "encoder",
        "MSE closed",
        "MSE sim",
        "SE",
        "|z| MSE",
        "worst check |z|/allowed",
        "checks",
        "verdict",
    ]
    return Table(cols, rows, title="K1/K2/K3/K5 closed forms vs simulation")
