"""The result every proofs check returns, and the registry that finds them."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_RELATIONS = ("==", "<=", ">=")


def _agrees(empirical: float, theoretical: float, tolerance: float, relation: str) -> bool:
    """``empirical`` vs ``theoretical`` within ``tolerance`` under ``relation`` (NaN fails)."""
    e, t, tol = empirical, theoretical, tolerance
    if relation == "<=":
        return bool(e <= t + tol)
    if relation == ">=":
        return bool(e >= t - tol)
    return bool(abs(e - t) <= tol)


@dataclass(frozen=True)
class Comparison:
    """One further numeric pair of a check (e.g. one parameter setting).

    Attributes
    ----------
    name : str
        What is compared, in a few words (shown when it fails).
    empirical, theoretical, tolerance : float
        As in :class:`CheckResult`.
    relation : str
        ``"=="``, ``"<="`` or ``">="`` as in :class:`CheckResult`.
    """

    name: str
    empirical: float
    theoretical: float
    tolerance: float
    relation: str = "=="

    @property
    def ok(self) -> bool:
        """Whether the pair agrees within the tolerance under ``relation``."""
        return _agrees(self.empirical, self.theoretical, self.tolerance, self.relation)

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.empirical:.6g} {self.relation} {self.theoretical:.6g} "
            f"(tol {self.tolerance:.2g})"
        )


@dataclass(frozen=True)
class CheckResult:
    """Outcome of the check of one claim of the theory pages.

    Attributes
    ----------
    label : str
        Label of the theory pages, e.g. ``"K1.2"``.
    claim : str
        The statement checked, in one line.
    method : str
        How it was checked (sympy derivation, exact enumeration, Monte Carlo with SE, ...).
    symbolic : bool or None
        Verdict of the sympy derivation (``None`` when the claim has no symbolic part).
    empirical : float
        The independently computed value (enumeration / simulation).
    theoretical : float
        The closed form.
    tolerance : float
        Allowed ``|empirical - theoretical|`` (derived from a standard error, or a float round-off
        bound for exact computations). For a one-sided bound, see ``relation``.
    relation : str
        ``"=="`` (two-sided, within tolerance), ``"<="`` (empirical <= theoretical + tolerance) or
        ``">="``.
    note : str
        Anything the reader should know (e.g. a discrepancy with the published paper).
    comparisons : tuple of Comparison
        Further numeric pairs (other parameter settings, the package's own formulas against the
        independent computation); every one must hold for the check to pass.
    """

    label: str
    claim: str
    method: str
    symbolic: bool | None
    empirical: float
    theoretical: float
    tolerance: float
    relation: str = "=="
    note: str = ""
    comparisons: tuple[Comparison, ...] = ()

    @property
    def numeric_ok(self) -> bool:
        """Whether the main numeric pair agrees within the tolerance under ``relation``."""
        return _agrees(self.empirical, self.theoretical, self.tolerance, self.relation)

    @property
    def failed_comparisons(self) -> list[Comparison]:
        """The further pairs that do not hold."""
        return [c for c in self.comparisons if not c.ok]

    @property
    def passed(self) -> bool:
        """Symbolic verdict (if any), the main numeric pair and every comparison all hold."""
        return self.numeric_ok and self.symbolic is not False and not self.failed_comparisons

    def to_dict(self) -> dict[str, Any]:
        """The check's fields and verdict, as :meth:`from_dict` reads them.

        Non-finite numbers stay floats (``cvfl verify --json`` writes them as strings).
        """
        return {
            "label": self.label,
            "claim": self.claim,
            "method": self.method,
            "symbolic": self.symbolic,
            "empirical": self.empirical,
            "theoretical": self.theoretical,
            "tolerance": self.tolerance,
            "relation": self.relation,
            "note": self.note,
            "passed": self.passed,
            "comparisons": [
                {
                    "name": c.name,
                    "empirical": c.empirical,
                    "theoretical": c.theoretical,
                    "tolerance": c.tolerance,
                    "relation": c.relation,
                    "ok": c.ok,
                }
                for c in self.comparisons
            ],
        }

    @classmethod
    def from_dict(cls, d: Any, where: str = "the check") -> CheckResult:
        """A check from :meth:`to_dict`, each field checked; a stored verdict must agree."""
        from cvfl_theory.store import checked_field

        if not isinstance(d, dict):
            raise ValueError(f"{where}: a check is a JSON object")

        def numbers(x: dict[str, Any], w: str) -> dict[str, float]:
            return {
                k: float(checked_field(x, k, (int, float), w))
                for k in ("empirical", "theoretical", "tolerance")
            }

        def relation(x: dict[str, Any], w: str) -> str:
            rel = checked_field(x, "relation", str, w)
            if rel not in _RELATIONS:
                raise ValueError(f"{w}: relation must be one of {_RELATIONS}, got {rel!r}")
            return str(rel)

        comparisons = []
        for i, c in enumerate(checked_field(d, "comparisons", list, where)):
            w = f"{where}, comparison {i}"
            if not isinstance(c, dict):
                raise ValueError(f"{w}: a comparison is a JSON object")
            comparisons.append(
                Comparison(
                    name=checked_field(c, "name", str, w), relation=relation(c, w), **numbers(c, w)
                )
            )
        symbolic = d.get("symbolic")
        if symbolic is not None and not isinstance(symbolic, bool):
            raise ValueError(f"{where}: symbolic must be true, false or null")
        res = cls(
            label=checked_field(d, "label", str, where),
            claim=checked_field(d, "claim", str, where),
            method=checked_field(d, "method", str, where),
            symbolic=symbolic,
            relation=relation(d, where),
            note=checked_field(d, "note", str, where),
            comparisons=tuple(comparisons),
            **numbers(d, where),
        )
        if "passed" in d and d["passed"] is not res.passed:
            raise ValueError(f"{where}: the stored verdict contradicts its numbers")
        return res

    def row(self) -> str:
        """One text line for a report (failing comparisons are appended)."""
        sym = {True: "proved", False: "FAILED", None: "-"}[self.symbolic]
        verdict = "PASS" if self.passed else "FAIL"
        extra = ""
        if self.comparisons:
            bad = self.failed_comparisons
            extra = f"  [+{len(self.comparisons)} pairs, {len(bad)} failed]"
            if bad:
                extra += " FAILED: " + "; ".join(str(c) for c in bad[:3])
        return (
            f"{self.label:<6} {verdict:<4}  sympy: {sym:<6}  empirical {self.empirical:.6g} "
            f"{self.relation} theory {self.theoretical:.6g} (tol {self.tolerance:.2g})  "
            f"{self.claim}{extra}"
        )


def check_names() -> list[str]:
    """The module names of every check in this package, sorted, without importing any of them.

    ``cvfl verify`` sends these names to its workers, which import what their checks need
    (torch, sympy); the process that only lists and prints them never does.
    """
    import proofs_checks

    return sorted(
        info.name
        for info in pkgutil.iter_modules(proofs_checks.__path__)
        if info.name not in {"result", "__main__"} and not info.name.startswith("_")
    )


def load_check(name: str) -> Callable[[], CheckResult]:
    """The ``check`` function of module ``proofs_checks.<name>`` (one of :func:`check_names`)."""
    if name not in check_names():
        raise ValueError(f"no proofs check named {name!r}; the checks are {check_names()}")
    fn = getattr(importlib.import_module(f"proofs_checks.{name}"), "check", None)
    if not callable(fn):
        raise TypeError(
            f"proofs_checks.{name} has no check() function (a helper module's name starts with '_')"
        )
    return fn


def all_checks() -> list[tuple[str, Callable[[], CheckResult]]]:
    """Every ``(module name, check function)`` of this package, sorted by module name."""
    return [(name, load_check(name)) for name in check_names()]


def run_all(prefix: str = "") -> list[CheckResult]:
    """Run every check whose module name starts with ``prefix`` (e.g. ``"k"`` or ``"c5"``)."""
    return [load_check(name)() for name in check_names() if name.startswith(prefix)]
