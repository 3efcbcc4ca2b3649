"""Content fetching in batches (memfs/sync/fetcher.py), handler level.

Counts the requests a cold read costs: a miss pulls its directory's batch
(`view=full` pages), concurrent misses of one memory share one request, and
the prefetcher fills a store in a few pages per top-level directory rather
than one GET per file.
"""

from __future__ import annotations

import trio

# ruff: noqa: F811  (pytest fixtures imported from test_sync_engine are arguments here)
from test_sync_engine import Engine, eng, make_engine  # noqa: F401

from memfs.state.blobs import BlobCache
from memfs.sync.fetcher import batch_of


def count_requests(eng: Engine) -> dict[str, int]:
    """Wrap the client's reads: {'get': n, 'list_pages': n} as they happen."""
    counts = {"get": 0, "list_pages": 0}
    get, page = eng.client.get_memory, eng.client.list_memories_page

    async def counted_get(*a, **kw):
        counts["get"] += 1
        return await get(*a, **kw)

    async def counted_page(*a, **kw):
        counts["list_pages"] += 1
        return await page(*a, **kw)

    eng.client.get_memory = counted_get
    eng.client.list_memories_page = counted_page
    return counts


async def seed(eng: Engine, dirs: int = 3, per_dir: int = 25, root: int = 4) -> dict[str, str]:
    want = {}
    for d in range(dirs):
        for i in range(per_dir):
            want[f"/d{d}/sub/n{i:02}.md"] = f"dir {d} note {i}\n"
    for i in range(root):
        want[f"/r{i}.md"] = f"root {i}\n"
    for path, content in want.items():
        await eng.other.create_memory(eng.store_id, path, content)
    await eng.reconcile()  # the tree is known, no content cached
    return want


def test_batch_of():
    assert batch_of("/a.md") == "/"
    assert batch_of("/d/a.md") == "/d/"
    assert batch_of("/d/e/f/a.md") == "/d/"


async def test_cold_reads_cost_pages_not_one_get_per_file(eng):
    want = await seed(eng)
    counts = count_requests(eng)
    for path, content in want.items():
        assert await eng.read(path) == content.encode()
    assert counts["get"] == 0
    # 3 directories of 25 (2 pages of 20 each) + the root's own files (1 page)
    assert counts["list_pages"] == 3 * 2 + 1


async def test_concurrent_misses_of_one_memory_share_one_request(eng):
    await eng.other.create_memory(eng.store_id, "/a.md", "shared\n")
    await eng.reconcile()
    node = eng.fs.node("/a.md")
    eng.ctx.fetcher._done.add("/")  # force the single-GET path
    counts = count_requests(eng)
    results = []

    async def read():
        results.append(await eng.ctx.fetch(node))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(read)
    assert results == [b"shared\n"] * 5
    assert counts["get"] == 1


async def test_prefetch_fills_everything_in_batches(eng):
    want = await seed(eng)
    counts = count_requests(eng)
    filled, failed = await eng.ctx.fetcher.prefetch()
    assert (filled, failed) == (len(want), 0)
    assert counts == {"get": 0, "list_pages": 3 * 2 + 1}
    for path in want:
        assert eng.cache.has(eng.fs.node(path).sha)


async def test_a_few_remote_edits_later_cost_one_get_each(eng):
    want = await seed(eng, dirs=1, per_dir=10, root=0)
    await eng.ctx.fetcher.prefetch()
    mid = eng.fs.node("/d0/sub/n03.md").memory_id
    await eng.other.update_memory(eng.store_id, mid, content="edited there\n")
    await eng.reconcile()
    counts = count_requests(eng)
    filled, _ = await eng.ctx.fetcher.prefetch()
    assert filled == 1 and counts == {"get": 1, "list_pages": 0}
    assert await eng.read("/d0/sub/n03.md") == b"edited there\n"
    assert len(want) == 10


async def test_a_read_after_the_server_moved_on_takes_the_new_content(eng):
    created = await eng.other.create_memory(eng.store_id, "/a.md", "v1\n")
    await eng.reconcile()
    await eng.other.update_memory(eng.store_id, created.id, content="v2\n")
    # The batch brings v2, not the listed v1: the read falls back to one GET, which
    # applies the "changed | clean" row early.
    assert await eng.read("/a.md") == b"v2\n"
    node = eng.fs.node("/a.md")
    assert node.base_sha == node.sha and eng.cache.get(node.sha) == b"v2\n"


def on_disk(cache, sha: str) -> bool:
    return (cache.root / sha[:2] / sha).exists()


def record_writes(cache) -> list[tuple[bool, int]]:
    """Wrap `write_many`: (ran on the trio thread?, blobs) per call."""
    import threading

    calls: list[tuple[bool, int]] = []
    write_many = cache.write_many

    def recorded(blobs, stop=None):
        calls.append((threading.current_thread() is threading.main_thread(), len(blobs)))
        return write_many(blobs, stop)

    cache.write_many = recorded
    return calls


async def test_fetched_blobs_wait_in_memory_until_the_mount_is_quiet(eng):
    """A cold fill creates no file while reads wait for it: its blobs are held in memory
    (readable at once) and written in one worker-thread hop once FUSE has been quiet
    for WRITE_QUIET seconds."""
    from memfs.sync import fetcher as fetcher_mod

    want = await seed(eng, dirs=2, per_dir=25, root=0)
    cache, fetcher = eng.ctx.cache, eng.ctx.fetcher
    calls = record_writes(cache)
    assert await fetcher.prefetch() == (50, 0)
    shas = {path: eng.fs.node(path).sha for path in want}
    assert not calls and not any(on_disk(cache, sha) for sha in shas.values())
    assert cache.held_bytes == sum(len(c.encode()) for c in set(want.values()))
    cache.lru.clear()  # held blobs do not depend on the LRU
    for path, content in want.items():
        assert cache.has(shas[path]) and await eng.read(path) == content.encode()

    idle = [0.0]  # seconds since the last FUSE request, as the writer sees it
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetcher.write_when_quiet, lambda: idle[0])
        await trio.sleep(3 * fetcher_mod.WRITE_QUIET)
        assert not calls  # FUSE is busy: nothing written yet
        idle[0] = fetcher_mod.WRITE_QUIET
        with trio.fail_after(5):
            while cache.held_bytes:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert calls == [(False, 50)]  # all at once, never on the trio thread
    for path, content in want.items():
        sha = shas[path]
        assert (cache.root / sha[:2] / sha).read_bytes() == content.encode()


async def test_held_blobs_are_written_past_held_max_even_while_busy(eng, monkeypatch):
    """Memory stays bounded: past PENDING_MAX bytes the writer does not wait for quiet."""
    from memfs.sync import fetcher as fetcher_mod

    monkeypatch.setattr(fetcher_mod, "PENDING_MAX", 100)
    want = await seed(eng, dirs=1, per_dir=30, root=0)
    cache, fetcher = eng.ctx.cache, eng.ctx.fetcher
    calls = record_writes(cache)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetcher.write_when_quiet, lambda: 0.0)  # FUSE always busy
        assert await fetcher.prefetch() == (30, 0)
        with trio.fail_after(5):
            while cache.held_bytes >= 100:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert calls and not any(main for main, _ in calls)
    written = sum(on_disk(cache, eng.fs.node(p).sha) for p in want)
    assert written == sum(n for _, n in calls) > 0
    assert cache.held_bytes < 100


async def test_a_failed_blob_write_keeps_nothing_held(eng, monkeypatch):
    """Disk full: the blobs stop being held (a later miss fetches them again) and the
    writer goes on."""
    await seed(eng, dirs=1, per_dir=5, root=0)
    cache = eng.ctx.cache
    assert await eng.ctx.fetcher.prefetch() == (5, 0)

    def full(blobs, stop=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache, "write_many", full)
    await eng.ctx.fetcher.write_pending()
    assert cache.held_bytes == 0 and not cache.held()


async def test_content_users_wrote_becomes_files_when_the_mount_is_quiet(eng):
    """Each close stages its content (staged.db, no file created); the same writer makes
    the files in one worker-thread hop once FUSE is quiet, then forgets the rows."""
    from memfs.sync import fetcher as fetcher_mod

    cache, fetcher = eng.ctx.cache, eng.ctx.fetcher
    wrote = {f"/n{i}.md": f"written {i}\n".encode() for i in range(20)}
    for path, data in wrote.items():
        await eng.write(path, data)
    shas = {path: eng.fs.node(path).sha for path in wrote}
    assert sorted(sha for sha, _ in cache.staged()) == sorted(shas.values())
    assert not any(on_disk(cache, sha) for sha in shas.values())

    idle = [0.0]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetcher.write_when_quiet, lambda: idle[0])
        await trio.sleep(3 * fetcher_mod.WRITE_QUIET)
        assert cache.staged_bytes  # FUSE is busy: nothing moved yet
        idle[0] = fetcher_mod.WRITE_QUIET
        with trio.fail_after(5):
            while cache.staged_bytes:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    for path, data in wrote.items():
        assert (cache.root / shas[path][:2] / shas[path]).read_bytes() == data
    assert BlobCache(cache.root).staged() == []  # the rows are gone too


async def test_the_writer_stops_at_a_fuse_request_and_ends_in_the_next_quiet(eng, monkeypatch):
    """The blob writer yields to the mount's users: a FUSE request that arrives while it
    makes files stops it before the next blob (each one is an fsync); the rows of the
    blobs already written are gone, the others stay staged, and the writer finishes
    once the mount is quiet again."""
    from memfs.sync import fetcher as fetcher_mod

    cache, fetcher = eng.ctx.cache, eng.ctx.fetcher
    wrote = {f"/n{i}.md": f"written {i}\n".encode() for i in range(12)}
    for path, data in wrote.items():
        await eng.write(path, data)
    order = [sha for sha, _ in cache.staged()]
    idle = [fetcher_mod.WRITE_QUIET]  # quiet: the writer starts
    real_write, made = cache._write, []

    def write(path, sha, data, *, fsync=False):
        real_write(path, sha, data, fsync=fsync)
        made.append(sha)
        if len(made) == 3:
            idle[0] = 0.0  # a FUSE request arrives while the third file is made

    monkeypatch.setattr(cache, "_write", write)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetcher.write_when_quiet, lambda: idle[0])
        with trio.fail_after(5):
            while len(cache.staged()) == len(order):
                await trio.sleep(0.01)
        await trio.sleep(3 * fetcher_mod.WRITE_QUIET)  # busy: the writer waits
        assert made == order[:3]
        assert sorted(sha for sha, _ in BlobCache(cache.root).staged()) == sorted(order[3:])
        for sha in order[3:]:
            assert not on_disk(cache, sha) and cache.get(sha) is not None  # still readable
        idle[0] = fetcher_mod.WRITE_QUIET  # quiet again: the rest goes
        with trio.fail_after(5):
            while cache.staged_bytes:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert made == order
    for path, data in wrote.items():
        sha = eng.fs.node(path).sha
        assert (cache.root / sha[:2] / sha).read_bytes() == data
    assert BlobCache(cache.root).staged() == []


async def test_a_failed_move_keeps_the_content_staged(eng, monkeypatch):
    """Disk trouble while making files: a user's content stays staged (readable, and
    in staged.db) and a later pass moves it."""
    cache = eng.ctx.cache
    await eng.write("/a.md", b"mine\n")
    sha = eng.fs.node("/a.md").sha
    real = cache.write_staged

    def full(blobs, stop=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache, "write_staged", full)
    assert await eng.ctx.fetcher.write_pending() is False
    assert cache.staged() == [(sha, b"mine\n")] and BlobCache(cache.root).get(sha) == b"mine\n"
    monkeypatch.setattr(cache, "write_staged", real)
    assert await eng.ctx.fetcher.write_pending() is True
    assert cache.staged() == [] and on_disk(cache, sha)


async def test_the_writer_retries_a_failed_move_on_its_own(eng, monkeypatch):
    """No new close needed: after WRITE_RETRY the writer tries the staged blobs again."""
    from memfs.sync import fetcher as fetcher_mod

    monkeypatch.setattr(fetcher_mod, "WRITE_RETRY", 0.05)
    cache = eng.ctx.cache
    await eng.write("/a.md", b"mine\n")
    real, calls = cache.write_staged, []

    def flaky(blobs, stop=None):
        calls.append(len(blobs))
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        return real(blobs, stop)

    monkeypatch.setattr(cache, "write_staged", flaky)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eng.ctx.fetcher.write_when_quiet, lambda: 10.0)  # always quiet
        with trio.fail_after(10):
            while cache.staged_bytes:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert calls == [1, 1] and on_disk(cache, eng.fs.node("/a.md").sha)


async def test_pushed_content_becomes_files_without_an_fsync_each(eng, monkeypatch):
    """After a flush the server holds what users wrote: the writer makes those blobs
    files with no fsync each (500 of them cost `memfs unmount` about a second), syncing
    state.db once instead, since its bases name where a torn blob is fetched again.
    Content not pushed yet is still fsynced before its row goes."""
    from fs_helpers import record_fsyncs

    cache = eng.ctx.cache
    pushed = {f"/p{i}.md": f"pushed {i}\n".encode() for i in range(20)}
    for path, data in pushed.items():
        await eng.write(path, data)
    assert (await eng.push(flush=True)).pushed == 20
    await eng.write("/local.md", b"not pushed yet\n")
    local_sha = eng.fs.node("/local.md").sha
    synced = record_fsyncs(monkeypatch)
    assert await eng.ctx.fetcher.write_pending() is True
    blob_files = [p for p in synced if p.startswith(str(cache.root)) and ".tmp" in p]
    assert len(blob_files) == 1 and local_sha in blob_files[0]  # (its temp name)
    assert str(eng.state.db_path) + "-wal" in synced  # the bases first, once
    assert cache.staged() == [] and BlobCache(cache.root).staged() == []
    for path, data in pushed.items():
        assert (cache.root / eng.fs.node(path).sha[:2] / eng.fs.node(path).sha).read_bytes() \
            == data


async def test_the_writer_waits_for_a_push_pass(eng):
    """A pass under way (the unmount's flush) keeps the writer off the disk: once it
    ends, what it pushed needs no fsync."""
    from memfs.sync import fetcher as fetcher_mod

    cache, fetcher = eng.ctx.cache, eng.ctx.fetcher
    await eng.write("/a.md", b"mine\n")
    async with trio.open_nursery() as nursery:
        async with eng.ctx.sync_lock:
            nursery.start_soon(fetcher.write_when_quiet, lambda: 10.0)  # FUSE quiet
            await trio.sleep(3 * fetcher_mod.WRITE_QUIET)
            assert cache.staged_bytes  # the pass holds the lock: nothing moved yet
        with trio.fail_after(5):
            while cache.staged_bytes:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert on_disk(cache, eng.fs.node("/a.md").sha)


async def test_a_pass_starting_stops_the_writer_after_its_chunk(eng, monkeypatch):
    """The writer may start before the unmount's flush takes the sync lock: it moves
    the chunk under way, leaves the rest staged until the pass is over, and what the
    pass pushed then goes without an fsync each."""
    from fs_helpers import record_fsyncs

    from memfs.sync import fetcher as fetcher_mod

    monkeypatch.setattr(fetcher_mod, "STAGED_CHUNK", 4)
    cache, fetcher = eng.ctx.cache, eng.ctx.fetcher
    for i in range(20):
        await eng.write(f"/n{i}.md", f"note {i}\n".encode())
    synced = record_fsyncs(monkeypatch)
    async with eng.ctx.sync_lock:
        assert await fetcher.write_pending() is True
    assert len(cache.staged()) == 16 and fetcher.pending.is_set()
    assert len([p for p in synced if ".tmp" in p]) == 4  # not pushed: fsynced
    assert (await eng.push(flush=True)).pushed == 20
    synced.clear()
    assert await fetcher.write_pending() is True
    assert cache.staged() == [] and not [p for p in synced if ".tmp" in p]


async def test_the_last_write_leaves_staged_content_staged_and_synced(eng, monkeypatch):
    """At unmount (`write_at_exit`) fetched blobs become files, and what users wrote
    stays in staged.db for the next mount's writer: one sync of staged.db, no file and
    no fsync per blob."""
    from fs_helpers import record_fsyncs

    await seed(eng, dirs=1, per_dir=5, root=0)
    cache = eng.ctx.cache
    assert await eng.ctx.fetcher.prefetch() == (5, 0)
    held = [sha for sha, _ in cache.held()]
    for i in range(10):
        await eng.write(f"/n{i}.md", f"note {i}\n".encode())
    staged = sorted(sha for sha, _ in cache.staged())
    synced = record_fsyncs(monkeypatch)
    await eng.ctx.fetcher.write_at_exit()
    assert all(on_disk(cache, sha) for sha in held) and cache.held_bytes == 0
    assert sorted(sha for sha, _ in BlobCache(cache.root).staged()) == staged
    assert not any(on_disk(cache, sha) for sha in staged)
    assert sorted(synced) == sorted(str(p) for p in cache.staged_files())
