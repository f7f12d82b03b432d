r"""The pieces of a round that every execution strategy shares (C1).

The mini-batches of an epoch, the SGD step of a block and the error of a diverged run.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch

__all__ = ["minibatches", "sgd_step", "diverged"]


def minibatches(n: int, batch_size: int, gen: np.random.Generator) -> list[np.ndarray]:
    """One epoch of mini-batch indices: a permutation of ``range(n)`` cut into chunks of ``B``."""
    perm = gen.permutation(n)
    return [perm[i : i + batch_size] for i in range(0, n, batch_size)]


def sgd_step(params: list[torch.Tensor], grads: tuple[torch.Tensor | None, ...], lr: float) -> None:
    r""":math:`\theta \leftarrow \theta - \eta g` in place, for the parameters that have a gradient."""
    with torch.no_grad():
        if all(g is not None for g in grads):
            torch._foreach_add_(params, cast("tuple[torch.Tensor, ...]", grads), alpha=-lr)
        else:
            ps = [p for p, g in zip(params, grads) if g is not None]
            gs = [g for g in grads if g is not None]
            if ps:
                torch._foreach_add_(ps, gs, alpha=-lr)


def diverged(m: int, r: int, t0: int) -> FloatingPointError:
    """The error raised when party ``m``'s (0-based) embedding is not finite at round ``r``."""
    return FloatingPointError(
        f"training diverged: party {m}'s embedding is not finite at round {r} (t0={t0}); "
        "lower lr or use more bits"
    )
