"""Build the compiled kernels (``cvfl_theory._kernels``); everything else is in pyproject.toml."""

import os
import shlex
import shutil
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -ffp-contract=off: no fused multiply-adds, so every build gives the same bits (see _kernels.c).
# Tested with gcc 12 and clang 14 (tests/test_compressors_kernels.py builds with both).
flags = (
    []
    if sys.platform == "win32"
    else ["-O3", "-ffp-contract=off", "-fno-strict-aliasing", "-funroll-loops"]
)

HOW_TO_GET = (
    "Debian/Ubuntu: apt-get install gcc python3-dev; Fedora: dnf install gcc python3-devel; "
    "macOS: xcode-select --install; Windows: the Microsoft C++ Build Tools"
)


class BuildKernels(build_ext):
    """build_ext that names a missing C compiler or missing Python headers in one line."""

    def build_extensions(self) -> None:
        """Stop with one line if the compiler or the headers are missing, else build."""
        missing = self._missing()
        if missing:
            raise SystemExit(
                f"cvfl: cannot build the compiled kernels (cvfl_theory/_kernels.c): {missing}. "
                f"Install a C compiler (gcc or clang) and the Python headers ({HOW_TO_GET}), "
                "then install again."
            )
        super().build_extensions()

    def _missing(self) -> str:
        exe = getattr(self.compiler, "compiler_so", None)  # unix compilers: the command line
        if exe:
            cmd = shlex.split(exe) if isinstance(exe, str) else list(exe)
            if cmd and shutil.which(cmd[0]) is None:
                return f"no C compiler: the command {cmd[0]!r} was not found"
        include = sysconfig.get_paths().get("include", "")
        if exe and not os.path.exists(os.path.join(include, "Python.h")):
            return f"no Python headers: {os.path.join(include, 'Python.h')} does not exist"
        return ""


setup(
    cmdclass={"build_ext": BuildKernels},
    ext_modules=[
        Extension(
            "cvfl_theory._kernels", sources=["cvfl_theory/_kernels.c"], extra_compile_args=flags
        )
    ],
)
