"""Build the compiled kernels (``cvfl_theory._kernels``); everything else is in pyproject.toml."""

import sys

from setuptools import Extension, setup

# -ffp-contract=off: no fused multiply-adds, so every build gives the same bits (see _kernels.c).
flags = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-fno-strict-aliasing", "-funroll-loops"]

setup(
    ext_modules=[
        Extension("cvfl_theory._kernels", sources=["cvfl_theory/_kernels.c"], extra_compile_args=flags)
    ]
)
