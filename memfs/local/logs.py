"""Logging for `memfs serve` and the mount daemon: size-rotated files, text or JSON.

Both processes write through the standard :mod:`logging` module. A log file
is a :class:`RotatingFileHandler` (0600, ``max_bytes`` per file, ``backups``
old files), so no client and no local user can grow it without bound.
``json`` writes one object per line (``ts``, ``level``, ``logger``, ``msg``,
and ``exc`` for a traceback) for people who ship logs. Nothing here logs
request bodies or headers; the API key never reaches a log call.
"""

from __future__ import annotations

import errno
import json
import logging
import logging.handlers
import os
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path

from memfs.core.private import make_dirs
from memfs.core.shown import shown

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_BACKUPS = 3
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, one record per line."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Text lines whose message shows its control characters escaped: messages carry
    the server's text (a store's name, an error's message), and a terminal that shows
    the log (`tail -f`) must not run an escape sequence in it, nor a newline in it
    forge a line of its own (a hostile server's name did both: a helper, 6 December).
    A traceback keeps its lines, each escaped the same way: its exception's message
    may be the server's text too (a reviewer)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's)
        record.message = shown(record.message, limit=sys.maxsize)
        return super().formatMessage(record)

    def formatException(self, ei) -> str:  # noqa: N802 (logging's)
        return "\n".join(shown(line, limit=sys.maxsize)
                         for line in super().formatException(ei).split("\n"))


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return TextFormatter(TEXT_FORMAT)
    raise ValueError(f"log format must be one of {FORMATS}")


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """Every file it opens, including the new one after a rollover, is 0600."""

    def _open(self):  # type: ignore[no-untyped-def]
        # Through a symbolic link only the user's own (`/dev/stderr`, a container's log
        # link), never one another user planted: `memfs serve --log-file` as root
        # appended to whatever that named (a security review). Into a regular file only
        # the user's own, never one every user can read. A device or a pipe
        # (`/dev/null`, `/dev/stdout`) is written as it is: chmod 0600 of /dev/null shut
        # every other user out of it (a review).
        path, flags = self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            owner = os.lstat(path).st_uid
            if owner != os.geteuid():
                raise PermissionError(f"{path} is a symbolic link made by user {owner}, not "
                                      "by you: memfs writes its logs only to its own files"
                                      ) from None
            fd = os.open(path, flags, 0o600)
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if st.st_uid != os.geteuid():
                os.close(fd)
                raise PermissionError(f"{path} belongs to user {st.st_uid}, not to you: "
                                      "memfs writes its logs only to its own files")
            if st.st_mode & 0o007:
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~0o007)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


def rotating_file_handler(path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES,
                          backups: int = DEFAULT_BACKUPS) -> logging.Handler:
    """A size-rotating handler on ``path``, created 0600 (logs can hold store ids)."""
    path = Path(path)
    make_dirs(path.parent)
    return PrivateRotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups,
                                      encoding="utf-8")


def configure(*, level: int | str, log_file: str | os.PathLike[str] | None = None,
              fmt: str = "text", max_bytes: int = DEFAULT_MAX_BYTES,
              backups: int = DEFAULT_BACKUPS) -> logging.Handler:
    """Make the root logger write to ``log_file`` (rotated) or stderr, in ``fmt``."""
    handler: logging.Handler
    if log_file is None:
        handler = logging.StreamHandler(sys.stderr)
    else:
        handler = rotating_file_handler(log_file, max_bytes=max_bytes, backups=backups)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return handler
