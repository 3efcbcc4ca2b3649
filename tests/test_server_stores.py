"""memfs serve: memory store endpoints, driven through the official SDK."""

from __future__ import annotations

import time
from datetime import timedelta

import anthropic
import httpx
import pytest


def test_store_crud(server):
    ms = server.sdk().beta.memory_stores
    s = ms.create(name="User Preferences", description="prefs", metadata={"user": "u1"})
    assert s.type == "memory_store"
    assert s.id.startswith("memstore_") and len(s.id) >= 20
    assert (s.name, s.description, s.metadata) == ("User Preferences", "prefs", {"user": "u1"})
    assert s.archived_at is None and s.created_at == s.updated_at

    got = ms.retrieve(s.id)
    assert got == s

    plain = ms.create(name="plain")
    assert plain.description == "" and plain.metadata == {}

    time.sleep(0.002)
    u = ms.update(s.id, name="Renamed", metadata={"user": None, "team": "t"})
    assert u.name == "Renamed" and u.description == "prefs"
    assert u.metadata == {"team": "t"}
    assert u.updated_at > s.updated_at and u.created_at == s.created_at

    # An update that changes nothing leaves updated_at alone.
    same = ms.update(s.id, description="prefs")
    assert same.updated_at == u.updated_at
    cleared = ms.update(s.id, description="")
    assert cleared.description == ""

    d = ms.delete(s.id)
    assert d.id == s.id and d.type == "memory_store_deleted"
    with pytest.raises(anthropic.NotFoundError):
        ms.retrieve(s.id)
    with pytest.raises(anthropic.NotFoundError):
        ms.delete(s.id)


def test_store_list_order_pagination_filters(server):
    ms = server.sdk().beta.memory_stores
    ids = [ms.create(name=f"s{i}").id for i in range(7)]
    listed = [s.id for s in ms.list(limit=3)]  # auto-pagination
    assert listed == ids[::-1]

    page = ms.list(limit=3)
    assert [s.id for s in page.data] == ids[::-1][:3]
    assert page.next_page and page.next_page.startswith("page_")
    page2 = ms.list(limit=3, page=page.next_page)
    assert [s.id for s in page2.data] == ids[::-1][3:6]
    page3 = ms.list(limit=3, page=page2.next_page)
    assert [s.id for s in page3.data] == ids[:1] and page3.next_page is None

    ms.archive(ids[0])
    assert ids[0] not in [s.id for s in ms.list()]
    assert ids[0] in [s.id for s in ms.list(include_archived=True)]

    mid = ms.retrieve(ids[3]).created_at
    newer = [s.id for s in ms.list(created_at_gte=mid)]
    assert newer == ids[::-1][:4]
    older = [s.id for s in ms.list(created_at_lte=mid, include_archived=True)]
    assert older == ids[:4][::-1]
    assert list(ms.list(created_at_gte=mid + timedelta(days=1))) == []

    # A cursor from a different filter is refused.
    with pytest.raises(anthropic.BadRequestError):
        ms.list(limit=3, page=page.next_page, include_archived=True)
    with pytest.raises(anthropic.BadRequestError):
        ms.list(page="page_garbage!")
    for bad in (0, 101):
        with pytest.raises(anthropic.BadRequestError):
            ms.list(limit=bad)
    assert len(ms.list(limit=100).data) == 6


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": ""},
        {"name": "x" * 256},
        {"name": "a\nb"},
        {"name": "ok", "description": "d" * 1025},
        {"name": "ok", "metadata": {f"k{i}": "v" for i in range(17)}},
        {"name": "ok", "metadata": {"": "v"}},
        {"name": "ok", "metadata": {"k" * 65: "v"}},
        {"name": "ok", "metadata": {"k": "v" * 513}},
    ],
)
def test_store_validation(server, kwargs):
    with pytest.raises(anthropic.BadRequestError) as ei:
        server.sdk().beta.memory_stores.create(**kwargs)
    assert ei.value.body["error"]["type"] == "invalid_request_error"


def test_store_validation_limits_ok(server):
    ms = server.sdk().beta.memory_stores
    s = ms.create(
        name="x" * 255,
        description="d" * 1024,
        metadata={f"k{i:02d}" + "k" * 61: "v" * 512 for i in range(16)},
    )
    assert len(s.metadata) == 16
    with pytest.raises(anthropic.BadRequestError):  # patch would make 17 pairs
        ms.update(s.id, metadata={"extra": "v"})
    ok = ms.update(s.id, metadata={"extra": "v", "k00" + "k" * 61: None})
    assert len(ok.metadata) == 16


def test_store_unknown_fields_and_missing_name(server):
    ms = server.sdk().beta.memory_stores
    with pytest.raises(anthropic.BadRequestError):
        ms.create(name="x", extra_body={"bogus": 1})
    r = httpx.post(f"{server.base_url}/v1/memory_stores", headers=server.headers, json={})
    assert r.status_code == 400


def test_archive_rules(server):
    ms = server.sdk().beta.memory_stores
    s = ms.create(name="a")
    m = ms.memories.create(s.id, path="/keep.md", content="k")
    m2 = ms.memories.create(s.id, path="/gone.md", content="g")
    ms.memories.update(m.id, memory_store_id=s.id, content="k2")
    before = ms.retrieve(s.id)
    a = ms.archive(s.id)
    # "Archiving the store does too" (the SDK's `updated_at`).
    assert a.archived_at is not None and a.updated_at == a.archived_at > before.updated_at
    again = ms.archive(s.id)
    assert again.archived_at == a.archived_at and again.updated_at == a.updated_at

    for call in (
        lambda: ms.update(s.id, name="b"),
        lambda: ms.memories.create(s.id, path="/new.md", content="x"),
        lambda: ms.memories.update(m.id, memory_store_id=s.id, content="y"),
    ):
        with pytest.raises(anthropic.BadRequestError) as ei:
            call()
        assert "archived" in ei.value.body["error"]["message"]

    # Reads still work; deleting memories and redacting versions is allowed (the SDK's
    # `archived_at`: "You can still read and delete its memories, redact their versions").
    assert ms.retrieve(s.id).archived_at == a.archived_at
    assert ms.memories.retrieve(m.id, memory_store_id=s.id).content == "k2"
    assert len(list(ms.memories.list(s.id))) == 2
    assert ms.memories.delete(m2.id, memory_store_id=s.id).type == "memory_deleted"
    assert [x.path for x in ms.memories.list(s.id)] == ["/keep.md"]
    old = [v for v in ms.memory_versions.list(s.id, memory_id=m.id) if v.operation == "created"]
    assert ms.memory_versions.redact(old[0].id, memory_store_id=s.id).redacted_at is not None
    assert ms.delete(s.id).type == "memory_store_deleted"


def test_store_delete_cascades(server):
    ms = server.sdk().beta.memory_stores
    s = ms.create(name="c")
    other = ms.create(name="other")
    m = ms.memories.create(s.id, path="/a.md", content="a")
    keep = ms.memories.create(other.id, path="/a.md", content="a")
    v = ms.memory_versions.list(s.id).data[0]
    ms.delete(s.id)
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.retrieve(m.id, memory_store_id=s.id)
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.list(s.id)
    with pytest.raises(anthropic.NotFoundError):
        ms.memory_versions.retrieve(v.id, memory_store_id=s.id)
    with pytest.raises(anthropic.NotFoundError):
        ms.memory_versions.list(s.id)
    assert ms.memories.retrieve(keep.id, memory_store_id=other.id).content == "a"
    # The memory id cannot be reached through another store either.
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.retrieve(m.id, memory_store_id=other.id)
