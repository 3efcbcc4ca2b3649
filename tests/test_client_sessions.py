"""memfs.api sessions: Session/SessionResource parsing, get_session, list_sessions,
session_token — with httpx.MockTransport, then against a real `memfs serve`."""

from __future__ import annotations

import httpx
import pytest
from test_client_unit import KEY, Recorder, err, make_client, query

from memfs.api import (
    SESSIONS_BETA,
    APIResponseValidationError,
    MemoryStoresClient,
    NotFoundError,
    Page,
    Session,
    SessionResource,
)
from memfs.api.models import parse_object


def session_json(i: int = 1, **extra):
    d = {
        "type": "session",
        "id": f"sesn_{i}",
        "status": "idle",
        "environment_id": "env_1",
        "title": None,
        "metadata": {},
        "agent": {"type": "agent", "id": "agent_1", "version": 1},
        "resources": [
            {"type": "memory_store", "memory_store_id": "memstore_1", "access": "read_only",
             "name": "Notes", "description": "", "instructions": "be careful",
             "mount_path": "/mnt/memory/notes"},
        ],
        "created_at": "2026-08-20T10:00:00Z",
        "updated_at": "2026-08-20T10:00:00Z",
        "archived_at": None,
    }
    d.update(extra)
    return d


# --------------------------------------------------------------------------- models


def test_session_from_json_is_tolerant():
    s = Session.from_json(session_json(future_field={"x": 1}))
    assert s.id == "sesn_1" and s.status == "idle" and s.environment_id == "env_1"
    assert s.agent["id"] == "agent_1" and s.archived_at is None
    (r,) = s.memory_stores
    assert r == SessionResource(type="memory_store", memory_store_id="memstore_1",
                                access="read_only", name="Notes", description="",
                                instructions="be careful", mount_path="/mnt/memory/notes")
    # Minimal and odd payloads: defaults, other resource types kept but not memory stores.
    m = Session.from_json({"id": "sesn_2", "resources": [
        {"type": "file", "id": "sesrsc_1", "file_id": "file_1", "mount_path": "/mnt/f"},
        {"type": "memory_store", "memory_store_id": "memstore_2", "access": None,
         "name": None, "description": None},
        "garbage",
    ], "metadata": None, "agent": "agent_x"})
    assert [r.type for r in m.resources] == ["file", "memory_store"]
    (ms,) = m.memory_stores
    assert (ms.access, ms.name, ms.description, ms.instructions) == ("read_write", "", "", None)
    assert m.resources[0].access is None and m.resources[0].id == "sesrsc_1"
    assert m.metadata == {} and m.agent == {} and m.title is None
    assert isinstance(parse_object(session_json()), Session)


# --------------------------------------------------------------------------- requests


async def test_get_session_sends_the_sessions_beta():
    rec = Recorder(httpx.Response(200, json=session_json()))
    async with make_client(rec) as c:
        s = await c.get_session("sesn_1")
    assert isinstance(s, Session) and s.memory_stores[0].mount_path == "/mnt/memory/notes"
    (req,) = rec.requests
    assert req.method == "GET" and req.url.path == "/v1/sessions/sesn_1"
    assert req.headers["anthropic-beta"] == SESSIONS_BETA == "managed-agents-2026-04-01"
    assert req.headers["x-api-key"] == KEY


async def test_list_sessions_paginates_with_the_filter():
    rec = Recorder(
        httpx.Response(200, json={"data": [session_json(3), session_json(2)],
                                  "next_page": "page_2"}),
        httpx.Response(200, json={"data": [session_json(1)], "next_page": None}),
    )
    async with make_client(rec) as c:
        got = [s.id async for s in c.list_sessions("memstore_1", limit=2)]
    assert got == ["sesn_3", "sesn_2", "sesn_1"]
    first, second = rec.requests
    assert query(first) == {"beta": "true", "memory_store_id": "memstore_1", "limit": "2"}
    assert query(second) == {"beta": "true", "memory_store_id": "memstore_1", "limit": "2",
                             "page": "page_2"}
    assert all(r.headers["anthropic-beta"] == SESSIONS_BETA for r in rec.requests)

    rec = Recorder(httpx.Response(200, json={"data": [], "next_page": None}))
    async with make_client(rec) as c:
        page = await c.list_sessions_page(include_archived=True)
    assert isinstance(page, Page) and page.data == []
    assert query(rec.requests[0]) == {"beta": "true", "include_archived": "true",
                                      "limit": "100"}


async def test_session_token():
    rec = Recorder(httpx.Response(200, json={"token": "memfs_sesstok_abc"}))
    async with make_client(rec) as c:
        assert await c.session_token("sesn_1") == "memfs_sesstok_abc"
    (req,) = rec.requests
    assert req.method == "POST" and req.url.path == "/_memfs/sessions/sesn_1/token"
    assert req.headers["x-api-key"] == KEY

    # The hosted API has no such route: 404 → None.
    rec = Recorder(err(404, "not_found_error", "Not found"))
    async with make_client(rec) as c:
        assert await c.session_token("sesn_1") is None
    assert len(rec.requests) == 1  # a 404 is not retried
    # memfs serve, unknown session: its 404 names the session → raised.
    rec = Recorder(err(404, "not_found_error", "session 'sesn_1' not found",
                       session_id="sesn_1"))
    async with make_client(rec) as c:
        with pytest.raises(NotFoundError):
            await c.session_token("sesn_1")
    rec = Recorder(httpx.Response(200, json={"nope": 1}))
    async with make_client(rec) as c:
        with pytest.raises(APIResponseValidationError):
            await c.session_token("sesn_1")


# --------------------------------------------------------------------------- real server


async def test_against_memfs_serve(server):
    sdk = server.sdk()
    a = sdk.beta.memory_stores.create(name="Alpha Notes", description="first")
    b = sdk.beta.memory_stores.create(name="alpha notes")
    made = [sdk.beta.sessions.create(agent="agent_1", environment_id="env_1", resources=[
        {"type": "memory_store", "memory_store_id": a.id},
        {"type": "memory_store", "memory_store_id": b.id, "access": "read_only"},
    ]).id for _ in range(3)]
    other = sdk.beta.sessions.create(agent="agent_1", environment_id="env_1").id
    async with MemoryStoresClient(server.base_url, server.api_key, max_retries=0) as c:
        s = await c.get_session(made[0])
        assert [(r.memory_store_id, r.access, r.name, r.description, r.mount_path)
                for r in s.memory_stores] == [
            (a.id, "read_write", "Alpha Notes", "first", "/mnt/memory/alpha-notes"),
            (b.id, "read_only", "alpha notes", "", "/mnt/memory/alpha-notes-2"),
        ]
        assert [x.id async for x in c.list_sessions(a.id, limit=2)] == made[::-1]
        assert [x.id async for x in c.list_sessions()] == [other, *made[::-1]]

        token = await c.session_token(made[0])
        assert token and token.startswith("memfs_sesstok_")
        with pytest.raises(NotFoundError):
            await c.session_token("sesn_unknown")
        with pytest.raises(NotFoundError):
            await c.get_session("sesn_unknown")

    # The token works with this client too: its writes are the session's.
    async with MemoryStoresClient(server.base_url, token, max_retries=0) as agent:
        m = await agent.create_memory(a.id, "/x.md", "x")
        (v,) = [v async for v in agent.list_versions(a.id, memory_id=m.id)]
        assert v.created_by == {"type": "session_actor", "session_id": made[0]}
