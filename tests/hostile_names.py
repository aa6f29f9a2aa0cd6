"""Real msprobe dumps given hostile op and file names, made by the tests (never committed as blobs).

:func:`hostile_pair` copies the bf16 and fp32 tensor-mode fixtures and renames ops in ``dump.json`` (and the
other JSON files) and their payload files: names that start like spreadsheet formulas (``=``, ``+``, ``-``,
``@``, tab, carriage return) and one holding the byte 0xff, which is not UTF-8, as Python sees it in a file
name (the surrogate ``\\udcff``). The target folder's own name holds that byte too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "msprobe"

#: old name prefix -> hostile prefix (the renamed ops keep their call number and direction)
RENAMES = {
    "Functional.linear.0.": "=HYPERLINK(1).0.",
    "Functional.linear.1.": "+SUM(1).1.",
    "Functional.layer_norm.0.": "-2+3.0.",
    "Functional.layer_norm.1.": "@SUM(1).1.",
    "Tensor.__add__.0.": "\tTensor.__add__.0.",
    "Tensor.__add__.1.": "\rTensor.__add__.1.",
    "Torch.relu.1.": "Torch.re\udcfflu.1.",  # among the worst ops: shown by every view
}
#: the op holding a byte that is not UTF-8, and how exports write it
NOT_UTF8_OP, NOT_UTF8_SHOWN = "Torch.re\udcfflu.1.backward", "Torch.re\\xfflu.1.backward"
FORMULA_PREFIXES = [new for new in RENAMES.values() if new[0] in "=+-@\t\r"]


def hostile_copy(fixture: str, dst: Path) -> Path:
    """A copy of the msprobe fixture ``fixture`` at ``dst`` with the ops of :data:`RENAMES` renamed."""
    shutil.copytree(FIXTURES / fixture, dst)
    for rank in dst.glob("step*/rank*"):
        for record in rank.glob("*.json"):
            text = record.read_text(encoding="utf-8")
            for old, new in RENAMES.items():
                text = text.replace(old, json.dumps(new)[1:-1])
            record.write_text(text, encoding="utf-8")
        for payload in (rank / "dump_tensor_data").iterdir():
            for old, new in RENAMES.items():
                if payload.name.startswith(old):
                    payload.rename(payload.with_name(new + payload.name[len(old) :]))
    return dst


def hostile_pair(root: Path) -> tuple[Path, Path]:
    """(target, benchmark): bf16 and fp32 tensor-mode msprobe dumps with hostile names; the target's folder is
    named ``bf16 \\udcff run`` (a byte that is not UTF-8)."""
    return (
        hostile_copy("bf16_tensor_mix", root / "bf16 \udcff run"),
        hostile_copy("fp32_tensor_mix", root / "fp32 run"),
    )
