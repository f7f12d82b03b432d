r"""Check an encoder's closed forms against simulation in one call.

:func:`verify` encodes ``X`` ``trials`` times and compares, each as an (empirical, theoretical)
pair with a tolerance derived from the estimator's own standard error:

- the MSE of the averaging decoder with its closed form (K1.2, K2.2, K5.1, K5.2):
  pass if :math:`|\widehat{\mathrm{MSE}} - \mathrm{MSE}| \le z\,\widehat{\mathrm{SE}}`;
- unbiasedness (K1.1, K2.1): the largest per-coordinate :math:`|z_j|` of the mean decoded vector
  against :math:`\bar X`, with a Bonferroni threshold :math:`\Phi^{-1}(1 - \alpha/(2d))` so the
  family-wise false-alarm rate is :math:`\alpha`;
- for every protocol that applies, the mean payload bits against the closed form :math:`C` (K3).

The result prints as a table and renders as HTML in Jupyter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._export import json_safe
from ._rng import RNGLike, as_generator
from ._validate import check_int_in_range, check_matrix, check_real
from .encoders import Encoder
from .protocols import Protocol, applicable_protocols
from .table import Table

__all__ = ["Check", "VerifyResult", "verify"]


@dataclass(frozen=True)
class Check:
    """One (empirical, theoretical) pair with its standard error and verdict.

    Attributes
    ----------
    quantity : str
        What is compared.
    theoretical : float
        Closed form.
    empirical : float
        Monte Carlo estimate.
    se : float
        Standard error of ``empirical``.
    z : float
        ``|empirical - theoretical| / se`` (``inf`` if ``se = 0`` and they differ beyond round-off).
    threshold : float
        Largest allowed ``z``.
    """

    quantity: str
    theoretical: float
    empirical: float
    se: float
    z: float
    threshold: float

    @property
    def passed(self) -> bool:
        """``z <= threshold``."""
        return self.z <= self.threshold


@dataclass
class VerifyResult:
    """What :func:`verify` found; ``passed`` is the verdict of all checks."""

    encoder: str
    shape: tuple[int, int]
    dtype: str
    trials: int
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every check passed."""
        return all(c.passed for c in self.checks)

    def check(self, quantity: str) -> Check:
        """The check named ``quantity`` (e.g. ``"MSE"``)."""
        for c in self.checks:
            if c.quantity == quantity:
                return c
        raise KeyError(quantity)

    @property
    def mse(self) -> Check:
        """The MSE check."""
        return self.check("MSE")

    def table(self) -> Table:
        """The checks as a :class:`~cvfl_theory.table.Table`."""
        title = (
            f"verify {self.encoder} on X{self.shape} {self.dtype}, {self.trials} trials: "
            f"{'PASS' if self.passed else 'FAIL'}"
        )
        rows = [
            [c.quantity, c.theoretical, c.empirical, c.se, round(c.z, 2), c.threshold, c.passed]
            for c in self.checks
        ]
        cols = ["quantity", "closed form", "Monte Carlo", "SE", "|z|", "allowed |z|", "verdict"]
        return Table(cols, rows, title=title)

    def to_dataframe(self) -> Any:
        """The checks as a :class:`pandas.DataFrame`: the columns and rows of :meth:`table`.

        Columns are in the order ``table().to_csv()`` writes them; ``attrs`` holds the encoder,
        shape, dtype, trials and overall verdict. Needs pandas (``cvfl[dataframe]``).

        Examples
        --------
        >>> from cvfl_theory import IndependentEncoder
        >>> res = verify(IndependentEncoder(0.5), np.arange(12.0).reshape(3, 4), trials=50, rng=0)
        >>> list(res.to_dataframe().columns) == res.table().columns
        True
        """
        df = self.table().to_dataframe()
        df.attrs.update(
            encoder=self.encoder,
            shape=self.shape,
            dtype=self.dtype,
            trials=self.trials,
            passed=self.passed,
        )
        return df

    def _raw(self) -> dict[str, Any]:
        return {
            "encoder": self.encoder,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "trials": self.trials,
            "passed": self.passed,
            "checks": [
                {
                    "quantity": c.quantity,
                    "theoretical": c.theoretical,
                    "empirical": c.empirical,
                    "se": c.se,
                    "z": c.z,
                    "threshold": c.threshold,
                    "passed": c.passed,
                }
                for c in self.checks
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary: the run's description, verdict and every check's numbers.

        Non-finite numbers (an infinite ``z``) are strings, as in saved results.
        """
        return json_safe(self._raw())

    @classmethod
    def from_dict(cls, d: Any, where: str = "the result") -> VerifyResult:
        """Rebuild a result from :meth:`to_dict` (or a result file's fields), checking each field.

        Raises
        ------
        ValueError
            A missing or mistyped field, or a stored verdict that its checks contradict.
        """
        from .store import checked_field, decode_value

        d = decode_value(_restore_strings(d))
        if not isinstance(d, dict):
            raise ValueError(f"{where}: a VerifyResult is a JSON object")
        shape = checked_field(d, "shape", list, where)
        if len(shape) != 2 or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in shape
        ):
            raise ValueError(f"{where}: shape must be two sizes >= 1, got {shape!r}")
        checks = []
        for i, c in enumerate(checked_field(d, "checks", list, where)):
            w = f"{where}, check {i}"
            if not isinstance(c, dict):
                raise ValueError(f"{w}: a check is a JSON object")
            nums = {
                k: float(checked_field(c, k, (int, float), w))
                for k in ("theoretical", "empirical", "se", "z", "threshold")
            }
            checks.append(Check(quantity=checked_field(c, "quantity", str, w), **nums))
        res = cls(
            encoder=checked_field(d, "encoder", str, where),
            shape=(shape[0], shape[1]),
            dtype=checked_field(d, "dtype", str, where),
            trials=checked_field(d, "trials", int, where),
            checks=checks,
        )
        if "passed" in d and d["passed"] is not res.passed:
            raise ValueError(f"{where}: the stored verdict contradicts its checks")
        return res

    def save(self, path: Any) -> str:
        """Write the result file (JSON, no pickle; ``.json`` appended); :meth:`load` reads it."""
        from .store import write_result

        return write_result(path, "VerifyResult", self._raw())

    @classmethod
    def load(cls, path: Any) -> VerifyResult:
        """Read a result file written by :meth:`save`, every field checked."""
        from .store import read_result

        fields, _ = read_result(path, "VerifyResult")
        return cls.from_dict(fields, repr(str(path)))

    def __str__(self) -> str:
        return str(self.table())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


def _restore_strings(v: Any) -> Any:
    """``"inf"``, ``"-inf"``, ``"nan"`` strings of :meth:`VerifyResult.to_dict` back to floats."""
    if isinstance(v, dict):
        return {
            k: (
                float(x) if x in ("inf", "-inf", "nan") and k != "quantity" else _restore_strings(x)
            )
            for k, x in v.items()
        }
    if isinstance(v, list):
        return [_restore_strings(x) for x in v]
    return v


def _z(emp: float, theo: float, se: float, scale: float) -> float:
    diff = abs(emp - theo)
    # round-off floor: a few ulps of the quantities involved (exact outcomes have se = 0)
    floor = 64 * np.finfo(np.float64).eps * max(scale, abs(theo), abs(emp), 1e-300)
    if diff <= floor:
        return 0.0
    return math.inf if se == 0 else diff / se


def verify(
    encoder: Encoder,
    X: Any,
    trials: int = 2000,
    rng: RNGLike = None,
    z: float = 5.0,
    alpha: float = 1e-6,
    protocols: list[Protocol] | None = None,
) -> VerifyResult:
    r"""Compare an encoder's closed forms with a seeded Monte Carlo simulation.

    Parameters
    ----------
    encoder : Encoder
        Any encoder of :mod:`cvfl_theory.encoders`.
    X : array of shape (n, d)
        Data (numpy or torch).
    trials : int
        Number of independent encodings (``>= 2``).
    rng : int, Generator or None
        Seed of the simulation.
    z : float
        Allowed number of standard errors for the MSE and bit checks (5 → false-alarm rate
        :math:`\approx 6\cdot 10^{-7}` under the CLT).
    alpha : float
        Family-wise false-alarm rate of the per-coordinate bias check.
    protocols : list of Protocol, optional
        Protocols whose mean payload bits are compared with K3 (default: every protocol that
        applies, with ``r`` the data's float width).

    Returns
    -------
    VerifyResult

    Examples
    --------
    >>> from cvfl_theory import IndependentEncoder
    >>> X = np.arange(12.0).reshape(3, 4)
    >>> res = verify(IndependentEncoder(0.5), X, trials=400, rng=0)
    >>> res.passed
    True
    """
    if not isinstance(encoder, Encoder):
        raise TypeError(f"encoder must be an Encoder, got {type(encoder).__name__}")
    trials = check_int_in_range(trials, "trials", 2, 10**9)
    z = check_real(z, "z (standard errors)", 0.0, low_open=True)
    alpha = check_real(alpha, "alpha", 0.0, 1.0, low_open=True, high_open=True)
    if protocols is not None and (
        isinstance(protocols, (str, bytes, Protocol))
        or not all(isinstance(p, Protocol) for p in protocols)
    ):
        raise TypeError(
            f"protocols must be a list of Protocol instances or None, got {protocols!r}"
        )
    Xn, _ = check_matrix(X)
    n, d = Xn.shape
    gen = as_generator(rng)
    xbar = Xn.astype(np.float64).mean(axis=0)
    r = {np.dtype(np.float16): 16, np.dtype(np.float32): 32}.get(Xn.dtype, 64)
    if protocols is None:
        protocols = applicable_protocols(encoder, r=r)

    err2 = np.empty(trials)
    bits = np.empty((len(protocols), trials))
    s1 = np.zeros(d)
    s2 = np.zeros(d)
    for t in range(trials):
        enc = encoder.encode(Xn, rng=gen)
        avg = np.asarray(encoder.average(enc), dtype=np.float64)
        dev = avg - xbar
        err2[t] = dev @ dev
        s1 += dev
        s2 += dev * dev
        for k, proto in enumerate(protocols):
            bits[k, t] = proto.payload_bits(enc).sum()

    result = VerifyResult(repr(encoder), (n, d), str(Xn.dtype), trials)
    closed = encoder.mse(Xn)
    emp, se = float(err2.mean()), float(err2.std(ddof=1) / math.sqrt(trials))
    result.checks.append(Check("MSE", closed, emp, se, _z(emp, closed, se, closed), z))

    mean_dev = s1 / trials
    var = np.maximum(s2 / trials - mean_dev**2, 0.0) * trials / (trials - 1)
    se_j = np.sqrt(var / trials)
    scale = float(np.abs(xbar).max())
    zs = np.array([_z(float(m), 0.0, float(s), scale) for m, s in zip(mean_dev, se_j)])
    worst = int(np.argmax(zs))
    from scipy.special import ndtri  # lazy: keeps ``import cvfl_theory`` light

    thr = float(-ndtri(alpha / (2 * d)))  # Phi^{-1}(1 - alpha / (2d)), exact in the tail
    result.checks.append(
        Check(
            f"bias (worst j={worst})",
            0.0,
            float(abs(mean_dev[worst])),
            float(se_j[worst]),
            float(zs[worst]),
            thr,
        )
    )
    for k, proto in enumerate(protocols):
        c = proto.expected_bits(encoder, Xn)
        emp_b = float(bits[k].mean())
        se_b = float(bits[k].std(ddof=1) / math.sqrt(trials))
        result.checks.append(
            Check(f"bits {proto.name} (r={proto.r})", c, emp_b, se_b, _z(emp_b, c, se_b, c), z)
        )
    return result
