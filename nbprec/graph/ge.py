"""GE graph dumps (Ascend ``ge_proto_*_Build.txt`` and their JSON form, FORMATS.md section 4).

:func:`read_ge_model` reads a ``ge.proto.ModelDef`` (or a single ``GraphDef``) written as protobuf text or as
the JSON Ascend's tools convert it to, into plain data: :class:`GeModel` -> :class:`GeGraph` -> :class:`GeOp`
with its inputs (``"src_op:idx"``, ``-1`` a control edge), attributes as plain Python values and tensor
descriptors (:class:`GeTensorDesc`), and the fusion records GE leaves on fused ops. :func:`graph_from_ge`
makes an :class:`~nbprec.graph.model.OpGraph` of it; :func:`read_fusion_result` reads ``fusion_result.json``.
Writing graphs: :mod:`nbprec.graph.ge_write`. Parsing: :mod:`nbprec.graph.ge_parse`.

Examples
--------
>>> model = read_ge_model("dump/ge_proto_00000123_Build.txt")   # doctest: +SKIP
>>> op = model.op("conv1/Conv2D")                               # doctest: +SKIP
>>> op.pass_name, op.original_op_names, op.output_descs[0].origin_name  # doctest: +SKIP
('ConvBiasaddFusionPass', ['conv1/Conv2D', 'conv1/BiasAdd'], 'conv1/BiasAdd')
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nbprec._gc import paused_gc
from nbprec.formats import _prescan
from nbprec.formats._files import long_number
from nbprec.graph.ge_convert import convert_model
from nbprec.graph.ge_data import GeGraph, GeInput, GeModel, GeOp, GeTensorDesc, ge_dtype
from nbprec.graph.ge_parse import GeGraphError, line_col, read_message
from nbprec.graph.model import OpGraph

__all__ = [
    "GeGraph",
    "GeGraphError",
    "GeInput",
    "GeModel",
    "GeOp",
    "GeTensorDesc",
    "ge_dtype",
    "graph_from_ge",
    "read_fusion_result",
    "read_ge_model",
]

_GRAPH_SUFFIXES = (".txt", ".json")


def find_graph_file(folder: str | Path) -> Path:
    """The GE graph of a folder: its one ``ge_proto_*_Build.txt`` (or ``.json``), else its one .txt/.json file.

    Raises
    ------
    GeGraphError
        When there is none, or several to choose from (they are named).
    """
    folder = Path(folder)
    for pattern in ("ge_proto_*_Build.txt", "ge_proto_*_Build.json"):
        found = sorted(folder.glob(pattern))
        if len(found) == 1:
            return found[0]
        if found:
            names = ", ".join(p.name for p in found[:10]) + (", ..." if len(found) > 10 else "")
            raise GeGraphError(
                f"{folder}: {len(found)} Build graphs ({names}); pass the file of the graph that ran "
                "(GE numbers its graphs in dump order)"
            )
    found = sorted(p for p in folder.iterdir() if p.suffix.lower() in _GRAPH_SUFFIXES and p.is_file())
    if len(found) == 1:
        return found[0]
    if not found:
        raise GeGraphError(f"{folder}: no GE graph here (no ge_proto_*_Build.txt, no .txt or .json file)")
    names = ", ".join(p.name for p in found[:10]) + (", ..." if len(found) > 10 else "")
    raise GeGraphError(f"{folder}: no ge_proto_*_Build.txt and {len(found)} other .txt/.json files ({names}); pass one")


def read_ge_model(path: str | Path) -> GeModel:
    """Read a GE graph dump: protobuf text or JSON (told apart by content), a ModelDef or a single GraphDef.

    Parameters
    ----------
    path
        The file, or a folder holding one ``ge_proto_*_Build.txt`` (or one .txt/.json graph).

    Returns
    -------
    GeModel
        Every graph (subgraphs of control-flow ops included) with its ops in file order. What could not be
        resolved (an input naming no op, repeated op names, malformed inputs) is listed in ``problems``.

    Raises
    ------
    GeGraphError
        The file is missing, empty, not a GE graph, or not valid text format / JSON (named with line and
        column).

    Examples
    --------
    >>> model = read_ge_model("ge_proto_00000001_Build.txt")       # doctest: +SKIP
    >>> [(i.op, i.index) for i in model.op("relu").inputs]         # doctest: +SKIP
    [('conv1/Conv2D', 0), ('init', -1)]
    """
    path = graph_file(path)
    shipped = _shipped_model(path)
    return shipped if shipped is not None else _read_file(path)


def _read_file(file: Path) -> GeModel:
    """The model of the graph file ``file``, parsed and converted."""
    with paused_gc():
        raw, fmt = read_message(file)
        return convert_model(raw, path=str(file), fmt=fmt)


def graph_file(path: str | Path) -> Path:
    """The graph file ``path`` names: itself, or the one a folder holds (:func:`find_graph_file`)."""
    path = Path(path)
    if path.is_dir():
        return find_graph_file(path)
    if not path.exists():
        raise GeGraphError(f"{path}: no such file or folder")
    return path


#: The kind of result (:mod:`nbprec.formats._prescan`) of a GE graph the command's early worker read.
SHIPPED_KIND = "ge-model"


def shipped_record(path: str | Path) -> tuple[tuple, bytes, GeModel] | None:
    """In ``nbprec compare``'s early worker (:mod:`nbprec.compare.early`), while the command imports numpy: the
    graph of ``--graph`` read as :func:`read_ge_model` reads it, as (its key in :mod:`nbprec.formats._prescan`:
    the file's identity before it was read, the model pickled, the model). None when it does not read: the command
    then reads it and tells why."""
    import pickle

    try:
        file = graph_file(path)
        status = os.stat(file)
        model = _read_file(file)
        return _prescan.key(status, SHIPPED_KIND), pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL), model
    except Exception:
        return None


def _shipped_model(file: Path) -> GeModel | None:
    """The model the command's early worker read of the graph ``file`` as it is now (:func:`shipped_record`), if
    it did. The bytes are those the worker's own ``pickle.dumps`` wrote to a memory file this process made and
    only the worker inherited (:func:`nbprec.compare.early_msprobe.scan_file`): no file of the user's is
    unpickled."""
    found = _prescan.take(file, SHIPPED_KIND)
    if not isinstance(found, bytes):
        return None
    import pickle

    try:
        model = pickle.loads(found)
    except Exception:  # (the worker's own bytes, whole: never expected)
        return None
    return model if isinstance(model, GeModel) else None


def _scopes(name: str) -> list[str]:
    """Every ``/`` scope enclosing ``name``, outermost first (``"a/b/c"`` -> ``["a", "a/b"]``)."""
    out, pos = [], name.find("/")
    while pos != -1:
        if pos > 0 and name[pos - 1] != "/":
            out.append(name[:pos])
        pos = name.find("/", pos + 1)
    return out


def graph_from_ge(path_or_model: str | Path | GeModel) -> OpGraph:
    """The operator graph of a GE graph dump: one node per op of every graph, one edge per recorded input.

    Nodes have ``type``, ``order`` (the op ``id``, or the position in the file when ids are missing or
    repeated), ``attrs`` (the op's attributes), ``fusion`` (``{"pass_name", "original_ops"}`` for fused ops,
    else None), ``module`` (the name's scope: ``"conv1"`` for ``"conv1/Conv2D"``), ``direction="forward"``.
    Edges have ``slot`` (the input position), ``tensor`` (``"src:idx"``; ``""`` for control edges),
    ``dst_tensor`` (the input descriptor's name), ``kind`` (``"control"`` for ``idx`` -1), ``inferred=False``.
    The hierarchy is the ``/`` scopes (``module:conv1``), so :meth:`OpGraph.collapse` works. The model's
    problems become notes; an op whose name another graph already used is renamed ``name#graph`` (noted).

    Examples
    --------
    >>> g = graph_from_ge("ge_proto_00000001_Build.txt")   # doctest: +SKIP
    >>> g.op("conv1/Conv2D")["fusion"]["pass_name"]          # doctest: +SKIP
    'ConvBiasaddFusionPass'
    """
    model = path_or_model if isinstance(path_or_model, GeModel) else read_ge_model(path_or_model)
    notes = list(model.problems)
    ops = model.ops
    ids = [op.id for op in ops]
    use_ids = None not in ids and len(set(ids)) == len(ids)
    if ops and not use_ids:
        notes.append("op ids are missing or repeated across graphs: 'order' is the op's position in the file")
    node_of: dict[tuple[str, str], str] = {}  # (graph, op name) -> node name
    used: set[str] = set()
    first_node: dict[str, str] = {}  # op name -> node of its first occurrence
    nodes, hierarchy, placed = [], {}, []
    for position, op in enumerate(ops):
        key = (op.graph, op.name)
        if key in node_of:  # repeated within a graph: a problem of the model already
            continue
        node = op.name
        if node in used:
            node = f"{op.name}#{op.graph}"
            while node in used:
                node += "'"
            notes.append(f"op {op.name!r} of graph {op.graph!r} is node {node!r}: another graph has an op of that name")
        node_of[key] = node
        used.add(node)
        placed.append((op, node))
        first_node.setdefault(op.name, node)
        scopes = _scopes(op.name)
        nodes.append(
            {
                "name": node,
                "type": op.type,
                "module": scopes[-1] if scopes else "",
                "direction": "forward",
                "order": op.id if use_ids else position,
                "attrs": dict(op.attrs),
                "fusion": op.fusion,
            }
        )
        parent = None
        for scope in scopes:
            hierarchy.setdefault(f"module:{scope}", parent)
            parent = f"module:{scope}"
        if parent is not None:
            hierarchy[node] = parent
    edges = []
    for op, dst in placed:
        for slot, inp in enumerate(op.inputs):
            if inp.index is None:
                continue
            src = node_of.get((op.graph, inp.op)) or first_node.get(inp.op)
            if src is None:  # named in model.problems
                continue
            control = inp.index == -1
            desc = op.input_descs[slot] if slot < len(op.input_descs) and not control else None
            edges.append(
                {
                    "src": src,
                    "dst": dst,
                    "slot": str(slot),
                    "tensor": "" if control else f"{inp.op}:{inp.index}",
                    "dst_tensor": desc.name if desc is not None else "",
                    "kind": "control" if control else "data",
                    "inferred": False,
                }
            )
    meta = {
        "path": model.path,
        "format": model.format,
        "model": model.name,
        "graphs": [g.name for g in model.graphs],
        "op_count": len(ops),
    }
    return OpGraph.from_records(nodes, edges, hierarchy=hierarchy, source="ge", notes=notes, meta=meta)


# -- fusion_result.json ----------------------------------------------------------------------------------
FUSION_KINDS = ("graph_fusion", "ub_fusion")
FUSION_COLUMNS = ("session", "session_and_graph_id", "kind", "pass_name", "effect_times", "match_times")


def _json_objects(text: str, path: Path) -> Iterable[Any]:
    decoder = json.JSONDecoder()
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n:
            return
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            line, col = line_col(text, exc.pos)
            raise GeGraphError(f"{path}: line {line}, column {col}: not valid JSON: {exc.msg}") from None
        except RecursionError:
            line, col = line_col(text, pos)
            raise GeGraphError(f"{path}: line {line}, column {col}: JSON nested too deeply") from None
        except ValueError:
            line, col = line_col(text, pos)
            raise GeGraphError(
                f"{path}: line {line}, column {col}: not read: the value holds {long_number()}"
            ) from None
        yield obj


def _count(value: Any, path: Path, where: str) -> int:
    try:
        number = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    if number != number or number != int(number):
        raise GeGraphError(f"{path}: {where}: expected a whole number, found {value!r}")
    return int(number)


def read_fusion_result(path: str | Path) -> Any:
    """The fusion passes GE applied, from ``fusion_result.json`` (one row per session, kind and pass).

    The file may hold several JSON objects one after another (one per session or graph); ``session`` is the
    object's position. Sum over sessions with ``df.groupby(["kind", "pass_name"]).effect_times.sum()``.

    Returns
    -------
    pandas.DataFrame
        Columns ``session``, ``session_and_graph_id`` (as the file says, else ``""``), ``kind``
        (``graph_fusion``/``ub_fusion``), ``pass_name``, ``effect_times`` (int), ``match_times`` (nullable
        Int64: missing in older files).

    Raises
    ------
    GeGraphError
        The file is missing or empty, not JSON (named with line and column), or not a fusion result.

    Examples
    --------
    >>> df = read_fusion_result("fusion_result.json")                        # doctest: +SKIP
    >>> df[df.effect_times > 0].pass_name.unique()                           # doctest: +SKIP
    """
    import pandas as pd

    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        raise GeGraphError(f"{path}: cannot read the file: {exc.strerror or exc}") from None
    rows = []
    sessions = 0
    for session, obj in enumerate(_json_objects(text, path)):
        sessions += 1
        if not isinstance(obj, dict):
            raise GeGraphError(f"{path}: JSON value {session}: expected an object, found {type(obj).__name__}")
        if not any(k in obj for k in FUSION_KINDS):
            raise GeGraphError(
                f"{path}: JSON object {session} has no {' or '.join(FUSION_KINDS)} (keys: {sorted(obj)[:8]}): "
                "not a fusion_result.json"
            )
        sid = str(obj.get("session_and_graph_id", ""))
        for kind in FUSION_KINDS:
            passes = obj.get(kind) or {}
            if not isinstance(passes, dict):
                raise GeGraphError(f"{path}: object {session}, {kind}: expected an object of passes")
            for name, record in passes.items():
                where = f"object {session}, {kind}, pass {name!r}"
                if not isinstance(record, dict):
                    raise GeGraphError(f"{path}: {where}: expected an object with effect_times")
                match = record.get("match_times")
                rows.append(
                    {
                        "session": session,
                        "session_and_graph_id": sid,
                        "kind": kind,
                        "pass_name": str(name),
                        "effect_times": _count(record.get("effect_times", 0), path, f"{where}, effect_times"),
                        "match_times": None if match is None else _count(match, path, f"{where}, match_times"),
                    }
                )
    if not sessions:
        raise GeGraphError(f"{path}: the file holds no JSON object (expected graph_fusion / ub_fusion records)")
    df = pd.DataFrame(rows, columns=list(FUSION_COLUMNS))
    df["session"] = df["session"].astype("int64")
    df["effect_times"] = df["effect_times"].astype("int64")
    df["match_times"] = df["match_times"].astype("Int64")
    return df
