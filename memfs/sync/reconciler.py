"""The reconciler: move the base when the server changes.

Every poll interval it lists the store content-free (`view=basic`, 100 a
page) and applies the merge table (memfs/core/decide.py, docs/SYNC.md) by
memory id. Two rules keep a listing from lying:

- A listing is paginated by path while other clients write, so a memory
  renamed during the pass can be on no page at all: absence is confirmed
  with a GET (404) before anything is deleted or re-created.
- A page is old news for any file whose base was set by an answer that
  arrived after the listing began (a cache-miss fetch runs outside the sync
  lock): such rows are skipped, never rolled back (`State.epoch`).

Content is only fetched where a conflict needs it; the prefetcher fills the
cache from `view=full` pages in the background. Kernel invalidations are
queued (`ctx.invalidate`) and run outside any request handler.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

import trio

from memfs.api import errors as api_errors
from memfs.api.models import Memory, MemoryPrefix, format_time, parse_time
from memfs.core import decide
from memfs.core.nodes import Node, Remote, is_parked
from memfs.state.transitions import Deferred
from memfs.sync import doubts
from memfs.sync.common import SyncContext, gather_bounded, local_of, remote_of
from memfs.sync.feed import EPOCH, Change, Feed

log = logging.getLogger(__name__)

#: A memory another client parked mid-swap is left alone this long; then it is
#: treated as abandoned and our copy's place wins (moved back by our pusher).
PARK_PATIENCE = 300.0


class Reconciler:
    def __init__(self, ctx: SyncContext) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self._parked_since: dict[str, float] = {}
        self.feed = Feed(ctx.client, ctx.store_id, learn=ctx.events.learn,
                         lookback=ctx.options.lookback,
                         wrote_as=ctx.learn_writer)
        self.last_full: float | None = None  # monotonic time of the last full listing
        #: During a pass: the server's renames that could not follow yet (their place is
        #: held by a file another row of the pass moves away: a chain, a→c then b→a).
        self._blocked: list[Memory] | None = None
        #: During a pass: the memories whose row waited for a file's unsaved writes. The
        #: feed will not show their change again, and the close may push nothing (the
        #: writes were the content it had): the next poll names them once more.
        self._waited: set[str] = set()
        #: When the pass under way began reading the server (wall time, as
        #: `Node.changed_at`): a write here since may be newer than what it read.
        self._started = float("inf")
        self.last_pass: float | None = None  # monotonic time of the last finished pass

    async def run(self) -> None:
        while True:
            if self.last_pass is not None and \
                    time.monotonic() - self.last_pass < self.ctx.options.poll_interval:
                # A pass just ran (the mount's first listing, a `sync`): wait a turn.
                with trio.move_on_after(self.ctx.options.poll_interval):
                    await self.ctx.reconcile_wakeup.wait()
                self.ctx.reconcile_wakeup = trio.Event()
            try:
                await self.reconcile_pass(coalesce=True)
                delay = self.ctx.options.poll_interval
            except (*api_errors.TRANSIENT, api_errors.AuthenticationError) as exc:
                delay = self.ctx.went_offline(exc)
                if isinstance(exc, api_errors.APIConnectionError):
                    # Nothing answered: a probe per poll costs what an online poll
                    # costs, and a server started again is seen within one poll.
                    delay = min(delay, self.ctx.options.poll_interval)
            except api_errors.APIError as exc:
                # 403, 404 (store gone), a malformed page...: not "offline", but no
                # reason to take the mount down either. Report it and try again later.
                self.ctx.status.failed(f"listing failed: {type(exc).__name__}: {exc}")
                self.ctx.status.note(self.ctx.status.last_error)
                self._failing()
                delay = max(self.ctx.options.poll_interval, 5.0)
            except Exception as exc:  # a bug must not take the mount down
                log.exception("reconcile pass failed")
                self.ctx.status.failed(f"reconcile: {type(exc).__name__}: {exc}")
                self._failing()
                delay = self.ctx.options.poll_interval
            with trio.move_on_after(delay):
                await self.ctx.reconcile_wakeup.wait()
            self.ctx.reconcile_wakeup = trio.Event()

    def _failing(self) -> None:
        """A pass failed with the server answering: `memfs status` said "online" and
        nothing more while no pass got through (found by a helper: a server whose
        answers turned unreadable after the first listing)."""
        if self.ctx.status.failing_since is None:
            self.ctx.status.failing_since = time.time()

    async def list_remote(self, alongside: Callable[[], Awaitable[None]] | None = None,
                          ) -> list[Memory]:
        """The whole store, content-free: the root's own entries (`depth=1`), then
        each top-level directory's listing, several at once (a store of 20
        directories is listed in the time of its largest directory, not of all
        its pages in a row). A memory that moves between two listings during the
        pass is on neither: absence is confirmed before it counts. `alongside`
        runs at the same time as the root's listing, and ends before the
        directories are listed."""
        ctx = self.ctx
        root: list = []

        async def list_root() -> None:
            root.extend([m async for m in ctx.client.list_memories(
                ctx.store_id, depth=1, view="basic", limit=100)])

        steps = [list_root] if alongside is None else [alongside, list_root]
        await gather_bounded(steps, lambda step: step(), len(steps))
        found = [m for m in root if isinstance(m, Memory)]
        prefixes = [p.path for p in root if isinstance(p, MemoryPrefix)]
        listed: dict[str, list[Memory]] = {}

        async def one(prefix: str) -> None:
            listed[prefix] = [m async for m in ctx.client.list_memories(
                ctx.store_id, path_prefix=prefix, view="basic", limit=100)
                if isinstance(m, Memory)]

        await gather_bounded(prefixes, one, ctx.options.push_concurrency)
        for prefix in prefixes:
            found.extend(listed[prefix])
        return found

    async def reconcile_pass(self, *, full: bool = False, coalesce: bool = False) -> None:
        """One pass: a feed poll when the feed can be trusted, else (or when `full`,
        or every `full_resync` seconds) a full listing, which also re-anchors it.

        `coalesce` (the loop's periodic pass, the mount's first listing): a pass that
        finished while this one waited for the sync lock counts as this one, and
        nothing more is done. At mount the loop and the first listing start together;
        without this the second of them polled the feed the moment the first ended,
        paging through the store's recent versions while the first commands ran in
        the mount. A `sync` request never coalesces: it wants a pass begun after it."""
        ctx = self.ctx
        before = self.last_pass
        async with ctx.sync_lock:
            if coalesce and self.last_pass != before:
                return
            # A request whose answer was lost: what the server did is ours, not a
            # stranger's change (a memory our lost create made is not "new").
            done = doubts.Resolved()
            try:
                await doubts.resolve(ctx, done)
            finally:  # what was resolved counts, a read that failed after it or not
                ctx.status.pushed += done.applied
                for mid in done.reread:
                    self.feed.recheck(mid)
            started = self._started = time.time()
            since = self.state.epoch
            self._blocked = []
            try:
                due = (self.last_full is None
                       or time.monotonic() - self.last_full >= ctx.options.full_resync)
                if full or due or not ctx.options.feed or not self.feed.trusted():
                    await self._full_pass(since, safety_net=self.feed.trusted() and not full)
                else:
                    try:
                        ctx.metrics.feed_polls += 1
                        try:
                            changes = await self.feed.poll(self._applied)
                        finally:
                            ctx.status.feed_polls = [c.as_dict() for c in self.feed.costs]
                            ctx.status.feed_late = self.feed.late
                        ctx.came_online()
                        if changes is None:  # a burst: one listing is cheaper
                            await self._full_pass(since, safety_net=False)
                        else:
                            await self._apply_changes(changes, since)
                    except BaseException:
                        self.feed.reset(None)  # not applied: the next pass lists everything
                        raise
                await self._follow_blocked()
                for mid in self._waited:  # (after the listing's reset of the feed)
                    self.feed.recheck(mid)
            finally:
                self._blocked = None
                self._waited = set()
            ctx.status.last_sync_at = time.time()
            ctx.status.failing_since = None
            ctx.status.last_sync_seconds = ctx.status.last_sync_at - started
            position = self.feed.position if self.feed.trusted() else None
            ctx.status.feed_position = (None if position is None else "the store's start"
                                        if position == EPOCH else format_time(position))
            self.state.set_meta("last_sync_at", str(ctx.status.last_sync_at))
            self.state.set_meta("last_sync_seconds", str(ctx.status.last_sync_seconds))
            self.last_pass = time.monotonic()
        ctx.listed.set()  # the prefetcher starts from a finished listing
        ctx.kick()  # re-created or revived files may now be pushable

    async def _full_pass(self, since: int, *, safety_net: bool) -> None:
        """List everything and apply it; anchor the feed at the newest version read
        just before the listing. As a safety net (the feed was trusted), a change the
        feed should have brought is logged and counted: that count must stay 0."""
        ctx = self.ctx
        confirmed = self.feed.confirmed  # the feed vouches for every change up to there
        head: list[datetime] = []
        started = self.feed.clock()

        async def read_head() -> None:
            head.append(await self.feed.head())

        # The feed's position, read alongside the root's listing (one round trip less
        # before a mount is usable), so a write to a root-level memory may land between
        # the two: the head starts back by the time the listing took (Feed.reset).
        remote = await self.list_remote(read_head if ctx.options.feed else None)
        position = head[0] if head else None
        ctx.came_online()
        horizon = confirmed if safety_net and confirmed > EPOCH else None
        await self._apply(remote, since, horizon=horizon)
        window = None if position is None else position - self.feed.lookback
        recent = {} if window is None else {
            m.id: when for m in remote if m.updated_at
            and (when := parse_time(m.updated_at)) > window}
        self.feed.reset(position, listed_since=started, recent=recent)
        self.last_full = time.monotonic()
        ctx.status.last_full_listing_at = time.time()

    def _applied(self, v) -> bool:
        """Whether the mount already holds what version v wrote."""
        st = self.state
        node, tomb = st.holder(v.memory_id), st.tombstones.get(v.memory_id)
        if v.operation == "deleted":
            return node is None and tomb is None
        if node is not None:
            return (v.path, v.content_sha256) == (node.base_path, node.base_sha)
        return tomb is not None and (v.path, v.content_sha256) == (tomb.base_path,
                                                                   tomb.base_sha)

    async def _apply_changes(self, changes: list[Change], since: int) -> None:
        """The memories the feed names: re-read each (its head now) and apply its row;
        a 404 is a confirmed delete. A change that is exactly our base (our own write,
        already applied from its answer) needs no request."""
        st = self.state
        todo = []
        for c in changes:
            node, tomb = st.holder(c.memory_id), st.tombstones.get(c.memory_id)
            if c.operation == "deleted" and node is None and tomb is None:
                continue  # created and deleted elsewhere, never here: nothing to do
            if c.operation != "deleted":
                if node is not None and (c.path, c.sha) == (node.base_path, node.base_sha):
                    continue
                if tomb is not None and (c.path, c.sha) == (tomb.base_path, tomb.base_sha):
                    continue
            todo.append(c.memory_id)
        if todo:
            await self._confirm_absent(todo, since)

    async def _apply(self, remote: list[Memory], since: int, *,
                     horizon: datetime | None = None) -> None:
        st = self.state
        # The memories not listed first (each confirmed): a delete frees the path a new
        # memory may have taken on the server. Then the memories we hold: their moves
        # free the paths new memories may need.
        listed = {m.id for m in remote}
        missing = [mid for mid in st.by_memory if mid not in listed]
        missing += [mid for mid in st.tombstones if mid not in listed]
        if missing:
            await self._confirm_absent(missing, since)
        seen: set[str] = set()
        rows = sorted(remote, key=lambda m: m.id not in st.by_memory)
        i = 0
        while i < len(rows):
            m = rows[i]
            if m.id in seen:  # renamed forward between two pages: listed twice
                i += 1
                continue
            if horizon is None and self._plain_new(m):
                with st.batch():  # a run of them (a first listing): one commit
                    while i < len(rows) and (rows[i].id in seen or self._plain_new(rows[i])):
                        if rows[i].id not in seen:
                            seen.add(rows[i].id)
                            self._add_new(rows[i])
                        i += 1
                continue
            i += 1
            seen.add(m.id)
            before = self._fingerprint(m.id) if horizon is not None else None
            await self._row(m, since)
            if horizon is not None and m.updated_at and parse_time(m.updated_at) < horizon \
                    and self._fingerprint(m.id) != before:
                self.ctx.status.feed_missed += 1
                self.ctx.status.note(f"the change feed missed a change of {m.path} ({m.id}, "
                                     f"updated {m.updated_at}); the full listing applied it")

    def _plain_new(self, m: Memory) -> bool:
        """A memory new here (no file, no pending delete) whose path is free: its row
        is `_unknown`'s ADD, which `_add_new` applies with no checkpoint."""
        st = self.state
        return (st.holder(m.id) is None and m.id not in st.tombstones
                and st.lookup_path(m.path) is None
                and decide.unknown_row(m.path, m.content_sha256, None, None, False,
                                       create_in_doubt=self._create_in_doubt(m.path))
                is decide.Unknown.ADD)

    def _create_in_doubt(self, path: str) -> bool:
        """A create of ours whose answer was lost wrote `path`: a memory there may be
        the one it made, landed late (`decide.Unknown.DOUBT`)."""
        return any(t.memory_id is None and t.path == path for t in self.state.doubts.values())

    def _add_new(self, m: Memory) -> None:
        """`_unknown`'s ADD row (synchronous). A path under one of our files (a new
        /notes/today.md while our /notes is a file the server moved away) is tried again
        after the pass's other rows (`_follow_blocked`), which may move that file."""
        node = self.state.add_remote(remote_of(m))
        if node is None:
            if self._blocked is not None:  # a later row of this pass may free the path
                self._blocked.append(m)
                return
            self.ctx.status.note(f"the server's {m.path} overlaps a local directory or file; "
                                 "not shown until that is resolved")
        else:
            self._entry_changed(node)
            self.ctx.events.remote("created", m)

    def _fingerprint(self, mid: str) -> tuple:
        """What a row can change about one memory here (to see whether it acted)."""
        node, tomb = self.state.holder(mid), self.state.tombstones.get(mid)
        return ((node.ino, node.base_path, node.base_sha, node.sha,
                 self.state.path_of(node)) if node else None,
                (tomb.base_path, tomb.base_sha) if tomb else None)

    async def _row(self, m: Memory, since: int | None) -> None:
        node = self.state.holder(m.id)
        if node is None:
            await self._unknown(m)
        else:
            await self._known(node, m, since)

    async def _confirm_absent(self, missing: list[str], since: int | None = None) -> None:
        """Ask for each memory (its head now): a 404 is a confirmed delete; found, its
        row is applied. Used for memories on no page of a listing (it may have moved
        between pages) and for the memories the feed names."""
        found: dict[str, Memory | None] = {}

        async def probe(mid: str) -> None:
            found[mid] = await self.ctx.client.find_memory(self.ctx.store_id, mid,
                                                           view="basic")

        # Offline (any other error): raised, nothing is decided this pass.
        await gather_bounded(missing, probe, self.ctx.options.push_concurrency)
        # Deletes first, then memories we hold, then new ones: each frees paths the
        # next may need (a memory renamed away, another created at its old path).
        order = sorted(missing, key=lambda mid: (found[mid] is not None,
                                                 mid not in self.state.by_memory))
        for mid in order:
            m = found[mid]
            if m is not None:
                await self._row(m, since)
                continue
            node = self.state.holder(mid)
            if node is not None:
                self._deleted_remotely(node)
            elif mid in self.state.tombstones:
                self.state.tombstone_settled(mid)  # gone on the server too

    # -- rows of the merge table ----------------------------------------------------

    async def _unknown(self, m: Memory) -> None:
        st, ctx = self.state, self.ctx
        tomb = st.tombstones.get(m.id)
        at_path = st.lookup_path(m.path)
        row = decide.unknown_row(
            m.path, m.content_sha256,
            decide.PendingDelete(tomb.base_sha, tomb.sent_sha) if tomb else None,
            local_of(st, at_path, self._started) if at_path is not None
            and not at_path.is_dir else None,
            at_path is not None and at_path.is_dir,
            create_in_doubt=self._create_in_doubt(m.path))
        U = decide.Unknown
        if row in (U.WAIT, U.DOUBT):
            self._waited.add(m.id)
        if row is U.DELETE_PENDING:
            st.tombstone_moved(m.id, m.path)
            return
        if row in (U.HIDDEN, U.WAIT, U.DOUBT):
            return
        if row is U.REBASE_DELETE:
            st.tombstone_rebased(m.id, m.content_sha256, m.path)
            return
        if row is U.RESTORE:
            ctx.status.note(f"{m.path} was deleted here but changed on the server; "
                            "restoring the server's version")
            row = U.ADD  # add_remote cancels the pending delete
        if row is U.ADD:
            self._add_new(m)
            return
        if row is U.COLLIDE:
            if tomb is not None:  # our delete no longer applies: the server changed it
                st.tombstone_settled(m.id)
            if self._blocked is not None:  # a later row of this pass may free the path
                self._blocked.append(m)
                return
            ctx.status.note(f"the server's {m.path} ({m.id}) collides with a local "
                            f"{'directory' if at_path and at_path.is_dir else 'file'}; not shown")
            if at_path is not None and not at_path.is_dir:
                # Another memory of ours holds the path here: its push meets this one
                # (409) and shows it, but if it is moved away or deleted first, the feed
                # will not show this memory again. The next poll names it.
                self._waited.add(m.id)
            return
        assert at_path is not None
        if row is U.ADOPT:  # same bytes, or our own create whose answer was lost
            st.adopt_own_write(at_path, remote_of(m))
            return
        try:
            await ctx.settle_conflict(at_path, m.id, ctx.path_taken_reason(m.id),
                                      gen=at_path.gen)
        except Deferred:
            # Changed meanwhile (written, or moved away while the memory was read): the
            # next pass decides again, and the feed will not show this memory again.
            self._waited.add(m.id)

    async def _known(self, node: Node, m: Memory, since: int | None) -> None:
        st, ctx = self.state, self.ctx
        if since is not None and node.base_epoch > since:
            return  # an answer newer than this page already set the base
        local = local_of(st, node, self._started)
        ours_parked = m.id in st.parks or self._abandoned_park(m)
        place = decide.place_row(local, m.path, ours_parked=ours_parked)
        content = decide.content_row(local, m.content_sha256)
        C = decide.Content
        took = False  # the row's content, taken: said once the place is settled too
        if content is C.WAIT:
            self._waited.add(m.id)
        elif content is C.ADOPT:
            st.adopt_own_write(node, Remote(m.id, node.base_path or m.path, m.content_sha256,
                                            m.content_size_bytes))
        elif content is C.TAKE:
            try:
                st.remote_content(node, remote_of(m), gen=node.gen)
                ctx.invalidate(("inode", node.ino))
                took = True
            except Deferred:
                return
        elif content is C.CONFLICT:
            try:
                await ctx.settle_conflict(node, m.id, "changed on the server and here at the "
                                          "same time", gen=node.gen)
            except Deferred:
                return
        P = decide.Place
        held = st.holder(m.id) is node  # (a conflict settled above may have moved it)
        if held and place is P.FOLLOW:
            old_parent, old_name = node.parent, node.name
            if st.remote_moved(node, m.path):
                ctx.invalidate(("entry", old_parent, old_name))
                self._entry_changed(node)
                # One version, one event: a version that moved and edited the memory
                # was said twice, the edit at the new path first (a helper).
                ctx.events.remote("renamed", m, old_path=local.path)
                took = False
            elif self._blocked is not None:  # a later row of this pass may free it
                self._blocked.append(m)
            else:
                ctx.status.note(f"cannot move {local.path} to {m.path} (renamed on the "
                                "server): the place is taken locally")
                if st.open_dirty:
                    # Perhaps by a file with unsaved writes, which the server's rename
                    # may not take from (`_claim`): once saved, it yields. The feed will
                    # not show this rename again, and our create of that path would wait
                    # for it (409, our memory holds it) until the next full listing.
                    self._waited.add(m.id)
        elif held and place in (P.KEEP_OURS, P.SAME):
            st.remote_base_path(node, m.path)
        if took:
            ctx.events.remote("modified", m)

    async def _follow_blocked(self) -> None:
        """The server's renames that could not follow when their row came (the place was
        held by a file a later row moved away: a chain such as a→c, b→a), and its new
        memories whose path was held so (b→c, a→b, a new /a), are tried again once the
        rest of the pass is applied, until a round places none of them; the rows of those
        left then say why they wait. Without the epoch guard: the base may have moved
        since the listing only by this pass's own rows (it holds the sync lock), this
        memory's among them (its content taken while its place was held): the guard
        would skip the move it waits for."""
        while self._blocked:
            blocked, self._blocked = self._blocked, []
            for m in blocked:
                await self._row(m, None)
            if len(self._blocked) >= len(blocked):
                self._follow_rings(self._blocked)  # what waits on itself, all at once
                break
        left, self._blocked = self._blocked or [], None
        for m in left:
            await self._row(m, None)

    def _follow_rings(self, blocked: list[Memory]) -> None:
        """Renames that wait on each other in a ring (another writer swapped a and b
        through a third name, and this pass sees only the end: each file's new place is
        held by the next) can never follow one by one: each ring moves at once. (Nothing
        else waited on a ring's places: each is taken again by the next file.)"""
        st, ctx = self.state, self.ctx
        wants: dict[int, tuple[Node, Memory]] = {}
        for m in blocked:
            node = st.holder(m.id)
            if node is not None and node.ino not in st.open_dirty:
                wants[node.ino] = (node, m)
        done: set[int] = set()
        for start in wants:
            ring, ino = [], start
            while ino in wants and ino not in ring and ino not in done:
                ring.append(ino)
                taker = st.lookup_path(wants[ino][1].path)
                ino = taker.ino if taker is not None else None
            if ino != start or len(ring) < 2:
                continue
            olds = {i: (wants[i][0].parent, wants[i][0].name, st.path_of(wants[i][0]))
                    for i in ring}
            if not st.remote_moved_in_a_ring([(wants[i][0], wants[i][1].path) for i in ring]):
                continue
            done.update(ring)
            for i in ring:
                node, m = wants[i]
                parent, name, old_path = olds[i]
                ctx.invalidate(("entry", parent, name))
                self._entry_changed(node)
                ctx.events.remote("renamed", m, old_path=old_path)
            log.info("followed the server's renames of %s at once (they held each "
                     "other's places)", ", ".join(olds[i][2] for i in ring))

    def _abandoned_park(self, m: Memory) -> bool:
        """Another client's park that never landed: after PARK_PATIENCE, ours wins."""
        if not is_parked(m.path):
            self._parked_since.pop(m.id, None)
            return False
        first = self._parked_since.setdefault(m.id, time.monotonic())
        return time.monotonic() - first > PARK_PATIENCE

    def _deleted_remotely(self, node: Node) -> None:
        st, ctx = self.state, self.ctx
        path = st.path_of(node)
        parent, name = node.parent, node.name
        ctx.events.deleted(path, node.memory_id)
        row = decide.absent_row(local_of(st, node), found=False)
        st.remote_deleted(node, keep=row is decide.Absent.KEEP_AS_NEW)
        if row is decide.Absent.KEEP_AS_NEW:
            if ctx.options.read_only:
                ctx.status.note(f"{path} was deleted on the server but edited here; kept "
                                "locally, unsynced (read-only mount)")
            elif st.is_local_only(node):  # a temp name: no memory is made of it
                ctx.status.note(f"{path} was deleted on the server but edited here; kept "
                                "here only (a temp name stays local)")
            else:
                ctx.status.note(f"{path} was deleted on the server but edited here; "
                                "re-creating it from the file")
            return
        ctx.invalidate(("entry", parent, name))

    def _entry_changed(self, node: Node) -> None:
        """A name appeared: drop a cached negative entry for it."""
        self.ctx.invalidate(("entry", node.parent, node.name))
