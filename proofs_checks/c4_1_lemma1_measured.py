"""C4.1 (Lemma 1), measured on a real run: right side / left side >= 1 for every block.

A short C-VFL run (breast cancer, 4 MLP parties, linear head, 2-bit dithered scalar quantizer on
every message, Q = 2) with :class:`cvfl_sim.bounds.lemma1.Lemma1Probe` at the first and last local step
of every round. The left side :math:`\\|\\nabla_m F_B(\\Phi_m^t) - \\nabla_m F_B(\\hat\\Phi_m^t)\\|^2`
is computed exactly (two gradients on the round's batch, float64); the right side is
:math:`H_m^2 G_m^2 \\sum_{j\\ne m} E_j` with the chain reading's constants (operator norms of the
embedding Hessian and of the embedding Jacobian), maxima over every probed point, and the round's
realised or expected errors. The main pair passes iff every ratio is >= 1.

That comparison is loose (right / left >= 13), so it cannot see how the probed points are
combined. Further pairs, each against an independent truth, with float64 round-off as tolerance
(1e-9 relative; everything here is deterministic):

- **the run's constants are suprema**: the check records every probed state and computes, with
  its own :mod:`torch.func` code (per-sample Hessians of the cross entropy assembled into the
  chain-reading block, the dense Jacobian of each party), :math:`H_m` at both points of each
  probe and :math:`G_m`; the report's ``H``, ``G`` must be at least their maxima over the run, and
  so must :meth:`~cvfl_sim.bounds.theorems.Constants.with_lemma1` raise constants of zero to
  (C4.2's form). Catches a minimum instead of a maximum over the probes or over a probe's two
  points.
- **unprobed rounds**: a second probe on the same run measures every second round only. Every
  value :meth:`~cvfl_sim.bounds.lemma1.Lemma1Report.per_round` gives a round is then a mean of
  the run's own per-round left sides, so it must lie in their range (measured by the first
  probe, every round); the tight form of Theorem 4.2's term 3 (an estimate here: Q > 1 and, for
  the half probe, unprobed round starts) from the half probe, divided by the
  full probe's, must lie in ``[R min_r u_r, R max_r u_r] / sum_r u_r`` (``u_r`` the full probe's
  round-start tight bounds summed over blocks). Catches unprobed rounds filled with 0 (per_round:
  0 is below every left side; the tight form: 0.44 of the full sum against a lower end of 0.84).
  The probed rounds' values of the two probes are identical (the probe changes nothing).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

from .result import CheckResult, Comparison

ROUNDOFF = 1e-9
"""Relative tolerance of two float64 computations of the same operator norm or mean."""


def _stats(r: np.ndarray) -> tuple[float, float, float]:
    f = r[np.isfinite(r)]
    return float(f.min()), float(np.median(f)), float(f.max())


class _Record:
    """A probe for ``train`` that forwards to several probes and keeps float64 copies of the
    states the first one measures."""

    def __init__(self, *probes: Any) -> None:
        self.probes = probes
        self.states: list[dict[str, Any]] = []

    def __call__(self, **kw: Any) -> None:
        for p in self.probes:
            p(**kw)
        if self.probes[0].wants(kw["round_index"], kw["step"], kw["Q"]):
            f64 = torch.float64
            self.states.append(
                {
                    "parties": [
                        {k: v.detach().to(f64).clone() for k, v in p.named_parameters()}
                        for p in kw["parties"]
                    ],
                    "server": {
                        k: v.detach().to(f64).clone() for k, v in kw["server"].named_parameters()
                    },
                    "x": [x.detach().to(f64) for x in kw["x"]],
                    "y": kw["y"].detach().clone(),
                    "Z": kw["stale"].detach().to(f64).clone(),
                    "Zh": kw["stale_hat"].detach().to(f64).clone(),
                    "t0": kw["theta0"].detach().to(f64).reshape(-1).clone(),
                    "t0h": kw["theta0_hat"].detach().to(f64).reshape(-1).clone(),
                }
            )


def _op(M: torch.Tensor) -> float:
    """Spectral norm from the Gram matrix of the shorter side (float64)."""
    G = M @ M.T if M.shape[0] <= M.shape[1] else M.T @ M
    return math.sqrt(max(float(torch.linalg.eigvalsh(G)[-1]), 0.0))


def _chain_block(
    head: nn.Module, theta: torch.Tensor, Z: torch.Tensor, y: torch.Tensor, cols: slice | None
) -> float:
    r"""Exact :math:`\|\nabla^2_{h_m, \Phi_{-m}} F_B\|_2` at :math:`(\theta_0, Z)` (own code).

    ``cols`` are block ``m``'s columns of ``Z`` (``None``: the server block, ``m = 0``). Per-sample
    Hessians of the cross entropy in :math:`(\theta_0, z_i)` (the batch mean is block diagonal in
    the samples), assembled into the block's rows and columns.
    """
    names = [k for k, _ in head.named_parameters()]
    shapes = [v.shape for _, v in head.named_parameters()]
    n0 = theta.numel()
    B, P = Z.shape

    def ell(v: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        parts = v[:n0].split([math.prod(s) for s in shapes])
        params = {k: t.reshape(s) for k, t, s in zip(names, parts, shapes)}
        logits = functional_call(head, params, (v[n0:].unsqueeze(0),))
        return nn.functional.cross_entropy(logits, yi.unsqueeze(0))

    Hs = (
        vmap(lambda v, yi: jacrev(jacrev(ell))(v, yi))(
            torch.cat([theta.expand(B, n0), Z], dim=1), y
        )
        / B
    )  # (B, n0 + P, n0 + P)
    if cols is None:  # rows theta_0, columns every embedding entry of every sample
        return _op(Hs[:, :n0, n0:].permute(1, 0, 2).reshape(n0, B * P))
    own = torch.arange(P)[cols]
    other = torch.tensor([c for c in range(P) if c not in set(own.tolist())], dtype=torch.long)
    to_theta = Hs[:, n0 + own, :n0].reshape(-1, n0)  # (B P_m, n0)
    to_other = Hs[:, n0 + own][:, :, n0 + other]  # (B, P_m, P - P_m): block diagonal in samples
    Pm = own.numel()
    gram = to_theta @ to_theta.T
    blk = to_other @ to_other.transpose(1, 2)  # (B, P_m, P_m)
    for i in range(B):
        gram[i * Pm : (i + 1) * Pm, i * Pm : (i + 1) * Pm] += blk[i]
    return math.sqrt(max(float(torch.linalg.eigvalsh(gram)[-1]), 0.0))


def _exact_constants(
    state: dict[str, Any], parties: list[nn.Module], head: nn.Module
) -> tuple[np.ndarray, np.ndarray]:
    """``H`` (larger of the two points) and ``G`` of one probed state, ``(M + 1,)`` each."""
    M = len(parties)
    t_now = torch.cat([v.reshape(-1) for v in state["server"].values()])
    with torch.no_grad():
        fresh = [
            functional_call(p, prm, (x,))
            for p, prm, x in zip(parties, state["parties"], state["x"])
        ]
    sizes = [int(h.shape[1]) for h in fresh]
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    y = state["y"]
    H = np.zeros(M + 1)
    G = np.ones(M + 1)
    H[0] = max(_chain_block(head, t_now, Z, y, None) for Z in (state["Z"], state["Zh"]))
    for m in range(1, M + 1):
        blk = slice(int(offs[m - 1]), int(offs[m]))
        vals = []
        for t, Z in ((state["t0"], state["Z"]), (state["t0h"], state["Zh"])):
            Zm = Z.clone()
            Zm[:, blk] = fresh[m - 1]
            vals.append(_chain_block(head, t, Zm, y, blk))
        H[m] = max(vals)
        prm = state["parties"][m - 1]
        J = jacrev(lambda q, m=m: functional_call(parties[m - 1], q, (state["x"][m - 1],)))(prm)
        rows = fresh[m - 1].numel()
        G[m] = _op(torch.cat([J[k].reshape(rows, -1) for k in prm], dim=1))
    return H, G


def check() -> CheckResult:
    from cvfl_sim.bounds.lemma1 import Lemma1Probe
    from cvfl_sim.bounds.theorems import Constants, bound_vs_observed
    from cvfl_sim.vfl.config import CVFLConfig, build_models
    from cvfl_sim.vfl.data import load_dataset
    from cvfl_sim.vfl.train import train
    from cvfl_theory.compressors import ScalarQuantizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ds = load_dataset("breast-cancer")
        probe = Lemma1Probe(every=1, steps="ends", tight=True)
        half = Lemma1Probe(every=2, steps="ends", tight=True)
        rec = _Record(probe, half)
        cfg = CVFLConfig(
            Q=2,
            lr=0.05,
            epochs=1,
            batch_size=64,
            embedding_size=4,
            compressor=ScalarQuantizer(2, range="minmax-tensor"),
            seed=0,
            eval_every=1,
            track_grad_norm=True,
        )
        run = train(ds, cfg, probe=rec)
        rep, rep_half = probe.report(), half.report()
        parties, server = build_models(ds, cfg)  # architectures only: the states are loaded
        parties = [p.to(torch.float64) for p in parties]
        server = server.to(torch.float64)
        exact = [_exact_constants(s, parties, server) for s in rec.states]
    finally:
        torch.set_num_threads(threads)
    comparisons = []
    lines = []
    worst = np.inf
    for errors in ("realised", "expected"):
        r = rep.ratios(errors)
        for m in range(r.shape[1]):
            lo, med, hi = _stats(r[:, m])
            worst = min(worst, lo)
            who = "server" if m == 0 else f"party {m}"
            comparisons.append(
                Comparison(f"min right/left, {who}, {errors} E", lo, 1.0, 0.0, relation=">=")
            )
            lines.append(f"{who} ({errors} E) min/median/max {lo:.3g}/{med:.3g}/{hi:.3g}")
    # the run's constants are the suprema over its probed points (own computation)
    H_max = np.max([h for h, _ in exact], axis=0)
    G_max = np.max([g for _, g in exact], axis=0)
    M = len(H_max) - 1
    zero = tuple(0.0 for _ in range(M + 1))
    raised = Constants(
        L=1.0, L_m=zero, sigma2=zero, H=zero, G=zero, H_frob=zero, G_frob=zero, H_theta=zero,
        B=cfg.batch_size, points=0, batches=0,
    ).with_lemma1(rep)  # fmt: skip
    spread = float(np.max(H_max / np.min([h for h, _ in exact], axis=0)))
    for m in range(M + 1):
        for what, value, truth in (
            ("report H", rep.H[m], H_max[m]),
            ("report G", rep.G[m], G_max[m]),
            ("Constants.with_lemma1 H", raised.H[m], H_max[m]),
            ("Constants.with_lemma1 G", raised.G[m], G_max[m]),
        ):
            comparisons.append(
                Comparison(
                    f"block {m}: {what} >= max over {len(exact)} probed points (own autograd)",
                    float(value),
                    float(truth),
                    ROUNDOFF * float(truth),
                    ">=",
                )
            )
    # unprobed rounds: a mean of the run's own rounds, inside their range
    R = len(run.rounds["lr"])
    full, filled = rep.per_round(R), rep_half.per_round(R)
    probed = np.unique(rep_half.rounds)
    lo_r, hi_r = full.min(axis=0), full.max(axis=0)
    for m in range(M + 1):
        comparisons += [
            Comparison(
                f"block {m}: per_round of every 2nd round >= min over rounds of every round's",
                float(filled[:, m].min()),
                float(lo_r[m]),
                ROUNDOFF * float(lo_r[m]),
                ">=",
            ),
            Comparison(
                f"block {m}: per_round of every 2nd round <= max over rounds of every round's",
                float(filled[:, m].max()),
                float(hi_r[m]),
                ROUNDOFF * float(hi_r[m]),
                "<=",
            ),
            Comparison(
                f"block {m}: probed rounds measured identically by both probes",
                float(np.max(np.abs(filled[probed, m] - full[probed, m]))),
                0.0,
                ROUNDOFF * float(hi_r[m]),
            ),
        ]
    assert rep.tight is not None
    # each round's tight value: the mean over its probed steps (0 and Q - 1), summed over blocks
    u = np.array([rep.tight[rep.rounds == r].sum(axis=1).mean() for r in range(R)])
    form = "tight (C4.5, ours)"
    # Q > 1 here: the tight form is an estimate (its points after a round's start depend on the
    # round's dither, and it is charged to unprobed steps), not a bound
    t_full = bound_vs_observed(run, raised, lemma1=rep).estimates[form].compression
    t_half = bound_vs_observed(run, raised, lemma1=rep_half).estimates[form].compression
    share = t_half / t_full
    low, high = R * u.min() / u.sum(), R * u.max() / u.sum()
    comparisons += [
        Comparison(
            "tight term 3, every 2nd round / every round >= R min u / sum u",
            share,
            low,
            ROUNDOFF,
            ">=",
        ),
        Comparison(
            "tight term 3, every 2nd round / every round <= R max u / sum u",
            share,
            high,
            ROUNDOFF,
            "<=",
        ),
    ]
    return CheckResult(
        label="C4.1",
        claim="Lemma 1: ||grad_m F_B(Phi) - grad_m F_B(Phi_hat)||^2 <= H_m^2 G_m^2 sum_{j!=m} E_j "
        "(chain reading, operator norms) at every probed step of a real run; the run's H_m, G_m "
        "are suprema over the probed points",
        method=f"exact left side at {rep.left.shape[0]} probes (rounds x local steps 0 and Q-1) "
        "of a 2-bit scalar run on breast cancer; constants = maxima over every probed point, "
        "recomputed by the check's own autograd; a second probe on every 2nd round",
        symbolic=None,
        empirical=float(worst),
        theoretical=1.0,
        tolerance=0.0,
        relation=">=",
        note="right/left per block: "
        + "; ".join(lines)
        + f"; H max/min over the probes up to {spread:.3g}; tight term 3 every 2nd round / every "
        f"round {share:.4g} in [{low:.4g}, {high:.4g}]",
        comparisons=tuple(comparisons),
    )
