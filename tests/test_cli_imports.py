"""The ``nbprec`` command imports what its subcommand needs: no pandas, capture, widgets, graph or torch for a
compare (of nbprec or msprobe dumps); the public names of ``nbprec`` keep meaning the functions whatever was
imported before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from nbprec.formats.native import NativeDumpWriter

# Packages the compare command must not load (checked by the top-level name or the nbprec subpackage).
NOT_FOR_COMPARE = (
    "pandas",
    "torch",
    "ipywidgets",
    "bqplot",
    "ipycytoscape",
    "matplotlib",
    "nbprec.capture",
    "nbprec.widgets",
    "nbprec.graph",
    "nbprec.report",
    "nbprec.jupyter",
    "nbprec.diagnose",
    "nbprec.config",
)


def _loaded(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; return the JSON it prints last."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


_HEAVY = f"heavy = sorted(m for m in sys.modules if m in {NOT_FOR_COMPARE!r} or m.split('.')[0] in {NOT_FOR_COMPARE!r})"


def test_importing_the_cli_loads_no_capture_widgets_graph_or_torch():
    loaded = _loaded(f"import json, sys, nbprec.cli\n{_HEAVY}\nprint(json.dumps(heavy))")
    assert loaded == []


def _pair(root: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    paths = []
    for run in ("target", "bench"):
        with NativeDumpWriter(root / run, run=run) as writer:
            for i in range(3):
                record = {"name": f"Functional.linear.{i}.forward.output.0", "op": f"Functional.linear.{i}.forward"}
                record.update(order=i, api="linear", call=i, direction="forward", role="output", slot="0")
                value = rng.standard_normal(64).astype(np.float32)
                writer.write_tensor(record, value if run == "bench" else value.astype(np.float16))
        paths.append(root / run)
    return paths[0], paths[1]


def _compare_loaded(target: Path, bench: Path, out: Path, *options: str) -> dict:
    """``nbprec compare TARGET BENCH -o OUT [OPTIONS]`` in a fresh interpreter: its status, what it printed, the
    heavy packages it loaded, the modules of the graph package it loaded, and whether it loaded ml_dtypes."""
    arguments = ["compare", str(target), str(bench), "-o", str(out), "--no-progress", *options]
    code = (
        "import contextlib, io, json, sys\n"
        "from nbprec.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as text:\n"
        f"    status = main({arguments!r})\n"
        f"{_HEAVY}\n"
        "graph = sorted(m for m in sys.modules if m.startswith('nbprec.graph.'))\n"
        "found = {'heavy': heavy, 'graph': graph, 'ml_dtypes': 'ml_dtypes' in sys.modules}\n"
        "print(json.dumps({'status': status, 'text': text.getvalue(), **found}))\n"
    )
    return _loaded(code)


def test_the_compare_command_works_without_the_optional_layers(tmp_path):
    target, bench = _pair(tmp_path)
    out = tmp_path / "out"
    result = _compare_loaded(target, bench, out)
    assert result["heavy"] == []
    assert result["status"] == 0
    assert "first failing op" in result["text"]
    assert {p.name for p in out.iterdir()} >= {"comparison.json", "ops.csv", "compare_msprobe.csv"}


FIXTURES = Path(__file__).parent / "fixtures"


def test_comparing_msprobe_dumps_of_two_steps_needs_no_pandas(tmp_path):
    """The msprobe reader, several (step, rank)s (the runs table and runs.csv) and every CSV layout, without
    pandas; the files are those the same comparison writes through the Python API, where pandas is loaded."""
    target, bench = FIXTURES / "msprobe" / "bf16_statistics_mix", FIXTURES / "msprobe" / "fp32_statistics_mix"
    out = tmp_path / "cli"
    result = _compare_loaded(target, bench, out)
    assert result["heavy"] == [] and result["status"] == 0
    assert "steps and ranks:" in result["text"] and "failing ops under each preset rule:" in result["text"]
    import pandas as pd

    from nbprec.compare import compare

    comp = compare(target, bench)
    assert "pandas" in __import__("sys").modules
    names = {p.name for p in out.iterdir()}
    assert {"tensors.csv", "ops.csv", "runs.csv", "compare_msprobe.csv", "compare_msaccucmp.csv"} <= names
    pd.testing.assert_frame_equal(pd.read_csv(out / "ops.csv"), pd.read_csv(_written(comp.ops, tmp_path / "ops.csv")))
    runs = pd.read_csv(out / "runs.csv")
    pd.testing.assert_frame_equal(runs, pd.read_csv(_written(comp.runs().table, tmp_path / "runs.csv")))
    assert (runs["status"] != "").all() and runs["first_failing_order"].isna().any()  # missing orders left empty


def test_every_kind_of_verdict_needs_no_pandas(tmp_path):
    """The verdict's branches that look at other ops than the first failing one (the op where a passing error
    jumped; noise carried through a pass) read the ops' arrays, not DataFrame rows (a row imports pandas: see
    tests/compare/test_cancelling_sums.py for the first op that introduces an error later)."""
    msprobe = FIXTURES / "msprobe"
    pairs = {
        "The largest jump before it is at Torch.rsqrt.5.forward": "planted_rsqrt_{}_statistics_L1",
        "Rounding noise carried": "checkpoint_{}_statistics_mix",
        "It introduced the error": "scenarios/{}_statistics",
    }
    for i, (words, run) in enumerate(pairs.items()):
        target, bench = (msprobe / run.format(side) / "step0" for side in ("bf16", "fp32"))
        if run.startswith("scenarios"):
            target, bench = msprobe / run.format("fault"), msprobe / run.format("fp32")
        result = _compare_loaded(target, bench, tmp_path / str(i))
        assert result["heavy"] == [] and words in result["text"], result["text"][:300]


def test_comparing_an_npu_dump_with_its_graph_needs_no_pandas(tmp_path):
    """A CANN dump, its GE graph (fusion matching, storage formats) and a TensorFlow dump: the graph package is
    needed, pandas and the other layers are not."""
    from nbprec.demo.npu import make_npu_demo

    case = make_npu_demo(tmp_path / "npu-demo", batch=1)
    result = _compare_loaded(case.npu, case.tf, tmp_path / "cli", "--graph", str(case.graph))
    assert [m for m in result["heavy"] if not m.startswith("nbprec.graph")] == []
    assert result["status"] == 0 and case.faulty_op in result["text"]
    # of the graph package, the GE reader alone (the package's other modules: 10 ms of start-up)
    assert {"nbprec.graph.ge", "nbprec.graph.ge_convert"} <= set(result["graph"])
    assert {"nbprec.graph.model_explorer", "nbprec.graph.info", "nbprec.graph.subgraph"}.isdisjoint(result["graph"])
    assert not result["ml_dtypes"]  # (float16 and float32 tensors: 6 ms of imports not needed)


def test_describing_a_dump_needs_no_pandas_and_says_what_pandas_would():
    """``nbprec info`` counts ops, dtypes, roles and directions on the index's arrays: no pandas (about 200 ms of
    its start-up); the counts, their order included, are those of the pandas index (``groupby`` and
    ``value_counts``), on an msprobe dump of two steps and on nbprec's own format."""
    from nbprec.dtypes import NUMPY_DTYPES
    from nbprec.formats import open_dump

    for path in (FIXTURES / "msprobe" / "bf16_statistics_mix", FIXTURES / "msprobe" / "bf16_tensor_mix"):
        code = (
            "import contextlib, io, json, sys\n"
            "from nbprec.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as text:\n"
            f"    status = main(['info', '--json', {str(path)!r}])\n"
            f"{_HEAVY}\n"
            "print(json.dumps({'status': status, 'heavy': heavy, 'summary': json.loads(text.getvalue())}))\n"
        )
        result = _loaded(code)
        assert result["status"] == 0 and result["heavy"] == []
        idx = open_dump(path).index
        summary = result["summary"]
        assert summary["ops"] == idx.groupby(["step", "rank", "op"]).ngroups > 0
        assert summary["tensors"] == len(idx) and summary["with_payload"] == int(idx["has_data"].sum())
        for key, column in (("by_dtype", "dtype"), ("by_role", "role"), ("by_direction", "direction")):
            counts = idx[column].value_counts()
            expected = [[str(k or "unknown") if column == "direction" else str(k), int(v)] for k, v in counts.items()]
            assert [list(item) for item in summary[key].items()] == expected, key
        sizes = idx["dtype"].map(lambda d: NUMPY_DTYPES[d].itemsize if d in NUMPY_DTYPES else 0)
        assert summary["bytes"] == int((idx["numel"].clip(lower=0) * sizes).sum()) > 0


def _written(frame: object, path: Path) -> Path:
    from nbprec.safe_text import write_table_csv

    return write_table_csv(frame, path)


def test_help_still_lists_every_subcommand():
    out = subprocess.run([sys.executable, "-m", "nbprec", "--help"], capture_output=True, text=True, check=True)
    for command in ("compare", "info", "config", "diagnose"):
        assert command in out.stdout


def test_public_names_stay_the_functions_after_their_packages_are_imported():
    code = (
        "import json, nbprec, nbprec.capture.api, nbprec.compare.engine, types\n"
        "from nbprec import Comparison, capture, compare, seed_all\n"
        "names = [nbprec.capture, nbprec.compare, capture, compare, seed_all]\n"
        "print(json.dumps([callable(f) and not isinstance(f, types.ModuleType) for f in names]"
        " + [Comparison.__name__, nbprec.capture.__module__, nbprec.compare.__module__]))\n"
    )
    assert _loaded(code) == [True] * 5 + ["Comparison", "nbprec.capture.api", "nbprec.compare.engine"]


def test_the_functions_answer_for_their_packages():
    """``nbprec.compare`` is the function, and its package's names and submodules are found on it, however they
    were imported: ``import a.b.c as x`` and ``a.b.c`` look ``b`` up on ``a`` (docs/compare.md names
    ``nbprec.compare.rules.threshold_rule``)."""
    code = (
        "import json, pickle\n"
        "import nbprec.compare.engine as engine\n"  # (before nbprec.compare was ever asked for)
        "import nbprec.capture.select as select\n"
        "import nbprec\n"
        "import nbprec.compare.rules\n"
        "rule = nbprec.compare.rules.threshold_rule('cosine', 0.98)\n"
        "import nbprec.compare.isolate\n"  # (a submodule imported after the function was bound)
        "print(json.dumps([engine.__name__, select.__name__, rule.name, nbprec.compare.isolate.__name__,\n"
        "    nbprec.compare is engine.compare, nbprec.compare.Rule is nbprec.compare.rules.Rule,\n"
        "    nbprec.capture.Selection is select.Selection,\n"
        "    pickle.loads(pickle.dumps(nbprec.compare)) is engine.compare,\n"
        "    hasattr(nbprec.compare, 'compare')]))\n"
    )
    assert _loaded(code) == [
        "nbprec.compare.engine",
        "nbprec.capture.select",
        "cosine>=0.98",
        "nbprec.compare.isolate",
        True,
        True,
        True,
        True,
        False,
    ]


def test_comparing_msprobe_tensor_dumps_loads_no_ml_dtypes(tmp_path):
    """bfloat16 arrays need ml_dtypes (5 ms of the command's start-up); the command's comparison of msprobe's
    bfloat16 payloads reads them as bytes (the mapped ones too: tests/compare/test_early_mapped.py) and never loads
    it. Making an array of one still does."""
    target, bench = FIXTURES / "msprobe" / "bf16_tensor_mix", FIXTURES / "msprobe" / "fp32_tensor_mix"
    code = (
        "import contextlib, io, json, sys\n"
        "from nbprec.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    status = main(['compare', {str(target)!r}, {str(bench)!r}, '-o', {str(tmp_path / 'out')!r}, "
        "'--no-progress'])\n"
        "loaded = 'ml_dtypes' in sys.modules\n"
        "from nbprec.formats import open_dump\n"
        f"dump = open_dump({str(target)!r})\n"
        "name = next(n for n, d in zip(dump.names, dump.index['dtype']) if d == 'bfloat16')\n"
        "print(json.dumps([status, loaded, str(dump.tensor(name).dtype), 'ml_dtypes' in sys.modules]))\n"
    )
    assert _loaded(code) == [0, False, "bfloat16", True]


def test_comparing_loads_no_masked_arrays(tmp_path):
    """np.unique imports numpy.ma (about 10 ms) to check its argument; the compare path asks for distinct
    values through nbprec.columns.distinct, which does not."""
    target, bench = _pair(tmp_path)
    code = (
        "import contextlib, io, json, sys\n"
        "from nbprec.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['compare', {str(target)!r}, {str(bench)!r}, '-o', {str(tmp_path / 'out')!r}, '--no-progress'])\n"
        "print(json.dumps('numpy.ma' in sys.modules))\n"
    )
    assert _loaded(code) is False


def test_every_public_name_of_nbprec_resolves_in_a_fresh_interpreter():
    # the lazy table names modules and attributes as text: a module split or a rename would break it silently
    code = (
        "import json, nbprec\n"
        "broken = []\n"
        "for name in nbprec.__all__:\n"
        "    try:\n"
        "        getattr(nbprec, name)\n"
        "    except Exception as exc:\n"
        "        broken.append(f'{name}: {exc!r}')\n"
        "print(json.dumps(broken))"
    )
    assert _loaded(code) == []
