"""Gradients of one op call, seen through autograd hooks, without changing the model's tensors.

For a forward call we note, *before* it runs, the autograd edge of every input that requires grad. After
it ran, the autograd nodes the call created are the ones reachable from its outputs' ``grad_fn`` whose
sequence number is newer than every input's node. Node post-hooks then catch:

- the gradient arriving for each output (its node's ``grad_outputs``; a tensor hook for an output the call
  did not make, such as an input returned as is): the backward op's ``input`` slots;
- the gradient each of those nodes sends along an edge that leads to one of the call's inputs (its
  ``grad_inputs``): summed per input, these are the backward op's ``output`` slots. They are the gradients
  *this call* produced for its inputs, not the total a shared input receives from all its consumers.

A node that does both (most ops make a single node) gets one hook. A node several watches hook (a module
call and the op call inside it often end at the same node) carries one registered hook that calls each
watch's in turn (:class:`NodeHooks`): registering, firing and removing a hook costs torch about 10 us.

A leaf input (a parameter) is matched by the tensor itself, which its ``AccumulateGrad`` node holds as
``variable``: finding that node before the op runs would cost a throw-away view per parameter and step.

Each gradient is handed to the watches' ``take`` when its hook fires: in statistics mode the recorder's
:class:`~nbprec.capture.gradients.GradientKeeper`, which reads the record's fields, so that the watch does not
hold autograd's tensor while the pass goes on (a gradient held elsewhere is cloned by ``AccumulateGrad`` instead
of becoming the parameter's ``.grad``, and cannot be summed in place by autograd); else the tensor itself. Only
an input slot that receives several gradients keeps them, to sum them, until the watch reports.

When every hook has fired, the watch reports once and removes its hooks. Watches that never complete
(an output whose gradient is never needed) are reported by :meth:`BackwardWatches.flush`, which is queued to
run at the end of each backward pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:  # BackwardWatch._boundary's walk in C (nbprec/capture/_walks.c); without it, the Python loop
    from nbprec.capture._walks import graph_boundary as _c_boundary
except ImportError:
    _c_boundary = None

_LEAF_SEQ = 2**64 - 1  # AccumulateGrad nodes carry UINT64_MAX as their sequence number

GradReport = Callable[[dict[str, Any], dict[str, Any]], None]
#: ``take(gradient, like)``: what a watch keeps of a gradient; ``like``, when given, is what it kept of a
#: gradient holding the same values (a rearranging op's: its statistics may be reused).
Take = Callable[[Any, Any], Any]


def _keep(t: Any, like: Any = None) -> Any:
    """The default ``take``: the tensor itself."""
    return t


def input_edges(torch: Any, inputs: list[tuple[str, Any]]) -> list[tuple[str, Any, int]]:
    """``(slot, node, output_nr)`` of every input that requires grad; call before the op runs.

    A non-leaf input's edge is its ``grad_fn`` and ``output_nr``. A leaf's is ``(slot, tensor, LEAF)``: the
    walk of :meth:`BackwardWatch.attach` knows its ``AccumulateGrad`` node by the tensor it holds.
    """
    if not torch.is_grad_enabled():
        return []
    edges = []
    for slot, t in inputs:
        if t.requires_grad:
            node = t.grad_fn
            edges.append((slot, node, t.output_nr) if node is not None else (slot, t, LEAF))
    return edges


#: The ``output_nr`` of a leaf's edge in :func:`input_edges` (whose "node" is then the tensor itself).
LEAF = -1


def _dispatch(hooks: list[Callable[[Any, Any], None]]) -> Callable[[Any, Any], None]:
    def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
        for h in tuple(hooks) if len(hooks) > 1 else hooks:  # (a hook may remove itself)
            h(grad_inputs, grad_outputs)

    return hook


class NodeHooks:
    """One registered post-hook per autograd node, calling the hooks of every watch on it in the order added.

    Entries are keyed by the node's ``id``; one whose node has died (its hooks dict, which only the node holds,
    is gone) is replaced, so a recycled ``id`` never inherits another node's hooks. Where torch's handle does
    not say (``hooks_dict_ref``), every hook is registered on its own.
    """

    def __init__(self) -> None:
        # per node: [its registered hook's handle, the hooks it calls]; a list, not a tuple, so that remove() can
        # tell an entry by identity where the module is compiled (mypyc boxes a tuple afresh where it is read)
        self._on: dict[int, list[Any]] = {}

    def add(self, node: Any, hook: Callable[[Any, Any], None]) -> tuple[int, Any, Any]:
        """Call ``hook(grad_inputs, grad_outputs)`` after ``node`` runs; returns the token :meth:`remove` takes."""
        key = id(node)
        entry = self._on.get(key)
        if entry is None or not _alive(entry[0]):
            hooks: list[Callable[[Any, Any], None]] = []
            entry = self._on[key] = [node.register_hook(_dispatch(hooks)), hooks]
        entry[1].append(hook)
        return key, entry, hook

    def remove(self, token: tuple[int, Any, Any]) -> None:
        """Stop calling one hook; the node's registered hook goes with its last one."""
        key, entry, hook = token
        hooks = entry[1]
        hooks.remove(hook)
        if not hooks:
            entry[0].remove()
            if self._on.get(key) is entry:
                del self._on[key]

    def clear(self) -> None:
        """Remove every registered hook."""
        for handle, hooks in self._on.values():
            hooks.clear()
            handle.remove()
        self._on.clear()


def _alive(handle: Any) -> bool:
    """Whether the node of a hook handle is alive (the hooks dict it holds, and only it, still exists)."""
    ref = getattr(handle, "hooks_dict_ref", None)
    return ref is not None and ref() is not None


class BackwardWatch:
    """Hooks on the autograd sub-graph of one forward call; reports its gradients once.

    The hooks are node post-hooks wherever possible: one on each node of the call whose outputs are the
    call's outputs (their ``grad_outputs`` are the gradients arriving) or whose edges lead to the call's
    inputs (their ``grad_inputs`` are the gradients sent), one hook per node when a node is both, as it is
    for most ops. Only an output the call did not make (an input returned as is, a leaf) gets a tensor hook,
    which costs more.
    """

    def __init__(self, owner: BackwardWatches, report: GradReport, same_values: bool = False) -> None:
        self._owner = owner
        self._report = report
        self._take = owner.take
        self._same_values = same_values  # the call's output holds its input's values, rearranged (a view)
        self._handles: list[Any] = []  # tensor hooks' handles
        self._on_nodes: list[Any] = []  # node hooks' tokens (NodeHooks.add)
        self.grads_in: dict[str, Any] = {}  # gradient arriving per forward-output slot (taken)
        self.grads_out: dict[str, Any] = {}  # gradient produced per forward-input slot (taken, or summed)
        self._summed: set[str] = set()  # input slots with several gradients: tensors kept and summed
        self._waiting = 0  # hooks that have not fired yet
        self._done = False

    def attach(
        self, edges: list[tuple[str, Any, int]], outputs: list[tuple[str, Any]], aliases: dict[str, str] | None = None
    ) -> bool:
        """Register the hooks; False (and nothing registered) when no output takes part in autograd.

        ``aliases`` maps output slots that *are* an input (``x.float()`` on a float32 ``x`` returns ``x``) to
        that input's slot: the gradient passes through unchanged and is reported for both.
        """
        in_map: dict[tuple[int, int], list[str]] = {}
        threshold = -1
        leaves = False
        for slot, node, nr in edges:
            key = (id(node), nr)  # a leaf's: (id(tensor), LEAF)
            slots = in_map.get(key)
            if slots is None:
                in_map[key] = [slot]
            else:
                slots.append(slot)
            if nr == LEAF:
                leaves = True
                continue
            seq = node._sequence_nr()
            if seq > threshold:
                threshold = seq
        grad_slots = {slot for slot, _, _ in edges} if aliases else None
        made: dict[int, tuple[Any, dict[int, list[str]]]] = {}  # the call's own output nodes: output nr -> slots
        handles = self._handles
        senders: list[str] = []  # per gradient sent to an input slot: the slot (several: summed)
        for slot, t in outputs:
            if not t.requires_grad:
                continue
            node = t.grad_fn
            if node is not None and edges and node._sequence_nr() > threshold:
                entry = made.get(id(node))
                if entry is None:
                    entry = made[id(node)] = (node, {})
                entry[1].setdefault(t.output_nr, []).append(slot)
                continue
            alias = None
            if grad_slots:
                alias = aliases.get(slot)  # type: ignore[union-attr]
                if alias not in grad_slots:
                    alias = None
            if alias is not None:
                senders.append(alias)
            handles.append(t.register_hook(self._tensor_hook(slot, alias)))
        if not handles and not made:
            return False
        starts = [node for node, _ in made.values()]
        walk = _c_boundary if _c_boundary is not None else self._boundary
        boundary = walk(starts, in_map, threshold, leaves) if made and in_map else {}
        on_nodes = self._on_nodes
        node_hooks = self._owner.node_hooks
        for made_key, (node, received) in made.items():
            links = boundary.pop(made_key, (None, []))[1]
            on_nodes.append(node_hooks.add(node, self._node_hook(list(received.items()), links)))
            senders += [slot for _, slots in links for slot in slots]
        for node, links in boundary.values():
            on_nodes.append(node_hooks.add(node, self._node_hook([], links)))
            senders += [slot for _, slots in links for slot in slots]
        if len(senders) > len(set(senders)):
            self._summed = {slot for slot in senders if senders.count(slot) > 1}
        self._waiting = len(handles) + len(on_nodes)
        return True

    @staticmethod
    def _boundary(
        starts: list[Any], in_map: dict[tuple[int, int], list[str]], threshold: int, leaves: bool
    ) -> dict[int, tuple[Any, list[tuple[int, list[str]]]]]:
        """The call's nodes (newer than ``threshold``, reached from ``starts``) with edges to its inputs: per node,
        ``(node, [(edge index, input slots), ...])``. ``leaves``: ``in_map`` holds leaf inputs (by tensor). The
        same walk runs in C where nbprec's extensions are built."""
        boundary: dict[int, tuple[Any, list[tuple[int, list[str]]]]] = {}
        seen = {id(n) for n in starts}
        queue = list(starts)
        get = in_map.get
        while queue:
            node = queue.pop()
            k = -1
            for nxt, nr in node.next_functions:
                k += 1
                if nxt is None:
                    continue
                seq = nxt._sequence_nr()
                if seq != _LEAF_SEQ:
                    slots = get((id(nxt), nr))
                elif leaves:  # an AccumulateGrad node: a leaf input's, known by the tensor it holds
                    slots = get((id(nxt.variable), LEAF))
                else:
                    continue
                if slots is not None:
                    entry = boundary.get(id(node))
                    if entry is None:
                        entry = boundary[id(node)] = (node, [])
                    entry[1].append((k, slots))
                elif seq > threshold and seq != _LEAF_SEQ and id(nxt) not in seen:
                    seen.add(id(nxt))
                    queue.append(nxt)
        return boundary

    def _tensor_hook(self, slot: str, alias: str | None) -> Callable[[Any], None]:
        def hook(grad: Any) -> None:
            if not self._done:
                if grad is not None:  # (None: an output of a node with several that got no gradient)
                    taken = self.grads_in[slot] = self._take(grad, None)
                    if alias is not None:
                        self._send(alias, grad, kept=taken)
                self._fired()

        return hook

    def _send(self, slot: str, g: Any, kept: Any = None, like: Any = None) -> None:
        """Input ``slot`` got gradient ``g``; ``kept``: what was already taken of ``g`` itself; ``like``: what was
        taken of a gradient holding the same values."""
        if slot in self._summed:
            prev = self.grads_out.get(slot)
            self.grads_out[slot] = g if prev is None else prev + g
        elif kept is not None:
            self.grads_out[slot] = kept
        else:
            self.grads_out[slot] = self._take(g, like)

    def _node_hook(
        self, received: list[tuple[int, list[str]]], links: list[tuple[int, list[str]]]
    ) -> Callable[[Any, Any], None]:
        """A post-hook: ``received`` maps the node's outputs to the call's output slots, ``links`` its edges
        to the call's input slots."""

        def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
            if self._done:
                return
            grads_in = self.grads_in
            take = self._take
            for nr, slots in received:
                g = grad_outputs[nr] if nr < len(grad_outputs) else None
                if g is not None:
                    taken = take(g, None)
                    for slot in slots:
                        grads_in[slot] = taken
            like = next(iter(grads_in.values())) if self._same_values and len(grads_in) == 1 else None
            for k, slots in links:
                g = grad_inputs[k] if k < len(grad_inputs) else None
                if g is None:
                    continue
                for slot in slots:
                    self._send(slot, g, like=like)
            self._fired()

        return hook

    def _fired(self) -> None:
        self._waiting -= 1
        if self._waiting <= 0:
            self.finish()
        else:
            self._owner.touched(self)

    def finish(self) -> None:
        """Report (if any gradient arrived) and remove the hooks; idempotent."""
        if self._done:
            return
        self._done = True
        self.remove()
        self._owner.forget(self)
        for slot in self._summed.intersection(self.grads_out):
            self.grads_out[slot] = self._take(self.grads_out[slot], None)
        if self.grads_in or self.grads_out:
            self._report(self.grads_in, self.grads_out)

    def remove(self) -> None:
        """Remove every hook of this watch."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        remove = self._owner.node_hooks.remove
        for token in self._on_nodes:
            remove(token)
        self._on_nodes.clear()


class BackwardWatches:
    """The live watches of a capture: flushes incomplete ones at the end of each backward pass, and on exit."""

    def __init__(self, torch: Any, take: Take = _keep) -> None:
        self._torch = torch
        self.take = take  # what a watch keeps of each gradient (see the module docstring)
        self.node_hooks = NodeHooks()
        self._live: dict[int, BackwardWatch] = {}
        self._touched: dict[int, BackwardWatch] = {}
        self._flush_queued = False

    def input_edges(self, inputs: list[tuple[str, Any]]) -> list[tuple[str, Any, int]]:
        """:func:`input_edges` (the edges of a call's inputs, taken before it runs)."""
        return input_edges(self._torch, inputs)

    def watch(
        self,
        edges: list[tuple[str, Any, int]],
        outputs: list[tuple[str, Any]],
        report: GradReport,
        aliases: dict[str, str] | None = None,
        same_values: bool = False,
    ) -> BackwardWatch | None:
        """Watch one call's gradients; ``report(grads_in, grads_out)`` runs once they are known (what ``take``
        kept of each). ``same_values``: the call's output holds its input's values, rearranged."""
        w = BackwardWatch(self, report, same_values)
        if not w.attach(edges, outputs, aliases):
            return None
        self._live[id(w)] = w
        return w

    def touched(self, watch: BackwardWatch) -> None:
        """A hook of ``watch`` fired: make sure the end-of-pass flush is queued."""
        self._touched[id(watch)] = watch
        if not self._flush_queued:
            self._flush_queued = True
            try:
                self._torch.autograd.Variable._execution_engine.queue_callback(self.flush_touched)
            except RuntimeError:  # not inside a backward pass after all
                self._flush_queued = False

    def forget(self, watch: BackwardWatch) -> None:
        """Drop a finished watch."""
        self._live.pop(id(watch), None)
        self._touched.pop(id(watch), None)

    def flush_touched(self) -> None:
        """Report every watch that received gradients in this backward pass but did not complete."""
        self._flush_queued = False
        for w in list(self._touched.values()):
            w.finish()
        self._touched.clear()

    def flush(self) -> None:
        """Report watches that received any gradient; remove every hook (end of a step or of the capture)."""
        self._flush_queued = False
        pending = list(self._live.values())
        self._live.clear()
        self._touched.clear()
        for w in pending:
            if w.grads_in or w.grads_out:
                w.finish()
            else:
                w.remove()
        self.node_hooks.clear()

    def discard(self) -> None:
        """Remove every hook without reporting (after an error)."""
        for w in list(self._live.values()):
            w.remove()
        self.node_hooks.clear()
        self._live.clear()
        self._touched.clear()
        self._flush_queued = False
