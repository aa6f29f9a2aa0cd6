"""The command daemon (``nbprec.cli.daemon``): the second ``nbprec compare`` of an environment runs in a process
forked from a daemon the first one started, with the client's arguments, folder, environment, umask and
streams, and gives the same outputs, messages and exit status as a command run in its own process."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nbprec.cli import daemon, daemon_process

FIXTURES = Path(__file__).parent / "fixtures" / "msprobe"
TARGET, BENCH = FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"
NBPREC = [sys.executable, "-m", "nbprec"]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the daemon runs on Linux only")


@pytest.fixture
def env():
    """The environment of commands that use a daemon of their own (a short socket folder: Unix socket paths
    are limited to about 100 bytes); the daemon is stopped after the test."""
    folder = tempfile.mkdtemp(prefix="nbd-", dir="/tmp")
    environment = {**os.environ, "NBPREC_DAEMON": "on", "NBPREC_DAEMON_DIR": folder, "NBPREC_DAEMON_IDLE": "120"}
    yield environment
    subprocess.run([*NBPREC, "daemon", "stop"], env=environment, capture_output=True, timeout=30)
    shutil.rmtree(folder, ignore_errors=True)


def _run(args, env, cwd=None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*NBPREC, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120, **kwargs)


def _served(env) -> int | None:
    """Commands the environment's daemon has run, or None when none is up."""
    status = _run(["daemon", "status"], env)
    if status.returncode != 0:
        return None
    return int(status.stdout.split(" command(s)")[0].rsplit(" ", 1)[1])


def _wait_for_daemon(env, seconds: float = 60.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        served = _served(env)
        if served is not None:
            return served
        time.sleep(0.2)
    raise AssertionError("no daemon came up")


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_the_second_command_runs_beside_the_daemon_with_the_same_outputs(env, tmp_path):
    first = _run(["compare", str(TARGET), str(BENCH), "-o", str(tmp_path / "a"), "--no-progress"], env)
    assert first.returncode == 0, first.stderr
    assert _wait_for_daemon(env) == 0  # the first command ran in its own process, then started the daemon
    second = _run(["compare", str(TARGET), str(BENCH), "-o", str(tmp_path / "b"), "--no-progress"], env)
    assert second.returncode == 0, second.stderr
    assert _served(env) == 1
    assert second.stdout.replace(str(tmp_path / "b"), "OUT") == first.stdout.replace(str(tmp_path / "a"), "OUT")
    assert second.stderr == first.stderr
    assert _files(tmp_path / "b") == _files(tmp_path / "a")


@pytest.mark.parametrize(
    ("argv", "started"),
    [
        (["compare", str(TARGET), str(BENCH), "-o", "OUT"], True),
        (["compare", str(TARGET), str(BENCH), "--mode", "tensor"], True),
        (["compare", str(FIXTURES / "bf16_statistics_mix"), str(FIXTURES / "fp32_statistics_mix")], False),
        (["compare", str(FIXTURES / "bf16_md5_L1"), str(FIXTURES / "fp32_md5_L1"), "-o", "OUT"], False),
        (["compare", str(TARGET), str(BENCH), "--mode", "statistics"], False),  # no payloads compared
        (["compare", str(TARGET), str(FIXTURES / "fp32_statistics_mix")], False),
    ],
    ids=["tensors", "tensor-mode", "statistics", "md5", "statistics-mode", "one-side-statistics"],
)
def test_a_served_compare_starts_the_early_worker_where_it_has_pairs(monkeypatch, argv, started):
    """The process the daemon forks for a ``compare`` starts the early worker, as the command's own process does,
    but only for dumps with pairs it measures (a fork of that large process is not free): it then measures while
    the dumps are opened and matched."""
    from nbprec import cli
    from nbprec.compare import early

    calls, heaps = [], []
    monkeypatch.setattr(early, "start", lambda target, bench: calls.append((target, bench)))
    monkeypatch.setattr(cli, "compare_heap", heaps.append)
    daemon_process.prepare_compare(argv)
    assert heaps == [early.compare_paths(argv)]  # (the heap as before: marked unless nothing is read)
    assert calls == ([(argv[1], argv[2])] if started else [])


def test_a_served_compare_of_a_pair_with_payloads_is_the_commands_own(env, tmp_path):
    """Served with the early worker beside it: the same outputs as the command's own process without one."""
    own = {**env, "NBPREC_DAEMON": "off", "NBPREC_EARLY": "off"}
    args = ["compare", str(FIXTURES / "fp16_tensor_mix"), str(BENCH), "--no-progress", "-o"]
    alone = _run([*args, str(tmp_path / "alone")], own)
    assert alone.returncode == 0, alone.stderr
    assert _run(["info", str(TARGET)], env).returncode == 0  # (starts the daemon)
    _wait_for_daemon(env)
    served = _run([*args, str(tmp_path / "served")], env)
    assert served.returncode == 0, served.stderr
    assert _served(env) == 1
    said = {how: run.stdout.replace(str(tmp_path / how), "OUT") for how, run in (("alone", alone), ("served", served))}
    assert said["served"] == said["alone"]
    assert _files(tmp_path / "served") == _files(tmp_path / "alone")


def test_errors_usage_and_statuses_are_the_commands_own(env, tmp_path):
    assert _run(["info", str(TARGET)], env).returncode == 0
    _wait_for_daemon(env)
    off = {**env, "NBPREC_DAEMON": "off"}
    for args in (
        ["compare", str(tmp_path / "missing"), str(BENCH)],  # an nbprec error: 1 and its message
        ["compare", str(TARGET)],  # a usage error: argparse's 2 and usage text
        ["info", "--help"],
        ["info", str(TARGET), "--json"],
    ):
        served, alone = _run(args, env), _run(args, off)
        assert (served.returncode, served.stdout, served.stderr) == (alone.returncode, alone.stdout, alone.stderr)
    assert _served(env) == 4


def test_the_clients_folder_and_umask_are_used(env, tmp_path):
    shutil.copytree(FIXTURES / "bf16_tensor_mix", tmp_path / "t")
    shutil.copytree(FIXTURES / "fp32_tensor_mix", tmp_path / "b")
    _run(["info", "t"], env, cwd=tmp_path)
    _wait_for_daemon(env)
    done = _run(["compare", "t", "b", "-o", "out", "--no-progress"], env, cwd=tmp_path, umask=0o077)
    assert done.returncode == 0, done.stderr
    assert _served(env) == 1
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "out").iterdir()} == {0o600}


def test_ctrl_c_reaches_the_command(env, tmp_path):
    """The client's SIGINT goes to the command, which stops as one run in its own process does: "interrupted",
    status 130. The command waits on a Dask scheduler that accepts the connection and never answers."""
    pytest.importorskip("distributed", reason="the waiting command needs nbprec[dask]")
    _run(["info", str(TARGET)], env)
    _wait_for_daemon(env)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        args = ["compare", str(TARGET), str(BENCH), "--scheduler", f"tcp://127.0.0.1:{port}", "--no-progress"]
        proc = subprocess.Popen([*NBPREC, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while _served(env) != 1 and time.monotonic() < deadline:  # the command started beside the daemon
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "nbprec: interrupted" in err


def _daemon_pid(env) -> int:
    status = _run(["daemon", "status"], env)
    assert status.returncode == 0, status.stdout
    return int(status.stdout.split("pid ", 1)[1].split(",", 1)[0])


def _command_process(daemon_pid: int, folder: Path, seconds: float = 60.0) -> int:
    """The pid of the process forked from daemon ``daemon_pid`` that runs a command in ``folder`` (the idle
    spare process, also the daemon's child, stays in ``/``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                if parent == daemon_pid and os.readlink(f"/proc/{entry}/cwd") == os.path.realpath(folder):
                    return int(entry)
            except (OSError, IndexError, ValueError):
                continue
        time.sleep(0.05)
    raise AssertionError("the command's process did not show up")


def _gone(pid: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not end")


@pytest.mark.parametrize("daemon_killed_too", [False, True])
def test_a_command_killed_by_a_signal(env, tmp_path, daemon_killed_too):
    """A served command killed by a signal: the daemon sends 128 + the signal, the status a shell gives a
    killed process. With the daemon killed first nobody can: the client says so and exits with 1."""
    pytest.importorskip("distributed", reason="the waiting command needs nbprec[dask]")
    _run(["info", str(TARGET)], env)
    _wait_for_daemon(env)
    daemon_pid = _daemon_pid(env)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        args = ["compare", str(TARGET), str(BENCH), "--scheduler", f"tcp://127.0.0.1:{port}", "--no-progress"]
        proc = subprocess.Popen(
            [*NBPREC, *args], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        victim = _command_process(daemon_pid, tmp_path)
        if daemon_killed_too:
            os.kill(daemon_pid, signal.SIGKILL)
            _gone(daemon_pid)
        os.kill(victim, signal.SIGKILL)
        _out, err = proc.communicate(timeout=60)
    if daemon_killed_too:
        assert proc.returncode == 1
        assert "ended without a status" in err and "NBPREC_DAEMON=off" in err
    else:
        assert proc.returncode == 128 + signal.SIGKILL, err
        assert err == ""


def test_a_daemon_whose_modules_changed_steps_aside(env, tmp_path):
    """Once a module file the daemon imported changes (an upgrade, an edit), the next command runs in its own
    process with the same output, the stale daemon exits, and a fresh one takes over."""
    import nbprec.cli._choices

    reference = _run(["info", str(TARGET)], {**env, "NBPREC_DAEMON": "off"})
    _run(["info", str(TARGET)], env)
    _wait_for_daemon(env)
    stale_pid = _daemon_pid(env)
    module = Path(nbprec.cli._choices.__file__)
    before = module.stat()
    try:  # the file's time changes (its bytes do not): a stamp the daemon took no longer matches
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
        done = _run(["info", str(TARGET)], env)
    finally:
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (done.returncode, done.stdout, done.stderr) == (reference.returncode, reference.stdout, reference.stderr)
    _gone(stale_pid)
    assert _wait_for_daemon(env) == 0
    assert _daemon_pid(env) != stale_pid


def test_a_starting_daemon_waits_for_the_lock_of_the_one_that_made_way(env):
    """A stale daemon holds its socket's lock until its process ends; the client that found it stale runs its
    command and starts the next daemon, which may come before that end: the new one waits for the lock (a
    second, here) rather than giving up, and serves."""
    import fcntl

    status = _run(["daemon", "status"], env)
    path = status.stdout.rsplit("(", 1)[1].rstrip(")\n")  # "no nbprec daemon is running ... (PATH)"
    Path(path).parent.mkdir(mode=0o700, exist_ok=True)
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the daemon "before" this one, still ending
        assert _run(["info", str(TARGET)], env).returncode == 0  # runs here, then starts a daemon
        time.sleep(1.0)
        assert _served(env) is None
    finally:
        os.close(lock)  # that daemon's process ended
    assert _wait_for_daemon(env, seconds=daemon_process.LOCK_WAIT_SECONDS + 30) == 0


def test_no_daemon_when_switched_off(env, tmp_path):
    off = {**env, "NBPREC_DAEMON": "off"}
    assert _run(["compare", str(TARGET), str(BENCH), "-o", str(tmp_path / "o"), "--no-progress"], off).returncode == 0
    time.sleep(1.0)
    assert _served(env) is None
    assert list(Path(env["NBPREC_DAEMON_DIR"]).glob("*.sock")) == []


def test_an_idle_daemon_exits_and_removes_its_socket(env):
    idle = {**env, "NBPREC_DAEMON_IDLE": "1"}
    assert _run(["info", str(TARGET)], idle).returncode == 0
    _wait_for_daemon(idle)
    deadline = time.monotonic() + 30
    while _served(idle) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _served(idle) is None
    assert list(Path(env["NBPREC_DAEMON_DIR"]).glob("*.sock")) == []


def test_a_closed_standard_stream_runs_the_command_in_its_own_process(env, tmp_path):
    _run(["info", str(TARGET)], env)
    _wait_for_daemon(env)
    command = " ".join([*NBPREC, "info", str(TARGET)]) + " <&-"
    done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _served(env) == 0


def test_a_changed_module_file_makes_the_daemon_stale(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("x = 1\n")
    stamps = {str(module): (module.stat().st_mtime_ns, module.stat().st_size)}
    assert not daemon_process.stale(stamps)
    module.write_text("x = 22\n")
    assert daemon_process.stale(stamps)
    module.unlink()
    assert daemon_process.stale(stamps)


def test_commands_of_another_environment_are_not_served(env, monkeypatch):
    monkeypatch.setenv("NBPREC_DAEMON_DIR", env["NBPREC_DAEMON_DIR"])
    key = daemon.daemon_key()
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    assert daemon.daemon_key() != key
    assert daemon.socket_path(key) != daemon.socket_path()


def test_a_client_under_other_limits_gets_a_daemon_of_its_own(monkeypatch):
    """A daemon started under other resource limits (ulimit), cores (taskset) or control groups would run the
    command outside the client's: such a client has another key, so another daemon."""
    import resource

    key = daemon.daemon_key()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(64, soft // 2), hard))
    try:
        assert daemon.daemon_key() != key
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert daemon.daemon_key() == key
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
        cores = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cores)})
        try:
            assert daemon.daemon_key() != key
        finally:
            os.sched_setaffinity(0, cores)


@pytest.mark.parametrize("folder", ["/proc/no-such-folder/nbprec", "/tmp/" + "d" * 120])
def test_an_unusable_socket_folder_leaves_the_command_alone(folder, tmp_path):
    """A socket folder that cannot be made, or a socket path too long for a Unix socket: the command runs in
    its own process, says nothing about it, and starts no daemon."""
    environment = {**os.environ, "NBPREC_DAEMON": "on", "NBPREC_DAEMON_DIR": folder}
    for _ in range(2):
        done = _run(["info", str(TARGET)], environment)
        assert done.returncode == 0
        assert done.stderr == ""
    assert _served(environment) is None
    assert not Path(folder).exists()


def test_the_clients_json_is_json_dumps_text():
    """The client writes its requests without the json module: the same text as ``json.dumps`` (ASCII, no
    spaces) for what requests and keys hold, including a lone surrogate from an undecodable environment byte;
    anything else is refused rather than sent wrong."""
    import json

    value = {
        "argv": ["compare", "a b", 'q"uote', "back\\slash", "tab\t", "ü€😀", "\udcff"],
        "env": {"K\n": "v", "": ""},
        "umask": 18,
        "nested": [[1, -2, True, False, None], (3, "x"), {}],
    }
    text = daemon._to_json(value)
    assert text == json.dumps(value, separators=(",", ":"))
    assert text.isascii() and json.loads(text)["argv"][-1] == "\udcff"
    with pytest.raises(TypeError, match="cannot send a float"):
        daemon._to_json({"x": 1.5})


def test_the_client_imports_no_parser_and_no_numpy():
    """What a client of the daemon runs (``import nbprec.cli``, then the request) loads neither numpy nor the
    argument parser nor typing, nor the public wrappers of C modules that cost milliseconds (socket, signal,
    json, re through it, pathlib, contextlib, struct). Run without ``site``, which loads some of those
    itself in an editable install, so that only nbprec's own imports are seen."""
    import nbprec

    heavy = {"numpy", "argparse", "typing", "nbprec.cli.parser", "socket", "signal", "json", "re", "enum"}
    heavy |= {"pathlib", "contextlib", "struct", "zlib", "resource", "collections.abc", "subprocess"}
    root = str(Path(nbprec.__file__).parent.parent)
    code = f"import sys; sys.path.insert(0, {root!r}); import nbprec.cli; print(sorted({heavy!r} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", (done.stdout, done.stderr)
