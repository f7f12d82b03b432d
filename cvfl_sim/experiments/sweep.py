r"""Independent runs of a sweep on an executor, one atomically written file per finished run.

A sweep (C7, C8: seeds × compressors × bits × data sets) is a list of independent run
specifications, each with a ``key()`` naming its result file ``<folder>/<key>.json``.
:func:`run_specs`

1. takes the runs already at hand (``known``) and loads every finished run file (unless
   ``force``); a file that cannot be read is recomputed, with a ``RuntimeWarning``;
2. computes the rest on an :class:`Executor`: in this process (``jobs = 1``), in this process
   *and* ``jobs - 1`` local worker processes of joblib's loky pool (``jobs > 1``), or on a Dask
   cluster (``backend="dask"``, the ``cluster`` extra); each computation runs with
   :attr:`Executor.threads` torch intra-op threads (:mod:`cvfl_sim.vfl.threads`; one by default, the
   fastest for these tiny models);
3. writes each result atomically in *this* process as soon as it has it (so a cluster needs no
   shared file system, and a sweep killed at any moment leaves only complete files: a rerun skips
   them and computes the rest);
4. returns the results in the order of the specifications, whatever order they finished in, so
   the tables built from them are those of a serial run. The order of *computation* is the
   caller's ``cost`` estimate, longest first, so that the processes finish together.

Start-up cost of local workers. A fresh worker spends seconds importing torch and cvfl, as
long as a quick run or two, and a user's first ``cvfl reproduce ... --jobs 2`` pays it. So:

- the workers start first, with a warm-up task importing what the runs need
  (:func:`start_workers`; ``cvfl reproduce`` calls it before importing anything heavy);
- this process prepares each run's ``inputs`` (the data set, built once here and sent with the
  task: a worker never imports scipy) before it imports torch (its first run does), so the
  workers' first runs are ready when their own imports end;
- this process computes runs itself instead of waiting: ``jobs = 2`` is this process plus one
  worker. A worker's result is written when this process is between two of its own runs (a run
  killed before then is recomputed on restart);
- the workers of :func:`start_workers` serve one sweep: they are killed as soon as it ends (an
  idle worker would take a third of a second to exit with the command).

The workers are loky's (fork + exec: a fresh interpreter), not a bare ``fork``: a forked child
of a process whose OpenMP runtime has started threads can deadlock in its first parallel region,
and once the workers are started before torch is imported, fork would save only the
interpreter's start (~0.1 s), not the imports.

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

from ..vfl.progress import progress_bar
from ..vfl.results import RunResult
from ..vfl.threads import DEFAULT_THREADS, check_threads, torch_threads

__all__ = [
    "Executor",
    "BACKENDS",
    "run_specs",
    "start_workers",
    "worker_pool",
    "check_scheduler",
    "SCHEDULER_SECONDS",
]

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
        check_threads(self.jobs, "jobs")
        check_threads(self.threads, "threads")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        cores = os.cpu_count() or 1
        if self.backend == "loky" and self.jobs > cores:
            raise ValueError(
                f"jobs must be at most this machine's {cores} cores (a worker per core; more "
                f"only compete for them), got {self.jobs}"
            )
        if self.backend == "dask":
            if not self.scheduler:
                raise ValueError(
                    "backend 'dask' needs a scheduler address (e.g. --scheduler tcp://host:8786)"
                )
            _require_dask()  # refused before any work, with the extra to install
            check_scheduler(self.scheduler)
        elif self.scheduler is not None:
            raise ValueError(f"scheduler {self.scheduler!r} needs backend 'dask'")


SCHEDULER_SECONDS = 5.0
"""How long a Dask scheduler has to answer before the sweep is refused."""


def check_scheduler(address: str, seconds: float = SCHEDULER_SECONDS) -> None:
    """Refuse a scheduler address that is malformed or does not answer as a Dask scheduler.

    ``tcp://HOST:PORT`` (``PORT`` in ``1..65535``); a Dask client must connect within
    ``seconds`` (a port that is open but not a scheduler does not answer its handshake).

    Raises
    ------
    ValueError
        Naming the address and what is wrong.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ("tcp", "tls") or not parts.hostname or port is None or not 0 < port:
        raise ValueError(f"scheduler {address!r} must be tcp://HOST:PORT with PORT in 1..65535")
    distributed = _require_dask()
    outcome: list[BaseException | None] = []

    def connect() -> None:
        try:
            with distributed.Client(address, timeout=seconds, set_as_default=False):
                outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    import threading

    t = threading.Thread(target=connect, name="cvfl-scheduler-check", daemon=True)
    t.start()
    t.join(seconds + 1.0)  # a port that accepts but never answers leaves the client waiting
    if not outcome or outcome[0] is not None:
        why = "no answer" if not outcome else f"{type(outcome[0]).__name__}: {outcome[0]}"
        raise ValueError(
            f"scheduler {address!r} did not answer as a Dask scheduler within {seconds:g} s ({why})"
        )


def _compute(
    compute: Callable[..., RunResult], index: int, spec: Any, threads: int, *inputs: Any
) -> tuple[int, RunResult]:
    """One run: ``(index, result)`` without the trained modules (not saved anyway)."""
    with torch_threads(threads):
        res = compute(spec, *inputs)
    res.models = None
    return index, res


def _inputs(inputs: Callable[[Any], Any] | None, spec: Any) -> tuple[Any, ...]:
    """The extra arguments of ``compute`` for ``spec``, computed in this process."""
    return () if inputs is None else (inputs(spec),)


def _ready(module: str) -> None:
    """The warm-up task of a worker: import ``module`` (and with it torch and cvfl)."""
    import importlib

    importlib.import_module(module)


_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
"""Thread-count variables of the native libraries, set in each loky worker's environment."""


def worker_pool(workers: int, threads: int = 1, timeout: int = 10) -> Any:
    """The reusable loky pool (joblib) of ``workers`` processes, each with ``threads`` native threads.

    Each worker gets the thread-count variables of the native libraries (``OMP_NUM_THREADS``
    and the like) set to ``threads``, so that ``workers`` processes do not oversubscribe the
    cores with their BLAS and torch thread pools. Idle workers exit after ``timeout`` seconds.
    """
    from joblib.externals.loky import get_reusable_executor

    env = dict.fromkeys(_THREAD_VARS, str(threads))
    return get_reusable_executor(
        max_workers=workers, env=env, timeout=timeout, initializer=quick_exit_at_end
    )


def quick_exit_at_end() -> None:
    """Make this (loky worker) process end without tearing its interpreter down.

    The initializer of :func:`worker_pool`. The handler it registers runs last among the exit
    handlers (they run in reverse order; torch's and the tasks' own are registered later, and
    the worker's threads and multiprocessing finalizers have ended by then): it flushes the
    standard streams and the logging handlers, then ends the process with status 0. That skips
    the module teardown, which took a worker holding torch about 0.9 s, for which a command
    waited. A failure still reaches the parent: where loky ends a worker with status 1 it has
    sent the traceback first (only the status then reads 0), and a worker killed by a signal
    never gets here.
    """
    import atexit

    def end() -> None:
        if "logging" in sys.modules:
            sys.modules["logging"].shutdown()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        os._exit(0)

    atexit.register(end)


def _pool(ex: Executor) -> Any:
    """The loky pool of ``ex.jobs - 1`` workers with ``ex.threads`` native threads each."""
    return worker_pool(ex.jobs - 1, ex.threads)


_EARLY: list[Any] = []
"""The pool started by :func:`start_workers`, until the next sweep takes it (and stops it)."""


def start_workers(executor: Executor, module: str) -> None:
    """Start ``executor``'s local workers now, each importing ``module``, without waiting.

    A command calls it before its own heavy imports, so that the workers import torch and cvfl
    on the other cores meanwhile (a fresh worker takes seconds to start). They serve the next
    sweep, which stops them when it ends: at once if it finds every run finished (the command
    need not wait for their imports to end), else after its last run. Nothing to do for
    ``jobs = 1`` or Dask.
    """
    if executor.backend == "loky" and executor.jobs > 1:
        pool = _pool(executor)
        for _ in range(executor.jobs - 1):
            pool.submit(_ready, module)
        _EARLY[:] = [pool]


def _serial(
    compute: Callable[..., RunResult],
    todo: Sequence[Any],
    ex: Executor,
    inputs: Callable[[Any], Any] | None,
) -> Iterator[tuple[int, RunResult]]:
    for i, spec in enumerate(todo):
        yield _compute(compute, i, spec, ex.threads, *_inputs(inputs, spec))


def _loky(
    compute: Callable[..., RunResult],
    todo: Sequence[Any],
    ex: Executor,
    inputs: Callable[[Any], Any] | None,
    warm: str,
) -> Iterator[tuple[int, RunResult]]:
    """``jobs - 1`` loky workers and this process compute the runs together.

    The workers start first (a no-op task makes each import the module ``warm``). A feeder
    thread keeps each worker busy with one run at a time, taken from the *front* of the list; this
    process takes runs from the *back* and computes them itself, collecting the workers' results
    between its own runs. A lock hands every run out once: none is computed twice.
    """
    import queue
    import threading
    from collections import deque
    from concurrent.futures import FIRST_COMPLETED, Future, wait

    if len(todo) < 2:
        yield from _serial(compute, todo, ex, inputs)
        return
    workers = ex.jobs - 1
    pool = _pool(ex)
    running: set[Future[Any]] = {pool.submit(_ready, warm) for _ in range(workers)}
    left = deque(range(len(todo)))  # runs nobody has taken yet
    lock = threading.Lock()  # guards ``left`` and calls of ``inputs``
    finished: queue.SimpleQueue[Future[Any] | None] = queue.SimpleQueue()

    def take(front: bool) -> tuple[Any, ...] | None:
        with lock:
            if not left:
                return None
            i = left.popleft() if front else left.pop()
            return (compute, i, todo[i], ex.threads, *_inputs(inputs, todo[i]))

    def feed() -> None:  # in a thread: one run per worker, the next as soon as one is done
        busy = set(running)
        try:
            while True:
                while len(busy) < workers + len(running) and (task := take(True)) is not None:
                    busy.add(pool.submit(_compute, *task))
                if not busy:
                    break
                done, busy = wait(busy, return_when=FIRST_COMPLETED)
                for fut in done - running:
                    finished.put(fut)
                running.difference_update(done)
        except BaseException as exc:  # e.g. from ``inputs``: raised in this process's thread
            failed: Future[Any] = Future()
            failed.set_exception(exc)
            finished.put(failed)
        finally:
            finished.put(None)

    feeder = threading.Thread(target=feed, name="cvfl-sweep-feeder", daemon=True)
    feeder.start()
    try:
        feeding = True
        while feeding:
            fut: Future[Any] | None
            while feeding:  # the workers' results so far
                try:
                    fut = finished.get_nowait()
                except queue.Empty:
                    break
                if fut is None:
                    feeding = False
                else:
                    yield fut.result()
            task = take(False)
            if task is not None:
                yield _compute(*task)
            elif feeding:
                fut = finished.get()
                if fut is None:
                    feeding = False
                else:
                    yield fut.result()
    finally:
        with lock:
            left.clear()  # the feeder submits nothing more and ends after the runs in hand


def _dask(
    compute: Callable[..., RunResult],
    todo: Sequence[Any],
    ex: Executor,
    inputs: Callable[[Any], Any] | None,
) -> Iterator[tuple[int, RunResult]]:
    distributed = _require_dask()
    with distributed.Client(ex.scheduler, set_as_default=False) as client:
        futures = [
            client.submit(
                _compute, compute, i, spec, ex.threads, *_inputs(inputs, spec), pure=False
            )
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


def _longest_first(todo: list[S], cost: Callable[[S], float] | None) -> list[S]:
    """``todo`` in computing order: by decreasing ``cost``, alternately at the front and back.

    This process takes runs from the back of the list and the workers from the front, so both
    start with the longest runs and the last runs handed out are the shortest (the processes
    then finish close together). Equal costs keep their order; no ``cost``: ``todo`` as is.
    """
    if cost is None:
        return todo
    order = sorted(todo, key=cost, reverse=True)  # stable
    return order[0::2] + order[1::2][::-1]


def run_specs(
    specs: Sequence[S],
    folder: str | os.PathLike[str],
    compute: Callable[..., RunResult],
    *,
    inputs: Callable[[S], Any] | None = None,
    cost: Callable[[S], float] | None = None,
    executor: Executor | None = None,
    force: bool = False,
    known: Mapping[S, RunResult] | None = None,
    progress: bool | None = None,
    bar: Any = None,
    warm: str | None = None,
    belongs: Callable[[S, RunResult], bool] | None = None,
) -> dict[S, RunResult]:
    """Run (or load) every spec; one atomically written ``<folder>/<key>.json`` per finished run.

    Parameters
    ----------
    specs : sequence of hashable specs with ``key()``
        The runs (a repeated spec is computed once).
    folder : path-like
        Where the run files are (created if missing).
    compute : callable
        ``compute(spec) -> RunResult`` (``compute(spec, inputs(spec))`` with ``inputs``); a
        module-level function, so that worker processes can import it.
    inputs : callable, optional
        ``inputs(spec)``, computed in *this* process and sent with the run's task: e.g. the data
        set, built once here instead of in every worker (which then never imports the
        libraries that build it). Its result must be picklable.
    cost : callable, optional
        ``cost(spec)``, the relative compute time of a run: the longest runs are computed first
        (see :func:`_longest_first`). Only the order of computation depends on it.
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
    warm : str, optional
        The module local workers import while this process starts its first run (default: the
        module of ``compute``): the one that imports the runs' heavy libraries.
    belongs : callable, optional
        ``belongs(spec, result)``: whether a loaded run file holds the run of ``spec`` (a file
        overwritten by another run, or edited, is recomputed with a ``RuntimeWarning``).

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
            if res is not None and belongs is not None and not belongs(spec, res):
                warnings.warn(
                    f"{path[spec]!r} holds another run than its name says (overwritten or "
                    "edited); recomputing this run",
                    RuntimeWarning,
                    stacklevel=2,
                )
                res = None
        if res is None:
            todo.append(spec)
        else:
            done[spec] = res
    early = _EARLY[:]  # the workers started for this sweep
    _EARLY.clear()
    try:
        if todo:
            work = _longest_first(todo, cost)
            _compute_all(work, path, done, compute, ex, inputs, progress, bar, warm)
    finally:
        for pool in early:  # idle now: killed, not left to exit with the command
            pool.shutdown(wait=False, kill_workers=True)
    return {spec: done[spec] for spec in path}


def _compute_all(
    todo: list[S],
    path: Mapping[S, str],
    done: dict[S, RunResult],
    compute: Callable[..., RunResult],
    ex: Executor,
    inputs: Callable[[S], Any] | None,
    progress: bool | None,
    bar: Any,
    warm: str | None,
) -> None:
    """Compute ``todo`` on ``ex``, saving each result to ``path[spec]`` and into ``done``."""
    own = bar is None
    if own:
        bar = progress_bar(len(todo), progress)
    else:
        bar.total += len(todo)
        bar.refresh()
    if ex.backend == "loky" and ex.jobs > 1:
        runs = _loky(compute, todo, ex, inputs, warm or compute.__module__)
    else:
        runs = (_dask if ex.backend == "dask" else _serial)(compute, todo, ex, inputs)
    try:
        for i, res in runs:
            res.save(path[todo[i]])  # atomic: the file exists only once complete
            done[todo[i]] = res
            bar.set_postfix_str(todo[i].key().rsplit("_", 1)[0], refresh=False)
            bar.update(1)
    finally:
        if own:
            bar.close()
