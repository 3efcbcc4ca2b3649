"""memfs serve: memory endpoints (paths, content, conflicts, preconditions, listing)."""

from __future__ import annotations

import hashlib

import anthropic
import httpx
import pytest

from memfs.core.paths import MAX_CONTENT_BYTES


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


@pytest.fixture
def api(server):
    ms = server.sdk().beta.memory_stores
    store = ms.create(name="mem")
    return ms, store.id


def versions(ms, sid, mid):
    return list(ms.memory_versions.list(sid, memory_id=mid))


def test_memory_crud_and_views(api):
    ms, sid = api
    m = ms.memories.create(
        sid, path="/preferences/formatting.md", content="Always use tabs, not spaces."
    )
    assert m.type == "memory" and m.id.startswith("mem_")
    assert m.memory_store_id == sid and m.content is None  # create defaults to basic
    assert m.content_size_bytes == 28
    assert m.content_sha256 == "ba7936d94c84d948a2232088f78228f175df6a8353b2d5bc9228eee5794a0024"
    assert m.memory_version_id.startswith("memver_")
    full = ms.memories.create(sid, path="/x.md", content="", view="full")
    assert full.content == "" and full.content_sha256 == sha("")

    got = ms.memories.retrieve(m.id, memory_store_id=sid)  # retrieve defaults to full
    assert got.content == "Always use tabs, not spaces."
    assert ms.memories.retrieve(m.id, memory_store_id=sid, view="basic").content is None

    u = ms.memories.update(m.id, memory_store_id=sid, content="tabs")
    assert u.content is None and u.memory_version_id != m.memory_version_id
    assert u.updated_at > m.updated_at and u.created_at == m.created_at
    u2 = ms.memories.update(m.id, memory_store_id=sid, path="/p/f.md", view="full")
    assert (u2.path, u2.content, u2.id) == ("/p/f.md", "tabs", m.id)

    d = ms.memories.delete(m.id, memory_store_id=sid)
    assert (d.id, d.type) == (m.id, "memory_deleted")
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.retrieve(m.id, memory_store_id=sid)
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.update(m.id, memory_store_id=sid, content="z")
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.delete(m.id, memory_store_id=sid)
    ops = [v.operation for v in versions(ms, sid, m.id)]
    assert ops == ["deleted", "modified", "modified", "created"]
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.create("memstore_nope", path="/a", content="")
    with pytest.raises(anthropic.BadRequestError):
        ms.memories.retrieve(full.id, memory_store_id=sid, view="everything")  # type: ignore[arg-type]


def test_unicode_and_nul_content_round_trip(api):
    ms, sid = api
    content = "héllo \x00 wörld 🎉\r\n"
    m = ms.memories.create(sid, path="/ünï/cødé 🎉.md", content=content)
    got = ms.memories.retrieve(m.id, memory_store_id=sid)
    assert got.content == content and got.path == "/ünï/cødé 🎉.md"
    assert got.content_sha256 == sha(content)
    assert got.content_size_bytes == len(content.encode())


BAD_PATHS = {
    "no leading slash": "a/b",
    "empty": "",
    "root only": "/",
    "trailing slash": "/a/",
    "double slash": "/a//b",
    "dot": "/a/./b",
    "dotdot": "/a/../b",
    "control char": "/a\x01b",
    "tab": "/a\tb",
    "del": "/a\x7fb",
    "format char (ZWJ)": "/a\u200db",
    "BOM": "/\ufeffa",
    "U+2028": "/a\u2028b",
    "U+2029": "/a\u2029b",
    "not NFC": "/cafe\u0301",
    "too many bytes": "/" + "a" * 1024,
    "too many segments": "/a" * 21,
}


@pytest.mark.parametrize("path", list(BAD_PATHS.values()), ids=list(BAD_PATHS))
def test_path_rules(api, path):
    ms, sid = api
    with pytest.raises(anthropic.BadRequestError) as ei:
        ms.memories.create(sid, path=path, content="x")
    err = ei.value.body["error"]
    assert err["type"] == "invalid_request_error" and "path" in err["message"]
    # The same rules apply to renames.
    m = ms.memories.create(sid, path="/ok.md", content="x")
    with pytest.raises(anthropic.BadRequestError):
        ms.memories.update(m.id, memory_store_id=sid, path=path)


def test_path_limits_accepted(api):
    ms, sid = api
    ms.memories.create(sid, path="/" + "a" * 1023, content="")  # exactly 1,024 bytes
    ms.memories.create(sid, path="/b" * 20, content="")  # exactly 20 segments
    ms.memories.create(sid, path="/café", content="")  # NFC
    ms.memories.create(sid, path="/.hidden/..dots.../x", content="")
    ms.memories.create(sid, path="/Case", content="")
    ms.memories.create(sid, path="/case", content="")  # case-sensitive


def test_content_limit(api):
    ms, sid = api
    ok = "é" * (MAX_CONTENT_BYTES // 2)
    m = ms.memories.create(sid, path="/big", content=ok)
    assert m.content_size_bytes == MAX_CONTENT_BYTES
    with pytest.raises(anthropic.BadRequestError) as ei:
        ms.memories.create(sid, path="/bigger", content=ok + "a")
    assert ei.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        ms.memories.update(m.id, memory_store_id=sid, content=ok + "a")
    with pytest.raises(anthropic.BadRequestError):  # null content on create
        ms.memories.create(sid, path="/null", content=None)
    with pytest.raises(anthropic.BadRequestError):  # missing content
        ms.memories.create(sid, path="/none", content="x", extra_body={"content": 5})


def test_body_shape_rules(server, api):
    ms, sid = api
    m = ms.memories.create(sid, path="/a", content="a")
    url = f"{server.base_url}/v1/memory_stores/{sid}/memories"
    h = server.headers
    assert httpx.post(url, headers=h, json={"path": "/b"}).status_code == 400
    assert httpx.post(url, headers=h, json={"content": "b"}).status_code == 400
    assert (
        httpx.post(url, headers=h, json={"path": "/b", "content": "b", "x": 1}).status_code == 400
    )
    assert httpx.post(url, headers=h, json=["path"]).status_code == 400
    r = httpx.post(url, headers=h, content=b'{"path": "/b", ')
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    # update needs content or path; null means omitted
    with pytest.raises(anthropic.BadRequestError):
        ms.memories.update(m.id, memory_store_id=sid)
    with pytest.raises(anthropic.BadRequestError):
        ms.memories.update(m.id, memory_store_id=sid, content=None, path=None)
    with pytest.raises(anthropic.BadRequestError):
        ms.memories.update(m.id, memory_store_id=sid, content="z", extra_body={"bogus": True})


def test_occupancy_conflicts(api):
    ms, sid = api
    a = ms.memories.create(sid, path="/a/b", content="x")

    def conflict(path):
        with pytest.raises(anthropic.ConflictError) as ei:
            ms.memories.create(sid, path=path, content="y")
        resp = ei.value.response
        assert resp.headers["x-should-retry"] == "false"
        err = ei.value.body["error"]
        assert err["type"] == "memory_path_conflict_error"
        return err

    err = conflict("/a/b")  # same path
    assert (err["conflicting_path"], err["conflicting_memory_id"]) == ("/a/b", a.id)
    err = conflict("/a")  # ancestor of an existing memory
    assert (err["conflicting_path"], err["conflicting_memory_id"]) == ("/a/b", a.id)
    err = conflict("/a/b/c/d")  # descendant of an existing memory
    assert (err["conflicting_path"], err["conflicting_memory_id"]) == ("/a/b", a.id)
    # Siblings and look-alikes are fine.
    ms.memories.create(sid, path="/a/bc", content="")
    ms.memories.create(sid, path="/a/b.md", content="")
    ms.memories.create(sid, path="/a-b", content="")
    assert len(list(ms.memories.list(sid))) == 4


def test_rename_rules(api):
    ms, sid = api
    a = ms.memories.create(sid, path="/a/b", content="A")
    c = ms.memories.create(sid, path="/c", content="C")
    n = len(versions(ms, sid, a.id))

    for target, blocker in (("/c", c), ("/c/d", c), ("/a", a)):
        mover = c if blocker is a else a
        with pytest.raises(anthropic.ConflictError) as ei:
            ms.memories.update(mover.id, memory_store_id=sid, path=target)
        err = ei.value.body["error"]
        assert err["type"] == "memory_path_conflict_error"
        assert err["conflicting_memory_id"] == blocker.id
        assert ei.value.response.headers["x-should-retry"] == "false"

    # Onto its own path: a no-op (no version).
    same = ms.memories.update(a.id, memory_store_id=sid, path="/a/b")
    assert same.memory_version_id == a.memory_version_id
    # Into its own former directory / below its own path: allowed (it is the only occupant).
    r1 = ms.memories.update(a.id, memory_store_id=sid, path="/a")
    assert r1.path == "/a" and r1.id == a.id
    r2 = ms.memories.update(a.id, memory_store_id=sid, path="/a/b/c")
    assert r2.path == "/a/b/c"
    assert len(versions(ms, sid, a.id)) == n + 2
    paths = [m.path for m in ms.memories.list(sid)]
    assert paths == ["/a/b/c", "/c"]
    # Old path is free again.
    ms.memories.create(sid, path="/x", content="")
    ms.memories.update(a.id, memory_store_id=sid, path="/x2")
    ms.memories.create(sid, path="/a/b/c", content="reuse")


def test_preconditions_and_noop(api):
    ms, sid = api
    m = ms.memories.create(sid, path="/p.md", content="one")
    pre_ok = {"type": "content_sha256", "content_sha256": sha("one")}
    pre_bad = {"type": "content_sha256", "content_sha256": sha("nope")}

    with pytest.raises(anthropic.ConflictError) as ei:
        ms.memories.update(m.id, memory_store_id=sid, content="two", precondition=pre_bad)
    assert ei.value.body["error"]["type"] == "memory_precondition_failed_error"
    assert ei.value.response.headers["x-should-retry"] == "false"
    assert ms.memories.retrieve(m.id, memory_store_id=sid).content == "one"

    # No-op: requested state == stored state → 200, no version, despite a bad precondition.
    for kw in ({"content": "one"}, {"path": "/p.md"}, {"content": "one", "path": "/p.md"}):
        r = ms.memories.update(m.id, memory_store_id=sid, precondition=pre_bad, **kw)
        assert r.memory_version_id == m.memory_version_id and r.updated_at == m.updated_at
    assert len(versions(ms, sid, m.id)) == 1

    # Rename with a precondition refers to the current content.
    r = ms.memories.update(m.id, memory_store_id=sid, path="/q.md", precondition=pre_ok)
    assert r.path == "/q.md"
    r = ms.memories.update(m.id, memory_store_id=sid, content="two", precondition=pre_ok)
    assert r.content_sha256 == sha("two")
    assert len(versions(ms, sid, m.id)) == 3

    # Precondition checked before path occupancy (reference 4.1).
    ms.memories.create(sid, path="/taken", content="")
    with pytest.raises(anthropic.ConflictError) as ei:
        ms.memories.update(m.id, memory_store_id=sid, path="/taken", precondition=pre_bad)
    assert ei.value.body["error"]["type"] == "memory_precondition_failed_error"

    for bad in (
        {"type": "content_sha256", "content_sha256": sha("two").upper()},
        {"type": "content_sha256", "content_sha256": "abc"},
        {"type": "content_sha256"},
        {"type": "etag", "content_sha256": sha("two")},
        {"type": "content_sha256", "content_sha256": sha("two"), "x": 1},
    ):
        with pytest.raises(anthropic.BadRequestError):
            ms.memories.update(m.id, memory_store_id=sid, content="three", precondition=bad)


def test_delete_with_expected_sha(api):
    ms, sid = api
    m = ms.memories.create(sid, path="/d.md", content="bye")
    with pytest.raises(anthropic.ConflictError) as ei:
        ms.memories.delete(m.id, memory_store_id=sid, expected_content_sha256=sha("other"))
    assert ei.value.body["error"]["type"] == "memory_precondition_failed_error"
    assert ei.value.response.headers["x-should-retry"] == "false"
    assert ms.memories.retrieve(m.id, memory_store_id=sid).content == "bye"
    with pytest.raises(anthropic.BadRequestError):
        ms.memories.delete(m.id, memory_store_id=sid, expected_content_sha256="XYZ")
    ms.memories.delete(m.id, memory_store_id=sid, expected_content_sha256=sha("bye"))
    vs = versions(ms, sid, m.id)
    assert [v.operation for v in vs] == ["deleted", "created"]
    d = vs[0]
    assert d.path == "/d.md" and d.content is None
    assert d.content_sha256 is None and d.content_size_bytes is None
    # The path is free again.
    ms.memories.create(sid, path="/d.md", content="again")


def _make_tree(ms, sid, paths):
    return {p: ms.memories.create(sid, path=p, content=p).id for p in paths}


def test_list_order_prefix_depth(api):
    ms, sid = api
    paths = [
        "/b.md",
        "/a/x.md",
        "/a/sub/deep/y.md",
        "/a/sub/z.md",
        "/a.md",
        "/a-b.md",
        "/Z.md",
        "/é.md",
        "/notes/todo.md",
        "/notes-archive/todo.md",
        "/a/sub2/w",
    ]
    _make_tree(ms, sid, paths)
    allp = [m.path for m in ms.memories.list(sid)]
    assert allp == sorted(paths, key=lambda p: p.encode())

    notes = [m.path for m in ms.memories.list(sid, path_prefix="/notes/")]
    assert notes == ["/notes/todo.md"]  # whole segments only
    assert [m.path for m in ms.memories.list(sid, path_prefix="/a/")] == [
        "/a/sub/deep/y.md",
        "/a/sub/z.md",
        "/a/sub2/w",
        "/a/x.md",
    ]
    assert list(ms.memories.list(sid, path_prefix="/nothing/")) == []

    root = [(i.type, i.path) for i in ms.memories.list(sid, depth=1)]
    assert root == [
        ("memory", "/Z.md"),
        ("memory", "/a-b.md"),
        ("memory", "/a.md"),
        ("memory_prefix", "/a/"),
        ("memory", "/b.md"),
        ("memory_prefix", "/notes-archive/"),
        ("memory_prefix", "/notes/"),
        ("memory", "/é.md"),
    ]
    sub = [(i.type, i.path) for i in ms.memories.list(sid, path_prefix="/a/", depth=1)]
    assert sub == [
        ("memory_prefix", "/a/sub/"),
        ("memory_prefix", "/a/sub2/"),
        ("memory", "/a/x.md"),
    ]
    assert [(i.type, i.path) for i in ms.memories.list(sid, path_prefix="/", depth=0)] == [
        ("memory", p) for p in allp
    ]
    # depth=1 pages: every page size gives the same sequence.
    for limit in (1, 2, 3):
        assert [(i.type, i.path) for i in ms.memories.list(sid, depth=1, limit=limit)] == root
        page = ms.memories.list(sid, depth=1, limit=limit)
        assert len(page.data) == limit and page.next_page

    for bad in (
        {"path_prefix": "/a"},
        {"path_prefix": "a/"},
        {"path_prefix": "//"},
        {"depth": 2},
        {"depth": -1},
        {"limit": 0},
        {"limit": 101},
        {"path_prefix": "/a/../"},
    ):
        with pytest.raises(anthropic.BadRequestError):
            ms.memories.list(sid, **bad)
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.list("memstore_missing")


def test_list_pagination_over_100(api):
    ms, sid = api
    paths = sorted((f"/dir{i % 3}/f{i:03d}.md" for i in range(130)), key=str.encode)
    for p in paths:
        ms.memories.create(sid, path=p, content=p)
    # SDK auto-pagination at the maximum page size.
    assert [m.path for m in ms.memories.list(sid, limit=100)] == paths
    # Manual next_page walk.
    seen, page = [], ms.memories.list(sid, limit=100)
    pages = 1
    while True:
        seen += [m.path for m in page.data]
        if not page.next_page:
            break
        page = ms.memories.list(sid, limit=100, page=page.next_page)
        pages += 1
    assert seen == paths and pages == 2
    # view=full silently caps the page at 20 and fills content.
    page = ms.memories.list(sid, view="full", limit=100)
    assert len(page.data) == 20 and page.next_page
    assert all(m.content == m.path for m in page.data)
    assert [m.path for m in ms.memories.list(sid, view="full", limit=50)] == paths
    # Default page size is 20.
    assert len(ms.memories.list(sid).data) == 20
    # Pagination stays consistent when memories are added behind and ahead of the cursor.
    first = ms.memories.list(sid, limit=50)
    ms.memories.create(sid, path="/dir0/a-first.md", content="")  # sorts before the cursor
    ms.memories.create(sid, path="/zzz.md", content="")  # after
    rest = [m.path for m in ms.memories.list(sid, limit=50, page=first.next_page)]
    assert rest == paths[50:] + ["/zzz.md"]
    # A memory-list cursor is tied to its query.
    with pytest.raises(anthropic.BadRequestError):
        ms.memories.list(sid, path_prefix="/dir0/", page=first.next_page)
    with pytest.raises(anthropic.BadRequestError):
        ms.memories.list(sid, depth=1, page=first.next_page)
