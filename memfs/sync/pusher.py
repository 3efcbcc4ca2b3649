"""The pusher: make the server match the mount's local state.

A push pass sends the due tombstones' deletes (each with
`expected_content_sha256`), then one request per due dirty file (an update
preconditioned on the base sha, or a create), at most `push_concurrency` at
a time. Nothing is replayed from a log: the pass derives its work from state,
so a crash, a retry or ten saves in a row come down to the same few calls.

Every request is a `PushTicket`; its answer is applied by `State` to whoever
holds the identity when it arrives (docs/ARCHITECTURE.md). Pushes share the trio
thread with the FUSE handlers (and, with `memfs serve`, the disk with the server),
and the mount's users come first: while FUSE requests keep coming, a push waits
for a quiet moment (`_yield_to_mount`). One file's refusal
(403, 422, ...) is recorded against that file with its own backoff while the
rest of the queue goes out; transient trouble (429, 5xx, network) makes the
mount offline and the pass is retried with backoff, honouring retry-after.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass

import trio

from memfs.api import errors as api_errors
from memfs.api.client import answers_when
from memfs.api.models import Memory
from memfs.core import decide, paths
from memfs.core.nodes import EMPTY_SHA, Node, PushTicket, Tombstone
from memfs.state.state import PARK_DIR
from memfs.state.transitions import Deferred
from memfs.sync import doubts
from memfs.sync.common import SyncContext, local_of, remote_of
from memfs.sync.feed import Feed

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    pushed: int = 0        # requests the server applied
    progress: int = 0      # state transitions (landed, adopted, parked, conflicts...)
    left: int = 0
    offline: BaseException | None = None
    unreachable: bool = False  # a connection failed: start no more requests this pass


#: The mount is busy while FUSE brought a request this recently (seconds)...
BUSY_WINDOW = 0.02
#: ... then a push waits for a quiet moment, at most this long (seconds), ...
YIELD_MAX = 1.0
#: ... and if none comes, goes as one of at most this many started while busy, ...
BUSY_CONCURRENCY = 2
#: ... one such start per this many seconds at most: a busy mount takes in at most
#: 10 answers a second (about 2-3 % of its trio thread), however often a copy pauses.
BUSY_INTERVAL = 0.1
#: Pushes go at full concurrency only once FUSE has been quiet this long (seconds); a
#: shorter gap (a `cp -r` preempted on a loaded machine) lets BUSY_CONCURRENCY go.
QUIET_WINDOW = 0.3
#: The answer of a push sent while the mount was quiet, met by a busy mount, waits for a
#: quiet moment at most this long (seconds): a copy of a few seconds begun while a pass
#: runs does not take in the pass's answers; a mount that stays busy longer still does,
#: and its pass goes on (docs/BENCHMARKS.md, section 6).
ANSWER_WAIT_MAX = 3.0
#: A flush that waits on a request which may still land asks the server again after this
#: long (seconds), then twice as long each time up to a second: a request held up briefly
#: (the common case) is settled within a tenth of a second, one held long costs about one
#: history read a second.
DOUBT_RECHECK = 0.1


def delete_cap(known: int) -> int:
    return max(8, min(50, known // 4))


class Pusher:
    def __init__(self, ctx: SyncContext, feed: Feed | None = None) -> None:
        """`feed`: the reconciler's change feed, told the version id of every write of
        ours the server answered: when the feed reads it, it is not news."""
        self.ctx = ctx
        self.state = ctx.state
        self.feed = feed
        self._stop = trio.Event()
        self._stopped = trio.Event()
        self._idle_scope: trio.CancelScope | None = None
        self._run_scope: trio.CancelScope | None = None  # the loop's, while it runs
        self._running = False
        self._not_before = 0.0  # trio clock: a 429's retry-after holds every request
        self._busy_pushes = 0  # pushes in flight that started while FUSE was busy
        self._busy_next = 0.0  # trio clock: the next push may start while busy from then
        self._gate = trio.Lock()  # one push at a time watches for a quiet mount
        self._answers = trio.Lock()  # one answer at a time waits for it (`_answer_ready`)
        self._flushing = 0  # flushes waiting: a pass under way stops yielding to FUSE
        #: Files whose create the server last turned down because the store holds its
        #: 2,000 memories: they wait, unpunished (a delete anywhere makes room), and the
        #: unmount names them (`StoreEngine.kept_local`).
        self.no_room: set[int] = set()

    # -- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        """Push whenever something becomes due; back off while offline."""
        self._running = True
        try:
            with trio.CancelScope() as self._run_scope:
                await self._loop()
        finally:
            self._stopped.set()

    async def _loop(self) -> None:
        idle_retry = 5.0  # after a pass that could not push what was due
        while not self._stop.is_set():
            delay = self.next_due_in()
            if delay is None or delay > 0:
                await self._idle(math.inf if delay is None else delay, "push")
                # Every close kicks: let a burst (cp -r) land before rescanning.
                if not self._stop.is_set():
                    await trio.sleep(min(0.1, self.ctx.options.write_back_delay / 2))
                continue
            try:
                result = await self.push_pass()
            except Exception as exc:  # a bug must not take the mount down
                log.exception("push pass failed")
                self.ctx.status.failed(f"push: {type(exc).__name__}: {exc}")
                result = PassResult()
            if result.offline is not None:
                # Back off (jitter, retry-after), but go as soon as the reconciler
                # finds the server again.
                await self._idle(self.ctx.went_offline(result.offline), "online")
            elif result.pushed == 0 and result.progress == 0:
                await self._idle(idle_retry, "push")

    async def _idle(self, seconds: float, wake: str) -> None:
        with trio.CancelScope() as scope:
            self._idle_scope = scope
            if not self._stop.is_set():
                with trio.move_on_after(seconds):
                    if wake == "push":
                        await self.ctx.push_wakeup.wait()
                    else:
                        await self.ctx.online_wakeup.wait()
        self._idle_scope = None
        if wake == "push":
            self.ctx.push_wakeup.clear()

    async def stop(self, timeout: float = math.inf) -> None:
        """Stop the background loop: a pass under way finishes (its requests are
        answered and applied), no new one starts. For the unmount flush, which gives
        it `timeout`: a pass still under way then (a server that takes requests and
        never answers) is cancelled, its requests in doubt as after a crash (journaled
        before they went out: the flush, or the next mount, asks what they did)."""
        self._stop.set()
        if not self._running:
            return  # never started (read-only mount, or shut down before it ran)
        if self._idle_scope is not None:
            self._idle_scope.cancel()
        with trio.move_on_after(timeout):
            await self._stopped.wait()
            return
        log.info("a push pass still under way after %g s: cancelled", timeout)
        if self._run_scope is not None:
            self._run_scope.cancel()
        await self._stopped.wait()

    def next_due_in(self) -> float | None:
        """Seconds until the next change is due (<= 0: now), None when idle."""
        if self.ctx.options.read_only:
            return None
        now = time.time()
        dues = [max(self._due_at(n), n.retry_at or 0) - now for n in self._dirty()]
        if self.state.doubts:
            dues.append(0.0)  # a request in doubt: find out now
        if self.ctx.options.deletes == "enabled":
            dd = self.ctx.options.delete_delay
            dues += [max(t.deleted_at + dd, t.retry_at or 0) - now
                     for t in self.state.tombstones.values()]
        return min(dues) if dues else None

    def _due_at(self, node: Node) -> float:
        opts = self.ctx.options
        return decide.push_due_at(node.changed_at, node.dirty_since,
                                  write_back_delay=opts.write_back_delay,
                                  max_push_delay=opts.max_push_delay)

    def _dirty(self) -> list[Node]:
        """Files with something to push: refused content waits for a new sha,
        but a refused file's memory still follows a rename."""
        st = self.state
        return [n for n in st.dirty_files()
                if not st.is_refused(n) or self._rename_pending(n)]

    def _rename_pending(self, node: Node) -> bool:
        return node.memory_id is not None and self.state.path_of(node) != node.base_path

    def pending_total(self) -> int:
        """What is not known to be on the server: dirty files, pending deletes, and
        requests whose outcome is unknown (a file already gone still has one)."""
        st = self.state
        dirty = self._dirty()
        inos = {n.ino for n in dirty}
        return len(dirty) + len(st.tombstones) + sum(
            1 for t in st.doubts.values() if t.ino not in inos)

    # -- one pass -------------------------------------------------------------------------

    async def push_pass(self, *, flush: bool = False, retry_failed: bool = False) -> PassResult:
        """Push what is due (everything, when flushing); return what happened.

        `retry_failed`: also files and deletes waiting out a refusal's backoff."""
        result = PassResult()
        if self.ctx.options.read_only:
            return result
        async with self.ctx.sync_lock:
            st = self.state
            if st.doubts:
                # What happened to a request whose answer was lost decides what the
                # file's next request is: resolve before sending anything.
                done = doubts.Resolved()
                try:
                    await doubts.resolve(self.ctx, done)
                except (*api_errors.TRANSIENT, api_errors.AuthenticationError) as exc:
                    result.offline = exc
                # What was resolved counts, the pass offline or not.
                result.progress += done.resolved
                result.pushed += done.applied  # the change did reach the server
                if self.feed is not None:
                    for mid in done.reread:
                        self.feed.recheck(mid)
                if result.offline is not None:
                    self.ctx.status.pushed += result.pushed
                    result.left = self.pending_total()
                    return result
            now = time.time()

            def waiting(item: Node | Tombstone) -> bool:
                return not retry_failed and item.retry_at is not None and item.retry_at > now

            # A file (or memory) whose request is still in doubt sends nothing more, nor
            # does a file at the path it wrote (a create or a rename there may still
            # land: a file made or moved there since would meet it).
            unsure = {t.ino for t in st.doubts.values()}
            unsure_ids = {t.memory_id for t in st.doubts.values() if t.memory_id}
            unsure_paths = {t.path for t in st.doubts.values()}
            files = [n for n in self._dirty()
                     if (flush or self._due_at(n) <= now) and not waiting(n)
                     and n.ino not in unsure and n.memory_id not in unsure_ids
                     and not (unsure_paths and st.path_of(n) in unsure_paths)]
            deletes = [t for t in self._due_deletes(now, flush)
                       if not waiting(t) and t.memory_id not in unsure_ids]
            limiter = trio.CapacityLimiter(self.ctx.options.push_concurrency)
            # Deletes first: they free paths (and store slots, at the 2,000 cap)
            # that this pass's creates and renames may need.
            polite = not flush  # a flush is what the user waits for
            async with trio.open_nursery() as nursery:
                for tomb in deletes:
                    nursery.start_soon(self._one, result, limiter, self._push_delete, tomb,
                                       polite)
            async with trio.open_nursery() as nursery:
                for node in files:
                    nursery.start_soon(self._one, result, limiter, self._push_node, node,
                                       polite)
            if result.offline is None and (files or deletes):
                self.ctx.came_online()
                self.ctx.status.last_push_at = time.time()
            self.ctx.status.pushed += result.pushed
            result.left = self.pending_total()
        return result

    async def _one(self, result: PassResult, limiter: trio.CapacityLimiter,
                   push: Callable[[object], Awaitable[int]], item, polite: bool) -> None:
        """One file's (or delete's) turn; a failure stays with it."""
        async with limiter:
            busy = await self._yield_to_mount() if polite else False
            self._busy_pushes += busy  # counted before any checkpoint
            try:
                if result.unreachable:  # (decided after the wait: a sibling may have failed)
                    return
                wait = self._not_before - trio.current_time()
                if wait > 0:
                    await trio.sleep(wait)
                held = answers_when(self._answer_ready) if polite and not busy else nullcontext()
                with held:
                    outcome = await push(item)
            except (*api_errors.TRANSIENT, api_errors.AuthenticationError) as exc:
                result.offline = exc
                if isinstance(exc, (api_errors.APIConnectionError,
                                    api_errors.AuthenticationError)):
                    result.unreachable = True
                retry_after = getattr(exc, "retry_after", None)
                if retry_after:
                    self._not_before = max(self._not_before, trio.current_time() + retry_after)
                return
            except Exception as exc:  # a bug with one file must not stop the others
                log.exception("push of %r failed", item)
                self.ctx.status.failed(f"push: {type(exc).__name__}: {exc}")
                return
            finally:
                self._busy_pushes -= busy
            if outcome > 0:
                result.pushed += 1
            if outcome != 0:
                result.progress += 1

    async def _yield_to_mount(self) -> bool:
        """While FUSE requests keep coming (a `cp -r`), wait for a quiet moment: after
        QUIET_WINDOW without a request, go (any number at once); after a shorter gap of
        BUSY_WINDOW, or after YIELD_MAX without one, go as one of at most
        BUSY_CONCURRENCY pushes started while busy, one per BUSY_INTERVAL at most
        (returns True: the caller counts itself in `_busy_pushes`). A push costs the trio
        thread about 1.2 ms of CPU (httpx and the answer's transitions, three creates'
        worth) and, against `memfs serve` on the same machine, about 0.8 ms of the
        server's: `cp -r` of 500 files went at 470-580/s while a pass ran, 1,240-1,430/s
        with the wait (docs/BENCHMARKS.md, section 4); a copy's every 20 ms gap let a
        full concurrency's worth go, where a few keep the pass going; and two at a time
        in every 20 ms gap of a loaded machine's copy still went by the dozen, where
        BUSY_INTERVAL allows 10 a second (section 6). The pushes waiting queue behind one
        that watches (`_gate`), not 32 of them waking every BUSY_WINDOW. An unmount or
        flush waiting on the pass ends the wait."""
        give_up = trio.current_time() + YIELD_MAX

        def go_busy(idle: float) -> bool:
            now = trio.current_time()
            if (self._busy_pushes < BUSY_CONCURRENCY and now >= self._busy_next
                    and (idle >= BUSY_WINDOW or now >= give_up)):
                self._busy_next = now + BUSY_INTERVAL
                return True
            return False

        return await self._until_quiet(self._gate, go_busy)

    async def _answer_ready(self) -> None:
        """A push sent while the mount was quiet reads its answer only once the mount is
        quiet again (QUIET_WINDOW without a FUSE request), or after ANSWER_WAIT_MAX: the
        answers of a pass's requests in flight when a `cp -r` begins (up to
        push_concurrency of them, about 1 ms of the trio thread each) wait in their
        sockets instead of taking turns with the copy's requests. The request is
        journaled and went out: waiting only widens the window a lost answer already
        has. The waiting answers queue behind one that watches; an unmount or flush
        ends the wait. (Pushes started while busy, at most BUSY_CONCURRENCY, do not
        wait: they keep the pass going during a long copy.)"""
        give_up = trio.current_time() + ANSWER_WAIT_MAX
        await self._until_quiet(self._answers, lambda _idle: trio.current_time() >= give_up)

    async def _until_quiet(self, queue: trio.Lock, go: Callable[[float], bool]) -> bool:
        """Wait for QUIET_WINDOW without a FUSE request (False), in turn behind `queue`,
        looking every BUSY_WINDOW; `go(idle)` may end the wait sooner (True). An unmount
        or flush waiting on the pass ends it too (False)."""
        idle_for = self.ctx.clock.idle_for
        if idle_for() >= QUIET_WINDOW:
            return False
        async with queue:
            while not (self._stop.is_set() or self._flushing):
                idle = idle_for()
                if idle >= QUIET_WINDOW:
                    return False
                if go(idle):
                    return True
                await trio.sleep(BUSY_WINDOW)
        return False

    async def flush(self, timeout: float) -> PassResult:
        """Push everything now (write-back and delete delays waived) until nothing is
        left or `timeout` passes; transient trouble is retried with backoff
        (retry-after honoured), a refused file is tried once and reported. A pass
        under way stops waiting for a quiet mount (`_yield_to_mount`)."""
        total = PassResult()
        deadline = trio.current_time() + timeout
        first = True
        recheck = DOUBT_RECHECK  # a request that may still land: asked again, then less often
        self._flushing += 1
        try:
            with trio.move_on_at(deadline):
                while True:
                    result = await self.push_pass(flush=True, retry_failed=first)
                    first = False
                    total.pushed += result.pushed
                    total.progress += result.progress
                    total.offline = result.offline
                    if result.left == 0:
                        break
                    if result.offline is not None:
                        delay = self.ctx.went_offline(result.offline)
                        await self.ctx.pause(
                            min(delay, max(0.0, deadline - trio.current_time())))
                        continue
                    if result.progress == 0:
                        waits = doubts.wait_left(self.ctx)
                        if waits is not None:  # a request that may still land: ask again
                            await self.ctx.pause(min(recheck, waits))
                            recheck = min(1.0, recheck * 2)
                            continue
                        break  # what is left waits on a refusal, a conflict or the user
                    recheck = DOUBT_RECHECK
        finally:
            self._flushing -= 1
        async with self.ctx.sync_lock:
            total.left = self.pending_total()
        return total

    # -- files ------------------------------------------------------------------------------

    async def _push_node(self, node: Node) -> int:
        """Send one file's local state. Returns 1 when the file's change reached the
        server (now, or in an earlier request whose answer was lost), -1 when state
        moved without that (conflict, refused, failed), 0 when nothing changed."""
        st, ctx = self.state, self.ctx
        if not st.in_tree(node) or not st.is_dirty(node):
            return 0
        local = local_of(st, node)
        data = ctx.cache.get(node.sha) if local.content_changed else None
        if data is None and local.content_changed and node.sha != EMPTY_SHA:
            # Content taken from the server but never read, then renamed over another
            # file: fetch it from the memory it came from (or its history).
            try:
                data = await ctx.fetcher.recover(node.sha)
            except (*api_errors.TRANSIENT, api_errors.AuthenticationError):
                raise
            except api_errors.APIError as exc:  # the read refused (a 403): it waits
                st.content_unreadable(node, f"{type(exc).__name__}: {exc}")
                ctx.status.note(f"cannot read {local.path} back from the server to push "
                                f"it: {exc}; it waits, the rest goes on")
                return -1
            if not st.in_tree(node) or local != local_of(st, node):
                return 0  # changed while we fetched: the next pass decides again
        elif data is None and node.sha == EMPTY_SHA:
            data = b""
        try:
            paths.validate_path(local.path)
            path_problem = None
        except paths.PathError as exc:
            path_problem = exc.message
        plan = decide.push_plan(
            local, refused_sha=node.refused_sha, have_content=data is not None,
            content_problem=paths.content_error(data) if data is not None else None,
            path_problem=path_problem)
        if plan.send is decide.Send.NOTHING:
            return 0
        if plan.send is decide.Send.MISSING:
            ctx.status.note(f"content of {local.path} is missing from the cache; cannot push it")
            return 0
        if plan.reason is not None and (plan.send is decide.Send.REFUSE or not plan.content):
            if not st.is_refused(node):
                st.refuse_locally(node, plan.reason)
                ctx.status.note(f"{local.path} stays local-only: {plan.reason}")
            if plan.send is decide.Send.REFUSE:
                return -1
        content = data.decode("utf-8") if plan.content and data is not None else None
        create = plan.send is decide.Send.CREATE
        ticket = st.begin_push(node, content=create or plan.content, path=create or plan.path)
        try:
            if plan.send is decide.Send.CREATE:
                memory = await self._send(ticket, ctx.client.create_memory(
                    ctx.store_id, ticket.path, content))
            else:
                fields: dict = {}
                if plan.content:
                    fields["content"] = content
                if plan.path:
                    fields["path"] = ticket.path
                memory = await self._send(ticket, ctx.client.update_memory(
                    ctx.store_id, ticket.memory_id, precondition_sha=ticket.base_sha, **fields))
        except api_errors.PathConflictError as exc:
            return await self._followed(ticket, self._path_conflict(ticket, exc))
        except api_errors.PreconditionFailedError:
            return await self._followed(ticket, self._precondition_failed(ticket))
        except api_errors.NotFoundError as exc:
            if ticket.memory_id is None:  # the store itself is gone
                return self._failed(ticket, exc)
            return await self._followed(ticket, self._gone(ticket))
        except api_errors.REFUSED as exc:
            refused = decide.refused_row(store_full=_store_full(exc),
                                         content_sent=ticket.content_sent)
            if refused is decide.Refused.NO_ROOM:
                self.no_room.add(ticket.ino)
                ctx.status.note(f"{ticket.path} waits: the store holds its 2,000-memory maximum")
                return 0
            if refused is decide.Refused.MOVE:
                return self._failed(ticket, exc)
            st.push_refused(ticket, exc.message)
            ctx.status.note(f"the server refused {ticket.path}: {exc.message}; kept locally")
            return -1
        except (*api_errors.TRANSIENT, api_errors.AuthenticationError):
            raise
        except api_errors.APIError as exc:  # 403, 422, an unexpected 409...
            return self._failed(ticket, exc)
        st.push_landed(ticket, remote_of(memory))
        self.no_room.discard(ticket.ino)
        ctx.events.pushed(memory.path, memory)
        self._ours(memory)
        if ticket.memory_id is None:  # a creation is ours (an update may be a no-op)
            ctx.witness(("version", memory.memory_version_id))
        return 1

    def _ours(self, memory: Memory) -> None:
        if self.feed is not None:
            self.feed.ours(memory.memory_version_id)

    async def _send(self, ticket: PushTicket, request: Awaitable[Memory]) -> Memory:
        """Await ticket's request. A refusal is an answer (the request was not
        applied); no answer leaves the request in doubt unless it provably never
        reached the server. (An answer that lands is applied by `push_landed`.)"""
        try:
            return await request
        except (*api_errors.TRANSIENT, api_errors.AuthenticationError) as exc:
            self.state.push_unanswered(ticket, maybe_applied=api_errors.may_have_applied(exc))
            if ticket.doubt is not None and ticket.doubt in self.state.doubts:
                self.ctx.doubt_lost_at[ticket.doubt] = (
                    self.ctx.wall() if api_errors.may_land_later(exc) else None)
            raise
        except api_errors.APIError as exc:
            # A refusal answers the last attempt only: had an earlier one whose answer
            # was lost been sent again, it might have been applied. The client never
            # sends a create or an update again once it may have been (the two this
            # carries), so the guard holds the rule rather than a case that happens.
            if not api_errors.may_have_applied(exc):
                self.state.push_answered(ticket)
            raise

    async def _followed(self, ticket: PushTicket, follow_up: Awaitable[int]) -> int:
        """A 404, 409 or 412 is followed by a read (the memory, or the one holding the
        path) before anything is decided; that read refused (403, 422...) makes the file
        wait as a refusal of its own request does, instead of escaping as a bug (no
        backoff, retried every pass)."""
        try:
            return await follow_up
        except (*api_errors.TRANSIENT, api_errors.AuthenticationError):
            raise
        except api_errors.APIError as exc:
            return self._failed(ticket, exc)

    def _failed(self, ticket: PushTicket, exc: api_errors.APIError,
                path: str | None = None, hint: str = "") -> int:
        """This file waits (doubling backoff) and says why; the others go on. `path`: the
        file's, when the request sent another (a park); `hint`: what lets it through."""
        self.state.push_failed(ticket, f"{type(exc).__name__}: {exc}", transient=False)
        self.ctx.status.note(f"cannot push {path or ticket.path}: {exc}; it waits, "
                             f"the rest goes on{hint}")
        return -1

    async def _gone(self, ticket: PushTicket) -> int:
        """An update met 404: confirm, then the local file is the only copy."""
        ctx, st = self.ctx, self.state
        if await ctx.client.find_memory(ctx.store_id, ticket.memory_id,
                                        view="basic") is not None:
            return 0  # it exists after all: the next pass tries again
        node = st.holder(ticket.memory_id)
        if node is not None:
            st.forget_memory(node)
            ctx.status.note(f"{ticket.path} was deleted on the server but edited here; " + (
                "kept here only (a temp name stays local)" if st.is_local_only(node)
                else "re-creating it"))
            ctx.kick()
        return -1

    async def _precondition_failed(self, ticket: PushTicket) -> int:
        ctx, st = self.ctx, self.state
        assert ticket.memory_id is not None
        remote = await ctx.client.find_memory(ctx.store_id, ticket.memory_id, view="basic")
        answer = decide.precondition_row(remote.content_sha256 if remote else None,
                                         ticket.sha, ticket.previous_sent)
        if answer is decide.Answer.GONE:
            return await self._gone(ticket)
        assert remote is not None
        if answer is decide.Answer.OWN_WRITE:
            st.push_landed(ticket, remote_of(remote))  # our earlier write landed unheard
            ctx.kick()
            return 1  # it did reach the server: counted as pushed
        node = st.holder(ticket.memory_id)
        if node is None:
            return 0
        return await self._conflict(node, ticket, remote.id,
                                    "changed on the server and here at the same time")

    async def _conflict(self, node: Node, ticket: PushTicket, memory_id: str, reason: str,
                        *, tombstone_own: bool = False) -> int:
        """Server wins the tree, ours is kept — unless the file changed since the
        request went out or holds unsaved writes: then it waits for the close."""
        try:
            await self.ctx.settle_conflict(node, memory_id, reason, gen=ticket.gen,
                                           tombstone_own=tombstone_own)
        except Deferred:
            if node.ino in self.state.open_dirty:
                self.state.push_failed(ticket, "changed on the server while open here with "
                                       "unsaved writes; settles after the close",
                                       transient=False)
            return 0
        return -1

    async def _path_conflict(self, ticket: PushTicket, exc: api_errors.PathConflictError) -> int:
        ctx, st = self.ctx, self.state
        mid = exc.conflicting_memory_id
        node = st.ticket_node(ticket)
        blocker = st.holder(mid) if mid else None
        elsewhere = blocker is not None and node is not None and blocker is not node
        row = decide.path_held_row(
            mid, ours_deleted=mid in st.tombstones, file_gone=node is None,
            ours_elsewhere=elsewhere,
            in_cycle=elsewhere and node.memory_id is not None
            and self._in_rename_cycle(node, blocker),
            same_path=exc.conflicting_path == ticket.path)
        P = decide.PathHeld
        if row is P.NEAR:
            return self._failed(ticket, exc, hint=_way_out(ticket.path, exc.conflicting_path))
        if row is P.UNKNOWN:
            return self._failed(ticket, exc)
        if row is P.OUR_DELETE:
            # A local file now stands at the path of one of our deleted files: its delete
            # is safe to send before the delay is out.
            if await self._delete_early(st.tombstones[mid], ticket.path):
                node = st.ticket_node(ticket)
                return await self._push_node(node) if node is not None else -1
            return 0
        if row in (P.NOTHING, P.OUR_MOVE):
            return 0
        if row is P.PARK:
            return await self._park(node)
        remote = await ctx.client.find_memory(ctx.store_id, mid, view="basic")
        S = decide.Stranger
        held = decide.stranger_row(ticket.memory_id is None,
                                   remote.content_sha256 if remote else None,
                                   ticket.sha, ticket.previous_sent)
        if held is S.GONE:
            return 0
        if held is S.OWN_CREATE:
            st.push_landed(ticket, remote_of(remote))
            return 1
        if held is S.CREATED:
            return await self._conflict(node, ticket, mid, ctx.path_taken_reason(mid))
        # Our rename lands on a path another memory holds on the server (created there,
        # or changed there after we deleted it): the server's memory wins the path, our
        # content is kept as a conflict, and our own memory, which no local file holds
        # any more, is deleted after the delay.
        return await self._conflict(node, ticket, mid,
                                    "another memory holds this path on the server",
                                    tombstone_own=True)

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
            want = st.path_of(cur) if st.in_tree(cur) else None
            if want is None or want == cur.base_path:
                return False
            cur = by_base.get(want)
        return False

    async def _park(self, node: Node) -> int:
        """Break a rename cycle (a swap: a→b, b→a): move node's memory out of the way
        to a fresh private path. The park is journaled before it is sent, and the
        base follows the answer, so the real rename goes out on the next pass even
        after a crash; a name someone already holds is simply not reused."""
        ctx, st = self.ctx, self.state
        assert node.memory_id is not None
        park = f"{PARK_DIR}/{node.memory_id}.{secrets.token_hex(4)}"
        st.begin_park(node.memory_id, park)
        ticket = st.begin_push(node, content=False, to=park)
        try:
            memory = await self._send(ticket, ctx.client.update_memory(
                ctx.store_id, node.memory_id, precondition_sha=ticket.base_sha, path=park))
        except api_errors.PathConflictError as exc:
            if exc.conflicting_path != PARK_DIR:
                return 0  # a park name taken: the next one is fresh
            # Another client's memory at the park directory's own path: every park meets
            # it, and the next pass would too, silently, for good.
            return self._failed(ticket, exc, st.path_of(node), hint=(
                f" (another client's memory at {PARK_DIR}, where memfs parks a memory while "
                "a cycle of renames goes out, blocks the cycle: move or delete that memory)"))
        except (api_errors.ConflictError, api_errors.NotFoundError, *api_errors.REFUSED):
            return 0  # the next pass meets the real cause through the normal path
        except api_errors.PermissionDeniedError as exc:
            return self._failed(ticket, exc, st.path_of(node))
        log.info("rename cycle: parked %s at %s", node.memory_id, park)
        st.push_landed(ticket, remote_of(memory))
        self._ours(memory)
        ctx.kick()
        return 1

    # -- deletes ------------------------------------------------------------------------------

    def _due_deletes(self, now: float, flush: bool) -> list[Tombstone]:
        ctx, st = self.ctx, self.state
        mode = ctx.options.deletes
        if mode == "disabled" or not st.tombstones:
            return []
        due = sorted((t for t in st.tombstones.values()
                      if flush or t.deleted_at + ctx.options.delete_delay <= now),
                     key=lambda t: t.deleted_at)
        if mode == "log-only":
            for tomb in due:
                log.info("log-only: would delete %s (%s)", tomb.memory_id, tomb.base_path)
            return []
        # A pending delete whose memory is the only source of some file's content
        # (not cached: taken from the server, never read, then renamed over another
        # file) waits until that content is fetched.
        if due:
            needed = {n.sha for n in st.dirty_files()
                      if n.sha and n.sha != n.base_sha and not self.ctx.cache.has(n.sha)}
            due = [t for t in due if t.base_sha not in needed]
        cap = delete_cap(len(st.by_memory) + len(st.tombstones))
        if len(due) > cap:
            log.info("delete cap reached: sending %d deletes, holding %d for later passes",
                     cap, len(due) - cap)
        return due[:cap]

    async def _push_delete(self, tomb: Tombstone) -> int:
        st = self.state
        if tomb.memory_id in st.by_memory:  # revived meanwhile
            st.tombstone_settled(tomb.memory_id)
            return -1
        if tomb.memory_id not in st.tombstones:
            return 0
        return 1 if await self._send_delete(tomb) else -1

    async def _delete_early(self, tomb: Tombstone, path: str) -> bool:
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

    async def _send_delete(self, tomb: Tombstone) -> bool:
        """Delete tomb's memory if it still holds the sha we deleted; True when it is
        gone. A memory changed on the server is not deleted: the tombstone is settled
        and the reconciler brings the server's version back (its edit wins): a listing
        does, and so does the feed's next poll, told to name the memory again."""
        ctx, st = self.ctx, self.state
        mid = tomb.memory_id
        st.tombstone_sending(mid)
        try:
            await ctx.client.delete_memory(ctx.store_id, mid, expected_sha=tomb.base_sha or None)
        except api_errors.NotFoundError:
            pass  # already gone
        except api_errors.PreconditionFailedError:
            try:
                remote = await ctx.client.find_memory(ctx.store_id, mid, view="basic")
            except (*api_errors.TRANSIENT, api_errors.AuthenticationError):
                raise
            except api_errors.APIError as exc:  # the read refused: nothing was deleted
                return self._delete_refused(tomb, exc)
            # The same table as an update's precondition failure, for what we last sent.
            answer = decide.precondition_row(remote.content_sha256 if remote else None,
                                             tomb.sent_sha, None)
            if answer is decide.Answer.OWN_WRITE:  # our own update, its answer lost
                st.tombstone_rebased(mid, remote.content_sha256, remote.path)
                return await self._send_delete(st.tombstones[mid]) if (
                    mid in st.tombstones) else False
            if answer is decide.Answer.CONFLICT:
                ctx.status.note(f"{tomb.base_path} was deleted here but changed on the "
                                "server; restoring the server's version")
                st.tombstone_settled(mid)
                if self.feed is not None:  # it may have shown that version already
                    self.feed.recheck(mid)
                ctx.kick_reconcile()
                return False
            # GONE: deleted meanwhile, as we wanted
        except (*api_errors.TRANSIENT, api_errors.AuthenticationError):
            raise
        except api_errors.APIError as exc:  # 403, an unexpected 409...
            return self._delete_refused(tomb, exc)
        else:  # deleted by this request: the memory's one deleted version is ours
            ctx.witness(("deleted", mid))
        if mid in st.tombstones:
            st.tombstone_settled(mid)
        ctx.events.pushed(tomb.base_path, memory_id=mid)
        return True

    def _delete_refused(self, tomb: Tombstone, exc: api_errors.APIError) -> bool:
        """The server deleted nothing and said why: the delete waits, the rest goes on."""
        self.state.tombstone_failed(tomb.memory_id, f"{type(exc).__name__}: {exc}")
        self.ctx.status.note(f"cannot delete {tomb.base_path}: {exc}; it waits, the rest goes "
                             "on")
        return False


def _way_out(path: str, held: str | None) -> str:
    """What lets a file through whose path a memory of the server's sits above or below
    (a file on one side where the other has a directory): no push of ours can settle
    it, only a rename, here or there."""
    if held is None:
        return ""
    if path.startswith(held + "/"):
        return (f" (the server has a file at {held}, where this mount has a directory: "
                "rename one of them)")
    return (f" (the server has {held} below {path}, where this mount has a file: rename "
            "one of them)")


def _store_full(exc: api_errors.APIError) -> bool:
    msg = (exc.message or "").lower()
    return "2,000" in msg or "2000" in msg or "maximum number of memories" in msg
