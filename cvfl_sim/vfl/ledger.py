r"""The exact bit ledger of C-VFL (C6).

Every message of Algorithm 1 (C1) is counted in payload bits, as reported by the compressor that
produced it (``compressor.payload_bits(shape)``):

- upload of party :math:`m`: :math:`U_m = \mathrm{bits}(C_m(h_m))` for the ``(B, P_m)`` embedding;
- download to party :math:`m`: :math:`\sum_{j \ne m} U_j + \mathrm{bits}(C_0(\theta_0))`;
- per round: :math:`M \sum_m U_m + M\,\mathrm{bits}(C_0(\theta_0))`.

Beside it the authors' plotting formula :func:`paper_cost_model`,
:math:`b\,(2 P B M^2 + |\theta_0| M)` per round (equal :math:`P_m = P`), so the paper's x-axes
can be reproduced and the difference shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RoundBits", "BitLedger", "paper_cost_model", "round_bits", "nominal_bits"]


def nominal_bits(c: Any) -> float:
    """Nominal bits per component ``b`` of a compressor (for the paper's cost model, C6).

    ``bits`` from its configuration, ``r`` for :class:`Identity` (32).
    """
    cfg = c.config() if hasattr(c, "config") else {}
    for key in ("bits", "r"):
        if cfg.get(key) is not None:
            return float(cfg[key])
    return 32.0


def paper_cost_model(
    b: float, P: float, B: int, M: int, theta0_size: int, rounds: int = 1
) -> float:
    r"""The authors' communication cost :math:`R\,b\,(2 P B M^2 + |\theta_0| M)` (C6).

    Parameters
    ----------
    b : float
        Bits per component (32 uncompressed).
    P : float
        Embedding size per party (the mean :math:`\bar P` when sizes differ).
    B : int
        Mini-batch size.
    M : int
        Number of parties.
    theta0_size : int
        :math:`|\theta_0|`.
    rounds : int
        Number of rounds ``R``.

    Returns
    -------
    float

    Examples
    --------
    >>> paper_cost_model(32, 8, 64, 4, 330)
    566528
    """
    return rounds * b * (2 * P * B * M * M + theta0_size * M)


@dataclass(frozen=True)
class RoundBits:
    r"""Bits of one global round (C6).

    Attributes
    ----------
    uploads : tuple of int
        :math:`U_m` for ``m = 1..M``.
    server_model : int
        :math:`\mathrm{bits}(C_0(\theta_0))` (sent once to each party).
    """

    uploads: tuple[int, ...]
    server_model: int

    @property
    def n_parties(self) -> int:
        """``M``."""
        return len(self.uploads)

    @property
    def downloads(self) -> tuple[int, ...]:
        r"""Per-party download :math:`\sum_{j\ne m} U_j + \mathrm{bits}(C_0(\theta_0))`."""
        tot = sum(self.uploads)
        return tuple(tot - u + self.server_model for u in self.uploads)

    @property
    def upload_total(self) -> int:
        r""":math:`\sum_m U_m`."""
        return sum(self.uploads)

    @property
    def download_total(self) -> int:
        """Sum of the downloads."""
        return sum(self.downloads)

    @property
    def total(self) -> int:
        r""":math:`M \sum_m U_m + M\,\mathrm{bits}(C_0(\theta_0))` (uploads + downloads)."""
        return self.upload_total + self.download_total


def round_bits(
    compressors: Sequence[Any],
    server_compressor: Any,
    batch_size: int,
    embedding_sizes: Sequence[int],
    theta0_size: int,
) -> RoundBits:
    """Bits of a round from the compressors' ``payload_bits`` (C6).

    The server model is sent as one ``(1, |θ_0|)`` row (flattened parameters).
    """
    ups = tuple(
        int(c.payload_bits((int(batch_size), int(p)))) for c, p in zip(compressors, embedding_sizes)
    )
    return RoundBits(ups, int(server_compressor.payload_bits((1, int(theta0_size)))))


@dataclass
class BitLedger:
    """Per-round and cumulative bits of a run, with the paper's cost model beside them (C6).

    Attributes
    ----------
    rounds : list of RoundBits
        One entry per global round, in order.
    paper : list of float
        :func:`paper_cost_model` of each round (with the round's ``b``, ``B``).
    """

    rounds: list[RoundBits] = field(default_factory=list)
    paper: list[float] = field(default_factory=list)
    _cum: int = 0
    _cum_paper: float = 0.0

    def record(self, rb: RoundBits, paper_bits: float) -> None:
        """Append one round."""
        self.rounds.append(rb)
        self.paper.append(float(paper_bits))
        self._cum += rb.total
        self._cum_paper += float(paper_bits)

    @property
    def total(self) -> int:
        """Cumulative bits on the wire (uploads + downloads + server model)."""
        return self._cum

    @property
    def total_paper(self) -> float:
        """Cumulative bits of the paper's cost model."""
        return self._cum_paper

    @property
    def upload_total(self) -> int:
        """Cumulative upload bits."""
        return sum(r.upload_total for r in self.rounds)

    @property
    def download_total(self) -> int:
        """Cumulative download bits (embeddings forwarded + server model)."""
        return sum(r.download_total for r in self.rounds)

    @property
    def server_model_total(self) -> int:
        """Cumulative bits of the server model, counted once per party per round."""
        return sum(r.server_model * r.n_parties for r in self.rounds)

    def cumulative(self) -> list[int]:
        """Cumulative total after each round."""
        out, s = [], 0
        for r in self.rounds:
            s += r.total
            out.append(s)
        return out

    def summary(self) -> dict[str, Any]:
        """JSON-able totals."""
        return {
            "rounds": len(self.rounds),
            "total_bits": self.total,
            "upload_bits": self.upload_total,
            "download_bits": self.download_total,
            "server_model_bits": self.server_model_total,
            "paper_model_bits": self.total_paper,
        }
