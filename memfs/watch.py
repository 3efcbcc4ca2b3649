"""`memfs watch MOUNTPOINT|STORE`: a store's changes as they are applied, one line each.

On a mount the daemon already reads the store's change feed; `watch` follows that
feed over the control socket (the `events` stream, memfs/events.py), so watching
costs the mount no request. The author of a change the feed brought is known from
the version it read; for the others (a push, a change found by a full listing)
the daemon asks for the one version, and only while someone watches.

Without a mount, `watch` polls the versions list itself: one request per poll
interval, as a mount's feed does.

`--since VERSION|TIME` first replays the versions list from there (a version id,
an RFC 3339 time, or an age such as `10m`, `2h`, `1d`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import click
import trio

from .api import errors as api_errors
from .api.client import MemoryStoresClient
from .api.models import MemoryVersion, format_time, parse_time
from .events import DROPPED, QUEUE_LIMIT, Event, EventBus, Subscriber, version_events
from .sync.feed import LOOKBACK

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
    kind, value = parse_since(since)
    after: tuple[str, str] | None = None
    if kind == "version":
        v = await client.get_version(store_id, value, view="basic")
        start, after = parse_time(v.created_at), (v.created_at, v.id)
    else:
        start = value
    versions = [v async for v in client.list_versions(store_id, created_gte=format_time(start))]
    if after is not None:
        versions = [v for v in versions if (v.created_at, v.id) > after]
    paths = await _paths_before(client, store_id, versions)
    return version_events(versions, paths, store=store, store_id=store_id)


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


# -- the daemon's side: `events` on the control socket ------------------------------------


async def follow_buses(engines: list, since: str | None, queue: int = QUEUE_LIMIT,
                       ) -> AsyncIterator[dict]:
    """The `events` stream of a mount's daemon: a first line `{"ok": ...}`, the replay
    (if asked), then every event its engines' buses emit, as JSON objects. At most
    `queue` events wait for the reader; the rest are dropped, and the count is told
    before the next event, or as soon as the reader has caught up."""
    sub = Subscriber(max(1, min(queue, QUEUE_LIMIT)))
    buses: dict[str, tuple[EventBus, MemoryStoresClient]] = {}
    for engine in engines:
        buses[engine.ctx.store_id] = (engine.ctx.events, engine.ctx.client)
        engine.ctx.events.attach(sub)
    try:
        yield {"ok": True, "stores": [bus.store for bus, _ in buses.values()]}
        replayed: set[str] = set()
        if since:
            for store_id, (bus, client) in buses.items():
                try:
                    events = await replay(client, store_id, bus.store, since)
                except ValueError as exc:
                    yield {"ok": False, "error": str(exc)}
                    return
                except api_errors.APIError as exc:
                    yield {"ok": False, "error": f"cannot replay {bus.store}: {exc}"}
                    return
                for event in events:
                    replayed.add(event.version_id or "")
                    yield event.to_json()
        while True:
            event = await sub.receive.receive()
            lost = sub.take_dropped()
            if lost is not None:
                yield lost.to_json()
            if event.version_id in replayed:
                continue
            bus, client = buses[event.store_id]
            await _fill_author(bus, client, event)
            yield event.to_json()
            if not sub.receive.statistics().current_buffer_used:
                lost = sub.take_dropped()
                if lost is not None:
                    yield lost.to_json()
    finally:
        for bus, _ in buses.values():
            bus.detach(sub)
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


# -- without a mount: poll the versions list -------------------------------------------------


async def poll_store(client: MemoryStoresClient, store_id: str, store: str,
                     since: str | None, interval: float,
                     ready: Callable[[], None] = lambda: None) -> AsyncIterator[Event]:
    """Every change of the store from now (or from `since`), polling the versions list
    every `interval` seconds; a write committed out of order within LOOKBACK is
    still caught (the window is asked again, seen ids skipped). `ready()` once "now"
    is known: every change after that call is reported."""
    seen: dict[str, datetime] = {}
    paths: dict[str, str] = {}
    position = datetime(1970, 1, 1, tzinfo=UTC)
    async for v in client.list_versions(store_id, limit=1):  # the newest: one request
        position = parse_time(v.created_at)
        break
    if since:
        for event in await replay(client, store_id, store, since):
            if event.version_id:
                seen[event.version_id] = parse_time(event.time)
            if event.memory_id and event.kind != "deleted" and event.path:
                paths[event.memory_id] = event.path
            yield event
    first = since is None  # a replay already brought what was there
    if not first:
        ready()
    while True:
        fresh: list[MemoryVersion] = []
        async for v in client.list_versions(store_id,
                                            created_gte=format_time(position - LOOKBACK)):
            if v.id not in seen:
                fresh.append(v)
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
            paths.update(await _paths_before(client, store_id, [
                v for v in fresh if v.memory_id not in paths]))
            for event in version_events(fresh, paths, store=store, store_id=store_id):
                yield event
        horizon = position - LOOKBACK
        for vid in [vid for vid, when in seen.items() if when < horizon]:
            del seen[vid]
        await anyio.sleep(interval)  # trio, or asyncio under `memfs mcp --http`


# -- the command ------------------------------------------------------------------------------


def format_line(event: dict) -> str:
    """One human line: `12:01:02 notes renamed /a.md -> /b.md (api:key_…)`."""
    from .cli_history import author

    clock = str(event.get("time", ""))[11:19]
    if event.get("kind") == DROPPED:
        return (f"{clock} {event.get('dropped')} event(s) dropped: this reader was too "
                "slow (the mount was not slowed)")
    where = event.get("path") or "?"
    if event.get("old_path"):
        where = f"{event['old_path']} -> {where}"
    return f"{clock} {event.get('store')} {event.get('kind')} {where} " \
        f"({author(event.get('author'))})"


def _mount_target(target: str) -> tuple[Path, str | None] | None:
    """(the daemon's control dir, a store's name or None) when `target` is a live mount,
    a session root, or a store's directory under a live session root."""
    from .statedir import read_registry

    path = os.path.abspath(target)
    info = read_registry(path)
    if info and info.get("state_dir"):
        return Path(info["state_dir"]), None
    root, name = os.path.split(path)
    info = read_registry(root)
    if info and any(s.get("name") == name for s in info.get("stores", [])):
        return Path(info["state_dir"]), name
    return None


def _follow_mount(control_dir: Path, store: str | None, since: str | None,
                  ) -> Iterator[dict]:
    from . import control

    request: dict = {"cmd": "events", "since": since}
    if store:
        request["store"] = store
    try:
        lines = control.stream(control_dir, request)
        first = next(lines, None)
    except OSError as exc:
        raise click.ClickException(f"the mount's daemon does not answer: {exc}") from None
    if first is None or not first.get("ok"):
        raise click.ClickException((first or {}).get("error") or
                                   "the mount's daemon closed the connection")
    click.echo(f"watching {', '.join(first.get('stores') or [])} (Ctrl-C to stop)", err=True)
    for line in lines:
        if line.get("ok") is False:
            raise click.ClickException(line.get("error") or "the daemon failed")
        yield line


def _follow_store(target: str, since: str | None, interval: float,
                  base_url: str | None, api_key_file: str | None) -> Iterator[dict]:
    """Poll the store's versions list in a thread of our own; the events come back
    over a queue (the CLI prints from the main thread)."""
    import queue
    import threading

    from . import storenames
    from .cli_errors import command_server

    url, key, _embedded = command_server(base_url, api_key_file)
    store = storenames.resolve_for_cli(url, key, target).store
    if since:
        try:
            parse_since(since)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
    out: queue.Queue = queue.Queue(maxsize=1000)

    def ready() -> None:
        click.echo(f"watching {store.name or store.id} on {url}, polling every {interval:g} s "
                   "(Ctrl-C to stop)", err=True)

    async def run() -> None:
        async with MemoryStoresClient(url, key) as client:
            async for event in poll_store(client, store.id, store.name or store.id, since,
                                          interval, ready):
                out.put(event.to_json())

    def thread() -> None:
        try:
            trio.run(run)
        except api_errors.APIError as exc:
            out.put({"ok": False, "error": f"{url}: {exc}"})
        except Exception as exc:  # reported to the main thread, never a traceback
            out.put({"ok": False, "error": f"{type(exc).__name__}: {exc}"})

    threading.Thread(target=thread, daemon=True, name="memfs-watch").start()
    while True:
        line = out.get()
        if line.get("ok") is False:
            raise click.ClickException(line["error"])
        yield line


@click.command("watch")
@click.argument("target", metavar="MOUNTPOINT|STORE")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line: time, "
              "store, path, old_path, kind, author, version_id.")
@click.option("--since", default=None, metavar="VERSION|TIME",
              help="Replay the versions list from a version id, an RFC 3339 time or an "
              "age (10m, 2h, 1d) first.")
@click.option("--poll-interval", default=2.0, show_default=True, type=click.FloatRange(0.1),
              help="Without a mount: seconds between polls of the store's versions.")
@click.option("--base-url", default=None, help="Without a mount: the API base URL "
              "(default: $ANTHROPIC_BASE_URL, else the embedded local server).")
@click.option("--api-key-file", default=None, help="Without a mount: read the API key "
              "from this file (default: $ANTHROPIC_API_KEY).")
def watch(target: str, as_json: bool, since: str | None, poll_interval: float,
          base_url: str | None, api_key_file: str | None) -> None:
    """Print each change of a mount's store (or of STORE, polled) as it is applied.

    Kinds: created, modified, renamed, deleted (changes from elsewhere), pushed (a
    local change the server took), conflict (the server's version won; yours is
    kept, see `memfs conflicts`).
    """
    found = _mount_target(target)
    lines = (_follow_mount(found[0], found[1], since) if found is not None
             else _follow_store(target, since, poll_interval, base_url, api_key_file))
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        for line in lines:
            sys.stdout.write((json.dumps(line) if as_json else format_line(line)) + "\n")
            sys.stdout.flush()
