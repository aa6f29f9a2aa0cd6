"""docs/diagnose.md lists every rule and every compared parameter, and its examples hold."""

from __future__ import annotations

import re
from pathlib import Path

from nbprec.diagnose import PARAMETERS, RULES, diagnose

DOC = Path(__file__).resolve().parents[2] / "docs" / "diagnose.md"


def test_every_rule_has_a_row():
    text = DOC.read_text(encoding="utf-8")
    for rule in RULES:
        assert f"| `{rule.kind}` | {rule.title} |" in text, rule.kind


def test_every_parameter_has_a_row():
    rows = re.findall(r"^\| `(\w+)` \|", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert [r for r in rows if r in {p.name for p in PARAMETERS}] == [p.name for p in PARAMETERS]


def test_the_worked_example():
    text = DOC.read_text(encoding="utf-8")
    assert "variable_memory_max_size = 15036210688" in text and "graph_memory_max_size = 18249785856" in text
    f = diagnose("... current var size[13962468864] exceeds total var size[13958643712]").findings[0]
    assert (f.values["variable_memory_max_size"], f.values["graph_memory_max_size"]) == (15036210688, 18249785856)
