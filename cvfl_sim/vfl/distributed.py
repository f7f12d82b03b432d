r"""Algorithm 1 (C1) as separate processes: one per party plus the server, over gloo.

Each process plays one role of :mod:`cvfl_sim.vfl.roles` and sends the compressors' real wire bytes as
``uint8`` tensors with ``torch.distributed`` point-to-point messages (gloo backend), each preceded
by its length (one ``int64``, :data:`~cvfl_sim.vfl.transport.FRAME_BYTES` bytes). Rank 0 is the
server, rank ``m`` party ``m``. Every process counts the bytes it sends; the algorithm's bytes
are the C6 ledger's payload plus framing, exactly (tested).

On one machine
    ``train(ds, cfg, backend="distributed")`` (or ``cvfl train DATASET --backend distributed``)
    calls :func:`train_distributed`: it starts the ``M + 1`` processes with
    :mod:`torch.multiprocessing` (``forkserver``: torch is imported once, then each process is a
    fork of a clean server), each given the torchrun variables below with
    ``MASTER_ADDR=127.0.0.1`` and a free port (so the tests exercise the multi-machine path on
    loopback), and supervises them.

Across machines
    Start one process per role with torchrun-style environment variables — ``MASTER_ADDR``,
    ``MASTER_PORT``, ``RANK`` (0 on the server's machine, ``m`` on party ``m``'s) and
    ``WORLD_SIZE = M + 1`` — and call :func:`run_from_env` in each, e.g. a script
    ``run.py``::

        from cvfl_sim import CVFLConfig, load_dataset
        from cvfl_sim.vfl.distributed import run_from_env

        res = run_from_env(load_dataset("breast-cancer"), CVFLConfig(Q=2, epochs=5))
        if res is not None:  # rank 0, the server
            res.save("run.json")

    (:func:`role_from_env` also returns the bytes each role sent: the server's result records
    only its own.)

    run as ``torchrun --nnodes 5 --nproc-per-node 1 --node-rank K --master-addr HOST
    --master-port 29500 run.py`` on each of the five machines (``GLOO_SOCKET_IFNAME`` names the
    network interface if the default one is wrong). Each process needs only its own feature
    block and the labels; the set-up builds every model from the seed, so all agree. A
    checkpoint path must be on a file system every process can read (the server writes it).
    Tested on loopback and across hosts simulated on one machine: the server and each party in
    its own network namespace, ``MASTER_ADDR`` the server's address on a bridge
    (:mod:`cvfl_sim.vfl.namespaces`, ``tests/test_multihost.py``; root only). Real separate
    machines are not tested.

Faults
    Every ``torch.distributed`` operation has the ``timeout`` of
    :func:`torch.distributed.init_process_group`; a receiver whose peer crashed or hung raises
    :class:`~cvfl_sim.vfl.transport.PeerError` naming the peer and the round. The launcher is a
    watchdog: it kills every process once one fails (or when no round starts for ``timeout``
    plus a grace period) and raises :class:`DistributedRunError` naming the party that crashed or
    hung and the round. With a checkpoint, the epochs already finished are saved and rerunning
    the same call resumes from them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .config import CVFLConfig, setup_run
from .data import VerticalDataset
from .results import RunResult
from .roles import run_roles
from .transport import PeerError, Transport, rank_name

__all__ = [
    "DistributedRunError",
    "GlooTransport",
    "RoleOutcome",
    "train_distributed",
    "run_from_env",
    "role_from_env",
]

_GRACE = 5.0  # seconds the watchdog adds to the timeout before it declares a stall


class DistributedRunError(RuntimeError):
    """A distributed run ended because a role crashed, hung or failed; names the role and round."""


class GlooTransport(Transport):
    """The messages of one rank over ``torch.distributed`` with the gloo backend.

    Parameters
    ----------
    rank : int
        This process's rank: 0 the server, ``m`` party ``m``.
    world_size : int
        The number of ranks, ``M + 1`` (the server and the ``M`` parties).
    init_method : str
        ``"env://"`` (torchrun variables) or ``"tcp://ADDR:PORT"``.
    timeout : float
        Seconds any send or receive may wait (``init_process_group(timeout=...)``).
    delay : float
        The per-hop message delay of :class:`~cvfl_sim.vfl.transport.Transport`.
    """

    def __init__(
        self, rank: int, world_size: int, init_method: str, timeout: float, delay: float = 0.0
    ) -> None:
        super().__init__(world_size, delay)
        self.rank = rank
        dist.init_process_group(
            "gloo",
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout),
        )

    def _send(self, src: int, dst: int, data: bytes) -> None:
        if src != self.rank:
            raise ValueError(f"rank {self.rank} cannot send as rank {src}")
        try:
            dist.send(torch.tensor([len(data)], dtype=torch.int64), dst)
            if data:
                dist.send(torch.frombuffer(bytearray(data), dtype=torch.uint8), dst)
        except RuntimeError as exc:
            raise PeerError(dst, self.round, f"did not take a message ({exc})") from None

    def _recv(self, src: int, dst: int, max_bytes: int) -> bytes:
        if dst != self.rank:
            raise ValueError(f"rank {self.rank} cannot receive as rank {dst}")
        try:
            n = torch.zeros(1, dtype=torch.int64)
            dist.recv(n, src)
            self._check_length(src, int(n[0]), max_bytes)  # before allocating
            buf = torch.empty(int(n[0]), dtype=torch.uint8)
            if len(buf):
                dist.recv(buf, src)
        except RuntimeError as exc:
            raise PeerError(
                src, self.round, f"sent nothing within the timeout or the link broke ({exc})"
            ) from None
        return buf.numpy().tobytes()

    def close(self) -> None:
        """Destroy the process group."""
        if dist.is_initialized():
            dist.destroy_process_group()


class _Fault:
    """Test hook: ``kind`` ``"kill"`` (SIGKILL itself) or ``"hang"`` at ``(rank, round)``."""

    def __init__(self, rank: int, round_index: int, kind: str) -> None:
        self.rank, self.round, self.kind = rank, round_index, kind

    @classmethod
    def check(cls, fault: Any, world: int, rounds: int) -> _Fault:
        """The hook of ``fault = (rank, round, kind)``, refused unless it can fire."""
        if not isinstance(fault, tuple) or len(fault) != 3:
            raise TypeError(f"fault must be a tuple (rank, round, 'kill' | 'hang'), got {fault!r}")
        rank, r, kind = fault
        for name, v, hi in (("rank", rank, world - 1), ("round", r, rounds - 1)):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
                raise ValueError(f"fault {name} must be an integer in [0, {hi}], got {v!r}")
        if kind not in ("kill", "hang"):
            raise ValueError(f"fault kind must be 'kill' or 'hang', got {kind!r}")
        return cls(rank, r, kind)

    def __call__(self, rank: int, r: int) -> None:
        if (rank, r) != (self.rank, self.round):
            return
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(3600)


def _result_payload(res: RunResult) -> dict[str, Any]:
    """The server's result for the launcher: the modules' state by value, the rest as it is."""
    models = res.models or {}
    return {
        "result": dataclasses.replace(res, models=None),
        "state": [
            {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}  # by value
            for net in [*models["parties"], models["server"]]
        ],
    }


def _watch_launcher(launcher: int) -> None:
    """End this role's process within a second of the launcher's death, whatever killed it.

    On Linux the kernel's parent-death signal is set as well (``PR_SET_PDEATHSIG``); the thread
    covers the forkserver start method (whose children's parent is the fork server) and other
    systems.
    """
    import threading

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass

    def watch() -> None:
        while True:
            try:
                os.kill(launcher, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:  # pragma: no cover - the pid went to another user
                os._exit(1)
            time.sleep(0.25)

    threading.Thread(target=watch, name="cvfl-launcher-watch", daemon=True).start()


def _last_frame(exc: BaseException) -> str:
    """``file:line in function`` of the innermost frame of ``exc``'s traceback."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}"


def _worker(
    rank: int,
    world_size: int,
    port: int,
    dataset: VerticalDataset,
    config: CVFLConfig,
    checkpoint: str | None,
    timeout: float,
    delay: float,
    fault: _Fault | None,
    progress: Any,
    results: Any,
    launcher: int,
) -> None:
    """One role's process, started exactly as torchrun would start it (environment variables).

    It reports ``("ok" | "peer" | "error", rank, ...)`` to the launcher and ends with it.
    """
    _watch_launcher(launcher)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size)
    )

    def on_round(r: int) -> None:
        progress[rank] = r

    try:
        res, sent = _role_from_env(dataset, config, checkpoint, timeout, delay, on_round, fault)
        results.put(("ok", rank, sent, None if res is None else _result_payload(res)))
    except PeerError as exc:
        results.put(("peer", rank, exc.peer, exc.round, str(exc)))
    except BaseException as exc:  # noqa: BLE001 - reported to the launcher, which re-raises
        where = _last_frame(exc)
        what = f"{type(exc).__name__}: {exc}" + (f" (at {where})" if where else "")
        results.put(("error", rank, int(progress[rank]), what))


_BOOTSTRAP_CAUSE = "CVFL_DISTRIBUTED_CAUSE"
"""Environment variable naming the file where a role process that starts a run while it is
still importing the main module (an unguarded script) writes why, for the launcher to read."""

_UNGUARDED = (
    "the main script starts the run at its top level: every role process imports the main "
    'module, so put the call under `if __name__ == "__main__":`'
)


def _refuse_in_bootstrap() -> None:
    """In a role process still importing the main module, stop with the cause (for the launcher)."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        path = os.environ.get(_BOOTSTRAP_CAUSE)
        if path:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(_UNGUARDED)
        raise RuntimeError(f"train(backend='distributed'): {_UNGUARDED}")


def _check_main_module(start_method: str) -> None:
    """Refuse a main module the role processes cannot import (standard input, say)."""
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is not None and not os.path.isfile(path):
        raise ValueError(
            f"backend='distributed' with start_method={start_method!r} re-imports the main "
            f"module in every role process, and this one ({path!r}, e.g. a script read from "
            "standard input) cannot be imported: save it to a file and run that, or use "
            "backend='roles'"
        )


def _check_picklable(dataset: VerticalDataset, config: CVFLConfig) -> None:
    """The data set and configuration travel to the role processes by pickle: check it first."""
    import pickle

    try:
        pickle.dumps((dataset, config))
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise ValueError(
            "backend='distributed' sends the configuration to every role process, and it cannot "
            f"be pickled ({type(exc).__name__}: {exc}): use a picklable schedule from "
            "cvfl_sim.vfl.schedules (not a lambda or a local function) and compressors from "
            "cvfl_theory.compressors, or backend='roles'"
        ) from None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _diagnose(
    outcomes: dict[int, tuple[Any, ...]], procs: list[Any], progress: Any, cause_path: str = ""
) -> str:
    """Name the role that caused a failure: dead without a word, a bug, or blamed by its peers."""
    for rank, p in enumerate(procs):
        if rank not in outcomes and p.exitcode is not None:
            how = f"was killed by signal {-p.exitcode}" if p.exitcode < 0 else "crashed"
            cause = ""
            if cause_path and os.path.exists(cause_path):
                with open(cause_path, encoding="utf-8") as fh:
                    cause = fh.read(2000).strip()
            return (
                f"{rank_name(rank)} {how} (exit code {p.exitcode}) at round {int(progress[rank])}"
                + (f": {cause}" if cause else "")
            )
    for rank, out in sorted(outcomes.items()):
        if out[0] == "error":
            return f"{rank_name(rank)} failed at round {out[2]}: {out[3]}"
    reporters = {rank for rank, out in outcomes.items() if out[0] != "ok"}
    for rank, out in sorted(outcomes.items()):
        if out[0] == "peer" and out[2] not in reporters:
            return f"{out[4]} (seen by {rank_name(rank)}; no answer within the timeout)"
    peers = [out for out in outcomes.values() if out[0] == "peer"]
    if peers:
        return str(peers[0][4])
    stuck = [r for r in range(len(procs)) if r not in outcomes]
    return (
        f"no round started within the timeout; {', '.join(rank_name(r) for r in stuck)} "
        f"stalled at round {min(int(progress[r]) for r in stuck)}"
    )


def train_distributed(
    dataset: VerticalDataset,
    config: CVFLConfig,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,
    delay: float = 0.0,
    start_method: str = "forkserver",
    fault: tuple[int, int, str] | None = None,
) -> RunResult:
    r"""``train(..., backend="distributed")``: ``M + 1`` processes on this machine over gloo.

    Parameters
    ----------
    dataset, config
        As for :func:`cvfl_sim.vfl.train.train`; both are sent to the processes (the config must
        be picklable: a schedule given as a lambda is not).
    checkpoint : path-like, optional
        ``train``'s checkpoint file, written by the server after every epoch; resumed from.
    timeout : float
        Seconds a message may take before its receiver gives up (and the watchdog's stall limit,
        plus a few seconds' grace); it must exceed the longest round, evaluation included.
    delay : float
        Per-hop message delay in seconds (latency experiments, C7).
    start_method : {"forkserver", "spawn"}
        How the processes start.
    fault : (rank, round, "kill" | "hang"), optional
        Test hook: that rank kills itself (SIGKILL) or hangs when the round starts.

    Returns
    -------
    RunResult
        As ``train``'s, with ``summary["bytes_sent"]``: per rank the ``"algorithm"`` and
        ``"measurement"`` bytes that process counted sending.

    Raises
    ------
    DistributedRunError
        A role crashed, hung or failed; the message names it and the round.
    """
    _refuse_in_bootstrap()
    _check_seconds(timeout, "timeout", 1.0, 86400.0)
    _check_seconds(delay, "delay", 0.0, float(timeout), high_open=True)
    if start_method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {start_method!r}")
    # bad input raises here, before any process starts
    s = setup_run(dataset, config, cpu_only="backend='distributed'")
    world = dataset.n_parties + 1
    f = None if fault is None else _Fault.check(fault, world, s.total_rounds)
    _check_main_module(start_method)
    _check_picklable(dataset, config)
    ck = None if checkpoint is None else os.fspath(checkpoint)
    if ck is not None and os.path.exists(ck):
        _check_checkpoint(ck, dataset, config, s)  # a bad file is refused here, naming it
    ctx: ForkServerContext | SpawnContext
    if start_method == "forkserver":
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "cvfl_sim.vfl.distributed"])
    else:
        ctx = mp.get_context("spawn")
    progress = ctx.Array("q", world, lock=False)
    results = ctx.Queue()
    port = _free_port()
    launcher = os.getpid()
    procs = [
        ctx.Process(
            target=_worker,
            args=(rank, world, port, dataset, config, ck, timeout, delay, f, progress, results,
                  launcher),
            daemon=True,
        )
        for rank in range(world)
    ]  # fmt: skip
    outcomes: dict[int, tuple[Any, ...]] = {}
    started: list[Any] = []
    cause_fd, cause_path = tempfile.mkstemp(prefix="cvfl-cause-", suffix=".txt")
    os.close(cause_fd)
    saved_env = os.environ.get(_BOOTSTRAP_CAUSE)
    try:
        os.environ[_BOOTSTRAP_CAUSE] = cause_path  # read by a role that starts too early
        for p in procs:
            p.start()
            started.append(p)
        _supervise(outcomes, procs, progress, results, timeout, cause_path)
    finally:
        if saved_env is None:
            os.environ.pop(_BOOTSTRAP_CAUSE, None)
        else:
            os.environ[_BOOTSTRAP_CAUSE] = saved_env
        for p in started:
            if p.is_alive() and len(outcomes) < world:
                p.kill()
        for p in started:
            p.join(timeout=10)
        results.close()
        os.remove(cause_path)
    payload = outcomes[0][3]
    parties, server = s.parties, s.server
    for net, state in zip([*parties, server], payload["state"]):
        net.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    res = payload["result"]  # the server's RunRecord.finish, with the bytes every process sent
    return dataclasses.replace(
        res,
        summary={**res.summary, "bytes_sent": [dict(outcomes[r][2]) for r in range(world)]},
        models={"parties": parties, "server": server},
    )


def _check_seconds(v: Any, name: str, lo: float, hi: float, *, high_open: bool = False) -> float:
    """A number of seconds in ``[lo, hi]`` (or ``[lo, hi)``), refused naming ``name`` otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {v!r}")
    ok = math.isfinite(v) and lo <= v and (v < hi if high_open else v <= hi)
    if not ok:
        bracket = ")" if high_open else "]"
        raise ValueError(
            f"{name} must be a number of seconds in [{lo:g}, {hi:g}{bracket}, got {v!r}"
        )
    return float(v)


def _check_checkpoint(path: str, dataset: VerticalDataset, config: CVFLConfig, s: Any) -> None:
    """Read a checkpoint into throw-away copies, so that a bad file fails before any process."""
    import copy

    from .record import RunRecord, checkpoint_arrays, resume

    parties = [copy.deepcopy(p) for p in s.parties]
    server = copy.deepcopy(s.server)
    memory = (
        [torch.zeros(dataset.n_train, P, dtype=s.dtype) for P in s.emb_sizes]
        if config.error_feedback
        else []
    )
    arrays = checkpoint_arrays(parties, server, memory)
    gens: list[np.random.Generator | None] = [np.random.default_rng(0)] * (dataset.n_parties + 1)
    resume(
        path, dataset, config, arrays, np.random.default_rng(0), gens, RunRecord(s, dataset, config)
    )


def _supervise(
    outcomes: dict[int, tuple[Any, ...]],
    procs: list[Any],
    progress: Any,
    results: Any,
    timeout: float,
    cause_path: str,
) -> None:
    """Collect every role's outcome; raise :class:`DistributedRunError` at the first failure.

    Any outcome other than ``"ok"`` is a failure, and so is a process that ended without one or
    no round starting for ``timeout`` plus a grace period; the other roles get half a second to
    report what they saw, then the error names the role that caused it, the round, and the
    cause's type, message and last frame.
    """
    world = len(procs)
    last, changed = list(progress), time.monotonic()
    failed_at: float | None = None
    while True:
        try:
            out = results.get(timeout=0.05)
            outcomes[out[1]] = out
            if len(outcomes) == world and all(o[0] == "ok" for o in outcomes.values()):
                return
            continue
        except queue.Empty:
            pass
        now = time.monotonic()
        if list(progress) != last:
            last, changed = list(progress), now
        failure = any(o[0] != "ok" for o in outcomes.values()) or any(
            p.exitcode is not None and r not in outcomes for r, p in enumerate(procs)
        )
        if failure and failed_at is None:
            failed_at = now  # let the other roles report what they saw
        if (failed_at is not None and now - failed_at > 0.5) or now - changed > timeout + _GRACE:
            raise DistributedRunError(
                f"distributed run failed: {_diagnose(outcomes, procs, progress, cause_path)}"
            )


def run_from_env(
    dataset: VerticalDataset,
    config: CVFLConfig,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,
    delay: float = 0.0,
) -> RunResult | None:
    """Play the role of ``RANK`` in a run started by torchrun (or the same environment variables).

    Reads ``RANK``, ``WORLD_SIZE`` (must be ``M + 1``), ``MASTER_ADDR`` and ``MASTER_PORT``;
    :func:`train_distributed` starts its processes this way too. Returns the
    :class:`~cvfl_sim.vfl.results.RunResult` on rank 0 (the server), ``None`` on the parties.

    Raises
    ------
    ValueError
        A variable is missing, or ``WORLD_SIZE``/``RANK`` do not fit the data set's ``M``.
    """
    return role_from_env(
        dataset, config, checkpoint=checkpoint, timeout=timeout, delay=delay
    ).result


class RoleOutcome(NamedTuple):
    """What one role of a run ends with (:func:`role_from_env`)."""

    result: RunResult | None
    """The run's :class:`~cvfl_sim.vfl.results.RunResult` on rank 0 (the server), else ``None``."""
    bytes_sent: dict[str, int]
    """The bytes this role sent, by kind (``"algorithm"`` and the others of
    ``summary["bytes_sent"]``)."""


def role_from_env(
    dataset: VerticalDataset,
    config: CVFLConfig,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,
    delay: float = 0.0,
) -> RoleOutcome:
    """:func:`run_from_env`, also returning the bytes this role sent (every rank knows its own).

    A multi-host run's server sees only its own sends; each party reports its own here, so that a
    test or a launcher can check every role's traffic against a loopback run's
    ``summary["bytes_sent"][rank]``.

    Returns
    -------
    RoleOutcome
        ``result``: the run on rank 0, ``None`` on the parties; ``bytes_sent``: this role's sends.

    Raises
    ------
    ValueError
        As :func:`run_from_env`: a variable is missing, or ``WORLD_SIZE``/``RANK`` do not fit the
        data set's ``M``.
    """
    res, sent = _role_from_env(dataset, config, checkpoint, timeout, delay, None, None)
    return RoleOutcome(res, sent)


def _role_from_env(
    dataset: VerticalDataset,
    config: CVFLConfig,
    checkpoint: str | os.PathLike[str] | None,
    timeout: float,
    delay: float,
    on_round: Callable[[int], None] | None,
    fault: _Fault | None,
) -> tuple[RunResult | None, dict[str, int]]:
    """Run this process's role; return its result (server) and the bytes it sent."""
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: os.environ.get(k) for k in names}
    missing = [k for k, v in env.items() if v is None]
    if missing:
        raise ValueError(f"run_from_env and role_from_env need the environment variables {missing}")
    try:
        rank, world = int(str(env["RANK"])), int(str(env["WORLD_SIZE"]))
    except ValueError:
        raise ValueError(
            f"RANK and WORLD_SIZE must be integers, got {env['RANK']!r}, {env['WORLD_SIZE']!r}"
        ) from None
    if world != dataset.n_parties + 1 or not 0 <= rank < world:
        raise ValueError(
            f"WORLD_SIZE must be M + 1 = {dataset.n_parties + 1} and 0 <= RANK < WORLD_SIZE, "
            f"got RANK={rank} WORLD_SIZE={world}"
        )
    torch.set_num_threads(1)
    transport = GlooTransport(rank, world, "env://", timeout, delay)
    res = run_roles(
        dataset, config, transport, [rank], checkpoint=checkpoint, on_round=on_round, fault=fault
    )
    # after a failure the process group is left as it is (destroying it could wait on the dead
    # peer); the process ends anyway
    transport.close()
    return res, dict(transport.bytes_sent[rank])
