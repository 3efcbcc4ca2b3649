"""State, cache, data and log places are the user's own (memfs/core/private.py): what a
security review found, each through the real command where one exists.

Run as root (CI is): another user is `nobody`, made the owner with chown.
"""

from __future__ import annotations

import os
import pathlib
import stat
import subprocess
import sys

import pytest
from conftest import REPO
from mountutil import mount_env, needs_fuse, server_memories, strand_under_url_key
from test_cli_errors import run  # `memfs ARGV` as a user types it

from memfs.core.private import UnsafeDirectory, is_own, make_dirs, own_dir, own_file

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def mode(path: pathlib.Path) -> int:
    return os.lstat(path).st_mode & 0o777


@pytest.fixture
def umask_000():
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_every_directory_made_is_0700_under_umask_000(tmp_path, umask_000):
    """`os.makedirs(mode=0o700)` gave the mode to the last directory only: the parents
    (an XDG base directory memfs made) were left open to everyone."""
    make_dirs(tmp_path / "a" / "b" / "c")
    assert [mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3
    (tmp_path / "open").mkdir(0o755)
    make_dirs(tmp_path / "open" / "x")
    assert mode(tmp_path / "open") == 0o755  # not memfs's: left as it was
    own_dir(tmp_path / "open")
    assert mode(tmp_path / "open") == 0o700  # memfs's own: narrowed


@root_only
def test_another_user_s_directory_or_link_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(UnsafeDirectory, match=f"belongs to user {NOBODY}, not to you"):
        own_dir(theirs)
    assert not is_own(theirs)
    mine = tmp_path / "mine"
    mine.mkdir(0o755)
    link = tmp_path / "link"
    link.symlink_to(mine)
    os.lchown(link, NOBODY, NOBODY)  # a link another user made, to a directory of ours
    with pytest.raises(UnsafeDirectory, match="a symbolic link made by user"):
        own_dir(link)
    assert mode(mine) == 0o755 and not is_own(link)  # not chmod-ed through their link
    os.lchown(link, 0, 0)  # the user's own link (a cache kept on another disk) is followed
    own_dir(link)
    assert mode(mine) == 0o700 and is_own(link)
    other_file = tmp_path / "log"
    other_file.write_text("x")
    os.chown(other_file, NOBODY, NOBODY)
    with pytest.raises(UnsafeDirectory):
        own_file(other_file)


def test_a_file_made_open_is_narrowed_to_0600(tmp_path):
    made = tmp_path / "db"
    made.write_text("")
    made.chmod(0o666)
    own_file(made)
    assert mode(made) == 0o600
    own_file(tmp_path / "absent")  # to be created by its owner: nothing to do


@root_only
@needs_fuse
def test_a_cache_dir_another_user_made_is_refused_before_anything_is_kept(
        server, mounts, tmp_path):
    """A shared `--cache-dir` another user created (`mkdir -m777`): their planted journal
    would have been adopted and pushed with this user's key. Refused in one line, nothing
    written into it, nothing mounted."""
    store = mounts.new_store()
    shared = tmp_path / "shared"
    shared.mkdir(0o777)
    os.chown(shared, NOBODY, NOBODY)
    (tmp_path / "mnt").mkdir()
    proc = run(["mount", store, str(tmp_path / "mnt"), "--cache-dir", str(shared)],
               mount_env(server, tmp_path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{shared} belongs to user {NOBODY}, not to you" in proc.stderr, proc.stderr
    assert os.listdir(shared) == [] and not os.path.ismount(tmp_path / "mnt")
    # A root of every store, none of them there yet: no store's directory is made, and
    # its own (groups/…) went into the shared directory unchecked (a review).
    server.sdk().beta.memory_stores.delete(store)
    proc = run(["mount", "--all", str(tmp_path / "mnt"), "--cache-dir", str(shared)],
               mount_env(server, tmp_path))
    try:
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"{shared} belongs to user {NOBODY}, not to you" in proc.stderr, proc.stderr
        assert os.listdir(shared) == [] and not os.path.ismount(tmp_path / "mnt")
    finally:
        if os.path.ismount(tmp_path / "mnt"):
            subprocess.run(["fusermount3", "-uz", str(tmp_path / "mnt")], check=False)


@root_only
@needs_fuse
def test_another_user_s_journal_under_the_cache_is_never_adopted(server, mounts):
    """An old state directory with a pending create, but another user's: the next mount
    leaves it where it is and pushes nothing of it (its own adoption test, the same
    directory the user's, is in test_session_mount.py)."""
    store = mounts.new_store()
    old_dir, _new = strand_under_url_key(mounts, server, store)
    for path in (old_dir.parent, old_dir):
        os.chown(path, NOBODY, NOBODY)
    m = mounts.mount(store)
    assert "adopted" not in m.outputs[-1].stderr
    assert not (m.path / "b.md").exists() and (old_dir / "state.db").exists()
    m.sync_now(full=True)
    assert server_memories(server, store) == {}


def serving(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`memfs serve ARGV`, once it listens (the caller kills it)."""
    serve = subprocess.Popen([sys.executable, "-m", "memfs", "serve", "--port", "0", *argv],
                             env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    assert serve.stdout is not None
    if "listening on" not in serve.stdout.readline():
        serve.kill()
        raise AssertionError(f"memfs serve {argv} did not start")
    return serve


def stopped(serve: subprocess.Popen) -> None:
    serve.kill()
    serve.wait(timeout=30)


@root_only
def test_serve_writes_its_log_only_where_it_should_and_narrows_its_database(tmp_path):
    """`memfs serve --log-file`, as root, appended to whatever a symbolic link another
    user made there named (a security review), and the fix then made /dev/null 0600 for
    every user and refused `/dev/stderr`, a link (a review). A database and its -wal,
    -shm someone made 0666 stayed so."""
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "s.log").symlink_to(victim)
    os.lchown(tmp_path / "logs" / "s.log", NOBODY, NOBODY)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFS_", "XDG_"))}
    proc = run(["serve", "--db", str(tmp_path / "s.db"), "--port", "0", "-v",
                "--log-file", str(tmp_path / "logs" / "s.log")], env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot write the log file" in proc.stderr, proc.stderr
    assert f"a symbolic link made by user {NOBODY}" in proc.stderr, proc.stderr
    assert victim.read_text() == "untouched\n"

    os.lchown(tmp_path / "logs" / "s.log", 0, 0)  # the user's own link: followed
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null of its own
    null.chmod(0o666)
    for log in (tmp_path / "logs" / "s.log", null):
        stopped(serving(["--db", str(tmp_path / "s.db"), "-v", "--log-file", str(log)], env))
    assert victim.read_text().startswith("untouched\n") and mode(null) == 0o666

    db = tmp_path / "open.db"
    db.touch()
    db.chmod(0o666)
    wal = tmp_path / "open.db-wal"
    wal.touch()
    wal.chmod(0o666)
    serve = serving(["--db", str(db)], env)
    try:
        assert mode(db) == 0o600 and mode(wal) == 0o600
    finally:
        stopped(serve)
    (tmp_path / "link.db").symlink_to(tmp_path / "made-later.db")  # the user's own link
    stopped(serving(["--db", str(tmp_path / "link.db")], env))
    assert mode(tmp_path / "made-later.db") == 0o600


def test_a_directory_every_user_may_write_in_is_refused_not_narrowed(tmp_path):
    """`--cache-dir /tmp` as root made /tmp 0700, dropping its sticky bit, for everyone
    (a review); and a regular file given as one was a traceback."""
    shared = tmp_path / "tmp-like"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(UnsafeDirectory, match="writable by every user"):
        own_dir(shared)
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o1777 and not is_own(shared)
    (tmp_path / "file").write_text("")
    with pytest.raises(UnsafeDirectory, match="is not a directory"):
        own_dir(tmp_path / "file")
