"""Every limit is a clear errno at the syscall, through a real mount.

EFBIG, ENAMETOOLONG, EINVAL, ENOSPC, EROFS, EPERM; content that is not UTF-8
is accepted but stays local (refused); editor temp files stay local-only.
"""

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import wait_for

pytestmark = needs_fuse

LIMIT = 102_400


def expect_errno(code: int, fn, *args, **kw):
    with pytest.raises(OSError) as info:
        fn(*args, **kw)
    assert info.value.errno == code, (
        f"{fn.__name__}{args}: expected {errno.errorcode[code]}, got {info.value!r}")


def create_file(path, data: bytes = b"") -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        if data:
            os.write(fd, data)
    finally:
        os.close(fd)


def xattr(path, name: str) -> str:
    return os.getxattr(path, f"user.memfs.{name}").decode()


# -- EFBIG ------------------------------------------------------------------------------


def test_efbig_write_and_truncate(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    big = m.path / "big.md"
    fd = os.open(big, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        assert os.write(fd, b"a" * LIMIT) == LIMIT  # exactly the limit is fine
        expect_errno(errno.EFBIG, os.write, fd, b"b")
        expect_errno(errno.EFBIG, os.pwrite, fd, b"c", LIMIT + 10)
        expect_errno(errno.EFBIG, os.ftruncate, fd, LIMIT + 1)
    finally:
        os.close(fd)
    assert big.read_bytes() == b"a" * LIMIT
    expect_errno(errno.EFBIG, os.truncate, big, LIMIT + 1)
    assert os.stat(big).st_size == LIMIT

    # A file with content keeps it when a write would pass the limit.
    small = m.path / "small.md"
    small.write_text("hello\n")
    fd = os.open(small, os.O_WRONLY | os.O_APPEND)
    try:
        written = 0
        with pytest.raises(OSError) as info:
            for _ in range(100):  # the kernel may split a big write; keep going
                written += os.write(fd, b"x" * 200_000)
        assert info.value.errno == errno.EFBIG
    finally:
        os.close(fd)
    data = small.read_bytes()
    assert data.startswith(b"hello\n") and len(data) <= LIMIT
    assert data == b"hello\n" + b"x" * written

    m.wait_synced()
    remote = server_memories(server, store)
    assert remote["/big.md"] == "a" * LIMIT
    assert remote["/small.md"] == data.decode()


# -- ENAMETOOLONG -------------------------------------------------------------------------


def test_another_clients_name_over_255_bytes_is_read_moved_and_removed(mounts, server):
    """The API takes a path whose one component is over 255 bytes; `ls` showed such a
    memory, but `stat`, `cat`, `rm` and `mv` answered ENAMETOOLONG, so the user could not
    even remove it (found by a helper, 6 December). A name already in the tree is found
    as any other; a new one that long is still ENAMETOOLONG."""
    store = mounts.new_store()
    long_a, long_b = "a" * 300 + ".md", "b" * 300 + ".md"
    client = server.sdk().beta.memory_stores.memories
    client.create(store, path="/" + long_a, content="alpha\n")
    client.create(store, path="/" + long_b, content="beta\n")
    m = mounts.mount(store)
    wait_for(lambda: len(os.listdir(m.path)) == 2, what="listed")
    assert (m.path / long_a).read_text() == "alpha\n"
    os.rename(m.path / long_a, m.path / "a.md")
    os.unlink(m.path / long_b)
    expect_errno(errno.ENAMETOOLONG, create_file, m.path / ("c" * 300))
    m.wait_synced()
    assert server_memories(server, store) == {"/a.md": "alpha\n"}


def test_enametoolong_bytes_and_segments(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    # Bytes: four 200-byte directories (path 804 bytes), then names that pass 1,024.
    d = m.path
    for i in range(4):
        d = d / (str(i) * 200)
        os.mkdir(d)
    ok = d / ("f" * 200)  # 804 + 1 + 200 = 1,005 bytes
    create_file(ok, b"fits\n")
    expect_errno(errno.ENAMETOOLONG, create_file, d / ("g" * 230))  # 1,035 bytes
    expect_errno(errno.ENAMETOOLONG, os.mkdir, d / ("h" * 218))  # dir + "/x" passes 1,024
    expect_errno(errno.ENAMETOOLONG, os.rename, ok, d / ("r" * 230))
    # Multi-byte names count in UTF-8 bytes: 110 x "é" (2 bytes each) = 220 bytes.
    expect_errno(errno.ENAMETOOLONG, create_file, d / ("\u00e9" * 110))
    assert ok.read_bytes() == b"fits\n"

    # Segments: a file may be the 20th segment, a directory may not (no room inside).
    deep = m.path
    for _ in range(19):
        deep = deep / "s"
        os.mkdir(deep)
    create_file(deep / "f20.md", b"twenty\n")
    expect_errno(errno.ENAMETOOLONG, os.mkdir, deep / "d20")
    # Moving a directory so that something below it passes 20 segments.
    (m.path / "t").mkdir()
    (m.path / "t" / "u").mkdir()
    create_file(m.path / "t" / "u" / "leaf.md", b"leaf\n")
    expect_errno(errno.ENAMETOOLONG, os.rename, m.path / "t", deep.parent / "t")
    assert (m.path / "t" / "u" / "leaf.md").read_bytes() == b"leaf\n"

    m.wait_synced()
    remote = server_memories(server, store)
    assert remote["/" + "/".join(["s"] * 19) + "/f20.md"] == "twenty\n"
    assert remote["/" + "/".join(str(i) * 200 for i in range(4)) + "/" + "f" * 200] == "fits\n"
    assert remote["/t/u/leaf.md"] == "leaf\n"
    assert len(remote) == 3


# -- EINVAL --------------------------------------------------------------------------------


BAD_NAMES = {
    "ctrl-01": "bad\x01name.md", "tab": "tab\there.md", "del": "del\x7f.md",
    "u2028": "a\u2028b.md", "u2029": "a\u2029b.md", "zwsp": "zw\u200bsp.md",
    "nfd": "e\u0301.md",
}


def test_einval_names(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    create_file(m.path / "ok.md", b"ok\n")
    (m.path / "dir").mkdir()
    for label, name in BAD_NAMES.items():
        for parent in (m.path, m.path / "dir"):
            expect_errno(errno.EINVAL, create_file, parent / name)
            expect_errno(errno.EINVAL, os.mkdir, parent / name)
            expect_errno(errno.EINVAL, os.rename, m.path / "ok.md", parent / name)
            expect_errno(errno.EINVAL, os.rename, m.path / "dir", m.path / name)
        assert sorted(os.listdir(m.path)) == ["dir", "ok.md"], label
    assert os.listdir(m.path / "dir") == []
    m.wait_synced()
    assert server_memories(server, store) == {"/ok.md": "ok\n"}


def test_nfc_name_is_fine(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    create_file(m.path / "caf\u00e9.md", "caf\u00e9\n".encode())
    m.wait_synced()
    assert server_memories(server, store) == {"/caf\u00e9.md": "caf\u00e9\n"}


# -- ENOSPC --------------------------------------------------------------------------------


def fill(server, store: str, first: int, count: int) -> None:
    """Memories /bulk/dN/mNNNN.md made by another client (the SDK), 16 at a time."""
    client = server.sdk().beta.memory_stores.memories

    def one(i: int) -> None:
        client.create(store, path=f"/bulk/d{i % 20}/m{i:04d}.md", content=f"memory {i}\n")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(first, first + count)))


def test_enospc_at_2000_memories(mounts, server):
    store = mounts.new_store()
    client = server.sdk().beta.memory_stores.memories
    fill(server, store, 0, 2000)
    m = mounts.mount(store, "--no-prefetch")
    assert len(os.listdir(m.path / "bulk" / "d7")) == 100
    expect_errno(errno.ENOSPC, create_file, m.path / "one-too-many.md")
    expect_errno(errno.ENOSPC, os.mknod, m.path / "mknod.md")
    st = os.statvfs(m.path)
    assert (st.f_files, st.f_ffree) == (2000, 0)
    # Temp names, directories and edits of existing memories still work.
    create_file(m.path / ".x.swp", b"swap\n")
    assert (m.path / ".x.swp").read_bytes() == b"swap\n"
    create_file(m.path / "scratch~", b"backup\n")
    os.mkdir(m.path / "newdir")
    (m.path / "bulk" / "d0" / "m0000.md").write_text("edited\n")
    # ... but a temp file cannot become memory number 2,001.
    expect_errno(errno.ENOSPC, os.rename, m.path / ".x.swp", m.path / "x.md")
    assert (m.path / ".x.swp").read_bytes() == b"swap\n"
    # The atomic saves of sed -i, rsync and Python replace a memory: they work at the
    # cap (found by a helper, 6 December: their temp file was the 2,001st, ENOSPC).
    d1 = m.path / "bulk" / "d1"
    subprocess.run(["sed", "-i", "s/$/ by sed/", str(d1 / "m0001.md")], check=True,
                   capture_output=True, timeout=60)
    source = m.path.parent / "rsync-src"
    source.mkdir()
    (source / "m0021.md").write_text("by rsync\n")
    if shutil.which("rsync"):
        subprocess.run(["rsync", "-r", f"{source}/", f"{d1}/"], check=True,
                       capture_output=True, timeout=60)
    else:  # rsync's own way: .NAME.XXXXXX, then a rename over NAME
        create_file(d1 / ".m0021.md.AbC123", b"by rsync\n")
        os.rename(d1 / ".m0021.md.AbC123", d1 / "m0021.md")
    with tempfile.NamedTemporaryFile("w", dir=d1, delete=False) as tmp:
        tmp.write("by python\n")
    os.replace(tmp.name, d1 / "m0041.md")
    fd, made = tempfile.mkstemp(dir=d1, suffix=".md")  # tmpXXXXXXXX.md
    os.write(fd, b"by mkstemp\n")
    os.close(fd)
    os.replace(made, d1 / "m0081.md")
    create_file(d1 / "m0101.md.tmp.4242.1733500000000", b"by an agent\n")
    os.replace(d1 / "m0101.md.tmp.4242.1733500000000", d1 / "m0101.md")
    m.wait_synced()
    assert os.getxattr(m.path / "bulk" / "d0" / "m0000.md", "user.memfs.state") == b"synced"
    got = client.list(store, path_prefix="/bulk/d0/", view="full", limit=100)
    assert {x.path: x.content for x in got if x.path == "/bulk/d0/m0000.md"} == {
        "/bulk/d0/m0000.md": "edited\n"}
    got = client.list(store, path_prefix="/bulk/d1/", view="full", limit=100)
    edited = {x.path: x.content for x in got if x.path in (
        "/bulk/d1/m0001.md", "/bulk/d1/m0021.md", "/bulk/d1/m0041.md", "/bulk/d1/m0081.md",
        "/bulk/d1/m0101.md")}
    assert edited == {"/bulk/d1/m0001.md": "memory 1 by sed\n", "/bulk/d1/m0021.md": "by rsync\n",
                      "/bulk/d1/m0041.md": "by python\n", "/bulk/d1/m0081.md": "by mkstemp\n",
                      "/bulk/d1/m0101.md": "by an agent\n"}, edited
    assert len(os.listdir(d1)) == 100 and os.statvfs(m.path).f_ffree == 0
    # Only those names (a reviewer found "tmp.md" made); and such a temp renamed to a
    # new name would be the 2,001st memory: ENOSPC, as its create would have been.
    expect_errno(errno.ENOSPC, create_file, d1 / "tmp.md")
    create_file(d1 / "tmpAbCd1234", b"temp\n")
    expect_errno(errno.ENOSPC, os.rename, d1 / "tmpAbCd1234", d1 / "brand-new.md")
    os.rename(d1 / "tmpAbCd1234", d1 / "m0061.md")  # onto a memory: fine
    m.wait_synced()
    got = client.list(store, path_prefix="/bulk/d1/", view="full", limit=100)
    assert [x.content for x in got if x.path == "/bulk/d1/m0061.md"] == ["temp\n"]
    # One such file left as it is waits for room, said (as a create the full store
    # turned down).
    create_file(m.path / "left.tmp", b"kept\n")
    m.sync_now()
    wait_for(lambda: "/left.tmp waits: the store holds its 2,000-memory maximum" in
             m.memfs("status", str(m.path)).stdout, what="the wait said")
    out = m.unmount("--timeout", "3", kept=True)
    assert "/left.tmp: the store holds its 2,000-memory maximum: it goes out once a " \
        "memory is deleted" in out, out


def test_a_refused_file_counts_so_no_edit_makes_a_2001st_memory(mounts, server):
    """A file refused for its bytes did not count against the cap, and an edit that made
    it text made it a memory with no create to refuse: a 2,001st memory got in, a file
    accepted before waited for good, and `tar x` over a memory then unlinked it, got
    ENOSPC for its create, and the delete went out (a helper). It counts now."""
    store = mounts.new_store()
    fill(server, store, 0, 1998)
    m = mounts.mount(store, "--no-prefetch")
    binf = m.path / "bin.md"
    binf.write_bytes(b"\xff\n")
    wait_for(lambda: xattr(binf, "state") == "refused")
    assert os.statvfs(m.path).f_ffree == 1  # refused, and still counted
    create_file(m.path / "one.md", b"one\n")
    expect_errno(errno.ENOSPC, create_file, m.path / "two.md")
    binf.write_text("now text\n")
    m.wait_synced()
    assert os.statvfs(m.path).f_ffree == 0
    assert m.status()["pending"]["refused"] == []
    held = server_memories(server, store)
    assert len(held) == 2000 and held["/bin.md"] == "now text\n" and held["/one.md"] == "one\n"
    # Unlink and create again at the cap (what `tar x` does over an existing memory).
    os.unlink(m.path / "one.md")
    create_file(m.path / "one.md", b"one again\n")
    m.wait_synced()
    assert server_memories(server, store)["/one.md"] == "one again\n"


def test_a_create_the_full_store_turns_down_is_named_by_status_and_unmount(mounts, server):
    """The server filled up behind the mount's back (another writer took memory number
    2,000): the mount's create waits, unpunished, for a delete to make room. `memfs
    status` showed only "1 create(s)" and the unmount "1 left" (found by a helper, 6
    December); both now say which file waits, and why."""
    store = mounts.new_store()
    fill(server, store, 0, 1999)
    m = mounts.mount(store, "--no-prefetch", "--poll-interval", "3600")
    fill(server, store, 1999, 1)  # another writer's, unseen: the store is full
    (m.path / "mine.md").write_text("waits for room\n")
    m.sync_now()
    wait_for(lambda: "waits: the store holds its 2,000-memory maximum" in m.memfs(
        "status", str(m.path)).stdout, what="the create turned down")
    assert "warning: " in m.memfs("status", str(m.path)).stdout
    out = m.unmount("--timeout", "3", kept=True)
    assert "/mine.md: the store holds its 2,000-memory maximum: it goes out once a memory " \
        "is deleted" in out, out


# -- EROFS ---------------------------------------------------------------------------------


def test_read_only_mount(mounts, server):
    store = mounts.new_store()
    c = server.sdk().beta.memory_stores.memories
    c.create(store, path="/ro/a.md", content="read me\n")
    m = mounts.mount(store, "--read-only")
    a = m.path / "ro" / "a.md"
    assert a.read_text() == "read me\n"
    assert os.listdir(m.path / "ro") == ["a.md"]
    assert xattr(a, "state") == "synced"
    expect_errno(errno.EROFS, os.open, a, os.O_WRONLY)
    expect_errno(errno.EROFS, os.open, a, os.O_RDWR)
    expect_errno(errno.EROFS, os.open, m.path / "new.md", os.O_WRONLY | os.O_CREAT, 0o644)
    expect_errno(errno.EROFS, os.truncate, a, 0)
    expect_errno(errno.EROFS, os.unlink, a)
    expect_errno(errno.EROFS, os.mkdir, m.path / "d")
    expect_errno(errno.EROFS, os.rmdir, m.path / "ro")
    expect_errno(errno.EROFS, os.rename, a, m.path / "ro" / "b.md")
    expect_errno(errno.EROFS, os.chmod, a, 0o600)
    expect_errno(errno.EROFS, os.utime, a, (0, 0))
    expect_errno(errno.EROFS, os.symlink, "a.md", m.path / "ro" / "link")
    expect_errno(errno.EROFS, os.link, a, m.path / "ro" / "hard")
    expect_errno(errno.EROFS, os.mkfifo, m.path / "fifo")
    expect_errno(errno.EROFS, os.setxattr, a, "user.other", b"x")
    assert a.read_text() == "read me\n"
    # Remote changes still arrive on a read-only mount.
    c.create(store, path="/ro/b.md", content="from the server\n")
    m.sync_now()
    wait_for(lambda: (m.path / "ro" / "b.md").exists())
    assert (m.path / "ro" / "b.md").read_text() == "from the server\n"
    m.unmount()
    assert server_memories(server, store) == {"/ro/a.md": "read me\n",
                                              "/ro/b.md": "from the server\n"}


# -- EPERM ---------------------------------------------------------------------------------


def test_links_and_special_files_eperm(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    a = m.path / "a.md"
    a.write_text("a\n")
    expect_errno(errno.EPERM, os.link, a, m.path / "hard.md")
    expect_errno(errno.EPERM, os.symlink, "a.md", m.path / "sym.md")
    expect_errno(errno.EPERM, os.mkfifo, m.path / "fifo")
    assert sorted(os.listdir(m.path)) == ["a.md"]
    m.wait_synced()
    assert server_memories(server, store) == {"/a.md": "a\n"}


# -- non-UTF-8 content and temp names stay local ----------------------------------------------


def test_non_utf8_content_is_kept_local(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    data = bytes([0xFF, 0xFE, 0x00, 0x80, 0xC3]) * 50
    binf = m.path / "bin.dat"
    with open(binf, "wb") as f:
        assert f.write(data) == len(data)
    (m.path / "text.md").write_text("text\n")
    assert binf.read_bytes() == data
    wait_for(lambda: xattr(binf, "state") == "refused")
    reason = xattr(binf, "reason")
    assert "utf" in reason.lower(), reason
    m.wait_synced()
    assert binf.read_bytes() == data
    assert server_memories(server, store) == {"/text.md": "text\n"}
    refused = m.status()["pending"]["refused"]
    assert [r["path"] for r in refused] == ["/bin.dat"]
    # Survives a remount, still local, still refused; unmount names it (exit status 3).
    assert "/bin.dat: " in m.unmount(kept=True)
    m = mounts.mount(store)
    assert binf.read_bytes() == data
    assert xattr(binf, "state") == "refused"
    # Once the content is text, it becomes a memory.
    binf.write_text("now text\n")
    m.wait_synced()
    assert server_memories(server, store) == {"/text.md": "text\n", "/bin.dat": "now text\n"}


def test_unmount_names_twenty_refused_files_and_counts_the_rest(mounts, server):
    """A git tree's objects are refused for their bytes by the hundred: the unmount names
    the first twenty and counts the rest (before, it printed a line for each, burying
    the rest of its report); `memfs status`, read from state.db, names every one."""
    store = mounts.new_store()
    m = mounts.mount(store)
    for i in range(25):
        (m.path / f"obj{i:02d}.bin").write_bytes(b"\xff\xfe" * 8)
    wait_for(lambda: len(m.status()["pending"]["refused"]) == 25)
    out = m.unmount(kept=True)
    named = [line for line in out.splitlines() if line.startswith("    /obj")]
    assert len(named) == 20, out
    assert "  25 file(s) stay here only, NOT on the server:\n" in out, out
    assert "\n    ... and 5 more (memfs status names each)\n" in out, out
    status = m.memfs("status", str(m.path)).stdout
    assert sum(f"refused: /obj{i:02d}.bin: " in status for i in range(25)) == 25, status


def test_temp_names_are_local_only(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    names = [".a.swp", "a~", "4913", ".#a", "#a#", ".b.swo"]
    (m.path / "sub").mkdir()
    for name in names:
        (m.path / name).write_text(f"temp {name}\n")
        (m.path / "sub" / name).write_text(f"sub temp {name}\n")
    (m.path / "a").write_text("real\n")
    m.wait_synced()
    for name in names:
        for p, text in ((m.path / name, f"temp {name}\n"),
                        (m.path / "sub" / name, f"sub temp {name}\n")):
            assert p.read_text() == text
            assert xattr(p, "state") == "local-only"
            assert "temp" in xattr(p, "reason")
    assert server_memories(server, store) == {"/a": "real\n"}
    # A temp file over 100 kB is fine too (vim swap of a big file).
    with open(m.path / ".big.swp", "wb") as f:
        f.write(b"s" * (LIMIT * 3))
    assert os.stat(m.path / ".big.swp").st_size == LIMIT * 3
    m.unmount()
    assert server_memories(server, store) == {"/a": "real\n"}


def test_a_dropped_local_only_pattern_keeps_its_files_here(mounts, server):
    """A file kept here by `--local-only '*.secret'` was pushed by the next mount that
    did not give the pattern again, silently (a helper). The pattern stays in effect
    while a file it kept is here, and the mount says so; then it goes."""
    store = mounts.new_store()
    m = mounts.mount(store, "--local-only", "*.secret")
    (m.path / "k.secret").write_text("the key\n")
    (m.path / "a.md").write_text("a\n")
    m.wait_synced()
    assert xattr(m.path / "k.secret", "reason") == "local-only by name (a temp file, or " \
        "--local-only)"
    m.unmount()
    m.args = tuple(a for a in m.args if a not in ("--local-only", "*.secret"))
    proc = m.mount()
    assert "memfs: kept --local-only '*.secret' of the last mount: without it 1 file(s) it " \
        "keeps here would go to the server (/k.secret); give it again, or remove or " \
        "rename them" in proc.stderr, proc.stderr
    m.sync_now()
    m.wait_synced()
    assert server_memories(server, store) == {"/a.md": "a\n"}
    assert xattr(m.path / "k.secret", "state") == "local-only"
    (m.path / "k.secret").unlink()
    m.unmount()
    assert "kept --local-only" not in m.mount().stderr  # nothing kept: the pattern goes
    (m.path / "b.secret").write_text("now a memory\n")
    m.wait_synced()
    assert server_memories(server, store)["/b.secret"] == "now a memory\n"
    m.unmount()


def test_fallocate_is_not_supported_and_changes_nothing(mounts, server):
    """memfs has no fallocate handler: the kernel answers EOPNOTSUPP (docs/SEMANTICS.md),
    and the file is left as it was."""
    store = mounts.new_store()
    m = mounts.mount(store)
    f = m.path / "a.md"
    f.write_text("kept\n")
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    fd = os.open(f, os.O_RDWR)
    try:
        # fallocate(2) itself: glibc's posix_fallocate would fall back to writing zeros.
        assert libc.fallocate(fd, 0, 0, 4096) == -1
        assert ctypes.get_errno() == errno.EOPNOTSUPP
    finally:
        os.close(fd)
    assert f.read_text() == "kept\n"


def test_a_name_over_255_bytes_is_enametoolong(mounts, server):  # noqa: F811
    """statfs says f_namemax 255: the mount holds to it (pjdfstest's NAME_MAX checks)."""
    store = mounts.new_store()
    m = mounts.mount(store)
    assert os.statvfs(m.path).f_namemax == 255
    fits, over = "a" * 255, "a" * 256
    create_file(m.path / fits, b"255\n")
    (m.path / "d").mkdir()
    for fn, args in ((create_file, (m.path / over,)), (os.mkdir, (m.path / over,)),
                     (os.stat, (m.path / over,)), (os.rename, (m.path / fits, m.path / over)),
                     (os.symlink, ("t", m.path / over)), (os.link, (m.path / fits, m.path / over)),
                     (os.unlink, (m.path / over,)), (os.rmdir, (m.path / over,))):
        expect_errno(errno.ENAMETOOLONG, fn, *args)
    m.wait_synced()
    assert server_memories(server, store) == {"/" + fits: "255\n"}
