r"""The compressors of the paper's experiments by name: ``make_compressor("lattice", 3)`` (C5).

The names a sweep, ``cvfl train --compressor`` and ``cvfl bound`` use: ``scalar``
(:class:`~cvfl_theory.compressors.ScalarQuantizer`, C5.1), ``lattice``
(:class:`~cvfl_theory.compressors.HexLatticeQuantizer`, C5.2), ``topk``
(:class:`~cvfl_theory.compressors.TopK`, C5.4) and ``none``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COMPRESSORS", "RANGE", "EF_SUFFIX", "make_compressor"]

COMPRESSORS = ("scalar", "lattice", "topk")

RANGE = "minmax-tensor"
"""Quantizer range: min–max of each message, sent as two float32 per message (C5.5)."""

EF_SUFFIX = "+ef"
"""A compressor kind ending in this (``"scalar+ef"``) runs with error feedback (C9)."""


def make_compressor(kind: str, bits: int) -> Any:
    """The compressor of a sweep cell; ``bits = 32`` is the uncompressed ``Identity()`` baseline.

    ``scalar``: :class:`ScalarQuantizer` (C5.1); ``lattice``: :class:`HexLatticeQuantizer`
    (C5.2); ``topk``: :class:`TopK` with ``k = P b / 32`` (C5.4, index bits counted). Quantizers use
    the min–max range of each message (:data:`RANGE`). A kind ending in :data:`EF_SUFFIX` is the
    same compressor (the run adds error feedback).
    """
    from cvfl_theory.compressors import Identity

    kind = kind.removesuffix(EF_SUFFIX)
    if bits == 32 or kind == "none":
        return Identity()
    if kind == "scalar":
        from cvfl_theory.compressors import ScalarQuantizer

        return ScalarQuantizer(bits, range=RANGE)
    if kind == "lattice":
        from cvfl_theory.compressors import HexLatticeQuantizer

        return HexLatticeQuantizer(bits=bits, range=RANGE)
    if kind == "topk":
        from cvfl_theory.compressors import TopK

        return TopK(bits=bits)
    raise ValueError(f"compressor kind must be one of {COMPRESSORS} or 'none', got {kind!r}")
