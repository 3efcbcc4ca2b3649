"""Sessions: the request checks, the rendering, the token grant, and
:class:`SessionsMixin`, the session methods of :class:`memfs.server.db.Database`.

Split out of :mod:`memfs.server.db`, which re-exports these names.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memfs.core.slug import MOUNT_ROOT, mount_slugs
from memfs.server.db_common import (
    _TS_FORMAT,
    Actor,
    ApiError,
    KeysetPage,
    _check_utf8,
    _has_control,
    check_metadata,
    invalid,
    new_id,
    not_found,
    now,
    row_by_id,
)

# --------------------------------------------------------------------------
# Sessions: request checks, rendering, the token grant

MAX_STORES_PER_SESSION = 8
MAX_INSTRUCTIONS = 4096
MAX_INITIAL_EVENTS = 50
# A session is echoed in every list page (up to 100 a page): each part is bounded,
# and the whole session too, at creation.
MAX_TITLE = 1024  # characters
MAX_SYSTEM = 32_768  # characters of agent.system
MAX_MODEL_JSON = 1024  # bytes of agent.model (an id, or a small config object)
MAX_TOOLS = 128  # agent.tools entries
MAX_SKILLS = 64  # agent.skills and agent.mcp_servers entries, each
MAX_VAULTS = 64  # vault_ids
MAX_BUDGET_JSON = 4096  # bytes of budget
MAX_SESSION_JSON = 128 * 1024  # bytes of the whole session as stored and echoed
#: Live tokens kept per session; issuing one more revokes the oldest.
MAX_TOKENS_PER_SESSION = 16
#: Every session token starts with this, so the server tells it from an API key.
SESSION_TOKEN_PREFIX = "memfs_sesstok_"
#: A well-formed token: the prefix and ``secrets.token_urlsafe(32)`` (43 characters).
SESSION_TOKEN_RE = re.compile(r"memfs_sesstok_[A-Za-z0-9_-]{43}")
_ACCESS = ("read_write", "read_only")
#: What memfs serve puts where the hosted API resolves the agent's model.
UNKNOWN_MODEL = "unknown"


@dataclass(frozen=True)
class SessionGrant:
    """What a session token may touch: its session and the attached stores."""

    session_id: str
    access: dict[str, str]  # memory_store_id → "read_write" | "read_only"

    @property
    def actor(self) -> Actor:
        return Actor("session_actor", self.session_id)


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _check_json_text(value: object, name: str) -> None:
    """Every string inside ``value`` is valid UTF-8 (no lone surrogate)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(f"{name} must be valid UTF-8 (lone surrogate)") from None


def _id_string(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise invalid(f"{name} must be a non-empty string")
    if len(value) > 256 or _has_control(value):
        raise invalid(f"{name} must be at most 256 characters, without control characters")
    _check_utf8(value, name)
    return value


def _opt_list(value: object, name: str, limit: int | None = None) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid(f"{name} must be an array")
    if limit is not None and len(value) > limit:
        raise invalid(f"{name} holds at most {limit} entries")
    return value


def _json_size(value: object) -> int:
    """Bytes of ``value`` as JSON text (UTF-8; a lone surrogate counts as escaped)."""
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _check_json_size(value: object, name: str, limit: int) -> None:
    if _json_size(value) > limit:
        raise invalid(f"{name} is too large: at most {limit} bytes as JSON")


def agent_snapshot(agent: object) -> dict[str, Any]:
    """The session's resolved ``agent``. memfs serve keeps no agents, so the
    snapshot is made from the reference alone: its ``id`` (also the ``name``),
    ``version`` (1 when not given), the overrides of an ``agent_with_overrides``
    reference, and fixed values for the rest (model ``unknown`` unless
    overridden, no tools, a ``service_account`` execution identity)."""
    ref: object = {"type": "agent", "id": agent} if isinstance(agent, str) else agent
    if not isinstance(ref, dict):
        raise invalid("agent must be an agent id or an agent object")
    kind = ref.get("type")
    if kind not in ("agent", "agent_with_overrides"):
        raise invalid("agent.type must be 'agent' or 'agent_with_overrides'")
    allowed = {"type", "id", "version"}
    if kind == "agent_with_overrides":
        allowed |= {"model", "system", "tools", "mcp_servers", "skills"}
    extra = sorted(set(ref) - allowed)
    if extra:
        raise invalid(f"agent.{extra[0]}: Extra inputs are not permitted")
    agent_id = _id_string(ref.get("id"), "agent.id")
    version = ref.get("version")
    if version is None:
        version = 1
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise invalid("agent.version must be an integer of at least 1")
    model = ref.get("model")
    if model is None:
        model = {"id": UNKNOWN_MODEL}
    elif isinstance(model, str):
        model = {"id": model}
    elif not (isinstance(model, dict) and isinstance(model.get("id"), str)):
        raise invalid("agent.model must be a model id or a model config object")
    _id_string(model["id"], "agent.model id")
    _check_json_size(model, "agent.model", MAX_MODEL_JSON)
    system = ref.get("system")
    if system is not None and not isinstance(system, str):
        raise invalid("agent.system must be a string")
    if system is not None and len(system) > MAX_SYSTEM:
        raise invalid(f"agent.system is at most {MAX_SYSTEM} characters")
    snap = {
        "type": "agent",
        "id": agent_id,
        "version": version,
        "name": agent_id,
        "description": None,
        "system": system,
        "model": model,
        "tools": _opt_list(ref.get("tools"), "agent.tools", MAX_TOOLS),
        "skills": _opt_list(ref.get("skills"), "agent.skills", MAX_SKILLS),
        "mcp_servers": _opt_list(ref.get("mcp_servers"), "agent.mcp_servers", MAX_SKILLS),
        "execution_identity": {"type": "service_account"},
        "multiagent": None,
    }
    _check_json_text(snap, "agent")
    return snap


def check_session_resources(resources: object) -> list[tuple[str, str, str | None]]:
    """``resources`` of a session create: ``(memory_store_id, access, instructions)``
    per memory store, in order. Only ``memory_store`` resources are supported."""
    items = _opt_list(resources, "resources")
    if len(items) > MAX_STORES_PER_SESSION:
        raise invalid(f"a session can attach at most {MAX_STORES_PER_SESSION} memory stores;"
                      f" got {len(items)}")
    out: list[tuple[str, str, str | None]] = []
    for i, r in enumerate(items):
        where = f"resources[{i}]"
        if not isinstance(r, dict):
            raise invalid(f"{where} must be an object")
        if r.get("type") != "memory_store":
            raise invalid(f"{where}.type: memfs serve supports only memory_store resources")
        extra = sorted(set(r) - {"type", "memory_store_id", "access", "instructions"})
        if extra:
            raise invalid(f"{where}.{extra[0]}: Extra inputs are not permitted")
        if "memory_store_id" not in r:
            raise invalid(f"{where}.memory_store_id: Field required")
        store_id = _id_string(r["memory_store_id"], f"{where}.memory_store_id")
        access = r.get("access")
        if access is None:
            access = "read_write"
        elif access not in _ACCESS:
            raise invalid(f"{where}.access must be 'read_write' or 'read_only'")
        instructions = r.get("instructions")
        if instructions is not None:
            if not isinstance(instructions, str):
                raise invalid(f"{where}.instructions must be a string")
            if len(instructions) > MAX_INSTRUCTIONS:
                raise invalid(f"{where}.instructions must be at most {MAX_INSTRUCTIONS:,}"
                              " characters long")
            _check_utf8(instructions, f"{where}.instructions")
        if any(store_id == o[0] for o in out):
            raise invalid(f"{where}: memory store {store_id!r} is attached twice")
        out.append((store_id, access, instructions))
    return out


def _session_json(row: Any, resources: list[str]) -> dict[str, Any]:
    body = json.loads(row["body"])
    created = datetime.strptime(row["created_at"], _TS_FORMAT).replace(tzinfo=UTC)
    end = datetime.now(UTC)
    if row["archived_at"] is not None:
        end = datetime.strptime(row["archived_at"], _TS_FORMAT).replace(tzinfo=UTC)
    return {
        "type": "session",
        "id": row["id"],
        "status": "idle",  # nothing runs: a session waits for input forever
        "agent": body["agent"],
        "environment_id": body["environment_id"],
        "title": body["title"],
        "metadata": body["metadata"],
        "resources": [json.loads(r) for r in resources],
        "vault_ids": body["vault_ids"],
        "budget": body["budget"],
        "deployment_id": None,
        "outcome_evaluations": [],
        "stats": {
            "active_seconds": 0.0,
            "duration_seconds": max(0.0, round((end - created).total_seconds(), 6)),
        },
        "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0},
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "archived_at": row["archived_at"],
    }


class SessionsMixin:
    """The session methods of :class:`memfs.server.db.Database`, which inherits them.

    Not usable alone: the methods rely on Database's ``_txn`` (one transaction),
    ``_pg`` (the PostgreSQL backend, or None on SQLite) and ``_store_row`` (a
    store's row, locked for writes).
    """

    # -- sessions ------------------------------------------------------------

    def _session_row(self, c: Any, session_id: str, *, lock: bool = False) -> Any:
        """The session's row; ``lock``: ``FOR UPDATE`` on PostgreSQL (like stores)."""
        return row_by_id(c, "sessions", session_id, f"session {session_id!r} not found",
                         for_update=lock and self._pg is not None)

    @staticmethod
    def _sessions_json(c: Any, rows: list[Any]) -> list[dict[str, Any]]:
        """Render session rows with their resources (one query for all of them)."""
        if not rows:
            return []
        ids = [r["id"] for r in rows]
        marks = ",".join("?" * len(ids))
        by_session: dict[str, list[str]] = {i: [] for i in ids}
        for r in c.execute(
            f"SELECT session_id, resource FROM session_resources WHERE session_id IN ({marks})"
            " ORDER BY session_id, position",
            ids,
        ).fetchall():
            by_session[r["session_id"]].append(r["resource"])
        return [_session_json(r, by_session[r["id"]]) for r in rows]

    def create_session(
        self,
        *,
        agent: object,
        environment_id: object,
        resources: object = None,
        metadata: object = None,
        title: object = None,
        vault_ids: object = None,
        budget: object = None,
        initial_events: object = None,
    ) -> dict[str, Any]:
        """A session; nothing runs. Memory stores are attached here only: each must
        exist (404) and not be archived (400); ``name`` and ``description`` are
        snapshotted and ``mount_path`` derived (:func:`memfs.core.slug.mount_slugs`)."""
        snap = agent_snapshot(agent)
        env = _id_string(environment_id, "environment_id")
        attach = check_session_resources(resources)
        metadata = {} if metadata is None else check_metadata(metadata)
        if title is not None:
            if not isinstance(title, str):
                raise invalid("title must be a string")
            if len(title) > MAX_TITLE:
                raise invalid(f"title is at most {MAX_TITLE} characters")
            _check_utf8(title, "title")
        vaults = _opt_list(vault_ids, "vault_ids", MAX_VAULTS)
        if not all(isinstance(v, str) for v in vaults):
            raise invalid("vault_ids must be an array of strings")
        if any(len(v) > 256 for v in vaults):
            raise invalid("vault_ids entries are at most 256 characters")
        if budget is not None and not isinstance(budget, dict):
            raise invalid("budget must be an object")
        if budget is not None:
            _check_json_size(budget, "budget", MAX_BUDGET_JSON)
        events = _opt_list(initial_events, "initial_events")  # accepted; nothing runs
        if len(events) > MAX_INITIAL_EVENTS:
            raise invalid(f"initial_events holds at most {MAX_INITIAL_EVENTS} events")
        # Every other part was checked above, with a message naming it; these two are
        # stored as given, so their strings are checked here (once).
        _check_json_text({"vault_ids": vaults, "budget": budget}, "session")
        body = {"agent": snap, "environment_id": env, "title": title, "metadata": metadata,
                "vault_ids": vaults, "budget": budget}
        _check_json_size({"body": body, "resources": attach}, "the session",
                         MAX_SESSION_JSON)
        sid = new_id("sesn_")
        with self._txn(write=True) as c:
            # Lock the stores in id order (no deadlock between two creates), so none
            # is archived between this check and the commit; report in resource order.
            found: dict[str, Any] = {}
            for store_id in sorted(a[0] for a in attach):
                try:
                    found[store_id] = self._store_row(c, store_id, lock=True)
                except ApiError:
                    pass
            for store_id, _, _ in attach:
                row = found.get(store_id)
                if row is None:
                    raise not_found(f"memory store {store_id!r} not found")
                if row["archived_at"] is not None:
                    raise invalid(f"memory store {store_id!r} is archived; archived stores"
                                  " cannot be attached to new sessions")
            stores = [found[a[0]] for a in attach]
            slugs = mount_slugs([(r["name"], r["id"]) for r in stores])
            ts = now()
            c.execute(
                "INSERT INTO sessions (id, agent_id, body, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (sid, snap["id"], json.dumps(body), ts, ts),
            )
            for pos, ((store_id, access, instructions), row, slug) in enumerate(
                zip(attach, stores, slugs, strict=True)
            ):
                resource = {
                    "type": "memory_store",
                    "memory_store_id": store_id,
                    "access": access,
                    "name": row["name"],
                    "description": row["description"],
                    "instructions": instructions,
                    "mount_path": MOUNT_ROOT + slug,
                }
                c.execute(
                    "INSERT INTO session_resources (session_id, position, memory_store_id,"
                    " access, resource) VALUES (?, ?, ?, ?, ?)",
                    (sid, pos, store_id, access, json.dumps(resource)),
                )
            return self._sessions_json(c, [self._session_row(c, sid)])[0]

    def get_session(self, session_id: str) -> dict[str, Any]:
        with self._txn() as c:
            return self._sessions_json(c, [self._session_row(c, session_id)])[0]

    def list_sessions(
        self,
        *,
        limit: int | None = None,
        page: str | None = None,
        memory_store_id: str | None = None,
        agent_id: str | None = None,
        include_archived: bool = False,
        order: str | None = None,
        created_gt: str | None = None,
        created_gte: str | None = None,
        created_lt: str | None = None,
        created_lte: str | None = None,
    ) -> dict[str, Any]:
        """Newest first (``order=asc``: oldest first), ``id`` as tiebreak."""
        order = order or "desc"
        if order not in ("asc", "desc"):
            raise invalid("order must be 'asc' or 'desc'")
        bounds = (("created_at >", created_gt), ("created_at >=", created_gte),
                  ("created_at <", created_lt), ("created_at <=", created_lte))
        query = KeysetPage("sessions", (memory_store_id, agent_id, include_archived, order,
                                        *(v for _, v in bounds)),
                           limit=limit, page=page, desc=order == "desc")
        if not include_archived:
            query.where("archived_at IS NULL")
        if memory_store_id is not None:
            query.where("id IN (SELECT session_id FROM session_resources"
                        " WHERE memory_store_id = ?)", memory_store_id)
        if agent_id is not None:
            query.where("agent_id = ?", agent_id)
        for cond, val in bounds:
            if val is not None:
                query.where(f"{cond} ?", val)
        with self._txn() as c:
            rows, nxt = query.fetch(c)
            return {"data": self._sessions_json(c, rows), "next_page": nxt}

    def archive_session(self, session_id: str) -> dict[str, Any]:
        """One-way and idempotent; the session's tokens stop working."""
        with self._txn(write=True) as c:
            row = self._session_row(c, session_id, lock=True)
            if row["archived_at"] is None:
                ts = now()
                c.execute("UPDATE sessions SET archived_at = ?, updated_at = ? WHERE id = ?",
                          (ts, ts, session_id))
            return self._sessions_json(c, [self._session_row(c, session_id)])[0]

    def delete_session(self, session_id: str) -> dict[str, Any]:
        """The session, its resources and its tokens. Memories it wrote stay, and
        their versions keep naming it."""
        with self._txn(write=True) as c:
            self._session_row(c, session_id, lock=True)
            c.execute("DELETE FROM session_tokens WHERE session_id = ?", (session_id,))
            c.execute("DELETE FROM session_resources WHERE session_id = ?", (session_id,))
            c.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        return {"id": session_id, "type": "session_deleted"}

    def issue_session_token(self, session_id: str) -> str:
        """A fresh token for the session (only its SHA-256 is stored). Every token
        works until the session is archived or deleted; past
        :data:`MAX_TOKENS_PER_SESSION`, issuing one revokes the oldest."""
        token = SESSION_TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._txn(write=True) as c:
            try:
                row = self._session_row(c, session_id, lock=True)
            except ApiError as err:  # names the session: a client tells it from "no route"
                raise not_found(err.message, session_id=session_id) from None
            if row["archived_at"] is not None:
                raise invalid(f"session {session_id!r} is archived; it has no tokens")
            c.execute("INSERT INTO session_tokens (token_sha256, session_id, created_at)"
                      " VALUES (?, ?, ?)", (token_sha256(token), session_id, now()))
            c.execute(
                "DELETE FROM session_tokens WHERE session_id = ? AND token_sha256 NOT IN"
                " (SELECT token_sha256 FROM session_tokens WHERE session_id = ?"
                "  ORDER BY created_at DESC LIMIT ?)",
                (session_id, session_id, MAX_TOKENS_PER_SESSION),
            )
        return token

    def session_grant(self, token: str) -> SessionGrant:
        """What ``token`` may touch; 401 when it is unknown (never issued, revoked, or
        its session deleted) or its session is archived."""
        with self._txn() as c:
            row = c.execute(
                "SELECT s.id AS id, s.archived_at AS archived_at FROM session_tokens t"
                " JOIN sessions s ON s.id = t.session_id WHERE t.token_sha256 = ?",
                (token_sha256(token),),
            ).fetchone()
            if row is None:
                raise ApiError(401, "authentication_error", "invalid session token")
            if row["archived_at"] is not None:
                raise ApiError(401, "authentication_error",
                               f"session {row['id']!r} is archived; its tokens no longer work")
            access = {
                r["memory_store_id"]: r["access"]
                for r in c.execute(
                    "SELECT memory_store_id, access FROM session_resources WHERE session_id = ?",
                    (row["id"],),
                ).fetchall()
            }
        return SessionGrant(row["id"], access)
