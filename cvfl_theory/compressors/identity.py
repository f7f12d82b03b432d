r"""The identity compressor: every component sent as an IEEE float (C5, uncompressed baseline).

A finite component beyond the largest finite float of the wire's width ``r`` is refused with a
``ValueError`` naming the value and the representable range (never sent as ``inf``, never clipped).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._rng import RNGLike
from .._validate import check_fits_float, check_float_width
from ..bitpack import BitReader, BitWriter
from . import _torch_kernels as tk
from .base import Compressor, shape2d, shape_or_x

__all__ = ["Identity"]


class Identity(Compressor):
    r"""Send every component as an ``r``-bit IEEE float (the paper's 32-bit baseline, C5).

    Parameters
    ----------
    r : {32, 16, 64}
        Bits per component.

    Notes
    -----
    An entry beyond the largest finite ``r``-bit float (65504 for ``r = 16``, about
    :math:`3.4 \cdot 10^{38}` for ``r = 32``) is **refused** with ``ValueError`` naming the value and
    the representable range, never sent as ``inf`` (nor clipped).

    ``payload_bits = r B P``. The error is :math:`\|\mathrm{fl}_r(x) - x\|_F^2`, which is 0 when
    ``x`` is representable in ``r`` bits (e.g. float32 input with ``r = 32``);
    ``expected_error(shape)`` returns 0 (the representable case) and ``expected_error(x)`` the
    exact rounding error of ``x``.

    Examples
    --------
    >>> import numpy as np
    >>> c = Identity().compress(np.ones((2, 3), dtype=np.float32))
    >>> c.payload_bits, Identity().expected_error((2, 3))
    (192, 0.0)
    """

    name = "identity"
    _has_torch_path = True

    def __init__(self, r: int = 32) -> None:
        self.r = check_float_width(r)

    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        return {"r": self.r}

    def payload_bits(self, shape: tuple[int, ...]) -> int:
        """``r * B * P``."""
        B, P = shape2d(shape)
        return self.r * B * P

    def expected_error(self, x_or_shape: Any) -> float:
        """Exact rounding error of ``x`` to ``r``-bit floats (0 for a shape)."""
        _, a = shape_or_x(x_or_shape)
        if a is None:
            return 0.0
        d = check_fits_float(a, self.r, "x").astype(np.float64) - a
        return float(np.sum(d * d))

    def published_bound(self, x_or_shape: Any) -> float:
        """0: the paper treats 32-bit floats as exact."""
        shape_or_x(x_or_shape)
        return 0.0

    def _compress(
        self, a: np.ndarray, rng: RNGLike
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        return {"values": check_fits_float(a, self.r, "x")}, None, 0

    def _decompress(
        self,
        data: dict[str, np.ndarray],
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype | type = np.float64,
    ) -> np.ndarray:
        return data["values"].reshape(shape)

    def _compress_torch(
        self, t: Any, rng: RNGLike
    ) -> tuple[dict[str, np.ndarray], int | None, int]:
        return self._compress(t.cpu().numpy(), rng)  # the payload is the values, on the host

    def _decompress_torch(
        self,
        data: dict[str, np.ndarray],
        seed: int | None,
        shape: tuple[int, int],
        dtype: np.dtype,
        device: Any,
    ) -> Any:
        import torch

        values = torch.from_numpy(np.ascontiguousarray(data["values"])).to(device)
        return tk.to_output_dtype(values.reshape(shape), dtype)

    def _write_payload(
        self, w: BitWriter, data: dict[str, np.ndarray], shape: tuple[int, int]
    ) -> None:
        w.write_floats(data["values"].ravel(), self.r)

    def _read_payload(self, r: BitReader, shape: tuple[int, int]) -> dict[str, np.ndarray]:
        values = r.read_floats(shape[0] * shape[1], self.r)
        if not np.isfinite(values).all():
            raise ValueError("corrupted payload: non-finite values")
        return {"values": values.reshape(shape)}
