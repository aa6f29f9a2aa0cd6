"""Notebook widgets: linked views over a comparison (the only nbprec package that imports widget libraries).

:func:`explore` opens the dashboard. Every view is a plain Python object that owns its state and builds its
ipywidgets/bqplot/ipycytoscape/ipydatagrid widget only when displayed; each also renders as static HTML/SVG.
"""

from __future__ import annotations

from nbprec.widgets.dashboard import Dashboard, explore
from nbprec.widgets.model import OpsModel, Selection
from nbprec.widgets.tensor_source import TensorSource

__all__ = ["Dashboard", "OpsModel", "Selection", "TensorSource", "explore"]
