"""Conflicts: local versions that lost to a concurrent server change.

When the server and the mount both changed a file, the server's version
wins in the tree and the local one is kept: a row in the ``conflicts``
table of state.db plus its blob in ``objects/`` (docs/SYNC.md). These helpers
list, restore and discard those rows. The daemon runs them for its control
socket; with no daemon running, the CLI runs them on state.db directly (under
the state directory's lock, so a daemon cannot start halfway through).

Restore puts the preserved content back as an ordinary local change: the
file becomes dirty against its current base, so the pusher sends it as an
update with the current base sha as precondition. The server's version is
not lost either: it stays in the memory's version history. A newer local
edit not yet pushed is not lost: it becomes a conflict of its own.
"""

from __future__ import annotations

import difflib
import time

from memfs.state.blobs import BlobCache
from memfs.state.state import EMPTY_SHA, State


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


def restore(state: State, cache: BlobCache, cid: int, *, invalidate=None) -> dict:
    """Put conflict cid's local version back into the tree and drop the row.

    A newer local edit that has not reached the server is never overwritten:
    `State.restore_conflict` keeps it as a conflict of its own."""
    row = state.get_conflict(cid)
    if row is None:
        raise ConflictError(f"no conflict #{cid}")
    data = blob(cache, row["local_sha"])
    if data is None:
        raise ConflictError(f"the content of conflict #{cid} is missing from the cache "
                            f"({row['local_sha']})")
    cache.put(data, sha=row["local_sha"], fsync=True)
    try:
        node, created = state.restore_conflict(cid, len(data))
    except (LookupError, ValueError) as exc:
        raise ConflictError(str(exc.args[0])) from None
    if invalidate is not None:
        invalidate(("entry", node.parent, node.name) if created else ("inode", node.ino))
    return {"id": cid, "path": state.path_of(node), "memory_id": node.memory_id,
            "sha": row["local_sha"], "created": created, "at": time.time()}


def discard(state: State, cid: int) -> dict:
    try:
        row = state.discard_conflict(cid)
    except LookupError:
        raise ConflictError(f"no conflict #{cid}") from None
    return {"id": cid, "path": row["path"]}
