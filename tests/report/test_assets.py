"""The offline-report JavaScript: naming AMD bundles, script-safe inlining, widget modules, fetch errors."""

from __future__ import annotations

import pytest

from nbprec.report.assets import (
    AssetsError,
    fetch_assets,
    find_assets,
    named_amd,
    script_safe,
    widget_bundles,
    widget_modules,
)


def test_named_amd_names_the_leading_anonymous_define():
    code = '/*! licence */\ndefine(["@jupyter-widgets/base"],(t=>1));'
    assert named_amd(code, "bqplot") == '/*! licence */\ndefine("bqplot",["@jupyter-widgets/base"],(t=>1));'
    wrapped = named_amd("(function(){ define([], function(){}) })()", "x")
    assert wrapped.startswith("(function(){var d=window.define") and '"x"' in wrapped


def test_installed_bundles_start_with_an_anonymous_define():
    pytest.importorskip("bqplot")
    found, missing = widget_bundles(["bqplot", "bqscales", "ipydatagrid", "jupyter-cytoscape", "@jupyter-widgets/base"])
    assert not missing and "@jupyter-widgets/base" not in found
    for module, path in found.items():
        head = path.read_text(encoding="utf-8")[:300]
        assert named_amd(head, module) != head or head.lstrip().startswith(f'define("{module}"'), module


def test_script_safe_keeps_the_script_element_closed():
    assert script_safe('x = "</script><b>"; y = "<!--"') == 'x = "<\\/script><b>"; y = "<\\!--"'
    assert script_safe("a </SCRIPT b") == "a <\\/SCRIPT b"


def test_widget_modules_from_state():
    state = {"state": {"a": {"model_module": "bqplot", "state": {"_view_module": "bqplot"}},
                       "b": {"model_module": "@jupyter-widgets/controls", "view_module": "@jupyter-widgets/controls"},
                       "c": {"model_module": "jupyter-cytoscape"}}}  # fmt: skip
    assert widget_modules(state) == ["bqplot", "@jupyter-widgets/controls", "jupyter-cytoscape"]
    assert widget_bundles(["no-such-widget-module"]) == ({}, ["no-such-widget-module"])


def test_missing_npm_names_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on PATH
    with pytest.raises(AssetsError, match="npm was not found") as err:
        fetch_assets(tmp_path / "js", force=True)
    assert "nbprec report --fetch-assets" in str(err.value)
    assert find_assets(tmp_path) is None
