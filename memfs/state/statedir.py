"""Where a mount's state lives, and how it is found again.

A mount's state (``state.db``, ``objects/``, ``daemon.log``, ``control.sock``,
``lock``) lives in ``<cache root>/<server key>/<store id>/``:

* the cache root is ``--cache-dir`` or ``$XDG_CACHE_HOME/memfs``;
* the server key is ``srv-<id>`` when the server reports a stable identity
  (``memfs serve`` does: ``GET /_memfs/health`` → ``server_id``, made once per
  database), so a restarted embedded server on a new port finds the same
  state; otherwise (the hosted API) a slug of the base URL, as before.

The key is resolved at mount time (:func:`resolve_key`). When state for the
same store exists under another key (an older memfs keyed it by URL and port,
or the URL changed), :func:`adopt` takes it over so its pending changes are
never stranded: moved into place when the new key has no state yet, otherwise
imported as conflicts of the new state and the old directory renamed aside.
:func:`open_state_dir` does both for every way a store is mounted (a plain
mount, a session or ``--all`` root, a store an ``--all`` root finds later).

The mount registry (``<default cache root>/mounts/<hash>.json``, one per
running daemon, written by the daemon) and the *known* index
(``mounts/known/<hash>.json``, written by `memfs mount`, kept after unmount)
map a mountpoint to its state directory, so `memfs status` and
`memfs conflicts` find a mount made with any ``--cache-dir``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memfs.core import paths
from memfs.core.private import is_own, make_dirs, own_dir, private_dir
from memfs.local.registry import (
    cache_root,
    canonical_mountpoint,
    mount_hash,
    registry_dir,
    write_private_json,
)
from memfs.state.schema import STATE_DB
from memfs.state.view import StateView, read_meta

if TYPE_CHECKING:  # imported where used: `memfs` commands that never adopt stay lean
    from memfs.state.blobs import BlobCache

#: The file a daemon holds an exclusive flock on for as long as it runs on the
#: directory: no other mount, adoption or offline command touches the state meanwhile.
LOCK = "lock"
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# -- roots, keys and directories ----------------------------------------------------------


def server_id(base_url: str) -> str:
    """The URL-derived key of a server without an identity of its own (the hosted
    API): a readable, filesystem-safe host-port slug plus a short hash."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", base_url.split("://", 1)[-1]).strip("-")[:40]
    return f"{slug}-{hashlib.sha256(base_url.encode()).hexdigest()[:8]}"


class Unreachable(Exception):
    """The server did not answer the identity probe."""


def reported_server_id(base_url: str, timeout: float = 2.0) -> str | None:
    """The id the server reports in ``GET /_memfs/health`` (``memfs serve``), None when
    it reports none (the hosted API: 404); Unreachable when it does not answer."""
    import httpx

    from memfs.api import tls

    try:
        r = httpx.get(health_url(base_url), timeout=timeout, verify=tls.verify())
    except httpx.HTTPError as exc:
        raise Unreachable(str(exc)) from None
    return reported_id(r)


async def reported_server_id_async(http, base_url: str, timeout: float = 2.0) -> str | None:
    """:func:`reported_server_id` through an ``httpx.AsyncClient`` already open (`memfs
    mount` asks it while it looks the store up); the request is sent as the sync
    probe sends it, without the client's headers (no API key)."""
    import httpx

    try:
        r = await http.send(httpx.Request("GET", health_url(base_url),
                                          extensions={"timeout": httpx.Timeout(timeout)
                                                      .as_dict()}))
    except httpx.HTTPError as exc:
        raise Unreachable(str(exc)) from None
    return reported_id(r)


def health_url(base_url: str) -> str:
    return f"{base_url.rstrip('/')}/_memfs/health"


def reported_id(r) -> str | None:
    """The server id of a health response (an ``httpx.Response``)."""
    if r.status_code == 429 or r.status_code >= 500:
        raise Unreachable(f"HTTP {r.status_code}")
    if r.status_code != 200:
        return None
    try:
        sid = r.json().get("server_id")
    except (ValueError, AttributeError):
        return None
    return sid if isinstance(sid, str) and _ID_RE.match(sid) else None


def key_for(base_url: str, reported: str | None) -> str:
    return f"srv-{reported}" if reported else server_id(base_url)


def resolve_key(base_url: str, store_id: str, cache_dir: str | None = None,
                timeout: float = 2.0) -> str:
    """The state key of base_url: the server's reported id, else the URL slug. When
    the server is unreachable: the key of a state dir of this store last mounted
    from base_url (state.db meta), else the URL slug."""
    try:
        reported: str | None | Unreachable = reported_server_id(base_url, timeout)
    except Unreachable as exc:
        reported = exc
    return key_from_probe(base_url, store_id, cache_dir, reported)


def key_from_probe(base_url: str, store_id: str, cache_dir: str | None,
                   reported: str | None | Unreachable) -> str:
    """:func:`resolve_key` from a health probe already made (its id, None, or the
    Unreachable it raised)."""
    if not isinstance(reported, Unreachable):
        return key_for(base_url, reported)
    return offline_key(base_url, store_id, cache_dir)


def offline_key(base_url: str, store_id: str, cache_dir: str | None) -> str:
    """The key when the server cannot be asked: that of the state dir of this store
    last mounted from base_url (state.db meta), else the URL slug."""
    root = own_root(cache_dir)
    best: tuple[float, str] | None = None
    for db in root.glob(f"*/{store_id}/{STATE_DB}"):
        if is_own(db.parent.parent) and is_own(db.parent) and \
                read_meta(db, "base_url").get("base_url") == base_url:
            mtime = db.stat().st_mtime
            if best is None or mtime > best[0]:
                best = (mtime, db.parent.parent.name)
    return best[1] if best else server_id(base_url)


def open_state_dir(base_url: str, store_id: str, cache_dir: str | None,
                   say: Callable[[str], None], *, key: str | None = None) -> Path:
    """The store's state directory under the server's key, after adopting the store's
    state kept under other keys: every way of mounting a store goes through here, so
    none can strand the pending changes an older memfs (or another URL) left behind.

    The key is `key` when known (from a probe made already, or once for a session
    root's stores), else the server is probed now. Each adoption's message goes to
    `say`; adoption never blocks the mount."""
    root = own_root(cache_dir)
    if key is None:
        key = resolve_key(base_url, store_id, cache_dir)
    try:
        for done in adopt(root, key, store_id):
            say(done.message())
    except (OSError, sqlite3.Error) as exc:  # the old state stays where it is
        say(f"memfs: could not adopt earlier state of {store_id}: {exc}")
    return state_dir_for(base_url, store_id, cache_dir, key=key)


def own_root(cache_dir: str | None) -> Path:
    """The cache root (`--cache-dir`, else the default), made or held to be the user's
    own (core/private.py) before anything in it is read or made."""
    return private_dir(cache_dir or cache_root())


def _plain(store_id: str) -> str:
    """A store id as one directory name: never a `..` or a path (the API's ids are
    letters, digits, `_` and `-`; the client refuses an answer with another)."""
    if not paths.is_id(store_id):
        raise ValueError(f"{store_id!r} is not a memory store id")
    return store_id


def state_dir_for(base_url: str, store_id: str, cache_dir: str | None = None,
                  key: str | None = None) -> Path:
    """Create (0700) and return the state directory; key defaults to the URL slug."""
    root = Path(cache_dir) if cache_dir else cache_root()
    path = root / (key or server_id(base_url)) / _plain(store_id)
    make_dirs(path)
    for p in (root, path.parent, path):  # each this user's own, 0700 (core/private.py)
        own_dir(p)
    return path


# -- the mount registry and the known index ----------------------------------------------


def known_file(mountpoint: str) -> Path:
    path = private_dir(registry_dir() / "known")
    return path / (mount_hash(mountpoint) + ".json")


def remember(mountpoint: str, state_dir: Path, store_id: str, base_url: str) -> None:
    """Record (atomically, 0600) which state directory serves mountpoint; kept after
    unmount so status and conflicts find it with any --cache-dir."""
    write_private_json(known_file(mountpoint), {
        "mountpoint": canonical_mountpoint(mountpoint), "state_dir": str(state_dir),
        "store_id": store_id, "base_url": base_url, "at": time.time()})


def known_state_dir(mountpoint: str) -> Path | None:
    """The state directory last mounted at mountpoint, from the known index, if it
    still holds a state.db that was last mounted there."""
    try:
        info = json.loads(known_file(mountpoint).read_text())
        state_dir = Path(info["state_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    db = state_dir / STATE_DB
    if not db.is_file():
        return None
    last = read_meta(db, "mountpoint").get("mountpoint")
    if last is not None and canonical_mountpoint(last) != canonical_mountpoint(mountpoint):
        return None  # since mounted elsewhere
    return state_dir


def known_mountpoints() -> list[str]:
    """Every mountpoint the known index remembers whose state directory was last
    mounted there (mounted now or not): what `memfs conflicts` lists without one."""
    return [mountpoint for mountpoint, _state_dir in _known()]


def _known() -> list[tuple[str, Path]]:
    """(mountpoint, state directory) of every entry of the known index that holds."""
    folder = registry_dir() / "known"
    found = []
    for entry in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            mountpoint = json.loads(entry.read_text())["mountpoint"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(mountpoint, str) and \
                (state_dir := known_state_dir(mountpoint)) is not None:
            found.append((mountpoint, state_dir))
    return found


def left_behind(mountpoint: str, store: str) -> tuple[Path, int] | None:
    """(the state directory, how many changes not on the server it holds) of `store` (an
    id or a name) as last mounted at mountpoint, when it holds any: what a store deleted
    on the server leaves, which `memfs mount` can then only point at (`memfs salvage`)."""
    state_dir = known_state_dir(mountpoint)
    if state_dir is None:
        return None
    meta = read_meta(state_dir / STATE_DB, "store_id", "store_name")
    if store not in (meta.get("store_id"), meta.get("store_name")):
        return None
    try:
        dirty, conflicts, _deletes = _pending_rows(state_dir / STATE_DB)
    except sqlite3.Error:
        return None
    held = len(dirty) + len(conflicts)
    return (state_dir, held) if held else None


def left_behind_under(root: str, present: set[str],
                      caches: set[Path]) -> list[tuple[str, Path, int]]:
    """(its last mountpoint, its state directory, how many changes not on the server)
    of every store last mounted right under `root` that is not among `present` now and
    whose journal holds changes: a store deleted on the server, or no longer in the
    session, which the root's next mount would otherwise leave unsaid (a helper).
    Found through the known index and each cache root in `caches` (a new store given
    the old one's directory name takes its place in the index: a reviewer)."""
    prefix = canonical_mountpoint(root).rstrip("/") + "/"
    candidates = {state_dir for _mountpoint, state_dir in _known()}
    candidates |= {db.parent for cache in caches | {cache_root()}
                   for db in cache.glob(f"*/*/{STATE_DB}")}
    found = []
    for state_dir in sorted(candidates):
        meta = read_meta(state_dir / STATE_DB, "store_id", "mountpoint")
        real = canonical_mountpoint(meta.get("mountpoint") or "/")
        if not real.startswith(prefix) or "/" in real[len(prefix):] or \
                meta.get("store_id") in present:
            continue
        try:
            dirty, conflicts, _deletes = _pending_rows(state_dir / STATE_DB)
        except sqlite3.Error:
            continue
        if dirty or conflicts:
            found.append((meta["mountpoint"], state_dir, len(dirty) + len(conflicts)))
    return found


# -- adoption ----------------------------------------------------------------------------

@dataclass
class Adoption:
    source: Path  # the old state directory (as it was named)
    moved_to: Path | None = None  # case 1: renamed into place
    aside: Path | None = None  # case 2: renamed aside after import
    imported: list[str] = field(default_factory=list)  # paths imported as conflicts
    missing: list[str] = field(default_factory=list)  # pending, but the blob was gone
    pending: int = 0  # pending changes carried over (moved or imported)
    deletes: int = 0  # pending deletes not carried over (the memory stays)
    error: str | None = None  # could not adopt: the old directory is left as it was

    def message(self) -> str:
        if self.error is not None:
            return (f"memfs: could not adopt the earlier state directory {self.source} "
                    f"({self.error}); it is left as it was")
        if self.moved_to is not None:
            return (f"memfs: adopted {self.pending} pending change(s) from an earlier state "
                    f"directory {self.source} (moved to {self.moved_to})")
        text = (f"memfs: adopted {len(self.imported)} pending change(s) from an earlier state "
                f"directory {self.source} as conflicts (memfs conflicts); kept at {self.aside}")
        if self.missing:
            text += f"; content missing for {len(self.missing)}: {', '.join(self.missing)}"
        if self.deletes:
            text += f"; {self.deletes} pending delete(s) not carried over"
        return text


@contextlib.contextmanager
def exclusive(path: Path, *, blocking: bool) -> Iterator[bool]:
    """Hold an exclusive flock on path; yields False (non-blocking) when it is held."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def adopt(root: Path, key: str, store_id: str) -> list[Adoption]:
    """Take over the state of store_id kept under other keys of root (never one a
    running daemon holds), so no pending change is stranded. See the module doc."""
    root = Path(root)
    if not root.is_dir():
        return []
    done: list[Adoption] = []
    with exclusive(root / ".adopt.lock", blocking=True):
        target = root / key / _plain(store_id)
        for old_db in sorted(root.glob(f"*/{store_id}/{STATE_DB}")):
            old = old_db.parent
            if old.parent.name == key or not (is_own(old.parent) and is_own(old)):
                continue  # (another user's journal is never adopted: core/private.py)
            try:
                with exclusive(old / LOCK, blocking=False) as free:
                    if not free:
                        continue  # a daemon runs on it: its changes are not stranded
                    if not (target / STATE_DB).exists():
                        done.append(_move(old, target))
                        continue
                    with exclusive(target / LOCK, blocking=False) as target_free:
                        if not target_free:
                            return done  # mounted already: the mount itself will refuse
                        done.append(_import(old, target))
            except (OSError, sqlite3.Error) as exc:  # left where it is, untouched or whole
                done.append(Adoption(source=old, error=str(exc)))
    return done


def _move(old: Path, target: Path) -> Adoption:
    result = Adoption(source=old, moved_to=target)
    result.pending = len(_pending_rows(old / STATE_DB)[0])
    private_dir(target.parent)
    if target.exists():  # no state.db: nothing in it is referenced (a failed mount's log)
        leftover = target.with_name(f"{target.name}.empty-{_stamp()}")
        os.rename(target, leftover)
    os.rename(old, target)
    _repoint_known(old, target)
    return result


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"


def _pending_rows(db: Path) -> tuple[list[dict], list[dict], int]:
    """(dirty files, conflicts, pending deletes) of a state.db, read-only: what its
    mount would push, by `StateView.is_dirty` with the local-only names that mount
    recorded (an older memfs recorded none: the defaults)."""
    view = StateView(db)
    try:
        dirty = [{"path": view.path_of(node), "memory_id": node.memory_id,
                  "local_sha": node.sha, "kind": kind}
                 for node in view.files() if (kind := view.unsent(node)) is not None]
        return dirty, view.conflicts(), len(view.tombstones)
    finally:
        view.close()


def _copy_blob(source: BlobCache, target: BlobCache, sha: str | None) -> bool:
    """Copy a verified blob between two caches (fsynced; staged content a crash left
    included); False when it is in neither."""
    if not sha:
        return True
    data = source.get(sha)
    if data is None:
        return target.has(sha)
    target.put(data, sha=sha, fsync=True)
    return True


def _import(old: Path, target: Path) -> Adoption:
    """Every dirty file and conflict of old becomes a conflict row of target (blobs
    copied first, rows in one transaction), then old is renamed aside."""
    result = Adoption(source=old)
    dirty, conflicts, result.deletes = _pending_rows(old / STATE_DB)
    where = f"{old.parent.name}/{old.name}"
    rows = []
    for d in dirty:
        rows.append((d["path"], d["memory_id"], d["local_sha"],
                     f"adopted from earlier state directory {where}: {d['kind']}"))
    for c in conflicts:
        rows.append((c["path"], c["memory_id"], c["local_sha"],
                     f"adopted from earlier state directory {where}: {c['reason']}"))
    from memfs.state.blobs import BlobCache
    from memfs.state.state import State

    with contextlib.ExitStack() as opened:
        # No daemon runs on target: its lock is held (see adopt).
        state = State(target / STATE_DB)
        opened.callback(state.close)
        source = BlobCache(old / "objects")
        opened.callback(source.close)
        dest = BlobCache(target / "objects")
        opened.callback(dest.close)
        tree = state.tree_shas()
        have = {(c["path"], c["local_sha"]) for c in state.conflicts()}
        todo = []
        for path, memory_id, sha, reason in rows:
            if (path, sha) in have or tree.get(path) == sha:
                continue  # already there: the same content at the same place
            have.add((path, sha))
            if not _copy_blob(source, dest, sha):
                result.missing.append(path)
                continue
            todo.append((path, memory_id, sha, tree.get(path), reason))
        if todo:
            state.import_conflicts(todo)
    result.imported = [t[0] for t in todo]
    result.pending = len(todo)
    aside = old.with_name(f"{old.name}.adopted-{_stamp()}")
    os.rename(old, aside)
    result.aside = aside
    return result


def _repoint_known(old: Path, new: Path) -> None:
    """Known-index entries that named old now name new (the directory moved)."""
    try:
        entries = list((registry_dir() / "known").glob("*.json"))
    except OSError:
        return
    for f in entries:
        try:
            info = json.loads(f.read_text())
            if Path(info.get("state_dir", "")) != old:
                continue
            info["state_dir"] = str(new)
            tmp = f.with_name(f".{f.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(info, out)
            os.replace(tmp, f)
        except (OSError, ValueError):
            continue
