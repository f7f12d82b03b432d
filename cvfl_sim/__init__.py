"""cvfl_sim — small C-VFL training runs that check the bounds and schedules of [CVFL] empirically.

Entry points: :func:`train` (Algorithm 1 of THEORY C1), :class:`CVFLConfig`,
:class:`VerticalDataset` / :func:`load_dataset` and :class:`RunResult`.
"""
