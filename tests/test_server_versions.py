"""memfs serve: memory versions, filters and redaction."""

from __future__ import annotations

import hashlib

import anthropic
import httpx
import pytest


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


API_KEY_ID = "apikey_" + hashlib.sha256(b"test-key").hexdigest()[:16]


def test_versions_lifecycle_and_fields(server):
    ms = server.sdk().beta.memory_stores
    sid = ms.create(name="v").id
    m = ms.memories.create(sid, path="/a.md", content="one")
    ms.memories.update(m.id, memory_store_id=sid, content="two")
    ms.memories.update(m.id, memory_store_id=sid, path="/b.md")
    ms.memories.update(m.id, memory_store_id=sid, content="two")  # no-op: no version
    ms.memories.delete(m.id, memory_store_id=sid)

    vs = list(ms.memory_versions.list(sid))
    assert [v.operation for v in vs] == ["deleted", "modified", "modified", "created"]
    assert [v.path for v in vs] == ["/b.md", "/b.md", "/a.md", "/a.md"]
    assert all(v.content is None for v in vs)  # list defaults to basic
    assert [v.content_sha256 for v in vs] == [None, sha("two"), sha("two"), sha("one")]
    assert [v.content_size_bytes for v in vs] == [None, 3, 3, 3]
    for v in vs:
        assert v.type == "memory_version" and v.id.startswith("memver_")
        assert v.memory_id == m.id and v.memory_store_id == sid
        assert v.created_by.type == "api_actor" and v.created_by.api_key_id == API_KEY_ID
        assert v.redacted_at is None and v.redacted_by is None
    created = [v.created_at for v in vs]
    assert created == sorted(created, reverse=True)
    assert vs[-1].id == m.memory_version_id

    full = list(ms.memory_versions.list(sid, view="full"))
    assert [v.content for v in full] == [None, "two", "two", "one"]
    got = ms.memory_versions.retrieve(vs[-1].id, memory_store_id=sid)  # retrieve defaults to full
    assert got.content == "one" and got.path == "/a.md"
    assert ms.memory_versions.retrieve(vs[-1].id, memory_store_id=sid, view="basic").content is None
    with pytest.raises(anthropic.NotFoundError):
        ms.memory_versions.retrieve("memver_nope", memory_store_id=sid)


def test_version_filters_and_pagination(server):
    ms = server.sdk().beta.memory_stores
    sid = ms.create(name="v").id
    a = ms.memories.create(sid, path="/a", content="a")
    b = ms.memories.create(sid, path="/b", content="b")
    for i in range(25):
        ms.memories.update(a.id, memory_store_id=sid, content=f"a{i}")
    ms.memories.delete(b.id, memory_store_id=sid)

    assert len(list(ms.memory_versions.list(sid, memory_id=a.id))) == 26
    assert [v.operation for v in ms.memory_versions.list(sid, memory_id=b.id)] == [
        "deleted",
        "created",
    ]
    assert len(list(ms.memory_versions.list(sid, operation="created"))) == 2
    assert len(list(ms.memory_versions.list(sid, operation="deleted"))) == 1
    assert len(list(ms.memory_versions.list(sid, api_key_id=API_KEY_ID))) == 28
    assert list(ms.memory_versions.list(sid, api_key_id="apikey_other")) == []
    assert list(ms.memory_versions.list(sid, session_id="sesn_x")) == []

    allv = list(ms.memory_versions.list(sid, limit=7))
    assert len(allv) == 28 and len({v.id for v in allv}) == 28
    keys = [(v.created_at, v.id) for v in allv]
    assert keys == sorted(keys, reverse=True)
    mid = allv[10].created_at
    gte = list(ms.memory_versions.list(sid, created_at_gte=mid))
    lte = list(ms.memory_versions.list(sid, created_at_lte=mid))
    assert all(v.created_at >= mid for v in gte) and all(v.created_at <= mid for v in lte)
    assert len(gte) + len(lte) == 28 + sum(v.created_at == mid for v in allv)

    page = ms.memory_versions.list(sid, limit=5)
    page2 = ms.memory_versions.list(sid, limit=5, page=page.next_page)
    assert [v.id for v in page.data + page2.data] == [v.id for v in allv[:10]]
    full = ms.memory_versions.list(sid, view="full", limit=100)
    assert len(full.data) == 20 and full.next_page
    with pytest.raises(anthropic.BadRequestError):
        ms.memory_versions.list(sid, limit=5, page=page.next_page, memory_id=a.id)
    with pytest.raises(anthropic.BadRequestError):
        ms.memory_versions.list(sid, operation="renamed")  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError):
        ms.memory_versions.list(sid, created_at_gte="yesterday")


def test_redaction_rules(server):
    ms = server.sdk().beta.memory_stores
    sid = ms.create(name="r").id
    m = ms.memories.create(sid, path="/secret.md", content="password=hunter2")
    head0 = m.memory_version_id
    with pytest.raises(anthropic.ConflictError) as ei:  # head of a live memory
        ms.memory_versions.redact(head0, memory_store_id=sid)
    assert ei.value.body["error"]["type"] == "conflict_error"
    # The same request gets the same answer: the SDK is told not to send it twice more.
    assert ei.value.response.headers["x-should-retry"] == "false"

    m2 = ms.memories.update(m.id, memory_store_id=sid, content="clean")
    r = ms.memory_versions.redact(head0, memory_store_id=sid)
    assert r.id == head0 and r.operation == "created"
    assert (r.path, r.content, r.content_sha256, r.content_size_bytes) == (None,) * 4
    assert r.redacted_at is not None
    assert r.redacted_by.type == "api_actor" and r.redacted_by.api_key_id == API_KEY_ID
    assert r.created_by.api_key_id == API_KEY_ID  # preserved

    again = ms.memory_versions.redact(head0, memory_store_id=sid)  # idempotent
    assert again.redacted_at == r.redacted_at
    got = ms.memory_versions.retrieve(head0, memory_store_id=sid)  # 200 with nulls
    assert got.redacted_at == r.redacted_at and got.content is None and got.path is None

    # The live memory is untouched; after deleting it, its last content version can be redacted.
    assert ms.memories.retrieve(m.id, memory_store_id=sid).content == "clean"
    ms.memories.delete(m.id, memory_store_id=sid)
    ms.memory_versions.redact(m2.memory_version_id, memory_store_id=sid)
    deleted = ms.memory_versions.list(sid, operation="deleted").data[0]
    assert ms.memory_versions.redact(deleted.id, memory_store_id=sid).path is None
    assert all(v.redacted_at for v in ms.memory_versions.list(sid))
    with pytest.raises(anthropic.NotFoundError):
        ms.memory_versions.redact("memver_missing", memory_store_id=sid)
    # Redact accepts the docs' `-d '{}'` body but no fields.
    url = f"{server.base_url}/v1/memory_stores/{sid}/memory_versions/{head0}/redact"
    assert httpx.post(url, headers=server.headers, json={}).status_code == 200
    assert httpx.post(url, headers=server.headers, json={"x": 1}).status_code == 400


def test_session_actor_header(server):
    ms = server.sdk().beta.memory_stores
    sid = ms.create(name="s").id
    sess = server.sdk(default_headers={"x-memfs-session-id": "sesn_0123abc"}).beta.memory_stores
    m = sess.memories.create(sid, path="/agent.md", content="x")
    ms.memories.update(m.id, memory_store_id=sid, content="y")
    by_session = list(ms.memory_versions.list(sid, session_id="sesn_0123abc"))
    assert len(by_session) == 1 and by_session[0].operation == "created"
    assert by_session[0].created_by.type == "session_actor"
    assert by_session[0].created_by.session_id == "sesn_0123abc"
    assert len(list(ms.memory_versions.list(sid, api_key_id=API_KEY_ID))) == 1
    bad = server.sdk(default_headers={"x-memfs-session-id": "not-a-session"}).beta.memory_stores
    with pytest.raises(anthropic.BadRequestError):
        bad.memories.create(sid, path="/z", content="")
