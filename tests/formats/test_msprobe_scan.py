"""The C scanner of msprobe's dump.json (``nbprec.formats._msprobescan``) against the Python reader: whatever it
reads, the index (every column, problem, call argument and count) is the one the Python reader builds; whatever
it cannot read (unusual layouts, damaged JSON) it leaves to the Python reader."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import nbprec.formats.msprobe_index as msprobe_index
import nbprec.formats.msprobe_scan as msprobe_scan
from nbprec.errors import DumpFormatError
from nbprec.formats._files import real_folder
from nbprec.formats._layout import DumpSource
from nbprec.formats.msprobe_columns import BATCH

pytestmark = pytest.mark.skipif(msprobe_scan._scan is None, reason="nbprec.formats._msprobescan is not built")

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _read(path: Path, scanner: bool):
    """The reader's index of ``path`` with or without the scanner: (frame, meta, problems, calls, counts), or the
    error it raised."""
    saved = msprobe_scan._scan
    if not scanner:
        msprobe_scan._scan = None
    try:
        problems: list = []
        reader = msprobe_index.DumpSourceReader(DumpSource(path, 0, 0), problems, [real_folder(str(path.parent))])
        try:
            frame, meta = reader.read()
        except DumpFormatError as exc:
            return ("error", str(exc))
        calls = [(op, list(values.items())) for op, values in reader.calls.items()]
        return frame, meta, problems, calls, (reader.non_tensor, reader._n_ops)
    finally:
        msprobe_scan._scan = saved


def _cells(values: np.ndarray) -> list:
    if values.dtype.kind == "f":  # NaN equal to NaN, -0.0 told from 0.0
        return [(np.isnan(v), np.signbit(v), 0.0 if np.isnan(v) else v) for v in values.tolist()]
    return [(type(v), v) for v in values.tolist()]


def assert_same_index(path: Path) -> None:
    scanned, python = _read(path, True), _read(path, False)
    if python[0] == "error":
        assert scanned == python
        return
    frame, *rest = scanned
    frame_py, *rest_py = python
    assert list(frame) == list(frame_py)
    for column in frame:
        got, want = np.asarray(frame[column]), np.asarray(frame_py[column])
        assert got.dtype == want.dtype and got.shape == want.shape, column
        assert _cells(got) == _cells(want), column
    assert rest == rest_py


def _fixture_dumps() -> list[Path]:
    return sorted(FIXTURES.rglob("dump.json"))


@pytest.mark.parametrize("path", _fixture_dumps(), ids=lambda p: str(p.relative_to(FIXTURES).parent))
def test_every_fixture_is_scanned_into_the_python_readers_index(path):
    assert msprobe_scan.scan_dump_json(path) is not None  # the usual layout: the scanner reads it
    assert_same_index(path)


# -- generated dumps -------------------------------------------------------------------------------------

_DTYPES = ["torch.float32", "torch.bfloat16", "torch.float16", "torch.int64", "torch.bool", "torch.float8_e4m3fn"]


def _stat(rng: random.Random):
    return rng.choice([rng.uniform(-1e3, 1e3), rng.randint(-(10**6), 10**6), None, float("nan"), float("inf"),
                       -0.0, 1e-320, 10**17, 1.5e308])  # fmt: skip


def _tensor(rng: random.Random, name: str) -> dict:
    entry: dict = {"type": rng.choice(["torch.Tensor", "torch.nn.parameter.Parameter", "numpy.ndarray"])}
    if rng.random() < 0.1:
        del entry["type"]  # a tensor known by its dtype and shape only
    entry["dtype"] = rng.choice([*_DTYPES, None]) if rng.random() < 0.1 else rng.choice(_DTYPES[:3])
    entry["shape"] = rng.choice([[rng.randint(0, 9) for _ in range(rng.randint(0, 3))], [4, 16, 128], [], None])
    for key in ("Max", "Min", "Mean", "Norm"):
        if rng.random() < 0.95:
            entry[key] = _stat(rng)
    entry["requires_grad"] = rng.random() < 0.5
    if rng.random() < 0.8:
        entry["data_name"] = rng.choice([f"{name}.pt", f"{name}.npy", name + ".pt"])
    if rng.random() < 0.2:
        entry["md5"] = rng.choice(["1a2b3c4d", "", None])
    keys = list(entry)
    rng.shuffle(keys)
    return {k: entry[k] for k in keys}


def _scalar(rng: random.Random):
    kinds = [("int", rng.randint(-5, 300)), ("float", rng.uniform(0, 1)), ("bool", True), ("str", "mean"),
             ("NoneType", None), ("slice", [1, 2, None]), ("float", 1e400)]  # fmt: skip
    kind, value = rng.choice(kinds)
    return {"type": kind, "value": value} if rng.random() < 0.9 else rng.choice([None, 3, "x", 2.5])


def _argument(rng: random.Random, name: str, depth: int = 0):
    roll = rng.random()
    if roll < 0.55:
        return _tensor(rng, name)
    if roll < 0.85 or depth > 1:
        return _scalar(rng)
    return [_argument(rng, f"{name}.{i}", depth + 1) for i in range(rng.randint(0, 3))]  # a nested list


def _op(rng: random.Random, key: str) -> dict:
    body: dict = {}
    sections = ["input_args", "input_kwargs", "output", "parameters"]
    if rng.random() < 0.1:
        sections.append("input")
    rng.shuffle(sections)
    for section in sections[: rng.randint(0, len(sections))]:
        if section in ("input_kwargs", "parameters"):
            body[section] = {
                rng.choice(["weight", "bias", "dim", "keepdim", "p"]) + str(i): _argument(rng, f"{key}.{section}.{i}")
                for i in range(rng.randint(0, 3))
            }
        else:
            body[section] = [_argument(rng, f"{key}.{section}.{i}") for i in range(rng.randint(0, 4))]
    return body


def _grads(rng: random.Random, key: str) -> dict:
    return {p: (_tensor(rng, f"{key}.{p}") if rng.random() < 0.7 else [_tensor(rng, f"{key}.{p}")])
            for p in ("weight", "bias")[: rng.randint(1, 2)]}  # fmt: skip


def _data(rng: random.Random, n_ops: int, odd: bool = False) -> dict:
    """``n_ops`` op entries; ``odd``: some of them with layouts the scanner leaves to the Python reader (a body
    of sections under a key that looks like parameter gradients to it, lists of gradients)."""
    data = {}
    for i in range(n_ops):
        if odd and rng.random() < 0.02:
            data[f"Module.parameters_grad.{i}"] = _op(rng, "odd")  # not gradients to msprobe_keys
            data[f"Module.l{i}.Linear.parameters_grad.0"] = {"weight": [_tensor(rng, "w"), _tensor(rng, "w")]}
            continue
        roll = rng.random()
        if roll < 0.7:
            api, direction = (
                rng.choice(["Functional.linear", "Tensor.add", "Torch.matmul"]),
                rng.choice(["forward", "backward"]),
            )
            key = f"{api}.{i}.{direction}"
            data[key] = _op(rng, key)
        elif roll < 0.85:
            key = f"Module.layers.{i}.Linear.forward.0"
            data[key] = _op(rng, key)
        elif roll < 0.95:
            key = f"Module.layers.{i}.Linear.parameters_grad.0"
            data[key] = _grads(rng, key)
        else:
            key = rng.choice([f"not_msprobe_naming{i % 3}", f"Functional.x.{i}.sideways", f"Module.x.{i}"])
            data[key] = _op(rng, key)
    return data


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    folder = tmp_path / name / "step0" / "rank0"
    folder.mkdir(parents=True)
    path = folder / "dump.json"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize("seed", range(12))
def test_generated_dumps_give_the_python_readers_index(tmp_path, seed):
    """Random op entries of every kind the scanner reads (tensors with and without a type, statistics of every
    kind, scalars, bare values, nested lists, named arguments, shuffled sections, gradients, keys outside
    msprobe's naming), several thousand tensors (batches, problems in order): the same index."""
    rng = random.Random(seed)
    data = _data(rng, rng.choice([30, 400, 2500]))
    top = {"task": "tensor", "level": rng.choice(["L1", "mix"]), "dump_data_dir": None, "framework": "pytorch"}
    text = json.dumps({**top, "data": data}, indent=rng.choice([None, 1]))
    path = _write(tmp_path, "gen", text)
    assert msprobe_scan.scan_dump_json(path) is not None
    assert_same_index(path)


@pytest.mark.parametrize("seed", range(4))
def test_generated_dumps_with_odd_entries_give_the_python_readers_index(tmp_path, seed):
    rng = random.Random(100 + seed)
    text = json.dumps({"task": "tensor", "data": _data(rng, 300, odd=True)})
    assert_same_index(_write(tmp_path, "odd", text))


@pytest.mark.parametrize(
    "case",
    [
        "escaped_key", "non_ascii", "repeated_field", "repeated_section", "unknown_section", "string_statistic",
        "float_size", "huge_size", "op_not_an_object", "data_twice", "no_data", "bare_top", "trailing_text",
        "gradient_list_of_two", "slot_beyond_255", "deep_nesting", "gradients_by_key_only", "deep_nested_objects",
    ],
)  # fmt: skip
def test_what_the_scanner_leaves_the_python_reader_reads_alone(tmp_path, case):
    """Each unusual layout makes the scanner step aside (None), and the Python reader reads the file (or says
    what is wrong with it) as it always did."""
    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
              "Norm": 1.0, "data_name": "Functional.relu.0.forward.output.0.pt"}  # fmt: skip
    op = {"input_args": [dict(tensor, data_name="Functional.relu.0.forward.input.0.pt")], "output": [tensor]}
    text = json.dumps({"task": "tensor", "data": {"Functional.relu.0.forward": op}})
    edits = {
        "escaped_key": lambda t: t.replace('"Functional.relu.0.forward"', '"Functional.rel\\u0075.0.forward"'),
        "non_ascii": lambda t: t.replace('"task": "tensor"', '"task": "t\u00e9nsor"'),
        "repeated_field": lambda t: t.replace('"Max": 1.0', '"Max": 1.0, "Max": 2.0', 1),
        "repeated_section": lambda t: t.replace('"output":', '"output": [], "output":'),
        "unknown_section": lambda t: t.replace('"output":', '"extra": [], "output":'),
        "string_statistic": lambda t: t.replace('"Max": 1.0', '"Max": "inf"', 1),
        "float_size": lambda t: t.replace('"shape": [2]', '"shape": [2.0]', 1),
        "huge_size": lambda t: t.replace('"shape": [2]', '"shape": [123456789012345678901]', 1),
        "deep_nested_objects": lambda t: t.replace(
            '"output":', '"input_kwargs": ' + '{"x": ' * 70 + "1" + "}" * 70 + ', "output":'
        ),
        "op_not_an_object": lambda t: t.replace('"data": {', '"data": {"Functional.a.0.forward": 3, '),
        "data_twice": lambda t: t[:-1] + ', "data": {}}',
        "no_data": lambda t: t.replace('"data":', '"other":'),
        "bare_top": lambda t: "[" + t + "]",
        "trailing_text": lambda t: t + " x",
        "gradient_list_of_two": lambda t: t.replace(
            '"data": {', '"data": {"Module.l.Linear.parameters_grad.0": {"weight": [' + json.dumps(tensor) + ", 1]}, "
        ),
        "slot_beyond_255": lambda t: t.replace('"input_args": [', '"input_args": [' + "null, " * 256),
        "deep_nesting": lambda t: t.replace('"task": "tensor"', '"task": ' + "[" * 80 + "]" * 80),
        # the scanner reads it as gradients (Module., .parameters_grad.0); msprobe_keys does not parse the key
        "gradients_by_key_only": lambda t: t.replace(
            '"data": {', '"data": {"Module.parameters_grad.0": {"input_args": [' + json.dumps(tensor) + "]}, "
        ),
    }
    path = _write(tmp_path, case, edits[case](text))
    assert msprobe_scan.scan_dump_json(path) is None
    assert_same_index(path)


@pytest.mark.parametrize(
    "case", ["bool_statistics", "named_in_kwargs", "model_output", "named_in_named", "empty_object", "dtype_only"]
)
def test_bool_statistics_and_nested_arguments_are_read_as_the_python_reader_reads_them(tmp_path, case):
    """What a transformers model's dump holds (tests/fixtures/msprobe/minilm_*_md5_mix): a bool tensor's Max and
    Min as true and false, and a module's output as a dict of named tensors inside the output list (its
    ModelOutput), named ``output.0.last_hidden_state``. The scanner stepped aside for both (every statistics dump
    of such a model went to the Python reader, 2-3 times slower); now it reads them, to the same index."""
    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
              "Norm": 1.0, "md5": "0a1b2c3d"}  # fmt: skip
    mask = dict(tensor, dtype="torch.bool", Max=True, Min=False, Mean=None, Norm=None)
    flag = {"type": "bool", "value": False}
    outputs = {
        "bool_statistics": {"input_args": [mask], "output": [dict(mask, Max=False)]},
        "named_in_kwargs": {"input_kwargs": {"x": {"y": 1, "z": tensor}}, "output": [tensor]},
        "model_output": {"input_args": [tensor], "output": [{"last_hidden_state": tensor, "cache": None,
                                                             "use_cache": flag, "hidden": [tensor, None]}]},
        "named_in_named": {"output": [{"a": {"b": tensor, "c": {"d": mask}}}, tensor]},
        "empty_object": {"input_args": [{}, tensor], "output": [tensor]},
        "dtype_only": {"output": [{"dtype": "torch.float32", "other": tensor}]},
    }  # fmt: skip
    path = _write(tmp_path, case, json.dumps({"task": "statistics", "data": {"Functional.f.0.forward": outputs[case]}}))
    assert msprobe_scan.scan_dump_json(path) is not None
    assert_same_index(path)


def test_integer_statistics_are_read_as_the_python_reader_reads_them(tmp_path):
    """An integer statistic is an int to json and a double to numpy: ``-0`` is 0.0 (not -0.0), and an int of
    17 or 18 digits is rounded to the nearest double either way."""
    entry = '{"type": "torch.Tensor", "dtype": "torch.int64", "shape": [3], "Max": MAX, "Min": -0, "Mean": null}'
    args = ", ".join(entry.replace("MAX", v) for v in ("123456789012345679", "-98765432109876543", "0", "-0"))
    path = _write(tmp_path, "ints", '{"data": {"Functional.f.0.forward": {"output": [' + args + "]}}}")
    assert msprobe_scan.scan_dump_json(path) is not None
    assert_same_index(path)
    frame = _read(path, True)[0]
    assert not np.signbit(frame["min"]).any() and frame["max"][0] == float(123456789012345679)


def test_damaged_files_are_left_to_the_python_reader(tmp_path):
    """Truncated and corrupted copies of a real dump.json: the scanner never reads what the Python reader would
    refuse, and the reader's error or index is the same either way."""
    original = (FIXTURES / "msprobe" / "bf16_tensor_mix" / "step0" / "rank0" / "dump.json").read_bytes()
    rng = random.Random(5)
    for i in range(60):
        data = bytearray(original)
        if i % 2:
            del data[rng.randrange(len(data)) :]
        else:
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.choice(b'{}[],:"\\0aeE-+.9 \x00\xff')
        path = _write(tmp_path, f"damaged{i}", bytes(data))
        assert_same_index(path)


def test_batches_end_where_the_python_reader_ends_them(tmp_path):
    """The columns are taken in batches of BATCH tensors, ending after an op, but never right after a
    gradients entry: a problem of the next op's key comes before the batch's own problems either way."""

    def tensor(name: str, dtype: str | None = "torch.float32") -> dict:
        return {"type": "torch.Tensor", "dtype": dtype, "shape": [1], "Max": 1.0, "Min": 1.0, "data_name": name}

    data: dict = {}
    count = 0
    while count < BATCH - 1:
        n = min(255, BATCH - 1 - count)
        key = f"Functional.f.{len(data)}.forward"
        data[key] = {"output": [tensor(f"{key}.output.{i}.pt", None if count + i == 7 else "torch.float32")
                                for i in range(n)]}  # fmt: skip
        count += n
    data["Module.l.Linear.parameters_grad.0"] = {"weight": tensor("w.pt"), "bias": tensor("b.pt")}  # crosses BATCH
    data["a key outside msprobe's naming"] = {"output": [tensor("x.pt")]}
    path = _write(tmp_path, "batches", json.dumps({"task": "tensor", "data": data}))
    assert msprobe_scan.scan_dump_json(path) is not None
    assert_same_index(path)
    problems = _read(path, True)[2]
    assert [p.record for p in problems][:2] == ["a key outside msprobe's naming", "Functional.f.0.forward.output.7"]


@pytest.mark.parametrize(
    ("skipped", "scanned"),
    [
        ('{"k\\"ey": ["a\\u00e9\\n\\/", 1.5e3, -0.25E-2, null, true, false, {}, [], NaN, -Infinity]}', True),
        ('"bad \\x escape"', False),
        ('"short \\u12"', False),
        ('{"a": 1,}', False),
        ("[1, 2,]", False),
        ("{1: 2}", False),
        ("01", False),
        ("1.", False),
    ],
)
def test_values_the_scanner_skips_are_checked_as_json_checks_them(tmp_path, skipped, scanned):
    """A member no column holds is skipped, but checked: valid JSON of every kind (escapes included) is
    scanned past, and what the json module refuses makes the scanner step aside (the Python reader's error)."""
    text = '{"extra": ' + skipped + ', "data": {"Functional.f.0.forward": {"output": [null]}}}'
    path = _write(tmp_path, "skip", text)
    assert (msprobe_scan.scan_dump_json(path) is not None) is scanned
    assert_same_index(path)
