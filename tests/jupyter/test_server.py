"""The server extension's endpoints in a real JupyterLab server, on the demo's dumps."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_dumps_endpoint_finds_the_demo_runs_and_nothing_else(lab):
    status, reply = lab.api("nbprec/dumps?path=demo-output")
    assert status == 200
    assert reply["complete"] is True
    assert reply["dumps"] == {name: "nbprec" for name in ("tiny_bf16", "tiny_bf16_faulty", "tiny_fp16", "tiny_fp32")}
    status, reply = lab.api("nbprec/dumps?path=")  # the root: demo-output holds dumps but is none itself
    assert (status, reply["dumps"]) == (200, {})


def test_dumps_endpoint_refuses_paths_outside_the_root_and_anonymous_calls(lab):
    assert lab.api("nbprec/dumps?path=../")[0] == 403
    assert lab.api("nbprec/dumps?path=demo-output/../..")[0] == 403
    assert lab.api("nbprec/dumps?path=no-such-folder")[0] == 404
    assert lab.api("nbprec/dumps?path=demo-output", token=False)[0] == 403


def test_info_endpoint_lists_the_rules(lab):
    status, reply = lab.api("nbprec/info")
    assert status == 200
    assert reply["default_rule"] == "default" and {"default", "cann", "msprobe"} <= set(reply["rules"])


def test_notebooks_endpoint_writes_a_comparison_notebook_next_to_the_dumps(lab):
    body = {"directory": "demo-output", "target": "tiny_bf16", "bench": "tiny_fp32", "rule": "cann"}
    status, reply = lab.api("nbprec/notebooks", "POST", body)
    assert status == 201, reply
    path = reply["path"]
    assert path.startswith("demo-output/nbprec-tiny_bf16-vs-tiny_fp32") and path.endswith(".ipynb")
    nb = json.loads((lab.root / path).read_text())
    code = "".join(nb["cells"][1]["source"])
    assert "'tiny_bf16', 'tiny_fp32'" in code and "rule='cann'" in code
    again = lab.api("nbprec/notebooks", "POST", body)[1]["path"]
    assert again != path and (lab.root / again).exists()  # never overwrites


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"directory": "demo-output", "target": "notes"}, 400, "notes: not recognised as any dump format"),
        ({"directory": "demo-output", "target": "missing"}, 400, "missing: no such file or folder"),
        ({"directory": "demo-output", "target": "../../etc"}, 403, "outside the server's root folder"),
        ({"directory": "demo-output", "target": "tiny_bf16", "rule": "nope"}, 400, "unknown rule 'nope'"),
        ({"directory": "demo-output"}, 400, "give the target dump"),
        ({"directory": "nowhere", "target": "x"}, 404, "nowhere: no such folder"),
    ],
)
def test_notebooks_endpoint_says_what_is_wrong_in_one_line(lab, body, status, message):
    got, reply = lab.api("nbprec/notebooks", "POST", body)
    assert got == status
    assert message in reply["message"] and "\n" not in reply["message"]
    assert str(lab.root) not in reply["message"]  # no server paths in messages
