"""The reconciler: move the base when the server changes (DESIGN §4).

Every poll interval it lists the store content-free (`view=basic`, 100 a
page) and applies the merge table by memory id:

| server vs base          | local vs base | action                                         |
|-------------------------|---------------|------------------------------------------------|
| same                    | any           | nothing                                        |
| changed                 | clean         | move base, invalidate; content fetched lazily  |
| changed to the local sha| dirty         | adopt: it is our own write                      |
| changed                 | dirty         | conflict: server wins in the tree, local kept   |
| renamed                 | not renamed   | move the node                                  |
| deleted                 | clean         | remove the node                                |
| deleted                 | dirty         | writable: re-create from the file; ro: keep it |
| new                     | -             | add the node (content lazy)                    |

Content is only fetched where a conflict needs it; the prefetcher fills the
cache from `view=full` pages in the background. Kernel invalidations are
queued (`ctx.invalidate`) and run outside any request handler.
"""

from __future__ import annotations

import logging
import time

import trio

from ..api import errors as api_errors
from ..api.models import Memory
from ..state import Node
from .common import SyncContext

log = logging.getLogger(__name__)


class Reconciler:
    def __init__(self, ctx: SyncContext) -> None:
        self.ctx = ctx
        self.state = ctx.state

    async def run(self) -> None:
        while True:
            try:
                await self.reconcile_pass()
                delay = self.ctx.options.poll_interval
            except (*api_errors.TRANSIENT, api_errors.AuthenticationError) as exc:
                delay = self.ctx.went_offline(exc)
            except api_errors.APIError as exc:
                # 403, 404 (store gone), a malformed page...: not "offline", but no
                # reason to take the mount down either. Report it and try again later.
                self.ctx.status.last_error = f"listing failed: {type(exc).__name__}: {exc}"
                self.ctx.status.note(self.ctx.status.last_error)
                delay = max(self.ctx.options.poll_interval, 5.0)
            except Exception as exc:  # a bug must not take the mount down
                log.exception("reconcile pass failed")
                self.ctx.status.last_error = f"reconcile: {type(exc).__name__}: {exc}"
                delay = self.ctx.options.poll_interval
            with trio.move_on_after(delay):
                await self.ctx.reconcile_wakeup.wait()
            self.ctx.reconcile_wakeup = trio.Event()

    async def list_remote(self) -> list[Memory]:
        return [m async for m in self.ctx.client.list_memories(
            self.ctx.store_id, view="basic", limit=100) if isinstance(m, Memory)]

    async def reconcile_pass(self) -> None:
        ctx = self.ctx
        async with ctx.sync_lock:
            started = time.time()
            remote = await self.list_remote()
            ctx.came_online()
            await self._apply(remote)
            ctx.status.last_sync_at = time.time()
            ctx.status.last_sync_seconds = ctx.status.last_sync_at - started
            self.state.set_meta("last_sync_at", str(ctx.status.last_sync_at))
            self.state.set_meta("last_sync_seconds", str(ctx.status.last_sync_seconds))
        ctx.kick()  # re-created or revived files may now be pushable

    async def _apply(self, remote: list[Memory]) -> None:
        st = self.state
        seen: set[str] = set()
        for m in remote:
            seen.add(m.id)
            ino = st.by_memory.get(m.id)
            if ino is None:
                await self._unknown(m)
            else:
                await self._known(st.nodes[ino], m)
        for mid in [mid for mid in st.by_memory if mid not in seen]:
            self._deleted_remotely(st.nodes[st.by_memory[mid]])
        for mid in [mid for mid in st.tombstones if mid not in seen]:
            st.drop_tombstone(mid)  # gone on the server too

    # -- rows of the merge table ----------------------------------------------------

    async def _unknown(self, m: Memory) -> None:
        st, ctx = self.state, self.ctx
        tomb = st.tombstones.get(m.id)
        if tomb is not None:
            if m.content_sha256 == tomb.base_sha:
                return  # our delete is waiting out its delay
            # Deleted here, changed there: the server's edit wins, the file returns.
            st.drop_tombstone(m.id)
            ctx.status.note(f"{m.path} was deleted here but changed on the server; "
                            "restoring the server's version")
        local = st.lookup_path(m.path)
        if local is None:
            node = st.add_remote(m.id, m.path, m.content_sha256, m.content_size_bytes)
            if node is None:
                ctx.status.note(f"the server's {m.path} overlaps a local directory or file; "
                                "not shown until that is resolved")
                return
            self._entry_changed(node)
            return
        if local.is_dir or local.memory_id is not None:
            ctx.status.note(f"the server's {m.path} ({m.id}) collides with a local "
                            f"{'directory' if local.is_dir else 'file'}; not shown")
            return
        # A local file that never reached the server sits at the same path.
        if local.sha == m.content_sha256 or local.sent_sha == m.content_sha256:
            st.set_base(local, m.id, m.path, m.content_sha256)  # same bytes / our create
            return
        if ctx.fs is not None and ctx.fs.is_open_dirty(local.ino):
            return  # settle once the writer closes
        await ctx.take_remote(local, m, "another writer created the same path")

    async def _known(self, node: Node, m: Memory) -> None:
        st, ctx = self.state, self.ctx
        content_changed = m.content_sha256 != node.base_sha
        path_changed = m.path != node.base_path
        if not content_changed and not path_changed:
            return
        # Whether the file was renamed here is judged against the base path as it
        # was before this memory's row is applied (take_remote moves the base).
        renamed_here = st.path_of(node) != node.base_path
        if content_changed:
            if ctx.fs is not None and ctx.fs.is_open_dirty(node.ino):
                # A writer holds unsaved data: settle once it closes (its push then
                # meets the precondition and becomes a proper conflict if need be).
                return
            if node.sha == m.content_sha256 or node.sent_sha == m.content_sha256:
                node.base_sha = m.content_sha256  # our own write, response unheard
                if node.sent_sha == m.content_sha256:
                    node.sent_sha = None
                st.save(node)
            elif node.sha == node.base_sha:
                node.sha, node.size = m.content_sha256, m.content_size_bytes
                node.base_sha = m.content_sha256
                node.mtime_ns = node.ctime_ns = time.time_ns()
                st.save(node)
                if ctx.fs is not None:
                    ctx.fs.drop_clean_buffer(node.ino)
                ctx.invalidate(("inode", node.ino))
            else:
                await ctx.take_remote(node, m, "changed on the server and here at the same time")
        if path_changed and node.ino in st.nodes:
            local_path = st.path_of(node)
            if not renamed_here and local_path != m.path:  # follow the server
                old_parent, old_name = node.parent, node.name
                if st.move_to(node, m.path):
                    ctx.invalidate(("entry", old_parent, old_name))
                    self._entry_changed(node)
                else:
                    ctx.status.note(f"cannot move {local_path} to {m.path} (renamed on the "
                                    "server): the place is taken locally")
                    return
            # Renamed here too: ours is pushed over the server's rename next.
            node.base_path = m.path
            st.save(node)

    def _deleted_remotely(self, node: Node) -> None:
        st, ctx = self.state, self.ctx
        path = st.path_of(node)
        # Dirty includes a local rename: the file at its new path is kept too.
        dirty = st.is_dirty(node) or (ctx.fs is not None and ctx.fs.is_open_dirty(node.ino))
        if dirty:
            if ctx.options.read_only:
                ctx.status.note(f"{path} was deleted on the server but edited here; kept "
                                "locally, unsynced (read-only mount)")
            else:
                ctx.status.note(f"{path} was deleted on the server but edited here; "
                                "re-creating it from the file")
            st.forget_memory(node)
            return
        parent, name = node.parent, node.name
        st.drop(node)
        ctx.invalidate(("entry", parent, name))

    def _entry_changed(self, node: Node) -> None:
        """A name appeared: drop a cached negative entry for it."""
        self.ctx.invalidate(("entry", node.parent, node.name))


async def prefetch(ctx: SyncContext) -> int:
    """Fill the blob cache from `view=full` pages so reads (and offline) need no fetch."""
    wanted = {n.sha for n in ctx.state.files() if n.sha and n.memory_id}
    filled = 0
    async for m in ctx.client.list_memories(ctx.store_id, view="full", limit=20):
        if not isinstance(m, Memory) or m.content is None:
            continue
        if m.content_sha256 in wanted and not ctx.cache.has(m.content_sha256):
            data = m.content.encode("utf-8")
            ctx.cache.put(data)
            filled += 1
        await trio.sleep(0)
    return filled
