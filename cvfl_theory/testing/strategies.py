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

from .._validate import check_int_in_range, check_real

__all__ = [
    "data_matrices",
    "probabilities",
    "centre_specs",
    "encoders",
    "encoder_problems",
    "protocols",
    "protocol_problems",
    "tensors",
    "compressors",
    "compressor_problems",
    "bit_budgets",
    "budget_problems",
    "COMPRESSOR_KINDS",
]

COMPRESSOR_KINDS = ("scalar", "hexagonal", "topk", "identity")
"""Names accepted by the ``kinds`` argument of :func:`compressors`."""


_DTYPE_NAMES = ("float16", "float32", "float64")
_MAX_SIDE = 10**6


def _check_dtypes(dtypes: Any) -> list[str]:
    """A non-empty sequence (not a string) of float dtype names the package accepts."""
    if isinstance(dtypes, str) or not isinstance(dtypes, Sequence) or not dtypes:
        raise TypeError(
            f"dtypes must be a non-empty sequence of names from {_DTYPE_NAMES}, got {dtypes!r}"
        )
    bad = [d for d in dtypes if d not in _DTYPE_NAMES]
    if bad:
        raise ValueError(f"dtypes must be names from {_DTYPE_NAMES}, got {bad}")
    return list(dtypes)


def _check_sides(lo: Any, hi: Any, name: str) -> tuple[int, int]:
    """``min_<name>``, ``max_<name>`` as integers with ``1 <= min <= max <= 10^6``."""
    a = check_int_in_range(lo, f"min_{name}", 1, _MAX_SIDE)
    b = check_int_in_range(hi, f"max_{name}", a, _MAX_SIDE)
    return a, b


def _check_max_abs(max_abs: Any) -> float:
    return check_real(max_abs, "max_abs", 0.0, 1e300, low_open=True)


def _check_min_p(min_p: Any) -> float:
    return check_real(min_p, "min_p", 0.0, 1.0, low_open=True)


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

    min_n, max_n = _check_sides(min_n, max_n, "n")
    min_d, max_d = _check_sides(min_d, max_d, "d")
    dtypes = _check_dtypes(dtypes)
    max_abs = _check_max_abs(max_abs)
    if not isinstance(allow_ties, bool):
        raise TypeError(f"allow_ties must be True or False, got {allow_ties!r}")

    @st.composite
    def build(draw: Any) -> np.ndarray:
        n = draw(st.integers(min_n, max_n))
        d = draw(st.integers(min_d, max_d))
        dtype = np.dtype(draw(st.sampled_from(list(dtypes))))
        return draw(hnp.arrays(dtype, (n, d), elements=_elements(dtype, max_abs, allow_ties)))

    return build()


def _elements(dtype: np.dtype, max_abs: float, allow_ties: bool) -> Any:
    """Finite floats in ``[-max_abs, max_abs]`` representable in ``dtype`` (plus 0, 1, -1)."""
    st = _st()
    width = 16 if dtype == np.float16 else 32
    small = np.float16 if width == 16 else np.float32
    bound = small(min(float(max_abs), float(np.finfo(small).max)))
    if float(bound) > max_abs:  # rounded up: step inwards to the largest representable bound
        bound = np.nextafter(bound, small(0))
    b = float(bound)
    elements = st.floats(-b, b, allow_nan=False, allow_infinity=False, width=width)
    if allow_ties:
        elements = st.one_of(elements, st.sampled_from([0.0, 1.0, -1.0]))
    return elements


def probabilities(*, n: int, d: int, min_p: float = 0.05) -> Any:
    """Sampling probabilities in ``[min_p, 1]``: a float, an ``(n, 1)`` or an ``(n, d)`` array.

    ``n, d >= 1`` and ``0 < min_p <= 1`` (a probability 0 is refused by the encoders).
    """
    st = _st()
    from hypothesis.extra import numpy as hnp

    n = check_int_in_range(n, "n", 1, _MAX_SIDE)
    d = check_int_in_range(d, "d", 1, _MAX_SIDE)
    min_p = _check_min_p(min_p)

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

    n = check_int_in_range(n, "n", 1, _MAX_SIDE)
    max_abs = _check_max_abs(max_abs)

    value = st.floats(-max_abs, max_abs, allow_nan=False, width=32)
    return st.one_of(
        st.sampled_from(["mean", "zero", "min"]),
        value,
        hnp.arrays(np.float64, (n,), elements=value),
    )


def encoders(*, n: int, d: int, min_p: float = 0.05) -> Any:
    """Any encoder of :mod:`cvfl_theory.encoders`, with parameters valid for ``(n, d)`` data."""
    st = _st()
    n = check_int_in_range(n, "n", 1, _MAX_SIDE)
    d = check_int_in_range(d, "d", 1, _MAX_SIDE)
    min_p = _check_min_p(min_p)
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


def protocols(*, names: Sequence[str] | None = None, r_seed: int = 32) -> Any:
    """Any K3 protocol at any float width ``r`` in {16, 32, 64}, with seeds of ``r_seed`` bits.

    ``names`` restricts it to some of :data:`~cvfl_theory.protocols.PROTOCOLS`. A protocol drawn alone may not carry a given encoder's messages; draw compatible triples
    with :func:`protocol_problems`.
    """
    st = _st()
    from ..protocols import PROTOCOLS

    chosen = list(PROTOCOLS) if names is None else list(names)
    unknown = [n for n in chosen if n not in PROTOCOLS]
    if unknown or not chosen:
        raise ValueError(f"names must be some of {list(PROTOCOLS)}, got {chosen}")
    r_seed = check_int_in_range(r_seed, "r_seed", 1, 64)
    return st.builds(
        lambda name, r: PROTOCOLS[name](r=r, r_seed=r_seed),
        st.sampled_from(chosen),
        st.sampled_from((16, 32, 64)),
    )


def protocol_problems(**matrix_kwargs: Any) -> Any:
    """Triples ``(encoder, protocol, X)``: the protocol can carry the encoder's messages.

    The protocol is drawn among :func:`~cvfl_theory.protocols.applicable_protocols` of the
    encoder (its ``check_encoder`` accepts it), with ``r`` in {16, 32, 64}, so a test never has to
    filter ``check_applicable`` errors itself. ``matrix_kwargs`` go to :func:`data_matrices`.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=5, deadline=None)
    ... @given(protocol_problems(max_n=3, max_d=5))
    ... def test_bits_are_positive(problem):
    ...     encoder, protocol, X = problem
    ...     assert protocol.expected_bits(encoder, X) > 0
    >>> test_bits_are_positive()
    """
    st = _st()
    from ..protocols import applicable_protocols

    def with_protocol(pair: tuple[Any, np.ndarray]) -> Any:
        encoder, X = pair
        return st.sampled_from((16, 32, 64)).flatmap(
            lambda r: st.sampled_from(applicable_protocols(encoder, r=r)).map(
                lambda proto: (encoder, proto, X)
            )
        )

    return encoder_problems(**matrix_kwargs).flatmap(with_protocol)


def tensors(
    *,
    min_dims: int = 1,
    max_dims: int = 2,
    min_side: int = 1,
    max_side: int = 8,
    dtypes: Sequence[str] = ("float32", "float64"),
    max_abs: float = 1e3,
    allow_ties: bool = True,
    non_contiguous: bool | None = None,
) -> Any:
    """Finite torch tensors of 1 to 2 dimensions (an embedding ``(P,)`` or ``(B, P)``).

    Parameters
    ----------
    min_dims, max_dims : int
        Number of dimensions (the compressors accept 1 and 2).
    min_side, max_side : int
        Length of every dimension.
    dtypes : sequence of str
        Torch dtypes by name, e.g. ``("float32", "float64")``.
    max_abs : float
        Largest magnitude of an entry.
    allow_ties : bool
        Mix in repeated values (0, 1, -1), as :func:`data_matrices` does.
    non_contiguous : bool or None
        ``True``: every tensor is a strided view (every second column of a wider tensor; not
        contiguous whenever its last side is at least 2); ``False``: contiguous; ``None``: either.
    """
    st = _st()
    import torch
    from hypothesis.extra import numpy as hnp

    min_dims = check_int_in_range(min_dims, "min_dims", 1, 2)
    max_dims = check_int_in_range(max_dims, "max_dims", min_dims, 2)  # the compressors take 1-2
    min_side, max_side = _check_sides(min_side, max_side, "side")
    dtypes = _check_dtypes(dtypes)
    max_abs = _check_max_abs(max_abs)
    if non_contiguous is not None and not isinstance(non_contiguous, bool):
        raise TypeError(f"non_contiguous must be True, False or None, got {non_contiguous!r}")
    strided = st.booleans() if non_contiguous is None else st.just(bool(non_contiguous))

    @st.composite
    def build(draw: Any) -> Any:
        ndim = draw(st.integers(min_dims, max_dims))
        shape = tuple(draw(st.integers(min_side, max_side)) for _ in range(ndim))
        dtype = np.dtype(draw(st.sampled_from(list(dtypes))))
        view = draw(strided)
        full = shape[:-1] + (2 * shape[-1],) if view else shape
        a = draw(hnp.arrays(dtype, full, elements=_elements(dtype, max_abs, allow_ties)))
        t = torch.from_numpy(a)
        return t[..., ::2] if view else t

    return build()


def compressors(
    *,
    width: int | None = None,
    kinds: Sequence[str] = COMPRESSOR_KINDS,
    max_bits: int = 8,
    float_widths: Sequence[int] = (16, 32, 64),
    max_abs: float = 1e3,
) -> Any:
    """Compressors of :mod:`cvfl_theory.compressors` with valid parameter combinations (C5).

    - :class:`~cvfl_theory.compressors.ScalarQuantizer`: ``bits`` in ``[1, max_bits]``, a fixed
      range inside ``[-max_abs, max_abs]`` (wide enough for float64 to resolve its cells) or a
      min-max mode, with or without dither, out-of-range entries clipped;
    - :class:`~cvfl_theory.compressors.HexLatticeQuantizer`: the same, with ``bits >= 2`` when
      dithered (a dithered pair needs 7 codewords) and ``bits <= 8``;
    - :class:`~cvfl_theory.compressors.TopK`: ``k`` in ``[1, width]`` (only if ``width`` is
      given) or ``bits`` in ``[1, 32]``, values sent as ``r``-bit floats;
    - :class:`~cvfl_theory.compressors.Identity`: ``r`` in ``float_widths``.

    Every one compresses any finite embedding of width ``width`` (any width if ``None``) whose
    entries are at most the largest finite float of the smallest ``r`` in ``float_widths`` (65504
    for 16): use :func:`compressor_problems` to draw matching pairs.

    Parameters
    ----------
    width : int, optional
        Embedding width :math:`P` the compressor will see (bounds an explicit top-k ``k``).
    kinds : sequence of str
        Any of :data:`COMPRESSOR_KINDS`.
    max_bits : int
        Largest ``bits`` of the quantizers (at least 2 when ``"hexagonal"`` is the only kind).
    float_widths : sequence of int
        Float widths ``r`` of top-k values and the identity, from ``(16, 32, 64)``.
    max_abs : float
        Fixed quantizer ranges lie inside ``[-max_abs, max_abs]``.
    """
    st = _st()
    from ..compressors import HexLatticeQuantizer, Identity, ScalarQuantizer, TopK

    if isinstance(kinds, str) or not kinds or any(k not in COMPRESSOR_KINDS for k in kinds):
        raise ValueError(
            f"kinds must be a non-empty sequence from {COMPRESSOR_KINDS}, got {kinds!r}"
        )
    max_bits = check_int_in_range(max_bits, "max_bits", 1, 2**62)
    if list(kinds) == ["hexagonal"] and max_bits < 2:
        raise ValueError(f"max_bits must be >= 2 for a hexagonal quantizer, got {max_bits}")
    widths = list(float_widths)
    if not widths or any(r not in (16, 32, 64) for r in widths):
        raise ValueError(
            f"float_widths must be a non-empty sequence from (16, 32, 64), got {widths}"
        )
    if width is not None:
        width = check_int_in_range(width, "width", 1, 2**62)
    max_abs = check_real(max_abs, "max_abs", 1e-200, 1e200)

    # A fixed range: its span is at least 1e-3 * max_abs, far above the cell resolution floor.
    lo = st.floats(-max_abs, max_abs * 0.999, allow_nan=False)
    fixed = lo.flatmap(
        lambda a: st.floats(a + 1e-3 * max_abs, max_abs, allow_nan=False).map(lambda b: (a, b))
    )
    ranges = st.one_of(fixed, st.sampled_from(["minmax-row", "minmax-tensor"]))

    def scalar() -> Any:
        return st.builds(
            ScalarQuantizer,
            st.integers(1, min(max_bits, 16)),
            range=ranges,
            dither=st.booleans(),
        )

    def hexagonal() -> Any:
        top = min(max_bits, 8)
        dithered = st.builds(
            HexLatticeQuantizer, st.integers(2, max(top, 2)), range=ranges, dither=st.just(True)
        )
        plain = st.builds(
            HexLatticeQuantizer, st.integers(1, top), range=ranges, dither=st.just(False)
        )
        return st.one_of(dithered, plain) if top >= 2 else plain

    def topk() -> Any:
        r = st.sampled_from(widths)
        by_bits = st.builds(TopK, bits=st.integers(1, 32), r=r)
        if width is None:
            return by_bits
        return st.one_of(st.builds(TopK, k=st.integers(1, width), r=r), by_bits)

    def identity() -> Any:
        return st.builds(Identity, st.sampled_from(widths))

    makers = {"scalar": scalar, "hexagonal": hexagonal, "topk": topk, "identity": identity}
    return st.one_of(*(makers[k]() for k in dict.fromkeys(kinds)))


def compressor_problems(
    *, kinds: Sequence[str] = COMPRESSOR_KINDS, max_bits: int = 8, **tensor_kwargs: Any
) -> Any:
    """Pairs ``(compressor, x)``: a torch tensor from :func:`tensors` and a compressor for it.

    The compressor's top-k ``k`` fits ``x``'s width, a 16-bit float width is drawn only when
    every entry of ``x`` fits a float16, and fixed quantizer ranges lie inside
    ``[-max_abs, max_abs]`` of the tensors (at most :math:`10^{30}`), so
    ``compressor.decompress(compressor.compress(x))`` always succeeds.
    """
    st = _st()
    f16_max = float(np.finfo(np.float16).max)
    # fixed quantizer ranges on the data's scale; capped so that reconstructions (within one cell
    # of the range) fit float32
    range_abs = min(float(tensor_kwargs.get("max_abs", 1e3)), 1e30)

    def pair(x: Any) -> Any:
        big = bool(x.numel()) and float(x.abs().max()) > f16_max
        comp = compressors(
            width=int(x.shape[-1]),
            kinds=kinds,
            max_bits=max_bits,
            float_widths=(32, 64) if big else (16, 32, 64),
            max_abs=range_abs,
        )
        return st.tuples(comp, st.just(x))

    return tensors(**tensor_kwargs).flatmap(pair)


def _check_budget_args(protocol: Any, r: Any, check_protocol: Any) -> None:
    """The protocol (K6) and the wire's bits per float, 16, 32 or 64 (K3), checked when built."""
    check_protocol(protocol)
    if isinstance(r, bool) or r not in (16, 32, 64):
        raise ValueError(f"r (bits per float) must be 16, 32 or 64, got {r!r}")


def bit_budgets(
    X: Any,
    *,
    protocol: str = "sparse",
    r: int = 32,
    mu: Any = "mean",
    min_fraction: float = 0.01,
    max_fraction: float = 0.99,
) -> Any:
    r"""Bit budgets :math:`C_{\max}` that ``optimal_probabilities(X, bits=C, ...)`` spends exactly.

    With :math:`F` the fixed cost (:math:`n\bar r` for ``"sparse"``, :math:`n(\bar r + d)` for
    ``"varying-length"``; :math:`\bar r = r` unless ``mu="zero"``), :math:`c` the bits per expected
    sent entry and :math:`|S|` the number of entries off their centre (K6), the budgets are
    :math:`C = F + c\,f\,|S|` with :math:`f` in ``[min_fraction, max_fraction]``, inside
    :math:`(0, 1)`: above the fixed cost (so :math:`B > 0`) and below full communication of
    :math:`S` (so the water-filling is not saturated and the result's ``expected_bits`` equals
    :math:`C`, K6.2).

    Parameters
    ----------
    X : array of shape (n, d)
        The data the budgets are for.
    protocol : {"sparse", "varying-length"}
        K3 protocol of the conversion.
    r : int
        Bits per float.
    mu : {"mean", "zero", "min"}, float or array of shape (n,)
        Centres, as given to :func:`~cvfl_theory.optimal.optimal_probabilities` (fixed centres).
    min_fraction, max_fraction : float
        Range of :math:`f`, ``0 < min_fraction <= max_fraction < 1``.

    Raises
    ------
    ValueError
        If every entry of ``X`` equals its centre (:math:`|S| = 0`: no budget is feasible and
        unsaturated), or the fractions are out of range.
    """
    from ..optimal import budget_terms, check_protocol

    st = _st()
    _check_budget_args(protocol, r, check_protocol)
    lo = check_real(min_fraction, "min_fraction", 0.0, 1.0, low_open=True, high_open=True)
    hi = check_real(max_fraction, "max_fraction", lo, 1.0, high_open=True)
    fixed, per, support = budget_terms(X, protocol, r, mu)
    if support == 0:
        raise ValueError(
            f"X has no entry off its centres (mu={mu!r}): |S| = 0, so every bit budget above the "
            "fixed cost saturates; draw X with budget_problems() instead"
        )
    return st.floats(lo, hi).map(lambda f: fixed + per * f * support)


def budget_problems(
    *,
    protocol: str = "sparse",
    r: int = 32,
    mu: str = "mean",
    min_fraction: float = 0.01,
    max_fraction: float = 0.99,
    **matrix_kwargs: Any,
) -> Any:
    r"""Pairs ``(X, bits)``: a :func:`data_matrices` draw and a :func:`bit_budgets` draw for it.

    ``mu`` is ``"mean"``, ``"zero"`` or ``"min"``. A drawn ``X`` whose entries all equal their
    centres gets ``X[0, 0]`` moved by 1 so :math:`|S| \ge 1` (no draw is rejected); with
    ``"mean"`` or ``"min"`` the matrices have ``d >= 2``, since one column is always its own
    centre.
    """
    from ..optimal import check_protocol

    st = _st()
    _check_budget_args(protocol, r, check_protocol)
    check_real(min_fraction, "min_fraction", 0.0, 1.0, low_open=True, high_open=True)
    check_real(max_fraction, "max_fraction", min_fraction, 1.0, high_open=True)
    if mu not in ("mean", "zero", "min"):
        raise ValueError(f"mu must be 'mean', 'zero' or 'min', got {mu!r}")
    if mu != "zero":
        matrix_kwargs["min_d"] = max(2, matrix_kwargs.get("min_d", 1))
        if matrix_kwargs.get("max_d", 10) < 2:
            raise ValueError(f"mu={mu!r} needs max_d >= 2 (a single column equals its centre)")

    from ..optimal import budget_terms

    def supported(X: np.ndarray) -> np.ndarray:
        if budget_terms(X, protocol, r, mu)[2] == 0:
            X = X.copy()
            X[0, 0] = X[0, 0] + X.dtype.type(1)
        return X

    return (
        data_matrices(**matrix_kwargs)
        .map(supported)
        .flatmap(
            lambda X: st.tuples(
                st.just(X),
                bit_budgets(
                    X,
                    protocol=protocol,
                    r=r,
                    mu=mu,
                    min_fraction=min_fraction,
                    max_fraction=max_fraction,
                ),
            )
        )
    )
