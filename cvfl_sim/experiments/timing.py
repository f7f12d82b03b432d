r"""The wall-clock time model of the paper's Table 5 (C7).

Each local iteration costs ``t_compute`` seconds (10 ms in the paper) and each global round one
round trip ``t_comm`` (1 ms cluster, 10 ms LAN, 50 ms region, 200 ms globe):

.. math:: T_{\text{target}} = R_{\text{target}} \,(Q\, t_{\text{compute}} + t_{\text{comm}}).
"""

from __future__ import annotations

import math

__all__ = ["LATENCIES", "T_COMPUTE", "time_to_target"]

T_COMPUTE = 0.010
"""Seconds per local iteration (C7)."""

LATENCIES = {"cluster": 0.001, "LAN": 0.010, "region": 0.050, "globe": 0.200}
"""Round-trip times of C7, seconds."""


def time_to_target(rounds: float, Q: int, t_comm: float, t_compute: float = T_COMPUTE) -> float:
    r"""Wall time :math:`R (Q t_c + t_{comm})` to reach a target after ``rounds`` rounds (C7).

    ``rounds`` may be ``inf`` (target never reached), which gives ``inf``.

    Examples
    --------
    >>> time_to_target(100, Q=10, t_comm=0.2)
    30.0
    """
    if Q < 1:
        raise ValueError(f"Q must be >= 1, got {Q}")
    if t_comm < 0 or t_compute < 0:
        raise ValueError("t_comm and t_compute must be >= 0")
    if math.isinf(rounds):
        return math.inf
    return round(rounds * (Q * t_compute + t_comm), 12)
