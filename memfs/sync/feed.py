"""The store's change feed: what changed since the last poll, at the cost of what is new.

`GET /memory_versions` lists every write to the store (created, modified,
deleted) newest first, filtered by `created_at[gte]` / `created_at[lte]`. A
distributed service may commit a write out of timestamp order: a version may
appear whose `created_at` is older than one already read, by up to the lookback
(LOOKBACK, 30 s, unless the mount sets `--feed-lookback`). Reading the whole
lookback window again on every poll catches those, but costs every version of the
window on every poll (issue 22). The feed instead keeps two cursors (docs/SYNC.md,
"Reconciling", says why this is sound and what it costs):

- the **head** (`position`): every poll reads `created_at >= position`, the
  versions new since the last poll (and the one at `position` itself);
- the **settled edge** (`confirmed`): every version created at or before it
  has been read. A time becomes final once the server's clock is the lookback past
  it (nothing can still commit there); the server's clock is known from below
  by the newest version read and the local monotonic time since (`anchor`).
  Each poll also reads the slice that became final since the last one,
  `confirmed <= created_at <= min(final, position)`, once: a version committed
  out of order is found there, at most the lookback plus one poll interval after it
  became visible, never later.

Each version is thus read at most twice (when new, and when its time becomes
final), and a poll costs the versions new since the last one plus those that
became final since: O(new changes), with two requests while a recent burst
settles and one otherwise. While the unsettled window holds at most MERGE
versions already read, the two reads are one request (`created_at >=
confirmed`): a quiet store is one request per poll, an empty page once settled.

The feed is trusted only from a known position: a full listing sets it (the
newest version's time, read alongside the listing's first request; the head is
then set back by the time the listing took, for a write that landed between the
two, and the whole window before it is unsettled). The reconciler falls back to
a full listing whenever the position is unknown, a poll fails, the gap since the
last poll is longer than the server keeps versions, or a poll returns more
changes than a listing would cost; and every `full_resync` seconds in any case,
as a safety net that also counts what the feed missed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from memfs.api.client import MemoryStoresClient, tally
from memfs.api.models import MemoryVersion, format_time, parse_time
from memfs.sync.common import gather_bounded

#: How late (in `created_at` terms) a version may commit after newer ones: the default
#: of `Feed.lookback` (a mount's `--feed-lookback`).
LOOKBACK = timedelta(seconds=30)
#: The hosted API keeps versions 30 days: a longer gap cannot be bridged by the feed.
RETENTION = timedelta(days=30)
#: More changed versions than this in one poll: a full listing is cheaper.
MAX_VERSIONS = 1000
#: At most this many versions already read in the unsettled window: head and settling
#: read are one request (re-reading them costs less than a second request).
MERGE = 2
#: The local and the server's clocks may run at rates this far apart: the server's
#: clock is assumed to advance at least (1 - DRIFT) s per local second.
DRIFT = 1e-3
#: Version ids of our own writes not seen by the feed after this long are forgotten
#: (then they cost what any version exactly matching our base costs: nothing more).
OWN_TTL = 600.0
OWN_MAX = 10_000
#: Polls whose cost `memfs status` shows.
COSTS_KEPT = 10

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Change:
    """The newest version the feed shows for one memory."""

    memory_id: str
    operation: str            # created | modified | deleted
    path: str | None
    sha: str | None
    created_at: datetime


@dataclass
class PollCost:
    """What one poll cost: requests and response bytes; the versions the answers held
    (read before or not), of the new ones `own` were this mount's writes and `late`
    were committed out of order."""

    at: float                 # wall time of the poll
    requests: int
    bytes: int
    versions: int
    own: int
    late: int

    def as_dict(self) -> dict:
        return {"at": self.at, "requests": self.requests, "bytes": self.bytes,
                "versions": self.versions, "own": self.own, "late": self.late}


@dataclass
class Feed:
    client: MemoryStoresClient
    store_id: str
    #: The local monotonic clock (replaceable in tests, to pass the lookback without
    #: waiting).
    clock: Callable[[], float] = time.monotonic
    #: How late a version may commit after newer ones (`SyncOptions.feed_lookback`): a
    #: time is final, and read once more, this long after it by the server's clock.
    lookback: timedelta = LOOKBACK
    position: datetime | None = None            # the head; None: unknown, a listing is due
    confirmed: datetime = EPOCH                 # every version created at or before: read
    #: After a listing, the versions in (confirmed, unread_until] were never read: the
    #: window's size is unknown until the settled edge passes it.
    unread_until: datetime | None = None
    probed: bool = False                        # the unread window was found dense
    #: The listing's memories changed in the unread window: memory id -> updated_at. A
    #: version there no newer than that is what the listing already showed, or older.
    listed: dict[str, datetime] = field(default_factory=dict)
    seen: dict[str, datetime] = field(default_factory=dict)  # read, created after confirmed
    own: dict[str, float] = field(default_factory=dict)      # our versions -> clock() told
    rechecks: set[str] = field(default_factory=set)  # memories the next poll names (recheck)
    #: (created_at, clock()) of a version read: the server's clock was at least there then.
    anchor: tuple[datetime, float] | None = None
    last_poll: float | None = None              # clock() of the last good poll
    late: int = 0                               # versions read out of order, in all
    costs: deque[PollCost] = field(default_factory=lambda: deque(maxlen=COSTS_KEPT))
    learn: Callable[[MemoryVersion], None] = lambda v: None  # each version read (events)
    #: Told the `created_by` of each creation of ours it reads (`SyncContext.learn_writer`).
    wrote_as: Callable[[dict | None], None] = lambda actor: None
    _returned: list[int] = field(default_factory=lambda: [0])  # versions this poll read

    # -- the server's clock, from below ----------------------------------------------------

    def _server_now(self, at: float) -> datetime | None:
        """A lower bound of the server's clock at local time `at` (None: no version read
        yet). A version read was created before the answer left the server; `at` may
        also be before that answer came."""
        if self.anchor is None:
            return None
        created, seen_at = self.anchor
        elapsed = at - seen_at
        return created + timedelta(seconds=elapsed * (1 - DRIFT) if elapsed >= 0
                                   else elapsed * (1 + DRIFT))

    def _observe(self, created: datetime, at: float) -> None:
        now = self._server_now(at)
        if now is None or created > now:
            self.anchor = (created, at)

    def final(self, at: float | None = None) -> datetime | None:
        """Every version created at or before this time is visible now (None: unknown)."""
        now = self._server_now(self.clock() if at is None else at)
        return None if now is None else now - self.lookback

    # -- life cycle --------------------------------------------------------------------------

    async def head(self) -> datetime:
        """The newest version's time (the feed position a listing starts from)."""
        async for v in self.client.list_versions(self.store_id, limit=1):
            created = parse_time(v.created_at)
            self._observe(created, self.clock())
            return created
        return EPOCH

    def trusted(self) -> bool:
        if self.position is None or self.last_poll is None:
            return False
        return self.clock() - self.last_poll < RETENTION.total_seconds()

    def reset(self, position: datetime | None, *, listed_since: float | None = None,
              recent: dict[str, datetime] | None = None) -> None:
        """After a full listing (position: the head read alongside it) or a failure
        (None). `listed_since`: clock() when the listing began. A write that landed
        after that, in timestamp order, was created at or after the server's clock
        then, which the head's time bounds from below (its version was read later):
        the head starts there. Nothing in the window before it was read; `recent`:
        the memories the listing showed changed in it, with their times (more than
        MERGE: no need to ask whether the window is small)."""
        self.seen.clear()
        self.rechecks.clear()  # a listing read every memory's head
        self.listed = dict(recent or {})
        self.probed = len(self.listed) > MERGE
        if position is None:
            self.position, self.last_poll = None, None
            return
        start = position
        then = None if listed_since is None else self._server_now(listed_since)
        if then is not None and position > EPOCH:
            start = min(position, then)
        self.position = start
        # What was final when the listing began was visible to it: settled.
        settled = (start if then is None else then) - self.lookback
        self.confirmed = max(EPOCH, settled) if position > EPOCH else EPOCH
        self.unread_until = position if position > EPOCH else None
        self.last_poll = self.clock()

    def recheck(self, memory_id: str) -> None:
        """A memory whose server side this mount could not take when the feed showed it:
        its row waited for a file's unsaved writes (the reconciler), a delete of it
        was refused because another writer changed it, whose version wins (the pusher),
        or a create in doubt was found to have made it after another writer changed or
        deleted it (`decide.created_row`, OVERTAKEN). The feed will not show that
        version again: the next poll names the memory, whatever the versions say (one
        GET), and the reconciler applies its row (while the file stays open with unsaved
        writes, one GET a poll)."""
        self.rechecks.add(memory_id)

    def ours(self, version_id: str) -> None:
        """A version this mount wrote (the id from the answer): no news when read."""
        now = self.clock()
        self.own[version_id] = now
        if len(self.own) > OWN_MAX:  # not polled for long (offline): the oldest go
            for vid in [vid for vid, told in self.own.items() if told < now - OWN_TTL]:
                del self.own[vid]

    # -- a poll ---------------------------------------------------------------------------

    async def poll(self, applied: Callable[[MemoryVersion], bool] = lambda v: False,
                   ) -> list[Change] | None:
        """The memories changed since the last poll, newest version each; None when
        there are too many (a full listing is cheaper). `applied(version)`: whether
        the mount already holds what that version wrote (a burst the last full listing
        already brought); those, and our own versions, cost nothing more and do not
        count toward the limit. Raises on any error (the caller then falls back to a
        full listing)."""
        assert self.position is not None
        start = self.position
        final = self.final()  # before any request: all of it is visible to them
        read: dict[str, MemoryVersion] = {}
        self._returned = [0]
        with tally() as counts:
            complete, whole = await self._read(final, read, applied)
        late = {vid for vid, v in read.items() if vid not in self.own
                and self._late(parse_time(v.created_at), start)}
        self.costs.append(PollCost(time.time(), counts[0], counts[1], self._returned[0],
                                   sum(1 for vid in read if vid in self.own), len(late)))
        if not complete:
            return None
        self.late += len(late)
        covered = {vid for vid, v in read.items() if self._listed(v)}
        if whole:
            self.unread_until = None  # the window a listing left unread: all of it read
            self.listed.clear()
        changes: dict[str, Change] = {}
        decided: set[str] = set()
        for v in sorted(read.values(), key=lambda v: (parse_time(v.created_at), v.id),
                        reverse=True):
            when = parse_time(v.created_at)
            self.seen[v.id] = when
            self.learn(v)
            if v.id in self.own and v.operation == "created":
                # A creation an answer of ours named is ours; an update's answer may
                # name another writer's version (the API's no-op: the bytes were there).
                self.wrote_as(v.created_by)
            self.position = max(self.position, when)
            if v.id in late:
                # Committed out of order: the memory's head may be any of its versions,
                # whatever their times. Re-read it (a change no base matches).
                changes[v.memory_id] = Change(v.memory_id, "modified", None, None, when)
                decided.add(v.memory_id)
            if v.memory_id in decided:
                continue
            decided.add(v.memory_id)  # newest first: its newest version decides
            if v.id in covered:
                continue  # what the listing showed, or older
            # Our own write too: its answer set the file's base, which the reconciler
            # compares (no request when equal); but the answer may carry more than we
            # sent (another writer's rename just before ours), which this brings.
            changes[v.memory_id] = Change(v.memory_id, v.operation, v.path,
                                          v.content_sha256, when)
        for mid in self.rechecks:  # a change no base matches: the memory is re-read
            changes.setdefault(mid, Change(mid, "modified", None, None, self.position))
        self.rechecks.clear()
        if final is not None and final > self.confirmed:
            self.confirmed = final
        self._forget()
        self.last_poll = self.clock()
        return list(changes.values())

    def _listed(self, v: MemoryVersion) -> bool:
        """A version in the window a listing left unread, no newer than that memory as
        the listing showed it: nothing the listing did not apply."""
        shown = self.listed.get(v.memory_id)
        if shown is None or self.unread_until is None:
            return False
        when = parse_time(v.created_at)
        return when <= self.unread_until and when <= shown

    def _late(self, created: datetime, start: datetime) -> bool:
        """Read now though created before the head was at the poll's start: committed
        out of order (but for the window a listing left unread)."""
        return created < start and (self.unread_until is None or created > self.unread_until)

    async def _read(self, final: datetime | None, read: dict[str, MemoryVersion],
                    applied: Callable[[MemoryVersion], bool]) -> tuple[bool, bool]:
        """Read this poll's versions into `read` (the ones not read before). Returns
        (False when more than MAX_VERSIONS are news, whether everything from the settled
        edge on was read in one go)."""
        assert self.position is not None
        news, returned = [0], self._returned

        async def take(*, gte: datetime, lte: datetime | None = None, limit: int = 100,
                       one_page: bool = False) -> bool | None:
            """Read gte..lte, newest first; None when too many are news, else whether
            the range was read to its end (`one_page`: at most one page)."""
            cursor: str | None = None
            followed: set[str] = set()
            while True:
                page = await self.client.list_versions_page(
                    self.store_id, created_gte=format_time(gte),
                    created_lte=None if lte is None else format_time(lte), limit=limit,
                    page=cursor)
                at = self.clock()
                for v in page.data:
                    if not isinstance(v, MemoryVersion):
                        continue
                    returned[0] += 1
                    self._observe(parse_time(v.created_at), at)
                    if v.id in self.seen or v.id in read:
                        continue
                    read[v.id] = v
                    if v.id not in self.own and not self._listed(v) and not applied(v):
                        news[0] += 1
                if news[0] > MAX_VERSIONS:
                    return None
                if not page.next_page:
                    return True
                if one_page:
                    return False
                cursor = page.follow(followed)

        unread = self.unread_until is not None and self.confirmed < self.unread_until
        window = sum(1 for when in self.seen.values() if when >= self.confirmed)
        if (not unread and window <= MERGE) or (unread and not self.probed):
            # One request: the unsettled window (at most MERGE versions read already) and
            # the head. Just after a listing the window's size is unknown: a small first
            # page tells whether it is that small.
            done = await take(gte=self.confirmed, limit=MERGE + 1 if unread else 100,
                              one_page=unread)
            if done is None:
                return False, False
            if done:
                return True, True
            self.probed = True
        # Two reads at once: the head, and the slice that became final since the last poll.
        edge = None if final is None else min(final, self.position)
        ranges: list[tuple[datetime, datetime | None]] = [(self.position, None)]
        if edge is not None and self.confirmed < edge:
            ranges.append((self.confirmed, edge))
        results: list[bool | None] = []

        async def one(span: tuple[datetime, datetime | None]) -> None:
            results.append(await take(gte=span[0], lte=span[1]))

        await gather_bounded(ranges, one, len(ranges))
        return None not in results, False

    def _forget(self) -> None:
        """Drop what the settled edge passed: read ids, and our own versions read."""
        for vid in [vid for vid, when in self.seen.items() if when < self.confirmed]:
            del self.seen[vid]
            self.own.pop(vid, None)
        if self.unread_until is not None and self.confirmed >= self.unread_until:
            self.unread_until = None
            self.listed.clear()
        old = self.clock() - OWN_TTL
        for vid in [vid for vid, told in self.own.items() if told < old]:
            del self.own[vid]
