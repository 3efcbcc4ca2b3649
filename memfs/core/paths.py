"""The Memory Stores path and content rules, in one place.

The server (`memfs serve`), the client and the filesystem all validate with
these functions, so a name the filesystem accepts is a path the server
accepts, and the errno a syscall gets matches the 400 the server would send.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

MAX_PATH_BYTES = 1024
MAX_SEGMENTS = 20
MAX_CONTENT_BYTES = 102_400
MAX_MEMORIES_PER_STORE = 2_000

_LINE_SEPARATORS = ("\u2028", "\u2029")

#: What an id of the server's may hold (``memstore_01…``, ``mem_…``, ``sesn_…``): memfs
#: names a state directory after a store's id, so it must be one plain name.
_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")


def is_id(value: object) -> bool:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


_SHA = re.compile(r"[0-9a-f]{64}")


def is_sha(value: object) -> bool:
    """A content sha as the API writes it: SHA-256 in lowercase hex (the blob cache names
    files after them)."""
    return isinstance(value, str) and _SHA.fullmatch(value) is not None


class PathError(ValueError):
    """A path or name the API would refuse.

    ``kind`` is ``"too_long"`` (bytes or segment count: ENAMETOOLONG at the
    filesystem) or ``"invalid"`` (anything else: EINVAL).
    """

    def __init__(self, kind: Literal["too_long", "invalid"], message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _bad_char(ch: str) -> bool:
    if ch in _LINE_SEPARATORS:
        return True
    return unicodedata.category(ch) in ("Cc", "Cf")


def validate_segment(name: str, *, where: str = "path") -> None:
    """Check one path segment (a file or directory name)."""
    if name == "":
        raise PathError("invalid", f"{where} must not contain empty segments")
    if name in (".", ".."):
        raise PathError("invalid", f"{where} must not contain '.' or '..' segments")
    if "/" in name:
        raise PathError("invalid", f"{where} segment must not contain '/'")
    for ch in name:
        if _bad_char(ch):
            raise PathError(
                "invalid",
                f"{where} must not contain control or format characters "
                f"(found U+{ord(ch):04X})",
            )
    if unicodedata.normalize("NFC", name) != name:
        raise PathError("invalid", f"{where} must be NFC-normalized")


def validate_path(path: object, *, where: str = "path") -> str:
    """Validate a memory path; return it unchanged or raise PathError."""
    if not isinstance(path, str):
        raise PathError("invalid", f"{where} must be a string")
    if not path.startswith("/"):
        raise PathError("invalid", f"{where} must start with '/'")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise PathError("invalid", f"{where} must be valid UTF-8 (lone surrogate)") from None
    if size > MAX_PATH_BYTES:
        raise PathError("too_long", f"{where} is {size} bytes; the maximum is {MAX_PATH_BYTES}")
    segments = path[1:].split("/")
    if len(segments) > MAX_SEGMENTS:
        raise PathError(
            "too_long", f"{where} has {len(segments)} segments; the maximum is {MAX_SEGMENTS}"
        )
    for seg in segments:
        validate_segment(seg, where=where)
    return path


def validate_prefix(prefix: str) -> str:
    """Validate a list ``path_prefix``: ``/`` or a valid path plus a trailing ``/``."""
    if prefix == "/":
        return prefix
    if not prefix.endswith("/"):
        raise PathError("invalid", "path_prefix must end with '/'")
    validate_path(prefix[:-1], where="path_prefix")
    return prefix


def join(parent: str, name: str) -> str:
    """Join a directory path ('/' for the root) and a name."""
    return "/" + name if parent == "/" else f"{parent}/{name}"


def split(path: str) -> tuple[str, str]:
    """Split '/a/b/c' into ('/a/b', 'c'); '/c' into ('/', 'c')."""
    head, _, tail = path.rpartition("/")
    return (head or "/", tail)


def is_ancestor(a: str, b: str) -> bool:
    """True when path ``a`` is a strict ancestor directory of path ``b``."""
    return b.startswith(a + "/")


def content_error(data: bytes) -> str | None:
    """Why these bytes cannot be a memory's content, or None when they can."""
    if len(data) > MAX_CONTENT_BYTES:
        return f"content is {len(data)} bytes; the maximum is {MAX_CONTENT_BYTES}"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"content is not valid UTF-8 (byte {exc.start})"
    return None
