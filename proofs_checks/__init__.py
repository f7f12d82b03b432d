"""proofs_checks — one module per label of the theory pages, each with ``check() -> CheckResult``.

Each check re-derives its claim symbolically (sympy) where the theory pages say *derived*, and compares a
closed form with an independent exact or Monte Carlo computation (the numeric pair). Run them all
with ``python -m proofs_checks`` or ``cvfl verify``.
"""

from .result import CheckResult, Comparison, all_checks, check_names, load_check, run_all

__all__ = ["CheckResult", "Comparison", "all_checks", "check_names", "load_check", "run_all"]
