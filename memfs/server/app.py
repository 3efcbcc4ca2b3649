"""The ASGI application of `memfs serve` (served by uvicorn, see ``runner.py``).

HTTP parsing, chunked bodies, keep-alive and connection limits come from
uvicorn/h11; the routes are Starlette path templates (``http.py``). This
module is the request pipeline, in this order for ``/v1/…``:

framing (content-length with transfer-encoding: 400, closed) → gate "before" →
faults (latency, 429, 5xx) → auth (401: the API key, or a session token of the
right shape and its grant) → route (404/405) → session token scope (404/403) →
body (the route's bound: 413 while streaming, 408 when too slow) → beta header
(400) → strict, bounded JSON (400; large bodies parsed in a worker thread) →
shapes (400) → gate "late" (the connection reset, the request held, then
applied) → operation (in a worker thread) → gate "after" → response (or, for
an injected drop, a connection reset after the commit).

Authentication and routing happen before a single body byte is read, so a
client without the key cannot make the server buffer anything, and one with it
no more than its route needs (``jsonbody.py``); the bound is enforced on the
bytes actually received, whatever ``content-length`` or the chunk sizes claim.
Every error, including malformed input the operations never see, is answered
in the API's envelope; an unexpected exception is logged and answered 500
without a trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import anyio
import anyio.to_thread
from starlette.concurrency import run_in_threadpool

from memfs.core.healthproof import health_proof
from memfs.server.authcache import RefusedTokens
from memfs.server.db import (
    SESSION_TOKEN_PREFIX,
    Actor,
    ApiError,
    Database,
    SessionGrant,
    invalid,
    not_found,
)
from memfs.server.db_sessions import SESSION_TOKEN_RE, token_sha256
from memfs.server.faults import Faults
from memfs.server.gate import RESPONSES, Gate
from memfs.server.http import (
    _SESSION_RE,
    BODY_MAX,
    ROUTE_OF,
    SESSION_HEADER,
    SESSION_OPS,
    Request,
    check_beta,
    check_session_scope,
    new_request_id,
    resolve,
)
from memfs.server.jsonbody import (
    OTHER_BODY_MAX,
    THREAD_PARSE_MIN,
    BodyRefused,
    parse_body,
    too_large,
)
from memfs.server.metrics import CONTENT_TYPE, ServerMetrics

log = logging.getLogger("memfs.server")

#: How long GET /_memfs/ready waits for one query (a balancer's probe is short).
READY_WAIT = 2.0
#: What /_memfs/health and /_memfs/ready answer: some balancers probe with HEAD (the
#: answer's headers only: the HTTP layer leaves the body out).
_PROBE_METHODS = frozenset({"GET", "HEAD"})
#: POST /_memfs/sessions/{id}/token: a session token (memfs extension).
_TOKEN_ROUTE = re.compile(r"^/_memfs/sessions/([^/]+)/token$")
#: The /_memfs/ routes, as the metrics' ``route`` label names them.
_INTERNAL_ROUTES = frozenset({"/_memfs/health", "/_memfs/ready", "/_memfs/metrics",
                              "/_memfs/faults",
                              "/_memfs/gate", "/_memfs/gate/release"})
#: Methods the metrics name; any other token h11 accepts is counted as "other".
_METHODS = frozenset({"GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"})

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

@dataclass
class Limits:
    """Bounds that keep a hostile client from holding the server's resources."""

    body_timeout: float = 60.0  # seconds to receive the whole body once headers are in
    send_timeout: float = 60.0  # seconds for a client to take a response (slow readers)
    max_inflight: int = 1024  # /v1/ requests being processed at once (503 beyond)
    max_buffered: int = 32 * 1024 * 1024  # request body bytes held at once, all requests
    parse_threads: int = 4  # large bodies parsed at once (in worker threads)


class BodyBudget:
    """Request-body bytes buffered across all requests at once: authenticated
    clients cannot together hold more than ``Limits.max_buffered`` (503 beyond).
    Only touched on the event loop, so a plain counter is enough."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, n: int) -> None:
        if self.used + n > self.limit:
            err = BodyRefused(503, "overloaded_error", "the server is busy receiving other "
                              "request bodies; retry", "budget")
            err.headers["retry-after"] = "1"
            raise err
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n


#: The test controls' bodies (/_memfs/faults, /_memfs/gate): small objects.
CONTROL_BODY_MAX = 4 * OTHER_BODY_MAX

#: An unread body up to this size is drained before an early answer (401, 404,
#: an injected fault...) instead of closing on it, which would reset the connection.
DRAIN_MAX = 64 * 1024
DRAIN_TIMEOUT = 2.0


class _Dropped(Exception):
    """The connection is gone (dropped by a fault or by the client): send nothing."""


class _Exchange:
    """One request/response: the scope, and whether the body was consumed."""

    def __init__(self, scope: Scope, receive: Receive, send: Send,
                 send_timeout: float = 60.0) -> None:
        self.scope = scope
        self.send_timeout = send_timeout
        self.receive = receive
        self._send = send
        self.rid = new_request_id()
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        raw = scope.get("raw_path")
        self.raw_path: str = raw.decode("latin-1") if raw else self.path
        self.query_string: str = scope.get("query_string", b"").decode("latin-1")
        self.headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        self.status: int | None = None
        self.route: str | None = None  # the route template, once resolved (metrics)
        self.attributed: str | None = None  # x-memfs-session-id, when it was used
        self.close_connection = False  # answer with connection: close, read nothing
        self.body_read = False
        self._budget: BodyBudget | None = None
        self._charged = 0

    def release_body(self) -> None:
        """Give the body's bytes back to the server-wide budget."""
        if self._budget is not None:
            self._budget.give(self._charged)
            self._charged = 0

    def header(self, name: bytes) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v.decode("latin-1")
        return None

    def header_all(self, name: bytes) -> list[str]:
        return [v.decode("latin-1") for k, v in self.headers if k == name]

    @property
    def has_body(self) -> bool:
        te = self.header(b"transfer-encoding")
        cl = self.header(b"content-length")
        return bool(te) or (cl is not None and cl.strip() not in ("", "0"))

    async def read_body(self, limit: int, limits: Limits,
                        budget: BodyBudget | None = None) -> bytes:
        """The whole body: 413 past ``limit`` (the route's bound: a larger
        ``content-length`` before a byte is read, a chunked body as it streams
        in), 408 when it does not arrive within ``body_timeout``, 503 when the
        server-wide ``budget`` is spent. The bytes stay charged to the budget
        until :meth:`release_body` (after the response)."""
        cl = self.header(b"content-length")
        if cl is not None:
            try:
                declared = int(cl)
            except ValueError:
                raise invalid("malformed content-length") from None
            if declared > limit:
                raise too_large(limit)
        chunks: list[bytes] = []
        total = 0
        try:
            async with asyncio.timeout(limits.body_timeout):
                while True:
                    message = await self.receive()
                    if message["type"] == "http.disconnect":
                        raise _Dropped
                    chunk = message.get("body", b"")
                    total += len(chunk)
                    if total > limit:
                        raise too_large(limit)
                    if budget is not None and chunk:
                        budget.take(len(chunk))
                        self._charged += len(chunk)
                        self._budget = budget
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            raise BodyRefused(408, "invalid_request_error",
                              "request body not received in time", "timeout") from None
        self.body_read = True
        return b"".join(chunks)

    async def _drain(self) -> bool:
        """Read and discard a small unread body (at most DRAIN_MAX bytes, briefly), so
        closing does not reset the connection under a response the client has not
        read yet. False when the body is larger or slow: the connection is closed."""
        cl = self.header(b"content-length")
        if cl is not None and (not cl.strip().isdigit() or int(cl) > DRAIN_MAX):
            return False
        total = 0
        try:
            async with asyncio.timeout(DRAIN_TIMEOUT):
                while True:
                    message = await self.receive()
                    if message["type"] == "http.disconnect":
                        return False
                    total += len(message.get("body", b""))
                    if total > DRAIN_MAX:
                        return False
                    if not message.get("more_body", False):
                        self.body_read = True
                        return True
        except TimeoutError:
            return False

    async def send_json(self, status: int, payload: dict[str, Any],
                        headers: dict[str, str] | None = None) -> None:
        # backslashreplace: a lone surrogate echoed in a message becomes the JSON
        # escape "\ud800" instead of an encoding error.
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "backslashreplace")
        await self.send_bytes(status, data, "application/json", headers)

    async def send_bytes(self, status: int, data: bytes, content_type: str,
                         headers: dict[str, str] | None = None) -> None:
        out = [(b"content-type", content_type.encode("latin-1")),
               (b"content-length", str(len(data)).encode()),
               (b"request-id", self.rid.encode())]
        for k, v in (headers or {}).items():
            out.append((k.encode("latin-1"), v.encode("latin-1")))
        if self.close_connection:
            out.append((b"connection", b"close"))
        elif self.has_body and not self.body_read and not await self._drain():
            # Answered without reading a large body: close instead of reading it.
            out.append((b"connection", b"close"))
        self.status = status
        try:
            # A client that does not read its response (the server's write buffer
            # stays full) would hold this task and the response forever.
            async with asyncio.timeout(self.send_timeout):
                await self._send({"type": "http.response.start", "status": status,
                                  "headers": out})
                await self._send({"type": "http.response.body", "body": data,
                                  "more_body": False})
        except TimeoutError:
            log.warning("a client did not take its response in %gs: connection reset",
                        self.send_timeout)
            await self.abort()

    def cut(self) -> bool:
        """Reset the connection (RST) now, the request going on without it (a "late"
        gate rule); False when not served by our uvicorn protocol."""
        self.status = 0
        abort = self.scope.get("extensions", {}).get("memfs.abort")
        if abort is not None:
            abort()
        return abort is not None

    async def send_error(self, err: ApiError) -> None:
        body = {"type": "error", "error": err.error_object(), "request_id": self.rid}
        await self.send_json(err.status, body, err.headers)

    async def abort(self) -> None:
        """Reset the connection (RST) without (the rest of) a response."""
        if not self.cut():  # not under our uvicorn protocol (an in-process transport)
            raise ConnectionResetError("memfs: injected drop after commit")
        for _ in range(3):  # let uvicorn see the connection lost: no 500 on a dead socket
            await asyncio.sleep(0)
        raise _Dropped


class MemfsApp:
    """The ASGI callable. One instance per server process; holds the database, the
    test controls (faults, gate) and the limits."""

    def __init__(
        self,
        db: Database,
        *,
        api_key: str | None = None,
        faults: Faults | None = None,
        fault_control: bool = False,
        verbose: bool = False,
        limits: Limits | None = None,
        metrics: bool = False,
    ) -> None:
        self.db = db
        self.api_key = api_key
        self.default_actor = Actor.for_api_key(api_key)
        self.faults = faults or Faults()
        self.fault_control = fault_control
        self.gate = Gate()
        self.verbose = verbose
        self.limits = limits or Limits()
        self.inflight = 0
        self.budget = BodyBudget(self.limits.max_buffered)
        #: Counted always; served on GET /_memfs/metrics only with ``metrics``.
        self.metrics = ServerMetrics(db)
        self.metrics_enabled = metrics
        self.refused_tokens = RefusedTokens()
        self._parse_limiter: anyio.CapacityLimiter | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        ex = _Exchange(scope, receive, send, self.limits.send_timeout)
        t0 = time.monotonic()
        try:
            if ex.header(b"transfer-encoding") is not None and \
                    ex.header(b"content-length") is not None:
                # RFC 9112 6.1: the framing is ambiguous (a proxy may have framed it
                # by content-length): answer, read nothing more, close.
                ex.close_connection = True
                self.metrics.heads_refused.labels("framing").inc()
                await ex.send_error(invalid("content-length together with transfer-encoding"
                                            " is refused; the connection is closed"))
            elif ex.path.startswith("/_memfs/"):
                await self._internal(ex)
            else:
                await self._api_request(ex)
        except _Dropped:
            pass
        except Exception:
            log.exception("internal error handling %s %s", ex.method, ex.raw_path)
            if ex.status is None:
                await ex.send_error(ApiError(500, "api_error", "internal server error"))
        finally:
            ex.release_body()
            elapsed = time.monotonic() - t0
            method = ex.method if ex.method in _METHODS else "other"
            route = ex.route or "unmatched"
            self.metrics.requests.labels(route, method, str(ex.status or 0)).inc()
            self.metrics.latency.labels(route, method).observe(elapsed)
            if self.verbose:
                client = scope.get("client") or ("-", 0)
                # raw_path: still percent-encoded, so no control character reaches a log line
                log.info("%s %s %s %s %.1fms%s", client[0], ex.method, ex.raw_path,
                         "dropped" if ex.status == 0 else ex.status, elapsed * 1000,
                         f" as {ex.attributed}" if ex.attributed else "")

    @staticmethod
    async def _lifespan(receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- /v1/ ----------------------------------------------------------------------

    async def _api_request(self, ex: _Exchange) -> None:
        gated = ex.path.startswith("/v1/")
        drop = False
        error_after: int | None = None
        if gated:
            caught = await self.gate.hold(ex.method, ex.path, "before")
            if caught is not None and caught.respond is not None:
                await ex.send_error(ApiError(caught.respond, RESPONSES[caught.respond],
                                             "refused by the test gate"))
                return
            decision = self.faults.decide()
            if decision.latency:
                await asyncio.sleep(decision.latency)
            if decision.status is not None:
                headers = {}
                if decision.retry_after is not None:
                    ra = decision.retry_after
                    headers["retry-after"] = str(int(ra)) if ra == int(ra) else str(ra)
                    headers["retry-after-ms"] = str(int(ra * 1000))
                msg = "injected fault" + (" (rate limited)" if decision.status == 429 else "")
                await ex.send_error(ApiError(decision.status, decision.error_type, msg,
                                             headers=headers))
                return
            drop, error_after = decision.drop, decision.error_after

        error: ApiError | None = None
        payload: dict[str, Any] | None = None
        try:
            payload = await self._operate(ex)
        except ApiError as err:
            # Keep nothing of the request: the traceback (and the context of a
            # `raise … from None`) holds its frames, the parsed body with them, in a
            # cycle through this frame that only the collector would break.
            error = err.with_traceback(None)
            error.__context__ = error.__cause__ = None
            if isinstance(error, BodyRefused):
                self.metrics.bodies_refused.labels(error.reason).inc()
        except _Dropped:
            raise
        except Exception:
            log.exception("internal error handling %s %s", ex.method, ex.raw_path)
            error = ApiError(500, "api_error", "internal server error")
        if gated:  # applied and committed (or refused); the response is not sent yet
            caught = await self.gate.hold(ex.method, ex.path, "after",
                                          status=200 if error is None else error.status)
            drop = drop or (caught is not None and caught.drop)
            if caught is not None and caught.respond is not None:  # applied, answered an error
                error = ApiError(caught.respond, RESPONSES[caught.respond],
                                 "answered with an error by the test gate after it was applied")
            elif error_after is not None:
                error = ApiError(error_after, "api_error", "injected fault after the commit")
        if drop:
            await ex.abort()
        if error is not None:
            await ex.send_error(error)
            return
        assert payload is not None
        if gated and caught is not None and caught.garble:
            whole = json.dumps(payload).encode()
            await ex.send_bytes(200, whole[:len(whole) // 2], "application/json")
            return
        await ex.send_json(200, payload)

    @staticmethod
    def _credential(ex: _Exchange) -> str | None:
        """``x-api-key``, else the ``Authorization: Bearer`` value."""
        supplied = ex.header(b"x-api-key")
        if supplied is None:
            auth = ex.header(b"authorization") or ""
            if auth[:7].lower() == "bearer ":
                supplied = auth[7:].strip()
        return supplied

    @staticmethod
    def _is_session_token(supplied: str | None) -> bool:
        return supplied is not None and supplied.startswith(SESSION_TOKEN_PREFIX)

    def _check_auth(self, supplied: str | None, ex: _Exchange | None = None) -> None:
        """The server's API key, as `_credential` read it from the request; the
        refusal names the header the request used (a wrong bearer token was said to
        be an invalid x-api-key: found by a helper)."""
        if self.api_key is None:
            return
        if supplied is None or not hmac.compare_digest(
                supplied.encode("latin-1"), self.api_key.encode()):
            self.metrics.auth_failures.labels("key").inc()
            if supplied is None:
                raise ApiError(401, "authentication_error",
                               "x-api-key header is required (or Authorization: Bearer)")
            bearer = ex is not None and ex.header(b"x-api-key") is None
            raise ApiError(401, "authentication_error",
                           "invalid bearer token" if bearer else "invalid x-api-key")

    async def _grant(self, token: str) -> SessionGrant:
        """What a session token may do. A malformed token is refused without the
        database; a refused one is remembered briefly (``RefusedTokens``)."""
        if not SESSION_TOKEN_RE.fullmatch(token):
            self.metrics.auth_failures.labels("token_malformed").inc()
            raise ApiError(401, "authentication_error", "invalid session token")
        digest = token_sha256(token)
        cached = self.refused_tokens.get(digest)
        if cached is not None:
            self.metrics.auth_failures.labels("token_cached").inc()
            raise ApiError(401, "authentication_error", cached)
        try:
            return await self._db("session_grant", self.db.session_grant, token)
        except ApiError as err:
            if err.status == 401:
                self.refused_tokens.put(digest, err.message)
                self.metrics.auth_failures.labels("token_unknown").inc()
            raise

    async def _db(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` (one database transaction) in a worker thread, timed."""
        t0 = time.monotonic()
        try:
            return await run_in_threadpool(fn, *args)
        except ApiError:
            raise
        except Exception:
            self.metrics.db_errors.labels(name).inc()
            raise
        finally:
            self.metrics.db_time.labels(name).observe(time.monotonic() - t0)

    async def _parse(self, data: bytes) -> Any:
        """:func:`parse_body`; a large body in a worker thread (at most
        ``Limits.parse_threads`` at once), so the event loop never waits on it."""
        if len(data) < THREAD_PARSE_MIN:
            return parse_body(data)
        if self._parse_limiter is None:
            self._parse_limiter = anyio.CapacityLimiter(self.limits.parse_threads)
        return await anyio.to_thread.run_sync(parse_body, data, limiter=self._parse_limiter)

    async def _operate(self, ex: _Exchange) -> dict[str, Any]:
        # Auth before a single body byte is read: the API key, or a session token
        # (its grant is looked up in the database; 401 once the session is archived
        # or deleted). The token itself is never logged or stored, only its hash.
        supplied = self._credential(ex)
        token = supplied if self._is_session_token(supplied) else None
        if token is None:
            self._check_auth(supplied, ex)
        if self.inflight >= self.limits.max_inflight:
            raise ApiError(503, "overloaded_error", "too many requests in flight; retry",
                           headers={"retry-after": "1"})
        self.inflight += 1
        try:
            grant: SessionGrant | None = None
            if token is not None:
                grant = await self._grant(token)
            op, params = resolve(ex.method, ex.raw_path)
            ex.route = ROUTE_OF[op]
            if grant is not None:
                check_session_scope(grant, op, params)  # 404 / 403
            body_bytes = await ex.read_body(BODY_MAX[op], self.limits, self.budget)
            check_beta(ex.header_all(b"anthropic-beta"), sessions=op in SESSION_OPS)
            query = dict(parse_qsl(ex.query_string, keep_blank_values=True))
            body = await self._parse(body_bytes)
            del body_bytes
            actor: Actor | None = self.default_actor
            if grant is not None:
                actor = grant.actor  # the token decides; x-memfs-session-id is ignored
            else:
                session = ex.header(SESSION_HEADER.encode())
                if session is not None:
                    if not _SESSION_RE.match(session):
                        raise invalid(f"{SESSION_HEADER} must be a sesn_… id")
                    actor = Actor("session_actor", session)
                    ex.attributed = session
                    self.metrics.attributed.inc()
            request = Request(params, query, body, actor)
            if ex.path.startswith("/v1/") and await self.gate.hold_late(
                    ex.method, ex.path, ex.cut,
                    lambda: self._apply_late(op, request)):
                raise _Dropped  # applied late; its client heard nothing
            return await self._db(op.__name__, op, self.db, request)
        finally:
            self.inflight -= 1

    async def _apply_late(self, op: Any, request: Request) -> None:
        """A "late" gate rule's request, once released: applied like any other, its
        answer (or refusal) sent to no one."""
        with contextlib.suppress(ApiError):
            await self._db(op.__name__, op, self.db, request)

    # -- /_memfs/ --------------------------------------------------------------------

    async def _internal(self, ex: _Exchange) -> None:
        path, method = ex.path, ex.method
        if path in _INTERNAL_ROUTES:
            ex.route = path
        elif _TOKEN_ROUTE.match(path):
            ex.route = "/_memfs/sessions/{session_id}/token"
        try:
            if path == "/_memfs/metrics" and self.metrics_enabled:
                await self._metrics(ex)
                return
            if path == "/_memfs/health":
                if method not in _PROBE_METHODS:
                    raise ApiError(405, "invalid_request_error", "use GET")
                await ex.send_json(200, self._health(ex))
                return
            if path == "/_memfs/ready":
                if method not in _PROBE_METHODS:
                    raise ApiError(405, "invalid_request_error", "use GET")
                why = await self._ready()
                await ex.send_json(200 if why is None else 503,
                                   {"ok": why is None} | ({} if why is None else {"error": why}))
                return
            if path == "/_memfs/faults" and self.fault_control:
                if method == "GET":
                    await ex.send_json(200, self.faults.snapshot())
                    return
                if method != "POST":
                    raise ApiError(405, "invalid_request_error", "use GET or POST")
                changes = parse_body(await ex.read_body(CONTROL_BODY_MAX, self.limits))
                if changes is None:
                    changes = {}
                if not isinstance(changes, dict):
                    raise invalid("body must be a JSON object")
                try:
                    await ex.send_json(200, self.faults.update(changes))
                except ValueError as exc:
                    raise invalid(str(exc)) from None
                return
            if path in ("/_memfs/gate", "/_memfs/gate/release") and self.fault_control:
                await self._gate_control(ex)
                return
            m = _TOKEN_ROUTE.match(path)
            if m:
                await self._session_token(ex, m.group(1))
                return
            raise not_found(f"no route for {method} {path}")
        except ApiError as err:
            await ex.send_error(err)

    async def _metrics(self, ex: _Exchange) -> None:
        """``GET /_memfs/metrics``: the Prometheus exposition. Protected like the
        API (the key; a session token gets 403)."""
        if ex.method != "GET":
            raise ApiError(405, "invalid_request_error", "use GET", headers={"allow": "GET"})
        supplied = self._credential(ex)
        if self._is_session_token(supplied):
            raise ApiError(403, "permission_error", "metrics need the API key")
        self._check_auth(supplied, ex)
        data = await self._db("metrics", self.metrics.exposition)
        await ex.send_bytes(200, data, CONTENT_TYPE)

    async def _session_token(self, ex: _Exchange, session_id: str) -> None:
        """``POST /_memfs/sessions/{id}/token`` → ``{"token": …}``: a fresh token of the
        session (every call mints another; all work until the session is archived or
        deleted). Needs the server's API key; a session token cannot mint tokens."""
        if ex.method != "POST":
            raise ApiError(405, "invalid_request_error", "use POST", headers={"allow": "POST"})
        supplied = self._credential(ex)
        if self._is_session_token(supplied):
            raise ApiError(403, "permission_error",
                           "a session token cannot mint session tokens; use the API key")
        self._check_auth(supplied, ex)
        token = await self._db("issue_session_token", self.db.issue_session_token, session_id)
        await ex.send_json(200, {"token": token})

    async def _ready(self) -> str | None:
        """Whether the database takes a query now (None), else why not: `READY_WAIT`."""
        try:
            async with asyncio.timeout(READY_WAIT + 1):
                return await run_in_threadpool(self.db.ping, READY_WAIT)
        except TimeoutError:
            return f"the database did not answer within {READY_WAIT:g} s"

    def _health(self, ex: _Exchange) -> dict[str, Any]:
        """``{"ok", "server_id"}``; with ``?challenge=C`` (1–128 chars) and a key, also
        ``"proof"``: :func:`health_proof`, so a client can tell this server from any
        other process that took the port."""
        out: dict[str, Any] = {"ok": True, "server_id": self.db.server_id}
        challenge = dict(parse_qsl(ex.query_string, keep_blank_values=True)).get("challenge")
        if challenge is not None:
            if not 1 <= len(challenge) <= 128:
                raise invalid("challenge must be 1 to 128 characters")
            out["proof"] = None if self.api_key is None else health_proof(self.api_key,
                                                                          challenge)
        return out

    async def _gate_control(self, ex: _Exchange) -> None:
        """``/_memfs/gate``: GET (held list; ``?min_held=N&timeout=S`` waits for N held),
        POST (add a rule), DELETE (drop rules, release all); ``/_memfs/gate/release``:
        POST ``{"seq": n}`` or ``{}`` for all."""
        gate = self.gate
        body = parse_body(await ex.read_body(CONTROL_BODY_MAX, self.limits))
        if body is None:
            body = {}
        if ex.path == "/_memfs/gate/release":
            if ex.method != "POST":
                raise ApiError(405, "invalid_request_error", "use POST")
            if not isinstance(body, dict) or set(body) - {"seq"}:
                raise invalid('body must be {"seq": n} or {}')
            seq = body.get("seq")
            if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
                raise invalid("seq must be an integer")
            try:
                released = await gate.release_applied(seq)
            except KeyError:
                raise not_found(f"no held request with seq {seq}") from None
            await ex.send_json(200, {"released": released})
        elif ex.method == "GET":
            query = dict(parse_qsl(ex.query_string))
            try:
                n = int(query.get("min_held", "0"))
                wait = float(query.get("timeout", "0"))
            except ValueError:
                raise invalid("min_held must be an integer, timeout a number") from None
            if wait != wait:  # NaN
                raise invalid("timeout must be a number")
            snap = await gate.wait_held(n, wait) if n > 0 else gate.snapshot()
            await ex.send_json(200, snap)
        elif ex.method == "POST":
            try:
                rule = gate.add_rule(body)
            except ValueError as exc:
                raise invalid(str(exc)) from None
            await ex.send_json(200, rule)
        elif ex.method == "DELETE":
            await ex.send_json(200, {"released": gate.clear()})
        else:
            raise ApiError(405, "invalid_request_error", "use GET, POST or DELETE")

