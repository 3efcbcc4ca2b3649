"""`memfs watch MOUNTPOINT|STORE`: a store's changes as they are applied, one line each.

On a mount the daemon already reads the store's change feed; `watch` follows that
feed over the control socket (the `events` stream, memfs/sync/events.py), so watching
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
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import click
import trio

from memfs.api import errors as api_errors
from memfs.api.client import MemoryStoresClient
from memfs.core.shown import shown
from memfs.sync.events import DROPPED, author
from memfs.sync.watch import parse_since, poll_store

# -- the command ------------------------------------------------------------------------------


def format_line(event: dict) -> str:
    """One human line: `12:01:02 notes renamed /a.md -> /b.md (api:key_…)`."""
    clock = str(event.get("time", ""))[11:19]
    if event.get("kind") == DROPPED:
        return (f"{clock} {event.get('dropped')} event(s) dropped: this reader was too "
                "slow (the mount was not slowed)")
    where = event.get("path") or "?"
    if event.get("old_path"):
        where = f"{event['old_path']} -> {where}"
    return shown(f"{clock} {event.get('store')} {event.get('kind')} {where} "
                 f"({author(event.get('author'))})", limit=4000)


def _mount_target(target: str) -> tuple[Path, str | None] | None:
    """(the daemon's control dir, a store's name or None) when `target` is a live mount,
    a session root, or a store's directory under a live session root."""
    from memfs.local.registry import read_registry, root_store

    info = read_registry(os.path.abspath(target))
    if info and info.get("state_dir"):
        return Path(info["state_dir"]), None
    found = root_store(target)
    return None if found is None else (Path(found[1]["state_dir"]), found[2])


def _follow_mount(control_dir: Path, store: str | None, since: str | None, target: str,
                  ) -> Iterator[dict]:
    from memfs.local import control

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
        if line.get("end"):
            click.echo(f"memfs watch: {target} was unmounted", err=True)
            return
        yield line
    mount = os.path.dirname(os.path.abspath(target)) if store else target  # a root's store
    raise click.ClickException(f"the mount's daemon stopped without an unmount: memfs "
                               f"status {mount} says what it left; memfs unmount {mount} "
                               "clears the mount")


def _follow_store(target: str, since: str | None, interval: float, lookback: float,
                  base_url: str | None, api_key_file: str | None) -> Iterator[dict]:
    """Poll the store's versions list in a thread of our own; the events come back
    over a queue (the CLI prints from the main thread)."""
    import queue
    import threading

    from memfs.cli import storenames
    from memfs.cli.errors import command_server, describe

    server = command_server(base_url, api_key_file)
    url, key = server.url, server.key
    try:
        store = storenames.resolve_for_cli(url, key, target).store
    except storenames.StoreNotFound:
        if target.startswith(("/", "./", "../", "~")) or os.path.exists(target):
            raise click.ClickException(  # a path, most likely: said so
                f"{target} is not a live memfs mount (nor one store's directory under a "
                "live session root), nor a store's name") from None
        raise
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
        async with MemoryStoresClient(url, key, locate=server.locate) as client:
            async for event in poll_store(client, store.id, store.name or store.id, since,
                                          interval, ready,
                                          lookback=timedelta(seconds=lookback)):
                out.put(event.to_json())

    def thread() -> None:
        try:
            trio.run(run)
        except api_errors.APIError as exc:  # the line every command prints
            out.put({"ok": False, "error": describe(server.url, exc)})
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
@click.option("--lookback", default=30.0, show_default=True, type=click.FloatRange(0),
              help="Without a mount: seconds the server may take to commit a write after "
              "newer ones (each poll reads this much again; a mount's --feed-lookback).")
@click.option("--base-url", default=None, help="Without a mount: the API base URL "
              "(default: $ANTHROPIC_BASE_URL, else the embedded local server).")
@click.option("--api-key-file", default=None, help="Without a mount: read the API key "
              "from this file (default: $ANTHROPIC_API_KEY).")
def watch(target: str, as_json: bool, since: str | None, poll_interval: float,
          lookback: float, base_url: str | None, api_key_file: str | None) -> None:
    """Print each change of a mount's store (or of STORE, polled) as it is applied.

    Kinds: created, modified, renamed, deleted (changes from elsewhere), pushed (a
    local change the server took), conflict (the server's version won; yours is
    kept, see `memfs conflicts`).
    """
    found = _mount_target(target)
    lines = (_follow_mount(found[0], found[1], since, target) if found is not None
             else _follow_store(target, since, poll_interval, lookback, base_url,
                                api_key_file))
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        for line in lines:
            sys.stdout.write((json.dumps(line) if as_json else format_line(line)) + "\n")
            sys.stdout.flush()
