r"""Lemma 1 (C4.1) measured on a real run: both sides, per round, block and party.

Lemma 1 bounds how much the compression errors move each block's gradient:

.. math::
    \mathbb{E}\|\nabla_m F_B(\Phi_m^t) - \nabla_m F_B(\hat\Phi_m^t)\|^2
    \le H_m^2 G_m^2 \sum_{j\ne m} E_j^{t_0}.

What the two points are (C1, C2): in round :math:`t_0`, at local step ``t``, block ``m``
steps on :math:`\hat\Phi_m^t = \{\hat\Phi_{-m}^{t_0}; h_m(\theta_m^t)\}` -- its own **fresh**
embedding and the others' **stale compressed** values: the compressed embeddings
:math:`C_j(h_j(\theta_j^{t_0}))` and, for a party, the compressed frozen server model
:math:`C_0(\theta_0^{t_0})`. :math:`\Phi_m^t` is the same point with the stale values
**uncompressed**: :math:`h_j(\theta_j^{t_0})` and :math:`\theta_0^{t_0}`. The two differ by
exactly the round's compression errors :math:`\varepsilon_j^{t_0}`, ``j ≠ m`` (C2). For the
server (``m = 0``) both use its current :math:`\theta_0^t`; the embeddings are :math:`H^{t_0}`
or :math:`\hat H^{t_0}`.

:class:`Lemma1Probe` is a hook for :func:`cvfl_sim.vfl.train.train` (``train(..., probe=...)``).
On the probed rounds (``every``-th, from round 0) and local steps (``steps``) it computes

- the **left side**, exactly: two gradient evaluations on the round's batch, at
  :math:`\Phi_m^t` and :math:`\hat\Phi_m^t`, in float64 (a difference of two close gradients);
- the constants of the **chain reading** (C3.4 as corrected): :math:`H_m` the operator norm of
  the embedding Hessian block :math:`\nabla^2_{h_m,\Phi_{-m}} F_B` (``h_0 = θ_0``) at both
  points, and :math:`G_m` the operator norm of the embedding Jacobian
  :math:`\nabla_{\theta_m} h_m(\theta_m^t; x_m^{\mathcal B})` (``G_0 = 1``);
- the round's errors: realised :math:`\|\varepsilon_j^{t_0}\|_F^2` and expected
  :math:`E_j^{t_0}` (each compressor's exact error law, ``expected_error``, C5).

The operator norms are the square roots of the largest eigenvalues of the Gram matrices, taken
together by a batched Lanczos iteration on operators that never form the matrices
(:func:`~cvfl_sim.bounds._spectral.op_norms`): each Ritz value is accepted at a relative residual
of :math:`10^{-6}`, raised by that residual (so never below the eigenvalue it approximates) and
checked against the largest diagonal entry, else LAPACK's eigenvalue is used; on the probe's
matrices the norms were LAPACK's to within :math:`5 \cdot 10^{-7}` relative, never below
(:data:`~cvfl_sim.bounds._spectral.LANCZOS_TOL` says when a near-tie can read low).

The **right side** uses the largest :math:`H_m` and :math:`G_m` over *every* evaluated point of
the run (both points of every probe), with either error. :meth:`Lemma1Report.ratios` gives
right / left per probe and block; a ratio below 1 is a finding (the lemma with these constants
fails there), reported with its numbers. The constants are evaluated at the two end points of
the segment :math:`[\Phi_m^t, \hat\Phi_m^t]`, not along it; the lemma's mean-value argument needs
the supremum along it, so a ratio slightly below 1 can come from curvature between the ends.

Nothing the probe does changes the run: it reads the training state, draws no randomness and
works on float64 copies of the models.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from cvfl_theory.table import Table

from ..vfl.threads import blas_threads
from ._autodiff import (
    Float64Mirror,
    check_all_trained,
    embedding_hessian_factors_at,
    flat_params,
    loss_gradients_at,
    with_block,
)
from ._jacobians import EmbeddingJacobian, embedding_jacobians
from ._spectral import GramOperator, op_norms

__all__ = [
    "Lemma1Probe",
    "Lemma1Report",
    "lemma1_check",
    "lemma1_left",
    "lemma1_right",
    "finite_stats",
]

_F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# the two sides
# ---------------------------------------------------------------------------------------------
def lemma1_left(
    parties: Sequence[nn.Module],
    server: nn.Module,
    x: Sequence[torch.Tensor],
    y: torch.Tensor,
    stale: torch.Tensor,
    stale_hat: torch.Tensor,
    theta0: torch.Tensor,
    theta0_hat: torch.Tensor,
) -> np.ndarray:
    r"""Left side of Lemma 1, :math:`\|\nabla_m F_B(\Phi_m^t) - \nabla_m F_B(\hat\Phi_m^t)\|^2`.

    Parameters
    ----------
    parties, server : nn.Module
        The current models :math:`\theta_m^t` (``server`` holds :math:`\theta_0^t`).
    x, y : tensors
        The round's batch (one ``(B, D_m)`` block per party) and labels.
    stale, stale_hat : torch.Tensor
        ``(B, ΣP_m)`` round-start embeddings :math:`H^{t_0}` and their compressed values
        :math:`\hat H^{t_0}`.
    theta0, theta0_hat : torch.Tensor
        Flat round-start server parameters :math:`\theta_0^{t_0}` and :math:`C_0(\theta_0^{t_0})`
        (the parties' frozen copy).

    Returns
    -------
    numpy.ndarray
        ``(M + 1,)``: block 0 the server, ``m`` party ``m``. The server's block in the models'
        dtype, the parties' through their Jacobians in float64.

    Notes
    -----
    Both points of block ``m >= 1`` share its fresh embedding :math:`h_m(\theta_m^t)`, so by the
    chain rule the difference is :math:`J_m^\top(\partial F_B/\partial h_m(\Phi_m^t) -
    \partial F_B/\partial h_m(\hat\Phi_m^t))` with :math:`J_m` the embedding Jacobian: the
    difference of the two close gradients is formed in the ``B P_m`` embedding entries, before
    the Jacobian (:func:`~cvfl_sim.bounds._autodiff.loss_gradients_at`).
    """
    with torch.no_grad():
        fresh = [p(xm) for p, xm in zip(parties, x)]
    points = _points(flat_params(server), fresh, stale, stale_hat, theta0, theta0_hat)
    sizes = [int(h.shape[1]) for h in fresh]
    return _left(
        loss_gradients_at(server, [(t, z) for t, z, _ in points], y),
        embedding_jacobians(parties, x),
        sizes,
    )


def _points(
    theta_now: torch.Tensor,
    fresh: Sequence[torch.Tensor],
    Z: torch.Tensor,
    Zh: torch.Tensor,
    t0: torch.Tensor,
    t0h: torch.Tensor,
) -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    r"""The two points :math:`\Phi_m^t, \hat\Phi_m^t` of every block, as ``(θ_0, Z, m)``."""
    sizes = [int(h.shape[1]) for h in fresh]
    points = [(theta_now, Z, 0), (theta_now, Zh, 0)]
    for m, h in enumerate(fresh, start=1):
        points += [(t0, with_block(Z, h, sizes, m), m), (t0h, with_block(Zh, h, sizes, m), m)]
    return points


def _left(
    grads: Sequence[tuple[torch.Tensor, torch.Tensor]],
    jacobians: Sequence[EmbeddingJacobian],
    sizes: Sequence[int],
) -> np.ndarray:
    """:func:`lemma1_left` from the loss gradients at :func:`_points` and the Jacobians."""
    out = np.zeros(len(jacobians) + 1)
    out[0] = float(((grads[0][0] - grads[1][0]) ** 2).sum())
    off = 0
    for m, J in enumerate(jacobians, start=1):
        cols = slice(off, off + sizes[m - 1])
        off += sizes[m - 1]
        delta = grads[2 * m][1][:, cols] - grads[2 * m + 1][1][:, cols]  # (B, P_m)
        out[m] = float((J.rmatmat(delta.detach().cpu().numpy()[None]) ** 2).sum())
    return out


def larger_of_two_points(norms: np.ndarray) -> np.ndarray:
    """Each block's constant at a probe: the larger of its two points' values (taken in pairs)."""
    return np.maximum(norms[0::2], norms[1::2])


def lemma1_right(H: Any, G: Any, E: Any) -> np.ndarray:
    r"""Right side of Lemma 1, :math:`H_m^2 G_m^2 \sum_{j\ne m} E_j`, for every row of ``E``.

    ``H``, ``G``: ``(M + 1,)`` (or one row per row of ``E``); ``E``: ``(..., M + 1)`` errors with
    block 0 the server model's. Returns an array of ``E``'s shape.
    """
    E = np.asarray(E, dtype=np.float64)
    others = E.sum(axis=-1, keepdims=True) - E
    return np.asarray(H, dtype=np.float64) ** 2 * np.asarray(G, dtype=np.float64) ** 2 * others


def lemma1_check(left: Any, right: Any) -> tuple[bool, np.ndarray]:
    r"""Whether ``right >= left`` everywhere, and the ratios right / left.

    A zero left side has ratio ``inf`` (nothing to bound), or ``nan`` if the right side is also 0;
    neither fails. The check fails iff some ratio is below 1.

    Examples
    --------
    >>> ok, r = lemma1_check([1.0, 0.0, 2.0], [3.0, 0.0, 1.0])
    >>> ok, r.tolist()
    (False, [3.0, nan, 0.5])
    """
    lf = np.asarray(left, dtype=np.float64)
    rt = np.asarray(right, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(lf > 0, rt / np.where(lf > 0, lf, 1.0), np.where(rt > 0, np.inf, np.nan))
    return bool(not np.any(ratio < 1)), ratio


# ---------------------------------------------------------------------------------------------
# the probe
# ---------------------------------------------------------------------------------------------
class Lemma1Probe:
    r"""Hook measuring Lemma 1 during :func:`cvfl_sim.vfl.train.train` (C4.1, chain reading).

    Parameters
    ----------
    every : int
        Probe rounds ``0, every, 2 every, …``.
    steps : {"first", "ends", "all"} or iterable of int
        Local steps probed in a probed round: ``0``; ``{0, Q-1}``; every step; or the given ones
        (steps ``>= Q`` are ignored).
    tight : bool
        Also evaluate the tight bound of C4.5 (ours, :mod:`cvfl_sim.bounds.tight_term`) at every
        probed local step, each block at its own point of Lemma 1, for the report's tight / left
        column. At a round start it bounds the expectation over the round's dither. At a later
        step the point itself depends on that dither: for the analytic model (linear parties
        and head) a probed round that also probes a later step takes C4.9 (ours,
        :mod:`cvfl_sim.bounds.drift`) at every local step instead, a bound (it costs ``Q``
        evaluations of C4.5 a round); for other models C4.5 at the step's own point is an
        *estimate* there (the realised form for biased compressors such as top-k has no dither
        and bounds every step).
    sampled : int
        Dither draws of the confidence bound of C4.8 (ours,
        :func:`cvfl_sim.bounds.sampled_lemma1.sampled_lemma1_bound`) at the probed local steps 0,
        for the report's sampled / left column; ``0`` (default) leaves it out, else at least 100.
        It costs about 1 s per probed round at 4000 draws (B = 64; 80 000 draws, 10--20 s,
        bring it within ×10 of the truth at 2 bits with a compressed server model, see the
        docs' C4.8 page) and is skipped (``nan``)
        where it does not apply: biased compressors such as top-k, error feedback, a non-linear
        head.
    delta : float
        Confidence of the sampled bounds for the whole run, in ``(0, 1)``: the ``j``-th probed
        round start gets :math:`6\delta/(\pi^2 j^2)` shared by its ``M + 1`` blocks (its
        ``Q (M + 1)`` bounds with ``sampled_later``), so that
        every sampled bound of the run holds at once with probability at least ``1 - delta``
        over the probe's draws (a union bound; :math:`\sum_j 6/(\pi^2 j^2) = 1`).
    seed : int
        Seed of the sampled bound's own draws (the run's random streams are not touched).
    sampled_later : bool
        With ``sampled``, also bound every local step of a probed round that probes a later
        step, for the analytic model (linear parties and head): C4.9 (ours,
        :func:`cvfl_sim.bounds.drift.round_sampled_bounds`), C4.8 at each point of the round's
        uncompressed local path plus the drift. It costs ``1 + (Q - 1)(M + 1)`` evaluations of
        C4.8, each after step 0 for one block but drawing every party's dither: 3.6--4.8 times
        the round start's at ``M = 2, Q = 3``, up to about ``(M + 1) Q`` where the draws
        dominate; the round's ``Q (M + 1)`` bounds share its level. ``False`` (default): C4.8 at
        round starts only.
    progress : bool or None
        A bar counting the probed steps (:func:`~cvfl_sim.vfl.progress.progress_bar`): ``None``
        shows it on a terminal or in a notebook, ``True`` always, ``False`` never.

    Notes
    -----
    Use one probe per run: :meth:`report` covers every point measured so far. The cost of one
    probed step is that of a few dozen backward passes (``benchmarks/bench_bound.py`` prints it
    as a multiple of a plain round); ``every`` keeps it small on long runs.

    Examples
    --------
    >>> from cvfl_sim import CVFLConfig, load_dataset, train
    >>> from cvfl_theory.compressors import ScalarQuantizer
    >>> probe = Lemma1Probe(every=2)
    >>> cfg = CVFLConfig(epochs=1, batch_size=128, embedding_size=2,
    ...                  compressor=ScalarQuantizer(2))
    >>> _ = train(load_dataset("breast-cancer"), cfg, probe=probe)
    >>> rep = probe.report()
    >>> rep.left.shape        # 2 probes (rounds 0 and 2), M + 1 = 5 blocks
    (2, 5)
    >>> rep.passed
    True
    """

    def __init__(
        self,
        every: int = 1,
        steps: str | Iterable[int] = "ends",
        tight: bool = True,
        progress: bool | None = None,
        *,
        sampled: int = 0,
        delta: float = 0.05,
        seed: int = 0,
        sampled_later: bool = False,
    ):
        if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
            raise ValueError(f"every must be an integer >= 1, got {every!r}")
        if isinstance(steps, str):
            if steps not in ("first", "ends", "all"):
                raise ValueError(
                    f"steps must be 'first', 'ends', 'all' or a set of step indices, got {steps!r}"
                )
            self.steps: str | frozenset[int] = steps
        else:
            st = frozenset(int(s) for s in steps)
            if not st or min(st) < 0:
                raise ValueError(f"steps must be non-negative step indices, got {sorted(st)}")
            self.steps = st
        if not isinstance(tight, (bool, np.bool_)):
            raise TypeError(f"tight must be True or False, got {tight!r}")
        if progress is not None and not isinstance(progress, bool):
            raise TypeError(f"progress must be True, False or None, got {progress!r}")
        if not isinstance(sampled_later, (bool, np.bool_)):
            raise TypeError(f"sampled_later must be True or False, got {sampled_later!r}")
        self.sampled_later = bool(sampled_later)
        from cvfl_theory._validate import check_int_in_range, check_real

        self.sampled = 0 if sampled == 0 else check_int_in_range(sampled, "sampled", 100, 10**8)
        self.delta = check_real(delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
        self.seed = check_int_in_range(seed, "seed", 0, 2**62)
        self._sampled_probes = 0
        self.sampled_skipped: list[str] = []
        """Round starts where the sampled bound did not apply, each with the reason."""
        self.every = int(every)
        self.tight = bool(tight)
        self.progress = progress
        self._rows: list[dict[str, Any]] = []
        self._mirror = Float64Mirror()
        self._bar: Any = None
        self._last: tuple[int, int] = (-1, -1)
        # the probed round's C4.9 bounds at every local step: (round, (Q, M + 1) array)
        self._round_tight: tuple[int, np.ndarray] | None = None
        self._round_sampled: tuple[int, np.ndarray] | None = None
        self.seconds = 0.0

    def wants(self, round_index: int, step: int, Q: int) -> bool:
        """Whether local step ``step`` of round ``round_index`` is probed."""
        if round_index % self.every:
            return False
        if self.steps == "all":
            return True
        if self.steps == "first":
            return step == 0
        if self.steps == "ends":
            return step in (0, Q - 1)
        assert isinstance(self.steps, frozenset)
        return step in self.steps

    def __call__(
        self,
        *,
        round_index: int,
        step: int,
        Q: int,
        parties: Sequence[nn.Module],
        server: nn.Module,
        x: Sequence[torch.Tensor],
        y: torch.Tensor,
        stale: torch.Tensor,
        stale_hat: torch.Tensor,
        theta0: torch.Tensor,
        theta0_hat: torch.Tensor,
        compressors: Sequence[Any],
        server_compressor: Any,
        error_feedback: bool = False,
        eta: float | None = None,
    ) -> None:
        """Measure one point if :meth:`wants` it (``train`` calls this before each local step)."""
        if (round_index, step) <= self._last:
            raise ValueError(
                f"this Lemma1Probe already measured round {self._last[0]}, step {self._last[1]} "
                "of a run: a probe reports one run, so pass a new one to each train()"
            )
        if self._last == (-1, -1):  # the run's first step, before any update
            check_all_trained(parties, server, "Lemma1Probe")
        self._last = (int(round_index), int(step))
        if not self.wants(round_index, step, Q):
            return
        if self._bar is None:
            from ..vfl.progress import progress_bar

            self._bar = progress_bar(None, self.progress, "Lemma-1 probe", "probe")
        tick = time.perf_counter()
        with blas_threads(1):  # small dense problems: one BLAS thread is the faster
            # float64 copies: the left side is a difference of two close gradients
            *P64, S64 = self._mirror([*parties, server])
            x64 = [xm.to(_F64) for xm in x]
            Z, Zh = stale.detach().to(_F64), stale_hat.detach().to(_F64)
            t0, t0h = theta0.detach().to(_F64).reshape(-1), theta0_hat.detach().to(_F64).reshape(-1)
            M = len(P64)
            with torch.no_grad():
                fresh = [p(xm) for p, xm in zip(P64, x64)]
            sizes = [int(h.shape[1]) for h in fresh]
            points = _points(flat_params(S64), fresh, Z, Zh, t0, t0h)
            J = embedding_jacobians(P64, x64)
            left = _left(loss_gradients_at(S64, [(t, z) for t, z, _ in points], y), J, sizes)

            # constants at both points of every block (chain reading, operator norms): H_m of
            # the embedding Hessian blocks, G_m of the embedding Jacobians, in one batch
            grams: list[GramOperator] = [*embedding_hessian_factors_at(S64, points, y, sizes), *J]
            norms = np.array(op_norms(grams))
            H = larger_of_two_points(norms[: 2 * (M + 1)])
            G = np.concatenate([[1.0], norms[2 * (M + 1) :]])

            # the round's errors: realised and expected (each compressor's error law)
            E_real = np.zeros(M + 1)
            E_exp = np.full(M + 1, np.nan)
            E_real[0] = float(((t0h - t0) ** 2).sum())
            for j, (blk, blk_hat) in enumerate(zip(Z.split(sizes, 1), Zh.split(sizes, 1)), start=1):
                E_real[j] = float(((blk_hat - blk) ** 2).sum())
            if not error_feedback:  # with EF the compressor's input is h - memory, not h
                E_exp[0] = float(server_compressor.expected_error(theta0.detach().reshape(1, -1)))
                for j, (c, h) in enumerate(
                    zip(compressors, stale.detach().split(sizes, 1)), start=1
                ):
                    E_exp[j] = float(c.expected_error(h))
            round_bound = None
            if self._round_tight is not None and self._round_tight[0] == round_index and step:
                tight: tuple[np.ndarray, str] | None = (
                    self._round_tight[1][step],
                    "dithered, drift",
                )
            else:
                tight = (
                    None
                    if error_feedback
                    else self._tight(
                        step,
                        P64,
                        S64,
                        x64,
                        y,
                        [bh - bz for bh, bz in zip(Zh.split(sizes, 1), Z.split(sizes, 1))],
                        t0h - t0,
                        compressors,
                        server_compressor,
                        J,
                        Z,
                        t0,
                        fresh,
                    )
                )
                if step == 0 and tight is not None and self._later_steps_wanted(round_index, Q):
                    round_bound = self._drift(
                        tight, eta, Q, P64, S64, x64, y, compressors, server_compressor, J
                    )
                    if round_bound is not None:
                        self._round_tight = (int(round_index), round_bound)
            sampled, sampled_round = None, None
            if self.sampled and self._round_sampled is not None and step:
                if self._round_sampled[0] == round_index:
                    sampled = self._round_sampled[1][step]
                else:
                    sampled = np.full(M + 1, np.nan)
            elif self.sampled:
                later = (
                    self.sampled_later
                    and eta is not None
                    and self._later_steps_wanted(round_index, Q)
                )
                sampled, sampled_round = self._sampled(
                    round_index,
                    step,
                    error_feedback,
                    P64,
                    S64,
                    x64,
                    y,
                    compressors,
                    server_compressor,
                    (float(eta), Q) if later and eta is not None else None,
                )
                if sampled_round is not None:
                    self._round_sampled = (int(round_index), sampled_round)
            row = {
                "round": int(round_index),
                "step": int(step),
                "left": left,
                "H": H,
                "G": G,
                "E_realised": E_real,
                "E_expected": E_exp,
                "tight": None if tight is None else tight[0],
                "tight_kind": None if tight is None else tight[1],
                "tight_round": round_bound,
                "sampled": sampled,
                "sampled_round": sampled_round,
            }
        self._rows.append(row)
        self.seconds += time.perf_counter() - tick
        self._bar.update(1)

    def _tight(
        self,
        step: int,
        parties: Sequence[nn.Module],
        server: nn.Module,
        x: Sequence[torch.Tensor],
        y: torch.Tensor,
        errors: Sequence[torch.Tensor],
        server_error: torch.Tensor,
        compressors: Sequence[Any],
        server_compressor: Any,
        jacobians: Sequence[EmbeddingJacobian],
        stale: torch.Tensor | None,
        theta0: torch.Tensor | None,
        embeddings: Sequence[torch.Tensor],
    ) -> tuple[np.ndarray, str] | None:
        r"""The tight Lemma-1 bound of C4.5 (ours) at this step's points, and its kind.

        :func:`cvfl_sim.bounds.tight_term.tight_lemma1_bound_for` (``"dithered"``: the
        expectation over the round's dither) for dithered quantizers,
        :func:`~cvfl_sim.bounds.tight_term.realised_lemma1_bound` (the round's realised errors)
        otherwise: ``"realised"`` where no compressor draws a dither (top-k, so a bound), else
        ``"realised draw"`` (a dithered quantizer the expectation does not cover, e.g. one that
        clips: the value for the one draw the run made, not the expectation); at a later step
        given the round's start
        ``stale``, ``theta0`` (block ``m`` at its own point), at step 0 at the models themselves
        (the round start's); ``nan`` and ``"none"`` where neither applies (a non-linear head).
        ``embeddings`` are the parties' outputs on ``x``, computed once for the whole probe.
        """
        if not self.tight:
            return None
        from .tight_term import draws_dither, realised_lemma1_bound, tight_lemma1_bound_for

        if step == 0:  # every block's point is the round start: no need to tell it apart
            stale = theta0 = None

        try:
            res = tight_lemma1_bound_for(
                parties,
                server,
                x,
                y,
                compressors,
                server_compressor,
                jacobians=jacobians,
                sup_form=False,
                stale=stale,
                theta0=theta0,
                embeddings=embeddings,
            )
        except ValueError:  # a biased compressor (or a head the bound does not cover)
            try:
                res = realised_lemma1_bound(
                    parties,
                    server,
                    x,
                    y,
                    errors,
                    server_error,
                    jacobians=jacobians,
                    stale=stale,
                    theta0=theta0,
                )
            except ValueError:
                return np.full(len(parties) + 1, np.nan), "none"
            if any(draws_dither(c) for c in [*compressors, server_compressor]):
                return np.asarray(res.bound, dtype=np.float64), "realised draw"
        return np.asarray(res.bound, dtype=np.float64), res.method

    def _later_steps_wanted(self, round_index: int, Q: int) -> bool:
        """Whether this probed round also probes a local step after its start."""
        return any(self.wants(round_index, k, Q) for k in range(1, Q))

    def _drift(
        self,
        tight: tuple[np.ndarray, str],
        eta: float | None,
        Q: int,
        parties: Sequence[nn.Module],
        server: nn.Module,
        x: Sequence[torch.Tensor],
        y: torch.Tensor,
        compressors: Sequence[Any],
        server_compressor: Any,
        jacobians: Sequence[EmbeddingJacobian],
    ) -> np.ndarray | None:
        r"""C4.9 (ours) at every local step of the round, from its start; ``None`` where it does not apply.

        :func:`cvfl_sim.bounds.drift.round_tight_bounds`: the dithered C4.5 at the round start's
        uncompressed local path plus the drift of the compressed one, proved for the analytic
        model (linear parties and head) with a known step size. Elsewhere the later steps keep
        C4.5 at their own points (an estimate).
        """
        from .analytic_constants import is_analytic
        from .drift import round_tight_bounds

        if tight[1] != "dithered" or eta is None or not is_analytic(parties, server):
            return None
        return round_tight_bounds(
            parties,
            server,
            x,
            y,
            compressors,
            server_compressor,
            float(eta),
            Q,
            jacobians=jacobians,
            first=tight[0],
        ).bound

    def _sampled(
        self,
        round_index: int,
        step: int,
        error_feedback: bool,
        parties: Sequence[nn.Module],
        server: nn.Module,
        x: Sequence[torch.Tensor],
        y: torch.Tensor,
        compressors: Sequence[Any],
        server_compressor: Any,
        later: tuple[float, int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        r"""The confidence bound of C4.8 (ours) at a round start, ``nan`` where it does not apply.

        Evaluated at local step 0 (the bound is stated at the round-start parameters), without
        error feedback (the compressors' input is then not the embedding). The ``j``-th
        evaluation runs at level :math:`6\delta/(\pi^2 j^2)`, shared by its bounds. With
        ``later = (eta, Q)`` and the analytic model, every local step of the round by C4.9
        (:func:`cvfl_sim.bounds.drift.round_sampled_bounds`, ``Q (M + 1)`` bounds); returns the
        step-0 values and, then, the ``(Q, M + 1)`` round.
        """
        from .analytic_constants import is_analytic
        from .drift import round_sampled_bounds
        from .sampled_lemma1 import sampled_lemma1_bound

        out = np.full(len(parties) + 1, np.nan)
        if step != 0:
            return out, None
        if error_feedback:
            self.sampled_skipped.append(f"round {round_index}: error feedback")
            return out, None
        level = 6.0 * self.delta / (math.pi**2 * (self._sampled_probes + 1) ** 2)
        try:
            if later is not None and is_analytic(parties, server):
                whole = round_sampled_bounds(
                    parties,
                    server,
                    x,
                    y,
                    compressors,
                    server_compressor,
                    later[0],
                    later[1],
                    draws=self.sampled,
                    delta=level,
                    seed=self.seed + int(round_index),
                ).bound
                self._sampled_probes += 1
                return whole[0], whole
            res = sampled_lemma1_bound(
                parties,
                server,
                x,
                y,
                compressors,
                server_compressor,
                draws=self.sampled,
                delta=level / len(out),
                seed=self.seed + int(round_index),
            )
        except ValueError as exc:  # top-k (biased), a non-linear head, an error off the support
            self.sampled_skipped.append(f"round {round_index}: {exc}")
            return out, None
        self._sampled_probes += 1
        return np.asarray(res.bound, dtype=np.float64), None

    def report(self) -> Lemma1Report:
        """All probes so far as a :class:`Lemma1Report` (closes the progress bar)."""
        if self._bar is not None:
            self._bar.close()
        if not self._rows:
            raise ValueError(
                "the probe measured nothing: pass it to train(..., probe=probe) and check that "
                "its every/steps select at least one local step"
            )
        return Lemma1Report(
            self._rows,
            self.every,
            self.steps,
            self.seconds,
            self.delta if self.sampled else None,
            self.sampled_skipped,
        )


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------
def finite_stats(v: np.ndarray) -> tuple[float, float, float]:
    """``(min, median, max)`` of the finite values of ``v`` (NaN for all three if there are none)."""
    f = v[np.isfinite(v)]
    if f.size == 0:
        return (math.nan, math.nan, math.nan)
    return float(f.min()), float(np.median(f)), float(f.max())


class Lemma1Report(Table):
    r"""Lemma 1 measured on a run: per block ``m = 0..M``, right / left (min, median, max).

    Attributes
    ----------
    rounds, steps : numpy.ndarray
        ``(P,)`` round index and local step of each probe.
    left : numpy.ndarray
        ``(P, M + 1)`` exact left sides.
    H_point, G_point : numpy.ndarray
        ``(P, M + 1)`` chain-reading constants at each probe (the larger of its two points).
    H, G : numpy.ndarray
        ``(M + 1,)`` their maxima over the run: the constants of the right side.
    E_realised, E_expected : numpy.ndarray
        ``(P, M + 1)`` the probed round's errors (block 0 the server model's); the expected ones
        are ``nan`` with error feedback.
    tight : numpy.ndarray or None
        ``(P, M + 1)`` the tight bound of C4.5 (ours) at every probe, each block at its own point
        (``nan`` where it does not apply), when it was asked for.
    tight_kinds : list of str
        Per probe, how it was evaluated: ``"dithered"`` (an expectation over the round's dither:
        a bound at a round start, an estimate at a later step), ``"dithered, drift"`` (a later
        step of the analytic model: C4.9, the round start's uncompressed local path plus the
        drift, a bound), ``"realised"`` (the realised errors where no compressor draws a dither,
        e.g. top-k: a bound at every step), ``"realised draw"`` (the realised errors of one
        dither draw: an estimate) or ``"none"``.
    tight_rounds : dict of int to numpy.ndarray
        Per probed round where C4.9 (ours, :mod:`cvfl_sim.bounds.drift`) applies, its ``(Q, M +
        1)`` bounds at **every** local step of the round (row ``k`` step ``k``), probed or not.
    sampled : numpy.ndarray or None
        ``(P, M + 1)`` :func:`cvfl_sim.bounds.sampled_lemma1.sampled_lemma1_bound` (C4.8) where
        the probe evaluated it (round starts, and with ``sampled_later`` every probed step of
        the analytic model; ``nan`` elsewhere), ``None`` without ``sampled``.
    sampled_rounds : dict of int to numpy.ndarray
        As ``tight_rounds``, for C4.8 through C4.9 (``sampled_later``): each such round's
        ``(Q, M + 1)`` bounds at every local step.
    delta : float or None
        The sampled bounds all hold at once with probability at least ``1 - delta``.
    sampled_skipped : list of str
        The round starts where the sampled bound did not apply, with the reason.
    seconds : float
        Time spent in the probe.
    """

    def __init__(
        self,
        rows: list[dict[str, Any]],
        every: int,
        steps: Any,
        seconds: float = 0.0,
        delta: float | None = None,
        sampled_skipped: Sequence[str] = (),
    ) -> None:
        def arr(key: str) -> np.ndarray:
            return np.array([r[key] for r in rows], dtype=np.float64)

        self.rounds = np.array([r["round"] for r in rows])
        self.steps = np.array([r["step"] for r in rows])
        self.left = arr("left")
        self.H_point = arr("H")
        self.G_point = arr("G")
        self.H = self.H_point.max(axis=0)
        self.G = self.G_point.max(axis=0)
        self.E_realised = arr("E_realised")
        self.E_expected = arr("E_expected")
        self.tight = None if rows[0]["tight"] is None else arr("tight")
        self.tight_kinds = [str(r.get("tight_kind")) for r in rows]
        self.tight_rounds = {
            int(r["round"]): np.asarray(r["tight_round"], dtype=np.float64)
            for r in rows
            if r.get("tight_round") is not None
        }
        self.sampled = None if rows[0].get("sampled") is None else arr("sampled")
        self.sampled_rounds = {
            int(r["round"]): np.asarray(r["sampled_round"], dtype=np.float64)
            for r in rows
            if r.get("sampled_round") is not None
        }
        self.delta = delta
        self.sampled_skipped = list(sampled_skipped)
        self.seconds = float(seconds)
        self.every = every
        self.step_rule = steps if isinstance(steps, str) else sorted(steps)
        table_rows = []
        tight, sampled = self.tight_ratios(), self.sampled_ratios()
        for m in range(self.left.shape[1]):
            row: list[Any] = [m, float(np.median(self.left[:, m])), self.H[m], self.G[m]]
            for errors in ("realised", "expected"):
                row += list(finite_stats(self.ratios(errors)[:, m]))
            row += list(finite_stats(tight[:, m]))[:2] if tight is not None else ["-", "-"]
            if sampled is not None:
                row += list(finite_stats(sampled[:, m]))[:2]
            table_rows.append(row)
        verdict = "holds at every probe" if self.passed else "FAILS (a ratio below 1)"
        super().__init__(
            [
                "m",
                "median left",
                "H_m (max)",
                "G_m (max)",
                "min",
                "median",
                "max",
                "min",
                "median",
                "max",
                "min",
                "median",
            ]
            + (["min", "median"] if sampled is not None else []),
            table_rows,
            title=f"Lemma 1 (C4.1, chain reading, operator norms) measured at {len(rows)} "
            f"probe(s): rounds every {every}, steps {self.step_rule}; right = H_m^2 G_m^2 "
            f"sum_(j!=m) E_j with H, G the run's maxima. Verdict: {verdict}"
            + (
                ""
                if self.sampled is None or delta is None or not np.isfinite(self.sampled).any()
                else f". The sampled bounds (C4.8) hold all at once with probability >= "
                f"{1 - delta:g} over their draws"
            )
            + (
                f"; C4.8 does not apply at {len(self.sampled_skipped)} round start(s) "
                f"({self.sampled_skipped[0]})"
                if self.sampled_skipped
                else ""
            )
            + (
                f"; after a round's start the tight column is C4.9 (the drift; "
                f"{len(self.tight_rounds)} round(s) bounded at every local step)"
                if self.tight_rounds
                else ""
            ),
            groups=[
                ("", 4),
                ("right / left, realised E", 3),
                ("right / left, expected E", 3),
                ("tight (C4.5) / left", 2),
            ]
            + ([("sampled (C4.8) / left", 2)] if sampled is not None else []),
        )

    def right(self, errors: str = "realised", *, H: Any = None, G: Any = None) -> np.ndarray:
        """``(P, M + 1)`` right sides with the run's (or the given) constants."""
        if errors not in ("realised", "expected"):
            raise ValueError(f"errors must be 'realised' or 'expected', got {errors!r}")
        E = self.E_realised if errors == "realised" else self.E_expected
        return lemma1_right(self.H if H is None else H, self.G if G is None else G, E)

    def ratios(self, errors: str = "realised", **constants: Any) -> np.ndarray:
        """``(P, M + 1)`` right / left (see :func:`lemma1_check` for zero left sides)."""
        return lemma1_check(self.left, self.right(errors, **constants))[1]

    def tight_ratios(self) -> np.ndarray | None:
        """``(P, M + 1)`` tight bound (C4.5, ours) / left side; ``nan`` where not evaluated."""
        return _bound_ratios(self.tight, self.left)

    def sampled_ratios(self) -> np.ndarray | None:
        """``(P, M + 1)`` sampled bound (C4.8, ours) / left side; ``nan`` where not evaluated."""
        return _bound_ratios(self.sampled, self.left)

    def tight_sum_ratios(self) -> np.ndarray | None:
        r"""``(M + 1,)`` sum of the tight bounds / sum of the left sides, over the probes with both.

        The tight bound (C4.5) bounds the *expectation* of the left side over the dither at a round
        start (and estimates it at later steps), so one probe's realised left side may exceed it
        without contradicting it (at 4 bits the bound is within ~1.2x of that expectation); its
        realised form (no dither, e.g. top-k) bounds each probe's left side itself. Summed over the probes, the realised left
        sides estimate the sum of their conditional expectations (the differences form a martingale
        difference sequence), so a ratio of sums well below 1 would contradict the bound; a ratio of
        sums is the run-level comparison. ``nan`` for a block whose left sides are all 0.
        """
        return _sum_ratios(self.tight, self.left)

    def sampled_sum_ratios(self) -> np.ndarray | None:
        """``(M + 1,)`` as :meth:`tight_sum_ratios`, for the sampled bound (C4.8)."""
        return _sum_ratios(self.sampled, self.left)

    def check(self, errors: str = "realised", **constants: Any) -> bool:
        """Whether every ratio is ``>= 1`` (``nan`` expected errors are skipped)."""
        right = self.right(errors, **constants)
        keep = ~np.isnan(right)
        return lemma1_check(self.left[keep], right[keep])[0]

    @property
    def passed(self) -> bool:
        """Lemma 1 held at every probe, with the realised and with the expected errors."""
        return self.check("realised") and self.check("expected")

    def per_round(self, R: int) -> np.ndarray:
        r"""``(R, M + 1)`` measured left sides per round (mean over the probed steps of a round).

        Rounds that were not probed get the mean of the probed ones (say so where it is used).
        The form Theorem 4.2 takes with ``lemma1=`` (the measured Lemma-1 left side in term 3).
        """
        out = np.full((R, self.left.shape[1]), np.nan)
        for r in np.unique(self.rounds):
            if r < R:
                out[r] = self.left[self.rounds == r].mean(axis=0)
        missing = np.isnan(out[:, 0])
        out[missing] = self.left.mean(axis=0)
        return out

    def summary(self) -> dict[str, Any]:
        """JSON-able numbers: per block min/median/max of right / left, the constants, the time.

        ``every_step_rounds``: how many rounds each form (tight, sampled) bounds at every local
        step through C4.9.
        """
        out: dict[str, Any] = {
            "probes": int(self.left.shape[0]),
            "every": self.every,
            "steps": self.step_rule,
            "H": self.H.tolist(),
            "G": self.G.tolist(),
            "passed": self.passed,
            "seconds": self.seconds,
        }
        for errors in ("realised", "expected"):
            r = self.ratios(errors)
            out[f"ratio_{errors}"] = [list(finite_stats(r[:, m])) for m in range(r.shape[1])]
        for name, br in (("tight", self.tight_ratios()), ("sampled", self.sampled_ratios())):
            if br is not None:
                out[f"ratio_{name}"] = [list(finite_stats(br[:, m])) for m in range(br.shape[1])]
        if self.sampled is not None:
            out["sampled_delta"] = self.delta
            out["sampled_skipped"] = self.sampled_skipped
        # the rounds bounded at every local step by C4.9 (the drift), per form
        out["every_step_rounds"] = {
            "tight": len(self.tight_rounds),
            "sampled": len(self.sampled_rounds),
        }
        return out


def _bound_ratios(bound: np.ndarray | None, left: np.ndarray) -> np.ndarray | None:
    """``bound / left`` per probe and block (:func:`lemma1_check`), ``nan`` where not evaluated."""
    if bound is None:
        return None
    keep = np.isfinite(bound)
    ratio = lemma1_check(left, np.where(keep, bound, 0.0))[1]
    return np.where(keep, ratio, np.nan)


def _sum_ratios(bound: np.ndarray | None, left: np.ndarray) -> np.ndarray | None:
    """Per block, the sum of the bounds over the sum of the left sides where both exist."""
    if bound is None:
        return None
    keep = np.isfinite(bound)
    num = np.where(keep, bound, 0.0).sum(axis=0)
    den = np.where(keep, left, 0.0).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / den, np.nan)
