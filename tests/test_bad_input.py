"""Bad input is refused with ValueError/TypeError naming the argument and the allowed range."""

import numpy as np
import pytest

from cvfl_theory import (
    BinaryQuantizationEncoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
)
from cvfl_theory.verify import verify

GOOD = np.ones((2, 3))


@pytest.mark.parametrize(
    "X, exc, match",
    [
        (np.array([[1.0, np.nan]]), ValueError, "X must be finite; found nan at index \\(0, 1\\)"),
        (np.array([[1.0], [np.inf]]), ValueError, "X must be finite; found inf"),
        (np.array([[1e308, 1e308]]), None, None),  # finite, only the sum overflows: accepted
        (np.ones(3), ValueError, "X must be 2-D"),
        (np.ones((2, 2, 2)), ValueError, "X must be 2-D"),
        (np.ones((0, 3)), ValueError, "n >= 1 rows and d >= 1 columns"),
        (np.ones((3, 0)), ValueError, "n >= 1 rows and d >= 1 columns"),
        (np.array([[True, False]]), TypeError, "X must hold real numbers"),
        (np.array([[1 + 1j]]), TypeError, "X must hold real numbers"),
        (np.array([["a"]]), TypeError, "X must hold real numbers"),
    ],
)
def test_bad_data(X, exc, match):
    enc = IndependentEncoder(1.0, mu="zero")
    if exc is None:
        enc.encode(X, rng=0)
        return
    for call in (lambda: enc.encode(X, rng=0), lambda: enc.mse(X)):
        with pytest.raises(exc, match=match):
            call()


def test_torch_bad_data():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="X must be finite"):
        IndependentEncoder(0.5).encode(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(TypeError, match="bfloat16"):
        IndependentEncoder(0.5).encode(torch.ones(2, 2, dtype=torch.bfloat16))


@pytest.mark.parametrize("p", [0.0, -0.1, 1.5, np.nan, np.inf])
def test_p_outside_unit_interval(p):
    with pytest.raises(ValueError, match=r"p must lie in \(0, 1\]"):
        IndependentEncoder(p)


@pytest.mark.parametrize("p", [np.ones(3) * 0.5, np.ones((1, 2, 3)) * 0.5, np.zeros((0, 0))])
def test_p_wrong_shape(p):
    with pytest.raises(ValueError, match="p must"):
        IndependentEncoder(p)


def test_p_shape_mismatch_with_data():
    with pytest.raises(ValueError, match=r"p has shape \(3, 1\).*\(2, 1\) or \(2, 3\)"):
        IndependentEncoder(np.full((3, 1), 0.5)).encode(GOOD)
    with pytest.raises(ValueError, match=r"p has shape \(2, 4\)"):
        IndependentEncoder(np.full((2, 4), 0.5)).mse(GOOD)


@pytest.mark.parametrize(
    "k, exc",
    [
        (0, ValueError),
        (-1, ValueError),
        (1.5, TypeError),
        (np.array([1, 0]), ValueError),
        (True, TypeError),
    ],
)
def test_k_outside_range(k, exc):
    with pytest.raises(exc, match="k must"):
        FixedSizeEncoder(k)


def test_k_larger_than_d_and_wrong_length():
    with pytest.raises(ValueError, match=r"k must be in \[1, d\] = \[1, 3\]; got 4"):
        FixedSizeEncoder(4).encode(GOOD)
    with pytest.raises(ValueError, match=r"k has shape \(3,\), expected \(2,\)"):
        FixedSizeEncoder(np.array([1, 2, 3])).encode(GOOD)


@pytest.mark.parametrize("mu", ["median", np.ones((2, 2)), np.nan])
def test_bad_centres(mu):
    with pytest.raises(ValueError, match="mu must"):
        IndependentEncoder(0.5, mu=mu)


def test_centre_length_mismatch():
    with pytest.raises(ValueError, match=r"mu has shape \(3,\), expected \(2,\)"):
        IndependentEncoder(0.5, mu=np.zeros(3)).encode(GOOD)


@pytest.mark.parametrize("rng", ["seed", 1.5, -3, True])
def test_bad_rng(rng):
    with pytest.raises((TypeError, ValueError), match="rng must"):
        IndependentEncoder(0.5).encode(GOOD, rng=rng)


def test_bad_rotation_seed_and_verify_arguments():
    with pytest.raises(ValueError, match="rotation_seed must be in"):
        RotatedBinaryEncoder(rotation_seed=-1)
    with pytest.raises(ValueError, match=r"trials must be in \[2,"):
        verify(BinaryQuantizationEncoder(), GOOD, trials=1)
    with pytest.raises(ValueError, match="alpha must be in"):
        verify(BinaryQuantizationEncoder(), GOOD, trials=10, alpha=2.0)
