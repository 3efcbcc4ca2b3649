"""What `memfs status` reports, from a live daemon or straight from state.db."""

from __future__ import annotations

import json
from pathlib import Path

from memfs.state.report import pending
from memfs.state.schema import STATE_DB
from memfs.state.view import StateView, read_meta


def locate(mountpoint: str) -> tuple[Path, dict | None] | None:
    """(state_dir, registry entry or None) for a mountpoint, daemon running or not.

    A running daemon is found through the mount registry; without one, through
    the known index `memfs mount` keeps (any --cache-dir), else the state
    directories under the default cache root are searched for the state.db that
    was last mounted there."""
    from memfs.local.registry import cache_root, canonical_mountpoint, read_registry
    from memfs.state.statedir import known_state_dir

    info = read_registry(mountpoint)
    if info is not None and "state_dir" in info:
        return Path(info["state_dir"]), info
    known = known_state_dir(mountpoint)
    if known is not None:
        return known, None
    real = canonical_mountpoint(mountpoint)
    best: tuple[float, Path] | None = None
    for db in cache_root().glob(f"*/*/{STATE_DB}"):
        last = read_meta(db, "mountpoint").get("mountpoint")
        if last and canonical_mountpoint(last) == real:
            mtime = db.stat().st_mtime
            if best is None or mtime > best[0]:
                best = (mtime, db.parent)
    return None if best is None else (best[1], None)


def offline_status(state_dir: Path) -> dict:
    """Status read from state.db when no daemon runs (read-only: status changes nothing)."""
    state = StateView(state_dir / STATE_DB)
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
