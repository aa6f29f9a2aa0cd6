"""Build of nbprec's optional C extensions; everything else is in pyproject.toml.

- ``nbprec.compare._fused``: the one-pass metric kernel;
- ``nbprec.formats._zipdir``: the directory of a ``torch.save`` archive (the pure-Python twin in
  ``nbprec/formats/_pt.py`` does the same, slower);
- ``nbprec.capture._stats``: the capture's one-pass tensor statistics (without it the capture computes
  them with numpy, slower).

All three are optional: where they cannot be compiled (no C compiler), the install goes on without them, and
``nbprec.compare.metrics.KERNEL`` says ``"numpy"``.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -fopenmp-simd honours the kernel's `#pragma omp simd` reductions without linking an OpenMP runtime;
# -fno-math-errno lets fabs/sqrt stay inline. No -ffast-math: NaN and inf must propagate as numpy's do.
UNIX_FLAGS = ["-O3", "-fopenmp-simd", "-fno-math-errno"]
# Python's own CFLAGS carry -fwrapv (CPython relies on signed overflow wrapping; the kernel does not), which
# costs the kernel's loops about 2% (measured on the msprobe pair of bench/compare.py).
KERNEL_FLAGS = ["-fno-wrapv"]


class BuildExt(build_ext):
    """build_ext with the kernel's optimisation flags on GCC and Clang."""

    def build_extensions(self) -> None:
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                kernel = KERNEL_FLAGS if ext.name == "nbprec.compare._fused" else []
                ext.extra_compile_args = [*ext.extra_compile_args, *UNIX_FLAGS, *kernel]
        super().build_extensions()


setup(
    ext_modules=[
        Extension("nbprec.compare._fused", ["nbprec/compare/_fused.c"], optional=True),
        Extension("nbprec.formats._zipdir", ["nbprec/formats/_zipdir.c"], optional=True),
        Extension("nbprec.capture._stats", ["nbprec/capture/_stats.c"], optional=True),
    ],
    cmdclass={"build_ext": BuildExt},
)
