"""The dump folder: is it there, can the training user write into it, will the dump fit on its file system.

Permissions are checked two ways. For the user running nbprec, ``os.access`` answers (it knows ACLs and
capabilities; root passes everything). For another user (``user="hwhiaiuser"`` or a numeric uid), the
folder's owner, group and mode bits answer, as the kernel does for plain POSIX permissions: the owner's bits if
the user owns it, else the group's bits if the user is in its group, else the others' bits; every folder above
needs search (``x``) permission. ACLs are not read in that case (a finding says so when the answer is "no").
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from nbprec.config.findings import ConfigError, Finding, human_bytes

R, W, X = 4, 2, 1


@dataclass(frozen=True)
class Account:
    """A user to check permissions for: name (may be empty for a bare uid), uid and every group id."""

    name: str
    uid: int
    gids: frozenset[int]

    @property
    def label(self) -> str:
        return f"user {self.name} (uid {self.uid})" if self.name else f"uid {self.uid}"


def account(user: str | int) -> Account:
    """The :class:`Account` of a user name or uid, with its groups from this machine's user database.

    A numeric uid with no entry in the user database is checked by uid alone (its groups are unknown, so only
    the owner's and the others' bits can grant access).
    """
    if isinstance(user, int) or (isinstance(user, str) and user.isdigit()):
        uid = int(user)
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            return Account("", uid, frozenset())
    else:
        try:
            entry = pwd.getpwnam(str(user))
        except KeyError:
            raise ConfigError(
                f"there is no user named {user!r} on this machine: run the check on the training machine, or "
                "give the numeric uid"
            ) from None
    gids = set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    gids.update(g.gr_gid for g in grp.getgrall() if entry.pw_name in g.gr_mem)
    return Account(entry.pw_name, entry.pw_uid, frozenset(gids))


def mode_allows(st: os.stat_result, who: Account, want: int) -> bool:
    """Whether the plain POSIX permissions of ``st`` give ``who`` every bit of ``want`` (``R | W | X``)."""
    if who.uid == 0:  # root reads and writes anything; it may search a folder, or run a file with any x bit
        return not want & X or stat.S_ISDIR(st.st_mode) or bool(st.st_mode & 0o111)
    if st.st_uid == who.uid:
        bits = (st.st_mode >> 6) & 7
    elif st.st_gid in who.gids:
        bits = (st.st_mode >> 3) & 7
    else:
        bits = st.st_mode & 7
    return bits & want == want


def _owner(st: os.stat_result) -> str:
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group}"


def _describe(st: os.stat_result) -> str:
    return f"mode {oct(st.st_mode & 0o7777)}, owner {_owner(st)}"


def existing_ancestor(path: Path) -> Path:
    """``path`` itself if it exists, else the nearest folder above it that does."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or "/")  # pragma: no cover - "/" always exists


_OS_FLAGS = {R: os.R_OK, W: os.W_OK, X: os.X_OK}


def _permission_problem(folder: Path, who: Account | None, want: int) -> str:
    """Why ``who`` (None: the current user) lacks ``want`` on ``folder`` or search on a folder above; or ``""``."""
    if who is None:
        flags = sum(flag for bit, flag in _OS_FLAGS.items() if want & bit)
        if os.access(folder, flags):
            return ""
        for parent in reversed(folder.parents):
            if not os.access(parent, os.X_OK):
                return f"the current user cannot enter {parent} ({_describe(parent.stat())})"
        missing = sum(bit for bit, flag in _OS_FLAGS.items() if want & bit and not os.access(folder, flag))
        return f"the current user cannot {_verbs(missing)} {folder} ({_describe(folder.stat())})"
    for parent in reversed(folder.parents):
        st = parent.stat()
        if not mode_allows(st, who, X):
            return f"{who.label} cannot enter {parent} ({_describe(st)})"
    st = folder.stat()
    missing = sum(bit for bit in (R, W, X) if want & bit and not mode_allows(st, who, bit))
    return f"{who.label} cannot {_verbs(missing)} {folder} ({_describe(st)})" if missing else ""


def _verbs(bits: int) -> str:
    words = [w for bit, w in ((R, "read"), (W, "write into"), (X, "enter")) if bits & bit]
    return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else "".join(words)


def check_dump_path(
    value: object, *, tool: str = "cann", user: str | int | None = None, key: str = "dump_path"
) -> tuple[list[Finding], Path | None]:
    """Check a dump path: given, absolute, an existing folder (CANN) or creatable (msprobe), writable.

    Parameters
    ----------
    value
        The configured path (a string; anything else is an error).
    tool
        ``"cann"``: the folder must exist (CANN's graph engine rejects a path that is not an existing folder
        with read and write permission). ``"msprobe"``: msprobe creates it, so the nearest existing folder
        above must be writable.
    user
        Who will run the training (a name or uid); None checks the user running this call.
    key
        The parameter name used in messages.

    Returns
    -------
    findings, folder
        The findings, and the folder whose file system the dump will land on (None when the path is unusable).
    """
    if value is None or value == "":
        return [
            Finding(
                "error",
                f"{key} is not set: the dump has nowhere to go",
                f'{key}="/absolute/path/to/dump" (an existing folder the training user can write into)',
                "dump-path-missing",
            )
        ], None
    if not isinstance(value, str):
        return [Finding("error", f"{key} must be a string, not {value!r}", "", "dump-path-missing")], None
    findings: list[Finding] = []
    path = Path(value).expanduser()
    if not path.is_absolute():
        resolved = Path.cwd() / path
        findings.append(
            Finding(
                "warning",
                f"{key} {value!r} is relative: it is resolved against the training process's working directory, "
                f"which launchers (torchrun, mpirun, ModelArts) may change; this check used {resolved}",
                f'{key}="{resolved}"',
                "dump-path-relative",
            )
        )
        path = resolved
    who = account(user) if user is not None else None
    if not path.exists():
        if tool == "msprobe":
            base = existing_ancestor(path)
            findings.append(
                Finding("info", f"{key} {path} does not exist yet: msprobe creates it", "", "dump-path-not-found")
            )
            problem = _permission_problem(base, who, W | X) if base.is_dir() else f"{base} is not a folder"
            if problem:
                findings.append(
                    Finding(
                        "error", f"{key} {path} cannot be created: {problem}", _grant(path, who), "dump-path-permission"
                    )
                )
                return findings, None
            return findings, base
        findings.append(
            Finding(
                "error",
                f"{key} {path} does not exist: CANN does not create it and rejects the configuration",
                f"mkdir -p {path}" + (f" && chown {who.name or who.uid} {path}" if who else ""),
                "dump-path-not-found",
            )
        )
        return findings, None
    if not path.is_dir():
        findings.append(
            Finding("error", f"{key} {path} is not a folder", f"point {key} at a folder", "dump-path-not-dir")
        )
        return findings, None
    problem = _permission_problem(path, who, R | W | X)
    if problem:
        acl = " (ACLs were not read: getfacl would show an extra grant)" if who is not None else ""
        findings.append(
            Finding("error", f"{key} {path} is not writable: {problem}{acl}", _grant(path, who), "dump-path-permission")
        )
        return findings, None
    return findings, path


def _grant(path: Path, who: Account | None) -> str:
    if who is None:
        return f"choose a folder you own, or: sudo chown $(id -un) {path} && chmod u+rwx {path}"
    return f"sudo chown {who.name or who.uid} {path} && sudo chmod u+rwx {path}"


def check_free_space(folder: Path, estimate: int, key: str = "dump_path") -> list[Finding]:
    """A warning when ``estimate`` bytes exceed the free space of the file system holding ``folder``."""
    usage = shutil.disk_usage(existing_ancestor(folder))
    if estimate > usage.free:
        return [
            Finding(
                "warning",
                f"the dump needs about {human_bytes(estimate)} but the file system of {key} {folder} has "
                f"{human_bytes(usage.free)} free (of {human_bytes(usage.total)}): the run will fill the disk",
                "dump fewer steps (dump_step / step), fewer ops (dump_layer / list), outputs only, "
                "statistics instead of tensors, or a bigger disk",
                "disk-full",
            )
        ]
    return [
        Finding(
            "info",
            f"the dump needs about {human_bytes(estimate)}; the file system of {key} has "
            f"{human_bytes(usage.free)} free",
            "",
            "disk-estimate",
        )
    ]
