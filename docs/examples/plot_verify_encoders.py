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

for encoder in [
    IndependentEncoder(0.2),
    FixedSizeEncoder(20),
    BinaryQuantizationEncoder(),
    RotatedBinaryEncoder(rotation_seed=0),
]:
    print(verify(encoder, X, trials=300, rng=1), end="\n\n")
