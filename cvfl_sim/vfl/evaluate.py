r"""Evaluation of the uncompressed model: full training loss, test accuracy and F1 (C1, C4)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from .data import VerticalDataset

__all__ = ["EvalData", "eval_data", "evaluate", "f1_score", "forward"]


def f1_score(y: np.ndarray, pred: np.ndarray, n_classes: int) -> float:
    """Binary F1 of class 1 (two classes) or macro F1 over the classes present or predicted.

    Classes neither in ``y`` nor in ``pred`` (absent from the test split) are left out of the
    macro mean, so a perfect classifier scores 1.0; the binary F1 of a class 1 that is neither
    present nor predicted is 1.0 too (no errors; ``0/0`` otherwise).
    """
    cm = np.bincount(y * n_classes + pred, minlength=n_classes * n_classes).reshape(
        n_classes, n_classes
    )
    tp = np.diag(cm).astype(float)
    denom = cm.sum(0) + cm.sum(1)
    f1 = np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 1.0)
    return float(f1[1]) if n_classes == 2 else float(f1[denom > 0].mean())


def forward(parties: Sequence[nn.Module], server: nn.Module, X: Sequence[torch.Tensor]) -> Any:
    """The joint model's logits: the server head on the concatenated party embeddings."""
    return server(torch.cat([p(x) for p, x in zip(parties, X)], dim=1))


class EvalData(NamedTuple):
    """The data :func:`evaluate` reads, as tensors on the models' device."""

    train_parts: list[torch.Tensor]
    test_parts: list[torch.Tensor]
    y_train: torch.Tensor


def eval_data(dataset: VerticalDataset, dtype: torch.dtype, device: torch.device) -> EvalData:
    """``dataset``'s training parts, test parts and training labels as tensors on ``device``.

    Made once per run and passed to every :func:`evaluate` of it (the conversion was a tenth of
    an evaluation of the small models).
    """
    return EvalData(
        [torch.as_tensor(p, dtype=dtype, device=device) for p in dataset.train_parts],
        [torch.as_tensor(p, dtype=dtype, device=device) for p in dataset.test_parts],
        torch.as_tensor(dataset.y_train, device=device),
    )


def evaluate(
    parties: Sequence[nn.Module],
    server: nn.Module,
    dataset: VerticalDataset,
    dtype: torch.dtype = torch.float32,
    grad_norm: bool = False,
    data: EvalData | None = None,
) -> dict[str, float | None]:
    r"""Full training loss :math:`F(\Theta)`, test accuracy and F1 of the uncompressed model.

    With ``grad_norm`` also :math:`\|\nabla F(\Theta)\|^2` over all blocks (C4). The data go to
    the server model's device (:attr:`~cvfl_sim.vfl.config.CVFLConfig.device`); ``data``, from
    :func:`eval_data` with the same ``dtype`` and device, gives them already converted.
    """
    params = [q for m in [*parties, server] for q in m.parameters()]
    if data is None:
        data = eval_data(dataset, dtype, params[-1].device)  # the server's (it has parameters)
    Xtr, Xte, ytr = data
    g2: float | None = None
    if grad_norm:
        loss = nn.functional.cross_entropy(forward(parties, server, Xtr), ytr)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        g2 = float(sum(float((g * g).sum()) for g in grads if g is not None))
        train_loss = float(loss.detach())
    with torch.no_grad():
        if not grad_norm:
            train_loss = float(nn.functional.cross_entropy(forward(parties, server, Xtr), ytr))
        pred = forward(parties, server, Xte).argmax(1).cpu().numpy()
    acc = float(np.mean(pred == dataset.y_test))
    return {
        "train_loss": train_loss,
        "test_accuracy": acc,
        "test_f1": f1_score(dataset.y_test, pred, dataset.n_classes),
        "grad_norm_sq": g2,
    }
