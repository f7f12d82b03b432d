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

__all__ = ["ArrayKind", "checked_tensor", "is_torch", "to_numpy"]


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
    """View ``x`` (numpy array, torch tensor or array-like) as a C-contiguous numpy array.

    The result is always C-contiguous: a contiguous input is returned as is (zero-copy), a
    strided view, a transposed or Fortran-ordered array or a non-contiguous tensor is copied once.
    Every reduction downstream then adds in an order fixed by the values alone, so the same values
    and the same ``rng`` give the same bits whatever the caller's layout.

    Parameters
    ----------
    x : array_like or torch.Tensor
        The input. A tensor that requires grad is detached (compression is never
        differentiated); a tensor on the ``meta`` device (no data), a sparse or quantized tensor
        and a numpy masked array are refused.
    name : str
        Argument name used in error messages.

    Returns
    -------
    array : numpy.ndarray
        A C-contiguous numpy view (or copy).
    kind : ArrayKind
        Use ``kind.wrap(result)`` to return the caller's kind.

    Raises
    ------
    TypeError
        Complex, bfloat16, sparse or quantized tensors, masked arrays, unconvertible objects.
    ValueError
        A tensor on the ``meta`` device.
    """
    if is_torch(x):
        t = checked_tensor(x, name)
        device = str(x.device)
        t = t.cpu()
        return np.asarray(t.numpy(), order="C"), ArrayKind(torch=True, device=device)
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a masked array: its masked entries would be used as data; pass "
            f"{name}.filled(value) or {name}.compressed() explicitly"
        )
    if isinstance(x, np.ndarray):
        return np.asarray(x, order="C"), ArrayKind()
    try:
        return np.asarray(x, order="C"), ArrayKind()
    except Exception as exc:  # pragma: no cover - depends on the foreign object
        raise TypeError(
            f"{name} must be a numpy array, a torch tensor or a rectangular nested list of "
            f"numbers; got {type(x).__name__} ({exc})"
        ) from None


def checked_tensor(x: Any, name: str = "X") -> Any:
    """``x`` (a torch tensor) detached, on its device, with conjugate and negative bits resolved.

    Raises
    ------
    TypeError
        Complex, bfloat16, sparse or quantized tensors.
    ValueError
        A tensor on the ``meta`` device.
    """
    if x.device.type == "meta":
        raise ValueError(
            f"{name} is a tensor on the 'meta' device, which holds no values; pass a CPU or "
            "accelerator tensor"
        )
    if x.layout != sys.modules["torch"].strided or x.is_quantized:
        raise TypeError(f"{name} must be a dense tensor, got layout {x.layout}")
    t = x.detach()
    if t.dtype.is_complex:
        raise TypeError(f"{name} must be real-valued, got a complex tensor of dtype {t.dtype}")
    if str(t.dtype) == "torch.bfloat16":
        raise TypeError(f"{name} has dtype torch.bfloat16; use float16, float32 or float64")
    return t.resolve_conj().resolve_neg()
