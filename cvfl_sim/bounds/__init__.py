"""The theory checked on runs: constants, the Lemma-1 probe, tight terms, theorems, certificates.

May import :mod:`cvfl_sim.vfl` (and :mod:`cvfl_theory`), never :mod:`cvfl_sim.experiments` or
:mod:`cvfl_sim.commands`.
"""
