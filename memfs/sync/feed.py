"""The store's change feed: what changed since the last poll, in one request.

`GET /memory_versions?created_at[gte]=T` lists every write to the store
(created, modified, deleted) newest first. The reconciler asks for the
versions created since a little before the newest one it has seen (the
lookback window: a distributed service may commit writes out of timestamp
order), skips the version ids it already applied, and re-reads only the
memories those versions name. An idle poll is one request with an empty page.

The feed is trusted only from a known position: a full listing sets it (the
newest version's time, read just before the listing). The reconciler falls
back to a full listing whenever the position is unknown, a poll fails, the
gap since the last poll is longer than the server keeps versions, or a poll
returns more changes than a listing would cost; and every `full_resync`
seconds in any case, as a safety net that also counts what the feed missed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ..api.client import MemoryStoresClient
from ..api.models import MemoryVersion

#: Versions older than the newest seen by this much are asked for again.
LOOKBACK = timedelta(seconds=30)
#: The hosted API keeps versions 30 days: a longer gap cannot be bridged by the feed.
RETENTION = timedelta(days=30)
#: More changed versions than this in one poll: a full listing is cheaper.
MAX_VERSIONS = 1000

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time(text: str) -> datetime:
    """An RFC 3339 time from the API (always with a zone)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def format_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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

    async def head(self) -> datetime:
        """The newest version's time (the feed position a listing starts from)."""
        async for v in self.client.list_versions(self.store_id, limit=1):
            return parse_time(v.created_at)
        return EPOCH

    def trusted(self) -> bool:
        if self.position is None or self.last_poll is None:
            return False
        return time.monotonic() - self.last_poll < RETENTION.total_seconds()

    def reset(self, position: datetime | None) -> None:
        """After a full listing (position known) or a failure (position None)."""
        self.position = position
        self.seen.clear()
        self.last_poll = time.monotonic() if position is not None else None

    async def poll(self) -> list[Change] | None:
        """The memories changed since the last poll, newest version each; None when
        there are too many (a full listing is cheaper). Raises on any error (the
        caller then falls back to a full listing)."""
        assert self.position is not None
        since = self.position - LOOKBACK
        versions: list[MemoryVersion] = []
        async for v in self.client.list_versions(self.store_id, created_gte=format_time(since),
                                                 limit=100):
            versions.append(v)
            if len(versions) > MAX_VERSIONS:
                return None
        newest: dict[str, Change] = {}
        for v in versions:  # newest first: the first one of a memory is its newest
            when = parse_time(v.created_at)
            if v.id in self.seen:
                continue
            self.seen[v.id] = when
            self.position = max(self.position, when)
            if v.memory_id not in newest:
                newest[v.memory_id] = Change(v.memory_id, v.operation, v.path,
                                             v.content_sha256, when)
        horizon = self.position - LOOKBACK
        for vid in [vid for vid, when in self.seen.items() if when < horizon]:
            del self.seen[vid]
        self.last_poll = time.monotonic()
        return list(newest.values())
