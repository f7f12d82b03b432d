r"""Exact error vs Monte Carlo vs the paper's table, for one compressor and one input (C5)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._export import dataframe, json_safe
from .._rng import RNGLike, as_generator
from .._validate import check_int_in_range
from ..table import Table
from .base import Compressor, as_matrix

__all__ = ["ComparisonReport", "compare_with_published", "comparison_table", "REPORT_COLUMNS"]

REPORT_COLUMNS = (
    "compressor",
    "shape",
    "payload_bits",
    "exact",
    "measured",
    "standard_error",
    "z_score",
    "published",
    "ratio",
    "published_holds",
    "trials",
)
"""Columns of :meth:`ComparisonReport.to_dataframe` and :func:`comparison_table`, in order."""


@dataclass(frozen=True)
class ComparisonReport:
    r"""Result of :func:`compare_with_published`.

    Attributes
    ----------
    compressor : str
        ``repr`` of the compressor.
    shape : tuple of int
        Shape of the input.
    exact : float
        Exact :math:`\mathbb{E}\|C(x) - x\|_F^2` (``compressor.expected_error(x)``).
    measured : float
        Monte Carlo mean of :math:`\|C(x) - x\|_F^2` over ``trials`` independent dithers.
    standard_error : float
        Standard error of ``measured`` (0 for a deterministic compressor).
    published : float
        The paper's table value (``compressor.published_bound(x)``).
    trials : int
        Number of Monte Carlo trials.
    payload_bits : int
        Payload bits of one message.
    """

    compressor: str
    shape: tuple[int, ...]
    exact: float
    measured: float
    standard_error: float
    published: float
    trials: int
    payload_bits: int

    @property
    def ratio(self) -> float:
        """``exact / published`` (``inf`` if the published bound is 0 and the error is not)."""
        if self.published == 0:
            return 1.0 if self.exact == 0 else math.inf
        return self.exact / self.published

    @property
    def z_score(self) -> float:
        """``(measured - exact) / SE``; 0 when they agree to 1e-9 relative (deterministic case)."""
        diff = self.measured - self.exact
        if abs(diff) <= 1e-9 * max(1e-300, abs(self.exact)):  # deterministic: float round-off
            return 0.0
        if self.standard_error == 0:
            return math.inf
        return diff / self.standard_error

    @property
    def published_holds(self) -> bool:
        """Whether the exact error is within the published bound."""
        return self.exact <= self.published * (1 + 1e-12)

    def record(self) -> list[Any]:
        """The report's numbers in the order of :data:`REPORT_COLUMNS` (``shape`` as text)."""
        return [
            self.compressor,
            "x".join(str(s) for s in self.shape),
            self.payload_bits,
            self.exact,
            self.measured,
            self.standard_error,
            self.z_score,
            self.published,
            self.ratio,
            self.published_holds,
            self.trials,
        ]

    def raw_dict(self) -> dict[str, Any]:
        """The stored fields (non-finite numbers as floats), as :meth:`from_dict` reads them."""
        return {
            "compressor": self.compressor,
            "shape": list(self.shape),
            "exact": self.exact,
            "measured": self.measured,
            "standard_error": self.standard_error,
            "published": self.published,
            "trials": self.trials,
            "payload_bits": self.payload_bits,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str = "the report") -> ComparisonReport:
        """A report from :meth:`raw_dict` (or a result file), each field checked."""
        from ..store import checked_field

        if not isinstance(d, dict):
            raise ValueError(f"{where}: a report is a JSON object")
        shape = checked_field(d, "shape", list, where)
        if not shape or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in shape):
            raise ValueError(f"{where}: shape must be sizes >= 1, got {shape!r}"[:300])
        nums = {
            k: float(checked_field(d, k, (int, float), where))
            for k in ("exact", "measured", "standard_error", "published")
        }
        if nums["exact"] < 0 or nums["standard_error"] < 0 or math.isnan(nums["exact"]):
            raise ValueError(f"{where}: exact and standard_error must be >= 0")
        trials = checked_field(d, "trials", int, where)
        bits = checked_field(d, "payload_bits", int, where)
        if trials < 2 or bits < 0:
            raise ValueError(f"{where}: trials must be >= 2 and payload_bits >= 0")
        return cls(
            compressor=checked_field(d, "compressor", str, where),
            shape=tuple(shape),
            trials=trials,
            payload_bits=bits,
            **nums,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able numbers (``shape`` as a list; non-finite numbers as strings)."""
        d = dict(zip(REPORT_COLUMNS, self.record()))
        d["shape"] = list(self.shape)
        return json_safe(d)

    def to_dataframe(self) -> Any:
        """One-row :class:`pandas.DataFrame` with :data:`REPORT_COLUMNS` (needs pandas).

        Several reports: ``comparison_table(reports).to_dataframe()``.
        """
        return dataframe(REPORT_COLUMNS, [self.record()])

    def _rows(self) -> list[tuple[str, str]]:
        verdict = "holds" if self.published_holds else f"VIOLATED (exact is {self.ratio:.3g}x it)"
        return [
            ("compressor", self.compressor),
            ("input shape", str(self.shape)),
            ("payload bits", str(self.payload_bits)),
            ("exact E||C(x)-x||^2", f"{self.exact:.6g}"),
            (
                f"measured ({self.trials} trials)",
                f"{self.measured:.6g} +/- {self.standard_error:.2g} (z = {self.z_score:+.2f})",
            ),
            ("published bound", f"{self.published:.6g}"),
            ("exact / published", f"{self.ratio:.4g}"),
            ("published bound", verdict),
        ]

    def __str__(self) -> str:
        return "\n".join(f"{k:<28} {v}" for k, v in self._rows())

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
            for k, v in self._rows()
        )
        return f"<table>{body}</table>"


def compare_with_published(
    compressor: Compressor, x: Any, trials: int = 200, rng: RNGLike = None
) -> ComparisonReport:
    r"""Compare exact, Monte Carlo and published compression error for one input (C5).

    Parameters
    ----------
    compressor : Compressor
        Any compressor of :mod:`cvfl_theory.compressors`.
    x : array_like or torch.Tensor
        The embedding, ``(P,)`` or ``(B, P)``.
    trials : int
        Independent compressions (fresh dither each) for the Monte Carlo mean, ``>= 2``.
    rng : int, numpy.random.Generator, torch.Generator or None
        Source of the dither seeds.

    Returns
    -------
    ComparisonReport
        With ``exact``, ``measured``, ``standard_error``, ``published`` and ``ratio``; renders as
        text (``str``) and in Jupyter (``_repr_html_``).

    Notes
    -----
    Shows the two findings of C5: the scalar quantizer's exact error exceeds the published
    :math:`2^{-2q}` form by :math:`(2^q/(2^q-1))^2` (C5.1), and the hexagonal lattice's by
    :math:`10/(3\sqrt3) \approx 1.92` (C5.2).

    Examples
    --------
    >>> import numpy as np
    >>> from cvfl_theory.compressors import HexLatticeQuantizer
    >>> x = np.random.default_rng(0).uniform(-1, 1, size=(8, 16))
    >>> r = compare_with_published(HexLatticeQuantizer(3, range=(-1, 1)), x, trials=50, rng=1)
    >>> round(r.ratio, 3), abs(r.z_score) < 5
    (1.925, True)
    """
    if not isinstance(compressor, Compressor):
        raise TypeError(f"compressor must be a Compressor, got {type(compressor).__name__}")
    trials = check_int_in_range(trials, "trials", 2, 10**7)
    a, _, shape, _ = as_matrix(x, "x")
    a64 = a.astype(np.float64)
    gen = as_generator(rng)
    errs = np.empty(trials)
    for t in range(trials):
        out = compressor.decompress(compressor.compress(a, gen)).astype(np.float64)
        errs[t] = float(np.sum((out - a64) ** 2))
    return ComparisonReport(
        compressor=repr(compressor),
        shape=shape,
        exact=compressor.expected_error(a),
        measured=float(errs.mean()),
        standard_error=float(errs.std(ddof=1) / math.sqrt(trials)),
        published=compressor.published_bound(a),
        trials=trials,
        payload_bits=compressor.payload_bits(shape),
    )


def comparison_table(reports: Any) -> Table:
    """Several :class:`ComparisonReport` as one :class:`~cvfl_theory.table.Table`, one row each.

    Columns :data:`REPORT_COLUMNS`; the table prints as text, renders in Jupyter, and
    ``to_csv()`` and ``to_dataframe()`` give the same columns in the same order.

    Examples
    --------
    >>> from cvfl_theory.compressors import ScalarQuantizer, TopK
    >>> x = np.random.default_rng(0).uniform(-1, 1, size=(4, 8))
    >>> comps = (ScalarQuantizer(2), TopK(k=2))
    >>> t = comparison_table([compare_with_published(c, x, trials=20, rng=0) for c in comps])
    >>> len(t), t.columns[:3]
    (2, ['compressor', 'shape', 'payload_bits'])
    """
    if isinstance(reports, ComparisonReport) or not hasattr(reports, "__iter__"):
        raise TypeError(
            f"reports must be a sequence of ComparisonReport, got {type(reports).__name__}"
        )
    reports = list(reports)
    bad = [type(r).__name__ for r in reports if not isinstance(r, ComparisonReport)]
    if bad:
        raise TypeError(f"reports must hold only ComparisonReport objects, got {bad}")
    return Table(
        list(REPORT_COLUMNS),
        [r.record() for r in reports],
        title="compression error: exact vs Monte Carlo vs published (C5)",
    )
