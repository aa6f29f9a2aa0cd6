"""Tensor payload files of a capture (mode ``"tensor"``): one ``.npy`` per tensor, written in the background.

The capture hands each payload over as a snapshot: its own copy of the tensor's values, taken when the op is
recorded. A zero-copy view could not be handed to another thread safely: the model may change the tensor
in place before the thread gets to it, and not only through ``add_``-style calls the capture sees
(``F.batch_norm`` updates its running statistics inside the call, optimizers and ``.data`` write
parameters, numpy views write anywhere). The copy is a ``memcpy`` into memory that is reused from payload
to payload.

Where the compiled writer ``nbprec.capture._npyio`` (``_npyio.c``, POSIX) was built, the copies go into a ring
of :data:`RING_BYTES` and C threads then create each file (one thread, in order) and write its header and
data with one ``writev`` (the others), never taking the GIL: the model's thread and the writer do not wait
for each other. Without it a Python thread does the same with ``os.write`` (it needs the GIL between system
calls, so a busy model slows it down), with copy buffers reused by size.

At most ``max_pending`` bytes wait at a time (the capture waits for the writer beyond that), files are
complete when :meth:`PayloadWriter.close` returns, and an error while writing (a full disk) is raised in
the capture's thread at the next save or at close, as a :class:`~nbprec.errors.CaptureError` naming the
file. The ``.npy`` header (format 1.0, exactly what :func:`numpy.save` writes) is cached per dtype and
shape.

A record whose values were saved before (the same tensor, unchanged, recorded again as the next op's input)
is written as a hard link of that file (:meth:`PayloadWriter.link`): no copy, no data written, and no new
inode, which on some file systems is most of what a file costs. A file is always made under a new name: a
name left by an earlier capture into the same folder is removed first, never written through, since it may
be a hard link of another file. Where the folder cannot hold hard links (:meth:`PayloadWriter.can_link`
finds out once), every record gets a file of its own, as before.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import io
import os
import queue
import threading
from typing import Any

import numpy as np

from nbprec.errors import CaptureError

#: Bytes of payloads waiting for the writer thread at most (the capture blocks beyond this).
MAX_PENDING = 256 << 20
#: Bytes of copy buffers kept for reuse once the thread has written them (fresh memory costs a page fault
#: per 4 KiB on first touch, which made the copies three times slower than ``memcpy``).
MAX_SPARE = 128 << 20
#: Payloads smaller than this are copied into fresh memory (the allocator's own pools serve them well).
_RECYCLE_FROM = 1 << 16
#: Threads of the compiled writer filling files (one more creates them, in order).
WRITER_THREADS = 1
#: Bytes of the compiled writer's snapshot ring: payloads waiting for its threads at most, and the memory its
#: snapshots touch however many there are (memory touched for the first time is slow to copy into).
RING_BYTES = 64 << 20
#: Hard links made to one payload file at most (file systems cap an inode's links: ext4 at 65,000); the
#: capture saves the values afresh beyond this, and links to the new file.
MAX_LINKS = 1000


def load_native_writer() -> Any:
    """The compiled writer's class (``nbprec.capture._npyio.Writer``), or None when it was not built."""
    try:
        return importlib.import_module("nbprec.capture._npyio").Writer
    except ImportError:
        return None


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header :func:`numpy.save` writes for a C-ordered array of ``dtype`` and ``shape``."""
    buffer = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    try:
        np.lib.format.write_array_header_1_0(buffer, header)
    except ValueError:  # a header beyond 64 KiB needs format 2.0
        buffer = io.BytesIO()
        np.lib.format.write_array_header_2_0(buffer, header)
    return buffer.getvalue()


def capture_error(path: str, exc: OSError) -> CaptureError:
    """The :class:`CaptureError` for an OSError while writing ``path`` (a full disk said as such)."""
    if exc.errno == errno.ENOSPC:
        return CaptureError(f"{path}: no space left on device while writing the dump")
    return CaptureError(f"{path}: cannot write the dump: {exc.strerror or exc}")


def _replacing(make: Any, path: str) -> Any:
    """``make()`` (which creates ``path`` and fails if it exists), after removing an existing ``path``."""
    try:
        return make()
    except FileExistsError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return make()


def write_file(path: str, header: bytes, data: memoryview | bytes) -> None:
    """Write one ``.npy`` file (header, then data) under a new name (an existing ``path`` is removed first);
    a partial file is removed and the error raised."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    try:
        fd = _replacing(lambda: os.open(path, flags, 0o666), path)
        try:
            _write_all(fd, header)
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise capture_error(path, exc) from exc


def link_file(path: str, source: str) -> None:
    """Make ``path`` a hard link of ``source`` (an existing ``path`` is replaced); errors as :func:`write_file`."""
    try:
        _replacing(lambda: os.link(source, path), path)
    except OSError as exc:
        raise capture_error(path, exc) from exc


def links_work(folder: str) -> bool:
    """Whether ``folder``'s file system makes hard links (a probe file and its link, removed again)."""
    probe = os.path.join(folder, f".nbprec-link-probe-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(probe, "xb"):
            pass
        try:
            os.link(probe, probe + "-2")
            os.unlink(probe + "-2")
            return True
        finally:
            os.unlink(probe)
    except OSError:
        return False


def _write_all(fd: int, data: memoryview | bytes) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view) :]


class PayloadWriter:
    """Writes payload files into one folder, in a background thread.

    Parameters
    ----------
    folder
        The dump's tensor folder (it exists).
    max_pending
        Bytes of payloads that may wait for the writer (the compiled writer's ring holds at most
        :data:`RING_BYTES` of them).
    threaded
        False writes each file in :meth:`save` itself (tests, and platforms without threads).
    native
        Use the compiled writer when it was built (False: the Python thread, for tests).
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        max_pending: int = MAX_PENDING,
        threaded: bool = True,
        native: bool = True,
    ) -> None:
        self._folder = os.fspath(folder)
        writer = load_native_writer() if threaded and native else None
        ring = min(max_pending, RING_BYTES)
        self._native = None if writer is None else writer(os.fsencode(self._folder), WRITER_THREADS, ring)
        self._headers: dict[tuple[str, tuple[int, ...]], bytes] = {}
        self._max_pending = max_pending
        self._pending = 0
        self._lock = threading.Condition()
        self._error: BaseException | None = None
        # (path, header, data, buffer) of a file; (path, None, source path, None) of a link; None: stop
        self._queue: queue.SimpleQueue[tuple[str, Any, Any, np.ndarray | None] | None] | None = None
        self._thread: threading.Thread | None = None
        self._threaded = threaded
        self._can_link: bool | None = None
        self._spare: dict[int, list[np.ndarray]] = {}  # size class -> buffers of 2**class bytes, written out
        self._spare_bytes = 0
        self.bytes_written = 0
        self.links = 0

    def save(self, file_name: str, array: np.ndarray, owned: bool = False) -> None:
        """Write ``array`` (C-contiguous, numeric) as ``folder/file_name``.

        The values are copied first (unless ``owned``: the array is already the capture's own copy), so the
        caller's tensor may change as soon as this returns.
        """
        self._raise_pending()
        key = (array.dtype.str, array.shape)
        header = self._headers.get(key)
        if header is None:
            header = self._headers[key] = npy_header(array.dtype, array.shape)
        path = f"{self._folder}/{file_name}"
        nbytes = array.nbytes
        if self._native is not None:
            try:
                self._native.save(os.fsencode(file_name), header, array if nbytes else b"")
            except OSError as exc:
                raise capture_error(exc.filename or path, exc) from exc
            self.bytes_written += len(header) + nbytes
            return
        if not self._threaded:
            write_file(path, header, array.reshape(-1).view(np.uint8) if nbytes else b"")
            self.bytes_written += len(header) + nbytes
            return
        data = array.reshape(-1).view(np.uint8) if nbytes else np.empty(0, np.uint8)
        buffer = None
        if not owned and nbytes:
            data, buffer = self._copy(data)
        with self._lock:
            while self._pending and self._pending + nbytes > self._max_pending and self._error is None:
                self._lock.wait()
            self._pending += nbytes
        self._start()
        assert self._queue is not None
        self._queue.put((path, header, data, buffer))
        self.bytes_written += len(header) + nbytes

    def can_link(self) -> bool:
        """Whether :meth:`link` works in this folder (found out at the first call, with a probe file)."""
        if self._can_link is None:
            self._can_link = links_work(self._folder)
        return self._can_link

    def link(self, file_name: str, source_name: str) -> None:
        """Make ``folder/file_name`` a hard link of ``folder/source_name``, a file saved (or linked) before.

        Only where :meth:`can_link`. Links are made in order with the saves, so the source exists by then.
        """
        self._raise_pending()
        path, source = f"{self._folder}/{file_name}", f"{self._folder}/{source_name}"
        if self._native is not None:
            try:
                self._native.link(os.fsencode(file_name), os.fsencode(source_name))
            except OSError as exc:
                raise capture_error(exc.filename or path, exc) from exc
        elif not self._threaded:
            link_file(path, source)
        else:
            self._start()
            assert self._queue is not None
            self._queue.put((path, None, source, None))
        self.links += 1

    def _copy(self, data: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """A copy of ``data``, and the buffer holding it when that goes back to the spares once written.

        Buffers are taken by size class (powers of two: the tensors of a model's layers recur in a few
        sizes), so a buffer the thread has written out serves a later payload of about the same size.
        """
        nbytes = data.nbytes
        if nbytes < _RECYCLE_FROM:
            return data.copy(), None
        size_class = (nbytes - 1).bit_length()
        with self._lock:
            spares = self._spare.get(size_class)
            buffer = spares.pop() if spares else None
            if buffer is not None:
                self._spare_bytes -= buffer.nbytes
        if buffer is None:
            buffer = np.empty(1 << size_class, np.uint8)
        copy = buffer[:nbytes]
        np.copyto(copy, data)
        return copy, buffer

    def _start(self) -> None:
        if self._thread is None:
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._run, name="nbprec-capture-payloads", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        assert self._queue is not None
        while True:
            item = self._queue.get()
            if item is None:
                return
            path, header, data, buffer = item
            try:
                if self._error is None:
                    if header is None:  # a link: data is its source's path
                        link_file(path, data)
                    else:
                        write_file(path, header, data)
            except BaseException as exc:  # handed to the capture's thread
                self._error = exc
            if header is None:
                continue
            with self._lock:
                self._pending -= data.nbytes
                if buffer is not None and self._spare_bytes + buffer.nbytes <= MAX_SPARE:
                    self._spare.setdefault(buffer.nbytes.bit_length() - 1, []).append(buffer)
                    self._spare_bytes += buffer.nbytes
                self._lock.notify_all()

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self) -> None:
        """Wait until every file is written; raise the thread's first error, if any."""
        if self._native is not None:
            try:
                self._native.close()
            except OSError as exc:
                raise capture_error(exc.filename or self._folder, exc) from exc
            return
        thread, self._thread = self._thread, None
        if thread is not None:
            assert self._queue is not None
            self._queue.put(None)
            thread.join()
        self._spare.clear()
        self._spare_bytes = 0
        self._raise_pending()


__all__ = [
    "MAX_LINKS",
    "MAX_PENDING",
    "MAX_SPARE",
    "RING_BYTES",
    "WRITER_THREADS",
    "PayloadWriter",
    "capture_error",
    "link_file",
    "links_work",
    "load_native_writer",
    "npy_header",
    "write_file",
]
