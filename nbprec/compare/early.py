"""Measuring pairs while the ``nbprec compare`` command is still importing numpy.

A command that runs in its own process spends its first 80-90 ms importing numpy and nbprec, on one core, while
the machine's other cores wait. :func:`start` (called by :func:`nbprec.cli.run` before those imports, for
``compare``) forks a worker that needs neither: it reads each side's index without numpy (msprobe's ``dump.json``
files with the C scanner, :mod:`nbprec.compare.early_msprobe`; the column cache of nbprec's own dumps,
:mod:`nbprec.compare.early_native`), pairs the tensors both sides record alike, and measures the usual pairs
(small plain ``.pt`` or ``.npy`` payloads of a float dtype, the same shape on both sides, NaN and inf included;
msprobe's ``.pt`` payloads the readers map, mapped too: :func:`~nbprec.compare.small_pairs.mapped_pair`)
with the compiled kernel (:mod:`nbprec.compare.small_pairs`), in the target's order (a pair whose payloads are not
all in the page cache after the others: see :func:`nbprec.compare.engine._measure_cached_first`), until it is told
to stop.

It sends each pair's metric values and NaN/inf counts (those ``_fused.pair_metrics`` gives, when they need no second
look at the arrays) through a pipe as it goes (:class:`Messages`). The command's side, once :func:`nbprec.compare`
has opened and matched the dumps, is :mod:`nbprec.compare.early_meeting`: it takes the values that fit the jobs and
then measures beside the worker until they meet, or stops it (:func:`stop`, waiting at most :data:`_GRACE_SECONDS`).
The results are those of a comparison without the worker, to the bit: the same kernel call on the same bytes with
the same parameters (tests hold the two to each other).
Anything unexpected makes the worker measure less, never differently: it steps aside (measures nothing) for dumps
it cannot index (each source says which), or a single-core machine, and any failure in it only loses its results.

The dump.json files the worker scans go to the command's process too, which then opens the dumps without
scanning them again (:class:`~nbprec.compare.early_msprobe.ShippedScans`; 7 ms a side for a dump.json of 1,766
ops). So does the GE graph of ``--graph`` (:func:`graph_option`), which the worker reads and converts
first (:func:`nbprec.graph.ge.shipped_record`), and so do the index rows of a CANN target, which has no pairs for
the worker to measure (:func:`nbprec.formats.cann_index.ship_rows`): the command's opening of an NPU comparison then
starts with them made.

The command's own process starts it (:func:`nbprec.cli.run`). So do the process the command daemon forks for a
client and a library call of :func:`nbprec.compare` that would fork a process to measure anyway
(:func:`nbprec.compare.early_meeting.start_for_call`): there it covers the opening and matching of the dumps rather
than the imports, and is started only for dumps it has pairs to measure in (:func:`has_pairs`; the daemon's own
warm-up comparison, of two small nbprec dumps, is such a call). ``NBPREC_EARLY=off`` turns it off.
"""

from __future__ import annotations

import os

from nbprec._switches import switched_off

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    #: A pair a source offers the worker (:func:`nbprec.compare.early_msprobe.candidates`,
    #: :func:`nbprec.compare.early_native.candidates`): target file, bench file, target dtype, bench dtype, shape,
    #: hints (both sides' recorded min and max).
    Candidate = tuple[str, str, str, str, tuple[int, ...], tuple[float, float, float, float]]

#: Options of ``nbprec compare`` that take no value (every other option takes one); a test holds this to the
#: parser, which is not imported here (the command has not loaded argparse yet).
COMPARE_FLAGS = frozenset({"-h", "--help", "--no-progress"})
#: Options that make the worker pointless: no payloads compared, or measured elsewhere.
_NOT_HERE = frozenset({"--scheduler", "-h", "--help"})
_BATCH = 8  # records the worker sends at a time (and then checks that the command is still there) ...
#: ... or fewer, once their elements reach this (about 0.1 ms of measuring): the command, measuring the same jobs
#: from the other end (:mod:`nbprec.compare.early_meeting`), learns of large pairs soon after they are measured.
_BATCH_ELEMENTS = 1 << 16
#: How long a stopped worker may take to send its last records: it stops after the pair it is measuring (well
#: under a millisecond for a small one, milliseconds for a mapped one: 8 ms for 12 + 6 MB on a 2.6 GHz Zen 4), but
#: not inside a long scan of a large dump.json, and is killed past this (the pair it measured is then measured
#: again by the comparison).
_GRACE_SECONDS = 0.01


class Worker:
    """The forked worker's pid, its stop flag (one shared byte), the pipe its results come through and the file
    its scans come through (None: not sent)."""

    def __init__(self, pid: int, flag: Any, results: int, roots: tuple[str, str], scans: int | None = None) -> None:
        self.pid, self.flag, self.results, self.roots, self.scans = pid, flag, results, roots, scans


_worker: Worker | None = None


def compare_paths(args: list[str]) -> tuple[str, str] | None:
    """``(target, bench)`` of a ``nbprec compare`` command line (``args`` after the program name), or None when
    it is not one the worker serves: not two paths, or an option in :data:`_NOT_HERE`, or ``--mode`` other than
    auto or tensor. A misread line only costs the worker's work: :func:`nbprec.compare.early_meeting.measured`
    checks every result."""
    line = _read_line(args)
    if line is None:
        return None
    paths, options = line
    if options.get("--mode", "auto") not in ("auto", "tensor"):
        return None
    return (paths[0], paths[1]) if len(paths) == 2 else None


def graph_option(args: list[str]) -> str | None:
    """The value of ``--graph`` in a ``nbprec compare`` command line (``args`` after the program name), or None."""
    line = _read_line(args)
    return (line[1].get("--graph") or None) if line is not None else None


def _read_line(args: list[str]) -> tuple[list[str], dict[str, str]] | None:
    """The paths of a ``nbprec compare`` command line and the values of its long options (the last one given of
    each, as the parser takes it); None when it is not one, or holds an option in :data:`_NOT_HERE`."""
    if not args or args[0] != "compare":
        return None
    paths: list[str] = []
    options: dict[str, str] = {}
    rest = iter(args[1:])
    for arg in rest:
        if arg == "--":
            paths.extend(rest)
            break
        if not arg.startswith("-") or arg == "-":
            paths.append(arg)
            continue
        name, inline, value = arg.partition("=")
        if name in _NOT_HERE:
            return None
        if name in COMPARE_FLAGS:
            continue
        if not inline and not arg.startswith("--") and len(arg) > 2:  # -oDIR
            continue
        options[name] = value if inline else next(rest, "")
    return paths, options


def start(target: str, bench: str, graph: str | None = None) -> None:
    """Fork the worker for the comparison of ``target`` with ``bench`` (paths as given), when it can help: a
    machine with more than one core this process may use, and not turned off (``NBPREC_EARLY=off``). ``graph``:
    the GE graph of ``--graph``, which the worker reads first and sends to the command's process."""
    global _worker
    if _worker is not None or switched_off("NBPREC_EARLY"):
        return
    try:
        if len(os.sched_getaffinity(0)) < 2:
            return
    except (AttributeError, OSError):  # not Linux
        return
    import mmap

    # shared with the child: the parent writes 1 to byte 0 to stop it; bytes 8-15 count the bytes of scans sent;
    # byte 1 is PREPARING while the worker makes a CANN target's index rows, and bytes 2-7 count its files done
    flag = mmap.mmap(-1, 16)
    from nbprec.compare import early_msprobe

    read_end, write_end = os.pipe()
    scans = early_msprobe.scan_file()
    roots = (os.path.realpath(target), os.path.realpath(bench))
    try:
        pid = os.fork()
    except OSError:  # no process to spare: the comparison runs as usual
        for fd in (read_end, write_end, scans):
            if fd is not None:
                os.close(fd)
        return
    if pid == 0:  # the worker: never returns
        status = 0
        try:
            os.close(read_end)
            _quiet()
            ship = early_msprobe.Shipper(scans, flag) if scans is not None else None
            _run_worker(roots, flag, write_end, ship, graph, target)
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    _worker = Worker(pid, flag, read_end, roots, scans)
    if scans is not None:
        from nbprec.formats import _prescan

        _prescan.provide(early_msprobe.ShippedScans(scans, flag, pid))


def _close_scans(worker: Worker) -> None:
    """Stop offering the worker's scans to the reader, and free them."""
    if worker.scans is not None:
        from nbprec.formats import _prescan

        _prescan.provide(None)
        os.close(worker.scans)


def _quiet() -> None:
    """Point the worker's standard streams at /dev/null: it says nothing, and must not hold the command's output
    (a pipe to ``head``, say) open after the command is done."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def has_pairs(target: str, bench: str) -> bool:
    """Whether the worker has pairs to measure for ``target`` and ``bench`` (paths as given), as far as a look
    at their folders tells: both nbprec's own dumps, or both msprobe dumps with a payload folder (not statistics
    or md5 dumps, whose comparison reads no payload). The command's own process starts the worker without asking
    (forked before numpy is imported, it costs little, and it scans msprobe's dump.json files for the command);
    a process forked from the command daemon asks first, as its fork copies a large process."""
    from nbprec.compare import early_msprobe, early_native

    if early_native.is_native(target) and early_native.is_native(bench):
        return True
    return early_msprobe.with_payloads(target, bench)


def current() -> Worker | None:
    """The worker measuring for this process's comparison, if one was started and not yet stopped."""
    return _worker


def discard() -> None:
    """End the worker if it is still there (a command that did not compare, or failed): its results are not
    needed."""
    global _worker
    worker, _worker = _worker, None
    if worker is None:
        return
    import signal

    os.close(worker.results)
    _close_scans(worker)
    try:
        os.kill(worker.pid, signal.SIGKILL)
        os.waitpid(worker.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


class Messages:
    """The worker's messages, from the bytes of its pipe as they come: whole messages only (a killed worker may
    have written part of its last). The first is the header (the metric columns); each other, a batch of records."""

    def __init__(self) -> None:
        self._data = b""
        self.columns: tuple[str, ...] | None = None

    def feed(self, data: bytes) -> list[tuple]:
        """The records of the whole messages ``data`` completes."""
        import marshal

        data = self._data + data
        records: list[tuple] = []
        start = 0
        while len(data) - start >= 4:
            size = int.from_bytes(data[start : start + 4], "little")
            if len(data) - start - 4 < size:
                break
            try:
                message = marshal.loads(data[start + 4 : start + 4 + size])
            except (EOFError, ValueError, TypeError):
                data, start = b"", 0
                break
            start += 4 + size
            if self.columns is None:
                self.columns = message
            else:
                records += message
        self._data = data[start:]
        return records


def read_now(worker: Worker) -> tuple[bytes, bool]:
    """What the worker has written so far, without waiting or stopping it, and whether its pipe has ended (it is
    gone: every record it sent is in the bytes; :func:`_stop` then closes the pipe and waits for it)."""
    import select

    chunks = []
    ended = False
    while select.select([worker.results], [], [], 0)[0]:
        chunk = os.read(worker.results, 1 << 20)
        if not chunk:
            ended = True
            break
        chunks.append(chunk)
    return b"".join(chunks), ended


def stop(worker: Worker) -> bytes:
    """Stop the worker and take the rest of what it writes (see :func:`_drain`); it is then gone."""
    global _worker
    _worker = None
    worker.flag[0] = 1
    try:
        return b"".join(_drain(worker))
    finally:
        os.close(worker.results)
        _close_scans(worker)
        try:  # noqa: SIM105  (contextlib is not imported by the command's client of the daemon)
            os.waitpid(worker.pid, 0)
        except ChildProcessError:
            pass


def _drain(worker: Worker) -> list[bytes]:
    """Everything the stopped worker writes until its pipe ends, killing it if that takes over
    :data:`_GRACE_SECONDS`."""
    import select
    import signal
    import time

    chunks = []
    deadline = time.monotonic() + _GRACE_SECONDS
    killed = False
    while True:
        if not killed:
            ready, _, _ = select.select([worker.results], [], [], max(deadline - time.monotonic(), 0.0))
            if not ready:
                try:  # noqa: SIM105
                    os.kill(worker.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                killed = True
        chunk = os.read(worker.results, 1 << 20)
        if not chunk:
            return chunks
        chunks.append(chunk)


# -- the worker (a forked process without numpy) --------------------------------------------------------------


def _run_worker(
    roots: tuple[str, str], flag: Any, out: int, ship: Any, graph: str | None = None, target: str | None = None
) -> None:
    """Measure the pairs of the two dumps until ``flag`` is set (or the parent is gone), writing the records to
    ``out`` as it goes, :data:`_BATCH` at a time (marshalled, each message after its length); each dump.json
    scanned goes to ``ship`` (an :class:`~nbprec.compare.early_msprobe.Shipper`, or None), and first the model of
    the GE graph file ``graph``, if given: the command reads it before it opens the dumps. Dumps without pairs to
    measure: the index rows of ``target`` (the path as given) when it is a CANN dump (:func:`_prepare_cann`)."""
    import gc
    import marshal

    gc.disable()  # (a short-lived process, ended by os._exit: its scans make many objects and no cycle to collect)
    model = graph_key = None
    if graph is not None and ship is not None:
        from nbprec.graph.ge import shipped_record

        shipped = shipped_record(graph)
        if shipped is not None:
            graph_key, pickled, model = shipped
            ship(graph_key, pickled)

    try:  # room for the records of the whole window: the parent reads none until it stops this worker
        import fcntl

        fcntl.fcntl(out, fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass

    def send(message: Any) -> None:
        data = marshal.dumps(message)
        view = memoryview(len(data).to_bytes(4, "little") + data)
        while view:
            view = view[os.write(out, view) :]

    parent = os.getppid()
    batch: list[tuple] = []
    shipped_before = ship.sent if ship is not None else 0
    try:
        pairs = _pair_records(roots, flag, ship)
        header = next(pairs, None)
        if header is None:
            scanned = ship is not None and ship.sent > shipped_before  # (an msprobe dump.json: not a CANN dump)
            if ship is not None and target is not None and not scanned and (graph is None or model is not None):
                _prepare_cann(target, model, graph_key, ship, flag)
            return
        send(header)
        elements = 0
        for record in pairs:
            batch.append(record)
            numel = 1
            for size in record[4]:  # (the shape)
                numel *= size
            elements += numel
            if len(batch) >= _BATCH or elements >= _BATCH_ELEMENTS:
                send(batch)
                batch, elements = [], 0
                if os.getppid() != parent:
                    return  # the command is gone
    finally:
        if batch:
            send(batch)
        os.close(out)


def _prepare_cann(target: str, model: Any, graph_key: tuple | None, ship: Any, flag: Any) -> None:
    """Make and send the index rows of ``target`` when it is a CANN dump
    (:func:`nbprec.formats.cann_index.ship_rows`), with ``flag``'s byte 1
    :data:`~nbprec.compare.early_msprobe.PREPARING` meanwhile and its bytes 2-7 counting the files read (the
    command waits for rows in the making while that count moves: :meth:`ShippedScans.wait
    <nbprec.compare.early_msprobe.ShippedScans.wait>`)."""
    from nbprec.compare.early_msprobe import PREPARING

    flag[1] = PREPARING
    try:
        from nbprec.formats.cann_index import ship_rows

        def beat(done: int, _total: int) -> None:
            flag[2:8] = done.to_bytes(6, "little")

        ship_rows(target, model, graph_key, ship, beat)
    finally:
        flag[1] = 0


def _pair_records(roots: tuple[str, str], flag: Any, ship: Any = None) -> Any:
    """Yield the header (the metric columns), then a record per pair measured: (target file, bench file, target
    dtype, bench dtype, shape, hints, metric values, why a column is missing or '', each side's count of NaN and
    infinities), in the target's order: msprobe's
    ``.pt`` payloads dump.json by dump.json, or nbprec's own ``.npy`` ones (:mod:`nbprec.compare.early_native`).
    Nothing when the dumps are not the usual pair."""
    from nbprec.compare import early_msprobe, early_native
    from nbprec.compare.small_pairs import mapped_pair, small_pair

    if early_native.is_native(roots[0]) and early_native.is_native(roots[1]):
        pairs, kind = early_native.candidates(roots), "npy"
    else:
        pairs, kind = early_msprobe.candidates(roots, ship), "pt"
    columns = None
    later: list[tuple] = []  # pairs whose payloads were not all in the page cache: measured after the others
    for (t_file, b_file, t_dtype, b_dtype, shape, hints), wait in _cached_first(pairs, later):
        if flag[0]:
            return
        measured = small_pair(t_file, t_dtype, b_file, b_dtype, shape, hints, kind, wait)
        if measured is None and kind == "pt":  # (a payload too large to be read whole: mapped, as the loader maps it)
            measured = mapped_pair((t_file, t_dtype, b_file, b_dtype, shape, hints), wait)
        if measured is False:  # (its reading from the disk has started: it comes in meanwhile)
            later.append((t_file, b_file, t_dtype, b_dtype, shape, hints))
            continue
        if measured is None:
            continue
        values, reason, _held, counts = measured
        if columns is None:
            columns = tuple(values)
            yield columns
        if tuple(values) != columns:
            return
        yield (t_file, b_file, t_dtype, b_dtype, shape, hints, tuple(values.values()), reason, counts)


def _cached_first(pairs: Any, later: list[tuple]) -> Any:
    """``(pair, False)`` for each of ``pairs`` (read without waiting for the disk), then ``(pair, True)`` for each
    the caller put in ``later`` meanwhile (read, waiting)."""
    for pair in pairs:
        yield pair, False
    for pair in later:
        yield pair, True
