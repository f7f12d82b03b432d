"""C4.3: with eta = 1/sqrt(T) and the C5 table's bits, the average ||grad F||^2 falls like T^(-1/2).

Runs of the analytic model on breast-cancer (``cvfl_sim.experiments.schedule_check.rate_experiment``) at
``T`` = 16, 40, 112, 512 local iterations (1.5 decades), three seeds each, with ``eta = 1/sqrt(T)``
and a dithered scalar quantizer at ``q_min(T)`` bits (``cvfl_theory.bounds.c5_parameters``: the
fewest bits whose exact per-round error is at most ``1/sqrt(T)`` per unit range). The log-log
slope of the average ``||grad F(Theta^t0)||^2`` against ``T`` is fitted by OLS over all 12 points
with a 95% t-interval; the check passes when the interval contains -1/2. A failure is reported
with its numbers (the grid and seeds are fixed, not tuned).
"""

from __future__ import annotations

from .result import CheckResult

TS = (16, 40, 112, 512)
SEEDS = (0, 1, 2)


def check() -> CheckResult:
    import torch

    from cvfl_sim.experiments.schedule_check import rate_experiment

    torch.set_num_threads(1)
    res = rate_experiment(Ts=TS, seeds=SEEDS)
    f = res.fit
    print(
        f"  C4.3 {f}; bits per T: "
        + ", ".join(f"{r['T']}: {r['bits']}" for r in res.rows[:: len(SEEDS)])
    )
    return CheckResult(
        label="C4.3",
        claim="eta = 1/sqrt(T), q_min(T) bits: slope of log avg ||grad F||^2 vs log T has a 95% "
        "CI containing -1/2",
        method=f"analytic model on breast-cancer, T = {TS}, seeds {SEEDS}; OLS with t-interval "
        "(cvfl_sim.experiments.schedule_check)",
        symbolic=None,
        empirical=f.slope,
        theoretical=-0.5,
        tolerance=f.high - f.slope,
        relation="==",
        note=f"slope {f.slope:.4f}, se {f.se:.4f}, CI [{f.low:.4f}, {f.high:.4f}] over {f.n} runs",
    )
