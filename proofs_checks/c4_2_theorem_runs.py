"""C4.2: Theorem 4.2 (as recovered) on small analytic runs, with proved constants.

The analytic model (linear parties, linear softmax head; :mod:`cvfl_sim.bounds.analytic_constants`) has
constants that are proved upper bounds over every point the run visits. The check trains two
small runs on breast-cancer with a step inside the theorem's condition (``eta <= 1/(16 Q max(L, L_m))``,
checked after the run with the run's own ``L``), evaluates
:func:`cvfl_theory.bounds.theorem_4_2` term by term and compares the bound with the observed
average ``||grad F(Theta^t0)||^2`` over every round start:

- identity compressors, ``Q = 1`` (term 3 is 0): the main pair -- this bound is within a small
  factor of the observation, so a bound wrong by 100x is caught;
- 4-bit dithered scalar quantization, ``Q = 2``: term 3 from Lemma 1's right side.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .result import CheckResult, Comparison

ETA = 0.001
"""Step for Q = 1 (``ETA / Q`` for Q local steps): inside ``1/(16 Q max(L, L_m))`` on these runs."""


def _bound(compressor: object, Q: int) -> tuple[Any, float, dict[str, float]]:
    import torch

    from cvfl_sim import CVFLConfig, load_dataset
    from cvfl_sim.bounds.analytic_constants import analytic_constants, train_recorded
    from cvfl_theory.bounds import theorem_4_2

    torch.set_num_threads(1)
    ds = load_dataset("breast-cancer")
    B = 57
    eta = ETA / Q
    cfg = CVFLConfig(
        Q=Q,
        lr=eta,
        epochs=2,
        batch_size=B,
        parties_model="linear",
        embedding_size=4,
        compressor=compressor,
        eval_every=1,
        track_grad_norm=True,
        dtype="float64",
    )
    res, traj = train_recorded(ds, cfg)
    c = analytic_constants(ds, traj, B)
    R = len(res.rounds["lr"])
    M = ds.n_parties
    E = np.zeros((R, M + 1))
    E[:, 0] = res.rounds["server_model_error"]
    E[:, 1:] = np.asarray(res.rounds["embedding_error_by_party"], dtype=np.float64)
    gap = max(0.0, res.history[0]["train_loss"] - res.history[-1]["train_loss"])
    t = theorem_4_2(
        F_gap=gap,
        eta=eta,
        T=R * Q,
        Q=Q,
        L=c.L,
        sigma2=c.sigma2,
        B=B,
        H=c.H,
        G=c.G,
        E=E,
        L_m=c.L_m,
    )
    observed = float(np.mean([h["grad_norm_sq"] for h in res.history if h["round"] < R]))
    info = {
        "L": c.L,
        "L_m": max(c.L_m),
        "eta": eta,
    }
    return t, observed, info


def compute() -> dict[str, tuple[Any, float, dict[str, float]]]:
    """Both runs' :class:`~cvfl_theory.bounds.BoundTerms`, observed value and numbers."""
    from cvfl_theory.compressors import Identity, ScalarQuantizer

    return {
        "identity Q=1": _bound(Identity(), 1),
        "scalar 4-bit Q=2": _bound(ScalarQuantizer(4, range="minmax-tensor"), 2),
    }


def run_check(scale: float = 1.0, runs: dict | None = None) -> CheckResult:
    """The check, with every bound multiplied by ``scale`` (``scale < 1`` must make it fail).

    ``runs`` reuses the output of :func:`compute`.
    """
    runs = compute() if runs is None else runs
    (t_id, obs_id, _), (t_sq, obs_sq, _) = (
        runs["identity Q=1"],
        runs["scalar 4-bit Q=2"],
    )
    total_id = scale * t_id.total
    total_sq = scale * t_sq.total
    for name, (t, obs, info) in runs.items():
        print(
            f"  C4.2 {name}: eta={info['eta']:.3g}, L={info['L']:.4g}, max L_m={info['L_m']:.4g};"
            f" terms opt {scale * t.optimization:.4g}, var {scale * t.variance:.4g}, comp "
            f"{scale * t.compression:.4g}; bound {scale * t.total:.4g} vs observed {obs:.4g} "
            f"(ratio {scale * t.total / obs:.4g})"
        )
    return CheckResult(
        label="C4.2",
        claim="Theorem 4.2 (as recovered) with proved analytic constants >= observed avg "
        "||grad F||^2 (identity Q=1 main pair; scalar 4-bit Q=2 comparison)",
        method="two breast-cancer runs of the analytic model (linear parties + head, float64), "
        "constants proved over every visited point (cvfl_sim.bounds.analytic_constants)",
        symbolic=None,
        empirical=obs_id,
        theoretical=total_id,
        tolerance=0.0,
        relation="<=",
        note=f"identity: bound/observed {total_id / obs_id:.3g} (terms {t_id.optimization:.3g}"
        f" + {t_id.variance:.3g} + {t_id.compression:.2g}); scalar 4-bit: bound/observed "
        f"{total_sq / obs_sq:.3g}, term 3 share {t_sq.compression / t_sq.total:.3g}",
        comparisons=(
            Comparison("scalar 4-bit Q=2: observed <= bound", obs_sq, total_sq, 0.0, "<="),
            Comparison(
                "identity: step condition eta <= 1/(16 Q max(L, L_m))",
                float(t_id.step_ok),
                1.0,
                0.0,
            ),
            Comparison(
                "scalar: step condition eta <= 1/(16 Q max(L, L_m))", float(t_sq.step_ok), 1.0, 0.0
            ),
        ),
    )


def check() -> CheckResult:
    return run_check(1.0)
