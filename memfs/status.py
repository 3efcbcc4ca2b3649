"""What `memfs status` reports, from a live daemon or straight from state.db."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .progress import tree_summary
from .schema import STATE_DB
from .state import State


def locate(mountpoint: str) -> tuple[Path, dict | None] | None:
    """(state_dir, registry entry or None) for a mountpoint, daemon running or not.

    A running daemon is found through the mount registry; without one, through
    the known index `memfs mount` keeps (any --cache-dir), else the state
    directories under the default cache root are searched for the state.db that
    was last mounted there."""
    from .statedir import cache_root, canonical_mountpoint, known_state_dir, read_registry

    info = read_registry(mountpoint)
    if info is not None and "state_dir" in info:
        return Path(info["state_dir"]), info
    known = known_state_dir(mountpoint)
    if known is not None:
        return known, None
    real = canonical_mountpoint(mountpoint)
    best: tuple[float, Path] | None = None
    for db in cache_root().glob(f"*/*/{STATE_DB}"):
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                row = conn.execute("SELECT value FROM meta WHERE key='mountpoint'").fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            continue
        if row and row[0] and canonical_mountpoint(row[0]) == real:
            mtime = db.stat().st_mtime
            if best is None or mtime > best[0]:
                best = (mtime, db.parent)
    return None if best is None else (best[1], None)

if TYPE_CHECKING:
    from .daemon import Daemon


def pending(state: State, *, delete_delay: float | None = None,
            read_only: bool = False, write_back_delay: float | None = None) -> dict:
    """Pending creates/updates/renames/deletes, refused and local-only files.

    On a read-only mount nothing is ever pushed: a file edited here (or kept
    after the server deleted it) is listed as local-only, with the reason."""
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
        if read_only:
            why = ("not on the server (deleted there, or never pushed)"
                   if node.memory_id is None else "edited here")
            local_only.append({"path": path, "memory_id": node.memory_id,
                               "reason": f"read-only mount: {why}; kept here, unsynced"})
            continue
        due = {}
        if write_back_delay is not None:
            due["due_at"] = (node.changed_at or 0) + write_back_delay
        if node.error:  # refused for another reason than content: waits, then retried
            due.update(error=node.error, retry_at=node.retry_at)
        if node.memory_id is None:
            creates.append({"path": path, "size": node.size, **due})
            continue
        if node.sha != node.base_sha:
            updates.append({"path": path, "memory_id": node.memory_id, "size": node.size,
                            **due})
        if path != node.base_path:
            renames.append({"from": node.base_path, "to": path, "memory_id": node.memory_id,
                            **due})
    deletes = []
    for t in state.tombstones.values():
        item = {"path": t.base_path, "memory_id": t.memory_id, "deleted_at": t.deleted_at}
        if delete_delay is not None:
            item["due_at"] = t.deleted_at + delete_delay
        if t.error:
            item.update(error=t.error, retry_at=t.retry_at)
        deletes.append(item)
    # Requests whose answer was lost: the next pass asks the server what they did.
    unconfirmed = [{"path": t.path, "memory_id": t.memory_id, "sent_at": t.sent_at,
                    "request": "create" if t.memory_id is None else "update"}
                   for t in state.doubts.values()]
    return {"creates": creates, "updates": updates, "renames": renames, "deletes": deletes,
            "unconfirmed": unconfirmed, "refused": refused, "local_only": local_only,
            "read_only_unpushed": read_only}


def daemon_status(daemon: Daemon) -> dict:
    s, cfg = daemon.ctx.status, daemon.cfg
    return {
        "running": True,
        "pid": __import__("os").getpid(),
        "mountpoint": cfg.mountpoint,
        "store_id": cfg.store_id,
        "store_name": cfg.store_name or None,
        "server": cfg.base_url,
        "read_only": cfg.options.read_only,
        "online": s.online,
        "offline_reason": s.offline_reason,
        "offline_since": s.offline_since,
        "last_sync_at": s.last_sync_at,
        "last_sync_seconds": s.last_sync_seconds,
        "last_push_at": s.last_push_at,
        "pushed_total": s.pushed,
        "feed": {"mode": "feed" if s.feed_position else "full",
                 "position": s.feed_position,
                 "last_full_listing_at": s.last_full_listing_at,
                 "missed": s.feed_missed,
                 "late": s.feed_late,
                 "polls": s.feed_polls},
        "last_error": s.last_error,
        "warnings": s.warnings[-10:],
        "pending": pending(daemon.state, delete_delay=cfg.options.delete_delay,
                           read_only=cfg.options.read_only,
                           write_back_delay=cfg.options.write_back_delay),
        "conflicts": daemon.state.conflicts(),
        "tree": tree_summary(daemon.state, daemon.cache),  # files, bytes, cached (progress)
        "uptime_seconds": time.time() - daemon.started_at,
    }


def offline_status(state_dir: Path) -> dict:
    """Status read from state.db when no daemon runs."""
    state = State(state_dir / "state.db")
    try:
        last = state.get_meta("last_sync_at")
        took = state.get_meta("last_sync_seconds")
        try:
            options = json.loads(state.get_meta("options") or "{}")
        except ValueError:
            options = {}
        read_only = bool(options.get("read_only", False))
        return {
            "running": False,
            "mountpoint": state.get_meta("mountpoint"),
            "store_id": state.get_meta("store_id"),
            "store_name": state.get_meta("store_name"),
            "server": state.get_meta("base_url"),
            "read_only": read_only,
            "online": None,
            "offline_reason": "no daemon is running for this mount",
            "last_sync_at": float(last) if last else None,
            "last_sync_seconds": float(took) if took else None,
            "last_error": state.get_meta("last_error"),
            "pending": pending(state, delete_delay=options.get("delete_delay"),
                               read_only=read_only),
            "conflicts": state.conflicts(),
            "state_dir": str(state_dir),
        }
    finally:
        state.close()
