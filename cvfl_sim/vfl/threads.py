"""Threads for small-model work: torch's intra-op threads and the BLAS pools, set for a block.

The simulator's models are tiny (a party's MLP step is about a millisecond), so torch's intra-op
parallelism costs more in synchronisation than it saves: on a busy 2-core machine 80
forward/backward passes of the tiny MLP took 7.5 s with 2 intra-op threads and 0.05 s with 1.
``cvfl train``, ``cvfl bound``, ``cvfl reproduce`` and every sweep worker therefore train under
:func:`torch_threads` with :data:`DEFAULT_THREADS` unless ``--threads`` says otherwise;
independent runs use the other cores (:mod:`cvfl_sim.experiments.sweep`).

The same holds for the BLAS and LAPACK of numpy and scipy on the small dense problems of the
convergence probes (256-square eigenvalue problems, thin products): on a 2-core machine a
Lemma-1 probe took about 1.5 times as long with OpenBLAS's two threads as with one. The probes
run under :func:`blas_threads` (one thread).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

__all__ = ["DEFAULT_THREADS", "blas_threads", "check_threads", "torch_threads"]

DEFAULT_THREADS = 1
"""Torch intra-op threads of one small-model training run unless told otherwise."""


def check_threads(threads: object, name: str = "threads") -> int:
    """``threads`` as an ``int >= 1``; ``TypeError``/``ValueError`` naming ``name`` otherwise."""
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"{name} must be an integer >= 1, got {threads!r}")
    if threads < 1:
        raise ValueError(f"{name} must be >= 1, got {threads}")
    return threads


@contextmanager
def torch_threads(threads: int = DEFAULT_THREADS) -> Iterator[None]:
    """Run the block with ``threads`` torch intra-op threads; the previous number is restored.

    Parameters
    ----------
    threads : int
        Intra-op threads (``>= 1``) for :func:`torch.set_num_threads`.

    Examples
    --------
    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with torch_threads(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    import torch

    n = check_threads(threads)
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


@cache
def _controller() -> Any:
    """One ``threadpoolctl`` controller for the process (building it scans the loaded libraries)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextmanager
def blas_threads(threads: int = 1) -> Iterator[None]:
    """Run the block with at most ``threads`` threads in the BLAS libraries (numpy's, scipy's).

    Uses ``threadpoolctl`` on the libraries loaded when it was first called; the previous limits
    are restored on exit, also after an error.

    Examples
    --------
    >>> with blas_threads(1):
    ...     pass
    """
    n = check_threads(threads)
    with _controller().limit(limits=n, user_api="blas"):
        yield
