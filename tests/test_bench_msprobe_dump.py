"""bench/msprobe_dump.py's msprobe configs: each ``--task`` asks msprobe for the dump it names. (The script runs in
the msprobe virtualenv that bench/compare.py makes; its configs are checked here without msprobe.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import bench_module

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def msprobe_dump():
    return bench_module("msprobe_dump")


@pytest.mark.parametrize(
    ("task", "msprobe_task", "summary_mode"),
    [("tensor", "tensor", None), ("statistics", "statistics", "statistics"), ("md5", "statistics", "md5")],
)
def test_each_task_is_the_msprobe_task_it_names(msprobe_dump, tmp_path, task, msprobe_task, summary_mode):
    config = msprobe_dump.dump_config(task, "mix", tmp_path)
    assert config["task"] == msprobe_task and config["level"] == "mix" and config["dump_path"] == str(tmp_path)
    assert config[msprobe_task]["data_mode"] == ["all"]
    assert config[msprobe_task].get("summary_mode") == summary_mode
    assert set(config) & {"tensor", "statistics"} == {msprobe_task}


def test_a_list_of_apis_goes_into_msprobes_list(msprobe_dump, tmp_path):
    config = msprobe_dump.dump_config("statistics", "L1", tmp_path, ["linear", "softmax"])
    assert config["statistics"]["list"] == ["linear", "softmax"] and config["statistics"]["scope"] == []
    assert msprobe_dump.dump_config("statistics", "L1", tmp_path)["statistics"]["list"] == []


def test_the_resnet_model_is_seeded_and_trains(msprobe_dump):
    # --model resnet, the held-out kind of convolutions and batch norm: the same weights from the same seed in both
    # runs' processes, and a training step through it (msprobe itself is not needed for that)
    torch = pytest.importorskip("torch")
    a, b = msprobe_dump.build_resnet(8, seed=4), msprobe_dump.build_resnet(8, seed=4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    kinds = {type(m).__name__ for m in a.modules()}
    assert {"Conv2d", "BatchNorm2d", "Linear"} <= kinds
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    logits = a.train()(x)
    assert logits.shape == (2, 10)
    torch.nn.functional.cross_entropy(logits, torch.tensor([1, 7])).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in a.parameters())


@pytest.mark.parametrize("model", ["transformer", "resnet", "rnn", "minilm"])
def test_every_model_runs_a_training_step_in_both_precisions(msprobe_dump, model):
    # each --model gives the same seeded weights and inputs in both runs' processes, and a loss to train on: the
    # float32 and bfloat16 runs of one step differ by bfloat16's rounding only
    torch = pytest.importorskip("torch")
    if model == "minilm":
        pytest.importorskip("transformers")
    args = msprobe_dump_args(model)
    losses = []
    for dtype in (torch.float32, torch.bfloat16):
        net, next_inputs, loss_of = msprobe_dump.build_run(args, dtype)
        assert all(p.dtype == dtype for p in net.parameters())
        inputs = next_inputs()
        loss = loss_of(net(**inputs) if isinstance(inputs, dict) else net(*inputs))
        loss.backward()
        assert loss.dtype == torch.float32 and torch.isfinite(loss)
        assert all(p.grad is None or torch.isfinite(p.grad).all() for p in net.parameters())
        losses.append(float(loss.detach()))
    assert losses[0] != losses[1] and abs(losses[0] - losses[1]) < 0.05 * abs(losses[0]) + 1e-3


def test_checkpointing_computes_the_same_step(msprobe_dump):
    # --checkpoint: each block's forward runs again in the backward pass; the step's loss and gradients are the same
    torch = pytest.importorskip("torch")
    results = []
    for checkpoint in (False, True):
        args = msprobe_dump_args("transformer", checkpoint=checkpoint)
        net, next_inputs, loss_of = msprobe_dump.build_run(args, torch.float32)
        loss_of(net(*next_inputs())).backward()
        results.append([p.grad.clone() for p in net.parameters()])
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(*results, strict=True))


def test_the_readout_loss_sends_a_gradient_back(msprobe_dump):
    # the mean square of an RMS norm's output does not depend on its input's scale: the gradient reaching the
    # model's input is rounding noise; --readout's projection sends a real one
    torch = pytest.importorskip("torch")
    sizes = []
    for readout in (False, True):
        net, next_inputs, loss_of = msprobe_dump.build_run(msprobe_dump_args("transformer", readout=readout),
                                                           torch.float64)  # fmt: skip
        (x,) = next_inputs()
        x.requires_grad_(True)
        loss_of(net(x)).backward()
        sizes.append(float(x.grad.abs().max()))
    assert sizes[1] > 1e-4 and sizes[0] < 1e-4 * sizes[1]  # (not zero: the norm's epsilon, 1e-6, is in var + eps)


def test_a_planted_fault_changes_the_one_call_it_names(msprobe_dump, monkeypatch):
    # --fault: the K-th call only; softmax-grad keeps the values and scales the gradient it passes back
    torch = pytest.importorskip("torch")
    from torch.nn import functional as F

    monkeypatch.setattr(F, "softmax", F.softmax)  # (restored after the test)
    monkeypatch.setattr(torch, "rsqrt", torch.rsqrt)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def softmax_grad(call):
        y = x.clone().requires_grad_(True)
        out = F.softmax(y, -1)
        (out * torch.arange(8.0, dtype=torch.float64)).sum().backward()
        return out.detach(), y.grad

    clean = softmax_grad(0)
    msprobe_dump.plant_fault("softmax-grad:1:1.3")
    first, second, third = softmax_grad(0), softmax_grad(1), softmax_grad(2)
    assert torch.equal(first[0], clean[0]) and torch.equal(first[1], clean[1]) and torch.equal(third[1], clean[1])
    assert torch.allclose(second[0], clean[0]) and torch.allclose(second[1], 1.3 * clean[1])
    msprobe_dump.plant_fault("rsqrt:0:1.1")
    v = torch.tensor([4.0], dtype=torch.float64)
    assert [float(torch.rsqrt(v)) for _ in range(2)] == [pytest.approx(0.55), 0.5]
    with pytest.raises(SystemExit, match="unknown function 'gelu'"):
        msprobe_dump.plant_fault("gelu:0:2")


def test_each_rank_draws_its_own_shard_of_one_batch(msprobe_dump):
    # --ranks: every rank has the same weights and its own inputs, and the gradients averaged over the ranks (what
    # the all-reduce and the division make) are those of one run over all the ranks' inputs
    torch = pytest.importorskip("torch")
    args = msprobe_dump_args("transformer", readout=True)
    runs = [msprobe_dump.build_run(args, torch.float64, rank) for rank in (0, 1)]
    (a, a_inputs, loss_of), (b, b_inputs, _) = runs
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    (x0,), (x1,) = a_inputs(), b_inputs()
    assert not torch.equal(x0, x1)
    assert torch.equal(msprobe_dump.build_run(args, torch.float64, 1)[1]()[0], x1)  # (seeded by the rank)
    for net, x in ((a, x0), (b, x1)):
        loss_of(net(x)).backward()
    whole = msprobe_dump.build_run(args, torch.float64, 0)[0]
    loss_of(whole(torch.cat([x0, x1]))).backward()
    averaged = [(p.grad + q.grad) / 2 for p, q in zip(a.parameters(), b.parameters(), strict=True)]
    assert all(torch.allclose(g, p.grad) for g, p in zip(averaged, whole.parameters(), strict=True))


def test_a_planted_all_reduce_fault_scales_its_kth_result(msprobe_dump, monkeypatch, tmp_path):
    # --fault all_reduce:K:FACTOR (with --ranks): the K-th all-reduce's result is left times FACTOR in its tensor,
    # the others are the plain sum (a one-rank gloo group here: the sum of one)
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    monkeypatch.setattr(dist, "all_reduce", dist.all_reduce)  # (restored after the test)
    dist.init_process_group("gloo", init_method=(tmp_path / "rendezvous").as_uri(), rank=0, world_size=1)
    try:
        msprobe_dump.plant_fault("all_reduce:1:1.5")
        values = [torch.full((3,), 2.0) for _ in range(3)]
        for v in values:
            dist.all_reduce(v)
        assert [float(v[0]) for v in values] == [2.0, 3.0, 2.0]
    finally:
        dist.destroy_process_group()


def msprobe_dump_args(model: str, **options):
    import argparse

    return argparse.Namespace(model=model, seed=3, batch=2, seq=8, hidden=32, heads=4, layers=2, channels=8,
                              image=16, input_scale=1.0, **options)  # fmt: skip
