"""The blob cache (memfs/state/blobs.py): held and staged blobs, and `has` answered from
memory."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest
from fs_helpers import record_fsyncs

from memfs.state.blobs import BlobCache, StagedUnreadable, sha256


def test_after_gc_has_answers_without_touching_the_disk(tmp_path, monkeypatch):
    """The daemon's start-up gc lists every blob; then `has` of an uncached blob (status
    and prefetch ask it for every file) costs no stat."""
    old = BlobCache(tmp_path / "objects")
    kept, dropped = old.put(b"kept\n"), old.put(b"dropped\n")
    tmp = tmp_path / "objects" / kept[:2] / f".{kept}.1.2.tmp"
    tmp.write_bytes(b"half")  # a crash's leftover

    cache = BlobCache(tmp_path / "objects")
    assert cache.gc({kept}) == 1
    assert not tmp.exists() and not (tmp_path / "objects" / dropped[:2] / dropped).exists()

    def no_stat(*a, **kw):
        raise AssertionError("has() touched the disk")

    with monkeypatch.context() as m:
        m.setattr(os, "stat", no_stat)
        assert cache.has(kept)
        assert not cache.has(dropped) and not cache.has(sha256(b"never\n"))
    # A blob removed behind the daemon's back: get() finds out, and has() follows.
    (tmp_path / "objects" / kept[:2] / kept).unlink()
    assert cache.get(kept) is None and not cache.has(kept)


def test_held_blobs_are_readable_and_written_by_write_many(tmp_path):
    cache = BlobCache(tmp_path / "objects", memory_bytes=10)  # the LRU keeps nothing
    data = b"fetched content\n"
    sha = sha256(data)
    cache.hold(sha, data)
    assert cache.has(sha) and cache.get(sha) == data and cache.held_bytes == len(data)
    assert not (tmp_path / "objects" / sha[:2] / sha).exists()
    cache.write_many(cache.held())
    cache.on_disk([sha])
    assert cache.held_bytes == 0 and not cache.held()
    assert (tmp_path / "objects" / sha[:2] / sha).read_bytes() == data
    assert cache.get(sha) == data


def test_put_of_held_content_writes_it(tmp_path):
    """A user's write of content equal to a held (fetched, unwritten) blob is on disk,
    and fsync'd, when put returns: holding never delays a user's data."""
    cache = BlobCache(tmp_path / "objects")
    data = b"same bytes\n"
    sha = sha256(data)
    cache.hold(sha, data)
    assert cache.put(data, fsync=True) == sha
    assert (tmp_path / "objects" / sha[:2] / sha).read_bytes() == data
    assert cache.held_bytes == 0


def test_put_of_a_blob_known_missing_writes_without_checking(tmp_path, monkeypatch):
    """After gc listed the disk, a new blob's put goes straight to the write (no stat,
    no read-back), and what it wrote is then trusted like any other."""
    cache = BlobCache(tmp_path / "objects")
    cache.gc(set())

    def no_check(*a, **kw):
        raise AssertionError("put() checked the disk first")

    data = b"a new file's first close\n"
    with monkeypatch.context() as m:
        m.setattr(os, "stat", no_check)
        m.setattr(BlobCache, "get", no_check)
        from pathlib import Path

        m.setattr(Path, "read_bytes", no_check)
        sha = cache.put(data)
    assert (tmp_path / "objects" / sha[:2] / sha).read_bytes() == data
    assert cache.has(sha) and cache.put(data) == sha  # again: on disk and in the LRU


# -- staged content: a close commits a row of staged.db, the blob writer makes it a file ----


def staged_rows(root) -> dict[str, bytes]:
    db = sqlite3.connect(str(root / "staged.db"))
    try:
        return dict(db.execute("SELECT sha, data FROM staged"))
    finally:
        db.close()


def test_staged_content_survives_a_crash_and_then_becomes_a_durable_file(tmp_path,
                                                                          monkeypatch):
    root = tmp_path / "objects"
    cache = BlobCache(root)
    data = b"a user's close\n"
    sha = cache.stage(data)
    assert sha == sha256(data) and cache.get(sha) == data and cache.has(sha)
    assert not (root / sha[:2] / sha).exists()  # no file created on the close's path
    assert staged_rows(root) == {sha: data}
    for f in root.glob("staged.db*"):  # the database, its WAL and shared memory
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert cache.stage(data) == sha and cache.staged_bytes == len(data)  # once

    restarted = BlobCache(root, memory_bytes=10)  # the daemon was killed: nothing closed
    assert restarted.get(sha) == data and restarted.has(sha)
    assert restarted.staged() == [(sha, data)] and restarted.pending_bytes == len(data)
    synced = record_fsyncs(monkeypatch)
    restarted.write_staged(restarted.staged())
    # Before its row goes: the data (as the temp file renamed into place), then the
    # directory entries.
    assert any(p.startswith(str(root / sha[:2] / f".{sha}.")) for p in synced)
    for path in (root / sha[:2], root):
        assert str(path) in synced, f"{path} was not fsync'd before the row goes"
    restarted.unstage([sha])
    assert staged_rows(root) == {} and restarted.staged_bytes == 0
    assert (root / sha[:2] / sha).read_bytes() == data
    assert BlobCache(root).staged() == [] and BlobCache(root).get(sha) == data


def test_gc_drops_staged_content_nothing_refers_to(tmp_path):
    """A crash between the content's commit and its file row's commit leaves a staged
    orphan: the start-up gc removes it with the unreferenced blob files."""
    root = tmp_path / "objects"
    cache = BlobCache(root)
    kept, orphan = cache.stage(b"kept\n"), cache.stage(b"orphan\n")
    restarted = BlobCache(root)
    restarted.gc({kept})
    assert [sha for sha, _ in restarted.staged()] == [kept]
    assert set(staged_rows(root)) == {kept} and restarted.staged_bytes == len(b"kept\n")
    assert not restarted.has(orphan)


def test_stage_rewrites_a_blob_file_it_has_not_seen_whole(tmp_path):
    """As `put` does: a blob file torn by a power cut is not trusted because its name
    matches; the same content written again is staged, and the writer repairs the file."""
    root = tmp_path / "objects"
    data = b"the same content, saved after a power cut\n"
    sha = sha256(data)
    (root / sha[:2]).mkdir(parents=True)
    (root / sha[:2] / sha).write_bytes(data[:9])
    cache = BlobCache(root)
    cache.gc({sha})  # listed: known on disk, never read
    assert cache.stage(data) == sha and cache.staged() == [(sha, data)]
    cache.write_staged(cache.staged())
    cache.unstage([sha])
    assert (root / sha[:2] / sha).read_bytes() == data
    assert cache.stage(data) == sha and cache.staged() == []  # seen whole now: no row


def test_a_corrupt_staged_row_is_dropped_not_served(tmp_path):
    root = tmp_path / "objects"
    BlobCache(root).stage(b"good\n")
    db = sqlite3.connect(str(root / "staged.db"))
    db.execute("INSERT INTO staged (sha, data) VALUES (?, ?)", (sha256(b"x"), b"not x"))
    db.commit()
    db.close()
    cache = BlobCache(root)
    assert cache.get(sha256(b"x")) is None
    assert set(staged_rows(root)) == {sha256(b"good\n")}


def test_the_empty_blob_is_never_stored(tmp_path):
    cache = BlobCache(tmp_path / "objects")
    empty = sha256(b"")
    assert cache.stage(b"") == empty and cache.put(b"") == empty
    assert cache.has(empty) and cache.get(empty) == b""
    assert not cache.staged() and not (tmp_path / "objects" / empty[:2] / empty).exists()


def test_an_unreadable_staged_db_stops_the_cache_and_is_kept(tmp_path):
    """It may hold a user's closes: no mount opens over it, nothing deletes it, and the
    message says which file and what to do."""
    root = tmp_path / "objects"
    root.mkdir()
    (root / "staged.db").write_bytes(b"this is not an SQLite database" * 100)
    with pytest.raises(StagedUnreadable) as info:
        BlobCache(root)
    assert str(root / "staged.db") in str(info.value) and "move it aside" in str(info.value)
    assert (root / "staged.db").read_bytes().startswith(b"this is not")
