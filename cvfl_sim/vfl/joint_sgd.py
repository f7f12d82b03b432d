r"""Plain mini-batch SGD on the joint model: the C1 oracle and the benchmarks' baseline."""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from .config import CVFLConfig, setup_run
from .data import VerticalDataset
from .evaluate import forward
from .steps import minibatches

__all__ = ["joint_sgd"]


def joint_sgd(
    dataset: VerticalDataset, config: CVFLConfig
) -> tuple[list[nn.Module], nn.Module, float]:
    r"""Plain mini-batch SGD on the joint model :math:`\Theta` (the C1 oracle and benchmark baseline).

    Same initialisation, batches and step sizes as :func:`~cvfl_sim.vfl.train.train` under the same ``config``; no
    compression, no local steps (``config.Q`` and the compressors are ignored), on
    ``config.device``.

    Returns
    -------
    parties, server, seconds
        The trained modules and the training time (excluding set-up).
    """
    s = setup_run(dataset, config)
    parties, server = s.parties, s.server
    params = [q for net in [*parties, server] for q in net.parameters()]
    Xtr = [torch.as_tensor(p, dtype=s.dtype, device=s.device) for p in dataset.train_parts]
    ytr = torch.as_tensor(dataset.y_train, device=s.device)
    batch_gen = np.random.default_rng(s.seeds[1])
    opt = torch.optim.SGD(params, lr=1.0)
    r = 0
    seconds = 0.0
    for _ in range(config.epochs):
        for batch in minibatches(dataset.n_train, config.batch_size, batch_gen):
            tick = time.perf_counter()
            for g in opt.param_groups:
                g["lr"] = float(s.lr(r))
            idx = torch.from_numpy(batch).to(s.device)
            loss = nn.functional.cross_entropy(
                forward(parties, server, [X[idx] for X in Xtr]), ytr[idx]
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            r += 1
            seconds += time.perf_counter() - tick
    return parties, server, seconds
