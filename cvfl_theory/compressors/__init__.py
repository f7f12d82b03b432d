r"""C-VFL compressors with exact error laws (C2, C5).

One concept per module: :mod:`.base` (interface and wire format), :mod:`.identity`,
:mod:`.scalar` (C5.1), :mod:`.hexagonal` (C5.2, C5.3), :mod:`.topk` (C5.4), :mod:`.report`
(:func:`compare_with_published`, :func:`comparison_table`) and :mod:`.sweep` (:func:`compare_bits`:
every compressor at every bit width, :func:`plot_compressors`).
"""

from .base import Compressed, Compressor
from .hexagonal import HexLatticeQuantizer
from .identity import Identity
from .report import ComparisonReport, compare_with_published, comparison_table
from .scalar import ScalarQuantizer
from .sweep import BitsSweep, compare_bits, plot_compressors
from .topk import TopK

__all__ = [
    "Compressor",
    "Compressed",
    "Identity",
    "ScalarQuantizer",
    "HexLatticeQuantizer",
    "TopK",
    "compare_with_published",
    "ComparisonReport",
    "comparison_table",
    "BitsSweep",
    "compare_bits",
    "plot_compressors",
]
