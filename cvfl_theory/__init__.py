"""cvfl_theory — randomized mean estimation and C-VFL compression, with their closed forms.

The public names are importable from here directly: encoders (K1, K2, K5), protocols (K3),
Table 1 (K4), optimal probabilities (K6), verification, and — from
:mod:`cvfl_theory.compressors` and :mod:`cvfl_theory.bounds` — the C-VFL compressors (C5) and
convergence bounds (C4).
"""

from .encoded import Encoded, NodeMessage, average, decode
from .encoders import (
    BinaryQuantizationEncoder,
    Encoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
)
from .optimal import OptimalResult, mse_bounds, optimal_probabilities
from .protocols import (
    BinaryProtocol,
    NaiveProtocol,
    Protocol,
    SeededSparseProtocol,
    SparseProtocol,
    VaryingLengthProtocol,
)
from .section5 import table1
from .table import Table
from .tradeoff import plot_tradeoff, tradeoff_curve
from .verify import VerifyResult, verify
from .waterfill import WaterFillResult, water_fill

__all__ = [
    "Encoded",
    "NodeMessage",
    "average",
    "decode",
    "Encoder",
    "IndependentEncoder",
    "FixedSizeEncoder",
    "BinaryQuantizationEncoder",
    "RotatedBinaryEncoder",
    "Protocol",
    "NaiveProtocol",
    "VaryingLengthProtocol",
    "SparseProtocol",
    "SeededSparseProtocol",
    "BinaryProtocol",
    "table1",
    "Table",
    "verify",
    "VerifyResult",
    "water_fill",
    "WaterFillResult",
    "optimal_probabilities",
    "OptimalResult",
    "mse_bounds",
    "tradeoff_curve",
    "plot_tradeoff",
]

__version__ = "0.1.0"
