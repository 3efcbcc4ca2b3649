"""`memfs history`, `memfs show` and `memfs restore`: a file's versions, from the API.

    memfs history FILE [--json]                 its memory's versions, newest first
    memfs show FILE@VERSION                     one version's content, bytes exactly
    memfs show FILE --version VERSION
    memfs restore FILE --version VERSION        that content back, as an ordinary edit

FILE is a path inside a live mount (the registry in memfs/state/statedir.py says which
store and server). The memory is the file's `user.memfs.memory_id`; a path no file
holds now (deleted, or not pushed yet) is looked up in the store's versions list (the
newest memory that had that path). Everything is built on the versions API
(`memory_versions` filtered by memory id), so a file's history follows its renames
and shows every client's edits.

`restore` writes the old content into FILE through the mount (a new file at the path
of a deleted memory), then asks the daemon to push: the push carries the usual
`content_sha256` precondition, so a server that moved meanwhile ends as a conflict
(listed by `memfs conflicts`), never as a lost edit.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC
from pathlib import Path

import click
import trio

from memfs.api import errors as api_errors
from memfs.api.client import MemoryStoresClient
from memfs.api.models import MemoryVersion, parse_time
from memfs.core.shown import shown
from memfs.local import control
from memfs.local.registry import read_registry
from memfs.mount.sync_xattrs import state_of
from memfs.state.blobs import sha256
from memfs.sync.events import author


class _Target:
    """Where FILE lives: its mount, store, server and path in the store."""

    def __init__(self, file: str) -> None:
        self.file = os.path.abspath(file)
        probe = self.file
        while True:
            info = read_registry(probe)
            if info is not None:
                break
            parent = os.path.dirname(probe)
            if parent == probe:
                raise click.ClickException(f"{file} is not inside a running memfs mount")
            probe = parent
        self.mountpoint = probe
        self.info = info
        self.state_dir = Path(info["state_dir"])  # the daemon's control socket
        rel = os.path.relpath(self.file, self.mountpoint)
        if rel == "." or rel.startswith(".."):
            raise click.ClickException(f"{file} is the mount itself, not a file in it")
        parts = rel.split(os.sep)
        if "stores" in info:  # a session root: ROOT/<store directory>/<path in the store>
            store = next((s for s in info["stores"] if s["name"] == parts[0]), None)
            if store is None or len(parts) < 2:
                raise click.ClickException(
                    f"{file} is not a file inside a store of the session root {probe}")
            self.store_id: str = store["store_id"]
            parts = parts[1:]
        else:
            self.store_id = info["store_id"]
        self.path = "/" + "/".join(parts)
        self.base_url, self.api_key = self._server()

    def _server(self) -> tuple[str, str | None]:
        """The mount's server with the key `memfs mount` gave it."""
        from memfs.cli.errors import mount_server

        url, key, _embedded = mount_server(self.info)
        return url, key

    def memory_id_here(self) -> str | None:
        """The memory of the file at FILE now (None: no file, or not pushed yet)."""
        try:
            return os.getxattr(self.file, "user.memfs.memory_id").decode()
        except OSError:
            return None

    def run(self, fn):
        async def go():
            async with MemoryStoresClient(self.base_url, self.api_key, max_retries=2,
                                          timeout=30.0) as c:
                return await fn(c)

        from memfs.cli.errors import api_failures

        with api_failures(self.base_url):  # the line every command prints
            return trio.run(go)


#: `user.memfs.state` of a file whose bytes are not on the server: a restore over it
#: would lose them.
UNSYNCED = ("pending", "error", "refused", "local-only")


async def _memory_of(c: MemoryStoresClient, t: _Target) -> str:
    mid = t.memory_id_here()
    if mid:
        return mid
    newest: MemoryVersion | None = None
    async for v in c.list_versions(t.store_id, limit=100):  # newest first
        if v.path == t.path:
            newest = v
            break
    if newest is None:
        if os.path.exists(t.file):
            raise click.ClickException(f"{t.path} has not reached the server yet: no history")
        raise click.ClickException(f"no memory of {t.store_id} ever had the path {t.path}")
    return newest.memory_id


async def _history(c: MemoryStoresClient, t: _Target) -> tuple[str, list[MemoryVersion]]:
    mid = await _memory_of(c, t)
    return mid, [v async for v in c.list_versions(t.store_id, memory_id=mid, limit=100)]


def _row(v: MemoryVersion) -> dict:
    return {"id": v.id, "memory_id": v.memory_id, "created_at": v.created_at,
            "operation": v.operation, "path": v.path, "size": v.content_size_bytes,
            "sha256": v.content_sha256, "author": author(v.created_by),
            "created_by": v.created_by, "redacted_at": v.redacted_at,
            "redacted_by": v.redacted_by}


@click.command()
@click.argument("file", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def history(file, as_json):
    """List the versions of FILE's memory, newest first: time (UTC), operation,
    author, size, version id and the path it had (history follows renames).

    FILE may be a path whose memory was deleted: its last versions are listed."""
    t = _Target(file)
    mid, versions = t.run(lambda c: _history(c, t))
    if as_json:
        click.echo(json.dumps([_row(v) for v in versions], indent=2))
        return
    click.echo(f"{t.path}  ({mid}, {len(versions)} version(s), newest first)")
    # the author column as wide as its widest (a session's author is longer than a key's)
    width = max([28, *(len(author(v.created_by)) for v in versions)])
    for v in versions:
        size = "-" if v.content_size_bytes is None else f"{v.content_size_bytes} B"
        op = v.operation + (" (redacted)" if v.redacted_at else "")
        click.echo(f"{_when(v.created_at)}  {shown(op):<19} {shown(author(v.created_by)):<{width}} "
                   f"{size:>9}  {v.id}  {v.path or '(redacted)'}")


def _when(created_at: str) -> str:
    """RFC 3339 to the millisecond, UTC (as in the .memfs/versions names)."""
    try:
        t = parse_time(created_at).astimezone(UTC)
    except ValueError:
        return created_at
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{t.microsecond // 1000:03d}Z"


def _split(spec: str, version: str | None) -> tuple[str, str]:
    if version:
        return spec, version
    file, sep, vid = spec.rpartition("@")
    if not sep or not file or not vid or "/" in vid:
        raise click.UsageError("name the version: FILE@VERSION or --version VERSION")
    return file, vid


async def _content(c: MemoryStoresClient, t: _Target, vid: str, *,
                   check_memory: bool) -> tuple[MemoryVersion, bytes]:
    """The version's bytes (verified), or a ClickException saying why there are none."""
    try:
        v = await c.get_version(t.store_id, vid, view="full")
    except api_errors.NotFoundError:
        raise click.ClickException(f"no version {vid} in store {t.store_id} "
                                   "(the server may have forgotten it)") from None
    if check_memory:
        mid = await _memory_of(c, t)
        if v.memory_id != mid:
            raise click.ClickException(
                f"{vid} is a version of another memory ({v.memory_id}), not of {t.path} "
                f"({mid}); see `memfs history {t.file}`")
    if v.redacted_at:
        raise click.ClickException(
            f"version {vid} was redacted at {v.redacted_at} by {author(v.redacted_by)}: "
            "its content is gone")
    if v.operation == "deleted" or v.content is None:
        raise click.ClickException(f"version {vid} is the memory's delete: it has no content")
    data = v.content.encode("utf-8")
    if v.content_sha256 and sha256(data) != v.content_sha256:
        raise click.ClickException(f"version {vid}: the content does not match its sha256")
    return v, data


@click.command()
@click.argument("spec", metavar="FILE@VERSION | FILE")
@click.option("--version", "version", default=None, metavar="ID", help="The version id.")
def show(spec, version):
    """Print one version of a file to stdout, bytes exactly (see `memfs history`).

    A redacted version, or the delete, has no content: a message and exit status 1."""
    file, vid = _split(spec, version)
    t = _Target(file)
    _v, data = t.run(lambda c: _content(c, t, vid, check_memory=True))
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@click.command()
@click.argument("file", type=click.Path())
@click.option("--version", "version", required=True, metavar="ID",
              help="The version whose content FILE gets back.")
@click.option("--no-push", is_flag=True,
              help="Only write the file; the mount pushes it after its write-back delay.")
@click.option("--timeout", type=click.FloatRange(0), default=30.0, show_default=True,
              help="Bound on the push.")
@click.option("--force", is_flag=True,
              help="Replace FILE even where it holds changes that are not on the server.")
def restore(file, version, no_push, timeout, force):
    """Make version ID FILE's content again: an ordinary edit through the mount,
    pushed with the usual precondition (if the server changed meanwhile, your
    restore is kept as a conflict: `memfs conflicts`). A deleted memory's path gets a
    new file (a new memory with that content). A file that holds changes not on the
    server (not pushed yet, or refused) is not replaced without --force: those bytes
    are nowhere else."""
    t = _Target(file)
    v, data = t.run(lambda c: _content(c, t, version, check_memory=True))
    try:
        with open(t.file, "rb") as f:
            current = f.read()
    except FileNotFoundError:
        current = None
    except IsADirectoryError:
        raise click.ClickException(f"{file} is a directory") from None
    if current == data:
        click.echo(f"{t.path} already holds version {version}'s content")
        return
    unsynced = state_of(t.file) if current is not None else None
    if unsynced in UNSYNCED and not force:
        raise click.ClickException(
            f"{t.path} holds changes that are not on the server ({unsynced}); restoring "
            "would replace them and they are nowhere else: push or copy them first "
            "(memfs status), or give --force to replace them")
    try:
        os.makedirs(os.path.dirname(t.file), exist_ok=True)
        with open(t.file, "wb") as f:  # open/truncate/write/close: journaled like any save
            f.write(data)
    except OSError as exc:  # EROFS on a --read-only mount, ...
        raise click.ClickException(f"cannot write {file}: {exc.strerror}") from None
    what = "re-created" if current is None else "restored"
    click.echo(f"{what} {t.path} from {version} ({v.created_at}, {len(data)} bytes)")
    if no_push:
        return
    try:
        reply = control.request(t.state_dir, {"cmd": "flush", "timeout": timeout},
                                timeout=timeout + 30)
    except (OSError, ValueError) as exc:
        click.echo(f"the daemon did not answer ({exc}); the change is journaled and goes "
                   "out with the mount's next push")
        return
    state = state_of(t.file) or "?"
    if state == "conflict":
        raise click.ClickException(
            f"{t.path} changed on the server meanwhile: the server's version is in the "
            "tree and your restore is kept as a conflict (memfs conflicts; "
            "memfs conflicts restore ID puts it back)")
    if state == "synced":
        click.echo("pushed: the server holds it")
    else:
        click.echo(f"not pushed yet ({state}; {reply.get('left', '?')} change(s) left): "
                   "see memfs status")
