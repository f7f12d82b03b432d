"""The ``cvfl`` console script; every other module of :mod:`cvfl_sim.commands` is one subcommand.

Failing politely: every error is one line ``cvfl: error: ...`` on stderr with exit code 2 (the
global ``--debug`` flag shows the traceback instead); warnings are one line ``cvfl: warning: ...``;
Ctrl-C prints one line saying what was saved and how to resume, and exits 130. Registering the
subcommands imports nothing heavy (no torch, scipy, cvxpy, scikit-learn or matplotlib), so
``cvfl --help`` is fast.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import pkgutil
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from cvfl_theory.table import TEXT_WIDTH, text_width

from .. import commands

__all__ = ["build_parser", "main"]

_PLAIN = (ValueError, TypeError, OSError, FloatingPointError)
"""Exceptions whose message is the whole story (no type name, no --debug hint)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line too (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        """Print ``cvfl: error: ...`` (with a pointer to ``--help``) and exit with code 2."""
        self.exit(2, f"cvfl: error: {' '.join(message.split())} (see: {self.prog} --help)\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help that shows each option's default, unless it is None, False or already stated."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or action.default is False or "(default" in text:
            return text
        return super()._get_help_string(action) or ""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand module of :mod:`cvfl_sim.commands` registered.

    Help of every subcommand shows the options' defaults; ``--debug`` is accepted before or after
    the subcommand.
    """
    parser = _Parser(
        prog="cvfl",
        description="Theory and verification toolkit for communication-efficient distributed "
        "learning (randomized mean estimation and C-VFL).",
        formatter_class=_HelpFormatter,
    )
    debug_help = "show the full traceback of an error instead of one line"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    parser.add_argument("--version", action="version", version=f"cvfl {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "cli":  # helpers and this module
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    wide_help = "print every column of the tables on one line (default: panels of 100 characters)"
    parser.add_argument("--wide", action="store_true", help=wide_help)
    for p in sub.choices.values():
        p.formatter_class = _HelpFormatter
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
        p.add_argument("--wide", action="store_true", default=argparse.SUPPRESS, help=wide_help)
    return parser


def _version() -> str:
    """The installed distribution's version (the source tree's when it is not installed)."""
    from importlib import metadata

    try:
        return metadata.version("cvfl")
    except metadata.PackageNotFoundError:
        from cvfl_theory import __version__

        return __version__


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, _PLAIN):
        return text
    return f"{type(exc).__name__}: {text} (run with --debug for the traceback)"


@contextmanager
def _one_line_warnings() -> Iterator[None]:
    """Show warnings as ``cvfl: warning: ...`` (the filters are left as they are)."""
    saved = warnings.showwarning

    def show(message: Any, category: Any, filename: Any, lineno: Any, *a: Any, **k: Any) -> None:
        print(f"cvfl: warning: {' '.join(str(message).split())}", file=sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = saved


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code (0, 1 for failed checks, 2, 130).

    Without ``argv`` (the console script, which exits next) the objects left are frozen out of
    the garbage collector first: the interpreter's final collections would otherwise walk every
    object of torch, ~0.6 s of a command's exit (they are still freed when the process ends).
    """
    try:
        return _main(argv)
    finally:
        if argv is None:
            gc.freeze()


def _main(argv: list[str] | None) -> int:
    raw = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in raw
    args: argparse.Namespace | None = None
    try:
        args = build_parser().parse_args(raw)
        with _one_line_warnings(), text_width(None if args.wide else TEXT_WIDTH):
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        note: Callable[[argparse.Namespace], str] | None = getattr(args, "on_interrupt", None)
        saved = note(args) if note is not None and args is not None else "nothing was saved"
        print(f"cvfl: interrupted; {saved}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. ``cvfl compare | head``): not an error of the command.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if debug:
            raise
        print(f"cvfl: error: {_one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
