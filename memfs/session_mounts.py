"""`SessionMounts`: the SDK's `SessionMemoryStores`, as one live session mount.

An environment worker that syncs a session's memory stores into folders with the
SDK switches by changing one line::

    from memfs import SessionMounts as SessionMemoryStores

(or, for the SDK's own `EnvironmentWorker`, which builds its `SessionMemoryStores`
itself: ``anthropic.lib.environments._worker.SessionMemoryStores = SessionMounts``).
The worker loop stays as it is (download, the tools' allowed and read-only roots,
`write_file` for the file tools' saves, `sync_if_due` after each tool call,
`restore_missing` after a stopped one, `finish` at a clean end, `flush_writes` in
every teardown, `dispose` last), but nothing is copied or polled: `download`
mounts every attached store under the stores' common parent with
`memfs mount --session` (memfs/cli/group.py), reads and writes go straight to
the mount, and the daemon pushes each change as it is closed. So:

- `sync_if_due` is a status check over the daemon's control socket (no listing,
  no request to the server); it logs when a store is offline or refusing files;
- `finish` and `flush_writes` flush every store's pending changes, bounded like
  the SDK's (30 s);
- `dispose` unmounts (a last flush) and removes the root if `download` made it;
- `write_file` writes the file into the mount (which journals and pushes it), after
  checking that it still holds the text the tool read, as the SDK checks;
- `restore_missing` does nothing: a file a stopped tool call moved away is a change
  like any other, whose delete waits the mount's delete delay (`memfs status`).

Differences from the folder sync, all deliberate: the stores live under ONE
mount, so their mount paths must share a parent directory (the service's
``/mnt/memory/<slug>`` always do); a read-only store refuses changes with EROFS
for every program, `bash` included; an edit that loses to a concurrent remote
edit is kept as a conflict (`memfs conflicts`) instead of being dropped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

log = logging.getLogger("memfs.session_mounts")

#: The SDK's bounds: each teardown pass, and the smallest sync interval.
FLUSH_TIMEOUT = 30.0
MIN_SYNC_INTERVAL = 5.0

_DELETE_MODES = {"enabled": "enabled", "log_only": "log-only", "disabled": "disabled"}


def _sdk(name: str, fallback: Any) -> Any:
    """The SDK's own error class or text, so that a worker's `except` catches ours (a
    helper); each on its own (an older SDK has some of them), else `fallback`."""
    try:
        from anthropic.lib.tools import _memories
    except ImportError:
        return fallback
    return getattr(_memories, name, fallback)


class _MemoryWriteError(Exception):
    """A write to a memory file failed. The message is for the agent."""


NOT_SAVED: str = _sdk("NOT_SAVED", "not saved to memory, so the change was not made")
NOT_CONFIRMED: str = _sdk("NOT_CONFIRMED", "the memory store did not confirm the change, so "
                          "read the file again before you retry")
MemoryWriteError: type[Exception] = _sdk("MemoryWriteError", _MemoryWriteError)
_MountErrorBase: type[Exception] = _sdk("SessionMemoryError", Exception)


class SessionMountError(_MountErrorBase):  # type: ignore[valid-type,misc]
    """A session's stores cannot be mounted (the SDK's SessionMemoryError)."""


class SessionMounts:
    """A session's memory stores as one memfs mount (see the module docstring)."""

    def __init__(self, client: Any, *, workdir: str | os.PathLike[str],
                 sync_interval: float = 15.0, sync_deletions: str = "enabled",
                 mount_args: tuple[str, ...] = ()) -> None:
        if not sync_interval >= MIN_SYNC_INTERVAL:
            raise ValueError(f"sync interval must be at least {MIN_SYNC_INTERVAL} seconds, "
                             f"got {sync_interval}")
        if sync_deletions not in _DELETE_MODES:
            raise ValueError(f"sync_deletions must be one of {sorted(_DELETE_MODES)}")
        self._client = client
        self._workdir = Path(workdir)
        self._deletes = _DELETE_MODES[sync_deletions]
        self._mount_args = tuple(mount_args)
        self._root: Path | None = None
        self._created_root = False
        self._control_dir: Path | None = None  # the daemon's state dir, read at first use
        self._stores: list[tuple[Path, bool]] = []  # (store folder, read-only)
        self._finished = False
        self._disposed = False
        self._warned: set[tuple] = set()  # what sync_if_due said: once each, as the SDK

    # -- the SDK's surface -------------------------------------------------------------

    @property
    def roots(self) -> list[Path]:
        """Every attached store's folder (the file tools' allowed roots)."""
        return [p for p, _ in self._stores]

    @property
    def read_only_roots(self) -> list[Path]:
        """The folders of stores attached read-only (the tools refuse writes there)."""
        return [p for p, ro in self._stores if ro]

    async def download(self, session: Any) -> None:
        """Mount every attached store at its `mount_path` (one mount at their parent).

        The folders are named by `memfs mount --session`'s own layout, so `roots` is
        exactly what the mount shows: a resource without a usable mount path (none,
        or one with a `..` segment) gets its name's slug, made unique, under the
        others' parent (or `workdir/memory` when no store has a usable one)."""
        from memfs.cli.group import session_layout

        parents, layout = session_layout(session.resources)  # what the mount will show
        if not layout:
            return
        if len(parents) > 1:
            raise SessionMountError(
                "the memory stores' mount paths do not share one parent directory "
                f"({', '.join(parents)}); memfs mounts them together")
        root = Path(parents[0]) if parents else self._workdir / "memory"
        if root.exists() and any(root.iterdir()):
            raise SessionMountError(
                f"something already exists at the memory stores' path: {root}; it must be "
                "empty when the session starts")
        if not root.exists():
            root.mkdir(parents=True, mode=0o755)
            self._created_root = True
        args = [sys.executable, "-P", "-m", "memfs", "mount", "--session", session.id, str(root),
                "--deletes", self._deletes, *self._mount_args]
        base_url = str(getattr(self._client, "base_url", "") or "")
        if base_url:
            args += ["--base-url", base_url.rstrip("/")]
        env = dict(os.environ)
        # The SDK's worker scopes its client to the work item's sessions token as a
        # bearer token (auth_token); an account client carries an api_key. Either
        # reaches the mount through the environment only, never argv.
        for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY_FILE", "ANTHROPIC_AUTH_TOKEN"):
            env.pop(var, None)
        if getattr(self._client, "api_key", None):
            env["ANTHROPIC_API_KEY"] = self._client.api_key
        elif getattr(self._client, "auth_token", None):
            env["ANTHROPIC_AUTH_TOKEN"] = self._client.auth_token
        result = await anyio.run_process(args, env=env, check=False,
                                         stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            if self._created_root:
                _rmdir_quietly(root)
                self._created_root = False
            raise SessionMountError(
                f"failed to mount the session's memory stores at {root}: "
                + (result.stderr.decode(errors="replace").strip() or "memfs mount failed"))
        for line in result.stderr.decode(errors="replace").splitlines():
            if line.strip():  # what the mount said (a store left empty, adopted state...)
                log.warning("%s", line.strip())  # (it was dropped: a helper)
        self._root = root  # the control directory is looked up by the first `_ask`
        self._stores = [(root / name, r.access == "read_only") for r, name in layout]
        for folder in self.roots:
            if not folder.is_dir():
                log.warning("the mount has no folder %s (see memfs status %s)", folder, root)
        log.info("mounted %d memory store(s) at %s", len(self._stores), root)

    async def write_file(self, path: Path, content: str, replacing: str | None, *,
                         lock: anyio.Lock) -> bool:
        """The file tools' save (the SDK's worker hands them this since SDK 2.17; without
        it every work item with memory failed: a helper). The SDK saves to the server,
        then writes the file; here the folder is the mount, which journals and pushes
        what is written, so this writes it, under `lock`, once the file still holds
        `replacing`, the text the tool read (else an edit of text another writer changed
        since would replace their change: MemoryWriteError, as the SDK). False, and
        nothing done, for a path in no store's folder (the tools write it themselves).
        OSError as the mount says it (EROFS, EFBIG, ENOSPC, ...). Bounded as the SDK's:
        a mount that does not answer in 30 s is MemoryWriteError (not confirmed), and
        the lock is let go (a review: a hung mount held the worker's lock for good)."""
        # Resolved, as the tools resolve their targets and the SDK its folders: a
        # workdir reached through a link made every save "in no store" (a review).
        target = Path(os.path.realpath(path))
        if not any(target.is_relative_to(os.path.realpath(f)) for f in self.roots):
            return False
        with anyio.move_on_after(FLUSH_TIMEOUT):
            async with lock:
                await anyio.to_thread.run_sync(_write_if_unchanged, target, content,
                                               replacing, abandon_on_cancel=True)
                return True
        raise MemoryWriteError(f"{NOT_CONFIRMED}: no answer within {FLUSH_TIMEOUT:g} seconds")

    async def restore_missing(self) -> None:
        """Nothing to do (see the module docstring); never raises."""

    async def sync_if_due(self) -> None:
        """A status check, no listing: the daemon syncs continuously. Never raises.
        Each trouble is said once, not after every tool call (a helper)."""
        status = await self._status()
        for store in (status or {}).get("stores", []):
            name = store.get("name") or store.get("store_id")
            key = store.get("store_id") or name  # (two stores may share a name)
            if store.get("online") is False:
                self._warn(("offline", key), "memory store %s is offline: %s", name,
                           store.get("offline_reason"))
            else:
                self._warned.discard(("offline", key))  # said again if it goes again
            if store.get("gone"):
                self._warn(("gone", key), "memory store %s was %s on the server: it is "
                           "read-only now, and what it holds here stays here", name,
                           store["gone"])
            for item in store.get("pending", {}).get("refused", []):
                self._warn(("refused", key, item.get("path"), item.get("reason")),
                           "the server refused %s in %s: %s", item.get("path"), name,
                           item.get("reason"))

    def _warn(self, key: tuple, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    async def finish(self) -> None:
        """The session's last sync, once, at a clean end: every store flushed."""
        if self._finished:
            raise RuntimeError("finish() was already called: it is the session's last sync "
                               "and runs once")
        self._finished = True
        await self._flush()

    async def flush_writes(self) -> None:
        """Push every pending change now (bounded); never raises."""
        await self._flush()

    async def dispose(self) -> None:
        """Unmount (a last flush) and remove the root if `download` made it."""
        if self._root is None or self._disposed:
            return
        self._disposed = True
        result = await anyio.run_process(
            [sys.executable, "-P", "-m", "memfs", "unmount", str(self._root),
             "--timeout", str(FLUSH_TIMEOUT)], check=False, stdin=subprocess.DEVNULL)
        from memfs.cli.unmount import NOT_ALL_PUSHED

        out = (result.stdout + result.stderr).decode(errors="replace").strip()
        if result.returncode == NOT_ALL_PUSHED:  # unmounted; the output names what is kept
            log.warning("%s", out)
        elif result.returncode != 0:
            log.warning("memory store unmount failed: %s", out)
            return
        else:
            log.info("%s", out)
        if self._created_root:
            _rmdir_quietly(self._root)

    # -- helpers --------------------------------------------------------------------------

    async def _control(self, payload: dict, timeout: float) -> dict | None:
        """The daemon's reply, or None (logged). The control directory read at mount
        time is asked first: `sync_if_due` runs after every tool call, and the registry
        is read again only when that directory does not answer (a restarted daemon)."""
        if self._root is None:
            return None
        try:
            return await anyio.to_thread.run_sync(self._ask, payload, timeout)
        except (OSError, ValueError, KeyError) as exc:
            log.warning("the memfs daemon of %s does not answer: %s", self._root, exc)
            return None

    def _ask(self, payload: dict, timeout: float) -> dict:
        """(In a worker thread.) The cached control directory, else the registry's."""
        from memfs.local import control

        cached = self._control_dir
        if cached is not None:
            try:
                return control.request(cached, payload, timeout=timeout)
            except (OSError, ValueError):
                self._control_dir = self._registered_dir()
                if self._control_dir == cached:
                    raise  # the same daemon: asking it again would wait twice
        else:
            self._control_dir = self._registered_dir()
        return control.request(self._control_dir, payload, timeout=timeout)

    def _registered_dir(self) -> Path:
        """The state (control) directory the mount registry names for the root."""
        from memfs.local.registry import read_registry

        info = read_registry(str(self._root))
        if info is None:
            raise FileNotFoundError(f"no memfs daemon is registered for {self._root}")
        return Path(info["state_dir"])

    async def _status(self) -> dict | None:
        reply = await self._control({"cmd": "status"}, 10.0)
        return (reply or {}).get("status")

    async def _flush(self) -> None:
        reply = await self._control({"cmd": "flush", "timeout": FLUSH_TIMEOUT},
                                    FLUSH_TIMEOUT + 10)
        if reply is None:
            return
        from memfs.state.report import kept_here_lines

        if reply.get("left"):
            log.warning("memory flush cut off: %d change(s) not pushed yet; they stay "
                        "journaled and go out when the server answers", reply["left"])
        for line in kept_here_lines(reply):
            log.warning("memory: %s", line)


def _write_if_unchanged(target: Path, content: str, replacing: str | None) -> None:
    """(In a worker thread.) See `SessionMounts.write_file`. The text is checked before
    the file is touched, and replaces it whole (a temp file renamed over it, its mode
    kept): opened for writing, the file was emptied first, and a save the mount then
    refused (past 102,400 bytes, not Unicode) pushed the memory empty (a review)."""
    from memfs.core.paths import MAX_CONTENT_BYTES

    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise MemoryWriteError(f"{NOT_SAVED}: the text holds a lone surrogate, which is "
                               "not Unicode") from None
    if len(data) > MAX_CONTENT_BYTES:
        raise MemoryWriteError(f"{NOT_SAVED}: the text is {len(data):,} bytes; a memory "
                               f"holds at most {MAX_CONTENT_BYTES:,}")
    if replacing is not None:
        try:
            now: bytes | None = target.read_bytes()
        except FileNotFoundError:
            now = None
        if now != replacing.encode("utf-8", "surrogatepass"):
            raise MemoryWriteError(f"{NOT_SAVED}: the file changed since it was read. "
                                   "Read the file again before you retry.")
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{secrets.token_hex(3)}")  # an atomic save's
    try:
        with open(temp, "xb") as f:
            f.write(data)
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _rmdir_quietly(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
