"""The store's change feed: what changed since the last poll, in one request.

`GET /memory_versions?created_at[gte]=T` lists every write to the store
(created, modified, deleted) newest first. The reconciler asks for the
versions created since a little before the newest one it has seen (the
lookback window: a distributed service may commit writes out of timestamp
order), skips the version ids it already applied, and re-reads only the
memories those versions name. An idle poll is one request with an empty page.

The feed is trusted only from a known position: a full listing sets it (the
newest version's time, read alongside the listing's first request, the root's;
the directories are listed after it, and the first poll after a listing looks
back LOOKBACK from the position whatever the time, for a root-level write that
landed between the two). The reconciler falls
back to a full listing whenever the position is unknown, a poll fails, the
gap since the last poll is longer than the server keeps versions, or a poll
returns more changes than a listing would cost; and every `full_resync`
seconds in any case, as a safety net that also counts what the feed missed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ..api.client import MemoryStoresClient
from ..api.models import MemoryVersion, format_time, parse_time

#: Versions older than the newest seen by this much are asked for again.
LOOKBACK = timedelta(seconds=30)
#: The hosted API keeps versions 30 days: a longer gap cannot be bridged by the feed.
RETENTION = timedelta(days=30)
#: More changed versions than this in one poll: a full listing is cheaper.
MAX_VERSIONS = 1000

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
class Feed:
    client: MemoryStoresClient
    store_id: str
    position: datetime | None = None            # None: unknown, a full listing is due
    seen: dict[str, datetime] = field(default_factory=dict)  # version id -> created_at
    last_poll: float | None = None              # monotonic, of the last good poll
    position_seen_at: float = 0.0               # monotonic: when position last moved
    look_back: bool = False                     # the next poll looks back in any case
    learn: Callable[[MemoryVersion], None] = lambda v: None  # each version read (events)

    async def head(self) -> datetime:
        """The newest version's time (the feed position a listing starts from)."""
        async for v in self.client.list_versions(self.store_id, limit=1):
            return parse_time(v.created_at)
        return EPOCH

    def trusted(self) -> bool:
        if self.position is None or self.last_poll is None:
            return False
        return time.monotonic() - self.last_poll < RETENTION.total_seconds()

    def reset(self, position: datetime | None, *, look_back: bool = False) -> None:
        """After a full listing (position known) or a failure (position None).
        `look_back`: the position may be newer than part of the listing (read at the
        same time): the next poll looks back LOOKBACK from it whenever it comes."""
        self.position = position
        self.look_back = look_back and position is not None
        self.seen.clear()
        self.last_poll = time.monotonic() if position is not None else None
        self.position_seen_at = time.monotonic()

    async def poll(self, applied: Callable[[MemoryVersion], bool] = lambda v: False,
                   ) -> list[Change] | None:
        """The memories changed since the last poll, newest version each; None when
        there are too many (a full listing is cheaper). `applied(version)`: whether
        the mount already holds what that version wrote (our own writes, or a burst
        the last full listing already brought); those cost nothing and do not count
        toward the limit. Raises on any error (the caller then falls back to a full
        listing)."""
        assert self.position is not None
        since = self._since()
        versions: list[MemoryVersion] = []
        new = 0
        pages = self.client.list_versions_pages(self.store_id, created_gte=format_time(since),
                                                limit=100)
        async with aclosing(pages):
            async for page in pages:
                fresh = [v for v in page if v.id not in self.seen]
                versions += fresh
                new += sum(1 for v in fresh if not applied(v))
                if new > MAX_VERSIONS:
                    return None
                if page and not fresh:
                    # Newest first: a page of versions all applied already means the
                    # rest (older) were too, but for a write committed out of order more
                    # than a page deep, which the safety-net listing catches and counts.
                    break
        newest: dict[str, Change] = {}
        for v in versions:  # newest first: the first one of a memory is its newest
            when = parse_time(v.created_at)
            self.seen[v.id] = when
            self.learn(v)
            if when > self.position:
                self.position, self.position_seen_at = when, time.monotonic()
            if v.memory_id not in newest:
                newest[v.memory_id] = Change(v.memory_id, v.operation, v.path,
                                             v.content_sha256, when)
        horizon = self._since()
        for vid in [vid for vid, when in self.seen.items() if when < horizon]:
            del self.seen[vid]
        self.last_poll = time.monotonic()
        self.look_back = False
        return list(newest.values())

    def _since(self) -> datetime:
        """Where a poll starts. Within LOOKBACK (wall time) of the newest version's
        arrival, a write committed out of order may still show up with an older
        time: ask from LOOKBACK before it. Once the store stayed quiet that long,
        nothing older can come: ask from the newest version itself (an idle poll of a
        store that just had a burst of writes is then an empty page again)."""
        assert self.position is not None
        if self.look_back or \
                time.monotonic() - self.position_seen_at < LOOKBACK.total_seconds():
            return self.position - LOOKBACK
        return self.position
