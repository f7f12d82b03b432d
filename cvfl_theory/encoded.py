r"""The encoded messages of K0–K5 and the decoders that read them.

An :class:`Encoded` holds, for every node :math:`i`, the selected support :math:`D_i`, the values
:math:`Y_i(j)` for :math:`j \in D_i`, the centre :math:`\mu_i` (every other entry of :math:`Y_i` is
:math:`\mu_i`), and the seed :math:`D_i` was drawn from. It is what a receiver knows, so the
decoders below need nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from . import _kernels
from ._backend import ArrayKind
from .compressors._common import type_code
from .rotation import hadamard_rotate_inverse

__all__ = ["NodeMessage", "Encoded", "decode", "average", "dense_coded"]

_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

#: Schemes whose support a receiver can regenerate from (seed, rate, d).
SEEDED_SCHEMES = ("bernoulli", "k-subset")


@dataclass(frozen=True, eq=False)
class NodeMessage:
    r"""One node's encoded vector :math:`Y_i`.

    Attributes
    ----------
    support : numpy.ndarray
        Sorted ``int64`` indices :math:`D_i` of the selected entries.
    values : numpy.ndarray
        :math:`Y_i(j)` for :math:`j \in D_i` (same order), in the data's dtype.
    centre : float
        :math:`\mu_i`; :math:`Y_i(j) = \mu_i` for :math:`j \notin D_i`.
    seed : int
        Seed of the node's support draw (:func:`cvfl_theory.sampling.node_generator`).
    rate : float
        Sampling parameter the support was drawn with: :math:`p_i` for ``"bernoulli"``,
        :math:`k_i` for ``"k-subset"``, NaN where it varies per entry.
    """

    support: np.ndarray
    values: np.ndarray
    centre: float
    seed: int
    rate: float = float("nan")

    def __post_init__(self) -> None:
        # read-only: n_nonzero is counted once, and a message is what was sent
        self.values.setflags(write=False)

    @cached_property
    def n_nonzero(self) -> int:
        r""":math:`s_i = |\{j : Y_i(j) \neq \mu_i\}|` (K3), counted once per message."""
        return int(np.count_nonzero(self.values != self.values.dtype.type(self.centre)))


@dataclass(frozen=True, eq=False)
class Encoded:
    r"""All nodes' messages :math:`Y_1, \dots, Y_n` plus what the receiver must know.

    Attributes
    ----------
    scheme : str
        How supports were drawn: ``"bernoulli"`` (one :math:`p` per node, K1), ``"bernoulli-varying"``
        (per-entry :math:`p_{ij}`, K1/K5.1), ``"k-subset"`` (K2).
    d : int
        Length of each :math:`Y_i` (after padding, for the rotation baseline).
    dtype : numpy.dtype
        Data dtype.
    nodes : tuple of NodeMessage
        One message per node.
    centre_sent : bool
        Whether :math:`\mu_i` must be transmitted (:math:`\bar r = r`) or is known in advance
        (:math:`\bar r = 0`, the ``mu="zero"`` case).
    kind : ArrayKind
        The array kind of the input, so decoders return the same kind.
    rotation_seed : int or None
        K5.2: seed of the random signs of the shared rotation; ``None`` if not rotated.
    original_d : int
        Dimension before padding (equals ``d`` unless rotated).
    """

    scheme: str
    d: int
    dtype: np.dtype
    nodes: tuple[NodeMessage, ...]
    centre_sent: bool
    kind: ArrayKind = field(default_factory=ArrayKind)
    rotation_seed: int | None = None
    original_d: int = -1

    def __post_init__(self) -> None:
        if self.original_d < 0:
            object.__setattr__(self, "original_d", self.d)

    @property
    def n(self) -> int:
        """Number of nodes."""
        return len(self.nodes)

    @property
    def centres(self) -> np.ndarray:
        r"""The centres :math:`\mu_i` as a float64 array."""
        return np.array([m.centre for m in self.nodes], dtype=np.float64)

    def __repr__(self) -> str:
        """One line: scheme, sizes, dtype, entries sent and the K3 non-zero count (no arrays)."""
        sent = sum(len(m.support) for m in self.nodes)
        nnz = sum(m.n_nonzero for m in self.nodes)
        rot = "" if self.rotation_seed is None else f", rotation_seed={self.rotation_seed}"
        pad = "" if self.original_d == self.d else f", original_d={self.original_d}"
        return (
            f"Encoded(scheme={self.scheme!r}, n={self.n}, d={self.d}{pad}, "
            f"dtype={np.dtype(self.dtype).name}, sent={sent}, nnz={nnz}, "
            f"centre_sent={self.centre_sent}{rot})"
        )


def dense_coded(encoded: Encoded) -> np.ndarray:
    """All :math:`Y_i` as an ``(n, d)`` array in the (possibly rotated) coding domain."""
    Y = np.empty((encoded.n, encoded.d), dtype=encoded.dtype)
    for i, m in enumerate(encoded.nodes):
        Y[i] = m.centre
        Y[i, m.support] = m.values
    return Y


def decode(encoded: Encoded) -> Any:
    r"""Return every node's :math:`Y_i` as an ``(n, d)`` array of the input's kind.

    For the rotation baseline (K5.2) each :math:`Y_i` is rotated back and the padding dropped.
    """
    Y = dense_coded(encoded)
    if encoded.rotation_seed is not None:
        Y = hadamard_rotate_inverse(Y, encoded.rotation_seed)[:, : encoded.original_d]
        Y = _check_finite(Y, encoded.dtype)
    return encoded.kind.wrap(Y)


def _check_finite(Y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    r"""``Y`` cast to ``dtype`` if finite there; else ``ValueError`` (a rotated-back overflow).

    Finite values :math:`y` give :math:`|(HDy)_j| \le \sqrt{d'}\max|y|`, which can exceed the
    dtype's range only for values no encoder of finite data produces (a forged message).
    """
    with np.errstate(over="ignore"):  # an overflow is refused just below
        Y = Y.astype(dtype, copy=False)
    if not np.isfinite(Y).all():
        raise ValueError(f"decoded values overflow {np.dtype(dtype)}: corrupted message")
    return Y


def _scatter_add(acc: np.ndarray, m: NodeMessage, scale: float) -> bool:
    """``acc[support] += (values - centre) * scale`` in one compiled pass, if it applies.

    The same float64 operations in the same order as the numpy loop of :func:`average`; it
    applies to float32/64 values on strictly increasing int64 indices in range (what every
    encoder and every parsed message has), and returns False, leaving ``acc`` alone, otherwise.
    """
    v, idx = m.values, m.support
    if v.dtype not in _KERNEL_DTYPES or idx.dtype != np.int64 or v.shape != idx.shape:
        return False
    v, idx = np.ascontiguousarray(v), np.ascontiguousarray(idx)
    return bool(
        _kernels.scatter_add(acc, acc.size, idx, idx.size, v, type_code(v), m.centre, scale)
    )


def average(encoded: Encoded) -> Any:
    r"""The averaging decoder :math:`\gamma(Y_1, \dots, Y_n) = \frac1n \sum_i Y_i` (K0).

    Works in :math:`O(\sum_i |D_i| + d)`: :math:`\frac1n\sum_i \mu_i` everywhere plus the scattered
    :math:`(Y_i(j) - \mu_i)/n` on each support, accumulated in float64.
    """
    n = encoded.n
    acc = np.full(encoded.d, encoded.centres.mean(), dtype=np.float64)
    scale = 1.0 / n
    for m in encoded.nodes:
        if m.support.size and not _scatter_add(acc, m, scale):
            v = m.values.astype(np.float64)  # always a fresh array: updated in place
            if m.centre:
                v -= m.centre
            v *= scale
            acc[m.support] += v
    if encoded.rotation_seed is not None:
        acc = hadamard_rotate_inverse(acc[None, :], encoded.rotation_seed)[0, : encoded.original_d]
        return encoded.kind.wrap(_check_finite(acc, encoded.dtype))
    return encoded.kind.wrap(acc.astype(encoded.dtype, copy=False))
