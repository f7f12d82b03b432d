"""cvfl_theory — randomized mean estimation and C-VFL compression, with their closed forms.

The public names of the encoders, protocols, Section-5 examples and verification are importable
from here directly.
"""

from .encoded import Encoded, NodeMessage, average, decode
from .encoders import (
    BinaryQuantizationEncoder,
    Encoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
)

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
]

__version__ = "0.1.0"
