"""memfs.api against a real `memfs serve` process (the ``server`` fixture of conftest.py).

The convergence tests drive many creates/updates/renames/deletes through
injected faults with a small "settle" layer written here (what the sync
engine does above the client), then check with the official SDK that the
server holds exactly what we meant: no duplicates, no lost writes, and no
extra versions (a retried write that was already applied must be a no-op).
"""

from __future__ import annotations

import collections

import pytest
import trio

import memfs.api.client as client_mod
from memfs.api import (
    REFUSED,
    TRANSIENT,
    APIConnectionError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    Memory,
    MemoryPrefix,
    MemoryStore,
    MemoryStoresClient,
    NotFoundError,
    PathConflictError,
    PreconditionFailedError,
    content_sha256,
)

pytestmark = pytest.mark.timeout(120)

FAST = {"backoff_base": 0.005, "backoff_max": 0.05, "timeout": 10.0}


def make_client(server, **kw) -> MemoryStoresClient:
    opts = {"max_retries": 3, **FAST, **kw}
    return MemoryStoresClient(server.base_url, server.api_key, **opts)


async def run_limited(fns, limit: int = 8) -> None:
    """Run the zero-argument async callables concurrently, ``limit`` at a time."""
    sem = trio.Semaphore(limit)

    async def one(fn):
        async with sem:
            await fn()

    async with trio.open_nursery() as nursery:
        for fn in fns:
            nursery.start_soon(one, fn)


# --------------------------------------------------------------------------- settle helpers


async def again(fn, *args, **kw):
    """Call until it stops failing transiently (the engine's 'offline, retry later')."""
    for _ in range(50):
        try:
            return await fn(*args, **kw)
        except TRANSIENT:
            await trio.sleep(0.01)
    raise AssertionError("still failing after 50 rounds")


SETTLED: collections.Counter = collections.Counter()  # how writes were settled, for asserts


async def settle_create(c: MemoryStoresClient, store_id: str, path: str, content: str) -> str:
    """Create; a path conflict whose blocker holds exactly our content is our own lost create."""
    sha = content_sha256(content)
    for _ in range(50):
        try:
            return (await c.create_memory(store_id, path, content)).id
        except PathConflictError as exc:
            assert exc.conflicting_memory_id, exc
            other = await again(c.get_memory, store_id, exc.conflicting_memory_id)
            assert other.path == path and other.content_sha256 == sha, "a genuine conflict"
            SETTLED["create adopted"] += 1
            return other.id
        except TRANSIENT:
            SETTLED["transient"] += 1
            await trio.sleep(0.01)
    raise AssertionError("create did not settle")


async def settle_update(
    c: MemoryStoresClient,
    store_id: str,
    memory_id: str,
    base_sha: str,
    *,
    content: str | None = None,
    path: str | None = None,
    new_sha: str,
) -> None:
    """Update with a precondition; a precondition failure where the server already
    holds our new sha (and path) means our lost write landed."""
    for _ in range(50):
        try:
            m = await c.update_memory(
                store_id, memory_id, content=content, path=path, precondition_sha=base_sha
            )
            assert m.content_sha256 == new_sha
            return
        except PreconditionFailedError:
            cur = await again(c.get_memory, store_id, memory_id)
            assert cur.content_sha256 == new_sha, "a genuine conflict"
            assert path is None or cur.path == path
            SETTLED["update adopted"] += 1
            return
        except TRANSIENT:
            SETTLED["transient"] += 1
            await trio.sleep(0.01)
    raise AssertionError("update did not settle")


async def settle_delete(c: MemoryStoresClient, store_id: str, memory_id: str, sha: str) -> None:
    for _ in range(50):
        try:
            await c.delete_memory(store_id, memory_id, expected_sha=sha)
            return
        except NotFoundError:
            SETTLED["delete adopted"] += 1
            return  # an earlier round's delete landed (its response was lost)
        except TRANSIENT:
            SETTLED["transient"] += 1
            await trio.sleep(0.01)
    raise AssertionError("delete did not settle")


def sdk_memories(sdk, store_id: str) -> list:
    return list(sdk.beta.memory_stores.memories.list(store_id, view="full", limit=20))


def sdk_version_ops(sdk, store_id: str) -> collections.Counter:
    versions = sdk.beta.memory_stores.memory_versions.list(store_id, limit=100)
    return collections.Counter(v.operation for v in versions)


# --------------------------------------------------------------------------- every method


async def test_store_methods(server):
    async with make_client(server) as c:
        s = await c.create_store("Team Notes", description="shared", metadata={"a": "1", "b": "2"})
        assert isinstance(s, MemoryStore) and s.id.startswith("memstore_")
        assert (s.name, s.description, s.metadata, s.archived_at) == (
            "Team Notes",
            "shared",
            {"a": "1", "b": "2"},
            None,
        )
        assert await c.get_store(s.id) == s

        u = await c.update_store(s.id, name="Renamed", metadata={"a": None, "c": "3"})
        assert u.name == "Renamed" and u.description == "shared"
        assert u.metadata == {"b": "2", "c": "3"}
        u2 = await c.update_store(s.id, description="")
        assert u2.description == "" and u2.name == "Renamed"

        other = await c.create_store("Other")
        ids = [x.id async for x in c.list_stores()]
        assert s.id in ids and other.id in ids

        a = await c.archive_store(other.id)
        assert a.archived_at
        assert (await c.get_store(other.id)).archived_at == a.archived_at
        assert other.id not in [x.id async for x in c.list_stores()]
        assert other.id in [x.id async for x in c.list_stores(include_archived=True)]

        await c.delete_store(s.id)
        with pytest.raises(NotFoundError):
            await c.get_store(s.id)
        with pytest.raises(NotFoundError):
            await c.delete_store(s.id)


async def test_memory_methods(server):
    async with make_client(server) as c:
        st = (await c.create_store("mem")).id
        m = await c.create_memory(st, "/notes/todo.md", "buy milk\n")
        assert isinstance(m, Memory) and m.id.startswith("mem_")
        assert m.content is None  # view=basic by default
        assert m.content_sha256 == content_sha256("buy milk\n") and m.content_size_bytes == 9
        assert m.memory_store_id == st and m.memory_version_id.startswith("memver_")
        full = await c.create_memory(st, "/notes/done.md", "é", view="full")
        assert full.content == "é" and full.content_size_bytes == 2

        got = await c.get_memory(st, m.id)
        assert got.content == "buy milk\n" and got.path == "/notes/todo.md"
        assert (await c.get_memory(st, m.id, view="basic")).content is None
        assert (await c.find_memory(st, m.id)).content == "buy milk\n"

        # update with a precondition
        u = await c.update_memory(
            st, m.id, content="buy oat milk\n", precondition_sha=m.content_sha256
        )
        assert u.content_sha256 == content_sha256("buy oat milk\n")
        assert u.memory_version_id != m.memory_version_id
        with pytest.raises(PreconditionFailedError) as ei:
            await c.update_memory(st, m.id, content="stale", precondition_sha=m.content_sha256)
        assert ei.value.status == 409 and ei.value.request_id
        # The same write again is a no-op 200 even with the stale precondition.
        again_ = await c.update_memory(
            st, m.id, content="buy oat milk\n", precondition_sha=m.content_sha256
        )
        assert again_.memory_version_id == u.memory_version_id

        # rename keeps the id
        r = await c.update_memory(st, m.id, path="/archive/todo.md", view="full")
        assert r.id == m.id and r.path == "/archive/todo.md" and r.content == "buy oat milk\n"

        # path conflicts: same path, ancestor, descendant, rename onto occupied
        with pytest.raises(PathConflictError) as ei:
            await c.create_memory(st, "/archive/todo.md", "x")
        assert ei.value.conflicting_memory_id == m.id
        assert ei.value.conflicting_path == "/archive/todo.md"
        with pytest.raises(PathConflictError):
            await c.create_memory(st, "/archive/todo.md/deeper", "x")
        with pytest.raises(PathConflictError):
            await c.create_memory(st, "/archive", "x")
        with pytest.raises(PathConflictError):
            await c.update_memory(st, full.id, path="/archive/todo.md")

        # listing: recursive, prefix, depth=1
        items = [x async for x in c.list_memories(st)]
        assert [x.path for x in items] == ["/archive/todo.md", "/notes/done.md"]
        assert all(isinstance(x, Memory) and x.content is None for x in items)
        items = [x async for x in c.list_memories(st, path_prefix="/notes/", view="full")]
        assert [(x.path, x.content) for x in items] == [("/notes/done.md", "é")]
        await c.create_memory(st, "/top.md", "t")
        items = [x async for x in c.list_memories(st, path_prefix="/", depth=1)]
        assert items == [
            MemoryPrefix("/archive/"),
            MemoryPrefix("/notes/"),
            *[x for x in items if isinstance(x, Memory)],
        ]
        assert [x.path for x in items if isinstance(x, Memory)] == ["/top.md"]
        page = await c.list_memories_page(st, limit=2)
        assert len(page.data) == 2 and page.next_page
        page2 = await c.list_memories_page(st, limit=2, page=page.next_page)
        assert [x.path for x in page2.data] == ["/top.md"] and page2.next_page is None

        # delete with expected sha
        with pytest.raises(ConflictError):
            await c.delete_memory(st, m.id, expected_sha=m.content_sha256)
        await c.delete_memory(st, m.id, expected_sha=u.content_sha256)
        with pytest.raises(NotFoundError):
            await c.get_memory(st, m.id)
        assert await c.find_memory(st, m.id, view="basic") is None  # a 404 is an answer
        with pytest.raises(NotFoundError):
            await c.delete_memory(st, m.id)


async def test_version_methods(server):
    async with make_client(server) as c:
        st = (await c.create_store("versions")).id
        m = await c.create_memory(st, "/a.md", "one")
        await c.update_memory(st, m.id, content="two")
        await c.update_memory(st, m.id, path="/b.md")
        await c.delete_memory(st, m.id)

        vs = [v async for v in c.list_versions(st, memory_id=m.id)]
        assert [v.operation for v in vs] == ["deleted", "modified", "modified", "created"]
        assert all(v.memory_id == m.id and v.memory_store_id == st for v in vs)
        assert vs[0].content_sha256 is None and vs[0].path == "/b.md"
        assert vs[3].content is None  # basic view
        assert vs[3].created_by and vs[3].created_by.get("type") == "api_actor"
        created = [v async for v in c.list_versions(st, operation="created")]
        assert [v.id for v in created] == [vs[3].id]
        full = [v async for v in c.list_versions(st, memory_id=m.id, view="full")]
        assert full[3].content == "one"

        v = await c.get_version(st, vs[3].id)
        assert v.content == "one" and v.path == "/a.md"
        assert (await c.get_version(st, vs[3].id, view="basic")).content is None

        red = await c.redact_version(st, vs[3].id)
        assert red.redacted_at and red.content is None and red.path is None
        assert red.content_sha256 is None and red.content_size_bytes is None
        assert (await c.get_version(st, vs[3].id)).redacted_at == red.redacted_at
        with pytest.raises(NotFoundError):
            await c.get_version(st, "memver_doesnotexist")

        # The head of a live memory cannot be redacted.
        live = await c.create_memory(st, "/live.md", "x")
        with pytest.raises(APIStatusError) as ei:
            await c.redact_version(st, live.memory_version_id)
        assert 400 <= ei.value.status < 500


async def test_auth_and_validation_agree_with_server(server, monkeypatch):
    async with MemoryStoresClient(server.base_url, "wrong-key-123", **FAST) as c:
        with pytest.raises(AuthenticationError) as ei:
            await c.create_store("x")
        assert "wrong-key-123" not in str(ei.value) + repr(ei.value)
    async with MemoryStoresClient(server.base_url, None, **FAST) as c:
        with pytest.raises(AuthenticationError):
            _ = [s async for s in c.list_stores()]

    async with make_client(server) as c:
        st = (await c.create_store("v")).id
        bad = ["/a//b", "/a/", "rel", "/a/../b", "/x\x00y", "/cafe\u0301", "/" + "x" * 1025]
        client_side = {}
        for p in bad:
            with pytest.raises(BadRequestError) as ei:
                await c.create_memory(st, p, "x")
            assert ei.value.client_side
            client_side[p] = ei.value.type
        # Without client-side checks the server refuses the same way.
        monkeypatch.setattr(client_mod, "_check_path", lambda p, where="path": p)
        monkeypatch.setattr(client_mod, "_check_content", lambda content: content)
        for p in bad:
            with pytest.raises(BadRequestError) as ei:
                await c.create_memory(st, p, "x")
            assert not ei.value.client_side and ei.value.request_id
            assert ei.value.type == client_side[p] == "invalid_request_error"
        with pytest.raises(REFUSED):
            await c.create_memory(st, "/big", "x" * 102_401)
        assert [x async for x in c.list_memories(st)] == []


# --------------------------------------------------------------------------- pagination


async def test_pagination_over_100(server):
    n = 230
    async with make_client(server) as c:
        st = (await c.create_store("big")).id
        expected = {f"/d{i % 3}/m{i:04d}.md": f"content {i}\n" for i in range(n)}
        await run_limited(
            [lambda p=p, t=t: c.create_memory(st, p, t) for p, t in expected.items()], 16
        )

        before = c.stats["requests"]
        basic = [x async for x in c.list_memories(st)]
        assert c.stats["requests"] - before == 3  # 100 + 100 + 30
        assert [x.path for x in basic] == sorted(expected)
        assert len({x.id for x in basic}) == n

        before = c.stats["requests"]
        full = [x async for x in c.list_memories(st, view="full", limit=100)]
        assert c.stats["requests"] - before == 12  # clamped to 20 a page
        assert {x.path: x.content for x in full} == expected

        sub = [x async for x in c.list_memories(st, path_prefix="/d1/", limit=7)]
        assert [x.path for x in sub] == sorted(p for p in expected if p.startswith("/d1/"))
        top = [x async for x in c.list_memories(st, path_prefix="/", depth=1)]
        assert top == [MemoryPrefix("/d0/"), MemoryPrefix("/d1/"), MemoryPrefix("/d2/")]

        versions = [v async for v in c.list_versions(st, limit=100)]
        assert len(versions) == n and {v.operation for v in versions} == {"created"}

        for i in range(105):
            await c.create_store(f"s{i}")
        names = [s.name async for s in c.list_stores(limit=40)]
        assert len(names) == len(set(names)) >= 106


# --------------------------------------------------------------------------- restarts


async def test_persistence_across_restart(server):
    async with make_client(server) as c:
        st = (await c.create_store("persist")).id
        m = await c.create_memory(st, "/keep.md", "kept\n")
        await c.update_memory(st, m.id, content="kept v2\n")

        server.restart()
        # The pooled keep-alive connection is dead now: the client must cope.
        got = await c.get_memory(st, m.id)
        assert got.content == "kept v2\n"
        assert (await c.get_store(st)).name == "persist"
        assert [v.operation async for v in c.list_versions(st)] == ["modified", "created"]

        server.kill()
        c.max_retries = 1
        with pytest.raises(APIConnectionError) as ei:
            await c.get_memory(st, m.id)
        assert ei.value.status is None and isinstance(ei.value, TRANSIENT)
        server.start()
        c.max_retries = 3
        assert (await c.get_memory(st, m.id)).content == "kept v2\n"


async def test_lost_create_response_is_settled_by_content(server):
    async with make_client(server, max_retries=0) as c:
        st = (await c.create_store("lost")).id
        server.set_faults(drop_rate=1.0)
        with pytest.raises(APIConnectionError):
            await c.create_memory(st, "/x.md", "mine")
        server.clear_faults()
        with pytest.raises(PathConflictError) as ei:
            await c.create_memory(st, "/x.md", "mine")
        other = await c.get_memory(st, ei.value.conflicting_memory_id)
        assert other.content_sha256 == content_sha256("mine")
        # A retried delete whose first attempt landed is reported as success.
        c.max_retries = 2
        server.set_faults(drop_rate=1.0)
        with pytest.raises(APIConnectionError):
            await c.delete_memory(st, other.id)  # every attempt is dropped
        server.clear_faults()
        with pytest.raises(NotFoundError):
            await c.get_memory(st, other.id)


async def test_timeout_is_a_connection_error(server):
    async with make_client(server, timeout=0.2, max_retries=1) as c:
        st = (await c.create_store("slow")).id
        server.set_faults(latency=0.6)
        with pytest.raises(APIConnectionError) as ei:
            await c.get_store(st)
        assert "Timeout" in str(ei.value)
        assert c.stats["retries"] >= 1
        server.clear_faults()


# --------------------------------------------------------------------------- convergence


FAULTS = {
    "errors_503": {"error_rate": 0.3, "error_status": 503},
    "overloaded_529": {"error_rate": 0.3, "error_status": 529},
    "rate_limited": {"rate_429": 0.3, "retry_after": 0.02},
    "latency": {"latency": 0.01},
    "drops": {"drop_rate": 0.3},
    "errors_after_commit": {"error_after_rate": 0.3, "error_after_status": 502},
    "everything": {
        "error_rate": 0.15,
        "rate_429": 0.15,
        "retry_after": 0.01,
        "drop_rate": 0.15,
        "latency": 0.002,
    },
}


@pytest.mark.parametrize("kind", list(FAULTS))
async def test_convergence_under_faults(server, kind):
    n, renamed, deleted = 40, range(0, 10), range(30, 40)
    SETTLED.clear()
    async with make_client(server) as c:
        st = (await c.create_store(f"faults-{kind}")).id
        server.set_faults(**FAULTS[kind])

        v1 = {i: f"note {i} v1\n" for i in range(n)}
        v2 = {i: f"note {i} v2 " + "x" * i + "\n" for i in range(n)}
        path = {i: f"/d{i % 4}/note{i}.md" for i in range(n)}
        ids: dict[int, str] = {}

        async def create(i):
            ids[i] = await settle_create(c, st, path[i], v1[i])

        async def update(i):
            await settle_update(
                c, st, ids[i], content_sha256(v1[i]), content=v2[i], new_sha=content_sha256(v2[i])
            )

        async def rename(i):
            path[i] = f"/renamed/note{i}.md"
            sha = content_sha256(v2[i])
            await settle_update(c, st, ids[i], sha, path=path[i], new_sha=sha)

        async def delete(i):
            await settle_delete(c, st, ids[i], content_sha256(v2[i]))

        await run_limited([lambda i=i: create(i) for i in range(n)])
        await run_limited([lambda i=i: update(i) for i in range(n)])
        await run_limited([lambda i=i: rename(i) for i in renamed])
        await run_limited([lambda i=i: delete(i) for i in deleted])

        server.clear_faults()
        stats = dict(c.stats)

    if kind != "latency":
        # The faults did bite: the client retried (a read, a delete, a 429), or the caller
        # saw the failure (a create or an update that may have been applied is never sent
        # again by the client: whether one did, with 10 deletes among 130 requests, is luck).
        assert stats["retries"] + SETTLED["transient"] > 0, (stats, SETTLED)
    if "drop_rate" in FAULTS[kind] or "error_after_rate" in FAULTS[kind]:
        # Creates whose response was lost (or answered a 502 though applied) were retried
        # into a 409 and adopted.
        assert SETTLED["create adopted"] > 0, SETTLED
    print(kind, stats, dict(SETTLED))

    sdk = server.sdk()
    mems = sdk_memories(sdk, st)
    got = {m.path: (m.id, m.content) for m in mems}
    assert len(got) == len(mems), "duplicate paths"
    expected = {path[i]: (ids[i], v2[i]) for i in range(n) if i not in deleted}
    assert got == expected
    # Exactly one version per intended write: a retried write that had already
    # landed must not have written again.
    ops = sdk_version_ops(sdk, st)
    assert ops == {"created": n, "modified": n + len(renamed), "deleted": len(deleted)}
