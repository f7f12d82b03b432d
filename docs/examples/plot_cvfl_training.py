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
import matplotlib.pyplot as plt

from cvfl_sim import CVFLConfig, load_dataset, train
from cvfl_theory.compressors import Identity, ScalarQuantizer

data = load_dataset("digits-quadrants")

# %%
# Train once uncompressed and once with the 2-bit quantizer, and plot test accuracy against the
# bits sent:

fig, ax = plt.subplots(figsize=(7, 4.5))
for label, comp in [("b = 32 (uncompressed)", Identity()), ("b = 2, scalar", ScalarQuantizer(2))]:
    run = train(data, CVFLConfig(Q=10, lr=0.1, epochs=6, compressor=comp, seed=0))
    bits = [row["bits"] for row in run.history]
    acc = [row["test_accuracy"] for row in run.history]
    ax.plot(bits, acc, "o-", label=label)
    print(f"{label:24s} final accuracy {acc[-1]:.3f} after {bits[-1]:.3g} bits")
ax.set_xscale("symlog", linthresh=1e5)
ax.set_xlabel("bits communicated (uploads, downloads, server model)")
ax.set_ylabel("test accuracy")
ax.set_title("C-VFL, digits-quadrants, Q = 10")
ax.legend()
plt.show()
