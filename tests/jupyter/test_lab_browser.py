"""nbprec's JupyterLab extension in real JupyterLab and Notebook 7, driven in Debian Chromium (playwright).

Both servers serve a folder holding the demo's dumps, with the shipped extension (nbprec/labextension/) and
the server extension enabled (conftest.py). A new user's path: the dump folders show nbprec's icon; right-click
one, "nbprec: inspect dump"; select two, "nbprec: compare (target, benchmark)"; the Launcher card and the
command palette entry "New precision investigation" and its dialog. Each opens a notebook that runs itself and
shows the dashboard. Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import contextlib
import json
import re
import time

import browser_support as bs
import pytest
from bench_support import bench_module

pytestmark = [pytest.mark.browser, pytest.mark.slow, bs.needs_chromium]

DUMPS = ("tiny_bf16", "tiny_bf16_faulty", "tiny_fp16", "tiny_fp32")
#: JavaScript: true once the dashboard drew its graph, trend dots, operator grid and selection.
#: Looked for in the notebook on show only: a notebook opened earlier keeps its dashboard in the page.
DASHBOARD_JS = (
    "() => { const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)'); return !!nb"
    " && [...nb.querySelectorAll('div')].some(d => d._cyreg && d._cyreg.cy && d._cyreg.cy.nodes().length)"
    " && nb.querySelectorAll('.dot').length > 0"
    " && !!nb.querySelector('.lm-DataGrid canvas, .p-DataGrid canvas')"
    " && !!nb.querySelector('.nbprec-selected'); }"
)
#: The notebook on show (JupyterLab hides the other tabs' panels; Notebook 7 shows one).
SHOWN_NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"
#: JavaScript: the server path of the document on show in JupyterLab.
CURRENT_PATH_JS = (
    "() => { const w = window.jupyterapp.shell.currentWidget; return w && w.context ? w.context.path : null; }"
)
#: JavaScript: the icon (its data-icon name) of the file browser row named ``name``.
ICON_JS = (
    "(name) => { const row = [...document.querySelectorAll('.jp-DirListing-item')]"
    ".find(r => r.querySelector('.jp-DirListing-itemText').textContent === name);"
    " const icon = row && row.querySelector('[data-icon]'); return icon ? icon.getAttribute('data-icon') : null; }"
)


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the module."""
    yield from bs.module_browser()


def open_file_browser(context, url: str):
    """A page on ``url`` once its file browser lists the demo folder, with the news prompt dismissed."""
    page = context.new_page()
    page.goto(url, timeout=bs.TIMEOUT_MS)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-DirListing-itemText')].some(e => e.textContent === 'tiny_fp32')",
        timeout=bs.TIMEOUT_MS,
    )
    dismiss_news(page)
    return page


def dismiss_news(page) -> None:
    """Answer JupyterLab's "notified about official Jupyter news?" prompt, so that it hides nothing."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):  # the prompt is optional (once per browser profile)
        page.locator(".Toastify button", has_text="No").first.click(timeout=5000)


def exact_row(page, name: str):
    """The file browser row named exactly ``name``."""
    text = page.locator(".jp-DirListing-itemText", has_text=re.compile(f"^{re.escape(name)}$"))
    return page.locator(".jp-DirListing-item").filter(has=text).first


def menu_items(page) -> list[str]:
    page.wait_for_selector(".lm-Menu", timeout=10_000)
    return [t.strip() for t in page.locator(".lm-Menu .lm-Menu-item:visible .lm-Menu-itemLabel").all_inner_texts()]


def run_command(page, command: str) -> None:
    """Start a JupyterLab command without waiting for it (nbprec's commands end when their notebook is open)."""
    page.evaluate("(id) => { window.jupyterapp.commands.execute(id); }", command)


def close_menu(page) -> None:
    page.keyboard.press("Escape")


def choose_from_command_palette(page, text: str, label: str, screenshot: str) -> None:
    """Type ``text`` in the command palette's search box and click the item ``label``. JupyterLab's palette is
    modal and hides when it loses the focus: opened while a notebook of an earlier test still draws its widgets
    (one took the focus at once, on CI), it may close before it is typed in, or between the item showing and the
    click; the whole sequence is then tried again, up to five times."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    box = page.locator(".lm-CommandPalette-input")
    item = page.locator(".lm-CommandPalette-item", has_text=label).first
    bs.ARTIFACTS.mkdir(exist_ok=True)
    for _ in range(5):
        run_command(page, "apputils:activate-command-palette")
        try:
            box.fill(text, timeout=6_000)
            item.wait_for(timeout=10_000)
            page.screenshot(path=str(bs.ARTIFACTS / screenshot))
            item.click(timeout=6_000)
            return
        except PlaywrightTimeout:
            close_menu(page)
    page.screenshot(path=str(bs.ARTIFACTS / "lab-no-command-palette.png"))
    raise AssertionError(f"the command palette did not offer {label!r} for {text!r} in five tries")


def wait_dashboard(page) -> float:
    """Seconds until the dashboard is drawn; a screenshot in tests/artifacts/ when it never is."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    start = time.monotonic()
    try:
        page.wait_for_function(DASHBOARD_JS, timeout=bs.TIMEOUT_MS * 2)
    except PlaywrightTimeout:
        bs.ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(bs.ARTIFACTS / "lab-no-dashboard.png"))
        raise
    page.wait_for_timeout(500)
    text = page.inner_text("body")
    for bad in bs.WIDGET_ERRORS:
        assert bad not in text, bad
    return time.monotonic() - start


def shut_down_kernels(server) -> None:
    """Stop the kernels the opened notebooks started (the machine has two cores)."""
    status, sessions = server.api("api/sessions")
    for session in sessions if status == 200 else []:
        server.api(f"api/sessions/{session['id']}", "DELETE")


def notebooks(server) -> set[str]:
    return {p.name for p in (server.root / "demo-output").glob("*.ipynb")}


@pytest.fixture(scope="module")
def lab_page(lab, browser):
    """JupyterLab showing ``demo-output/`` in its file browser."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    context.add_init_script(bench_module("widgets")._CANVAS_COPIES_INIT)  # counts the data grid's canvas copies
    page = open_file_browser(context, f"{lab.url}lab/tree/demo-output?token={lab.token}")
    yield page
    context.close()


def test_dump_folders_show_the_nbprec_icon(lab_page):
    for name in DUMPS:
        lab_page.wait_for_function(ICON_JS, arg=name, timeout=30_000)
        assert lab_page.evaluate(ICON_JS, name) == "nbprec:dump-folder"
    assert lab_page.evaluate(ICON_JS, "notes") == "ui-components:folder"
    panel = lab_page.locator("#filebrowser").bounding_box()
    lab_page.screenshot(path=str(bs.ARTIFACTS / "lab-dump-icons.png"),
                        clip={"x": 0, "y": 0, "width": panel["x"] + panel["width"], "height": 320})  # fmt: skip


def test_context_menu_offers_nbprec_only_on_dumps(lab_page):
    for name in ("notes", "README.txt"):
        exact_row(lab_page, name).click(button="right")
        assert not [item for item in menu_items(lab_page) if item.startswith("nbprec")], name
        close_menu(lab_page)
    exact_row(lab_page, "tiny_fp16").click(button="right")
    items = menu_items(lab_page)
    assert "nbprec: inspect dump" in items and "nbprec: compare (target, benchmark)" not in items
    close_menu(lab_page)


def test_inspect_dump_opens_a_notebook_describing_it(lab, lab_page):
    before = notebooks(lab)
    exact_row(lab_page, "tiny_fp16").click(button="right")
    lab_page.locator(".lm-Menu-item", has_text="nbprec: inspect dump").click()
    lab_page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-OutputArea-output')].some(o => o.innerText.includes("
        "'nbprec overflow report')) && [...document.querySelectorAll('.jp-OutputArea-output')].some(o => "
        "o.innerText.includes('Headroom') || o.innerText.includes('headroom'))",
        timeout=bs.TIMEOUT_MS * 2,
    )
    assert notebooks(lab) - before == {"nbprec-tiny_fp16.ipynb"}
    assert "Traceback" not in lab_page.inner_text(SHOWN_NOTEBOOK)
    lab_page.screenshot(path=str(bs.ARTIFACTS / "lab-inspect-dump.png"))
    shut_down_kernels(lab)


def test_compare_two_selected_dumps_opens_the_dashboard(lab, lab_page):
    before = notebooks(lab)
    run_command(lab_page, "filebrowser:activate")
    exact_row(lab_page, "tiny_bf16_faulty").click()
    exact_row(lab_page, "tiny_fp32").click(modifiers=["Control"])
    exact_row(lab_page, "tiny_fp32").click(button="right")
    items = menu_items(lab_page)
    assert "nbprec: compare (target, benchmark)" in items and "nbprec: inspect dump" not in items
    bs.ARTIFACTS.mkdir(exist_ok=True)
    lab_page.screenshot(path=str(bs.ARTIFACTS / "lab-context-menu.png"))
    lab_page.locator(".lm-Menu-item", has_text="nbprec: compare (target, benchmark)").click()
    seconds = wait_dashboard(lab_page)
    assert lab_page.evaluate(CURRENT_PATH_JS) == "demo-output/nbprec-tiny_bf16_faulty-vs-tiny_fp32.ipynb"
    assert "Functional.gelu.1.forward" in lab_page.locator(f"{SHOWN_NOTEBOOK} .nbprec-selected").first.inner_text()
    created = notebooks(lab) - before
    assert created == {"nbprec-tiny_bf16_faulty-vs-tiny_fp32.ipynb"}  # the float32 run is the benchmark
    nb = json.loads((lab.root / "demo-output" / created.pop()).read_text())
    assert nb["metadata"]["nbprec"] == {"target": "tiny_bf16_faulty", "bench": "tiny_fp32", "rule": "default"}
    lab_page.screenshot(path=str(bs.ARTIFACTS / "lab-compare-dashboard.png"))
    # nbprec's lab extension loaded its DataGrid patch here too: the table's paints copy whole regions to the
    # screen (a handful of rectangles), not each of its cells (tests/widgets/test_grid_copies.py)
    copies = lab_page.evaluate(bench_module("widgets")._CANVAS_COPIES_JS)
    assert copies["copies"] > 0 and copies["cells"] <= 8, copies
    print(f"dashboard drawn {seconds:.1f} s after the command")
    shut_down_kernels(lab)


def test_launcher_card_opens_the_dialog_then_the_dashboard(lab, lab_page):
    before = notebooks(lab)
    run_command(lab_page, "launcher:create")
    card = lab_page.locator(".jp-LauncherCard:visible", has_text="New precision investigation").first
    card.click()
    dialog = lab_page.locator(".jp-Dialog")
    dialog.wait_for(timeout=30_000)
    options = dialog.locator("datalist option").evaluate_all("options => options.map(o => o.value)")
    assert sorted(options) == sorted(DUMPS)
    dialog.locator("input[name='target-dump']").fill("tiny_bf16")
    dialog.locator("input[name='benchmark-dump']").fill("tiny_fp32")
    dialog.locator("select[name='rule']").select_option("cann")
    dialog.screenshot(path=str(bs.ARTIFACTS / "lab-new-investigation-dialog.png"))
    dialog.locator("button", has_text="Create notebook").click()
    wait_dashboard(lab_page)
    assert lab_page.evaluate(CURRENT_PATH_JS) == "demo-output/nbprec-tiny_bf16-vs-tiny_fp32.ipynb"
    created = notebooks(lab) - before
    assert created == {"nbprec-tiny_bf16-vs-tiny_fp32.ipynb"}
    code = "".join(json.loads((lab.root / "demo-output" / created.pop()).read_text())["cells"][1]["source"])
    assert "'tiny_bf16', 'tiny_fp32'" in code and "rule='cann'" in code
    shut_down_kernels(lab)


def test_a_notebook_without_markdown_never_starts_mathjax(lab, browser):
    """A notebook of code cells only, in a page of its own: its dashboard is drawn and, seconds later, MathJax has
    never run (its first call adds its stylesheet). JupyterLab's typesetter loads MathJax on its first call, math
    or not, and ipywidgets typesets every control's ``description``: nbprec's controls have captions instead."""
    import nbformat

    path = lab.root / "demo-output" / "plain-dashboard.ipynb"
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("import nbprec\nnbprec.explore('tiny_bf16_faulty', 'tiny_fp32')")]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    try:
        page = context.new_page()
        # a workspace of its own: the default one would reopen the notebooks of the tests before (Markdown cells)
        url = f"{lab.url}lab/workspaces/code-cells-only/tree/demo-output/{path.name}?token={lab.token}"
        page.goto(url, timeout=bs.TIMEOUT_MS)
        page.wait_for_function(
            "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
            " const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;"
            " return k && k.status === 'idle'; }",
            timeout=bs.TIMEOUT_MS,
        )
        run_command(page, "notebook:run-all-cells")
        wait_dashboard(page)
        page.wait_for_timeout(2000)
        assert page.evaluate("() => [...document.querySelectorAll('style[id^=MJX]')].map(s => s.id)") == []
        assert page.locator(SHOWN_NOTEBOOK).get_by_text("threshold", exact=True).count() == 1  # a caption
    finally:
        shut_down_kernels(lab)
        context.close()
        path.unlink()


def test_dialog_says_what_is_wrong_with_a_path(lab_page):
    run_command(lab_page, "nbprec:new-investigation")
    dialog = lab_page.locator(".jp-Dialog")
    dialog.locator("input[name='target-dump']").fill("notes")
    dialog.locator("button", has_text="Create notebook").click()
    error = lab_page.locator(".jp-Dialog", has_text="not recognised as any dump format")
    error.wait_for(timeout=30_000)
    error.locator("button").last.click()


def test_command_palette_lists_the_investigation(lab_page):
    choose_from_command_palette(
        lab_page, "precision investigation", "New precision investigation", "lab-command-palette.png"
    )
    dialog = lab_page.locator(".jp-Dialog")
    dialog.wait_for(timeout=30_000)
    dialog.locator("button", has_text="Cancel").click()


def test_notebook7_compares_from_its_file_browser(notebook7, browser):
    """Notebook 7: the same context menu; the notebook opens in a new tab and runs there."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    try:
        page = open_file_browser(context, f"{notebook7.url}tree/demo-output?token={notebook7.token}")
        page.wait_for_function(ICON_JS, arg="tiny_fp32", timeout=30_000)
        # Notebook 7 opens a folder on a single click: select with the rows' check boxes
        for name in ("tiny_bf16", "tiny_fp32"):
            exact_row(page, name).locator("input[type='checkbox']").check()
        exact_row(page, "tiny_fp32").click(button="right")
        with context.expect_page(timeout=bs.TIMEOUT_MS) as opened:
            page.locator(".lm-Menu-item", has_text="nbprec: compare (target, benchmark)").click()
        notebook = opened.value
        wait_dashboard(notebook)
        assert "nbprec-tiny_bf16-vs-tiny_fp32" in notebook.url
        notebook.screenshot(path=str(bs.ARTIFACTS / "notebook7-compare-dashboard.png"))
    finally:
        shut_down_kernels(notebook7)
        context.close()
