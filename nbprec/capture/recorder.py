"""The recorder: turns op calls (from the torch-function mode and the module hooks) into dump records.

It owns everything that changes during a capture (step, execution order, call counters, the module stack,
which tensor each earlier op produced) so that a :class:`~nbprec.capture.api.Capture` holds no global state.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nbprec.capture.backward import BackwardWatches, input_edges
from nbprec.capture.naming import CallCounter, OpName, api_identity, module_api, op_name, parent_backward
from nbprec.capture.overflow import OverflowCheck
from nbprec.capture.select import Selection
from nbprec.capture.signature import encode_call
from nbprec.capture.stacks import StackCollector
from nbprec.capture.tensors import call_tensors, dtype_name, iter_tensors, tensor_to_numpy, torch_stats

_INPLACE_DUNDERS = frozenset(
    f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift")
) | frozenset({"__irshift__", "__imatmul__", "__setitem__"})


#: APIs whose single output holds exactly the values of their first input, rearranged (same statistics).
SAME_VALUES = frozenset(
    {
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "transpose",
        "permute",
        "contiguous",
        "flatten",
        "unflatten",
        "squeeze",
        "unsqueeze",
        "detach",
        "clone",
        "t",
        "movedim",
        "swapaxes",
        "mT",
    }
)


def is_inplace(name: str, kwargs: dict[str, Any] | None) -> bool:
    """Whether an API call may change its inputs (``add_``, ``__iadd__``, ``inplace=True``, ``out=``)."""
    if (name.endswith("_") and not name.endswith("__")) or name in _INPLACE_DUNDERS:
        return True
    return bool(kwargs) and (kwargs.get("inplace") is True or kwargs.get("out") is not None)


@dataclass
class _Produced:
    """What the capture knows about a tensor it has seen: who produced it, and its statistics."""

    ref: weakref.ref[Any]
    version: int
    stats: dict[str, Any] | None = None
    api_name: str | None = None
    module_name: str | None = None


class TensorMemo:
    """Tensor identity -> producing op's tensor names and cached statistics (entries die with the tensor)."""

    def __init__(self) -> None:
        self._entries: dict[int, _Produced] = {}

    def get(self, t: Any) -> _Produced | None:
        """The entry of tensor ``t`` (the same object), or None."""
        entry = self._entries.get(id(t))
        return entry if entry is not None and entry.ref() is t else None

    def put(self, t: Any) -> _Produced:
        """The entry of ``t``, created (or reset, for a different object with a recycled id) if needed."""
        entry = self.get(t)
        if entry is None:
            key = id(t)
            entries = self._entries

            def drop(_ref: Any, key: int = key) -> None:
                current = entries.get(key)
                if current is not None and current.ref is _ref:
                    del entries[key]

            entry = _Produced(ref=weakref.ref(t, drop), version=t._version)
            entries[key] = entry
        return entry

    def clear(self) -> None:
        """Forget everything."""
        self._entries.clear()


@dataclass
class _ModuleFrame:
    name: OpName
    parent: str | None
    selected: bool
    recorded: bool
    order: int = -1
    edges: list[tuple[str, Any, int]] = field(default_factory=list)
    inputs: list[tuple[str, Any]] = field(default_factory=list)


@dataclass
class RecorderOptions:
    """Fixed settings of one capture (see :func:`nbprec.capture.capture` for their meaning)."""

    mode: str
    level: str
    backward: bool
    rank: int
    selection: Selection
    stacks: StackCollector | None
    overflow: OverflowCheck | None


class Recorder:
    """Records op calls into a :class:`~nbprec.formats.native.NativeDumpWriter`."""

    def __init__(self, torch: Any, writer: Any, options: RecorderOptions, step: int) -> None:
        self.torch = torch
        self.writer = writer
        self.opt = options
        self.modules_on = options.level in ("modules", "both")
        self.apis_on = options.level in ("apis", "both")
        self.memo = TensorMemo()
        self.watches = BackwardWatches(torch)
        self.api_calls = CallCounter()
        self.module_calls = CallCounter()
        self.module_stack: list[_ModuleFrame] = []
        self._identities: dict[Any, tuple[str, str] | None] = {}
        self._written_nodes: set[str] = set()
        self._written_edges: set[tuple[str, str, str]] = set()
        self._written_stacks: set[str] = set()
        self.step = step
        self.order = 0
        self.active = options.selection.step_selected(step)

    # -- steps -------------------------------------------------------------------------------------
    def set_step(self, step: int) -> None:
        """Finish the current step (pending gradients are reported) and start ``step``."""
        self.watches.flush()
        self.step = step
        self.order = 0
        self.api_calls.reset()
        self.module_calls.reset()
        self.memo.clear()
        self.active = self.opt.selection.step_selected(step)

    # -- API calls (called by the torch-function mode, with the mode switched off) -------------------
    def api_call(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        """Run one intercepted API call and record it."""
        kwargs = kwargs or {}
        if not self.active:
            return func(*args, **kwargs)
        try:
            ident = self._identities[func]
        except KeyError:
            ident = self._identities[func] = api_identity(func)
        except TypeError:  # unhashable callable
            ident = api_identity(func)
        sel = self.opt.selection
        if ident is None:
            return func(*args, **kwargs)
        torch = self.torch
        inputs = call_tensors(torch, args, kwargs)
        before = None
        if inputs and is_inplace(ident[1], kwargs):
            before = self._snapshot(inputs)
        out = func(*args, **kwargs)
        outputs = list(iter_tensors(torch, out))
        if not outputs:
            return out
        api = f"{ident[0]}.{ident[1]}"
        call = self.api_calls.next(api)
        module = self.module_stack[-1].name.module if self.module_stack else ""
        name = OpName(op_name(api, call, "forward", "api"), ident[1], api, call, "api", module)
        outside = bool(sel.modules) and not (self.module_stack and self.module_stack[-1].selected)
        if outside or not sel.op_selected(name.op):  # counted all the same: names do not depend on filters
            return out
        parent = self.module_stack[-1].name.op if self.module_stack else None
        edges = before[1] if before is not None else (input_edges(torch, inputs) if self.opt.backward else [])
        self.forward_op(name, parent, inputs, outputs, snapshot=None if before is None else before[0])
        if not self.opt.overflow:
            self.writer.write_call(name.op, encode_call(api, args, kwargs, torch))
        if self.opt.backward:
            aliases = {o: i for o, ot in outputs for i, it in inputs if ot is it}
            self._watch(name, parent, edges, outputs, aliases)
        return out

    def _snapshot(self, inputs: list[tuple[str, Any]]) -> tuple[dict[str, tuple[Any, Any]], list[Any]]:
        """Inputs of an in-place op as they were before it ran: (statistics, array copy), and their edges."""
        snap = {}
        for slot, t in inputs:
            stats = None if self.opt.overflow else self._stats(t)
            array = self._array(t, copy=True) if self.opt.mode == "tensor" or self.opt.overflow else None
            snap[slot] = (stats, array)
        edges = input_edges(self.torch, inputs) if self.opt.backward else []
        return snap, edges

    # -- module calls (called by the module hooks) -----------------------------------------------------
    def module_enter(self, path: str, class_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A module's forward starts."""
        if not self.active:
            return
        sel = self.opt.selection
        api = module_api(path, class_name)
        call = self.module_calls.next(api)
        name = OpName(op_name(api, call, "forward", "module"), class_name, api, call, "module", path)
        parent = self.module_stack[-1].name.op if self.module_stack else None
        selected = sel.module_selected(path)
        recorded = self.modules_on and selected and sel.op_selected(name.op)
        frame = _ModuleFrame(name, parent, selected, recorded)
        self.module_stack.append(frame)
        if selected and not self.opt.overflow:
            self._structure(name.op, parent)
        if recorded:
            inputs = call_tensors(self.torch, args, kwargs)
            frame.order = self._next_order()
            frame.edges = input_edges(self.torch, inputs) if self.opt.backward else []
            if self.opt.overflow:
                frame.inputs = inputs  # written only if the module overflows
            else:
                self._write_stack(name.op)
                self._write_tensors(name, "input", inputs, frame.order, edges_to=name.op)

    def module_exit(self, path: str, output: Any) -> None:
        """A module's forward ended (also called, with ``output`` None, when it raised)."""
        if not self.active or not self.module_stack:
            return
        frame = self.module_stack.pop()
        while frame.name.module != path and self.module_stack:  # a hook was skipped by an error: resync
            frame = self.module_stack.pop()
        if not frame.recorded or output is None:
            return
        outputs = list(iter_tensors(self.torch, output))
        if self.opt.overflow:
            self._check_overflow(frame.name, frame.parent, frame.inputs, outputs, frame.order)
        else:
            self._write_tensors(frame.name, "output", outputs, frame.order, produced=True)
        if self.opt.backward:
            self._watch(frame.name, frame.parent, frame.edges, outputs)

    # -- writing ---------------------------------------------------------------------------------------
    def _next_order(self) -> int:
        order = self.order
        self.order += 1
        return order

    def forward_op(
        self,
        name: OpName,
        parent: str | None,
        inputs: list[tuple[str, Any]],
        outputs: list[tuple[str, Any]],
        snapshot: dict[str, tuple[Any, Any]] | None = None,
    ) -> None:
        """Record one forward op call: its place in the hierarchy, stack, inputs (with edges) and outputs."""
        order = self._next_order()
        if self.opt.overflow:
            self._check_overflow(name, parent, inputs, outputs, order, snapshot)
            return
        self._structure(name.op, parent)
        self._write_stack(name.op)
        self._write_tensors(name, "input", inputs, order, edges_to=name.op, snapshot=snapshot)
        if name.op_type in SAME_VALUES and snapshot is None and len(outputs) == 1 and inputs:
            self._inherit_stats(inputs[0][1], outputs[0][1])
        self._write_tensors(name, "output", outputs, order, produced=True)

    def _inherit_stats(self, src: Any, dst: Any) -> None:
        """Give ``dst`` the statistics of ``src`` when it holds the same values rearranged (a view or copy)."""
        if dst is src or dst.numel() != src.numel() or dst.dtype != src.dtype:
            return
        entry = self.memo.get(src)
        if entry is not None and entry.stats is not None and entry.version == src._version:
            out = self.memo.put(dst)
            out.version = dst._version
            out.stats = entry.stats

    def _check_overflow(
        self,
        name: OpName,
        parent: str | None,
        inputs: list[tuple[str, Any]],
        outputs: list[tuple[str, Any]],
        order: int,
        snapshot: dict[str, tuple[Any, Any]] | None = None,
    ) -> None:
        checked = [("output", s, t) for s, t in outputs]
        sources = inputs
        if name.direction == "backward":  # gradients arriving non-finite were made elsewhere, but still count
            checked += [("input", s, t) for s, t in inputs]
            sources = []
        problems = OverflowCheck.problems(self.torch, checked, name.op_type, sources)
        if not problems:
            return
        self._structure(name.op, parent)
        if name.direction == "forward":
            self._write_stack(name.op)
        self._write_tensors(name, "input", inputs, order, snapshot=snapshot)
        self._write_tensors(name, "output", outputs, order)
        assert self.opt.overflow is not None
        self.opt.overflow.register(name.op, problems)

    def _write_tensors(
        self,
        name: OpName,
        role: str,
        tensors: list[tuple[str, Any]],
        order: int,
        *,
        edges_to: str | None = None,
        produced: bool = False,
        snapshot: dict[str, tuple[Any, Any]] | None = None,
    ) -> None:
        tensor_mode = self.opt.mode == "tensor" or self.opt.overflow is not None
        prefer_module = name.kind == "module"
        for slot, t in tensors:
            tname = name.tensor(role, slot)
            record = {
                "name": tname,
                "step": self.step,
                "rank": self.opt.rank,
                "order": order,
                "op": name.op,
                "op_type": name.op_type,
                "api": name.api,
                "call": name.call,
                "module": name.module,
                "direction": name.direction,
                "role": role,
                "slot": slot,
                "dtype": dtype_name(t),
                "shape": tuple(t.shape),
            }
            entry = self.memo.get(t)
            if edges_to is not None and entry is not None:
                src = (entry.module_name or entry.api_name) if prefer_module else (entry.api_name or entry.module_name)
                if src is not None:
                    self._write_edge(src, edges_to, slot)
            if snapshot is not None and slot in snapshot:
                stats, array = snapshot[slot]
            else:
                stats = entry.stats if entry is not None and entry.version == t._version else None
                array = self._array(t) if tensor_mode else None
            if stats is None:
                stats = self._stats(t)
            self.writer.write_tensor(record, array, stats)
            if produced or entry is None or entry.stats is None:
                entry = self.memo.put(t)
                entry.version = t._version
                entry.stats = stats
            if produced:
                if prefer_module:
                    entry.module_name = tname
                else:
                    entry.api_name = tname

    def _stats(self, t: Any) -> dict[str, Any] | None:
        try:
            return torch_stats(self.torch, t)
        except (RuntimeError, TypeError, NotImplementedError):  # meta/sparse/quantized tensors
            return None

    def _array(self, t: Any, copy: bool = False) -> Any:
        array = tensor_to_numpy(self.torch, t)
        return array.copy() if copy else array

    def _structure(self, node: str, parent: str | None) -> None:
        if node not in self._written_nodes:
            self._written_nodes.add(node)
            self.writer.write_module(node, parent)

    def _write_stack(self, op: str) -> None:
        if self.opt.stacks is not None and op not in self._written_stacks:
            self._written_stacks.add(op)
            self.writer.write_stack(op, self.opt.stacks.collect())

    def _write_edge(self, src: str, dst_op: str, slot: str) -> None:
        key = (src, dst_op, slot)
        if key not in self._written_edges:
            self._written_edges.add(key)
            self.writer.write_edge(src, dst_op, slot)

    # -- backward ----------------------------------------------------------------------------------------
    def _watch(
        self,
        name: OpName,
        parent: str | None,
        edges: list[tuple[str, Any, int]],
        outputs: list[tuple[str, Any]],
        aliases: dict[str, str] | None = None,
    ) -> None:
        step = self.step

        def report(grads_in: dict[str, Any], grads_out: dict[str, Any]) -> None:
            if self.active and self.step == step:
                self.backward_op(name.backward(), parent_backward(parent), grads_in, grads_out)

        self.watches.watch(edges, outputs, report, aliases)

    def backward_op(
        self, name: OpName, parent: str | None, grads_in: dict[str, Any], grads_out: dict[str, Any]
    ) -> None:
        """Record one backward op: the gradients it received (input) and produced (output)."""
        with self.torch._C.DisableTorchFunction():
            order = self._next_order()
            inputs = sorted(grads_in.items())
            outputs = sorted(grads_out.items())
            if self.opt.overflow:
                self._check_overflow(name, parent, inputs, outputs, order)
                return
            self._structure(name.op, parent)
            self._write_tensors(name, "input", inputs, order)
            self._write_tensors(name, "output", outputs, order)
