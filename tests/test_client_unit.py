"""Unit tests of memfs.api with httpx.MockTransport (no server)."""

from __future__ import annotations

import email.utils
import json
import logging
import time
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import trio

from memfs.api import (
    REFUSED,
    TRANSIENT,
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    ClientConfig,
    ConfigError,
    ConflictError,
    Memory,
    MemoryPrefix,
    MemoryStore,
    MemoryStoresClient,
    MemoryVersion,
    NotFoundError,
    Page,
    PathConflictError,
    PermissionDeniedError,
    PreconditionFailedError,
    RateLimitError,
    RequestTimeoutError,
    RequestTooLargeError,
    ServerError,
    content_sha256,
    resolve_config,
)
from memfs.api.client import parse_retry_after
from memfs.api.errors import UnreadableAnswerError, may_have_applied, may_land_later

KEY = "sk-ant-SECRET-do-not-leak-1234567890"
SHA_A = content_sha256("a")


def mem_json(i: int | str = 1, path: str = "/a.md", content: str | None = None, **extra):
    d = {
        "type": "memory",
        "id": f"mem_{i}",
        "memory_store_id": "memstore_1",
        "path": path,
        "content": content,
        "content_size_bytes": len((content or "").encode()),
        "content_sha256": content_sha256(content or ""),
        "memory_version_id": f"memver_{i}",
        "created_at": "2026-08-20T10:00:00Z",
        "updated_at": "2026-08-20T10:00:00Z",
    }
    d.update(extra)
    return d


def store_json(i: int = 1, **extra):
    d = {
        "type": "memory_store",
        "id": f"memstore_{i}",
        "name": f"store {i}",
        "description": "",
        "metadata": {},
        "created_at": "2026-08-20T10:00:00Z",
        "updated_at": "2026-08-20T10:00:00Z",
        "archived_at": None,
    }
    d.update(extra)
    return d


def version_json(i: int = 1, **extra):
    d = {
        "type": "memory_version",
        "id": f"memver_{i}",
        "memory_store_id": "memstore_1",
        "memory_id": "mem_1",
        "operation": "created",
        "path": "/a.md",
        "content": None,
        "content_size_bytes": 1,
        "content_sha256": SHA_A,
        "created_by": {"type": "api_actor", "api_key_id": "apikey_1"},
        "created_at": "2026-08-20T10:00:00Z",
        "redacted_at": None,
        "redacted_by": None,
    }
    d.update(extra)
    return d


def err(status: int, etype: str, message: str = "nope", headers=None, **fields):
    body = {
        "type": "error",
        "error": {"type": etype, "message": message, **fields},
        "request_id": "req_body",
    }
    return httpx.Response(status, json=body, headers={"request-id": "req_hdr", **(headers or {})})


class Recorder:
    """A MockTransport handler that answers from a script of responses."""

    def __init__(self, *responses):
        self.script = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if callable(item):
            item = item(request)
        if isinstance(item, Exception):
            raise item
        return item


def make_client(handler, *, key: str | None = KEY, **kw):
    kw.setdefault("max_retries", 4)
    client = MemoryStoresClient(
        "http://test.local/", key, transport=httpx.MockTransport(handler), **kw
    )
    client.sleeps = []

    async def fake_sleep(delay):
        client.sleeps.append(delay)

    client._sleep = fake_sleep
    return client


def query(request: httpx.Request) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(str(request.url)).query).items()}


# --------------------------------------------------------------------------- requests


async def test_headers_query_and_body():
    rec = Recorder(httpx.Response(200, json=mem_json(content=None)))
    async with make_client(rec) as c:
        m = await c.create_memory("memstore_1", "/a.md", "a")
    assert isinstance(m, Memory) and m.id == "mem_1"
    (req,) = rec.requests
    assert req.method == "POST"
    assert req.url.path == "/v1/memory_stores/memstore_1/memories"
    assert query(req) == {"beta": "true", "view": "basic"}
    assert req.headers["x-api-key"] == KEY
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert req.headers["anthropic-beta"] == "agent-memory-2026-07-22"
    assert req.headers["content-type"] == "application/json"
    assert json.loads(req.content) == {"path": "/a.md", "content": "a"}


async def test_no_key_no_header_and_extra_headers():
    rec = Recorder(httpx.Response(200, json=store_json()))
    async with make_client(rec, key=None, extra_headers={"anthropic-workspace-id": "w1"}) as c:
        await c.get_store("memstore_1")
    req = rec.requests[0]
    assert "x-api-key" not in req.headers
    assert req.headers["anthropic-workspace-id"] == "w1"
    assert "content-type" not in req.headers  # GET without body


async def test_bearer_token_goes_in_authorization_and_is_scrubbed():
    """ANTHROPIC_AUTH_TOKEN (a worker's sessions token) is sent as a bearer token."""
    token = "sesstok-abcdef123456"
    cfg = resolve_config(env={"ANTHROPIC_BASE_URL": "http://x", "ANTHROPIC_AUTH_TOKEN": token})
    assert cfg.api_key == f"Bearer {token}"
    assert resolve_config(env={"ANTHROPIC_API_KEY": "k",
                               "ANTHROPIC_AUTH_TOKEN": token}).api_key == "k"  # a key wins
    rec = Recorder(httpx.Response(401, json={"type": "error", "error": {
        "type": "authentication_error", "message": f"bad token {token}"}}))
    async with make_client(rec, key=cfg.api_key) as c:
        with pytest.raises(AuthenticationError) as ei:
            await c.get_store("memstore_1")
    req = rec.requests[0]
    assert req.headers["authorization"] == f"Bearer {token}" and "x-api-key" not in req.headers
    assert token not in str(ei.value) and token not in repr(c)


async def test_query_encoding_spaces_unicode_and_ids():
    rec = Recorder(httpx.Response(200, json={"data": [], "next_page": None}))
    async with make_client(rec) as c:
        await c.list_memories_page("memstore_1", path_prefix="/my notes/café/", depth=1)
        await c.delete_memory("mem x/y", "mem_1", expected_sha=SHA_A)
    raw = urlsplit(str(rec.requests[0].url)).query
    assert "path_prefix=%2Fmy%20notes%2Fcaf%C3%A9%2F" in raw
    assert "+" not in raw
    assert query(rec.requests[0])["depth"] == "1"
    assert "/v1/memory_stores/mem%20x%2Fy/memories/mem_1" in str(rec.requests[1].url)
    assert query(rec.requests[1])["expected_content_sha256"] == SHA_A


async def test_update_body_and_precondition():
    rec = Recorder(httpx.Response(200, json=mem_json(path="/b.md")))
    async with make_client(rec) as c:
        await c.update_memory("memstore_1", "mem_1", path="/b.md", precondition_sha=SHA_A)
        await c.update_memory("memstore_1", "mem_1", content="")
    assert json.loads(rec.requests[0].content) == {
        "path": "/b.md",
        "precondition": {"type": "content_sha256", "content_sha256": SHA_A},
    }
    assert json.loads(rec.requests[1].content) == {"content": ""}


async def test_store_calls():
    archived = store_json(archived_at="2026-08-21T00:00:00Z")
    rec = Recorder(
        httpx.Response(200, json=store_json(description="d", metadata={"k": "v"})),
        httpx.Response(200, json=store_json(name="renamed")),
        httpx.Response(200, json=archived),
        httpx.Response(200, json={"id": "memstore_1", "type": "memory_store_deleted"}),
    )
    async with make_client(rec) as c:
        s = await c.create_store("store 1", description="d", metadata={"k": "v"})
        assert s == MemoryStore.from_json(store_json(description="d", metadata={"k": "v"}))
        s2 = await c.update_store("memstore_1", name="renamed", metadata={"k": None})
        assert s2.name == "renamed"
        s3 = await c.archive_store("memstore_1")
        assert s3.archived_at
        assert await c.delete_store("memstore_1") is None
    methods = [(r.method, r.url.path) for r in rec.requests]
    assert methods == [
        ("POST", "/v1/memory_stores"),
        ("POST", "/v1/memory_stores/memstore_1"),
        ("POST", "/v1/memory_stores/memstore_1/archive"),
        ("DELETE", "/v1/memory_stores/memstore_1"),
    ]
    assert json.loads(rec.requests[1].content) == {"name": "renamed", "metadata": {"k": None}}
    assert rec.requests[2].content == b""


async def test_version_calls():
    rec = Recorder(
        httpx.Response(200, json=version_json(content="a")),
        httpx.Response(200, json=version_json(content=None, path=None, redacted_at="t")),
    )
    async with make_client(rec) as c:
        v = await c.get_version("memstore_1", "memver_1")
        assert isinstance(v, MemoryVersion) and v.content == "a"
        r = await c.redact_version("memstore_1", "memver_1")
        assert r.redacted_at == "t" and r.path is None
    assert query(rec.requests[0])["view"] == "full"
    assert (
        rec.requests[1].url.path == "/v1/memory_stores/memstore_1/memory_versions/memver_1/redact"
    )


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "status,etype,cls",
    [
        (400, "invalid_request_error", BadRequestError),
        (401, "authentication_error", AuthenticationError),
        (403, "permission_error", PermissionDeniedError),
        (404, "not_found_error", NotFoundError),
        (408, "timeout_error", RequestTimeoutError),
        (409, "memory_precondition_failed_error", PreconditionFailedError),
        (409, "memory_path_conflict_error", PathConflictError),
        (409, "conflict_error", ConflictError),
        (413, "request_too_large", RequestTooLargeError),
        (422, "invalid_request_error", APIStatusError),
        (429, "rate_limit_error", RateLimitError),
        (500, "api_error", ServerError),
        (503, "api_error", ServerError),
        (504, "timeout_error", ServerError),
        (529, "overloaded_error", ServerError),
    ],
)
async def test_error_mapping(status, etype, cls):
    rec = Recorder(err(status, etype, "the message"))
    async with make_client(rec, max_retries=0) as c:
        with pytest.raises(APIStatusError) as ei:
            await c.get_store("memstore_1")
    e = ei.value
    assert type(e) is cls
    assert e.status == status and e.type == etype and e.message == "the message"
    assert e.request_id == "req_body"
    assert "the message" in str(e) and str(status) in str(e)
    if cls is ConflictError:
        assert not isinstance(e, (PreconditionFailedError, PathConflictError))
    assert isinstance(e, REFUSED) == (status in (400, 413))
    assert isinstance(e, TRANSIENT) == (status in (408, 429) or status >= 500)


async def test_path_conflict_fields_and_request_id_header_fallback():
    resp = httpx.Response(
        409,
        json={
            "type": "error",
            "error": {
                "type": "memory_path_conflict_error",
                "message": "occupied",
                "conflicting_path": "/a",
                "conflicting_memory_id": "mem_9",
            },
        },
        headers={"request-id": "req_hdr"},
    )
    async with make_client(Recorder(resp)) as c:
        with pytest.raises(PathConflictError) as ei:
            await c.create_memory("memstore_1", "/a/b", "x")
    assert ei.value.conflicting_path == "/a"
    assert ei.value.conflicting_memory_id == "mem_9"
    assert ei.value.request_id == "req_hdr"


async def test_non_json_error_body():
    rec = Recorder(httpx.Response(502, text="<html>Bad Gateway</html>"))
    async with make_client(rec, max_retries=0) as c:
        with pytest.raises(ServerError) as ei:
            await c.get_store("memstore_1")
    assert ei.value.type == "api_error"
    assert "Bad Gateway" in ei.value.message


async def test_rate_limit_error_carries_retry_after():
    rec = Recorder(err(429, "rate_limit_error", headers={"retry-after": "7"}))
    async with make_client(rec, max_retries=0) as c:
        with pytest.raises(RateLimitError) as ei:
            await c.get_store("memstore_1")
    assert ei.value.retry_after == 7.0


async def test_bad_success_payload():
    # a 2xx that is not JSON: applied, its answer lost (a refusal, it was; found by a
    # helper, 6 December: a create cut short came back after the user deleted the file)
    async with make_client(Recorder(httpx.Response(200, text="not json"))) as c:
        with pytest.raises(UnreadableAnswerError) as lost:
            await c.create_memory("memstore_1", "/a.md", "x")
    assert may_have_applied(lost.value) and not may_land_later(lost.value)
    assert isinstance(lost.value, TRANSIENT)
    assert str(lost.value).startswith("POST /v1/memory_stores/memstore_1/memories answered "
                                      "200 with a body that is not JSON (cut short?): "
                                      "applied, its answer lost")
    async with make_client(Recorder(httpx.Response(200, text="not json"))) as c:
        with pytest.raises(UnreadableAnswerError) as read:
            await c.get_store("memstore_1")
    assert "applied" not in str(read.value)  # a read applies nothing
    # JSON of another shape, answering a create or an update: the same
    for send in (lambda c: c.create_memory("memstore_1", "/a.md", "x"),
                 lambda c: c.update_memory("memstore_1", "mem_1", content="x",
                                           precondition_sha=SHA_A)):
        async with make_client(Recorder(httpx.Response(200, json={"nope": 1}))) as c:
            with pytest.raises(UnreadableAnswerError, match="applied, its answer lost"):
                await send(c)
    async with make_client(Recorder(httpx.Response(200, json={"nope": 1}))) as c:
        with pytest.raises(APIResponseValidationError):
            await c.get_store("memstore_1")


# --------------------------------------------------------------------------- retries


async def test_retries_5xx_then_succeeds():
    rec = Recorder(
        err(503, "api_error"), err(529, "overloaded_error"), httpx.Response(200, json=store_json())
    )
    async with make_client(rec, backoff_base=0.5, backoff_max=8.0) as c:
        s = await c.get_store("memstore_1")
        assert s.id == "memstore_1"
        assert c.stats["retries"] == 2 and c.stats["requests"] == 3
        assert len(c.sleeps) == 2
        assert 0 <= c.sleeps[0] <= 0.5 and 0 <= c.sleeps[1] <= 1.0


async def test_backoff_is_exponential_capped_full_jitter():
    rec = Recorder(err(500, "api_error"))
    async with make_client(rec, max_retries=7, backoff_base=0.5, backoff_max=8.0) as c:
        c._random = lambda: 1.0
        with pytest.raises(ServerError):
            await c.get_store("memstore_1")
        assert c.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
        assert c.stats["requests"] == 8 and c.stats["retries"] == 7
        c.sleeps.clear()
        c._random = lambda: 0.0
        with pytest.raises(ServerError):
            await c.get_store("memstore_1")
        assert c.sleeps == [0.0] * 7


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("refused"),
        httpx.ReadError("reset by peer"),
        httpx.WriteError("broken pipe"),
        httpx.ReadTimeout("slow"),
        httpx.ConnectTimeout("slow"),
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
    ],
)
async def test_retries_connection_errors(exc):
    rec = Recorder(exc, httpx.Response(200, json=store_json()))
    async with make_client(rec) as c:
        await c.get_store("memstore_1")
        assert c.stats["retries"] == 1
    assert len(rec.requests) == 2


async def test_connection_error_after_retries_exhausted():
    rec = Recorder(httpx.ConnectError("connection refused"))
    async with make_client(rec, max_retries=2) as c:
        with pytest.raises(APIConnectionError) as ei:
            await c.get_store("memstore_1")
    assert ei.value.status is None
    assert isinstance(ei.value, TRANSIENT) and not isinstance(ei.value, APIStatusError)
    assert "connection refused" in str(ei.value)
    assert len(rec.requests) == 3


async def test_a_server_that_moved_is_followed_at_once():
    """`locate` (the embedded server's new port): a request that could not connect goes
    where the server runs now, at once and even for a POST (it was never sent); the
    client stays there. A server that did not move is retried as before."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "test.local":
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, json=mem_json())

    asked: list[str] = []

    async def locate() -> str:
        asked.append("moved")
        return "http://moved.local/"

    async with make_client(handler, locate=locate) as c:
        memory = await c.create_memory("memstore_1", path="/a.md", content="x")
        assert memory.path == "/a.md" and c.base_url == "http://moved.local"
        assert asked == ["moved"] and c.sleeps == []
        await c.get_memory("memstore_1", "mem_1")
        assert asked == ["moved"]  # where it is now: not asked again

    async def same() -> str:
        return "http://test.local"

    rec = Recorder(httpx.ConnectError("connection refused"), httpx.Response(200, json=store_json()))
    async with make_client(rec, locate=same) as c:
        await c.get_store("memstore_1")
        assert c.base_url == "http://test.local" and len(c.sleeps) == 1


async def test_unsupported_protocol_not_retried():
    rec = Recorder(httpx.UnsupportedProtocol("nope"))
    async with make_client(rec) as c:
        with pytest.raises(APIConnectionError):
            await c.get_store("memstore_1")
    assert len(rec.requests) == 1


async def test_max_retries_zero_disables_retries():
    rec = Recorder(err(503, "api_error"))
    async with make_client(rec, max_retries=0) as c:
        with pytest.raises(ServerError):
            await c.get_store("memstore_1")
        assert c.stats["retries"] == 0 and c.sleeps == []
    rec = Recorder(httpx.ReadError("reset"))
    async with make_client(rec, max_retries=0) as c:
        with pytest.raises(APIConnectionError):
            await c.get_store("memstore_1")
    assert len(rec.requests) == 1


@pytest.mark.parametrize(
    "etype", ["memory_precondition_failed_error", "memory_path_conflict_error", "conflict_error"]
)
async def test_409_never_retried_even_if_server_says_so(etype):
    rec = Recorder(err(409, etype, headers={"x-should-retry": "true"}))
    async with make_client(rec) as c:
        with pytest.raises(ConflictError):
            await c.update_memory("memstore_1", "mem_1", content="x", precondition_sha=SHA_A)
        assert c.stats["retries"] == 0
    assert len(rec.requests) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
async def test_other_4xx_not_retried(status):
    rec = Recorder(err(status, "whatever"))
    async with make_client(rec) as c:
        with pytest.raises(APIStatusError):
            await c.get_store("memstore_1")
    assert len(rec.requests) == 1


async def test_408_and_429_retried():
    rec = Recorder(err(408, "timeout_error"), err(429, "rate_limit_error"), store_json_resp())
    async with make_client(rec) as c:
        await c.get_store("memstore_1")
        assert c.stats["retries"] == 2


def store_json_resp():
    return httpx.Response(200, json=store_json())


async def test_x_should_retry_false_vetoes():
    rec = Recorder(err(503, "api_error", headers={"x-should-retry": "false"}), store_json_resp())
    async with make_client(rec) as c:
        with pytest.raises(ServerError):
            await c.get_store("memstore_1")
    assert len(rec.requests) == 1
    rec = Recorder(err(429, "rate_limit_error", headers={"x-should-retry": "false"}))
    async with make_client(rec) as c:
        with pytest.raises(RateLimitError):
            await c.get_store("memstore_1")
    assert len(rec.requests) == 1


@pytest.mark.parametrize(
    "headers,expected",
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "1000"}, 60.0),  # capped
        ({"retry-after": "0"}, 0.0),
    ],
)
async def test_retry_after_honoured(headers, expected):
    rec = Recorder(err(429, "rate_limit_error", headers=headers), store_json_resp())
    async with make_client(rec, backoff_base=100.0, backoff_max=100.0) as c:
        c._random = lambda: 1.0
        await c.get_store("memstore_1")
        assert c.sleeps == [pytest.approx(expected)]


async def test_retry_after_on_503_and_http_date():
    when = email.utils.formatdate(time.time() + 5, usegmt=True)
    rec = Recorder(err(503, "api_error", headers={"retry-after": when}), store_json_resp())
    async with make_client(rec) as c:
        await c.get_store("memstore_1")
        assert 3.0 <= c.sleeps[0] <= 6.0


def test_parse_retry_after_garbage():
    assert parse_retry_after(httpx.Headers({})) is None
    assert parse_retry_after(httpx.Headers({"retry-after": "soon"})) is None
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "x", "retry-after": "2"})) == 2.0
    past = email.utils.formatdate(time.time() - 100, usegmt=True)
    assert parse_retry_after(httpx.Headers({"retry-after": past})) == 0.0


async def test_real_trio_sleep_with_tiny_backoff():
    rec = Recorder(err(503, "api_error"), err(503, "api_error"), store_json_resp())
    c = MemoryStoresClient(
        "http://test.local",
        KEY,
        transport=httpx.MockTransport(rec),
        backoff_base=0.001,
        backoff_max=0.002,
    )
    async with c:
        assert (await c.get_store("memstore_1")).id == "memstore_1"
    assert c.stats["retries"] == 2


@pytest.mark.parametrize("lost", [
    httpx.RemoteProtocolError("Server disconnected without sending a response."),
    httpx.ReadTimeout("timed out"),
    err(500, "api_error"),
], ids=["reset", "timeout", "500"])
async def test_a_post_that_may_have_been_applied_is_not_sent_again(lost):
    """A create or update whose answer was lost (reset or timed out after it was sent,
    or a 5xx) may have been applied: sent again blindly it could undo what another
    writer did meanwhile (re-create a memory they deleted, move back one they moved).
    It is raised with maybe_applied, after one request; the caller reads the history."""
    for call in (lambda c: c.create_memory("memstore_1", "/a.md", "a"),
                 lambda c: c.update_memory("memstore_1", "mem_1", path="/b.md")):
        rec = Recorder(lost, err(409, "memory_path_conflict_error"))
        async with make_client(rec) as c:
            with pytest.raises(APIError) as ei:
                await call(c)
        assert ei.value.maybe_applied and len(rec.requests) == 1


@pytest.mark.parametrize("lost,later", [
    (httpx.ReadError("reset"), True),               # no answer: the server may be at it
    (httpx.ReadTimeout("slow"), True),
    (err(502, "api_error"), True),                  # a gateway's: the server behind it
    (err(504, "timeout_error"), True),              #   may still finish
    (err(500, "api_error"), False),                 # the server's own, once done with it
    (err(503, "api_error"), False),
    (err(529, "overloaded_error"), False),
], ids=["reset", "timeout", "502", "504", "500", "503", "529"])
async def test_which_lost_answers_may_land_later(lost, later):
    """A write whose answer was lost may still be applied later only while the server may
    still be at work on it: no answer came, or a gateway answered for it (502, 504). The
    daemon and the memory tool take "no trace" as "never applied" only
    `lost_answer_wait` after such a loss, at once after any other (docs/SYNC.md)."""
    rec = Recorder(lost)
    async with make_client(rec) as c:
        with pytest.raises(APIError) as ei:
            await c.update_memory("memstore_1", "mem_1", path="/b.md")
    assert ei.value.maybe_applied
    assert may_land_later(ei.value) is later


async def test_a_post_that_was_not_applied_is_retried():
    """What provably did not apply is sent again: a connection never made, a 429."""
    rec = Recorder(httpx.ConnectError("refused"), err(429, "rate_limit_error"),
                   httpx.Response(200, json=mem_json()))
    async with make_client(rec) as c:
        await c.create_memory("memstore_1", "/a.md", "a")
    assert len(rec.requests) == 3


async def test_delete_404_on_retry_is_success_but_not_on_first_try():
    rec = Recorder(httpx.ReadError("reset"), err(404, "not_found_error"))
    async with make_client(rec) as c:
        assert await c.delete_memory("memstore_1", "mem_1", expected_sha=SHA_A) is None
    rec = Recorder(err(404, "not_found_error"))
    async with make_client(rec) as c:
        with pytest.raises(NotFoundError):
            await c.delete_memory("memstore_1", "mem_1")
    # Not for gets:
    rec = Recorder(httpx.ReadError("reset"), err(404, "not_found_error"))
    async with make_client(rec) as c:
        with pytest.raises(NotFoundError):
            await c.get_memory("memstore_1", "mem_1")


async def test_stats_bytes():
    body = json.dumps(mem_json()).encode()
    rec = Recorder(httpx.Response(200, content=body, headers={"content-type": "application/json"}))
    async with make_client(rec) as c:
        await c.create_memory("memstore_1", "/a.md", "hello")
        sent = len(rec.requests[0].content)
        assert c.stats == {
            "requests": 1,
            "bytes_sent": sent,
            "bytes_received": len(body),
            "retries": 0,
        }


# --------------------------------------------------------------------------- client-side refusals


@pytest.mark.parametrize(
    "path,kind",
    [
        ("a.md", "invalid"),
        ("/a//b", "invalid"),
        ("/a/", "invalid"),
        ("/a/../b", "invalid"),
        ("/bad\x07name", "invalid"),
        ("/line\u2028sep", "invalid"),
        ("/cafe\u0301", "invalid"),  # not NFC
        ("/" + "x" * 1024, "too_long"),
        ("/a" * 21, "too_long"),
    ],
)
async def test_invalid_paths_refused_client_side(path, kind):
    rec = Recorder(httpx.Response(500))
    async with make_client(rec) as c:
        with pytest.raises(BadRequestError) as ei:
            await c.create_memory("memstore_1", path, "x")
        assert ei.value.client_side and ei.value.status == 400
        assert ei.value.type == "invalid_request_error"
        assert ei.value.path_error.kind == kind
        assert isinstance(ei.value, REFUSED)
        with pytest.raises(BadRequestError):
            await c.update_memory("memstore_1", "mem_1", path=path)
    assert rec.requests == []


async def test_invalid_content_and_params_refused_client_side():
    rec = Recorder(httpx.Response(500))
    async with make_client(rec) as c:
        refusals = [
            c.create_memory("memstore_1", "/a", "x" * 102_401),
            c.create_memory("memstore_1", "/a", "\ud800"),
            c.update_memory("memstore_1", "mem_1", content="é" * 51_201),
            c.update_memory("memstore_1", "mem_1"),
            c.update_memory("memstore_1", "mem_1", content="x", precondition_sha="ABC"),
            c.update_memory("memstore_1", "mem_1", content="x", precondition_sha=SHA_A.upper()),
            c.delete_memory("memstore_1", "mem_1", expected_sha="nope"),
            c.list_memories_page("memstore_1", path_prefix="/a"),
            c.list_memories_page("memstore_1", depth=2),
            c.list_memories_page("memstore_1", view="everything"),
            c.list_memories_page("memstore_1", limit=0),
            c.list_versions_page("memstore_1", operation="renamed"),
            c.get_memory("memstore_1", ""),
            c.get_memory("..", "mem_1"),
        ]
        for coro in refusals:
            with pytest.raises(BadRequestError):
                await coro
    assert rec.requests == []
    # Exactly the limit is fine.
    rec = Recorder(httpx.Response(200, json=mem_json()))
    async with make_client(rec) as c:
        await c.create_memory("memstore_1", "/a", "x" * 102_400)
        await c.create_memory("memstore_1", "/a", "")


# --------------------------------------------------------------------------- pagination


class FakePager:
    """Serves ``items`` in pages honouring ``limit`` and ``page`` cursors."""

    def __init__(self, items):
        self.items = items
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        q = query(request)
        limit = int(q.get("limit", 20))
        start = int(q["page"].removeprefix("page_")) if "page" in q else 0
        chunk = self.items[start : start + limit]
        nxt = f"page_{start + limit}" if start + limit < len(self.items) else None
        return httpx.Response(200, json={"data": chunk, "next_page": nxt})


async def test_list_memories_paginates():
    items = [mem_json(i, f"/m{i:03d}.md") for i in range(250)]
    items.insert(3, {"type": "memory_prefix", "path": "/dir/"})
    items.insert(5, {"type": "something_new", "x": 1})
    pager = FakePager(items)
    async with make_client(pager) as c:
        got = [m async for m in c.list_memories("memstore_1", path_prefix="/")]
    assert len(got) == 251
    assert got[3] == MemoryPrefix("/dir/")
    assert [m.path for m in got if isinstance(m, Memory)] == [f"/m{i:03d}.md" for i in range(250)]
    assert len(pager.requests) == 3
    qs = [query(r) for r in pager.requests]
    assert [q.get("page") for q in qs] == [None, "page_100", "page_200"]
    assert all(q["limit"] == "100" and q["path_prefix"] == "/" for q in qs)


async def test_list_memories_full_view_clamps_limit():
    pager = FakePager([mem_json(i, f"/m{i}", content="x") for i in range(45)])
    async with make_client(pager) as c:
        got = [m async for m in c.list_memories("memstore_1", view="full", limit=100)]
    assert len(got) == 45 and all(m.content == "x" for m in got)
    assert [query(r)["limit"] for r in pager.requests] == ["20", "20", "20"]
    assert all(query(r)["view"] == "full" for r in pager.requests)


async def test_list_memories_page_returns_page():
    pager = FakePager([mem_json(i, f"/m{i}") for i in range(3)])
    async with make_client(pager) as c:
        p = await c.list_memories_page("memstore_1", limit=2)
        assert isinstance(p, Page) and len(p.data) == 2 and p.next_page == "page_2"
        p2 = await c.list_memories_page("memstore_1", limit=2, page=p.next_page)
        assert len(p2.data) == 1 and p2.next_page is None


async def test_list_stores_and_versions_paginate():
    pager = FakePager([store_json(i) for i in range(7)])
    async with make_client(pager) as c:
        got = [s async for s in c.list_stores(include_archived=True, limit=3)]
    assert [s.id for s in got] == [f"memstore_{i}" for i in range(7)]
    assert all(query(r)["include_archived"] == "true" for r in pager.requests)
    pager = FakePager([store_json(1)])
    async with make_client(pager) as c:
        _ = [s async for s in c.list_stores()]
    assert "include_archived" not in query(pager.requests[0])

    pager = FakePager([version_json(i) for i in range(150)])
    async with make_client(pager) as c:
        got = [
            v async for v in c.list_versions("memstore_1", memory_id="mem_1", operation="created")
        ]
    assert len(got) == 150 and isinstance(got[0], MemoryVersion)
    q = query(pager.requests[0])
    assert q["memory_id"] == "mem_1" and q["operation"] == "created" and q["view"] == "basic"
    assert pager.requests[0].url.path == "/v1/memory_stores/memstore_1/memory_versions"


async def test_pagination_retries_mid_listing():
    pager = FakePager([mem_json(i, f"/m{i:03d}") for i in range(150)])
    calls = {"n": 0}

    def flaky(request):
        calls["n"] += 1
        if calls["n"] == 2:
            return err(503, "api_error")
        return pager(request)

    async with make_client(flaky) as c:
        got = [m async for m in c.list_memories("memstore_1")]
        assert len(got) == 150 and c.stats["retries"] == 1


# --------------------------------------------------------------------------- models


def test_models_tolerate_unknown_and_missing_fields():
    m = Memory.from_json(mem_json(content="hi", brand_new_field=[1, 2]))
    assert m.content == "hi" and m.content_sha256 == content_sha256("hi")
    s = MemoryStore.from_json({"id": "memstore_1", "name": "n", "future": True})
    assert s.description == "" and s.metadata == {} and s.archived_at is None
    v = MemoryVersion.from_json(
        {"id": "memver_1", "memory_id": "mem_1", "operation": "deleted", "extra": 1}
    )
    assert v.content is None and v.content_size_bytes is None and v.redacted_at is None
    p = Page.from_json({"data": [mem_json(), {"type": "memory_prefix", "path": "/d/"}]})
    assert (
        isinstance(p.data[0], Memory) and p.data[1] == MemoryPrefix("/d/") and p.next_page is None
    )
    with pytest.raises(AttributeError):
        m.path = "/x"  # frozen


@pytest.mark.parametrize("bad", [
    {"type": "memory_store", "id": "../../../evil", "name": "n"},
    {"type": "memory_store", "id": 5, "name": "n"},
    {"type": "memory_store", "id": "memstore_1/x", "name": "n"},
    mem_json(content_sha256="../../../../etc/passwd"),  # the blob cache names files so
    mem_json(id="mem_1/.."),
    mem_json(memory_version_id="memver_1\n\x1b[2J/../x"),
    {"type": "memory_version", "id": "memver_1", "memory_id": "..", "operation": "deleted"},
    {"type": "session", "id": "sesn_1", "resources": [
        {"type": "memory_store", "memory_store_id": "../x"}]},
])
async def test_an_id_or_sha_that_would_name_a_path_is_refused(bad):
    """What a server gives that memfs names files or directories after is checked where
    it is read (found by a helper, 6 December: a store id "../../../evil" put a mount's
    state outside the cache and chmod 0700 the directory above it; a sha is a blob's
    file name, which a mismatch would unlink)."""
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=bad)

    async with make_client(handler) as c:
        with pytest.raises(APIResponseValidationError, match="is not"):
            if bad["type"] == "memory_store":
                await c.get_store("memstore_1")
            elif bad["type"] == "memory":
                await c.get_memory("memstore_1", "mem_1")
            elif bad["type"] == "memory_version":
                await c.get_version("memstore_1", "memver_1")
            else:
                await c.get_session("sesn_1")


@pytest.mark.parametrize("bad", [
    mem_json(path="/a/../hidden.md"), mem_json(path="/nul\x00name.md"),
    mem_json(path="/\x1b[2Jclear.md"), mem_json(path="/" + "/".join(["d"] * 2000)),
    mem_json(path=5), mem_json(content="x" * 200_000), mem_json(content_size_bytes=-1),
    mem_json(content_size_bytes=10**12),
])
async def test_a_memory_the_api_would_never_hold_is_refused(bad):
    """Paths, content and sizes from a server are held to the API's rules where they are
    read (found by a helper, 6 December: `/a/../hidden.md` hid a user's file in a node
    named `..`, a 30 MB memory was cached, a negative size made stat fail)."""
    async with make_client(lambda request: httpx.Response(200, json=bad)) as c:
        with pytest.raises(APIResponseValidationError, match="unexpected Memory payload"):
            await c.get_memory("memstore_1", "mem_1")


async def test_a_version_whose_time_or_author_is_odd():
    """A time the feed cannot read is refused where it is read (it failed the feed's every
    pass); an author that is not an object is none (`memfs history` crashed on it)."""
    version = {"type": "memory_version", "id": "memver_1", "memory_id": "mem_1",
               "operation": "created", "created_at": "yesterday"}
    async with make_client(lambda request: httpx.Response(200, json=version)) as c:
        with pytest.raises(APIResponseValidationError, match="yesterday"):
            await c.get_version("memstore_1", "memver_1")
    odd = {**version, "created_at": "2026-12-06T10:00:00Z", "created_by": "someone"}
    async with make_client(lambda request: httpx.Response(200, json=odd)) as c:
        assert (await c.get_version("memstore_1", "memver_1")).created_by is None


async def test_a_compressed_answer_is_read_once():
    """The hosted API may gzip its answers (httpx asks for it): the bounded read decodes
    the body, and the answer it hands on must not be decoded again."""
    import gzip

    body = json.dumps(mem_json(content="zipped")).encode()
    async with make_client(lambda r: httpx.Response(
            200, content=gzip.compress(body), headers={"content-encoding": "gzip"})) as c:
        assert (await c.get_memory("memstore_1", "mem_1")).content == "zipped"


async def test_an_answer_too_large_or_too_slow_is_not_read_for_good(monkeypatch):
    """Found by a helper, 6 December: a 400 MB answer took 900 MB of memory; a byte every
    10 s (each within the read timeout) held `memfs stores list` for good."""
    import memfs.api.client as client_module

    monkeypatch.setattr(client_module, "MAX_ANSWER_BYTES", 1000)
    monkeypatch.setattr(client_module, "ANSWER_WAIT", 0.5)

    class Trickle(httpx.AsyncByteStream):
        async def __aiter__(self):
            for _ in range(100):
                await trio.sleep(0.1)
                yield b" "

    async with make_client(lambda r: httpx.Response(200, content=b"x" * 5000),
                           max_retries=0) as c:
        with pytest.raises(APIConnectionError, match="AnswerTooLarge: an answer over 1,000"):
            await c.get_store("memstore_1")
    async with make_client(lambda r: httpx.Response(200, stream=Trickle()),
                           max_retries=0) as c:
        with trio.fail_after(5):
            with pytest.raises(APIConnectionError, match="ReadTimeout: the answer took over"):
                await c.get_store("memstore_1")


@pytest.mark.parametrize("compressed", [False, True])
async def test_an_answer_that_says_its_length_is_held_to_the_same_bounds(compressed,
                                                                          monkeypatch):
    """An answer with a length and no compression is read whole (the fast way): a length
    past the bound is refused unread, a trickle within it still times out. A compressed
    one is read as a stream whatever its length says (its decoded size is unknown)."""
    import gzip

    import memfs.api.client as client_module

    monkeypatch.setattr(client_module, "MAX_ANSWER_BYTES", 1000)
    monkeypatch.setattr(client_module, "ANSWER_WAIT", 0.5)
    encoding = {"content-encoding": "gzip"} if compressed else {}
    big = gzip.compress(b" " * 5000) if compressed else b"x" * 5000
    assert len(big) < 1000 or not compressed  # compressed, it says less than the bound

    slow = gzip.compress(b" " * 100) if compressed else b" " * 100

    class Trickle(httpx.AsyncByteStream):
        async def __aiter__(self):
            for i in range(len(slow)):
                await trio.sleep(0.1)
                yield slow[i:i + 1]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=big, headers=encoding)

    async with make_client(answer, max_retries=0) as c:
        with pytest.raises(APIConnectionError, match="AnswerTooLarge: an answer over 1,000"):
            await c.get_store("memstore_1")
    async with make_client(lambda r: httpx.Response(
            200, stream=Trickle(), headers={"content-length": str(len(slow)), **encoding}),
            max_retries=0) as c:
        with trio.fail_after(5):
            with pytest.raises(APIConnectionError, match="ReadTimeout: the answer took over"):
                await c.get_store("memstore_1")


@pytest.mark.parametrize("pages", ["same", "growing"])
async def test_list_pages_that_never_end_are_refused(pages, monkeypatch):
    """A server whose `next_page` comes back, or never stops: the walk read forever (a
    mount "starting" for good, its memory growing: found by a helper, 6 December)."""
    import memfs.api.models as models

    monkeypatch.setattr(models, "MAX_PAGES", 50)
    asked = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        cursor = "same" if pages == "same" else f"p{len(asked)}"
        return httpx.Response(200, json={"data": [], "next_page": cursor})

    async with make_client(handler) as c:
        with pytest.raises(APIResponseValidationError, match="list pages do not end"):
            [s async for s in c.list_stores()]
        with pytest.raises(APIResponseValidationError, match="list pages do not end"):
            async for _ in c.list_versions_pages("memstore_1"):
                pass
    assert len(asked) <= 2 * 51


@pytest.mark.parametrize("answer", [{"id": 5}, {"data": [{"foo": 1}]}, {"data": "x"},
                                    {"data": [5]}])
async def test_a_list_answer_that_is_not_one_is_refused(answer):
    """Before (found by a helper, 6 December), `memfs stores list` printed nothing and
    `mount --all` mounted "no stores" when a server answered any 200."""
    async with make_client(lambda request: httpx.Response(200, json=answer)) as c:
        with pytest.raises(APIResponseValidationError, match="unexpected list payload"):
            [s async for s in c.list_stores()]


def test_content_sha256():
    assert content_sha256("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert (
        content_sha256("Always use tabs, not spaces.")
        == "ba7936d94c84d948a2232088f78228f175df6a8353b2d5bc9228eee5794a0024"
    )


# --------------------------------------------------------------------------- key redaction


async def test_api_key_never_leaks(caplog):
    caplog.set_level(logging.DEBUG)
    echo = f"invalid x-api-key {KEY} for this workspace"
    rec = Recorder(
        httpx.ReadError(f"reset while sending {KEY}"),
        err(503, "api_error", echo),
        err(401, "authentication_error", echo),
    )
    c = make_client(rec)
    assert KEY not in repr(c) and KEY not in str(c)
    async with c:
        with pytest.raises(AuthenticationError) as ei:
            await c.get_store("memstore_1")
    e = ei.value
    for text in (str(e), repr(e), e.message, json.dumps(e.body)):
        assert KEY not in text
    assert "***" in e.message
    assert KEY not in caplog.text

    rec = Recorder(httpx.ConnectError(f"boom {KEY}"))
    async with make_client(rec, max_retries=1) as c:
        with pytest.raises(APIConnectionError) as ei:
            await c.get_store("memstore_1")
    assert KEY not in str(ei.value) and KEY not in repr(ei.value)
    assert KEY not in caplog.text

    cfg = ClientConfig(base_url="http://x", api_key=KEY)
    assert KEY not in repr(cfg) and KEY not in str(cfg) and cfg.has_api_key
    c = MemoryStoresClient.from_config(cfg)
    assert KEY not in repr(c)
    await c.aclose()


def test_every_error_is_api_error():
    for cls in (*REFUSED, *TRANSIENT, ConflictError, NotFoundError):
        assert issubclass(cls, APIError)


# --------------------------------------------------------------------------- config


def test_config_flags_override_env(tmp_path):
    env = {"ANTHROPIC_BASE_URL": "http://env/", "ANTHROPIC_API_KEY": "envkey"}
    cfg = resolve_config(env=env)
    assert cfg.base_url == "http://env" and cfg.api_key == "envkey"
    cfg = resolve_config("http://flag//", "flagkey", env=env)
    assert cfg.base_url == "http://flag" and cfg.api_key == "flagkey"
    keyfile = tmp_path / "key"
    keyfile.write_text("filekey\n")
    cfg = resolve_config(api_key_file=str(keyfile), env=env)
    assert cfg.api_key == "filekey"  # flag file beats env key
    cfg = resolve_config(api_key="flagkey", api_key_file=str(keyfile), env=env)
    assert cfg.api_key == "flagkey"


def test_config_env_file_and_nothing(tmp_path, monkeypatch):
    keyfile = tmp_path / "key"
    keyfile.write_text("  filekey  \n")
    cfg = resolve_config(env={"ANTHROPIC_API_KEY_FILE": str(keyfile)})
    assert cfg.api_key == "filekey" and cfg.base_url is None
    cfg = resolve_config(env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_API_KEY_FILE": str(keyfile)})
    assert cfg.api_key == "k"
    assert resolve_config(env={}) == ClientConfig(base_url=None, api_key=None)
    assert resolve_config(env={"ANTHROPIC_BASE_URL": "", "ANTHROPIC_API_KEY": ""}).base_url is None
    # Real environment by default.
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://real-env:8080/")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "realkey")
    monkeypatch.delenv("ANTHROPIC_API_KEY_FILE", raising=False)
    cfg = resolve_config()
    assert cfg.base_url == "http://real-env:8080" and cfg.api_key == "realkey"


def test_config_unreadable_key_file(tmp_path):
    with pytest.raises(ConfigError) as ei:
        resolve_config(api_key_file=str(tmp_path / "missing"), env={})
    assert "missing" in str(ei.value)
    bad = tmp_path / "bin"
    bad.write_bytes(b"\xff\xfe" + KEY.encode())
    with pytest.raises(ConfigError) as ei:
        resolve_config(api_key_file=str(bad), env={})
    assert KEY not in str(ei.value)


@pytest.mark.parametrize("key", ["k1\nk2", "k1\r\n# a comment", "k 1", "k\x00", "ké"])
def test_config_refuses_a_key_a_header_cannot_carry(tmp_path, key):
    keyfile = tmp_path / "key"
    keyfile.write_text(f"{key}\n")
    for given in ({"api_key": key, "env": {}}, {"api_key_file": str(keyfile), "env": {}},
                  {"env": {"ANTHROPIC_API_KEY": key}},
                  {"env": {"ANTHROPIC_API_KEY_FILE": str(keyfile)}},
                  {"env": {"ANTHROPIC_AUTH_TOKEN": key}}):
        with pytest.raises(ConfigError) as ei:
            resolve_config(**given)
        assert key.strip() not in str(ei.value) and "k1" not in str(ei.value)
    assert resolve_config(api_key="  sk-ant-api03-AZaz09_-~!  ", env={}).api_key == \
        "sk-ant-api03-AZaz09_-~!"


def test_from_config_needs_base_url():
    with pytest.raises(ValueError):
        MemoryStoresClient.from_config(ClientConfig(base_url=None, api_key=None))


# --------------------------------------------------------------------------- trio specifics


async def test_cancellation_during_request_and_backoff():
    async def slow(request):
        await trio.sleep(10)
        return httpx.Response(200, json=store_json())

    c = MemoryStoresClient("http://test.local", KEY, transport=httpx.MockTransport(slow))
    async with c:
        with trio.move_on_after(0.05) as scope:
            await c.get_store("memstore_1")
        assert scope.cancelled_caught

    rec = Recorder(err(503, "api_error", headers={"retry-after": "30"}))
    c = MemoryStoresClient("http://test.local", KEY, transport=httpx.MockTransport(rec))
    async with c:
        with trio.move_on_after(0.05) as scope:
            await c.get_store("memstore_1")
        assert scope.cancelled_caught  # the 30 s backoff is cancellable
        assert len(rec.requests) == 1


async def test_concurrent_requests_share_one_client():
    pager = FakePager([mem_json(i, f"/m{i:03d}") for i in range(30)])
    async with make_client(pager) as c:
        results = []

        async def one():
            results.append([m async for m in c.list_memories("memstore_1", limit=7)])

        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(one)
        assert all(len(r) == 30 for r in results) and len(results) == 10
        assert c.stats["requests"] == 50


async def test_invalid_unicode_in_store_name_refused():
    rec = Recorder(httpx.Response(500))
    async with make_client(rec) as c:
        with pytest.raises(BadRequestError):
            await c.create_store("bad \ud800 name")
    assert rec.requests == []


@pytest.mark.parametrize("first", ["prepare", "context"])
def test_one_tls_context_per_process(first):
    """The clients of `memfs mount` (prepared ahead) and of the memory tool (made on
    first use) share one TLS context, whichever asks first (a fresh process each)."""
    import subprocess
    import sys

    code = (
        "import ssl\n"
        "from memfs.api import tls\n"
        f"if {first!r} == 'prepare':\n"
        "    tls.prepare()\n"
        "ctx = tls.context()\n"
        "assert isinstance(ctx, ssl.SSLContext) and tls.context() is ctx\n"
        "tls.prepare()\n"
        "assert tls.verify() is ctx\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


async def test_the_wait_for_an_answer_counts_across_timeouts_and_retries(monkeypatch):
    """`unanswered_for` (what `memfs status` shows of a server that stopped answering):
    a timeout is no answer, so the retry's wait goes on counting from the first attempt
    (it started over at every attempt, and a stopped server looked answered every 30 s:
    found by a helper); an answer ends it."""
    import types

    from memfs.api import client as client_mod

    now = [100.0]
    monkeypatch.setattr(client_mod, "time", types.SimpleNamespace(
        monotonic=lambda: now[0], time=time.time))
    seen: list[float | None] = []

    def attempt(request):
        seen.append(client.unanswered_for())
        now[0] += 30.0  # each attempt waits out a 30 s timeout
        return httpx.ReadTimeout("no answer") if len(seen) < 3 else store_json_resp()

    client = make_client(Recorder(attempt), max_retries=3)
    assert client.unanswered_for() is None
    await client.get_store("memstore_x")
    assert seen == [0.0, 30.0, 60.0]
    assert client.unanswered_for() is None
