r"""Measured constants and Theorem 4.2 side by side with a real run (C3, C4.1, C4.2, C9).

C9 ("measured constants") asks to estimate the constants of the C3 assumptions along a
run and to evaluate the C4.2 bound (constants **as recovered**) on the trajectory, reporting
``bound / observed``. This module does exactly that:

1. :func:`estimate_constants` estimates :math:`L`, :math:`L_m`, :math:`\sigma_m^2`,
   :math:`H_m`, :math:`G_m` (``m = 0..M``, ``0`` the server) at a few parameter points of a run
   (by default its initial parameters :math:`\Theta^0`, rebuilt from the configuration's seed,
   and its final parameters). They are **empirical maxima at the visited points and batches**,
   i.e. lower estimates of the global constants that C3 assumes -- not certified constants.
   :math:`H_m` and :math:`G_m` follow the **chain reading** of Lemma 1 (C3.4 as corrected):
   :math:`H_m` bounds the Hessian of the loss in the *embeddings*,
   :math:`\|\nabla^2_{h_m,\Phi_{-m}} F_B\|` (``h_0 = θ_0``), and :math:`G_m` the embedding
   Jacobian :math:`\|\nabla_{\theta_m} h_m\|`, both in operator norm (the tighter valid
   constants). The Frobenius values and the Hessian in :math:`\theta_m` (which already contains
   the embedding Jacobian and double-counts :math:`G_m` once multiplied by :math:`G_m^2`) are
   kept only for the diagnosis of ``docs/findings.rst``.
2. :func:`bound_vs_observed` evaluates :func:`cvfl_theory.bounds.theorem_4_2` with the run's
   step size, ``T = R Q``, ``Q``, ``B``, each party's per-round measured compression errors,
   :math:`F(\Theta^0) - F(\Theta^T)` from the recorded training losses, and compares the bound
   with the observed average :math:`\|\nabla F(\Theta^{t_0})\|^2`. A run whose step varies gets
   :func:`cvfl_theory.bounds.theorem_4_4` instead, against the smallest observed value. Given a
   :class:`~cvfl_sim.bounds.lemma1.Lemma1Report` of the same run, it also shows term 3 with the
   **measured** Lemma-1 left side and with the tight bound of C4.5 (ours), and takes
   :math:`H_m, G_m` as the maxima over every point the probe evaluated as well.

A ratio ``bound / observed < 1`` would mean the recovered constants (or the recovered form) do not
hold on this run -- a finding, reported plainly, not an error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import torch
from torch import nn

from cvfl_theory._validate import check_int_in_range
from cvfl_theory.bounds import (
    C_COMP,
    C_OPT,
    C_VAR,
    BoundTerms,
    compression_term,
    compression_weights,
    theorem_4_2,
    theorem_4_4,
)
from cvfl_theory.table import Table

from ..vfl.config import DTYPES, CVFLConfig, build_models
from ..vfl.data import VerticalDataset
from ..vfl.results import RunResult
from ._autodiff import (
    check_all_trained,
    embedding_hessian_blocks,
    embedding_jacobian,
    flat_params,
    grad,
    jacobian,
    server_loss,
    sq,
)
from ._spectral import op_norm
from .hypotheses import Applicability, theorem_hypotheses
from .lemma1 import Lemma1Report

__all__ = [
    "READINGS",
    "Constants",
    "BoundCheck",
    "estimate_constants",
    "bound_vs_observed",
    "realised_term3_se",
]

ModelSet = tuple[list[nn.Module], nn.Module]

#: The readings of :math:`H_m, G_m` in Lemma 1: attribute names of :class:`Constants`.
#: ``"chain"`` is Lemma 1 (C3.4 as corrected); the others are kept for the diagnosis only.
READINGS = {
    "chain": ("H", "G"),
    "chain-frobenius": ("H_frob", "G_frob"),
    "theta-hessian (double-counts G)": ("H_theta", "G_frob"),
}


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def _as_models(obj: Any) -> ModelSet:
    """``(parties, server)`` from a RunResult (with models), a dict or a pair."""
    if isinstance(obj, RunResult):
        if obj.models is None:
            raise ValueError(
                "this RunResult carries no models (a loaded result?); pass the RunResult "
                "returned by cvfl_sim.train or {'parties': [...], 'server': ...}"
            )
        obj = obj.models
    if isinstance(obj, dict):
        return list(obj["parties"]), obj["server"]
    if isinstance(obj, (tuple, list)) and len(obj) == 2 and isinstance(obj[1], nn.Module):
        return list(obj[0]), obj[1]
    raise TypeError(
        "run_or_params must be a RunResult, {'parties': [...], 'server': ...} or "
        f"(parties, server); got {type(obj).__name__}"
    )


def _loss(server: nn.Module, emb: Sequence[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy :math:`F_B` (mean over the rows) of the server on the given embeddings."""
    return server_loss(server, None, torch.cat(list(emb), dim=1), y)


def _power_norm(
    matvec: Any, shapes: Sequence[torch.Tensor], iters: int, tol: float, gen: torch.Generator
) -> float:
    r"""Largest :math:`\|A v\|/\|v\|` by power iteration for a symmetric ``A`` given by ``matvec``."""
    v = [torch.randn(x.shape, generator=gen, dtype=x.dtype) for x in shapes]
    nv = math.sqrt(sq(v))
    v = [x / nv for x in v]
    lam = 0.0
    for _ in range(iters):
        w = matvec(v)
        new = math.sqrt(sq(w))
        if new == 0.0:
            return 0.0
        v = [x.detach() / new for x in w]
        if abs(new - lam) <= tol * new:
            lam = new
            break
        lam = new
    return lam


def _fro(A: torch.Tensor) -> float:
    return math.sqrt(float((A.detach().to(torch.float64) ** 2).sum()))


# ---------------------------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Constants:
    r"""Empirical C3 constants (estimates at the visited points; see :func:`estimate_constants`).

    Attributes
    ----------
    L : float
        Largest :math:`|\lambda|` of the full-data Hessian :math:`\nabla^2 F` (C3.1).
    L_m : tuple of float
        Block smoothness :math:`\|\nabla_m \nabla F_B\|_2` (rows of block ``m`` of the
        mini-batch Hessian), ``m = 0..M``.
    sigma2 : tuple of float
        :math:`\sigma_m^2 = B\,\mathbb{E}\|\nabla_m F_B - \nabla_m F\|^2` (C3.3).
    H : tuple of float
        :math:`H_m` of Lemma 1 (C3.4, chain reading): operator norm of the embedding Hessian
        block :math:`\nabla^2_{h_m, \Phi_{-m}} F_B` (``h_0 = θ_0``).
    G : tuple of float
        :math:`G_m = \|\nabla_{\theta_m} h_m(\theta_m; x_m^B)\|_2` (C3.5, operator norm);
        ``G_0 = 1``.
    H_frob, G_frob : tuple of float
        The same two in Frobenius norm (diagnosis only; ``G_frob[0] = 1``).
    H_theta : tuple of float
        :math:`\|\nabla^2_{\theta_m, \Phi_{-m}} F_B\|_F`, the Hessian in the *parameters*
        :math:`\theta_m`: it already contains :math:`\nabla_{\theta_m} h_m`, so
        :math:`H_\theta^2 G^2` double-counts :math:`G_m` (the old literal reading; diagnosis only).
    B : int
        Mini-batch size used.
    points : int
        Number of parameter points visited.
    batches : int
        Mini-batches per point.
    proved : bool
        ``True`` when the constants are proved bounds over the run (the analytic model's, from
        :func:`~cvfl_sim.bounds.analytic_constants.analytic_constants`), ``False`` for the
        estimates of :func:`estimate_constants`.
    """

    L: float
    L_m: tuple[float, ...]
    sigma2: tuple[float, ...]
    H: tuple[float, ...]
    G: tuple[float, ...]
    H_frob: tuple[float, ...]
    G_frob: tuple[float, ...]
    H_theta: tuple[float, ...]
    B: int
    points: int
    batches: int
    proved: bool = False

    @classmethod
    def from_analytic(cls, analytic: Any) -> Constants:
        """The proved constants of the analytic model, an ``AnalyticConstants``.

        From :func:`~cvfl_sim.bounds.analytic_constants.analytic_constants`; the Frobenius and
        theta-Hessian diagnostics are not computed for it (NaN).
        """
        nan = tuple(math.nan for _ in analytic.G)
        return cls(
            L=analytic.L,
            L_m=tuple(analytic.L_m),
            sigma2=tuple(analytic.sigma2),
            H=tuple(analytic.H),
            G=tuple(analytic.G),
            H_frob=nan,
            G_frob=nan,
            H_theta=nan,
            B=analytic.B,
            points=analytic.points,
            batches=0,
            proved=True,
        )

    def with_lemma1(self, report: Lemma1Report) -> Constants:
        """These constants with :math:`H_m, G_m` raised to the maxima a Lemma-1 probe saw."""
        H = np.maximum(np.asarray(self.H), report.H)
        G = np.maximum(np.asarray(self.G), report.G)
        return dataclasses.replace(
            self,
            H=tuple(float(v) for v in H),
            G=tuple(float(v) for v in G),
            points=self.points + int(report.left.shape[0]),
        )

    def table(self) -> Table:
        """The constants per block ``m = 0..M`` (``L`` repeated on every row).

        The readings not computed (all NaN: the Frobenius ones of proved constants, say) are left
        out of the table; :meth:`to_dict` keeps every field.
        """
        columns = {
            "L": [self.L] * len(self.G),
            "L_m": self.L_m,
            "sigma2_m": self.sigma2,
            "H_m (chain, op)": self.H,
            "G_m (op)": self.G,
            "H_m (chain, Frob)": self.H_frob,
            "G_m (Frob)": self.G_frob,
            "H_m (theta-Hessian, Frob; double-counts G)": self.H_theta,
        }
        kept = {name: v for name, v in columns.items() if not np.isnan(np.asarray(v, float)).all()}
        rows = [[m, *(v[m] for v in kept.values())] for m in range(len(self.G))]
        if self.proved:
            title = (
                f"C3 constants of the analytic model: proved bounds over the run's "
                f"{self.points} point(s), batches of size B={self.B}"
            )
        else:
            title = (
                f"Empirical C3 constants: maxima over {self.points} point(s) x {self.batches} "
                f"batch(es) of size B={self.B} (estimates, not global constants)"
            )
        return Table(["m", *kept], rows, title=title)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields."""
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return str(self.table())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


def estimate_constants(
    dataset: VerticalDataset,
    config: CVFLConfig,
    run_or_params: Any,
    *,
    include_initial: bool = True,
    batches: int = 4,
    power_iters: int = 60,
    tol: float = 1e-5,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Constants:
    r"""Estimate the C3 constants :math:`L, L_m, \sigma_m^2, H_m, G_m` at points of a run (C9).

    What is estimated, and how (all with :mod:`torch.autograd`, in ``config.dtype``):

    - :math:`L` (C3.1): the largest :math:`|\lambda|` of the Hessian of the **full-data** loss
      :math:`F` w.r.t. all parameters :math:`\Theta`, by power iteration on Hessian-vector
      products (double backward), at most ``power_iters`` iterations or relative change ``tol``.
    - :math:`L_m` (C3.1): :math:`\|P_m \nabla^2 F_B\|_2` (the rows of block ``m`` of the
      mini-batch Hessian), by power iteration on :math:`\nabla^2 F_B P_m \nabla^2 F_B`.
    - :math:`\sigma_m^2` (C3.3): :math:`B \cdot \mathrm{mean}_b \|\nabla_m F_{B_b} - \nabla_m F\|^2`
      over ``batches`` disjoint uniformly drawn mini-batches of size ``B = config.batch_size``
      (sampling without replacement, as the simulator does).
    - :math:`H_m` (C3.4, chain reading of Lemma 1): the operator norm of the embedding Hessian
      block :math:`\nabla^2_{h_m, \Phi_{-m}} F_B` -- rows the entries of :math:`h_m` of the batch
      (:math:`\theta_0` for ``m = 0``), columns everything else block ``m`` sees (the other
      parties' embeddings, and :math:`\theta_0` for ``m >= 1``) -- computed as a dense matrix
      and its largest singular value, exactly.
    - :math:`G_m` (C3.5): the operator norm of the dense Jacobian
      :math:`\nabla_{\theta_m} h_m(\theta_m; x_m^B)` of the ``(B, P_m)`` embedding of a batch.
      ``G_0 = 1``: ``h_0 = θ_0`` has the identity Jacobian.
    - For the diagnosis only: the Frobenius norms of the same two matrices, and
      :math:`\|\nabla^2_{\theta_m, \Phi_{-m}} F_B\|_F` (the Hessian in the parameters, the old
      literal reading, which double-counts :math:`G_m`).

    Each constant is the **maximum over the visited points and batches**: an empirical value
    along the trajectory, a *lower* estimate of the global constant C3 assumes (the theorem
    needs the supremum over all points the run visits and more). Do not read them as certified.
    A :class:`~cvfl_sim.bounds.lemma1.Lemma1Probe` on the run evaluates :math:`H_m, G_m` at every
    probed round; :meth:`Constants.with_lemma1` takes those maxima too.

    Parameters
    ----------
    dataset : VerticalDataset
        The run's data.
    config : CVFLConfig
        The run's configuration (batch size, dtype; the seed rebuilds :math:`\Theta^0`).
    run_or_params : RunResult, dict, pair or list of them
        The final models (``RunResult`` from :func:`cvfl_sim.train`, ``{"parties", "server"}``
        or ``(parties, server)``); a list gives several checkpoints.
    include_initial : bool
        Also estimate at :math:`\Theta^0`, rebuilt from ``config`` exactly as ``train`` does.
    batches : int
        Mini-batches per point (``batches * B <= N_train``; fewer are used otherwise).
    power_iters, tol : int, float
        Power-iteration budget for :math:`L` and :math:`L_m`.
    seed : int
        Seeds the batches and the power iterations' start vectors.
    progress : callable, optional
        Called with a one-line message at each point and batch (e.g. print to stderr).

    Returns
    -------
    Constants
    """
    if not isinstance(config, CVFLConfig):
        raise TypeError(f"config must be a CVFLConfig, got {type(config).__name__}")
    batches = check_int_in_range(batches, "batches", 1, 2**62)
    power_iters = check_int_in_range(power_iters, "power_iters", 1, 2**62)
    points: list[ModelSet] = []
    if include_initial:
        points.append(build_models(dataset, config))  # validates dataset and config
    items = run_or_params if isinstance(run_or_params, list) else [run_or_params]
    points += [_as_models(o) for o in items]
    for parties, server in points:
        check_all_trained(parties, server, "estimate_constants")
    dtype = DTYPES[config.dtype]
    say = progress or (lambda msg: None)
    M = dataset.n_parties
    B = int(config.batch_size)
    X = [torch.as_tensor(p, dtype=dtype) for p in dataset.train_parts]
    y = torch.as_tensor(dataset.y_train)
    n = dataset.n_train
    gen_np = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    nb = max(1, min(batches, n // B))

    L = 0.0
    L_m, sigma2 = np.zeros(M + 1), np.zeros(M + 1)
    H, H_frob, H_theta = np.zeros(M + 1), np.zeros(M + 1), np.zeros(M + 1)
    G, G_frob = np.ones(M + 1), np.ones(M + 1)
    G[1:] = 0.0
    G_frob[1:] = 0.0
    for k, (parties, server) in enumerate(points):
        say(f"constants: point {k + 1}/{len(points)}: L (power iteration, full data)")
        blocks = [list(server.parameters())] + [list(p.parameters()) for p in parties]
        flat = [q for b in blocks for q in b]
        offs = np.concatenate([[0], np.cumsum([len(b) for b in blocks])]).astype(int)

        # L: full-data Hessian, power iteration on Hessian-vector products
        g_full = grad(_loss(server, [p(x) for p, x in zip(parties, X)], y), flat, create_graph=True)

        def hvp(v: list[torch.Tensor], g: list[torch.Tensor] = g_full) -> list[torch.Tensor]:
            return grad(g, flat, grad_outputs=v, retain_graph=True)

        L = max(L, _power_norm(hvp, flat, power_iters, tol, gen))
        gfull_blocks = [[t.detach() for t in g_full[offs[m] : offs[m + 1]]] for m in range(M + 1)]
        del g_full

        perm = gen_np.permutation(n)
        dev = np.zeros(M + 1)
        theta0 = flat_params(server)
        for b in range(nb):
            say(f"constants: point {k + 1}/{len(points)}, batch {b + 1}/{nb}: L_m, sigma^2, H, G")
            idx = torch.from_numpy(perm[b * B : (b + 1) * B])
            xb = [x[idx] for x in X]
            yb = y[idx]
            emb = [p(x) for p, x in zip(parties, xb)]
            g_b = grad(_loss(server, emb, yb), flat, create_graph=True)
            for m in range(M + 1):
                gm = g_b[offs[m] : offs[m + 1]]
                dev[m] += sq([a.detach() - c for a, c in zip(gm, gfull_blocks[m])])

                # L_m: || P_m Hess_B ||_2 = sqrt(lambda_max(Hess_B P_m Hess_B))
                def sym(
                    v: list[torch.Tensor], m: int = m, g: list[torch.Tensor] = g_b
                ) -> list[torch.Tensor]:
                    hv = grad(g, flat, grad_outputs=v, retain_graph=True)
                    mask = [
                        t if offs[m] <= i < offs[m + 1] else torch.zeros_like(t)
                        for i, t in enumerate(hv)
                    ]
                    return grad(g, flat, grad_outputs=mask, retain_graph=True)

                L_m[m] = max(L_m[m], math.sqrt(_power_norm(sym, flat, power_iters, tol, gen)))
            del g_b

            # H_m, G_m (chain reading), and the theta-Hessian of the old literal reading
            Z = torch.cat([e.detach() for e in emb], dim=1)
            sizes = [int(e.shape[1]) for e in emb]
            hess = embedding_hessian_blocks(server, theta0, Z, yb, sizes)  # one graph, all m
            for m, A in enumerate(hess):
                H[m] = max(H[m], op_norm(A))
                H_frob[m] = max(H_frob[m], _fro(A))
                if m == 0:
                    H_theta[0] = max(H_theta[0], _fro(A))  # h_0 = θ_0: the same block
                    continue
                J = embedding_jacobian(parties[m - 1], xb[m - 1])
                G[m] = max(G[m], op_norm(J))
                G_frob[m] = max(G_frob[m], _fro(J))
                H_theta[m] = max(H_theta[m], _theta_hessian_fro(server, parties, emb, xb, yb, m))
        sigma2 = np.maximum(sigma2, B * dev / nb)

    def tup(a: np.ndarray) -> tuple[float, ...]:
        return tuple(float(v) for v in a)

    return Constants(
        L=float(L),
        L_m=tup(L_m),
        sigma2=tup(sigma2),
        H=tup(H),
        G=tup(G),
        H_frob=tup(H_frob),
        G_frob=tup(G_frob),
        H_theta=tup(H_theta),
        B=B,
        points=len(points),
        batches=nb,
    )


def _theta_hessian_fro(
    server: nn.Module,
    parties: Sequence[nn.Module],
    emb: Sequence[torch.Tensor],
    xb: Sequence[torch.Tensor],
    yb: torch.Tensor,
    m: int,
) -> float:
    r""":math:`\|\nabla^2_{\theta_m, \Phi_{-m}} F_B\|_F` for a party ``m >= 1`` (old literal reading)."""
    leaves = [e.detach().requires_grad_(True) for e in emb]
    own = parties[m - 1](xb[m - 1])
    mixed = [own if j == m - 1 else leaves[j] for j in range(len(leaves))]
    srv = list(server.parameters())
    others = srv + [leaves[j] for j in range(len(leaves)) if j != m - 1]
    g_theta = grad(_loss(server, mixed, yb), list(parties[m - 1].parameters()), create_graph=True)
    flat = torch.cat([g.reshape(-1) for g in g_theta])
    return _fro(jacobian(flat, others))


# ---------------------------------------------------------------------------------------------
# bound vs observed
# ---------------------------------------------------------------------------------------------
class BoundCheck(Table):
    r"""A :class:`~cvfl_theory.table.Table` of a C4.2/C4.4 check, with the numbers as attributes.

    A bound is read only where its hypotheses hold: :attr:`hypotheses` evaluates them on the run
    (:func:`~cvfl_sim.bounds.hypotheses.theorem_hypotheses`); where the theorem does not apply,
    the verdict says so with the numbers, and no rendering calls the bound holding. Renders as
    text, as HTML in Jupyter, as JSON (:meth:`to_dict`) and as a figure (:meth:`plot`).

    Attributes
    ----------
    terms : BoundTerms
        The evaluated theorem with the recovered term 3 (:math:`H_m^2 G_m^2 \sum_{j\ne m}E_j`).
    forms : dict of str to BoundTerms
        The bounds: ``"recovered"`` and, with a Lemma-1 report of a run with ``Q = 1`` whose
        every round start was probed, of a top-k run whose every local step was probed (the
        realised form), or of a run without compression error, ``"tight (C4.5, ours)"``.
    estimates : dict of str to BoundTerms
        Estimates, not bounds: ``"plug-in (measured Lemma 1)"`` puts the probe's realised left
        sides (one dither draw per probed step; unprobed rounds at their mean) where the theorem
        needs an expectation; ``"tight (C4.5, ours)"`` is here where it is not a bound for the
        run (``Q > 1``: not evaluated at every local step, or at points that depend on the
        round's dither after its start; or rounds without a probe, filled with the probed ones'
        mean).
    realised_se : dict of str to float
        An estimate of the standard error of a form's or an estimate's total where its term 3
        sums realised values (:func:`realised_term3_se`): the recovered form's realised
        compression errors, the plug-in's realised left sides; ``nan`` with fewer than two
        rounds.
    hypotheses : Applicability
        The theorem's hypotheses on the run (``applies``, ``why``).
    observed : float
        Average (C4.2) or minimum (C4.4) of the recorded :math:`\|\nabla F\|^2`.
    ratio : float
        ``terms.total / observed``.
    ratios : dict of str to float
        ``total / observed`` of every form and estimate.
    verdict : str
        In words: ``"holds"``, ``"below observed"`` or ``"does not apply: ..."``.
    """

    terms: BoundTerms
    forms: dict[str, BoundTerms]
    estimates: dict[str, BoundTerms]
    realised_se: dict[str, float]
    hypotheses: Applicability
    observed: float
    ratio: float
    ratios: dict[str, float]
    theorem: str
    reading: str
    verdict: str

    @property
    def applies(self) -> bool:
        """Whether every hypothesis of the theorem holds on the run."""
        return self.hypotheses.applies

    @property
    def why(self) -> str:
        """The failing hypotheses with their numbers (empty when the theorem applies)."""
        return self.hypotheses.why

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: ``applies``, ``why``, the hypotheses, every form's terms, the verdict.

        A total that sums realised values has its standard error as ``se``.
        """

        def terms(t: BoundTerms, name: str) -> dict[str, Any]:
            out = {
                "optimization": t.optimization,
                "variance": t.variance,
                "compression": t.compression,
                "total": t.total,
                "ratio": self.ratios[name],
            }
            if name in self.realised_se:
                out["se"] = self.realised_se[name]
            return out

        return {
            "theorem": self.theorem,
            "reading": self.reading,
            "applies": self.applies,
            "why": self.why,
            "hypotheses": self.hypotheses.to_dict()["hypotheses"],
            "observed": self.observed,
            "forms": {name: terms(t, name) for name, t in self.forms.items()},
            "estimates": {name: terms(t, name) for name, t in self.estimates.items()},
            "verdict": self.verdict,
        }

    def to_dataframe(self) -> Any:
        """The table (quantity, value, note) as a :class:`pandas.DataFrame`; needs pandas."""
        return super().to_dataframe()

    def save(self, path: Any) -> str:
        """Write the check as a result file (JSON, no pickle; ``.json`` appended).

        The numbers (every form's terms, the hypotheses, the verdict) and the table as shown;
        :meth:`load` reads it back.
        """
        from cvfl_theory.store import dataclass_fields, write_result

        fields = {
            "terms": dataclass_fields(self.terms),
            "forms": {k: dataclass_fields(v) for k, v in self.forms.items()},
            "estimates": {k: dataclass_fields(v) for k, v in self.estimates.items()},
            "realised_se": dict(self.realised_se),
            "hypotheses": dataclass_fields(self.hypotheses),
            "observed": self.observed,
            "ratio": self.ratio,
            "ratios": dict(self.ratios),
            "theorem": self.theorem,
            "reading": self.reading,
            "verdict": self.verdict,
            "table": {"columns": self.columns, "rows": self.rows, "title": self.title},
        }
        return write_result(path, "BoundCheck", fields)

    @classmethod
    def load(cls, path: Any) -> BoundCheck:
        """Read a check written by :meth:`save`; every field is checked for type *and* meaning.

        Raises
        ------
        ValueError
            Not such a file, a field of the wrong kind, ratios that are not the totals over the
            observed value, or a verdict that contradicts the stored hypotheses.
        """
        from cvfl_theory.store import checked_field, dataclass_from_fields, read_result

        d, _ = read_result(path, "BoundCheck")
        w = repr(str(path))
        terms = dataclass_from_fields(BoundTerms, checked_field(d, "terms", dict, w), f"{w} terms")
        forms, estimates = (
            {
                k: dataclass_from_fields(BoundTerms, v, f"{w} {kind}[{k!r}]")
                for k, v in checked_field(d, kind, dict, w).items()
            }
            for kind in ("forms", "estimates")
        )
        hyp = dataclass_from_fields(Applicability, checked_field(d, "hypotheses", dict, w), w)
        observed = float(checked_field(d, "observed", (int, float), w))
        ratio = float(checked_field(d, "ratio", (int, float), w))
        ratios = checked_field(d, "ratios", dict, w)
        verdict = checked_field(d, "verdict", str, w)
        if not (math.isfinite(observed) and observed > 0):
            raise ValueError(f"{w}: observed must be a finite number > 0, got {observed}")
        every = {**forms, **estimates}
        if set(ratios) != set(every) or not math.isclose(ratio, terms.total / observed):
            raise ValueError(f"{w}: the ratios must be the forms' totals over the observed value")
        for name, t in every.items():
            r = ratios[name]
            if isinstance(r, bool) or not isinstance(r, (int, float)):
                raise ValueError(f"{w}: ratio of {name!r} must be a number")
            if not math.isclose(float(r), t.total / observed, rel_tol=1e-12):
                raise ValueError(f"{w}: ratio of {name!r} is not its total over the observed")
        if verdict.startswith("does not apply") == hyp.applies:
            raise ValueError(f"{w}: the verdict {verdict[:60]!r} contradicts the hypotheses")
        # absent from the files of versions before it, which had no standard errors
        se = checked_field(d, "realised_se", dict, w) if "realised_se" in d else {}
        for name, v in se.items():
            if name not in forms and name not in estimates:
                raise ValueError(f"{w}: a standard error for {name!r}, which is no form")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                if not (isinstance(v, float) and math.isnan(v)):
                    raise ValueError(f"{w}: the standard error of {name!r} must be >= 0 or nan")
        table = checked_field(d, "table", dict, w)
        columns = checked_field(table, "columns", list, w)
        rows = checked_field(table, "rows", list, w)
        cells = (str, int, float, bool, type(None))
        if not all(isinstance(c, str) for c in columns) or not all(
            isinstance(r, list) and len(r) == len(columns) and all(isinstance(x, cells) for x in r)
            for r in rows
        ):
            raise ValueError(f"{w}: the table must be rows of {len(columns)} plain cells")
        out = cls(columns, rows, title=checked_field(table, "title", str, w))
        out.terms, out.forms, out.estimates = terms, forms, estimates
        out.realised_se = {k: float(v) for k, v in se.items()}
        out.hypotheses = hyp
        out.observed, out.ratio, out.ratios = (
            observed,
            ratio,
            {k: float(v) for k, v in ratios.items()},
        )
        out.theorem = checked_field(d, "theorem", str, w)
        out.reading = checked_field(d, "reading", str, w)
        out.verdict = verdict
        return out

    def plot(self, ax: Any = None) -> Any:
        """Bar chart of each form's three terms and total, log scale, beside the observed value.

        The method form of :func:`cvfl_sim.bounds.plotting.plot_bound`.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new pyplot-managed figure otherwise.

        Returns
        -------
        matplotlib.axes.Axes
        """
        from .plotting import plot_bound

        return plot_bound(self, ax=ax)


def _errors(run: RunResult, R: int, M: int, split: str) -> np.ndarray:
    """``(R, M + 1)`` realised errors per round (block 0 the server model's)."""
    e_emb = np.asarray(run.rounds["embedding_error"], dtype=np.float64)
    E = np.zeros((R, M + 1))
    E[:, 0] = np.asarray(run.rounds["server_model_error"], dtype=np.float64)
    if split == "party":
        by_party = run.rounds.get("embedding_error_by_party")
        if by_party is None or len(by_party) != R:
            raise ValueError(
                "the run has no per-party compression errors (saved by an older version): "
                "use split='equal' or split='max'"
            )
        E[:, 1:] = np.asarray(by_party, dtype=np.float64).reshape(R, M)
    else:
        E[:, 1:] = (e_emb / M if split == "equal" else e_emb)[:, None]
    return E


def _bound_per_round(
    values: np.ndarray | None,
    rounds: np.ndarray,
    R: int,
    whole: dict[int, np.ndarray] | None = None,
) -> tuple[np.ndarray, int] | None:
    """``(R, M + 1)`` per-round Lemma-1 bounds and how many rounds had one.

    Each round gets the mean of its probed steps' bounds (C4.5 at every probed step, C4.8 at
    round starts), or, where ``whole`` has the round (C4.9), the mean over every local step of
    the round; the rounds without a probe get the probed rounds' mean (an estimate there, not a
    bound).
    """
    if values is None:
        return None
    rows = np.isfinite(values).all(axis=1) & (rounds < R)
    if not rows.any():
        return None
    out = np.full((R, values.shape[1]), np.nan)
    for r in np.unique(rounds[rows]):
        full = (whole or {}).get(int(r))
        out[r] = full.mean(axis=0) if full is not None else values[rows & (rounds == r)].mean(0)
    probed = int(np.count_nonzero(~np.isnan(out[:, 0])))
    out[np.isnan(out[:, 0])] = np.nanmean(out, axis=0)
    return out, probed


def realised_term3_se(values: np.ndarray, rounds: np.ndarray, weights: np.ndarray) -> float:
    r"""An estimate of the standard error of a term 3 that sums realised values (one draw each).

    ``values[p]`` is draw ``p``'s term-3 quantity summed over the blocks, in round
    ``rounds[p]``: the probe's realised Lemma-1 left sides (the plug-in estimate), or each
    round's :math:`\sum_m H_m^2 G_m^2 \sum_{j \ne m} E_j` from its realised compression errors
    (the recovered form). Term 3 is :math:`\sum_{t < R} a_t Y_t`
    (:func:`cvfl_theory.bounds.compression_weights`), :math:`Y_t` the mean of round :math:`t`'s
    :math:`k_t` draws, and a round without a draw the mean of every draw (as
    :meth:`Lemma1Report.per_round` fills it, draws of rounds :math:`\ge R` included). So it is
    :math:`\sum_t c_t Y_t` over the rounds with draws, :math:`c_t = a_t + k_t A / N`
    (:math:`a_t = 0` for :math:`t \ge R`, :math:`A` the weights of the rounds without a draw,
    :math:`N` the draws).

    What it estimates: the spread of that sum about the sum of its rounds' conditional
    expectations (given the run before each round, whose dither and batch are fresh draws):
    those deviations are uncorrelated, so their variances add. Each round's is estimated by
    the sample variance :math:`s^2` of the :math:`Y_t` over the :math:`n` rounds, which also
    holds the spread of their conditional means; so with equal weights (Theorem 4.2, every
    round drawn) it is on average at least their mean, but it is an estimate from :math:`n`
    rounds; with unequal weights (Theorem 4.4's :math:`\eta_t`, an uneven fill) it can read
    low, when the variance is largest where the weight is. The variation between whole runs
    (other trajectories) is not in it. Returns :math:`s \sqrt{\sum_t c_t^2}`, ``nan``
    with fewer than two rounds with draws.

    Parameters
    ----------
    values : numpy.ndarray
        ``(N,)`` realised values.
    rounds : numpy.ndarray
        ``(N,)`` their rounds.
    weights : numpy.ndarray
        ``(R,)`` term 3's :math:`a_t` (:func:`cvfl_theory.bounds.compression_weights`).
    """
    a = np.asarray(weights, dtype=np.float64)
    R = a.size
    Z = np.asarray(values, dtype=np.float64)
    drawn = np.unique(rounds)
    if drawn.size < 2:
        return math.nan
    k = np.array([np.count_nonzero(rounds == t) for t in drawn], dtype=np.float64)
    Y = np.array([Z[rounds == t].mean() for t in drawn])
    without = np.ones(R, dtype=bool)
    without[drawn[drawn < R]] = False
    own = np.where(drawn < R, a[np.minimum(drawn, R - 1)], 0.0)
    c = own + k * float(a[without].sum()) / Z.size
    return float(np.std(Y, ddof=1) * np.sqrt(np.sum(c**2)))


def _later_steps(name: str, values: np.ndarray, lemma1: Any, R: int, Q: int) -> list[str]:
    """Why a Lemma-1 form is not a bound at the local steps after the round starts (``Q > 1``).

    C4.8 is evaluated at round starts only; C4.5 at every probed step, where its dithered form
    is an expectation at a point that itself depends on the round's dither (an estimate) and its
    realised form (biased compressors) bounds the step; C4.9 (the analytic model) bounds every
    local step of its rounds. Each must also have been evaluated at every local step it is
    charged to.
    """
    keep = np.isfinite(values).all(axis=1) & (lemma1.rounds < R)
    if name.startswith("sampled"):
        starts = {int(r) for r in lemma1.rounds[keep]}
        if starts and starts <= set(lemma1.sampled_rounds):
            return []  # C4.9 with C4.8 (sampled_later): every local step of every probed round
        return [f"charged to all {Q} local steps, proved at step 0 only"]
    out = []
    whole = lemma1.tight_rounds
    per_round = [
        Q if r in whole else len(np.unique(lemma1.steps[keep & (lemma1.rounds == r)]))
        for r in range(R)
    ]
    probed = [n for n in per_round if n]
    if min(probed) < Q:
        many = f"{min(probed)}" if min(probed) == max(probed) else f"{min(probed)}-{max(probed)}"
        out.append(f"evaluated at {many} of the {Q} local steps of a probed round")
    later = keep & (lemma1.steps > 0)
    if any(
        k not in ("realised", "dithered, drift") for k, ok in zip(lemma1.tight_kinds, later) if ok
    ):
        out.append("an expectation at points that depend on the round's dither after its start")
    return out


class _SharedArgs(TypedDict):
    """The keyword arguments :func:`bound_vs_observed` passes to both theorems (C4.2, C4.4)."""

    Q: int
    L: float
    sigma2: Sequence[float]
    B: int
    L_m: Sequence[float]
    c_opt: float
    c_var: float
    c_comp: float


class _Term3Args(TypedDict, total=False):
    """One form of the theorems' term 3: ``H, G, E`` (as recovered) or a measured ``lemma1``."""

    H: Sequence[float]
    G: Sequence[float]
    E: np.ndarray
    lemma1: np.ndarray


def bound_vs_observed(
    run: RunResult,
    constants: Constants,
    *,
    split: str = "party",
    reading: str = "chain",
    lemma1: Lemma1Report | None = None,
    c_opt: float = C_OPT,
    c_var: float = C_VAR,
    c_comp: float = C_COMP,
) -> BoundCheck:
    r"""Evaluate Theorem 4.2 or 4.4 (as recovered) on a run and compare with the observed gradients.

    A constant step size gives Theorem 4.2 (C4.2), compared with the *average* recorded
    :math:`\|\nabla F\|^2`. A step that varies between rounds gives Theorem 4.4 (C4.4,
    :func:`cvfl_theory.bounds.theorem_4_4`), a bound on the *minimum*, compared with the smallest
    recorded :math:`\|\nabla F\|^2`; its :math:`F(\Theta^0) - F^\star` is taken as
    :math:`F(\Theta^0)` (the losses here are non-negative, so :math:`F^\star \ge 0`: an upper
    bound on the gap).

    Inputs taken from the run: :math:`\eta` (the ``rounds["lr"]`` log),
    ``R`` = number of logged rounds, ``Q``, ``B = config["batch_size"]``, ``T = R Q``;
    :math:`F(\Theta^0) - F(\Theta^T)` from the first and last ``train_loss`` (clamped at 0);
    per-round compression errors from the ``rounds`` log. These are the *realised* errors of
    each round, used in place of their expectations :math:`E_m^{t_0}` (C2). ``split`` says how
    the parties' errors enter:

    - ``"party"`` (default): each party's own logged :math:`\|\varepsilon_m^{t_0}\|_F^2`
      (``rounds["embedding_error_by_party"]``);
    - ``"equal"``: the total shared equally, :math:`E_j = e/M` -- exact for the sum, an
      approximation for :math:`\sum_{j\ne m}E_j` (for runs saved without the per-party log);
    - ``"max"``: every party charged the whole total ``e`` -- a guaranteed over-estimate of
      every :math:`\sum_{j\ne m}E_j` (for ``M >= 2``).

    The observed side is the average of ``grad_norm_sq`` over the evaluated rounds
    :math:`t_0 < R` (all of them when the run used ``eval_every=1``; otherwise a subsample, said
    in the table).

    Parameters
    ----------
    run : RunResult
        A run with ``track_grad_norm=True``.
    constants : Constants
        From :func:`estimate_constants` (same data set and configuration).
    split : {"party", "equal", "max"}
        Each party's logged error, or the parties' total shared equally or charged to each.
    reading : {"chain", "chain-frobenius", "theta-hessian (double-counts G)"}
        Which :math:`H_m, G_m` term 3 uses (:data:`READINGS`): ``"chain"`` is Lemma 1 (operator
        norms); the other two exist only to show what the old reading cost.
    lemma1 : Lemma1Report, optional
        The same run's Lemma-1 probe: adds the tight bound (a form where it is one: ``Q = 1``
        and every round start probed, or no compression error in any round; else an estimate,
        with the reason in its note) and the plug-in estimate with the measured left side (an
        estimate, not a bound), and (``reading="chain"``) raises
        :math:`H_m, G_m` to the probe's maxima.
    c_opt, c_var, c_comp : float
        Constants of C4.2 (defaults as recovered: 4, 6, 92).

    Returns
    -------
    BoundCheck
        A table (quantity, value, note) with the hypotheses first, then ``terms``, ``forms``,
        ``estimates``, ``observed``, ``ratio`` and the verdict in words. Where a hypothesis fails
        (the step condition with the run's own constants, say) the verdict is "does not apply"
        with the numbers, whatever the ratio.

    Raises
    ------
    ValueError
        If the run did not record gradient norms or has no rounds, or the constants do not
        match it.
    """
    if not isinstance(run, RunResult):
        raise TypeError(f"run must be a RunResult, got {type(run).__name__}")
    if not isinstance(constants, Constants):
        raise TypeError(f"constants must be Constants, got {type(constants).__name__}")
    if split not in ("party", "equal", "max"):
        raise ValueError(f"split must be 'party', 'equal' or 'max', got {split!r}")
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {sorted(READINGS)}, got {reading!r}")
    if lemma1 is not None and not isinstance(lemma1, Lemma1Report):
        raise TypeError(f"lemma1 must be a Lemma1Report, got {type(lemma1).__name__}")
    hist = run.history
    if not hist or any(row.get("grad_norm_sq") is None for row in hist):
        raise ValueError(
            "the run has no recorded gradient norms: train it with "
            "CVFLConfig(track_grad_norm=True) (and eval_every=1 for every round) to compare "
            "the C4.2 bound with the observed ||grad F||^2"
        )
    lrs = np.asarray(run.rounds.get("lr", []), dtype=np.float64)
    R = int(lrs.size)
    if R == 0:
        raise ValueError("the run's per-round log is empty (no rounds)")
    fixed_step = bool(np.allclose(lrs, lrs[0], rtol=1e-12, atol=0.0))
    eta = float(lrs[0])
    Q = int(run.config["Q"])
    B = int(run.config["batch_size"])
    M = len(constants.G) - 1
    if int(run.dataset.get("n_parties", M)) != M:
        raise ValueError(
            f"constants are for M={M} parties but the run has {run.dataset['n_parties']}; "
            "estimate them on the run's own data set"
        )
    if constants.B != B:
        raise ValueError(
            f"constants were estimated with B={constants.B} but the run used batch_size={B}"
        )
    if lemma1 is not None and lemma1.left.shape[1] != M + 1:
        raise ValueError(f"lemma1 has {lemma1.left.shape[1] - 1} parties, the run {M}")
    E = _errors(run, R, M, split)
    f0, fT = float(hist[0]["train_loss"]), float(hist[-1]["train_loss"])
    consts = (
        constants.with_lemma1(lemma1) if lemma1 is not None and reading == "chain" else constants
    )
    theorem = "4.2" if fixed_step else "4.4"
    hypotheses = theorem_hypotheses(
        theorem,
        run,
        etas=lrs.tolist(),
        Q=Q,
        L=constants.L,
        L_m=constants.L_m,
        proved=constants.proved,
    )
    h_name, g_name = READINGS[reading]
    common: _SharedArgs = {
        "Q": Q,
        "L": constants.L,
        "sigma2": constants.sigma2,
        "B": B,
        "L_m": constants.L_m,
        "c_opt": c_opt,
        "c_var": c_var,
        "c_comp": c_comp,
    }
    term3: dict[str, _Term3Args] = {
        "recovered": {"H": getattr(consts, h_name), "G": getattr(consts, g_name), "E": E}
    }
    notes = {"recovered": f"H^2 G^2 sum E ({reading})"}
    plug: dict[str, _Term3Args] = {}
    if lemma1 is not None:
        probed = len(np.unique(lemma1.rounds[lemma1.rounds < R]))
        level = f"; all at once with probability >= {1 - (lemma1.delta or 0.0):g}"
        for name, values, what in (
            (
                "tight (C4.5, ours)",
                lemma1.tight,
                "tight bound at the probed steps"
                + (
                    "; C4.9 (ours, the drift) at every local step of a probed round"
                    if lemma1.tight_rounds
                    else ""
                ),
            ),
            (
                "sampled (C4.8, ours)",
                lemma1.sampled,
                "confidence bound at the round starts"
                + (
                    "; C4.9 (ours, the drift) at every local step of a probed round"
                    if lemma1.sampled_rounds
                    else ""
                ),
            ),
        ):
            whole = lemma1.tight_rounds if name.startswith("tight") else lemma1.sampled_rounds
            per_round = _bound_per_round(values, lemma1.rounds, R, whole)
            if per_round is None:
                continue
            # a bound where it was evaluated at every step it is charged to and is a bound at
            # each, or where no round had an error (no compression: Lemma 1's left side is 0
            # at every step); else an estimate
            per_values, starts = per_round
            assert values is not None
            gaps = []
            if E.any():
                if starts < R:
                    gaps.append(f"{starts} of {R} rounds probed, the others at their mean")
                if name.startswith("tight") and "realised draw" in lemma1.tight_kinds:
                    gaps.append("the realised errors of the run's dither draw, not the expectation")
                if Q > 1:
                    gaps += _later_steps(name, values, lemma1, R, Q)
            (plug if gaps else term3)[name] = {"lemma1": per_values}
            notes[name] = (
                what
                + (level if name.startswith("sampled") else "")
                + (f"; an estimate here: {'; '.join(gaps)}" if gaps else "")
            )
        plug["plug-in (measured Lemma 1)"] = {"lemma1": lemma1.per_round(R)}
        notes["plug-in (measured Lemma 1)"] = (
            f"realised left sides, one dither draw per probed step ({probed} of {R} rounds "
            "probed, the others at their mean): an estimate of the expectation, not a bound"
        )
    obs_rows = [row for row in hist if int(row["round"]) < R]
    norms = [float(row["grad_norm_sq"]) for row in obs_rows]
    sub = "all rounds" if len(obs_rows) == R else f"subsample: {len(obs_rows)} of {R} rounds"

    def evaluate(kw: _Term3Args) -> BoundTerms:
        if fixed_step:
            return theorem_4_2(F_gap=max(0.0, f0 - fT), eta=eta, T=R * Q, **common, **kw)
        return theorem_4_4(F_gap=max(0.0, f0), etas=lrs, **common, **kw)

    forms = {name: evaluate(kw) for name, kw in term3.items()}
    estimates = {name: evaluate(kw) for name, kw in plug.items()}

    weights = compression_weights(Q, lrs, fixed_step, c_comp)
    rec = term3["recovered"]
    realised_se = {
        "recovered": realised_term3_se(
            compression_term(E, np.asarray(rec["H"]), np.asarray(rec["G"])), np.arange(R), weights
        )
    }
    if lemma1 is not None:
        realised_se["plug-in (measured Lemma 1)"] = realised_term3_se(
            lemma1.left.sum(axis=1), lemma1.rounds, weights
        )
    if fixed_step:
        observed = float(np.mean(norms))
        gap_row = ["F(0) - F(T)", max(0.0, f0 - fT), f"train losses {f0:.6g} -> {fT:.6g}"]
        term_notes = (
            f"{c_opt} [F(0)-F(T)]/(eta T)",
            f"{c_var} eta Q L sum sigma_m^2 / B",
            f"{c_comp} Q^2/R sum_t0 sum_m",
        )
        obs_row = ["observed avg ||grad F||^2", observed, sub]
    else:
        observed = float(np.min(norms))
        gap_row = ["F(0) - F*", max(0.0, f0), f"F(0) = {f0:.6g}, F* >= 0 (non-negative loss)"]
        term_notes = (
            f"{c_opt} [F(0)-F*] / sum_t eta",
            f"{c_var} Q L sum sigma_m^2/B sum_t eta^2 / sum_t eta",
            f"{c_comp} Q^3 sum_t0 eta sum_m",
        )
        obs_row = ["observed min ||grad F||^2", observed, sub]
    terms = forms["recovered"]
    ratios = {
        k: (t.total / observed if observed > 0 else math.inf)
        for k, t in {**forms, **estimates}.items()
    }
    ratio = ratios["recovered"]
    if not hypotheses.applies:
        verdict = f"does not apply: {hypotheses.why}"
        verdict_word = "does not apply"
    elif ratio >= 1:
        verdict_word = "holds"
        verdict = "the recovered bound holds on this run" + (
            "" if hypotheses.certified else " (with estimated constants)"
        )
    else:
        verdict_word = "below observed"
        verdict = "BOUND BELOW OBSERVED: the recovered constants or form fail on this run"
    se = realised_se["recovered"]
    if hypotheses.applies and math.isnan(se):
        verdict += " (term 3's realised sum has no standard error: fewer than two rounds)"
    elif hypotheses.applies and abs(terms.total - observed) < 2 * se:
        verdict += (
            f", by less than two standard errors of term 3's realised sum (|{terms.total:.4g}"
            f" - {observed:.4g}| < 2 x {se:.3g}): not a clear verdict (the observed value and "
            "term 1 are one run's, with noise of their own not counted here)"
        )
    rows: list[list[Any]] = [
        [f"hypothesis: {h.name}", h.status, h.detail] for h in hypotheses.hypotheses
    ]
    rows += [
        [
            f"Theorem {theorem}",
            "applies" if hypotheses.applies else "does not apply",
            hypotheses.why
            or ("proved constants" if hypotheses.certified else "estimated constants"),
        ],
        [
            "eta" if fixed_step else "eta (first, last)",
            eta if fixed_step else f"{lrs[0]:.4g}, {lrs[-1]:.4g}",
            "fixed" if fixed_step else "varying",
        ],
        ["Q, B, R, T", f"{Q}, {B}, {R}, {R * Q}", "T = R Q"],
        gap_row,
        [
            "L, max L_m",
            f"{constants.L:.4g}, {max(constants.L_m):.4g}",
            "proved" if constants.proved else "estimated",
        ],
        ["mean_t0 sum_m E_m", float(E.sum(axis=1).mean()), f"realised errors, split={split}"],
        ["term 1 optimization", terms.optimization, term_notes[0]],
        ["term 2 variance", terms.variance, term_notes[1]],
    ]
    for name, t in {**forms, **estimates}.items():
        share = t.compression / t.total if t.total > 0 else 0.0
        kind = "bound" if name in forms else "estimate"
        se_note = ""
        if name in realised_se:
            what = "left sides" if name in estimates else "compression errors"
            se_note = (
                f"; standard error {realised_se[name]:.3g} (the realised {what}' spread over "
                "the rounds)"
            )
        rows += [
            [f"term 3 [{name}]", t.compression, f"{term_notes[2]} {notes[name]}"],
            [f"{kind} [{name}]", t.total, f"term 3 share {share:.3g}{se_note}"],
            [f"ratio {kind}/observed [{name}]", ratios[name], ""],
        ]
    rows += [obs_row, ["verdict (recovered form)", verdict_word, verdict]]
    out = BoundCheck(
        ["quantity", "value", "note"],
        rows,
        title=f"Theorem {theorem} (C{theorem}, constants as recovered) vs the run "
        f"({'proved' if constants.proved else 'estimated'} constants, {reading} reading of "
        "Lemma 1)",
    )
    out.terms, out.forms, out.estimates = terms, forms, estimates
    out.realised_se = realised_se
    out.hypotheses = hypotheses
    out.observed, out.ratio, out.ratios = observed, ratio, ratios
    out.theorem, out.reading, out.verdict = theorem, reading, verdict
    return out
