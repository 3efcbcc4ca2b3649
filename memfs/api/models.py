"""Wire objects of the Memory Stores API as frozen dataclasses.

Each class has ``from_json(d)`` which tolerates unknown fields (the API adds
fields over time) and missing optional ones.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memfs.api.errors import APIResponseValidationError
from memfs.core import paths

__all__ = [
    "MemoryStore",
    "Memory",
    "MemoryPrefix",
    "MemoryVersion",
    "Session",
    "SessionResource",
    "Page",
    "parse_object",
    "content_sha256",
    "parse_time",
    "format_time",
    "versions_since",
]


def parse_time(text: str) -> datetime:
    """An RFC 3339 time from the API (always with a zone). The one parser: the feed, the
    versions tree and `memfs history` must agree on every time the server writes."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def format_time(when: datetime) -> str:
    """`when` as the API writes times (UTC, microseconds): the form its filters take."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: How much earlier than our own clock's send time the server's versions are read
#: (seconds) when looking for what a request whose answer was lost wrote: the server's
#: clock may be behind ours.
SKEW = 600.0


def versions_since(sent_at: float) -> str:
    """The `created_gte` that finds every version a request sent at `sent_at` (our
    clock, epoch seconds) can have written, whatever the server's clock says (`SKEW`)."""
    return format_time(datetime.fromtimestamp(max(0.0, sent_at - SKEW), UTC))


def _id(value: Any, what: str) -> str:
    """An id of the server's, checked before anything uses it: memfs names a state
    directory after a store's id, and a ``..`` or a ``/`` in one (a hostile server, or
    anyone between it and a plain http:// mount) would put state, and chmod 0700,
    anywhere on disk. ValueError: the client's `_parse` says the answer is not one."""
    if not paths.is_id(value):
        raise ValueError(f"{what} {value!r} is not an id")
    return value


def _sha(value: Any, what: str) -> str | None:
    """A content sha of the server's (None when it gives none): the blob cache names
    files after shas."""
    if value is None or value == "":
        return None
    if not paths.is_sha(value):
        raise ValueError(f"{what} {value!r} is not a SHA-256 in lowercase hex")
    return value


def _path(value: Any) -> str:
    """A memory's path as the API's rules have it (memfs/core/paths.py): a tree node is
    named after each segment, so a `..`, a NUL, an escape sequence or a 2,000-segment
    path from a server would hide a file, break a listing or print to the terminal."""
    if not isinstance(value, str):
        raise TypeError(f"path {value!r} is not a string")
    paths.validate_path(value)
    return value


def _content(value: Any) -> str | None:
    """Content within the API's limit: a server's 30 MB "memory" would be cached."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("content is not a string")
    if len(value) > paths.MAX_CONTENT_BYTES and \
            len(value.encode("utf-8", "surrogatepass")) > paths.MAX_CONTENT_BYTES:
        raise ValueError(f"content of {len(value):,} characters is over the API's "
                         f"{paths.MAX_CONTENT_BYTES:,}-byte limit")
    return value


def _size(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 0 <= value <= paths.MAX_CONTENT_BYTES:
        raise ValueError(f"content_size_bytes {value!r} is not a size the API gives")
    return value


def _time(value: Any) -> str:
    """A time the feed and the history read (`parse_time`): checked where it is read."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise TypeError(f"time {value!r} is not a string")
    parse_time(value)
    return value


def _optional_id(value: Any, what: str) -> str:
    return "" if value is None or value == "" else _id(value, what)


def content_sha256(content: str | bytes) -> str:
    """Lowercase hex SHA-256 of the UTF-8 content, as the server computes it."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class MemoryStore:
    id: str
    name: str
    description: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    archived_at: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MemoryStore:
        return cls(
            id=_id(d["id"], "store id"),
            name=d.get("name") or "",
            description=d.get("description") or "",
            metadata=dict(d.get("metadata") or {}),
            created_at=d.get("created_at") or "",
            updated_at=d.get("updated_at") or "",
            archived_at=d.get("archived_at"),
        )


@dataclass(frozen=True)
class Memory:
    id: str
    memory_store_id: str
    path: str
    content: str | None
    content_size_bytes: int
    content_sha256: str
    memory_version_id: str
    created_at: str = ""
    updated_at: str = ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Memory:
        return cls(
            id=_id(d["id"], "memory id"),
            memory_store_id=_optional_id(d.get("memory_store_id"), "store id"),
            path=_path(d["path"]),
            content=_content(d.get("content")),
            content_size_bytes=_size(d.get("content_size_bytes")) or 0,
            content_sha256=_sha(d.get("content_sha256"), "content_sha256") or "",
            # (kept in state.db and printed by `memfs watch`: a security review)
            memory_version_id=_optional_id(d.get("memory_version_id"), "version id"),
            created_at=d.get("created_at") or "",
            updated_at=d.get("updated_at") or "",
        )


@dataclass(frozen=True)
class MemoryPrefix:
    """A rolled-up directory (``depth=1`` listings); ``path`` ends with ``/``."""

    path: str

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MemoryPrefix:
        return cls(path=d["path"])


@dataclass(frozen=True)
class MemoryVersion:
    id: str
    memory_store_id: str
    memory_id: str
    operation: str
    path: str | None = None
    content: str | None = None
    content_size_bytes: int | None = None
    content_sha256: str | None = None
    created_by: dict[str, Any] | None = None
    created_at: str = ""
    redacted_at: str | None = None
    redacted_by: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MemoryVersion:
        return cls(
            id=_id(d["id"], "version id"),
            memory_store_id=_optional_id(d.get("memory_store_id"), "store id"),
            memory_id=_optional_id(d.get("memory_id"), "memory id"),
            operation=d.get("operation") or "",
            path=None if d.get("path") is None else _path(d["path"]),
            content=_content(d.get("content")),
            content_size_bytes=_size(d.get("content_size_bytes")),
            content_sha256=_sha(d.get("content_sha256"), "content_sha256"),
            created_by=d["created_by"] if isinstance(d.get("created_by"), dict) else None,
            created_at=_time(d.get("created_at")),
            redacted_at=d.get("redacted_at"),
            redacted_by=d.get("redacted_by"),
        )


@dataclass(frozen=True)
class SessionResource:
    """One entry of ``session.resources``. For a ``memory_store`` resource,
    ``name`` and ``description`` are snapshots taken when the session was
    created, ``access`` is ``read_write`` or ``read_only`` and ``mount_path`` is
    where the session sees the store (``/mnt/memory/<slug>``). Other resource
    types (``file``, ``github_repository``) keep their ``type``, ``id`` and
    ``mount_path``; their memory-store fields stay empty."""

    type: str
    memory_store_id: str | None = None
    access: str | None = None
    name: str = ""
    description: str = ""
    instructions: str | None = None
    mount_path: str | None = None
    id: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SessionResource:
        kind = d.get("type") or ""
        return cls(
            type=kind,
            memory_store_id=_optional_id(d.get("memory_store_id"), "store id") or None,
            # An omitted access means the default, read_write.
            access=(d.get("access") or "read_write") if kind == "memory_store" else None,
            name=d.get("name") or "",
            description=d.get("description") or "",
            instructions=d.get("instructions"),
            mount_path=d.get("mount_path"),
            id=d.get("id"),
        )


@dataclass(frozen=True)
class Session:
    """A Managed Agents session, as far as memfs cares: its identity, state and
    resources (the agent snapshot is kept raw in ``agent``)."""

    id: str
    status: str = ""
    environment_id: str = ""
    title: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)
    resources: tuple[SessionResource, ...] = ()
    created_at: str = ""
    updated_at: str = ""
    archived_at: str | None = None

    @property
    def memory_stores(self) -> tuple[SessionResource, ...]:
        """The attached memory stores, in resource order."""
        return tuple(r for r in self.resources if r.type == "memory_store")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Session:
        agent = d.get("agent")
        return cls(
            id=_id(d["id"], "session id"),
            status=d.get("status") or "",
            environment_id=d.get("environment_id") or "",
            title=d.get("title"),
            metadata=dict(d.get("metadata") or {}),
            agent=dict(agent) if isinstance(agent, dict) else {},
            resources=tuple(
                SessionResource.from_json(r) for r in d.get("resources") or []
                if isinstance(r, dict)
            ),
            created_at=d.get("created_at") or "",
            updated_at=d.get("updated_at") or "",
            archived_at=d.get("archived_at"),
        )


_BY_TYPE: dict[str, Any] = {
    "memory_store": MemoryStore,
    "memory": Memory,
    "memory_prefix": MemoryPrefix,
    "memory_version": MemoryVersion,
    "session": Session,
}


def parse_object(d: Any) -> Any:
    """Parse one wire object by its ``type``; unknown types come back as the raw dict."""
    if not isinstance(d, dict):
        return d
    cls = _BY_TYPE.get(d.get("type", ""))
    if cls is None:
        return d
    return cls.from_json(d)


@dataclass(frozen=True)
class Page:
    """One page of a list endpoint. ``next_page`` is the cursor, or None at the end."""

    data: list[Any]
    next_page: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any], parse_item: Any = parse_object) -> Page:
        """A list answer without its ``data`` list, or with an item that has no
        ``type``, is not one: TypeError (an item of a type this client does not know,
        a newer server's, stays, and the walk skips it)."""
        items = d.get("data")
        if not isinstance(items, list):
            raise TypeError("a list answer without its `data` list")
        if not all(isinstance(x, dict) and isinstance(x.get("type"), str) for x in items):
            raise TypeError("a list item that is not an object with a `type`")
        return cls(data=[parse_item(x) for x in items], next_page=d.get("next_page") or None)

    def follow(self, seen: set[str]) -> str | None:
        """The cursor of the next page (None: the last), noted in `seen`, the cursors this
        walk followed. A cursor given twice, or a walk past `MAX_PAGES`, is a server whose
        pages never end (a listing read forever, its memory growing): refused."""
        cursor = self.next_page
        if cursor is None:
            return None
        if cursor in seen or len(seen) >= MAX_PAGES:
            raise APIResponseValidationError(
                f"the server's list pages do not end (page {cursor[:40]!r} "
                + ("again)" if cursor in seen else f"after {MAX_PAGES:,} pages)"),
                type="invalid_response")
        seen.add(cursor)
        return cursor


#: The most pages one walk of a list follows (a store holds 2,000 memories at most; its
#: history, at 100 versions a page, a million versions).
MAX_PAGES = 10_000
