"""One mount's daemon: FUSE, pusher, reconciler and control socket in one trio nursery.

`memfs mount` forks this as ``python -m memfs.daemon`` (or runs it in the
foreground) with the mount's configuration as JSON in ``MEMFS_DAEMON_CONFIG``;
the API key travels only in the environment (``ANTHROPIC_API_KEY``), never in
argv. The daemon prints ``READY`` or ``ERROR <message>`` on stdout once, so the
parent returns only when the mount is live.

Shutdown, whichever way it comes (`memfs unmount`, SIGTERM/SIGINT, or
`fusermount3 -u` from outside): a bounded flush of pending changes, then the
unmount. What the flush could not push stays in state.db for the next mount.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pyfuse3
import trio

from . import control, proctitle
from .api import errors as api_errors
from .api.client import MemoryStoresClient
from .cache import BlobCache
from .fs import Operations
from .mountconfig import MountConfig
from .state import State
from .statedir import canonical_mountpoint, registry_file
from .sync.common import SyncContext
from .sync.pusher import Pusher
from .sync.reconciler import Reconciler

log = logging.getLogger("memfs.daemon")


class Daemon:
    def __init__(self, cfg: MountConfig, api_key: str | None) -> None:
        self.cfg = cfg
        self.state_dir = Path(cfg.state_dir)
        self.state = State(self.state_dir / "state.db",
                           local_only_patterns=cfg.local_only_patterns)
        self.cache = BlobCache(self.state_dir / "objects")
        self.client = MemoryStoresClient(cfg.base_url, api_key, max_retries=2, timeout=30.0)
        self.ctx = SyncContext(self.state, self.cache, self.client, cfg.store_id, cfg.options)
        self.ops = Operations(self.state, self.cache, read_only=cfg.options.read_only,
                              fetch=self.ctx.fetch, kick=self.ctx.kick,
                              invalidate=self.ctx.invalidate)
        removed = self.cache.gc(self.state.referenced_shas())
        if removed:
            log.info("cache: removed %d unreferenced blobs", removed)
        self.pusher = Pusher(self.ctx)
        self.reconciler = Reconciler(self.ctx)
        self.shutdown_requested = trio.Event()
        self.fuse_done = trio.Event()
        self.flush_result: dict | None = None
        self.flush_done = trio.Event()
        self.started_at = time.time()
        self.state.set_meta("store_id", cfg.store_id)
        self.state.set_meta("base_url", cfg.base_url)
        self.state.set_meta("mountpoint", cfg.mountpoint)
        self.state.set_meta("options", json.dumps(asdict(cfg.options)))  # for offline status

    # -- lifecycle -------------------------------------------------------------------

    def mount(self) -> None:
        options = set(pyfuse3.default_options)
        options.discard("default_permissions")
        options |= {"fsname=memfs", "subtype=memfs", "default_permissions"}
        if self.cfg.options.read_only:
            options.add("ro")
        pyfuse3.init(self.ops, self.cfg.mountpoint, options)

    async def run(self, on_ready) -> None:
        unmounted_outside = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._fuse_main)
            nursery.start_soon(proctitle.follow, self)  # `ps`: store, mountpoint, state
            await nursery.start(self.ctx.fetcher.serve)
            await nursery.start(control.serve, self.state_dir, self.handle_control)
            nursery.start_soon(self._signals)
            nursery.start_soon(self._invalidator)
            if not self.cfg.options.read_only:
                nursery.start_soon(self.pusher.run)
            # Listing and prefetch stop before the final flush (their own scope), so
            # nothing but the flush talks to the server once shutdown begins.
            background = trio.CancelScope()

            async def run_background() -> None:
                with background:
                    async with trio.open_nursery() as tasks:
                        tasks.start_soon(self.reconciler.run)
                        if self.cfg.options.prefetch:
                            tasks.start_soon(self._prefetch)
                        if self.cfg.embedded:
                            tasks.start_soon(self._follow_embedded_server)

            nursery.start_soon(run_background)
            if self.state.get_meta("last_sync_at") is None:
                await self._first_listing()
            on_ready()
            async with trio.open_nursery() as waiter:
                async def wait_for(event: trio.Event) -> None:
                    await event.wait()
                    waiter.cancel_scope.cancel()
                waiter.start_soon(wait_for, self.shutdown_requested)
                waiter.start_soon(wait_for, self.fuse_done)
            unmounted_outside = self.fuse_done.is_set()
            log.info("shutting down (%s)", "unmounted" if unmounted_outside else "requested")
            self.flush_result = await self._final_flush(background)
            log.info("flush: pushed %d, left %d", self.flush_result["pushed"],
                     self.flush_result["left"])
            self.flush_done.set()
            if not unmounted_outside:
                await trio.sleep(0.05)  # let the control reply go out
                pyfuse3.terminate()
                await self.fuse_done.wait()
            nursery.cancel_scope.cancel()
        self.unmounted_outside = unmounted_outside

    async def _final_flush(self, background: trio.CancelScope) -> dict:
        """Stop the background pusher (a pass under way finishes and is applied), end
        listing and prefetch, then push until nothing is left or the flush timeout
        passes. What it reports is exactly what state.db still holds pending."""
        await self.pusher.stop()
        background.cancel()
        result = await self.pusher.flush(self.cfg.flush_timeout)
        return {"pushed": result.pushed, "left": result.left,
                "offline": str(result.offline) if result.left and result.offline else None}

    async def _first_listing(self, timeout: float = 20.0) -> None:
        """A store never listed in this state dir: have its tree in place before
        `memfs mount` returns, so `mount && cat` works (bounded; on failure the
        reconciler's loop keeps trying and the mount starts empty)."""
        with trio.move_on_after(timeout):
            try:
                await self.reconciler.reconcile_pass()
            except Exception as exc:
                log.info("first listing failed: %s", exc)

    async def _fuse_main(self) -> None:
        try:
            await pyfuse3.main()
        finally:
            self.fuse_done.set()

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
            async for sig in sigs:
                if sig == signal.SIGHUP:
                    self.ctx.kick_reconcile()
                    continue
                log.info("signal %d: flushing and unmounting", sig)
                self.shutdown_requested.set()

    async def _invalidator(self) -> None:
        """Kernel cache invalidation, outside every request handler (docs/ARCHITECTURE.md)."""
        while True:
            await self.ctx.invalidation_ready.wait()
            for item in self.ctx.take_invalidations():
                try:
                    if item[0] == "inode":
                        await trio.to_thread.run_sync(pyfuse3.invalidate_inode, item[1], False)
                    else:
                        await trio.to_thread.run_sync(
                            pyfuse3.invalidate_entry, item[1], item[2].encode("utf-8"))
                except OSError:
                    pass  # the kernel did not know it: nothing cached to drop

    async def _prefetch(self) -> None:
        """Fill the cache from each finished listing that leaves blobs missing (the
        first one at mount), in batches, several at once; batches that failed
        (offline, errors) are tried again later. Meanwhile reads fetch on demand,
        their own batch first."""
        while True:
            await self.ctx.listed.wait()
            self.ctx.listed = trio.Event()
            started = time.monotonic()
            filled, failed = await self.ctx.fetcher.prefetch()
            if filled or failed:
                log.info("prefetch: %d blobs in %.2fs%s", filled,
                         time.monotonic() - started,
                         f", {failed} batch(es) to retry" if failed else "")
            if failed:
                with trio.move_on_after(30):
                    await self.ctx.online_wakeup.wait()
                self.ctx.listed.set()  # try again without waiting for the next listing

    async def _follow_embedded_server(self) -> None:
        """The embedded local server restarted on another port (it picks a free port
        each start): while offline, look where it runs now and switch to it, so
        pending changes go out without a remount. Only a server that proves it holds
        our key (local_server.running_url) is followed."""
        from . import local_server

        while True:
            await trio.sleep(2.0)
            if self.ctx.status.online:
                continue
            url = await trio.to_thread.run_sync(local_server.running_url)
            if url is None or url == self.client.base_url:
                continue
            log.info("the embedded server moved from %s to %s; following it",
                     self.client.base_url, url)
            self.client.base_url = url.rstrip("/")
            self.cfg.base_url = self.client.base_url
            self.state.set_meta("base_url", self.client.base_url)
            self.ctx.kick_reconcile()

    # -- control socket ---------------------------------------------------------------

    async def handle_control(self, req: dict) -> dict:
        cmd = req.get("cmd")
        if cmd == "status":
            return {"ok": True, "status": self.status()}
        if cmd == "flush":
            result = await self.pusher.flush(float(req.get("timeout", 30)))
            return {"ok": True, "pushed": result.pushed, "left": result.left}
        if cmd == "sync":
            try:
                await self.reconciler.reconcile_pass(full=bool(req.get("full")))
            except (*api_errors.TRANSIENT, api_errors.AuthenticationError) as exc:
                self.ctx.went_offline(exc)
                return {"ok": False, "offline": True, "error": self.ctx.status.offline_reason}
            return {"ok": True}
        if cmd in ("conflicts", "conflict_restore", "conflict_discard"):
            return self._conflict_command(cmd, req)
        if cmd == "unmount":
            self.cfg.flush_timeout = float(req.get("timeout", self.cfg.flush_timeout))
            self.shutdown_requested.set()
            await self.flush_done.wait()
            return {"ok": True, **(self.flush_result or {})}
        return {"ok": False, "error": f"unknown command {cmd!r}"}

    def _conflict_command(self, cmd: str, req: dict) -> dict:
        from . import conflicts

        try:
            if cmd == "conflicts":
                return {"ok": True, "conflicts": conflicts.describe(self.state, self.cache)}
            cid = int(req["id"])
            if cmd == "conflict_discard":
                return {"ok": True, **conflicts.discard(self.state, cid)}
            done = conflicts.restore(self.state, self.cache, cid,
                                     invalidate=self.ctx.invalidate)
            self.ctx.kick()
            return {"ok": True, **done}
        except conflicts.ConflictError as exc:
            return {"ok": False, "error": str(exc)}

    def status(self) -> dict:
        from .status import daemon_status  # local import: status is CLI-side too

        return daemon_status(self)


def setup_logging(state_dir: Path, foreground: bool) -> None:
    """stderr in the foreground; else ``daemon.log`` (0600) rotated by size, so a
    long-lived mount cannot fill the disk. ``MEMFS_LOG_FORMAT=json``: one JSON
    object per line."""
    from memfs import logs

    handler: logging.Handler
    if foreground:
        handler = logging.StreamHandler(sys.stderr)
    else:
        handler = logs.rotating_file_handler(state_dir / "daemon.log")
    handler.setFormatter(logs.formatter(os.environ.get("MEMFS_LOG_FORMAT", "text")))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    level = os.environ.get("MEMFS_LOG_LEVEL", "INFO").upper()
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


def run(cfg: MountConfig, *, foreground: bool, api_key: str | None,
        ready_fd: int | None = None) -> int:
    """Mount and serve until unmounted; returns the exit status."""
    state_dir = Path(cfg.state_dir)
    os.umask(0o077)  # state.db-wal, blobs, logs: private (FUSE creates use the caller's umask)
    setup_logging(state_dir, foreground)

    def report(line: str) -> None:
        if ready_fd is not None:
            os.write(ready_fd, (line + "\n").encode())
            os.close(ready_fd)

    lock = open(state_dir / "lock", "a")  # noqa: SIM115 - held for the daemon's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        report("ERROR this store is already mounted by another memfs daemon "
               f"(state {state_dir})")
        return 1
    daemon = Daemon(cfg, api_key)
    reg = registry_file(cfg.mountpoint)  # before mounting: it resolves paths
    try:
        daemon.mount()
    except Exception as exc:
        report(f"ERROR cannot mount {cfg.mountpoint}: {exc}")
        return 1
    reg.write_text(json.dumps({"mountpoint": canonical_mountpoint(cfg.mountpoint),
                               "pid": os.getpid(), "state_dir": str(state_dir),
                               "store_id": cfg.store_id, "base_url": cfg.base_url}))
    os.chmod(reg, 0o600)
    log.info("mounted store %s at %s (%s)", cfg.store_id, cfg.mountpoint,
             "read-only" if cfg.options.read_only else "read-write")
    ok = False
    try:
        trio.run(daemon.run, lambda: report("READY"))
        ok = True
    except BaseException:
        log.exception("the daemon failed")
        raise
    finally:
        unmount = not getattr(daemon, "unmounted_outside", False)
        try:
            pyfuse3.close(unmount=unmount)
        except Exception as exc:
            log.warning("close: %s", exc)
        reg.unlink(missing_ok=True)
        daemon.state.close()
        log.info("daemon exit")
    return 0 if ok else 1


def main() -> None:
    cfg = MountConfig.from_json(os.environ.pop("MEMFS_DAEMON_CONFIG"))
    api_key = os.environ.get("ANTHROPIC_API_KEY") or None
    ready_fd = int(os.environ.pop("MEMFS_READY_FD"))
    os.set_inheritable(ready_fd, False)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.chdir("/")
    sys.exit(run(cfg, foreground=False, api_key=api_key, ready_fd=ready_fd))


if __name__ == "__main__":
    main()
