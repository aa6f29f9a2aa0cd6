"""What every dashboard view shares: a widget built on first display, and a static HTML/SVG fallback."""

from __future__ import annotations

import html
from typing import Any

from nbprec._gc import paused_gc
from nbprec._optional import require

_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def caption(text: str) -> Any:
    """The words before a control, as an HTML widget: nbprec's controls have no ``description``.

    ipywidgets hands every non-empty ``description`` to the page's LaTeX typesetter, and JupyterLab's loads and
    starts MathJax on its first call, math or not. In a notebook that had not started it (one without Markdown
    cells) that was the last third of a second or so of the browser's work before the dashboard was drawn. An
    HTML widget's value is never typeset. (Voila's page starts MathJax as it loads, whatever the widgets.)
    """
    import ipywidgets as w

    layout = w.Layout(margin="0 4px 0 6px", flex="0 0 auto")
    return w.HTML(f"<span style='white-space:nowrap'>{html.escape(text)}</span>", layout=layout)


class View:
    """A plain Python object that owns a view's state and builds its widget only when displayed.

    Subclasses implement :meth:`_build` (the ipywidgets tree) and :meth:`to_html` (the static fallback), and
    may implement :meth:`to_svg`. ``_repr_mimebundle_`` returns the live widget together with the fallbacks, so
    a notebook opened without a kernel or without widget JavaScript still shows the tables and plots.
    """

    title = "view"

    def __init__(self) -> None:
        self._widget: Any = None

    @property
    def widget(self) -> Any:
        """The ipywidgets object of this view (built on first use).

        The build runs with Python's cyclic collector paused: the first one imports the widget libraries and
        makes tens of thousands of objects with hardly any garbage cycles, and the collections they triggered
        (about a hundred young ones and a full one, which scans the whole heap) took a fifth of the 5,000-op
        dashboard's first build in a plain Python process (in a kernel the difference was within the noise)."""
        if self._widget is None:
            with paused_gc():
                require("ipywidgets", "nbprec notebook views")
                self._widget = self._build()
                self.refresh()
        return self._widget

    @property
    def built(self) -> bool:
        """Whether the widget exists (views update widgets only once they are built)."""
        return self._widget is not None

    def _build(self) -> Any:
        raise NotImplementedError

    def refresh(self) -> None:
        """Push the current state into the widget (called after every state change once built)."""

    def to_html(self) -> str:
        """The static HTML fallback."""
        raise NotImplementedError

    def to_svg(self) -> str | None:
        """An SVG fallback for plot views (``None`` for others)."""
        return None

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict[str, Any]:
        data: dict[str, Any] = {"text/plain": repr(self), "text/html": self.to_html()}
        svg = self.to_svg()
        if svg:
            data["image/svg+xml"] = svg
        widget = self._displayed_widget()
        if getattr(widget, "_view_name", None) is not None:
            # what ``widget._repr_mimebundle_()`` returns beside its ``text/plain``, which is the repr of the whole
            # widget tree (tens of milliseconds for a dashboard of a few hundred widgets, then thrown away)
            data[_WIDGET_MIME] = {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}
        return data

    def _displayed_widget(self) -> Any:
        """The widget a notebook shows when this view is displayed on its own (:attr:`widget` unless overridden)."""
        return self.widget

    def __repr__(self) -> str:
        return f"<nbprec {self.title}>"
