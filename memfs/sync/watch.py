"""A store's changes as a stream of events, for `memfs watch` and `memfs mcp`.

On a mount the daemon already reads the store's change feed; `follow_buses` serves that
feed's events (memfs/sync/events.py) over the control socket, so watching costs the mount
no request. Without a mount, `poll_store` polls the versions list itself: one request per
poll interval, as a mount's feed does. `replay` first reads the versions since a version
id, an RFC 3339 time or an age.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import trio

from memfs.api import errors as api_errors
from memfs.api.client import MemoryStoresClient
from memfs.api.models import MemoryVersion, format_time, parse_time
from memfs.sync.events import QUEUE_LIMIT, Event, EventBus, Subscriber, version_events
from memfs.sync.feed import LOOKBACK

log = logging.getLogger(__name__)

_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> tuple[str, Any]:
    """("version", id) or ("time", datetime); ValueError with a one-line reason."""
    text = text.strip()
    if text.startswith("memver_"):
        return "version", text
    age = _AGE.match(text)
    if age:
        return "time", datetime.now(UTC) - timedelta(
            seconds=float(age.group(1)) * _UNITS[age.group(2)])
    try:
        when = parse_time(text)
    except ValueError:
        raise ValueError(f"--since {text!r}: give a version id (memver_…), an RFC 3339 "
                         "time (2026-01-02T03:04:05Z) or an age (30s, 10m, 2h, 1d)") from None
    return "time", when if when.tzinfo else when.replace(tzinfo=UTC)


async def replay(client: MemoryStoresClient, store_id: str, store: str, since: str,
                 ) -> list[Event]:
    """The store's versions from `since` on (after it, for a version id), as events."""
    events, _after = await _replay(client, store_id, store, since)
    return events


async def _replay(client: MemoryStoresClient, store_id: str, store: str, since: str,
                  ) -> tuple[list[Event], tuple[datetime, str]]:
    """`replay`, and the point it starts after: a version is news when its (time, id)
    is greater (a time `T` is the point (T, ""): every version at T on)."""
    kind, value = parse_since(since)
    if kind == "version":
        v = await client.get_version(store_id, value, view="basic")
        after = (parse_time(v.created_at), v.id)
    else:
        after = (value, "")
    versions = [v async for v in client.list_versions(store_id, created_gte=format_time(after[0]))
                if _key(v) > after]
    paths = await _paths_before(client, store_id, versions)
    return version_events(versions, paths, store=store, store_id=store_id), after


def _key(v: MemoryVersion) -> tuple[datetime, str]:
    return parse_time(v.created_at), v.id


async def _paths_before(client: MemoryStoresClient, store_id: str,
                        versions: list[MemoryVersion]) -> dict[str, str]:
    """For each memory whose first version here is an edit, its path just before it
    (so a rename is told from an edit): one request per such memory."""
    first: dict[str, MemoryVersion] = {}
    for v in sorted(versions, key=lambda v: (v.created_at, v.id)):
        first.setdefault(v.memory_id, v)
    paths: dict[str, str] = {}
    for mid, v in first.items():
        if v.operation != "modified":
            continue
        async for older in client.list_versions(store_id, memory_id=mid):
            if (older.created_at, older.id) < (v.created_at, v.id) and older.path:
                paths[mid] = older.path
                break
    return paths


async def follow_buses(engines: list, since: str | None, queue: int = QUEUE_LIMIT,
                       ) -> AsyncIterator[dict]:
    """The `events` stream of a mount's daemon: a first line `{"ok": ...}`, the replay
    (if asked), then every event its engines' buses emit, as JSON objects. At most
    `queue` events wait for the reader; the rest are dropped, and the count is told
    before the next event, or as soon as the reader has caught up. The last line of a
    mount that is unmounted is `{"ok": true, "end": "unmounted"}`; a stream that stops
    without it lost its daemon."""
    sub = Subscriber(max(1, min(queue, QUEUE_LIMIT)))
    contexts = {engine.ctx.store_id: engine.ctx for engine in engines}
    for ctx in contexts.values():
        ctx.events.attach(sub)
    try:
        yield {"ok": True, "stores": [ctx.events.store for ctx in contexts.values()]}
        replayed: set[str] = set()
        if since:
            for store_id, ctx in contexts.items():
                try:
                    events = await replay(ctx.client, store_id, ctx.events.store, since)
                except ValueError as exc:
                    yield {"ok": False, "error": str(exc)}
                    return
                except api_errors.APIError as exc:
                    yield {"ok": False, "error": f"cannot replay {ctx.events.store}: {exc}"}
                    return
                for event in events:
                    replayed.add(event.version_id or "")
                    yield event.to_json()
        while True:
            try:
                event = await sub.receive.receive()
            except trio.EndOfChannel:  # `EventBus.end`: unmounted, all told
                yield {"ok": True, "end": "unmounted"}
                return
            lost = sub.take_dropped()
            if lost is not None:
                yield lost.to_json()
            if event.version_id in replayed:
                continue
            ctx = contexts[event.store_id]
            await _fill_author(ctx.events, ctx.client, event)
            # Told once the kernel has been: a reader that opens the file on this event
            # must see the change, not the kernel's old size around the new text.
            await ctx.kernel_told()
            yield event.to_json()
            if not sub.receive.statistics().current_buffer_used:
                lost = sub.take_dropped()
                if lost is not None:
                    yield lost.to_json()
    finally:
        for ctx in contexts.values():
            ctx.events.detach(sub)
        sub.close()


async def _fill_author(bus: EventBus, client: MemoryStoresClient, event: Event) -> None:
    """The author of an event the feed did not bring (one request; none if it fails)."""
    if event.author is not None:
        return
    try:
        if event.version_id is None and event.memory_id:  # a delete: its newest version
            pages = client.list_versions_pages(bus.store_id, memory_id=event.memory_id,
                                               limit=1)
            async with aclosing(pages):
                async for page in pages:
                    if page:
                        event.version_id, event.author = page[0].id, page[0].created_by
                    break
        elif event.version_id:
            known = bus.authors.get(event.version_id)
            event.author = known if known is not None else (await client.get_version(
                bus.store_id, event.version_id, view="basic")).created_by
        if event.version_id:
            bus.authors[event.version_id] = event.author
    except (api_errors.APIError, OSError):
        pass  # the event goes out without its author rather than not at all


async def poll_store(client: MemoryStoresClient, store_id: str, store: str,
                     since: str | None, interval: float,
                     ready: Callable[[], None] = lambda: None, *,
                     lookback: timedelta = LOOKBACK) -> AsyncIterator[Event]:
    """Every change of the store from now (or from `since`), polling the versions list
    every `interval` seconds; a write committed out of order within `lookback` is
    still caught (the window is asked again, seen ids skipped). `ready()` once "now"
    is known: every change after that call is reported. A poll the server does not
    answer (down, or restarting: the embedded server on its new port, which the
    client's `locate` finds) is logged once and tried again at the next interval from
    where the last one ended: a long-lived watcher loses nothing to an outage."""
    seen: dict[str, datetime] = {}
    paths: dict[str, str] = {}
    position = datetime(1970, 1, 1, tzinfo=UTC)
    async for v in client.list_versions(store_id, limit=1):  # the newest: one request
        position = parse_time(v.created_at)
        break
    after: tuple[datetime, str] | None = None
    if since:
        events, after = await _replay(client, store_id, store, since)
        for event in events:
            if event.version_id:
                seen[event.version_id] = parse_time(event.time)
            if event.memory_id and event.kind != "deleted" and event.path:
                paths[event.memory_id] = event.path
            yield event
    first = since is None  # a replay already brought what was there
    if not first:
        ready()
    down = False
    while True:
        try:
            fresh = [v async for v in client.list_versions(
                store_id, created_gte=format_time(position - lookback)) if v.id not in seen
                and (after is None or _key(v) > after)]  # (not what came before `since`)
            if not first:
                paths.update(await _paths_before(client, store_id, [
                    v for v in fresh if v.memory_id not in paths]))
        except api_errors.TRANSIENT as exc:
            if not down:
                log.warning("%s: cannot poll (%s); trying again every %g s", store, exc,
                            interval)
            down = True
            await anyio.sleep(interval)
            continue
        if down:
            log.warning("%s: polling again", store)
            down = False
        for v in fresh:
            seen[v.id] = when = parse_time(v.created_at)
            position = max(position, when)
        if first:  # what was there before the watch began: not news
            for v in fresh:
                if v.operation != "deleted" and v.path:
                    paths.setdefault(v.memory_id, v.path)
            first = False
            ready()
        else:
            for event in version_events(fresh, paths, store=store, store_id=store_id):
                yield event
        horizon = position - lookback
        for vid in [vid for vid, when in seen.items() if when < horizon]:
            del seen[vid]
        await anyio.sleep(interval)  # trio, or asyncio under `memfs mcp --http`
