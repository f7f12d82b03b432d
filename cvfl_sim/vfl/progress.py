"""Progress bars: a widget in Jupyter, a text bar on a terminal, nothing when asked for silence.

One helper for every long computation of the simulator (training, probes, certificates, sweeps).
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["progress_bar"]


def progress_bar(
    total: int | None = 0,
    progress: bool | None = None,
    desc: str | None = None,
    unit: str = "run",
) -> Any:
    """A :mod:`tqdm.auto` bar on stderr, with the ETA of the average rate so far.

    In a Jupyter kernel it is a widget, elsewhere a text bar on stderr. ``progress``: ``None``
    shows it when stderr is a terminal or in a notebook, ``True`` always, ``False`` never (a
    disabled bar, which costs nothing). The environment variable ``CVFL_PROGRESS=0`` silences
    every bar of the process and its children (the docs build sets it).

    Examples
    --------
    >>> with progress_bar(3, progress=False) as bar:
    ...     bar.update(3)
    """
    from tqdm.auto import tqdm

    disable = {True: False, False: True, None: None}[progress]
    if progress is None and _in_notebook():
        disable = False
    if os.environ.get("CVFL_PROGRESS") == "0":
        disable = True
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=disable, smoothing=0.0)


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (where stderr is no terminal, yet a bar shows)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    get = getattr(shell, "get_ipython", None)
    ip = get() if get is not None else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"
