r"""MSE versus bits: optimal probabilities against uniform sampling and quantization baselines.

Our version of Figure 1 of [KR] (fixed vs optimal probabilities), extended with the K2 and K5
baselines. Every point is a closed-form MSE (K1.2, K2.2, K5.1, K5.2 exact for the rotation) and the
K3 expected bits of the encoder that achieves it, computed by the same encoder and protocol objects
the rest of the toolkit uses.

Methods (rows of :func:`tradeoff_curve`):

- ``"uniform"`` — K1 with one :math:`p` for all entries and :math:`\mu_i` the node mean (the best
  centre for uniform :math:`p`), :math:`p = B/|S|`, cost by ``protocol``;
- ``"fixed-size"`` — K2 with :math:`k` entries per node, node-mean centres, seeded sparse protocol
  (deterministic cost :math:`n(\bar r + \bar r_s + kr)`);
- ``"optimal"`` — water-filling (K6.2) for the same budget and ``protocol``, node-mean centres;
- ``"optimal-centres"`` — alternating minimisation over :math:`(p, \mu)` (K6.1 + K6.5);
- ``"binary"`` — K5.1 stochastic binary quantization, one point at :math:`n(2r + d)` bits;
- ``"rotation"`` — K5.2 randomized Hadamard + binary quantization, one point at
  :math:`n(2r + d')` bits (:math:`d'` the padded dimension).

Data sets to run it on (per-node gradients of a logistic regression on scikit-learn data, and a
heavy-tailed synthetic set) live in :mod:`cvfl_sim.experiments.reference_data`: ``cvfl_theory`` does no I/O.

References
----------
Konečný & Richtárik [KR]_, Figure 1; see :mod:`cvfl_theory.encoders`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._validate import check_float_width, check_int_in_range, check_matrix, check_real
from .encoders import (
    BinaryQuantizationEncoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
)
from .optimal import budget_from_bits, check_protocol, optimal_probabilities
from .protocols import BinaryProtocol, SeededSparseProtocol, SparseProtocol, VaryingLengthProtocol
from .table import Table

__all__ = ["METHODS", "tradeoff_curve", "plot_tradeoff"]

METHODS = ("uniform", "fixed-size", "optimal", "optimal-centres", "binary", "rotation")
_COLUMNS = ["method", "protocol", "bits_target", "bits", "budget", "mse"]


def _protocol(name: str, r: int):
    return {"sparse": SparseProtocol, "varying-length": VaryingLengthProtocol}[name](r=r)


def tradeoff_curve(
    X: Any,
    bits_grid: Sequence[float],
    methods: Sequence[str] = METHODS,
    *,
    protocol: str = "sparse",
    r: int = 32,
    r_seed: int = 32,
    max_iter: int = 20,
    rotation_seed: int = 0,
) -> Table:
    r"""MSE against expected bits for several encoders (K1, K2, K5, K6).

    For each bit budget :math:`C` in ``bits_grid`` and each budgeted method, the encoder that spends
    (at most) :math:`C` expected bits is built and its closed-form MSE recorded; ``"binary"`` and
    ``"rotation"`` have a single cost and give one row each. Budgets a method cannot afford (below
    its fixed cost) are skipped; budgets above what it can use are capped (:math:`p = 1` or
    :math:`k = d`), so ``bits`` may be less than ``bits_target``.

    Parameters
    ----------
    X : array of shape (n, d)
        The nodes' vectors (numpy or torch).
    bits_grid : sequence of float
        Bit budgets :math:`C_{\max}`.
    methods : sequence of str
        Any of :data:`METHODS`.
    protocol : {"sparse", "varying-length"}
        Protocol of the K1 methods (``uniform``, ``optimal``, ``optimal-centres``).
    r, r_seed : int
        Bits per float and per seed (K3).
    max_iter : int
        Iteration cap of the alternating minimisation.
    rotation_seed : int
        Seed of the K5.2 rotation.

    Returns
    -------
    Table
        Columns ``method, protocol, bits_target, bits, budget, mse`` (``bits`` is the K3 expected
        total; ``budget`` the expected number of entries sent, or :math:`k` per node for K2).
        ``to_csv()`` and ``to_dataframe()`` (pandas) give these columns in this order.

    Examples
    --------
    >>> X = np.random.default_rng(0).standard_t(2.5, size=(4, 32))
    >>> t = tradeoff_curve(X, [2000.0, 4000.0], methods=("uniform", "optimal", "binary"))
    >>> t.columns
    ['method', 'protocol', 'bits_target', 'bits', 'budget', 'mse']
    >>> u, o = (t.column("mse")[k] for k in (0, 2))  # uniform vs optimal at 2000 bits
    >>> bool(o <= u)
    True
    """
    Xn, _ = check_matrix(X)
    n, d = Xn.shape
    protocol = check_protocol(protocol)
    if isinstance(methods, str) or not hasattr(methods, "__iter__"):
        raise TypeError(
            f"methods must be a sequence of method names from {METHODS}, got {methods!r}"
        )
    bad = [m for m in methods if not isinstance(m, str) or m not in METHODS]
    if bad:
        raise ValueError(f"unknown methods {bad}; choose from {METHODS}")
    if isinstance(bits_grid, (str, bytes)) or not hasattr(bits_grid, "__iter__"):
        raise TypeError(f"bits_grid must be a sequence of bit budgets, got {bits_grid!r}")
    grid = [check_real(c, "bits_grid entries", 0.0, low_open=True) for c in bits_grid]
    if not grid:
        raise ValueError("bits_grid must be a non-empty list of positive finite numbers")
    r = check_float_width(r)
    r_seed = check_int_in_range(r_seed, "r_seed", 1, 64)
    max_iter = check_int_in_range(max_iter, "max_iter", 1, 10**6)
    rotation_seed = check_int_in_range(rotation_seed, "rotation_seed", 0, 2**63 - 1)
    proto = _protocol(protocol, r)
    rows: list[list[Any]] = []
    centres = IndependentEncoder(1.0, "mean")._centres(Xn)
    support = int(np.count_nonzero(Xn.astype(np.float64) != centres[:, None]))
    for method in methods:
        if method in ("binary", "rotation"):
            enc = (
                BinaryQuantizationEncoder()
                if method == "binary"
                else RotatedBinaryEncoder(rotation_seed)
            )
            bits = BinaryProtocol(r=r).expected_bits(enc, Xn)
            rows.append([method, "binary", math.nan, bits, math.nan, enc.mse(Xn)])
            continue
        for c in grid:
            if method == "fixed-size":
                seeded = SeededSparseProtocol(r=r, r_seed=r_seed)
                k = math.floor((c / n - r - r_seed) / r)
                if k < 1:
                    continue
                fenc = FixedSizeEncoder(min(k, d), "mean")
                bits = seeded.expected_bits(fenc, Xn)
                rows.append([method, "seeded-sparse", c, bits, float(min(k, d)), fenc.mse(Xn)])
                continue
            try:
                B = budget_from_bits(c, n, d, protocol, r, centre_sent=True)
            except ValueError:
                continue
            if method == "uniform":
                p = min(1.0, B / support) if support else 1.0
                uenc = IndependentEncoder(p, "mean")
                bits = proto.expected_bits(uenc, Xn)
                rows.append([method, protocol, c, bits, p * support, uenc.mse(Xn)])
            else:
                res = optimal_probabilities(
                    Xn,
                    B,
                    protocol=protocol,
                    r=r,
                    optimize_centres=method == "optimal-centres",
                    max_iter=max_iter,
                )
                bits = proto.expected_bits(res.encoder(), Xn)
                used = float(np.sum(np.asarray(res.p)))
                rows.append([method, protocol, c, bits, used, res.mse])
    return Table(_COLUMNS, rows, title=f"MSE vs bits, n={n}, d={d}, r={r}")


def plot_tradeoff(table: Table, ax: Any = None, title: str | None = None) -> Any:
    """Log–log plot of a :func:`tradeoff_curve` table: one line per method, markers for K5.

    Points with MSE 0 cannot be drawn on a log scale and are left out (the table keeps them).
    matplotlib is imported here. Like any matplotlib helper: without ``ax`` it draws on a new
    :func:`matplotlib.pyplot.subplots` figure (pyplot-managed, so a notebook cell shows it), with
    ``ax`` it draws into the given Axes; either way it returns the Axes.

    Parameters
    ----------
    table : Table
        Output of :func:`tradeoff_curve`.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new pyplot-managed figure otherwise.
    title : str, optional
        Axes title (default: the table title).

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> X = np.random.default_rng(0).standard_t(2.5, size=(4, 32))
    >>> ax = plot_tradeoff(tradeoff_curve(X, [2000.0, 4000.0], methods=("uniform", "binary")))
    >>> ax.get_xscale(), ax.get_yscale()
    ('log', 'log')
    >>> import matplotlib.pyplot as plt
    >>> plt.close(ax.figure)
    """
    if not isinstance(table, Table) or table.columns[:1] != ["method"]:
        raise TypeError(f"table must be the Table of tradeoff_curve, got {type(table).__name__}")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    methods = list(dict.fromkeys(table.column("method")))
    for m in methods:
        pts = [(r[3], r[5]) for r in table.rows if r[0] == m and r[5] > 0 and math.isfinite(r[5])]
        if not pts:
            continue
        xs, ys = zip(*sorted(pts))
        if len(pts) == 1:
            ax.plot(xs, ys, marker="*", linestyle="none", markersize=10, label=m)
        else:
            ax.plot(xs, ys, marker="o", markersize=3, label=m)
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import NullFormatter

    ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap on short ranges
    ax.set_xlabel("expected bits C (K3)")
    ax.set_ylabel("MSE (K1.2)")
    ax.set_title(title if title is not None else table.title)
    ax.legend(fontsize="small")
    return ax
