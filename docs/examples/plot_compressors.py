"""
C-VFL compressors: exact error against the paper's table
========================================================

For each number of bits per component, the exact dithered error of the scalar quantizer (C5.1,
:math:`\\Delta^2/12` per component with :math:`\\Delta = (h_{\\max} - h_{\\min})/(2^q - 1)`) and of the
hexagonal lattice quantizer (C5.2, :math:`5V/(18\\sqrt3)` per pair with the cell area :math:`V`
chosen by exact codebook counting, C5.3), next to the bounds published in the C-VFL paper. Both
published bounds are *below* the exact errors: by 1.78× for scalar quantization at 2 bits, and by
1.92× for the lattice at every rate. A Monte Carlo estimate (± 5 SE) is shown at 2 and 4 bits.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np

from cvfl_theory.bounds import hex_round_error, scalar_round_error
from cvfl_theory.compressors import HexLatticeQuantizer, ScalarQuantizer, compare_with_published

B, P, span = 32, 64, 2.0
bits = np.arange(2, 9)
scalar_exact = [scalar_round_error(int(b), B, P, span) for b in bits]
hex_exact = [hex_round_error(int(b), B, P, span) for b in bits]
scalar_pub = [ScalarQuantizer(int(b), range=(-1.0, 1.0)).published_bound((B, P)) for b in bits]
hex_pub = [HexLatticeQuantizer(int(b), range=(-1.0, 1.0)).published_bound((B, P)) for b in bits]

# %%
# The exact errors and the published bounds on a log scale, with a Monte Carlo estimate at 2 and
# 4 bits (error bars: 5 standard errors):

fig, ax = plt.subplots(figsize=(7, 4.5))
ax.semilogy(bits, scalar_exact, "o-", label="scalar, exact (C5.1)")
ax.semilogy(bits, scalar_pub, "o--", label="scalar, published")
ax.semilogy(bits, hex_exact, "s-", label="hexagonal lattice, exact (C5.2)")
ax.semilogy(bits, hex_pub, "s--", label="hexagonal lattice, published")

x = np.random.default_rng(0).uniform(-1.0, 1.0, size=(B, P)).astype(np.float32)
for b in (2, 4):
    for q, marker in (
        (ScalarQuantizer(b, range=(-1.0, 1.0)), "o"),
        (HexLatticeQuantizer(b, range=(-1.0, 1.0)), "s"),
    ):
        rep = compare_with_published(q, x, trials=100, rng=1)
        print(rep, end="\n\n")
        ax.errorbar(
            [b], [rep.measured], yerr=[5 * rep.standard_error], fmt=marker, color="k", capsize=3
        )
ax.set_xlabel("bits per component b")
ax.set_ylabel(r"$E_m = \mathbb{E}\|C(h) - h\|_F^2$ (B=32, P=64, range [-1, 1])")
ax.set_title("Exact compression error vs the published bounds")
ax.legend(fontsize="small")
plt.show()

# %%
# The same comparison for every compressor and bit width in one call, on any embedding (here a
# heavy-tailed one; the quantizers' range is the embedding's own): :func:`~cvfl_theory.compressors.compare_bits`
# returns a :class:`~cvfl_theory.compressors.BitsSweep` that prints as a table, plots with
# :func:`~cvfl_theory.compressors.plot_compressors` and saves with ``sweep.save(path)``
# (``cvfl compare --embeddings H.npy --bits 1-8 --plot sweep.png`` from the command line):

from cvfl_theory.compressors import compare_bits, plot_compressors

H = np.random.default_rng(2).standard_t(4, size=(B, P))
sweep = compare_bits(H, bits=range(1, 9), trials=50, rng=3)
fig, ax = plt.subplots(figsize=(7, 4.5))
plot_compressors(sweep, ax=ax)
plt.show()
sweep
