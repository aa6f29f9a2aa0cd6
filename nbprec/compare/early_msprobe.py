"""The early worker's pairs of msprobe dumps (see :mod:`nbprec.compare.early`, which measures them).

Each side's ``dump.json`` files (those of the same ``step*/rank*`` folders in pairs; msprobe's ``proc{pid}`` folders
taken as the reader takes them, ranked in process-id order) are read with the C scanner; the tensors both record
under the same payload name, of one shape, are candidates, in the target's order (the pairs of a step's ranks in
turns: :func:`candidates`), their payloads read with :func:`nbprec.formats._ptzip.small_tensor` (small plain ``.pt``
archives). The worker steps aside for a layout it does not know, sides whose ``step*/rank*`` folders differ, a
``dump.json`` over :data:`_SCAN_LIMIT`, or payloads that lie outside the run's folder.

The worker sends each scan to the command's process (:class:`Shipper`, :class:`ShippedScans`), whose reader then
takes it rather than scan the same file again (:mod:`nbprec.formats._prescan`).
"""

from __future__ import annotations

import itertools
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from mmap import mmap

    from nbprec.compare.early import Candidate

#: The scanner's slot names (``nbprec.formats.msprobe_columns.SLOTS``, which imports numpy; a test holds the two
#: to each other): a scan the worker sends is the one the reader would make.
SLOTS = tuple(str(i) for i in range(256))
#: A dump.json larger than this is not scanned by the worker: the scan alone would outlast its window.
_SCAN_LIMIT = 8 << 20
#: msprobe's payload folder beside its dump.json (``nbprec.formats.msprobe_folder.TENSOR_DIR``, which imports
#: ``pathlib`` and ``typing``: 6 ms of the worker's start; a test holds the two to each other).
_TENSOR_DIR = "dump_tensor_data"


def candidates(roots: tuple[str, str], ship: Callable[[tuple, tuple], None] | None = None) -> Iterator[Candidate]:
    """``(target file, bench file, target dtype, bench dtype, shape, hints)`` of each pair the worker may measure,
    in the target's order: the tensors both sides record under the same payload name, of one shape, the hints
    being both sides' recorded (min, max). Each dump.json scanned goes to ``ship`` with its identity
    (:func:`nbprec.formats._prescan.identity`), for the reader of the command's process.

    Where a step holds several ranks' ``dump.json`` files in pairs, they are scanned first and their pairs taken in
    turns, one of each rank in their order (:func:`nbprec.compare.workers.in_turns`, the command's order too): the
    same call of every rank comes together, and the tensors data-parallel ranks hold alike (the parameters, the
    gradients an all-reduce gave every rank) repeat the bytes of a pair just measured, which this process then takes
    (:mod:`nbprec.compare.small_pairs`) instead of measuring them on each rank. Steps come one after the other."""
    for step in _by_step(_paired_dump_jsons(*roots)):
        if len(step) == 1:
            yield from _pairs(*step[0], ship)
            continue
        turns = [list(_pairs(t_json, b_json, ship)) for t_json, b_json in step]
        for turn in itertools.zip_longest(*turns):
            yield from (pair for pair in turn if pair is not None)


def _by_step(paired: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The pairs of dump.json files in runs of one step folder (the folder above the target's rank folder), in
    their order."""
    steps: list[list[tuple[str, str]]] = []
    last = None
    for pair in paired:
        step = os.path.dirname(os.path.dirname(pair[0]))
        if not steps or step != last:
            steps.append([])
        steps[-1].append(pair)
        last = step
    return steps


def _pairs(t_json: str, b_json: str, ship: Callable[[tuple, tuple], None] | None) -> Iterator[Candidate]:
    """:func:`candidates` of one pair of ``dump.json`` files, in the target's order."""
    sides = _tensors(t_json, ship), _tensors(b_json, ship)
    if sides[0] is None or sides[1] is None:
        return
    (t_dir, target), (b_dir, bench) = sides
    for name, (t_dtype, shape, t_hints) in target.items():
        found = bench.get(name)
        if found is None or os.sep in name or found[1] != shape:
            continue
        b_dtype, _shape, b_hints = found
        yield os.path.join(t_dir, name), os.path.join(b_dir, name), t_dtype, b_dtype, shape, (*t_hints, *b_hints)


def _tensors(
    dump_json: str, ship: Callable[[tuple, tuple], None] | None = None
) -> tuple[str, dict[str, tuple[str, tuple[int, ...], tuple[float, float]]]] | None:
    """``(payload folder, payload name -> (dtype, shape, (min, max)))`` of an msprobe ``dump.json``, or None (not
    the usual layout, over :data:`_SCAN_LIMIT`, or payloads that lie outside the run's folder). The scan goes to
    ``ship`` with the file's identity as it was before it was read (a change made meanwhile changes it)."""
    from nbprec.formats._files import read_regular
    from nbprec.formats._prescan import identity

    try:
        from nbprec.formats._msprobescan import scan
    except ImportError:
        return None
    folder = os.path.dirname(dump_json)
    run = folder
    if _is_rank_folder(os.path.basename(run)):
        run = os.path.dirname(run)
    if _numbered(os.path.basename(run), "step"):
        run = os.path.dirname(run)
    payloads = os.path.join(folder, _TENSOR_DIR)
    if not os.path.realpath(payloads).startswith(os.path.join(os.path.realpath(run), "")):
        return None  # the payloads lie elsewhere (a link out of the dump): left to the reader's checks
    try:
        before = identity(os.stat(dump_json))
        text = read_regular(dump_json, limit=_SCAN_LIMIT, what="dump.json")
    except Exception:
        return None
    scanned = scan(text, SLOTS)
    if scanned is None:
        return None
    if ship is not None:
        ship(before, scanned)
    data_names, dtypes, shapes, stats = scanned[7], scanned[8], scanned[9], memoryview(scanned[11]).cast("d")
    tensors = {}
    for i, name in enumerate(data_names):
        shape = shapes[i]
        if name and shape is not None and name not in tensors:
            dtype = dtypes[i] or ""
            dtype = dtype[6:] if dtype.startswith("torch.") else dtype  # torch.bfloat16: bfloat16
            tensors[name] = (dtype, tuple(shape), (stats[4 * i], stats[4 * i + 1]))
    return payloads, tensors


def without_payloads(target: str, bench: str) -> bool:
    """Whether ``target`` and ``bench`` are both msprobe dumps (their dump.json files found as the worker finds
    them) with no payload folder beside any dump.json: statistics and md5 dumps, whose comparison reads no
    payload. False for anything else (another format, a path that is not there: the reader says what it is)."""
    return _payload_folders(target, bench) == (0, 0)


def with_payloads(target: str, bench: str) -> bool:
    """Whether ``target`` and ``bench`` are both msprobe dumps with a payload folder beside a dump.json of each
    side: the pairs the worker measures. False for anything else."""
    found = _payload_folders(target, bench)
    return found is not None and all(found)


def _payload_folders(target: str, bench: str) -> tuple[int, int] | None:
    """How many of each side's dump.json files (found as the worker finds them) have a payload folder beside
    them; None when either side has none the worker finds."""
    found = [list(_dump_jsons(root).values()) for root in (target, bench)]
    if not found[0] or not found[1]:
        return None
    t_count, b_count = (
        sum(os.path.lexists(os.path.join(os.path.dirname(j), _TENSOR_DIR)) for j in side) for side in found
    )
    return t_count, b_count


def _paired_dump_jsons(target: str, bench: str) -> list[tuple[str, str]]:
    """The target's and the benchmark's ``dump.json`` files in pairs: those of the same ``step*/rank*`` folders
    under the two paths, or the one of each side when each has one."""
    t_found, b_found = _dump_jsons(target), _dump_jsons(bench)
    if len(t_found) == 1 and len(b_found) == 1:
        return [(next(iter(t_found.values())), next(iter(b_found.values())))]
    return [(t_found[key], b_found[key]) for key in sorted(t_found.keys() & b_found.keys())]


def _dump_jsons(root: str) -> dict[str, str]:
    """Folder under ``root`` ('' for ``root`` itself) -> its ``dump.json``: ``root`` (a dump.json, or a folder
    holding one), else its rank folders, else its ``step*/`` folders' rank folders, as the msprobe reader looks
    (rank folders as :func:`_rank_dirs` names them)."""
    if os.path.isfile(root):
        return {"": root} if root.endswith(".json") else {}
    here = os.path.join(root, "dump.json")
    if os.path.isfile(here):
        return {"": here}
    for steps in ([("", root)], _step_dirs(root)):
        found = {
            os.path.join(step, rank): os.path.join(folder, "dump.json")
            for step, step_dir in steps
            for rank, folder in _rank_dirs(step_dir)
            if os.path.isfile(os.path.join(folder, "dump.json"))
        }
        if found:
            return found
    return {}


def _step_dirs(root: str) -> list[tuple[str, str]]:
    """(name, path) of the ``step*/`` folders of ``root``."""
    names = _listdir(root)
    return [(name, os.path.join(root, name)) for name in names if _numbered(name, "step") and _is_dir(root, name)]


def _rank_dirs(folder: str) -> list[tuple[str, str]]:
    """(key, path) of the rank folders of ``folder``, as the reader takes them
    (``nbprec.formats._layout.rank_folders``): its ``rank*/`` folders, keyed by their names; where it has none, its
    ``proc{pid}/`` ones, keyed ``rank0``, ``rank1`` ... in process-id order (the two runs' processes had other ids)."""
    names = _listdir(folder)
    ranks = [(name, os.path.join(folder, name)) for name in names if _numbered(name, "rank") and _is_dir(folder, name)]
    if ranks:
        return ranks
    procs = sorted((int(name[4:]), name) for name in names if _is_proc(name) and _is_dir(folder, name))
    return [(f"rank{rank}", os.path.join(folder, name)) for rank, (_pid, name) in enumerate(procs)]


def _is_dir(folder: str, name: str) -> bool:
    return os.path.isdir(os.path.join(folder, name))


def _listdir(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _numbered(name: str, prefix: str) -> bool:
    """Whether ``name`` is ``prefix`` and digits (``rank0``, ``step12``, ``rank``): the readers' ``STEP_RE`` and
    ``RANK_RE`` (``nbprec.formats._layout``, which imports numpy), without ``re``; a test holds them to each other."""
    return name.startswith(prefix) and (name[len(prefix) :].isdigit() or name == prefix)


def _is_proc(name: str) -> bool:
    """Whether ``name`` is msprobe's folder of a process that knows no rank (``proc`` and its id: the readers'
    ``PROC_RE``)."""
    return name.startswith("proc") and name[4:].isdigit()


def _is_rank_folder(name: str) -> bool:
    """Whether ``name`` is a rank folder's (the readers' ``is_rank_folder``): ``rank{M}``, or ``proc{pid}``."""
    return _numbered(name, "rank") or _is_proc(name)


# -- the scans the worker sends (nbprec.formats._prescan) --------------------------------------------------------


def scan_file() -> int | None:
    """A file in memory, shared with the worker, that it writes its scans of dump.json files to (Linux's
    ``memfd_create``), or None where there is none."""
    try:
        return os.memfd_create("nbprec-early-scans", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None


class Shipper:
    """In the worker: sends each dump.json scan (:mod:`nbprec.formats._prescan`) to the command's process, through
    the shared file: the record (its length, then the file's identity and the scan, marshalled) is written whole
    before the count in ``flag`` says it is there."""

    def __init__(self, fd: int, flag: mmap) -> None:
        self.fd, self.flag, self.sent = fd, flag, 0

    def __call__(self, identity: tuple, scanned: tuple) -> None:
        import marshal

        try:
            data = marshal.dumps((identity, scanned))
        except ValueError:  # (not the scanner's plain values: never expected)
            return
        view = memoryview(len(data).to_bytes(8, "little") + data)
        self.sent += len(view)
        while view:
            view = view[os.write(self.fd, view) :]
        self.flag[8:16] = self.sent.to_bytes(8, "little")


#: The worker's ``flag[1]`` while it makes a CANN target's index rows (``nbprec.compare.early._prepare_cann``).
PREPARING = 1
#: How long :meth:`ShippedScans.wait` waits for a worker whose count of files read does not move (its walk of the
#: dump's folders, before the first file, counts nothing: 20 us a file, 0.2 s for 10,000).
STALL_SECONDS = 1.0


class ShippedScans:
    """In the command's process: the scans the worker sent, by file identity, read from the shared file as the
    reader asks for one (the :mod:`nbprec.formats._prescan` source while the worker runs); each is given once.
    ``pid``: the worker's, to tell whether it is still there (:meth:`wait`)."""

    def __init__(self, fd: int, flag: mmap, pid: int | None = None) -> None:
        self.fd, self.flag, self.read, self.pid = fd, flag, 0, pid
        self.scans: dict[tuple, object] = {}

    def wait(self) -> None:
        """Wait while the worker makes a CANN target's index rows (``flag[1]`` is :data:`PREPARING`), as long as
        it goes on reading files: not once it is gone, nor once its count of files read (``flag[2:8]``) has not
        moved for :data:`STALL_SECONDS`. The worker started on them before this process needed them: it is
        ahead of this process's own reading, which would also take a core from it."""
        import time

        beat, since = None, time.monotonic()
        while self.flag[1] == PREPARING:
            now = time.monotonic()
            if self.flag[2:8] != beat:
                beat, since = self.flag[2:8], now
            elif now - since > STALL_SECONDS or not self._alive():
                return
            time.sleep(0.0002)

    def _alive(self) -> bool:
        if self.pid is None:
            return False
        try:  # (WNOWAIT: the worker is reaped where it always was, when it is stopped)
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except (ChildProcessError, OSError, AttributeError):
            return False

    def __call__(self, identity: tuple) -> object:
        import marshal

        try:
            sent = min(int.from_bytes(self.flag[8:16], "little"), os.fstat(self.fd).st_size)  # (what is there)
            if sent > self.read:
                data = os.pread(self.fd, sent - self.read, self.read)
                start = 0
                while len(data) - start >= 8:
                    size = int.from_bytes(data[start : start + 8], "little")
                    if len(data) - start - 8 < size:
                        break
                    key, scanned = marshal.loads(data[start + 8 : start + 8 + size])
                    self.scans[tuple(key)] = scanned
                    start += 8 + size
                self.read += start
        except (OSError, ValueError, EOFError, TypeError):  # (the worker's own records: never expected)
            return None
        return self.scans.pop(identity, None)  # (taken once: a second reader of the file scans it itself)


__all__ = ["PREPARING", "STALL_SECONDS", "ShippedScans", "Shipper", "candidates", "scan_file"]
