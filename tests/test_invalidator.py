"""The daemon's kernel invalidations (memfs/mount/daemon.py `_invalidator`), without a kernel."""

from __future__ import annotations

import errno
import threading
from types import SimpleNamespace

import pyfuse3
import trio

from memfs.core.mountconfig import SyncOptions
from memfs.mount import daemon
from memfs.state.blobs import BlobCache
from memfs.state.state import State
from memfs.sync.common import SyncContext


async def test_queued_invalidations_go_out_in_one_worker_thread_call(tmp_path, monkeypatch):
    """A first listing queues one entry invalidation per file: they go to the kernel in
    order, in a worker thread, in one round trip per batch (a round trip each kept the
    trio thread from FUSE requests for a good part of a second at 1,500 files); a name
    the kernel does not know (ENOENT) is skipped."""
    sent: list[tuple] = []
    threads: set[int] = set()

    def entry(ino: int, name: bytes) -> None:
        threads.add(threading.get_ident())
        sent.append(("entry", ino, name))
        if name == b"unknown":
            raise OSError(errno.ENOENT, "not cached")

    def inode(ino: int, attr_only: bool) -> None:
        threads.add(threading.get_ident())
        sent.append(("inode", ino, attr_only))

    monkeypatch.setattr(pyfuse3, "invalidate_entry", entry)
    monkeypatch.setattr(pyfuse3, "invalidate_inode", inode)
    hops = []
    real_run_sync = trio.to_thread.run_sync

    async def run_sync(fn, *args, **kw):
        hops.append(fn)
        return await real_run_sync(fn, *args, **kw)

    monkeypatch.setattr(trio.to_thread, "run_sync", run_sync)
    state = State(tmp_path / "state.db")
    ctx = SyncContext(state, BlobCache(tmp_path / "objects"), None, "store", SyncOptions())
    base = 3 << 40  # a store's inode base under a session root
    engine = SimpleNamespace(ino_base=base, ctx=ctx)
    want = []
    for i in range(1500):
        ctx.invalidate(("entry", 7, f"n{i}"))
        want.append(("entry", base | 7, f"n{i}".encode()))
    ctx.invalidate(("entry", 7, "unknown"))
    ctx.invalidate(("inode", 9))
    want += [("entry", base | 7, b"unknown"), ("inode", base | 9, False)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.MountDaemon._invalidator, None, engine)
        with trio.fail_after(10):
            while len(sent) < len(want):
                await trio.sleep(0.01)
        assert len(hops) == 1
        ctx.invalidate(("entry", 8, "later"))  # a later batch: the next round trip
        with trio.fail_after(10):
            while len(sent) < len(want) + 1:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert sent == [*want, ("entry", base | 8, b"later")]
    assert len(hops) == 2
    assert threading.get_ident() not in threads  # never on the trio thread
    state.close()
