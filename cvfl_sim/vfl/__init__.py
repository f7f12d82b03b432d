"""Algorithm 1 of C-VFL and what a run is: configuration, data, models, schedules, ledger, record.

The bottom wing: it imports only :mod:`cvfl_theory`. :func:`~.train.train` picks one execution
strategy (:mod:`.vectorised`, :mod:`.roles`, :mod:`.distributed`), all from one :mod:`.config`.
"""
