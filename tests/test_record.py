"""nbprec._record.Record: what ``@dataclass(frozen=True)`` gives nbprec's value classes, without compiling code
for each class (the import cost of a dozen dataclasses was 6 ms of every ``nbprec compare``)."""

from __future__ import annotations

import copy
import functools
import pickle
import subprocess
import sys
from typing import ClassVar

import pytest
from fresh_python import run_python

from nbprec._record import Factory, FrozenInstanceError, Record, asdict, replace


class Problem(Record):
    file: str
    problem: str
    record: str = ""


class Result(Record):
    values: dict = Factory(dict)
    reason: str = ""
    parts: tuple = ()
    KIND: ClassVar[str] = "result"  # not a field
    _cache: dict  # private: not a field either


class Mutable(Record, frozen=False):
    jobs: list

    def __repr__(self) -> str:
        return f"Mutable({len(self.jobs)} jobs)"


class Summary(Record):
    rows: list

    @functools.cached_property
    def count(self) -> int:
        return len(self.rows)


def test_fields_come_from_the_annotations_in_order_with_their_defaults():
    p = Problem("a.pt", "missing")
    assert (p.file, p.problem, p.record) == ("a.pt", "missing", "")
    assert Problem(problem="x", file="f", record="r") == Problem("f", "x", "r")
    assert Problem._fields == ("file", "problem", "record") and Problem.record == ""
    assert repr(Problem("f", "x")) == "Problem(file='f', problem='x', record='')"


def test_class_variables_and_private_names_are_not_fields():
    assert Result._fields == ("values", "reason", "parts") and Result.KIND == "result"
    assert repr(Result()) == "Result(values={}, reason='', parts=())"


def test_a_factory_default_is_made_anew_for_each_record():
    first, second = Result(), Result()
    first.values["cosine"] = 1.0
    assert second.values == {} and Result(values={"a": 1.0}).values == {"a": 1.0}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Problem("f"), "missing required argument: 'problem'"),
        (lambda: Problem("f", "x", "r", "extra"), "takes 3 arguments but 4 were given"),
        (lambda: Problem("f", "x", file="g"), "multiple values for argument 'file'"),
        (lambda: Problem("f", "x", line=3), "unexpected keyword argument 'line'"),
    ],
)
def test_wrong_arguments_are_type_errors(make, message):
    with pytest.raises(TypeError, match=message):
        make()


def test_equality_and_hash_are_the_fields_of_records_of_one_class():
    assert Problem("f", "x") == Problem("f", "x", "") and Problem("f", "x") != Problem("f", "y")
    assert hash(Problem("f", "x")) == hash(Problem("f", "x")) and len({Problem("f", "x"), Problem("f", "x")}) == 1

    class Other(Record):
        file: str
        problem: str
        record: str = ""

    assert Problem("f", "x") != Other("f", "x")  # another class, the same fields
    with pytest.raises(TypeError, match="unhashable"):
        hash(Result())  # a dict field, as a frozen dataclass holding one


def test_records_are_frozen_unless_said_otherwise():
    p = Problem("f", "x")
    with pytest.raises(FrozenInstanceError, match=r"cannot assign to field 'file' .* nbprec\._record\.replace"):
        p.file = "g"
    with pytest.raises(AttributeError):
        del p.problem
    m = Mutable([1, 2])
    m.jobs = [3]
    assert m.jobs == [3] and repr(m) == "Mutable(1 jobs)"  # its own __repr__ kept
    with pytest.raises(TypeError, match="unhashable"):
        hash(m)


def test_records_pickle_copy_and_cache_properties_as_plain_objects():
    p = Problem("f", "x", "r")
    assert pickle.loads(pickle.dumps(p)) == p and copy.copy(p) == p and copy.deepcopy(p) == p
    s = Summary([1, 2, 3])
    assert s.count == 3 and s.__dict__["count"] == 3  # cached_property stores into the instance


def test_replace_and_asdict_stand_for_the_dataclasses_ones():
    p = Problem("f", "x")
    assert replace(p, record="r") == Problem("f", "x", "r") and p.record == ""
    nested = Result(values={"p": Problem("f", "x")}, parts=(Problem("g", "y"),))
    assert asdict(nested) == {
        "values": {"p": {"file": "f", "problem": "x", "record": ""}},
        "reason": "",
        "parts": ({"file": "g", "problem": "y", "record": ""},),
    }


def test_a_field_without_default_after_one_with_a_default_is_refused():
    with pytest.raises(TypeError, match="field 'b' without a default follows one with a default"):

        class Bad(Record):
            a: int = 0
            b: int


def test_the_compare_command_line_creates_no_dataclass():
    """The value classes on ``nbprec compare``'s path are records: importing what the command imports creates
    no dataclass (each one compiles its methods: half a millisecond)."""
    code = (
        "import dataclasses, sys\n"
        "import nbprec.cli.parser, nbprec.compare.engine, nbprec.compare.comparison, nbprec.formats.msprobe\n"
        "made = sorted(f'{name}.{value.__qualname__}' for name, module in list(sys.modules.items())\n"
        "              if name.startswith('nbprec') for value in vars(module).values()\n"
        "              if isinstance(value, type) and value.__module__ == name and dataclasses.is_dataclass(value))\n"
        "print(made)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


class Located(Record, uncompared=("path",)):
    name: str
    path: str = ""


class Relocated(Located):
    size: int = 0


def test_uncompared_fields_are_left_out_of_equality_and_hash_only():
    a, b = Located("m", "/a"), Located("m", "/b")
    assert a == b and hash(a) == hash(b) and a != Located("n", "/a")
    assert repr(a) == "Located(name='m', path='/a')" and asdict(a) == {"name": "m", "path": "/a"}
    assert Relocated("m", "/a", 1) == Relocated("m", "/b", 1) != Relocated("m", "/a", 2)  # a subclass keeps it
    with pytest.raises(TypeError, match="uncompared names no field: size"):

        class Bad(Record, uncompared=("size",)):
            name: str


def test_records_need_neither_dataclasses_nor_inspect():
    """The early worker of ``nbprec compare`` runs without numpy (which imports :mod:`inspect`): the value classes
    it makes (the GE graph's, the CANN index's) cost it no import of dataclasses (7 ms with inspect's)."""
    loaded = run_python(
        "import sys\n"
        "import nbprec._record, nbprec.graph.ge, nbprec.formats.cann_index, nbprec.compare.early\n"
        "print(sorted({'dataclasses', 'inspect', 'numpy'} & set(sys.modules)))\n"
    )
    assert loaded == "[]"
