"""``bench/widgets.py``'s count of canvas copies (the data grid's cell copies), in a real Chromium page."""

from __future__ import annotations

import urllib.parse

# Two canvases: three copies from the first to the second (two distinct rectangles), and one draw from an image,
# which is not a canvas copy and must not be counted.
_PAGE = """<!doctype html><body>
<canvas id="buffer" width="300" height="100"></canvas><canvas id="shown" width="300" height="100"></canvas>
<script>
  const buffer = document.getElementById('buffer'), shown = document.getElementById('shown').getContext('2d');
  buffer.getContext('2d').fillRect(0, 0, 300, 100);
  shown.drawImage(buffer, 0, 0, 50, 20, 0, 0, 50, 20);
  shown.drawImage(buffer, 50, 0, 50, 20, 50, 0, 50, 20);
  shown.drawImage(buffer, 0, 0, 50, 20, 0, 0, 50, 20);
  const image = new Image(1, 1);
  shown.drawImage(image, 0, 0);
  document.body.dataset.done = '1';
</script></body>"""


def test_canvas_copies_counts_copies_between_canvases_only(browser, bench_widgets):
    page = browser.new_page()
    try:
        page.add_init_script(bench_widgets._CANVAS_COPIES_INIT)
        page.goto("data:text/html," + urllib.parse.quote(_PAGE))
        page.wait_for_selector("body[data-done='1']", state="attached")
        got = page.evaluate(bench_widgets._CANVAS_COPIES_JS)
    finally:
        page.close()
    assert got["copies"] == 3
    assert got["cells"] == 2
    assert isinstance(got["ms"], (int, float))  # (three small copies can take under the clock's resolution)


def test_canvas_copies_reads_none_on_a_page_without_the_counter(browser, bench_widgets):
    page = browser.new_page()
    try:
        page.goto("data:text/html," + urllib.parse.quote("<p>plain</p>"))
        assert page.evaluate(bench_widgets._CANVAS_COPIES_JS) is None
    finally:
        page.close()


def test_copies_text_gives_medians_and_paints(bench_widgets):
    loads = [{"copies": 210, "cells": 105, "ms": 250.0}, {"copies": 212, "cells": 106, "ms": 270.0}, None]
    text = bench_widgets._copies_text(loads)
    assert "211 of 106 cell rectangles (2.0 paints), 260 ms" in text
    assert "medians of 2" in text
    assert bench_widgets._copies_text([None]) == "canvas copies: none counted"
