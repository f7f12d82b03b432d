r"""Step-size schedules :math:`\eta^{t_0}` and compression schedules (C1, C4).

The step size is constant within a global round: it is evaluated at the round's first local
iteration :math:`t_0` (C1, "η^{t0}"). Three schedules cover C4.2–C4.4: :class:`Constant`,
:class:`InverseSqrt` (:math:`c/\sqrt{t+1}`, C4.3) and :class:`StepDecay`.

A compression schedule maps the round index to the compressors used in that round (e.g. more bits
later, so that :math:`\sum_{t_0} \eta^{t_0} \sum_m E_m^{t_0}` stays summable, C4.4). The bit counts
come from :mod:`cvfl_theory.bounds`; :class:`CompressionSchedule` only turns a bits-per-round sequence into
compressors, through a user factory ``bits -> Compressor``
(:meth:`CompressionSchedule.from_bounds` takes a :func:`cvfl_theory.bounds.bits_schedule` result
directly); :meth:`Constant.from_bound` takes the step of Theorem 4.2 from
:func:`cvfl_theory.bounds.max_step_size`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "StepSize",
    "Constant",
    "InverseSqrt",
    "StepDecay",
    "as_step_size",
    "CompressionSchedule",
]


class StepSize:
    r"""A step-size schedule: ``schedule(t)`` is :math:`\eta^{t}` at local iteration ``t``."""

    def __call__(self, t: int) -> float:  # pragma: no cover - abstract
        """Step size at iteration ``t``."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """JSON-able description."""
        return {"schedule": type(self).__name__, **asdict(self)}  # type: ignore[call-overload]


@dataclass(frozen=True)
class Constant(StepSize):
    r""":math:`\eta^t = \eta` (C4.2)."""

    lr: float

    def __call__(self, t: int) -> float:
        """Step size at iteration ``t``."""
        return float(self.lr)

    @classmethod
    def from_bound(cls, Q: int, L: float, L_m: Any = None) -> Constant:
        r"""The largest step of Theorem 4.2, :math:`1/(16 Q \max\{L, \max_m L_m\})` (as recovered).

        Delegates to :func:`cvfl_theory.bounds.max_step_size`.
        """
        from cvfl_theory.bounds import max_step_size

        return cls(float(max_step_size(Q, L, L_m)))


@dataclass(frozen=True)
class InverseSqrt(StepSize):
    r""":math:`\eta^t = c / \sqrt{t / \tau + 1}` (C4.3 with :math:`\tau = 1`)."""

    c: float
    tau: float = 1.0

    def __call__(self, t: int) -> float:
        """Step size at iteration ``t``."""
        return float(self.c / math.sqrt(t / self.tau + 1.0))


@dataclass(frozen=True)
class StepDecay(StepSize):
    r""":math:`\eta^t = \eta\,\gamma^{\lfloor t / s \rfloor}` (decay every ``s``)."""

    lr: float
    every: int
    gamma: float = 0.1

    def __call__(self, t: int) -> float:
        """Step size at iteration ``t``."""
        return float(self.lr * self.gamma ** (t // self.every))


def as_step_size(lr: float | StepSize | Callable[[int], float]) -> Callable[[int], float]:
    """Normalise the ``lr`` argument: a positive number becomes :class:`Constant`."""
    if isinstance(lr, bool):
        raise TypeError("lr must be a positive number or a schedule, got a bool")
    if isinstance(lr, (int, float)):
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {lr}")
        return Constant(float(lr))
    if callable(lr):
        return lr
    raise TypeError(f"lr must be a positive number or a callable schedule, got {type(lr).__name__}")


class CompressionSchedule:
    """Compressors per round from a bits-per-round sequence (e.g. from :mod:`cvfl_theory.bounds`).

    Parameters
    ----------
    bits : sequence of int or callable
        ``bits[r]`` (the last value is kept after the end) or ``bits(r)`` for round ``r``.
    factory : callable
        ``factory(b) -> Compressor``, e.g. ``lambda b: ScalarQuantizer(b, range="minmax-row")``.
    """

    def __init__(self, bits: Sequence[int] | Callable[[int], int], factory: Callable[[int], Any]):
        self.bits = bits
        self.factory = factory
        self._cache: dict[int, Any] = {}

    @classmethod
    def from_bounds(cls, schedule: Any, factory: Callable[[int], Any]) -> CompressionSchedule:
        """Use the per-round bits of a :func:`cvfl_theory.bounds.bits_schedule` result (C4.4)."""
        return cls([int(b) for b in schedule.bits], factory)

    def bits_at(self, r: int) -> int:
        """Bits per component in round ``r``."""
        if callable(self.bits):
            return int(self.bits(r))
        seq = list(self.bits)
        return int(seq[min(r, len(seq) - 1)])

    def __call__(self, r: int) -> Any:
        """The compressor of round ``r`` (cached per bit count)."""
        b = self.bits_at(r)
        if b not in self._cache:
            self._cache[b] = self.factory(b)
        return self._cache[b]

    def config(self) -> dict[str, Any]:
        """JSON-able description."""
        return {"schedule": "CompressionSchedule", "first_bits": self.bits_at(0)}
