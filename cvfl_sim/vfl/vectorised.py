r"""The vectorised execution of Algorithm 1 of [CVFL] (C1), with the C6 ledger and C2 error log.

For every global round :math:`t_0` (every ``Q`` local iterations):

1. one mini-batch :math:`\mathcal{B}^{t_0}` is drawn (shuffled epochs, without replacement);
2. every party :math:`m \ge 1` sends :math:`C_m(h_m(\theta_m^{t_0}; X_m^{\mathcal{B}}))`; the server
   forms :math:`\hat\Phi^{t_0} = \{C_0(\theta_0^{t_0}), C_1(h_1), \dots, C_M(h_M)\}` and sends it to
   every party (the bits of every message go to the ledger, C6);
3. for ``Q`` local steps, in parallel: party :math:`m` steps on
   :math:`\nabla_m F_{\mathcal{B}}(\hat\Phi_m^t)` with
   :math:`\hat\Phi_m^t = \{\hat\Phi_{-m}^{t_0}; h_m(\theta_m^t; X_m^{\mathcal{B}})\}` — its own
   *fresh* embedding, the others' *stale compressed* ones and the *compressed frozen* server model
   :math:`C_0(\theta_0^{t_0})`; the server steps its own uncompressed :math:`\theta_0` on the
   compressed embeddings :math:`\hat\Phi^{t_0}`. The step size :math:`\eta^{t_0}` is fixed within
   the round.

With identity compressors and ``Q = 1`` this is mini-batch SGD on the joint model (C1), which
:func:`~cvfl_sim.vfl.joint_sgd.joint_sgd` implements independently as the test oracle. Optional
error feedback (C9, EF-VFL style): each party keeps, per training sample, the embedding the server
last reconstructed, and sends the compressed *difference* to it.

The simulation is sequential but exact: the blocks' updates within a local step are independent
(each depends only on round-start messages and its own parameters). All ``M`` party gradients of a
local step come from one backward pass through ``M`` stacked copies of the server head, so the cost
stays close to one joint SGD step (see ``benchmarks/bench_sim.py``). When a round's messages are
lossless (checked value by value, e.g. identity compressors at the data's precision) and the
server head is row-wise (built from linear layers and activations), the ``M + 1`` objectives of
the round's first local step coincide and are evaluated once, as one joint SGD step; the identity
compressor at the data's precision is not called at all (it returns its input's values and draws
no randomness). Neither shortcut changes any result.
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .config import CVFLConfig, setup_run
from .data import VerticalDataset
from .record import RunRecord, checkpoint_arrays, resume
from .results import RunResult
from .steps import diverged, minibatches, sgd_step

__all__ = ["train_vectorised"]


def _own_mask(sizes: Sequence[int], device: torch.device) -> torch.Tensor:
    """``(M, 1, ΣP)`` boolean mask of party ``m``'s own block of columns in row block ``m``."""
    mask = torch.zeros(len(sizes), 1, sum(sizes), dtype=torch.bool, device=device)
    off = 0
    for m, p in enumerate(sizes):
        mask[m, 0, off : off + p] = True
        off += p
    return mask


# Modules whose forward is deterministic and acts on each row (sample) separately, without
# buffers: a server head built from them gives every row the same output whether it is evaluated
# alone or stacked with other rows, which the lossless fast path of :func:`train_vectorised` relies on.
_ROWWISE = (
    nn.Linear,
    nn.Sequential,
    nn.Identity,
    nn.ReLU,
    nn.LeakyReLU,
    nn.ELU,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.Softplus,
)


def _rowwise(server: nn.Module) -> bool:
    """Whether ``server`` is built only from :data:`_ROWWISE` modules (and the built-in heads)."""
    from .models import LinearHead, MLPHead

    kinds = (*_ROWWISE, LinearHead, MLPHead)
    return all(type(mod) in kinds for mod in server.modules()) and not any(
        True for _ in server.buffers()
    )


def _exact_identity(c: Any, dtype: torch.dtype) -> bool:
    """Whether ``c.roundtrip(x)`` returns ``x``'s values exactly for finite ``x`` of ``dtype``.

    True for :class:`~cvfl_theory.compressors.Identity` at the data's own precision (``r = 32``
    for float32, ``r = 64`` for float64): it sends every component as that IEEE float and draws
    no randomness (C5), so skipping the call changes neither the result nor any generator.
    """
    from cvfl_theory.compressors import Identity

    bits = {torch.float32: 32, torch.float64: 64}.get(dtype)
    return type(c) is Identity and c.config().get("r") == bits


def _flat_params(module: nn.Module) -> torch.Tensor | None:
    """Make ``module``'s (contiguous) parameters views of one flat tensor, returned; values kept.

    ``None`` (nothing changed) if a parameter is not contiguous: its layout is kept.
    """
    params = list(module.parameters())
    if not all(q.is_contiguous() for q in params):
        return None
    flat = torch.cat([q.detach().reshape(-1) for q in params])
    off = 0
    for q in params:
        n = q.numel()
        q.data = flat[off : off + n].view(q.shape)
        off += n
    return flat


@dataclass
class _Lossless:
    """Which of a round's messages are lossless (cached while the compressors stay the same)."""

    comps: Any
    c0: Any
    exact: list[bool]
    any_exact: bool
    all_exact: bool
    exact0: bool


@dataclass
class _RoundStart:
    r"""A round's messages: :math:`\hat\Phi^{t_0}` and :math:`C_0(\theta_0^{t_0})`, their errors."""

    Hc: torch.Tensor  # the fresh embeddings h_m(θ_m^{t0}), (B, ΣP), with graph
    Hd: torch.Tensor  # the same, detached
    Zhat: torch.Tensor  # Φ̂^{t0} embeddings, (B, ΣP)
    theta0: torch.Tensor  # θ_0^{t0}, (1, |θ_0|)
    theta0_hat: torch.Tensor  # C_0(θ_0^{t0}), (|θ_0|,)
    e_party: list[float]  # ||ε_m^{t0}||_F^2, m = 1..M
    e_emb: float
    e_srv: float
    joint0: bool  # local step 0 is one joint SGD step (lossless round start)


class _VectorisedRun:
    """One run's models, data, generators and record; :func:`train_vectorised` drives it."""

    def __init__(self, dataset: VerticalDataset, config: CVFLConfig) -> None:
        s = setup_run(dataset, config)
        self.s, self.config, self.M = s, config, dataset.n_parties
        self.parties, self.server = s.parties, s.server
        self.all_params: list[torch.Tensor] = [
            q for net in [*self.parties, self.server] for q in net.parameters() if q.requires_grad
        ]
        self.server_params = list(self.server.parameters())
        # the parties' copy of the server, C_0(θ_0^{t0}), frozen for a round; its parameters are
        # views of one flat tensor, so a round refreshes it with one copy
        self.server_hat = copy.deepcopy(self.server)
        for q in self.server_hat.parameters():
            q.requires_grad_(False)
        self.hat_flat = _flat_params(self.server_hat)
        self.hat_params = list(self.server_hat.parameters())
        self.numels = [q.numel() for q in self.server_params]
        self.hat_buffers = list(zip(self.server_hat.buffers(), self.server.buffers()))
        dev = s.device
        self.own_block = _own_mask(s.emb_sizes, dev)  # (M, 1, ΣP): party m's block in row block m
        self.rowwise = _rowwise(self.server)
        self.Xtr = [torch.as_tensor(p, dtype=s.dtype, device=dev) for p in dataset.train_parts]
        self.ytr = torch.as_tensor(dataset.y_train, device=dev)
        self.batch_gen = np.random.default_rng(s.seeds[1])
        self.comp_gens = [np.random.default_rng(c) for c in s.seeds[2].spawn(self.M + 1)]
        n = dataset.n_train
        self.memory = (
            [torch.zeros(n, P, dtype=s.dtype, device=dev) for P in s.emb_sizes]
            if config.error_feedback
            else []
        )
        self.rec = RunRecord(s, dataset, config)
        self._lossless: _Lossless | None = None

    def arrays(self) -> dict[str, torch.Tensor]:
        """The training state's tensors under their checkpoint names."""
        return checkpoint_arrays(self.parties, self.server, self.memory)

    def lossless(self, comps: list[Any], c0: Any) -> _Lossless:
        """Which messages of compressors ``comps``, ``c0`` are lossless (C5 identity)."""
        last = self._lossless
        if last is None or comps is not last.comps or c0 is not last.c0:
            exact = [_exact_identity(c, self.s.dtype) for c in comps]
            last = self._lossless = _Lossless(
                comps,
                c0,
                exact,
                any(exact),
                all(exact) and not self.config.error_feedback,
                _exact_identity(c0, self.s.dtype),
            )
        return last

    def round_start(
        self, r: int, t0: int, xb: list[torch.Tensor], idx: torch.Tensor, comps: list[Any], c0: Any
    ) -> _RoundStart:
        r"""Compress the round's messages and freeze :math:`C_0(\theta_0^{t_0})` for the round."""
        M, dtype, ef = self.M, self.s.dtype, self.config.error_feedback
        ll = self.lossless(comps, c0)
        # fresh embeddings h_m(θ_m^{t0}) (kept with graph for local step 0)
        H = [p(x) for p, x in zip(self.parties, xb)]
        Hc = torch.cat(H, dim=1)
        Hhat = []
        skip = [e and H[m].dtype == dtype for m, e in enumerate(ll.exact)]
        for m in range(M):
            h = H[m].detach()
            if skip[m]:  # C_m(h) = h exactly: the call is skipped (finiteness checked below)
                if ef:
                    mem = self.memory[m][idx]
                    hh = mem + (h - mem)
                    self.memory[m][idx] = hh
                else:
                    hh = h
                Hhat.append(hh)
                continue
            try:
                if ef:
                    mem = self.memory[m][idx]
                    hh = mem + comps[m].roundtrip(h - mem, rng=self.comp_gens[m])
                    self.memory[m][idx] = hh
                else:
                    hh = comps[m].roundtrip(h, rng=self.comp_gens[m])
            except ValueError:
                if not bool(torch.isfinite(h).all()):
                    raise diverged(m, r, t0) from None
                raise
            Hhat.append(hh.to(dtype))
        with torch.no_grad():
            Hd = Hc.detach()
            lossless = ll.all_exact and all(skip)
            Zhat = Hd if lossless else torch.cat(Hhat, dim=1)  # Φ̂^{t0} embeddings, (B, ΣP)
            # NaN here also flags a diverged embedding (checked just below)
            sq = (Zhat - Hd) ** 2
            e_party = [float(blk.sum()) for blk in sq.split(self.s.emb_sizes, dim=1)]
            e_emb = float(sum(e_party))
            if ll.any_exact and not math.isfinite(e_emb):
                for m in range(M):
                    if skip[m] and not bool(torch.isfinite(H[m]).all()):
                        raise diverged(m, r, t0)
            theta0 = torch.cat([q.reshape(-1) for q in self.server_params]).reshape(1, -1)
            if ll.exact0:
                theta0_hat = theta0.reshape(-1)
            else:
                theta0_hat = c0.roundtrip(theta0, rng=self.comp_gens[M]).to(dtype).reshape(-1)
            e_srv = float(((theta0_hat - theta0.reshape(-1)) ** 2).sum())
            if ll.exact0 and not math.isfinite(e_srv):
                c0.roundtrip(theta0, rng=self.comp_gens[M])  # raises the compressor's ValueError
            # the parties' copy of the server: C_0(θ_0^{t0}), frozen for the round
            if self.hat_flat is not None:
                self.hat_flat.copy_(theta0_hat)
            else:
                for v, dst in zip(theta0_hat.split(self.numels), self.hat_params):
                    dst.copy_(v.reshape(dst.shape))
            for b_hat, b_srv in self.hat_buffers:
                b_hat.copy_(b_srv)
            # lossless round start (e.g. identity compressors): every party's view
            # Φ̂_m^{t0} = {Φ̂_{-m}^{t0}; h_m} is the fresh Φ^{t0} and C_0(θ_0^{t0}) = θ_0^{t0},
            # so the M + 1 objectives of local step 0 coincide with one joint F_B(Φ^{t0}; θ_0)
            # (a nonzero error rules it out without comparing the tensors)
            joint0 = (
                self.rowwise
                and (lossless or (e_emb == 0.0 and bool(torch.equal(Zhat, Hd))))
                and (ll.exact0 or (e_srv == 0.0 and bool(torch.equal(theta0_hat, theta0[0]))))
            )
        return _RoundStart(Hc, Hd, Zhat, theta0, theta0_hat, e_party, e_emb, e_srv, joint0)

    def local_steps(
        self,
        r: int,
        xb: list[torch.Tensor],
        yb: torch.Tensor,
        start: _RoundStart,
        eta: float,
        probe: Callable[..., None] | None,
        comps: list[Any],
        c0: Any,
    ) -> None:
        """The round's ``Q`` local steps on its mini-batch, every block from one backward pass."""
        M, Q, bsz = self.M, self.config.Q, len(yb)
        Hc, Zhat = start.Hc, start.Zhat
        if Q > 1 or not start.joint0:
            with torch.no_grad():
                yrep = yb.repeat(M + 1)
                Zhat3 = Zhat.unsqueeze(0)
        for step in range(Q):
            if probe is not None:  # measures only: reads the state, changes nothing
                probe(
                    round_index=r,
                    step=step,
                    Q=Q,
                    eta=eta,
                    parties=self.parties,
                    server=self.server,
                    x=xb,
                    y=yb,
                    stale=start.Hd,
                    stale_hat=Zhat,
                    theta0=start.theta0,
                    theta0_hat=start.theta0_hat,
                    compressors=comps,
                    server_compressor=c0,
                    error_feedback=self.config.error_feedback,
                )
            if step == 0 and start.joint0:
                loss = nn.functional.cross_entropy(self.server(Hc), yb, reduction="sum") / bsz
            else:
                if step > 0:
                    Hc = torch.cat([p(x) for p, x in zip(self.parties, xb)], dim=1)
                # rows m*B..(m+1)*B: party m's view Φ̂_m^t = {Φ̂_{-m}^{t0}; h_m(θ_m^t)}
                # (the others' stale compressed blocks, its own fresh block: a selection)
                Zp = torch.where(self.own_block, Hc.unsqueeze(0), Zhat3).reshape(M * bsz, -1)
                # Σ_m F_B(Φ̂_m^t; C_0(θ_0^{t0})) + F_B(Φ̂^{t0}; θ_0): the blocks' parameters
                # are disjoint, so one backward gives every ∇_m F_B of Algorithm 1 (each a mean)
                logits = torch.cat([self.server_hat(Zp), self.server(Zhat)], dim=0)
                loss = nn.functional.cross_entropy(logits, yrep, reduction="sum") / bsz
            grads = torch.autograd.grad(loss, self.all_params, allow_unused=True)
            sgd_step(self.all_params, grads, eta)


def train_vectorised(
    dataset: VerticalDataset,
    config: CVFLConfig,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    on_epoch_end: Callable[[int], None] | None = None,
    probe: Callable[..., None] | None = None,
) -> RunResult:
    r"""``train(..., backend="inprocess")``: Algorithm 1 (C1) in one process, vectorised.

    Arguments and result as :func:`cvfl_sim.vfl.train.train`'s.

    Examples
    --------
    >>> from cvfl_sim.vfl.data import load_dataset
    >>> res = train_vectorised(load_dataset("digits-quadrants"), CVFLConfig(Q=2, epochs=1))
    >>> [round(r["epoch"]) for r in res.history]
    [0, 1]
    """
    run = _VectorisedRun(dataset, config)
    s, rec, Xtr, ytr = run.s, run.rec, run.Xtr, run.ytr
    start_epoch, r = 0, 0
    if checkpoint is not None and os.path.exists(checkpoint):
        start_epoch, r = resume(
            checkpoint, dataset, config, run.arrays(), run.batch_gen, run.comp_gens, rec
        )
    else:
        rec.add_row(0, run.parties, run.server)
    for epoch in range(start_epoch, config.epochs):
        batches = minibatches(dataset.n_train, config.batch_size, run.batch_gen)
        tick = time.perf_counter()
        # one gather per epoch: a round's mini-batch is then a contiguous slice (same values)
        order = torch.from_numpy(np.concatenate(batches)).to(s.device)
        X_ep = [X[order] for X in Xtr]
        y_ep = ytr[order]
        rec.train_time += time.perf_counter() - tick
        lo = 0
        for batch in batches:
            tick = time.perf_counter()
            t0 = r * config.Q
            eta = s.step_size(t0)
            comps, c0 = s.compressor_at(r), s.server_compressor_at(r)
            hi = lo + len(batch)
            xb, yb = [X[lo:hi] for X in X_ep], y_ep[lo:hi]
            start = run.round_start(r, t0, xb, order[lo:hi], comps, c0)
            lo = hi
            bits = rec.account(comps, c0, len(batch))
            run.local_steps(r, xb, yb, start, eta, probe, comps, c0)
            r += 1
            rec.log_round(bits, start.e_party, start.e_srv, eta, start.e_emb)
            rec.train_time += time.perf_counter() - tick
            if s.evaluates_after(r):
                rec.add_row(r, run.parties, run.server)
        if checkpoint is not None:
            gen_states = [g.bit_generator.state for g in run.comp_gens]
            rec.save(checkpoint, run.arrays(), epoch + 1, r, run.batch_gen, gen_states)
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1)
    return rec.finish(run.parties, run.server)
