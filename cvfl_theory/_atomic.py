"""Atomic file writes shared by every writer of results (tables, runs, checkpoints, npz files).

A file is written to a temporary file in the destination folder, flushed to disk and moved into
place with :func:`os.replace`, so a reader sees either the old file or the whole new one, never a
partial write. The file gets mode ``0o666`` minus the process's umask (``0o644`` under the usual
umask ``022``), as :func:`open` would give, so collaborators can read shared results
(:func:`tempfile.mkstemp` alone would leave ``0o600``).
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def _umask() -> int:
    """The process's file-mode creation mask (read without changing it where the OS allows)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no other portable way to read it
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and :func:`os.replace`.

    The parent folder is created if missing; the temporary file is removed if anything fails.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    except OSError as exc:
        raise _naming(exc, path) from exc
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            if os.path.exists(tmp):
                os.unlink(tmp)
        except OSError:  # the cleanup must not hide why the write failed
            pass
        if isinstance(exc, OSError):
            raise _naming(exc, path) from exc
        raise


def _naming(exc: OSError, path: str) -> OSError:
    """The same kind of error, naming the file the caller asked for (not the temporary one)."""
    reason = exc.strerror or str(exc)
    return type(exc)(exc.errno, f"cannot write {path!r}: {reason}")


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Atomically write UTF-8 text (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))
