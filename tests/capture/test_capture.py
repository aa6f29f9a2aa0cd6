"""Capture of the tiny demo encoder: dumps open, names line up, statistics, edges, hierarchy, stacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nbprec
from nbprec.stats import STAT_COLUMNS, tensor_stats

from .conftest import capture_tiny

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def test_both_dumps_open_and_names_line_up(tiny_dumps: dict[str, Path]) -> None:
    fp32, fp16 = nbprec.open(tiny_dumps["float32"]), nbprec.open(tiny_dumps["float16"])
    assert fp32.format == fp16.format == "nbprec"
    assert fp32.meta["finished"] and fp16.meta["finished"]
    assert len(fp32.problems) == len(fp16.problems) == 0
    assert set(fp32.names) == set(fp16.names)
    forward = [d.ops().query("direction == 'forward'")["op"].tolist() for d in (fp32, fp16)]
    assert forward[0] == forward[1]
    assert set(fp16.index.query("role == 'output' and op_type == 'linear'")["dtype"]) == {"float16"}
    ops = set(fp32.ops()["op"])
    for expected in (
        "Functional.linear.0.forward",
        "Functional.linear.0.backward",
        "Functional.layer_norm.0.forward",
        "Functional.softmax.0.forward",
        "Tensor.transpose.0.forward",
        "Torch.matmul.0.forward",
        "Module.layers.0.ff1.Linear.forward.0",
        "Module.layers.0.ff1.Linear.backward.0",
        "Module.TinyEncoder.forward.0",
    ):
        assert expected in ops


def test_statistics_agree_with_saved_tensors(tiny_dumps: dict[str, Path]) -> None:
    for path in tiny_dumps.values():
        dump = nbprec.open(path)
        assert dump.index["has_data"].all()
        for _, row in dump.index.iterrows():
            array = dump.tensor(row)
            assert tuple(array.shape) == tuple(row["shape"])
            expected = tensor_stats(array)
            for column in STAT_COLUMNS:
                if expected[column] is None:
                    assert np.isnan(row[column]), (row["name"], column)
                else:
                    assert row[column] == pytest.approx(expected[column], rel=1e-9, abs=1e-12), (row["name"], column)


def test_statistics_mode_matches_tensor_mode(tmp_path: Path, tiny_dumps: dict[str, Path]) -> None:
    stats = nbprec.open(capture_tiny(tmp_path / "stats", "float32", mode="statistics"))
    full = nbprec.open(tiny_dumps["float32"])
    assert not stats.index["has_data"].any()
    assert stats.meta["mode"] == "statistics"
    merged = stats.index.merge(full.index, on="name", suffixes=("_s", "_t"))
    assert len(merged) == len(full.index) == len(stats.index)
    for column in ("mean", "std", "norm", "min", "max", "zero_count"):
        np.testing.assert_allclose(merged[f"{column}_s"], merged[f"{column}_t"], rtol=1e-12)


def test_dataflow_edges_reproduce_the_wiring(tiny_dumps: dict[str, Path]) -> None:
    dump = nbprec.open(tiny_dumps["float32"])
    edges = set(dump.edges.itertuples(index=False, name=None))
    ops = dump.ops().set_index("op")
    # every edge runs from an earlier op's output tensor to a later op
    for src, dst_op, _ in edges:
        src_row = dump.row(src)
        assert src_row["role"] == "output" and src_row["direction"] == "forward"
        assert ops.loc[src_row["op"], "order"] < ops.loc[dst_op, "order"]
    # layer 0's feed-forward: ff1's linear output is the GELU's input, whose output is ff2's linear input
    ff1 = dump.index.query("module == 'layers.0.ff1' and op_type == 'linear' and direction == 'forward'")["op"].iloc[0]
    ff2 = dump.index.query("module == 'layers.0.ff2' and op_type == 'linear' and direction == 'forward'")["op"].iloc[0]
    assert (f"{ff1}.output.0", "Functional.gelu.0.forward", "0") in edges
    assert ("Functional.gelu.0.forward.output.0", ff2, "0") in edges
    # module level: layer 0's output feeds layer 1
    assert ("Module.layers.0.EncoderLayer.forward.0.output.0", "Module.layers.1.EncoderLayer.forward.0", "0") in edges
    # the residual: the attention block's add consumes the layer input (embedding sum) and the attention output
    add_inputs = {(s, slot) for s, d, slot in edges if d == "Tensor.add.1.forward"}
    assert ("Tensor.add.0.forward.output.0", "0") in add_inputs


def test_from_torch_import_relu_is_captured(tiny_dumps: dict[str, Path]) -> None:
    dump = nbprec.open(tiny_dumps["float32"])
    relu = dump.index.query("op == 'Torch.relu.0.forward'")
    assert set(relu["role"]) == {"input", "output"}
    head1 = dump.index.query("module == 'head1' and op_type == 'linear' and role == 'output'")["name"].iloc[0]
    assert (head1, "Torch.relu.0.forward", "0") in set(dump.edges.itertuples(index=False, name=None))
    assert "Torch.relu.0.backward" in set(dump.ops()["op"])


def test_module_hierarchy(tiny_dumps: dict[str, Path]) -> None:
    h = nbprec.open(tiny_dumps["float32"]).hierarchy
    assert h["Module.TinyEncoder.forward.0"] is None
    assert h["Module.layers.0.EncoderLayer.forward.0"] == "Module.TinyEncoder.forward.0"
    assert h["Module.layers.0.attn.SelfAttention.forward.0"] == "Module.layers.0.EncoderLayer.forward.0"
    assert h["Functional.softmax.0.forward"] == "Module.layers.0.attn.SelfAttention.forward.0"
    assert h["Functional.gelu.0.forward"] == "Module.layers.0.EncoderLayer.forward.0"
    assert h["Functional.gelu.0.backward"] == "Module.layers.0.EncoderLayer.backward.0"


def test_user_call_stacks(tiny_dumps: dict[str, Path]) -> None:
    stacks = nbprec.open(tiny_dumps["float32"]).stacks
    frames = stacks["Torch.relu.0.forward"]
    assert "relu(self.head1(pooled))" in frames[-1] and "tiny.py" in frames[-1]
    torch_dir = str(Path(torch.__file__).parent)
    for op_frames in stacks.values():
        assert not any(torch_dir in f or "nbprec/capture" in f for f in op_frames)


def _user_frames() -> list[tuple[str, int, str]]:
    """This file's frames of the current stack, outermost first, without this function's own."""
    import traceback

    return [(f.filename, f.lineno, f.name) for f in traceback.extract_stack()[:-1] if f.filename == __file__]


@pytest.mark.parametrize("max_stacks", [None, 1])
def test_stacks_inside_nested_modules_match_a_full_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_stacks: int | None
) -> None:
    """An op's stack is walked only up to the module call it runs in (the rest is that call's stack): the
    stacks written must be those of a full walk, through nested modules, helper functions and recursion.
    With ``max_stacks`` 1 the collector's caches are emptied at every new stack, while module calls that
    hold keys are running: the stacks must not change."""
    from nbprec.capture import capture
    from nbprec.capture.stacks import StackCollector

    if max_stacks is not None:
        monkeypatch.setattr(StackCollector, "MAX_STACKS", max_stacks)

    seen: dict[str, list[tuple[str, int, str]]] = {}

    class Inner(torch.nn.Module):
        def forward(self, x: torch.Tensor, depth: int) -> torch.Tensor:
            if depth:
                return self.forward(x, depth - 1)  # recursion inside one module call
            seen.setdefault("inner", _user_frames())
            return torch.tanh(x)

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()

        def helper(self, x: torch.Tensor) -> torch.Tensor:
            seen.setdefault("helper", _user_frames())
            return torch.sigmoid(self.inner(x, 2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.setdefault("outer", _user_frames())
            return torch.relu(self.helper(x))

    def run(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x).sum()

    model = Outer()
    with capture(model, tmp_path / "run", mode="statistics"):
        run(model, torch.ones(3))
    stacks = nbprec.open(tmp_path / "run").stacks

    def expected(frames: list[tuple[str, int, str]], call: str) -> None:
        got = [f for f in stacks[call] if f.startswith(f'File "{__file__}"')]  # pytest's frames are user frames too
        assert len(got) == len(frames), (call, got)
        for text, (filename, line, name) in zip(got[:-1], frames[:-1], strict=False):
            assert text.startswith(f'File "{filename}", line {line}, in {name}'), (call, text)
        # the innermost frame: the op's own line, in the function that recorded the reference
        assert got[-1].startswith(f'File "{frames[-1][0]}"') and f"in {frames[-1][2]}" in got[-1]

    expected(seen["inner"], "Torch.tanh.0.forward")
    expected(seen["helper"], "Torch.sigmoid.0.forward")
    expected(seen["outer"], "Torch.relu.0.forward")
    assert "torch.tanh(x)" in stacks["Torch.tanh.0.forward"][-1]
    assert "return torch.relu(self.helper(x))" in stacks["Torch.relu.0.forward"][-1]


def test_captures_share_stack_caches_and_see_edited_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Captures in one process share a stack collector (its caches stay warm), yet a module edited and
    reloaded between two captures gets its new source lines in the second dump's stacks."""
    import importlib
    import sys

    from nbprec.capture import capture
    from nbprec.capture.stacks import StackCollector

    source = tmp_path / "edited_model.py"
    body = "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return torch.tanh(x)  # {}\n"
    source.write_text(body.format("first version"))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("edited_model")
    monkeypatch.setitem(sys.modules, "edited_model", module)
    skip = [str(Path(torch.__file__).parent), str(Path(nbprec.__file__).parent / "capture")]
    shared = StackCollector.shared(skip)  # the collector every capture of this process uses
    known = shared.text(shared.key(sys._getframe()))  # a stack it has formatted, and must still know after
    model = module.M()
    with capture(model, tmp_path / "one", mode="statistics", backward=False):
        model(torch.ones(2))
    assert len(shared._json) >= 2 and known in shared._json.values()  # the capture's stacks went to it too
    source.write_text(body.format("second, longer version of the line"))
    module = importlib.reload(module)
    model = module.M()
    with capture(model, tmp_path / "two", mode="statistics", backward=False):
        model(torch.ones(2))
    first = nbprec.open(tmp_path / "one").stacks["Torch.tanh.0.forward"][-1]
    second = nbprec.open(tmp_path / "two").stacks["Torch.tanh.0.forward"][-1]
    assert first.endswith("# first version") and second.endswith("# second, longer version of the line")
    assert StackCollector.shared(list(skip)) is shared
    assert StackCollector.shared(skip, limit=5) is not StackCollector.shared(skip)


def test_backward_gradients_are_the_ops_own(tmp_path: Path) -> None:
    from nbprec.capture import capture
    from nbprec.demo.tiny import build_tiny, train_step

    model, ids, labels = build_tiny("float32")
    with capture(model, tmp_path / "run", mode="tensor", level="apis"):
        train_step(model, ids, labels)
    dump = nbprec.open(tmp_path / "run")
    ff1 = dump.index.query("module == 'layers.0.ff1' and op_type == 'linear'")["op"].iloc[0]
    bwd = ff1.replace(".forward", ".backward")
    np.testing.assert_array_equal(dump.tensor(f"{bwd}.output.1"), model.layers[0].ff1.weight.grad.numpy())
    np.testing.assert_array_equal(dump.tensor(f"{bwd}.output.2"), model.layers[0].ff1.bias.grad.numpy())
    # the gradient a consumer receives equals the one its producer's output got (single consumer)
    np.testing.assert_array_equal(
        dump.tensor("Functional.gelu.0.backward.output.0"),
        dump.tensor(f"{bwd}.input.0"),
    )
    # per-consumer: layer 0's output goes only to layer 1's attention block, whose residual add gets it too
    total = dump.tensor("Functional.layer_norm.1.backward.input.0").astype(np.float64)
    assert np.isfinite(total).all()


def _multi_output_and_view_step(path: Path, mode: str) -> tuple[Any, Any, Any, Any, Any]:
    import torch

    from nbprec.capture import capture

    x = torch.linspace(-2.0, 3.0, 24).reshape(4, 6).requires_grad_()
    z = torch.linspace(0.5, 1.5, 12).requires_grad_()
    with capture(None, path, mode=mode, level="apis"):
        var, mean = torch.var_mean(x, dim=1)
        var.retain_grad()
        mean.retain_grad()
        flat = z.view(3, 4)
        flat.retain_grad()
        _, only_mean = torch.var_mean(flat, dim=0)
        loss = (var * torch.arange(4.0)).sum() + (mean**2).sum() + (only_mean * 3.0).sum()
        loss.backward()
    return x, z, var, mean, flat


def test_backward_of_multi_output_and_rearranging_ops(tmp_path: Path) -> None:
    # var_mean makes one autograd node with two outputs (one hook sees both sides); view's gradient holds the
    # values of the gradient it received (its statistics are reused); an output nothing uses gets no record
    x, z, var, mean, flat = _multi_output_and_view_step(tmp_path / "run", "tensor")
    dump = nbprec.open(tmp_path / "run")
    vm = "Torch.var_mean.0.backward"
    np.testing.assert_array_equal(dump.tensor(f"{vm}.input.0"), var.grad.numpy())
    np.testing.assert_array_equal(dump.tensor(f"{vm}.input.1"), mean.grad.numpy())
    np.testing.assert_array_equal(dump.tensor(f"{vm}.output.0"), x.grad.numpy())
    names = set(dump.index["name"])
    assert "Torch.var_mean.1.backward.input.1" in names and "Torch.var_mean.1.backward.input.0" not in names
    np.testing.assert_array_equal(dump.tensor("Torch.var_mean.1.backward.output.0"), flat.grad.numpy())
    np.testing.assert_array_equal(dump.tensor("Tensor.view.0.backward.output.0"), z.grad.numpy())
    # statistics mode keeps each gradient's statistics when its hook fires: the same as the payloads'
    _multi_output_and_view_step(tmp_path / "stats", "statistics")
    kept = nbprec.open(tmp_path / "stats").index.set_index("name")
    backward = sorted(n for n in names if ".backward." in n)
    assert backward == sorted(n for n in kept.index if ".backward." in n)
    for name in backward:
        expected = tensor_stats(dump.tensor(name))
        for column in ("min", "max", "mean", "norm", "zero_count"):
            assert kept.loc[name, column] == pytest.approx(expected[column], rel=1e-12), (name, column)
        assert tuple(kept.loc[name, "shape"]) == dump.tensor(name).shape, name


@pytest.mark.parametrize("mode", ["statistics", "tensor"])
def test_an_output_without_gradient_of_a_multi_output_op(tmp_path: Path, mode: str) -> None:
    # autograd calls a tensor hook with None for an output of a several-output node that got no gradient; the
    # watch of an op returning that output as is (x.float() on float32) must not fail the user's backward
    import torch

    from nbprec.capture import capture

    x = torch.linspace(0.5, 1.5, 12).reshape(3, 4).requires_grad_()
    with capture(None, tmp_path / "run", mode=mode, level="apis"):
        var, mean = torch.var_mean(x, dim=0)
        assert var.float() is var
        (mean * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((3, 4), 2.0 / 3.0), rtol=1e-6)
    index = nbprec.open(tmp_path / "run").index.set_index("name")
    backward = {n for n in index.index if ".backward." in n}
    assert not any(n.startswith("Tensor.float.") for n in backward)
    assert {"Torch.var_mean.0.backward.input.1", "Torch.var_mean.0.backward.output.0"} <= backward
    assert "Torch.var_mean.0.backward.input.0" not in backward
    assert index.loc["Torch.var_mean.0.backward.output.0", "mean"] == pytest.approx(2.0 / 3.0, rel=1e-6)


def _branchy_step(path: Path, mode: str) -> Any:
    import torch

    from nbprec.capture import capture

    torch.manual_seed(0)
    a, b = torch.nn.Linear(6, 6), torch.nn.Linear(6, 6)
    model = torch.nn.ModuleDict({"a": a, "b": b})
    x = torch.randn(5, 6, requires_grad=True)

    class Branchy(torch.nn.Module):  # its input feeds three branches: gradients summed per input slot
        def forward(self, h):
            return a(h) + b(h) + h * h  # (and h * h sends two gradients to one tensor)

    branchy = Branchy()
    model["branchy"] = branchy
    with capture(model, path, mode=mode):
        branchy(x).square().sum().backward()
    return x


def test_statistics_of_summed_gradients_match_the_payloads(tmp_path: Path) -> None:
    x = _branchy_step(tmp_path / "tensor", "tensor")
    _branchy_step(tmp_path / "stats", "statistics")
    payloads = nbprec.open(tmp_path / "tensor")
    # x reaches nothing but the module: the gradient the module sends it, summed over three branches, is x.grad
    np.testing.assert_allclose(payloads.tensor("Module.branchy.Branchy.backward.0.output.0"), x.grad.numpy(), rtol=1e-6)
    kept = nbprec.open(tmp_path / "stats").index.set_index("name")
    backward = sorted(n for n in payloads.index["name"] if ".backward." in n)
    assert backward == sorted(n for n in kept.index if ".backward." in n)
    assert "Module.branchy.Branchy.backward.0.output.0" in backward and "Tensor.mul.0.backward.output.1" in backward
    for name in backward:
        expected = tensor_stats(payloads.tensor(name))
        scale = expected["norm"] or 1.0
        for column in ("min", "max", "mean", "norm"):
            assert abs(kept.loc[name, column] - expected[column]) <= 1e-12 * scale, (name, column)


def _stolen_biases(run_step) -> dict[str, bool]:
    """For each Linear bias of the tiny model: whether its .grad is the tensor autograd sent it (not a clone).

    A pre-hook on the bias's AccumulateGrad node notes the incoming gradient's address (an int: it holds no
    reference); AccumulateGrad steals that tensor unless something else still holds it.
    """

    from nbprec.demo.tiny import build_tiny, train_step

    model, ids, labels = build_tiny("float32")
    arriving: dict[str, int] = {}
    handles = []
    for name, p in model.named_parameters():
        if name.endswith(".bias") and p.dim() == 1:
            node = p.view_as(p).grad_fn.next_functions[0][0]  # the AccumulateGrad node

            def note(grads, name=name):
                arriving[name] = grads[0].data_ptr()

            handles.append((node, node.register_prehook(note)))  # (the node lives only while held)
    run_step(model, lambda: train_step(model, ids, labels))
    for _, handle in handles:
        handle.remove()
    params = dict(model.named_parameters())
    return {name: params[name].grad.data_ptr() == ptr for name, ptr in arriving.items()}


def test_statistics_capture_lets_autograd_reuse_gradients(tmp_path: Path) -> None:
    # holding gradients until a watch reports made AccumulateGrad clone them (73 copies a MiniLM step)
    from nbprec.capture import capture

    def plain(model, step):
        step()

    def captured(model, step):
        with capture(model, tmp_path / "run", mode="statistics"):
            step()

    expected = _stolen_biases(plain)
    assert len(expected) >= 4 and all(expected.values())  # the premise: without a capture, every one is stolen
    assert _stolen_biases(captured) == expected
    assert len(nbprec.open(tmp_path / "run").index.query("name.str.contains('backward')")) > 100


def test_model_checking_isinstance_of_submodules_works(tmp_path: Path) -> None:
    from nbprec.capture import capture
    from nbprec.demo.tiny import EncoderLayer, build_tiny

    model, ids, _ = build_tiny("float32")
    with capture(model, tmp_path / "run"):
        assert type(model.layers[0]) is EncoderLayer
        out = model(ids)
    assert out.shape == (4, 3)
    assert all(type(layer) is EncoderLayer for layer in model.layers)


def test_a_module_and_its_op_share_a_node_across_micro_batches(tmp_path: Path) -> None:
    """A Linear module and the linear op inside it end at the same autograd node, which one registered hook serves
    for both; the second micro-batch's graph may take the addresses of the first's freed nodes. Every call still
    gets its own gradients, parameters' included (leaf inputs are known by their tensor)."""
    from nbprec.capture import capture

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    weights = []
    with capture(model, tmp_path / "run", mode="tensor", level="both"):
        for _ in range(2):
            model(torch.randn(5, 4)).pow(2).sum().backward()
            weights.append(model[0].weight.grad.clone())
    dump = nbprec.open(tmp_path / "run")
    own = [weights[0], weights[1] - weights[0]]
    for call in range(2):
        pairs = [
            (f"Functional.linear.{2 * call + 1}.backward", f"Module.2.Linear.backward.{call}"),
            (f"Torch.tanh.{call}.backward", f"Module.1.Tanh.backward.{call}"),
        ]
        for api, module in pairs:
            for role in ("input", "output"):
                np.testing.assert_array_equal(dump.tensor(f"{api}.{role}.0"), dump.tensor(f"{module}.{role}.0"))
        weight = dump.tensor(f"Functional.linear.{2 * call}.backward.output.1")
        np.testing.assert_allclose(weight, own[call].numpy(), rtol=1e-5, atol=1e-6)


def test_removing_a_nodes_last_hook_removes_its_registered_hook() -> None:
    """NodeHooks registers one hook per node and drops it with the node's last hook (found by identity, which
    holds where the module is compiled too)."""
    from nbprec.capture.backward import NodeHooks

    x = torch.ones(3, requires_grad=True)
    y = (x * 2).sum()
    hooks, fired = NodeHooks(), []
    first = hooks.add(y.grad_fn, lambda gi, go: fired.append("a"))
    second = hooks.add(y.grad_fn, lambda gi, go: fired.append("b"))
    hooks.remove(first)
    y.backward(retain_graph=True)
    assert fired == ["b"]
    hooks.remove(second)
    assert not hooks._on  # the entry went with its last hook
    y.backward(retain_graph=True)
    assert fired == ["b"]  # and the registered hook with it


def test_a_shared_node_hook_is_known_dead_with_its_node() -> None:
    """Entries of NodeHooks are keyed by the node's id: one whose node died must read as dead, so that a new node
    at the same address gets a hook of its own."""
    from nbprec.capture.backward import NodeHooks, _alive

    x = torch.ones(3, requires_grad=True)
    y = (x * 2).sum()
    hooks, fired = NodeHooks(), []
    first = hooks.add(y.grad_fn, lambda gi, go: fired.append("a"))
    second = hooks.add(y.grad_fn, lambda gi, go: fired.append("b"))
    assert first[1] is second[1] and _alive(first[1][0])  # one registered hook for both
    hooks.remove(second)
    y.backward(retain_graph=True)
    assert fired == ["a"]
    del y
    assert not _alive(first[1][0])
    z = (x * 3).sum()
    third = hooks.add(z.grad_fn, lambda gi, go: fired.append("c"))
    assert third[1] is not first[1]
    z.backward()
    assert fired == ["a", "c"]
    hooks.clear()
