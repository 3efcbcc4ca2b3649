"""Async (trio) client for the Memory Stores HTTP API.

One :class:`MemoryStoresClient` holds one keep-alive ``httpx.AsyncClient``
and is safe to share between trio tasks.

Retry policy (``max_retries`` extra attempts; ``0`` disables retries):

* retried: connection failures (connect/read/write errors, resets, the server
  closing without a response, timeouts), HTTP 408, 429 and every status
  >= 500;
* never retried: 409 and every other 4xx, whatever ``x-should-retry`` says;
  and a POST that may have been applied (a failure after it may have reached
  the server, or a status >= 500): see below;
* ``x-should-retry: false`` vetoes a retry; ``x-should-retry: true`` can only
  add one for a non-4xx status;
* delay: ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date, capped
  at :data:`RETRY_AFTER_MAX` seconds) when the server sends one, else
  exponential backoff with full jitter: ``uniform(0, min(backoff_max,
  backoff_base * 2**n))`` for the n-th retry.

A POST whose answer was lost may have been applied. It is not sent again:
between the lost answer and a retry another writer may have deleted or moved
what it wrote, and a blind retry would undo that. The error says
``maybe_applied``, and the caller reads the server's history to learn what
happened. A DELETE is retried (a 404 on a retry is success); what each call
does after a lost answer is written in its docstring.

Paths, content, shas and list parameters are validated client-side with
:mod:`memfs.core.paths` before sending; a refusal raises the same
:class:`BadRequestError` the server's 400 would map to (``client_side=True``).

The API key goes only into the ``x-api-key`` header: it is kept out of
``repr()``, log lines and exception messages (any echo of it in a server
message is replaced with ``***``).
"""

from __future__ import annotations

import email.utils
import hashlib
import hmac
import json
import logging
import math
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import trio

from memfs.api import pool, tls
from memfs.api.betas import MEMORY_BETA, SESSIONS_BETA
from memfs.api.config import BEARER, ClientConfig
from memfs.api.errors import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    BadRequestError,
    NotFoundError,
    NotTheAPIError,
    RateLimitError,
    UnreadableAnswerError,
    error_for_status,
)
from memfs.api.models import Memory, MemoryPrefix, MemoryStore, MemoryVersion, Page, Session
from memfs.core import paths
from memfs.core.backoff import doubled
from memfs.core.shown import shown
from memfs.core.version import VERSION

__all__ = [
    "MemoryStoresClient",
    "ANTHROPIC_VERSION",
    "MEMORY_BETA",
    "SESSIONS_BETA",
    "RETRY_AFTER_MAX",
    "parse_retry_after",
]

log = logging.getLogger("memfs.api")

ANTHROPIC_VERSION = "2023-06-01"
#: Longest wait we accept from a ``retry-after`` header, in seconds.
RETRY_AFTER_MAX = 60.0
#: The largest page the server serves with ``view=full``.
FULL_VIEW_MAX_LIMIT = 20
MAX_LIMIT = 100

_VIEWS = ("basic", "full")
_OPERATIONS = ("created", "modified", "deleted")

#: The most an answer may hold (decoded): a page of the full view is 20 memories of at
#: most 100 kB each.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
#: The longest an answer's body may take to arrive, all of it.
ANSWER_WAIT = 120.0


class AnswerTooLarge(httpx.TransportError):
    """An answer past `MAX_ANSWER_BYTES`: not read, not sent again (not retryable)."""


# Transport failures worth retrying. UnsupportedProtocol / LocalProtocolError /
# ProxyError are configuration or programming errors: reported, not retried.
_RETRYABLE_TRANSPORT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
#: Transport errors raised before a request could reach the server: its outcome is known.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _refuse(message: str, exc: paths.PathError | None = None) -> BadRequestError:
    return BadRequestError(message, client_side=True, path_error=exc)


def _check_path(path: str, where: str = "path") -> str:
    try:
        return paths.validate_path(path, where=where)
    except paths.PathError as exc:
        raise _refuse(exc.message, exc) from None


def _check_content(content: object) -> str:
    if not isinstance(content, str):
        raise _refuse("content must be a string")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse("content is not valid UTF-8 (lone surrogate)") from None
    why = paths.content_error(data)
    if why is not None:
        raise _refuse(why)
    return content


def _check_sha(sha: object, what: str) -> str:
    if not paths.is_sha(sha):
        raise _refuse(f"{what} must be 64 lowercase hexadecimal characters")
    return sha


def _check_view(view: str) -> str:
    if view not in _VIEWS:
        raise _refuse(f"view must be one of {', '.join(_VIEWS)}, not {view!r}")
    return view


def _check_limit(limit: int, view: str) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise _refuse("limit must be a positive integer")
    cap = FULL_VIEW_MAX_LIMIT if view == "full" else MAX_LIMIT
    return min(limit, cap)


def _seg(value: object, what: str) -> str:
    """An id as one URL path segment."""
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise _refuse(f"{what} must be a non-empty id")
    return quote(value, safe="")


def _encode_query(params: dict[str, Any]) -> str:
    items = []
    for key, value in params.items():
        if value is None:
            continue
        if value is True:
            value = "true"
        elif value is False:
            value = "false"
        items.append(f"{quote(str(key), safe='[]')}={quote(str(value), safe='')}")
    return "&".join(items)


def _one_line(text: str) -> str:
    """An error page's words on one line (an HTML page's text without its tags)."""
    return " ".join(re.sub(r"<[^>]*>", " ", text).split())


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asks us to wait (``retry-after-ms`` / ``retry-after``), or None."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        parsed = email.utils.parsedate_tz(raw)
        if parsed is None:
            return None
        value = email.utils.mktime_tz(parsed) - time.time()
    if math.isnan(value):
        return None
    return max(value, 0.0)  # a date in the past means "now"


#: [requests, body bytes received] of the current trio task (and the tasks it starts)
#: while a `tally()` is open: the cost of one feed poll, whatever else runs on the client.
_TALLY: ContextVar[list[int] | None] = ContextVar("memfs_client_tally", default=None)


@contextmanager
def tally() -> Iterator[list[int]]:
    """Count the requests (retries included) and the response bytes this task sends
    through any client until the block ends: [requests, bytes]."""
    counts = [0, 0]
    token = _TALLY.set(counts)
    try:
        yield counts
    finally:
        _TALLY.reset(token)


#: Awaited before the answer of each request this trio task (or a task it starts) sends
#: while an `answers_when()` is open: the pusher's requests, whose answers (httpx, JSON,
#: the state transitions: about 1 ms of the trio thread each) wait in the socket while
#: a `cp -r` keeps the mount busy. The request went out: only reading its answer waits.
_BEFORE_ANSWER: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar(
    "memfs_client_before_answer", default=None)


@contextmanager
def answers_when(ready: Callable[[], Awaitable[None]]) -> Iterator[None]:
    """Read the answers of the requests this task sends only once `ready()` returns."""
    token = _BEFORE_ANSWER.set(ready)
    try:
        yield
    finally:
        _BEFORE_ANSWER.reset(token)


def _answer_trace(ready: Callable[[], Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """httpcore's `trace` extension, awaited at each step of a request: wait for
    `ready()` when the request is sent and its answer's headers are next."""
    async def trace(event: str, info: dict) -> None:
        if event == "http11.receive_response_headers.started":
            await ready()
    return trace


class MemoryStoresClient:
    """Async client for ``/v1/memory_stores``. Use under trio; ``await aclose()`` when done."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        max_retries: int = 4,
        timeout: float = 30.0,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        transport: httpx.AsyncBaseTransport | None = None,
        extra_headers: dict | None = None,
        sleep: Callable[[float], Awaitable[Any]] | None = None,
        locate: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        """``locate``: where the server runs now, asked when a request cannot connect (the
        embedded server picks a free port at each start, so a long-lived command
        follows it as a mount does); the request goes there at once, as never sent."""
        if not base_url:
            raise ValueError("base_url is required")
        self.base_url = base_url.rstrip("/")
        self.locate = locate
        self._api_key = api_key or None
        self.max_retries = max(0, int(max_retries))
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_max = RETRY_AFTER_MAX
        self.stats: dict[str, int] = {
            "requests": 0,
            "bytes_sent": 0,
            "bytes_received": 0,
            "retries": 0,
        }
        #: Told of every attempt: (method, path, HTTP status or 0 when no answer came,
        #: bytes sent, bytes received). A mount's metrics count with it, and its daemon
        #: hears a store refuse a request (an archived or deleted store).
        self.observers: list[Callable[[str, str, int, int, int], None]] = []
        #: Requests sent and not answered yet, and since when the server has answered
        #: none (None: it answered the last one): a server that stops answering (a
        #: stopped process, a network dropping packets) shows no error until a timeout,
        #: and each retry starts another, so `memfs status` says this instead.
        self.in_flight = 0
        self._unanswered_since: float | None = None
        # The only trio call in the client: httpx itself runs on trio and asyncio
        # alike, so a caller on asyncio passes ``sleep=anyio.sleep`` (memfs.tool does).
        # Replaceable in tests.
        self._sleep: Callable[[float], Awaitable[Any]] = sleep or trio.sleep
        self._random: Callable[[], float] = random.random

        headers = {
            "accept": "application/json",
            "anthropic-version": ANTHROPIC_VERSION,
            "anthropic-beta": MEMORY_BETA,
            "user-agent": f"memfs/{VERSION}",
        }
        for k, v in (extra_headers or {}).items():
            headers[k.lower()] = v
        if self._api_key and self._api_key.startswith(BEARER):
            # A bearer token (ANTHROPIC_AUTH_TOKEN, e.g. a work item's sessions token).
            headers["authorization"] = self._api_key
            self._api_key = self._api_key[len(BEARER):]  # what _scrub hides
        elif self._api_key:
            headers["x-api-key"] = self._api_key
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout),
            transport=transport,
            # A pass keeps 32 requests in flight (the push concurrency): as many
            # connections stay open between its requests, no new TCP and TLS handshake
            # for each one.
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
            follow_redirects=False,
            verify=tls.verify(),  # made ahead where `memfs mount` and its daemon asked
        )
        if transport is None:
            pool.install(self._http)  # httpcore's pool, minus O(connections²) per request

    @classmethod
    def from_config(cls, cfg: ClientConfig, **kw: Any) -> MemoryStoresClient:
        if not cfg.base_url:
            raise ValueError("no base URL configured (use the embedded local server)")
        return cls(cfg.base_url, cfg.api_key, **kw)

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"<MemoryStoresClient {self.base_url} api_key={key}>"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> MemoryStoresClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ core

    def _scrub(self, text: Any) -> Any:
        """Replace the API key in a string (or in the strings of a JSON value) with ``***``."""
        if not self._api_key:
            return text
        if isinstance(text, str):
            return text.replace(self._api_key, "***")
        if isinstance(text, dict):
            return {k: self._scrub(v) for k, v in text.items()}
        if isinstance(text, list):
            return [self._scrub(v) for v in text]
        return text

    def _backoff(self, retry_index: int, headers: httpx.Headers | None) -> float:
        if headers is not None:
            hint = parse_retry_after(headers)
            if hint is not None:
                return min(hint, self.retry_after_max)
        ceiling = doubled(self.backoff_base, self.backoff_max, retry_index)
        return self._random() * ceiling

    @staticmethod
    def _should_retry(response: httpx.Response) -> bool:
        status = response.status_code
        if 400 <= status < 500 and status not in (408, 429):
            return False  # 409 and friends: never
        hint = response.headers.get("x-should-retry", "").strip().lower()
        if hint == "false":
            return False
        if hint == "true":
            return True
        return status in (408, 429) or status >= 500

    def _error_from_response(self, response: httpx.Response) -> APIStatusError | NotTheAPIError:
        status = response.status_code
        request_id = response.headers.get("request-id")
        err_obj: dict[str, Any] = {}
        try:
            body = response.json()
        except (ValueError, UnicodeDecodeError):
            body = None
        if isinstance(body, dict):
            if isinstance(body.get("error"), dict):
                err_obj = body["error"]
            request_id = body.get("request_id") or request_id
        api_shaped = isinstance(err_obj.get("type"), str)
        err_type = err_obj["type"] if api_shaped else "api_error"
        message = err_obj.get("message")
        if not isinstance(message, str) or not message:
            text = _one_line(response.text) if body is None else ""
            message = text[:200] if text else (response.reason_phrase or "error")
        message = shown(self._scrub(message))  # printed as is by every command
        if status == 404 and not api_shaped:
            return NotTheAPIError(f"HTTP 404 from something that is not the Memory Stores "
                                  f"API: {message}", status=status, request_id=request_id)
        cls = error_for_status(status, err_type)
        kw: dict[str, Any] = {
            "status": status,
            "type": err_type,
            "request_id": request_id,
            "body": self._scrub(err_obj),
        }
        if cls is RateLimitError:
            kw["retry_after"] = parse_retry_after(response.headers)
        return cls(message, **kw)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        gone_ok: bool = False,
        beta: str | None = None,
        replay: bool | None = None,
    ) -> Any:
        """Send with retries; return the decoded JSON body.

        A POST (a create or an update) that may have been applied is never sent
        again: between its lost answer and a blind retry another writer may delete or
        move what it wrote, and the retry would undo that (re-create a deleted file,
        move a renamed one back, duplicate a moved one). It raises with
        ``maybe_applied`` instead, and the caller asks the server's history what
        happened (the daemon's requests in doubt, the tool's ``_landed``). GETs and
        DELETEs are retried: sent again they undo nothing (a delete names its memory
        id, which nothing reuses); so is a POST the caller says is idempotent
        (``replay=True``: an archive, a redaction).

        ``gone_ok``: for deletes -- a 404 on a *retry* means an earlier
        attempt (whose response we lost) or someone else already deleted
        it; return None instead of raising. ``beta``: the ``anthropic-beta``
        header instead of the memory beta (sessions).
        """
        q = _encode_query({"beta": True, **(query or {})})
        url = f"{self.base_url}{path}?{q}"
        content: bytes | None = None
        headers: dict[str, str] = {}
        if beta is not None:
            headers["anthropic-beta"] = beta
        if body is not None:
            try:
                text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
                content = text.encode("utf-8")
            except UnicodeEncodeError:
                raise _refuse("request contains text that is not valid UTF-8") from None
            headers["content-type"] = "application/json"

        attempt = 0
        located = self.locate is None  # asked at most once a request
        maybe_applied = False  # an attempt may have reached the server (see errors)
        if replay is None:  # may an attempt that may have applied go again?
            replay = method != "POST"
        while True:
            self.stats["requests"] += 1
            self.stats["bytes_sent"] += len(content or b"")
            counts = _TALLY.get()
            if counts is not None:
                counts[0] += 1
            response: httpx.Response | None = None
            try:
                ready = _BEFORE_ANSWER.get()
                if self._unanswered_since is None:  # a timeout or a retry keeps the first
                    self._unanswered_since = time.monotonic()
                self.in_flight += 1
                try:
                    response = await self._receive(self._http.build_request(
                        method, url, content=content, headers=headers,
                        extensions=None if ready is None else {"trace": _answer_trace(ready)}))
                finally:
                    self.in_flight -= 1
                # An answer: the wait of any request still out counts from now.
                self._unanswered_since = time.monotonic() if self.in_flight else None
            except httpx.TransportError as exc:
                self._observe(method, path, 0, len(content or b""), 0)
                reason = self._scrub(str(exc) or type(exc).__name__)
                maybe_applied |= not isinstance(exc, _NEVER_SENT)
                if not located and isinstance(exc, httpx.ConnectError):
                    located = True
                    if await self._moved():
                        url = f"{self.base_url}{path}?{q}"
                        continue
                if (not isinstance(exc, _RETRYABLE_TRANSPORT) or attempt >= self.max_retries
                        or (maybe_applied and not replay)):
                    err = APIConnectionError(
                        f"{method} {path} failed: {type(exc).__name__}: {reason}")
                    err.maybe_applied = maybe_applied
                    err.method = method
                    raise err from exc
                log.info(
                    "%s %s: %s; retry %d/%d",
                    method,
                    path,
                    type(exc).__name__,
                    attempt + 1,
                    self.max_retries,
                )
                delay = self._backoff(attempt, None)
            else:
                self.stats["bytes_received"] += len(response.content)
                self._observe(method, path, response.status_code, len(content or b""),
                              len(response.content))
                if counts is not None:
                    counts[1] += len(response.content)
                if response.is_success:
                    return self._decode(response, method, path)
                if gone_ok and attempt > 0 and response.status_code == 404 and not \
                        isinstance(self._error_from_response(response), NotTheAPIError):
                    return None
                maybe_applied |= response.status_code >= 500
                if (attempt >= self.max_retries or not self._should_retry(response)
                        or (maybe_applied and not replay)):
                    err = self._error_from_response(response)
                    err.maybe_applied = maybe_applied
                    err.method = method
                    raise err
                delay = self._backoff(attempt, response.headers)
                log.info(
                    "%s %s: HTTP %d; retry %d/%d in %.2fs",
                    method,
                    path,
                    response.status_code,
                    attempt + 1,
                    self.max_retries,
                    delay,
                )
            attempt += 1
            self.stats["retries"] += 1
            await self._sleep(delay)

    async def _receive(self, request: httpx.Request) -> httpx.Response:
        """The answer, its body read within `MAX_ANSWER_BYTES` and `ANSWER_WAIT`: a
        server (or what stands in its place) that sends more, or a byte at a time,
        would hold memory or the caller for good (found by a helper: a 400 MB answer,
        900 MB of memory; a byte every 10 s, each within the read timeout).

        An answer that says its length and is not compressed (what `memfs serve` and
        the API send) is read whole: the length bounds it (h11 reads no byte past it),
        and the stream's bookkeeping cost 3-5 % a request (docs/BENCHMARKS.md)."""
        response = await self._http.send(request, stream=True)
        try:
            length = response.headers.get("content-length", "")
            if length.isdigit() and response.headers.get(
                    "content-encoding", "identity").lower() == "identity":
                if int(length) > MAX_ANSWER_BYTES:
                    raise AnswerTooLarge(f"an answer over {MAX_ANSWER_BYTES:,} bytes",
                                         request=request)
                with anyio.move_on_after(ANSWER_WAIT) as waited:
                    await response.aread()
                self._check_waited(waited, request)
                return response
            chunks, size = [], 0
            with anyio.move_on_after(ANSWER_WAIT) as waited:
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise AnswerTooLarge(f"an answer over {MAX_ANSWER_BYTES:,} bytes",
                                             request=request)
                    chunks.append(chunk)
            self._check_waited(waited, request)
        finally:
            await response.aclose()
        headers = [(k, v) for k, v in response.headers.multi_items()  # decoded once, here
                   if k.lower() not in ("content-encoding", "content-length")]
        return httpx.Response(response.status_code, headers=headers,
                              content=b"".join(chunks), request=request)

    @staticmethod
    def _check_waited(waited: anyio.CancelScope, request: httpx.Request) -> None:
        if waited.cancelled_caught:
            raise httpx.ReadTimeout(f"the answer took over {ANSWER_WAIT:g} s to arrive",
                                    request=request)

    async def _moved(self) -> bool:
        """Whether the server now answers elsewhere (``locate``); if so, go there."""
        assert self.locate is not None
        moved = await self.locate()
        if not moved or moved.rstrip("/") == self.base_url:
            return False
        log.info("the server moved from %s to %s; following it", self.base_url, moved)
        self.base_url = moved.rstrip("/")
        return True

    def unanswered_for(self) -> float | None:
        """While requests wait for an answer, seconds since the server last answered one
        (or since a request went out after it did), across timeouts and retries; None
        when none waits."""
        if not self.in_flight or self._unanswered_since is None:
            return None
        return time.monotonic() - self._unanswered_since

    def key_tag(self, salt: str) -> str:
        """A salted tag of the key this client sends, to tell later whether the key
        changed: the key cannot be recovered from it, so it may be kept on disk."""
        return hmac.new(salt.encode(), (self._api_key or "").encode(),
                        hashlib.sha256).hexdigest()[:32]

    def _observe(self, method: str, path: str, status: int, sent: int, received: int) -> None:
        for observer in self.observers:
            observer(method, path, status, sent, received)

    def _decode(self, response: httpx.Response, method: str, path: str) -> Any:
        if not response.content:
            return None
        try:
            return response.json()
        except (ValueError, UnicodeDecodeError):
            err = UnreadableAnswerError(
                f"{method} {path} answered {response.status_code} with a body that is not "
                "JSON (cut short?)" + ("" if method == "GET" else ": applied, its answer lost"),
                status=response.status_code,
                request_id=response.headers.get("request-id"),
            )
            err.maybe_applied = True
            err.method = method
            raise err from None

    @staticmethod
    def _parse(cls: Any, data: Any, *, applied: bool = False) -> Any:
        """`applied`: the answer of a create or an update that the 2xx says was applied;
        an answer that cannot be read is then a lost one (`UnreadableAnswerError`),
        settled by asking the server, never a refusal."""
        try:
            return cls.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            message = f"unexpected {cls.__name__} payload: {type(exc).__name__}: {exc}"
            if applied:
                err = UnreadableAnswerError(f"{message}: applied, its answer lost")
                err.maybe_applied = True
                raise err from None
            raise APIResponseValidationError(message, type="invalid_response") from None

    def _page(self, data: Any) -> Page:
        if not isinstance(data, dict):
            raise APIResponseValidationError(
                "list response is not an object", type="invalid_response"
            )
        try:
            return Page.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise APIResponseValidationError(
                f"unexpected list payload: {type(exc).__name__}: {exc}", type="invalid_response"
            ) from None

    # ---------------------------------------------------------------- stores

    async def create_store(
        self, name: str, *, description: str | None = None, metadata: dict | None = None
    ) -> MemoryStore:
        """Create a store.

        Not idempotent, so not sent again once it may have been applied: a lost
        answer raises :class:`APIConnectionError` (``maybe_applied``); the store may
        exist (names need not be unique: look before creating another).
        """
        body: dict[str, Any] = {"name": name}
        if description is not None:
            body["description"] = description
        if metadata is not None:
            body["metadata"] = metadata
        return self._parse(MemoryStore, await self._request("POST", "/v1/memory_stores", body=body))

    async def get_store(self, store_id: str) -> MemoryStore:
        data = await self._request("GET", f"/v1/memory_stores/{_seg(store_id, 'store_id')}")
        return self._parse(MemoryStore, data)

    async def update_store(
        self,
        store_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        metadata: dict | None = None,
    ) -> MemoryStore:
        """Update name/description; ``metadata`` is a patch (a ``None`` value deletes a key)."""
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if description is not None:
            body["description"] = description
        if metadata is not None:
            body["metadata"] = metadata
        data = await self._request(
            "POST", f"/v1/memory_stores/{_seg(store_id, 'store_id')}", body=body, replay=True
        )
        return self._parse(MemoryStore, data)

    async def archive_store(self, store_id: str) -> MemoryStore:
        data = await self._request(
            "POST", f"/v1/memory_stores/{_seg(store_id, 'store_id')}/archive", replay=True
        )
        return self._parse(MemoryStore, data)

    async def delete_store(self, store_id: str) -> None:
        """Delete a store and everything in it. A 404 on a retry counts as success."""
        await self._request(
            "DELETE", f"/v1/memory_stores/{_seg(store_id, 'store_id')}", gone_ok=True
        )

    async def list_stores_page(
        self, *, include_archived: bool = False, limit: int = 100, page: str | None = None
    ) -> Page:
        query = {
            "include_archived": True if include_archived else None,
            "limit": _check_limit(limit, "basic"),
            "page": page,
        }
        return self._page(await self._request("GET", "/v1/memory_stores", query=query))

    async def list_stores(
        self, *, include_archived: bool = False, limit: int = 100
    ) -> AsyncIterator[MemoryStore]:
        """Every store (newest first), fetching pages of ``limit`` as needed."""
        async for item in self._walk(
            lambda page: self.list_stores_page(
                include_archived=include_archived, limit=limit, page=page
            ),
            MemoryStore,
        ):
            yield item

    @staticmethod
    async def _walk(fetch: Callable[[str | None], Awaitable[Page]],
                    kind: type | tuple[type, ...]) -> AsyncIterator:
        """The items of type ``kind`` on every page, following ``next_page``; an item of a
        kind this client does not know (a newer server's) is skipped, not an error."""
        page: str | None = None
        seen: set[str] = set()
        while True:
            p = await fetch(page)
            for item in p.data:
                if isinstance(item, kind):
                    yield item
                else:
                    log.debug("skipping unknown list item %r", item)
            page = p.follow(seen)
            if page is None:
                return

    # -------------------------------------------------------------- memories

    def _memories(self, store_id: str) -> str:
        return f"/v1/memory_stores/{_seg(store_id, 'store_id')}/memories"

    async def create_memory(
        self, store_id: str, path: str, content: str, *, view: str = "basic"
    ) -> Memory:
        """Create a memory at an unoccupied ``path``.

        Raises :class:`PathConflictError` when the path (or an ancestor or
        descendant of it) is taken. A create whose answer was lost raises
        ``maybe_applied`` and is not sent again (see the module doc): the
        caller looks for a version created at the path with its content since
        it sent it. A 409 can still be our own create when the caller sent it
        again itself, or when a timed-out attempt was applied late.
        """
        _check_path(path)
        _check_content(content)
        data = await self._request(
            "POST",
            self._memories(store_id),
            query={"view": _check_view(view)},
            body={"path": path, "content": content},
        )
        return self._parse(Memory, data, applied=True)

    async def get_memory(self, store_id: str, memory_id: str, *, view: str = "full") -> Memory:
        data = await self._request(
            "GET",
            f"{self._memories(store_id)}/{_seg(memory_id, 'memory_id')}",
            query={"view": _check_view(view)},
        )
        return self._parse(Memory, data)

    async def find_memory(self, store_id: str, memory_id: str, *,
                          view: str = "full") -> Memory | None:
        """`get_memory`, with a 404 as None: to the sync engine and the tool a deleted
        memory is an answer ("not there now"), not a failure."""
        try:
            return await self.get_memory(store_id, memory_id, view=view)
        except NotFoundError:
            return None

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | None = None,
        path: str | None = None,
        precondition_sha: str | None = None,
        view: str = "basic",
    ) -> Memory:
        """Change content and/or path (a rename keeps the id).

        With ``precondition_sha`` the server applies the update only if the
        stored sha equals it, else :class:`PreconditionFailedError`. An
        update whose result already matches the stored state is a no-op 200
        (even when the precondition no longer matches). An update whose
        answer was lost raises ``maybe_applied`` and is not sent again (see
        the module doc): the caller reads the memory's versions. A rename
        onto an occupied path raises :class:`PathConflictError`.
        """
        if content is None and path is None:
            raise _refuse("update needs content or path")
        body: dict[str, Any] = {}
        if content is not None:
            body["content"] = _check_content(content)
        if path is not None:
            body["path"] = _check_path(path)
        if precondition_sha is not None:
            body["precondition"] = {
                "type": "content_sha256",
                "content_sha256": _check_sha(precondition_sha, "precondition_sha"),
            }
        data = await self._request(
            "POST",
            f"{self._memories(store_id)}/{_seg(memory_id, 'memory_id')}",
            query={"view": _check_view(view)},
            body=body,
        )
        return self._parse(Memory, data, applied=True)

    async def delete_memory(
        self, store_id: str, memory_id: str, *, expected_sha: str | None = None
    ) -> None:
        """Delete a memory; with ``expected_sha`` only if its sha still matches
        (else :class:`PreconditionFailedError`, or :class:`ConflictError` if
        the server uses another 409 type).

        Idempotent under retries: a 404 answering a *retried* attempt (the
        first one was applied but its response lost) is success. A 404 on
        the first attempt raises :class:`NotFoundError`.
        """
        query = {}
        if expected_sha is not None:
            query["expected_content_sha256"] = _check_sha(expected_sha, "expected_sha")
        await self._request(
            "DELETE",
            f"{self._memories(store_id)}/{_seg(memory_id, 'memory_id')}",
            query=query,
            gone_ok=True,
        )

    async def list_memories_page(
        self,
        store_id: str,
        *,
        path_prefix: str | None = None,
        depth: int | None = None,
        view: str = "basic",
        limit: int = 100,
        page: str | None = None,
    ) -> Page:
        """One page of memories (and prefixes, with ``depth=1``) in path order."""
        if path_prefix is not None:
            try:
                paths.validate_prefix(path_prefix)
            except paths.PathError as exc:
                raise _refuse(exc.message, exc) from None
        if depth not in (None, 0, 1):
            raise _refuse("depth must be 0 or 1")
        _check_view(view)
        query = {
            "path_prefix": path_prefix,
            "depth": depth,
            "view": view,
            "limit": _check_limit(limit, view),
            "page": page,
        }
        return self._page(await self._request("GET", self._memories(store_id), query=query))

    async def list_memories(
        self,
        store_id: str,
        *,
        path_prefix: str | None = None,
        depth: int | None = None,
        view: str = "basic",
        limit: int = 100,
    ) -> AsyncIterator[Memory | MemoryPrefix]:
        """Every memory (and prefix) under ``path_prefix``; ``limit`` is the page size
        (clamped to 20 with ``view="full"``)."""
        async for item in self._walk(
            lambda page: self.list_memories_page(
                store_id, path_prefix=path_prefix, depth=depth, view=view, limit=limit, page=page
            ),
            (Memory, MemoryPrefix),
        ):
            yield item

    # -------------------------------------------------------------- versions

    def _versions(self, store_id: str) -> str:
        return f"/v1/memory_stores/{_seg(store_id, 'store_id')}/memory_versions"

    async def list_versions_page(
        self,
        store_id: str,
        *,
        memory_id: str | None = None,
        operation: str | None = None,
        session_id: str | None = None,
        api_key_id: str | None = None,
        limit: int = 100,
        view: str = "basic",
        page: str | None = None,
        created_gte: str | None = None,
        created_lte: str | None = None,
    ) -> Page:
        """One page of versions, newest first; `created_gte`/`created_lte`: only versions
        created at or after / at or before these RFC 3339 times (the store's change feed)."""
        if operation is not None and operation not in _OPERATIONS:
            raise _refuse(f"operation must be one of {', '.join(_OPERATIONS)}")
        _check_view(view)
        query = {
            "memory_id": memory_id,
            "operation": operation,
            "session_id": session_id,
            "api_key_id": api_key_id,
            "created_at[gte]": created_gte,
            "created_at[lte]": created_lte,
            "view": view,
            "limit": _check_limit(limit, view),
            "page": page,
        }
        return self._page(await self._request("GET", self._versions(store_id), query=query))

    async def list_versions_pages(
        self,
        store_id: str,
        *,
        memory_id: str | None = None,
        limit: int = 100,
        view: str = "basic",
        created_gte: str | None = None,
        created_lte: str | None = None,
    ) -> AsyncIterator[list[MemoryVersion]]:
        """The versions matching the filters, newest first, a page at a time (so a
        caller can stop early)."""
        page: str | None = None
        seen: set[str] = set()
        while True:
            p = await self.list_versions_page(store_id, memory_id=memory_id, limit=limit,
                                              view=view, page=page, created_gte=created_gte,
                                              created_lte=created_lte)
            yield [item for item in p.data if isinstance(item, MemoryVersion)]
            page = p.follow(seen)
            if page is None:
                return

    async def list_versions(
        self,
        store_id: str,
        *,
        memory_id: str | None = None,
        operation: str | None = None,
        limit: int = 100,
        view: str = "basic",
        session_id: str | None = None,
        api_key_id: str | None = None,
        created_gte: str | None = None,
    ) -> AsyncIterator[MemoryVersion]:
        """Every version matching the filters, newest first."""
        async for item in self._walk(
            lambda page: self.list_versions_page(
                store_id,
                memory_id=memory_id,
                operation=operation,
                session_id=session_id,
                api_key_id=api_key_id,
                limit=limit,
                view=view,
                page=page,
                created_gte=created_gte,
            ),
            MemoryVersion,
        ):
            yield item

    async def get_version(
        self, store_id: str, version_id: str, *, view: str = "full"
    ) -> MemoryVersion:
        data = await self._request(
            "GET",
            f"{self._versions(store_id)}/{_seg(version_id, 'version_id')}",
            query={"view": _check_view(view)},
        )
        return self._parse(MemoryVersion, data)

    async def redact_version(self, store_id: str, version_id: str) -> MemoryVersion:
        """Scrub a historical version's content and path (not the head of a live memory)."""
        data = await self._request(
            "POST", f"{self._versions(store_id)}/{_seg(version_id, 'version_id')}/redact",
            replay=True,
        )
        return self._parse(MemoryVersion, data)

    # -------------------------------------------------------------- sessions

    async def create_session(
        self,
        memory_stores: list[tuple[str, str]],
        *,
        agent: str = "memfs",
        environment_id: str = "memfs",
        title: str | None = None,
    ) -> Session:
        """A session with these ``(memory_store_id, access)`` attached (access
        ``read_write`` or ``read_only``). On the hosted API, agent and environment
        must name real ones; ``memfs serve`` echoes whatever is given."""
        body: dict[str, Any] = {
            "agent": agent,
            "environment_id": environment_id,
            "resources": [
                {"type": "memory_store", "memory_store_id": sid, "access": access}
                for sid, access in memory_stores
            ],
        }
        if title is not None:
            body["title"] = title
        data = await self._request("POST", "/v1/sessions", body=body, beta=SESSIONS_BETA)
        return self._parse(Session, data)

    async def get_session(self, session_id: str) -> Session:
        data = await self._request(
            "GET", f"/v1/sessions/{_seg(session_id, 'session_id')}", beta=SESSIONS_BETA
        )
        return self._parse(Session, data)

    async def list_sessions_page(
        self,
        *,
        memory_store_id: str | None = None,
        include_archived: bool = False,
        limit: int = 100,
        page: str | None = None,
    ) -> Page:
        query = {
            "memory_store_id": memory_store_id,
            "include_archived": True if include_archived else None,
            "limit": _check_limit(limit, "basic"),
            "page": page,
        }
        return self._page(
            await self._request("GET", "/v1/sessions", query=query, beta=SESSIONS_BETA)
        )

    async def list_sessions(
        self,
        memory_store_id: str | None = None,
        *,
        include_archived: bool = False,
        limit: int = 100,
    ) -> AsyncIterator[Session]:
        """Every session (newest first), or those that attach ``memory_store_id``."""
        async for item in self._walk(
            lambda page: self.list_sessions_page(
                memory_store_id=memory_store_id,
                include_archived=include_archived,
                limit=limit,
                page=page,
            ),
            Session,
        ):
            yield item

    async def session_token(self, session_id: str) -> str | None:
        """A token scoped to the session (``memfs serve`` only): writes made with it
        are attributed to the session and reach only its stores. Every call mints
        a fresh one. None when the server has no such extension (the hosted API
        answers 404 on the route); an unknown session on ``memfs serve`` raises
        :class:`NotFoundError` (its 404 names the ``session_id``). Keep the token
        out of logs like an API key."""
        try:
            data = await self._request(
                "POST", f"/_memfs/sessions/{_seg(session_id, 'session_id')}/token",
                replay=True,  # a fresh token each time: a second one harms nothing
            )
        except NotFoundError as exc:
            if exc.body.get("session_id") == session_id:
                raise
            return None
        if not isinstance(data, dict) or not isinstance(data.get("token"), str):
            raise APIResponseValidationError(
                "session token response has no token", type="invalid_response"
            )
        return data["token"]
