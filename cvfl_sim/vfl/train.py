r"""Run C-VFL (Algorithm 1, C1): :func:`train` checks the backend and hands the run to a strategy.

The strategies give the same result (tested), each from the same :func:`~.config.setup_run`:

``"inprocess"`` (default)
    :func:`~cvfl_sim.vfl.vectorised.train_vectorised`, one process, every block's gradient from one
    backward pass; the only one that takes a ``probe``.
``"roles"``
    :func:`~cvfl_sim.vfl.roles.train_roles`, a :class:`~cvfl_sim.vfl.roles.Party` and a
    :class:`~cvfl_sim.vfl.roles.Server` per role exchanging the compressors' wire bytes in this
    process (option ``delay``).
``"distributed"``
    :func:`~cvfl_sim.vfl.distributed.train_distributed`, one process per role over
    ``torch.distributed`` (gloo) on this machine (options ``timeout``, ``delay``, ``start_method``,
    ``fault``).

The models are small, so one torch intra-op thread trains fastest (measured: 80 steps of the tiny
MLP took 0.05 s with one thread, 7.5 s with two on a busy 2-core machine); ``cvfl train`` and
sweeps train under :func:`cvfl_sim.vfl.threads.torch_threads` (one thread unless ``--threads``
says otherwise); from Python, call ``train`` inside ``with torch_threads(1):``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from .config import CVFLConfig, resolve_device
from .data import VerticalDataset
from .results import RunResult
from .vectorised import train_vectorised

__all__ = ["train", "BACKENDS", "BACKEND_OPTIONS", "backend_options_of"]

BACKEND_OPTIONS: dict[str, frozenset[str]] = {
    "inprocess": frozenset(),
    "roles": frozenset({"delay"}),
    "distributed": frozenset({"timeout", "delay", "start_method", "fault"}),
}
"""The ``backend_options`` each execution strategy of :func:`train` takes."""

BACKENDS = tuple(BACKEND_OPTIONS)
"""The execution strategies of :func:`train`."""


def backend_options_of(
    backend: Any, options: Any, probe: Any = None, on_epoch_end: Any = None
) -> dict[str, Any]:
    """``options`` as a dict, checked against the strategy ``backend`` (:data:`BACKEND_OPTIONS`).

    Raises
    ------
    ValueError, TypeError
        An unknown backend or option, options that are not a mapping of names to values, a
        ``probe`` or ``on_epoch_end`` that is not a callable, a ``probe`` for another backend than
        ``"inprocess"``, or ``on_epoch_end`` for ``"distributed"``.
    """
    if not isinstance(backend, str) or backend not in BACKEND_OPTIONS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    for name, hook in (("probe", probe), ("on_epoch_end", on_epoch_end)):
        if hook is not None and (isinstance(hook, type) or not callable(hook)):
            what = f"the class {hook.__name__}" if isinstance(hook, type) else repr(hook)
            raise TypeError(
                f"{name} must be a callable (an instance, e.g. Lemma1Probe()), got {what}"
            )
    if probe is not None and backend != "inprocess":
        raise ValueError(f"probe needs backend='inprocess', got backend={backend!r}")
    if on_epoch_end is not None and backend == "distributed":
        raise ValueError("on_epoch_end is not available with backend='distributed'")
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise TypeError(
            f"backend_options must be a dict of option names to values, got {options!r}"
        )
    unknown = sorted(set(options) - BACKEND_OPTIONS[backend])
    if unknown:
        raise ValueError(
            f"backend_options {unknown} are not options of backend {backend!r} "
            f"(allowed: {sorted(BACKEND_OPTIONS[backend])})"
        )
    return dict(options)


def train(
    dataset: VerticalDataset,
    config: CVFLConfig | None = None,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    on_epoch_end: Callable[[int], None] | None = None,
    probe: Callable[..., None] | None = None,
    backend: str = "inprocess",
    backend_options: dict[str, Any] | None = None,
) -> RunResult:
    r"""Run C-VFL (Algorithm 1, C1) and return its history, ledger and error log.

    Bad input raises ``ValueError`` or ``TypeError`` naming the argument, before training starts.

    Parameters
    ----------
    dataset : VerticalDataset
        The vertically partitioned data (C0).
    config : CVFLConfig, optional
        The run; ``CVFLConfig()`` (it works on any data set) by default.
    checkpoint : path-like, optional
        Written atomically after every epoch; an existing file (of the same data set and
        configuration, checked) is resumed, ending exactly as an uninterrupted run would.
    on_epoch_end : callable, optional
        Called with the number of finished epochs after each epoch (not ``"distributed"``).
    probe : callable, optional
        Called before every local step with the round's batch, messages and models, changing
        nothing: e.g. :class:`~cvfl_sim.bounds.lemma1.Lemma1Probe` (C4.1).
    backend : {"inprocess", "roles", "distributed"}
        The execution strategy (module docstring); ``probe`` needs ``"inprocess"``.
    backend_options : dict, optional
        Keyword arguments of the strategy (:data:`BACKEND_OPTIONS`), e.g. ``{"delay": 0.01}``.

    Returns
    -------
    RunResult
        History, per-round log, summary; the trained modules in ``result.models`` (not saved).

    Examples
    --------
    >>> from cvfl_sim.vfl.data import load_dataset
    >>> res = train(load_dataset("digits-quadrants"), CVFLConfig(Q=2, epochs=1, eval_every=None))
    >>> [round(r["epoch"]) for r in res.history]
    [0, 1]
    """
    config = CVFLConfig() if config is None else config
    opts = backend_options_of(backend, backend_options, probe, on_epoch_end)
    if probe is not None and isinstance(config, CVFLConfig):
        if resolve_device(config.device).type != "cpu":
            raise ValueError(
                f"probe needs device='cpu' (the probes measure in float64 numpy), got "
                f"device={config.device!r}"
            )
    if backend == "inprocess":
        return train_vectorised(
            dataset, config, checkpoint=checkpoint, on_epoch_end=on_epoch_end, probe=probe
        )
    if backend == "roles":
        from .roles import train_roles

        return train_roles(
            dataset, config, checkpoint=checkpoint, on_epoch_end=on_epoch_end, **opts
        )
    from .distributed import train_distributed

    return train_distributed(dataset, config, checkpoint=checkpoint, **opts)
