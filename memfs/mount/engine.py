"""One store's sync machinery: state, cache, handlers, pusher, reconciler.

A daemon runs one engine (`memfs mount STORE DIR`) or several under one FUSE
mount (`memfs mount --session|--all ROOT`, memfs/mount/router.py). Each engine keeps
its own journal (state.db), cache, pusher and reconciler, and its background
tasks run supervised: an engine that fails is logged, reported in its status and
restarted, and never ends the daemon or blocks another store.

`StoreEngine` is the one place these parts are wired. It needs no FUSE mount: the
tests (tests/test_sync_engine.py) and the interleaving harness (tests/interleave.py)
build theirs with it too and drive the handlers (`ops`) and passes themselves; the
harness also runs `start_content` (the fetcher and the blob writer) under an idle clock
it controls.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import trio

from memfs.api import errors as api_errors
from memfs.api.client import MemoryStoresClient
from memfs.core.metrics import PURPOSE, purpose
from memfs.core.mountconfig import MountConfig
from memfs.core.signals import IdleClock, Wakeup
from memfs.mount.store_fs import StoreFS
from memfs.mount.versions import VersionsTree
from memfs.state.blobs import BlobCache
from memfs.state.report import LOCAL_BY_NAME, pending, tree_summary
from memfs.state.state import State
from memfs.state.view import GONE_KEY
from memfs.sync.common import SyncContext
from memfs.sync.pusher import Pusher
from memfs.sync.reconciler import Reconciler

log = logging.getLogger("memfs.mount.engine")


#: What each background task's requests are for (memfs/core/metrics.py).
_PURPOSES = {"pusher": "push", "reconciler": "sync"}


class StoreLocked(Exception):
    """Another memfs daemon holds this store's state directory."""


def locked_message(cfg: MountConfig, state_dir: Path) -> str:
    """Who holds the store: the mountpoint its daemon recorded (state.db), else the state
    directory (a daemon of an older memfs, or one that has not recorded it yet)."""
    from memfs.state.schema import STATE_DB
    from memfs.state.view import read_meta

    store = f"{cfg.store_name} ({cfg.store_id})" if cfg.store_name else cfg.store_id
    where = read_meta(state_dir / STATE_DB, "mountpoint").get("mountpoint")
    return (f"store {store} is already mounted at {where} by another memfs daemon" if where
            else f"store {store} is already mounted by another memfs daemon (state {state_dir})")


class StoreEngine:
    """`clock`: when the mount last brought a request (the router's `IdleClock`);
    background disk work and pushes wait for a quiet mount
    (memfs/sync/fetcher.py, memfs/sync/pusher.py). A test that drives the handlers itself
    passes its own clock; without one the mount always looks quiet."""

    def __init__(self, cfg: MountConfig, client: MemoryStoresClient, *,
                 marker: bytes | None = None, name: str | None = None,
                 clock: IdleClock | None = None) -> None:
        self.cfg = cfg
        self.name = name  # the directory under a session root; None for a plain mount
        self.state_dir = Path(cfg.state_dir)
        # A store that cannot open stays mountable elsewhere: whatever fails below
        # releases what was opened before it (lock, state.db, staged.db).
        with contextlib.ExitStack() as opening:
            self._lock = opening.enter_context(open(self.state_dir / "lock", "a"))
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreLocked(locked_message(cfg, self.state_dir)) from None
            self.state = State(self.state_dir / "state.db",
                               local_only_patterns=cfg.local_only_patterns)
            opening.callback(self.state.close)
            self.cache = BlobCache(self.state_dir / "objects")
            opening.callback(self.cache.close)
            self.client = client
            self.ctx = SyncContext(self.state, self.cache, client, cfg.store_id, cfg.options)
            self.ctx.events.store = name or cfg.store_id  # what `memfs watch` calls it
            # The mount's idle clock (its router's): background work waits for a quiet mount.
            self.ctx.clock = clock or IdleClock()
            owner = tuple(cfg.owner) if cfg.owner else None
            self.fs = StoreFS(self.state, self.cache, read_only=cfg.options.read_only,
                              fetch=self.ctx.fetch, marker=marker,
                              owner=owner, metrics=self.ctx.metrics,
                              versions=VersionsTree(client, cfg.store_id, self.cache,
                                                    show_meta=cfg.options.show_meta,
                                                    uid=owner[0] if owner else None,
                                                    gid=owner[1] if owner else None,
                                                    lookback=cfg.options.lookback,
                                                    live=self.state))
            if cfg.metrics_addr:  # time every request only while someone can see it
                self.fs.timing = self.ctx.metrics.fuse
            removed = self.cache.gc(self.state.referenced_shas())
            if removed:
                log.info("cache: removed %d unreferenced blobs (store %s)", removed, cfg.store_id)
            self.reconciler = Reconciler(self.ctx)
            self.pusher = Pusher(self.ctx, self.reconciler.feed if cfg.options.feed else None)
            self.background = trio.CancelScope()
            self.started_at = time.time()
            self.failure: str | None = None  # the last unexpected error of a background task
            #: "archived" or "deleted": the store went so on the server (while mounted,
            #: or before, for a read-only mount): what this mount journaled no mount sends.
            self.gone: str | None = None
            #: Set when the server refused a request on this store (a 400, 403 or 404:
            #: what an archived or deleted store answers): `_watch_store` reads the store.
            self.store_doubt = Wakeup()
            self.state.set_meta("store_id", cfg.store_id)
            self.state.set_meta("base_url", cfg.base_url)
            self.state.set_meta("mountpoint", cfg.mountpoint)
            if cfg.store_name:  # offline, `memfs mount NAME` finds the store by it
                self.state.set_meta("store_name", cfg.store_name)
            self.state.set_meta("options", json.dumps(asdict(cfg.options)))  # offline status
            self.state.set_meta(GONE_KEY, None)  # this mount finds out anew (`store_gone`)
            #: What `memfs mount` says once the mount is live (and `memfs status` keeps).
            self.notes = [self._kept_note(pattern, paths)
                          for pattern, paths in self.state.kept_patterns]
            for note in self.notes:
                self.ctx.status.note(note)
            opening.pop_all()  # opened for the engine's life: close() releases them

    def _kept_note(self, pattern: str, paths: tuple[str, ...]) -> str:
        shown_paths = ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")
        return (f"kept --local-only {pattern!r} of the last mount: without it {len(paths)} "
                f"file(s) it keeps here would go to the server ({shown_paths}); give it "
                "again, or remove or rename them")

    # -- lifecycle -------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Start the fetcher, pusher, listing and prefetch in `nursery`. Listing and
        prefetch run in `self.background`, which the final flush cancels first, so
        nothing but the flush talks to the server once shutdown begins."""
        await self.start_content(nursery)
        if not self.cfg.options.read_only:
            nursery.start_soon(self._supervised, "pusher", self.pusher.run)

        async def run_background() -> None:
            with self.background:
                async with trio.open_nursery() as tasks:
                    tasks.start_soon(self._supervised, "reconciler", self.reconciler.run)
                    tasks.start_soon(self._supervised, "store watch", self._watch_store)
                    if self.cfg.options.prefetch:
                        tasks.start_soon(self._supervised, "prefetch", self._prefetch)

        nursery.start_soon(run_background)

    async def start_content(self, nursery: trio.Nursery) -> None:
        """Start what serves the handlers' content in `nursery`: the fetcher (the batches
        a read's miss starts) and the blob writer (held and staged blobs to disk once the
        mount is quiet). The interleaving harness runs these and no sync loop: it runs
        the passes itself."""
        await nursery.start(self.ctx.fetcher.serve)
        nursery.start_soon(self._supervised, "blob writer", self.ctx.fetcher.write_when_quiet)

    async def _supervised(self, what: str, fn) -> None:
        """Run a background loop; an unexpected error is logged, shown in status and
        the loop restarted after a pause, so one store's bug never ends the mount."""
        PURPOSE.set(_PURPOSES.get(what, what))  # this task's requests, for the metrics
        while True:
            try:
                await fn()
                return
            except Exception as exc:
                self.failure = f"{what}: {type(exc).__name__}: {exc}"
                log.exception("store %s: %s failed; restarting it in 5 s",
                              self.cfg.store_id, what)
                await trio.sleep(5.0)

    async def first_listing(self, timeout: float = 20.0) -> str | None:
        """A store never listed in this state dir: have its tree in place before
        `memfs mount` returns, so `mount && cat` works (bounded; on failure the
        reconciler's loop keeps trying and the store starts empty). Why it is not in
        place, when it is not: `memfs mount` says so, not an empty tree in silence."""
        if self.state.get_meta("last_sync_at") is not None:
            return None
        with trio.move_on_after(timeout), purpose("sync"):
            try:
                await self.reconciler.reconcile_pass(coalesce=True)
                return None
            except Exception as exc:
                log.info("first listing failed: %s (store %s)", exc, self.cfg.store_id)
                return f"its first listing failed ({exc})"
        return f"its first listing took more than {timeout:.0f} s"

    async def final_flush(self, timeout: float) -> dict:
        """Stop the background pusher (a pass under way finishes and is applied, or is
        cancelled at `timeout`), end listing and prefetch, then push until nothing is
        left or `timeout` (one bound for all of it) passes. What it reports is exactly
        what state.db still holds pending."""
        deadline = trio.current_time() + timeout
        # What open files hold unsaved is saved now, so the flush pushes it, and again
        # after the flush (writes go on while it runs: an editor's save is pushed by
        # its next round), then journaled for the next mount and counted as left.
        saved, _unsaved = self.fs.files.save_open()  # (tried again below: its word last)
        await self.pusher.stop(timeout)
        self.background.cancel()
        with purpose("push"):
            result = await self.pusher.flush(max(0.0, deadline - trio.current_time()))
        late, unsaved = self.fs.files.save_open()
        async with self.ctx.sync_lock:  # a change closed after the flush's last round too
            result.left = self.pusher.pending_total()
        await self.ctx.fetcher.write_at_exit()  # the next mount starts warm
        kept = self.kept_local()
        kept["not_pushed"] += unsaved  # lost with the daemon: said so
        return {"pushed": result.pushed, "left": result.left,
                "offline": str(result.offline) if result.left and result.offline else None,
                "gone": self.gone, "state_dir": str(self.state_dir),
                "saved_open": saved + late, **kept}

    def kept_local(self) -> dict:
        """What a flush cannot push, by path and why: files the server refused (not
        UTF-8, too large, ...) and edits a read-only mount keeps (`not_pushed`),
        changes the server turned down last time for another reason (a path another
        memory holds, a 403), journaled and tried again (`waiting`), editor/tool
        temp files, local by design (`local_only`), and the conflicts that keep what
        was written here aside (`conflicts`: a concurrent change won the path, or a
        lost answer left the server unable to tell whose bytes it holds). All but the
        temp files are what an unmount names: a count of changes left alone does not
        say which, nor that the next mount will not send them through on its own."""

        p = pending(self.state, read_only=self.cfg.options.read_only, gone=self.gone)
        temp = [i for i in p["local_only"] if i["reason"] == LOCAL_BY_NAME]
        waiting: dict[str, str] = {}
        for kind in ("creates", "updates", "renames", "deletes"):
            for item in p[kind]:
                if item.get("error"):
                    waiting.setdefault(item.get("to", item.get("path")), item["error"])
        for ino in self.pusher.no_room:
            node = self.state.nodes.get(ino)
            if node is not None and node.memory_id is None and self.state.is_dirty(node):
                waiting.setdefault(self.state.path_of(node), "the store holds its 2,000-memory "
                                   "maximum: it goes out once a memory is deleted")
        return {"not_pushed": p["refused"] + [i for i in p["local_only"] if i not in temp],
                "waiting": [{"path": path, "reason": why} for path, why in waiting.items()],
                "local_only": temp,
                "conflicts": [{"id": c["id"], "path": c["path"], "reason": c["reason"]}
                              for c in self.state.conflicts()],
                # counted as left, unnamed (a helper, 6 December)
                "in_doubt": [{"path": u["path"], "reason": f"its {u['request']} was sent, "
                              "its answer lost"} for u in p["unconfirmed"]]}

    def store_gone(self, why: str) -> None:
        """The store was archived or deleted on the server ("archived", "deleted"): its
        directory turns read-only, and what it journaled stays, named at unmount."""
        if self.gone is None:
            log.info("store %s was %s on the server: %s is read-only now", self.cfg.store_id,
                     why, self.cfg.mountpoint if self.name is None else self.name)
            self.ctx.status.note(f"the store was {why} on the server: read-only now; "
                                 "what is not on the server stays here (memfs unmount "
                                 "names it)")
        self.cfg.options.read_only = True
        self.fs.read_only = True
        self.gone = why
        self.state.set_meta(GONE_KEY, why)  # said by status and unmount once the daemon is gone

    async def _watch_store(self) -> None:
        """Whether the store is still there and writable, read when the server refused
        a request on it (`store_doubt`), at most once a poll interval: a write to a
        store archived or deleted on the server is refused, and then the mount stops
        taking writes no server will take (EROFS, as `--all` does from its store
        listing). The read's own refusal (a 403: this key may not read the store)
        raises no new doubt. The daemon sets the doubt at start where no refusal would
        come (`MountDaemon._start_engine`)."""
        while self.gone is None:
            await self.store_doubt.wait()
            try:
                store = await self.client.get_store(self.cfg.store_id)
            except api_errors.NotFoundError:
                self.store_gone("deleted")
            except api_errors.APIError as exc:
                log.info("store %s: cannot read it (%s)", self.cfg.store_id, exc)
            else:
                if store.archived_at:
                    self.store_gone("archived")
            self.store_doubt.clear()
            await trio.sleep(self.cfg.options.poll_interval)

    def close(self) -> None:
        self.state.close()
        self.cache.close()
        self._lock.close()

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
                log.info("prefetch: %d blobs in %.2fs%s (store %s)", filled,
                         time.monotonic() - started,
                         f", {failed} batch(es) to retry" if failed else "", self.cfg.store_id)
            if failed:
                with trio.move_on_after(30):
                    await self.ctx.online_wakeup.wait()
                self.ctx.listed.set()  # try again without waiting for the next listing

    # -- control requests ----------------------------------------------------------------

    @property
    def ino_base(self) -> int:
        """Added to its inode numbers under a session root (memfs/mount/router.py)."""
        return self.fs.ino_base

    async def flush(self, timeout: float) -> dict:
        with purpose("push"):
            result = await self.pusher.flush(timeout)
        return {"pushed": result.pushed, "left": result.left, **self.kept_local()}

    async def sync(self, full: bool) -> dict:
        try:
            with purpose("sync"):
                await self.reconciler.reconcile_pass(full=full)
        except (*api_errors.TRANSIENT, api_errors.AuthenticationError) as exc:
            self.ctx.went_offline(exc)
            return {"ok": False, "offline": True, "error": self.ctx.status.offline_reason}
        return {"ok": True}

    def conflict_command(self, cmd: str, req: dict) -> dict:
        from memfs.state import conflicts

        try:
            if cmd == "conflicts":
                return {"ok": True, "conflicts": conflicts.describe(self.state, self.cache)}
            cid = int(req["id"])
            if cmd == "conflict_discard":
                return {"ok": True, **conflicts.discard(self.state, cid)}
            done = conflicts.restore(self.state, self.cache, cid,
                                     invalidate=self.ctx.invalidate)
            return {"ok": True, **done}
        except conflicts.ConflictError as exc:
            return {"ok": False, "error": str(exc)}

    def status(self) -> dict:
        s = store_status(self)
        if self.name is not None:
            s["name"] = self.name
        if self.failure:
            s["failure"] = self.failure
        return s


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def store_status(engine: StoreEngine) -> dict:
    """What `memfs status` shows of one store of a running mount."""
    s, cfg = engine.ctx.status, engine.cfg
    return {
        "running": True,
        "pid": __import__("os").getpid(),
        "mountpoint": cfg.mountpoint,
        "store_id": cfg.store_id,
        # mounted offline by id: the name the cache kept, or learned once online
        "store_name": cfg.store_name or engine.state.get_meta("store_name") or None,
        "server": cfg.base_url,
        "read_only": cfg.options.read_only,
        "gone": engine.gone,  # archived or deleted on the server: read-only since
        "online": s.online,
        "unanswered_seconds": engine.client.unanswered_for(),
        "offline_reason": s.offline_reason,
        "offline_since": s.offline_since,
        "last_sync_at": s.last_sync_at,
        "last_sync_seconds": s.last_sync_seconds,
        # none yet by this daemon (offline since its start): the one before it
        "synced_before": None if s.last_sync_at else _float(
            engine.state.get_meta("last_sync_at")),
        "last_push_at": s.last_push_at,
        "pushed_total": s.pushed,
        "feed": {"mode": "feed" if s.feed_position else "full",
                 "position": s.feed_position,
                 "last_full_listing_at": s.last_full_listing_at,
                 "missed": s.feed_missed,
                 "late": s.feed_late,
                 "polls": s.feed_polls},
        "last_error": s.last_error,
        "last_error_at": s.last_error_at,
        "failing_since": s.failing_since,
        "warnings": s.warnings[-10:],
        "pending": pending(engine.state, delete_delay=cfg.options.delete_delay,
                           delete_mode=cfg.options.deletes, read_only=cfg.options.read_only,
                           push_delays=cfg.options, gone=engine.gone),
        "conflicts": engine.state.conflicts(),
        "tree": tree_summary(engine.state, engine.cache),  # files, bytes, cached (progress)
        "uptime_seconds": time.time() - engine.started_at,
    }
