"""The pusher: make the server match the mount's local state (DESIGN §3).

A push pass looks at every dirty file whose write-back delay has passed and
sends one call per file (update with the base sha as precondition, or
create), then sends the tombstones whose delete delay has passed (at most the
per-pass cap, each with `expected_content_sha256`). Nothing is replayed from
a log: the pass derives its work from state, so a crash, a retry or ten saves
in a row all come down to the same few calls.

Lost responses: before each call the sha sent is recorded (`sent_sha`); a
retried create that meets 409 with a memory holding exactly that sha, or a
precondition failure against it, is our own earlier write and is adopted.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import trio

from .. import paths
from ..api import errors as api_errors
from ..api.models import Memory
from ..state import Node
from .common import SyncContext

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    pushed: int = 0
    left: int = 0
    offline: BaseException | None = None


#: Where a memory waits on the server while a cycle of renames (a swap) goes out.
PARK_DIR = "/.memfs-moving"


def delete_cap(known: int) -> int:
    return max(8, min(50, known // 4))


class Pusher:
    def __init__(self, ctx: SyncContext) -> None:
        self.ctx = ctx
        self.state = ctx.state

    # -- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        """Push whenever something becomes due; back off while offline."""
        idle_retry = 5.0  # after a pass that could not push what was due
        while True:
            delay = self.next_due_in()
            if delay is None or delay > 0:
                with trio.move_on_after(math.inf if delay is None else delay):
                    await self.ctx.push_wakeup.wait()
                self.ctx.push_wakeup = trio.Event()
                # Every close kicks: let a burst (cp -r) land before rescanning.
                await trio.sleep(min(0.1, self.ctx.options.write_back_delay / 2))
                continue
            try:
                result = await self.push_pass()
            except Exception as exc:  # a bug must not take the mount down
                log.exception("push pass failed")
                self.ctx.status.last_error = f"push: {type(exc).__name__}: {exc}"
                result = PassResult()
            if result.offline is not None:
                # Back off (jitter, retry-after), but go as soon as the reconciler
                # finds the server again.
                with trio.move_on_after(self.ctx.went_offline(result.offline)):
                    await self.ctx.online_wakeup.wait()
            elif result.pushed == 0:
                with trio.move_on_after(idle_retry):
                    await self.ctx.push_wakeup.wait()
                self.ctx.push_wakeup = trio.Event()

    def next_due_in(self) -> float | None:
        """Seconds until the next change is due (<= 0: now), None when idle."""
        if self.ctx.options.read_only:
            return None
        now = time.time()
        dues = [(n.changed_at or 0) + self.ctx.options.write_back_delay - now
                for n in self._dirty()]
        if self.ctx.options.deletes != "disabled":
            dues += [t.deleted_at + self.ctx.options.delete_delay - now
                     for t in self.state.tombstones.values()]
        return min(dues) if dues else None

    def _dirty(self) -> list[Node]:
        """Files with something to push: refused content waits for a new sha,
        but a refused file's memory still follows a rename."""
        return [n for n in self.state.files()
                if self.state.is_dirty(n)
                and (n.refused_sha is None or n.refused_sha != n.sha
                     or self._rename_pending(n))]

    def _rename_pending(self, node: Node) -> bool:
        return node.memory_id is not None and self.state.path_of(node) != node.base_path

    def pending_total(self) -> int:
        return len(self._dirty()) + len(self.state.tombstones)

    # -- one pass -------------------------------------------------------------------------

    async def push_pass(self, *, flush: bool = False) -> PassResult:
        """Push what is due (everything, when flushing); return what happened."""
        result = PassResult()
        if self.ctx.options.read_only:
            return result
        async with self.ctx.sync_lock:
            now = time.time()
            due = [n for n in self._dirty()
                   if flush or (n.changed_at or 0) + self.ctx.options.write_back_delay <= now]
            limiter = trio.CapacityLimiter(self.ctx.options.push_concurrency)

            async def one(node: Node) -> None:
                async with limiter:
                    if result.offline is not None:
                        return
                    try:
                        if await self._push_node(node):
                            result.pushed += 1
                    except api_errors.TRANSIENT as exc:
                        result.offline = exc
                    except api_errors.AuthenticationError as exc:
                        result.offline = exc
                    except api_errors.APIError as exc:  # 403, 422, ...: this file waits
                        self.ctx.status.note(f"cannot push {node.name}: {exc}")

            # Due deletes first: they free paths (and store slots, at the 2,000
            # cap) that this pass's creates and renames may need.
            try:
                result.pushed += await self._push_deletes(flush=flush)
            except (*api_errors.TRANSIENT, api_errors.AuthenticationError) as exc:
                result.offline = exc
            async with trio.open_nursery() as nursery:
                for node in due:
                    nursery.start_soon(one, node)
            if result.offline is None and (due or result.pushed):
                self.ctx.came_online()
                self.ctx.status.last_push_at = time.time()
            self.ctx.status.pushed += result.pushed
            result.left = self.pending_total()
        return result

    async def flush(self, timeout: float) -> PassResult:
        """Push everything now (deletes too, window waived), within timeout."""
        total = PassResult()
        with trio.move_on_after(timeout):
            while True:
                result = await self.push_pass(flush=True)
                total.pushed += result.pushed
                if result.offline is not None:
                    total.offline = result.offline
                    break
                if result.pushed == 0:
                    break
        total.left = self.pending_total()
        return total

    # -- files ------------------------------------------------------------------------------

    async def _push_node(self, node: Node) -> bool:
        """Send one file's local state; True when the server now matches it."""
        st, ctx = self.state, self.ctx
        if node.ino not in st.nodes or not st.is_dirty(node):
            return False
        sha, path = node.sha, st.path_of(node)
        assert sha is not None
        renaming = self._rename_pending(node)
        # Content refused (now or before) is never sent; the memory still moves.
        content_refused = node.refused_sha == sha
        if content_refused and not renaming:
            return False
        data = None if content_refused else ctx.cache.get(sha)
        # A pure rename (content still the base) needs no content: a file never
        # read (no prefetch, or offline since the mount) can still be moved.
        rename_only = node.memory_id is not None and sha == node.base_sha
        if data is None and not rename_only and not content_refused:
            ctx.status.note(f"content of {path} is missing from the cache; cannot push it")
            return False
        problem = paths.content_error(data) if data is not None else None
        if problem is not None:
            st.set_refused(node, sha, problem)
            ctx.status.note(f"{path} stays local-only: {problem}")
            if not renaming:
                return False
            content_refused, data = True, None
        try:
            paths.validate_path(path)
        except paths.PathError as exc:
            st.set_refused(node, sha, exc.message)
            ctx.status.note(f"{path} stays local-only: {exc.message}")
            return False
        content = data.decode("utf-8") if data is not None else None
        previous_sent = node.sent_sha
        st.set_sent(node, sha)
        try:
            if node.memory_id is None:
                memory = await ctx.client.create_memory(ctx.store_id, path, content)
            else:
                fields = {}
                if sha != node.base_sha and not content_refused:
                    fields["content"] = content
                if path != node.base_path:
                    fields["path"] = path
                memory = await ctx.client.update_memory(
                    ctx.store_id, node.memory_id, precondition_sha=node.base_sha, **fields)
        except api_errors.PathConflictError as exc:
            return await self._path_conflict(node, path, sha, previous_sent, exc)
        except api_errors.PreconditionFailedError:
            return await self._precondition_failed(node, sha, previous_sent)
        except api_errors.NotFoundError:
            if node.memory_id is None:
                raise
            # Deleted remotely meanwhile: the local file is the only copy.
            ctx.status.note(f"{path} was deleted on the server but edited here; re-creating it")
            st.forget_memory(node)
            ctx.kick()
            return False
        except api_errors.REFUSED as exc:
            if _store_full(exc):
                ctx.status.note(f"{path} waits: the store holds its 2,000-memory maximum")
                return False
            st.set_refused(node, sha, exc.message)
            ctx.status.note(f"the server refused {path}: {exc.message}; kept locally")
            return False
        self._adopt(node, memory)
        return not content_refused

    def _adopt(self, node: Node, memory: Memory) -> None:
        """The server holds memory for node; the node may have moved on meanwhile."""
        st = self.state
        if node.ino in st.nodes and st.nodes[node.ino] is node:
            st.set_base(node, memory.id, memory.path, memory.content_sha256)
            return
        # Unlinked while the request was in flight: the memory must go too.
        tomb = st.tombstones.get(memory.id)
        node.memory_id, node.base_path = memory.id, memory.path
        node.base_sha = memory.content_sha256
        if tomb is None:
            with st.transaction():
                st._tombstone(node)
        else:
            tomb.base_path, tomb.base_sha = memory.path, memory.content_sha256
            st.db.execute("UPDATE tombstones SET base_path=?, base_sha=? WHERE memory_id=?",
                          (memory.path, memory.content_sha256, memory.id))

    async def _path_conflict(self, node: Node, path: str, sha: str, previous_sent: str | None,
                             exc: api_errors.PathConflictError) -> bool:
        ctx, st = self.ctx, self.state
        mid = exc.conflicting_memory_id
        if not mid:
            ctx.status.note(f"{path}: path conflict on the server ({exc.message}); will retry")
            return False
        if mid in st.tombstones:
            # One of our own deleted files still holds the path: a local file now
            # stands there, so its delete is safe to send before the delay is out.
            if await self._delete_early(st.tombstones[mid], path):
                return await self._push_node(node)
            return False
        if mid in st.by_memory and st.by_memory[mid] != node.ino:
            # Another of our files holds the path on the server (a rename not
            # pushed yet): it moves first; a cycle (a swap) is broken by parking.
            blocker = st.nodes[st.by_memory[mid]]
            if node.memory_id is not None and self._in_rename_cycle(node, blocker):
                await self._park(node)
            return False
        if exc.conflicting_path != path:
            ctx.status.note(f"{path}: the server has a memory at {exc.conflicting_path}, "
                            "which overlaps this path; kept locally, will retry")
            return False
        try:
            remote = await ctx.client.get_memory(ctx.store_id, mid, view="basic")
        except api_errors.NotFoundError:
            return False  # deleted since: the next pass creates again
        if remote.content_sha256 in (sha, previous_sent) and node.memory_id is None:
            self._adopt(node, remote)  # our own create whose response was lost
            return remote.content_sha256 == sha
        if node.memory_id is None:
            await ctx.take_remote(node, remote, "another writer created the same path")
            return False
        # Our rename lands on a path another memory holds on the server (created
        # there, or changed there after we deleted it): the server's memory wins the
        # path, our content is preserved as a conflict, and our own memory, which no
        # local file holds any more, is deleted after the delay.
        with st.transaction():
            st._tombstone(node)
            st._save(node)
        await ctx.take_remote(node, remote, "another memory holds this path on the server")
        return False

    async def _delete_early(self, tomb, path: str) -> bool:
        """Send one tombstone's delete now because `path` needs its place; True when
        the place is free (deleted, or already gone)."""
        ctx, st = self.ctx, self.state
        if tomb.memory_id in st.by_memory or tomb.memory_id not in st.tombstones:
            return False  # revived or settled meanwhile: the next pass sees it
        if ctx.options.deletes != "enabled":
            ctx.status.note(f"{path} waits: the server still holds {tomb.base_path} (deleted "
                            f"here) and deletes are {ctx.options.deletes}")
            return False
        if not await self._send_delete(tomb):
            return False
        log.info("deleted %s (%s) early: %s needs its place", tomb.memory_id, tomb.base_path,
                 path)
        return True

    async def _send_delete(self, tomb) -> bool:
        """Delete tomb's memory if it still holds the sha we deleted; True when it is
        gone. Either way the tombstone is settled: a memory changed on the server comes
        back through the reconciler (the server's edit wins over a local delete)."""
        ctx, st = self.ctx, self.state
        try:
            await ctx.client.delete_memory(ctx.store_id, tomb.memory_id,
                                           expected_sha=tomb.base_sha or None)
            gone = True
        except api_errors.NotFoundError:
            gone = True  # already gone
        except api_errors.ConflictError:
            ctx.status.note(f"{tomb.base_path} was deleted here but changed on the server; "
                            "restoring the server's version")
            ctx.kick_reconcile()
            gone = False
        if tomb.memory_id in st.tombstones:
            st.drop_tombstone(tomb.memory_id)
        return gone

    def _in_rename_cycle(self, node: Node, blocker: Node) -> bool:
        """Whether blocker's pending move is (transitively) blocked by node itself."""
        st = self.state
        by_base = {n.base_path: n for n in st.files() if n.memory_id and n.base_path}
        seen: set[int] = set()
        cur: Node | None = blocker
        while cur is not None and cur.ino not in seen:
            if cur is node:
                return True
            seen.add(cur.ino)
            want = st.path_of(cur) if cur.ino in st.nodes else None
            if want is None or want == cur.base_path:
                return False
            cur = by_base.get(want)
        return False

    async def _park(self, node: Node) -> None:
        """Break a rename cycle (a swap: a→b, b→a): move node's memory out of the way
        to a private path; its real rename goes out on the next pass."""
        ctx = self.ctx
        assert node.memory_id is not None
        park = f"{PARK_DIR}/{node.memory_id}"
        try:
            memory = await ctx.client.update_memory(
                ctx.store_id, node.memory_id, precondition_sha=node.base_sha, path=park)
        except (api_errors.ConflictError, api_errors.NotFoundError, *api_errors.REFUSED):
            return  # the next pass meets the real cause through the normal path
        log.info("rename cycle: parked %s at %s", node.memory_id, park)
        self._adopt(node, memory)
        ctx.kick()

    async def _precondition_failed(self, node: Node, sha: str, previous_sent: str | None) -> bool:
        ctx = self.ctx
        assert node.memory_id is not None
        try:
            remote = await ctx.client.get_memory(ctx.store_id, node.memory_id, view="basic")
        except api_errors.NotFoundError:
            self.state.forget_memory(node)
            ctx.kick()
            return False
        if remote.content_sha256 in (sha, previous_sent):
            self._adopt(node, remote)  # our earlier write landed unheard
            ctx.kick()
            return remote.content_sha256 == sha
        await ctx.take_remote(node, remote, "changed on the server and here at the same time")
        return False

    # -- deletes ------------------------------------------------------------------------------

    async def _push_deletes(self, *, flush: bool) -> int:
        ctx, st = self.ctx, self.state
        mode = ctx.options.deletes
        if mode == "disabled" or not st.tombstones:
            return 0
        now = time.time()
        due = sorted((t for t in st.tombstones.values()
                      if flush or t.deleted_at + ctx.options.delete_delay <= now),
                     key=lambda t: t.deleted_at)
        cap = delete_cap(len(st.by_memory) + len(st.tombstones))
        if len(due) > cap:
            log.info("delete cap reached: sending %d deletes, holding %d for later passes",
                     cap, len(due) - cap)
        sent = 0
        for tomb in due[:cap]:
            if tomb.memory_id in st.by_memory:  # revived meanwhile
                st.drop_tombstone(tomb.memory_id)
                continue
            if mode == "log-only":
                log.info("log-only: would delete %s (%s)", tomb.memory_id, tomb.base_path)
                continue
            if await self._send_delete(tomb):
                sent += 1
        return sent


def _store_full(exc: api_errors.APIError) -> bool:
    msg = (exc.message or "").lower()
    return "2,000" in msg or "2000" in msg or "maximum number of memories" in msg
