r"""Reference data for the mean-estimation tools: real vectors and heavy-tailed synthetic sets.

Everything here works offline: scikit-learn ships the data sets used, read without importing it
(:func:`cvfl_sim.vfl.data.digits_arrays`). ``cvfl_theory`` stays free of I/O and data loading; these
helpers feed it.

- :func:`heavy_tailed` — Student-t or signed log-normal ``(n, d)`` matrices;
- :func:`logistic_gradients` — per-node gradients of a logistic regression on scikit-learn data
  split across nodes (the vectors a server averages in distributed training, K0);
- :func:`verification_datasets` — the data of the default ``cvfl verify`` suite.
"""

from __future__ import annotations

import numpy as np

from cvfl_theory._rng import RNGLike, as_generator

from ..vfl.data import breast_cancer_arrays, digits_arrays

__all__ = ["heavy_tailed", "logistic_gradients", "verification_datasets"]


def heavy_tailed(
    n: int, d: int, *, kind: str = "student-t", df: float = 2.5, rng: RNGLike = None
) -> np.ndarray:
    r"""A heavy-tailed synthetic data set of shape ``(n, d)`` (float64).

    ``"student-t"``: i.i.d. Student-t with ``df`` degrees of freedom; ``"lognormal"``: signed
    lognormal :math:`\pm e^{Z}`, :math:`Z \sim N(0, 2^2)`. Optimal probabilities gain most over
    uniform ones on such data (a few entries carry most of :math:`\sum a^2`).

    Examples
    --------
    >>> heavy_tailed(3, 5, rng=0).shape
    (3, 5)
    """
    gen = as_generator(rng)
    if kind == "student-t":
        return gen.standard_t(df, size=(n, d))
    if kind == "lognormal":
        return gen.choice([-1.0, 1.0], size=(n, d)) * gen.lognormal(0.0, 2.0, size=(n, d))
    raise ValueError(f"kind must be 'student-t' or 'lognormal', got {kind!r}")


def logistic_gradients(
    n_nodes: int = 8,
    *,
    dataset: str = "digits",
    steps: int = 5,
    lr: float = 0.5,
    rng: RNGLike = 0,
) -> np.ndarray:
    r"""Per-node gradients of a logistic regression, shape ``(n_nodes, d)``.

    The samples of a scikit-learn data set shipped with the library (``"breast_cancer"``,
    :math:`d = 30`, or ``"digits"``, :math:`d = 64`, label "digit is even") are standardised,
    shuffled and split evenly across nodes. A shared weight vector :math:`w` is taken after
    ``steps`` full-batch gradient steps from 0 (so gradients are not those of the trivial start),
    and node :math:`i` holds its local gradient
    :math:`g_i = \frac{1}{|D_i|}\sum_{(x, y) \in D_i} (\sigma(w^\top x) - y)\,x` — the vectors
    whose average a server wants (K0).

    Examples
    --------
    >>> G = logistic_gradients(4, dataset="breast_cancer")
    >>> G.shape
    (4, 30)
    """
    if dataset == "breast_cancer":
        A, target = breast_cancer_arrays()
        y = target.astype(np.float64)
    elif dataset == "digits":
        A, target = digits_arrays()
        y = (target % 2 == 0).astype(np.float64)
    else:
        raise ValueError(f"dataset must be 'breast_cancer' or 'digits', got {dataset!r}")
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or not 1 <= n_nodes <= len(y):
        raise ValueError(f"n_nodes must be an integer in [1, {len(y)}], got {n_nodes!r}")
    sd = A.std(axis=0)
    A = (A - A.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    perm = as_generator(rng).permutation(len(y))
    A, y = A[perm], y[perm]

    def grad(w: np.ndarray, A_: np.ndarray, y_: np.ndarray) -> np.ndarray:
        z = 1.0 / (1.0 + np.exp(-(A_ @ w)))
        return A_.T @ (z - y_) / len(y_)

    w = np.zeros(A.shape[1])
    for _ in range(steps):
        w -= lr * grad(w, A, y)
    parts = np.array_split(np.arange(len(y)), n_nodes)
    return np.stack([grad(w, A[idx], y[idx]) for idx in parts])


def verification_datasets(seed: int = 0) -> dict[str, np.ndarray]:
    """The ``cvfl verify`` suite's data: name → ``(n, d)`` array.

    A Gaussian set, a heavy-tailed (log-normal) set in float32, the first 10 scikit-learn digits
    (64 pixels, many exact zeros) and 8 standardised breast-cancer rows in float32.
    """
    rng = np.random.default_rng(seed)
    digits = digits_arrays()[0][:10].astype(np.float64)
    cancer = breast_cancer_arrays()[0][:8]
    cancer = ((cancer - cancer.mean(axis=0)) / cancer.std(axis=0)).astype(np.float32)
    return {
        "gaussian 10x48 f64": rng.standard_normal((10, 48)),
        "lognormal 8x40 f32": rng.lognormal(0.0, 1.5, size=(8, 40)).astype(np.float32),
        "digits 10x64 (sklearn)": digits,
        "breast-cancer 8x30 f32 (sklearn)": cancer,
    }
