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


async def test_a_batch_writes_its_blobs_in_a_worker_thread(eng):
    """The trio thread answers FUSE: a batch holds its blobs in memory (reads have them
    at once) and creates the blob files in a worker thread, a page at a time."""
    import threading

    want = await seed(eng, dirs=2, per_dir=25, root=0)
    cache = eng.ctx.cache
    threads: list[bool] = []
    write_many = cache.write_many

    def recorded(blobs):
        threads.append(threading.current_thread() is threading.main_thread())
        return write_many(blobs)

    cache.write_many = recorded
    filled, failed = await eng.ctx.fetcher.prefetch()
    assert (filled, failed) == (50, 0)
    assert threads and not any(threads)  # written, never on the trio thread
    assert len(threads) == 2 * 2  # per directory: a page of 20, then the last 5
    for path, content in want.items():
        sha = eng.fs.node(path).sha
        assert (cache.root / sha[:2] / sha).read_bytes() == content.encode()
        assert await eng.read(path) == content.encode()
