"""The verification suite run by ``cvfl verify``: each encoder on a few data sets, or on yours.

The data (:func:`cvfl_sim.experiments.reference_data.verification_datasets`) include real vectors
shipped with scikit-learn (no download), a Gaussian set and a heavy-tailed (log-normal) set in
float32; ``cvfl verify X.npy`` runs the same encoders on the researcher's matrix. The proofs
checks run beside them; :class:`VerifyReport` keeps both (``save``/``load``, ``to_dict``,
``to_dataframe``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cvfl_theory._export import dataframe, json_safe
from cvfl_theory.encoders import (
    BinaryQuantizationEncoder,
    Encoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
)
from cvfl_theory.table import Table
from cvfl_theory.verify import VerifyResult, verify
from proofs_checks.result import CheckResult

from .reference_data import verification_datasets

__all__ = [
    "default_encoders",
    "suite_runs",
    "run_suite",
    "run_task",
    "summary_tables",
    "summary_table",
    "VerifyReport",
]


def default_encoders(n: int, d: int, seed: int = 0) -> list[Encoder]:
    """One encoder of each kind, sized for an ``(n, d)`` data set."""
    p_full = np.random.default_rng(seed + 1).uniform(0.05, 1.0, size=(n, d))
    return [
        IndependentEncoder(0.25, mu="mean"),
        IndependentEncoder(p_full, mu="zero"),
        FixedSizeEncoder(max(1, d // 4), mu="mean"),
        BinaryQuantizationEncoder(),
        RotatedBinaryEncoder(rotation_seed=seed),
    ]


def suite_runs(
    seed: int = 0, datasets: Mapping[str, np.ndarray] | None = None
) -> list[tuple[str, np.ndarray, Encoder, int]]:
    """``(data name, X, encoder, rng seed)`` of every run of the suite (default: its data sets)."""
    data = verification_datasets(seed) if datasets is None else dict(datasets)
    return [
        (name, X, enc, 1000 * seed + 10 * k + j)
        for k, (name, X) in enumerate(data.items())
        for j, enc in enumerate(default_encoders(X.shape[0], X.shape[1], seed=seed))
    ]


def run_suite(
    trials: int = 1000, seed: int = 0, datasets: Mapping[str, np.ndarray] | None = None
) -> Iterator[tuple[str, VerifyResult]]:
    """Yield ``(data set name, result)`` for every encoder on every data set."""
    for name, X, enc, rng in suite_runs(seed, datasets):
        yield name, verify(enc, X, trials=trials, rng=rng)


def run_task(task: tuple[Any, ...], trials: int) -> tuple[Any, ...]:
    """One unit of ``cvfl verify``, as a worker process runs it.

    ``("run", i, name, X, encoder, seed)`` gives ``("run", i, name, VerifyResult)``;
    ``("check", i, module name)`` runs that proofs check (imported in the worker) and gives
    ``("check", i, CheckResult, what it printed)``: a check's own lines are notes, never this
    process's stdout. A check that cannot be imported or raises is named in the error.
    """
    if task[0] == "run":
        _, i, name, X, encoder, seed = task
        return ("run", i, name, verify(encoder, X, trials=trials, rng=seed))
    import contextlib
    import io

    from proofs_checks import load_check

    _, i, name = task
    printed = io.StringIO()
    try:
        check = load_check(name)  # imported here: the process that lists the checks never does
        with contextlib.redirect_stdout(printed):
            result = check()
    except Exception as e:
        raise RuntimeError(f"proofs check {name}: {type(e).__name__}: {e}") from e
    return ("check", i, result, printed.getvalue())


def _compact(encoder: str) -> str:
    """``IndependentEncoder(p=0.25, ...)`` as ``Independent(p=0.25, ...)`` (a shorter column)."""
    head, _, rest = encoder.partition("(")
    return head.removesuffix("Encoder") + ("(" + rest if rest else "")


def _row(res: VerifyResult) -> list[Any]:
    worst = max(res.checks, key=lambda c: c.z / c.threshold)
    return [
        _compact(res.encoder),
        res.mse.theoretical,
        f"{res.mse.empirical:.6g} ± {res.mse.se:.2g}",
        round(res.mse.z, 2),
        f"{worst.z:.2f}/{worst.threshold:.2f}",
        "pass" if res.passed else "FAIL",
    ]


_COLUMNS = ["encoder", "closed form", "simulated ± SE", "|z|", "|z|/allowed", "verdict"]
_GROUPS = [("", 1), ("MSE", 3), ("worst check", 1), ("", 1)]


def summary_tables(results: list[tuple[str, VerifyResult]]) -> list[Table]:
    """One table per data set, one row per encoder: the MSE pair, the worst check, the verdict.

    The worst check is the one closest to failing (largest :math:`|z|` / allowed); ``cvfl verify
    --details`` prints every check of every run.
    """
    names = list(dict.fromkeys(name for name, _ in results))
    return [
        Table(
            _COLUMNS,
            [_row(r) for n, r in results if n == name],
            title=f"{name}: closed forms vs simulation (K1, K2, K3, K5)",
            groups=_GROUPS,
        )
        for name in names
    ]


def summary_table(results: list[tuple[str, VerifyResult]]) -> Table:
    """Every run in one table (the data set as a first column), for CSV and DataFrames."""
    return Table(
        ["data", *_COLUMNS],
        [[name, *_row(r)] for name, r in results],
        title="closed forms vs simulation (K1, K2, K3, K5)",
        groups=[("", 1), *_GROUPS],
        key_columns=2,
    )


@dataclass
class VerifyReport:
    """What ``cvfl verify`` found: the suite's runs and the proofs checks.

    Attributes
    ----------
    suite : list of (str, VerifyResult)
        Every (data set, encoder) run.
    checks : list of CheckResult
        The proofs checks run.
    trials, seed : int
        The suite's Monte Carlo trials and seed.
    data : str
        ``"built-in"`` or the researcher's file.
    """

    suite: list[tuple[str, VerifyResult]] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    trials: int = 1000
    seed: int = 0
    data: str = "built-in"

    @property
    def failures(self) -> list[str]:
        """The failed runs (``data: encoder``) and checks (their labels)."""
        return [f"{n}: {r.encoder}" for n, r in self.suite if not r.passed] + [
            c.label for c in self.checks if not c.passed
        ]

    @property
    def passed(self) -> bool:
        """Every run and every check passed."""
        return not self.failures

    def table(self) -> Table:
        """The suite's summary table (:func:`summary_table`)."""
        return summary_table(self.suite)

    def checks_table(self) -> Table:
        """One row per proofs check: label, verdict, the main pair and the claim."""
        rows = [
            [
                c.label,
                "pass" if c.passed else "FAIL",
                {True: "proved", False: "FAILED", None: "-"}[c.symbolic],
                c.empirical,
                c.relation,
                c.theoretical,
                c.tolerance,
                len(c.comparisons),
                c.claim,
            ]
            for c in self.checks
        ]
        cols = ["label", "verdict", "sympy", "empirical", "", "theory", "tolerance", "pairs"]
        return Table([*cols, "claim"], rows, title="proofs checks")

    def _raw(self) -> dict[str, Any]:
        return {
            "trials": self.trials,
            "seed": self.seed,
            "data": self.data,
            "suite": [dict(data=n, **r._raw()) for n, r in self.suite],
            "proofs_checks": [c.to_dict() for c in self.checks],
            "passed": len(self.suite) + len(self.checks) - len(self.failures),
            "failed": len(self.failures),
            "failures": self.failures,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: every run and check with its numbers (non-finite ones as strings)."""
        return json_safe(self._raw())

    def to_dataframe(self) -> Any:
        """One row per suite run (the columns of :meth:`table`); needs pandas."""
        t = self.table()
        return dataframe(t.columns, t.rows)

    def save(self, path: Any) -> str:
        """Write the result file (JSON, no pickle; ``.json`` appended); :meth:`load` reads it."""
        from cvfl_theory.store import write_result

        return write_result(path, "VerifyReport", self._raw())

    @classmethod
    def load(cls, path: Any) -> VerifyReport:
        """Read a result file written by :meth:`save`, every field checked."""
        from cvfl_theory.store import checked_field, read_result

        d, _ = read_result(path, "VerifyReport")
        where = repr(str(path))
        suite = []
        for i, r in enumerate(checked_field(d, "suite", list, where)):
            w = f"{where}, run {i}"
            if not isinstance(r, dict):
                raise ValueError(f"{w}: a run is a JSON object")
            suite.append((checked_field(r, "data", str, w), VerifyResult.from_dict(r, w)))
        checks = [
            CheckResult.from_dict(c, f"{where}, check {i}")
            for i, c in enumerate(checked_field(d, "proofs_checks", list, where))
        ]
        return cls(
            suite=suite,
            checks=checks,
            trials=checked_field(d, "trials", int, where),
            seed=checked_field(d, "seed", int, where),
            data=checked_field(d, "data", str, where),
        )

    def __str__(self) -> str:
        tables = [*summary_tables(self.suite), self.checks_table()]
        return "\n\n".join(str(t) for t in tables)

    def _repr_html_(self) -> str:
        tables = [*summary_tables(self.suite), self.checks_table()]
        return "".join(t._repr_html_() for t in tables)
