r"""The files of the paper's data sets (C8), read as a researcher already has them.

Nothing is downloaded and nothing is unpickled. Each reader checks the bytes it is given for
size *and* meaning before it uses them, and refuses a damaged or truncated file with a
``ValueError`` that names the file and what is wrong (a missing file or folder is a
``FileNotFoundError`` naming the path). The readers return numpy arrays; the vertically
partitioned data sets are built from them by :mod:`cvfl_sim.vfl.data`
(``load_dataset("cifar10-quadrants", data_dir=...)`` and its siblings).

**CIFAR-10, binary version** (``cifar-10-binary.tar.gz``, folder ``cifar-10-batches-bin``):
``data_batch_1.bin`` ... ``data_batch_5.bin`` and ``test_batch.bin``, each at most 10 000 records
of :data:`CIFAR10_RECORD_BYTES` = 3073 bytes: one label byte in ``0..9``, then the 32×32 image as
1024 red, 1024 green and 1024 blue bytes, rows first. The pickled *python* version is never read.

**ModelNet10, 12 views** (the multi-view renderings of MVCNN): a folder with one sub-folder per
class, each with ``train`` and ``test`` folders holding the 12 view images of every object,
either one folder per object (``<class>/<split>/<object>/*.png``, 12 images) or flat
(``<class>/<split>/<object>_<view>.png``, e.g. ``chair_0001.obj.shaded_v001.png``, where the view
is the last number of the name). PNG or JPEG, read with Pillow, converted to grey levels and
resized to ``image_size`` squares. When all ten ModelNet10 classes are present (say in the
ModelNet40 renderings) only they are read, labelled in the order of :data:`MODELNET10_CLASSES`;
otherwise every class folder, in sorted order.

**MIMIC-III in-hospital mortality** (the benchmark of Harutyunyan et al., 2019): the discretised
and normalised 48-hour matrix of :data:`MIMIC3_FEATURES` = 76 features per hour (what the
benchmark's ``in_hospital_mortality/utils.load_data`` returns), in a folder holding either
``train.npz`` and ``test.npz`` (arrays ``X`` of shape ``(N, 48, 76)`` and ``y`` of shape ``(N,)``
with labels 0/1) or ``train.csv`` and ``test.csv`` in long form: a header row, then one row per
episode and hour, ``episode, hour, <76 features>, y`` (the hours ``0..47`` of every episode,
rows in any order, episodes numbered in the order their first rows appear; ``y`` the same on all
of an episode's rows).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .files import MAX_ARRAY_BYTES, check_file, read_csv_rows, read_npz

__all__ = [
    "CIFAR10_RECORD_BYTES",
    "CIFAR10_MAX_RECORDS",
    "CIFAR10_TRAIN_FILES",
    "CIFAR10_TEST_FILE",
    "MODELNET10_CLASSES",
    "MODELNET_VIEWS",
    "MAX_IMAGE_SIDE",
    "MIMIC3_HOURS",
    "MIMIC3_FEATURES",
    "Split",
    "cifar10_folder",
    "read_cifar10_batch",
    "read_cifar10",
    "read_modelnet_views",
    "count_modelnet_objects",
    "read_mimic3",
    "party_blocks",
    "PAPER_FOLDERS",
    "find_paper_folder",
]

CIFAR10_RECORD_BYTES = 1 + 3 * 32 * 32
"""Bytes of one CIFAR-10 binary record: the label byte and the 3×32×32 image."""

CIFAR10_MAX_RECORDS = 10_000
"""Records of one CIFAR-10 batch file (a larger file is not one)."""

CIFAR10_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR10_TEST_FILE = "test_batch.bin"

MODELNET10_CLASSES = (
    "bathtub",
    "bed",
    "chair",
    "desk",
    "dresser",
    "monitor",
    "night_stand",
    "sofa",
    "table",
    "toilet",
)
"""The ten classes of ModelNet10, in label order."""

MODELNET_VIEWS = 12
"""Views per object in the MVCNN renderings."""

MAX_IMAGE_SIDE = 4096
"""Largest width or height of a view image accepted (checked from its header, before decoding)."""

MIMIC3_HOURS = 48
MIMIC3_FEATURES = 76

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_LAST_NUMBER = re.compile(r"^(.*?)(\d+)(\D*)$")


@dataclass(frozen=True)
class Split:
    """The arrays of one data set as its files split them: train and test samples and labels.

    Attributes
    ----------
    x_train, x_test : numpy.ndarray
        Samples, first axis the sample (``uint8`` images or ``float64`` matrices).
    y_train, y_test : numpy.ndarray
        ``int64`` labels.
    classes : tuple of str
        The class names, label ``k`` being ``classes[k]``.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]


def _folder(path: str | os.PathLike[str], what: str) -> str:
    p = os.fspath(path)
    if not os.path.isdir(p):
        raise FileNotFoundError(f"{what} {p!r} is not a folder (nothing is downloaded)")
    return p


# ---------------------------------------------------------------------------- CIFAR-10
def cifar10_folder(data_dir: str | os.PathLike[str]) -> str:
    """The folder holding the CIFAR-10 binary batches: ``data_dir`` or its ``cifar-10-batches-bin``.

    Raises
    ------
    FileNotFoundError
        No such folder, or batch files missing (listed); the pickled python version found in
        their place is named as such.
    """
    root = _folder(data_dir, "data_dir")
    names = (*CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE)
    for candidate in (root, os.path.join(root, "cifar-10-batches-bin")):
        if all(os.path.isfile(os.path.join(candidate, n)) for n in names):
            return candidate
    for candidate in (root, os.path.join(root, "cifar-10-batches-py")):
        if os.path.isfile(os.path.join(candidate, "data_batch_1")):
            raise FileNotFoundError(
                f"{candidate!r} holds the pickled python version of CIFAR-10, which is never "
                "read (unpickling runs code); give the binary version (cifar-10-binary.tar.gz, "
                "folder cifar-10-batches-bin)"
            )
    missing = [n for n in names if not os.path.isfile(os.path.join(root, n))]
    raise FileNotFoundError(
        f"no CIFAR-10 binary batches in {root!r} or {os.path.join(root, 'cifar-10-batches-bin')!r}"
        f" (missing: {', '.join(missing)})"
    )


def _read_exact(path: str, out: np.ndarray) -> None:
    """Fill the ``uint8`` array ``out`` with the bytes of ``path`` (exactly ``out.size`` of them)."""
    with open(path, "rb") as fh:
        got = fh.readinto(memoryview(out.data).cast("B"))
        more = fh.read(1)
    if got != out.size or more:
        raise ValueError(f"{path!r} changed while it was read")


def _cifar_records(path: str) -> int:
    size = os.path.getsize(path)
    if size == 0 or size % CIFAR10_RECORD_BYTES:
        raise ValueError(
            f"{path!r} has {size} bytes, not a whole number of {CIFAR10_RECORD_BYTES}-byte "
            "CIFAR-10 records (truncated, or not the binary version)"
        )
    n = size // CIFAR10_RECORD_BYTES
    if n > CIFAR10_MAX_RECORDS:
        raise ValueError(
            f"{path!r} holds {n} records; a CIFAR-10 batch holds at most {CIFAR10_MAX_RECORDS}"
        )
    return n


def _split_records(path: str, records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    labels = records[:, 0]
    bad = np.flatnonzero(labels > 9)
    if bad.size:
        raise ValueError(
            f"{path!r}, record {int(bad[0])}: label byte {int(labels[bad[0]])} is not a class "
            "0..9 (damaged, or not a CIFAR-10 batch)"
        )
    return records[:, 1:].reshape(-1, 3, 32, 32), labels.astype(np.int64)


def read_cifar10_batch(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 binary batch: ``(images (n, 3, 32, 32) uint8, labels (n,) int64)``.

    Raises
    ------
    ValueError
        A size that is not a whole number of 3073-byte records (truncated), more than 10 000
        records, or a label byte above 9 (with the record).
    """
    p = check_file(path)
    records = np.empty((_cifar_records(p), CIFAR10_RECORD_BYTES), dtype=np.uint8)
    _read_exact(p, records)
    return _split_records(p, records)


def read_cifar10(data_dir: str | os.PathLike[str]) -> Split:
    """The six CIFAR-10 binary batches: 5 training files and the test file (:class:`Split`).

    Every file is checked (size, record count, labels) before the images are read; the training
    batches are read into one array, so loading costs one pass over the bytes (about the time
    of ``numpy.fromfile``; ``make bench`` measures the ratio).
    """
    folder = cifar10_folder(data_dir)
    train_paths = [os.path.join(folder, n) for n in CIFAR10_TRAIN_FILES]
    counts = [_cifar_records(p) for p in train_paths]
    test_path = os.path.join(folder, CIFAR10_TEST_FILE)
    n_test = _cifar_records(test_path)
    train = np.empty((sum(counts), CIFAR10_RECORD_BYTES), dtype=np.uint8)
    start = 0
    for p, n in zip(train_paths, counts):
        _read_exact(p, train[start : start + n])
        _split_records(p, train[start : start + n])  # labels checked per file, naming it
        start += n
    test = np.empty((n_test, CIFAR10_RECORD_BYTES), dtype=np.uint8)
    _read_exact(test_path, test)
    x_test, y_test = _split_records(test_path, test)
    x_train, y_train = train[:, 1:].reshape(-1, 3, 32, 32), train[:, 0].astype(np.int64)
    classes = (
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    )
    return Split(x_train, y_train, x_test, y_test, classes)


# ---------------------------------------------------------------------------- ModelNet10
def _image_files(folder: str) -> list[str]:
    return sorted(
        n
        for n in os.listdir(folder)
        if n.lower().endswith(_IMAGE_SUFFIXES) and os.path.isfile(os.path.join(folder, n))
    )


def _view_key(name: str, where: str) -> tuple[str, int]:
    """``(object, view number)`` of a flat view file name: the view is the name's last number."""
    stem = os.path.splitext(name)[0]
    m = _LAST_NUMBER.match(stem)
    if m is None:
        raise ValueError(f"{where}: view image {name!r} has no view number in its name")
    obj = re.sub(r"[._-]*v?$", "", m.group(1))  # chair_0001.obj.shaded_v001 -> ...shaded
    obj = re.sub(r"[._-]*(shaded|view)$", "", obj)  # -> chair_0001.obj
    return obj or stem, int(m.group(2))


def _objects(split_dir: str) -> list[tuple[str, list[str]]]:
    """``(object, its view image paths in view order)`` for every object of a split folder."""
    subdirs = sorted(n for n in os.listdir(split_dir) if os.path.isdir(os.path.join(split_dir, n)))
    out: list[tuple[str, list[str]]] = []
    if subdirs:
        for obj in subdirs:
            d = os.path.join(split_dir, obj)
            files = _image_files(d)
            if len(files) != MODELNET_VIEWS:
                raise ValueError(
                    f"{d!r} holds {len(files)} view images; an object has {MODELNET_VIEWS}"
                )
            out.append((obj, [os.path.join(d, f) for f in files]))
        return out
    groups: dict[str, dict[int, str]] = {}
    for name in _image_files(split_dir):
        obj, view = _view_key(name, split_dir)
        views = groups.setdefault(obj, {})
        if view in views:
            raise ValueError(
                f"{split_dir!r}: object {obj!r} has two images of view {view} "
                f"({views[view]!r}, {name!r})"
            )
        views[view] = name
    for obj in sorted(groups):
        views = groups[obj]
        if len(views) != MODELNET_VIEWS:
            raise ValueError(
                f"{split_dir!r}: object {obj!r} has {len(views)} view images "
                f"(views {sorted(views)}); an object has {MODELNET_VIEWS}"
            )
        out.append((obj, [os.path.join(split_dir, views[v]) for v in sorted(views)]))
    return out


def _read_view(path: str, size: int) -> np.ndarray:
    """A view image as a ``(size, size)`` ``uint8`` grey-level array, its header checked first."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            w, h = im.size
            if not (1 <= w <= MAX_IMAGE_SIDE and 1 <= h <= MAX_IMAGE_SIDE):
                raise ValueError(
                    f"{path!r}: image of {w}×{h} pixels; sides must be in [1, {MAX_IMAGE_SIDE}]"
                )
            grey = im.convert("L")
            if grey.size != (size, size):
                grey = grey.resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(grey, dtype=np.uint8)
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ValueError(
            f"{path!r} is not a readable image (damaged or truncated: {exc})"
        ) from None


def read_modelnet_views(
    data_dir: str | os.PathLike[str],
    *,
    image_size: int = 32,
    max_per_class: int | None = None,
    progress: Any = None,
) -> Split:
    """The 12-view renderings: ``x`` of shape ``(n, 12, image_size, image_size)`` ``uint8``.

    Parameters
    ----------
    data_dir : path-like
        The folder of class folders (see the module docstring).
    image_size : int
        Side of the square grey-level views, in ``[4, 512]``.
    max_per_class : int, optional
        Read at most this many objects of each class and split (the first in name order), for
        CPU-sized runs.
    progress : tqdm-like, optional
        Updated once per object read.
    """
    root = _folder(data_dir, "data_dir")
    if (
        isinstance(image_size, bool)
        or not isinstance(image_size, int)
        or not 4 <= image_size <= 512
    ):
        raise ValueError(f"image_size must be an integer in [4, 512], got {image_size!r}")
    if max_per_class is not None and (
        isinstance(max_per_class, bool) or not isinstance(max_per_class, int) or max_per_class < 1
    ):
        raise ValueError(f"max_per_class must be a positive integer, got {max_per_class!r}")
    present = sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)))
    if all(c in present for c in MODELNET10_CLASSES):
        classes: tuple[str, ...] = MODELNET10_CLASSES
    else:
        classes = tuple(present)
    if len(classes) < 2:
        raise ValueError(
            f"{root!r} must hold one folder per class (at least 2); found {list(present)}"
        )
    listing: dict[str, list[tuple[int, list[str]]]] = {"train": [], "test": []}
    for k, c in enumerate(classes):
        for split in ("train", "test"):
            d = os.path.join(root, c, split)
            if not os.path.isdir(d):
                raise FileNotFoundError(f"class {c!r} has no {split!r} folder: {d!r}")
            objs = _objects(d)
            if max_per_class is not None:
                objs = objs[:max_per_class]
            listing[split] += [(k, paths) for _, paths in objs]
    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split, items in listing.items():
        if not items:
            raise ValueError(f"{root!r}: no objects in any {split!r} folder")
        x = np.empty((len(items), MODELNET_VIEWS, image_size, image_size), dtype=np.uint8)
        for i, (_, paths) in enumerate(items):
            for v, p in enumerate(paths):
                x[i, v] = _read_view(p, image_size)
            if progress is not None:
                progress.update(1)
        arrays[split] = (x, np.array([k for k, _ in items], dtype=np.int64))
    return Split(*arrays["train"], *arrays["test"], classes)


def count_modelnet_objects(data_dir: str | os.PathLike[str]) -> int:
    """Objects of every class and split (for a progress bar's total); 0 where none are listed."""
    root = _folder(data_dir, "data_dir")
    total = 0
    for c in os.listdir(root):
        for split in ("train", "test"):
            d = os.path.join(root, c, split)
            if os.path.isdir(d):
                subdirs = [n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))]
                total += len(subdirs) or len(_image_files(d)) // MODELNET_VIEWS
    return total


# ---------------------------------------------------------------------------- MIMIC-III
def _mimic_labels(y: np.ndarray, where: str) -> np.ndarray:
    if y.ndim != 1:
        raise ValueError(f"{where}: y must be 1-D (one label per episode), got shape {y.shape}")
    if y.dtype.kind == "f" and not np.array_equal(y, np.round(y)):
        raise ValueError(f"{where}: y must hold the labels 0 and 1, found {y[y != np.round(y)][0]}")
    bad = (y != 0) & (y != 1)
    if bad.any():
        raise ValueError(
            f"{where}: y must hold the labels 0 and 1 (mortality), found {y[bad][0].item()!r} at "
            f"episode {int(np.flatnonzero(bad)[0])}"
        )
    return y.astype(np.int64)


def _mimic_matrix(x: np.ndarray, where: str) -> np.ndarray:
    want = (MIMIC3_HOURS, MIMIC3_FEATURES)
    if x.ndim != 3 or x.shape[1:] != want:
        raise ValueError(
            f"{where}: X must have shape (N, {want[0]}, {want[1]}) (episodes, hours, "
            f"features), got {x.shape}"
        )
    if x.shape[0] < 1:
        raise ValueError(f"{where}: X holds no episodes")
    xf = x.astype(np.float64)
    if not np.isfinite(xf).all():
        e, t, f = (int(i) for i in np.argwhere(~np.isfinite(xf))[0])
        raise ValueError(
            f"{where}: X must be finite; episode {e}, hour {t}, feature {f} is {xf[e, t, f]}"
        )
    return xf


def _mimic_npz(path: str) -> tuple[np.ndarray, np.ndarray]:
    arrays = read_npz(path, ["X", "y"])
    x = _mimic_matrix(arrays["X"], repr(path))
    y = _mimic_labels(arrays["y"], repr(path))
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"{path!r}: X holds {x.shape[0]} episodes, y {y.shape[0]} labels")
    return x, y


def _mimic_csv(path: str) -> tuple[np.ndarray, np.ndarray]:
    rows = read_csv_rows(path)
    width = 2 + MIMIC3_FEATURES + 1
    if len(rows) < 2:
        raise ValueError(f"{path!r}: a header row and at least one data row are needed")
    header, body = rows[0], rows[1:]
    if len(header) != width:
        raise ValueError(
            f"{path!r}: the header has {len(header)} columns; the layout is episode, hour, "
            f"{MIMIC3_FEATURES} features, y ({width} columns)"
        )
    if len(body) % MIMIC3_HOURS:
        raise ValueError(
            f"{path!r}: {len(body)} data rows is not {MIMIC3_HOURS} hours per episode (truncated?)"
        )
    n = len(body) // MIMIC3_HOURS
    if n * MIMIC3_HOURS * MIMIC3_FEATURES * 8 > MAX_ARRAY_BYTES:
        raise ValueError(f"{path!r}: {n} episodes are over MAX_ARRAY_BYTES = {MAX_ARRAY_BYTES}")
    index: dict[str, int] = {}
    x = np.full((n, MIMIC3_HOURS, MIMIC3_FEATURES), np.nan)
    y = np.full(n, -1, dtype=np.int64)
    for line, row in enumerate(body, start=2):
        where = f"{path!r}, line {line}"
        if len(row) != width:
            raise ValueError(f"{where}: {len(row)} fields, the header has {width}")
        e = index.setdefault(row[0], len(index))
        if e >= n:
            raise ValueError(f"{where}: more than {n} episodes for {len(body)} rows")
        try:
            hour = int(row[1])
            values = [float(v) for v in row[2:-1]]
            label = float(row[-1])
        except ValueError as exc:
            raise ValueError(f"{where}: not a number ({exc})") from None
        if not 0 <= hour < MIMIC3_HOURS:
            raise ValueError(f"{where}: hour {hour} is not in [0, {MIMIC3_HOURS - 1}]")
        if not np.isnan(x[e, hour, 0]):
            raise ValueError(f"{where}: episode {row[0]!r} has hour {hour} twice")
        if label not in (0.0, 1.0):
            raise ValueError(f"{where}: y must be 0 or 1, got {row[-1]!r}")
        if y[e] >= 0 and y[e] != int(label):
            raise ValueError(f"{where}: episode {row[0]!r} changes its label")
        x[e, hour] = values
        y[e] = int(label)
    return _mimic_matrix(x, repr(path)), y


def read_mimic3(data_dir: str | os.PathLike[str]) -> Split:
    """The discretised 48-hour matrices of the benchmark's train and test episodes (:class:`Split`).

    ``train.npz``/``test.npz`` are read when both exist, else ``train.csv``/``test.csv``
    (the layouts are in the module docstring).
    """
    root = _folder(data_dir, "data_dir")
    loaded: list[tuple[np.ndarray, np.ndarray]] = []
    for kind, reader in (("npz", _mimic_npz), ("csv", _mimic_csv)):
        paths = [os.path.join(root, f"{s}.{kind}") for s in ("train", "test")]
        if all(os.path.isfile(p) for p in paths):
            loaded = [reader(p) for p in paths]
            break
    if not loaded:
        raise FileNotFoundError(
            f"{root!r} holds neither train.npz and test.npz nor train.csv and test.csv "
            "(the MIMIC-III in-hospital-mortality matrices; see cvfl_sim.vfl.paper_files)"
        )
    (x_train, y_train), (x_test, y_test) = loaded
    return Split(x_train, y_train, x_test, y_test, ("survived", "died"))


def party_blocks(size: int, parties: int, what: str) -> Sequence[np.ndarray]:
    """Contiguous near-equal blocks of ``range(size)`` for ``parties`` parties (checked)."""
    if isinstance(parties, bool) or not isinstance(parties, int) or not 1 <= parties <= size:
        raise ValueError(f"parties must be an integer in [1, {size}] for {what}, got {parties!r}")
    return np.array_split(np.arange(size), parties)


def _is_modelnet(folder: str) -> bool:
    return os.path.isdir(folder) and any(
        os.path.isdir(os.path.join(folder, c, "train")) for c in os.listdir(folder)
    )


def _is_mimic3(folder: str) -> bool:
    return any(
        all(os.path.isfile(os.path.join(folder, f"{s}.{kind}")) for s in ("train", "test"))
        for kind in ("npz", "csv")
    )


PAPER_FOLDERS = {
    "cifar10": ("cifar-10-batches-bin",),
    "modelnet10": ("modelnet10", "ModelNet10", "modelnet10_12views"),
    "mimic3": ("mimic3", "mimic3-mortality", "in-hospital-mortality"),
}
"""Sub-folders of a ``data_dir`` where each paper data set is looked for (after ``data_dir``)."""


def find_paper_folder(kind: str, data_dir: str | os.PathLike[str]) -> str | None:
    """The folder of ``kind`` (``"cifar10"``, ``"modelnet10"``, ``"mimic3"``) in ``data_dir``.

    ``data_dir`` itself or one of its :data:`PAPER_FOLDERS`; ``None`` when it is in neither
    (the reader then says what it looked for).
    """
    root = _folder(data_dir, "data_dir")
    test = {
        "cifar10": lambda f: os.path.isfile(os.path.join(f, CIFAR10_TRAIN_FILES[0])),
        "modelnet10": _is_modelnet,
        "mimic3": _is_mimic3,
    }[kind]
    for candidate in (root, *(os.path.join(root, n) for n in PAPER_FOLDERS[kind])):
        if os.path.isdir(candidate) and test(candidate):
            return candidate
    return None
