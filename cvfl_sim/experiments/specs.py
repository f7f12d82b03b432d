r"""What a sweep trains: :class:`RunSpec` (one run), the settings per data set, :class:`Options`.

Every finished run is one JSON file under ``<out>/runs/`` named by its specification (including a
hash of the training settings), written atomically; an interrupted sweep rerun with the same
arguments loads the finished runs and computes only the missing ones (:func:`run_sweep`).
Importing this module does not import torch (a run imports it).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..vfl.compressors import COMPRESSORS, EF_SUFFIX, RANGE, make_compressor
from ..vfl.data import VerticalDataset, load_dataset
from ..vfl.results import RunResult
from .sweep import Executor, run_specs

if TYPE_CHECKING:
    from ..vfl.config import CVFLConfig

__all__ = [
    "SETTINGS",
    "BITS",
    "WORK_PER_EPOCH",
    "RunSpec",
    "Options",
    "spec_dataset",
    "run_spec",
    "run_sweep",
    "compressor_specs",
]

BITS = (2, 3, 4)

SETTINGS: dict[str, dict[str, Any]] = {
    "digits-quadrants": {
        "lr": 0.05,
        "Q": 10,
        "batch_size": 64,
        "embedding_size": 16,
        "epochs": 20,
        "quick_epochs": 8,
        "eval_every": 5,
    },
    "breast-cancer": {
        "lr": 0.05,
        "Q": 10,
        "batch_size": 64,
        "embedding_size": 16,
        "epochs": 20,
        "quick_epochs": 8,
        "eval_every": 5,
    },
    "digits-views-4": {
        "lr": 0.05,
        "Q": 10,
        "batch_size": 64,
        "embedding_size": 16,
        "epochs": 15,
        "quick_epochs": 5,
        "eval_every": 5,
    },
    "digits-views-12": {
        "lr": 0.05,
        "Q": 10,
        "batch_size": 64,
        "embedding_size": 16,
        "epochs": 15,
        "quick_epochs": 5,
        "eval_every": 5,
    },
}
"""Training settings per data set (MLP parties, linear server head, plain SGD; evaluation every
``eval_every`` rounds, so bits and rounds to target are resolved to 5 rounds)."""

WORK_PER_EPOCH = {
    "digits-quadrants": 1797 * 4,
    "breast-cancer": 569 * 4,
    "digits-views-4": 1797 * 4,
    "digits-views-12": 1797 * 12,
}
"""Samples × parties of each data set: a run's cost is about ``epochs`` times this (digits-views
with 12 parties measured at ~2.4× the 4-party runs). Only the order of computation uses it
(:meth:`RunSpec.cost`); it is not part of a run's key."""


@dataclass(frozen=True)
class RunSpec:
    """One training run of a sweep (a cell × a seed)."""

    dataset: str
    compressor: str
    bits: int
    Q: int
    seed: int
    epochs: int
    eval_every: int | None = None

    def __post_init__(self) -> None:
        if self.bits == 32:  # the uncompressed baseline is one run whatever the sweep calls it
            object.__setattr__(self, "compressor", "none")

    @property
    def cell(self) -> tuple[str, str, int, int]:
        """The sweep cell (everything but the seed)."""
        return (self.dataset, self.compressor, self.bits, self.Q)

    def config(self) -> CVFLConfig:
        """The :class:`CVFLConfig` of this run."""
        from ..vfl.config import CVFLConfig

        st = SETTINGS[self.dataset]
        return CVFLConfig(
            Q=self.Q,
            lr=st["lr"],
            epochs=self.epochs,
            batch_size=st["batch_size"],
            embedding_size=st["embedding_size"],
            compressor=make_compressor(self.compressor, self.bits),
            error_feedback=self.compressor.endswith(EF_SUFFIX),
            seed=self.seed,
            eval_every=self.eval_every if self.eval_every is not None else st.get("eval_every"),
        )

    def key(self) -> str:
        """File name stem: readable fields plus a hash of the data set's training settings."""
        h = hashlib.sha1(
            json.dumps([asdict(self), SETTINGS[self.dataset], RANGE], sort_keys=True).encode()
        ).hexdigest()[:8]
        comp = "none" if self.bits == 32 else self.compressor
        return f"{self.dataset}_{comp}-b{self.bits}_Q{self.Q}_e{self.epochs}_s{self.seed}_{h}"

    def holds(self, result: RunResult) -> bool:
        """Whether ``result`` is this spec's run: its configuration and data set, as saved."""
        want = json.loads(json.dumps(self.config().to_dict(), default=str))
        return bool(result.config == want and result.dataset.get("name") == self.dataset)

    def cost(self) -> float:
        """Relative compute time (epochs × :data:`WORK_PER_EPOCH`): longest runs go first."""
        return float(self.epochs * WORK_PER_EPOCH.get(self.dataset, 1))


_DATA_CACHE: dict[str, VerticalDataset] = {}


def _dataset(name: str) -> VerticalDataset:
    if name not in _DATA_CACHE:
        _DATA_CACHE[name] = load_dataset(name)
    return _DATA_CACHE[name]


def spec_dataset(spec: RunSpec) -> VerticalDataset:
    """The data set of ``spec``, built once per process (what :func:`run_sweep` sends a worker)."""
    return _dataset(spec.dataset)


def run_spec(spec: RunSpec, ds: VerticalDataset | None = None) -> RunResult:
    """Train one run of a sweep on ``ds`` (default: :func:`spec_dataset`), as a worker does.

    torch is imported here, by the first run of a process, not with this module.
    """
    from ..vfl.train import train

    return train(spec_dataset(spec) if ds is None else ds, spec.config())


def run_sweep(
    specs: Sequence[RunSpec],
    out: str | os.PathLike[str],
    force: bool = False,
    progress: bool | None = None,
    *,
    executor: Executor | None = None,
    known: dict[RunSpec, RunResult] | None = None,
    bar: Any = None,
) -> dict[RunSpec, RunResult]:
    """Run (or load) every spec; one atomically written file per finished run.

    The engine is :func:`cvfl_sim.experiments.sweep.run_specs`: missing runs are computed on ``executor``
    (in this process by default; ``Executor(jobs=4)`` on 4 local processes; a Dask cluster),
    each with one torch intra-op thread unless ``Executor(threads=...)`` says otherwise, and the
    result is in the order of ``specs`` whatever order the runs finished in. The longest runs
    are computed first (:meth:`RunSpec.cost`), so that the processes finish together.

    Parameters
    ----------
    specs : sequence of RunSpec
    out : path-like
        Results root; runs go to ``<out>/runs/<key>.json``.
    force : bool
        Recompute even if a run file exists. A run file that cannot be read is recomputed (and
        rewritten) with a ``RuntimeWarning``.
    progress : bool or None
        A tqdm bar on stderr: ``None`` when stderr is a terminal, ``True`` always, ``False`` never.
    executor : Executor, optional
        Where missing runs are computed.
    known : dict, optional
        Runs already at hand (computed earlier by the same command): reused as they are.
    bar : tqdm, optional
        A bar shared by several sweeps (``cvfl reproduce all``), used instead of ``progress``.
    """
    folder = os.path.join(os.fspath(out), "runs")
    return run_specs(
        specs,
        folder,
        run_spec,
        inputs=spec_dataset,  # built here once, sent with each task: workers skip scipy
        cost=RunSpec.cost,
        executor=executor,
        force=force,
        known=known,
        progress=progress,
        bar=bar,
        warm="cvfl_sim.vfl.train",
        belongs=RunSpec.holds,  # torch and the model (run_spec's own module imports neither)
    )


@dataclass
class Options:
    """Sweep options shared by the experiments."""

    out: str = "results"
    quick: bool = False
    seeds: int | None = None
    force: bool = False
    target_fraction: float = 0.95
    progress: bool | None = True
    executor: Executor = field(default_factory=Executor)
    """Where the sweeps' runs are computed (:class:`~cvfl_sim.experiments.sweep.Executor`)."""
    known: dict[RunSpec, RunResult] = field(default_factory=dict)
    """The finished runs: :func:`~cvfl_sim.experiments.run_experiments` adds the runs it computes or loads (those
    already here are reused as they are, even with ``force``); the experiments read theirs here."""

    def n_seeds(self) -> int:
        """Seeds per cell: 5 (the paper), 2 with ``quick``, or as given."""
        return self.seeds if self.seeds is not None else (2 if self.quick else 5)

    def epochs(self, dataset: str) -> int:
        """Epochs of a data set in this mode."""
        st = SETTINGS[dataset]
        return int(st["quick_epochs"] if self.quick else st["epochs"])

    def folder(self, name: str) -> str:
        """The results folder ``<out>/<name>`` of an experiment (created)."""
        f = os.path.join(self.out, name)
        os.makedirs(f, exist_ok=True)
        return f

    def target(self, results: dict[RunSpec, RunResult], ref: Callable[[RunSpec], bool]) -> float:
        """``target_fraction`` × the mean maximum metric of the reference runs (``ref``)."""
        maxes = [r.max_metric() for s, r in results.items() if ref(s)]
        return round(self.target_fraction * float(np.mean(maxes)), 4)

    def runs(self, specs: Sequence[RunSpec]) -> dict[RunSpec, RunResult]:
        """The finished runs of ``specs``, computed by :func:`~cvfl_sim.experiments.run_experiments`."""
        return {spec: self.known[spec] for spec in specs}


def compressor_specs(opt: Options, ds: str, ef: bool = False) -> list[RunSpec]:
    """The uncompressed baseline and every compressor at every bit width on ``ds``.

    With ``ef``, also every compressor at ``b = 2`` with error feedback.
    """
    st = SETTINGS[ds]
    seeds = range(opt.n_seeds())
    specs = [RunSpec(ds, "none", 32, st["Q"], s, opt.epochs(ds)) for s in seeds]
    specs += [
        RunSpec(ds, k, b, st["Q"], s, opt.epochs(ds))
        for k in COMPRESSORS
        for b in BITS
        for s in seeds
    ]
    if ef:
        specs += [
            RunSpec(ds, k + EF_SUFFIX, 2, st["Q"], s, opt.epochs(ds))
            for k in COMPRESSORS
            for s in seeds
        ]
    return specs
