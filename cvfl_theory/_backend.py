"""One implementation for numpy arrays and torch tensors.

Every public function of :mod:`cvfl_theory` computes in numpy. A torch tensor coming in is viewed as
a numpy array (zero-copy on the CPU, detached: compression is never differentiated) and the result is
converted back to a tensor of the same dtype and device. torch is imported lazily, so numpy-only
users never pay for it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ArrayKind", "is_torch", "to_numpy"]


def is_torch(x: object) -> bool:
    """Return True if ``x`` is a :class:`torch.Tensor` (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


@dataclass(frozen=True)
class ArrayKind:
    """Where an array came from, so a result can be returned as the same kind.

    Attributes
    ----------
    torch : bool
        True for a torch tensor.
    device : str or None
        The tensor's device (``None`` for numpy).
    """

    torch: bool = False
    device: str | None = None

    def wrap(self, a: np.ndarray) -> Any:
        """Return ``a`` as this kind (a tensor on the recorded device, or ``a`` itself)."""
        if not self.torch:
            return a
        import torch

        t = torch.from_numpy(np.ascontiguousarray(a))
        return t if self.device in (None, "cpu") else t.to(self.device)


def to_numpy(x: Any, name: str = "X") -> tuple[np.ndarray, ArrayKind]:
    """View ``x`` (numpy array, torch tensor or array-like) as a numpy array.

    Parameters
    ----------
    x : array_like or torch.Tensor
        The input.
    name : str
        Argument name used in error messages.

    Returns
    -------
    array : numpy.ndarray
        A numpy view (or copy, for non-CPU tensors and array-likes).
    kind : ArrayKind
        Use ``kind.wrap(result)`` to return the caller's kind.
    """
    if is_torch(x):
        t = x.detach()
        device = str(t.device)
        if t.dtype.is_complex:
            raise TypeError(f"{name} must be real-valued, got a complex tensor of dtype {t.dtype}")
        if str(t.dtype) == "torch.bfloat16":
            raise TypeError(f"{name} has dtype torch.bfloat16; use float16, float32 or float64")
        return t.cpu().numpy(), ArrayKind(torch=True, device=device)
    if isinstance(x, np.ndarray):
        return x, ArrayKind()
    try:
        return np.asarray(x), ArrayKind()
    except Exception as exc:  # pragma: no cover - depends on the foreign object
        raise TypeError(
            f"{name} must be a numpy array or torch tensor, got {type(x).__name__}"
        ) from exc
