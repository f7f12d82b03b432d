"""
Closed-form MSE against simulation, for every encoder
=====================================================

``verify`` compares each encoder's closed form with a seeded Monte Carlo estimate and its standard
error, checks unbiasedness coordinate by coordinate, and compares the mean payload bits of every
applicable protocol with K3.
"""

# %%
import numpy as np

from cvfl_theory import (
    BinaryQuantizationEncoder,
    FixedSizeEncoder,
    IndependentEncoder,
    RotatedBinaryEncoder,
)
from cvfl_theory.verify import verify

X = np.random.default_rng(0).standard_t(df=3, size=(8, 100))

# %%
# One verification report per encoder, on the same data:

results = []
for encoder in [
    IndependentEncoder(0.2),
    FixedSizeEncoder(20),
    BinaryQuantizationEncoder(),
    RotatedBinaryEncoder(rotation_seed=0),
]:
    results.append(verify(encoder, X, trials=300, rng=1))
    print(results[-1], end="\n\n")

# %%
# The MSE pairs side by side: the closed form (bar) and the Monte Carlo estimate with ± 3
# standard errors; ``verify`` passes when every pair agrees within its threshold.

import matplotlib.pyplot as plt

names = [r.encoder.split("(")[0].removesuffix("Encoder") for r in results]
fig, ax = plt.subplots(figsize=(7, 3.8))
ax.bar(names, [r.mse.theoretical for r in results], color="C0", alpha=0.5, label="closed form")
ax.errorbar(
    names,
    [r.mse.empirical for r in results],
    yerr=[3 * r.mse.se for r in results],
    fmt="o",
    color="k",
    capsize=4,
    label="Monte Carlo ± 3 SE (300 trials)",
)
ax.set_ylabel("MSE of the mean estimate")
ax.set_title("Closed-form MSE against simulation (K1.2, K2.2, K5.1, K5.2)")
ax.legend(fontsize="small")
plt.show()
