"""Benchmark the operator graph on a 100,000-op synthetic model, against plain networkx in the same run.

Measures (median of repeats):
1. building: ``OpGraph.from_records`` (attributes, slots, hierarchy) vs a bare ``networkx.DiGraph`` built from
   the same edge list;
2. building from a dump with no recorded edges (edges inferred from statistics) vs the same bare DiGraph;
3. a depth-3 subgraph query (up 3, down 3, metrics carried along) vs a plain networkx BFS
   (``single_source_shortest_path_length`` with ``cutoff=3`` both ways, then ``subgraph().copy()``);
4. the whole-model navigator of the dashboard's graph on a flat model (2,000 layers side by side): building it,
   and revealing an op deep inside with the view that follows (the element budget: 300), against finding that
   op's layer with pandas (interleaved, the same ops).

Targets: the subgraph query under 20 ms; the navigator's reveal and view under 0.5 s.

Run: ``.venv/bin/python bench/graph.py [--nodes 100000]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall time of ``fn`` in seconds over ``repeat`` runs, and its last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def synthetic(n: int) -> tuple[list[dict], list[dict], dict[str, str | None]]:
    """A transformer-like chain: each op reads the previous one, every 4th op also a residual 4 back."""
    names = [f"Functional.op{i}.0.forward" for i in range(n)]
    types = ("linear", "relu", "add", "layer_norm")
    per_layer = 400
    hierarchy: dict[str, str | None] = {}
    nodes = []
    for i, name in enumerate(names):
        layer = f"Module.layers.{i // per_layer}.Layer.forward.0"
        hierarchy.setdefault(layer, None)
        hierarchy[name] = layer
        nodes.append({"name": name, "type": types[i % 4], "module": f"layers.{i // per_layer}", "order": i})
    edges = [
        {"src": names[i - 1], "dst": names[i], "slot": "0", "tensor": f"{names[i - 1]}.output.0"} for i in range(1, n)
    ]
    edges += [
        {"src": names[i - 4], "dst": names[i], "slot": "1", "tensor": f"{names[i - 4]}.output.0"}
        for i in range(4, n, 4)
    ]
    return nodes, edges, hierarchy


def synthetic_dump(n: int) -> Any:
    """A statistics-only dump of ``n`` ops in a chain (input k equals output k-1), no recorded edges."""
    from nbprec.dump import Dump
    from nbprec.dump_index import make_index

    rng = np.random.default_rng(0)
    stats = rng.standard_normal((n + 1, 4))
    ops = np.repeat([f"Functional.op{i}.0.forward" for i in range(n)], 2)
    roles = np.tile(["input", "output"], n)
    k = np.repeat(np.arange(n), 2) + (roles == "output")
    frame = {
        "name": [f"{o}.{r}.0" for o, r in zip(ops, roles, strict=True)],
        "op": ops,
        "op_type": "linear",
        "api": "Functional.linear",
        "order": np.repeat(np.arange(n), 2),
        "direction": "forward",
        "role": roles,
        "slot": "0",
        "dtype": "float16",
        "shape": [(4, 8)] * (2 * n),
        "max": stats[k, 0],
        "min": stats[k, 1],
        "mean": stats[k, 2],
        "norm": stats[k, 3],
    }
    import pandas as pd

    return Dump(make_index(pd.DataFrame(frame)), path="synthetic", format="synthetic")


def main() -> None:
    import networkx as nx

    from nbprec.graph import OpGraph

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.nodes
    nodes, edges, hierarchy = synthetic(n)
    pairs = [(e["src"], e["dst"]) for e in edges]

    def bare() -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_edges_from(pairs)
        return g

    t_bare, bare_graph = timed(bare, args.repeat)
    t_build, graph = timed(lambda: OpGraph.from_records(nodes, edges, hierarchy=hierarchy), args.repeat)
    print(f"synthetic model: {len(graph):,} ops, {graph.nx.number_of_edges():,} edges")
    print(f"build   bare networkx DiGraph        {t_bare * 1e3:9.1f} ms")
    print(f"build   OpGraph.from_records         {t_build * 1e3:9.1f} ms   ratio {t_build / t_bare:5.2f}x")
    dump = synthetic_dump(n)
    t_dump, from_dump = timed(lambda: OpGraph.from_dump(dump), 1)
    print(
        f"build   OpGraph.from_dump (inferred) {t_dump * 1e3:9.1f} ms   ratio {t_dump / t_bare:5.2f}x "
        f"({from_dump.nx.number_of_edges():,} edges inferred from {len(dump):,} tensor records)"
    )

    centers = [nodes[i]["name"] for i in np.linspace(10, n - 10, 25).astype(int)]
    for data in graph.nx.nodes.values():  # carry metrics, as after attach_metrics
        data.update(status="pass", cosine=0.9999, rel_euclidean=1e-3)

    def ours() -> int:
        return sum(len(graph.subgraph(c, up=3, down=3)) for c in centers)

    reverse = bare_graph.reverse(copy=False)

    def baseline() -> int:
        total = 0
        for c in centers:
            near = set(nx.single_source_shortest_path_length(bare_graph, c, cutoff=3))
            near |= set(nx.single_source_shortest_path_length(reverse, c, cutoff=3))
            total += len(bare_graph.subgraph(near).copy())
        return total

    t_ours, size_ours = timed(ours, args.repeat)
    t_base, size_base = timed(baseline, args.repeat)
    per_ours, per_base = t_ours / len(centers), t_base / len(centers)
    each, base_each = size_ours / len(centers), size_base / len(centers)
    print(f"subgraph depth 3 ({each:.0f} ops each, {len(centers)} centres; baseline {base_each:.0f})")
    print(f"query   networkx BFS + subgraph copy {per_base * 1e3:9.3f} ms")
    print(f"query   OpGraph.subgraph             {per_ours * 1e3:9.3f} ms   ratio {per_ours / per_base:5.2f}x")
    print(f"target  subgraph query < 20 ms: {'met' if per_ours < 0.020 else 'NOT met'}")
    sub = graph.subgraph(centers[0], up=3, down=3)
    t_cy, _ = timed(lambda: sub.to_cytoscape("cosine"), args.repeat)
    t_col, blocks = timed(lambda: graph.collapse(depth=1), 1)
    print(f"export  subgraph to Cytoscape.js     {t_cy * 1e3:9.3f} ms")
    print(f"collapse to {len(blocks)} layer blocks          {t_col * 1e3:9.1f} ms")
    navigator_figures(n, args.repeat)


def navigator_figures(n: int, repeat: int) -> None:
    """The whole-model navigator on ``n`` ops in layers of 50 side by side: build, then reveal + view."""
    import pandas as pd

    from nbprec.graph.navigator import ModelNavigator

    i = np.arange(n)
    ops = pd.DataFrame({
        "op": [f"Functional.op.{k}.forward" for k in i],
        "order": i,
        "module": [f"enc.layers.{k // 50}" for k in i],
        "status": np.where(i % 9973 == 9972, "fail", "pass"),
        "out_cosine": 1 - i / (10 * n),
    })  # fmt: skip
    t_nav, nav = timed(lambda: ModelNavigator.from_ops(ops, max_elements=300), repeat)
    picks = ops["op"].iloc[np.linspace(n // 10, n - 10, 100).astype(int)].tolist()
    modules = ops["module"].to_numpy()
    names = ops["op"].to_numpy()

    def reveal(op: str) -> int:
        nav.reveal(op)
        return len(nav.view())

    def baseline(op: str) -> int:  # the plain alternative: the rows of the op's layer, found with pandas
        module = modules[np.flatnonzero(names == op)[0]]
        return len(ops[ops["module"] == module])

    sides = {"reveal": reveal, "baseline": baseline}
    times: dict[str, list[float]] = {label: [] for label in sides}
    size = 0
    for k in range(max(repeat, 5)):  # interleaved (the order alternating), a new op each round
        for label in sorted(sides, reverse=k % 2 == 1):
            start = time.perf_counter()
            got = sides[label](picks[k % len(picks)])
            times[label].append(time.perf_counter() - start)
            size = got if label == "reveal" else size
    t_reveal, t_base = statistics.median(times["reveal"]), statistics.median(times["baseline"])
    print(f"navigator of {n:,} ops in {n // 50:,} layers: built in {t_nav * 1e3:9.1f} ms")
    print(
        f"navigator reveal an op + view        {t_reveal * 1e3:9.1f} ms   ({size} elements; target < 500 ms: "
        f"{'met' if t_reveal < 0.5 else 'NOT met'})"
    )
    print(
        f"baseline: the op's layer by pandas   {t_base * 1e3:9.1f} ms   ratio {t_reveal / t_base:5.2f}x "
        f"(interleaved, medians of {len(times['reveal'])})"
    )


if __name__ == "__main__":
    main()
