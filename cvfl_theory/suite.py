"""The default verification suite run by ``cvfl verify``: each encoder on a few data sets.

Data sets include real vectors shipped with scikit-learn (no download), a Gaussian set and a
heavy-tailed (log-normal) set in float32.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .encoders import (
    BinaryQuantizationEncoder,
    Encoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
)
from .table import Table
from .verify import VerifyResult, verify

__all__ = ["default_datasets", "default_encoders", "run_suite", "summary_table"]


def default_datasets(seed: int = 0) -> dict[str, np.ndarray]:
    """The suite's data: name → ``(n, d)`` array."""
    from sklearn.datasets import load_breast_cancer, load_digits

    rng = np.random.default_rng(seed)
    digits = load_digits().data[:10].astype(np.float64)  # 10 images x 64 pixels (many zeros)
    cancer = load_breast_cancer().data[:8]
    cancer = ((cancer - cancer.mean(axis=0)) / cancer.std(axis=0)).astype(np.float32)
    return {
        "gaussian 10x48 f64": rng.standard_normal((10, 48)),
        "lognormal 8x40 f32": rng.lognormal(0.0, 1.5, size=(8, 40)).astype(np.float32),
        "digits 10x64 (sklearn)": digits,
        "breast-cancer 8x30 f32 (sklearn)": cancer,
    }


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
    for k, (name, X) in enumerate(default_datasets(seed).items()):
        for j, enc in enumerate(default_encoders(X.shape[0], X.shape[1], seed=seed)):
            yield name, verify(enc, X, trials=trials, rng=1000 * seed + 10 * k + j)


def summary_table(results: list[tuple[str, VerifyResult]]) -> Table:
    """One row per (data set, encoder): the MSE pair, the worst |z| and the verdict."""
    rows = []
    for name, res in results:
        worst = max(res.checks, key=lambda c: c.z / c.threshold)
        rows.append(
            [name, res.encoder, res.mse.theoretical, res.mse.empirical, res.mse.se,
             round(res.mse.z, 2), f"{worst.quantity} {worst.z:.2f}/{worst.threshold:.2f}",
             len(res.checks), res.passed]
        )
    cols = ["data", "encoder", "MSE closed", "MSE sim", "SE", "|z| MSE", "worst check |z|/allowed",
            "checks", "verdict"]
    return Table(cols, rows, title="K1/K2/K3/K5 closed forms vs simulation")
