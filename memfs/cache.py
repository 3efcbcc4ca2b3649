"""The sha-keyed content store: blobs on disk plus a byte-bounded LRU in memory.

A blob's name is its sha256, so a blob never changes once written: the
cache needs no invalidation, a half-written blob is never visible (temp file
plus rename), and the same content shared by many files is stored once.

Fetched blobs (clean server content, which can always be fetched again) are
*held*: readable from memory at once, written to disk later, when the mount is
quiet (memfs/sync/fetcher.py). Creating 1,500 small files costs this kind of
VM 0.1-0.4 s of kernel time, which a cold `grep -r` would otherwise wait for.
Content a user wrote never waits: `put` writes (and fsyncs) before it returns.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

from cachetools import LRUCache

log = logging.getLogger(__name__)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobCache:
    def __init__(self, root: Path, *, memory_bytes: int = 64 * 1024 * 1024) -> None:
        self.root = Path(root)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.lru: LRUCache[str, bytes] = LRUCache(maxsize=memory_bytes, getsizeof=len)
        #: shas known to be on disk (written, or found there): `has` stats each blob once,
        #: not once per status poll or prefetch scan. Only `gc` removes blobs.
        self._on_disk: set[str] = set()
        #: fetched blobs not on disk yet (`hold`); the LRU may drop them, this may not
        self._held: dict[str, bytes] = {}
        self.held_bytes = 0
        #: `gc` listed every blob on disk into `_on_disk`: a blob not known is missing,
        #: without a stat (status and prefetch ask about every uncached file)
        self._listed = False

    def _path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def has(self, sha: str) -> bool:
        if sha in self.lru or sha in self._held:
            return True
        if self._maybe_on_disk(sha):
            self._on_disk.add(sha)
            return True
        return False

    def get(self, sha: str) -> bytes | None:
        """The blob, from memory or disk; None when missing or corrupt."""
        data = self.lru.get(sha)
        if data is None:
            data = self._held.get(sha)
        if data is not None:
            return data
        try:
            data = self._path(sha).read_bytes()
        except FileNotFoundError:
            self._on_disk.discard(sha)
            return None
        if sha256(data) != sha:
            log.warning("blob %s is corrupt on disk; dropping it", sha)
            self._path(sha).unlink(missing_ok=True)
            self._on_disk.discard(sha)
            return None
        self._remember(sha, data)
        return data

    def put(self, data: bytes, *, sha: str | None = None, fsync: bool = False) -> str:
        """Store data and return its sha; with fsync, durably (blob and directory
        entries) before returning.

        A blob already on disk is trusted only once this process has seen it
        whole (it is in the LRU); otherwise it is read back and rewritten when it
        does not hash to its name, so a blob torn by a power cut is repaired by
        the next write of the same content instead of being synced as is. A blob
        known to be missing (`gc` listed the disk) is written without either check:
        a new file's first close costs no `stat` and no failed open."""
        sha = sha or sha256(data)
        path = self._path(sha)
        if self._listed and sha not in self._on_disk:
            self._write(path, sha, data)
        elif sha not in self.lru or not path.exists():
            try:
                intact = sha256(path.read_bytes()) == sha
            except FileNotFoundError:
                intact = False
            if not intact:
                self._write(path, sha, data)
        if fsync:
            fsync_paths(self.durable_files(sha))
        self.on_disk([sha])
        self._remember(sha, data)
        return sha

    def hold(self, sha: str, data: bytes) -> None:
        """Keep a verified fetched blob in memory until `write_many` puts it on disk."""
        if sha in self._held or sha in self._on_disk:
            return
        self._held[sha] = data
        self.held_bytes += len(data)
        self._remember(sha, data)

    def held(self) -> list[tuple[str, bytes]]:
        """The held blobs, to hand to `write_many` (they stay held until `on_disk`)."""
        return list(self._held.items())

    def write_many(self, blobs: list[tuple[str, bytes]]) -> None:
        """Write blobs that are not on disk yet. Touches only files, so a worker thread
        may run it; the caller then marks them with `on_disk` on its own thread."""
        for sha, data in blobs:
            if not self._maybe_on_disk(sha):
                self._write(self._path(sha), sha, data)

    def _maybe_on_disk(self, sha: str) -> bool:
        """Known on disk, or (before `gc` listed the disk) found there by a stat."""
        return sha in self._on_disk or (not self._listed and self._path(sha).exists())

    def on_disk(self, shas: list[str]) -> None:
        """These blobs are on disk: no longer held."""
        self._on_disk.update(shas)
        self.drop_held(shas)

    def drop_held(self, shas: list[str]) -> None:
        """Stop holding these (written, or their write failed: a later miss refetches
        what the LRU no longer has)."""
        for sha in shas:
            data = self._held.pop(sha, None)
            if data is not None:
                self.held_bytes -= len(data)

    def _write(self, path: Path, sha: str, data: bytes) -> None:
        # pid and thread: a worker thread's write_many may write the blob a handler writes
        tmp = path.with_name(f".{sha}.{os.getpid()}.{threading.get_ident()}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileNotFoundError:  # its directory (sha[:2]) is new, or was removed
            path.parent.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(tmp, flags, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def durable_files(self, sha: str) -> list[Path]:
        """The blob and the directory entries that make it reachable after a crash."""
        path = self._path(sha)
        return [path, path.parent, self.root]

    def _remember(self, sha: str, data: bytes) -> None:
        if len(data) <= self.lru.maxsize:
            self.lru[sha] = data

    def gc(self, keep: set[str]) -> int:
        """Remove blobs no file or conflict refers to; returns how many. The blobs kept
        are listed into `_on_disk`: from then on `has` needs no stat. Only the daemon
        that holds the store's lock may call this (nothing else writes its blobs)."""
        self.drop_held([sha for sha in self._held if sha not in keep])
        removed = 0
        for sub in self.root.iterdir():
            if not sub.is_dir():
                continue
            for blob in sub.iterdir():
                if blob.name.startswith("."):  # a temp file a crash left behind
                    blob.unlink(missing_ok=True)
                elif blob.name not in keep:
                    blob.unlink(missing_ok=True)
                    self.lru.pop(blob.name, None)
                    self._on_disk.discard(blob.name)
                    removed += 1
                else:
                    self._on_disk.add(blob.name)
        self._listed = True
        return removed


def fsync_paths(paths: list[Path], *, missing_ok: bool = False) -> None:
    """fsync each file or directory (with missing_ok, skip those that do not exist:
    the WAL appears only with the first write)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            if missing_ok:
                continue
            raise
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
