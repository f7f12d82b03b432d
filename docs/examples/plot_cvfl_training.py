"""
C-VFL on image quadrants: accuracy against bits on the wire
===========================================================

Four parties each hold one 4×4 quadrant of the scikit-learn digits (the CIFAR-10 set-up of the
C-VFL paper, offline). Algorithm 1 (C1) runs with ``Q = 10`` local steps per round; parties send
embeddings uncompressed (32-bit floats) or with a 2-bit dithered scalar quantizer, and the ledger
(C6) counts every bit of every message. The full 5-seed reproduction is on the results page
(``cvfl reproduce compressors``).
"""

# %%
from cvfl_sim import CVFLConfig, load_dataset, train
from cvfl_sim.experiments.plotting import plot_runs
from cvfl_theory.compressors import Identity, ScalarQuantizer

data = load_dataset("digits-quadrants")

# %%
# Train once uncompressed and once with the 2-bit quantizer (two seeds each), and plot test
# accuracy against the bits sent with the toolkit's own :func:`~cvfl_sim.experiments.plotting.plot_runs`
# (mean ± std over the seeds; the label ``b=32`` is the uncompressed baseline):

groups = {}
for label, comp in [("b=32", Identity()), ("scalar b=2", ScalarQuantizer(2))]:
    groups[label] = [
        train(data, CVFLConfig(Q=10, lr=0.1, epochs=6, compressor=comp, seed=seed))
        for seed in (0, 1)
    ]
    final = [run.history[-1] for run in groups[label]]
    print(
        f"{label:12s} final accuracy {[round(r['test_accuracy'], 3) for r in final]} "
        f"after {final[0]['bits']:.3g} bits"
    )
ax = plot_runs(groups, x="bits", title="C-VFL, digits-quadrants, Q = 10")
