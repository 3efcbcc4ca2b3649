"""A mount daemon's process title (memfs/local/titles.py) kept in step with its state:
starting (until its first sync), online, offline, flushing (shutdown: pushing what is
pending), unmounting."""

from __future__ import annotations

import logging
from typing import Protocol

import trio

from memfs.core.mountconfig import GroupConfig, MountConfig
from memfs.local.titles import mount_title, set_title
from memfs.mount.engine import StoreEngine


class Mount(Protocol):
    """What the title reads of the mount's daemon (memfs/mount/daemon.py)."""

    cfg: MountConfig | GroupConfig
    engines: list[StoreEngine]
    group: bool
    flush_done: trio.Event
    shutdown_requested: trio.Event
    fuse_done: trio.Event

log = logging.getLogger("memfs.mount.titles")


#: How often the daemon's title follows its state.
INTERVAL = 0.5


def daemon_state(daemon: Mount) -> str:
    if daemon.flush_done.is_set():
        return "unmounting"
    if daemon.shutdown_requested.is_set() or daemon.fuse_done.is_set():
        return "flushing"
    engines = daemon.engines
    offline = sum(1 for e in engines if not e.ctx.status.online)
    if offline:
        return "offline" if offline == len(engines) or len(engines) == 1 \
            else f"{offline}/{len(engines)} offline"
    if any(e.ctx.status.last_sync_at is None for e in engines):
        return "starting"
    return "online"


def store_name(engine: StoreEngine) -> str:
    """The name `memfs mount` resolved, else the one state.db kept (an offline mount),
    else the id."""
    name = engine.cfg.store_name
    if not name:
        try:
            name = engine.state.get_meta("store_name") or ""
        except Exception as exc:  # never let a title break a mount
            log.debug("store name: %s", exc)
    return name or engine.cfg.store_id


async def _fetch_name(engine: StoreEngine) -> str | None:
    try:
        name = (await engine.client.get_store(engine.cfg.store_id)).name
        engine.state.set_meta("store_name", name)
        return name or None
    except Exception as exc:  # offline: the id it is
        log.debug("store name: %s", exc)
        return None


def group_name(daemon: Mount) -> str:
    """What a session root is called in `ps`: its session, or every store."""
    cfg = daemon.cfg
    if getattr(cfg, "session_id", None):
        return f"session {cfg.session_id}"
    return f"{len(daemon.engines)} stores"


async def follow(daemon: Mount) -> None:
    """Keep the daemon's title in step with its state, for the daemon's whole life."""
    engine = None if daemon.group else daemon.engines[0]
    name = group_name(daemon) if engine is None else store_name(engine)
    named = engine is None or name != engine.cfg.store_id
    shown = None
    while True:
        if not named and engine.ctx.status.online and engine.ctx.status.last_sync_at:
            named = True  # mounted offline, never named: ask the server once it answers
            name = await _fetch_name(engine) or name
        elif engine is None:
            name = group_name(daemon)  # `--all`: the count of stores changes
        title = mount_title(name, daemon.cfg.mountpoint, daemon_state(daemon))
        if title != shown:
            set_title(title)
            shown = title
        await trio.sleep(INTERVAL)
