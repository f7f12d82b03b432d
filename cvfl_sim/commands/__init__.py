"""The ``cvfl`` command line: :mod:`.cli` and one module per subcommand, discovered automatically.

May import every other wing (:mod:`cvfl_sim.experiments`, :mod:`cvfl_sim.bounds`,
:mod:`cvfl_sim.vfl`); nothing imports it. A subcommand module defines ``register(subparsers)``,
which adds its parser and sets ``func`` (a callable taking the parsed arguments and returning the
exit code) with ``parser.set_defaults(func=...)``.
"""
