"""HTTP layer of `memfs serve`: routing, request parsing, the error envelope.

Stdlib only: a ``ThreadingHTTPServer`` speaking HTTP/1.1 with keep-alive
(every response carries Content-Length). Each request is handled by one thread;
all database work is serialized inside :class:`memfs.server.db.Database`.

Request pipeline for ``/v1/…``: gate "before" → faults (latency, 429, 5xx) →
auth (401) → route (404/405) → beta header (400) → body/query parsing (400) →
operation → gate "after" → response (or, for an injected drop, a connection
reset after the commit). The gate (``gate.py``) holds nothing unless a test
configured it through ``/_memfs/gate``.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import secrets
import socket
import struct
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from memfs.server.db import (
    Actor,
    ApiError,
    Database,
    invalid,
    not_found,
    parse_timestamp,
)
from memfs.server.faults import Faults
from memfs.server.gate import RESPONSES, Gate

log = logging.getLogger("memfs.server")

MEMORY_BETA = "agent-memory-2026-07-22"
LEGACY_BETA = "managed-agents-2026-04-01"
SESSION_HEADER = "x-memfs-session-id"
MAX_BODY = 32 * 1024 * 1024

_SESSION_RE = re.compile(r"^sesn_[A-Za-z0-9_-]{1,128}$")


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
        try:
            return int(v, 10)
        except ValueError:
            raise invalid(f"{name} must be an integer") from None

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


def _opt_str(body: dict[str, Any], name: str) -> str | None:
    v = body.get(name)
    if v is not None and not isinstance(v, str):
        raise invalid(f"{name} must be a string")
    return v


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


_SEG = r"([^/]+)"
ROUTES: list[tuple[re.Pattern[str], dict[str, Op]]] = [
    (re.compile(r"/v1/memory_stores"), {"GET": list_stores, "POST": create_store}),
    (
        re.compile(rf"/v1/memory_stores/{_SEG}"),
        {"GET": get_store, "POST": update_store, "DELETE": delete_store},
    ),
    (re.compile(rf"/v1/memory_stores/{_SEG}/archive"), {"POST": archive_store}),
    (
        re.compile(rf"/v1/memory_stores/{_SEG}/memories"),
        {"GET": list_memories, "POST": create_memory},
    ),
    (
        re.compile(rf"/v1/memory_stores/{_SEG}/memories/{_SEG}"),
        {"GET": get_memory, "POST": update_memory, "DELETE": delete_memory},
    ),
    (re.compile(rf"/v1/memory_stores/{_SEG}/memory_versions"), {"GET": list_versions}),
    (re.compile(rf"/v1/memory_stores/{_SEG}/memory_versions/{_SEG}"), {"GET": get_version}),
    (
        re.compile(rf"/v1/memory_stores/{_SEG}/memory_versions/{_SEG}/redact"),
        {"POST": redact_version},
    ),
]


def resolve(method: str, path: str) -> tuple[Op, tuple[str, ...]]:
    for pattern, methods in ROUTES:
        m = pattern.fullmatch(path)
        if m:
            op = methods.get(method)
            if op is None:
                raise ApiError(
                    405,
                    "invalid_request_error",
                    f"method {method} is not allowed on {path}",
                    headers={"allow": ", ".join(sorted(methods))},
                )
            return op, tuple(unquote(g) for g in m.groups())
    raise not_found(f"no route for {method} {path}")


def check_beta(values: list[str]) -> None:
    betas = {b.strip() for v in values for b in v.split(",") if b.strip()}
    if MEMORY_BETA in betas and LEGACY_BETA in betas:
        raise invalid(
            f"do not combine {MEMORY_BETA} with {LEGACY_BETA} on memory store requests;"
            f" send only {MEMORY_BETA}"
        )
    if MEMORY_BETA not in betas and LEGACY_BETA not in betas:
        raise invalid(f"this endpoint is in beta: send the anthropic-beta header {MEMORY_BETA}")


# --------------------------------------------------------------------------
# Server and handler


class MemfsHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        db: Database,
        *,
        api_key: str | None = None,
        faults: Faults | None = None,
        fault_control: bool = False,
        verbose: bool = False,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)
        self.db = db
        self.api_key = api_key
        self.default_actor = Actor.for_api_key(api_key)
        self.faults = faults or Faults()
        self.fault_control = fault_control
        self.gate = Gate()
        self.verbose = verbose


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "memfs-serve"
    sys_version = ""
    timeout = 300  # idle keep-alive connections are closed after this
    server: MemfsHTTPServer

    def setup(self) -> None:
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        if self.server.verbose:
            log.info("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    # -- plumbing --------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            chunks = []
            total = 0
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY:
                    raise ApiError(413, "request_too_large", "request body is too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(chunks)
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            raise ApiError(413, "request_too_large", "request body is too large")
        return self.rfile.read(length) if length > 0 else b""

    def _send(
        self, status: int, payload: dict[str, Any], rid: str, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", rid)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("connection", "close")
        # Headers and body in one write (no Nagle / delayed-ACK stall).
        self._headers_buffer.append(b"\r\n" + data)
        self.flush_headers()

    def _send_error(self, err: ApiError, rid: str) -> None:
        body = {"type": "error", "error": err.error_object(), "request_id": rid}
        self._send(err.status, body, rid, err.headers)

    def _reset_connection(self) -> None:
        """Drop the connection with an RST and no response."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            self.rfile.close()  # drops the makefile() reference so close() is real
        except OSError:
            pass
        try:
            self.connection.close()
        except OSError:
            pass

    def _dispatch(self) -> None:
        rid = new_request_id()
        url = urlsplit(self.path)
        path = url.path
        try:
            body_bytes = self._read_body()
        except ApiError as err:
            self._send_error(err, rid)
            return
        except (ValueError, OSError):
            self.close_connection = True
            self._send_error(invalid("malformed request body"), rid)
            return

        if path.startswith("/_memfs/"):
            self._internal(path, url.query, body_bytes, rid)
            return

        gated = path.startswith("/v1/")
        drop = False
        if gated:
            refused = self.server.gate.hold(self.command, path, "before")
            if refused is not None:
                self._send_error(ApiError(refused, RESPONSES[refused], "refused by the test "
                                          "gate"), rid)
                return
            decision = self.server.faults.decide()
            if decision.latency:
                time.sleep(decision.latency)
            if decision.status is not None:
                headers = {}
                if decision.retry_after is not None:
                    ra = decision.retry_after
                    headers["retry-after"] = str(int(ra)) if ra == int(ra) else str(ra)
                    headers["retry-after-ms"] = str(int(ra * 1000))
                msg = "injected fault" + (" (rate limited)" if decision.status == 429 else "")
                err = ApiError(decision.status, decision.error_type, msg, headers=headers)
                self._send_error(err, rid)
                return
            drop = decision.drop

        error: ApiError | None = None
        try:
            payload = self._handle_api(url.query, path, body_bytes)
        except ApiError as err:
            error = err
        except Exception:
            log.exception("internal error handling %s %s", self.command, path)
            error = ApiError(500, "api_error", "internal server error")
        if gated:  # applied and committed (or refused); the response is not sent yet
            self.server.gate.hold(self.command, path, "after",
                                  status=200 if error is None else error.status)
        if drop:
            self._reset_connection()
            return
        if error is not None:
            self._send_error(error, rid)
            return
        self._send(200, payload, rid)

    def _handle_api(self, raw_query: str, path: str, body_bytes: bytes) -> dict[str, Any]:
        srv = self.server
        if srv.api_key is not None:
            supplied = self.headers.get("x-api-key")
            if supplied is None:
                auth = self.headers.get("authorization", "")
                if auth[:7].lower() == "bearer ":
                    supplied = auth[7:].strip()
            if supplied is None or not hmac.compare_digest(supplied.encode(), srv.api_key.encode()):
                raise ApiError(401, "authentication_error", "invalid x-api-key")
        op, params = resolve(self.command, path)
        check_beta(self.headers.get_all("anthropic-beta") or [])
        query = dict(parse_qsl(raw_query, keep_blank_values=True))
        body: Any = None
        if body_bytes.strip():
            try:
                body = json.loads(body_bytes)
            except (ValueError, UnicodeDecodeError):
                raise invalid("request body is not valid JSON") from None
        actor: Actor | None = srv.default_actor
        session = self.headers.get(SESSION_HEADER)
        if session is not None:
            if not _SESSION_RE.match(session):
                raise invalid(f"{SESSION_HEADER} must be a sesn_… id")
            actor = Actor("session_actor", session)
        return op(srv.db, Request(params, query, body, actor))

    def _internal(self, path: str, raw_query: str, body_bytes: bytes, rid: str) -> None:
        srv = self.server
        if path == "/_memfs/health":
            if self.command != "GET":
                self._send_error(ApiError(405, "invalid_request_error", "use GET"), rid)
                return
            self._send(200, {"ok": True, "server_id": srv.db.server_id}, rid)
            return
        if path == "/_memfs/faults" and srv.fault_control:
            if self.command == "GET":
                self._send(200, srv.faults.snapshot(), rid)
                return
            if self.command == "POST":
                try:
                    changes = json.loads(body_bytes or b"{}")
                    if not isinstance(changes, dict):
                        raise ValueError("body must be a JSON object")
                    self._send(200, srv.faults.update(changes), rid)
                except ValueError as exc:
                    self._send_error(invalid(str(exc)), rid)
                return
            self._send_error(ApiError(405, "invalid_request_error", "use GET or POST"), rid)
            return
        if path in ("/_memfs/gate", "/_memfs/gate/release") and srv.fault_control:
            self._gate_control(path, raw_query, body_bytes, rid)
            return
        self._send_error(not_found(f"no route for {self.command} {path}"), rid)

    def _gate_control(self, path: str, raw_query: str, body_bytes: bytes, rid: str) -> None:
        """``/_memfs/gate``: GET (held list; ``?min_held=N&timeout=S`` waits for N held),
        POST (add a rule), DELETE (drop rules, release all); ``/_memfs/gate/release``:
        POST ``{"seq": n}`` or ``{}`` for all."""
        gate = self.server.gate
        try:
            body = json.loads(body_bytes) if body_bytes.strip() else {}
        except (ValueError, UnicodeDecodeError):
            self._send_error(invalid("request body is not valid JSON"), rid)
            return
        try:
            if path == "/_memfs/gate/release":
                if self.command != "POST":
                    raise ApiError(405, "invalid_request_error", "use POST")
                if not isinstance(body, dict) or set(body) - {"seq"}:
                    raise invalid('body must be {"seq": n} or {}')
                seq = body.get("seq")
                if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
                    raise invalid("seq must be an integer")
                try:
                    released = gate.release(seq)
                except KeyError:
                    raise not_found(f"no held request with seq {seq}") from None
                self._send(200, {"released": released}, rid)
            elif self.command == "GET":
                query = dict(parse_qsl(raw_query))
                try:
                    n = int(query.get("min_held", "0"))
                    wait = float(query.get("timeout", "0"))
                except ValueError:
                    raise invalid("min_held must be an integer, timeout a number") from None
                self._send(200, gate.wait_held(n, wait) if n > 0 else gate.snapshot(), rid)
            elif self.command == "POST":
                try:
                    rule = gate.add_rule(body)
                except ValueError as exc:
                    raise invalid(str(exc)) from None
                self._send(200, rule, rid)
            elif self.command == "DELETE":
                self._send(200, {"released": gate.clear()}, rid)
            else:
                raise ApiError(405, "invalid_request_error", "use GET, POST or DELETE")
        except ApiError as err:
            self._send_error(err, rid)
