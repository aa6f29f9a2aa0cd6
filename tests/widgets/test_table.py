"""The operator table view: its browser-side row colouring stays well-formed for any op name."""


def test_row_colour_expression_escapes_a_hostile_selected_op_name():
    import json
    import re

    from nbprec.widgets.table import _renderer

    evil = "x' ? 'red' : 'blue') || (\"\n\\ <img src=x onerror=alert(1)>"
    expr = _renderer(evil).background_color.value
    literal = re.search(r"== (\".*?(?<!\\)\") \?", expr).group(1)
    assert json.loads(literal) == evil
    assert "\n" not in expr
