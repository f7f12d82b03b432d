"""Checks shared by the subcommands: output paths, validated *before* any work starts.

A subcommand raises :class:`ValueError` (or lets one through) for bad input; :func:`cvfl_sim.commands.cli.main`
turns it into one line ``cvfl: error: ...`` on stderr and exit code 2.
"""

from __future__ import annotations

import os

__all__ = ["check_output_file", "check_output_dir"]


def _nearest_existing(path: str) -> str:
    """The longest existing prefix folder of ``path`` (``path`` itself if it exists)."""
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def check_output_file(path: str, option: str) -> str:
    """Check that a result can be written at ``path``; return it.

    The parent folder must exist and be writable, and ``path`` must not be a folder. Results are
    written atomically (temporary file in the same folder, then :func:`os.replace`), so only the
    folder needs write permission.

    Raises
    ------
    ValueError
        Naming ``option``, the path and the problem.
    """
    if not path:
        raise ValueError(f"{option} must be a file path, got an empty string")
    if os.path.isdir(path):
        raise ValueError(f"{option} {path!r} is a folder; give a file path")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise ValueError(f"{option} {path!r}: folder {folder!r} does not exist")
    if not os.path.isdir(folder):
        raise ValueError(f"{option} {path!r}: {folder!r} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK) or not _can_create_in(folder):
        raise ValueError(f"{option} {path!r}: folder {folder!r} is not writable")
    return path


def check_output_dir(path: str, option: str) -> str:
    """Check that ``path`` is, or can be created as, a writable folder; return it.

    Raises
    ------
    ValueError
        Naming ``option``, the path and the problem.
    """
    if not path:
        raise ValueError(f"{option} must be a folder path, got an empty string")
    base = _nearest_existing(path)
    if not os.path.isdir(base):
        if base == os.path.abspath(path):
            raise ValueError(f"{option} {path!r} is a file, not a folder")
        raise ValueError(f"{option} {path!r}: {base!r} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK) or not _can_create_in(base):
        raise ValueError(f"{option} {path!r}: folder {base!r} is not writable")
    return path


def _can_create_in(folder: str) -> bool:
    """Whether a file can really be created in ``folder``: a temporary file is made and removed.

    ``os.access`` says yes to root even where the file system refuses, as in ``/proc``.
    """
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".cvfl-check-")
    except OSError:
        return False
    os.close(fd)
    try:
        os.unlink(tmp)
    except OSError:
        pass
    return True
