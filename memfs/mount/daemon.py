"""One mount's daemon: FUSE, the stores' engines and the control socket in one trio nursery.

`memfs mount` starts this as ``python -m memfs.mount.daemon`` (or runs it in the
foreground) before it has looked the store up, so that the imports below run
while it does; then it writes the mount's configuration and the API key as JSON
to the pipe ``MEMFS_CONFIG_FD`` (the key never goes into argv nor the
environment). End of file without it: the mount was given up, and the process
exits. The daemon writes ``READY`` (then, when there is something to say, a JSON
object: ``unlisted``, each store whose first listing failed and why, and ``notes``)
or ``ERROR <message>`` to ``MEMFS_READY_FD`` once, so the parent returns only when
the mount is live, and says what it does not show yet.

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
import sqlite3
import sys
import time
from pathlib import Path

from memfs.mount import fastopen  # first: it loads the C shim that pyfuse3 must bind to

# isort: split
import pyfuse3
import trio

from memfs.api import errors as api_errors
from memfs.api.client import MemoryStoresClient
from memfs.core.metrics import classify
from memfs.core.mountconfig import GroupConfig, GroupStore, MountConfig, config_from_json
from memfs.local import control
from memfs.local.registry import canonical_mountpoint, registry_file, write_private_json
from memfs.mount import control_server, titles
from memfs.mount.engine import StoreEngine, StoreLocked
from memfs.mount.marker import marker_content
from memfs.mount.router import Router
from memfs.state.report import KEPT_HERE, kept_here_lines

log = logging.getLogger("memfs.mount.daemon")
#: Retries of the daemon's API client (a write that may have been applied is never
#: retried: docs/CLIENT.md). The interleaving harness runs its engine with the same.
CLIENT_RETRIES = 2


class MountDaemon:
    """The daemon of one mount: a plain store mount (one engine) or a session root
    (several), their filesystems behind one `Router`."""

    def __init__(self, cfg: MountConfig | GroupConfig, api_key: str | None) -> None:
        self.cfg = cfg
        self.group = isinstance(cfg, GroupConfig)
        self.control_dir = Path(cfg.group_dir if self.group else cfg.state_dir)
        self.client = MemoryStoresClient(cfg.base_url, api_key, max_retries=CLIENT_RETRIES,
                                         timeout=30.0)
        self.client.observers.append(self._refused)
        self.engines: list[StoreEngine] = []
        self.skipped: list[dict] = []  # stores of a session root that could not be opened
        self._nursery: trio.Nursery | None = None  # set while run() runs
        if isinstance(cfg, GroupConfig):
            owner = tuple(cfg.owner) if cfg.owner else (os.getuid(), os.getgid())
            self.ops = Router(session_owner=owner)
            for store in cfg.stores:
                self._add_store(store)
        else:
            self.ops = Router()
            # StoreLocked: reported by run()
            engine = StoreEngine(cfg, self.client, clock=self.ops.clock)
            self.ops.add(engine.fs)
            engine.fs.prime_fast_opens()
            self.engines.append(engine)
        self.shutdown_requested = trio.Event()
        self.fuse_done = trio.Event()
        self.flush_result: dict | None = None
        self.flush_done = trio.Event()
        self.started_at = time.time()
        self.trio_token: trio.lowlevel.TrioToken | None = None  # for a metrics scrape
        self.metrics_url: str | None = None  # `--metrics-addr`: where they are served

    def _refused(self, method: str, path: str, status: int, _sent: int, _received: int) -> None:
        """A request on a store refused (400, 403, 404): its engine reads the store,
        which may have been archived or deleted on the server (`_watch_store`)."""
        if status not in (400, 403, 404) or (where := classify(method, path)) is None:
            return
        for engine in self.engines:
            if engine.cfg.store_id == where[0]:
                engine.store_doubt.set()

    def _add_store(self, store: GroupStore) -> StoreEngine | None:
        assert isinstance(self.cfg, GroupConfig)
        try:
            engine = StoreEngine(self.cfg.store_config(store), self.client,
                                 marker=marker_content(store.store_id), name=store.name,
                                 clock=self.ops.clock)
        except (StoreLocked, OSError, sqlite3.Error) as exc:  # one store's trouble only
            log.error("store %s (%s) is not shown: %s", store.store_id, store.name, exc)
            self.skipped.append({"name": store.name, "store_id": store.store_id,
                                 "error": str(exc)})
            return None
        self.ops.add(engine.fs, store.name)
        engine.fs.prime_fast_opens()
        self.engines.append(engine)
        return engine

    # -- lifecycle -------------------------------------------------------------------

    def mount(self) -> None:
        options = set(pyfuse3.default_options)
        options.discard("default_permissions")
        options |= {"fsname=memfs", "subtype=memfs", "default_permissions"}
        if self.cfg.allow_other:
            options.add("allow_other")
        if not self.group and self.cfg.options.read_only:
            options.add("ro")
        pyfuse3.init(self.ops, self.cfg.mountpoint, options)
        log.info("fast opens: %s", fastopen.describe())

    async def run(self, on_ready) -> None:
        unmounted_outside = False
        self.trio_token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._fuse_main)
            nursery.start_soon(titles.follow, self)  # `ps`: store, mountpoint, state
            await nursery.start(control_server.serve, self.control_dir, self.handle_control)
            nursery.start_soon(self._signals)
            for engine in self.engines:
                await self._start_engine(engine)
            watchers = trio.CancelScope()  # end before the final flush, like listing

            async def run_watchers() -> None:
                with watchers:
                    async with trio.open_nursery() as tasks:
                        if self.cfg.embedded:
                            tasks.start_soon(self._follow_embedded_server)
                        if self.group and self.cfg.kind == "all":
                            tasks.start_soon(self._watch_stores)

            nursery.start_soon(run_watchers)
            unlisted: list[str] = []

            async def list_first(engine: StoreEngine) -> None:
                why = await engine.first_listing()
                if why:
                    unlisted.append(f"{engine.name or engine.cfg.store_name or engine.cfg.store_id}"
                                    f": {why}")

            async with trio.open_nursery() as first:  # every store's tree, at once
                for engine in self.engines:
                    first.start_soon(list_first, engine)
            self._save_group()
            on_ready({"unlisted": unlisted, "notes": [
                (f"{engine.name}: " if engine.name else "") + note
                for engine in self.engines for note in engine.notes]})
            async with trio.open_nursery() as waiter:
                async def wait_for(event: trio.Event) -> None:
                    await event.wait()
                    waiter.cancel_scope.cancel()
                waiter.start_soon(wait_for, self.shutdown_requested)
                waiter.start_soon(wait_for, self.fuse_done)
            unmounted_outside = self.fuse_done.is_set()
            log.info("shutting down (%s)", "unmounted" if unmounted_outside else "requested")
            watchers.cancel()
            self.flush_result = await self._final_flush()
            log.info("flush: pushed %d, left %d", self.flush_result["pushed"],
                     self.flush_result["left"])
            for line in kept_here_lines(self.flush_result):  # a SIGTERM (systemctl
                log.warning("%s", line)  # stop) has no `memfs unmount` to tell it
            for engine in self.engines:  # `memfs watch` hears the end, not a silence
                engine.ctx.events.end()
            self.flush_done.set()
            # The control reply and each watch's last lines go out (a reader that does
            # not read is waited for a second, no more): also after `fusermount3 -u`.
            with trio.move_on_after(1.0):
                while any(e.ctx.events.subscribers for e in self.engines):
                    await trio.sleep(0.01)
            await trio.sleep(0.05)
            if not unmounted_outside:
                pyfuse3.terminate()
                await self.fuse_done.wait()
            nursery.cancel_scope.cancel()
        self.unmounted_outside = unmounted_outside

    async def _start_engine(self, engine: StoreEngine) -> None:
        assert self._nursery is not None
        session = isinstance(self.cfg, GroupConfig) and self.cfg.kind == "session"
        if engine.cfg.options.read_only or session:
            # No refusal would tell these the store is archived: a read-only mount
            # (`memfs mount` mounts one archived already so), and a session, which keeps
            # an archived store attached. Each reads it once at start.
            engine.store_doubt.set()
        await engine.start(self._nursery)
        self._nursery.start_soon(self._invalidator, engine)

    async def _final_flush(self) -> dict:
        """Every store's final flush at once, within the one flush timeout."""
        stores = await self._each(lambda e: e.final_flush(self.cfg.flush_timeout))
        total = {"pushed": sum(s["pushed"] for s in stores),
                 "left": sum(s["left"] for s in stores),
                 "offline": next((s["offline"] for s in stores if s["offline"]), None),
                 **_kept(stores)}
        if self.group:
            total["stores"] = stores
        else:
            total.update(gone=stores[0]["gone"], state_dir=stores[0]["state_dir"])
        return total

    async def _fuse_main(self) -> None:
        try:
            await pyfuse3.main()
        finally:
            self.fuse_done.set()

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
            async for sig in sigs:
                if sig == signal.SIGHUP:
                    for engine in self.engines:
                        engine.ctx.kick_reconcile()
                    continue
                log.info("signal %d: flushing and unmounting", sig)
                self.shutdown_requested.set()

    async def _synced(self, engine: StoreEngine, full: bool) -> dict:
        """A pass now (`memfs sync`, `memfs mcp --mount` after a change), answered once
        the kernel has been told what it changed (2 s at most): a `cat` right after
        must not meet a name the kernel still caches as missing (`memfs mcp --mount`
        created a file, then `cat` failed: CI, 6 December)."""
        reply = await engine.sync(full)
        await engine.ctx.kernel_told()
        return reply

    async def _invalidator(self, engine: StoreEngine) -> None:
        """Kernel cache invalidation, outside every request handler (docs/ARCHITECTURE.md);
        a store's inode numbers are re-based to the mount's (memfs/mount/router.py). What
        is queued goes out in one worker-thread call, not one thread round trip per
        item: a first listing queues one per file, and 1,500 round trips took the
        trio thread away from FUSE requests for a good part of a second."""
        base = engine.ino_base
        while True:
            await engine.ctx.invalidation_ready.wait()
            items = engine.ctx.take_invalidations()
            if items:
                await trio.to_thread.run_sync(_invalidate, base, items)
            engine.ctx.invalidations_sent += len(items)

    async def _follow_embedded_server(self) -> None:
        """The embedded local server restarted on another port (it picks a free port
        each start): while offline, look where it runs now and switch to it, so
        pending changes go out without a remount. Only a server that proves it holds
        our key (local_server.running_url) is followed."""
        from memfs.local import server as local_server

        while True:  # at every poll (at least every 2 s): found within one poll
            await trio.sleep(min(self.cfg.options.poll_interval, 2.0))
            if all(e.ctx.status.online for e in self.engines):
                continue
            if local_server.recorded_url() in (None, self.client.base_url):
                continue  # nothing new recorded: no health check to make
            url = await trio.to_thread.run_sync(local_server.running_url)
            if url is None or url == self.client.base_url:
                continue
            log.info("the embedded server moved from %s to %s; following it",
                     self.client.base_url, url)
            self.client.base_url = url.rstrip("/")
            self.cfg.base_url = self.client.base_url
            for engine in self.engines:
                engine.cfg.base_url = self.client.base_url
                engine.state.set_meta("base_url", self.client.base_url)
                engine.ctx.kick_reconcile()

    # -- `--all`: stores that appear or are archived -------------------------------------------

    async def _watch_stores(self) -> None:
        """Every poll interval, list the account's stores: a new one appears under the
        root (its tree listed in the background), an archived one turns read-only."""
        assert isinstance(self.cfg, GroupConfig)
        while True:
            await trio.sleep(self.cfg.options.poll_interval)
            try:
                stores = [s async for s in self.client.list_stores(include_archived=True)]
            except (*api_errors.TRANSIENT, api_errors.AuthenticationError) as exc:
                log.info("listing stores failed: %s", exc)
                continue
            await self._apply_store_list(stores)

    async def _apply_store_list(self, stores) -> None:
        from memfs.core.slug import mount_slug
        from memfs.state.statedir import open_state_dir

        assert isinstance(self.cfg, GroupConfig)
        known = {e.cfg.store_id: e for e in self.engines}
        skipped = {s["store_id"] for s in self.skipped}
        listed = {s.id for s in stores}
        for store in stores:
            engine = known.get(store.id)
            if engine is not None:
                if store.archived_at and engine.gone is None:
                    engine.store_gone("archived")
                continue
            if store.archived_at or store.id in skipped:
                continue
            taken = {e.name for e in self.engines} | {s["name"] for s in self.skipped}
            name = mount_slug(store.name, store.id, taken)
            try:
                state_dir = await trio.to_thread.run_sync(  # adopts as every mount does
                    lambda sid=store.id: open_state_dir(self.cfg.base_url, sid,
                                                        self.cfg.cache_dir, log.warning,
                                                        key=self.cfg.state_key))
            except OSError as exc:  # a full disk, a file in the way: the next poll retries
                log.warning("new store %s: cannot make its state directory (%s); "
                            "trying again at the next poll", store.id, exc)
                continue
            entry = GroupStore(store_id=store.id, name=name, state_dir=str(state_dir),
                               display_name=store.name)
            engine = self._add_store(entry)
            if engine is None:
                continue
            self.cfg.stores.append(entry)
            log.info("new store %s appears at %s", store.id, name)
            await self._start_engine(engine)
            assert self._nursery is not None
            self._nursery.start_soon(engine.first_listing)
            self._save_group()
            self.write_registry()
        for engine in self.engines:  # deleted stores: keep what is here, read-only
            if engine.cfg.store_id not in listed and engine.gone is None:
                engine.store_gone("deleted")

    def write_registry(self) -> None:
        """The mount registry entry (0600, replaced atomically): how `memfs unmount`,
        `status` and `history` find this daemon, and under a session root which store
        sits in which directory (rewritten when `--all` adds one)."""
        entry: dict = {"mountpoint": canonical_mountpoint(self.cfg.mountpoint),
                       "pid": os.getpid(), "state_dir": str(self.control_dir),
                       "base_url": self.cfg.base_url,
                       "embedded": self.cfg.embedded}  # `memfs serve stop` asks
        if isinstance(self.cfg, GroupConfig):
            entry.update(kind=self.cfg.kind, session_id=self.cfg.session_id,
                         stores=[{"name": e.name, "store_id": e.cfg.store_id,
                                  "state_dir": str(e.state_dir)} for e in self.engines])
        else:
            entry["store_id"] = self.cfg.store_id
        write_private_json(registry_file(self.cfg.mountpoint), entry)

    def _save_group(self) -> None:
        """group.json: the stores of a session root, for `memfs status` without a daemon."""
        if not isinstance(self.cfg, GroupConfig):
            return
        write_private_json(self.control_dir / "group.json", {
            "kind": self.cfg.kind, "root": self.cfg.root, "session_id": self.cfg.session_id,
            "state_key": self.cfg.state_key,  # for an offline start (cli/group.py cached_plan)
            "stores": [{"name": e.name, "store_id": e.cfg.store_id,
                        "state_dir": str(e.state_dir),
                        "read_only": e.cfg.options.read_only} for e in self.engines]})

    # -- control socket ---------------------------------------------------------------

    def _engine_for(self, req: dict) -> StoreEngine | None:
        if not self.group:
            return self.engines[0]
        return next((e for e in self.engines if e.name == req.get("store")), None)

    async def _each(self, fn) -> list[dict]:
        """fn(engine) for every store at once; the replies in store order."""
        replies: dict[int, dict] = {}

        async def one(i: int, engine: StoreEngine) -> None:
            replies[i] = await fn(engine)

        async with trio.open_nursery() as nursery:
            for i, engine in enumerate(self.engines):
                nursery.start_soon(one, i, engine)
        return [{"name": e.name, "store_id": e.cfg.store_id, **replies[i]}
                for i, e in enumerate(self.engines)]

    async def handle_control(self, req: dict) -> dict:
        cmd = req.get("cmd")
        if cmd == "status":
            return {"ok": True, "status": self.status()}
        if cmd == "flush":
            timeout = float(req.get("timeout", 30))
            if not self.group:
                return {"ok": True, **await self.engines[0].flush(timeout)}
            stores = await self._each(lambda e: e.flush(timeout))
            return {"ok": True, "pushed": sum(s["pushed"] for s in stores),
                    "left": sum(s["left"] for s in stores), "stores": stores,
                    **_kept(stores)}
        if cmd == "sync":
            full = bool(req.get("full"))
            stores = await self._each(lambda e: self._synced(e, full))
            if not self.group:
                return stores[0]
            return {"ok": all(s["ok"] for s in stores), "stores": stores}
        if cmd in ("conflicts", "conflict_restore", "conflict_discard"):
            engine = self._engine_for(req)
            if engine is None:
                return {"ok": False, "error": "name the store: a directory under "
                        f"{self.cfg.mountpoint} ({', '.join(e.name for e in self.engines)})"}
            return engine.conflict_command(cmd, req)
        if cmd == "events":
            engines = self.engines if not req.get("store") else \
                [e for e in self.engines if e.name == req.get("store")]
            if not engines:
                return {"ok": False, "error": f"no store {req.get('store')!r} under "
                        f"{self.cfg.mountpoint} ({', '.join(e.name or '' for e in self.engines)})"}
            from memfs.sync.watch import QUEUE_LIMIT, follow_buses
            return control.Stream(follow_buses(engines, req.get("since"),
                                               int(req.get("queue") or QUEUE_LIMIT)))
        if cmd == "unmount":
            self.cfg.flush_timeout = float(req.get("timeout", self.cfg.flush_timeout))
            self.shutdown_requested.set()
            await self.flush_done.wait()
            return {"ok": True, **(self.flush_result or {})}
        return {"ok": False, "error": f"unknown command {cmd!r}"}

    def status(self) -> dict:
        metrics = {"metrics_url": self.metrics_url} if self.metrics_url else {}
        if not isinstance(self.cfg, GroupConfig):
            return {**self.engines[0].status(), "fast_opens": fastopen.stats(), **metrics}
        return {"running": True, "group": True, "kind": self.cfg.kind, "pid": os.getpid(),
                "mountpoint": self.cfg.root, "session_id": self.cfg.session_id,
                "server": self.cfg.base_url,
                "stores": [e.status() for e in self.engines], "skipped": self.skipped,
                "fast_opens": fastopen.stats(),
                "uptime_seconds": time.time() - self.started_at, **metrics}

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


def setup_logging(state_dir: Path, foreground: bool) -> None:
    """stderr in the foreground; else ``daemon.log`` (0600) rotated by size, so a
    long-lived mount cannot fill the disk. ``MEMFS_LOG_FORMAT=json``: one JSON
    object per line."""
    from memfs.local import logs

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


def _kept(stores: list[dict]) -> dict:
    """Every store's kept-local files, their paths prefixed with the store's directory
    under a session root (a plain mount has one store and no name)."""
    def under(s: dict, item: dict) -> dict:
        return {**item, "path": f"/{s['name']}{item['path']}"} if s.get("name") else item

    return {kind: [under(s, i) for s in stores for i in s.get(kind, [])]
            for kind in (*(kind for kind, _sentence in KEPT_HERE), "local_only")}


def left_out(cfg: GroupConfig, skipped: list[dict], *, mounted: int) -> str:
    """Why a root is not mounted: each store that cannot open, and why (one line)."""
    why = "; ".join(f"{s['name']}: {s['error']}" for s in skipped)
    hint = "; --allow-partial mounts the others" if mounted else ""
    return (f"{len(skipped)} of {len(skipped) + mounted} store(s) of {cfg.root} cannot be "
            f"mounted ({why}): nothing mounted{hint}")


def run(cfg: MountConfig | GroupConfig, *, foreground: bool, api_key: str | None,
        ready_fd: int | None = None) -> int:
    """Mount and serve until unmounted; returns the exit status."""
    control_dir = Path(cfg.group_dir if isinstance(cfg, GroupConfig) else cfg.state_dir)
    os.umask(0o077)  # state.db-wal, blobs, logs: private (FUSE creates use the caller's umask)
    setup_logging(control_dir, foreground)

    def report(line: str) -> None:
        if ready_fd is not None:
            os.write(ready_fd, (line + "\n").encode())
            os.close(ready_fd)

    group_lock = None
    if isinstance(cfg, GroupConfig):
        group_lock = open(control_dir / "lock", "a")  # noqa: SIM115 - held for life
        try:
            fcntl.flock(group_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report(f"ERROR {cfg.root} is already served by another memfs daemon")
            return 1
    try:
        daemon = MountDaemon(cfg, api_key)
    except StoreLocked as exc:
        report(f"ERROR {exc}")
        return 1
    except Exception as exc:  # a bug or a damaged state: say so, in the log and to the CLI
        log.exception("the daemon could not start")
        report(f"ERROR the daemon could not start: {type(exc).__name__}: {exc} "
               f"(see {control_dir / 'daemon.log'})")
        return 1
    if isinstance(cfg, GroupConfig) and daemon.skipped and (
            not cfg.allow_partial or not daemon.engines):
        daemon.close()
        message = left_out(cfg, daemon.skipped, mounted=len(daemon.engines))
        log.error("%s", message)
        report(f"ERROR {message}")
        return 1
    metrics = None
    if cfg.metrics_addr:
        from memfs.mount.metrics_export import MetricsServer

        try:
            metrics = MetricsServer(daemon, cfg.metrics_addr)
        except OSError as exc:
            daemon.close()
            report(f"ERROR cannot serve metrics on {cfg.metrics_addr}: {exc.strerror or exc}")
            return 1
        daemon.metrics_url = metrics.url
    reg = registry_file(cfg.mountpoint)  # before mounting: it resolves paths
    try:
        daemon.mount()
    except Exception as exc:
        if metrics is not None:
            metrics.close()
        daemon.close()
        report(f"ERROR cannot mount {cfg.mountpoint}: {exc}")
        return 1
    daemon.write_registry()
    if isinstance(cfg, GroupConfig):
        log.info("mounted %s root at %s: %s", cfg.kind, cfg.root,
                 ", ".join(f"{e.name}={e.cfg.store_id}" for e in daemon.engines) or "no stores")
    else:
        log.info("mounted store %s at %s (%s)", cfg.store_id, cfg.mountpoint,
                 "read-only" if cfg.options.read_only else "read-write")
    ok = False
    try:
        trio.run(daemon.run, lambda said: report(" ".join(["READY", *(
            [json.dumps(said)] if any(said.values()) else [])])))
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
        if metrics is not None:
            metrics.close()
        daemon.close()
        log.info("daemon exit")
    return 0 if ok else 1


def _invalidate(base: int, items: list[tuple]) -> None:
    """Send the kernel's invalidations, in order (a worker thread: the kernel may
    wait on a request the trio thread must answer)."""
    for item in items:
        try:
            if item[0] == "inode":
                pyfuse3.invalidate_inode(base | item[1], False)
            else:
                pyfuse3.invalidate_entry(base | item[1], item[2].encode("utf-8"))
        except OSError:
            pass  # the kernel did not know it: nothing cached to drop


def _prepare() -> None:
    """What the daemon needs only once configured, made while it waits for that: the
    API client's TLS context (in a thread), the modules its first client and its log
    load."""
    from memfs.api import tls

    tls.prepare()
    import logging.handlers  # noqa: F401 - the log file's handler

    try:
        import httpcore  # noqa: F401 - loaded by httpx with the first client
    except ImportError:
        pass


def main() -> None:
    ready_fd = int(os.environ.pop("MEMFS_READY_FD"))
    config_fd = int(os.environ.pop("MEMFS_CONFIG_FD"))
    os.set_inheritable(ready_fd, False)
    _prepare()
    with open(config_fd, "rb") as f:  # once `memfs mount` has looked the store up
        handoff = f.read()
    if not handoff:  # it gave up (an unknown store, a dead server...): nothing to do
        os._exit(0)
    data = json.loads(handoff)
    cfg = config_from_json(data["config"])
    api_key = data.get("api_key") or None
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.chdir("/")
    sys.exit(run(cfg, foreground=False, api_key=api_key, ready_fd=ready_fd))


if __name__ == "__main__":
    main()
