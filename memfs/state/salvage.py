"""A state directory's files written out as plain files (`memfs salvage`).

The journal keeps what a mount wrote until the server takes it. When no server ever
will (the store was deleted or archived on the server while mounted, the server is
gone for good), nothing sends it, and before this module no command took it out: the
bytes sat in ``state.db`` and ``objects/``. `salvage` writes the tree as its mount last
held it, and the local version each conflict kept aside, into a new directory, for the
user to copy wherever they like (another store's mount, say).

It reads and never changes the state directory (a blob that fails its checksum is
the one exception: the cache drops it as it always does, and the file is reported as
not written). It holds the directory's lock throughout, so no daemon starts on it
meanwhile, and refuses one a daemon holds: that mount shows the files itself.

Paths come from ``state.db``, which a mount filled from the server's answers: each is
checked again (no empty, ``.`` or ``..`` segment, no NUL) before it touches the disk,
and every file is created new (``O_EXCL``) under a directory that was empty, so
nothing outside it or already in it is written over.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from memfs.core.private import make_dirs
from memfs.state.blobs import BlobCache, StagedUnreadable
from memfs.state.schema import STATE_DB
from memfs.state.statedir import LOCK, exclusive
from memfs.state.view import StateUnreadable, StateView

#: Where under the destination each conflict's local version goes, `<id>/<its path>`
#: (with "_" added while a file or directory of the tree has the name).
CONFLICTS_DIR = ".conflicts"


class SalvageError(Exception):
    """Nothing was written: the reason, in a sentence for the user."""


@dataclass
class Salvaged:
    written: list[str] = field(default_factory=list)  # tree paths written
    #: (path, why) of the files written whose content the server does not hold.
    unsent: list[tuple[str, str]] = field(default_factory=list)
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # (written as, why)
    #: Tree paths not written: this mount never held their content (a file it listed
    #: and never read), or the blob is gone. `lost` are those the server lacks too.
    missing: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    unsafe: list[str] = field(default_factory=list)  # paths refused by the check above
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, why) not written


def salvage(state_dir: Path, dest: Path) -> Salvaged:
    """Write state_dir's tree and conflicts under dest (missing or an empty directory)."""
    if not (state_dir / STATE_DB).is_file():
        raise SalvageError(f"{state_dir} holds no memfs state ({STATE_DB} is missing)")
    if dest.resolve().is_relative_to(state_dir.resolve()):
        raise SalvageError(f"{dest} is inside the state directory {state_dir}; name a "
                           "directory elsewhere")
    try:
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise SalvageError(f"{dest} exists and is not an empty directory; "
                               "name a new one (nothing is written over)")
    except OSError as exc:
        raise SalvageError(f"cannot use {dest}: {exc.strerror}") from None
    with contextlib.ExitStack() as opened:
        free = opened.enter_context(exclusive(state_dir / LOCK, blocking=False))
        if not free:
            raise SalvageError(f"a memfs daemon runs on {state_dir}: its mount shows these "
                               "files (unmount it first to salvage them)")
        try:
            view = StateView(state_dir / STATE_DB)
            opened.callback(view.close)
            cache = BlobCache(state_dir / "objects")
            opened.callback(cache.close)
        except (StateUnreadable, StagedUnreadable) as exc:
            raise SalvageError(str(exc)) from None
        try:
            make_dirs(dest)
        except OSError as exc:
            raise SalvageError(f"cannot make {dest}: {exc.strerror}") from None
        return _write_all(view, cache, dest)


def _write_all(view: StateView, cache: BlobCache, dest: Path) -> Salvaged:
    done = Salvaged()
    for node in sorted(view.files(), key=view.path_of):
        path, why = view.path_of(node), view.unsent(node)
        data = None if node.sha is None else cache.get(node.sha)
        if data is None:  # lost only if the server never had these bytes either
            held = node.memory_id is not None and node.sha == node.base_sha
            (done.missing if held else done.lost).append(path)
        elif _write(dest, path, data, done):
            done.written.append(path)
            if why:
                done.unsent.append((path, why))
    aside = CONFLICTS_DIR
    while view.lookup_path("/" + aside) is not None:  # a file of the tree has the name
        aside += "_"
    for row in view.conflicts():
        data = cache.get(row["local_sha"]) if row["local_sha"] else None
        where = f"/{aside}/{row['id']}{row['path']}"
        if data is None:
            done.lost.append(where)
        elif _write(dest, where, data, done):
            done.conflicts.append((where, row["reason"]))
    return done


def _write(dest: Path, path: str, data: bytes, done: Salvaged) -> bool:
    """Create dest + path with data (0600, fsynced); False for a path that fails the
    check (`done.unsafe`) or a write that fails (`done.failed`: a full disk, ...)."""
    parts = path.split("/")[1:]
    if not path.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
        done.unsafe.append(path)
        return False
    target = dest.joinpath(*parts)
    try:
        make_dirs(target.parent)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        done.failed.append((path, exc.strerror or str(exc)))
        return False
    return True
