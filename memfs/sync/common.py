"""What the pusher and reconciler share: the mount's sync context.

`SyncContext` holds the client, the state, the blob cache, the options and
the status the control socket reports. One trio lock (`sync_lock`) runs push
passes and reconcile passes one at a time: a listing taken while an update is
in flight could otherwise read our own old sha as a remote change. The sync
code never reaches into the filesystem: what it needs to know about open
files (unsaved writes) is in `State.open_dirty`.
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from memfs.api import errors as api_errors
from memfs.api.client import MemoryStoresClient
from memfs.api.models import Memory, MemoryVersion
from memfs.core import decide
from memfs.core.backoff import doubled
from memfs.core.metrics import StoreMetrics
from memfs.core.mountconfig import SyncOptions
from memfs.core.nodes import Node, Remote
from memfs.core.signals import IdleClock
from memfs.state.blobs import BlobCache
from memfs.state.state import State
from memfs.sync.events import EventBus
from memfs.sync.fetcher import Fetcher

log = logging.getLogger(__name__)


@dataclass
class SyncStatus:
    online: bool = True
    offline_reason: str | None = None
    offline_since: float | None = None
    last_sync_at: float | None = None
    last_sync_seconds: float | None = None
    last_push_at: float | None = None
    last_error: str | None = None             # set by `failed`, with its time
    last_error_at: float | None = None
    failing_since: float | None = None        # passes fail, the server answering
    pushed: int = 0
    warnings: list[str] = field(default_factory=list)
    feed_position: str | None = None          # newest version applied (feed mode)
    last_full_listing_at: float | None = None
    feed_missed: int = 0                      # changes a full listing found first
    feed_polls: list[dict] = field(default_factory=list)  # the last polls' cost, oldest first
    feed_late: int = 0                        # versions the feed read out of order

    def failed(self, message: str) -> None:
        """The last error `memfs status` shows, with when it happened: without the time,
        an outage long over read as today's trouble (a helper)."""
        self.last_error, self.last_error_at = message, time.time()

    def note(self, message: str) -> None:
        """Keep `message` among the last warnings `memfs status` shows. A note said
        again (a file that waits for a full store, at every pass) moves to the end
        with its new time instead of filling the list, and is logged once."""
        kept = [w for w in self.warnings if w.split(" ", 1)[1] != message]
        log.log(logging.WARNING if len(kept) == len(self.warnings) else logging.DEBUG,
                "%s", message)
        self.warnings = (kept + [f"{time.strftime('%H:%M:%S')} {message}"])[-50:]


class Backoff:
    """Exponential backoff with full jitter; retry-after wins when given."""

    def __init__(self, base: float = 1.0, cap: float = 60.0) -> None:
        self.base, self.cap, self.failures = base, cap, 0

    def reset(self) -> None:
        self.failures = 0

    def next_delay(self, retry_after: float | None = None) -> float:
        self.failures += 1
        # A server unreachable for half an hour is probed over 1,024 times (the
        # reconciler tries once a poll, every 2 s by default): `doubled` keeps the cap.
        delay = random.uniform(0, doubled(self.base, self.cap, self.failures - 1))
        if retry_after is not None:
            delay = max(delay, retry_after)
        return delay


def remote_of(memory: Memory) -> Remote:
    """What the server holds, as the sync tables read it: the answer to a write of ours,
    a listed memory, the head a doubt found."""
    return Remote(memory.id, memory.path, memory.content_sha256, memory.content_size_bytes,
                  memory.memory_version_id or None)


def local_of(state: State, node: Node, since: float | None = None) -> decide.Local:
    """What this mount holds of `node`, as the sync tables read it; `since`: when the pass
    began reading the server (wall time, as `Node.changed_at`)."""
    return decide.Local(node.sha or "", state.path_of(node), node.memory_id, node.base_sha,
                        node.base_path, node.sent_sha, node.ino in state.open_dirty,
                        since is not None and node.changed_at is not None
                        and node.changed_at >= since)


#: How long a read waits for content it must fetch (`SyncContext.fetch`): one request's
#: timeout, not its retries.
FETCH_WAIT = 30.0

#: state.db's meta key of who this mount writes as (`SyncContext.writer`).
WRITER_KEY = "writer"
#: state.db's meta key of a write of this mount's, to learn the writer from
#: (`SyncContext.writer_witness`).
WITNESS_KEY = "writer_witness"

#: A write the server recorded as this mount's, to learn its writer from: the version a
#: create made (`("version", its id)`, the create's answer names it), or a memory a
#: delete of ours removed (`("deleted", the memory's id)`: the answer names no version,
#: but a memory is deleted once, so its one deleted version is ours). An update is no
#: witness: one that finds its bytes there already is a no-op whose answer names
#: whoever wrote them.
Witness = tuple[str, str]


class SyncContext:
    def __init__(self, state: State, cache: BlobCache, client: MemoryStoresClient,
                 store_id: str, options: SyncOptions) -> None:
        self.state = state
        self.cache = cache
        self.client = client
        self.store_id = store_id
        self.options = options
        self.status = SyncStatus()
        self.metrics = StoreMetrics()  # counters for `--metrics-addr` (memfs/core/metrics.py)
        self.sync_lock = trio.Lock()
        self.push_wakeup = state.local_change  # kick() and every local change set it
        self.reconcile_wakeup = trio.Event()
        # Offline, probe no less often than a few poll intervals (60 s at most).
        self.backoff = Backoff(cap=min(60.0, max(10.0, 4 * options.poll_interval)))
        self._invalidations: list[tuple] = []
        #: invalidations queued since the mount started, and how many of them the
        #: daemon's invalidator has handed to the kernel (`MountDaemon._kernel_told`)
        self.invalidations_queued = 0
        self.invalidations_sent = 0
        self.invalidation_ready = trio.Event()
        self.online_wakeup = trio.Event()  # set (and renewed) when we come back online
        self.listed = trio.Event()  # set by every finished listing (the prefetch waits)
        #: When FUSE last brought a request (the engine hands over its router's clock):
        #: background work yields to the mount's users. Without a mount: always quiet.
        self.clock = IdleClock()
        self.fetcher = Fetcher(self, concurrency=options.push_concurrency)
        self.events = EventBus(store_id)  # `memfs watch`, `memfs mcp` (memfs/sync/events.py)
        #: Requests in doubt (their `doubts` ids): when their answer was lost (wall time),
        #: or None when the server answered once done with them (a 5xx but a gateway's
        #: 502 or 504). A request the server shows no trace of may still land until
        #: `lost_answer_wait` after its answer was lost (memfs/sync/doubts.py). In memory:
        #: a doubt a previous daemon left counts from this one's start.
        self.doubt_lost_at: dict[int, float | None] = {}
        #: Who this mount writes as: the `created_by` of a memory it created, told by the
        #: feed (`learn_writer`) or read from `writer_witness` when a doubt needs it
        #: first, and kept in state.db for as long as the key is the same;
        #: None until then. A creation recorded as another writer's is then never taken
        #: for a create of ours whose answer was lost (`decide.by_another_writer`).
        self.writer: dict | None = self._recorded(WRITER_KEY)
        #: A write of this mount's (`Witness`) while `writer` is not known: read once
        #: (one GET, `learn_writer_now`) when a doubt must tell another writer's version
        #: holding our bytes from ours, rather than wait for the feed to read a creation
        #: back (a fresh mount, `--no-feed`, a daemon killed before its feed did). Kept
        #: in state.db, as the writer is.
        self.writer_witness: Witness | None = None if self.writer else _as_witness(
            self._recorded(WITNESS_KEY))
        self._learning = trio.Lock()
        self.started_at = time.time()
        #: The wall clock that wait is counted on, and how a flush waits (for a request
        #: that may still land, for the server to come back): the interleaving harness
        #: moves the one on in the other rather than waiting 30 s.
        self.wall: Callable[[], float] = time.time
        self.pause: Callable[[float], Awaitable[None]] = trio.sleep
        # Directories that remote changes empty or create: the kernel's entry follows.
        state.on_entry = lambda parent, name: self.invalidate(("entry", parent, name))

    # -- who this mount writes as ---------------------------------------------------

    def _recorded(self, key: str) -> Any:
        """What `_record` kept under key, if it was kept with this API key."""
        try:
            kept = json.loads(self.state.get_meta(key) or "null")
            if kept and kept["tag"] == self.client.key_tag(kept["salt"]):
                return kept["value"]
        except (ValueError, KeyError, TypeError):
            pass
        return None  # none learned yet, or another key: to be learned again

    def _record(self, key: str, value: object) -> None:
        """Keep value in state.db for as long as the API key is the same (a salted tag
        of the key beside it, never the key)."""
        salt = secrets.token_hex(8)
        self.state.set_meta(key, json.dumps(
            {"value": value, "salt": salt, "tag": self.client.key_tag(salt)}))

    def witness(self, witness: Witness) -> None:
        """A write of ours the server answered (`Witness`); the first one is kept."""
        if self.writer is None and self.writer_witness is None:
            self.writer_witness = witness
            self._record(WITNESS_KEY, list(witness))

    async def learn_writer_now(self) -> None:
        """Learn who this mount writes as from its witness (one read), if it does not
        know yet. A transient error propagates (the caller's pass goes offline, the
        witness kept); any other refusal forgets the witness."""
        async with self._learning:  # the doubts resolved at once read it once
            witness = self.writer_witness
            if self.writer is not None or witness is None:
                return
            kind, ident = witness
            try:
                if kind == "deleted":
                    found = await self.client.list_versions_page(
                        self.store_id, memory_id=ident, operation="deleted", limit=1)
                    version = next((v for v in found.data
                                    if isinstance(v, MemoryVersion)), None)
                else:
                    version = await self.client.get_version(self.store_id, ident,
                                                            view="basic")
            except (*api_errors.TRANSIENT, api_errors.AuthenticationError):
                raise
            except api_errors.APIError as exc:
                log.info("cannot read %s to learn who this mount writes as: %s",
                         _witness_name(witness), exc)
            else:
                if version is None:  # a store whose history was purged
                    log.info("%s is not on the server: cannot learn who this mount "
                             "writes as", _witness_name(witness))
                else:
                    self.learn_writer(version.created_by)
            self._drop_witness()  # read: learned, or it cannot tell

    def learn_writer(self, actor: dict | None) -> None:
        """`actor`: the `created_by` of a write this mount made (a creation the feed read,
        or the witness `learn_writer_now` read)."""
        if not actor or actor == self.writer:
            return
        self.writer = actor
        self._record(WRITER_KEY, actor)
        self._drop_witness()  # moot now

    def _drop_witness(self) -> None:
        """In state.db too: a next daemon would read it again."""
        self.writer_witness = None
        self.state.set_meta(WITNESS_KEY, None)

    # -- wakeups -------------------------------------------------------------------

    def kick(self) -> None:
        """The pusher has work (the sync code's own news: a local change sets the same
        wake-up through State)."""
        self.push_wakeup.set()

    def kick_reconcile(self) -> None:
        self.reconcile_wakeup.set()

    # -- kernel invalidation (drained outside request handlers) ----------------------

    def invalidate(self, item: tuple) -> None:
        self._invalidations.append(item)
        self.invalidations_queued += 1
        self.invalidation_ready.set()

    async def kernel_told(self, bound: float = 2.0) -> None:
        """Return once every invalidation queued so far has gone to the kernel (`bound`
        seconds at most): what a reader does next must not meet the kernel's old name or
        size (a `cat` after a remote edit's event read the new text padded to the old
        length with NULs: CI)."""
        goal = self.invalidations_queued
        with trio.move_on_after(bound):
            while self.invalidations_sent < goal:
                await trio.sleep(0.005)

    def take_invalidations(self) -> list[tuple]:
        items, self._invalidations = self._invalidations, []
        self.invalidation_ready = trio.Event()
        return items

    # -- online / offline -----------------------------------------------------------

    def went_offline(self, exc: BaseException) -> float:
        """Record a transient failure; returns how long to wait before retrying."""
        reason = _describe(exc)
        if self.status.online:
            log.warning("offline: %s", reason)
            self.status.offline_since = time.time()
        self.status.online = False
        self.status.offline_reason = reason
        self.status.failed(reason)
        self.state.set_meta("last_error", reason)  # for `memfs status` without a daemon
        self.state.set_meta("last_error_at", str(self.status.last_error_at))
        retry_after = getattr(exc, "retry_after", None)
        return self.backoff.next_delay(retry_after)

    def came_online(self) -> None:
        if not self.status.online:
            log.info("back online")
            # Wake the pusher from its offline backoff: journaled changes go out now.
            self.online_wakeup.set()
            self.online_wakeup = trio.Event()
        self.status.online = True
        self.status.offline_reason = None
        self.status.offline_since = None
        self.backoff.reset()

    # -- content ------------------------------------------------------------------------

    async def fetch(self, node: Node) -> bytes:
        """Cache-miss content fetch for a clean file (the only network I/O a read
        does): from the file's batch, else one GET (memfs/sync/fetcher.py), waited for
        `FETCH_WAIT` at most (then the read fails, EIO, and changes nothing). A server
        that stops answering (stopped, a network that drops packets) would otherwise
        hold the reader through every attempt's timeout: three minutes (found by a
        helper)."""
        with trio.move_on_after(FETCH_WAIT):
            return await self.fetcher.read(node)
        raise OSError(f"the server did not answer within {FETCH_WAIT:.0f} s")

    async def settle_conflict(self, node: Node, memory_id: str, reason: str, *, gen: int,
                              tombstone_own: bool = False) -> int | None:
        """Conflict: the server's version wins in the tree; the local one is kept.

        Fetches the server's content, then `State.take_remote` applies it only if
        the file is still at `gen` and holds no unsaved writes (else Deferred)."""
        full = await self.client.get_memory(self.store_id, memory_id, view="full")
        data = (full.content or "").encode("utf-8")
        sha = self.cache.put(data)
        cid = self.state.take_remote(node, Remote(full.id, full.path, sha, len(data),
                                                  full.memory_version_id or None), reason,
                                     gen=gen, tombstone_own=tombstone_own)
        path = self.state.path_of(node)
        if cid is not None:
            self.events.conflict(path, full.id, full.memory_version_id or None)
            self.status.note(f"conflict #{cid} at {path}: {reason}; the server's version is in "
                             f"the tree, yours is kept (memfs conflicts)")
        self.invalidate(("inode", node.ino))
        return cid

    def path_taken_reason(self, memory_id: str) -> str:
        """Why another memory wins a file's path: a memory this mount held (deleted here,
        its delete refused since another writer changed it) is no new creation of theirs,
        and the conflict's reason must not say it is."""
        return ("deleted here but changed on the server" if memory_id in self.state.known
                else "another writer created the same path")


async def gather_bounded(items, fn, limit: int) -> None:
    """await fn(item) for every item, `limit` at a time; the first error is raised
    after all have finished (a plain exception, not a trio ExceptionGroup, so callers
    can tell "offline" from the rest)."""
    limiter = trio.CapacityLimiter(limit)
    errors: list[BaseException] = []

    async def one(item) -> None:
        async with limiter:
            try:
                await fn(item)
            except Exception as exc:
                errors.append(exc)

    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(one, item)
    if errors:
        raise errors[0]


def _describe(exc: BaseException) -> str:
    """The class and message (an API error's ends with its HTTP status, type and request id)."""
    return f"{type(exc).__name__}: {exc}"


def _as_witness(kept: Any) -> Witness | None:
    """A witness as `_record` kept it."""
    if isinstance(kept, list) and len(kept) == 2 and kept[0] in ("version", "deleted"):
        return (kept[0], str(kept[1]))
    return None


def _witness_name(witness: Witness) -> str:
    kind, ident = witness
    return f"version {ident}" if kind == "version" else f"the deletion of memory {ident}"
