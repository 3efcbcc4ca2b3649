"""`memfs mount --session ID [ROOT]` and `memfs mount --all ROOT`: plans a session root.

A session root is one FUSE mount holding several stores, each at ``ROOT/<name>``
(memfs/mount/router.py). This module turns a session's memory-store resources, or the
account's store list, into a `GroupConfig` for the daemon: which store goes to
which directory, read-only or not, and where each store's own state lives (the
same state directory a plain mount of that store uses, so nothing is stranded
between the two ways of mounting it).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from memfs.api import errors as api_errors
from memfs.core import paths
from memfs.core.mountconfig import GroupConfig, GroupStore, SyncOptions
from memfs.core.private import make_dirs, own_dir
from memfs.core.slug import mount_slugs, unique
from memfs.local.registry import cache_root, mount_hash
from memfs.state.statedir import open_state_dir, own_root, resolve_key

#: Where a session container shows its stores, and so a session root's default.
SESSION_ROOT = "/mnt/memory"


def group_path(root: str, cache_dir: str | None) -> Path:
    """Where the group's own state lives (control socket, lock, group.json, daemon.log)."""
    return (Path(cache_dir) if cache_dir else cache_root()) / "groups" / mount_hash(root)


def read_group_json(root: str, cache_dir: str | None) -> dict | None:
    """The root's group.json as its last mount wrote it (None: none, or unreadable);
    creates nothing, so `memfs status` of any path leaves no trace."""
    try:
        data = json.loads((group_path(root, cache_dir) / "group.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def group_dir(root: str, cache_dir: str | None) -> Path:
    """The group's own state directory, made (0700) for a mount of it."""
    path = group_path(root, cache_dir)
    own_root(cache_dir)  # (a root with no store yet made no state directory: a review)
    make_dirs(path)
    for p in (path.parent, path):
        own_dir(p)
    return path


def _plain_name(name: str) -> bool:
    """A directory name a server may give a store: one visible name the API would take
    as a path segment (no NUL, control or format character: an escape sequence, a
    right-to-left override), at most NAME_MAX bytes."""
    if not name or name.startswith(".") or len(name.encode()) > 255:
        return False
    try:
        paths.validate_segment(name)
    except paths.PathError:
        return False
    return True


def session_layout(resources: list) -> tuple[list[str], list[tuple[object, str]]]:
    """(the parent directories the resources' usable mount paths name, sorted;
    [(resource, directory name)]). One parent is the session's root; none (no usable
    mount path) or several leave the root to the caller. `memfs.SessionMounts` uses
    this too, so the folders it reports are the ones the mount shows.

    The service names each store's directory in `mount_path` (derived from the
    store's name); that name is used as is. A resource without a usable mount path
    gets the slug of its name, unique among the session's stores."""
    stores = [r for r in resources if r.type == "memory_store"]
    fallback = mount_slugs([(r.name or "", r.memory_store_id) for r in stores])
    parents: set[str] = set()
    out: list[tuple[object, str]] = []
    taken: set[str] = set()
    for r, fb in zip(stores, fallback, strict=True):
        mp = (r.mount_path or "").rstrip("/")
        name = posixpath.basename(mp) if mp.startswith("/") else ""
        if not _plain_name(name) or ".." in mp.split("/"):
            name = fb
        else:
            parents.add(posixpath.dirname(mp) or "/")
        name = unique(name, taken)  # never two stores in one directory
        taken.add(name)
        out.append((r, name))
    return sorted(parents), out


def plan_session(client_call, session_id: str, root: str | None, *, url: str,
                 cache_dir: str | None, options: SyncOptions, say: Callable[[str], None],
                 **common) -> GroupConfig:
    """The GroupConfig of a session's memory stores (fetched from the server); each
    adoption of a store's earlier state is told to `say`."""
    try:
        session = client_call(lambda c: c.get_session(session_id))
    except api_errors.NotFoundError:
        raise click.ClickException(f"unknown session {session_id} on {url}") from None
    parents, layout = session_layout(session.resources)
    if root is None:
        if len(parents) != 1:
            raise click.ClickException(
                f"session {session_id}: its stores' mount paths do not share one parent "
                "directory; give ROOT")
        if parents[0] != SESSION_ROOT:  # a server does not choose where this machine mounts
            raise click.ClickException(
                f"session {session_id}: its stores' mount paths are under {parents[0]}, not "
                f"{SESSION_ROOT}; give ROOT to mount them there")
        root = parents[0]
    key = resolve_key(url, layout[0][0].memory_store_id if layout else "-", cache_dir)
    stores = [group_store(r.memory_store_id, name, url=url, cache_dir=cache_dir, key=key,
                          say=say, read_only=r.access == "read_only",
                          display_name=r.name or "")
              for r, name in layout]
    return group_config("session", root, stores, url=url, cache_dir=cache_dir, key=key,
                        options=options, session_id=session_id, **common)


def plan_all(client_call, root: str, *, url: str, cache_dir: str | None,
             options: SyncOptions, read_only: bool, say: Callable[[str], None],
             **common) -> GroupConfig:
    """The GroupConfig of every non-archived store of the account, oldest first (so
    a name's first store keeps the plain slug); adoptions are told to `say`."""

    async def go(c):
        return [s async for s in c.list_stores()]

    listed = sorted(client_call(go), key=lambda s: (s.created_at, s.id))
    names = mount_slugs([(s.name, s.id) for s in listed])
    key = resolve_key(url, listed[0].id if listed else "-", cache_dir)
    stores = [group_store(s.id, name, url=url, cache_dir=cache_dir, key=key, say=say,
                          read_only=read_only, display_name=s.name)
              for s, name in zip(listed, names, strict=True)]
    return group_config("all", root, stores, url=url, cache_dir=cache_dir, key=key,
                        options=options, read_only=read_only, **common)


def group_store(store_id: str, name: str, *, url: str, cache_dir: str | None, key: str,
                say: Callable[[str], None], read_only: bool, display_name: str) -> GroupStore:
    """One store of a root, in the state directory a plain mount of it uses, with the
    state an older memfs left under another key adopted as a plain mount adopts it."""
    state_dir = open_state_dir(url, store_id, cache_dir, say, key=key)
    return GroupStore(store_id=store_id, name=name, state_dir=str(state_dir),
                      read_only=read_only, display_name=display_name)


def group_config(kind: str, root: str, stores: list[GroupStore], *, url: str,
                 cache_dir: str | None, key: str, options: SyncOptions,
                 **common) -> GroupConfig:
    """The one GroupConfig builder (a session, `--all`, either offline): the state key
    always goes with it, so a store `--all` finds later is keyed as its first ones."""
    root = os.path.abspath(root)
    return GroupConfig(kind=kind, root=root, base_url=url,
                       group_dir=str(group_dir(root, cache_dir)), stores=stores,
                       options=options, cache_dir=cache_dir, state_key=key, **common)


def cached_plan(root: str, cache_dir: str | None,
                ) -> tuple[list[GroupStore], str | None] | None:
    """(the stores the last mount of this root had, its state key) from group.json,
    for an offline start; the key is None in a group.json of an older memfs."""
    data = read_group_json(root, cache_dir)
    if data is None:
        return None
    try:
        stores = [GroupStore(store_id=s["store_id"], name=s["name"], state_dir=s["state_dir"],
                             read_only=bool(s.get("read_only"))) for s in data["stores"]]
        key = data.get("state_key")
    except (KeyError, TypeError, AttributeError):
        return None
    return stores, key if isinstance(key, str) else None


def format_group_status(s: dict, format_store, notes: Sequence[str] = ()) -> str:
    """`memfs status ROOT` of a session root: a header (and `notes` under it), then
    each store's own block."""
    head = f"{s.get('mountpoint')}: {s.get('kind')} root"
    if s.get("session_id"):
        head += f" of session {s['session_id']}"
    head += f" on {s.get('server')}" + ("" if s.get("running") else " (daemon not running)")
    lines = [head, *notes]
    for store in s.get("stores", []):
        block = format_store(store).splitlines()
        name = store.get("name") or store.get("store_id")
        lines.append(f"  [{name}] " + block[0])
        lines += ["  " + line for line in block[1:]]
        if store.get("failure"):
            lines.append(f"    FAILED: {store['failure']}")
    for skipped in s.get("skipped", []):
        lines.append(f"  [{skipped['name']}] not shown: {skipped['error']}")
    return "\n".join(lines)
