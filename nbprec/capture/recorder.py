"""The recorder: turns op calls (from the torch-function mode and the module hooks) into dump records.

It owns everything that changes during a capture (step, execution order, call counters, the module stack,
which tensor each earlier op produced) so that a :class:`~nbprec.capture.api.Capture` holds no global state.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nbprec.capture.backward import BackwardWatches
from nbprec.capture.gradients import GradientKeeper, KeptGradient
from nbprec.capture.lines import EncodedOp, EncodedStats, RecordLines, encode_stats
from nbprec.capture.memo import TensorMemo
from nbprec.capture.naming import OpName, module_api, parent_backward, recorded_identity
from nbprec.capture.overflow import OverflowCheck
from nbprec.capture.payloads import MAX_LINKS
from nbprec.capture.select import Selection
from nbprec.capture.signature import encode_call_json
from nbprec.capture.stacks import StackCollector, StackKey
from nbprec.capture.statistics import TensorStatistics
from nbprec.capture.tensors import TensorArrays, call_tensors, iter_tensors
from nbprec.capture.writer import CaptureWriter

#: APIs whose single output holds exactly the values of their first input, rearranged (same statistics); the
#: gradient their backward sends to that input likewise holds the values of the one it received.
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
#: APIs that change an input without telling its version counter (batch norm's running statistics): what the
#: memo holds for their inputs is not reused; their records measure and save the values again.
UNSEEN_WRITES = frozenset(
    {
        "batch_norm",
        "instance_norm",
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_batch_norm_impl_index",
        "batch_norm_elemt",
        "cudnn_batch_norm",
        "miopen_batch_norm",
    }
)


class ModuleInfo:
    """What the hooks of one module know about it: its path, class name and ``api`` column, made once."""

    __slots__ = ("api", "class_name", "path")

    def __init__(self, path: str, class_name: str) -> None:
        self.path = path
        self.class_name = class_name
        self.api = module_api(path, class_name)


class _ModuleFrame:
    __slots__ = ("call_frame", "edges", "enc", "inputs", "name", "order", "parent", "recorded", "selected", "stack_key")

    def __init__(self, name: OpName, parent: str | None, selected: bool, recorded: bool) -> None:
        self.name = name
        self.parent = parent
        self.selected = selected
        self.recorded = recorded
        self.order = -1
        self.edges: list[tuple[str, Any, int]] = []
        self.inputs: list[tuple[str, Any]] = []
        self.enc: EncodedOp | None = None
        self.call_frame: Any = None  # the frame that called the module (alive while it runs), with stacks on
        self.stack_key: StackKey = ()  # the user frames from there outwards


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
    """Records op calls into a :class:`~nbprec.capture.writer.CaptureWriter`.

    The per-call work is kept small, because it runs for every op of the model: API identities, module
    names and selections are worked out once per function or module; an op's index fields are encoded
    once for all its tensors, and a tensor's statistics once however many ops read it.
    """

    def __init__(self, torch: Any, writer: CaptureWriter, options: RecorderOptions, step: int) -> None:
        self.torch = torch
        self.writer = writer
        self.lines: RecordLines = writer.lines
        self.opt = options
        self.modules_on = options.level in ("modules", "both")
        self.apis_on = options.level in ("apis", "both")
        self.memo = TensorMemo()
        self.watches = BackwardWatches(torch)
        self.stats = TensorStatistics(torch)
        self.arrays = TensorArrays(torch)
        self.module_stack: list[_ModuleFrame] = []
        self._api_counts: dict[str, int] = {}
        self._module_counts: dict[str, int] = {}
        self._selected_modules: dict[str, bool] = {}
        self._dtypes: dict[Any, str] = {}
        self._written_nodes: set[str] = set()
        self._written_edges: set[tuple[str, str, str]] = set()
        self._written_stacks: set[str] = set()
        self._tensor = torch.Tensor
        self._tensor_mode = options.mode == "tensor" or options.overflow is not None
        # statistics mode: the watches keep each gradient's record fields, not the tensor (nbprec.capture.gradients)
        self._keeps_gradients = not self._tensor_mode
        if self._keeps_gradients:
            self.watches.take = GradientKeeper(torch, self.memo, self._stats, self._dtype_name)
        sel = options.selection
        self._filtering = bool(sel.modules or sel.include or sel.exclude)
        self.step = step
        self.order = 0
        self.active = sel.step_selected(step)

    # -- steps -------------------------------------------------------------------------------------
    def set_step(self, step: int) -> None:
        """Finish the current step (pending gradients are reported) and start ``step``."""
        self.watches.flush()
        self.step = step
        self.order = 0
        self._api_counts.clear()
        self._module_counts.clear()
        self.memo.clear()
        self.active = self.opt.selection.step_selected(step)

    # -- API calls (called by the torch-function mode, with the mode switched off) -------------------
    def api_call(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        """Run one intercepted API call and record it."""
        kwargs = kwargs or {}
        if not self.active:
            return func(*args, **kwargs)
        info = recorded_identity(func)
        if info is None:
            return func(*args, **kwargs)
        api, op_type, inplace = info
        torch = self.torch
        inputs = call_tensors(torch, args, kwargs)
        before = None
        if inputs and (inplace or (kwargs and (kwargs.get("inplace") is True or kwargs.get("out") is not None))):
            before = self._snapshot(inputs)
        out = func(*args, **kwargs)
        outputs = [("0", out)] if isinstance(out, self._tensor) else list(iter_tensors(torch, out))
        if not outputs:
            return out
        counts = self._api_counts
        call = counts.get(api, 0)
        counts[api] = call + 1
        stack = self.module_stack
        top = stack[-1] if stack else None
        op = f"{api}.{call}.forward"
        name = OpName(op, op_type, api, call, "api", top.name.module if top is not None else "")
        if self._filtering:  # counted all the same: names do not depend on filters
            sel = self.opt.selection
            outside = bool(sel.modules) and not (top is not None and top.selected)
            if outside or not sel.op_selected(op):
                return out
        parent = top.name.op if top is not None else None
        backward = self.opt.backward
        edges = before[1] if before is not None else (self.watches.input_edges(inputs) if backward else [])
        self.forward_op(name, parent, inputs, outputs, snapshot=None if before is None else before[0])
        if not self.opt.overflow:
            self.lines.call(op, encode_call_json(api, args, kwargs, torch))
        if backward:
            aliases = {o: i for o, ot in outputs for i, it in inputs if ot is it}
            self._watch(name, parent, edges, outputs, aliases)
        return out

    def _snapshot(self, inputs: list[tuple[str, Any]]) -> tuple[dict[str, tuple[Any, Any]], list[Any]]:
        """Inputs of an in-place op as they were before it ran: (statistics, array copy), and their edges."""
        snap = {}
        for slot, t in inputs:
            stats = None if self.opt.overflow else self._stats(t)
            array = self.arrays.payload(t, copy=True) if self._tensor_mode else None
            snap[slot] = (stats, array)
        edges = self.watches.input_edges(inputs) if self.opt.backward else []
        return snap, edges

    # -- module calls (called by the module hooks) -----------------------------------------------------
    def module_enter(self, info: ModuleInfo, args: tuple[Any, ...], kwargs: dict[str, Any], caller: Any = None) -> None:
        """A module's forward starts; ``caller`` is the frame that called its hooks (for call stacks)."""
        if not self.active:
            return
        api = info.api
        counts = self._module_counts
        call = counts.get(api, 0)
        counts[api] = call + 1
        path = info.path
        op = f"{api}.forward.{call}"
        name = OpName(op, info.class_name, api, call, "module", path)
        stack = self.module_stack
        parent = stack[-1].name.op if stack else None
        if self._filtering:
            sel = self.opt.selection
            selected = self._selected_modules.get(path)
            if selected is None:
                selected = self._selected_modules[path] = sel.module_selected(path)
            recorded = self.modules_on and selected and sel.op_selected(op)
        else:
            selected, recorded = True, self.modules_on
        frame = _ModuleFrame(name, parent, selected, recorded)
        if self.opt.stacks is not None and caller is not None:  # its stack; its ops' stack walks end there
            frame.call_frame = caller
            frame.stack_key = self._stack_key(caller)
        stack.append(frame)
        if selected and not self.opt.overflow:
            self._structure(op, parent)
        if recorded:
            inputs = call_tensors(self.torch, args, kwargs)
            frame.order = self._next_order()
            frame.edges = self.watches.input_edges(inputs) if self.opt.backward else []
            if self.opt.overflow:
                frame.inputs = inputs  # written only if the module overflows
            else:
                self._write_stack(op, frame.stack_key if caller is not None else None)
                frame.enc = self._encode(name)
                self._write_tensors(name, "input", inputs, frame.order, edges_to=op, enc=frame.enc)

    def module_exit(self, path: str, output: Any) -> None:
        """A module's forward ended (also called, with ``output`` None, when it raised)."""
        if not self.active or not self.module_stack:
            return
        frame = self.module_stack.pop()
        while frame.name.module != path and self.module_stack:  # a hook was skipped by an error: resync
            frame = self.module_stack.pop()
        if not frame.recorded or output is None:
            return
        outputs = [("0", output)] if isinstance(output, self._tensor) else list(iter_tensors(self.torch, output))
        if self.opt.overflow:
            self._check_overflow(frame.name, frame.parent, frame.inputs, outputs, frame.order)
        else:
            self._write_tensors(frame.name, "output", outputs, frame.order, produced=True, enc=frame.enc)
        if self.opt.backward:
            self._watch(frame.name, frame.parent, frame.edges, outputs)

    # -- writing ---------------------------------------------------------------------------------------
    def _next_order(self) -> int:
        order = self.order
        self.order += 1
        return order

    def _encode(self, name: OpName) -> EncodedOp:
        return self.lines.encode_op(name.op, name.op_type, name.api, name.call, name.module, name.direction)

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
        if name.op_type in UNSEEN_WRITES:
            for _, t in inputs:
                self.memo.forget(t)
        if self.opt.overflow:
            self._check_overflow(name, parent, inputs, outputs, order, snapshot)
            return
        op = name.op
        enc = self._encode(name)
        self._structure(op, parent)
        self._write_stack(op)
        self._write_tensors(name, "input", inputs, order, edges_to=op, snapshot=snapshot, enc=enc)
        if name.op_type in SAME_VALUES and snapshot is None and len(outputs) == 1 and inputs:
            self._inherit_stats(inputs[0][1], outputs[0][1])
        self._write_tensors(name, "output", outputs, order, produced=True, enc=enc)

    def _inherit_stats(self, src: Any, dst: Any) -> None:
        """Give ``dst`` the statistics of ``src`` when it holds the same values rearranged (a view or copy)."""
        if dst is src or dst.numel() != src.numel() or dst.dtype != src.dtype:
            return
        stats = self.memo.stats(src)
        if stats is not None:
            self.memo.note_stats(dst, stats)

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
        enc = self._encode(name)
        self._write_tensors(name, "input", inputs, order, snapshot=snapshot, enc=enc)
        self._write_tensors(name, "output", outputs, order, enc=enc)
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
        enc: EncodedOp | None = None,
    ) -> None:
        if not tensors:
            return
        if enc is None:
            enc = self._encode(name)
        tensor_mode = self._tensor_mode
        links = tensor_mode and self.writer.can_link()  # a record of values saved before: a hard link
        prefer_module = name.kind == "module"
        memo = self.memo
        add = self.writer.add
        step, rank, op = self.step, self.opt.rank, name.op
        dtypes = self._dtypes
        for slot, t in tensors:
            tname = f"{op}.{role}.{slot}"
            entry = memo.get(t)
            if edges_to is not None and entry is not None:
                src = (entry.module_name or entry.api_name) if prefer_module else (entry.api_name or entry.module_name)
                if src is not None:
                    self._write_edge(src, edges_to, slot)
            owned = False
            same_as = array = None
            if snapshot is not None and slot in snapshot:
                stats, array = snapshot[slot]
                owned = True
            else:
                stats = entry.stats if entry is not None and entry.version == t._version else None
                if tensor_mode:
                    if entry is not None and links:
                        same_as = memo.payload_file(t, MAX_LINKS)
                    if same_as is None:
                        array = self.arrays.payload(t)
            if stats is None:
                stats = self._stats(t)
            dtype = dtypes.get(t.dtype) or self._dtype_name(t.dtype)
            file = add(
                tname,
                step,
                rank,
                order,
                enc,
                role,
                slot,
                dtype,
                tuple(t.shape),
                t.numel(),
                stats,
                array,
                owned,
                same_as,
            )
            if links and file is not None and same_as is None and not owned:
                memo.note_file(t, file)
            if produced or entry is None or entry.stats is None:
                entry = memo.put(t)
                entry.version = t._version
                entry.stats = stats
            if produced:
                if prefer_module:
                    entry.module_name = tname
                else:
                    entry.api_name = tname

    def _dtype_name(self, dtype: Any) -> str:
        name = self._dtypes.get(dtype)
        if name is None:
            name = self._dtypes[dtype] = self.arrays.dtype_name(dtype)
        return name

    def _stats(self, t: Any) -> EncodedStats:
        try:
            stats = self.stats(t)
        except (RuntimeError, TypeError, NotImplementedError):  # meta/sparse/quantized tensors
            stats = None
        return encode_stats(stats)

    def _structure(self, node: str, parent: str | None) -> None:
        if node not in self._written_nodes:
            self._written_nodes.add(node)
            self.lines.module(node, parent)

    def _stack_key(self, frame: Any) -> StackKey:
        """The user frames from ``frame`` outwards: the walk ends at the innermost running module's caller."""
        assert self.opt.stacks is not None
        top = self.module_stack[-1] if self.module_stack else None
        if top is None or top.call_frame is None:
            return self.opt.stacks.key(frame)
        return self.opt.stacks.key(frame, top.call_frame, top.stack_key)

    def _write_stack(self, op: str, key: StackKey | None = None) -> None:
        """Write ``op``'s call stack once: ``key``, or the current stack's."""
        if self.opt.stacks is not None and op not in self._written_stacks:
            self._written_stacks.add(op)
            if key is None:
                key = self._stack_key(sys._getframe(1))
            self.lines.stack(op, self.opt.stacks.text(key))

    def _write_edge(self, src: str, dst_op: str, slot: str) -> None:
        key = (src, dst_op, slot)
        if key not in self._written_edges:
            self._written_edges.add(key)
            self.lines.edge(src, dst_op, slot)

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

        self.watches.watch(edges, outputs, report, aliases, name.op_type in SAME_VALUES)

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
            enc = self._encode(name)
            if self._keeps_gradients:
                self._write_kept(name, "input", inputs, order, enc)
                self._write_kept(name, "output", outputs, order, enc)
            else:
                self._write_tensors(name, "input", inputs, order, enc=enc)
                self._write_tensors(name, "output", outputs, order, enc=enc)

    def _write_kept(
        self, name: OpName, role: str, kept: list[tuple[str, KeptGradient]], order: int, enc: EncodedOp
    ) -> None:
        add = self.writer.add
        step, rank, op = self.step, self.opt.rank, name.op
        for slot, g in kept:
            add(f"{op}.{role}.{slot}", step, rank, order, enc, role, slot, g.dtype, g.shape, g.numel, g.stats)
