"""Threads for small-model work: torch's intra-op threads and the BLAS pools, set for a block.

The simulator's models are tiny (a party's MLP step is about a millisecond), so torch's intra-op
parallelism costs more in synchronisation than it saves: on a busy 2-core machine 80
forward/backward passes of the tiny MLP took 7.5 s with 2 intra-op threads and 0.05 s with 1.
``cvfl train``, ``cvfl bound``, ``cvfl reproduce`` and every sweep worker therefore train under
:func:`torch_threads` with :data:`DEFAULT_THREADS` unless ``--threads`` says otherwise;
independent runs use the other cores (:mod:`cvfl_sim.experiments.sweep`).

The same holds for the BLAS and LAPACK of numpy and scipy on the small dense problems of the
Lemma-1 probe (256-square eigenvalue problems, thin products): on a 2-core machine it took
about 1.5 times as long with OpenBLAS's two threads as with one, so
:class:`~cvfl_sim.bounds.lemma1.Lemma1Probe` measures under :func:`blas_threads` (one thread).
"""

from __future__ import annotations

import threading
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
    """One ``threadpoolctl`` controller for the process, over numpy's and scipy's BLAS.

    Building it scans the loaded libraries (about a millisecond), so it is built once; numpy and
    scipy's LAPACK are imported first, so that both BLAS libraries are among those it sees.
    """
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


class _BlasLimit:
    """The process-wide BLAS limit of :func:`blas_threads`.

    Set on the first entry and restored on the last exit, whichever threads enter: a BLAS
    thread count belongs to the process.
    """

    lock = threading.Lock()
    depth = 0
    limiter: Any = None


@contextmanager
def blas_threads(threads: int = 1) -> Iterator[None]:
    """Run the block with at most ``threads`` threads in the BLAS libraries (numpy's, scipy's).

    The limit belongs to the process: the outermost block sets it and the last block to end
    restores the previous limits, also after an error (a failure to restore them never hides
    the block's own error). Blocks that overlap (nested, or in several threads) run under the
    limit of the first one.

    Parameters
    ----------
    threads : int
        Threads (``>= 1``) the BLAS libraries may use inside the block.

    Raises
    ------
    TypeError, ValueError
        ``threads`` is not an integer ``>= 1``.

    Examples
    --------
    >>> with blas_threads(1):
    ...     pass
    """
    n = check_threads(threads)
    with _BlasLimit.lock:
        if _BlasLimit.depth == 0:
            _BlasLimit.limiter = _controller().limit(limits=n, user_api="blas")
        _BlasLimit.depth += 1
    body_failed = True
    try:
        yield
        body_failed = False
    finally:
        with _BlasLimit.lock:
            _BlasLimit.depth -= 1
            if _BlasLimit.depth == 0:
                limiter, _BlasLimit.limiter = _BlasLimit.limiter, None
                try:
                    limiter.restore_original_limits()
                except Exception:
                    if not body_failed:
                        raise  # else the block's own error goes on, not the restore's
