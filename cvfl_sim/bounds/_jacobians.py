r"""A party's per-sample embedding Jacobians on a batch, as a linear operator (C3.5, C4.1, C4.5).

For party ``m`` and a batch :math:`x_1, \dots, x_B`, :math:`J_i = \partial h_m(\theta_m; x_i) /
\partial\theta_m` is ``(P, N)`` (``P`` embedding entries, ``N`` parameters). The Lemma-1 probe and
the tight Lemma-1 term need only products with them: :math:`\sum_i J_i^\top v_i` (a gradient by
the chain rule), :math:`J u` (``(B, P)``), the per-sample Gram matrices :math:`J_i J_i^\top` and
the spectral norm of the stacked :math:`J = [J_1; \dots; J_B]` (``(BP, N)``). For the toolkit's
plain party models (:func:`~cvfl_sim.bounds._autodiff.plain_mlp`,
:func:`~cvfl_sim.bounds._autodiff.plain_linear`) these products have closed forms that never
build the ``(B, P, N)`` array: for :math:`h(x) = W\,\mathrm{relu}(Vx + b) + c` with
:math:`u_i = Vx_i + b`, :math:`r_i = \mathrm{relu}(u_i)`, :math:`s_i = 1[u_i > 0]` (autograd's
derivative of relu, 0 at 0) and :math:`v_i \in \mathbb{R}^P`,

.. math::
   \sum_i J_i^\top v_i = \Bigl(\sum_i (s_i \odot W^\top v_i)\, x_i^\top,\;
   \sum_i s_i \odot W^\top v_i,\; \sum_i v_i r_i^\top,\; \sum_i v_i\Bigr), \qquad
   J_i (T_V, t_b, T_W, t_c) = W\bigl(s_i \odot (T_V x_i + t_b)\bigr) + T_W r_i + t_c,

.. math::
   J_i J_i^\top = (W \operatorname{diag}(s_i) W^\top)(\|x_i\|^2 + 1) + (\|r_i\|^2 + 1) I_P

(the ``+ 1`` terms where the layers have biases; the parameters in the order of
``parameters()``, each row-major). A single linear layer :math:`h = Wx + c` has
:math:`\sum_i J_i^\top v_i = (\sum_i v_i x_i^\top, \sum_i v_i)` and :math:`J_i J_i^\top =
(\|x_i\|^2 + 1) I_P`. Any other model is held as autograd's dense Jacobian of the batch.
Each closed form is tested against autograd (``tests/test_grams.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ._autodiff import jacobian, plain_linear, plain_mlp

__all__: list[str] = []


class EmbeddingJacobian:
    r"""The per-sample Jacobians :math:`J_i` of one party on a batch, float64 (numpy).

    Use :meth:`of`. ``B``, ``P``, ``N``: samples, embedding entries, parameters.
    """

    B: int
    P: int
    N: int
    _grams: np.ndarray | None = None

    @staticmethod
    def of(party: nn.Module, x: torch.Tensor) -> EmbeddingJacobian:
        """The closed-form operator of a plain party model, else autograd's dense Jacobian."""
        from ..vfl.models import MLPEmbedding

        X = x.detach().to(torch.float64).cpu().numpy()
        layers = plain_mlp(party)
        if layers is not None:
            return _MLPJacobian(X, *layers)
        single = plain_linear(party, MLPEmbedding)
        if single is not None:
            return _LinearJacobian(X, single)
        params = list(party.parameters())
        with torch.enable_grad():
            dense = jacobian(party(x), params)
        return _DenseJacobian(dense.reshape(x.shape[0], -1, dense.shape[1]))

    def rmatmat(self, V: np.ndarray) -> np.ndarray:
        r""":math:`\sum_i J_i^\top V_{r,i}` for each ``r``: ``(R, B, P)`` to ``(R, N)``."""
        raise NotImplementedError

    def matmat(self, U: np.ndarray) -> np.ndarray:
        r""":math:`J_i U_r` for each ``r`` and ``i``: ``(R, N)`` to ``(R, B, P)``."""
        raise NotImplementedError

    def rmatmat_sq_norm(self, V: np.ndarray) -> float:
        r""":math:`\sum_r \|\sum_i J_i^\top V_{r,i}\|^2`, ``V`` ``(R, B, P)``.

        The squared Frobenius norm of :meth:`rmatmat` of ``V``.
        """
        return float(np.sum(self.rmatmat(V) ** 2))

    def sample_grams(self) -> np.ndarray:
        r""":math:`J_i J_i^\top`, ``(B, P, P)``, read-only.

        Computed once: the probe's operator norms and the tight term both read them.
        """
        if self._grams is None:
            grams = self._sample_grams()
            grams.flags.writeable = False
            self._grams = grams
        return self._grams

    def _sample_grams(self) -> np.ndarray:
        raise NotImplementedError

    def dense(self) -> np.ndarray:
        """The Jacobians as one ``(B, P, N)`` array."""
        raise NotImplementedError

    # the Gram operator JJ^T of the stacked J (a GramOperator of cvfl_sim.bounds._spectral)
    @property
    def n(self) -> int:
        """Rows of the stacked Jacobian, ``B P``: the size of its Gram matrix."""
        return self.B * self.P

    def gram_diagonal(self) -> np.ndarray:
        r"""The diagonal of :math:`JJ^\top` (rows ``(i, a)``)."""
        return np.diagonal(self.sample_grams(), axis1=1, axis2=2).reshape(-1)

    def gram_dense(self) -> torch.Tensor:
        r""":math:`JJ^\top`, ``(B P, B P)``."""
        J = self.dense().reshape(self.n, self.N)
        return torch.from_numpy(J @ J.T)

    def stack_key(self) -> Hashable:
        """Jacobians of one type and key make their Gram products in one batch."""
        return id(self)

    @classmethod
    def stacked_matvec(cls, ops: Sequence[Any]) -> Callable[[np.ndarray], np.ndarray]:
        r""":math:`v \mapsto J_k J_k^\top v` for each operator ``k``, ``(b, B P)`` vectors."""

        def matvec(V: np.ndarray) -> np.ndarray:
            return np.stack(
                [
                    op.matmat(op.rmatmat(v.reshape(1, op.B, op.P)))[0].reshape(-1)
                    for op, v in zip(ops, V)
                ]
            )

        return matvec


class _DenseJacobian(EmbeddingJacobian):
    def __init__(self, J: torch.Tensor) -> None:
        self.J = J.detach().to(torch.float64).cpu().numpy()
        self.B, self.P, self.N = self.J.shape

    def rmatmat(self, V: np.ndarray) -> np.ndarray:
        return V.reshape(len(V), -1) @ self.J.reshape(self.n, self.N)

    def matmat(self, U: np.ndarray) -> np.ndarray:
        return (U @ self.J.reshape(self.n, self.N).T).reshape(len(U), self.B, self.P)

    def _sample_grams(self) -> np.ndarray:
        return self.J @ self.J.transpose(0, 2, 1)

    def dense(self) -> np.ndarray:
        return self.J


def _weights(layer: nn.Linear) -> tuple[np.ndarray, np.ndarray | None]:
    w = layer.weight.detach().to(torch.float64).cpu().numpy()
    return w, None if layer.bias is None else layer.bias.detach().to(torch.float64).cpu().numpy()


class _LinearJacobian(EmbeddingJacobian):
    """``h = W x + c``: parameters ``(W, c)``."""

    def __init__(self, X: np.ndarray, layer: nn.Linear) -> None:
        self.X = X
        self.bias = layer.bias is not None
        self.B, D = X.shape
        self.P = layer.out_features
        self.N = self.P * D + (self.P if self.bias else 0)

    def rmatmat(self, V: np.ndarray) -> np.ndarray:
        parts = [(V.transpose(0, 2, 1) @ self.X).reshape(len(V), -1)]
        if self.bias:
            parts.append(V.sum(axis=1))
        return np.concatenate(parts, axis=1)

    def matmat(self, U: np.ndarray) -> np.ndarray:
        D = self.X.shape[1]
        TW = U[:, : self.P * D].reshape(len(U), self.P, D)
        out = self.X @ TW.transpose(0, 2, 1)
        return out + U[:, None, self.P * D :] if self.bias else out

    def _sample_grams(self) -> np.ndarray:
        scale = np.einsum("bd,bd->b", self.X, self.X) + (1.0 if self.bias else 0.0)
        return scale[:, None, None] * np.eye(self.P)[None]

    def stack_key(self) -> Hashable:
        return (self.B, self.P)

    @classmethod
    def stacked_matvec(cls, ops: Sequence[Any]) -> Callable[[np.ndarray], np.ndarray]:
        r""":math:`JJ^\top v = (XX^\top + 1)\,v` on ``(B, P)`` (the ``+ 1`` with a bias)."""
        K = np.stack([op.X @ op.X.T + (1.0 if op.bias else 0.0) for op in ops])
        B, P = ops[0].B, ops[0].P
        return lambda V: (K @ V.reshape(len(V), B, P)).reshape(len(V), -1)

    def dense(self) -> np.ndarray:
        B, D = self.X.shape
        eye = np.eye(self.P)
        cols = [(eye[None, :, :, None] * self.X[:, None, None, :]).reshape(B, self.P, -1)]
        if self.bias:
            cols.append(np.broadcast_to(eye, (B, self.P, self.P)))
        return np.concatenate(cols, axis=2)


class _MLPJacobian(EmbeddingJacobian):
    """``h = W relu(V x + b) + c``: parameters ``(V, b, W, c)``."""

    def __init__(self, X: np.ndarray, first: nn.Linear, last: nn.Linear) -> None:
        self.X = X
        V, b = _weights(first)
        self.W, c = _weights(last)
        u = X @ V.T + (0.0 if b is None else b)
        self.S = (u > 0).astype(np.float64)
        self.R = np.maximum(u, 0.0)  # relu
        self.bias_first, self.bias_last = b is not None, c is not None
        self.B, D = X.shape
        self.P, hid = self.W.shape
        self.sizes = [hid * D, hid if self.bias_first else 0, self.P * hid]
        self.sizes.append(self.P if self.bias_last else 0)
        self.N = sum(self.sizes)
        ones = np.ones((self.B, 1))
        self.X1 = np.concatenate([X, ones], axis=1) if self.bias_first else X
        self.R1 = np.concatenate([self.R, ones], axis=1) if self.bias_last else self.R

    def rmatmat(self, V: np.ndarray) -> np.ndarray:
        r, B, P = V.shape
        hid, D = self.W.shape[1], self.X.shape[1]
        M = (V.reshape(r * B, P) @ self.W).reshape(r, B, hid)
        M *= self.S  # s_i ⊙ W^T v_i
        # with a ones column on the inputs and activations, the bias gradients (sums over the
        # samples) come out of the same products
        first = M.transpose(0, 2, 1) @ self.X1  # (R, h, D [+ 1])
        last = V.transpose(0, 2, 1) @ self.R1  # (R, P, h [+ 1])
        parts = [first[:, :, :D].reshape(r, -1)]
        if self.bias_first:
            parts.append(first[:, :, D])
        parts.append(last[:, :, :hid].reshape(r, -1))
        if self.bias_last:
            parts.append(last[:, :, hid])
        return np.concatenate(parts, axis=1)

    def rmatmat_sq_norm(self, V: np.ndarray) -> float:
        r"""The squared norm of :meth:`rmatmat`, by two products in all (not two per ``r``).

        Its entries are those of :math:`X_1^\top M` and :math:`R_1^\top V` (``M`` the
        :math:`s_i \odot W^\top v_{r,i}`), taken with the samples first.
        """
        r, B, P = V.shape
        hid = self.W.shape[1]
        Vb = V.transpose(1, 0, 2)  # (B, R, P)
        M = (Vb.reshape(B * r, P) @ self.W).reshape(B, r, hid)
        M *= self.S[:, None, :]
        first = self.X1.T @ M.reshape(B, r * hid)  # (D [+ 1], R h)
        last = self.R1.T @ Vb.reshape(B, r * P)  # (h [+ 1], R P)
        return float(np.sum(first**2) + np.sum(last**2))

    def matmat(self, U: np.ndarray) -> np.ndarray:
        r = len(U)
        hid, D = self.W.shape[1], self.X.shape[1]
        TV, tb, TW, tc = np.split(U, np.cumsum(self.sizes)[:-1], axis=1)
        pre = self.X @ TV.reshape(r, hid, D).transpose(0, 2, 1)  # (R, B, h)
        if self.bias_first:
            pre = pre + tb[:, None, :]
        out = (pre * self.S) @ self.W.T + self.R @ TW.reshape(r, self.P, hid).transpose(0, 2, 1)
        return out + tc[:, None, :] if self.bias_last else out

    def stack_key(self) -> Hashable:
        return (self.B, self.P, self.W.shape[1])

    @classmethod
    def stacked_matvec(cls, ops: Sequence[Any]) -> Callable[[np.ndarray], np.ndarray]:
        r"""The products :math:`JJ^\top v` of stacked parties, by their inputs and activations.

        :math:`JJ^\top v = \bigl(K_X ((vW) \odot S)\bigr) \odot S\, W^\top + K_R v` on
        ``(B, P)`` vectors ``v``, with the ``(B, B)`` kernels :math:`K_X = XX^\top + 1 1^\top`
        and :math:`K_R = RR^\top + 1 1^\top` of the inputs and the hidden activations (the
        :math:`1 1^\top` terms where the layers have biases), formed once: products with them
        replace the ``N`` parameter columns. Where the inputs are narrow (twice the widest
        party's :math:`X_1` below ``B``; :math:`X_1 = [X \mid 1]` with a first-layer bias,
        ``X`` without), :math:`K_X U` is taken as :math:`X_1 (X_1^\top U)` instead, the
        :math:`X_1` zero-padded to one width: twice ``B`` times that width products a column
        instead of :math:`B^2` (the padding adds exact zeros).
        """
        KR = np.stack([op.R @ op.R.T + (1.0 if op.bias_last else 0.0) for op in ops])
        S = np.stack([op.S for op in ops])
        W = np.stack([op.W for op in ops])
        Wt = W.transpose(0, 2, 1).copy()
        B, P = ops[0].B, ops[0].P
        width = max(op.X1.shape[1] for op in ops)
        if 2 * width < B:  # the inputs' factor: fewer products than their kernel
            X1 = np.zeros((len(ops), B, width))
            for k, op in enumerate(ops):
                X1[k, :, : op.X1.shape[1]] = op.X1
            X1t = X1.transpose(0, 2, 1).copy()

            def inputs_kernel(U: np.ndarray) -> np.ndarray:
                return X1 @ (X1t @ U)
        else:
            KX = np.stack([op.X @ op.X.T + (1.0 if op.bias_first else 0.0) for op in ops])

            def inputs_kernel(U: np.ndarray) -> np.ndarray:
                return KX @ U

        def matvec(V: np.ndarray) -> np.ndarray:
            v = V.reshape(len(V), B, P)
            out = (inputs_kernel((v @ W) * S) * S) @ Wt
            out += KR @ v
            return out.reshape(len(V), -1)

        return matvec

    def _sample_grams(self) -> np.ndarray:
        Ws = self.S[:, None, :] * self.W[None]  # (B, P, h): W diag(s_i)
        xx = np.einsum("bd,bd->b", self.X, self.X) + (1.0 if self.bias_first else 0.0)
        rr = np.einsum("bh,bh->b", self.R, self.R) + (1.0 if self.bias_last else 0.0)
        return (Ws @ Ws.transpose(0, 2, 1)) * xx[:, None, None] + rr[:, None, None] * np.eye(self.P)

    def dense(self) -> np.ndarray:
        B = self.B
        Ws = self.S[:, None, :] * self.W[None]  # (B, P, h)
        cols = [(Ws[:, :, :, None] * self.X[:, None, None, :]).reshape(B, self.P, -1)]
        if self.bias_first:
            cols.append(Ws)
        eye = np.eye(self.P)
        cols.append((eye[None, :, :, None] * self.R[:, None, None, :]).reshape(B, self.P, -1))
        if self.bias_last:
            cols.append(np.broadcast_to(eye, (B, self.P, self.P)))
        return np.concatenate(cols, axis=2)


def embedding_jacobians(
    parties: Sequence[nn.Module], inputs: Sequence[torch.Tensor]
) -> list[EmbeddingJacobian]:
    """:meth:`EmbeddingJacobian.of` of each party on its block of the batch."""
    return [EmbeddingJacobian.of(p, x) for p, x in zip(parties, inputs)]


def party_jacobians(
    parties: Sequence[nn.Module], inputs: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    r"""Per-sample :math:`J_{m,i}`, ``(B, P_m, |θ_m|)`` each, dense, in the inputs' dtype.

    :meth:`EmbeddingJacobian.dense`: the closed forms for the plain models, else the rows of
    autograd's Jacobian of the batch (a party model treats its samples independently, so row
    ``(i, a)`` is sample ``i``'s; ``torch.func.vmap`` over one sample at a time fails on modules
    such as ``nn.GRU``, whose forward checks the batch's shape).
    """
    return [
        torch.from_numpy(np.ascontiguousarray(j.dense())).to(x.dtype)
        for j, x in zip(embedding_jacobians(parties, inputs), inputs)
    ]
