"""The result every proofs check returns, and the registry that finds them."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one THEORY.md claim check.

    Attributes
    ----------
    label : str
        THEORY.md label, e.g. ``"K1.2"``.
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

    @property
    def numeric_ok(self) -> bool:
        """Whether the numeric pair agrees within the tolerance under ``relation``."""
        e, t, tol = self.empirical, self.theoretical, self.tolerance
        if self.relation == "<=":
            return e <= t + tol
        if self.relation == ">=":
            return e >= t - tol
        return abs(e - t) <= tol

    @property
    def passed(self) -> bool:
        """Symbolic verdict (if any) and numeric pair both hold."""
        return self.numeric_ok and self.symbolic is not False

    def row(self) -> str:
        """One text line for a report."""
        sym = {True: "proved", False: "FAILED", None: "-"}[self.symbolic]
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"{self.label:<6} {verdict:<4}  sympy: {sym:<6}  empirical {self.empirical:.6g} "
            f"{self.relation} theory {self.theoretical:.6g} (tol {self.tolerance:.2g})  "
            f"{self.claim}"
        )


def all_checks() -> list[tuple[str, Callable[[], CheckResult]]]:
    """Every ``check`` function of the modules in this package, sorted by module name."""
    import proofs_checks

    found = []
    for info in sorted(pkgutil.iter_modules(proofs_checks.__path__), key=lambda m: m.name):
        if info.name in {"result", "__main__"} or info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"proofs_checks.{info.name}")
        fn = getattr(mod, "check", None)
        if callable(fn):
            found.append((info.name, fn))
    return found


def run_all(prefix: str = "") -> list[CheckResult]:
    """Run every check whose module name starts with ``prefix`` (e.g. ``"k"`` or ``"c5"``)."""
    return [fn() for name, fn in all_checks() if name.startswith(prefix)]
