r"""Exact compression error against bits, for every compressor, beside the published bounds (C5).

:func:`compare_bits` runs :func:`~cvfl_theory.compressors.report.compare_with_published` for
the scalar quantizer (C5.1), the hexagonal lattice (C5.2) and top-k (C5.4) at every bit width
of a range, on one embedding (the researcher's own, or any array). The result,
:class:`BitsSweep`, prints as a table, renders in Jupyter, plots the exact error against bits
with the Monte Carlo means and the published bounds (:func:`plot_compressors`), and saves and
loads as a result file (:mod:`cvfl_theory.store`). A compressor that cannot work at a width (the
dithered lattice needs :math:`b \ge 2`) is listed as unavailable there, with the reason.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._export import dataframe, json_safe
from .._rng import RNGLike, as_generator
from .._validate import check_int_in_range
from ..table import Table
from .base import Compressor, as_matrix
from .hexagonal import HexLatticeQuantizer
from .report import REPORT_COLUMNS, ComparisonReport, compare_with_published
from .scalar import ScalarQuantizer
from .topk import TopK

__all__ = ["KINDS", "BitsSweep", "compare_bits", "plot_compressors", "parse_bits"]

KINDS = {
    "scalar": "scalar quantizer (C5.1)",
    "lattice": "hexagonal lattice (C5.2)",
    "topk": "top-k (C5.4)",
}
"""The compressor kinds of a sweep and their labels."""


def parse_bits(text: str, low: int = 1, high: int = 32) -> tuple[int, ...]:
    """Bit widths from ``"3"``, ``"1-8"`` or ``"2,3,4"`` (each in ``[low, high]``), sorted.

    Examples
    --------
    >>> parse_bits("1-4"), parse_bits("8,2")
    ((1, 2, 3, 4), (2, 8))
    """
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        try:
            if "-" in part[1:]:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if lo > hi:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ValueError(
                f"bits must be a width, a range A-B or a list A,B,...; got {text!r}"
            ) from None
    bad = sorted(b for b in out if not low <= b <= high)
    if bad:
        raise ValueError(f"bits must be in [{low}, {high}], got {bad[0]} in {text!r}")
    return tuple(sorted(out))


def _make(kind: str, bits: int, lo: float, hi: float) -> Compressor:
    if kind == "scalar":
        return ScalarQuantizer(bits, range=(lo, hi))
    if kind == "lattice":
        return HexLatticeQuantizer(bits, range=(lo, hi))
    return TopK(bits=bits)


@dataclass(frozen=True)
class BitsSweep:
    r""":func:`compare_with_published` for each compressor kind at each bit width.

    Attributes
    ----------
    kinds : tuple of str
        Keys of :data:`KINDS`, in order.
    bits : tuple of int
        The bit widths.
    range : tuple of float
        The quantizers' range :math:`[h_{\min}, h_{\max}]`.
    shape : tuple of int
        Shape of the embedding.
    reports : dict
        ``(kind, bits) -> ComparisonReport``, for the pairs that work.
    unavailable : dict
        ``(kind, bits) -> reason`` for the others.
    """

    kinds: tuple[str, ...]
    bits: tuple[int, ...]
    range: tuple[float, float]
    shape: tuple[int, ...]
    reports: dict[tuple[str, int], ComparisonReport]
    unavailable: dict[tuple[str, int], str]

    def table(self) -> Table:
        """One row per (compressor, bits): exact, measured ± SE, published and their ratio."""
        rows = []
        for kind in self.kinds:
            for b in self.bits:
                r = self.reports.get((kind, b))
                if r is None:
                    rows.append([kind, b, "-", "-", "-", "-", "-", "unavailable"])
                    continue
                rows.append(
                    [
                        kind,
                        b,
                        r.payload_bits,
                        r.exact,
                        f"{r.measured:.6g} ± {r.standard_error:.2g}",
                        r.published,
                        round(r.ratio, 4),
                        "holds" if r.published_holds else "exceeded",
                    ]
                )
        cols = ["compressor", "bits", "payload", "exact", "measured ± SE", "published"]
        cols += ["ratio", "published bound"]
        title = (
            f"exact vs Monte Carlo vs published error, embedding {'x'.join(map(str, self.shape))}"
            f", range [{self.range[0]:.4g}, {self.range[1]:.4g}]"
        )
        return Table(
            cols,
            rows,
            title=title,
            groups=[("", 3), ("E||C(x) - x||^2", 3), ("exact / published", 2)],
            key_columns=2,
        )

    def __str__(self) -> str:
        lines = [str(self.table())]
        for (k, b), why in self.unavailable.items():
            text = f"{k} at b = {b}: not available ({why})"
            lines += textwrap.wrap(text, 100, subsequent_indent="  ")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def to_dataframe(self) -> Any:
        """One row per available (compressor, bits): ``kind``, ``bits`` and :data:`REPORT_COLUMNS`."""
        rows = [[k, b, *r.record()] for (k, b), r in self.reports.items()]
        return dataframe(["kind", "bits", *REPORT_COLUMNS], rows)

    def _raw(self) -> dict[str, Any]:
        return {
            "kinds": list(self.kinds),
            "bits": list(self.bits),
            "range": list(self.range),
            "shape": list(self.shape),
            "reports": [
                {"kind": k, "bits": b, **r.raw_dict()} for (k, b), r in self.reports.items()
            ],
            "unavailable": [
                {"kind": k, "bits": b, "reason": why} for (k, b), why in self.unavailable.items()
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able numbers (non-finite ones as strings)."""
        return json_safe(self._raw())

    def save(self, path: Any) -> str:
        """Write the result file (JSON, no pickle; ``.json`` appended); :meth:`load` reads it."""
        from ..store import write_result

        return write_result(path, "BitsSweep", self._raw())

    @classmethod
    def load(cls, path: Any) -> BitsSweep:
        """Read a result file written by :meth:`save`, every field checked."""
        from ..store import checked_field, read_result

        d, _ = read_result(path, "BitsSweep")
        where = repr(str(path))
        kinds = checked_field(d, "kinds", list, where)
        if not kinds or any(k not in KINDS for k in kinds):
            raise ValueError(f"{where}: kinds must be some of {list(KINDS)}, got {kinds!r}")
        bits = checked_field(d, "bits", list, where)
        if not bits or any(
            isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= 32 for b in bits
        ):
            raise ValueError(f"{where}: bits must be widths in [1, 32], got {bits!r}"[:300])
        rng = checked_field(d, "range", list, where)
        shape = checked_field(d, "shape", list, where)
        if len(rng) != 2 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in rng):
            raise ValueError(f"{where}: range must be two finite numbers")
        if not shape or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in shape):
            raise ValueError(f"{where}: shape must be sizes >= 1")
        seen: set[tuple[str, int]] = set()

        def pair(entry: Any, w: str) -> tuple[str, int]:
            """The entry's (kind, bits): a pair of the sweep that no other entry has."""
            if not isinstance(entry, dict):
                raise ValueError(f"{w}: an entry is a JSON object")
            key = (checked_field(entry, "kind", str, w), checked_field(entry, "bits", int, w))
            if key[0] not in kinds or key[1] not in bits or key in seen:
                raise ValueError(f"{w}: ({key[0]}, {key[1]}) is not a new pair of the sweep")
            seen.add(key)
            return key

        reports: dict[tuple[str, int], ComparisonReport] = {}
        for i, r in enumerate(checked_field(d, "reports", list, where)):
            w = f"{where}, report {i}"
            reports[pair(r, w)] = ComparisonReport.from_dict(
                {k: v for k, v in r.items() if k not in ("kind", "bits")}, w
            )
        unavailable: dict[tuple[str, int], str] = {}
        for i, u in enumerate(checked_field(d, "unavailable", list, where)):
            w = f"{where}, unavailable {i}"
            unavailable[pair(u, w)] = checked_field(u, "reason", str, w)
        return cls(
            kinds=tuple(kinds),
            bits=tuple(bits),
            range=(float(rng[0]), float(rng[1])),
            shape=tuple(shape),
            reports=reports,
            unavailable=unavailable,
        )

    def plot(self, ax: Any = None) -> Any:
        """:func:`plot_compressors` of this sweep."""
        return plot_compressors(self, ax=ax)


def compare_bits(
    x: Any,
    bits: Iterable[int] = range(1, 9),
    kinds: Sequence[str] = tuple(KINDS),
    *,
    range: tuple[float, float] | None = None,
    trials: int = 200,
    rng: RNGLike = None,
) -> BitsSweep:
    r"""Exact, Monte Carlo and published error of each compressor at every width of ``bits``.

    Parameters
    ----------
    x : array_like or torch.Tensor
        The embedding, ``(P,)`` or ``(B, P)``, finite.
    bits : iterable of int
        Bit widths per component, each in ``[1, 32]``.
    kinds : sequence of str
        Keys of :data:`KINDS`.
    range : (float, float), optional
        The quantizers' :math:`[h_{\min}, h_{\max}]`; default the embedding's own
        ``(min, max)`` (widened by 1 on each side if it is constant).
    trials : int
        Monte Carlo trials per pair, ``>= 2``.
    rng : int, Generator or None
        Seed of the dithers.

    Returns
    -------
    BitsSweep

    Examples
    --------
    >>> x = np.random.default_rng(0).uniform(-1, 1, size=(4, 8))
    >>> s = compare_bits(x, bits=(1, 2), trials=20, rng=0)
    >>> sorted(s.reports)[:2], list(s.unavailable)
    ([('lattice', 2), ('scalar', 1)], [('lattice', 1)])
    """
    widths = tuple(sorted({check_int_in_range(b, "bits", 1, 32) for b in bits}))
    if not widths:
        raise ValueError("bits must list at least one width in [1, 32]")
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError(f"kinds must be some of {list(KINDS)}, got {list(kinds)}")
    trials = check_int_in_range(trials, "trials", 2, 10**7)
    a, _, shape, _ = as_matrix(x, "x")
    if range is None:
        lo, hi = float(np.min(a)), float(np.max(a))
        if lo == hi:
            lo, hi = lo - 1.0, hi + 1.0
    else:
        lo, hi = (float(v) for v in range)
    gen = as_generator(rng)
    reports: dict[tuple[str, int], ComparisonReport] = {}
    unavailable: dict[tuple[str, int], str] = {}
    for kind in kinds:
        for b in widths:
            try:
                comp = _make(kind, b, lo, hi)
            except ValueError as exc:
                unavailable[(kind, b)] = str(exc)
                continue
            reports[(kind, b)] = compare_with_published(comp, a, trials=trials, rng=gen)
    return BitsSweep(kinds, widths, (lo, hi), tuple(shape), reports, unavailable)


def plot_compressors(sweep: BitsSweep, ax: Any = None) -> Any:
    """Exact error against bits for each compressor, beside the published bounds (log scale).

    Lines: the exact error; points with ±2 SE bars: the Monte Carlo means; dashed: the
    published bounds. Returns the matplotlib ``Figure`` (it displays in Jupyter); ``ax`` draws into given axes.
    """
    if ax is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6.4, 4.2))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    colours = {"scalar": "C0", "lattice": "C1", "topk": "C2"}
    for kind in sweep.kinds:
        pts = sorted((b, r) for (k, b), r in sweep.reports.items() if k == kind)
        if not pts:
            continue
        bs = [b for b, _ in pts]
        c = colours.get(kind, "k")
        ax.plot(bs, [r.exact for _, r in pts], "-", color=c, label=f"{KINDS[kind]}: exact")
        ax.errorbar(
            bs,
            [r.measured for _, r in pts],
            yerr=[2 * r.standard_error for _, r in pts],
            fmt="o",
            color=c,
            ms=3,
        )
        ax.plot(bs, [r.published for _, r in pts], "--", color=c, alpha=0.7, label="published")
    ax.set_yscale("log")
    ax.set_xlabel("bits per component b")
    ax.set_ylabel("E||C(x) - x||^2")
    ax.set_title("compression error against bits (points: Monte Carlo ± 2 SE)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return fig
