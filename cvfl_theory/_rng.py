"""Normalisation of the ``rng`` argument accepted everywhere in the toolkit."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["RNGLike", "as_generator", "draw_seeds"]

RNGLike = Any
"""``int | numpy.random.Generator | numpy.random.SeedSequence | torch.Generator | None``."""


def as_generator(rng: RNGLike = None) -> np.random.Generator:
    """Turn the user's ``rng`` argument into a :class:`numpy.random.Generator`.

    Parameters
    ----------
    rng : int, numpy.random.Generator, numpy.random.SeedSequence, torch.Generator or None
        ``None`` draws fresh OS entropy; an int or a seed sequence seeds a new PCG64 generator; a
        :class:`numpy.random.Generator` is used as is (and advanced); a :class:`torch.Generator`
        contributes one 63-bit draw as the seed (and is advanced), so torch-seeded runs are
        reproducible too.

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    TypeError
        For any other type.
    """
    if isinstance(rng, bool):
        raise TypeError("rng must be an int seed, a Generator or None, got a bool")
    if rng is None or isinstance(rng, (int, np.integer, np.random.SeedSequence)):
        if isinstance(rng, (int, np.integer)) and rng < 0:
            raise ValueError(f"rng must be a non-negative integer seed, got {rng}")
        return np.random.default_rng(rng)
    if isinstance(rng, np.random.Generator):
        return rng
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(rng, torch.Generator):
        seed = int(torch.randint(0, 2**63 - 1, (1,), generator=rng).item())
        return np.random.default_rng(seed)
    raise TypeError(
        "rng must be None, an int seed, a numpy.random.Generator, a SeedSequence or a "
        f"torch.Generator; got {type(rng).__name__}"
    )


def draw_seeds(gen: np.random.Generator, count: int, bits: int = 32) -> np.ndarray:
    """Draw ``count`` independent seeds of ``bits`` bits (as ``uint64``) from ``gen``."""
    if not 1 <= bits <= 64:
        raise ValueError(f"seed bits must be in [1, 64], got {bits}")
    high = np.uint64((1 << bits) - 1) if bits < 64 else np.uint64(2**64 - 1)
    return gen.integers(0, high, size=count, dtype=np.uint64, endpoint=True)
