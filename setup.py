"""Build of nbprec's optional C kernel, ``nbprec.compare._fused``; everything else is in pyproject.toml.

The extension is optional: where it cannot be compiled (no C compiler), the install goes on without it and
``nbprec.compare.metrics.KERNEL`` says ``"numpy"``.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -fopenmp-simd honours the kernel's `#pragma omp simd` reductions without linking an OpenMP runtime;
# -fno-math-errno lets fabs/sqrt stay inline. No -ffast-math: NaN and inf must propagate as numpy's do.
UNIX_FLAGS = ["-O3", "-fopenmp-simd", "-fno-math-errno"]


class BuildExt(build_ext):
    """build_ext with the kernel's optimisation flags on GCC and Clang."""

    def build_extensions(self) -> None:
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                ext.extra_compile_args = [*ext.extra_compile_args, *UNIX_FLAGS]
        super().build_extensions()


setup(
    ext_modules=[Extension("nbprec.compare._fused", ["nbprec/compare/_fused.c"], optional=True)],
    cmdclass={"build_ext": BuildExt},
)
