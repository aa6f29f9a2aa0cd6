"""NPU overflow debug files: both payload versions decoded, linked to their op, fed into the overflow scan."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.cli import main
from nbprec.demo.npu import make_npu_demo
from nbprec.errors import DumpFormatError
from nbprec.formats.cann_opdebug import decode_opdebug, read_opdebug_file, status_conditions
from nbprec.formats.cann_write import CannTensor, OverflowStatus, opdebug_payload, write_dump_file, write_opdebug_file
from nbprec.overflow import remedies, scan


def test_status_bits_are_named() -> None:
    assert status_conditions("AI Core", 0x20) == ("floating-point overflow",)
    assert status_conditions("AIV", 0x400 | 0x8) == ("signed integer negative overflow", "cube accumulation overflow")
    assert status_conditions("AIC", 0x1000 | 0x10)[-1] == "unknown status bits 0x1000"
    assert status_conditions("DHA Atomic Add", 0x0B00) == ("atomic add source NaN (DHA)",)
    assert status_conditions("L2 Atomic Add", 1 << 16) == ("atomic add overflow (L2)",)
    assert status_conditions("AI Core", 0) == ()


def test_old_version_by_hand() -> None:
    """The old 2048-byte record, built here from the byte offsets alone (not with nbprec's writer)."""
    data = bytearray(2048)
    struct.pack_into("<6Q", data, 0, 1, 5, 77, 0, 0, 0)  # DHA section: model, stream, task, ...
    struct.pack_into("<6Q", data, 256, 1, 3, 41, 0, 0x10, 0x20)  # AI Core section
    struct.pack_into("<Q", data, 512, 0x0A00)  # DHA status: underflow
    struct.pack_into("<3Q", data, 1024, 0xABC, 2, 0x100)  # AI Core kernel code, block, status
    info = decode_opdebug(bytes(data), "x")
    assert info.version == "old"
    flagged = {r.unit: r for r in info.overflowed()}
    assert set(flagged) == {"DHA Atomic Add", "AI Core"}
    assert (flagged["AI Core"].task_id, flagged["AI Core"].stream_id) == (41, 3)
    assert flagged["AI Core"].conditions == ("float32/int32 to float16 conversion overflow",)
    assert flagged["AI Core"].fields["kernel_code"] == 0xABC
    assert flagged["DHA Atomic Add"].conditions == ("atomic add underflow (DHA)",)


@pytest.mark.parametrize("record_version", [0, 1])
def test_new_version_every_accelerator(record_version: int) -> None:
    records = [
        OverflowStatus(task_id=3, stream_id=1, status=0x20, unit="AIC", context_id=4, thread_id=2),
        OverflowStatus(task_id=4, stream_id=1, status=0x100, unit="AIV"),
        OverflowStatus(task_id=5, stream_id=2, status=1, unit="AICPU"),
        OverflowStatus(task_id=6, stream_id=2, status=0, unit="SDMA"),
    ]
    payload = opdebug_payload(records, record_version=record_version)
    info = decode_opdebug(payload + bytes(64), "x")  # trailing zeros: the unused record area
    assert info.version == f"new (version {record_version})" and not info.problems
    assert [(r.unit, r.task_id, r.status) for r in info.records] == [
        ("AIC", 3, 0x20),
        ("AIV", 4, 0x100),
        ("AICPU", 5, 1),
        ("SDMA", 6, 0),
    ]
    assert info.records[0].context_id == 4 and info.records[0].thread_id == 2
    assert len(info.overflowed()) == 3
    if record_version == 1:
        assert info.records[0].fields["status"] == [0x20, 0, 0, 0]


def test_bad_status_records() -> None:
    with pytest.raises(DumpFormatError, match="not an overflow status record: 100 bytes with magic"):
        decode_opdebug(bytes(100), "Opdebug.Node_OpDebug.1.0.1")
    truncated = opdebug_payload([OverflowStatus(1, 1, 0x20)])[:-16]
    info = decode_opdebug(truncated, "x")
    assert any("does not fit" in p for p in info.problems)
    unknown = struct.pack("<2I", 0x5A5A5A5A, 0) + struct.pack("<4I", 1, 9, 0, 8) + bytes(8)
    assert any("unknown accelerator type 9" in p for p in decode_opdebug(unknown, "x").problems)


def test_linked_to_the_op_and_fed_into_scan(tmp_path: Path) -> None:
    x = np.full(8, 1000.0, np.float16)
    big = np.full(8, 65504.0, np.float16)  # saturation mode: the overflow clamps to the float16 maximum
    write_dump_file(
        tmp_path, "a/Mul", "Mul", inputs=[x], outputs=[CannTensor(big)], task_id=7, stream_id=2, timestamp=5
    )
    write_dump_file(tmp_path, "a/Add", "Add", inputs=[x], outputs=[CannTensor(x)], task_id=6, stream_id=2, timestamp=4)
    write_opdebug_file(tmp_path, [OverflowStatus(task_id=7, stream_id=2, status=0x20)], task_id=9, timestamp=6)
    write_opdebug_file(tmp_path, [OverflowStatus(task_id=70, stream_id=2, status=0x20)], task_id=9, timestamp=8)
    (tmp_path / "Opdebug.Node_OpDebug.9.0.9").write_bytes(b"\x04\x00")
    dump = nbprec.open(tmp_path)
    assert len(dump.meta["opdebug"]) == 3 and "Node_OpDebug" not in set(dump.index["op"])
    report = scan(dump)
    npu = report.npu
    linked = npu[npu["op"] != ""]
    assert list(linked["op"]) == ["a/Mul"] and linked["conditions"].iloc[0] == "floating-point overflow"
    assert npu["note"].str.contains("no dump file has task 70").any()
    assert npu["note"].str.contains("could not decode").any()  # the broken file is a row, not dropped
    assert report.first_critical()["op"] == "a/Mul"
    assert "NPU overflow detection: AIC floating-point overflow" in report.first_critical()["reason"]
    fix = remedies(report)
    assert fix.keep_dtype == ["Mul"] and "modify_mixlist" in fix.to_text() and "torch" not in fix.to_text()
    saved = report.save(tmp_path / "report")
    again = type(report).load(saved)
    assert list(again.npu["op"]) == list(npu["op"])
    assert read_opdebug_file(dump.meta["opdebug"][0]["file"]).overflowed()[0].task_id == 7


def test_demo_overflow_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = make_npu_demo(tmp_path)
    assert main(["overflow", str(case.npu), "--bench", str(case.tf)]) == 0
    out = capsys.readouterr().out
    assert f"first critical op: {case.overflow_op}" in out
    assert "AIC: floating-point overflow (status 0x20)" in out
    assert "impact     harmful" in out
    assert '"Mul"' in out and "precision_mode" in out


def test_folder_of_overflow_debug_files_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only Opdebug files (the normal dumps not copied): still recognised, decoded, and the gap said."""
    write_opdebug_file(tmp_path, [OverflowStatus(task_id=4, stream_id=1, status=0x100)], task_id=2, timestamp=3)
    assert main(["overflow", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "conversion overflow" in out and "no dump file has task 4, stream 1" in out
