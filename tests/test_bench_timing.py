"""bench/timing.py's import costs (what importing a command's heavy dependencies costs a fresh interpreter, printed
by bench/compare.py beside its figures; no timing is asserted), and the byte-compiling of a tree before it is
timed."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from bench_support import bench_module

timing = bench_module("timing")


def test_import_costs_name_each_module_its_version_and_milliseconds():
    text = timing.import_costs(["numpy", "ml_dtypes", "nbprec.cli"], runs=2)
    parts = text.split(", ")
    assert len(parts) == 3, text
    assert re.fullmatch(rf"numpy {re.escape(np.__version__)} \d+ ms", parts[0]), text
    assert re.fullmatch(rf"ml_dtypes {re.escape(ml_dtypes.__version__)} \d+ ms", parts[1]), text
    assert re.fullmatch(r"nbprec\.cli \d+ ms", parts[2]), text  # (no __version__: no version shown)


def test_import_costs_fail_on_a_module_that_does_not_import():
    with pytest.raises(SystemExit, match="ModuleNotFoundError"):
        timing.import_costs(["numpy", "no_such_module_nbprec"], runs=1)


def test_compile_tree_writes_the_bytecode_of_a_trees_nbprec_package(tmp_path):
    import importlib.util

    package = tmp_path / "nbprec"
    (package / "sub").mkdir(parents=True)
    sources = [package / "__init__.py", package / "sub" / "__init__.py", package / "sub" / "mod.py"]
    for source in sources:
        source.write_text("VALUE = 1\n")
    (tmp_path / "outside.py").write_text("VALUE = 2\n")  # (not the package's: left alone)
    timing.compile_tree(tmp_path)
    for source in sources:
        assert Path(importlib.util.cache_from_source(str(source))).exists(), source
    assert not Path(importlib.util.cache_from_source(str(tmp_path / "outside.py"))).exists()


_ZEN3 = (  # the first processor's block is read; the next one's name is not
    "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n"
    "flags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nmodel name\t: other\n"
)
_ZEN4 = "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f\n"
_ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm crc32\nCPU implementer\t: 0x41\n"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (_ZEN3, "AMD EPYC (family 25 model 1, AVX2)"),
        (_ZEN4, "AMD EPYC (family 25 model 17, AVX-512)"),
        ("model name\t: Some CPU\n", "Some CPU"),  # nothing else given: the name alone
    ],
)
def test_the_cpu_is_named_with_its_family_model_and_vector_instructions(text, named):
    # "AMD EPYC" alone is a Zen 3 without AVX-512 or a Zen 4 with it: the figures differ by up to 2x between them
    assert timing.cpu_text(text) == named


def test_a_cpu_without_a_model_name_still_says_its_vector_instructions():
    assert timing.cpu_text(_ARM).endswith("(NEON)")


def test_the_machine_line_names_this_machines_cpu_as_proc_cpuinfo_does():
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        pytest.skip("no /proc/cpuinfo on this system")
    first = cpuinfo.read_text().split("\n\n")[0]
    family = re.search(r"^cpu family\s*:\s*(\d+)", first, re.M)
    model = re.search(r"^model\s*:\s*(\d+)", first, re.M)
    line = timing.machine()
    assert re.match(r"\d+ cores, .+, .+ RAM, load average ", line), line
    if family and model:
        assert f"(family {family.group(1)} model {model.group(1)}" in line, line
