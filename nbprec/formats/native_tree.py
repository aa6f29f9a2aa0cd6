"""A tree of nbprec run folders, one per rank (and step), opened as one dump.

Each process of a distributed run captures into its own folder, named as msprobe names its own:

    runs/bf16/rank0/  runs/bf16/rank1/                       (one step)
    runs/bf16/step0/rank0/  runs/bf16/step1/rank0/  ...       (several steps, one capture per step)

``nbprec.open("runs/bf16")`` reads every run folder's index and puts them together: each row takes the step and
rank its folder names (a capture made without ``rank=`` still lands on its rank; where the recorded value differs
from the folder's, the folder's is used and a problem says so), and each payload is read from its own folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.columns import Columns
from nbprec.dump import Dump, Problem
from nbprec.errors import DumpFormatError
from nbprec.formats.native_read import read_native_dump
from nbprec.formats.probes import MAX_RUNS, find_run_folders, is_run_tree


def read_run_tree(path: Path) -> Dump:
    """Open the run folders under ``path`` (see the module docstring) as one dump."""
    runs = find_run_folders(path)
    if not runs:
        raise DumpFormatError(path, "no nbprec run folder named rank{M} or step{N}/rank{M} in it")
    if len(runs) > MAX_RUNS:
        raise DumpFormatError(path, f"more than {MAX_RUNS} run folders")
    seen: dict[tuple[int | None, int], Path] = {}
    for step, rank, folder in runs:
        if (step, rank) in seen:
            raise DumpFormatError(
                path, f"{seen[step, rank].name} and {folder.name} both name rank {rank}: keep one of them"
            )
        seen[step, rank] = folder
    if any(step is None for step, _, _ in runs) and any(step is not None for step, _, _ in runs):
        raise DumpFormatError(path, "it mixes rank{M}/ and step{N}/rank{M}/ folders: use one layout")

    indexes, loaders, problems = [], {}, []
    edges, hierarchy, metas = [], {}, []
    stacks: list[Any] = []
    calls: list[Any] = []
    for step, rank, folder in runs:
        dump = read_native_dump(folder)
        where = folder.relative_to(path).as_posix()
        index = dump.columns.copy()
        for column, value in (("rank", rank), ("step", step)):
            if value is None:
                continue
            recorded = index[column]
            unset = np.isin(recorded, (-1, 0)).all()  # written without step= / rank= (the defaults)
            if len(recorded) and (recorded != value).any() and not unset:
                problems.append(
                    Problem(str(folder), f"rows record {column} {sorted(set(recorded.tolist()))[:5]}; the "
                            f"folder's {column} {value} is used", where)
                )  # fmt: skip
            index[column] = np.full(len(index), value, dtype=np.int64)
        for s, r in set(zip(index["step"].tolist(), index["rank"].tolist(), strict=True)):
            loaders[int(s), int(r)] = dump._loader
        indexes.append(index)
        problems += dump.problem_list
        edges.append(dump._edges)
        for module, parent in dump.hierarchy.items():
            hierarchy.setdefault(module, parent)
        metas.append(dump.meta)
        stacks.append(dump._stacks)
        calls.append(dump._calls)

    def load(row: Mapping[str, Any]) -> np.ndarray:
        loader = loaders.get((int(row["step"]), int(row["rank"])))
        if loader is None:
            raise DumpFormatError(path, f"no run folder holds step {row['step']}, rank {row['rank']}")
        return loader(row)

    def merged(parts: list[Any]) -> dict:
        out: dict = {}
        for part in parts:
            out.update((part() if callable(part) else part) or {})
        return out

    first = metas[0]
    meta = {**first, "run": path.name, "runs": [f.relative_to(path).as_posix() for _, _, f in runs]}
    meta["finished"] = all(m.get("finished") for m in metas)
    index = Columns.concat(indexes)

    def edge_records() -> list[dict[str, Any]]:  # every folder's, each edge once
        seen: dict[tuple, dict[str, Any]] = {}
        for part in edges:
            rows = part.to_dict("records") if hasattr(part, "to_dict") else list(part or [])
            for row in rows:
                seen.setdefault(tuple(row.get(c) for c in ("src", "dst_op", "dst_slot")), row)
        return list(seen.values())

    return Dump(
        index,
        path=path,
        format="nbprec",
        loader=load,
        problems=problems,
        meta=meta,
        hierarchy=hierarchy,
        stacks=lambda: merged(stacks),
        calls=lambda: merged(calls),
        edges=edge_records,
    )


__all__ = ["find_run_folders", "is_run_tree", "read_run_tree"]
