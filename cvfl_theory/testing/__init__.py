"""Testing helpers for users of the toolkit.

- :mod:`cvfl_theory.testing.exact` — exact expectations by enumerating every support;
- :mod:`cvfl_theory.testing.strategies` — Hypothesis strategies (imports hypothesis lazily, so it
  stays an optional dependency; import the module only where hypothesis is installed).
"""
