"""Build of nbprec's optional C extensions; everything else is in pyproject.toml.

- ``nbprec.compare._fused``: the one-pass metric kernel and the metrics made from its sums;
- ``nbprec.formats._zipdir``: the directory of a ``torch.save`` archive (the pure-Python twin in
  ``nbprec/formats/_pt.py`` does the same, slower);
- ``nbprec.formats._msprobescan``: the usual msprobe ``dump.json`` read into its index columns in C, and what
  its op keys and shapes say (without it, or for anything unusual, by the Python reader of
  ``nbprec/formats/msprobe_index.py``);
- ``nbprec.formats._columnscan``: the column cache of nbprec's own dump format (``index.columns.json``) read into
  typed columns in C (without it, or for anything unusual, by the Python reader of
  ``nbprec/formats/native_columns.py``);
- ``nbprec.capture._stats``: the capture's one-pass tensor statistics (without it the capture computes
  them with numpy, slower);
- ``nbprec.capture._npyio`` (POSIX): the capture's payload files, written by C threads that never wait for
  the GIL (without it a Python thread writes them, slower while the model runs);
- ``nbprec.capture._indexlines`` (POSIX): a statistics capture's usual index record appended in C (without it,
  by ``CaptureWriter.add`` in Python);
- ``nbprec.capture._walks``: the capture's two walks, of the interpreter stack behind each recorded op's call stack
  and of the autograd graph a call made (without it, the Python loops of ``StackCollector.key`` and
  ``BackwardWatch._boundary``);
- ``nbprec.overflow._profile``: the overflow scan's counts over a payload in one pass (without it, numpy's passes
  over each chunk);
- ``nbprec._floattext``: float64 values as ``repr`` writes them, for the CSV exports (without it, ``repr``);
- ``nbprec._csvjoin``: the CSV exports' rows joined from their columns in C when every cell is ASCII text, columns
  of numbers formatted there by ``nbprec._floattext``'s formatter (without it, in Python);
- ``nbprec._hugeheap``: ``nbprec compare``'s heap marked for transparent huge pages before it reads payloads (Linux
  with glibc; without it, or elsewhere, the heap as malloc makes it);
- ``nbprec.graph._textformat``: GE graphs in protobuf text format parsed in C (without it, by the Python
  tokeniser of ``nbprec/graph/ge_parse.py``, which also gives every error).

All thirteen are optional: where they cannot be compiled (no C compiler), the install goes on without them, and
``nbprec.compare.metrics.KERNEL`` says ``"numpy"``.

The capture's per-record Python (``nbprec/capture/``: ``backward.py``, ``gradients.py``, ``memo.py``,
``naming.py``, ``recorder.py``, ``signature.py``, ``tensors.py``) is also compiled, by mypyc (pyproject.toml's build
requirements bring it), into extension modules of the same names that Python imports in place of the ``.py`` files,
with mypyc's runtime and the compiled code in the top-level module ``nbprec_capture__mypyc``. The ``.py`` files stay
the source: without mypyc or a C compiler, or with ``NBPREC_PURE_PYTHON=1`` set at install, they are what runs. An
edit to one of them needs a reinstall (``make`` does it) before it takes effect; ``tests/capture/test_compiled.py``
says when a compiled module is older than its source.

It also installs the prebuilt JupyterLab extension (``nbprec/labextension/``, built from ``jupyterlab-nbprec/`` by
``make labextension``) and the switch that enables nbprec's Jupyter server extension, where Jupyter looks for
them (``<prefix>/share/jupyter/labextensions/``, ``<prefix>/etc/jupyter/``): no build step for users.
"""

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.editable_wheel import editable_wheel

# -fopenmp-simd honours the kernel's `#pragma omp simd` reductions without linking an OpenMP runtime;
# -fno-math-errno lets fabs/sqrt stay inline. No -ffast-math: NaN and inf must propagate as numpy's do.
UNIX_FLAGS = ["-O3", "-fopenmp-simd", "-fno-math-errno"]
# Python's own CFLAGS carry -fwrapv (CPython relies on signed overflow wrapping; the kernel does not), which
# costs the kernel's loops about 2% (measured on the msprobe pair of bench/compare.py).
KERNEL_FLAGS = ["-fno-wrapv"]


# The capture's payload writer uses POSIX threads, mmap and writev, its record appender clock_gettime: elsewhere
# both are done in Python.
POSIX_EXTENSIONS = (
    [
        Extension("nbprec.capture._npyio", ["nbprec/capture/_npyio.c"], optional=True),
        Extension("nbprec.capture._indexlines", ["nbprec/capture/_indexlines.c"], optional=True),
    ]
    if os.name == "posix"
    else []
)


#: The capture's modules mypyc compiles (see above), and the extension holding mypyc's runtime for them.
COMPILED_CAPTURE = tuple(
    f"nbprec.capture.{name}"
    for name in (
        "backward",
        "gradients",
        "lines",
        "memo",
        "naming",
        "recorder",
        "signature",
        "stacks",
        "statistics",
        "tensors",
    )
)
COMPILED_RUNTIME = "nbprec_capture__mypyc"  # (top level: mypyc names a dotted group's init function wrongly)


def compiled_capture() -> list[Extension]:
    """The extensions mypyc makes of the capture's modules: none without mypyc, or where it fails."""
    if os.environ.get("NBPREC_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        return []
    files = [name.replace(".", "/") + ".py" for name in COMPILED_CAPTURE]
    try:  # (the modules' imports are read as untyped: only these files are checked and compiled)
        extensions = mypycify(
            ["--follow-imports=skip", "--ignore-missing-imports", "--cache-dir=/dev/null", *files],
            opt_level="3",
            separate=[(files, COMPILED_RUNTIME.removesuffix("__mypyc"))],
        )
    except (Exception, SystemExit) as exc:  # mypy's errors end in SystemExit
        print(f"nbprec: the capture's modules stay pure Python (mypyc: {exc})", file=sys.stderr)
        return []
    for ext in extensions:
        ext.optional = True
    return extensions


class BuildExt(build_ext):
    """build_ext with the kernel's optimisation flags on GCC and Clang; the compiled capture modules only when the
    runtime they import was built."""

    def build_extensions(self) -> None:
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                kernel = KERNEL_FLAGS if ext.name == "nbprec.compare._fused" else []
                ext.extra_compile_args = [*ext.extra_compile_args, *UNIX_FLAGS, *kernel]
        names = [ext.name for ext in self.extensions]
        if COMPILED_RUNTIME in names:  # first, so that the modules can be left out if it fails
            self.extensions.insert(0, self.extensions.pop(names.index(COMPILED_RUNTIME)))
        self._runtime_built = False
        super().build_extensions()

    def build_extension(self, ext: Extension) -> None:
        if ext.name in COMPILED_CAPTURE and not self._runtime_built:  # an import error there: pure Python instead
            print(f"nbprec: {ext.name} stays pure Python ({COMPILED_RUNTIME} was not built)", file=sys.stderr)
            return
        super().build_extension(ext)
        if ext.name == COMPILED_RUNTIME:
            self._runtime_built = True


class EditableWheel(editable_wheel):
    """``pip install -e .`` installing the data files (the JupyterLab extension) too, copied as for a wheel.

    setuptools means to copy them into the editable wheel, as it does scripts, but asks the distribution for
    ``has_data()``, which it lacks (it has ``has_data_files()``), and so leaves them out.
    """

    def _run_install(self, category: str) -> None:
        if category == "data" and self.distribution.has_data_files():
            self.run_command("install_data")
        else:
            super()._run_install(category)


def jupyter_data_files() -> list[tuple[str, list[str]]]:
    """``data_files`` entries for the JupyterLab extension and the server extension's configuration."""
    labext = "share/jupyter/labextensions/jupyterlab-nbprec"
    built = Path("nbprec/labextension")
    folders: dict[str, list[str]] = {labext: ["jupyterlab-nbprec/install.json"]}
    for file in sorted(built.rglob("*")):
        if file.is_file():
            folder = file.parent.relative_to(built).as_posix()
            folders.setdefault(labext if folder == "." else f"{labext}/{folder}", []).append(file.as_posix())
    config = ("etc/jupyter/jupyter_server_config.d", ["jupyterlab-nbprec/jupyter-config/nbprec.json"])
    return [*folders.items(), config]


setup(
    data_files=jupyter_data_files(),
    ext_modules=[
        Extension(
            "nbprec.compare._fused",
            ["nbprec/compare/_fused.c", "nbprec/compare/_fused_avx512.c", "nbprec/compare/_fused_metrics.c"],
            depends=["nbprec/compare/_fused.h", "nbprec/compare/_fused_kernel.h"],
            optional=True,
        ),
        Extension("nbprec.formats._zipdir", ["nbprec/formats/_zipdir.c"], optional=True),
        Extension(
            "nbprec.formats._msprobescan",
            [
                "nbprec/formats/_msprobescan.c",
                "nbprec/formats/_msprobescan_keys.c",
                "nbprec/formats/_msprobescan_columns.c",
            ],
            depends=["nbprec/formats/_jsontokens.h", "nbprec/formats/_pow5.h"],
            optional=True,
        ),
        Extension(
            "nbprec.formats._columnscan",
            ["nbprec/formats/_columnscan.c"],
            depends=["nbprec/formats/_jsontokens.h", "nbprec/formats/_pow5.h"],
            optional=True,
        ),
        # dlopen/dlsym (the OpenMP runtime torch loaded): in libdl before glibc 2.34
        Extension(
            "nbprec.capture._stats",
            ["nbprec/capture/_stats.c"],
            depends=["nbprec/_elements.h"],
            libraries=["dl"] if sys.platform.startswith("linux") else [],
            optional=True,
        ),
        Extension("nbprec.capture._walks", ["nbprec/capture/_walks.c"], optional=True),
        Extension(
            "nbprec.overflow._profile", ["nbprec/overflow/_profile.c"], depends=["nbprec/_elements.h"], optional=True
        ),
        Extension("nbprec._floattext", ["nbprec/_floattext.c"], depends=["nbprec/_floattext.h"], optional=True),
        Extension("nbprec._csvjoin", ["nbprec/_csvjoin.c"], depends=["nbprec/_floattext.h"], optional=True),
        Extension("nbprec._hugeheap", ["nbprec/_hugeheap.c"], optional=True),
        Extension("nbprec.graph._textformat", ["nbprec/graph/_textformat.c"], optional=True),
        *POSIX_EXTENSIONS,
        *compiled_capture(),
    ],
    cmdclass={"build_ext": BuildExt, "editable_wheel": EditableWheel},
)
