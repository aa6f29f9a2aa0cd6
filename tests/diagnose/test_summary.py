"""Logs no rule knows: error and warning lines summarised with their codes, counted, deduplicated, never ignored."""

from __future__ import annotations

import pytest

from nbprec.diagnose import diagnose
from nbprec.diagnose.summary import MAX_DISTINCT, line_level

ATC_FAILURE = [
    "ATC start working now, please wait for a moment.",
    "ATC run failed, Please check the detail log, Try 'atc --help' for more information",
    "E10001: Value [NCWH] for parameter [--input_format] is invalid. Reason: expect one of NCHW, NHWC, ND.",
    "        Solution: Try again with a valid argument.",
    "        TraceBack (most recent call last):",
    "        Invalid input_format[NCWH] [FUNC:CheckInputFormat][FILE:atc_ir_common.cc][LINE:600]",
]


def test_an_atc_failure_is_summarised_with_its_codes():
    d = diagnose("\n".join(ATC_FAILURE))
    assert [(f.kind, f.where) for f in d.findings] == [("log-error", "<text>:2"), ("log-error", "<text>:3")]
    run_failed, e10001 = d.findings
    assert run_failed.message.startswith("ATC run failed")
    assert e10001.values["codes"] == ["E10001"] and "E10001" in e10001.remedy
    assert d.has_errors


def test_plog_errors_are_deduplicated_after_masking_numbers_and_addresses():
    lines = [
        f"[ERROR] RUNTIME({pid},python3):2024-05-11-10:2{i}:33.712.{i:03d} [stream.cc:{100 + i}]{pid} "
        f"StreamSync: Stream synchronize failed, stream_id={i}, addr=0x7f{i:04x}beef, ErrorNo: 507011"
        for i, pid in enumerate([4001, 4001, 4002, 4003, 4003])
    ]
    lines.insert(2, "[WARNING] GE(4001,python3):2024-05-11-10:21:33.000.001 [op.cc:1]4001 Op conv1 has no kernel")
    lines.append("[ERROR] GE(4001,python3):2024-05-11-10:21:34.000.001 [ge.cc:9]4001 Run: EE1001: graph 3 failed")
    d = diagnose("\n".join(lines))
    kinds = [(f.kind, f.values["count"]) for f in d.findings]
    assert kinds == [("log-error", 5), ("log-warning", 1), ("log-error", 1)]
    sync = d.findings[0]
    assert sync.where == "<text>:1" and sync.values["last"] == "<text>:6"
    assert sync.values["module"] == "RUNTIME" and sync.values["codes"] == ["ErrorNo 507011"]
    assert "5 lines like it" in sync.message
    assert d.findings[2].values["codes"] == ["EE1001"] and d.findings[2].values["module"] == "GE"


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("[ERROR] TBE(1,atc):2024 [op.py:1] compile failed", "error"),
        ("[WARNING] GE(1,atc):2024 [ge.cc:1]1 something", "warning"),
        ("[INFO] GE(1,atc):2024 [ge.cc:1]1 ErrorNo: 0 E19999 was not raised", "info"),
        ("2024-05-11 10:21:36,001 - aoe - ERROR - tuning failed", "error"),
        ("WARNING:root:the knowledge base is empty", "warning"),
        ("E0511 10:21:36.001234  4242 ops.cc:12] kernel launch failed", "error"),
        ("W0511 10:21:36.001234  4242 ops.cc:12] slow path", "warning"),
        ("Traceback (most recent call last):", "error"),
        ("RuntimeError: ACL stream synchronize failed, error code is 507011", "error"),
        ("/x/y.py:12: UserWarning: AutoNonVariableTypeMode is deprecated", "warning"),
        ("EZ9999: Inner Error!", "error"),
        ("W11001: Op [conv1] does not hit the high-priority operator information library", "warning"),
        ("Segmentation fault (core dumped)", "error"),
        ("the error rate is 0 and no warning was given", ""),
        ("AOE tuning finished, 0 errors", ""),
        ("epoch 3: no ERROR seen in validation", ""),
        ("2024-05-11 10:21:36 ERROR tuning failed", "error"),
        ("2024-05-11 10:21:36.123 | WARNING  | aoe.tune:run:12 - slow subgraph", "warning"),
        ("ERROR", "error"),
    ],
)
def test_line_levels(line, level):
    assert line_level(line) == level


def test_a_clean_log_with_error_words_in_info_lines_gives_no_finding(logs):
    lines = [*logs.NOISE, "[INFO] GE(1,atc):2024 [ge.cc:1]1 ErrorNo: 0 E19999 not raised", "fine: 0 errors"]
    assert diagnose("\n".join(lines * 20)).findings == ()


def test_distinct_lines_are_bounded_and_the_rest_counted():
    lines = [f"[ERROR] APP(1,x):2024 [a.cc:1]1 failure kind {chr(65 + i % 26)}{chr(65 + i // 26 % 26)}"
             f"{chr(65 + i // 676 % 26)}" for i in range(MAX_DISTINCT + 30)]  # fmt: skip
    d = diagnose("\n".join(lines))
    assert len(d.findings) == MAX_DISTINCT + 1
    assert d.findings[-1].values["count"] == 30 and "30 more error lines" in d.findings[-1].message
