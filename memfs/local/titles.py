"""Process titles, so `ps` and `top` say what each memfs process is doing.

    memfs: Team Notes on /home/me/notes (online)
    memfs serve: /var/lib/memfs/memfs.db on http://127.0.0.1:8765

A mount daemon's state is one of starting (until its first sync), online, offline,
flushing (shutdown: pushing what is pending), unmounting. The title never holds a key
or a database password. Without the `setproctitle` module nothing changes.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

from memfs.core.shown import shown

log = logging.getLogger("memfs.local.titles")


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
    """The store's name is the server's text: its control characters are shown escaped
    (a name with a terminal's escape sequence went to `ps` as is: a helper, 6 December)."""
    return f"memfs: {shown(name, 80)} on {mountpoint} ({state})"


