"""The ``cvfl`` console script. Subcommands live in :mod:`cvfl_sim.commands`, one module each."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from . import commands


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand module of :mod:`cvfl_sim.commands` registered."""
    parser = argparse.ArgumentParser(
        prog="cvfl",
        description="Theory and verification toolkit for communication-efficient distributed "
        "learning (randomized mean estimation and C-VFL).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):  # shared helpers, not subcommands
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
