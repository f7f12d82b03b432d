r"""Results of a C-VFL run: history, per-round log, ledger totals; atomic save and load.

:class:`RunResult` is what :func:`cvfl_sim.train` returns. It saves to one JSON file (everything,
including the configuration) plus a CSV of the history next to it, each written to a temporary file
and moved into place with :func:`os.replace`, so an interrupted run never leaves a half-written
result that a resumed sweep would trust.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from cvfl_theory._atomic import atomic_write_text
from cvfl_theory._export import dataframe, json_safe
from cvfl_theory.table import Table

__all__ = ["RunResult", "HISTORY_COLUMNS", "MAX_RESULT_BYTES"]

HISTORY_COLUMNS = (
    "epoch",
    "round",
    "train_loss",
    "test_accuracy",
    "test_f1",
    "bits",
    "bits_paper_model",
    "compression_error",
    "embedding_error",
    "server_model_error",
    "grad_norm_sq",
)
"""Columns of :attr:`RunResult.history` (``grad_norm_sq`` is ``None`` unless tracked)."""


_REQUIRED_NUMBERS = ("epoch", "round", "train_loss", "test_accuracy", "test_f1", "bits")
"""History entries every saved row holds as numbers (checked by :meth:`RunResult.load`)."""

MAX_RESULT_BYTES = 512 * 2**20
"""Largest result file :meth:`RunResult.load` reads (checked before reading)."""

TIMING_KEYS = frozenset({"train_seconds", "wall_seconds"})
"""Summary entries that measure wall-clock time (not part of a result's identity)."""


def _json_restore(v: Any) -> Any:
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    if isinstance(v, dict):
        return {k: _json_restore(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_restore(x) for x in v]
    return v


@dataclass
class RunResult:
    r"""The record of one C-VFL run.

    Attributes
    ----------
    config : dict
        JSON-able description of the :class:`~cvfl_sim.vfl.config.CVFLConfig` (compressors by
        class name and constructor arguments).
    dataset : dict
        :meth:`VerticalDataset.describe` of the data.
    history : list of dict
        One row per evaluation with :data:`HISTORY_COLUMNS`: ``bits`` cumulative ledger bits (C6),
        ``bits_paper_model`` the authors' formula, ``compression_error`` the measured
        :math:`\sum_{m=0}^{M} \|\varepsilon_m^{t_0}\|_F^2` (C2) averaged over the rounds since the
        previous row (``embedding_error`` the parties' part, ``server_model_error`` the
        :math:`m = 0` part), ``train_loss`` the full training loss :math:`F(\Theta)`.
    rounds : dict of list
        Per-round log: ``bits`` (total of the round), ``embedding_error`` (the parties' total),
        ``embedding_error_by_party`` (one list of :math:`\|\varepsilon_m^{t_0}\|_F^2`,
        :math:`m = 1..M`, per round), ``server_model_error``, ``lr``.
    summary : dict
        Ledger totals, wall time, final and best metrics.
    models : dict or None
        The trained modules ``{"parties": [...], "server": ...}`` after :func:`cvfl_sim.train`;
        not saved (``None`` after :meth:`load`) and not part of equality.
    """

    config: dict[str, Any]
    dataset: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    rounds: dict[str, list[Any]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    models: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    # ---------------------------------------------------------------- queries
    @property
    def metric(self) -> str:
        """The data set's headline metric name (``accuracy`` or ``f1``)."""
        return str(self.dataset.get("metric", "accuracy"))

    def metric_values(self, metric: str | None = None) -> list[float]:
        """The headline test metric per history row."""
        col = "test_f1" if (metric or self.metric) == "f1" else "test_accuracy"
        return [float(r[col]) for r in self.history]

    def max_metric(self, metric: str | None = None) -> float:
        """Best test metric over the evaluations."""
        return max(self.metric_values(metric))

    def first_reaching(self, target: float, metric: str | None = None) -> dict[str, Any] | None:
        """The first history row whose test metric is ``>= target`` (``None`` if never)."""
        for row, v in zip(self.history, self.metric_values(metric)):
            if v >= target:
                return row
        return None

    def bits_to_target(
        self, target: float, metric: str | None = None, column: str = "bits"
    ) -> float:
        """Cumulative bits at the first evaluation reaching ``target`` (``inf`` if never).

        ``column="bits_paper_model"`` gives the same under the authors' cost model (C6).
        """
        row = self.first_reaching(target, metric)
        return math.inf if row is None else float(row[column])

    def rounds_to_target(self, target: float, metric: str | None = None) -> float:
        """Rounds completed at the first evaluation reaching ``target`` (``inf`` if never)."""
        row = self.first_reaching(target, metric)
        return math.inf if row is None else float(row["round"])

    # ---------------------------------------------------------------- I/O
    def to_dict(self) -> dict[str, Any]:
        """JSON-able dictionary of everything."""
        return json_safe(  # non-finite floats as strings ("inf", "nan"): standard JSON
            {
                "config": self.config,
                "dataset": self.dataset,
                "history": self.history,
                "rounds": self.rounds,
                "summary": self.summary,
            }
        )

    def history_csv(self) -> str:
        """The history as CSV text."""
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(HISTORY_COLUMNS), extrasaction="ignore")
        w.writeheader()
        for row in self.history:
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in HISTORY_COLUMNS})
        return buf.getvalue()

    def to_dataframe(self) -> Any:
        """The history as a :class:`pandas.DataFrame`, one row per evaluation.

        Columns are :data:`HISTORY_COLUMNS`, in the order :meth:`history_csv` writes them; a
        missing or ``None`` value is NaN (an empty CSV cell). Needs pandas (``cvfl[dataframe]``).

        Examples
        --------
        >>> run = RunResult({}, {"name": "toy"}, [{"epoch": 0, "round": 1, "bits": 64}])
        >>> list(run.to_dataframe().columns) == list(HISTORY_COLUMNS)
        True
        """
        rows = [[row.get(k) for k in HISTORY_COLUMNS] for row in self.history]
        return dataframe(HISTORY_COLUMNS, rows)

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write ``path`` (JSON, ``.json`` appended if missing) and the history CSV beside it.

        Both files are written atomically (temporary file + :func:`os.replace`); the JSON is
        written last, so its presence means the run is complete.

        Returns
        -------
        str
            The JSON path.
        """
        p = os.fspath(path)
        if not p.endswith(".json"):
            p += ".json"
        atomic_write_text(p[: -len(".json")] + ".csv", self.history_csv())
        atomic_write_text(p, json.dumps(self.to_dict(), indent=1, sort_keys=True))
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunResult:
        """Read a result written by :meth:`save`.

        Raises
        ------
        ValueError
            The file is not a readable, complete RunResult (not JSON, nested too deeply, or
            missing or mistyped fields); the message names the file and the fault.
        OSError
            The file cannot be read.
        """
        p = os.fspath(path)
        if not p.endswith(".json") and not os.path.exists(p):
            p += ".json"
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_RESULT_BYTES:
                raise ValueError(
                    f"{p!r} is not a RunResult file: {size} bytes, more than MAX_RESULT_BYTES = "
                    f"{MAX_RESULT_BYTES} (the per-round log of ~10^6 rounds)"
                )
            raw = fh.read(MAX_RESULT_BYTES + 1)
        try:
            d = _json_restore(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ValueError(f"{p!r} is not a RunResult file: not JSON ({exc})") from None
        if not isinstance(d, dict):
            raise ValueError(f"{p!r} is not a RunResult file (a JSON {type(d).__name__})")
        missing = {"config", "dataset", "history"} - set(d)
        if missing:
            raise ValueError(f"{p!r} is not a RunResult file (missing {sorted(missing)})")
        kinds = {"config": dict, "dataset": dict, "history": list, "rounds": dict, "summary": dict}
        for key, kind in kinds.items():
            if key in d and not isinstance(d[key], kind):
                raise ValueError(f"{p!r}: {key!r} must be a JSON {kind.__name__}")
        if not d["history"]:
            raise ValueError(f"{p!r}: the history is empty")
        for i, row in enumerate(d["history"]):
            bad = [
                k
                for k in _REQUIRED_NUMBERS
                if not isinstance(row, dict)
                or isinstance(row.get(k), bool)
                or not isinstance(row.get(k), (int, float))
            ]
            if bad:
                raise ValueError(f"{p!r}: history row {i} lacks numbers for {bad}")
        return cls(
            d["config"], d["dataset"], d["history"], d.get("rounds", {}), d.get("summary", {})
        )

    def __eq__(self, other: object) -> bool:
        """Equal content; wall-clock timings in ``summary`` are ignored."""
        if not isinstance(other, RunResult):
            return NotImplemented

        def canon(r: RunResult) -> str:
            d = r.to_dict()
            d["summary"] = {k: v for k, v in d["summary"].items() if k not in TIMING_KEYS}
            return json.dumps(d, sort_keys=True)

        return canon(self) == canon(other)

    def __repr__(self) -> str:
        last = self.history[-1] if self.history else {}
        return (
            f"RunResult(dataset={self.dataset.get('name')!r}, rows={len(self.history)}, "
            f"bits={last.get('bits')}, {self.metric}={last.get('test_' + self.metric)})"
        )

    def _repr_html_(self) -> str:
        """Key numbers in Jupyter: the data set, the number of evaluations and the last row."""
        last = self.history[-1] if self.history else {}
        title = (
            f"RunResult: {self.dataset.get('name')}, {len(self.history)} evaluations; "
            "last row of the history"
        )
        cells = [("-" if last.get(k) is None else last[k]) for k in HISTORY_COLUMNS]
        return Table(list(HISTORY_COLUMNS), [cells] if last else [], title=title)._repr_html_()
