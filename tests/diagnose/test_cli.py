"""``nbprec diagnose`` through the real ``nbprec.cli.main``: files, text, stdin, command pairs, exit status, JSON."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from nbprec import cli


def test_a_log_file_with_failures_exits_1_and_prints_the_remedies(logs, tmp_path, capsys):
    path = tmp_path / "train.log"
    path.write_bytes(logs.log_bytes([*logs.NOISE, logs.ge_line("graph", 27917287424, 27917287423), logs.OOM_KILLED]))
    assert cli.main(["diagnose", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"ge-graph-memory  {path}:{len(logs.NOISE) + 1}" in out
    assert "graph_memory_max_size = str(28991029248)" in out and "variable_memory_max_size=str(4294967296)" in out
    assert "aoe (pid 994362)" in out and "2 error(s), 0 warning(s)" in out


def test_a_clean_log_exits_0(logs, tmp_path, capsys):
    path = tmp_path / "clean.log"
    path.write_bytes(logs.log_bytes(logs.NOISE))
    assert cli.main(["diagnose", str(path)]) == 0
    assert "no problems found" in capsys.readouterr().out


def test_two_commands_as_text_compare_and_print_the_corrected_atc(logs, capsys):
    atc = logs.ATC.replace("--input_format=NCHW", "--input_format=ND")
    assert cli.main(["diagnose", logs.AOE, atc]) == 1
    out = capsys.readouterr().out
    assert "input_format differs: aoe --input_format=NCHW, atc --input_format=ND" in out
    assert "corrected atc command" in out and logs.ATC.replace('"', "") in out.replace('"', "")


def test_json_output(logs, capsys):
    assert cli.main(["diagnose", "--json", logs.ge_line("var", 100, 99)]) == 1
    data = json.loads(capsys.readouterr().out)
    (finding,) = data["findings"]
    assert finding["kind"] == "ge-var-memory" and finding["values"]["variable_memory_max_size"] == 100 + 1073741824
    assert data["counts"] == {"error": 1, "warning": 0, "info": 0}


def test_stdin(logs, monkeypatch, capsys):
    data = logs.log_bytes([*logs.NOISE, "W11001: Op [conv1] does not hit the high-priority operator library"])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert cli.main(["diagnose", "-"]) == 0  # a warning is not an error
    out = capsys.readouterr().out
    assert f"log-warning  <stdin>:{len(logs.NOISE) + 1}" in out


def test_a_missing_file_is_an_error_message_not_a_traceback(tmp_path, capsys):
    assert cli.main(["diagnose", str(tmp_path / "no_such.log")]) == 1
    err = capsys.readouterr().err
    assert "no_such.log" in err and "no such file" in err and "Traceback" not in err


def test_a_gzipped_log_folder(logs, tmp_path, capsys):
    import gzip

    (tmp_path / "plog").mkdir()
    (tmp_path / "plog" / "plog-1.log.gz").write_bytes(gzip.compress(logs.log_bytes([logs.ge_line("var", 5, 4)])))
    (tmp_path / "plog" / "plog-2.log").write_bytes(logs.log_bytes(logs.NOISE))
    assert cli.main(["diagnose", str(tmp_path / "plog")]) == 1
    assert f"{tmp_path / 'plog' / 'plog-1.log.gz'}:1" in capsys.readouterr().out


def test_the_installed_command_line(logs):
    out = subprocess.run(
        [sys.executable, "-m", "nbprec", "diagnose", logs.ge_line("graph", 5, 4)], capture_output=True, text=True
    )
    assert out.returncode == 1 and "ge-graph-memory" in out.stdout


def test_diagnosing_a_log_file_imports_no_numpy(logs, tmp_path):
    """The parser is built without the library (nbprec.cli._choices), and diagnosing needs no arrays: the
    command starts as fast as the interpreter and its own modules allow."""
    path = tmp_path / "train.log"
    path.write_bytes(logs.log_bytes([*logs.NOISE, logs.ge_line("graph", 27917287424, 27917287423)]))
    code = (
        "import contextlib, io, json, sys\n"
        "from nbprec.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    status = main(['diagnose', {str(path)!r}])\n"
        "print(json.dumps({'status': status, 'numpy': 'numpy' in sys.modules, 'text': out.getvalue()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["numpy"] is False
    assert result["status"] == 1 and f"ge-graph-memory  {path}:{len(logs.NOISE) + 1}" in result["text"]
