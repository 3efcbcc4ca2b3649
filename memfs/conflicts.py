"""Conflicts: local versions that lost to a concurrent server change.

When the server and the mount both changed a file, the server's version
wins in the tree and the local one is kept: a row in the ``conflicts``
table of state.db plus its blob in ``objects/`` (DESIGN §4). These helpers
list, restore and discard those rows. The daemon runs them for its control
socket; with no daemon running, the CLI runs them on state.db directly (under
the state directory's lock, so a daemon cannot start halfway through).

Restore puts the preserved content back as an ordinary local change: the
file becomes dirty against its current base, so the pusher sends it as an
update with the current base sha as precondition. The server's version is
not lost either: it stays in the memory's version history.
"""

from __future__ import annotations

import difflib
import time
from typing import TYPE_CHECKING

from . import paths
from .cache import BlobCache
from .state import EMPTY_SHA, Node, State

if TYPE_CHECKING:
    from .fs import Operations


class ConflictError(Exception):
    """A conflict command that cannot be carried out (the message says why)."""


def blob(cache: BlobCache, sha: str | None) -> bytes | None:
    if sha is None:
        return None
    if sha == EMPTY_SHA:
        return b""
    return cache.get(sha)


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def unified_diff(row: dict, local: bytes | None, remote: bytes | None) -> str:
    """Server version → preserved local version: what `restore` would change."""
    if local is None:
        return "(the preserved local content is missing from the cache)\n"
    a = (_text(remote) or "").splitlines(keepends=True)
    b = (_text(local) or "").splitlines(keepends=True)
    server_label = (f"server {row['remote_sha'][:12]}" if row.get("remote_sha")
                    else "server: deleted")
    if remote is None and row.get("remote_sha"):
        server_label += " (content not cached)"
    lines = difflib.unified_diff(a, b, fromfile=f"{row['path']} ({server_label})",
                                 tofile=f"{row['path']} (yours, conflict #{row['id']})")
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def describe(state: State, cache: BlobCache) -> list[dict]:
    """Every conflict row, with both contents (when cached) and the diff."""
    out = []
    for row in state.conflicts():
        local = blob(cache, row["local_sha"])
        remote = blob(cache, row["remote_sha"])
        item = dict(row)
        item["local_content"] = _text(local)
        item["server_content"] = _text(remote)
        item["diff"] = unified_diff(row, local, remote)
        out.append(item)
    return out


def _target(state: State, row: dict) -> Node | None:
    """The file the conflict belongs to now: by memory id, else at its path."""
    mid = row.get("memory_id")
    if mid and mid in state.by_memory:
        return state.nodes[state.by_memory[mid]]
    node = state.lookup_path(row["path"])
    if node is not None and node.is_dir:
        raise ConflictError(f"{row['path']} is a directory now; move it away to restore "
                            f"conflict #{row['id']}")
    return node


def restore(state: State, cache: BlobCache, cid: int, *, ops: Operations | None = None,
            invalidate=None) -> dict:
    """Put conflict cid's local version back into the tree and drop the row."""
    row = state.get_conflict(cid)
    if row is None:
        raise ConflictError(f"no conflict #{cid}")
    data = blob(cache, row["local_sha"])
    if data is None:
        raise ConflictError(f"the content of conflict #{cid} is missing from the cache "
                            f"({row['local_sha']})")
    cache.put(data, sha=row["local_sha"], fsync=True)
    node = _target(state, row)
    if node is not None and ops is not None and ops.is_open_dirty(node.ino):
        raise ConflictError(f"{state.path_of(node)} is open with unsaved changes; close it "
                            "and try again")
    created = False
    if node is None:
        dir_path, name = paths.split(row["path"])
        parent = state.ensure_dir(dir_path)
        if parent is None:
            raise ConflictError(f"cannot restore {row['path']}: a file stands where its "
                                "directory should be")
        template = state.nodes[parent.ino]
        node = state.new_node(template, name, is_dir=False, mode=0o100644,
                              uid=template.uid, gid=template.gid)
        created = True
    state.set_content(node, row["local_sha"], len(data))
    node.refused_sha = node.refused_reason = None
    state.save(node)
    state.remove_conflict(cid)
    if ops is not None:
        ops.drop_clean_buffer(node.ino)
    if invalidate is not None:
        invalidate(("entry", node.parent, node.name) if created else ("inode", node.ino))
    return {"id": cid, "path": state.path_of(node), "memory_id": node.memory_id,
            "sha": row["local_sha"], "created": created, "at": time.time()}


def discard(state: State, cid: int) -> dict:
    row = state.get_conflict(cid)
    if row is None:
        raise ConflictError(f"no conflict #{cid}")
    state.remove_conflict(cid)
    return {"id": cid, "path": row["path"]}
