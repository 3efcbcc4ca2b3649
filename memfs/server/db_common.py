"""What every part of the server's storage shares: the API error (:class:`ApiError`
and its constructors), ids, timestamps, actors, page cursors, the validation of
request values, and the JSON renderers of stores, memories and versions.

Split out of :mod:`memfs.server.db`, which re-exports these names.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import sqlite3
import string
import threading
import time
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memfs.core.paths import (
    MAX_CONTENT_BYTES,
    PathError,
    is_sha,
    validate_path,
)

# --------------------------------------------------------------------------
# Errors


class ApiError(Exception):
    """An error response: HTTP ``status``, error ``type``, ``message``.

    ``extra`` holds additional fields of the error object (e.g.
    ``conflicting_path``); ``headers`` additional response headers.
    """

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.extra = extra
        self.headers = dict(headers or {})

    def error_object(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, **self.extra}


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


def not_found(message: str, **extra: Any) -> ApiError:
    """404 ``not_found_error``; ``extra``: more fields of the error object."""
    return ApiError(404, "not_found_error", message, **extra)


#: On an answer a retry of the same request would get again (the SDKs retry a 409).
NO_RETRY = {"x-should-retry": "false"}


def precondition_failed(message: str) -> ApiError:
    return ApiError(409, "memory_precondition_failed_error", message, headers=NO_RETRY)


def path_conflict(message: str, path: str, memory_id: str) -> ApiError:
    return ApiError(
        409,
        "memory_path_conflict_error",
        message,
        headers=NO_RETRY,
        conflicting_path=path,
        conflicting_memory_id=memory_id,
    )


# --------------------------------------------------------------------------
# Small helpers: ids, timestamps, actors, cursors

_B62 = string.digits + string.ascii_uppercase + string.ascii_lowercase


def new_id(prefix: str) -> str:
    """``prefix`` + "01" + 8 base62 chars of milliseconds + 14 random base62.

    Time-ordered (roughly) like the hosted ids, 24 characters after the prefix.
    """
    t = int(time.time() * 1000)
    stamp = ""
    for _ in range(8):
        t, r = divmod(t, 62)
        stamp = _B62[r] + stamp
    return f"{prefix}01{stamp}{''.join(secrets.choice(_B62) for _ in range(14))}"


_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


_clock_lock = threading.Lock()
_last_ts: datetime | None = None


def now() -> str:
    """The current time, strictly increasing within this process (1 µs steps).

    Every write happens under the database lock, so timestamp order is commit
    order: listings sorted by ``created_at`` never tie within one server run.
    """
    global _last_ts
    with _clock_lock:
        ts = datetime.now(UTC)
        if _last_ts is not None and ts <= _last_ts:
            ts = _last_ts + timedelta(microseconds=1)
        _last_ts = ts
    return ts.strftime(_TS_FORMAT)


#: An RFC 3339 date-time (section 5.6; "t" and a space for "T" as its note allows).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})?")


def parse_timestamp(value: str, *, name: str) -> str:
    """Parse an RFC 3339 query value into the canonical stored form (UTC). The offset
    may be left out (read as UTC): the SDKs send a naive datetime that way."""
    try:
        if _RFC3339.fullmatch(value) is None:  # fromisoformat takes 2020-W01-1, 20200101...
            raise ValueError(value)
        dt = datetime.fromisoformat(value.replace("z", "Z"))
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        # OverflowError: a valid value whose UTC time leaves years 1..9999
        # (0001-01-01T00:00:00+14:00).
        return dt.astimezone(UTC).strftime(_TS_FORMAT)
    except (ValueError, OverflowError):
        raise invalid(f"{name} must be an RFC 3339 timestamp within years 1 to 9999") from None


_ACTOR_ID_FIELD = {
    "api_actor": "api_key_id",
    "session_actor": "session_id",
    "user_actor": "user_id",
    "service_account_actor": "service_account_id",
}


@dataclass(frozen=True)
class Actor:
    """Who performs a write: ``type`` is one of the four actor types."""

    type: str
    id: str

    def to_json(self) -> dict[str, str]:
        return {"type": self.type, _ACTOR_ID_FIELD[self.type]: self.id}

    @staticmethod
    def for_api_key(key: str | None) -> Actor:
        if key is None:
            return Actor("api_actor", "apikey_local")
        return Actor("api_actor", "apikey_" + hashlib.sha256(key.encode()).hexdigest()[:16])


def _actor_json(kind: str | None, ident: str | None) -> dict[str, str] | None:
    if kind is None or ident is None:
        return None
    return Actor(kind, ident).to_json()


def _fingerprint(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def encode_cursor(fingerprint: str, key: list[Any]) -> str:
    raw = json.dumps({"f": fingerprint, "k": key}, separators=(",", ":")).encode()
    return "page_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(page: str | None, fingerprint: str) -> list[Any] | None:
    if page is None:
        return None
    try:
        if not page.startswith("page_"):
            raise ValueError
        body = page[5:]
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        key = data["k"]
        if not isinstance(key, list) or not all(isinstance(k, str) for k in key):
            raise ValueError
        for k in key:
            k.encode("utf-8")  # a forged lone surrogate: UnicodeEncodeError (a ValueError)
            if "\x00" in k:  # no path, id or timestamp holds NUL: forged
                raise ValueError
    except (ValueError, KeyError, TypeError, RecursionError):
        raise invalid("page is not a valid page cursor") from None
    if data.get("f") != fingerprint:
        raise invalid("page cursor was issued for a different query; restart from the first page")
    return key


def _key(key: list[Any] | None, n: int) -> list[Any] | None:
    if key is not None and len(key) != n:
        raise invalid("page is not a valid page cursor")
    return key


class KeysetPage:
    """One page of a listing ordered by ``(created_at, id)``, newest first unless
    ``desc`` is False: stores, versions and sessions page alike (memories page by
    path, :meth:`memfs.server.db.Database.list_memories`).

    Made before the transaction, so a bad ``limit`` or cursor is refused (400)
    before anything is looked up; the cursor holds the last row's key and the
    query's fingerprint (``table`` and ``fingerprint``), so it serves only the
    query it came from. A cursor whose key holds NUL is refused as forged
    (:func:`decode_cursor`); a filter value holding NUL matches nothing (no stored
    id or timestamp holds one, and PostgreSQL text cannot even compare it), so
    :meth:`fetch` answers the empty page on both backends without asking.
    """

    def __init__(self, table: str, fingerprint: tuple[object, ...], *, limit: int | None,
                 page: str | None, full: bool = False, desc: bool = True) -> None:
        self.limit = check_limit(limit, full=full)
        self._fp = _fingerprint(table, *fingerprint)
        self._after = _key(decode_cursor(page, self._fp), 2)
        self._desc = desc
        self._sql = f"SELECT * FROM {table} WHERE 1 = 1"
        self._args: list[Any] = []

    def where(self, condition: str, *args: Any) -> None:
        """Keep the rows that meet ``condition`` (SQL with ``?`` for ``args``)."""
        self._sql += f" AND {condition}"
        self._args += args

    def fetch(self, c: Any) -> tuple[list[Any], str | None]:
        """(this page's rows, the next page's cursor or None)."""
        sql, args = self._sql, list(self._args)
        direction = "DESC" if self._desc else "ASC"
        if self._after is not None:
            sql += " AND (created_at, id) " + ("<" if self._desc else ">") + " (?, ?)"
            args += self._after
        sql += f" ORDER BY created_at {direction}, id {direction} LIMIT ?"
        args.append(self.limit + 1)
        unmatchable = any(isinstance(a, str) and "\x00" in a for a in args)
        rows = [] if unmatchable else c.execute(sql, args).fetchall()
        if len(rows) <= self.limit:
            return rows, None
        rows = rows[:self.limit]
        return rows, encode_cursor(self._fp, [rows[-1]["created_at"], rows[-1]["id"]])


def row_by_id(c: Any, table: str, row_id: str, missing: str, *, store_id: str | None = None,
              for_update: bool = False) -> Any:
    """The row of ``table`` with ``row_id`` (in store ``store_id`` when given); 404
    ``missing`` when there is none. ``for_update``: ``FOR UPDATE`` (PostgreSQL), so
    the writes to that row's store or session are serialized across processes like
    SQLite's single writer. An id holding NUL is no stored id (and PostgreSQL text
    cannot hold one): 404 without asking."""
    if "\x00" in row_id:
        raise not_found(missing)
    sql, args = f"SELECT * FROM {table} WHERE id = ?", [row_id]
    if store_id is not None:
        sql += " AND store_id = ?"
        args.append(store_id)
    if for_update:
        sql += " FOR UPDATE"
    row = c.execute(sql, args).fetchone()
    if row is None:
        raise not_found(missing)
    return row


def check_sha256(value: object, *, name: str) -> str:
    if not is_sha(value):  # (a `^…$` match took "<sha>\n" as one)
        raise invalid(f"{name} must be 64 lowercase hexadecimal characters")
    return value


def _sha(content: str) -> tuple[str, int]:
    data = content.encode("utf-8")
    return hashlib.sha256(data).hexdigest(), len(data)


def check_content(content: object) -> str:
    if not isinstance(content, str):
        raise invalid("content must be a string")
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise invalid("content must be valid UTF-8 (lone surrogate)") from None
    if size > MAX_CONTENT_BYTES:
        raise invalid(f"content is {size} bytes; the maximum is {MAX_CONTENT_BYTES} bytes")
    return content


def check_path(path: object, *, where: str = "path") -> str:
    try:
        return validate_path(path, where=where)
    except PathError as exc:
        raise invalid(exc.message) from None


def _ancestors(path: str) -> list[str]:
    """'/a/b/c' -> ['/a', '/a/b']."""
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _prefix_upper(prefix: str) -> str:
    """Exclusive upper bound of all strings starting with ``prefix`` (ends in '/')."""
    return prefix[:-1] + "0"  # '0' is the byte after '/'


# --------------------------------------------------------------------------
# Store field validation


def _has_control(s: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in s)


def _check_utf8(value: str, name: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(f"{name} must be valid UTF-8 (lone surrogate)") from None


def check_store_name(name: object) -> str:
    if not isinstance(name, str):
        raise invalid("name must be a string")
    if not 1 <= len(name) <= 255:
        raise invalid("name must be 1 to 255 characters long")
    if _has_control(name):
        raise invalid("name must not contain control characters")
    _check_utf8(name, "name")
    return name


def check_description(desc: object) -> str:
    if not isinstance(desc, str):
        raise invalid("description must be a string")
    if len(desc) > 1024:
        raise invalid("description must be at most 1,024 characters long")
    _check_utf8(desc, "description")
    return desc


def _check_metadata_pair(key: object, value: object) -> None:
    if not isinstance(key, str) or not 1 <= len(key) <= 64:
        raise invalid("metadata keys must be 1 to 64 characters long")
    if not isinstance(value, str):
        raise invalid(f"metadata value for {key!r} must be a string")
    if len(value) > 512:
        raise invalid(f"metadata value for {key!r} must be at most 512 characters long")
    _check_utf8(key, "metadata key")
    _check_utf8(value, "metadata value")


def _check_metadata_size(bag: dict[str, str]) -> None:
    if len(bag) > 16:
        raise invalid(f"metadata holds {len(bag)} pairs; the maximum is 16")


def check_metadata(meta: object) -> dict[str, str]:
    if not isinstance(meta, dict):
        raise invalid("metadata must be an object")
    for k, v in meta.items():
        _check_metadata_pair(k, v)
    _check_metadata_size(meta)
    return dict(meta)


def check_limit(limit: int | None, *, full: bool) -> int:
    if limit is None:
        limit = 20
    if not 1 <= limit <= 100:
        raise invalid("limit must be between 1 and 100")
    return min(limit, 20) if full else limit


# --------------------------------------------------------------------------
# JSON renderers


def _store_json(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "type": "memory_store",
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "metadata": json.loads(row["metadata"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "archived_at": row["archived_at"],
    }


def _memory_json(row: sqlite3.Row, full: bool) -> dict[str, Any]:
    return {
        "type": "memory",
        "id": row["id"],
        "memory_store_id": row["store_id"],
        "path": row["path"],
        "content": row["content"] if full else None,
        "content_size_bytes": row["content_size_bytes"],
        "content_sha256": row["content_sha256"],
        "memory_version_id": row["version_id"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def _version_json(row: sqlite3.Row, full: bool) -> dict[str, Any]:
    return {
        "type": "memory_version",
        "id": row["id"],
        "memory_store_id": row["store_id"],
        "memory_id": row["memory_id"],
        "operation": row["operation"],
        "path": row["path"],
        "content": row["content"] if full else None,
        "content_size_bytes": row["content_size_bytes"],
        "content_sha256": row["content_sha256"],
        "created_by": _actor_json(row["actor_type"], row["actor_id"]),
        "created_at": row["created_at"],
        "redacted_at": row["redacted_at"],
        "redacted_by": _actor_json(row["redacted_by_type"], row["redacted_by_id"]),
    }
