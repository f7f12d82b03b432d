r"""K5.2 — the randomized Hadamard rotation of Suresh et al. (2017), the comparison baseline.

The rotation is :math:`R = H D` with :math:`H` the normalised Walsh–Hadamard matrix of size
:math:`d' = 2^{\lceil \log_2 d \rceil}` (:math:`H^\top H = I`, :math:`H = H^\top`) and :math:`D` a
diagonal of random signs drawn from a seed. Inputs are zero-padded to :math:`d'`. Because :math:`R`
is orthogonal, a quantization error :math:`e` in the rotated domain becomes :math:`R^\top e` with the
same squared norm, which is why the MSE of the rotated encoder is the K5.1 formula evaluated on the
rotated vectors (see :class:`cvfl_theory.encoders.RotatedBinaryEncoder`).

References
----------
A. T. Suresh, F. X. Yu, S. Kumar, H. B. McMahan. Distributed mean estimation with limited
communication. ICML 2017.
"""

from __future__ import annotations

import functools

import numpy as np

from ._validate import check_int_in_range, raise_not_finite
from .sampling import node_generator

_FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _checked_rows(X: np.ndarray, name: str) -> np.ndarray:
    """``X`` as a finite 2-D float array of rows, **not** copied when it already is one.

    A float16/32/64 numpy array keeps its dtype (each value is exact in float64); anything else
    is converted by ``np.asarray(X, dtype=np.float64)``.
    """
    if isinstance(X, np.ndarray) and X.dtype in _FLOAT_DTYPES:
        a = X
    else:
        a = np.asarray(X, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] < 1:
        raise ValueError(f"{name} must be 2-D with shape (n, d), d >= 1, got shape {a.shape}")
    raise_not_finite(a, name)
    return a


def _check_seed(seed: int) -> int:
    return check_int_in_range(seed, "seed", 0, 2**64 - 1)


__all__ = ["padded_dimension", "random_signs", "fwht", "hadamard_rotate", "hadamard_rotate_inverse"]


def padded_dimension(d: int) -> int:
    """Smallest power of two ``>= d`` (``d`` an integer in ``[1, 2**62]``)."""
    d = check_int_in_range(d, "d", 1, 2**62)
    return 1 << max(0, int(d - 1).bit_length())


_CACHED_SIGNS_MAX_D = 1 << 16
"""Sign vectors up to this length are kept (32 of them: at most 16 MiB): an encoder rotates
with one seed at every encode and average, and drawing the signs cost as much as the FWHT."""


def _draw_signs(seed: int, d: int) -> np.ndarray:
    """``d`` signs in ``{-1, +1}`` drawn from a checked ``seed`` (a new array)."""
    return node_generator(seed).integers(0, 2, size=d).astype(np.float64) * 2.0 - 1.0


@functools.lru_cache(maxsize=32)
def _cached_signs(seed: int, d: int) -> np.ndarray:
    """:func:`_draw_signs`, read-only: the array is shared by every caller."""
    s = _draw_signs(seed, d)
    s.flags.writeable = False
    return s


def _signs(seed: int, d: int) -> np.ndarray:
    """The signs of a checked ``seed`` and ``d``: from the cache where ``d`` is small enough."""
    return _cached_signs(seed, d) if d <= _CACHED_SIGNS_MAX_D else _draw_signs(seed, d)


def random_signs(seed: int, d: int) -> np.ndarray:
    """The diagonal of :math:`D`: ``d`` independent signs in ``{-1, +1}`` drawn from ``seed``."""
    d = check_int_in_range(d, "d", 1, 2**40)
    return np.array(_signs(_check_seed(seed), d))  # a copy: the caller may write to it


def _fwht_inplace(Y: np.ndarray) -> np.ndarray:
    """Normalised FWHT of each row of ``Y`` **in place** and ``Y`` returned.

    ``Y`` must be a C-contiguous 2-D float64 array (checked by the caller) whose row length is
    a power of two.
    """
    n, d = Y.shape
    h = 1
    while h < d:
        V = Y.reshape(n, d // (2 * h), 2, h)
        a = V[:, :, 0, :].copy()
        V[:, :, 0, :] += V[:, :, 1, :]
        V[:, :, 1, :] = a - V[:, :, 1, :]
        h *= 2
    Y *= 1.0 / np.sqrt(d)
    return Y


def fwht(X: np.ndarray) -> np.ndarray:
    r"""Normalised fast Walsh–Hadamard transform of each row (length a power of two).

    :math:`O(d \log d)` per row, returns a new float64 array (``X`` is not modified); applying it
    twice gives back the input.

    Examples
    --------
    >>> x = np.array([[1.0, 2.0, 3.0, 4.0]])
    >>> np.allclose(fwht(fwht(x)), x)
    True
    """
    X = _checked_rows(X, "X")
    d = X.shape[1]
    if d & (d - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {d}")
    return _fwht_inplace(np.array(X, dtype=np.float64, order="C"))


def hadamard_rotate(X: np.ndarray, seed: int) -> np.ndarray:
    r"""Rows of ``X`` zero-padded to :math:`d'` and rotated: :math:`H D x` (float64).

    ``X`` is validated once and copied once, into the padded array that is then transformed in
    place.
    """
    X = _checked_rows(X, "X")
    n, d = X.shape
    dp = padded_dimension(d)
    Z = np.zeros((n, dp), dtype=np.float64)
    Z[:, :d] = X
    Z *= _signs(_check_seed(seed), dp)
    return _fwht_inplace(Z)


def hadamard_rotate_inverse(Z: np.ndarray, seed: int) -> np.ndarray:
    r"""Inverse rotation :math:`D H z` of rows of length :math:`d'` (float64, still padded)."""
    Y = fwht(Z)
    Y *= _signs(_check_seed(seed), Y.shape[1])
    return Y
