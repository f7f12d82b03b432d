r"""Party embedding networks :math:`h_m(\theta_m; x_m) \in \mathbb{R}^{P_m}` and server heads (C0).

Conventions every model follows (and any user :class:`torch.nn.Module` must follow):

- a party model maps a flat feature block ``(B, D_m)`` to an embedding ``(B, P_m)``; models that
  need structure (CNN, GRU) reshape the block to the party's sample shape themselves;
- a server head maps the concatenated embeddings ``(B, P_1 + … + P_M)`` to class logits
  ``(B, n_classes)``; its parameters are :math:`\theta_0`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "MLPEmbedding",
    "CNNEmbedding",
    "GRUEmbedding",
    "LinearHead",
    "MLPHead",
    "build_party_models",
    "build_server_model",
    "count_parameters",
]


class MLPEmbedding(nn.Module):
    """Two-layer perceptron ``D_m → hidden → P_m`` (ReLU between), the default party model.

    Parameters
    ----------
    in_features : int
        ``D_m``.
    embedding_size : int
        ``P_m``.
    hidden : int
        Width of the hidden layer; ``0`` gives a single linear map.
    """

    def __init__(self, in_features: int, embedding_size: int, hidden: int = 32) -> None:
        super().__init__()
        self.embedding_size = int(embedding_size)
        if hidden:
            self.net: nn.Module = nn.Sequential(
                nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, embedding_size)
            )
        else:
            self.net = nn.Linear(in_features, embedding_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embed ``(B, D_m) → (B, P_m)``."""
        return self.net(x)


class CNNEmbedding(nn.Module):
    """Small CNN: two 3×3 conv layers (padding 1, ReLU), global average pooling, a linear map.

    Parameters
    ----------
    shape : tuple of int
        Sample shape ``(C, H, W)``; the flat block is reshaped to it.
    embedding_size : int
        ``P_m``.
    channels : int
        Channels of the conv layers.
    """

    def __init__(self, shape: Sequence[int], embedding_size: int, channels: int = 16) -> None:
        super().__init__()
        if len(shape) != 3:
            raise ValueError(f"CNNEmbedding needs a (C, H, W) sample shape, got {tuple(shape)}")
        self.shape = tuple(int(s) for s in shape)
        self.embedding_size = int(embedding_size)
        self.features = nn.Sequential(
            nn.Conv2d(self.shape[0], channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.out = nn.Linear(channels, embedding_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embed ``(B, C·H·W) → (B, P_m)``."""
        z = self.features(x.reshape(x.shape[0], *self.shape))
        return self.out(z.flatten(1))


class GRUEmbedding(nn.Module):
    """One-layer GRU over a sequence ``(T, F)``; the embedding is a linear map of the last state.

    Parameters
    ----------
    shape : tuple of int
        Sample shape ``(T, F)`` (time steps, features per step).
    embedding_size : int
        ``P_m``.
    hidden : int
        GRU state size.
    """

    def __init__(self, shape: Sequence[int], embedding_size: int, hidden: int = 32) -> None:
        super().__init__()
        if len(shape) != 2:
            raise ValueError(f"GRUEmbedding needs a (T, F) sample shape, got {tuple(shape)}")
        self.shape = (int(shape[0]), int(shape[1]))
        self.embedding_size = int(embedding_size)
        self.gru = nn.GRU(self.shape[1], hidden, batch_first=True)
        self.out = nn.Linear(hidden, embedding_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embed ``(B, T·F) → (B, P_m)``."""
        _, h = self.gru(x.reshape(x.shape[0], *self.shape))
        return self.out(h[-1])


class LinearHead(nn.Module):
    """Linear server head ``(B, ΣP_m) → (B, n_classes)``."""

    def __init__(self, in_features: int, n_classes: int) -> None:
        super().__init__()
        self.in_features = int(in_features)
        self.net = nn.Linear(in_features, n_classes)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Logits of the concatenated embeddings."""
        return self.net(z)


class MLPHead(nn.Module):
    """Two-layer server head ``ΣP_m → hidden → n_classes`` (ReLU)."""

    def __init__(self, in_features: int, n_classes: int, hidden: int = 64) -> None:
        super().__init__()
        self.in_features = int(in_features)
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, n_classes)
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Logits of the concatenated embeddings."""
        return self.net(z)


PartySpec = Any  # str | Callable[[int, int, tuple | None], nn.Module] | Sequence[nn.Module]
_PARTY_KINDS = ("mlp", "linear", "cnn", "gru")
_HEAD_KINDS = ("linear", "mlp")


def build_party_models(
    spec: PartySpec,
    feature_dims: Sequence[int],
    embedding_sizes: Sequence[int],
    party_shapes: Sequence[tuple[int, ...]] | None = None,
) -> list[nn.Module]:
    """Instantiate the ``M`` party models from a spec.

    Parameters
    ----------
    spec : str, callable or sequence of nn.Module
        ``"mlp"`` (default), ``"linear"`` (:math:`h_m = W_m x_m + b_m`; with the ``"linear"``
        head it is the analytic model whose C3 constants :mod:`cvfl_sim.bounds.analytic_constants`
        computes in closed form), ``"cnn"`` (needs ``party_shapes`` ``(C, H, W)``),
        ``"gru"`` (needs ``(T, F)``); a callable ``spec(m, D_m, shape) -> nn.Module``; or one
        module per party.
    feature_dims : sequence of int
        ``D_m``.
    embedding_sizes : sequence of int
        ``P_m`` (ignored for user modules).
    party_shapes : sequence of tuple, optional
        Sample shape per party.
    """
    M = len(feature_dims)
    if isinstance(spec, str):
        if spec not in _PARTY_KINDS:
            raise ValueError(f"parties_model must be one of {_PARTY_KINDS}, got {spec!r}")
        if spec in ("cnn", "gru") and party_shapes is None:
            raise ValueError(f"parties_model={spec!r} needs a data set with party_shapes")
        out: list[nn.Module] = []
        for m in range(M):
            d, p = int(feature_dims[m]), int(embedding_sizes[m])
            if spec == "mlp":
                out.append(MLPEmbedding(d, p))
            elif spec == "linear":
                out.append(MLPEmbedding(d, p, hidden=0))
            elif spec == "cnn":
                out.append(CNNEmbedding(party_shapes[m], p))  # type: ignore[index]
            else:
                out.append(GRUEmbedding(party_shapes[m], p))  # type: ignore[index]
        return out
    if callable(spec) and not isinstance(spec, nn.Module):
        shapes: Sequence[tuple[int, ...] | None] = party_shapes or [None] * M
        return [spec(m, int(feature_dims[m]), shapes[m]) for m in range(M)]
    if isinstance(spec, Sequence) and all(isinstance(s, nn.Module) for s in spec):
        if len(spec) != M:
            raise ValueError(f"parties_model lists {len(spec)} modules for {M} parties")
        return list(spec)
    raise TypeError(
        "parties_model must be a name, a callable (m, D_m, shape) -> Module, or a list of modules"
    )


def build_server_model(
    spec: str | nn.Module | Callable[[int, int], nn.Module], in_features: int, n_classes: int
) -> nn.Module:
    """Instantiate the server head: ``"linear"`` (default), ``"mlp"``, a callable or a module."""
    if isinstance(spec, str):
        if spec not in _HEAD_KINDS:
            raise ValueError(f"server_model must be one of {_HEAD_KINDS}, got {spec!r}")
        return (
            LinearHead(in_features, n_classes)
            if spec == "linear"
            else MLPHead(in_features, n_classes)
        )
    if isinstance(spec, nn.Module):
        return spec
    if callable(spec):
        return spec(in_features, n_classes)
    raise TypeError("server_model must be a name, a module or a callable (in, n_classes) -> Module")


def count_parameters(model: nn.Module) -> int:
    r"""Number of scalar parameters (:math:`|\theta_0|` for the server head)."""
    return int(sum(int(np.prod(p.shape)) for p in model.parameters()))
