r"""A trajectory certificate for a C-VFL run (C4.7, ours): a bound on the run's own average gradient.

Theorem 4.2 (C4.2) bounds an *expectation* with constants that hold everywhere, and it needs
:math:`\eta \le 1/(16 Q \max(L, L_m))`. This certificate instead bounds the average
:math:`\|\nabla F(\Theta^t)\|^2` of **this** run, over every local iteration ``t``, by quantities
of that run, and needs no step condition. It is proved in ``docs/theory/certificate.rst`` (the
algebra checked in sympy by ``proofs_checks/c4_7_certificate.py``); in short, along the run,

.. math::

   \Theta^{t+1} = \Theta^t - \eta_t g^t, \qquad
   g^t = \nabla F(\Theta^t) + b^t + s^t, \qquad
   s^t = \nabla F_{\mathcal B}(\Theta^t) - \nabla F(\Theta^t),\quad
   b^t = g^t - \nabla F_{\mathcal B}(\Theta^t),

where :math:`g^t` is the realised update (every block's gradient of Algorithm 1, C1, with the
others' stale compressed embeddings and the compressed frozen server model),
:math:`\mathcal B` the round's batch, :math:`s^t` the sampling error at the iterate and
:math:`b^t` the batch-gradient error that staleness and compression cause. With :math:`L_t` a
smoothness constant of :math:`F` on the segment :math:`[\Theta^t, \Theta^{t+1}]`, the descent
lemma, Young's inequality (any :math:`\alpha \in (0, 1)`) and the decomposition
:math:`\langle\nabla F^t, s^t\rangle = \langle\nabla F^{t_0}, s^{t_0}\rangle + \langle\nabla F^t -
\nabla F^{t_0}, s^{t_0}\rangle + \langle\nabla F^t, s^t - s^{t_0}\rangle` (:math:`t_0` the start of
``t``'s round, whose batch ``t`` reuses) give

.. math::

   (1 - \alpha)\sum_t \eta_t\|\nabla F(\Theta^t)\|^2 \le F(\Theta^0) - F(\Theta^T)
   + \sum_t \frac{L_t\eta_t^2}{2}\|g^t\|^2
   + \frac1{2\alpha}\sum_t \eta_t\bigl(\|b^t\|^2 + \|s^t - s^{t_0}\|^2\bigr)
   + \sum_t \eta_t\|\nabla F^t - \nabla F^{t_0}\|\,\|s^{t_0}\|
   - \sum_t \eta_t\langle\nabla F^{t_0}, s^{t_0}\rangle ,

for every :math:`\alpha`, so the certificate takes the best one. Every quantity is computed on the
run in float64. The last sum is the sampling error at the round starts: it is kept as realised
(the certificate is a statement about this run, with probability one), and it is small, since
:math:`\mathbb E[s^{t_0} \mid \Theta^{t_0}] = 0` for a batch drawn independently of the iterate.

**Certified or estimated.** For the analytic model (linear parties, linear softmax head) the
smoothness on each segment is proved (:func:`segment_smoothness`, from the bound of
:mod:`~cvfl_sim.bounds.analytic_constants`, whose two norms are convex so their largest value on a
segment is at an end): the certificate is **certified**. For any other model :math:`L_t` is a
power-iteration estimate of :math:`\|\nabla^2 F\|_2` at both ends of the segment, and the result
is an **estimate**, never called certified (a ReLU model is not even twice differentiable).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from cvfl_theory.table import Table

from ..vfl.config import CVFLConfig
from ..vfl.data import VerticalDataset
from ..vfl.progress import progress_bar
from ..vfl.results import RunResult
from ._autodiff import check_all_trained
from .analytic_constants import augment, is_analytic

__all__ = [
    "TrajectoryProbe",
    "Certificate",
    "CertificateTerms",
    "segment_smoothness",
    "best_alpha",
    "CERTIFICATE_TERMS",
    "POWER_TOL",
]

CERTIFICATE_TERMS = (
    "loss decrease",
    "curvature",
    "staleness and compression",
    "batch reuse",
    "sampling at round starts",
)
"""The certificate's terms, in the order of :attr:`Certificate.terms`."""

POWER_TOL = 1e-3
"""Relative change of the power-iteration estimate at which a non-analytic model's point stops."""

_FLOAT_MARGIN = 1e-9
"""Relative margin added to the certified smoothness for float64 rounding of its two norms."""


def best_alpha(K: float, c: float) -> float:
    r"""The :math:`\alpha \in (0, 1)` minimising :math:`(K + c/\alpha)/(1 - \alpha)`.

    ``K`` is the sum of the terms without :math:`1/\alpha` and ``c >= 0`` the coefficient of
    :math:`1/\alpha`. Setting the derivative to zero gives :math:`K\alpha^2 + 2c\alpha - c = 0`,
    :math:`\alpha^\star = c/(c + \sqrt{c^2 + Kc})` (the stable form of its positive root); for
    :math:`K \le 0` the function decreases towards :math:`\alpha = 1` and a value close to 1 is
    taken (every :math:`\alpha` gives a valid bound).

    Examples
    --------
    >>> round(best_alpha(1.0, 0.25), 6)  # K a^2 + 2 c a - c = 0
    0.309017
    """
    if c <= 0.0:
        return 1e-12
    if K <= 0.0:
        return 1.0 - 1e-6
    return c / (c + math.sqrt(c * c + K * c))


# ---------------------------------------------------------------------------------------------
# smoothness on a segment
# ---------------------------------------------------------------------------------------------
def _linear_head(parties: Sequence[nn.Module], server: nn.Module) -> nn.Linear | None:
    """The head's linear layer if the models are the analytic model, else ``None``."""
    if not is_analytic(parties, server):
        return None
    head = getattr(server, "net", server)
    assert isinstance(head, nn.Linear)
    return head


@dataclass(frozen=True)
class _DataConstants:
    r"""The data's parts of the analytic smoothness bound: :math:`\lambda_X` and the bilinear term."""

    lam_x: float  # max_m lambda_max(X~_m^T X~_m / N)
    bilinear: float  # sqrt(2)/N sum_i max_m ||x~_{m,i}||

    @classmethod
    def of(cls, parts: Sequence[np.ndarray]) -> _DataConstants:
        Xt = [augment(x) for x in parts]
        N = Xt[0].shape[0]
        lam = max(float(np.linalg.eigvalsh(x.T @ x / N)[-1]) for x in Xt)
        r = np.max(np.stack([np.linalg.norm(x, axis=1) for x in Xt]), axis=0)
        return cls(lam, math.sqrt(2.0) * float(r.sum()) / N)


def _point_value(Z: Any, A: Any, lam_x: float) -> float:
    r""":math:`\max(\|\tilde Z\|_2^2/N, \|A\|_2^2\lambda_X)` at one point (C3.1 bound, analytic).

    ``Z`` (the full-data embeddings, ``(N, P)``) and ``A`` (the head's weights) are arrays or
    CPU tensors, taken in float64.
    """
    Z, A = (
        np.asarray(t.detach() if isinstance(t, torch.Tensor) else t, np.float64) for t in (Z, A)
    )
    N = Z.shape[0]
    Zt = np.vstack([Z.T, np.ones(N)])
    z2 = float(np.linalg.eigvalsh(Zt @ Zt.T)[-1]) / N
    a2 = float(np.linalg.norm(A, 2)) ** 2
    return max(z2, a2 * lam_x)


def segment_smoothness(end_values: Sequence[float], data: Any) -> float:
    r"""A smoothness constant of :math:`F` on a segment of the analytic model (proved).

    .. math::

       L_{[\Theta, \Theta']} = (1 + 10^{-9})\Bigl(\max_{\text{ends}}
       \max\bigl(\|\tilde Z\|_2^2/N,\ \|A\|_2^2\lambda_X\bigr) + \frac{\sqrt2}{N}\sum_i r_i\Bigr)

    with :math:`\tilde Z = [Z, \mathbf 1]` the full-data embeddings, :math:`A` the head weights,
    :math:`\lambda_X = \max_m\lambda_{\max}(\tilde X_m^\top\tilde X_m/N)` and
    :math:`r_i = \max_m\|\tilde x_{m,i}\|`: the bound of
    :mod:`~cvfl_sim.bounds.analytic_constants` with :math:`s_i \le \tfrac12`,
    :math:`\|g_i\| \le \sqrt2`. :math:`\|\tilde Z\|_2` and :math:`\|A\|_2` are norms of
    quantities linear in the parameters, hence convex along the segment: their largest value is at
    an end. The factor :math:`1 + 10^{-9}` covers the float64 rounding of the two norms.

    Parameters
    ----------
    end_values : sequence of float
        :math:`\max(\|\tilde Z\|_2^2/N, \|A\|_2^2\lambda_X)` at the segment's ends.
    data : _DataConstants
        The data's constants (:math:`\lambda_X` and the bilinear term).
    """
    return (1.0 + _FLOAT_MARGIN) * (max(end_values) + float(data.bilinear))


def _flat_float64(models: Sequence[nn.Module]) -> np.ndarray:
    """Every parameter of ``models``, in order, as one float64 vector (a copy)."""
    flat = torch.cat([q.detach().reshape(-1) for n in models for q in n.parameters()])
    return flat.to(torch.float64).numpy()


# ---------------------------------------------------------------------------------------------
# the probe
# ---------------------------------------------------------------------------------------------
@dataclass
class _Step:
    """What a local step leaves for the next probe call (which knows its displacement)."""

    theta: np.ndarray
    eta: float
    grad_batch: np.ndarray
    end_value: float


@dataclass
class _Sums:
    """Running sums of the certificate (every one weighted by the step size)."""

    eta: float = 0.0
    observed: float = 0.0  # sum eta ||grad F||^2
    curvature: float = 0.0  # sum L eta^2 ||g||^2 / 2
    error: float = 0.0  # sum eta ||b||^2
    reuse_sq: float = 0.0  # sum eta ||s - s0||^2
    reuse_cross: float = 0.0  # sum eta ||grad F - grad F0|| ||s0||
    sampling: float = 0.0  # - sum eta <grad F0, s0>
    steps: int = 0
    L_max: float = 0.0
    segments: list[float] = field(default_factory=list)  # L_t of every step's segment


class TrajectoryProbe:
    r"""Probe of :func:`~cvfl_sim.vfl.train.train` that builds the trajectory certificate (C4.7).

    Pass it as ``train(..., probe=probe)`` (backend ``"inprocess"``); then
    ``probe.certificate(result)`` finishes the certificate with the trained models. It evaluates
    every local step: the full-data gradient and loss, the batch gradient at the fresh
    embeddings, the realised update and, for the analytic model, the certified smoothness of the
    step's segment (otherwise an estimate: power iteration on the full-data Hessian, warm-started).

    Parameters
    ----------
    dataset : VerticalDataset
        The run's data (the full-data gradient needs every training sample).
    config : CVFLConfig
        The run's configuration.
    power_iters : int
        At most this many power iterations per point for the estimated smoothness of a
        non-analytic model; each point starts from the last one's vector and stops once the
        estimate changes by at most :data:`POWER_TOL` (relative).
    progress : bool or None
        A bar over the run's local steps (:func:`~cvfl_sim.vfl.progress.progress_bar`): ``None``
        shows it on a terminal or in a notebook, ``True`` always, ``False`` never.

    Examples
    --------
    >>> from cvfl_sim import CVFLConfig, load_dataset, train
    >>> from cvfl_theory.compressors import ScalarQuantizer
    >>> ds = load_dataset("breast-cancer")
    >>> cfg = CVFLConfig(Q=2, lr=0.02, epochs=1, batch_size=57, parties_model="linear",
    ...                  server_model="linear", compressor=ScalarQuantizer(2))
    >>> probe = TrajectoryProbe(ds, cfg)
    >>> cert = probe.certificate(train(ds, cfg, probe=probe))
    >>> cert.certified, cert.bound >= cert.observed
    (True, True)
    """

    def __init__(
        self,
        dataset: VerticalDataset,
        config: CVFLConfig,
        power_iters: int = 4,
        progress: bool | None = None,
    ):
        if not isinstance(dataset, VerticalDataset):
            raise TypeError(f"dataset must be a VerticalDataset, got {type(dataset).__name__}")
        if not isinstance(config, CVFLConfig):
            raise TypeError(f"config must be a CVFLConfig, got {type(config).__name__}")
        if isinstance(power_iters, bool) or not isinstance(power_iters, int) or power_iters < 1:
            raise ValueError(f"power_iters must be an integer >= 1, got {power_iters!r}")
        self.dataset, self.config, self.power_iters = dataset, config, power_iters
        self.progress = progress
        self._bar: Any = None
        self.X = [torch.as_tensor(p, dtype=torch.float64) for p in dataset.train_parts]
        self.y = torch.as_tensor(dataset.y_train)
        self.sums = _Sums()
        self.seconds = 0.0
        self._models: tuple[list[nn.Module], nn.Module] | None = None
        self._head: nn.Linear | None = None
        self._data: _DataConstants | None = None
        self._prev: _Step | None = None
        self._round: tuple[int, np.ndarray, np.ndarray] | None = None  # (r, grad F0, s0)
        self._F0: float | None = None
        self._power_vec: torch.Tensor | None = None
        self._finished = False
        self._pending: tuple[_Step, float, float] | None = None
        self._layers: list[tuple[np.ndarray, np.ndarray | None]] = []

    # -------------------------------------------------------------------- the float64 models
    def _setup(self, parties: Sequence[nn.Module], server: nn.Module) -> None:
        check_all_trained(parties, server, "the trajectory certificate")
        ps = [copy.deepcopy(p).to(torch.float64) for p in parties]
        sv = copy.deepcopy(server).to(torch.float64)
        for net in [*ps, sv]:
            for q in net.parameters():
                q.requires_grad_(True)
        self._models = (ps, sv)
        self._params = [q for net in [*ps, sv] for q in net.parameters()]
        self._sizes = [q.numel() for q in self._params]
        self._shapes = [tuple(q.shape) for q in self._params]
        self._head = _linear_head(ps, sv)
        if self._head is not None:
            self._data = _DataConstants.of(self.dataset.train_parts)
            self._XT = [np.ascontiguousarray(x.numpy().T) for x in self.X]
            self._yn = self.y.numpy()

    @property
    def segments(self) -> list[float]:
        """The smoothness :math:`L_t` used on each step's segment so far, in order."""
        return list(self.sums.segments)

    @property
    def certified(self) -> bool:
        """Whether the smoothness is proved (the analytic model) rather than estimated."""
        return self._head is not None

    def _load(self, theta: np.ndarray) -> None:
        """Point the analytic model's layers at ``theta``, or load it into the float64 models."""
        if self._head is not None:
            views = np.split(theta, np.cumsum(self._sizes)[:-1])
            self._layers = []
            for v, shape in zip(views, self._shapes):
                if len(shape) == 2:  # a weight; its bias (if any) follows it (plain_linear)
                    self._layers.append((v.reshape(shape), None))
                else:
                    self._layers[-1] = (self._layers[-1][0], v)
            return
        with torch.no_grad():
            for q, v in zip(self._params, torch.from_numpy(theta).split(self._sizes)):
                q.copy_(v.reshape(q.shape))

    def _loss(self, X: Sequence[torch.Tensor], y: torch.Tensor) -> tuple[torch.Tensor, Any]:
        assert self._models is not None
        parties, server = self._models
        Z = torch.cat([p(x) for p, x in zip(parties, X)], dim=1)
        return nn.functional.cross_entropy(server(Z), y), Z

    def _full_point(self) -> tuple[float, np.ndarray, float]:
        """Loss, gradient (flat) and smoothness value of the full data at the loaded point."""
        if self._head is not None:
            assert self._data is not None
            F, g, Z = self._analytic_grad(self._XT, self._yn)
            value = _point_value(Z, self._layers[-1][0], self._data.lam_x)
            return F, np.concatenate([x.reshape(-1) for x in g]), value
        loss, Z = self._loss(self.X, self.y)
        g = torch.autograd.grad(loss, self._params, create_graph=True)
        value = self._end_value(g)
        return float(loss.detach()), torch.cat([x.detach().reshape(-1) for x in g]).numpy(), value

    def _batch_grad(self, x: Sequence[torch.Tensor], y: torch.Tensor) -> np.ndarray:
        """The batch gradient (flat) at the loaded point and the fresh embeddings."""
        if self._head is not None:
            xb = [np.asarray(t.detach(), dtype=np.float64).T for t in x]
            g = self._analytic_grad(xb, np.asarray(y))[1]
            return np.concatenate([q.reshape(-1) for q in g])
        loss, _ = self._loss([t.detach().to(torch.float64) for t in x], y)
        return torch.cat([q.reshape(-1) for q in torch.autograd.grad(loss, self._params)]).numpy()

    def _analytic_grad(self, XT: Sequence[np.ndarray], y: np.ndarray) -> Any:
        r"""Loss, gradient and embeddings of the analytic model in closed form (numpy, float64).

        With :math:`Z_m = X_m W_m^\top + b_m`, logits :math:`U = Z A^\top + c`, softmax
        :math:`P` and one-hot labels :math:`Y`, the mean cross-entropy has
        :math:`D = \partial F/\partial U = (P - Y)/N`, so :math:`\nabla_A F = D^\top Z`,
        :math:`\nabla_c F = D^\top\mathbf 1`, and with :math:`G_m = D A_m` (``A_m`` the head's
        columns of block ``m``) :math:`\nabla_{W_m} F = G_m^\top X_m`,
        :math:`\nabla_{b_m} F = G_m^\top\mathbf 1`: the gradient autograd gives, in the order
        of the models' parameters (``tests/test_certificate.py`` compares them), without torch's
        per-operation cost on these small matrices. The point is the one :meth:`_load` set.
        ``XT`` holds the parties' inputs transposed, ``(D_m, N)``: with the samples along the
        columns every reduction runs over contiguous rows.
        """
        *party, (A, c) = self._layers
        ZT = np.concatenate(
            [W @ xt if b is None else W @ xt + b[:, None] for xt, (W, b) in zip(XT, party)]
        )
        UT = A @ ZT if c is None else A @ ZT + c[:, None]
        UT -= UT.max(axis=0)
        E = np.exp(UT)
        total = E.sum(axis=0)
        N = ZT.shape[1]
        cols = np.arange(N)
        loss = float(np.mean(np.log(total) - UT[y, cols]))
        D = E / total
        D[y, cols] -= 1.0
        D /= N
        G = A.T @ D
        grads: list[np.ndarray] = []
        off = 0
        for xt, (W, b) in zip(XT, party):
            g = G[off : off + W.shape[0]]
            off += W.shape[0]
            grads.append(g @ xt.T)
            if b is not None:
                grads.append(g.sum(axis=1))
        grads.append(D @ ZT.T)
        if c is not None:
            grads.append(D.sum(axis=1))
        return loss, grads, ZT.T

    def _end_value(self, g: Sequence[torch.Tensor]) -> float:
        """A non-analytic model's smoothness estimate at one end (power iteration on the Hessian).

        ``g`` is the full-data gradient with its graph.
        """
        flat = torch.cat([x.reshape(-1) for x in g])
        v = self._power_vec
        if v is None:
            gen = torch.Generator().manual_seed(0)
            v = torch.randn(flat.numel(), generator=gen, dtype=torch.float64)
        lam = 0.0
        for _ in range(self.power_iters):
            v = v / v.norm()
            hv = torch.autograd.grad(flat, self._params, grad_outputs=v, retain_graph=True)
            w = torch.cat([x.reshape(-1) for x in hv])
            lam, before = float(w.norm()), lam
            if lam == 0.0:
                break
            v = w
            if abs(lam - before) <= POWER_TOL * lam:  # settled (warm-started from the last point)
                break
        self._power_vec = v.detach()
        return lam

    # -------------------------------------------------------------------- one local step
    def __call__(
        self,
        *,
        round_index: int,
        step: int,
        eta: float,
        parties: Sequence[nn.Module],
        server: nn.Module,
        x: Sequence[torch.Tensor],
        y: torch.Tensor,
        **_: Any,
    ) -> None:
        """Evaluate local step ``step`` of round ``round_index`` (called by ``train``)."""
        import time

        tick = time.perf_counter()
        if self._finished:
            raise ValueError("this TrajectoryProbe has finished a certificate: use a new one")
        if self._models is None:
            self._setup(parties, server)
            steps = math.ceil(self.dataset.n_train / self.config.batch_size)
            self._bar = progress_bar(
                steps * self.config.epochs * self.config.Q,
                self.progress,
                "trajectory certificate",
                "step",
            )
        theta = _flat_float64([*parties, server])
        self._close_step(theta)
        self._load(theta)
        F, gF, value = self._full_point()
        self._segment(value)
        if self._F0 is None:
            self._F0 = F
        gB = self._batch_grad(x, y)
        s = gB - gF
        if step == 0 or self._round is None or self._round[0] != round_index:
            self._round = (round_index, gF, s)
        gF0, s0 = self._round[1], self._round[2]
        eta = float(eta)
        S = self.sums
        S.eta += eta
        S.observed += eta * float(gF @ gF)
        S.reuse_sq += eta * float((s - s0) @ (s - s0))
        S.reuse_cross += eta * float(np.linalg.norm(gF - gF0)) * float(np.linalg.norm(s0))
        S.sampling -= eta * float(gF0 @ s0)
        S.steps += 1
        self._prev = _Step(theta, eta, gB, value)
        self.seconds += time.perf_counter() - tick
        self._bar.update(1)

    def _close_step(self, theta_next: np.ndarray) -> None:
        """Finish the previous step now that its end point is known."""
        prev = self._prev
        if prev is None:
            return
        g = (prev.theta - theta_next) / prev.eta  # the realised update
        b = g - prev.grad_batch
        # the end value of theta_next is computed by the caller next; the segment takes both
        self._pending = (prev, float(g @ g), float(b @ b))

    def _segment(self, end_value: float) -> None:
        pending = self._pending
        if pending is None:
            return
        prev, g2, b2 = pending
        if self._head is not None:
            L = segment_smoothness([prev.end_value, end_value], self._data)
        else:
            L = max(prev.end_value, end_value)
        S = self.sums
        S.curvature += 0.5 * L * prev.eta**2 * g2
        S.error += prev.eta * b2
        S.L_max = max(S.L_max, L)
        S.segments.append(L)
        self._pending = None

    # -------------------------------------------------------------------- the result
    def certificate(self, run: RunResult) -> Certificate:
        """Finish the certificate with the run's trained models (``run.models``)."""
        if not isinstance(run, RunResult) or run.models is None:
            raise TypeError("run must be the RunResult train() returned, with its models")
        if self._prev is None or self._models is None:
            raise ValueError(
                "the probe saw no local step: pass it to train(..., probe=probe) with "
                "backend='inprocess'"
            )
        parties, server = run.models["parties"], run.models["server"]
        theta = _flat_float64([*parties, server])
        self._close_step(theta)
        self._load(theta)
        FT, _, value = self._full_point()
        self._segment(value)
        self._finished = True
        self._bar.close()
        assert self._F0 is not None
        return Certificate.of(self.sums, self._F0, FT, self.certified)


@dataclass(frozen=True)
class CertificateTerms:
    r"""The certificate's five terms (each divided by :math:`(1 - \alpha)\sum_t \eta_t`)."""

    loss_decrease: float
    curvature: float
    staleness_and_compression: float
    batch_reuse: float
    sampling_at_round_starts: float

    def values(self) -> tuple[float, ...]:
        """The terms in the order of :data:`CERTIFICATE_TERMS`."""
        return (
            self.loss_decrease,
            self.curvature,
            self.staleness_and_compression,
            self.batch_reuse,
            self.sampling_at_round_starts,
        )


class Certificate(Table):
    r"""The trajectory certificate of one run (C4.7): bound, observed value, terms, verdict.

    Attributes
    ----------
    bound : float
        Upper bound on :math:`\sum_t\eta_t\|\nabla F(\Theta^t)\|^2 / \sum_t\eta_t`.
    observed : float
        That average, computed exactly on the run.
    ratio : float
        ``bound / observed``.
    certified : bool
        ``True`` for the analytic model (proved smoothness), ``False`` for an estimate.
    terms : CertificateTerms
        The five terms.
    alpha : float
        The Young parameter used.
    steps : int
        Local iterations evaluated.
    L_max : float
        Largest segment smoothness used.
    """

    bound: float
    observed: float
    ratio: float
    certified: bool
    terms: CertificateTerms
    alpha: float
    steps: int
    L_max: float
    F0: float
    FT: float

    @classmethod
    def of(cls, S: _Sums, F0: float, FT: float, certified: bool) -> Certificate:
        """The certificate from the probe's running sums and the first and last loss."""
        c = 0.5 * (S.error + S.reuse_sq)
        K = (F0 - FT) + S.curvature + S.reuse_cross + S.sampling
        alpha = best_alpha(K, c)
        scale = (1.0 - alpha) * S.eta
        terms = CertificateTerms(
            loss_decrease=(F0 - FT) / scale,
            curvature=S.curvature / scale,
            staleness_and_compression=0.5 * S.error / (alpha * scale),
            batch_reuse=(S.reuse_cross + 0.5 * S.reuse_sq / alpha) / scale,
            sampling_at_round_starts=S.sampling / scale,
        )
        return cls.from_terms(terms, S.observed / S.eta, certified, alpha, S.steps, S.L_max, F0, FT)

    @classmethod
    def from_terms(
        cls,
        terms: CertificateTerms,
        observed: float,
        certified: bool,
        alpha: float,
        steps: int,
        L_max: float,
        F0: float,
        FT: float,
    ) -> Certificate:
        """The certificate of its terms (the bound is their sum) and the run's observed value."""
        bound = float(sum(terms.values()))
        ratio = bound / observed if observed > 0 else math.inf
        kind = "certified" if certified else "estimate (smoothness estimated, not proved)"
        verdict = "holds" if bound >= observed else "VIOLATED (a bug: the certificate is a theorem)"
        rows = [
            *[[name, v, ""] for name, v in zip(CERTIFICATE_TERMS, terms.values())],
            ["bound", bound, kind],
            ["observed", observed, "step-weighted average of ||grad F||^2 over every step"],
            ["bound / observed", ratio, verdict],
        ]
        out = cls(
            ["quantity", "value", "note"],
            rows,
            title=f"Trajectory certificate (C4.7, ours): {kind}, {steps} local steps, "
            f"alpha = {alpha:.3g}, max segment L = {L_max:.4g}",
        )
        out.bound, out.observed, out.ratio = bound, observed, ratio
        out.certified, out.terms, out.alpha = certified, terms, alpha
        out.steps, out.L_max, out.F0, out.FT = steps, L_max, F0, FT
        return out

    def save(self, path: Any) -> str:
        """Write the certificate as a result file (JSON, no pickle; ``.json`` appended)."""
        from cvfl_theory.store import dataclass_fields, write_result

        fields = {
            "terms": dataclass_fields(self.terms),
            "observed": self.observed,
            "certified": self.certified,
            "alpha": self.alpha,
            "steps": self.steps,
            "L_max": self.L_max,
            "F0": self.F0,
            "FT": self.FT,
        }
        return write_result(path, "Certificate", fields)

    @classmethod
    def load(cls, path: Any) -> Certificate:
        """Read a certificate written by :meth:`save`, each number checked for its meaning.

        The bound is rebuilt as the sum of the stored terms (never read from the file).
        """
        from cvfl_theory.store import checked_field, dataclass_from_fields, read_result

        d, _ = read_result(path, "Certificate")
        w = repr(str(path))
        terms = dataclass_from_fields(CertificateTerms, checked_field(d, "terms", dict, w), w)
        nums = {
            k: float(checked_field(d, k, (int, float), w))
            for k in ("observed", "alpha", "L_max", "F0", "FT")
        }
        steps = checked_field(d, "steps", int, w)
        if not all(math.isfinite(v) for v in (*nums.values(), *terms.values())):
            raise ValueError(f"{w}: every number of a certificate is finite")
        if nums["observed"] < 0 or not 0 < nums["alpha"] < 1 or steps < 1 or nums["L_max"] < 0:
            raise ValueError(f"{w}: observed >= 0, alpha in (0, 1), steps >= 1 and L_max >= 0")
        return cls.from_terms(
            terms,
            nums["observed"],
            checked_field(d, "certified", bool, w),
            nums["alpha"],
            steps,
            nums["L_max"],
            nums["F0"],
            nums["FT"],
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: ``{bound, observed, ratio, certified}`` and the terms."""
        return {
            "bound": self.bound,
            "observed": self.observed,
            "ratio": self.ratio,
            "certified": self.certified,
            "alpha": self.alpha,
            "steps": self.steps,
            "L_max": self.L_max,
            "terms": dict(zip(CERTIFICATE_TERMS, self.terms.values())),
        }
