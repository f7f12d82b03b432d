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
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..vfl.compressors import COMPRESSORS, EF_SUFFIX, RANGE, make_compressor
from ..vfl.data import PAPER_COUNTERPART, PAPER_DATASETS, VerticalDataset, load_dataset
from ..vfl.paper_files import find_paper_folder
from ..vfl.results import RunResult
from ..vfl.sources import DataSource
from .sweep import Executor, run_specs

if TYPE_CHECKING:
    from ..vfl.config import CVFLConfig

__all__ = [
    "SETTINGS",
    "USER_SETTINGS",
    "settings_of",
    "BITS",
    "WORK_PER_EPOCH",
    "RunSpec",
    "Options",
    "cached_dataset",
    "spec_dataset",
    "sent_dataset",
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

SETTINGS.update(
    {
        "cifar10-quadrants": {
            "lr": 0.05,
            "Q": 10,
            "batch_size": 100,
            "embedding_size": 16,
            "epochs": 10,
            "quick_epochs": 1,
            "eval_every": 50,
            "parties_model": "cnn",
        },
        **{
            f"modelnet10-views-{m}": {
                "lr": 0.05,
                "Q": 10,
                "batch_size": 64,
                "embedding_size": 16,
                "epochs": 20,
                "quick_epochs": 2,
                "eval_every": 20,
                "parties_model": "cnn",
            }
            for m in (4, 12)
        },
        "mimic3-mortality": {
            "lr": 0.05,
            "Q": 10,
            "batch_size": 256,
            "embedding_size": 16,
            "epochs": 10,
            "quick_epochs": 1,
            "eval_every": 20,
            "parties_model": "gru",
        },
    }
)
# The paper's data sets read from a researcher's files (--data-dir): the paper's model family (a
# small CNN per party for the images, a GRU for the time series) with our plain-SGD settings,
# not the paper's optimiser; evaluated every ``eval_every`` rounds.

USER_SETTINGS: dict[str, Any] = dict(SETTINGS["breast-cancer"])
"""Settings of a researcher's own ``.csv``/``.npz`` data set (those of ``breast-cancer``)."""


def settings_of(dataset: str) -> dict[str, Any]:
    """The training settings of a data set: :data:`SETTINGS`, else :data:`USER_SETTINGS`."""
    return SETTINGS.get(dataset, USER_SETTINGS)


WORK_PER_EPOCH = {
    "digits-quadrants": 1797 * 4,
    "breast-cancer": 569 * 4,
    "digits-views-4": 1797 * 4,
    "digits-views-12": 1797 * 12,
    "cifar10-quadrants": 50_000 * 4 * 40,
    "modelnet10-views-4": 3991 * 4 * 40,
    "modelnet10-views-12": 3991 * 12 * 40,
    "mimic3-mortality": 14_681 * 4 * 20,
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
    source: DataSource | None = None
    """Where the data set comes from when it is not a built-in one (the paper's, or a file)."""

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

        st = settings_of(self.dataset)
        return CVFLConfig(
            Q=self.Q,
            parties_model=st.get("parties_model", "mlp"),
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
        fields = asdict(self)
        if self.source is None:  # the built-in data sets keep the keys they always had
            del fields["source"]
        h = hashlib.sha1(
            json.dumps([fields, settings_of(self.dataset), RANGE], sort_keys=True).encode()
        ).hexdigest()[:8]
        comp = "none" if self.bits == 32 else self.compressor
        name = re.sub(r"[^A-Za-z0-9._-]", "_", self.dataset)[:60]
        return f"{name}_{comp}-b{self.bits}_Q{self.Q}_e{self.epochs}_s{self.seed}_{h}"

    def holds(self, result: RunResult) -> bool:
        """Whether ``result`` is this spec's run: its configuration and data set, as saved."""
        want = json.loads(json.dumps(self.config().to_dict(), default=str))
        parties = None if self.source is None else self.source.parties
        name = self.dataset if self.source is None else self.source.label
        return bool(
            result.config == want
            and result.dataset.get("name") == name
            and (parties is None or result.dataset.get("n_parties") == parties)
        )

    def cost(self) -> float:
        """Relative compute time (epochs × :data:`WORK_PER_EPOCH`): longest runs go first."""
        return float(self.epochs * WORK_PER_EPOCH.get(self.dataset, 1))


_DATA_CACHE: dict[tuple[str, DataSource | None], VerticalDataset] = {}


def cached_dataset(name: str, source: DataSource | None = None) -> VerticalDataset:
    """The built-in data set ``name``, or that of ``source``, built once per process."""
    key = (name, source)
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = load_dataset(name) if source is None else source.load()
    return _DATA_CACHE[key]


def spec_dataset(spec: RunSpec) -> VerticalDataset:
    """The data set of ``spec``, built once per process."""
    return cached_dataset(spec.dataset, spec.source)


def sent_dataset(spec: RunSpec) -> VerticalDataset | None:
    """What :func:`run_sweep` sends with a run: its data set, or ``None`` for the paper's.

    The paper's data sets are large (CIFAR-10 is 1.5 GB as float64): each worker reads them from
    the files itself, once, instead of receiving a copy with every run.
    """
    if spec.source is not None and spec.source.kind == "paper":
        return None
    return spec_dataset(spec)


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
        inputs=sent_dataset,  # built here once, sent with each task: workers skip scipy
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
    data_dir: str | None = None
    """A folder of the paper's data set files: each built-in stand-in whose paper counterpart
    is found there (:data:`~cvfl_sim.vfl.data.PAPER_COUNTERPART`) is replaced by it."""
    dataset: DataSource | None = None
    """The researcher's own data set: an experiment then runs on it alone."""

    def datasets(self, stand_ins: Sequence[str]) -> list[tuple[str, DataSource | None]]:
        """The ``(name, source)`` data sets of an experiment written for the built-in ``stand_ins``.

        The researcher's :attr:`dataset` alone if given; else each stand-in, or its paper
        counterpart where :attr:`data_dir` holds that data set's files.
        """
        if self.dataset is not None:
            plain = self.dataset.kind == "builtin" and self.dataset.parties is None
            return [(self.dataset.label, None if plain else self.dataset)]
        out: list[tuple[str, DataSource | None]] = []
        for name in stand_ins:
            paper = PAPER_COUNTERPART.get(name)
            if (
                self.data_dir is not None
                and paper is not None
                and find_paper_folder(PAPER_DATASETS[paper][0], self.data_dir) is not None
            ):
                out.append((paper, DataSource(paper, data_dir=self.data_dir)))
            else:
                out.append((name, None))
        return out

    def n_seeds(self) -> int:
        """Seeds per cell: 5 (the paper), 2 with ``quick``, or as given."""
        return self.seeds if self.seeds is not None else (2 if self.quick else 5)

    def epochs(self, dataset: str) -> int:
        """Epochs of a data set in this mode."""
        st = settings_of(dataset)
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


def compressor_specs(
    opt: Options, ds: str, ef: bool = False, source: DataSource | None = None
) -> list[RunSpec]:
    """The uncompressed baseline and every compressor at every bit width on ``ds``.

    With ``ef``, also every compressor at ``b = 2`` with error feedback. ``source`` says where
    ``ds`` comes from when it is not built in (:meth:`Options.datasets`).
    """
    Q, epochs, seeds = settings_of(ds)["Q"], opt.epochs(ds), range(opt.n_seeds())
    cells = [("none", 32)] + [(k, b) for k in COMPRESSORS for b in BITS]
    if ef:
        cells += [(k + EF_SUFFIX, 2) for k in COMPRESSORS]
    return [RunSpec(ds, k, b, Q, s, epochs, source=source) for k, b in cells for s in seeds]
