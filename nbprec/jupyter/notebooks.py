"""The investigation notebooks the JupyterLab extension opens, made from ``templates/*.ipynb``.

``compare.ipynb`` compares a target with a benchmark and shows the dashboard; ``inspect.ipynb`` describes one
dump (summary, index, overflow, headroom). In a template the placeholders ``"__TARGET__"``, ``"__BENCH__"``
and ``"__RULE__"`` are Python string literals (quotes included), replaced by the ``repr`` of the value, so any
folder name (quotes, backslashes, ``$``, braces) reaches the code as itself; ``__TARGET_NAME__`` and
``__BENCH_NAME__`` in Markdown cells are replaced by the names with Markdown's special characters escaped.
"""

from __future__ import annotations

import copy
import json
import posixpath
import re
from importlib import resources
from typing import Any

from nbprec.errors import NbprecError

TEMPLATES = ("compare", "inspect")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>$])")


def load_template(name: str) -> dict[str, Any]:
    """The template notebook ``name`` (``"compare"`` or ``"inspect"``) as nbformat 4 JSON."""
    if name not in TEMPLATES:
        raise NbprecError(f"no notebook template {name!r}; there are {', '.join(TEMPLATES)}")
    text = resources.files("nbprec.jupyter").joinpath("templates", f"{name}.ipynb").read_text(encoding="utf-8")
    return json.loads(text)


def _markdown_name(path: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", posixpath.basename(path.rstrip("/")) or path).replace("\n", " ")


def investigation_notebook(target: str, bench: str | None = None, rule: str = "default") -> dict[str, Any]:
    """A notebook comparing ``target`` with ``bench`` (or inspecting ``target`` alone), as nbformat JSON.

    Parameters
    ----------
    target, bench
        Dump paths as the notebook's code will open them (relative to the notebook's folder, where the
        kernel starts).
    rule
        The comparison rule (a preset name).

    Examples
    --------
    >>> nb = investigation_notebook("runs/bf16", "runs/fp32", rule="cann")
    >>> "'runs/bf16', 'runs/fp32'" in "".join(nb["cells"][1]["source"]).replace('"', "'")
    True
    """
    nb = copy.deepcopy(load_template("compare" if bench else "inspect"))
    code = {'"__TARGET__"': repr(target), '"__BENCH__"': repr(bench or ""), '"__RULE__"': repr(rule)}
    text = {"__TARGET_NAME__": _markdown_name(target), "__BENCH_NAME__": _markdown_name(bench or "")}
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for placeholder, value in (code if cell["cell_type"] == "code" else text).items():
            source = source.replace(placeholder, value)
        cell["source"] = source
    nb["metadata"]["nbprec"] = {"target": target, "bench": bench or None, "rule": rule}
    return nb


def notebook_name(target: str, bench: str | None = None) -> str:
    """A file name for the investigation of ``target`` (against ``bench``): ``nbprec-bf16-vs-fp32.ipynb``."""

    def stem(path: str) -> str:
        name = posixpath.basename(path.rstrip("/")) or "dump"
        return re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("._") or "dump"

    return f"nbprec-{stem(target)}-vs-{stem(bench)}.ipynb" if bench else f"nbprec-{stem(target)}.ipynb"
