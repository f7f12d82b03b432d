"""
Table 1 of Konečný & Richtárik, checked three ways
==================================================

Each row of the Section-5 table is computed from the K4 formula, from the protocol and encoder
closed forms (K3, K1.2), and by simulation with its standard error.
"""

# %%
from cvfl_theory.section5 import table1

table = table1(n=10, d=128, r=32, p_general=(0.1, 0.5), trials=200, rng=0)
print(table)

# %%
# The one-bit-per-element row costs about one bit per entry plus the per-node seed and centre,
# and its MSE is :math:`(r - 1) R / n`, independent of :math:`d`.
import matplotlib.pyplot as plt

points = sorted(
    zip(table.column("C seeded (K3)"), table.column("MSE·n/R (K1.2)"), table.column("p"))
)
plt.loglog([c for c, _, _ in points], [m + 1e-3 for _, m, _ in points], "o-")
for c, m, p in points:
    plt.annotate(f"p={p:.3g}", (c, m + 1e-3))
plt.xlabel("expected bits, seeded sparse protocol")
plt.ylabel("MSE in units of R/n (+1e-3)")
plt.title("Accuracy vs communication (K4)")
plt.show()
