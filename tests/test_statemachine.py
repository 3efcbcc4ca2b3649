"""Model-based test of a real mount (JuiceFS `.github/scripts/hypo/fs.py` style).

A Hypothesis `RuleBasedStateMachine` applies the same random operations to a
real memfs mount and to a plain local directory (the oracle) and compares
every result: the value of a successful call, or the errno of a failing one,
and after every step the whole tree (directories, files and contents).

Remote edits are interleaved through the official SDK (update, create, delete,
rename a memory). Before each one the mount is synced (`wait_synced`), so
every file is clean and the merge table says the server's change simply shows
up in the mount: the same change is applied to the oracle, including the
mount's rule that directories left empty by a remote change are removed.

At teardown the mount is unmounted (a flush) and the server must hold exactly
the oracle's files.

Names come from a tiny alphabet so that renames and overwrites collide often.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import os
import shutil
import sqlite3
import stat
import time
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401

from memfs.state.blobs import BlobCache
from memfs.state.state import DEFAULT_LOCAL_ONLY_PATTERNS, EMPTY_SHA

pytestmark = needs_fuse

NAMES = ("a", "b", "d", "a~")  # "a~": an editor backup name, local-only by pattern
PATHS = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
CONTENT = st.text(alphabet="xyz\né", max_size=8).map(lambda s: s.encode("utf-8"))
SIZES = st.sampled_from([0, 1, 3, 9])
EXAMPLES = int(os.environ.get("MEMFS_HYPO_EXAMPLES", "8"))
STEPS = int(os.environ.get("MEMFS_HYPO_STEPS", "20"))
SETTLE = 10.0  # seconds a remote change may take to show (async kernel invalidation)
# Shrinking a failure replays mounts for minutes: opt in with MEMFS_HYPO_SHRINK=1.
PHASES = [p for p in Phase if p is not Phase.explain
          and (p is not Phase.shrink or os.environ.get("MEMFS_HYPO_SHRINK"))]


def local_only(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, p) for p in DEFAULT_LOCAL_ONLY_PATTERNS)


def attempt(fn):
    """('ok', value) or ('err', errno) — what the two trees are compared on."""
    try:
        return ("ok", fn())
    except OSError as exc:
        return ("err", exc.errno)


ALL_PATHS = ["/".join(p) for n in (1, 2, 3) for p in itertools.product(NAMES, repeat=n)]


def kinds(root: Path) -> dict[str, tuple]:
    """What a path lookup (not readdir) says about every name the rules can use:
    catches stale kernel entries and attributes that a directory walk misses."""
    out = {}
    for rel in ALL_PATHS:
        try:
            s = os.lstat(root / rel)
        except OSError as exc:
            out[rel] = ("err", exc.errno)
        else:
            out[rel] = (stat.S_IFMT(s.st_mode), s.st_size if stat.S_ISREG(s.st_mode) else 0)
    return out


def snapshot(root: Path) -> tuple[set[str], dict[str, bytes]]:
    dirs, files = set(), {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            dirs.add(os.path.normpath(os.path.join(rel, d)))
        for f in filenames:
            files[os.path.normpath(os.path.join(rel, f))] = (Path(dirpath) / f).read_bytes()
    return dirs, files


class MountVsLocal(RuleBasedStateMachine):
    server = None
    mounts = None
    tmp: Path | None = None
    counter = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        n = next(self.counter)
        self.store = self.mounts.new_store(f"hypo-{n}")
        self.m = self.mounts.mount(self.store, name=f"hypo-mnt-{n}")
        self.mnt = self.m.path
        self.local = self.tmp / f"hypo-local-{n}"
        self.local.mkdir()
        self.sdk = self.server.sdk()
        self.allowed_conflicts: set[str] = set()

    # -- helpers -----------------------------------------------------------------

    def both(self, fn) -> tuple:
        expected = attempt(lambda: fn(self.local))
        got = attempt(lambda: fn(self.mnt))
        assert got == expected, f"mount {got} != local {expected}"
        return expected

    def local_files(self) -> dict[str, bytes]:
        return snapshot(self.local)[1]

    def free_for_file(self, rel: str) -> bool:
        """No file or directory at rel, and no file among its ancestors."""
        if (self.local / rel).exists():
            return False
        parts = rel.split("/")
        for i in range(1, len(parts)):
            p = self.local / "/".join(parts[:i])
            if p.exists() and not p.is_dir():
                return False
        return True

    def prune_local(self, directory: Path) -> None:
        """Mirror the mount: directories emptied by a remote change go away."""
        while directory != self.local and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            directory = directory.parent

    def memory_id(self, rel: str) -> str:
        for m in self.sdk.beta.memory_stores.memories.list(self.store, view="basic", limit=100):
            if m.type == "memory" and m.path == "/" + rel:
                return m.id
        raise AssertionError(f"/{rel} is not on the server")

    # -- local operations ----------------------------------------------------------

    @rule(path=PATHS, data=CONTENT, append=st.booleans())
    def write(self, path, data, append):
        def op(root):
            with open(root / path, "ab" if append else "wb") as f:
                return f.write(data)
        self.both(op)

    @rule(path=PATHS, size=SIZES)
    def truncate(self, path, size):
        target = self.local / path
        if target.is_file():
            data = target.read_bytes()
            try:
                (data[:size] + b"\0" * (size - len(data))).decode("utf-8")
            except UnicodeDecodeError:
                # It would cut a character: the file becomes refused (local-only),
                # which the remote edits' "clean file" oracle does not model.
                return
        self.both(lambda root: os.truncate(root / path, size))

    @rule(path=PATHS)
    def read(self, path):
        self.both(lambda root: (root / path).read_bytes())

    @rule(path=PATHS)
    def unlink(self, path):
        self.both(lambda root: os.unlink(root / path))

    @rule(path=PATHS)
    def mkdir(self, path):
        self.both(lambda root: os.mkdir(root / path))

    @rule(path=PATHS)
    def rmdir(self, path):
        self.both(lambda root: os.rmdir(root / path))

    @rule(src=PATHS, dst=PATHS)
    def rename(self, src, dst):
        self.both(lambda root: os.rename(root / src, root / dst))

    # -- remote edits (through the official SDK) --------------------------------------

    @rule(kind=st.sampled_from(["update", "create", "delete", "rename"]),
          pick=st.integers(0, 50), path=PATHS, data=CONTENT)
    def remote_edit(self, kind, pick, path, data):
        self.m.wait_synced()  # every file clean: the server's change must simply show
        files = sorted(p for p in self.local_files() if not local_only(p))
        memories = self.sdk.beta.memory_stores.memories
        text = data.decode("utf-8")
        if local_only(path):
            return  # the server's names are never temp names here
        if kind == "create" or not files:
            if not self.free_for_file(path):
                return
            memories.create(self.store, path="/" + path, content=text)
            (self.local / path).parent.mkdir(parents=True, exist_ok=True)
            (self.local / path).write_bytes(data)
        else:
            rel = files[pick % len(files)]
            mid = self.memory_id(rel)
            if kind == "update":
                memories.update(mid, memory_store_id=self.store, content=text)
                (self.local / rel).write_bytes(data)
            elif kind == "delete":
                memories.delete(mid, memory_store_id=self.store)
                (self.local / rel).unlink()
                self.prune_local((self.local / rel).parent)
            else:
                if not self.free_for_file(path):
                    return
                memories.update(mid, memory_store_id=self.store, path="/" + path)
                (self.local / path).parent.mkdir(parents=True, exist_ok=True)
                os.rename(self.local / rel, self.local / path)
                self.prune_local((self.local / rel).parent)
        self.m.sync_now()
        self.settle()

    def settle(self) -> None:
        """The kernel's caches are dropped asynchronously: allow a moment to settle."""
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline and (
                snapshot(self.mnt) != snapshot(self.local) or kinds(self.mnt) != kinds(self.local)):
            time.sleep(0.1)

    @rule(pick=st.integers(0, 50), mine=CONTENT, theirs=CONTENT)
    def concurrent_edit(self, pick, mine, theirs):
        """A local save and a remote update of the same file at (about) the same
        time: whichever order they reach the server in, the server's version wins
        in the tree; the local one is at most a conflict row, never a silent loss."""
        self.m.wait_synced()
        files = sorted(p for p in self.local_files() if not local_only(p))
        if not files:
            return
        rel = files[pick % len(files)]
        if len({mine, theirs, (self.local / rel).read_bytes()}) < 3:
            return  # a no-op on either side would change who "wins"
        mid = self.memory_id(rel)
        (self.mnt / rel).write_bytes(mine)
        self.sdk.beta.memory_stores.memories.update(
            mid, memory_store_id=self.store, content=theirs.decode("utf-8"))
        (self.local / rel).write_bytes(theirs)
        self.allowed_conflicts.add(hashlib.sha256(mine).hexdigest())
        self.m.wait_synced()
        self.m.sync_now()
        self.settle()

    # -- checks ------------------------------------------------------------------------

    @invariant()
    def same_tree(self):
        assert snapshot(self.mnt) == snapshot(self.local)
        assert kinds(self.mnt) == kinds(self.local)

    def teardown(self):
        try:
            said = self.m.unmount(kept=None)  # conflicts are named (exit status 3)
            expected = {"/" + p: c.decode("utf-8") for p, c in self.local_files().items()
                        if not local_only(p)}
            assert server_memories(self.server, self.store) == expected
            # Remote edits met clean files; only concurrent_edit may leave conflicts.
            db = sqlite3.connect(str(self.m.state_dir / "state.db"))
            try:
                rows = db.execute("SELECT path, local_sha FROM conflicts").fetchall()
                assert [r for r in rows if r[1] not in self.allowed_conflicts] == []
                assert all(f" {path}: " in said for path, _sha in rows), said
                # The losing local version is kept after unmount: a blob file, or a row
                # of staged.db the next mount's writer moves (the empty one is never stored).
                cache = BlobCache(self.m.state_dir / "objects")
                try:
                    for _path, local_sha in rows:
                        assert local_sha == EMPTY_SHA or cache.get(local_sha) is not None
                finally:
                    cache.close()
            finally:
                db.close()
        finally:
            self.m.cleanup()
            shutil.rmtree(self.local, ignore_errors=True)


def test_mount_matches_local_directory(server, mounts, tmp_path):  # noqa: F811
    MountVsLocal.server = server
    MountVsLocal.mounts = mounts
    MountVsLocal.tmp = tmp_path
    run_state_machine_as_test(
        MountVsLocal,
        settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                          suppress_health_check=list(HealthCheck), print_blob=True,
                          phases=PHASES,
                          # CI replays a fixed set of examples; developers explore new ones.
                          derandomize=bool(os.environ.get("CI"))),
    )
