r"""Algorithm 1 of [CVFL] as a conversation: :class:`Party` and :class:`Server` exchange real bytes.

C1, C6. Each role owns what it owns in a deployment:

- a :class:`Party` ``m`` (``1..M``) owns :math:`\theta_m`, its feature block :math:`X_m`, the
  labels (C0: all parties know them), its compressor's dither stream, its copy of the frozen
  compressed server model :math:`C_0(\theta_0^{t_0})`, and — with error feedback (C9) — the
  per-sample memories, which every role rebuilds from the messages it has seen;
- the :class:`Server` owns :math:`\theta_0`, :math:`C_0` and its dither stream.

They talk only through a :class:`~cvfl_sim.vfl.transport.Transport`: a party's upload is
``C_m.compress(h_m).to_bytes()``; the server relays those bytes unchanged to the other parties and
adds ``C_0.compress(θ_0).to_bytes()``. A receiver parses every message with
:meth:`~cvfl_theory.compressors.Compressed.from_bytes` against the compressor, shape and dtype it
expects (bytes from another process are hostile).

Shared randomness. The runs are seeded exactly as :func:`~cvfl_sim.vfl.train.train` seeds them
(``SeedSequence(seed).spawn(3)``: initialisation, batches, compressors; the compressor stream
spawns ``M + 1`` generators, party ``m`` takes number ``m - 1`` and the server number ``M``).
Every role draws the mini-batch indices from its own copy of the batch generator — the sample
ids are agreed, like the dither seeds, not sent — so the roles loop reproduces ``train``'s
batches, dithers, parameters and history (tested to 1e-6), with ``backend="inprocess"`` as the
fast vectorised execution of the same algorithm.

Measurement. Evaluations and checkpoints need the whole model in one place: at those rounds the
parties send their parameters (and, for a checkpoint, their generator states) and their measured
compression errors :math:`\|\varepsilon_m^{t_0}\|_F^2` (C2) to the server as ``"measurement"``
messages, counted apart from the algorithm's bytes. The server keeps the run's ledger, log,
history, checkpoint and result with ``train``'s own :class:`~cvfl_sim.vfl.record.RunRecord`, so
the results agree and either backend resumes the other's (pickle-free) checkpoint file.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from cvfl_theory.compressors import Compressed

from .config import CVFLConfig, RunSetup, setup_run
from .data import VerticalDataset
from .models import count_parameters
from .record import RunRecord, checkpoint_arrays, resume
from .results import RunResult
from .steps import diverged, minibatches, sgd_step
from .transport import InProcessTransport, PeerError, Transport

__all__ = ["Party", "Server", "run_roles", "train_roles", "max_message_bytes"]

SERVER = 0
_MAX_STATE_JSON = 1 << 14  # a numpy PCG64 state is ~200 bytes of JSON
# header fields (44 bytes) + configuration (<= 1024) + device name (<= 64) + CRC (4)
_MAX_HEADER = 44 + 1024 + 64 + 4


def max_message_bytes(compressor: Any, shape: tuple[int, int]) -> int:
    """The longest wire message of ``compressor`` for a ``(B, P)`` tensor (the receive limit)."""
    return _MAX_HEADER + math.ceil(int(compressor.payload_bits(shape)) / 8)


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return np.dtype(str(dtype).removeprefix("torch."))


def decode(
    data: bytes, compressor: Any, shape: tuple[int, int], dtype: torch.dtype, sender: int, r: int
) -> torch.Tensor:
    """Parse and decompress one received message, as the receiver expects it (C5 wire format)."""
    try:
        c = Compressed.from_bytes(data, compressor=compressor, shape=shape, dtype=_np_dtype(dtype))
        return torch.as_tensor(compressor.decompress(c), dtype=dtype)
    except (ValueError, TypeError) as exc:
        raise PeerError(sender, r, f"sent a message that does not parse: {exc}") from None


def _state_bytes(module: nn.Module) -> bytes:
    return b"".join(v.detach().contiguous().numpy().tobytes() for v in module.state_dict().values())


def _state_nbytes(module: nn.Module) -> int:
    """Length of :func:`_state_bytes` of ``module`` (from its own layout)."""
    return sum(v.numel() * v.element_size() for v in module.state_dict().values())


def _load_state_bytes(module: nn.Module, data: bytes, sender: int, r: int) -> None:
    """Copy raw parameter bytes into ``module``, checking the length against its own layout."""
    sd = module.state_dict()
    need = _state_nbytes(module)
    if len(data) != need:
        raise PeerError(sender, r, f"sent {len(data)} parameter bytes, expected {need}")
    off = 0
    with torch.no_grad():
        for v in sd.values():
            n = v.numel() * v.element_size()
            arr = np.frombuffer(data, dtype=_np_dtype(v.dtype), count=v.numel(), offset=off)
            v.copy_(torch.from_numpy(arr.reshape(tuple(v.shape)).copy()))
            off += n


class _Memories:
    """EF-VFL memories (C9): per training sample, the embedding the server last reconstructed.

    Every role keeps the memories of the parties whose messages it decodes; all copies agree
    because they are built from the same messages.
    """

    def __init__(self, n: int, sizes: Sequence[int], dtype: torch.dtype, enabled: bool) -> None:
        self.enabled = enabled
        self.tables = [torch.zeros(n, P, dtype=dtype) for P in sizes] if enabled else []

    def before(self, m: int, idx: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """What party ``m`` compresses: ``h`` itself, or its difference to the memory."""
        return h - self.tables[m - 1][idx] if self.enabled else h

    def after(self, m: int, idx: torch.Tensor, decoded: torch.Tensor) -> torch.Tensor:
        """The reconstructed embedding (and the memory updated to it)."""
        if not self.enabled:
            return decoded
        hh = self.tables[m - 1][idx] + decoded
        self.tables[m - 1][idx] = hh
        return hh


class Party:
    r"""Party ``m`` of Algorithm 1: owns :math:`\theta_m`, :math:`X_m`, :math:`C_m`'s dither stream.

    Parameters
    ----------
    m : int
        The party's number, ``1..M`` (its transport rank).
    model : nn.Module
        :math:`h_m(\theta_m; \cdot)`.
    features : torch.Tensor
        :math:`X_m`, ``(N_train, D_m)``.
    labels : torch.Tensor
        The training labels.
    server_copy : nn.Module
        A module of the server head's architecture; it holds :math:`C_0(\theta_0^{t_0})`.
    embedding_sizes : list of int
        :math:`P_1..P_M`.
    rng : numpy.random.Generator
        The dither stream of :math:`C_m`.
    error_feedback : bool
        EF-VFL memories (C9).
    """

    def __init__(
        self,
        m: int,
        model: nn.Module,
        features: torch.Tensor,
        labels: torch.Tensor,
        server_copy: nn.Module,
        embedding_sizes: Sequence[int],
        rng: np.random.Generator,
        error_feedback: bool,
    ) -> None:
        self.m = m
        self.model = model
        self.params: list[torch.Tensor] = [q for q in model.parameters() if q.requires_grad]
        self.X, self.y = features, labels
        self.dtype = features.dtype
        self.server_hat = server_copy
        for q in server_copy.parameters():
            q.requires_grad_(False)
        self.theta0_size = count_parameters(server_copy)  # |θ_0|, fixed
        self.sizes = list(embedding_sizes)
        self.rng = rng
        self.memory = _Memories(len(labels), self.sizes, self.dtype, error_feedback)
        self.stale: list[torch.Tensor | None] = []
        self.errors: list[float] = []  # ||ε_m^{t0}||_F^2 of the rounds since the last report

    def upload(self, r: int, t0: int, idx: torch.Tensor, compressor: Any) -> bytes:
        r"""The message :math:`C_m(h_m(\theta_m^{t_0}; X_m^{\mathcal{B}}))` as wire bytes."""
        self.idx, self.xb, self.yb = idx, self.X[idx], self.y[idx]
        with torch.no_grad():
            h = self.model(self.xb)
        try:
            msg = compressor.compress(self.memory.before(self.m, idx, h), rng=self.rng).to_bytes()
        except ValueError:
            if not bool(torch.isfinite(h).all()):
                raise diverged(self.m - 1, r, t0) from None
            raise
        shape = (len(idx), self.sizes[self.m - 1])
        own = self.memory.after(self.m, idx, decode(msg, compressor, shape, self.dtype, self.m, r))
        self.errors.append(float(((own - h) ** 2).sum()))
        return msg

    def receive(
        self, r: int, others: dict[int, bytes], model_msg: bytes, comps: Sequence[Any], c0: Any
    ) -> None:
        r"""Decode :math:`\hat\Phi_{-m}^{t_0}` and :math:`C_0(\theta_0^{t_0})` sent by the server."""
        bsz = len(self.idx)
        self.stale = [None] * len(self.sizes)
        for j, data in others.items():
            dec = decode(data, comps[j - 1], (bsz, self.sizes[j - 1]), self.dtype, SERVER, r)
            self.stale[j - 1] = self.memory.after(j, self.idx, dec)
        params = list(self.server_hat.parameters())
        theta0_hat = decode(model_msg, c0, (1, self.theta0_size), self.dtype, SERVER, r).reshape(-1)
        with torch.no_grad():
            for v, q in zip(theta0_hat.split([q.numel() for q in params]), params):
                q.copy_(v.reshape(q.shape))

    def local_step(self, eta: float) -> None:
        r""":math:`\theta_m \leftarrow \theta_m - \eta \nabla_m F_{\mathcal{B}}(\hat\Phi_m^t)`."""
        h = self.model(self.xb)  # own fresh embedding h_m(θ_m^t)
        view = torch.cat([h if z is None else z for z in self.stale], dim=1)
        loss = nn.functional.cross_entropy(self.server_hat(view), self.yb)
        sgd_step(self.params, torch.autograd.grad(loss, self.params, allow_unused=True), eta)

    def report(self, with_rng: bool) -> list[bytes]:
        """Measurement frames: parameters, errors since the last report, generator state."""
        frames = [
            _state_bytes(self.model),
            np.asarray(self.errors, dtype="<f8").tobytes(),
            json.dumps(self.rng.bit_generator.state).encode() if with_rng else b"",
        ]
        self.errors = []
        return frames


class Server:
    r"""The server (:math:`m = 0`): owns :math:`\theta_0`, :math:`C_0` and its dither stream.

    Parameters
    ----------
    model : nn.Module
        The head :math:`\theta_0`.
    labels : torch.Tensor
        The training labels.
    embedding_sizes : list of int
        :math:`P_1..P_M`.
    rng : numpy.random.Generator
        The dither stream of :math:`C_0`.
    error_feedback : bool
        Rebuild the parties' EF-VFL memories (C9).
    dtype : torch.dtype
        Model and message precision.
    """

    def __init__(
        self,
        model: nn.Module,
        labels: torch.Tensor,
        embedding_sizes: Sequence[int],
        rng: np.random.Generator,
        error_feedback: bool,
        dtype: torch.dtype,
    ) -> None:
        self.model = model
        self.params: list[torch.Tensor] = [q for q in model.parameters() if q.requires_grad]
        self.y = labels
        self.sizes = list(embedding_sizes)
        self.rng = rng
        self.dtype = dtype
        self.memory = _Memories(len(labels), self.sizes, dtype, error_feedback)

    def gather(self, r: int, idx: torch.Tensor, uploads: dict[int, bytes], comps: Any) -> None:
        r"""Decode the parties' :math:`C_m(h_m)`: the embeddings of :math:`\hat\Phi^{t_0}`."""
        self.yb, self.round = self.y[idx], r
        blocks = [
            self.memory.after(
                m, idx, decode(uploads[m], comps[m - 1], (len(idx), P), self.dtype, m, r)
            )
            for m, P in enumerate(self.sizes, start=1)
        ]
        self.Zhat = torch.cat(blocks, dim=1)

    round = 0

    def compress_model(self, c0: Any) -> bytes:
        r""":math:`C_0(\theta_0^{t_0})` as wire bytes (and its error :math:`\|\varepsilon_0\|^2`)."""
        with torch.no_grad():
            theta0 = torch.cat([q.reshape(-1) for q in self.model.parameters()]).reshape(1, -1)
        msg = c0.compress(theta0, rng=self.rng).to_bytes()
        hat = decode(msg, c0, (1, theta0.shape[1]), self.dtype, SERVER, self.round)
        self.server_error = float(((hat - theta0) ** 2).sum())
        return msg

    def local_step(self, eta: float) -> None:
        r""":math:`\theta_0 \leftarrow \theta_0 - \eta \nabla_0 F_{\mathcal{B}}(\hat\Phi^{t_0})`."""
        loss = nn.functional.cross_entropy(self.model(self.Zhat), self.yb)
        sgd_step(self.params, torch.autograd.grad(loss, self.params, allow_unused=True), eta)


class _Record(RunRecord):
    """The server's bookkeeping (ledger, log, history, checkpoint; not C1 itself).

    The shared :class:`~cvfl_sim.vfl.record.RunRecord`, fed by the parties' measurement reports:
    the ledger counts each round as it ends, the log takes the round once its parties' measured
    errors arrive.
    """

    def __init__(self, s: RunSetup, dataset: VerticalDataset, config: CVFLConfig, server: Server):
        super().__init__(s, dataset, config)
        self.replicas = copy.deepcopy(s.parties)  # the parties' models as last reported
        self.server = server
        self.pending: list[tuple[int, float, float]] = []  # (round bits, e_srv, lr) per round
        self.round_seconds: list[float] = []  # the server's wall time of each round (this run)

    def round_done(self, comps: Sequence[Any], c0: Any, bsz: int, eta: float) -> None:
        """Account one round's messages in the ledger (C6); its log waits for the reports."""
        self.pending.append((self.account(comps, c0, bsz), self.server.server_error, eta))

    def take_reports(self, reports: dict[int, list[bytes]], r: int) -> list[Any]:
        """Load the parties' parameters, fold their errors into the log; return generator states."""
        k = len(self.pending)
        errs = []
        states = []
        for m in sorted(reports):
            params, err, state = reports[m]
            _load_state_bytes(self.replicas[m - 1], params, m, r)
            if len(err) != 8 * k:
                raise PeerError(m, r, f"reported {len(err)} error bytes for {k} rounds")
            errs.append(np.frombuffer(err, dtype="<f8").tolist())
            if state:
                try:
                    states.append(json.loads(state.decode("ascii")))
                except (UnicodeDecodeError, ValueError) as exc:
                    raise PeerError(m, r, f"sent a bad generator state: {exc}") from None
        for i, (bits, e_srv, eta) in enumerate(self.pending):
            self.log_round(bits, [e[i] for e in errs], e_srv, eta)
        self.pending = []
        return states

    def record(self, r: int) -> None:
        """The history row after round ``r``, of the reported parties and the server's model."""
        self.add_row(r, self.replicas, self.server.model)


def run_roles(
    dataset: VerticalDataset,
    config: CVFLConfig,
    transport: Transport,
    ranks: Sequence[int],
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    on_epoch_end: Callable[[int], None] | None = None,
    on_round: Callable[[int], None] | None = None,
    fault: Callable[[int, int], None] | None = None,
) -> RunResult | None:
    r"""Run Algorithm 1 (C1) for the roles of ``ranks`` (0 = server, ``m`` = party ``m``).

    In one process ``ranks`` holds every rank; under :mod:`cvfl_sim.vfl.distributed` each process
    runs one. Every process builds the same initial models from the seed (``train``'s set-up).

    Parameters
    ----------
    dataset, config
        As for :func:`~cvfl_sim.vfl.train.train`.
    transport : Transport
        Carries the messages.
    ranks : sequence of int
        The roles this process plays.
    checkpoint : path-like, optional
        After every epoch the server writes the complete state here (``train``'s format); every
        process resumes from it if it exists when the run starts.
    on_epoch_end : callable, optional
        Called by the server's process with the number of finished epochs.
    on_round : callable, optional
        Called with each round's number as it starts (a liveness signal for a watchdog).
    fault : callable, optional
        Test hook ``fault(rank, round)`` called by each local role at the start of each round.

    Returns
    -------
    RunResult or None
        The run (with ``summary["bytes_sent"]`` from this transport) in the server's process.
    """
    s = setup_run(dataset, config, cpu_only="backend='roles'")
    M = dataset.n_parties
    dtype, Q, B, n = s.dtype, config.Q, config.batch_size, dataset.n_train
    ytr = torch.as_tensor(dataset.y_train)
    comp_seqs = s.seeds[2].spawn(M + 1)
    batch_gen = np.random.default_rng(s.seeds[1])
    ef = config.error_feedback
    parties = {
        m: Party(
            m,
            s.parties[m - 1],
            torch.as_tensor(dataset.train_parts[m - 1], dtype=dtype),
            ytr,
            copy.deepcopy(s.server),
            s.emb_sizes,
            np.random.default_rng(comp_seqs[m - 1]),
            ef,
        )
        for m in ranks
        if m != SERVER
    }
    server = rec = None
    if SERVER in ranks:
        server = Server(s.server, ytr, s.emb_sizes, np.random.default_rng(comp_seqs[M]), ef, dtype)
        rec = _Record(s, dataset, config, server)

    start_epoch, r = 0, 0
    if checkpoint is not None and os.path.exists(checkpoint):
        start_epoch, r = _resume(checkpoint, dataset, config, s, parties, server, rec, batch_gen)
    elif rec is not None:
        rec.record(0)

    def report(with_rng: bool) -> list[Any]:
        """The parties' measurement messages to the server (not part of Algorithm 1)."""
        for m, p in parties.items():
            transport.send_phase(m, [(SERVER, f) for f in p.report(with_rng)], "measurement")
        if rec is None:
            return []
        lim = [_state_nbytes(net) for net in rec.replicas]
        reps = {
            m: [
                transport.recv(m, SERVER, lim[m - 1]),
                transport.recv(m, SERVER, 8 * len(rec.pending)),
                transport.recv(m, SERVER, _MAX_STATE_JSON),
            ]
            for m in range(1, M + 1)
        }
        return rec.take_reports(reps, r)

    for epoch in range(start_epoch, config.epochs):
        batches = minibatches(n, B, batch_gen)  # every role draws the same (shared seed)
        for batch in batches:
            tick = time.perf_counter()
            transport.round = r
            if on_round is not None:
                on_round(r)
            for rank in ranks:
                if fault is not None:
                    fault(rank, r)
            t0 = r * Q  # "if t mod Q == 0: a global round starts; t0 := t"
            eta = s.step_size(t0)  # "η^{t0}", fixed for the round's Q local steps
            comps, c0 = s.compressor_at(r), s.server_compressor_at(r)
            idx = torch.from_numpy(batch)  # "sample mini-batch B^{t0}"
            bsz = len(batch)
            up_limit = {
                m: max_message_bytes(comps[m - 1], (bsz, s.emb_sizes[m - 1]))
                for m in range(1, M + 1)
            }

            # "each party m ≥ 1 sends C_m(h_m(θ_m^t; X_m^{B^{t0}})) to the server"
            for m, p in parties.items():
                transport.send_phase(m, [(SERVER, p.upload(r, t0, idx, comps[m - 1]))], "algorithm")

            if server is not None and rec is not None:
                # "Φ̂^{t0} = {C_0(θ_0^t), C_1(h_1), …, C_M(h_M)}"
                uploads = {m: transport.recv(m, SERVER, up_limit[m]) for m in range(1, M + 1)}
                server.gather(r, idx, uploads, comps)
                model_msg = server.compress_model(c0)
                # "the server sends Φ̂^{t0} to all parties" (party m gets the others' C_j(h_j))
                transport.send_phase(
                    SERVER,
                    [
                        (m, msg)
                        for m in range(1, M + 1)
                        for msg in [*(uploads[j] for j in range(1, M + 1) if j != m), model_msg]
                    ],
                    "algorithm",
                )
                rec.round_done(comps, c0, bsz, eta)

            for m, p in parties.items():
                others = {
                    j: transport.recv(SERVER, m, up_limit[j]) for j in range(1, M + 1) if j != m
                }
                model_msg = transport.recv(SERVER, m, max_message_bytes(c0, (1, p.theta0_size)))
                p.receive(r, others, model_msg, comps, c0)

            # "for m = 0..M in parallel: Φ̂_m^t = {Φ̂_{-m}^{t0}; h_m(θ_m^t)};
            #  θ_m^{t+1} = θ_m^t − η^{t0} ∇_m F_B(Φ̂_m^t; y^{B^{t0}})" — Q local steps, same batch
            for _step in range(Q):
                for p in parties.values():
                    p.local_step(eta)
                if server is not None:
                    server.local_step(eta)
            r += 1
            if rec is not None:
                rec.round_seconds.append(time.perf_counter() - tick)
                rec.train_time += rec.round_seconds[-1]
            if s.evaluates_after(r):
                report(with_rng=False)
                if rec is not None:
                    rec.record(r)
        if checkpoint is not None:
            states = report(with_rng=True)
            if rec is not None and server is not None:
                arrays = checkpoint_arrays(rec.replicas, server.model, server.memory.tables)
                gen_states = [*states, server.rng.bit_generator.state]
                rec.save(checkpoint, arrays, epoch + 1, r, batch_gen, gen_states)
        if on_epoch_end is not None and rec is not None:
            on_epoch_end(epoch + 1)

    if rec is None or server is None:
        return None
    return rec.finish(
        rec.replicas,
        server.model,
        bytes_sent=[dict(transport.bytes_sent[k]) for k in sorted(transport.bytes_sent)],
        round_seconds=rec.round_seconds,
    )


def _resume(
    path: str | os.PathLike[str],
    dataset: VerticalDataset,
    config: CVFLConfig,
    s: RunSetup,
    parties: dict[int, Party],
    server: Server | None,
    rec: _Record | None,
    batch_gen: np.random.Generator,
) -> tuple[int, int]:
    """Every local role takes its part of ``train``'s checkpoint (:func:`~cvfl_sim.vfl.record.resume`)."""
    memory = _Memories(dataset.n_train, s.emb_sizes, s.dtype, config.error_feedback)
    gens = [parties[m].rng if m in parties else None for m in range(1, dataset.n_parties + 1)]
    gens.append(None if server is None else server.rng)
    # s.parties / s.server are the local roles' own modules; memories and replicas are copies
    arrays = checkpoint_arrays(s.parties, s.server, memory.tables)
    done = resume(path, dataset, config, arrays, batch_gen, gens, rec)
    roles_mem = [p.memory for p in parties.values()]
    if server is not None:
        roles_mem.append(server.memory)
    for mem in roles_mem:
        for tab, src in zip(mem.tables, memory.tables):
            tab.copy_(src)
    if rec is not None:
        for rep, net in zip(rec.replicas, s.parties):
            rep.load_state_dict(net.state_dict())
    return done


def train_roles(
    dataset: VerticalDataset,
    config: CVFLConfig,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    on_epoch_end: Callable[[int], None] | None = None,
    delay: float = 0.0,
) -> RunResult:
    r"""``train(..., backend="roles")``: all roles in this process, messages through queues.

    Same result as the vectorised ``train`` (C1), plus ``summary["bytes_sent"]``: per
    rank, the ``"algorithm"`` and ``"measurement"`` bytes sent (frames included), and
    ``summary["round_seconds"]``. In one process the roles run one after another, so a
    ``delay`` adds up over the parties' uploads; :func:`~cvfl_sim.vfl.distributed.train_distributed`
    is the one to time latency with.

    Examples
    --------
    >>> from cvfl_sim.vfl.data import load_dataset
    >>> from cvfl_theory.compressors import ScalarQuantizer
    >>> ds = load_dataset("breast-cancer")
    >>> cfg = CVFLConfig(epochs=1, batch_size=200, compressor=ScalarQuantizer(4))
    >>> res = train_roles(ds, cfg)
    >>> res.summary["bytes_sent"][1]["algorithm"] > 0
    True
    """
    transport = InProcessTransport(dataset.n_parties + 1, delay=delay)
    res = run_roles(
        dataset,
        config,
        transport,
        range(dataset.n_parties + 1),
        checkpoint=checkpoint,
        on_epoch_end=on_epoch_end,
    )
    assert res is not None
    return res
