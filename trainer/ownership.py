"""Whose a folder or a file is, read before rngdctl trusts it or writes into it.

A shared node has other users: a folder, a checkpoint or a config file that
another uid owns, or that group or others may write, may have been planted,
and a file that is a FIFO, a device or a symbolic link can hang a reader, fill
its memory or point it at someone else's data. The trainer (its ``--out`` and
checkpoints) and the daemon (the home, ``submit``'s ``--out``) ask here, so
the rules are one set. Torch-free: the daemon imports it (a shared module).

A run's output folder is claimed by ``rngdctl.json``, the file the save
completes (trainer/output/save.py): from the trainer's start it names the run and
the home that own the folder, so a second run never writes into it and a
reader can tell whose model it holds.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

#: The file that claims an output folder, and (once saved) lists its weights files.
CLAIM_NAME = "rngdctl.json"
#: The name a claim is written under before it is renamed into place: one left by a
#: process killed in between is not a file of the user's.
CLAIM_TEMPORARY = f".{CLAIM_NAME}.tmp-"
#: A claim or a manifest larger than this is not ours: read no further.
MAX_JSON_BYTES = 16 << 20
#: An output folder's mode unless ``[daemon] output_mode`` (the trainer's ``--output-mode``)
#: shares it: the user's alone, as the home is. Its files get the same less execute.
DEFAULT_MODE = 0o700

#: Folders that are never a run's output: the system's. A folder inside one of them (a
#: user's /var/tmp/x) is fine; the folder itself, never.
SYSTEM_FOLDERS = ("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64",
                  "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys",
                  "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/local", "/var", "/var/lib",
                  "/var/tmp")


class NotOurs(Exception):
    """A path rngdctl will not trust or write: one line saying whose it is and what to do."""


class OtherUsers(NotOurs):
    """A path another uid owns (rather than one of ours that others may write)."""


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def check_private(path: Path, what: str, *, allow_group_write: bool = False) -> os.stat_result:
    """``path`` itself (a link is not followed) is this user's and no one else may write it.

    Returns its stat; raises NotOurs naming the owner or the mode and the fix.
    Root is held to the same rule: root running on a folder another user
    prepared would run that user's commands as root.
    """
    path = Path(path)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise NotOurs(f"{what} {path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise NotOurs(f"{what} {path} is a symbolic link: give the folder it points to")
    return check_stat(path, st, what, allow_group_write=allow_group_write)


def check_stat(path: Path, st: os.stat_result, what: str, *,
               allow_group_write: bool = False) -> os.stat_result:
    """check_private's rule on a stat already taken (an open file's fstat: no race)."""
    me = os.geteuid()
    if st.st_uid != me:
        raise OtherUsers(f"{what} {path} belongs to {_user(st.st_uid)}, not to you "
                      f"({_user(me)}): use a {what} of your own")
    loose = stat.S_IWOTH | (0 if allow_group_write else stat.S_IWGRP)
    if st.st_mode & loose:
        raise NotOurs(f"{what} {path} may be written by "
                      f"{'others' if st.st_mode & stat.S_IWOTH else 'its group'} (mode "
                      f"{stat.S_IMODE(st.st_mode):04o}): chmod go-w {path}")
    return st


def open_regular(path: Path, flags: int = os.O_RDONLY, *, mode: int = 0o600,
                 what: str = "file", follow: bool = False) -> int:
    """An fd of the regular file at ``path`` (made with ``mode`` under ``os.O_CREAT``),
    opened without blocking on a FIFO or a device and, unless ``follow`` (a model folder
    or a data set a user links to), without following a final symbolic link; NotOurs (one
    line) for anything else. The daemon opens every file under a run's folder so: a link
    planted there would have it write, or read out, another file."""
    path = Path(path)
    nofollow = 0 if follow else os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | nofollow | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise NotOurs(f"{path}: a symbolic link, not a {what}: remove it") from None
        raise NotOurs(f"{path}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotOurs(f"{path}: not a regular file (a {_kind(st.st_mode)})")
    os.set_blocking(fd, True)
    return fd


def read_regular(path: Path, *, max_bytes: int, what: str = "file",
                 private: bool = False, follow: bool = False) -> bytes:
    """The bytes of a regular file (``open_regular``), never more than ``max_bytes``; with
    ``private``, only a file check_private allows. Else NotOurs (one line)."""
    path = Path(path)
    fd = open_regular(path, what=what, follow=follow)
    try:
        st = os.fstat(fd)
        if private:
            check_stat(path, st, what)
        if st.st_size > max_bytes:
            raise NotOurs(f"{path}: {st.st_size} bytes, more than a {what} holds "
                          f"({max_bytes})")
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise NotOurs(f"{path}: grew past {max_bytes} bytes while read")
        return data
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISDIR, "folder")):
        if test(mode):
            return word
    return "special file"


# === where a run may write ===================================================


def unusable_output(text: str, *, home: Path | None = None) -> str | None:
    """Why ``--out TEXT`` can never be a run's output folder, or None.

    Refused: an empty path (it would be the shell's working folder), a system
    folder, the user's home folder, and rngdctl's home or a folder that holds
    it. Ownership and contents are checked separately (``check_output``),
    since a folder may be made between a submit and the trainer's start.
    """
    if not text or not text.strip():
        return "an empty path (it would be the working folder): give a folder"
    path = Path(os.path.abspath(Path(text).expanduser()))
    if str(path) in SYSTEM_FOLDERS:
        return f"{path} is a system folder: give a folder of its own, such as {path}/my-run"
    if path == Path(os.path.abspath(Path.home())):
        return f"{path} is your home folder: give a folder of its own inside it"
    if home is not None:
        home = Path(os.path.abspath(home))
        if path == home or path in home.parents:
            return f"{path} holds rngdctl's home {home}: give a folder of its own"
        if path.parent == home:
            return f"{path} is a folder of rngdctl's home {home}: give another folder"
    return None


def writable_ancestor(path: Path) -> str | None:
    """Why a folder could not be made or written at ``path`` by this user, or None."""
    target = probe = Path(os.path.abspath(path))
    # os.path, not Path: under a folder this user cannot search, Path.exists raises.
    while not os.path.lexists(probe):
        if probe.parent == probe:
            break
        probe = probe.parent
    if not os.path.isdir(probe):
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} cannot be written by you"
    if probe == target and not os.access(probe, os.R_OK):
        return f"{probe} cannot be read by you"
    return None


# === the claim ===============================================================


@dataclass(frozen=True)
class Owner:
    """Who a run's output folder belongs to: a run of one home, or a trainer started by
    hand (no home, no run id), told apart by its config's fingerprint."""

    run_id: str | None
    home_id: str | None
    config: str | None = None  # a digest of the fingerprint; only a hand-started trainer's

    def same(self, other: Owner) -> bool:
        if self.home_id is None and other.home_id is None and self.run_id == other.run_id:
            return self.config == other.config
        return (self.home_id, self.run_id) == (other.home_id, other.run_id)

    def describe(self) -> str:
        if self.home_id is None:
            return (f"run {self.run_id} of a trainer started by hand" if self.run_id
                    else "a trainer started by hand with another config")
        return f"run {self.run_id} of rngdctl home {self.home_id}"

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "home_id": self.home_id, "config": self.config}


def config_digest(fingerprint: dict) -> str:
    """A short digest of a resume fingerprint, for a hand-started trainer's claim."""
    import hashlib

    text = json.dumps(fingerprint, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_mode(text: str) -> int:
    """An output folder's mode from ``"0750"``: the owner's rwx, and at most read and
    traverse for group and others (a folder others may write is refused, ``check_output``).
    ValueError with one line otherwise."""
    try:
        mode = int(str(text), 8)
    except ValueError:
        raise ValueError(f"{text!r}: give octal digits, such as 0700 or 0750") from None
    if mode & ~0o755 or mode & 0o700 != 0o700:
        raise ValueError(f"{text!r}: the owner needs rwx (7), group and others at most read "
                         f"and traverse (5), such as 0700, 0750 or 0755")
    return mode


def file_mode(mode: int) -> int:
    """The mode of a file in an output folder of ``mode``: the same reads, no execute."""
    return mode & 0o644


def read_owner(folder: Path) -> Owner | None:
    """The owner a folder's claim names; None when it has none. NotOurs for a claim that
    is not a regular file, too large or not ours in form."""
    path = Path(folder) / CLAIM_NAME
    if not os.path.lexists(path):
        return None
    return owner_of(read_info(path))


def owner_of(info: dict) -> Owner:
    """The owner a claim's JSON names (``read_info``'s)."""
    owner = info.get("owner")
    if not isinstance(owner, dict):
        # A folder saved before claims: its save named the run only.
        run_id = info.get("run_id")
        return Owner(None if run_id is None else str(run_id), None, None)
    return Owner(_str_or_none(owner.get("run_id")), _str_or_none(owner.get("home_id")),
                 _str_or_none(owner.get("config")))


def read_info(path: Path) -> dict:
    """A claim file's JSON object; NotOurs when it is not one."""
    data = read_regular(path, max_bytes=MAX_JSON_BYTES, what="claim")
    try:
        info = json.loads(data)
    except ValueError:
        raise NotOurs(f"{path}: not rngdctl's (not JSON)") from None
    if not isinstance(info, dict):
        raise NotOurs(f"{path}: not rngdctl's (not a JSON object)")
    return info


def _str_or_none(value) -> str | None:
    return None if value is None else str(value)


def claimed_ancestor(folder: Path) -> tuple[Path, Owner] | None:
    """The nearest folder above ``folder`` that a run's claim holds, with its owner."""
    path = Path(os.path.abspath(folder))
    for parent in path.parents:
        try:
            owner = read_owner(parent)
        except NotOurs:
            continue  # not a claim we can read: not a run's folder either
        if owner is not None:
            return parent, owner
    return None


def check_output(folder: Path, owner: Owner, *, what: str = "--out") -> bool:
    """Whether ``owner`` may write ``folder``; True when it already claims it (a resume).

    Refused, each in one line: a folder inside another run's; a folder that
    is not this user's or that others may write; a folder claimed by another
    run; a folder with files in it that no run claims (naming one of them).
    A missing folder is fine (the trainer makes it). ``what`` names the folder in
    those lines (a tracker's run folder is not an ``--out``).
    """
    folder = Path(os.path.abspath(folder))
    above = claimed_ancestor(folder)
    if above is not None:
        where, theirs = above
        raise NotOurs(f"{what} {folder} is inside {where}, the output of {theirs.describe()}: "
                      f"give a folder outside it")
    if not os.path.lexists(folder):
        return False
    check_private(folder, "output folder", allow_group_write=False)
    if not folder.is_dir():
        raise NotOurs(f"{what} {folder}: a file is there, not a folder")
    theirs = read_owner(folder)
    if theirs is not None:
        if not theirs.same(owner):
            raise NotOurs(f"{what} {folder} holds the output of {theirs.describe()}: give "
                          f"another folder (a run's folder is its own; `rngdctl resume` goes "
                          f"on in it)")
        return True
    first = next(iter(sorted(p.name for p in folder.iterdir()
                             if not p.name.startswith(CLAIM_TEMPORARY))), None)
    if first is not None:
        raise NotOurs(f"{what} {folder} is not empty and no rngdctl run claims it ({first} is "
                      f"there): give an empty or new folder")
    return False


def claim(folder: Path, owner: Owner, *, mode: int = DEFAULT_MODE,
          details: dict | None = None) -> None:
    """Make ``folder`` if needed, set its ``mode`` (mkdir's is cut by the umask), and
    claim it for ``owner``, unless it is claimed already (a resume).

    Call ``check_output`` first. The claim names no weights file yet; the save
    rewrites the same file with its files and checksums (trainer/output/save.py).
    ``details`` go into the claim beside the owner (a hand-started trainer's
    config, so a refusal can say what differs).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True, mode=mode)
    os.chmod(folder, mode)
    if os.path.lexists(folder / CLAIM_NAME):
        return
    write_info(folder, {**(details or {}), "owner": owner.as_dict(), "claimed": time.time(),
                        "files": {}}, mode=file_mode(mode))


def write_info(folder: Path, info: dict, *, mode: int = 0o600, sync: bool = True) -> None:
    """``folder/rngdctl.json`` replaced at once (a temporary file, fsynced, renamed).

    ``sync=False``: not fsynced, for a state that only a process's death must not
    lose (a power cut may; what it then says is the older, safer claim)."""
    path = Path(folder) / CLAIM_NAME
    tmp = Path(folder) / f"{CLAIM_TEMPORARY}{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    os.fchmod(fd, mode)  # open's mode is cut by the umask, and an old temporary kept its own
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, ensure_ascii=False)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if not sync:
        return
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
