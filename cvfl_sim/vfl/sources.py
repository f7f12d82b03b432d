"""Which data set a run trains on, as a command names it: :class:`DataSource`.

A source is a built-in name (``digits-quadrants`` ...), one of the paper's data sets read from
a folder of the researcher's files (``cifar10-quadrants`` with ``data_dir``), or a path to the
researcher's own ``.csv`` or ``.npz`` file, with the options of its loader. It is small, frozen
and JSON-able, so that a sweep can name it in a run's key and send it to worker processes,
which load the data themselves. :meth:`DataSource.check` refuses a bad source (a missing file,
options that do not apply) before any work.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from .data import (
    PAPER_DATASETS,
    VerticalDataset,
    dataset_names,
    load_csv,
    load_dataset,
    load_npz,
)

__all__ = ["DataSource", "FILE_SUFFIXES", "PARTY_MODELS"]

FILE_SUFFIXES = (".csv", ".npz")
"""Suffixes of the researcher's own files a source can name."""

PARTY_MODELS = {
    "cifar10-quadrants": "cnn",
    "modelnet10-views-4": "cnn",
    "modelnet10-views-12": "cnn",
    "mimic3-mortality": "gru",
}
"""The paper's model family per data set (a small CNN per party, a GRU for the time series);
every other data set defaults to the MLP party model."""

_BUILTIN = (*dataset_names(), "digits-views-4", "digits-views-12")
_PARTIES_OK = {"breast-cancer", "digits-views", "mimic3-mortality"}


@dataclass(frozen=True)
class DataSource:
    """A data set as a command names it, and the options of its loader.

    Parameters
    ----------
    name : str
        A built-in name, one of the paper's data sets (with ``data_dir``), or a path to a
        ``.csv`` or ``.npz`` file.
    data_dir : str, optional
        The folder of the paper's data set files.
    parties : int, optional
        Parties to split the features over: a file's columns (CSV) or ``split_axis`` (NPZ;
        default 4), ``breast-cancer``'s columns, ``mimic3-mortality``'s 76 features;
        ``digits-views`` takes 4 or 12.
    label_column : str, optional
        CSV: the label column, a header name or an integer index (default: the last column).
    x_key, y_key : str
        NPZ: the names of the feature and label arrays.
    split_axis : int
        NPZ: the axis of ``X`` cut into the parties' blocks (not the sample axis 0).
    """

    name: str
    data_dir: str | None = None
    parties: int | None = None
    label_column: str | None = None
    x_key: str = "X"
    y_key: str = "y"
    split_axis: int = -1

    @property
    def kind(self) -> str:
        """``"builtin"``, ``"paper"``, ``"csv"`` or ``"npz"``."""
        if self.name in PAPER_DATASETS:
            return "paper"
        suffix = os.path.splitext(self.name)[1].lower()
        if suffix in FILE_SUFFIXES:
            return suffix[1:]
        return "builtin"

    @property
    def label(self) -> str:
        """A short name for tables and file names: the data set's name, or the file's stem."""
        if self.kind in ("csv", "npz"):
            return os.path.splitext(os.path.basename(self.name))[0]
        return self.name

    @property
    def party_model(self) -> str:
        """The default party model of this data set (:data:`PARTY_MODELS`, else ``"mlp"``)."""
        return PARTY_MODELS.get(self.name, "mlp")

    def check(self) -> DataSource:
        """Refuse a source that cannot load, before any work; return it.

        Raises
        ------
        ValueError
            An unknown name, options that do not apply to the kind of source, a bad
            ``parties``; ``FileNotFoundError`` for a missing file or folder.
        """
        kind = self.kind
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"the data set must be a name or a path, got {self.name!r}")
        if kind == "builtin" and self.name not in _BUILTIN:
            looks_like_file = os.sep in self.name or os.path.exists(self.name) or "." in self.name
            hint = (
                f"a file must end in {' or '.join(FILE_SUFFIXES)}"
                if looks_like_file
                else f"built-in names: {', '.join(_BUILTIN)}; the paper's: "
                f"{', '.join(PAPER_DATASETS)} (with --data-dir); or a path to a .csv or .npz"
            )
            raise ValueError(f"unknown data set {self.name!r}; {hint}")
        if kind in ("csv", "npz") and not os.path.isfile(self.name):
            raise FileNotFoundError(f"data set file {self.name!r} does not exist")
        if kind == "paper" and self.data_dir is None:
            raise ValueError(
                f"{self.name} is read from your own files: give the folder holding them "
                "(--data-dir; nothing is downloaded)"
            )
        if kind == "paper" and not os.path.isdir(os.fspath(self.data_dir or "")):
            raise FileNotFoundError(f"--data-dir {self.data_dir!r} is not a folder")
        if kind != "paper" and self.data_dir is not None:
            raise ValueError(
                f"--data-dir is for the paper's data sets ({', '.join(PAPER_DATASETS)}), "
                f"not {self.name!r}"
            )
        if kind != "csv" and self.label_column is not None:
            raise ValueError("--label-column applies to a .csv data set only")
        if kind != "npz" and (self.x_key, self.y_key, self.split_axis) != ("X", "y", -1):
            raise ValueError("--x-key, --y-key and --split-axis apply to a .npz data set only")
        if self.parties is not None:
            if isinstance(self.parties, bool) or not isinstance(self.parties, int):
                raise ValueError(f"--parties must be an integer, got {self.parties!r}")
            base = "digits-views" if self.name.startswith("digits-views") else self.name
            if kind in ("builtin", "paper") and base not in _PARTIES_OK:
                raise ValueError(
                    f"--parties does not apply to {self.name} (its parties are fixed); it "
                    "applies to .csv/.npz files, breast-cancer, digits-views (4 or 12) and "
                    "mimic3-mortality"
                )
            if self.name in ("digits-views-4", "digits-views-12"):
                raise ValueError(f"{self.name} names its parties; use digits-views --parties N")
            if self.parties < 1:
                raise ValueError(f"--parties must be >= 1, got {self.parties}")
        return self

    def load(self) -> VerticalDataset:
        """The data set (checked first; a damaged file is refused naming it)."""
        self.check()
        kind = self.kind
        extra: dict[str, Any] = {} if self.parties is None else {"parties": self.parties}
        if kind == "csv":
            label: str | int = -1
            if self.label_column is not None:
                text = self.label_column.strip()
                label = int(text) if text.lstrip("-").isdigit() else text
            return load_csv(self.name, label_column=label, **extra)
        if kind == "npz":
            return load_npz(
                self.name, x_key=self.x_key, y_key=self.y_key, split_axis=self.split_axis, **extra
            )
        if kind == "paper":
            return load_dataset(self.name, data_dir=self.data_dir, **extra)
        if self.name == "digits-views" and self.parties is None:
            extra = {"parties": 4}
        return load_dataset(self.name, **extra)

    def to_dict(self) -> dict[str, Any]:
        """The fields, for JSON (a run's key, a result's provenance)."""
        return asdict(self)
