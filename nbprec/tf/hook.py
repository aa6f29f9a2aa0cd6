"""The TensorFlow op callback that sees every op output: eager ops when they run, graph ops when traced.

TensorFlow calls an op callback (``tensorflow.python.framework.op_callbacks``, the mechanism tfdbg2 is built
on) after every eager op with its output tensors, and while a ``tf.function`` is traced with each new graph
op's symbolic outputs. :class:`OpDumpHook` handles both:

- **eager**: the outputs are concrete; when the :class:`~nbprec.tf.api.Dumper` is armed they are copied to
  numpy and written at once. The op is named ``{name scope}/{op type}`` (TF gives eager ops no names).
- **graph**: for each traced op it adds one ``tf.py_function`` node reading the op's outputs. The node is
  stateful, so TF's automatic control dependencies make it run in every call of the function and chain it
  after the previous stateful op (graph creation order, a topological order): the debug nodes run in a fixed
  order and the tensors are written in it. The node returns nothing and replaces no output, so the
  computation is unchanged; when the dumper is not armed it returns at once.

A function's arguments (Placeholders) are made before TF tracks side effects in the function body, so their
debug node is made with the body's first dumped op. Graphs traced before the hook was installed are not
instrumented; a function that runs while armed without any of its ops being dumped is reported. Ops that
cannot be dumped are reported with the reason.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

#: Ops not instrumented inside graphs, with the reason (they stay listed in the dump's report).
_CALL_REASON = "control-flow or function-call op: its outputs come from ops inside the called function, dumped there"
SKIPPED_GRAPH_OPS: dict[str, str] = {
    "Identity": (
        "Identity in a tf.function: equals its input, which is dumped (TF routes function results through "
        "Identity ops that run after every side effect, so a debug op reading them would form a cycle; "
        "tfdbg2 skips them too)"
    ),
    **dict.fromkeys(
        (
            "If",
            "StatelessIf",
            "While",
            "StatelessWhile",
            "Case",
            "StatelessCase",
            "PartitionedCall",
            "StatefulPartitionedCall",
            "RemoteCall",
        ),
        _CALL_REASON,
    ),
    **dict.fromkeys(
        ("Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"),
        "TF1 control-flow op: its outputs cannot be read by an added op",
    ),
    "DestroyResourceOp": "releases a resource: nothing to dump",
}
#: Name prefixes of the functions TF runs as one eager "op" (their inner ops are dumped from the graph).
FUNCTION_PREFIXES = ("__inference_", "__forward_", "__backward_")
_NO_OUTPUTS = "no outputs (a side effect such as a variable update): nothing to dump"
_XLA = (
    "function compiled with XLA (jit_compile=True): XLA fuses and replaces its ops, so they cannot be read "
    "one by one; compile it with jit_compile=False to dump them"
)
_DATASET = "tf.data pipeline function: not dumped (it runs on tf.data's threads, outside the training step)"
_TF1_GRAPH = "TF1 graph (tf.compat.v1 / Session): not supported, run the model in TF2 eager or tf.function"
_NO_ACD = (
    "created outside TF's automatic control dependencies (not in a tf.function body): a debug op reading it "
    "would never run"
)


class DumpSink(Protocol):
    """What the hook hands tensors to (:class:`nbprec.tf.api.Dumper`)."""

    armed: bool

    def write_op(
        self,
        owner: object,
        op_name: str,
        op_type: str,
        graph: str,
        outputs: Sequence[tuple[int, Any]],
        tf_name: str | None = None,
    ) -> None: ...

    def skip(self, tensor: str, op_type: str, graph: str, reason: str, *, traced: bool = False) -> None: ...


def dtype_problem(dtype: Any) -> str | None:
    """Why outputs of the TF dtype ``dtype`` cannot be dumped as ``.npy``, or None."""
    name = dtype.name
    if name == "resource":
        return "resource handle (a variable or another stateful object), not a value"
    if name == "variant":
        return "variant tensor (a TensorList, dataset, optional...): no array value"
    if name == "string":
        return "string tensor: its .npy form would be a pickle, which nbprec never writes or reads"
    if name.endswith("_ref"):
        return f"TF1 reference dtype {name}: not supported"
    if not dtype.is_numpy_compatible:
        return f"dtype {name} has no numpy form"
    return None


def to_numpy(tensor: Any) -> np.ndarray:
    """A host copy of an eager tensor; dtypes numpy's ``.npy`` cannot name (bfloat16, float8, int4) widened.

    bfloat16 and the float8 types become float32 and int4/uint4 become int32, exactly; the index keeps the
    TF dtype beside the saved one.
    """
    array = np.asarray(tensor.numpy())
    if array.dtype.kind == "V":  # an ml_dtypes type: .npy would store it as raw bytes
        floating = tensor.dtype.is_floating
        array = array.astype(np.float32 if floating else np.int32)
    return array


class OpDumpHook:
    """A TensorFlow op callback feeding a :class:`~nbprec.tf.api.Dumper` (see the module docstring).

    Parameters
    ----------
    tf
        The tensorflow module.
    sink
        The dumper: its ``armed`` flag says whether tensors are written now.
    """

    def __init__(self, tf: Any, sink: DumpSink) -> None:
        from tensorflow.python.framework.func_graph import FuncGraph
        from tensorflow.python.ops import control_flow_util

        self._tf = tf
        self.sink = sink
        self._func_graph = FuncGraph
        self._in_xla: Callable[[Any], bool] = control_flow_util.GraphOrParentsInXlaContext
        self._keys = itertools.count()
        # graph -> Placeholders (function arguments) seen before the body, dumped with its first op
        self._arguments: weakref.WeakKeyDictionary[Any, list[tuple[str, str, tuple[Any, ...], list[int]]]] = (
            weakref.WeakKeyDictionary()
        )
        #: debug nodes run so far (armed or not), to notice functions that ran without any
        self.graph_calls = 0
        self._calls_seen = 0

    def __call__(
        self,
        op_type: str,
        inputs: Sequence[Any],
        attrs: Any,
        outputs: Sequence[Any] | None,
        op_name: str | None = None,
        graph: Any = None,
    ) -> tuple[Any, ...] | None:
        if isinstance(op_type, bytes):  # eager executions name their op type in bytes
            op_type = op_type.decode("utf-8", "replace")
        try:
            if graph is None:
                self._eager(op_type, tuple(outputs or ()))
            elif outputs is None:  # an earlier callback (e.g. tfdbg2's) passed "unchanged" on as None
                self._instrument(op_type, self._outputs_by_name(graph, op_type, op_name), op_name, graph)
            else:
                self._instrument(op_type, tuple(outputs), op_name, graph)
        except Exception as exc:  # a dump problem must not stop the user's run; it is reported instead
            where = "eager" if graph is None else getattr(graph, "name", "graph")
            reason = str(exc) if isinstance(exc, LookupError) else f"nbprec could not handle this op: {exc!r}"
            self.sink.skip(op_name or op_type, op_type, where, reason, traced=graph is not None)
        # In graphs TF hands what a callback returns to the next one: return the outputs unchanged (not
        # None) so that a callback after this one (tfdbg2's) still sees them. Eager results are ignored.
        return None if outputs is None else tuple(outputs)

    @staticmethod
    def _outputs_by_name(graph: Any, op_type: str, op_name: str | None) -> tuple[Any, ...]:
        """The outputs of the op just created as ``op_name``, found by name. Const and Placeholder ops are
        announced with the requested name, not the final one, so they are not looked up."""
        try:
            op = None if op_type in ("Const", "Placeholder") else graph.get_operation_by_name(op_name)
        except (KeyError, ValueError, TypeError):
            op = None
        if op is None or op.type != op_type:
            raise LookupError(
                "an op callback registered before nbprec's (tfdbg2's enable_dump_debug_info?) hid this op's "
                "outputs; start nbprec's dump first"
            )
        return tuple(op.outputs)

    # -- eager -----------------------------------------------------------------------------------------
    def _eager(self, op_type: str, outputs: tuple[Any, ...]) -> None:
        ran_inside, self._calls_seen = self.graph_calls - self._calls_seen, self.graph_calls
        if op_type.startswith(FUNCTION_PREFIXES):
            if self.sink.armed and ran_inside == 0:
                self.sink.skip(
                    op_type,
                    "function",
                    "eager",
                    "tf.function ran but none of its ops were dumped: it was probably traced before dumping "
                    "started (start dumping before its first call, or build a new tf.function)",
                )
            return
        if not self.sink.armed:
            return
        scope = self._tf.get_current_name_scope()
        name = f"{scope}/{op_type}" if scope else op_type
        if not outputs:
            self.sink.skip(name, op_type, "eager", _NO_OUTPUTS)
            return
        self.sink.write_op(object(), name, op_type, "eager", tuple(enumerate(outputs)))

    # -- graph -----------------------------------------------------------------------------------------
    def _instrument(self, op_type: str, outputs: tuple[Any, ...], op_name: str | None, graph: Any) -> None:
        graph_name = getattr(graph, "name", "graph")
        excluded = self._excluded(graph)
        if excluded is not None:
            self.sink.skip(graph_name, "graph", graph_name, excluded, traced=True)
            return
        name = outputs[0].op.name if outputs else (op_name or op_type)
        if not outputs:
            self.sink.skip(name, op_type, graph_name, _NO_OUTPUTS, traced=True)
            return
        reason = SKIPPED_GRAPH_OPS.get(op_type)
        if reason is not None:
            self.sink.skip(name, op_type, graph_name, reason, traced=True)
            return
        keep = []
        for slot, tensor in enumerate(outputs):
            problem = dtype_problem(tensor.dtype)
            if problem is None:
                keep.append(slot)
            else:
                self.sink.skip(f"{name}:{slot}", op_type, graph_name, problem, traced=True)
        if not keep:
            return
        if getattr(graph, "experimental_acd_manager", None) is None:
            # A function's arguments are made before TF starts tracking side effects in its body, so a debug
            # op made now would be pruned: it is made with the body's first dumped op instead.
            if op_type == "Placeholder":
                self._arguments.setdefault(graph, []).append((name, op_type, outputs, keep))
            else:
                self.sink.skip(name, op_type, graph_name, _NO_ACD, traced=True)
            return
        for argument in self._arguments.pop(graph, ()):
            self._add_debug_node(graph, graph_name, argument[1], argument[0], argument[2], argument[3])
        self._add_debug_node(graph, graph_name, op_type, name, outputs, keep)

    def _excluded(self, graph: Any) -> str | None:
        if not isinstance(graph, self._func_graph):
            return _TF1_GRAPH
        g = graph
        while g is not None:
            if getattr(g, "name", "").startswith("Dataset_"):
                return _DATASET
            g = getattr(g, "outer_graph", None)
        if self._in_xla(graph):
            return _XLA
        return None

    def _dump_name(self, graph: Any, name: str) -> str:
        """Node names of a tf.function called from another one get the call site's name scope in front
        (``blk/Relu``); control-flow branches already carry it."""
        outer = getattr(graph, "outer_graph", None)
        if type(graph) is self._func_graph and isinstance(outer, self._func_graph):
            scope = outer.get_name_scope()
            if scope:
                return f"{scope}/{name}"
        return name

    def _add_debug_node(
        self, graph: Any, graph_name: str, op_type: str, name: str, outputs: tuple[Any, ...], keep: list[int]
    ) -> None:
        key = next(self._keys)
        dump_name = self._dump_name(graph, name)
        slots = tuple(keep)
        sink = self.sink
        hook = self

        def debug(*tensors: Any) -> list[Any]:
            hook.graph_calls += 1
            if sink.armed:
                sink.write_op(key, dump_name, op_type, graph_name, tuple(zip(slots, tensors, strict=True)), name)
            return []

        self._tf.py_function(debug, [outputs[s] for s in slots], Tout=[], name="nbprec_dump")


__all__ = ["FUNCTION_PREFIXES", "SKIPPED_GRAPH_OPS", "DumpSink", "OpDumpHook", "dtype_problem", "to_numpy"]
