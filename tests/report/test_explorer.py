"""The offline explorer's data: every slider position judged by the core, decoded back to the core's answers."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

import pytest

import nbprec
from nbprec.report import explorer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "multirank" / "msprobe"


@pytest.fixture(scope="module")
def comp():
    return nbprec.compare(FIXTURES / "fault", FIXTURES / "fp32", progress=None)


def _decode(markup: str) -> dict:
    blob = re.search(r"class='nbprec-explorer-data'>([^<]*)</script>", markup).group(1)
    return json.loads(gzip.decompress(base64.b64decode(blob)))


def test_every_slider_position_matches_the_core(comp):
    data = explorer.explorer_data(comp, culprit="no such op")
    metric = data["metric"]
    assert metric == explorer.slider_metric(comp)
    assert data["thresholds"][data["start"]] == explorer.rule_value(comp, metric)
    assert data["thresholds"] == sorted(data["thresholds"]) and len(data["states"]) == len(data["thresholds"])
    n = len(comp.ops)
    assert all(len(state) == n for state in data["states"])
    ops = comp.ops
    for k in (0, data["start"], len(data["thresholds"]) - 1):
        judged = comp if k == data["start"] else comp.with_threshold(metric, data["thresholds"][k])
        statuses = [data["codes"][ord(c) - 48][0] for c in data["states"][k]]
        assert statuses == judged.ops["status"].astype(str).tolist()
        origins = [data["codes"][ord(c) - 48][1] for c in data["states"][k]]
        assert origins == judged.ops["origin"].astype(str).tolist()
        facts = data["facts"][k]
        assert facts["flagged"] == len(judged.failing_ops())
        first = judged.first_failing_op()
        if first is None:
            assert facts["first"] is None
        else:
            row = ops.iloc[facts["first"]]
            assert (row["op"], row["step"], row["rank"]) == (first["op"], first["step"], first["rank"])
    # a stricter bound never flags fewer ops (cosine: higher is stricter; the rule's other bounds still hold;
    # the start position is the rule itself, whose bounds scale with the dtype)
    flagged = [f["flagged"] for k, f in enumerate(data["facts"]) if k != data["start"]]
    assert flagged == sorted(flagged)
    assert data["several"] and {"step", "rank"} <= set(data["columns"])
    assert data["columns"][:3] == ["op", "status", "origin"] and data["culprit"] is None


def test_the_page_block_is_self_contained_and_escaped(comp):
    hostile = "<img src=x onerror=alert(1)>"
    block = explorer.explorer(comp, culprit=str(comp.ops["op"].iloc[0]), inspections={hostile: "<p>x</p>"})
    markup = block._repr_html_()
    assert "<script>" in markup and "DecompressionStream" in markup
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", markup)  # nothing from the network
    assert hostile not in markup  # names travel inside the compressed data, set as text by the script
    assert _decode(markup)["inspected"] == {hostile: "<p>x</p>"}
    assert str(len(comp.ops)) in repr(block)


def test_threshold_positions_include_the_rule_value():
    values = explorer.threshold_positions("cosine", 0.99, 100)
    assert 0.99 in values and values == sorted(values) and all(0 < v < 1 for v in values)
    big = explorer.threshold_positions("rel_euclidean", 0.05, 1_000_000)
    assert 0.05 in big and 9 <= len(big) <= 10  # fewer positions for very large comparisons


def test_inspected_ops_name_the_culprit_first(comp):
    names = explorer.inspected_ops(comp, "the culprit", n_worst=3)
    assert names[0] == "the culprit" and len(names) == len(set(names)) and len(names) <= 7
