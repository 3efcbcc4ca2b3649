"""The blob cache (memfs/cache.py): held blobs, and `has` answered from memory."""

from __future__ import annotations

import os

from memfs.cache import BlobCache, sha256


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
