r"""The hypotheses of a convergence theorem, evaluated on a run before its bound is read (C3, C4).

A bound says nothing outside its hypotheses. :func:`theorem_hypotheses` checks those of
Theorem 4.2 (C4.2) or 4.4 (C4.4) on a run with the constants the check uses, and
:class:`Applicability` says *applies*, or *does not apply* with the numbers:

- the step: fixed for 4.2 (varying for 4.4), and the step condition
  :math:`\eta^{t_0} \le 1/(16 Q \max(L, \max_m L_m))` at every round (as recovered);
- C3.1 smoothness: the loss must have a Lipschitz gradient; a model with ReLU (or any kink) has
  none, and for a model other than the analytic one (linear parties, linear softmax head) the
  constants are estimates at visited points, not proved;
- C3.2 unbiased batch gradients: the simulator's batches are uniform ``B``-subsets (a shuffled
  epoch cut into chunks), so each batch gradient is unbiased;
- C3.3 bounded variance and C3.4–C3.5 the embedding Hessian and Jacobian bounds: finite, proved
  (analytic model) or estimated.

Statuses are ``"holds"`` (proved on the run), ``"estimated"`` (holds with estimated constants)
and ``"fails"``. A theorem *applies* when no hypothesis fails; it is *certified* when every one
holds with proved constants.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

from cvfl_theory.bounds import STEP_FACTOR

from .analytic_constants import is_analytic

__all__ = [
    "Hypothesis",
    "Applicability",
    "theorem_hypotheses",
    "step_condition",
    "model_smoothness",
    "STATUSES",
]

STATUSES = ("holds", "estimated", "fails")
"""What a hypothesis can be on a run: proved, holding with estimated constants, or failing."""

_LINEAR_OPS = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool2d,
    nn.Flatten,
    nn.Identity,
)
_SMOOTH_ACTIVATIONS = (nn.Tanh, nn.Sigmoid, nn.Softplus, nn.GELU, nn.SiLU, nn.GRU, nn.LSTM)
_KINKED = (
    nn.ReLU,
    nn.LeakyReLU,
    nn.ReLU6,
    nn.ELU,
    nn.Hardtanh,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.AdaptiveMaxPool2d,
)
_BUILT_IN = {"linear": "linear", "mlp": "kinked", "cnn": "kinked", "gru": "smooth"}


@dataclass(frozen=True)
class Hypothesis:
    """One hypothesis of a theorem, evaluated on a run.

    Attributes
    ----------
    name : str
        What it is, e.g. ``"step condition (C4.2)"``.
    status : {"holds", "estimated", "fails"}
        Proved on the run, holding with estimated constants, or failing.
    detail : str
        The numbers, e.g. ``"eta = 0.02 > 1/(16*5*1.298) = 0.00963"``.
    """

    name: str
    status: str
    detail: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


@dataclass(frozen=True)
class Applicability:
    """The hypotheses of one theorem on one run, and whether the theorem applies.

    Attributes
    ----------
    theorem : str
        ``"4.2"`` or ``"4.4"``.
    hypotheses : tuple of Hypothesis
        Every hypothesis checked.
    """

    theorem: str
    hypotheses: tuple[Hypothesis, ...]

    @property
    def applies(self) -> bool:
        """No hypothesis fails."""
        return all(h.status != "fails" for h in self.hypotheses)

    @property
    def certified(self) -> bool:
        """Every hypothesis holds with proved constants."""
        return all(h.status == "holds" for h in self.hypotheses)

    @property
    def why(self) -> str:
        """The failing hypotheses with their numbers (empty when the theorem applies)."""
        return "; ".join(f"{h.name}: {h.detail}" for h in self.hypotheses if h.status == "fails")

    @property
    def verdict(self) -> str:
        """``"applies"``, ``"applies (estimated constants)"`` or ``"does not apply: ..."``."""
        if not self.applies:
            return f"does not apply: {self.why}"
        return "applies" if self.certified else "applies (estimated constants)"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: ``applies``, ``certified``, ``why`` and every hypothesis."""
        return {
            "theorem": self.theorem,
            "applies": self.applies,
            "certified": self.certified,
            "why": self.why,
            "hypotheses": [
                {"name": h.name, "status": h.status, "detail": h.detail} for h in self.hypotheses
            ],
        }

    def rows(self) -> list[list[Any]]:
        """``[name, status, detail]`` per hypothesis (for a table)."""
        return [[h.name, h.status, h.detail] for h in self.hypotheses]


def step_condition(
    etas: Sequence[float], Q: int, L: float, L_m: Sequence[float] | None, proved: bool
) -> Hypothesis:
    r"""The recovered step condition :math:`\eta^{t_0} \le 1/(16 Q \max(L, \max_m L_m))`.

    Examples
    --------
    >>> step_condition([0.02], 5, 1.298, None, True).detail
    'eta = 0.02 > 1/(16*5*1.298) = 0.00963 (as recovered)'
    """
    L_all = max([float(L), *(float(v) for v in (L_m or ()))])
    limit = 1.0 / (STEP_FACTOR * Q * L_all) if L_all > 0 else math.inf
    worst = float(np.max(np.asarray(etas, dtype=np.float64)))
    formula = f"1/({STEP_FACTOR:g}*{Q}*{L_all:.4g}) = {limit:.3g}"
    if worst > limit * (1 + 1e-12):
        which = "eta" if len(etas) == 1 or np.ptp(etas) == 0 else "max eta"
        return Hypothesis(
            "step condition (C4.2)", "fails", f"{which} = {worst:.3g} > {formula} (as recovered)"
        )
    return Hypothesis(
        "step condition (C4.2)",
        "holds" if proved else "estimated",
        f"max eta = {worst:.3g} <= {formula}" + ("" if proved else " with estimated L"),
    )


def _kind_of(parties: Sequence[nn.Module], server: nn.Module) -> str:
    """``"linear"``, ``"smooth"``, ``"kinked"`` or ``"unknown"`` for a run's modules.

    ``"linear"`` only for the toolkit's own linear models (a custom module may apply a function
    in its ``forward`` that no submodule shows); otherwise from the leaf modules.
    """
    if is_analytic(parties, server):
        return "linear"
    leaves = [m for net in [*parties, server] for m in net.modules() if not list(m.children())]
    if any(isinstance(m, _KINKED) for m in leaves):
        return "kinked"
    if all(isinstance(m, _LINEAR_OPS + _SMOOTH_ACTIVATIONS) for m in leaves):
        return "smooth"
    return "unknown"


def model_smoothness(run_or_models: Any) -> tuple[str, str]:
    """``(status, detail)`` of C3.1 for a run's models: the loss has a Lipschitz gradient or not.

    Linear parties and head (the analytic model): ``"holds"``. Smooth activations only:
    ``"estimated"`` (the constants are estimates). ReLU or any other kink: ``"fails"``.
    ``run_or_models`` is a :class:`~cvfl_sim.vfl.results.RunResult` (its models, or its
    configuration's model names when it carries none) or ``(parties, server)``.
    """
    models = getattr(run_or_models, "models", run_or_models)
    if isinstance(models, dict):
        kind = _kind_of(list(models["parties"]), models["server"])
    elif isinstance(models, (tuple, list)) and len(models) == 2:
        kind = _kind_of(list(models[0]), models[1])
    else:  # a loaded result: the configuration's names
        cfg = getattr(run_or_models, "config", {}) or {}
        kinds = {
            _BUILT_IN.get(str(cfg.get(k)), "unknown") for k in ("parties_model", "server_model")
        }
        kind = next((k for k in ("kinked", "unknown", "smooth") if k in kinds), "linear")
    if kind == "linear":
        return "holds", "linear parties and softmax head: L, L_m proved on the run"
    if kind == "smooth":
        return "estimated", "smooth activations: L, L_m estimated at the visited points"
    if kind == "kinked":
        return (
            "fails",
            "ReLU (or another kink) in the models: the gradient jumps where a unit changes sign, "
            "so no L exists (the L used is a local estimate)",
        )
    return "estimated", "custom modules: smoothness not checked, L estimated"


def theorem_hypotheses(
    theorem: str,
    run: Any,
    *,
    etas: Sequence[float],
    Q: int,
    L: float,
    L_m: Sequence[float] | None,
    proved: bool,
) -> Applicability:
    r"""Evaluate the hypotheses of Theorem ``theorem`` (``"4.2"`` or ``"4.4"``) on a run.

    Parameters
    ----------
    theorem : {"4.2", "4.4"}
        The theorem.
    run : RunResult or (parties, server)
        The run (its models decide C3.1).
    etas : sequence of float
        The step of every round.
    Q : int
        Local steps per round.
    L, L_m : float, sequence of float
        The smoothness constants the check uses.
    proved : bool
        Whether the constants are proved (analytic model) or estimated.

    Returns
    -------
    Applicability
    """
    if theorem not in ("4.2", "4.4"):
        raise ValueError(f"theorem must be '4.2' or '4.4', got {theorem!r}")
    eta = np.asarray(etas, dtype=np.float64)
    fixed = bool(np.all(eta == eta[0]))
    hyps = []
    if theorem == "4.2":
        hyps.append(
            Hypothesis(
                "fixed step (C4.2)",
                "holds" if fixed else "fails",
                f"eta = {eta[0]:.4g} in every round"
                if fixed
                else f"eta varies from {eta.min():.3g} to {eta.max():.3g}",
            )
        )
    hyps.append(step_condition(list(eta), Q, L, L_m, proved))
    status, detail = model_smoothness(run)
    if status != "fails" and not proved:
        status = "estimated"
    hyps.append(Hypothesis("C3.1 L-smooth loss", status, detail))
    hyps.append(
        Hypothesis(
            "C3.2 unbiased batch gradients",
            "holds",
            "each batch is a uniform B-subset (a shuffled epoch cut into chunks)",
        )
    )
    const = "proved bounds over the run's points" if proved else "estimates at visited points"
    hyps.append(
        Hypothesis("C3.3-C3.5 sigma_m^2, H_m, G_m", "holds" if proved else "estimated", const)
    )
    return Applicability(theorem, tuple(hyps))
