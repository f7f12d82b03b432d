"""C4.4: a diminishing step with summable eta*E keeps decreasing; a fixed coarse compressor stalls.

``cvfl_sim.experiments.schedule_check.floor_experiment`` on the analytic model (breast-cancer, ``T = 1000``
rounds, ``Q = 1``, one seed), both arms with ``eta = 0.5 (t0 + 1)^(-3/4)`` (sum eta = inf,
sum eta^2 < inf):

- *summable*: bits per round from ``cvfl_theory.bounds.bits_schedule`` so that
  ``eta E <= 1e-3 (t0 + 1)^-2`` per unit range -- Theorem 4.4's condition;
- *fixed-rounding*: a fixed 1-bit scalar quantizer on [-4, 4] with deterministic rounding, so
  ``sum eta E = inf``.

The window means of ``||grad F||^2`` over log-spaced windows are fitted (log-log OLS) over the last
five windows. Pass: the summable arm's slope CI lies below 0 (it keeps decreasing) and the fixed
arm's does not (no significant decrease: a floor). The dithered fixed 1-bit quantizer, unbiased,
keeps decreasing (see ``cvfl reproduce schedules``): the condition is sufficient, not necessary.
"""

from __future__ import annotations

from .result import CheckResult, Comparison


def check() -> CheckResult:
    import torch

    from cvfl_sim.experiments.schedule_check import floor_experiment

    torch.set_num_threads(1)
    res = floor_experiment(T=1000, seeds=(0,), arms=("summable", "fixed-rounding"))
    s, f = res.late_fits["summable"], res.late_fits["fixed-rounding"]
    print(
        f"  C4.4 summable: {s}; sum eta E {res.sum_eta_E['summable']:.4g}; bits {res.bits['summable']}"
    )
    print(f"  C4.4 fixed-rounding: {f}; sum eta E {res.sum_eta_E['fixed-rounding']:.4g}")
    return CheckResult(
        label="C4.4",
        claim="diminishing step: summable eta*E keeps ||grad F||^2 decreasing (late slope CI < 0); "
        "a fixed 1-bit rounding quantizer stalls (late slope CI reaches 0)",
        method="analytic model on breast-cancer, T = 1000, window means over 10 log-spaced "
        "windows, OLS slope over the last 5 (cvfl_sim.experiments.schedule_check)",
        symbolic=None,
        empirical=s.high,
        theoretical=0.0,
        tolerance=0.0,
        relation="<=",
        note=f"summable late slope {s.slope:.3f} CI [{s.low:.3f}, {s.high:.3f}], last window "
        f"{res.curves['summable'][-1]:.4g}; fixed-rounding late slope {f.slope:.3f} CI "
        f"[{f.low:.3f}, {f.high:.3f}], last window {res.curves['fixed-rounding'][-1]:.4g}",
        comparisons=(Comparison("fixed-rounding late slope CI high >= 0", f.high, 0.0, 0.0, ">="),),
    )
