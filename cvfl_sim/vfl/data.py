r"""Vertically partitioned data sets (C0, C8).

A :class:`VerticalDataset` holds, for ``M`` parties, the feature blocks :math:`X_m \in
\mathbb{R}^{N \times D_m}` of the *same* ``N`` samples, the labels (known to every party, C0) and a
fixed train/test split. Built-in sets work offline from the data files that scikit-learn ships
(read directly, see :func:`digits_arrays`) and stand in for the paper's experiments (C8):

``digits-quadrants``
    each 8×8 digit cut into four 4×4 quadrants, one per party (the CIFAR-10 set-up);
``digits-views``
    12 deterministic views of each digit (rotations by multiples of 30°), ``parties=4`` parties
    holding 3 views each or ``parties=12`` holding one (the ModelNet10 set-up);
``breast-cancer``
    30 tabular features split by columns over 4 parties, binary and imbalanced, F1 metric (the
    MIMIC-III set-up).

Loaders for the original data sets read local files only (:func:`load_npz`, :func:`load_csv`,
:func:`load_original`); nothing is ever downloaded.

References
----------
- [CVFL]_ Castiglia, Das, Wang & Patterson, "Compressed-VFL: Communication-Efficient Learning with
   Vertically Partitioned Data", ICML 2022.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cvfl_theory._rng import RNGLike, as_generator

from . import paper_files
from .files import check_file, read_csv_rows, read_npz

__all__ = [
    "VerticalDataset",
    "load_dataset",
    "dataset_names",
    "load_npz",
    "load_csv",
    "load_original",
    "cifar10_quadrants",
    "modelnet10_views",
    "mimic3_mortality",
    "PAPER_DATASETS",
    "PAPER_COUNTERPART",
    "digits_arrays",
    "breast_cancer_arrays",
]

_TASKS = ("classification",)
_METRICS = ("accuracy", "f1")


def _as_2d_float(a: Any, name: str) -> np.ndarray:
    """Return ``a`` as a finite 2-D float64 array ``(N, D)``, flattening trailing axes."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    try:
        arr = np.asarray(a)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of numbers, got {type(a).__name__}") from None
    if arr.dtype == bool or arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.ndim < 1:
        raise ValueError(f"{name} must have a sample axis, got a scalar")
    arr = arr.reshape(arr.shape[0], -1) if arr.ndim != 2 else arr
    arr = arr.astype(np.float64)
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must have N >= 1 rows and D >= 1 columns, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        bad = tuple(int(b) for b in np.argwhere(~np.isfinite(arr))[0])
        raise ValueError(f"{name} must be finite; found {arr[bad]} at (sample, feature) {bad}")
    return arr


@dataclass
class VerticalDataset:
    r"""Feature blocks of ``M`` parties over the same samples, labels and a train/test split (C0).

    Attributes
    ----------
    train_parts, test_parts : list of numpy.ndarray
        ``M`` arrays of shape ``(N_train, D_m)`` / ``(N_test, D_m)``, float64; party ``m`` holds
        block ``m`` only.
    y_train, y_test : numpy.ndarray
        Integer labels in ``0 .. n_classes - 1``.
    n_classes : int
        Number of classes (labels are validated against it).
    task : str
        ``"classification"`` (cross-entropy loss).
    metric : str
        The headline metric, ``"accuracy"`` or ``"f1"`` (binary F1 of class 1, macro F1 for more
        classes); both are always reported.
    name : str
        Short name used in results.
    party_shapes : list of tuple or None
        Optional per-party sample shapes (e.g. ``(3, 8, 8)`` for three 8×8 views) for models that
        reshape the flat block (CNN, GRU). ``prod(shape) == D_m``.
    """

    train_parts: list[np.ndarray]
    test_parts: list[np.ndarray]
    y_train: np.ndarray
    y_test: np.ndarray
    n_classes: int
    task: str = "classification"
    metric: str = "accuracy"
    name: str = "custom"
    party_shapes: list[tuple[int, ...]] | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        parts: Sequence[Any],
        y: Any,
        task: str = "classification",
        test_fraction: float = 0.2,
        rng: RNGLike = 0,
        *,
        metric: str = "accuracy",
        name: str = "custom",
        n_classes: int | None = None,
        party_shapes: Sequence[tuple[int, ...]] | None = None,
        standardize: bool = False,
    ) -> VerticalDataset:
        r"""Build a data set from per-party feature arrays and labels.

        The split is stratified by class and drawn from ``rng``, so the same seed gives the same
        split.

        Parameters
        ----------
        parts : sequence of array_like
            ``M >= 1`` arrays with the same number of samples ``N``; trailing axes are flattened.
        y : array_like
            ``N`` integer labels. Without ``n_classes`` they must be exactly ``0 .. K - 1`` with
            every class present (``K >= 2``): labels such as ``{0, 2, 4}`` are refused, never
            remapped silently (``numpy.unique(y, return_inverse=True)[1]`` remaps them).
        task : str
            ``"classification"``.
        test_fraction : float
            Fraction of samples in the test set, in ``(0, 1)``.
        rng : int, Generator or None
            Seed of the split.
        metric : str
            ``"accuracy"`` or ``"f1"``.
        name : str
            Name recorded in results.
        n_classes : int, optional
            Number of classes ``K >= 2``; labels must lie in ``0 .. K - 1`` and some classes may
            then be absent. Defaults to the number of distinct labels (see ``y``).
        party_shapes : sequence of tuple, optional
            Per-party sample shapes for CNN/GRU party models.
        standardize : bool
            Scale every feature to zero mean and unit variance using *training* statistics.

        Returns
        -------
        VerticalDataset

        Raises
        ------
        ValueError
            Different sample counts, NaN/inf features, non-integer, negative or non-contiguous
            labels, a single class, bad fractions.
        TypeError
            Non-numeric features, labels that are not integers (or integral floats), a
            non-integer ``n_classes``.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.arange(40.0).reshape(10, 4)
        >>> ds = VerticalDataset.from_arrays([X[:, :2], X[:, 2:]], np.arange(10) % 2)
        >>> ds.n_parties, ds.n_train, ds.n_test
        (2, 8, 2)
        """
        if task not in _TASKS:
            raise ValueError(f"task must be one of {_TASKS}, got {task!r}")
        if isinstance(parts, np.ndarray) or not isinstance(parts, Sequence) or len(parts) < 1:
            raise TypeError("parts must be a non-empty list of per-party arrays (one per party)")
        arrays = [_as_2d_float(p, f"parts[{m}]") for m, p in enumerate(parts)]
        counts = [a.shape[0] for a in arrays]
        if len(set(counts)) != 1:
            raise ValueError(
                f"parts must all hold the same samples; got sample counts {counts} per party"
            )
        yv = np.asarray(y.detach().cpu().numpy() if hasattr(y, "detach") else y)
        if yv.ndim != 1 or yv.shape[0] != counts[0]:
            raise ValueError(
                f"y must be a 1-D array of length N={counts[0]} (the parts' sample count), "
                f"got shape {yv.shape}"
            )
        yv, k = _labels(yv, n_classes)
        if not 0.0 < float(test_fraction) < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
        gen = as_generator(rng)
        train_idx, test_idx = _stratified_split(yv, float(test_fraction), gen)
        if len(train_idx) == 0 or len(test_idx) == 0:
            raise ValueError(
                f"test_fraction={test_fraction} leaves an empty train or test set for N={counts[0]}"
            )
        tr = [a[train_idx] for a in arrays]
        te = [a[test_idx] for a in arrays]
        if standardize:
            for m in range(len(tr)):
                mu = tr[m].mean(axis=0)
                sd = tr[m].std(axis=0)
                sd[sd == 0] = 1.0
                tr[m] = (tr[m] - mu) / sd
                te[m] = (te[m] - mu) / sd
        return cls(
            train_parts=tr,
            test_parts=te,
            y_train=yv[train_idx],
            y_test=yv[test_idx],
            n_classes=k,
            task=task,
            metric=metric,
            name=name,
            party_shapes=None if party_shapes is None else [tuple(s) for s in party_shapes],
        )

    @classmethod
    def from_split(
        cls,
        train_parts: Sequence[Any],
        y_train: Any,
        test_parts: Sequence[Any],
        y_test: Any,
        *,
        n_classes: int,
        metric: str = "accuracy",
        name: str = "custom",
        party_shapes: Sequence[tuple[int, ...]] | None = None,
        info: dict[str, Any] | None = None,
    ) -> VerticalDataset:
        """Build a data set whose train/test split is given (a data set's own files split it).

        ``train_parts`` and ``test_parts`` list the ``M`` parties' blocks (trailing axes
        flattened, converted to float64 and checked finite); the labels must lie in
        ``0 .. n_classes - 1``. Everything is checked as in :meth:`from_arrays`.
        """
        if not isinstance(train_parts, Sequence) or not isinstance(test_parts, Sequence):
            raise TypeError("train_parts and test_parts must be lists of per-party arrays")
        tr = [_as_2d_float(p, f"train_parts[{m}]") for m, p in enumerate(train_parts)]
        te = [_as_2d_float(p, f"test_parts[{m}]") for m, p in enumerate(test_parts)]
        ytr, k = _labels(np.asarray(y_train), n_classes)
        yte, _ = _labels(np.asarray(y_test), n_classes)
        return cls(
            train_parts=tr,
            test_parts=te,
            y_train=ytr,
            y_test=yte,
            n_classes=k,
            metric=metric,
            name=name,
            party_shapes=None if party_shapes is None else [tuple(s) for s in party_shapes],
            info=dict(info or {}),
        )

    # ------------------------------------------------------------------ checks and views
    def validate(self) -> None:
        """Check shapes, finiteness and label range; raise a ValueError naming the problem."""
        if len(self.train_parts) != len(self.test_parts) or len(self.train_parts) < 1:
            raise ValueError(
                f"train_parts and test_parts must list the same M >= 1 parties, got "
                f"{len(self.train_parts)} and {len(self.test_parts)}"
            )
        if isinstance(self.n_classes, bool) or not isinstance(self.n_classes, (int, np.integer)):
            raise TypeError(f"n_classes must be an int, got {self.n_classes!r}")
        for split, parts, y in (
            ("train", self.train_parts, self.y_train),
            ("test", self.test_parts, self.y_test),
        ):
            counts = [np.shape(p)[0] for p in parts]
            if len(set(counts)) != 1:
                raise ValueError(
                    f"{split}_parts must all hold the same samples; got sample counts {counts}"
                )
            if np.shape(y) != (counts[0],):
                raise ValueError(f"y_{split} must have shape ({counts[0]},), got {np.shape(y)}")
            if np.asarray(y).dtype.kind not in "iu":
                raise TypeError(
                    f"y_{split} must hold integer labels, got dtype {np.asarray(y).dtype}"
                )
            for m, p in enumerate(parts):
                if np.ndim(p) != 2:
                    raise ValueError(f"{split}_parts[{m}] must be 2-D (N, D_m), got {np.shape(p)}")
                if not np.isfinite(p).all():
                    raise ValueError(f"{split}_parts[{m}] must be finite (found NaN or inf)")
            if len(y) and (np.min(y) < 0 or np.max(y) >= self.n_classes):
                raise ValueError(
                    f"y_{split} labels must be in [0, {self.n_classes - 1}] (n_classes="
                    f"{self.n_classes}); got range [{int(np.min(y))}, {int(np.max(y))}]"
                )
        dims_tr = [p.shape[1] for p in self.train_parts]
        dims_te = [p.shape[1] for p in self.test_parts]
        if dims_tr != dims_te:
            raise ValueError(f"train/test feature sizes differ per party: {dims_tr} vs {dims_te}")
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be >= 2, got {self.n_classes}")
        if self.metric not in _METRICS:
            raise ValueError(f"metric must be one of {_METRICS}, got {self.metric!r}")
        if self.party_shapes is not None:
            if len(self.party_shapes) != len(dims_tr):
                raise ValueError("party_shapes must give one shape per party")
            for m, (s, d) in enumerate(zip(self.party_shapes, dims_tr)):
                if int(np.prod(s)) != d:
                    raise ValueError(f"party_shapes[{m}]={s} does not hold D_{m}={d} features")

    @property
    def n_parties(self) -> int:
        """Number of parties ``M``."""
        return len(self.train_parts)

    @property
    def n_train(self) -> int:
        """Number of training samples."""
        return int(self.y_train.shape[0])

    @property
    def n_test(self) -> int:
        """Number of test samples."""
        return int(self.y_test.shape[0])

    @property
    def feature_dims(self) -> list[int]:
        """Block sizes ``D_m``."""
        return [int(p.shape[1]) for p in self.train_parts]

    def joint_train(self) -> np.ndarray:
        """The concatenated training features ``[X_1, ..., X_M]`` (for the joint-model oracle)."""
        return np.concatenate(self.train_parts, axis=1)

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (name, sizes, metric) recorded with every result."""
        return {
            "name": self.name,
            "n_parties": self.n_parties,
            "feature_dims": self.feature_dims,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "n_classes": self.n_classes,
            "metric": self.metric,
            **self.info,
        }

    def __repr__(self) -> str:
        return (
            f"VerticalDataset(name={self.name!r}, parties={self.n_parties}, "
            f"D_m={self.feature_dims}, train={self.n_train}, test={self.n_test}, "
            f"classes={self.n_classes}, metric={self.metric!r})"
        )


def _labels(y: np.ndarray, n_classes: Any) -> tuple[np.ndarray, int]:
    """Check class labels ``y`` (1-D) and return them as int64 with the number of classes ``K``.

    Without ``n_classes`` the labels must be exactly ``0 .. K - 1``, each present, ``K >= 2``.
    """
    if y.dtype == bool or y.dtype.kind not in "iuf":
        raise TypeError(f"y must hold integer class labels, got dtype {y.dtype}")
    if y.dtype.kind == "f":
        bad = ~np.isfinite(y) | (y != np.round(y)) | (np.abs(y) > 2**31)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"y must hold integer class labels; found {float(y[i])} at sample {i}")
    y = y.astype(np.int64)
    if y.min() < 0:
        i = int(np.argmin(y))
        raise ValueError(f"y labels must be >= 0; found {int(y[i])} at sample {i}")
    present = np.unique(y)
    if n_classes is None:
        if len(present) < 2:
            raise ValueError(
                f"y holds a single class ({int(present[0])}); classification needs >= 2 classes"
            )
        top = int(present[-1])
        if top != len(present) - 1:
            gaps = np.setdiff1d(np.arange(min(top, 20) + 1), present).tolist()
            raise ValueError(
                f"y must use the labels 0..K-1 with every class present; got {len(present)} "
                f"distinct labels up to {top}"
                + (f" (missing {gaps}{'...' if top > 20 else ''})" if gaps else "")
                + "; remap them with numpy.unique(y, return_inverse=True)[1], or pass n_classes"
            )
        return y, len(present)
    if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)):
        raise TypeError(f"n_classes must be an int, got {n_classes!r}")
    return y, int(n_classes)


def _stratified_split(
    y: np.ndarray, test_fraction: float, gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per class, shuffle and send ``round(test_fraction * n_c)`` samples to the test set."""
    train, test = [], []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        idx = idx[gen.permutation(len(idx))]
        n_test = int(round(test_fraction * len(idx)))
        if len(idx) > 1:
            n_test = min(max(n_test, 1), len(idx) - 1)
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


# ---------------------------------------------------------------------- bundled files
def _sklearn_file(name: str) -> str:
    """The path of scikit-learn's bundled data file ``name``, found without importing it.

    :func:`importlib.util.find_spec` locates the package; importing it would cost a second.
    """
    spec = importlib.util.find_spec("sklearn")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    if not roots:
        raise ImportError(
            "the built-in data sets read the files shipped with scikit-learn, which is not "
            "installed; install it: pip install scikit-learn"
        )
    return os.path.join(roots[0], "datasets", "data", name)


def _read_table(path: str, n: int, d: int, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Read a CSV of ``n`` rows of ``d`` features and a class label: ``(features, labels)``.

    A ``.gz`` file is decompressed; a first line that is not all numbers (the
    ``569,30,malignant,benign`` header of scikit-learn's files) is skipped. The file comes from
    outside: anything but an ``(n, d + 1)`` table of finite numbers whose last column holds
    labels ``0 .. n_classes - 1`` is refused with a ``ValueError`` naming the file.
    """
    opener: Any = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        if lines and not all(_is_number(v) for v in lines[0].split(",")):
            lines = lines[1:]
        if not lines:
            raise ValueError("no rows")
        table = np.loadtxt(lines, delimiter=",", dtype=np.float64, ndmin=2)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"cannot read the data file {path!r}: {exc}") from None
    if table.shape != (n, d + 1) or not np.isfinite(table).all():
        raise ValueError(
            f"the data file {path!r} must hold {n} rows of {d + 1} finite numbers, "
            f"got shape {table.shape}"
        )
    labels = table[:, -1]
    if not np.array_equal(labels, np.round(labels)) or not (
        0 <= labels.min() and labels.max() < n_classes
    ):
        raise ValueError(f"the data file {path!r}: labels must be integers 0..{n_classes - 1}")
    features, y = table[:, :-1], labels.astype(np.int64)
    features.setflags(write=False)  # cached: shared by every caller
    y.setflags(write=False)
    return features, y


def _is_number(text: str) -> bool:
    """Whether ``float(text)`` works (a CSV line of such fields is data, not a header)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


@functools.cache
def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``(pixels (1797, 64) float64 in 0..16, labels (1797,) int64)``.

    Equal to ``load_digits().data`` and ``.target`` (a test checks it) without importing
    scikit-learn; read once per process (read-only arrays).
    """
    return _read_table(_sklearn_file("digits.csv.gz"), 1797, 64, 10)


@functools.cache
def breast_cancer_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's breast cancer set: ``(features (569, 30) float64, labels (569,) int64)``.

    Label 0 is *malignant*, as in ``load_breast_cancer()`` (equal to its ``.data`` and
    ``.target``; a test checks it); read without importing scikit-learn, once per process.
    """
    return _read_table(_sklearn_file("breast_cancer.csv"), 569, 30, 2)


# ---------------------------------------------------------------------- built-in sets
def _digits() -> tuple[np.ndarray, np.ndarray]:
    pixels, y = digits_arrays()
    return pixels.reshape(-1, 8, 8) / 16.0, y


def digits_quadrants(test_fraction: float = 0.2, rng: RNGLike = 0) -> VerticalDataset:
    """scikit-learn digits, each 8×8 image cut into four 4×4 quadrants, one per party (C8).

    Party order: top-left, top-right, bottom-left, bottom-right; 16 features each, pixel values
    scaled to ``[0, 1]``.
    """
    img, y = _digits()
    parts = [img[:, r : r + 4, c : c + 4].reshape(len(y), 16) for r in (0, 4) for c in (0, 4)]
    return VerticalDataset.from_arrays(
        parts,
        y,
        test_fraction=test_fraction,
        rng=rng,
        name="digits-quadrants",
        party_shapes=[(1, 4, 4)] * 4,
    )


def digit_views(images: np.ndarray, n_views: int = 12) -> np.ndarray:
    r"""Deterministic views: image ``k`` rotated by :math:`30k` degrees (bilinear, same size).

    Parameters
    ----------
    images : numpy.ndarray
        ``(N, H, W)``.
    n_views : int
        Number of views (angles ``360 k / n_views``).

    Returns
    -------
    numpy.ndarray
        ``(N, n_views, H, W)``.
    """
    from scipy.ndimage import rotate

    out = np.empty((images.shape[0], n_views) + images.shape[1:], dtype=np.float64)
    for k in range(n_views):
        angle = 360.0 * k / n_views
        out[:, k] = rotate(images, angle, axes=(1, 2), reshape=False, order=1, mode="constant")
    return np.clip(out, 0.0, None)


@functools.cache
def _twelve_views() -> tuple[np.ndarray, np.ndarray]:
    """:func:`digit_views` of every digit with 12 views, and the labels; once per process."""
    img, y = _digits()
    views = digit_views(img, 12)
    views.setflags(write=False)
    return views, y


def digits_views(parties: int = 4, test_fraction: float = 0.2, rng: RNGLike = 0) -> VerticalDataset:
    """12 rotated views of each digit over 4 parties (3 views each) or 12 parties (1 view) (C8)."""
    if parties not in (4, 12):
        raise ValueError(f"parties must be 4 or 12 for digits-views, got {parties}")
    views, y = _twelve_views()
    per = 12 // parties
    parts = [views[:, per * p : per * (p + 1)].reshape(len(y), -1) for p in range(parties)]
    return VerticalDataset.from_arrays(
        parts,
        y,
        test_fraction=test_fraction,
        rng=rng,
        name=f"digits-views-{parties}",
        party_shapes=[(per, 8, 8)] * parties,
    )


def breast_cancer(
    parties: int = 4, test_fraction: float = 0.2, rng: RNGLike = 0
) -> VerticalDataset:
    """Wisconsin breast cancer: 30 features split by columns over parties, binary, F1 (C8).

    Label 1 is *malignant* (the minority, 212 of 569), so F1 is the F1 of the diagnosis of
    interest; features are standardised with training statistics.
    """
    features, target = breast_cancer_arrays()
    y = (target == 0).astype(np.int64)  # sklearn: 0 = malignant; we make malignant the positive
    cols = np.array_split(np.arange(features.shape[1]), parties)
    parts = [features[:, c] for c in cols]
    return VerticalDataset.from_arrays(
        parts,
        y,
        test_fraction=test_fraction,
        rng=rng,
        metric="f1",
        name="breast-cancer",
        standardize=True,
    )


# ---------------------------------------------------------------------- the paper's sets
def _paper_folder(kind: str, data_dir: str | os.PathLike[str]) -> str:
    return paper_files.find_paper_folder(kind, data_dir) or os.fspath(data_dir)


def _first(n: int | None, what: str) -> slice:
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"{what} must be a positive integer or None, got {n!r}")
    return slice(None, n)


def cifar10_quadrants(
    data_dir: str | os.PathLike[str],
    *,
    max_train: int | None = None,
    max_test: int | None = None,
) -> VerticalDataset:
    """CIFAR-10 from its binary files, each 32×32 image cut into four 16×16 quadrants (C8).

    As in [CVFL]_: 4 parties of 3×16×16 = 768 features (party order top-left, top-right,
    bottom-left, bottom-right), 10 classes, accuracy; pixel values scaled to ``[0, 1]``; the
    files' own split (50 000 training and 10 000 test images). Read by
    :func:`cvfl_sim.vfl.paper_files.read_cifar10` (never the pickled version).

    Parameters
    ----------
    data_dir : path-like
        The folder of the binary batches, or a folder holding ``cifar-10-batches-bin``.
    max_train, max_test : int, optional
        Keep only the first this many training / test images (CPU-sized runs).
    """
    split = paper_files.read_cifar10(_paper_folder("cifar10", data_dir))
    xtr, xte = (
        split.x_train[_first(max_train, "max_train")],
        split.x_test[_first(max_test, "max_test")],
    )
    ytr, yte = split.y_train[: len(xtr)], split.y_test[: len(xte)]

    def quadrants(x: np.ndarray) -> list[np.ndarray]:
        return [
            x[:, :, r : r + 16, c : c + 16].reshape(len(x), 768) / 255.0
            for r in (0, 16)
            for c in (0, 16)
        ]

    return VerticalDataset.from_split(
        quadrants(xtr),
        ytr,
        quadrants(xte),
        yte,
        n_classes=10,
        name="cifar10-quadrants",
        party_shapes=[(3, 16, 16)] * 4,
        info={"classes": list(split.classes)},
    )


_MODELNET_READ: dict[tuple[Any, ...], paper_files.Split] = {}
"""The last ModelNet10 images read in this process (``uint8``, about 60 MB at 32×32)."""


def modelnet10_views(
    data_dir: str | os.PathLike[str],
    parties: int = 4,
    *,
    image_size: int = 32,
    max_per_class: int | None = None,
    progress: bool | None = None,
) -> VerticalDataset:
    """ModelNet10 from its 12-view renderings: 4 parties of 3 views or 12 parties of one (C8).

    Each view is a grey-level ``image_size`` square scaled to ``[0, 1]``; party ``p`` holds views
    ``p·12/M .. (p+1)·12/M - 1`` as the channels of one ``(12/M, S, S)`` sample; 10 classes,
    accuracy; the folders' own train/test split. The folder layout is in
    :mod:`cvfl_sim.vfl.paper_files`.

    Parameters
    ----------
    data_dir : path-like
        The folder of class folders, or a folder holding ``modelnet10``.
    parties : {4, 12}
    image_size : int
        Side of the views after resizing, in ``[4, 512]``.
    max_per_class : int, optional
        At most this many objects per class and split.
    progress : bool or None
        A progress bar over the objects read (``None``: on a terminal or in a notebook).
    """
    if parties not in (4, 12):
        raise ValueError(f"parties must be 4 or 12 for modelnet10-views, got {parties!r}")
    from .progress import progress_bar

    folder = os.path.abspath(_paper_folder("modelnet10", data_dir))
    key = (folder, os.stat(folder).st_mtime_ns, image_size, max_per_class)
    split = _MODELNET_READ.get(key)
    if split is None:  # 4 and 12 parties read the images once
        total = paper_files.count_modelnet_objects(folder)
        with progress_bar(total, progress, "reading ModelNet10 views", unit="object") as bar:
            split = paper_files.read_modelnet_views(
                folder, image_size=image_size, max_per_class=max_per_class, progress=bar
            )
        _MODELNET_READ.clear()
        _MODELNET_READ[key] = split
    per = paper_files.MODELNET_VIEWS // parties

    def views(x: np.ndarray) -> list[np.ndarray]:
        return [x[:, per * p : per * (p + 1)].reshape(len(x), -1) / 255.0 for p in range(parties)]

    return VerticalDataset.from_split(
        views(split.x_train),
        split.y_train,
        views(split.x_test),
        split.y_test,
        n_classes=len(split.classes),
        name=f"modelnet10-views-{parties}",
        party_shapes=[(per, image_size, image_size)] * parties,
        info={"classes": list(split.classes)},
    )


def mimic3_mortality(data_dir: str | os.PathLike[str], parties: int = 4) -> VerticalDataset:
    """MIMIC-III in-hospital mortality: 76 features per hour over 48 hours, split by feature (C8).

    As in [CVFL]_: 4 parties of 19 features each (party ``m`` holds features ``19m .. 19m + 18``
    at every hour: a ``(48, 19)`` time series for a GRU party model), binary, F1; the files'
    own split. The layouts (NPZ or long CSV) are in :mod:`cvfl_sim.vfl.paper_files`.

    Parameters
    ----------
    data_dir : path-like
        The folder of ``train``/``test`` files, or a folder holding ``mimic3``.
    parties : int
        Parties, in ``[1, 76]`` (contiguous near-equal feature blocks).
    """
    split = paper_files.read_mimic3(_paper_folder("mimic3", data_dir))
    blocks = paper_files.party_blocks(paper_files.MIMIC3_FEATURES, parties, "mimic3-mortality")

    def parts(x: np.ndarray) -> list[np.ndarray]:
        return [x[:, :, b].reshape(len(x), -1) for b in blocks]

    return VerticalDataset.from_split(
        parts(split.x_train),
        split.y_train,
        parts(split.x_test),
        split.y_test,
        n_classes=2,
        metric="f1",
        name="mimic3-mortality",
        party_shapes=[(paper_files.MIMIC3_HOURS, len(b)) for b in blocks],
        info={"classes": list(split.classes)},
    )


PAPER_DATASETS: dict[str, tuple[str, Callable[..., VerticalDataset], dict[str, Any]]] = {
    "cifar10-quadrants": ("cifar10", cifar10_quadrants, {}),
    "modelnet10-views-4": ("modelnet10", modelnet10_views, {"parties": 4}),
    "modelnet10-views-12": ("modelnet10", modelnet10_views, {"parties": 12}),
    "mimic3-mortality": ("mimic3", mimic3_mortality, {}),
}
"""The paper's data sets read from a researcher's files: name -> (kind, loader, its options)."""

PAPER_COUNTERPART = {
    "digits-quadrants": "cifar10-quadrants",
    "digits-views-4": "modelnet10-views-4",
    "digits-views-12": "modelnet10-views-12",
    "breast-cancer": "mimic3-mortality",
}
"""The paper's data set each built-in set stands in for (C8)."""


_BUILTINS: dict[str, Callable[..., VerticalDataset]] = {
    "digits-quadrants": digits_quadrants,
    "digits-views": digits_views,
    "breast-cancer": breast_cancer,
}


def dataset_names() -> list[str]:
    """The built-in names accepted by :func:`load_dataset` (the paper's sets: :data:`PAPER_DATASETS`)."""
    return sorted(_BUILTINS)


def load_dataset(
    name: str, data_dir: str | os.PathLike[str] | None = None, **kwargs: Any
) -> VerticalDataset:
    """Load a built-in data set by name (offline), or one of the paper's from your files.

    Parameters
    ----------
    name : str
        One of :func:`dataset_names` (``digits-views-4`` / ``digits-views-12`` are accepted as
        shorthands for ``digits-views`` with ``parties=4`` / ``12``), or one of
        :data:`PAPER_DATASETS` (``cifar10-quadrants``, ``modelnet10-views-4``,
        ``modelnet10-views-12``, ``mimic3-mortality``), which need ``data_dir``.
    data_dir : path-like, optional
        For the paper's data sets: the folder of their files, or a folder holding them
        (``cifar-10-batches-bin``, ``modelnet10``, ``mimic3``; see
        :mod:`cvfl_sim.vfl.paper_files`). Nothing is downloaded.
    **kwargs
        Passed to the loader (``test_fraction``, ``rng``, ``parties``; ``max_train``,
        ``max_test`` for CIFAR-10; ``image_size``, ``max_per_class`` for ModelNet10).

    Raises
    ------
    ValueError
        Unknown name (the message lists the known ones), ``data_dir`` missing for a paper data
        set or given for a built-in one, or a damaged file (named).
    FileNotFoundError
        The paper data set's files are not in ``data_dir`` (the message says what is looked for).

    Examples
    --------
    >>> load_dataset("digits-quadrants").feature_dims
    [16, 16, 16, 16]
    """
    if isinstance(name, str) and name in PAPER_DATASETS:
        if data_dir is None:
            raise ValueError(
                f"{name} is read from your own files: pass data_dir (the folder holding them; "
                "nothing is downloaded)"
            )
        _, loader, options = PAPER_DATASETS[name]
        return loader(data_dir, **{**options, **kwargs})
    if data_dir is not None:
        raise ValueError(
            f"data_dir is for the paper's data sets ({', '.join(PAPER_DATASETS)}), not {name!r}"
        )
    if isinstance(name, str) and name.startswith("digits-views-"):
        suffix = name.rsplit("-", 1)[1]
        if suffix.isdigit():
            return digits_views(parties=int(suffix), **kwargs)
    if name not in _BUILTINS:
        raise ValueError(
            f"unknown data set name {name!r}; known names: {', '.join(dataset_names())} "
            f"(and digits-views-4, digits-views-12); from your files: {', '.join(PAPER_DATASETS)}"
            " with data_dir, or load_csv / load_npz"
        )
    return _BUILTINS[name](**kwargs)


# ---------------------------------------------------------------------- local files
def _check_path(path: str | os.PathLike[str]) -> str:
    return check_file(path)


def load_npz(
    path: str | os.PathLike[str],
    *,
    x_key: str = "X",
    y_key: str = "y",
    parties: int = 4,
    split_axis: int = -1,
    name: str | None = None,
    **kwargs: Any,
) -> VerticalDataset:
    """Read ``X`` and ``y`` from a local ``.npz`` and split ``X`` into parties along an axis.

    Parameters
    ----------
    path : path-like
        A local ``.npz`` file.
    x_key, y_key : str
        Array names in the file.
    parties : int
        Number of parties; axis ``split_axis`` of ``X`` (not the sample axis) is cut into this
        many near-equal contiguous blocks (columns for tabular data, e.g. 76 MIMIC-III features
        into 4 × 19; views for multi-view data).
    split_axis : int
        Axis of ``X`` to split (``-1`` = last).
    name : str, optional
        Recorded name (defaults to the file stem).
    **kwargs
        Passed to :meth:`VerticalDataset.from_arrays`.
    """
    p = _check_path(path)
    arrays = read_npz(p, [x_key, y_key])  # sizes checked before anything is allocated
    X, y = arrays[x_key], arrays[y_key]
    if X.ndim < 2:
        raise ValueError(f"{x_key} must have a sample axis and at least one feature axis")
    ax = split_axis % X.ndim
    if ax == 0:
        raise ValueError("split_axis must not be the sample axis 0")
    blocks = paper_files.party_blocks(X.shape[ax], parties, f"axis {ax} of {x_key} in {p!r}")
    parts = [np.take(X, b, axis=ax) for b in blocks]
    shapes = [tuple(pp.shape[1:]) for pp in parts]
    kwargs.setdefault("party_shapes", shapes)
    return VerticalDataset.from_arrays(
        parts, y, name=name or os.path.splitext(os.path.basename(p))[0], **kwargs
    )


def load_csv(
    path: str | os.PathLike[str],
    *,
    label_column: str | int = -1,
    parties: int = 4,
    name: str | None = None,
    **kwargs: Any,
) -> VerticalDataset:
    """Read a local numeric CSV and split its feature columns over parties.

    The file: comma-separated numbers, one sample per row, an optional header row (a first row
    that is not all numbers), one column holding the integer class labels ``0 .. K - 1``. The
    other columns are the features, cut into ``parties`` contiguous near-equal blocks in column
    order (party 1 the first block). Blank lines are skipped.

    Parameters
    ----------
    path : path-like
        A local ``.csv`` (UTF-8 text; size and field lengths are bounded, see
        :mod:`cvfl_sim.vfl.files`).
    label_column : str or int
        The label column: a header name, or an index (negative counts from the end).
    parties : int
        Number of parties, in ``[1, number of feature columns]``.
    name : str, optional
        Recorded name (defaults to the file stem).
    **kwargs
        Passed to :meth:`VerticalDataset.from_arrays` (``test_fraction``, ``rng``, ``metric``,
        ``standardize``, ``n_classes``).

    Raises
    ------
    ValueError
        An empty file, rows of different lengths or a field that is not a number (with its
        line), an unknown label column, labels that are not ``0 .. K - 1``, bad ``parties``.
    """
    p = _check_path(path)
    rows = [r for r in read_csv_rows(p) if r]  # text, bounded size and fields
    if not rows:
        raise ValueError(f"{p!r} is empty")
    header: list[str] | None = None
    first_line = 1
    if not all(_is_number(v) for v in rows[0]):
        header, rows, first_line = rows[0], rows[1:], 2
    if not rows:
        raise ValueError(f"{p!r} has a header but no data rows")
    width = len(header) if header is not None else len(rows[0])
    for i, r in enumerate(rows):
        if len(r) != width:
            raise ValueError(
                f"{p!r}, data row {i + first_line}: {len(r)} fields, the first row has {width}"
            )
    try:
        data = np.array([[float(v) for v in r] for r in rows], dtype=np.float64)
    except ValueError as err:
        raise ValueError(f"{p!r} must be numeric apart from an optional header: {err}") from None
    if isinstance(label_column, str):
        if header is None or label_column not in header:
            raise ValueError(f"label_column {label_column!r} not in the CSV header {header}")
        li = header.index(label_column)
    else:
        if not -data.shape[1] <= int(label_column) < data.shape[1]:
            raise ValueError(
                f"label_column {label_column} is not a column of {p!r} (it has {data.shape[1]})"
            )
        li = int(label_column) % data.shape[1]
    if data.shape[1] < 2:
        raise ValueError(f"{p!r} needs feature columns beside the label; it has one column")
    y = data[:, li]
    X = np.delete(data, li, axis=1)
    cols = paper_files.party_blocks(X.shape[1], parties, f"the {X.shape[1]} features of {p!r}")
    return VerticalDataset.from_arrays(
        [X[:, c] for c in cols], y, name=name or os.path.splitext(os.path.basename(p))[0], **kwargs
    )


def load_original(name: str, path: str | os.PathLike[str], **kwargs: Any) -> VerticalDataset:
    """Loaders for the paper's original data sets (C8) from local preprocessed ``.npz`` files.

    ``"mimic3"``: ``X`` of shape ``(N, T, 76)`` (time series), ``y`` in-hospital mortality;
    4 parties × 19 features (split on the feature axis; GRU party models).
    ``"cifar10"``: ``X`` of shape ``(N, 32, 32, 3)`` or ``(N, 3, 32, 32)``, cut into 4 quadrants.
    ``"modelnet10"``: ``X`` of shape ``(N, 12, H, W)`` (12 views), over ``parties=4`` or ``12``.
    Nothing is downloaded.
    """
    p = _check_path(path)
    if name == "mimic3":
        kwargs.setdefault("metric", "f1")
        return load_npz(p, parties=4, split_axis=-1, name="mimic3", **kwargs)
    if name == "modelnet10":
        return load_npz(p, split_axis=1, name="modelnet10", **kwargs)
    if name == "cifar10":
        arrays = read_npz(p, ["X", "y"])
        X, y = arrays["X"], arrays["y"]
        if X.ndim != 4:
            raise ValueError(f"cifar10 X must be (N, 32, 32, 3) or (N, 3, 32, 32), got {X.shape}")
        if X.shape[-1] == 3:
            X = X.transpose(0, 3, 1, 2)
        h, w = X.shape[2] // 2, X.shape[3] // 2
        parts = [X[:, :, r : r + h, c : c + w] for r in (0, h) for c in (0, w)]
        return VerticalDataset.from_arrays(
            parts, y, name="cifar10", party_shapes=[tuple(q.shape[1:]) for q in parts], **kwargs
        )
    raise ValueError(f"unknown original data set {name!r}; known: cifar10, mimic3, modelnet10")
