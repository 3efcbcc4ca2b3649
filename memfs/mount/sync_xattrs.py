"""Each file's sync state as read-only extended attributes (`user.memfs.*`).

`getfattr -d -m user.memfs` shows what `memfs status` shows for one file: whether it
is synced, its memory id, its content's and its base's sha, and why it is not pushed
(docs/SEMANTICS.md, "Extended attributes"). They are computed: setting or removing one
succeeds and changes nothing (tree.py), so tools that copy attributes copy on.
"""

from __future__ import annotations

import os

from memfs.state.report import LOCAL_BY_NAME
from memfs.state.state import Node, State


def state_of(path: str | os.PathLike) -> str | None:
    """A mount's word for one of its files, read through the mount (`memfs restore`,
    `memfs mcp --mount`); None: no such file, or not a memfs file."""
    try:
        return os.getxattr(path, "user.memfs.state").decode()
    except OSError:
        return None


def xattr_values(state: State, node: Node, *, read_only: bool) -> dict[bytes, str]:
    values: dict[bytes, str] = {b"user.memfs.state": state.sync_state(node)}
    if node.is_dir:
        return values
    if node.memory_id:
        values[b"user.memfs.memory_id"] = node.memory_id
    if node.sha:
        values[b"user.memfs.sha256"] = node.sha
    if node.base_sha:
        values[b"user.memfs.base_sha256"] = node.base_sha
    reason = _reason(state, node, read_only=read_only)
    if reason:
        values[b"user.memfs.reason"] = reason
    return values


def _reason(state: State, node: Node, *, read_only: bool) -> str | None:
    if state.is_local_only(node):
        return LOCAL_BY_NAME
    if node.refused_sha is not None and node.refused_sha == node.sha:
        return node.refused_reason
    if node.error and state.is_dirty(node):
        return f"the server refused the last push: {node.error}; retried later"
    if read_only and state.is_dirty(node):
        if node.memory_id is None:
            return ("read-only mount: not on the server (deleted there, or never "
                    "pushed); kept here, unsynced")
        return "read-only mount: local changes are never pushed"
    return None
