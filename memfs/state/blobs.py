"""The sha-keyed content store: blobs on disk plus a byte-bounded LRU in memory.

A blob's name is its sha256, so a blob never changes once written: the
cache needs no invalidation, a half-written blob is never visible (temp file
plus rename), and the same content shared by many files is stored once.

Two kinds of blob wait in memory before they become files, both written by
the mount's blob writer (memfs/sync/fetcher.py) once the mount is quiet:

- *held*: fetched server content, which can always be fetched again. Creating
  1,500 small files costs this kind of VM 0.1-0.4 s of kernel time, which a
  cold `grep -r` would otherwise wait for.
- *staged*: content a user wrote, committed to ``staged.db`` (one SQLite row,
  crash-safe when `stage` returns) instead of a new file: a file creation
  costs 0.1-0.3 ms here, the commit a tenth of that, and every close of a new
  file paid it. The writer makes them files (fsynced) and only then deletes
  their rows, so a crash or a power cut at any point leaves each staged blob
  in one place or the other. Opening the cache reads back what a crash left.

The empty blob is never stored: every reader knows its content.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from cachetools import LRUCache

from memfs.core.nodes import EMPTY_SHA
from memfs.core.signals import Wakeup
from memfs.state.schema import STAGED_SCHEMA

log = logging.getLogger(__name__)

STAGED_DB = "staged.db"


class StagedUnreadable(OSError):
    """staged.db exists but SQLite cannot read it: it may hold content a user wrote,
    so nothing opens (or deletes) it silently."""


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
        #: user content in staged.db, not a file yet (`stage`); never dropped from memory
        self._staged: dict[str, bytes] = {}
        self.staged_bytes = 0
        self._db: sqlite3.Connection | None = None
        #: set when a blob starts waiting to be written (the blob writer waits on it)
        self.unwritten = Wakeup()
        if (self.root / STAGED_DB).exists():
            try:
                self._load_staged()
            except sqlite3.DatabaseError as exc:
                self.close()
                raise StagedUnreadable(
                    f"{self.root / STAGED_DB} cannot be read ({exc}); it holds content "
                    "closed in the mount but not yet moved to a blob file: copy it somewhere "
                    "safe, then move it aside to mount without it") from None

    def _path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def has(self, sha: str) -> bool:
        if sha in self.lru or sha in self._held or sha in self._staged or sha == EMPTY_SHA:
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
        if data is None:
            data = self._staged.get(sha)
        if data is not None:
            return data
        if sha == EMPTY_SHA:
            return b""
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
        if sha == EMPTY_SHA:
            return sha
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
            fsync_paths(self._file_and_dirs(sha))  # a file now, whether staged or not
        self.on_disk([sha])
        self._remember(sha, data)
        return sha

    def stage(self, data: bytes) -> str:
        """Keep content a user wrote and return its sha: crash-safe when this returns
        (a row of staged.db), a file once the blob writer gets to it (`write_staged`).
        Raises sqlite3.Error when the row cannot be committed (disk full...).

        As in `put`, a blob file is trusted only once this process has seen it whole
        (it is in the LRU): a blob torn by a power cut is staged and rewritten."""
        sha = sha256(data)
        whole_on_disk = sha in self._on_disk and sha in self.lru
        if sha != EMPTY_SHA and sha not in self._staged and not whole_on_disk:
            db = self._staging()
            db.execute("INSERT OR REPLACE INTO staged (sha, data) VALUES (?, ?)", (sha, data))
            self.drop_held([sha])  # fetched bytes alike: now a user's, kept until written
            self._staged[sha] = data
            self.staged_bytes += len(data)
            self.unwritten.set()
        self._remember(sha, data)
        return sha

    def staged(self) -> list[tuple[str, bytes]]:
        """The staged blobs, to hand to `write_staged`."""
        return list(self._staged.items())

    def write_staged(self, blobs: list[tuple[str, bytes]],
                     stop: Callable[[], bool] | None = None, *, fsync: bool = True) -> int:
        """Write staged blobs as files and fsync them and their directories, so that
        `unstage` may then forget their rows. Touches only files (a worker thread).
        Returns how many (the first ones) are files now: `stop` is asked before each blob
        (each costs an fsync, about 3 ms of disk here), so a writer that yields to the
        mount's users stops within one. `fsync=False` for content the server holds (the
        caller's reason to forget the rows is elsewhere: memfs/sync/fetcher.py
        `write_pending`)."""
        dirs = {self.root}
        done = 0
        for sha, data in blobs:
            if stop is not None and stop():
                break
            path = self._path(sha)
            self._write(path, sha, data, fsync=fsync)
            dirs.add(path.parent)
            done += 1
        if fsync:
            fsync_paths(sorted(dirs))
        return done

    def unstage(self, shas: list[str]) -> None:
        """These staged blobs are durable files now (`write_staged`): drop their rows."""
        self._drop_staged(shas)
        self._on_disk.update(shas)

    def _drop_staged(self, shas: list[str]) -> None:
        db = self._staging()
        db.execute("BEGIN")
        try:
            db.executemany("DELETE FROM staged WHERE sha=?", [(sha,) for sha in shas])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        for sha in shas:
            data = self._staged.pop(sha, None)
            if data is not None:
                self.staged_bytes -= len(data)

    @property
    def pending_bytes(self) -> int:
        """Bytes in memory waiting to be written (held and staged)."""
        return self.held_bytes + self.staged_bytes

    def _staging(self) -> sqlite3.Connection:
        if self._db is None:
            path = self.root / STAGED_DB
            db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            os.chmod(path, 0o600)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(STAGED_SCHEMA)
            self._db = db
        return self._db

    def _load_staged(self) -> None:
        """What a crash left staged: back in memory, for reads and the writer."""
        db = self._staging()
        bad = []
        for sha, data in db.execute("SELECT sha, data FROM staged"):
            if sha256(data) != sha:
                log.warning("staged blob %s is corrupt; dropping it", sha)
                bad.append(sha)
            else:
                self._staged[sha] = data
                self.staged_bytes += len(data)
        if bad:
            self._drop_staged(bad)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def hold(self, sha: str, data: bytes) -> bool:
        """Keep a verified fetched blob in memory until `write_many` puts it on disk;
        False when the cache has it already."""
        if self.has(sha):
            return False
        self._held[sha] = data
        self.held_bytes += len(data)
        self._remember(sha, data)
        self.unwritten.set()
        return True

    def held(self) -> list[tuple[str, bytes]]:
        """The held blobs, to hand to `write_many` (they stay held until `on_disk`)."""
        return list(self._held.items())

    def write_many(self, blobs: list[tuple[str, bytes]],
                   stop: Callable[[], bool] | None = None) -> int:
        """Write blobs that are not on disk yet. Touches only files, so a worker thread
        may run it; the caller then marks them with `on_disk` on its own thread.
        Returns how many (the first ones) are on disk: `stop` is asked before each."""
        done = 0
        for sha, data in blobs:
            if stop is not None and stop():
                break
            if not self._maybe_on_disk(sha):
                self._write(self._path(sha), sha, data)
            done += 1
        return done

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

    def _write(self, path: Path, sha: str, data: bytes, *, fsync: bool = False) -> None:
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
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def staged_files(self) -> list[Path]:
        """What makes every staged blob survive a power cut: staged.db, its WAL and
        their directory entry."""
        staged = self.root / STAGED_DB
        return [staged.with_name(STAGED_DB + "-wal"), staged, self.root]

    def durable_files(self, sha: str) -> list[Path]:
        """What makes blob sha survive a power cut, wherever it is now: its file and
        directory entries, or staged.db (the writer may move it meanwhile; a file
        that does not exist is skipped)."""
        staged = self.root / STAGED_DB
        return [*self._file_and_dirs(sha), staged.with_name(STAGED_DB + "-wal"), staged]

    def _file_and_dirs(self, sha: str) -> list[Path]:
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
        gone = [sha for sha in self._staged if sha not in keep]
        if gone:  # a crash's orphans: content no row of state.db refers to
            self._drop_staged(gone)
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
