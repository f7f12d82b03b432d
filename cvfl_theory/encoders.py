r"""Randomized encoders of [KR]_: K1 (independent support), K2 (fixed-size support), K5.

Every encoder draws node :math:`i`'s random support :math:`D_i` from a per-node seed recorded in the
:class:`~cvfl_theory.encoded.Encoded` message, so a receiver can regenerate it from the seed alone
and the same ``rng`` gives the same bits. All encoders share one interface:

- ``encode(X, rng=None) -> Encoded`` for ``X`` of shape ``(n, d)`` (numpy or torch);
- ``decode(encoded)`` — the ``(n, d)`` array of :math:`Y_i`, same kind as ``X``;
- ``average(encoded)`` — the averaging decoder :math:`\frac1n\sum_i Y_i`, shape ``(d,)``;
- ``mse(X)`` — the closed-form :math:`\mathbb E\|\frac1n\sum_i Y_i - \bar X\|^2`;
- ``marginals(X)`` — inclusion probabilities :math:`P(j \in D_i)` and centres :math:`\mu_i`, from
  which the protocols compute expected bits (K3).

References
----------
- [KR]_ J. Konečný, P. Richtárik. Randomized distributed mean estimation: accuracy vs
   communication. Frontiers in Applied Mathematics and Statistics, 2018.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from . import _kernels
from ._backend import to_numpy
from ._rng import RNGLike, as_generator, draw_seeds
from ._torch_sampling import bernoulli_supports, bernoulli_supports_varying, k_subset_supports
from ._validate import (
    as_float_array,
    as_matrix,
    check_int_in_range,
    check_matrix,
    check_matrix_and_row_sums,
    check_matrix_row_sums,
    check_probabilities,
    raise_mse_overflow,
    raise_not_finite,
    row_sums,
    squared_deviations,
)
from .compressors._common import type_code
from .compressors._torch_kernels import uses_torch_path
from .encoded import Encoded, NodeMessage
from .encoded import average as _average
from .encoded import decode as _decode
from .rotation import hadamard_rotate
from .sampling import (
    bernoulli_support,
    bernoulli_support_varying,
    k_subset_support,
    node_generators,
)

__all__ = [
    "Encoder",
    "CENTRE_NAMES",
    "IndependentEncoder",
    "FixedSizeEncoder",
    "BinaryQuantizationEncoder",
    "RotatedBinaryEncoder",
    "CentreSpec",
]

CentreSpec = Any
"""``"mean" | "zero" | "min" | float | array of shape (n,)``."""

CENTRE_NAMES = ("mean", "zero", "min")


def _check_centre_spec(mu: CentreSpec) -> CentreSpec:
    if isinstance(mu, str):
        if mu not in CENTRE_NAMES:
            raise ValueError(
                f"mu must be one of {CENTRE_NAMES}, a float or an (n,) array; got {mu!r}"
            )
        return mu
    arr = as_float_array(mu, "mu", ndims=tuple(range(33)), finite=False)
    if arr.ndim > 1:
        raise ValueError(f"mu must be a float or an (n,) array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise_not_finite(arr, "mu")
    return arr


_row_sums = row_sums  # the method argument of Encoder.centres shadows the function's name


def _working_dtype(dtype: np.dtype) -> np.dtype:
    """Arithmetic precision for encoding: float32 for float16/32 data, float64 otherwise."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _check_representable(values: np.ndarray, dtype: np.dtype) -> None:
    if not np.isfinite(values).all():
        raise ValueError(
            f"an encoded value (X - mu)/p overflows {dtype}: the data are too large for this "
            "sampling probability in this precision; use a larger p or a wider float dtype"
        )


class Encoder(ABC):
    r"""Base class: an encoding protocol :math:`\alpha` with the averaging decoder :math:`\gamma`.

    Subclasses define how centres are chosen, how a node's support is drawn, the values sent on it,
    and the inclusion probabilities; encoding, decoding and the MSE formula are shared.
    """

    #: How supports are drawn (see :class:`~cvfl_theory.encoded.Encoded`).
    scheme: str = "bernoulli-varying"
    #: Bits of each per-node seed (the seeded protocol's :math:`\bar r_s` must be at least this).
    seed_bits: int = 32

    def __init__(self, mu: CentreSpec = "mean") -> None:
        self.mu = _check_centre_spec(mu)

    # ----------------------------------------------------------------- pieces subclasses define
    @abstractmethod
    def _node_rate(self, i: int, n: int, d: int) -> float:
        """The sampling parameter recorded in the message (``p_i``, ``k_i`` or NaN)."""

    @abstractmethod
    def _support(
        self, gen: np.random.Generator, i: int, x: np.ndarray, centre: float
    ) -> np.ndarray:
        """Draw node ``i``'s support from ``gen``, its seed's node generator.

        ``gen`` is in the state :func:`~cvfl_theory.sampling.node_generator` starts from. It
        is valid during this call only (it is re-seeded for the next node): draw from it, never
        keep it, and do not use its ``seed_seq`` or ``spawn`` (only the bit stream is the
        seed's).
        """

    def _device_supports(
        self, Xn: np.ndarray, seeds: list[int], device: str | None
    ) -> list[np.ndarray] | None:
        """Every node's support, drawn with torch on ``device``; ``None``: drawn on the host.

        The torch path (a CUDA tensor, or ``CVFL_KERNEL_PATH=torch``) of every scheme
        (:mod:`cvfl_theory._torch_sampling`: the same indices as :meth:`_support`); the base
        class has none.
        """
        return None

    @abstractmethod
    def _values(self, x_sel: np.ndarray, idx: np.ndarray, i: int, x: np.ndarray, centre: float):
        """:math:`Y_i(j)` on the support, in the working precision (``x_sel`` may be reused)."""

    @abstractmethod
    def _marginals(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Inclusion probabilities and centres for a validated array."""

    def domain(self, X: Any) -> np.ndarray:
        """``X`` validated and mapped to the coding domain (rotated and padded for K5.2)."""
        return self._prepare(X)[0]

    def marginals(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        r"""Inclusion probabilities :math:`P(j \in D_i)` and centres in the coding domain (float64).

        Returns
        -------
        p : numpy.ndarray
            ``(n, d)`` array of :math:`P(j \in D_i)`.
        centres : numpy.ndarray
            ``(n,)`` array of :math:`\mu_i`.
        """
        return self._marginals(self.domain(X))

    def _check_shape(self, n: int, d: int) -> None:
        """Check parameters against the data shape (subclasses extend)."""

    # ----------------------------------------------------------------- shared machinery
    @property
    def centre_sent(self) -> bool:
        r"""Whether :math:`\mu_i` depends on the data and must be sent (:math:`\bar r = r`)."""
        return not (isinstance(self.mu, str) and self.mu == "zero")

    def centres(self, X: Any, row_sums: np.ndarray | None = None) -> np.ndarray:
        r"""The centres :math:`\mu_i` for ``X`` as float64, rounded to ``X``'s precision (K1).

        ``mu="mean"`` is the node mean :math:`\mu_i = \frac1d \sum_j X_i(j)` (K1, K2;
        it minimises K1.2 for a uniform ``p``) computed as :math:`\mathrm{fl}(s_i / d)` rounded to
        ``X``'s dtype, where :math:`s_i` is the float64 row sum in the fixed order of
        :func:`~cvfl_theory._validate.row_sums` (16 lanes, entry :math:`j` in lane
        :math:`j \bmod 16`, the lanes combined by halving): the same bits on every machine,
        kernel path and thread count, so the message of a given ``rng`` is too. If a float64
        :math:`s_i` overflows, :math:`\mu_i` is the same-order sum of the values
        :math:`\mathrm{fl}(X_i(j) / d)`. ``mu="min"`` is the row minimum, a zero minimum as
        :math:`+0` (numpy's vectorised minimum returns either zero, depending on the CPU).

        ``X`` is validated (and made C-contiguous) here, which computes its row sums on the way;
        a caller that has validated ``X`` already passes the sums as ``row_sums``.
        """
        if row_sums is None:
            X, _, row_sums = check_matrix_and_row_sums(X)
        return self._centres(X, row_sums)

    def _centres(self, X: np.ndarray, row_sums: np.ndarray | None = None) -> np.ndarray:
        """:meth:`centres` of an ``X`` already validated (C-contiguous); no second check."""
        n = X.shape[0]
        if isinstance(self.mu, str):
            if self.mu == "zero":
                c = np.zeros(n)
            elif self.mu == "min":
                c = X.min(axis=1) + 0.0  # -0 -> +0: numpy's SIMD min returns either zero
            else:
                # One summation for encode, mse and the optimiser alike, in the fixed order of
                # row_sums (float64), so the same data give the same centres on every machine.
                if row_sums is None:
                    row_sums = _row_sums(X)
                if np.isfinite(row_sums).all():
                    c = row_sums / X.shape[1]
                else:  # the sum overflowed: average pre-scaled values
                    c = _row_sums(X.astype(np.float64) / X.shape[1])
        else:
            c = np.broadcast_to(self.mu, (n,)) if self.mu.ndim == 0 else self.mu
            if c.shape != (n,):
                raise ValueError(f"mu has shape {self.mu.shape}, expected ({n},) for n={n} nodes")
        return np.asarray(c).astype(X.dtype).astype(np.float64)

    def _prepare(self, X: Any) -> tuple[np.ndarray, Any]:
        Xn, kind = check_matrix(X)
        self._check_shape(*Xn.shape)
        return Xn, kind

    def encode(self, X: Any, rng: RNGLike = None) -> Encoded:
        r"""Encode every row of ``X`` (shape ``(n, d)``) into :math:`Y_i`.

        Parameters
        ----------
        X : numpy.ndarray or torch.Tensor
            The nodes' vectors, one per row; finite, float16/32/64.
        rng : int, Generator, torch.Generator or None
            Source of the per-node seeds.

        Returns
        -------
        Encoded
        """
        Xn, kind = as_matrix(X)
        self._check_shape(*Xn.shape)
        if self._rows_checked_in_pass(Xn):  # each row is checked for NaN/inf as it is read
            return self._encode_array(Xn, kind, rng, check_rows=True)
        sums = check_matrix_row_sums(Xn)  # validates and feeds mu="mean"
        return self._encode_array(Xn, kind, rng, row_sums=sums)

    def _rows_checked_in_pass(self, Xn: np.ndarray) -> bool:
        """Whether encoding checks each row of ``Xn`` for NaN/inf as it reads it.

        Then the separate pass over ``X`` is skipped; only for centres that do not read ``X``.
        """
        return False

    def _encode_array(
        self,
        Xn: np.ndarray,
        kind: Any,
        rng: RNGLike,
        row_sums: Any = None,
        check_rows: bool = False,
        **extra: Any,
    ) -> Encoded:
        seeds = [int(s) for s in draw_seeds(as_generator(rng), Xn.shape[0], self.seed_bits)]
        centres = self._centres(Xn, row_sums)
        supports = self._device_supports(Xn, seeds, kind.device) if uses_torch_path(kind) else None
        if supports is None:
            supports = [
                self._support(gen, i, Xn[i], centres[i])
                for i, gen in enumerate(node_generators(seeds))  # one generator, re-seeded
            ]
        return self._encode_given(Xn, kind, supports, seeds, centres, check_rows, **extra)

    def _encode_given(
        self,
        Xn: np.ndarray,
        kind: Any,
        supports: list[np.ndarray],
        seeds: list[int],
        centres: np.ndarray,
        check_rows: bool = False,
        **extra: Any,
    ) -> Encoded:
        """The message for given supports (the deterministic part of encoding).

        ``check_rows``: ``Xn`` has not been checked for NaN/inf yet (see
        :meth:`_rows_checked_in_pass`); :meth:`_sent_values` checks each row.
        """
        n, d = Xn.shape
        wd = _working_dtype(Xn.dtype)
        nodes = []
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked per node below
            for i, idx in enumerate(supports):
                vals = self._sent_values(Xn, i, idx, centres[i], wd, check_rows)
                nodes.append(
                    NodeMessage(idx, vals, float(centres[i]), seeds[i], self._node_rate(i, n, d))
                )
        return Encoded(
            scheme=self.scheme,
            d=d,
            dtype=Xn.dtype,
            nodes=tuple(nodes),
            centre_sent=self.centre_sent,
            kind=kind,
            **extra,
        )

    def _sent_values(
        self, Xn: np.ndarray, i: int, idx: np.ndarray, centre: float, wd: np.dtype, check: bool
    ) -> np.ndarray:
        """:meth:`_values` on node ``i``'s support, in ``Xn``'s dtype; refuse an overflow.

        With ``check``, a NaN/inf anywhere in row ``i`` is refused too (:func:`raise_not_finite`).
        """
        x = Xn[i]
        if check and not np.isfinite(x).all():
            raise_not_finite(Xn, "X")
        vals = self._values(x[idx].astype(wd, copy=False), idx, i, x, centre)
        vals = np.asarray(vals).astype(x.dtype, copy=False)
        _check_representable(vals, x.dtype)
        return vals

    def encode_with_supports(self, X: Any, supports: list[Any]) -> Encoded:
        r"""Encode with the given supports :math:`D_i` instead of random ones.

        The deterministic half of :meth:`encode` — used for exact enumeration of all outcomes
        (:func:`cvfl_theory.testing.exact.exact_moments`). Seeds are recorded as 0.
        """
        Xn, kind = self._prepare(X)
        idx = _check_supports(supports, Xn.shape[0], Xn.shape[1])
        return self._encode_given(Xn, kind, idx, [0] * len(idx), self._centres(Xn))

    def decode(self, encoded: Encoded) -> Any:
        """All :math:`Y_i` as an ``(n, d)`` array of the input's kind."""
        return _decode(check_encoded(encoded))

    def average(self, encoded: Encoded) -> Any:
        r"""The averaging decoder :math:`\frac1n \sum_i Y_i`, shape ``(d,)``."""
        return _average(check_encoded(encoded))

    def mse(self, X: Any) -> float:
        r"""Closed-form MSE of the averaging decoder (K1.2, K2.2, K5.1).

        .. math::
            \mathrm{MSE} = \frac{1}{n^2} \sum_{i=1}^n \sum_{j=1}^d
            \Big(\frac{1}{p_{ij}} - 1\Big) (X_i(j) - \mu_i)^2,

        with :math:`p_{ij} = P(j \in D_i)`; entries with :math:`X_i(j) = \mu_i` contribute 0.
        """
        Xn, _ = self._prepare(X)
        return _mse_from_marginals(Xn, *self._marginals(Xn))


def _float64_on(p: np.ndarray, device: str | None) -> Any:
    """``p`` as a float64 torch tensor on ``device`` (the host's when ``None``)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(p, dtype=np.float64)).to(device or "cpu")


def check_encoded(encoded: Any) -> Encoded:
    """``encoded``, refused (``TypeError``) unless an :class:`~cvfl_theory.encoded.Encoded`."""
    if not isinstance(encoded, Encoded):
        raise TypeError(
            f"encoded must be an Encoded (from an encoder's encode()), got {type(encoded).__name__}"
        )
    return encoded


def _check_supports(supports: Any, n: int, d: int) -> list[np.ndarray]:
    """Validate one integer index array per node, indices in ``[0, d)``; sorted and unique."""
    if isinstance(supports, (str, bytes)) or not hasattr(supports, "__len__"):
        raise TypeError(f"supports must be a list of {n} integer index arrays, got {supports!r}")
    if len(supports) != n:
        raise ValueError(f"supports must hold one index array per node ({n}), got {len(supports)}")
    out = []
    for i, s in enumerate(supports):
        a, _ = to_numpy(s, f"supports[{i}]")
        if a.size == 0:
            a = a.astype(np.int64)
        if a.dtype == bool or a.dtype.kind not in "iu" or a.ndim > 1:
            raise TypeError(
                f"supports[{i}] must be a 1-D array of integer indices, got dtype {a.dtype} "
                f"and shape {a.shape}"
            )
        a = np.unique(a.astype(np.int64))
        if a.size and (a[0] < 0 or a[-1] >= d):
            raise ValueError(f"supports[{i}] indices must lie in [0, {d - 1}], got {a[[0, -1]]}")
        out.append(a)
    return out


def _mse_from_marginals(X: np.ndarray, p: np.ndarray, centres: np.ndarray) -> float:
    dev2 = squared_deviations(X, centres)  # the same refusal as optimal_probabilities
    on = dev2 > 0
    if np.any(on & (p <= 0)):
        raise ValueError("an entry with X != mu has inclusion probability 0: the encoder is biased")
    sel = on & (p < 1)
    with np.errstate(over="ignore"):
        total = float(np.sum((1.0 / p[sel] - 1.0) * dev2[sel]) / X.shape[0] ** 2)
    if not np.isfinite(total):
        raise_mse_overflow()
    return total


class IndependentEncoder(Encoder):
    r"""K1: every entry is sent independently with probability :math:`p_{ij}`.

    .. math::
        Y_i(j) = \begin{cases} \mu_i + \dfrac{X_i(j) - \mu_i}{p_{ij}} & \text{w.p. } p_{ij} \\
        \mu_i & \text{otherwise} \end{cases}

    Unbiased (K1.1, Lemma 3.1); MSE given by K1.2 (Lemma 3.2).

    Parameters
    ----------
    p : float or array
        Probabilities in ``(0, 1]``: a scalar, per node ``(n, 1)``, or per entry ``(n, d)``. With a
        scalar or per-node ``p`` the support is drawn by geometric gaps in :math:`O(p d)` and can be
        regenerated from the seed (the seeded sparse protocol applies).
    mu : {"mean", "zero", "min"}, float or array of shape (n,)
        Centres :math:`\mu_i`. ``"mean"`` (the node mean, summed in float64 in the fixed order
        of :meth:`Encoder.centres`: the same bits on every machine) minimises K1.2 for uniform
        ``p``; ``"zero"`` is data-independent (:math:`\bar r = 0`).

    Examples
    --------
    >>> X = np.array([[1.0, 2.0, 3.0, 6.0]])
    >>> enc = IndependentEncoder(p=0.5, mu="mean")
    >>> enc.mse(X)  # (1/0.5 - 1) * sum((X - 3)^2) = 14
    14.0
    >>> Y = enc.decode(enc.encode(X, rng=0))
    >>> Y.shape
    (1, 4)
    """

    def __init__(self, p: Any, mu: CentreSpec = "mean") -> None:
        super().__init__(mu)
        # a read-only copy: the checks made here stand for every later encoding
        self.p = np.array(check_probabilities(p), dtype=np.float64)
        self.p.setflags(write=False)
        self.scheme = (
            "bernoulli-varying" if self.p.ndim == 2 and self.p.shape[1] > 1 else "bernoulli"
        )

    def __repr__(self) -> str:
        p = float(self.p) if self.p.ndim == 0 else f"array{self.p.shape}"
        return f"IndependentEncoder(p={p}, mu={self.mu!r})"

    def _check_shape(self, n: int, d: int) -> None:
        if self.p.ndim == 2:
            ok = self.p.shape in ((n, 1), (n, d)) or (self.p.shape == (1, 1))
            if not ok:
                raise ValueError(
                    f"p has shape {self.p.shape}; for X of shape ({n}, {d}) it must be a scalar, "
                    f"({n}, 1) or ({n}, {d})"
                )

    def _row_p(self, i: int) -> Any:
        if self.p.ndim == 0:
            return float(self.p)
        row = self.p[i] if self.p.shape[0] > 1 else self.p[0]
        return float(row[0]) if row.shape[0] == 1 else row

    def _node_rate(self, i: int, n: int, d: int) -> float:
        r = self._row_p(i)
        return r if isinstance(r, float) else float("nan")

    def _support(
        self, gen: np.random.Generator, i: int, x: np.ndarray, centre: float
    ) -> np.ndarray:
        r = self._row_p(i)
        # p was checked on construction, d by the encoding
        if isinstance(r, float):
            return bernoulli_support(gen, r, x.shape[0], validate=False)
        return bernoulli_support_varying(gen, r, validate=False)

    def _device_supports(
        self, Xn: np.ndarray, seeds: list[int], device: str | None
    ) -> list[np.ndarray] | None:
        if Xn.shape[1] >= 2**30:  # the gaps' int64 partial sums could overflow: the host's
            return None
        rows = [self._row_p(i) for i in range(Xn.shape[0])]
        if all(isinstance(r, float) for r in rows):
            drawn = bernoulli_supports(seeds, rows, Xn.shape[1], device or "cpu")
        else:
            drawn = bernoulli_supports_varying(seeds, _float64_on(np.stack(rows), device))
        return [idx.cpu().numpy() for idx in drawn]

    def _rows_checked_in_pass(self, Xn: np.ndarray) -> bool:
        return (
            self.p.ndim == 0
            and float(self.p) < 1.0
            and Xn.dtype == _working_dtype(Xn.dtype)
            and not (isinstance(self.mu, str) and self.mu != "zero")
        )

    def _sent_values(
        self, Xn: np.ndarray, i: int, idx: np.ndarray, centre: float, wd: np.dtype, check: bool
    ) -> np.ndarray:
        # One p per node, float32/64 data: gather and compute (x - c) / p + c (float32 or float64
        # operations, as in _values) in one compiled pass, counting non-finite results; with
        # check, the same call first scans the row for NaN/inf (-1), so X is read once. A
        # subclass that redefines _values gets it called (the numpy path).
        r = self._row_p(i)
        custom = type(self)._values is not IndependentEncoder._values
        if not isinstance(r, float) or r == 1.0 or Xn.dtype != wd or custom:
            return super()._sent_values(Xn, i, idx, centre, wd, check)
        x = Xn[i]
        out = np.empty(idx.size, dtype=x.dtype)
        bad = _kernels.sparse_values(x, type_code(x), x.size, idx, idx.size, centre, r, out, check)
        if bad < 0:
            raise_not_finite(Xn, "X")
        if bad:
            _check_representable(out, x.dtype)
        return out

    def _values(self, x_sel, idx, i, x, centre):
        r = self._row_p(i)
        c = x_sel.dtype.type(centre)
        if isinstance(r, float) and r == 1.0:
            return x_sel  # p = 1 sends X exactly (no round-off from (x - c)/1 + c)
        v = x_sel  # a fresh array (fancy-indexed): updated in place
        if c:
            v -= c
        v /= x_sel.dtype.type(r) if isinstance(r, float) else r[idx].astype(x_sel.dtype)
        if c:
            v += c
        return v

    def _marginals(self, Xn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.broadcast_to(self.p, Xn.shape).astype(np.float64), self._centres(Xn)


class FixedSizeEncoder(Encoder):
    r"""K2: node :math:`i` sends a uniformly random :math:`k_i`-subset, scaled by :math:`d/k_i`.

    .. math::
        Y_i(j) = \mu_i + \frac{d}{k_i}(X_i(j) - \mu_i) \ (j \in D_i), \qquad \mu_i \text{ otherwise.}

    Unbiased (K2.1); :math:`\mathrm{MSE} = \frac{1}{n^2}\sum_i (d/k_i - 1)\|X_i - \mu_i 1\|^2`
    (K2.2, Lemma 3.4) — K1.2 with :math:`p = k/d`. The cost is deterministic.

    Parameters
    ----------
    k : int or array of shape (n,)
        Support sizes, each in ``[1, d]``.
    mu : {"mean", "zero", "min"}, float or array of shape (n,)
        Centres (``"mean"``: the node mean in the fixed order of :meth:`Encoder.centres`).

    Examples
    --------
    >>> X = np.array([[0.0, 1.0, 2.0, 5.0]])
    >>> FixedSizeEncoder(k=2, mu="zero").mse(X)  # (4/2 - 1) * 30
    30.0
    """

    scheme = "k-subset"

    def __init__(self, k: Any, mu: CentreSpec = "mean") -> None:
        super().__init__(mu)
        karr, _ = to_numpy(k, "k")
        if karr.dtype == bool or karr.dtype.kind not in "iu":
            raise TypeError(f"k must be an integer or an (n,) integer array, got {k!r}")
        if karr.ndim > 1:
            raise ValueError(f"k must be an integer or an (n,) array, got shape {karr.shape}")
        if karr.size == 0 or np.any(karr < 1):
            raise ValueError(f"k must be in [1, d]; got {karr.min() if karr.size else 'empty'}")
        self.k = karr.astype(np.int64)

    def __repr__(self) -> str:
        k = int(self.k) if self.k.ndim == 0 else f"array{self.k.shape}"
        return f"FixedSizeEncoder(k={k}, mu={self.mu!r})"

    def _k(self, n: int) -> np.ndarray:
        return np.broadcast_to(self.k, (n,))

    def _check_shape(self, n: int, d: int) -> None:
        if self.k.ndim == 1 and self.k.shape != (n,):
            raise ValueError(f"k has shape {self.k.shape}, expected ({n},) for n={n} nodes")
        if np.any(self.k > d):
            raise ValueError(f"k must be in [1, d] = [1, {d}]; got {int(self.k.max())}")

    def _node_rate(self, i: int, n: int, d: int) -> float:
        return float(self._node_k(i))

    def _node_k(self, i: int) -> int:
        return int(self.k[i]) if self.k.ndim else int(self.k)

    def _support(self, gen, i, x, centre):
        return k_subset_support(gen, self._node_k(i), x.shape[0], validate=False)  # k checked

    def _device_supports(
        self, Xn: np.ndarray, seeds: list[int], device: str | None
    ) -> list[np.ndarray] | None:
        n, d = Xn.shape
        if d >= 2**32 - 1:  # numpy's 64-bit bounded integers: not on the torch path
            return None
        ks = [self._node_k(i) for i in range(n)]
        return [idx.cpu().numpy() for idx in k_subset_supports(seeds, ks, d, device or "cpu")]

    def _values(self, x_sel, idx, i, x, centre):
        k = self._node_k(i)
        c = x_sel.dtype.type(centre)
        return (x_sel - c) * x_sel.dtype.type(x.shape[0] / k) + c

    def _marginals(self, Xn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, d = Xn.shape
        p = np.repeat((self._k(n) / d)[:, None], d, axis=1).astype(np.float64)
        return p, self._centres(Xn)


class BinaryQuantizationEncoder(Encoder):
    r"""K5.1: stochastic binary quantization (Suresh et al. 2017, no rotation) as a K1 instance.

    :math:`\mu_i = X_i^{\min}`, :math:`p_{ij} = (X_i(j) - X_i^{\min})/(X_i^{\max} - X_i^{\min})`,
    so :math:`Y_i(j) \in \{X_i^{\min}, X_i^{\max}\}` and the binary protocol applies
    (:math:`C = n(2r + d)`). A constant row is sent exactly. Closed form

    .. math::
        \mathrm{MSE} = \frac{1}{n^2}\sum_{i,j}(X_i^{\max} - X_i(j))(X_i(j) - X_i^{\min})
        \le \frac{d}{4n^2}\sum_i (X_i^{\max} - X_i^{\min})^2.

    Examples
    --------
    >>> X = np.array([[0.0, 1.0, 4.0]])
    >>> BinaryQuantizationEncoder().mse(X)  # (4-1)(1-0) = 3
    3.0
    """

    def __init__(self) -> None:
        super().__init__("min")

    def __repr__(self) -> str:
        return "BinaryQuantizationEncoder()"

    def _probabilities(self, x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        lo, hi = x.min(), x.max()
        if hi == lo:
            return np.zeros_like(x)
        with np.errstate(over="ignore"):
            span = hi - lo
        if not np.isfinite(span):
            raise ValueError(
                f"X's row range max - min = {hi} - ({lo}) overflows float64: binary quantization "
                "cannot encode it (scale the data down)"
            )
        return (x - lo) / span

    def _node_rate(self, i, n, d):
        return float("nan")

    def _support(self, gen, i, x, centre):
        return bernoulli_support_varying(gen, self._probabilities(x), validate=False)  # in [0, 1]

    def _device_supports(
        self, Xn: np.ndarray, seeds: list[int], device: str | None
    ) -> list[np.ndarray] | None:
        p = np.stack([self._probabilities(row) for row in Xn])
        return [
            idx.cpu().numpy() for idx in bernoulli_supports_varying(seeds, _float64_on(p, device))
        ]

    def _values(self, x_sel, idx, i, x, centre):
        return np.full(idx.shape, x.max(), dtype=x_sel.dtype)

    def _marginals(self, Xn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = np.stack([self._probabilities(row) for row in Xn])
        return p, self._centres(Xn)

    def mse_upper_bound(self, X: Any) -> float:
        r"""The K5.1 bound :math:`\frac{d}{4n^2}\sum_i (X_i^{\max} - X_i^{\min})^2`."""
        Xn, _ = self._prepare(X)
        n, d = Xn.shape
        rng_ = Xn.max(axis=1).astype(np.float64) - Xn.min(axis=1)
        with np.errstate(over="ignore"):
            bound = float(d * np.sum(rng_**2) / (4 * n**2))
        if not math.isfinite(bound):
            raise_mse_overflow()
        return bound


class RotatedBinaryEncoder(BinaryQuantizationEncoder):
    r"""K5.2 baseline: rotate by :math:`HD`, binary-quantize (K5.1), rotate back after decoding.

    The rotation is shared by all nodes and fixed by ``rotation_seed`` (public randomness). The
    quantization errors :math:`e_i` in the rotated domain are independent, zero-mean, with variances
    :math:`(Z_i^{\max} - Z_i(j))(Z_i(j) - Z_i^{\min})`; rotating back by :math:`DH` and dropping the
    :math:`d' - d` padded coordinates keeps, in expectation, a fraction :math:`d/d'` of each
    variance (every entry of :math:`H` squares to :math:`1/d'`). Hence, for this rotation,

    .. math::
        \mathrm{MSE} = \frac{d}{d'}\,\frac{1}{n^2}\sum_{i}\sum_{j=1}^{d'}
        (Z_i^{\max} - Z_i(j))(Z_i(j) - Z_i^{\min}),
        \qquad Z_i = H D X_i \in \mathbb R^{d'},

    with :math:`d'` the padded power of two. Averaging this over random ``rotation_seed`` gives the
    MSE over random rotations analysed by Suresh et al.

    Parameters
    ----------
    rotation_seed : int
        Seed of the random signs :math:`D`.
    """

    def __init__(self, rotation_seed: int = 0) -> None:
        super().__init__()
        self.rotation_seed = check_int_in_range(rotation_seed, "rotation_seed", 0, 2**63 - 1)

    def __repr__(self) -> str:
        return f"RotatedBinaryEncoder(rotation_seed={self.rotation_seed})"

    def _rotated(self, Xn: np.ndarray) -> np.ndarray:
        """:math:`HDX` in ``Xn``'s dtype; refuse a rotation that overflows it (float16)."""
        Z64 = hadamard_rotate(Xn, self.rotation_seed)
        with np.errstate(over="ignore"):
            Z = Z64.astype(Xn.dtype)
        if not np.isfinite(Z).all():
            i, j = (int(b) for b in np.argwhere(~np.isfinite(Z))[0])
            raise ValueError(
                f"X is too large for {Xn.dtype}: the rotated value HDX[{i}, {j}] = {Z64[i, j]:g} "
                f"exceeds the largest {Xn.dtype} ({float(np.finfo(Xn.dtype).max):g}); pass X in a "
                "wider float dtype"
            )
        return Z

    def rotate(self, X: Any) -> np.ndarray:
        r"""The rotated, padded vectors :math:`Z_i = HDX_i`, in ``X``'s dtype, shape ``(n, d')``."""
        Xn, _ = self._prepare(X)
        return self._rotated(Xn)

    def encode(self, X: Any, rng: RNGLike = None) -> Encoded:
        """Rotate, then encode with K5.1 in the rotated domain (``d' = 2^⌈log₂ d⌉``)."""
        Xn, kind = self._prepare(X)
        Z = self._rotated(Xn)
        return self._encode_array(
            Z, kind, rng, rotation_seed=self.rotation_seed, original_d=Xn.shape[1]
        )

    def encode_with_supports(self, X: Any, supports: list[Any]) -> Encoded:
        """Encode with given supports, indices in the rotated domain ``[0, d')``."""
        Xn, kind = self._prepare(X)
        Z = self._rotated(Xn)
        idx = _check_supports(supports, Z.shape[0], Z.shape[1])
        return self._encode_given(
            Z,
            kind,
            idx,
            [0] * len(idx),
            self._centres(Z),
            rotation_seed=self.rotation_seed,
            original_d=Xn.shape[1],
        )

    def domain(self, X: Any) -> np.ndarray:
        """The rotated, padded vectors (the coding domain of K5.2)."""
        return self.rotate(X)

    def mse(self, X: Any) -> float:
        """Exact MSE for this rotation: :math:`d/d'` times K5.1 on the rotated vectors."""
        Z = self.rotate(X)
        d = self._prepare(X)[0].shape[1]
        return d / Z.shape[1] * _mse_from_marginals(Z, *self._marginals(Z))

    def mse_upper_bound(self, X: Any) -> float:
        """The K5.1 bound on the rotated vectors, times :math:`d/d'` (see the class docstring)."""
        Z = self.rotate(X)
        return self._prepare(X)[0].shape[1] / Z.shape[1] * super().mse_upper_bound(Z)
