r"""Independent runs of a sweep on an executor, one atomically written file per finished run.

A sweep (THEORY C7, C8: seeds × compressors × bits × data sets) is a list of independent run
specifications, each with a ``key()`` naming its result file ``<folder>/<key>.json``.
:func:`run_specs`

1. takes the runs already at hand (``known``) and loads every finished run file (unless
   ``force``); a file that cannot be read is recomputed, with a ``RuntimeWarning``;
2. computes the rest on an :class:`Executor`: in this process (``jobs = 1``), on ``jobs`` local
   worker processes with joblib's loky backend, or on a Dask cluster (``backend="dask"``, the
   ``cluster`` extra); each computation runs with :attr:`Executor.threads` torch intra-op threads
   (:mod:`cvfl_sim.threads`; one by default, the fastest for these tiny models);
3. writes each result atomically in *this* process as soon as it arrives (so a cluster needs no
   shared file system, and a sweep killed at any moment leaves only complete files: a rerun skips
   them and computes the rest);
4. returns the results in the order of the specifications, whatever order they finished in, so
   the tables built from them are those of a serial run.

Progress is one tqdm bar on stderr (shown when stderr is a terminal, unless forced on or off),
either the sweep's own or a caller's bar shared by several sweeps (``cvfl reproduce all``).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .results import RunResult
from .threads import DEFAULT_THREADS, check_threads, torch_threads

__all__ = ["Executor", "BACKENDS", "run_specs", "progress_bar"]

BACKENDS = ("loky", "dask")
"""Executors of :class:`Executor`: local worker processes (joblib) or a Dask cluster."""

_DASK_MISSING = (
    "--backend dask needs dask.distributed, which is not installed; install the extra: "
    "pip install 'cvfl[cluster]'"
)


class Spec(Protocol):
    """What the engine needs of a run specification: hashable, with a file-name ``key()``."""

    def key(self) -> str:
        """The stem of the run's result file."""
        ...

    def __hash__(self) -> int: ...


S = TypeVar("S", bound=Spec)


def _require_dask() -> Any:
    """The ``distributed`` module, or an ``ImportError`` naming the extra to install."""
    try:
        import distributed
    except ImportError:
        raise ImportError(_DASK_MISSING) from None
    return distributed


@dataclass(frozen=True)
class Executor:
    """Where the independent runs of a sweep are computed.

    Parameters
    ----------
    jobs : int
        Local worker processes (``>= 1``); ``1`` computes in this process. Ignored by ``dask``
        (the cluster has its own workers).
    backend : {"loky", "dask"}
        ``loky``: joblib's process pool on this machine; ``dask``: the Dask cluster at
        ``scheduler`` (needs the ``cluster`` extra, ``pip install 'cvfl[cluster]'``).
    scheduler : str or None
        Address of the Dask scheduler (e.g. ``tcp://10.0.0.5:8786``); required by ``dask``. Its
        workers need this version of ``cvfl`` installed; results come back to this process,
        which writes them (no shared file system needed).
    threads : int
        Torch intra-op threads of each run (``>= 1``); loky workers also get it as
        ``OMP_NUM_THREADS`` and the like.

    Examples
    --------
    >>> Executor(jobs=2)
    Executor(jobs=2, backend='loky', scheduler=None, threads=1)
    >>> Executor(backend="dask")
    Traceback (most recent call last):
    ...
    ValueError: backend 'dask' needs a scheduler address (e.g. --scheduler tcp://host:8786)
    """

    jobs: int = 1
    backend: str = "loky"
    scheduler: str | None = None
    threads: int = DEFAULT_THREADS

    def __post_init__(self) -> None:
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int):
            raise TypeError(f"jobs must be an integer >= 1, got {self.jobs!r}")
        if self.jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {self.jobs}")
        check_threads(self.threads, "threads")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "dask":
            if not self.scheduler:
                raise ValueError(
                    "backend 'dask' needs a scheduler address (e.g. --scheduler tcp://host:8786)"
                )
            _require_dask()  # refused before any work, with the extra to install
        elif self.scheduler is not None:
            raise ValueError(f"scheduler {self.scheduler!r} needs backend 'dask'")


def progress_bar(total: int = 0, progress: bool | None = None, desc: str | None = None) -> Any:
    """A tqdm bar on stderr counting runs, with the ETA of the average rate so far.

    ``progress``: ``None`` shows it when stderr is a terminal, ``True`` always, ``False`` never.
    """
    from tqdm import tqdm

    disable = {True: False, False: True, None: None}[progress]
    return tqdm(total=total, desc=desc, unit="run", file=sys.stderr, disable=disable, smoothing=0.0)


def _compute(
    compute: Callable[[Any], RunResult], index: int, spec: Any, threads: int
) -> tuple[int, RunResult]:
    """One run in a worker: ``(index, result)`` without the trained modules (not saved anyway)."""
    with torch_threads(threads):
        res = compute(spec)
    res.models = None
    return index, res


def _serial(
    compute: Callable[[Any], RunResult], todo: Sequence[Any], ex: Executor
) -> Iterator[tuple[int, RunResult]]:
    for i, spec in enumerate(todo):
        yield _compute(compute, i, spec, ex.threads)


def _loky(
    compute: Callable[[Any], RunResult], todo: Sequence[Any], ex: Executor
) -> Iterator[tuple[int, RunResult]]:
    from joblib import Parallel, delayed, parallel_config

    # inner_max_num_threads sets OMP_NUM_THREADS (and MKL_, OPENBLAS_, ...) in the workers
    with parallel_config(backend="loky", inner_max_num_threads=ex.threads):
        yield from Parallel(
            n_jobs=min(ex.jobs, len(todo)),
            batch_size=1,
            return_as="generator_unordered",
        )(delayed(_compute)(compute, i, spec, ex.threads) for i, spec in enumerate(todo))


def _dask(
    compute: Callable[[Any], RunResult], todo: Sequence[Any], ex: Executor
) -> Iterator[tuple[int, RunResult]]:
    distributed = _require_dask()
    with distributed.Client(ex.scheduler, set_as_default=False) as client:
        futures = [
            client.submit(_compute, compute, i, spec, ex.threads, pure=False)
            for i, spec in enumerate(todo)
        ]
        try:
            for _, out in distributed.as_completed(futures, loop=client.loop, with_results=True):
                yield out
        finally:
            client.cancel(futures)


def _load(path: str, force: bool) -> RunResult | None:
    """The finished run at ``path``; ``None`` if absent, forced, or damaged (with a warning)."""
    if force or not os.path.exists(path):
        return None
    try:
        return RunResult.load(path)
    except (OSError, ValueError) as exc:  # damaged (e.g. edited or truncated): redo it
        warnings.warn(f"{exc}; recomputing this run", RuntimeWarning, stacklevel=4)
        return None


def run_specs(
    specs: Sequence[S],
    folder: str | os.PathLike[str],
    compute: Callable[[S], RunResult],
    *,
    executor: Executor | None = None,
    force: bool = False,
    known: Mapping[S, RunResult] | None = None,
    progress: bool | None = None,
    bar: Any = None,
) -> dict[S, RunResult]:
    """Run (or load) every spec; one atomically written ``<folder>/<key>.json`` per finished run.

    Parameters
    ----------
    specs : sequence of hashable specs with ``key()``
        The runs (a repeated spec is computed once).
    folder : path-like
        Where the run files are (created if missing).
    compute : callable
        ``compute(spec) -> RunResult``; a module-level function, so that worker processes can
        import it.
    executor : Executor, optional
        Where to compute missing runs; default: in this process.
    force : bool
        Recompute runs whose file exists (not those in ``known``).
    known : mapping, optional
        Runs already at hand (e.g. computed earlier by the same command): neither loaded nor
        recomputed.
    progress : bool or None
        The sweep's own bar over the runs to compute (see :func:`progress_bar`); unused with
        ``bar``.
    bar : tqdm, optional
        A caller's bar: its total grows by the runs to compute, and it advances as they finish.

    Returns
    -------
    dict
        ``spec -> RunResult`` in the order of ``specs`` (never in completion order).
    """
    ex = executor or Executor()
    os.makedirs(folder, exist_ok=True)
    path = {spec: os.path.join(os.fspath(folder), spec.key() + ".json") for spec in specs}
    done: dict[S, RunResult] = {}
    todo: list[S] = []
    for spec in path:  # a dict: repeated specs once, in order
        res = known.get(spec) if known is not None else None
        if res is None:
            res = _load(path[spec], force)
        if res is None:
            todo.append(spec)
        else:
            done[spec] = res
    if todo:
        own = bar is None
        if own:
            bar = progress_bar(len(todo), progress)
        else:
            bar.total += len(todo)
            bar.refresh()
        run = {"loky": _loky if ex.jobs > 1 else _serial, "dask": _dask}[ex.backend]
        try:
            for i, res in run(compute, todo, ex):
                res.save(path[todo[i]])  # atomic: the file exists only once complete
                done[todo[i]] = res
                bar.set_postfix_str(todo[i].key().rsplit("_", 1)[0], refresh=False)
                bar.update(1)
        finally:
            if own:
                bar.close()
    return {spec: done[spec] for spec in path}
