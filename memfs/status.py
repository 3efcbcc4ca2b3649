"""What `memfs status` reports, from a live daemon or straight from state.db."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from .state import State

if TYPE_CHECKING:
    from .daemon import Daemon


def pending(state: State, *, delete_delay: float | None = None,
            read_only: bool = False) -> dict:
    """Pending creates/updates/renames/deletes, refused and local-only files."""
    creates, updates, renames, refused, local_only = [], [], [], [], []
    for node in state.files():
        path = state.path_of(node)
        if state.is_local_only_name(node):
            local_only.append({"path": path, "reason": "editor/tool temp file"})
            continue
        if node.refused_sha is not None and node.refused_sha == node.sha:
            refused.append({"path": path, "reason": node.refused_reason})
            continue
        if not state.is_dirty(node):
            continue
        if node.memory_id is None:
            creates.append({"path": path})
            continue
        if node.sha != node.base_sha:
            updates.append({"path": path, "memory_id": node.memory_id})
        if path != node.base_path:
            renames.append({"from": node.base_path, "to": path, "memory_id": node.memory_id})
    deletes = []
    for t in state.tombstones.values():
        item = {"path": t.base_path, "memory_id": t.memory_id, "deleted_at": t.deleted_at}
        if delete_delay is not None:
            item["due_at"] = t.deleted_at + delete_delay
        deletes.append(item)
    return {"creates": creates, "updates": updates, "renames": renames, "deletes": deletes,
            "refused": refused, "local_only": local_only, "read_only_unpushed": read_only}


def daemon_status(daemon: Daemon) -> dict:
    s, cfg = daemon.ctx.status, daemon.cfg
    return {
        "running": True,
        "pid": __import__("os").getpid(),
        "mountpoint": cfg.mountpoint,
        "store_id": cfg.store_id,
        "server": cfg.base_url,
        "read_only": cfg.options.read_only,
        "online": s.online,
        "offline_reason": s.offline_reason,
        "offline_since": s.offline_since,
        "last_sync_at": s.last_sync_at,
        "last_sync_seconds": s.last_sync_seconds,
        "last_push_at": s.last_push_at,
        "pushed_total": s.pushed,
        "last_error": s.last_error,
        "warnings": s.warnings[-10:],
        "pending": pending(daemon.state, delete_delay=cfg.options.delete_delay,
                           read_only=cfg.options.read_only),
        "conflicts": daemon.state.conflicts(),
        "uptime_seconds": time.time() - daemon.started_at,
    }


def offline_status(state_dir: Path) -> dict:
    """Status read from state.db when no daemon runs."""
    state = State(state_dir / "state.db")
    try:
        last = state.get_meta("last_sync_at")
        return {
            "running": False,
            "mountpoint": state.get_meta("mountpoint"),
            "store_id": state.get_meta("store_id"),
            "server": state.get_meta("base_url"),
            "online": None,
            "last_sync_at": float(last) if last else None,
            "pending": pending(state),
            "conflicts": state.conflicts(),
        }
    finally:
        state.close()
