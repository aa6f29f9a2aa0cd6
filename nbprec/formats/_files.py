"""Opening the files of a dump safely: regular files only, inside the dump, read in bounded memory.

Every reader opens the files it reads through these helpers, so that a hostile or broken dump cannot make
nbprec hang or exhaust memory (see ``docs/security.md``, section *Readers*):

- :func:`open_regular` opens without blocking (``O_NONBLOCK``: a FIFO with no writer does not hang the open)
  and refuses anything that is not a regular file (FIFOs, character and block devices such as ``/dev/zero``,
  sockets, folders) before a byte is read;
- :func:`read_regular` reads a whole small file (a header, a JSON side file) after checking its size
  against a limit, so a 50 GB sparse file is refused rather than read;
- :func:`inside` resolves symbolic links and says whether a file's real path lies inside one of the dump's
  folders, so that a payload symlinked to ``/etc/shadow`` is not read;
- :class:`ConfinedFiles` opens payloads with both checks, resolving each payload folder once;
- :class:`PayloadFolder` lists a tensor folder once and says, per payload, whether it can be read (a regular
  file, or a link to one inside the dump) or why not, for the problems a reader records when it opens a dump;
- :func:`read_ahead` reads a batch of small payloads in one call, for a thread measuring pairs beside others.

Examples
--------
>>> inside("/etc/passwd", [real_folder("/etc")])
True
>>> inside("/etc/../root/x", [real_folder("/etc")])
False
"""

from __future__ import annotations

import _thread
import errno
import os
import stat
import sys
from collections.abc import Iterable

from nbprec.errors import DumpFormatError

TYPE_CHECKING = False  # (without importing typing: this module serves code that runs before the imports)
if TYPE_CHECKING:
    from pathlib import Path

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

#: Largest side file (a JSON header, a ``complete`` marker, a column cache line) read whole.
MAX_SIDE_FILE = 256 << 20

#: Payloads of at least this many bytes are memory-mapped and read in place as the comparison reaches them;
#: smaller ones are read. Mapping costs page faults and an unmap (about 40 us for a file of a few hundred
#: KiB), more than reading it: on an msprobe dump with many 64 KiB - 1 MiB payloads, reading those cut the
#: compare's CPU time by 6%. Read payloads are copies, so this also bounds what a read holds in memory.
#: (:mod:`nbprec.formats._payload` reads payloads by it; it is defined here, without numpy, for the ``.pt``
#: archive layer :mod:`nbprec.formats._ptzip`.)
MAP_FROM = 1 << 20

#: Mapped payloads of at least this many bytes have their pages handed back as they are read
#: (:class:`nbprec.formats._payload.MappedPages`, which reads it from here); smaller ones keep them until they are
#: unmapped (reading them twice, as KL's first pass and the main pass do, then costs no page faults the second
#: time), and the compiled kernel reads such a pair in one call.
RELEASE_FROM = 64 << 20


def printable(text: object) -> str:
    """``text`` with lone surrogates (bytes of a file name that are not UTF-8) written as ``\\udcff`` escapes:
    safe to print, write or encode, for the sentences of problems and errors.

    >>> printable("op\\udcff")
    'op\\\\udcff'
    """
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def long_number() -> str:
    """Python's refusal to convert a decimal integer of thousands of digits (a guard against conversions whose time
    grows with the square of the length: ``sys.get_int_max_str_digits()``), in a user's terms."""
    return f"a number of over {sys.get_int_max_str_digits()} digits, more than Python converts"


def error_text(exc: BaseException) -> str:
    """``str(exc)`` for a problem's sentence, :func:`long_number` for the ``ValueError`` of an integer too long to
    convert (whose own text tells a programmer how to lift the limit)."""
    text = str(exc)
    return long_number() if isinstance(exc, ValueError) and "integer string conversion" in text else text


def shown(value: object, limit: int = 120) -> str:
    """``repr(value)`` for a problem's sentence, cut to ``limit`` characters (a hostile value may be huge); an
    integer of over 128 bits by its size, and a value whose ``repr`` refuses (one holding an integer of
    thousands of digits) by its type.

    >>> shown(10**3000), shown("y" * 20, 10)
    ('an integer of 9966 bits', "'yyyyyy...")
    """
    if type(value) is int and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except ValueError:  # (int's str() refuses over sys.get_int_max_str_digits() digits)
        return f"a {type(value).__name__} too large to write out"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def file_kind(mode: int) -> str:
    """What a file of mode ``mode`` is, in words (``"a FIFO"``, ``"a character device"``, ...)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def not_regular(mode: int) -> str:
    """The problem sentence for a payload or side file that is not a regular file."""
    return f"not a regular file ({file_kind(mode)}): not read"


def open_regular(path: str | os.PathLike[str], record: str | None = None, *, nofollow: bool = False) -> tuple[int, int]:
    """``(file descriptor, size)`` of the regular file ``path``, opened read-only without blocking.

    Raises :class:`FileNotFoundError` when the file does not exist (callers that treat a missing file in their
    own way catch it), and :class:`~nbprec.errors.DumpFormatError` naming the file when it cannot be opened or
    is not a regular file (nothing is read from it then). ``nofollow`` refuses a symbolic link as the last
    component (``OSError`` with ``errno.ELOOP``, raised as is for the caller to resolve the link itself).
    """
    try:
        fd = os.open(path, _FLAGS | (_NOFOLLOW if nofollow else 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        if nofollow and _NOFOLLOW and exc.errno == errno.ELOOP:  # a symbolic link: the caller resolves it
            raise
        raise DumpFormatError(path, f"cannot open the file: {exc.strerror or exc}", record) from exc
    except (UnicodeError, ValueError) as exc:  # a name that cannot be encoded for the file system, or a NUL
        raise DumpFormatError(os.fsdecode(path), f"bad file name: {exc}", record) from exc
    try:
        info = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise DumpFormatError(path, f"cannot inspect the file: {exc.strerror or exc}", record) from exc
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise DumpFormatError(path, not_regular(info.st_mode), record)
    return fd, info.st_size


def open_plain_file(path: str) -> tuple[int, int] | None:
    """``(file descriptor, size)`` of ``path`` when it is a regular file and not a symbolic link (opened as
    :func:`open_regular` opens), else None: missing, a link, not a regular file, not openable. For fast paths
    that leave every other case to :func:`open_regular`'s checks and messages; always None where links cannot
    be refused at open (no ``O_NOFOLLOW``)."""
    if not _NOFOLLOW:
        return None
    try:
        fd = os.open(path, _FLAGS | _NOFOLLOW)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    return fd, info.st_size


try:
    from nbprec.formats._zipdir import read_small_many as _read_small_many_c
except ImportError:  # not built
    _read_small_many_c = None

#: This thread's small payloads read ahead by :func:`read_ahead`: path -> what its reader takes (see there).
_ahead = _thread._local()


def read_ahead(paths: list[str], archives: bool = True, wait: bool = True) -> set[str]:
    """Read the small payload files ``paths`` now, in one call that holds the GIL for none of them; this thread's
    next read of each (:func:`taken_ahead`) takes it from here, once, instead of reading it (until
    :func:`forget_ahead`). ``archives``: msprobe's ``.pt`` archives, kept as ``(the whole file, its zip entries)``
    (what :func:`nbprec.formats._ptzip.small_tensor` reads); else each file's bytes (nbprec's ``.npy`` payloads,
    :func:`nbprec.formats._npyfile.small_npy`). For threads measuring pairs side by side (a notebook's
    ``nbprec.compare``): reading a batch's payloads in one go hands the GIL over once, not twice a pair, and each
    hand-over under contention costs both threads a sleep and a wake-up. Files are opened as :func:`open_plain_file`
    opens them, of 1 to :data:`MAP_FROM` - 1 bytes; one the reader would refuse or fail on is not kept: that
    read then says so. Nothing is done without the compiled reader (``nbprec.formats._zipdir``).

    ``wait=False``: a file part of which is not in the page cache is not read (its reading from the disk has
    started, and nothing waits for it); the paths of those files are returned (an empty set otherwise)."""
    if _read_small_many_c is None or not paths:
        return set()
    try:
        found = _read_small_many_c(paths, MAP_FROM, archives, wait)
    except ValueError:  # a name no file can have (a NUL byte): each pair's own read then says so
        return set()
    _ahead.files = {path: small for path, small in zip(paths, found, strict=True) if small}
    return {path for path, small in zip(paths, found, strict=True) if small is False}


def read_small_file(path: str, wait: bool = True) -> bytes | bool | None:
    """The bytes of the small payload file ``path`` (opened as :func:`read_ahead` opens it), in one call without
    the GIL; None for a file it does not read (or without the compiled reader). ``wait=False``: False when part of
    the file is not in the page cache (its reading from the disk has started, and nothing waits for it)."""
    if _read_small_many_c is None:
        return None
    try:
        return _read_small_many_c([path], MAP_FROM, False, wait)[0]
    except ValueError:  # (a NUL byte in the name: the reader's checked path says so)
        return None


def taken_ahead(path: str) -> object | None:
    """What :func:`read_ahead` read of ``path`` in this thread and no read took yet (now taken), or None."""
    ahead = getattr(_ahead, "files", None)
    return ahead.pop(path, None) if ahead else None


def forget_ahead() -> None:
    """Drop what :func:`read_ahead` read and this thread did not take."""
    _ahead.files = None


def read_fd(fd: int, size: int, offset: int = 0) -> bytes:
    """``size`` bytes at ``offset`` of the open file ``fd`` (fewer when the file ends first)."""
    parts = []
    while size > 0:
        chunk = os.pread(fd, min(size, 1 << 30), offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_regular(path: str | os.PathLike[str], *, limit: int = MAX_SIDE_FILE, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (a larger file is refused unread).

    Raises :class:`FileNotFoundError` when it is missing and :class:`~nbprec.errors.DumpFormatError` otherwise.
    """
    fd, size = open_regular(path)
    try:
        if size > limit:
            raise DumpFormatError(
                path, f"{size} bytes, more than the {limit} bytes nbprec reads for a {what}: not read (damaged?)"
            )
        try:
            return read_fd(fd, size)
        except OSError as exc:
            raise DumpFormatError(path, f"cannot read the file: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def real_folder(path: str | os.PathLike[str]) -> str:
    """The real path of a folder (symbolic links resolved), with a trailing separator."""
    return os.path.join(os.path.realpath(path), "")


def inside(path: str | os.PathLike[str], roots: Iterable[str]) -> bool:
    """Whether the real path of ``path`` (every symbolic link resolved) lies inside one of ``roots``, real
    folder paths as :func:`real_folder` gives them, or is one of them (a dump whose payloads lie in its own
    folder: TensorFlow's ``.npy`` dumps)."""
    real = os.path.realpath(path)
    return any(real.startswith(root) or real + os.sep == root for root in roots)


class ConfinedFiles:
    """Opens payload files whose real path lies inside ``roots`` (real folders as :func:`real_folder` gives
    them), resolving each payload folder once: a payload that is not a symbolic link itself lies where its
    folder does, so most opens take no path resolution at all (``O_NOFOLLOW``); a link is resolved and
    followed only when it leads inside.
    """

    def __init__(self, roots: Iterable[str]) -> None:
        self.roots = list(roots)
        self._inside: dict[str, bool] = {}  # payload folder -> whether its real path is inside the dump

    def folder_inside(self, path: str) -> bool:
        """Whether the real path of ``path``'s folder lies inside the roots (resolved once per folder): a file
        there that is not a symbolic link itself lies inside too."""
        folder = os.path.dirname(path)
        found = self._inside.get(folder)
        if found is None:
            found = self._inside[folder] = inside(os.path.join(folder, "."), self.roots)
        return found

    def open(self, path: str, record: str | None = None) -> tuple[int, int]:
        """``(file descriptor, size)`` of the regular file ``path``, as :func:`open_regular` gives them.

        Raises :class:`~nbprec.errors.DumpFormatError` naming the file when it is missing, lies outside the
        roots (a link leading out), is not a regular file or cannot be opened.
        """
        try:
            if self.folder_inside(path):
                try:  # not a symbolic link itself: it lies in its folder, inside the dump
                    return open_regular(path, record, nofollow=True)
                except OSError as exc:
                    if exc.errno != errno.ELOOP or isinstance(exc, FileNotFoundError):
                        raise
            if not inside(path, self.roots):
                where = printable(os.path.realpath(path))
                raise DumpFormatError(path, f"payload lies outside the dump (at {where}): not read", record)
            return open_regular(path, record)
        except FileNotFoundError:
            raise DumpFormatError(path, "payload file missing", record) from None


class PayloadFolder:
    """One listing of a tensor folder: which names are regular files, and what the others are."""

    def __init__(self, folder: Path, roots: list[str]) -> None:
        self.folder = folder
        self.roots = roots
        self.regular: set[str] = set()
        self.other: dict[str, str] = {}  # name -> why it cannot be read (symlinks: resolved on first use)
        with os.scandir(folder) as entries:  # raises OSError when the folder cannot be listed
            for entry in entries:
                try:
                    if entry.is_file(follow_symlinks=False):
                        self.regular.add(entry.name)
                    elif entry.is_symlink():
                        self.other[entry.name] = ""
                    else:
                        self.other[entry.name] = f"not a regular file ({file_kind(entry.stat().st_mode)}): not read"
                except OSError as exc:
                    self.other[entry.name] = f"cannot inspect the file: {exc.strerror or exc}"

    def problem(self, name: str) -> str:
        """'' when payload ``name`` can be read, else why not."""
        if name in self.regular:
            return ""
        if name not in self.other:
            return f"payload file missing: {printable(name)}"
        why = self.other[name]
        if not why:  # a symbolic link: usable when it resolves to a regular file inside the dump
            real = os.path.realpath(os.path.join(self.folder, name))
            shown, real_shown = printable(name), printable(real)
            try:
                mode = os.stat(real).st_mode
            except OSError:
                why = f"payload {shown} is a broken symbolic link: not read"
            else:
                if not inside(real, self.roots):
                    why = f"payload {shown} is a symbolic link to {real_shown}, which lies outside the dump: not read"
                elif not stat.S_ISREG(mode):
                    why = f"payload {shown} links to {file_kind(mode)}, not a regular file: not read"
            self.other[name] = why or "ok"
        return "" if why == "ok" else why


__all__ = [
    "MAX_SIDE_FILE",
    "ConfinedFiles",
    "PayloadFolder",
    "file_kind",
    "inside",
    "not_regular",
    "open_regular",
    "printable",
    "read_fd",
    "read_regular",
    "real_folder",
]
