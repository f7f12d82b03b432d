"""Subcommands of the ``cvfl`` console script: one module each, discovered automatically.

A module here defines ``register(subparsers)``, which adds its parser and sets ``func`` (a callable
taking the parsed arguments and returning the exit code) with ``parser.set_defaults(func=...)``.
"""
