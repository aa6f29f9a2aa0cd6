"""Reading a remedy from what nbprec prints, and emitting the fix (torch-free except where a model runs)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nbprec.errors import OverflowDetectedError
from nbprec.remedy import Remedy, RemedyError, emit_fix
from nbprec.remedy.fixes import ascend_types
from nbprec.remedy.promote import LOSS_SCALING
from nbprec.remedy.remedy import forward_name, module_path

OVERFLOW_PRINTOUT = """\
first critical op: Tensor.mul.0.forward (order 7)
ranked ops (top 3):
 order                                op     level
     7              Tensor.mul.0.forward  critical
     8  Module.blocks.1.norm_in.LayerNorm.forward.0  high
     9   Functional.layer_norm.2.forward      high

# keep the blamed ops in float32 (PyTorch)
import torch
for path in ["blocks.1"]:
    keep_float32(model.get_submodule(path))

# Tensor.float.0.backward (its backward Tensor.float.0.backward overflowed): outside any recorded module
# loss scale: largest gradient 0.61 -> scale at most 65536
scaler = torch.amp.GradScaler(init_scale=65536)  # keeps max|grad|*scale < 65504
"""


def test_names_map_to_forward_ops_and_module_paths():
    assert forward_name("Functional.linear.3.backward") == "Functional.linear.3.forward"
    assert forward_name("Tensor.add.0.forward") == "Tensor.add.0.forward"
    assert forward_name("Module.fc.Linear.backward.0") == "Module.fc.Linear.forward.0"
    assert forward_name("Tensor.backward_hook.0.forward") == "Tensor.backward_hook.0.forward"  # (not a direction)
    assert module_path("Module.layers.0.ff1.Linear.backward.0") == "layers.0.ff1"
    assert module_path("Module.TinyEncoder.forward.0") == ""
    assert module_path("Functional.gelu.0.forward") is None


def test_the_overflow_printout_gives_its_remedy_block_only():
    remedy = Remedy.of(OVERFLOW_PRINTOUT)
    assert remedy.modules == ("blocks.1",) and remedy.loss_scale == 65536.0
    assert remedy.ops == ()  # Tensor.float is a cast: left out, and said so
    assert any("Tensor.float.0.backward" in note and "cast" in note for note in remedy.notes)
    assert remedy.describe() == "keep in float32: module blocks.1; loss scale 2**16"


def test_a_verdict_gives_its_first_failing_op():
    text = (
        "Functional.gelu.1.forward (gelu) is the first op that fails: its inputs matched at cosine 1.000000, "
        "its output fell to cosine 0.8956 (RED 0.27). It introduced the error; 78 failing op(s) after it.\n"
        "Next: nbprec isolate runs/bf16 Functional.gelu.1.forward (Functional.linear.3.forward too)"
    )
    assert Remedy.of(text).ops == ("Functional.gelu.1.forward",)


def test_other_forms():
    error = OverflowDetectedError(
        "overflow detected in Functional.linear.2.backward", "Functional.linear.2.backward", "p"
    )
    assert Remedy.of(error).ops == ("Functional.linear.2.forward",)
    given = Remedy.of({"ops": ["Tensor.mul.0.forward"], "modules": ["head"], "loss_scale": 1024})
    assert given == Remedy(("Tensor.mul.0.forward",), ("head",), 1024.0)
    assert Remedy.of(given) is given and Remedy.of(None).empty
    assert Remedy.of(["layers.1", "Module.head.Linear.forward.0"]).modules == ("layers.1", "head")
    assert Remedy.of("layers.1.ff1").modules == ("layers.1.ff1",)
    union = Remedy(("Tensor.mul.0.forward",)).union({"ops": ["Functional.gelu.0.forward"], "loss_scale": 8})
    assert union.ops == ("Tensor.mul.0.forward", "Functional.gelu.0.forward") and union.loss_scale == 8.0
    assert Remedy(loss_scale=2.0**20).to_dict() == {"ops": [], "modules": [], "loss_scale": 2.0**20}


def test_bad_remedies_say_what_is_expected():
    with pytest.raises(RemedyError, match="found no op name"):
        Remedy.of("nothing to see here, move on")
    with pytest.raises(RemedyError, match="takes 'ops', 'modules' and 'loss_scale'"):
        Remedy.of({"op": ["x"]})
    with pytest.raises(RemedyError, match="not an op name"):
        Remedy.of({"ops": ["layers.1"]})
    with pytest.raises(RemedyError, match="positive finite"):
        Remedy(loss_scale=-1.0)
    with pytest.raises(RemedyError, match="cannot read a remedy from int"):
        Remedy.of(3)


@pytest.mark.parametrize(
    ("block", "why"),
    [
        ("[" + "9" * 5000 + "]", "a number of over 4300 digits"),  # (int() refuses it: a ValueError, not JSON's)
        ("['layers.1']", "Expecting value"),  # (Python's quotes, not JSON's)
    ],
    ids=["long-integer", "not-json"],
)
def test_an_unreadable_module_list_is_named_and_cut_short(block, why):
    text = f"# keep the blamed ops in float32\nfor path in {block}:\n    promote(model, path)\n"
    with pytest.raises(RemedyError, match=f"could not read the module list .*: {why}") as raised:
        Remedy.of(text)
    told = str(raised.value)
    assert len(told) < 400  # the list cut short, not written out whole
    assert told.endswith(
        'give it as nbprec overflow printed it, a list of quoted module paths (for path in ["encoder.layer.0", ...])'
    )


def test_the_fix_without_a_model_names_the_ascend_op_types():
    fix = emit_fix(["Functional.gelu.1.forward", "Tensor.mul.0.forward", "Torch.weird_op.0.forward"])
    assert fix.op_types == ["Gelu", "Mul"] and fix.unmapped == ["weird_op"]
    assert fix.mixlist == {"black-list": {"to-add": ["Gelu", "Mul"]}}
    assert json.loads(fix.mixlist_json()) == fix.mixlist
    assert fix.keep_dtype.splitlines() == ["OpType::Gelu", "OpType::Mul"]
    assert fix.pytorch.startswith('"""Keep named ops') and "class KeepFloat32" in fix.pytorch
    assert 'keep_float32 = KeepFloat32(model, ops=["Functional.gelu.1.forward"' in fix.pytorch
    assert fix.usage.startswith("from keep_float32 import KeepFloat32")
    assert fix.loss_scale == "" and "OpType::Gelu" in fix.to_text()
    compile(fix.pytorch, "<fix>", "exec")  # valid Python


def test_loss_scale_settings():
    static = emit_fix(Remedy(loss_scale=4096.0), dtype="float16")
    assert "LOSS_SCALE = 4096.0" in static.loss_scale and "def backward_scaled" in static.loss_scale
    assert static.pytorch == "" and static.usage == ""
    dynamic = emit_fix(Remedy(loss_scale=4096.0), autocast=True, device_type="cuda")
    assert "torch.amp.GradScaler('cuda', init_scale=4096.0)" in dynamic.loss_scale
    compile(static.loss_scale, "<scale>", "exec")
    compile(dynamic.loss_scale, "<scale>", "exec")
    assert ascend_types(["linear", "__mul__", "softmax"]) == (["MatMulV2", "Mul", "SoftmaxV2"], [])


def test_the_fix_writes_its_files(tmp_path):
    fix = emit_fix(Remedy(("Functional.gelu.1.forward",), loss_scale=256.0))
    written = fix.write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "keep_dtype.cfg",
        "keep_float32.py",
        "ops_info.json",
        "remedy.txt",
    ]
    assert json.loads(written["mixlist"].read_text()) == {"black-list": {"to-add": ["Gelu"]}}
    assert written["keep_dtype"].read_text() == "OpType::Gelu\n"
    assert written["runtime"].read_text().rstrip() == fix.runtime and "class KeepFloat32" in fix.runtime
    assert "LOSS_SCALE = 256.0" in written["text"].read_text()


@pytest.mark.torch
def test_the_written_files_run_as_a_user_pastes_them(tmp_path):
    """keep_float32.py imported from the folder it was written to (no nbprec), the usage lines run on a model:
    the kept call (the second GELU) computes in float32, the first stays float16."""
    pytest.importorskip("torch")
    fix = emit_fix(Remedy(("Functional.gelu.1.forward",)), dtype="float16")
    fix.write(tmp_path)
    code = "\n".join(
        [
            "import sys",
            f"sys.path.insert(0, {str(tmp_path)!r})",
            "import torch",
            "import torch.nn.functional as F",
            "model = torch.nn.Linear(4, 4).half()",
            fix.usage,
            "x = torch.full((2, 4), 3.0, dtype=torch.float16)",
            "with keep_float32:",
            "    a, b = F.gelu(x), F.gelu(x)",
            "print(a.dtype, b.dtype, [m for m in sys.modules if m.startswith('nbprec')])",
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["torch.float16", "torch.float32", "[]"]


@pytest.mark.torch
def test_the_fix_of_a_setup_lists_source_lines_and_module_op_types():
    pytest.importorskip("torch")
    from .conftest import planted_setup

    setup = planted_setup({1: "overflow"}, "float16")
    fix = emit_fix({"ops": ["Tensor.mul.0.forward"], "modules": ["blocks.1.norm_in"]}, setup)
    assert "h = h * 1e5" in fix.usage  # the source line that calls the kept op
    assert "LayerNorm" in fix.op_types and "Mul" in fix.op_types
    assert "autocast=None" in fix.usage
    kernel = emit_fix(["Functional.silu.1.forward"], planted_setup({1: "kernel"}, "float16"))
    assert "h = faulty_silu(h) if self.fault" in kernel.usage  # the model's line, not the kernel's dispatch
    scaling = emit_fix(["Tensor.mul.1.forward"], setup)  # the loss times the loss scale, applied by Setup.run
    assert LOSS_SCALING in scaling.usage and __file__ not in scaling.usage
