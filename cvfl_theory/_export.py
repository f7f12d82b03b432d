"""Hand results to other tools: pandas DataFrames (optional dependency) and standard JSON values.

pandas is imported only when a DataFrame is asked for (:func:`import_pandas`), so it stays the
optional ``cvfl[dataframe]`` extra; :func:`json_safe` maps numpy scalars and non-finite floats to
values that :func:`json.dumps` writes as standard JSON.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["import_pandas", "dataframe", "json_safe"]


def import_pandas() -> Any:
    """Import pandas, or raise an ``ImportError`` that says how to install it."""
    try:
        import pandas
    except ImportError as exc:
        raise ImportError(
            "to_dataframe() needs pandas, an optional dependency of cvfl: install it with "
            "`pip install pandas` or `pip install 'cvfl[dataframe]'`"
        ) from exc
    return pandas


def dataframe(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Any:
    """A :class:`pandas.DataFrame` of ``rows`` with ``columns`` in this order.

    ``None`` cells become NaN, as an empty CSV cell reads back.
    """
    pd = import_pandas()
    data = [[math.nan if v is None else v for v in r] for r in rows]
    return pd.DataFrame(data, columns=list(columns))


def json_safe(v: Any) -> Any:
    """``v`` with non-finite floats as strings (``"inf"``, ``"nan"``) and numpy values as Python.

    Dictionaries, lists and tuples are converted recursively (tuples become lists).
    """
    if isinstance(v, np.ndarray):
        return json_safe(v.tolist())
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v
