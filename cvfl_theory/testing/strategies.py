"""Public Hypothesis strategies for property-based tests of encoders and protocols.

Hypothesis is imported when a strategy is built, not when this module is imported, so it stays an
optional (``dev``) dependency. Every strategy takes keyword-only arguments.

Examples
--------
>>> from hypothesis import given, settings
>>> from cvfl_theory.testing.strategies import encoder_problems
>>> @settings(max_examples=5, deadline=None)
... @given(encoder_problems(max_n=3, max_d=5))
... def test_mse_is_nonnegative(problem):
...     encoder, X = problem
...     assert encoder.mse(X) >= 0
>>> test_mse_is_nonnegative()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "data_matrices",
    "probabilities",
    "centre_specs",
    "encoders",
    "encoder_problems",
]


def _st() -> Any:
    try:
        import hypothesis.strategies as st
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "cvfl_theory.testing.strategies needs hypothesis: pip install 'cvfl[dev]'"
        ) from exc
    return st


def data_matrices(
    *,
    min_n: int = 1,
    max_n: int = 5,
    min_d: int = 1,
    max_d: int = 10,
    dtypes: Sequence[str] = ("float32", "float64"),
    max_abs: float = 1e3,
    allow_ties: bool = True,
) -> Any:
    """Finite ``(n, d)`` float matrices of random shape and dtype.

    With ``allow_ties`` some entries repeat (zeros, row minima, equal values), which exercises the
    ``X_i(j) = mu_i`` edge cases.
    """
    st = _st()
    from hypothesis.extra import numpy as hnp

    @st.composite
    def build(draw: Any) -> np.ndarray:
        n = draw(st.integers(min_n, max_n))
        d = draw(st.integers(min_d, max_d))
        dtype = np.dtype(draw(st.sampled_from(list(dtypes))))
        width = 16 if dtype == np.float16 else 32
        elements = st.floats(-max_abs, max_abs, allow_nan=False, allow_infinity=False, width=width)
        if allow_ties:
            elements = st.one_of(elements, st.sampled_from([0.0, 1.0, -1.0]))
        return draw(hnp.arrays(dtype, (n, d), elements=elements))

    return build()


def probabilities(*, n: int, d: int, min_p: float = 0.05) -> Any:
    """Sampling probabilities in ``[min_p, 1]``: a float, an ``(n, 1)`` or an ``(n, d)`` array."""
    st = _st()
    from hypothesis.extra import numpy as hnp

    p = st.floats(min_p, 1.0, allow_nan=False)
    return st.one_of(
        p,
        hnp.arrays(np.float64, (n, 1), elements=p),
        hnp.arrays(np.float64, (n, d), elements=p),
    )


def centre_specs(*, n: int, max_abs: float = 1e3) -> Any:
    """Centre specifications: ``"mean"``, ``"zero"``, ``"min"``, a float or an ``(n,)`` array."""
    st = _st()
    from hypothesis.extra import numpy as hnp

    value = st.floats(-max_abs, max_abs, allow_nan=False, width=32)
    return st.one_of(
        st.sampled_from(["mean", "zero", "min"]),
        value,
        hnp.arrays(np.float64, (n,), elements=value),
    )


def encoders(*, n: int, d: int, min_p: float = 0.05) -> Any:
    """Any encoder of :mod:`cvfl_theory.encoders`, with parameters valid for ``(n, d)`` data."""
    st = _st()
    from ..encoders import (
        BinaryQuantizationEncoder,
        FixedSizeEncoder,
        IndependentEncoder,
        RotatedBinaryEncoder,
    )

    independent = st.builds(
        IndependentEncoder, p=probabilities(n=n, d=d, min_p=min_p), mu=centre_specs(n=n)
    )
    k = st.one_of(
        st.integers(1, d),
        st.lists(st.integers(1, d), min_size=n, max_size=n).map(np.array),
    )
    fixed = st.builds(FixedSizeEncoder, k=k, mu=centre_specs(n=n))
    return st.one_of(
        independent,
        fixed,
        st.just(BinaryQuantizationEncoder()),
        st.integers(0, 2**32).map(RotatedBinaryEncoder),
    )


def encoder_problems(**matrix_kwargs: Any) -> Any:
    """Pairs ``(encoder, X)`` with the encoder's parameters matching ``X``'s shape."""
    st = _st()
    return data_matrices(**matrix_kwargs).flatmap(
        lambda X: st.tuples(encoders(n=X.shape[0], d=X.shape[1]), st.just(X))
    )
