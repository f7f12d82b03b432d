"""
Optimal versus uniform probabilities: MSE against bits
======================================================

Our version of Figure 1 of Konečný & Richtárik: for a range of bit budgets, the closed-form MSE of
uniform sampling (K1), fixed-size supports (K2), exact water-filling probabilities (K6.2, with and
without centre optimisation) and the binary-quantization baselines (K5.1, K5.2), on per-node
gradients of a logistic regression (scikit-learn digits split over 8 nodes) and on a heavy-tailed
synthetic set.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np

from cvfl_sim.experiments.reference_data import heavy_tailed, logistic_gradients
from cvfl_theory import plot_tradeoff, tradeoff_curve

fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
for ax, (name, X) in zip(
    axes,
    [
        ("logistic-regression gradients (digits)", logistic_gradients(8, dataset="digits")),
        ("heavy-tailed (Student-t, 2.5 dof)", heavy_tailed(8, 64, rng=0)),
    ],
):
    n, d = X.shape
    bits = np.geomspace(n * 32 + 2 * d, n * d * 16, 8)
    table = tradeoff_curve(X, bits, max_iter=20)
    plot_tradeoff(table, ax=ax, title=name)
fig.tight_layout()
plt.show()

# %%
# The table behind the right-hand plot:
print(table)
