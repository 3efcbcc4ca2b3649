"""The sync engine without the kernel: `StoreEngine` (State + BlobCache + the FUSE parts +
Pusher + Reconciler, wired as the daemon wires them) behind a router, against a real
`memfs serve` (s3ql style).

Every test drives the handlers (tests/fs_helpers.py) and then runs explicit
passes (`await eng.push(...)`, `await eng.reconcile()`), so what goes over the
wire is deterministic: the write-back delay is 0, the delete delay is an hour,
and "time passing" is simulated by ageing the tombstones (`eng.age()`), never
by sleeping or asserting on the clock.

Calls are counted by wrapping the client's create/update/delete methods
(`eng.calls`), and checked against the server's own version history.
"""

from __future__ import annotations

import errno
import os

import pytest
import trio
from fs_helpers import ROOT, FsEnv, b, fuse_errno

from memfs.api.client import MemoryStoresClient
from memfs.core import paths
from memfs.core.mountconfig import MountConfig, SyncOptions
from memfs.mount.engine import StoreEngine
from memfs.mount.router import Router
from memfs.state.blobs import sha256
from memfs.state.report import pending
from memfs.state.state import State
from memfs.sync.pusher import delete_cap

HOUR = 3600.0


class Engine:
    """One mount's sync machinery (`StoreEngine`, as the daemon builds it), minus FUSE
    and the background loops."""

    def __init__(self, tmp, server, store_id: str, **options) -> None:
        self._made_with = (tmp, options)
        opts = {"write_back_delay": 0.0, "delete_delay": HOUR, "poll_interval": 1.0,
                "prefetch": False, **options}
        self.server = server
        self.store_id = store_id
        cfg = MountConfig(base_url=server.base_url, options=SyncOptions(**opts),
                          store_id=store_id, mountpoint=str(tmp / "mnt"), state_dir=str(tmp))
        self.client = MemoryStoresClient(server.base_url, server.api_key, max_retries=0)
        self.engine = StoreEngine(cfg, self.client)
        self.state, self.cache = self.engine.state, self.engine.cache
        self.ops = Router()  # what the daemon mounts: a router over the store's parts
        self.ops.add(self.engine.fs)
        self.ctx = self.engine.ctx
        self.fs = FsEnv(tmp, self.state, self.cache, self.ops)
        self.pusher = self.engine.pusher
        self.reconciler = self.engine.reconciler
        self.calls: list[tuple[str, tuple, dict]] = []
        for name in ("create_memory", "update_memory", "delete_memory"):
            self._record(name)
        # A second, unrecorded client: "someone else" and the test's own checks.
        self.other = MemoryStoresClient(server.base_url, server.api_key, max_retries=0)

    def _record(self, name: str) -> None:
        orig = getattr(self.client, name)

        async def wrapper(*args, **kw):
            self.calls.append((name, args, kw))
            return await orig(*args, **kw)

        setattr(self.client, name, wrapper)

    def take_calls(self) -> list[str]:
        """Names of the mutating calls since the last take, e.g. ['create', 'update']."""
        names = [c[0].split("_")[0] for c in self.calls]
        self.calls.clear()
        return names

    async def push(self, *, flush: bool = False):
        return await self.pusher.push_pass(flush=flush)

    async def reconcile(self) -> None:
        await self.reconciler.reconcile_pass()

    def age(self, seconds: float = 2 * HOUR) -> None:
        """Pretend the tombstones were deleted `seconds` earlier."""
        for tomb in self.state.tombstones.values():
            tomb.deleted_at -= seconds

    # -- local operations -----------------------------------------------------

    async def write(self, path: str, data: bytes) -> int:
        node = self.state.lookup_path(path)
        if node is None:
            d, name = paths.split(path)
            parent = self.state.lookup_path(d)
            assert parent is not None, d
            _fh, attr = await self.fs.create(parent.ino, name, data)
            return attr.st_ino
        await self.fs.write_file(node.ino, data)
        return node.ino

    async def read(self, path: str) -> bytes:
        return await self.fs.read_all(self.fs.ino(path))

    async def unlink(self, path: str) -> None:
        d, name = paths.split(path)
        await self.ops.unlink(self.fs.ino(d), b(name), None)

    async def rename(self, src: str, dst: str) -> None:
        sd, sn = paths.split(src)
        dd, dn = paths.split(dst)
        await self.ops.rename(self.fs.ino(sd), b(sn), self.fs.ino(dd), b(dn), 0, None)

    # -- the server's view ------------------------------------------------------

    async def remote(self) -> dict[str, tuple[str, str]]:
        """{path: (memory id, content)} on the server."""
        out = {}
        async for m in self.other.list_memories(self.store_id, view="full", limit=20):
            out[m.path] = (m.id, m.content)
        return out

    async def remote_count(self) -> int:
        n = 0
        async for _m in self.other.list_memories(self.store_id, view="basic", limit=100):
            n += 1
        return n

    async def operations(self, memory_id: str) -> list[str]:
        """The memory's version operations, oldest first."""
        ops = [v.operation async for v in self.other.list_versions(
            self.store_id, memory_id=memory_id)]
        return list(reversed(ops))

    async def close(self) -> None:
        await self.client.aclose()
        await self.other.aclose()
        self.engine.close()

    async def restart(self) -> None:
        """The daemon stopped and started again: everything in memory gone, a new
        engine over the state directory as it was left (state.db, the blob cache)."""
        await self.close()
        tmp, options = self._made_with
        self.__init__(tmp, self.server, self.store_id, **options)


@pytest.fixture
async def make_engine(server, tmp_path):
    made: list[Engine] = []

    async def make(**options) -> Engine:
        client = MemoryStoresClient(server.base_url, server.api_key, max_retries=0)
        store = await client.create_store(f"engine-{len(made)}")
        await client.aclose()
        d = tmp_path / f"engine{len(made)}"
        d.mkdir()
        eng = Engine(d, server, store.id, **options)
        made.append(eng)
        return eng

    yield make
    server.clear_faults()
    for eng in made:
        await eng.close()


@pytest.fixture
async def eng(make_engine) -> Engine:
    return await make_engine()


# -- coalescing, renames ------------------------------------------------------------


async def test_create_is_one_create_call(eng):
    await eng.write("/a.md", b"hello")
    result = await eng.push()
    assert result.pushed == 1 and result.left == 0 and result.offline is None
    assert eng.take_calls() == ["create"]
    remote = await eng.remote()
    assert {p: c for p, (_i, c) in remote.items()} == {"/a.md": "hello"}
    node = eng.fs.node("/a.md")
    assert node.memory_id == remote["/a.md"][0] and node.base_sha == sha256(b"hello")
    assert eng.state.sync_state(node) == "synced"
    # Nothing left: another pass sends nothing.
    assert (await eng.push()).pushed == 0
    assert eng.take_calls() == []


async def test_ten_saves_coalesce_into_one_update(eng):
    await eng.write("/a.md", b"v0")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    eng.take_calls()
    for i in range(1, 11):
        await eng.write("/a.md", f"v{i}".encode())
    await eng.push()
    assert eng.take_calls() == ["update"]
    assert (await eng.remote())["/a.md"] == (mid, "v10")
    assert await eng.operations(mid) == ["created", "modified"]


async def test_create_then_saves_before_push_is_one_create(eng):
    for i in range(10):
        await eng.write("/a.md", f"v{i}".encode())
    await eng.push()
    assert eng.take_calls() == ["create"]


async def test_rename_is_one_update_keeping_the_id(eng):
    await eng.write("/a.md", b"text")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    eng.take_calls()
    await eng.fs.mkdir(ROOT, "dir")
    await eng.rename("/a.md", "/dir/b.md")
    await eng.push()
    assert eng.take_calls() == ["update"]
    assert await eng.remote() == {"/dir/b.md": (mid, "text")}
    assert await eng.operations(mid) == ["created", "modified"]
    assert eng.fs.node("/dir/b.md").memory_id == mid


async def test_rename_and_edit_is_one_update(eng):
    await eng.write("/a.md", b"one")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    eng.take_calls()
    await eng.rename("/a.md", "/b.md")
    await eng.write("/b.md", b"two")
    await eng.push()
    assert eng.take_calls() == ["update"]
    assert await eng.remote() == {"/b.md": (mid, "two")}


async def test_directory_rename_moves_every_memory(eng):
    await eng.fs.mkdir(ROOT, "d")
    for n in ("x", "y", "z"):
        await eng.write(f"/d/{n}", n.encode())
    await eng.push()
    ids = {n: eng.fs.node(f"/d/{n}").memory_id for n in ("x", "y", "z")}
    eng.take_calls()
    await eng.rename("/d", "/e")
    await eng.push()
    assert eng.take_calls() == ["update"] * 3
    assert await eng.remote() == {f"/e/{n}": (ids[n], n) for n in ("x", "y", "z")}


async def test_atomic_save_before_push_is_one_update(eng):
    await eng.write("/x.md", b"v1")
    await eng.push()
    mid = eng.fs.node("/x.md").memory_id
    eng.take_calls()
    await eng.write("/x.md.tmp", b"v2")
    await eng.rename("/x.md.tmp", "/x.md")
    await eng.push()
    assert eng.take_calls() == ["update"]
    assert await eng.remote() == {"/x.md": (mid, "v2")}
    assert await eng.operations(mid) == ["created", "modified"]


async def test_rename_over_existing_keeps_target_id_and_deletes_source_later(eng):
    await eng.write("/x.md", b"v1")
    await eng.push()
    x_id = eng.fs.node("/x.md").memory_id
    # The temp file reached the server before the rename (a slow editor).
    await eng.write("/x.md.new", b"v2")
    await eng.push()
    tmp_id = eng.fs.node("/x.md.new").memory_id
    assert tmp_id and tmp_id != x_id
    eng.take_calls()

    await eng.rename("/x.md.new", "/x.md")
    node = eng.fs.node("/x.md")
    assert node.memory_id == x_id  # the target keeps its identity
    await eng.push()
    assert eng.take_calls() == ["update"]  # the source's delete waits
    remote = await eng.remote()
    assert remote["/x.md"] == (x_id, "v2")
    assert remote["/x.md.new"] == (tmp_id, "v2")
    assert tmp_id in eng.state.tombstones

    eng.age()
    await eng.push()
    assert eng.take_calls() == ["delete"]
    assert await eng.remote() == {"/x.md": (x_id, "v2")}
    assert await eng.operations(x_id) == ["created", "modified"]
    assert await eng.operations(tmp_id) == ["created", "deleted"]
    assert not eng.state.tombstones


# -- the delete delay ----------------------------------------------------------------


async def test_delete_then_recreate_in_window_is_one_update(eng):
    await eng.write("/a.md", b"old")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    eng.take_calls()
    await eng.unlink("/a.md")
    await eng.push()
    assert eng.take_calls() == []  # the delete waits out its delay
    await eng.write("/a.md", b"new")
    assert eng.fs.node("/a.md").memory_id == mid  # revived
    assert not eng.state.tombstones
    eng.age()
    await eng.push()
    assert eng.take_calls() == ["update"]
    assert await eng.remote() == {"/a.md": (mid, "new")}
    assert await eng.operations(mid) == ["created", "modified"]


async def test_delete_waits_for_the_delay_then_goes_with_precondition(eng):
    await eng.write("/a.md", b"doomed")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    eng.take_calls()
    await eng.unlink("/a.md")
    for _ in range(3):
        result = await eng.push()
        assert result.left == 1
    await eng.reconcile()  # the listing still shows it: our delete is pending
    assert eng.state.lookup_path("/a.md") is None
    assert eng.take_calls() == []
    assert "/a.md" in await eng.remote()
    assert [d["path"] for d in pending(eng.state)["deletes"]] == ["/a.md"]

    eng.age()
    result = await eng.push()
    assert result.pushed == 1 and result.left == 0
    assert [c[0] for c in eng.calls] == ["delete_memory"]
    assert eng.calls[0][2]["expected_sha"] == sha256(b"doomed")
    assert await eng.remote() == {}
    assert await eng.operations(mid) == ["created", "deleted"]


async def test_delete_of_changed_remote_restores_the_server_version(eng):
    await eng.write("/a.md", b"mine")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.unlink("/a.md")
    await eng.other.update_memory(eng.store_id, mid, content="theirs")
    eng.age()
    await eng.push()
    await eng.reconcile()
    assert await eng.remote() == {"/a.md": (mid, "theirs")}
    assert await eng.read("/a.md") == b"theirs"


async def test_per_pass_delete_cap(eng):
    n = 200
    limiter = trio.CapacityLimiter(16)

    async def make(i: int) -> None:
        async with limiter:
            await eng.other.create_memory(eng.store_id, f"/f{i:03d}", f"c{i}")

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(make, i)
    await eng.reconcile()
    assert len(eng.state.by_memory) == n
    for i in range(n):
        await eng.unlink(f"/f{i:03d}")
    eng.age()
    sent_per_pass = []
    while eng.state.tombstones:
        known = len(eng.state.by_memory) + len(eng.state.tombstones)
        before = len(eng.calls)
        result = await eng.push()
        assert result.offline is None
        sent = len(eng.calls) - before
        assert 0 < sent <= max(8, min(50, known // 4)) == delete_cap(known)
        sent_per_pass.append(sent)
        assert len(sent_per_pass) < 40
    assert sent_per_pass[0] == 50
    assert sum(sent_per_pass) == n
    assert await eng.remote_count() == 0


@pytest.mark.parametrize("mode", ["log-only", "disabled"])
async def test_deletes_log_only_and_disabled_never_delete(make_engine, mode):
    eng = await make_engine(deletes=mode)
    await eng.write("/a.md", b"keep")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    eng.take_calls()
    await eng.unlink("/a.md")
    eng.age()
    for _ in range(2):
        await eng.push()
    await eng.pusher.flush(10)
    assert eng.take_calls() == []
    assert await eng.remote() == {"/a.md": (mid, "keep")}
    assert eng.state.lookup_path("/a.md") is None  # still deleted locally
    # Status lists the delete without a due time: none is ever sent (it said "due in").
    [delete] = eng.engine.status()["pending"]["deletes"]
    assert delete["path"] == "/a.md" and "due_at" not in delete


async def test_a_read_only_mount_shows_no_due_time_for_a_delete_it_never_sends(eng):
    """A delete left pending by an earlier read-write mount, seen from a read-only one."""
    await eng.write("/a.md", b"keep")
    await eng.push()
    await eng.unlink("/a.md")
    [due] = pending(eng.state, delete_delay=30.0)["deletes"]
    [kept] = pending(eng.state, delete_delay=30.0, read_only=True)["deletes"]
    assert due["due_at"] == due["deleted_at"] + 30.0 and "due_at" not in kept


# -- lost responses --------------------------------------------------------------------


async def test_lost_create_response_settles_without_duplicate(eng, server):
    await eng.write("/a.md", b"once")
    server.set_faults(drop_rate=1.0)
    result = await eng.push()
    assert result.offline is not None and result.pushed == 0
    server.clear_faults()
    assert "/a.md" in await eng.remote()  # it landed, unheard
    result = await eng.push()
    assert result.offline is None and result.left == 0
    remote = await eng.remote()
    assert list(remote) == ["/a.md"] and remote["/a.md"][1] == "once"
    assert eng.fs.node("/a.md").memory_id == remote["/a.md"][0]
    assert eng.state.conflicts() == []
    await eng.reconcile()
    assert eng.state.conflicts() == [] and await eng.read("/a.md") == b"once"


async def test_lost_create_response_then_listing_adopts(eng, server):
    await eng.write("/a.md", b"once")
    server.set_faults(drop_rate=1.0)
    assert (await eng.push()).offline is not None
    server.clear_faults()
    await eng.reconcile()  # the listing shows our sha at our path: adopt
    node = eng.fs.node("/a.md")
    assert node.memory_id is not None and not eng.state.is_dirty(node)
    eng.take_calls()
    await eng.push()
    assert eng.take_calls() == []
    assert eng.state.conflicts() == []
    assert await eng.remote_count() == 1


async def test_lost_update_response_no_false_conflict(eng, server):
    await eng.write("/a.md", b"v1")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.write("/a.md", b"v2")
    server.set_faults(drop_rate=1.0)
    assert (await eng.push()).offline is not None
    server.clear_faults()
    # Edited again before the retry: the precondition (v1) no longer matches.
    await eng.write("/a.md", b"v3")
    for _ in range(3):
        result = await eng.push()
        assert result.offline is None
    assert eng.state.conflicts() == []
    assert await eng.remote() == {"/a.md": (mid, "v3")}
    assert not eng.state.is_dirty(eng.fs.node("/a.md"))


async def test_lost_update_response_retry_is_noop(eng, server):
    await eng.write("/a.md", b"v1")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.write("/a.md", b"v2")
    server.set_faults(drop_rate=1.0)
    assert (await eng.push()).offline is not None
    server.clear_faults()
    await eng.reconcile()  # sees v2 = our sent sha: adopt, not a conflict
    await eng.push()
    assert eng.state.conflicts() == []
    assert await eng.remote() == {"/a.md": (mid, "v2")}
    assert await eng.operations(mid) == ["created", "modified"]


async def test_lost_delete_response(eng, server):
    await eng.write("/a.md", b"x")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.unlink("/a.md")
    eng.age()
    server.set_faults(drop_rate=1.0)
    result = await eng.push()
    assert result.offline is not None
    assert mid in eng.state.tombstones  # outcome unknown: kept
    server.clear_faults()
    result = await eng.push()
    assert result.offline is None and not eng.state.tombstones
    await eng.reconcile()
    assert await eng.remote() == {}
    assert eng.state.lookup_path("/a.md") is None
    assert eng.state.conflicts() == []
    assert await eng.operations(mid) == ["created", "deleted"]


# -- conflicts and remote deletes ------------------------------------------------------


async def test_precondition_failure_is_a_conflict_server_wins(eng):
    await eng.write("/a.md", b"base")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.other.update_memory(eng.store_id, mid, content="stranger")
    await eng.write("/a.md", b"mine")
    await eng.push()
    conflicts = eng.state.conflicts()
    assert len(conflicts) == 1
    c = conflicts[0]
    assert c["path"] == "/a.md" and c["memory_id"] == mid
    assert c["local_sha"] == sha256(b"mine") and c["remote_sha"] == sha256(b"stranger")
    assert eng.cache.get(c["local_sha"]) == b"mine"  # preserved
    assert await eng.read("/a.md") == b"stranger"
    node = eng.fs.node("/a.md")
    assert not eng.state.is_dirty(node)
    eng.take_calls()
    await eng.push()
    assert eng.take_calls() == []
    assert await eng.remote() == {"/a.md": (mid, "stranger")}


async def test_reconcile_conflict_on_dirty_file(eng):
    await eng.write("/a.md", b"base")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.other.update_memory(eng.store_id, mid, content="stranger")
    await eng.write("/a.md", b"mine")
    await eng.reconcile()
    assert [c["local_sha"] for c in eng.state.conflicts()] == [sha256(b"mine")]
    assert await eng.read("/a.md") == b"stranger"


async def test_remote_change_to_clean_file_moves_base(eng):
    await eng.write("/a.md", b"base")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.other.update_memory(eng.store_id, mid, content="newer", path="/b.md")
    await eng.reconcile()
    assert eng.state.lookup_path("/a.md") is None
    assert await eng.read("/b.md") == b"newer"
    assert eng.state.conflicts() == []
    eng.take_calls()
    await eng.push()
    assert eng.take_calls() == []


async def test_update_of_remotely_deleted_file_recreates_it(eng):
    await eng.write("/a.md", b"base")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.other.delete_memory(eng.store_id, mid)
    await eng.write("/a.md", b"edited here")
    eng.take_calls()
    for _ in range(2):
        await eng.push()
    assert eng.take_calls() == ["update", "create"]
    remote = await eng.remote()
    assert list(remote) == ["/a.md"] and remote["/a.md"][1] == "edited here"
    assert remote["/a.md"][0] != mid
    assert eng.fs.node("/a.md").memory_id == remote["/a.md"][0]


async def test_remote_delete_of_dirty_file_recreates_via_reconcile(eng):
    await eng.write("/a.md", b"base")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.other.delete_memory(eng.store_id, mid)
    await eng.write("/a.md", b"edited")
    await eng.reconcile()
    await eng.push()
    remote = await eng.remote()
    assert [c for _i, c in remote.values()] == ["edited"]


async def test_remote_delete_of_clean_file_removes_it(eng):
    await eng.write("/d.md", b"x")
    await eng.push()
    await eng.other.delete_memory(eng.store_id, eng.fs.node("/d.md").memory_id)
    await eng.reconcile()
    assert eng.state.lookup_path("/d.md") is None
    eng.take_calls()
    await eng.push()
    assert eng.take_calls() == []


async def test_rename_onto_a_path_whose_memory_changed_remotely(eng):
    """`rm b; mv a b` while someone edits b on the server: the server's edit wins the
    path, a's content is kept as a conflict, and a's own memory goes (no loop)."""
    await eng.write("/a.md", b"mine\n")
    await eng.write("/b.md", b"theirs v1\n")
    await eng.push()
    mid_a = eng.fs.node("/a.md").memory_id
    mid_b = eng.fs.node("/b.md").memory_id
    await eng.unlink("/b.md")
    await eng.rename("/a.md", "/b.md")
    await eng.other.update_memory(eng.store_id, mid_b, content="theirs v2\n")
    await eng.push()  # the early delete of b meets the remote edit: b stays
    await eng.push()  # the rename meets b: the server's memory wins the path
    node = eng.fs.node("/b.md")
    assert node.memory_id == mid_b
    assert await eng.read("/b.md") == b"theirs v2\n"
    [conflict] = eng.state.conflicts()
    assert conflict["path"] == "/b.md"
    assert eng.cache.get(conflict["local_sha"]) == b"mine\n"
    eng.age()
    await eng.push()
    assert await eng.remote() == {"/b.md": (mid_b, "theirs v2\n")}
    assert mid_a not in eng.state.tombstones
    assert eng.pusher.next_due_in() is None


# -- refusals ---------------------------------------------------------------------------


async def test_non_utf8_is_refused_until_content_changes(eng):
    await eng.write("/bin.dat", b"\xff\xfe\x00binary")
    await eng.push()
    node = eng.fs.node("/bin.dat")
    assert eng.state.sync_state(node) == "refused"
    assert "UTF-8" in node.refused_reason
    assert await eng.read("/bin.dat") == b"\xff\xfe\x00binary"  # kept
    assert eng.pusher.next_due_in() is None  # nothing to retry
    await eng.push(flush=True)
    assert eng.take_calls() == []
    assert await eng.remote() == {}
    await eng.write("/bin.dat", b"text now")
    await eng.push()
    assert eng.take_calls() == ["create"]
    assert (await eng.remote())["/bin.dat"][1] == "text now"
    assert eng.state.sync_state(eng.fs.node("/bin.dat")) == "synced"


async def test_refused_content_still_follows_a_rename(eng):
    """A synced file whose new content is refused keeps its memory, and that memory
    still moves with the file, so the old path is free for another file."""
    await eng.write("/notes.md", b"text\n")
    await eng.push()
    mid = eng.fs.node("/notes.md").memory_id
    eng.take_calls()
    await eng.write("/notes.md", b"\xff binary now")
    await eng.push()
    assert eng.take_calls() == []  # refused: nothing sent
    await eng.rename("/notes.md", "/old-notes.md")
    await eng.push()
    assert eng.take_calls() == ["update"]  # the path only
    remote = await eng.remote()
    assert remote == {"/old-notes.md": (mid, "text\n")}
    node = eng.fs.node("/old-notes.md")
    assert eng.state.sync_state(node) == "refused"
    assert eng.pusher.next_due_in() is None  # settled: nothing retried
    await eng.write("/notes.md", b"a new file at the old path\n")
    await eng.push()
    assert eng.take_calls() == ["create"]
    assert (await eng.remote())["/notes.md"][1] == "a new file at the old path\n"


async def test_oversize_is_refused_locally(eng):
    ino = await eng.write("/big.md", b"small")
    await eng.push()
    eng.take_calls()
    big = b"a" * (paths.MAX_CONTENT_BYTES + 1)
    assert await fuse_errno(eng.ops.write(
        (await eng.fs.open(ino, os.O_WRONLY)).fh, 0, big)) == errno.EFBIG
    # Grown behind the handlers' back (e.g. an older state.db): refused, kept.
    node = eng.fs.node("/big.md")
    eng.state.set_content(node, eng.cache.put(big), len(big))
    await eng.push()
    assert eng.state.sync_state(node) == "refused"
    assert eng.take_calls() == []
    assert (await eng.remote())["/big.md"][1] == "small"


async def test_server_refusal_is_not_retried(eng, monkeypatch):
    """A 400 from the server itself (client-side checks bypassed)."""
    import memfs.api.client as client_mod
    import memfs.sync.pusher as pusher_mod

    monkeypatch.setattr(client_mod, "_check_content", lambda c: c)
    monkeypatch.setattr(pusher_mod.paths, "content_error", lambda d: None)
    big = b"a" * (paths.MAX_CONTENT_BYTES + 1)
    await eng.write("/ok.md", b"fine")
    node_ino = await eng.write("/big.md", b"x")
    node = eng.state.nodes[node_ino]
    eng.state.set_content(node, eng.cache.put(big), len(big))
    result = await eng.push()
    assert result.offline is None
    assert sorted(eng.take_calls()) == ["create", "create"]
    assert eng.state.sync_state(node) == "refused"
    assert node.refused_reason
    await eng.push(flush=True)
    assert eng.take_calls() == []
    monkeypatch.undo()
    await eng.write("/big.md", b"y")
    await eng.push()
    assert eng.take_calls() == ["create"]
    assert {p: c for p, (_i, c) in (await eng.remote()).items()} == {
        "/ok.md": "fine", "/big.md": "y"}


# -- the final flush ----------------------------------------------------------------------


async def test_the_final_flush_saves_open_buffers_before_and_after_it(eng):
    """Unmount with files open and unsaved (docs/SEMANTICS.md, unmount): what write()
    took is saved and pushed, and named; a write that lands in an open buffer after the
    flush's last round is saved after it, journaled, counted as left."""
    ino = await eng.write("/a.md", b"v1")
    late_ino = await eng.write("/b.md", b"w1")
    assert (await eng.push()).left == 0
    fi = await eng.ops.open(ino, os.O_WRONLY | os.O_TRUNC, None)
    await eng.ops.write(fi.fh, 0, b"unsaved")
    late = await eng.ops.open(late_ino, os.O_WRONLY, None)
    files = eng.engine.fs.files
    flush = eng.pusher.flush

    async def flush_meanwhile(timeout: float):
        result = await flush(timeout)
        of = files._open[late_ino]  # a write that was awaiting its fetch lands
        of.data = bytearray(b"w2")
        files._set_dirty(of, True)
        return result

    eng.pusher.flush = flush_meanwhile
    done = await eng.engine.final_flush(5.0)
    assert [i["path"] for i in done["saved_open"]] == ["/a.md", "/b.md"]
    assert (done["pushed"], done["left"]) == (1, 1)
    assert (await eng.remote())["/a.md"][1] == "unsaved"
    assert await eng.fs.read_all(late_ino) == b"w2"  # journaled for the next mount
    assert [u["path"] for u in pending(eng.state)["updates"]] == ["/b.md"]
    await eng.ops.release(late.fh)
    await eng.ops.release(fi.fh)


async def test_an_open_buffer_the_final_flush_cannot_save_is_said_not_pushed(eng):
    """The disk refuses the save of a file still open at unmount: it is lost with the
    daemon, and the unmount names it as not on the server (exit status 3)."""
    ino = await eng.write("/a.md", b"v1")
    assert (await eng.push()).left == 0
    fi = await eng.ops.open(ino, os.O_WRONLY | os.O_TRUNC, None)
    await eng.ops.write(fi.fh, 0, b"unsaved")

    def full(data: bytes) -> str:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    eng.engine.fs.files.cache.stage = full
    done = await eng.engine.final_flush(5.0)
    assert done["saved_open"] == []
    assert done["not_pushed"] == [{"path": "/a.md", "reason": "open with unsaved writes at "
                                   "unmount, which could not be saved (No space left on "
                                   "device)"}]


async def test_the_final_flush_cancels_a_pass_that_does_not_end_in_its_time(eng):
    """A pass under way whose request is never answered (a server that takes it and
    hangs) held the unmount past its --timeout, up to the request's own timeout; the
    final flush now gives it the flush's bound, then cancels it (its requests journaled
    in doubt, as after a crash) and flushes within what is left."""
    await eng.write("/a.md", b"v1")
    started = trio.Event()
    push_pass = eng.pusher.push_pass

    async def stuck_once(**kw):
        if not started.is_set():
            started.set()
            await trio.sleep_forever()  # the answer that never comes
        return await push_pass(**kw)

    eng.pusher.push_pass = stuck_once
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eng.pusher.run)
        await started.wait()
        with trio.fail_after(60):  # a hang detector: without the bound it never returns
            done = await eng.engine.final_flush(0.5)
    # The stuck pass took the whole bound: nothing pushed, the file journaled and said.
    assert (done["pushed"], done["left"]) == (0, 1)
    assert [c["path"] for c in pending(eng.state)["creates"]] == ["/a.md"]
    assert (await eng.pusher.flush(10.0)).left == 0  # as the next mount sends it
    assert (await eng.remote())["/a.md"][1] == "v1"


# -- offline ----------------------------------------------------------------------------


@pytest.mark.parametrize("fault", [{"error_rate": 1.0, "error_status": 503},
                                   {"rate_429": 1.0, "retry_after": 0.0}])
async def test_transient_errors_go_offline_and_lose_nothing(eng, server, fault):
    await eng.write("/keep.md", b"k1")
    await eng.push()
    await eng.write("/keep.md", b"k2")
    await eng.write("/new.md", b"n")
    server.set_faults(**fault)
    result = await eng.push()
    assert result.offline is not None and result.pushed == 0
    eng.ctx.went_offline(result.offline)  # what Pusher.run does with it
    assert not eng.ctx.status.online
    with pytest.raises(Exception):  # noqa: B017 - any transient error
        await eng.reconcile()
    assert eng.pusher.pending_total() == 2
    server.clear_faults()
    result = await eng.push()
    assert result.offline is None and result.left == 0 and result.pushed == 2
    assert eng.ctx.status.online
    assert {p: c for p, (_i, c) in (await eng.remote()).items()} == {
        "/keep.md": "k2", "/new.md": "n"}
    assert eng.state.conflicts() == []


# -- the 2,000-memory cap -----------------------------------------------------------------


async def test_store_full_create_waits_for_a_delete(eng):
    cap = paths.MAX_MEMORIES_PER_STORE
    limiter = trio.CapacityLimiter(32)

    async def make(i: int) -> None:
        async with limiter:
            await eng.other.create_memory(eng.store_id, f"/m/{i:04d}", "")

    async with trio.open_nursery() as nursery:
        for i in range(cap):
            nursery.start_soon(make, i)
    await eng.reconcile()
    assert len(eng.state.by_memory) == cap
    m_ino = eng.fs.ino("/m")
    assert await fuse_errno(eng.fs.create(m_ino, "over")) == errno.ENOSPC  # locally
    # Free one slot locally; the server still holds 2,000 until the delete goes.
    await eng.unlink("/m/0000")
    await eng.write("/m/new", b"waits")
    eng.take_calls()
    result = await eng.push()
    assert result.offline is None
    assert eng.take_calls() == ["create"]  # refused for capacity: waits
    node = eng.fs.node("/m/new")
    assert eng.state.sync_state(node) == "pending"  # not refused
    assert node.refused_sha is None
    # An unmount now would name it, and why (it said only "1 left").
    assert eng.engine.kept_local()["waiting"] == [{"path": "/m/new", "reason": (
        "the store holds its 2,000-memory maximum: it goes out once a memory is deleted")}]
    await eng.push()
    assert eng.take_calls() == ["create"]  # still waiting, still not refused
    assert await eng.remote_count() == cap
    eng.age()
    result = await eng.push()
    # Due deletes go first in a pass: the freed slot takes the waiting create.
    assert eng.take_calls() == ["delete", "create"]
    assert result.left == 0
    assert node.memory_id is not None and not eng.state.is_dirty(node)
    assert await eng.remote_count() == cap
    assert eng.pusher.pending_total() == 0
    assert eng.engine.kept_local()["waiting"] == []


async def test_store_full_by_a_stranger_then_delete(eng):
    cap = paths.MAX_MEMORIES_PER_STORE
    await eng.write("/mine.md", b"later")
    limiter = trio.CapacityLimiter(32)

    async def make(i: int) -> None:
        async with limiter:
            await eng.other.create_memory(eng.store_id, f"/s/{i:04d}", "")

    async with trio.open_nursery() as nursery:
        for i in range(cap):
            nursery.start_soon(make, i)
    result = await eng.push()
    assert result.offline is None and result.pushed == 0
    node = eng.fs.node("/mine.md")
    assert eng.state.sync_state(node) == "pending"
    victim = None
    async for m in eng.other.list_memories(eng.store_id, limit=1):
        victim = m.id
    await eng.other.delete_memory(eng.store_id, victim)
    await eng.push()
    assert not eng.state.is_dirty(node)


# -- own tombstones in the way --------------------------------------------------------------


async def test_rename_onto_path_of_pending_delete_converges(eng):
    await eng.write("/a.md", b"A")
    await eng.write("/b.md", b"B")
    await eng.push()
    b_id = eng.fs.node("/b.md").memory_id
    a_id = eng.fs.node("/a.md").memory_id
    await eng.unlink("/a.md")
    await eng.rename("/b.md", "/a.md")
    eng.take_calls()
    result = await eng.push()  # delete delay not passed, yet one pass settles it
    assert result.offline is None and result.left == 0
    # The rename meets our own pending delete: that delete goes early, then the rename.
    assert eng.take_calls() == ["update", "delete", "update"]
    assert await eng.remote() == {"/a.md": (b_id, "B")}
    assert await eng.operations(b_id) == ["created", "modified"]
    assert await eng.operations(a_id) == ["created", "deleted"]


async def test_file_under_dir_replacing_pending_deleted_file_converges(eng):
    await eng.write("/a", b"file")
    await eng.push()
    await eng.unlink("/a")
    await eng.fs.mkdir(ROOT, "a")
    await eng.write("/a/x", b"inside")
    for _ in range(3):
        result = await eng.push()
        if result.left == 0:
            break
    assert eng.pusher.pending_total() == 0
    assert {p: c for p, (_i, c) in (await eng.remote()).items()} == {"/a/x": "inside"}


@pytest.mark.parametrize("mode", ["log-only", "disabled"])
async def test_rename_onto_pending_delete_without_deletes_waits(make_engine, mode):
    """Deletes switched off: the old memory keeps its path, so the rename waits
    (reported in status) instead of deleting anything."""
    eng = await make_engine(deletes=mode)
    await eng.write("/a.md", b"A")
    await eng.write("/b.md", b"B")
    await eng.push()
    ids = {p: eng.fs.node(p).memory_id for p in ("/a.md", "/b.md")}
    await eng.unlink("/a.md")
    await eng.rename("/b.md", "/a.md")
    eng.age()
    for _ in range(2):
        assert (await eng.push()).offline is None
    assert await eng.remote() == {"/a.md": (ids["/a.md"], "A"), "/b.md": (ids["/b.md"], "B")}
    assert any("deletes are" in w for w in eng.ctx.status.warnings)


async def test_swapped_names_converge(eng):
    await eng.write("/a", b"A")
    await eng.write("/b", b"B")
    await eng.push()
    a_id, b_id = eng.fs.node("/a").memory_id, eng.fs.node("/b").memory_id
    await eng.rename("/a", "/t")
    await eng.rename("/b", "/a")
    await eng.rename("/t", "/b")
    passes = 0
    while eng.pusher.pending_total() and passes < 4:
        result = await eng.push()
        assert result.offline is None
        passes += 1
    assert eng.pusher.pending_total() == 0
    assert await eng.remote() == {"/a": (b_id, "B"), "/b": (a_id, "A")}
    await eng.reconcile()
    assert eng.state.conflicts() == []
    assert await eng.read("/a") == b"B" and await eng.read("/b") == b"A"


async def test_rename_chain_converges(eng):
    await eng.write("/a", b"A")
    await eng.write("/b", b"B")
    await eng.push()
    a_id, b_id = eng.fs.node("/a").memory_id, eng.fs.node("/b").memory_id
    await eng.rename("/b", "/c")
    await eng.rename("/a", "/b")
    for _ in range(4):
        result = await eng.push()
        if result.left == 0:
            break
    assert eng.pusher.pending_total() == 0
    assert await eng.remote() == {"/b": (a_id, "A"), "/c": (b_id, "B")}


# -- a first listing's new files share one commit ---------------------------------------------


def test_a_batch_commits_once_and_undoes_everything_on_failure(tmp_path):
    from memfs.core.nodes import Remote

    st = State(tmp_path / "state.db")
    commits = []
    st.db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    with st.batch():
        for i in range(5):
            st.add_remote(Remote(f"mem_{i}", f"/d/n{i}.md", "ab" * 32, 3))
    assert len(commits) == 1
    with pytest.raises(RuntimeError), st.batch():
        st.add_remote(Remote("mem_x", "/d/x.md", "ab" * 32, 3))
        raise RuntimeError("a failure inside the batch")
    assert st.lookup_path("/d/x.md") is None and st.holder("mem_x") is None
    st.close()
    again = State(tmp_path / "state.db")  # what state.db holds: the five, not mem_x
    assert sorted(n.memory_id for n in again.files()) == [f"mem_{i}" for i in range(5)]
    again.close()


async def test_a_first_listing_commits_its_new_files_at_once(eng):
    for i in range(30):
        await eng.other.create_memory(eng.store_id, f"/d{i % 3}/n{i}.md", f"{i}\n")
    commits = []
    eng.state.db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    await eng.reconcile()
    eng.state.db.set_trace_callback(None)
    assert len(eng.state.lookup_path("/d1").children) == 10
    assert len(commits) < 10, commits  # not one per file
    assert await eng.read("/d2/n29.md") == b"29\n"


async def test_a_new_remote_directory_invalidates_its_own_entry(eng):
    """The kernel may hold a negative entry for a directory's name (a lookup just before
    the listing): the topmost new directory's entry is invalidated, not only its files'."""
    await eng.reconcile()
    eng.ctx.take_invalidations()
    await eng.other.create_memory(eng.store_id, "/fresh/deep/x.md", "x\n")
    await eng.reconcile()
    items = eng.ctx.take_invalidations()
    fresh = eng.fs.node("/fresh")
    assert ("entry", 1, "fresh") in items  # the root's cached "no such name"
    deep = eng.fs.node("/fresh/deep")
    assert ("entry", fresh.ino, "deep") not in items  # new with its parent: nothing cached
    assert ("entry", deep.ino, "x.md") in items
