"""Content into the blob cache in batches, what is being read first.

The unit of fetching is a *batch*: the root's own files (`depth=1`) or one
top-level directory (`path_prefix=/dir/`, recursive), read as `view=full`
pages (20 memories a request). After the first listing the prefetcher fills
every batch that has missing blobs, several at once. A read that misses
starts its own batch at once if no one has (ahead of the prefetcher's queue)
and waits only until its blob arrives, not for the whole batch. Concurrent
misses of one memory share one request; a single GET is the fallback when a
batch did not bring the blob (the server moved on, or the batch failed).

Fetched blobs are held in memory (`BlobCache.hold`) and written to disk by
`write_when_quiet` (run by the engine) once FUSE and the fetcher have been
quiet for `WRITE_QUIET` seconds, or once `PENDING_MAX` bytes wait: a cold
`grep -r` reads from memory and no longer waits for a file creation per memory.
The same writer turns the content users wrote, staged in staged.db by each
close (`BlobCache.stage`), into blob files: `cp -r` of 500 files no longer
waits for 500 file creations either.

Nothing here changes State except through `State.remote_content` (a clean
file whose server content moved on), like the reconciler's row.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from functools import partial

import trio

from memfs.api.models import Memory
from memfs.core.nodes import Node, Remote
from memfs.state.blobs import fsync_paths, sha256
from memfs.state.transitions import Deferred

log = logging.getLogger(__name__)

ROOT_BATCH = "/"
#: Fewer missing blobs than this in a batch filled before: one GET each instead.
BATCH_MIN = 5
#: Held blobs go to disk once FUSE and the fetcher have been idle this long (seconds)...
WRITE_QUIET = 0.3
#: ... or at once when this many bytes are held or staged (memory stays bounded).
PENDING_MAX = 16 * 1024 * 1024
#: The background writer moves staged blobs this many at a time (about 60 ms of
#: fsyncs here), so that a pass starting meanwhile (the unmount's flush) stops it soon.
STAGED_CHUNK = 32
#: After staged blobs failed to become files (disk trouble), wait this long (seconds).
WRITE_RETRY = 5.0


def batch_of(path: str) -> str:
    """The batch a path belongs to: "/" for a root file, else "/<top-level dir>/"."""
    head, sep, _rest = path[1:].partition("/")
    return f"/{head}/" if sep else ROOT_BATCH


class Fetcher:
    def __init__(self, ctx, *, concurrency: int = 8) -> None:
        self.ctx = ctx
        self.limiter = trio.CapacityLimiter(concurrency)
        self._started: dict[str, trio.Event] = {}  # batch -> done (set even on failure)
        self._done: set[str] = set()               # batches filled successfully
        self._arrived: dict[str, trio.Event] = {}  # sha -> set when its blob is cached
        self._inflight: dict[str, trio.Event] = {}  # memory id -> its single GET
        self._nursery: trio.Nursery | None = None
        self.filled = 0
        #: How often the writer looks again while it waits for a quiet mount (seconds).
        #: The interleaving harness's clock is busy or quiet with nothing between, and it
        #: waits for the writer after every step: it looks every millisecond.
        self.quiet_poll = WRITE_QUIET / 3
        #: set when a blob is held or staged (the cache's); the engine's writer clears it
        #: as it takes them
        self.pending = ctx.cache.unwritten
        if ctx.cache.pending_bytes:  # staged by a daemon that crashed
            self.pending.set()
        self._writing = trio.Lock()

    # -- batches ---------------------------------------------------------------------

    async def _run_batch(self, batch: str, done: trio.Event) -> None:
        ctx = self.ctx
        try:
            if batch == ROOT_BATCH:
                pages = ctx.client.list_memories(ctx.store_id, depth=1, view="full", limit=20)
            else:
                pages = ctx.client.list_memories(ctx.store_id, path_prefix=batch, view="full",
                                                 limit=20)
            async for m in pages:
                if isinstance(m, Memory) and m.content is not None:
                    self._store(m.content.encode("utf-8"), m.content_sha256)
            self._done.add(batch)
        finally:
            done.set()
            if batch not in self._done:
                del self._started[batch]  # failed: a later read or prefetch tries again

    def _start(self, nursery: trio.Nursery | None, batch: str) -> trio.Event | None:
        """Mark batch as started and return its done event (None: someone has)."""
        if batch in self._started:
            return None
        done = self._started[batch] = trio.Event()
        if nursery is not None:
            nursery.start_soon(self._guarded, batch, done)
        return done

    async def _guarded(self, batch: str, done: trio.Event) -> None:
        try:
            await self._run_batch(batch, done)
        except Exception as exc:  # offline, server error: reads fall back to single GETs
            log.info("batch %s not fetched: %s", batch, exc)

    def _store(self, data: bytes, sha: str) -> None:
        """Hold fetched content (checked against its sha) and wake the reads waiting
        for it."""
        if sha256(data) != sha:
            log.warning("listing content does not match its sha %s; not cached", sha)
            return
        if self.ctx.cache.hold(sha, data):
            self.filled += 1
        ev = self._arrived.pop(sha, None)
        if ev is not None:
            ev.set()

    async def write_pending(self, idle_for: Callable[[], float] | None = None) -> bool:
        """Write the held and the staged blobs to disk, in a worker thread. False when
        staged blobs could not be moved (they stay staged). Staged blobs go
        `STAGED_CHUNK` at a time, and the rest waits while a pass holds the sync lock:
        what it pushes meanwhile needs no fsync.

        With `idle_for` the writer also yields to the mount's users: it stops before the
        next blob once FUSE brought a request (`idle_for` below WRITE_QUIET), and what
        is left waits for the next quiet moment. Each staged blob of the user's costs an
        fsync (400 of them about 1.5 s of disk and 0.2-0.5 s of kernel CPU here): a
        `cp -r` that met them went at half its speed (docs/BENCHMARKS.md, section 6)."""
        stop = None if idle_for is None else (lambda: idle_for() < WRITE_QUIET)
        async with self._writing:
            if not await self._write_held(stop):
                self.pending.set()  # the rest waits for the next quiet moment
                return True
            staged = self.ctx.cache.staged()
            for i in range(0, len(staged), STAGED_CHUNK):
                if i and (self.waits_for_pass() or (stop is not None and stop())):
                    self.pending.set()  # the rest once the pass is over, or the mount quiet
                    break
                chunk = staged[i:i + STAGED_CHUNK]
                try:
                    whole = await self._move_staged(chunk, stop)
                except (OSError, sqlite3.Error) as exc:  # they stay staged: nothing is lost
                    log.warning("cannot move %d staged blobs to files: %s", len(chunk), exc)
                    return False
                if not whole:
                    self.pending.set()
                    break
        return True

    async def _write_held(self, stop: Callable[[], bool] | None = None) -> bool:
        """Fetched blobs to files; False when `stop` cut it short (the rest stays held)."""
        cache = self.ctx.cache
        held = cache.held()
        if not held:
            return True
        shas = [sha for sha, _ in held]
        try:
            done = await trio.to_thread.run_sync(cache.write_many, held, stop)
        except OSError as exc:  # disk full...: the LRU keeps what it can; misses refetch
            log.warning("cannot write %d fetched blobs: %s", len(held), exc)
            cache.drop_held(shas)
            return True
        cache.on_disk(shas[:done])
        return done == len(held)

    async def write_at_exit(self) -> None:
        """The unmount's last write, after its flush: fetched blobs become files (the
        next mount starts warm); staged content stays in staged.db, synced once, and the
        next mount's writer makes it files. Making them files here put the creation of
        a file per blob written since the mount was last quiet on the user's wait: after
        `cp -r` of 500 files, 0.2-0.4 s on this kind of VM (and, fsynced, 1 s more)."""
        cache = self.ctx.cache
        async with self._writing:
            await self._write_held()
            if cache.staged_bytes:
                await trio.to_thread.run_sync(
                    partial(fsync_paths, cache.staged_files(), missing_ok=True))

    def waits_for_pass(self) -> bool:
        """A pass holds the sync lock (the unmount's flush...) and memory allows waiting."""
        return self.ctx.sync_lock.locked() and self.ctx.cache.pending_bytes < PENDING_MAX

    async def _move_staged(self, staged: list[tuple[str, bytes]],
                           stop: Callable[[], bool] | None = None) -> bool:
        """Make these staged blobs files, then forget their rows: a user's content
        fsynced first (`stop` asked before each), pushed content after one fsync of
        state.db (`_write_copies`). False when `stop` cut it short."""
        cache = self.ctx.cache
        shas = [sha for sha, _ in staged]
        pushed = self._pushed(set(shas))
        mine = [(sha, data) for sha, data in staged if sha not in pushed]
        copies = [(sha, data) for sha, data in staged if sha in pushed]
        done = len(mine)
        if mine:
            done = await trio.to_thread.run_sync(cache.write_staged, mine, stop)
        if done < len(mine):  # the user is back: the rest of theirs, and the copies, wait
            cache.unstage([sha for sha, _ in mine[:done]])
            return False
        if copies:
            await trio.to_thread.run_sync(
                self._write_copies, copies, self.ctx.state.durable_files())
            # (a base that moved on meanwhile: that row stays, for the next turn)
            kept = pushed - self._pushed(pushed)
            if kept:
                shas = [sha for sha in shas if sha not in kept]
                self.pending.set()
        cache.unstage(shas)
        return True

    def _pushed(self, shas: set[str]) -> set[str]:
        """Of these staged shas, those the server holds: the base of a memory state.db
        names (a push landed, or the server had the same content). Their rows need no
        fsynced file to replace them: like fetched content, a file a power cut tore is
        fetched again (`recover`, from that memory or its history)."""
        return shas & {n.base_sha for n in self.ctx.state.files() if n.memory_id}

    def _write_copies(self, blobs: list[tuple[str, bytes]], state_files: list) -> None:
        """Write pushed content as plain blob files (no fsync each: after a flush that
        was 500 fsyncs, about a second, on the user's `memfs unmount`), then sync
        state.db once, so that the bases naming their memories are on the disk before
        `unstage` forgets the rows (the two databases reach the disk in no set order)."""
        self.ctx.cache.write_staged(blobs, fsync=False)
        fsync_paths(state_files, missing_ok=True)

    async def write_when_quiet(self, idle_for: Callable[[], float] | None = None) -> None:
        """Run for the engine: write held and staged blobs once no batch runs and FUSE
        has answered nothing for `WRITE_QUIET` seconds (`idle_for`), so their disk work
        never competes with the reads and writes under way (the writer stops at the
        next FUSE request, `write_pending`); all at once when `PENDING_MAX` bytes wait,
        whatever put them there (batches, single GETs, closes). Nor while a pass holds
        the sync lock: during the unmount's flush the writer fsynced each blob the pass
        was about to push, which once pushed needs no fsync (`_pushed`). `idle_for`: the
        context's (FUSE's), unless a test passes its own."""
        cache, idle_for = self.ctx.cache, idle_for or self.ctx.clock.idle_for
        while True:
            await self.pending.wait()
            self.pending.clear()
            while ((self._fetching() or idle_for() < WRITE_QUIET or self.waits_for_pass())
                   and cache.pending_bytes < PENDING_MAX):
                await trio.sleep(self.quiet_poll)
            full = cache.pending_bytes >= PENDING_MAX  # memory stays bounded: no yielding
            if not await self.write_pending(None if full else idle_for):
                await trio.sleep(WRITE_RETRY)
                self.pending.set()  # the staged blobs still wait: try again

    def _fetching(self) -> bool:
        """A batch is under way (started, its done event not set yet)."""
        return any(not done.is_set() for done in self._started.values())

    def missing(self) -> dict[str, list[Node]]:
        """Clean files whose blob is not cached, by batch."""
        st, cache = self.ctx.state, self.ctx.cache
        out: dict[str, list[Node]] = {}
        for n in st.files():
            if n.memory_id and n.sha and n.sha == n.base_sha and not cache.has(n.sha):
                out.setdefault(batch_of(st.path_of(n)), []).append(n)
        return out

    async def prefetch(self) -> tuple[int, int]:
        """Fill the cache: a batch with many missing blobs as `view=full` pages, a
        few stragglers (remote edits since the last fill) one GET each; `limiter`
        at a time. Returns (blobs added, batches or files that failed)."""
        before, failed = self.filled, 0
        missing = self.missing()

        async def batch(name: str) -> None:
            nonlocal failed
            async with self.limiter:
                if name in self._done:  # filled before, blobs missing again: refill
                    self._done.discard(name)
                    self._started.pop(name, None)
                done = self._start(None, name)
                if done is None:
                    return  # a read started it meanwhile
                try:
                    await self._run_batch(name, done)
                except Exception as exc:
                    log.info("prefetch of %s failed: %s", name, exc)
                    failed += 1

        async def single(node: Node) -> None:
            nonlocal failed
            async with self.limiter:
                if node.sha and self.ctx.cache.has(node.sha):
                    return
                try:
                    await self._get_one(node)
                except Exception as exc:
                    log.info("prefetch of %s failed: %s", node.memory_id, exc)
                    failed += 1

        async with trio.open_nursery() as nursery:
            for name, nodes in sorted(missing.items()):
                if len(nodes) >= BATCH_MIN or name not in self._done:
                    nursery.start_soon(batch, name)
                else:
                    for node in nodes:
                        nursery.start_soon(single, node)
        return self.filled - before, failed

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Own the nursery that batches started by reads run in, so a batch goes on
        after the read that started it has its blob (the daemon runs this)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def read(self, node: Node) -> bytes:
        """A file's content on a cache miss: a clean file's from its batch, else one
        GET; a changed file's (content it took from the server but never read, then
        renamed over another file) from the memory it came from."""
        ctx = self.ctx
        sha = node.sha
        assert sha is not None
        if node.memory_id is None or sha != node.base_sha:
            data = await self.recover(sha)
            if data is None:
                raise OSError(f"content {sha} is not cached and no memory holds it")
            return data
        batch = batch_of(ctx.state.path_of(node)) if ctx.state.in_tree(node) else None
        if batch is not None and batch not in self._done:
            arrived = self._arrived.setdefault(sha, trio.Event())
            done = self._started.get(batch)
            if done is None:
                done = self._start(self._nursery, batch)
                if self._nursery is None:  # no background nursery: fill it here
                    assert done is not None
                    await self._guarded(batch, done)
            if done is not None and not done.is_set():
                async with trio.open_nursery() as waiters:
                    async def until(event: trio.Event) -> None:
                        await event.wait()
                        waiters.cancel_scope.cancel()

                    waiters.start_soon(until, done)
                    waiters.start_soon(until, arrived)
            if not arrived.is_set() and (done is None or done.is_set()):
                self._arrived.pop(sha, None)  # the batch is over: nothing more will come
            data = ctx.cache.get(sha)
            if data is not None:
                return data
        return await self._get_one(node)

    def sources(self, sha: str) -> list[str]:
        """Memories we know held `sha`: files whose base it is, pending deletes, and a
        memory that held it before it changed or went (its versions still hold it)."""
        st = self.ctx.state
        mids = [n.memory_id for n in st.files() if n.memory_id and n.base_sha == sha]
        mids += [t.memory_id for t in st.tombstones.values() if t.base_sha == sha]
        former = st.former_sources.get(sha)
        return mids + ([former] if former else [])

    async def recover(self, sha: str) -> bytes | None:
        """Content known only by its sha: from a memory that holds it now, else from
        that memory's version history. None when no memory we know ever held it."""
        ctx = self.ctx
        for mid in self.sources(sha):
            m = await ctx.client.find_memory(ctx.store_id, mid, view="full")
            if m is not None and m.content_sha256 == sha and m.content is not None:
                data = m.content.encode("utf-8")
                self._store(data, sha)
                return data
            async for v in ctx.client.list_versions(ctx.store_id, memory_id=mid, view="full",
                                                    limit=20):
                if v.content_sha256 == sha and v.content is not None:
                    data = v.content.encode("utf-8")
                    self._store(data, sha)
                    return data
        return None

    async def _get_one(self, node: Node) -> bytes:
        """One GET for the memory, shared by concurrent misses."""
        ctx = self.ctx
        mid = node.memory_id
        assert mid is not None
        waiting = self._inflight.get(mid)
        if waiting is not None:
            await waiting.wait()
            data = ctx.cache.get(node.sha) if node.sha else None
            if data is not None:
                return data
        event = self._inflight[mid] = trio.Event()
        try:
            gen = node.gen
            memory = await ctx.client.get_memory(ctx.store_id, mid, view="full")
            data = (memory.content or "").encode("utf-8")
            sha = sha256(data)
            if sha != memory.content_sha256:
                raise OSError(f"content of {memory.id} does not match its content_sha256")
            self._store(data, sha)
            if sha != node.sha:
                # The server moved on since the last listing and the file is clean:
                # the reconciler's "changed | clean" row, applied early (its base is
                # newer than any listing page already fetched: State.epoch).
                try:
                    ctx.state.remote_content(node, Remote(
                        memory.id, memory.path, sha, len(data),
                        memory.memory_version_id or None), gen=gen)
                    ctx.invalidate(("inode", node.ino))
                except Deferred:
                    pass
            return data
        finally:
            del self._inflight[mid]
            event.set()
