r"""K4 — the Section-5 examples of [KR] (Table 1), from the formulas and by simulation.

With uniform :math:`p`, :math:`\mu_i` the node mean, :math:`|S| = nd` and
:math:`R = \frac1n\sum_i\|X_i - \mu_i 1\|^2`, K1.2 gives :math:`\mathrm{MSE} = (1/p - 1) R/n` and the
seeded sparse protocol costs :math:`C = n(\bar r + \bar r_s) + ndpr`:

=========================  ===========  =========================================  ===================
example                    :math:`p`    :math:`C` (seeded sparse)                  MSE
=========================  ===========  =========================================  ===================
full communication         1            :math:`n(\bar r + \bar r_s) + ndr`         0
one bit per element        :math:`1/r`  :math:`n(\bar r + \bar r_s) + nd`          :math:`(r-1)R/n`
one value per node         :math:`1/d`  :math:`n(\bar r + \bar r_s) + nr`          :math:`(d-1)R/n`
general                    :math:`p`    :math:`n(\bar r + \bar r_s) + ndpr`        :math:`(1/p-1)R/n`
=========================  ===========  =========================================  ===================
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._rng import RNGLike, as_generator
from ._validate import (
    check_float_width,
    check_int_in_range,
    check_matrix,
    check_probabilities,
    check_real,
)
from .encoders import IndependentEncoder
from .protocols import NaiveProtocol, SeededSparseProtocol, SparseProtocol, VaryingLengthProtocol
from .table import Table

__all__ = ["table1"]

_DTYPES = {16: np.float16, 32: np.float32, 64: np.float64}


def table1(
    n: int,
    d: int,
    r: int = 32,
    r_seed: int = 32,
    p_general: Sequence[float] = (0.25,),
    X: Any = None,
    rng: RNGLike = 0,
    trials: int = 300,
    z: float = 5.0,
) -> Table:
    r"""Table 1 of [KR]: each example's ``p``, cost per protocol and MSE in units of :math:`R/n`.

    Every row carries three independent values of the seeded-sparse cost and of the MSE: the K4
    formula above, the protocol/encoder closed form of K3/K1.2, and a Monte Carlo average over
    ``trials`` encodings with its standard error; ``verdict`` says whether all agree (formulas
    exactly, simulation within ``z`` standard errors).

    Parameters
    ----------
    n, d : int
        Nodes and dimension.
    r, r_seed : int
        Float and seed widths (bits).
    p_general : sequence of float
        Extra "general" rows.
    X : array of shape (n, d), optional
        Data; default standard normal in the float type of ``r`` (so :math:`|S| = nd` a.s.).
    rng : int, Generator or None
        Seed for the default data and the simulation.
    trials : int
        Monte Carlo encodings per row.
    z : float
        Allowed standard errors.

    Returns
    -------
    Table

    Examples
    --------
    >>> t = table1(n=4, d=16, trials=50)
    >>> t.column("example")[:3]
    ['full communication', 'one bit per element', 'one value per node']
    >>> all(t.column("verdict"))
    True
    """
    n = check_int_in_range(n, "n", 1, 10**7)
    d = check_int_in_range(d, "d", 2, 10**9)
    r = check_float_width(r)
    r_seed = check_int_in_range(r_seed, "r_seed", 1, 64)
    trials = check_int_in_range(trials, "trials", 2, 10**7)
    z = check_real(z, "z (standard errors)", 0.0, low_open=True)
    if isinstance(p_general, (str, bytes)) or not hasattr(p_general, "__iter__"):
        raise TypeError(f"p_general must be a sequence of probabilities, got {p_general!r}")
    p_general = [float(check_probabilities(p, "p_general entries")) for p in p_general]
    gen = as_generator(rng)
    if X is None:
        Xn = gen.standard_normal((n, d)).astype(_DTYPES[r])
    else:
        Xn, _ = check_matrix(X)
        if Xn.shape != (n, d):
            raise ValueError(f"X has shape {Xn.shape}, expected (n, d) = ({n}, {d})")
    centres = IndependentEncoder(1.0, mu="mean")._centres(Xn)
    dev2 = (Xn.astype(np.float64) - centres[:, None]) ** 2
    R = float(dev2.sum() / n)
    if R == 0:
        raise ValueError("X has R = 0 (every row constant): the MSE unit R/n is zero")
    size_s = int(np.count_nonzero(dev2))
    unit = R / n
    protocols = [
        NaiveProtocol(r=r),
        VaryingLengthProtocol(r=r),
        SparseProtocol(r=r),
        SeededSparseProtocol(r=r, r_seed=r_seed),
    ]
    examples = [("full communication", 1.0), ("one bit per element", 1.0 / r)]
    examples += [("one value per node", 1.0 / d)] + [("general", float(p)) for p in p_general]
    rows = []
    for name, p in examples:
        enc = IndependentEncoder(p, mu="mean")
        k4_cost = n * (r + r_seed) + n * d * p * r  # r̄ = r: the node mean is sent
        k4_mse = 1.0 / p - 1.0
        closed = [proto.expected_bits(enc, Xn) for proto in protocols]
        closed_mse = enc.mse(Xn) / unit
        bits = np.empty((trials, len(protocols)))
        err = np.empty(trials)
        xbar = Xn.astype(np.float64).mean(axis=0)
        for t in range(trials):
            e = enc.encode(Xn, rng=gen)
            bits[t] = [proto.payload_bits(e).sum() for proto in protocols]
            dev = np.asarray(enc.average(e), dtype=np.float64) - xbar
            err[t] = dev @ dev / unit
        sim_bits, se_bits = bits.mean(axis=0), bits.std(axis=0, ddof=1) / math.sqrt(trials)
        sim_mse, se_mse = err.mean(), err.std(ddof=1) / math.sqrt(trials)
        tol = 1e-9 * max(1.0, k4_cost)
        formula_ok = abs(k4_cost - closed[3]) <= tol and (
            size_s < n * d or abs(k4_mse - closed_mse) <= 1e-6 * max(1.0, k4_mse)
        )
        sim_ok = all(
            abs(sb - c) <= z * se + 1e-9 * max(1.0, c)
            for sb, c, se in zip(sim_bits, closed, se_bits)
        ) and abs(sim_mse - closed_mse) <= z * se_mse + 1e-6 * max(1.0, closed_mse)
        rows.append(
            [
                name,
                p,
                closed[0],
                closed[1],
                closed[2],
                k4_cost,
                closed[3],
                float(sim_bits[3]),
                k4_mse,
                closed_mse,
                float(sim_mse),
                float(se_mse),
                bool(formula_ok and sim_ok),
            ]
        )
    cols = [
        "example",
        "p",
        "C naive",
        "C varying",
        "C sparse",
        "C seeded (K4)",
        "C seeded (K3)",
        "C seeded (sim)",
        "MSE·n/R (K4)",
        "MSE·n/R (K1.2)",
        "MSE·n/R (sim)",
        "SE",
        "verdict",
    ]
    title = f"Table 1 of [KR]: n={n}, d={d}, r={r}, r_seed={r_seed}, |S|={size_s}, R={R:.4g}"
    return Table(cols, rows, title=title)
