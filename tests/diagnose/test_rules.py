"""Known failures in realistic logs: host out-of-memory kills and graph-engine memory limits, values exact."""

from __future__ import annotations

import pytest

from nbprec.diagnose import RULES, diagnose


def _only(diagnosis, kind):
    found = diagnosis.of_kind(kind)
    assert len(found) == 1, [f.message for f in diagnosis.findings]
    return found[0]


# -- host out-of-memory -----------------------------------------------------------------------------------------
def test_oom_event_in_dmesg_is_one_finding_with_the_resident_memory(logs, tmp_path):
    lines = [*logs.NOISE[:4], *logs.OOM_PREAMBLE, logs.OOM_KILL_LINE, logs.OOM_KILLED, logs.OOM_REAPER, *logs.NOISE]
    path = tmp_path / "dmesg.log"
    path.write_bytes(logs.log_bytes(lines))
    d = diagnose(path)
    oom = _only(d, "host-oom")
    assert oom.severity == "error" and oom.where == f"{path}:{lines.index(logs.OOM_KILL_LINE) + 1}"
    v = oom.values
    assert (v["name"], v["pid"]) == ("aoe", 994362)
    assert (v["anon-rss"], v["file-rss"], v["shmem-rss"], v["total-vm"]) == (16472380, 1234, 5678, 23064888)
    assert v["rss_kb"] == 16472380 + 1234 + 5678
    assert v["rss_bytes"] == (16472380 + 1234 + 5678) * 1024
    assert v["rss_gib"] == round((16472380 + 1234 + 5678) / 1048576, 3) == 15.716
    assert v["constraint"] == "CONSTRAINT_NONE" and v["time"] == "12345.678950" and v["count"] == 1
    assert "aoe (pid 994362)" in oom.message and "15.72 GiB" in oom.message
    assert "more than 15.72 GiB" in oom.remedy
    assert "TUNING_PARALLEL_NUM" in oom.remedy and "TE_PARALLEL_COMPILER" in oom.remedy
    assert d.findings == (oom,)  # the preamble, the task table and the reaper line are not alarms of their own
    assert not d


@pytest.mark.parametrize(
    "line",
    [
        # journalctl -k
        "May 11 10:21:37 node-17 kernel: Out of memory: Killed process 994362 (aoe) total-vm:23064888kB, "
        "anon-rss:16472380kB, file-rss:1234kB, shmem-rss:5678kB, UID:0 pgtables:33000kB oom_score_adj:0",
        # dmesg without timestamps (dmesg -t)
        "Out of memory: Killed process 994362 (aoe) total-vm:23064888kB, anon-rss:16472380kB, file-rss:1234kB, "
        "shmem-rss:5678kB, UID:0 pgtables:33000kB oom_score_adj:0",
        # a bare "Killed process" line (kernels that print the reason on the line before)
        "[ 812.000001] Killed process 994362 (aoe) total-vm:23064888kB, anon-rss:16472380kB, file-rss:1234kB, "
        "shmem-rss:5678kB",
        # /var/log/messages with a priority prefix
        "<3>[12345.679001] Out of memory: Killed process 994362 (aoe) total-vm:23064888kB, anon-rss:16472380kB, "
        "file-rss:1234kB, shmem-rss:5678kB, UID:0 pgtables:33000kB oom_score_adj:0",
    ],
)
def test_oom_line_variants(line):
    oom = _only(diagnose(line), "host-oom")
    assert (oom.values["name"], oom.values["pid"], oom.values["rss_kb"]) == ("aoe", 994362, 16479292)


def test_old_kernel_without_shmem_and_the_kill_process_line():
    d = diagnose(
        "[ 99.1] Out of memory: Kill process 4242 (atc) score 901 or sacrifice child\n"
        "[ 99.2] Killed process 4242 (atc) total-vm:9000000kB, anon-rss:8388608kB, file-rss:0kB\n"
    )
    oom = _only(d, "host-oom")
    assert oom.values["oom_score"] == 901 and oom.values["rss_bytes"] == 8388608 * 1024
    assert "8.00 GiB" in oom.message and "TE_PARALLEL_COMPILER" in oom.remedy and "TUNING" not in oom.remedy


def test_oom_kill_line_alone_names_the_process_without_a_size(logs):
    oom = _only(diagnose(logs.OOM_KILL_LINE), "host-oom")
    assert (oom.values["name"], oom.values["pid"], oom.values["rss_kb"]) == ("aoe", 994362, None)
    assert "not in this log" in oom.message


def test_memory_cgroup_kill_says_container_limit():
    line = (
        "[  77.7] Memory cgroup out of memory: Killed process 31337 (python3) total-vm:4194304kB, "
        "anon-rss:2097152kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:4096kB oom_score_adj:0"
    )
    oom = _only(diagnose(line), "host-oom")
    assert oom.values["cgroup"] is True and oom.values["rss_gib"] == 2.0
    assert "cgroup" in oom.message and "container" in oom.remedy


def test_two_processes_killed_are_two_findings(logs):
    second = logs.OOM_KILLED.replace("994362", "994400").replace("16472380", "8236190")
    d = diagnose("\n".join([logs.OOM_KILLED, *logs.NOISE, second]))
    pids = [(f.values["pid"], f.values["rss_kb"]) for f in d.of_kind("host-oom")]
    assert pids == [(994362, 16479292), (994400, 8236190 + 1234 + 5678)]


# -- graph-engine memory ------------------------------------------------------------------------------------------
def test_var_size_exceeded_gives_exact_settings_in_three_styles(logs):
    d = diagnose("\n".join([*logs.NOISE, logs.ge_line("var", 13962468864, 13958643712), *logs.NOISE]))
    f = _only(d, "ge-var-memory")
    variable = 13962468864 + 1073741824
    graph = 33285996544 - variable
    assert (variable, graph) == (15036210688, 18249785856)
    v = f.values
    assert (v["current"], v["total"], v["variable_memory_max_size"], v["graph_memory_max_size"]) == (
        13962468864,
        13958643712,
        variable,
        graph,
    )
    assert v["fits"] is True and f.where == f"<text>:{len(logs.NOISE) + 1}"
    assert f'custom_op.parameter_map["variable_memory_max_size"].s = tf.compat.as_bytes(str({variable}))' in f.remedy
    assert f'custom_op.parameter_map["graph_memory_max_size"].s = tf.compat.as_bytes(str({graph}))' in f.remedy
    assert f"NPURunConfig(graph_memory_max_size=str({graph}), variable_memory_max_size=str({variable}))" in f.remedy
    assert f"npu.global_options().graph_memory_max_size = str({graph})" in f.remedy
    assert f"npu.global_options().variable_memory_max_size = str({variable})" in f.remedy
    assert d.findings == (f,)  # its [ERROR] line is not summarised again


def test_graph_size_exceeded_gives_exact_settings(logs):
    f = _only(diagnose(logs.ge_line("graph", 27917287424, 27917287423)), "ge-graph-memory")
    graph = 27917287424 + 1073741824  # 27 GiB + 1 GiB
    assert f.values["graph_memory_max_size"] == graph == 28991029248
    assert f.values["variable_memory_max_size"] == 33285996544 - graph == 4294967296
    snippets = f.values["snippets"]
    assert set(snippets) == {"tf1", "estimator", "tf2"}
    for style, snippet in snippets.items():
        compile(snippet, style, "exec")  # each pastes as valid Python
    assert "npu.global_options().graph_memory_max_size = str(28991029248)" in snippets["tf2"]


@pytest.mark.parametrize("what", ["var", "graph"])
def test_no_setting_fits_above_31_gib(logs, what):
    current = 30 * 1073741824 + 1  # + 1 GiB is one byte over 31 GiB
    f = diagnose(logs.ge_line(what, current, 5 * 1073741824)).findings[0]
    assert f.kind == f"ge-{what}-memory" and f.severity == "error"
    assert f.values["fits"] is False and f.values["needed"] == current + 1073741824
    assert "variable_memory_max_size" not in f.values and "graph_memory_max_size" not in f.values
    assert "no setting fits" in f.message and "33285996544" in f.message
    assert "NPURunConfig" not in f.remedy and "31 GiB" in f.remedy


def test_exactly_31_gib_fits_and_leaves_nothing_for_the_other(logs):
    f = diagnose(logs.ge_line("var", 30 * 1073741824, 1)).findings[0]
    assert f.values["fits"] is True and f.values["graph_memory_max_size"] == 0
    assert f.values["variable_memory_max_size"] == 33285996544
    assert "leaves nothing for graph_memory_max_size" in f.remedy


def test_repeated_ge_line_is_one_finding_counted(logs):
    line = logs.ge_line("graph", 1000, 999)
    f = _only(diagnose("\n".join([line, *logs.NOISE, line.replace("685297", "685298")])), "ge-graph-memory")
    assert f.values["count"] == 2 and "seen 2 times" in f.message


# -- several failures, noise, garbage, long lines, CRLF ---------------------------------------------------------
def test_several_failures_in_one_messy_log(logs, tmp_path):
    lines: list = [
        *logs.NOISE,
        logs.garbage(3000),
        logs.ge_line("var", 13962468864, 13958643712),
        b"\x1b[31m\xff\xfe binary junk \x00\x00 with a [ERROR] tag inside\x1b[0m",
        "x" * 3_000_000,  # a 3 MB line: read in windows
        logs.OOM_KILL_LINE,
        logs.OOM_KILLED,
        logs.garbage(200_000, seed=3) + b" current graph size[30064771072] exceeds total graph size[27917287424]",
        *logs.NOISE,
    ]
    path = tmp_path / "mixed.log"
    path.write_bytes(logs.log_bytes(lines, ending=b"\r\n"))
    d = diagnose(str(path))
    assert [f.kind for f in d.findings if f.kind.startswith(("ge-", "host-"))] == [
        "ge-var-memory",
        "host-oom",
        "ge-graph-memory",
    ]  # in the order they appear
    graph = _only(d, "ge-graph-memory")
    assert graph.values["graph_memory_max_size"] == 30064771072 + 1073741824
    assert graph.where == f"{path}:{len(logs.NOISE) + 7}"
    assert d.sources[0].long_lines == 1 and d.sources[0].lines == len(lines)
    junk = [f for f in d.findings if f.kind == "log-error"]
    assert len(junk) == 1 and "binary junk" in junk[0].message  # summarised, shown printable
    assert "\x1b" not in d.to_text() and "\\x1b" in d.to_text()


def test_failure_split_by_a_window_boundary_of_a_long_line_is_found_once(logs):
    from nbprec.diagnose.reading import LINE_CAP

    message = " current var size[2147483648] exceeds total var size[1073741824] "
    for cut in (10, 30, len(message) - 5):  # the boundary falls inside the message
        text = ("y" * (LINE_CAP - cut) + message + "z" * 1000).encode()
        found = diagnose(text).of_kind("ge-var-memory")
        assert len(found) == 1 and found[0].values["count"] == 1, cut
        assert found[0].values["variable_memory_max_size"] == 2147483648 + 1073741824


def test_a_clean_log_gives_no_finding(logs, tmp_path):
    path = tmp_path / "clean.log"
    path.write_bytes(logs.log_bytes(logs.NOISE * 50, ending=b"\r\n"))
    d = diagnose(path)
    assert d.findings == () and d and not d.has_errors
    assert d.sources[0].lines == 500 and "no problems found" in d.to_text()


def test_every_rule_is_documented_with_a_title():
    kinds = [r.kind for r in RULES]
    assert len(set(kinds)) == len(kinds) == 3
    assert all(r.title and r.doc and r.needles for r in RULES)


def test_a_damaged_gz_log_is_said_and_what_was_read_is_kept(logs, tmp_path):
    import gzip

    data = gzip.compress(logs.log_bytes([logs.ge_line("var", 7, 6), *logs.NOISE * 2000]))
    path = tmp_path / "plog.log.gz"
    path.write_bytes(data[: len(data) // 2])  # cut in the middle, as a copy that did not finish
    d = diagnose(path)
    assert [f.kind for f in d.findings] == ["ge-var-memory", "unreadable"]
    assert "EOFError" in d.findings[1].message and d.findings[1].severity == "error"
