"""Directories and files that hold memfs's state, keys and logs: this user's own, 0700 / 0600.

A directory memfs keeps state in is trusted with what it holds: a journal found there is
adopted and pushed with the user's key, a key file found there is served. So each one must
be this user's, not a symbolic link another user made, and not open to others. A security
review found each way in: a shared `--cache-dir` another user created (their planted
journal adopted and pushed), a state directory swapped for a symbolic link (memfs, as
root, made any directory 0700 and wrote into it), a data directory another user could
write (their key served the embedded server), and parents made by `os.makedirs` under
umask 000, open to everyone (it gives its mode to the last directory only).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["UnsafeDirectory", "is_own", "make_dirs", "own_dir", "own_file", "private_dir"]


class UnsafeDirectory(PermissionError):
    """A directory memfs would keep state in is not this user's own."""


def make_dirs(path: str | os.PathLike[str]) -> None:
    """Create ``path`` and every missing directory above it with mode 0700 (the XDG
    rule for the base directories too); existing ones are left as they are."""
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass


def private_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` made as `make_dirs` does, then held to be this user's own (`own_dir`)."""
    make_dirs(path)
    own_dir(path)
    return Path(path)


def own_dir(path: str | os.PathLike[str]) -> None:
    """Refuse (UnsafeDirectory) a directory that is not this user's, a symbolic link to
    one that another user made, or one every user may write in (`/tmp` given as the
    cache: it was made 0700 for everyone, and anything in it could be another user's);
    narrow one of ours open to others to 0700."""
    st = _owned(path, "directory")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory")
    if st.st_mode & (stat.S_IWOTH | stat.S_ISVTX):
        raise UnsafeDirectory(
            f"{path} is writable by every user: memfs keeps its state only in a directory "
            "of your own (give one inside it)")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def own_file(path: str | os.PathLike[str]) -> None:
    """The same for a file memfs made and reopens (a database, a log): this user's own,
    0600. A missing file is left to be created."""
    if not os.path.exists(path):
        if os.path.lexists(path):  # a link to a file to be made: the user's own only
            _link_owned(path, "file")
        return
    st = _owned(path, "file")
    if st.st_mode & 0o077:
        os.chmod(path, stat.S_IMODE(st.st_mode) & 0o600)


def is_own(path: str | os.PathLike[str]) -> bool:
    """Whether `own_dir` would accept ``path`` (for what is only looked through, such
    as the old state directories adoption considers)."""
    try:
        st = _owned(path, "directory")
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and not st.st_mode & (stat.S_IWOTH | stat.S_ISVTX)


def _owned(path: str | os.PathLike[str], what: str) -> os.stat_result:
    """``path``'s stat, after checking that it (and a symbolic link to it) is ours."""
    me = os.geteuid()
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        _link_owned(path, what)
        st = os.stat(path)
    if st.st_uid != me:
        raise UnsafeDirectory(
            f"{path} belongs to user {st.st_uid}, not to you: memfs keeps its state only in "
            f"a {what} of your own (remove it, or choose another place)")
    return st


def _link_owned(path: str | os.PathLike[str], what: str) -> None:
    owner = os.lstat(path).st_uid
    if owner != os.geteuid():
        raise UnsafeDirectory(
            f"{path} is a symbolic link made by user {owner}, not by you: memfs keeps its "
            f"state only in a {what} of your own")
