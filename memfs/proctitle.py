"""Process titles, so `ps` and `top` say what each memfs process is doing.

    memfs: Team Notes on /home/me/notes (online)
    memfs serve: /var/lib/memfs/memfs.db on http://127.0.0.1:8765

A mount daemon's state is one of starting (until its first sync), online, offline,
flushing (shutdown: pushing what is pending), unmounting. The title never holds a key
or a database password. Without the `setproctitle` module nothing changes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from .daemon import Daemon
    from .engine import StoreEngine

log = logging.getLogger("memfs.proctitle")

#: How often the daemon's title follows its state.
INTERVAL = 0.5


def set_title(title: str) -> None:
    try:
        import setproctitle
    except ImportError:  # an optional nicety: never fail for it
        return
    setproctitle.setproctitle(title)


def safe_db(db: str) -> str:
    """The database as shown: a URL without its password (or its query, which may carry
    one), a path as is."""
    if "://" not in db:
        return db
    try:
        parts = urlsplit(db)
        netloc = parts.netloc.rsplit("@", 1)
        if len(netloc) == 2:
            user = netloc[0].split(":", 1)[0]
            host = f"{user}@{netloc[1]}" if user else netloc[1]
        else:
            host = netloc[0]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return db.split("://", 1)[0] + "://…"


def serve_title(db: str, address: str) -> str:
    return f"memfs serve: {safe_db(db)} on {address}"


def is_serve_of(cmdline: bytes, db: str) -> bool:
    """Whether /proc/PID/cmdline is a `memfs serve` on `db`: its title, or (without
    setproctitle) its argv."""
    argv = cmdline.split(b"\0")
    return (cmdline.startswith(serve_title(db, "").encode())
            or (b"serve" in argv and db.encode() in argv))


def mount_title(name: str, mountpoint: str, state: str) -> str:
    return f"memfs: {name} on {mountpoint} ({state})"


def daemon_state(daemon: Daemon) -> str:
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


def group_name(daemon: Daemon) -> str:
    """What a session root is called in `ps`: its session, or every store."""
    cfg = daemon.cfg
    if getattr(cfg, "session_id", None):
        return f"session {cfg.session_id}"
    return f"{len(daemon.engines)} stores"


async def follow(daemon: Daemon) -> None:
    """Keep the daemon's title in step with its state, for the daemon's whole life."""
    import trio

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
