"""The API layer of `memfs serve`: routes, request shapes, the operations.

Transport-free: an operation is a plain function ``op(db, Request)`` that
returns the JSON body or raises :class:`ApiError`. The ASGI application
(``app.py``, served by uvicorn) does HTTP: auth, body limits, the gate, faults
and the error envelope. Keeping this layer free of any server lets tests drive
the operations in-process (``tests/interleave.py``) and keeps one routing
table: :data:`ROUTE_TABLE`, compiled with Starlette's path compiler.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from starlette.routing import compile_path

from memfs.api.betas import MEMORY_BETA, SESSIONS_BETA
from memfs.server.db import (
    Actor,
    ApiError,
    Database,
    SessionGrant,
    invalid,
    not_found,
    parse_timestamp,
)
from memfs.server.jsonbody import (
    MEMORY_WRITE_BODY_MAX,
    OTHER_BODY_MAX,
    SESSION_CREATE_BODY_MAX,
    STORE_WRITE_BODY_MAX,
)

#: Memory store routes also take the managed-agents beta they took first; session
#: routes keep using it (reference 1.3, 6.1).
LEGACY_BETA = SESSIONS_BETA
SESSION_HEADER = "x-memfs-session-id"

_SESSION_RE = re.compile(r"^sesn_[A-Za-z0-9_-]{1,128}$")
#: A query integer as the API writes it: ASCII digits, a minus sign at most.
_INTEGER = re.compile(r"-?[0-9]+")
#: A query integer as the API writes it: ASCII digits, a minus sign at most.
_INTEGER = re.compile(r"-?[0-9]+")


def new_request_id() -> str:
    return "req_01" + secrets.token_hex(11)[:22]


# --------------------------------------------------------------------------
# Request parsing


class Request:
    """What an operation sees: path params, query, JSON body, caller."""

    def __init__(
        self, params: tuple[str, ...], query: dict[str, str], body: Any, actor: Actor | None
    ) -> None:
        self.params = params
        self.query = query
        self.body = body
        self.actor = actor

    # -- query -------------------------------------------------------------

    def q_str(self, name: str) -> str | None:
        return self.query.get(name)

    def q_int(self, name: str) -> int | None:
        v = self.query.get(name)
        if v is None:
            return None
        if _INTEGER.fullmatch(v) is None:  # int() would take "1_0", " 2", "+3", "١"
            raise invalid(f"{name} must be an integer")
        return int(v)

    def q_bool(self, name: str) -> bool:
        v = self.query.get(name)
        if v is None:
            return False
        if v.lower() in ("true", "1"):
            return True
        if v.lower() in ("false", "0"):
            return False
        raise invalid(f"{name} must be true or false")

    def q_full(self, default: str) -> bool:
        v = self.query.get("view", default)
        if v not in ("basic", "full"):
            raise invalid("view must be 'basic' or 'full'")
        return v == "full"

    def q_time(self, name: str) -> str | None:
        v = self.query.get(name)
        return None if v is None else parse_timestamp(v, name=name)

    # -- body ----------------------------------------------------------------

    def fields(self, allowed: set[str], required: set[str] = frozenset()) -> dict[str, Any]:
        body = self.body
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise invalid("request body must be a JSON object")
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise invalid(f"{unknown[0]}: Extra inputs are not permitted")
        for name in sorted(required):
            if name not in body:
                raise invalid(f"{name}: Field required")
        return body


# --------------------------------------------------------------------------
# Operations (one per route+method)

Op = Callable[[Database, Request], dict[str, Any]]


def create_store(db: Database, r: Request) -> dict[str, Any]:
    b = r.fields({"name", "description", "metadata"}, {"name"})
    return db.create_store(
        name=b["name"], description=b.get("description"), metadata=b.get("metadata")
    )


def list_stores(db: Database, r: Request) -> dict[str, Any]:
    return db.list_stores(
        limit=r.q_int("limit"),
        page=r.q_str("page"),
        include_archived=r.q_bool("include_archived"),
        created_gte=r.q_time("created_at[gte]"),
        created_lte=r.q_time("created_at[lte]"),
    )


def get_store(db: Database, r: Request) -> dict[str, Any]:
    return db.get_store(r.params[0])


def update_store(db: Database, r: Request) -> dict[str, Any]:
    b = r.fields({"name", "description", "metadata"})
    return db.update_store(
        r.params[0],
        name=b.get("name"),
        description=b.get("description"),
        metadata=b.get("metadata"),
    )


def archive_store(db: Database, r: Request) -> dict[str, Any]:
    r.fields(set())
    return db.archive_store(r.params[0])


def delete_store(db: Database, r: Request) -> dict[str, Any]:
    return db.delete_store(r.params[0])


def create_memory(db: Database, r: Request) -> dict[str, Any]:
    full = r.q_full("basic")
    b = r.fields({"path", "content"}, {"path", "content"})
    return db.create_memory(
        r.params[0], path=b["path"], content=b["content"], actor=r.actor, full=full
    )


def list_memories(db: Database, r: Request) -> dict[str, Any]:
    return db.list_memories(
        r.params[0],
        path_prefix=r.q_str("path_prefix"),
        depth=r.q_int("depth"),
        limit=r.q_int("limit"),
        page=r.q_str("page"),
        full=r.q_full("basic"),
    )


def get_memory(db: Database, r: Request) -> dict[str, Any]:
    return db.get_memory(r.params[0], r.params[1], full=r.q_full("full"))


def update_memory(db: Database, r: Request) -> dict[str, Any]:
    full = r.q_full("basic")
    b = r.fields({"path", "content", "precondition"})
    sha = None
    pre = b.get("precondition")
    if pre is not None:
        if not isinstance(pre, dict):
            raise invalid("precondition must be an object")
        extra = sorted(set(pre) - {"type", "content_sha256"})
        if extra:
            raise invalid(f"precondition.{extra[0]}: Extra inputs are not permitted")
        if pre.get("type") != "content_sha256":
            raise invalid("precondition.type must be 'content_sha256'")
        if "content_sha256" not in pre:
            raise invalid("precondition.content_sha256: Field required")
        sha = pre["content_sha256"]
        if not isinstance(sha, str):
            raise invalid("precondition.content_sha256 must be a string")
    return db.update_memory(
        r.params[0],
        r.params[1],
        content=b.get("content"),
        path=b.get("path"),
        precondition_sha256=sha,
        actor=r.actor,
        full=full,
    )


def delete_memory(db: Database, r: Request) -> dict[str, Any]:
    return db.delete_memory(
        r.params[0],
        r.params[1],
        expected_content_sha256=r.q_str("expected_content_sha256"),
        actor=r.actor,
    )


def list_versions(db: Database, r: Request) -> dict[str, Any]:
    return db.list_versions(
        r.params[0],
        memory_id=r.q_str("memory_id"),
        session_id=r.q_str("session_id"),
        api_key_id=r.q_str("api_key_id"),
        service_account_id=r.q_str("service_account_id"),
        operation=r.q_str("operation"),
        created_gte=r.q_time("created_at[gte]"),
        created_lte=r.q_time("created_at[lte]"),
        limit=r.q_int("limit"),
        page=r.q_str("page"),
        full=r.q_full("basic"),
    )


def get_version(db: Database, r: Request) -> dict[str, Any]:
    return db.get_version(r.params[0], r.params[1], full=r.q_full("full"))


def redact_version(db: Database, r: Request) -> dict[str, Any]:
    r.fields(set())
    return db.redact_version(r.params[0], r.params[1], actor=r.actor)


def create_session(db: Database, r: Request) -> dict[str, Any]:
    b = r.fields(
        {"agent", "environment_id", "resources", "metadata", "title", "vault_ids", "budget",
         "initial_events"},
        {"agent", "environment_id"},
    )
    return db.create_session(
        agent=b["agent"],
        environment_id=b["environment_id"],
        resources=b.get("resources"),
        metadata=b.get("metadata"),
        title=b.get("title"),
        vault_ids=b.get("vault_ids"),
        budget=b.get("budget"),
        initial_events=b.get("initial_events"),
    )


def list_sessions(db: Database, r: Request) -> dict[str, Any]:
    return db.list_sessions(
        limit=r.q_int("limit"),
        page=r.q_str("page"),
        memory_store_id=r.q_str("memory_store_id"),
        agent_id=r.q_str("agent_id"),
        include_archived=r.q_bool("include_archived"),
        order=r.q_str("order"),
        created_gt=r.q_time("created_at[gt]"),
        created_gte=r.q_time("created_at[gte]"),
        created_lt=r.q_time("created_at[lt]"),
        created_lte=r.q_time("created_at[lte]"),
    )


def get_session(db: Database, r: Request) -> dict[str, Any]:
    return db.get_session(r.params[0])


def archive_session(db: Database, r: Request) -> dict[str, Any]:
    r.fields(set())
    return db.archive_session(r.params[0])


def delete_session(db: Database, r: Request) -> dict[str, Any]:
    return db.delete_session(r.params[0])


#: The one routing table: Starlette path templates → {method: operation}.
ROUTE_TABLE: list[tuple[str, dict[str, Op]]] = [
    ("/v1/memory_stores", {"GET": list_stores, "POST": create_store}),
    ("/v1/memory_stores/{store_id}",
     {"GET": get_store, "POST": update_store, "DELETE": delete_store}),
    ("/v1/memory_stores/{store_id}/archive", {"POST": archive_store}),
    ("/v1/memory_stores/{store_id}/memories", {"GET": list_memories, "POST": create_memory}),
    ("/v1/memory_stores/{store_id}/memories/{memory_id}",
     {"GET": get_memory, "POST": update_memory, "DELETE": delete_memory}),
    ("/v1/memory_stores/{store_id}/memory_versions", {"GET": list_versions}),
    ("/v1/memory_stores/{store_id}/memory_versions/{version_id}", {"GET": get_version}),
    ("/v1/memory_stores/{store_id}/memory_versions/{version_id}/redact",
     {"POST": redact_version}),
    ("/v1/sessions", {"GET": list_sessions, "POST": create_session}),
    ("/v1/sessions/{session_id}", {"GET": get_session, "DELETE": delete_session}),
    ("/v1/sessions/{session_id}/archive", {"POST": archive_session}),
]
#: The operations that take the sessions beta header instead of the memory one.
SESSION_OPS: frozenset[Op] = frozenset(
    op for template, methods in ROUTE_TABLE if template.startswith("/v1/sessions")
    for op in methods.values()
)
#: What a session token may do, on its session's stores only (params[0] = store id).
SESSION_TOKEN_READS: frozenset[Op] = frozenset(
    {get_store, list_memories, get_memory, list_versions, get_version}
)
SESSION_TOKEN_WRITES: frozenset[Op] = frozenset({create_memory, update_memory, delete_memory})
#: Each operation's route template (the metrics' ``route`` label).
ROUTE_OF: dict[Op, str] = {
    op: template for template, methods in ROUTE_TABLE for op in methods.values()
}
#: How large each operation's body may be (bytes); see ``jsonbody.py``.
BODY_MAX: dict[Op, int] = {
    **{op: OTHER_BODY_MAX for op in ROUTE_OF},
    create_memory: MEMORY_WRITE_BODY_MAX,
    update_memory: MEMORY_WRITE_BODY_MAX,
    create_session: SESSION_CREATE_BODY_MAX,
    create_store: STORE_WRITE_BODY_MAX,
    update_store: STORE_WRITE_BODY_MAX,
}
ROUTES: list[tuple[re.Pattern[str], dict[str, Op]]] = [
    (compile_path(template)[0], methods) for template, methods in ROUTE_TABLE
]


def resolve(method: str, path: str) -> tuple[Op, tuple[str, ...]]:
    """The operation and path parameters for ``method path`` (404/405 otherwise).
    ``path`` is the raw (still percent-encoded) URL path; parameters are decoded."""
    for pattern, methods in ROUTES:
        m = pattern.match(path)
        if m:
            op = methods.get(method)
            if op is None:
                raise ApiError(
                    405,
                    "invalid_request_error",
                    f"method {method} is not allowed on {path}",
                    headers={"allow": ", ".join(sorted(methods))},
                )
            try:
                return op, tuple(unquote(g, errors="strict") for g in m.groups())
            except UnicodeDecodeError:
                raise not_found(f"no route for {method} {path}") from None
    raise not_found(f"no route for {method} {path}")


def check_beta(values: list[str], *, sessions: bool = False) -> None:
    """The ``anthropic-beta`` header lines of a request (comma lists, any number
    of lines). Memory store routes: exactly one of the memory and the
    managed-agents betas. Session routes (``sessions``): the managed-agents beta."""
    betas = {b.strip() for v in values for b in v.split(",") if b.strip()}
    if sessions:
        if SESSIONS_BETA not in betas:
            raise invalid(
                f"this endpoint is in beta: send the anthropic-beta header {SESSIONS_BETA}"
            )
        return
    if MEMORY_BETA in betas and LEGACY_BETA in betas:
        raise invalid(
            f"do not combine {MEMORY_BETA} with {LEGACY_BETA} on memory store requests;"
            f" send only {MEMORY_BETA}"
        )
    if MEMORY_BETA not in betas and LEGACY_BETA not in betas:
        raise invalid(f"this endpoint is in beta: send the anthropic-beta header {MEMORY_BETA}")


def check_session_scope(grant: SessionGrant, op: Op, params: tuple[str, ...]) -> None:
    """What a request made with a session token may do: retrieve its own session
    (a worker holding only the token learns its stores that way), read the
    memories and versions of its session's stores, and write memories in its
    ``read_write`` ones. Another session or store is 404 (as if it did not
    exist); a write to a ``read_only`` store, and every other operation, is 403
    ``permission_error``."""
    if op is get_session:
        if params[0] != grant.session_id:
            raise not_found(f"session {params[0]!r} not found")
        return
    if op not in SESSION_TOKEN_READS and op not in SESSION_TOKEN_WRITES:
        raise ApiError(
            403,
            "permission_error",
            "a session token may only read and write the memories of its session's"
            " memory stores",
        )
    store_id = params[0]
    access = grant.access.get(store_id)
    if access is None:
        raise not_found(f"memory store {store_id!r} not found")
    if op in SESSION_TOKEN_WRITES and access != "read_write":
        raise ApiError(
            403,
            "permission_error",
            f"memory store {store_id!r} is attached read_only to session"
            f" {grant.session_id!r}",
        )
