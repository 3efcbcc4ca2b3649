"""Unmodified tools through a real mount (the kernel, a real `memfs serve`).

cat/grep/ls over a seeded store, cp -r in + unmount, sed -i / atomic replace /
vim keep the memory id and its version history, git, rsync round trip, mv of a
directory, and a remote SDK update showing up in the mount.
"""

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import wait_for

pytestmark = needs_fuse


@pytest.fixture(autouse=True, params=["fast-opens", "no-shim"])
def open_mode(request, monkeypatch):
    """Every tool runs in both modes a mount can be in: warm read-only opens answered by
    the C shim (the default), and every open through Python (MEMFS_FAST_OPEN=0, as where
    the shim could not be built). The mounts inherit this process's environment."""
    if request.param == "no-shim":
        monkeypatch.setenv("MEMFS_FAST_OPEN", "0")
    else:
        monkeypatch.delenv("MEMFS_FAST_OPEN", raising=False)
    return request.param


# -- helpers --------------------------------------------------------------------------


def run(*cmd: str, cwd=None, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def seed(server, store: str, files: dict[str, str]) -> dict[str, str]:
    """Create memories through the SDK; returns {path: memory id}."""
    client = server.sdk()

    def one(item):
        path, content = item
        return path, client.beta.memory_stores.memories.create(store, path=path,
                                                                 content=content).id

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(one, files.items()))


def server_ids(server, store: str) -> dict[str, str]:
    """{path: memory id} of every memory on the server."""
    return {m.path: m.id
            for m in server.sdk().beta.memory_stores.memories.list(store, view="basic", limit=100)
            if m.type == "memory"}


def operations(server, store: str, memory_id: str) -> list[str]:
    """The memory's version operations, oldest first."""
    versions = list(server.sdk().beta.memory_stores.memory_versions.list(
        store, memory_id=memory_id, limit=100))
    versions.sort(key=lambda v: (v.created_at, v.id))
    return [v.operation for v in versions]


def local_tree(root) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, encoding="utf-8") as f:
                out["/" + os.path.relpath(p, root)] = f.read()
    return out


def make_tree(root, n_files: int = 50) -> dict[str, str]:
    """A nested tree of small text files under root; returns {"/rel": content}."""
    files = {}
    for i in range(n_files):
        rel = f"proj/d{i % 4}/sub{i % 3}/note{i:02d}.md" if i % 5 else f"proj/top{i:02d}.txt"
        content = f"# note {i}\n" + "line about apples and pears\n" * (i % 7) + f"end {i}\n"
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)
        files["/" + rel] = content
    return files


# -- 1. reading a seeded store with cat / grep -r / ls -lR -------------------------


@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "lazy"])
def test_cat_grep_ls_over_seeded_store(mounts, server, prefetch):
    store = mounts.new_store()
    files = {f"/notes/topic{i}/item{j}.md": f"topic {i} item {j}\n"
             + ("needle here\n" if (i + j) % 3 == 0 else "hay\n")
             for i in range(3) for j in range(4)}
    files["/README.md"] = "top level\nneedle too\n"
    seed(server, store, files)
    m = mounts.mount(store, *(() if prefetch else ("--no-prefetch",)))

    # The tree is there as soon as `memfs mount` returns.
    assert run("cat", str(m.path / "README.md")).stdout == "top level\nneedle too\n"
    for path, content in files.items():
        assert run("cat", str(m.path) + path).stdout == content

    out = run("grep", "-r", "-l", "needle", ".", cwd=m.path).stdout
    got = sorted(line[1:] for line in out.splitlines())  # "./x" -> "/x"
    assert got == sorted(p for p, c in files.items() if "needle" in c)

    out = run("ls", "-lR", ".", cwd=m.path).stdout
    listed, cwd = {}, ""
    for line in out.splitlines():
        if line.endswith(":") and line.startswith("."):
            cwd = line[1:-1]  # "./notes/topic0:" -> "/notes/topic0"
        elif line.startswith("-"):
            fields = line.split()
            listed[f"{cwd}/{fields[-1]}"] = (fields[0], int(fields[4]))
    assert listed == {p: ("-rw-r--r--", len(c.encode())) for p, c in files.items()}
    assert re.search(r"^d.* notes$", out, re.M)


# -- 2. cp -r in, unmount, the server holds exactly that --------------------------------


def test_cp_r_tree_then_unmount(mounts, server, tmp_path):
    store = mounts.new_store()
    src = tmp_path / "src"
    files = make_tree(src, 50)
    # A long write-back delay: only unmount's flush pushes, so its count is exact.
    m = mounts.mount(store, "--write-back-delay", "30")
    run("cp", "-r", str(src / "proj"), str(m.path))
    assert local_tree(m.path) == files
    out = m.unmount()
    assert "pushed 50 change(s), 0 left" in out, out
    assert server_memories(server, store) == files


# -- 3. in-place edits keep the memory id and its history -----------------------------


def _assert_same_memory(server, store, path, memory_id, content, *, exact=True):
    assert server_memories(server, store) == {path: content}
    assert server_ids(server, store) == {path: memory_id}
    ops = operations(server, store, memory_id)
    if exact:  # one save, one push
        assert ops == ["created", "modified"], ops
    else:  # an editor's save has steps; a push may land between them, never a delete
        assert ops[0] == "created" and set(ops[1:]) == {"modified"}, ops


def test_sed_i_keeps_memory_id(mounts, server):
    store = mounts.new_store()
    mid = seed(server, store, {"/a.md": "alpha\nbeta\n"})["/a.md"]
    m = mounts.mount(store)
    run("sed", "-i", "s/alpha/ALPHA/", str(m.path / "a.md"))
    assert (m.path / "a.md").read_text() == "ALPHA\nbeta\n"
    m.wait_synced()
    assert os.getxattr(m.path / "a.md", "user.memfs.memory_id").decode() == mid
    _assert_same_memory(server, store, "/a.md", mid, "ALPHA\nbeta\n")


def test_write_temp_then_replace_keeps_memory_id(mounts, server):
    store = mounts.new_store()
    mid = seed(server, store, {"/cfg/settings.json": '{"a": 1}\n'})["/cfg/settings.json"]
    m = mounts.mount(store)
    target = m.path / "cfg" / "settings.json"
    assert target.read_text() == '{"a": 1}\n'
    tmp = m.path / "cfg" / ".settings.json.tmp123"
    with open(tmp, "w") as f:
        f.write('{"a": 2}\n')
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    assert target.read_text() == '{"a": 2}\n'
    assert not tmp.exists()
    m.wait_synced()
    _assert_same_memory(server, store, "/cfg/settings.json", mid, '{"a": 2}\n')


@pytest.mark.parametrize("vim", ["vim", "vim.tiny"])
def test_vim_edit_keeps_memory_id(mounts, server, vim):
    if shutil.which(vim) is None:
        pytest.skip(f"{vim} is not installed")
    store = mounts.new_store()
    mid = seed(server, store, {"/doc/v.txt": "a cat and a bat\n"})["/doc/v.txt"]
    m = mounts.mount(store)
    f = m.path / "doc" / "v.txt"
    # Swap file ON (no -n): vim makes .v.txt.swp, probes with 4913, writes a
    # backup v.txt~ and removes it again.
    run(vim, "-Nu", "NONE", "-es", "-c", "%s/a/b/g", "-c", "wq", str(f), cwd=m.path / "doc")
    assert f.read_text() == "b cbt bnd b bbt\n"
    assert sorted(os.listdir(m.path / "doc")) == ["v.txt"]  # swap and backup are gone
    m.wait_synced()
    assert os.getxattr(f, "user.memfs.memory_id").decode() == mid
    _assert_same_memory(server, store, "/doc/v.txt", mid, "b cbt bnd b bbt\n", exact=False)


def test_vim_swap_file_never_reaches_server(mounts, server):
    """While vim holds a file open its swap file lives in the mount, local-only."""
    store = mounts.new_store()
    seed(server, store, {"/s.txt": "hello\n"})
    m = mounts.mount(store)
    f = m.path / "s.txt"
    # Make the edit, then keep vim running (sleep) so the swap file exists.
    proc = subprocess.Popen(["vim", "-Nu", "NONE", "-es", "-c", "s/hello/howdy/", "-c", "w",
                             "-c", "sleep 2", "-c", "q", str(f)],
                            cwd=m.path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        swp = m.path / ".s.txt.swp"
        wait_for(lambda: swp.exists() and f.read_text() == "howdy\n")
        assert os.getxattr(swp, "user.memfs.state") == b"local-only"
        m.sync_now()
        m.wait_synced()
        assert server_memories(server, store) == {"/s.txt": "howdy\n"}
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert not (m.path / ".s.txt.swp").exists()
    m.wait_synced()
    assert server_memories(server, store) == {"/s.txt": "howdy\n"}


# -- 4. git --------------------------------------------------------------------------------


def test_git_init_add_commit(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    repo = m.path / "repo"
    repo.mkdir()
    (repo / "hello.md").write_text("hello git\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "x.txt").write_text("x\n")
    git = ("git", "-c", "user.name=Test", "-c", "user.email=test@example.com",
           "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false")
    run(*git, "init", "-q", cwd=repo)
    run(*git, "add", "-A", cwd=repo)
    run(*git, "commit", "-q", "-m", "first commit", cwd=repo)
    assert run(*git, "status", "--porcelain", cwd=repo).stdout == ""
    log = run(*git, "log", "--oneline", cwd=repo).stdout
    assert "first commit" in log
    assert run(*git, "fsck", "--no-progress", cwd=repo).returncode == 0
    # A second commit after an edit.
    (repo / "hello.md").write_text("hello again\n")
    run(*git, "commit", "-q", "-am", "second", cwd=repo)
    assert run(*git, "status", "--porcelain", cwd=repo).stdout == ""
    assert len(run(*git, "log", "--oneline", cwd=repo).stdout.splitlines()) == 2
    m.wait_synced()
    remote = server_memories(server, store)
    assert remote["/repo/hello.md"] == "hello again\n"
    assert remote["/repo/sub/x.txt"] == "x\n"
    # Binary git objects never reach the server; they stay local (refused).
    assert not any(p.startswith("/repo/.git/objects/") for p in remote)
    obj = next(p for p in (repo / ".git" / "objects").rglob("*") if p.is_file()
               and p.parent.name != "info" and p.parent.name != "pack")
    assert os.getxattr(obj, "user.memfs.state") == b"refused"


#: What README.md (Limits and errors) tells a git user to mount with.
GIT_LOCAL_ONLY = ("*.pack", "*.idx", "tmp_pack_*", "tmp_idx_*")


def test_git_clone_and_gc_of_packs_past_the_size_limit(mounts, server, tmp_path):
    """A clone (its pack streamed to tmp_pack_XXXXXX first) and a `git gc`, whose packs and
    indexes pass 102,400 bytes, work with the README's --local-only names; `*.pack` alone,
    which the README said, got EFBIG for the index and the temp pack (a helper)."""
    import base64

    git = ("git", "-c", "user.name=Test", "-c", "user.email=test@example.com",
           "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false")
    source = tmp_path / "source"
    source.mkdir()
    run(*git, "init", "-q", cwd=source)
    for i in range(4000):  # 4,000 objects: a pack and an index both past 100 kB
        (source / f"f{i:04d}.md").write_text(base64.b64encode(os.urandom(48)).decode())
    run(*git, "add", "-A", cwd=source)
    run(*git, "commit", "-q", "-m", "many", cwd=source)
    store = mounts.new_store()
    m = mounts.mount(store, *(a for name in GIT_LOCAL_ONLY for a in ("--local-only", name)))
    clone = m.path / "clone"
    run(*git, "clone", "-q", "--no-local", "--no-checkout", str(source), str(clone),
        timeout=120)
    packs = list((clone / ".git" / "objects" / "pack").iterdir())
    assert any(p.suffix == ".pack" and p.stat().st_size > 102_400 for p in packs), packs
    assert any(p.suffix == ".idx" and p.stat().st_size > 102_400 for p in packs), packs
    run(*git, "gc", "-q", "--aggressive", cwd=clone, timeout=120)
    assert run(*git, "fsck", "--no-progress", cwd=clone).returncode == 0
    assert run(*git, "log", "--oneline", cwd=clone).stdout.strip().endswith("many")
    m.wait_synced()
    assert not any(p.startswith("/clone/.git/objects/pack/")
                   for p in server_memories(server, store))


# -- 5. rsync round trip ------------------------------------------------------------------


def test_rsync_in_and_out(mounts, server, tmp_path):
    store = mounts.new_store()
    src = tmp_path / "src"
    files = make_tree(src, 30)
    os.chmod(src / "proj" / "top00.txt", 0o600)
    m = mounts.mount(store)
    run("rsync", "-a", str(src / "proj") + "/", str(m.path / "proj"))
    out = tmp_path / "out"
    run("rsync", "-a", str(m.path / "proj") + "/", str(out))
    run("diff", "-r", str(src / "proj"), str(out))
    # -a kept modes and mtimes (locally).
    for rel in ("top00.txt", "d1/sub1/note01.md"):
        a, b = os.stat(src / "proj" / rel), os.stat(out / rel)
        assert (a.st_mode, a.st_mtime_ns // 10**9) == (b.st_mode, b.st_mtime_ns // 10**9)
    # A second rsync has nothing to do.
    again = run("rsync", "-ai", str(src / "proj") + "/", str(m.path / "proj")).stdout
    assert again.strip() == ""
    m.wait_synced()
    assert server_memories(server, store) == files


def test_tools_that_copy_attributes_copy_in_out_and_within(mounts, server, tmp_path):
    """`rsync -X`, `cp --preserve=xattr` and `tar --xattrs` copy the attributes they list,
    memfs's own `user.memfs.*` among them: setting (or, for rsync, removing) those failed
    with EPERM, exit 23 or 1 (found by a helper, 6 December). They are computed: a write
    is taken and changes nothing, so the copies succeed and say what they are."""
    store = mounts.new_store()
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("alpha\n")
    m = mounts.mount(store)
    run("rsync", "-aX", str(src) + "/", str(m.path / "in"))         # plain files in
    m.wait_synced()
    run("rsync", "-aX", str(m.path / "in") + "/", str(m.path / "within"))  # mount to mount
    run("cp", "--preserve=xattr", str(m.path / "in" / "a.md"), str(m.path / "cp.md"))
    out = tmp_path / "out"
    run("rsync", "-aX", str(m.path / "in") + "/", str(out))         # out: stamped
    run("rsync", "-aX", str(out) + "/", str(m.path / "back"))       # and back in
    run("tar", "--xattrs", "-cf", str(tmp_path / "a.tar"), "-C", str(out), "a.md")
    proc = run("tar", "--xattrs", "-xf", str(tmp_path / "a.tar"), "-C", str(m.path / "back"))
    assert proc.stderr == ""
    m.wait_synced()
    assert server_memories(server, store) == {p: "alpha\n" for p in (
        "/in/a.md", "/within/a.md", "/cp.md", "/back/a.md")}
    # Each copy says what it is, not what its source was.
    assert os.getxattr(m.path / "within" / "a.md", "user.memfs.memory_id") != os.getxattr(
        m.path / "in" / "a.md", "user.memfs.memory_id")


# -- 6. mv of a directory keeps every memory id --------------------------------------------


@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "never-read"])
def test_mv_directory_keeps_ids(mounts, server, prefetch):
    store = mounts.new_store()
    files = {f"/old/{sub}/f{i}.md": f"{sub} {i}\n" for sub in ("a", "b/c") for i in range(3)}
    files["/other.md"] = "stays\n"
    ids = seed(server, store, files)
    # never-read: no content is cached, and a rename must not need it.
    m = mounts.mount(store, *(() if prefetch else ("--no-prefetch",)))
    run("mv", str(m.path / "old"), str(m.path / "new"))
    assert not (m.path / "old").exists()
    m.wait_synced()

    def moved(p):
        return "/new/" + p[len("/old/"):] if p.startswith("/old/") else p

    assert server_ids(server, store) == {moved(p): mid for p, mid in ids.items()}
    assert server_memories(server, store) == {moved(p): c for p, c in files.items()}
    assert (m.path / "new" / "b" / "c" / "f2.md").read_text() == "b/c 2\n"
    for p, mid in ids.items():
        assert operations(server, store, mid) == (
            ["created", "modified"] if p.startswith("/old/") else ["created"])


def test_swap_two_files_keeps_ids(mounts, server):
    """mv a tmp; mv b a; mv tmp b: a cycle of renames on the server, never-read files."""
    store = mounts.new_store()
    ids = seed(server, store, {"/a.md": "A\n", "/b.md": "B\n"})
    m = mounts.mount(store, "--no-prefetch")
    run("sh", "-c", "mv a.md tmp.md && mv b.md a.md && mv tmp.md b.md", cwd=m.path)
    m.wait_synced()
    assert server_memories(server, store) == {"/a.md": "B\n", "/b.md": "A\n"}
    assert server_ids(server, store) == {"/a.md": ids["/b.md"], "/b.md": ids["/a.md"]}
    assert (m.path / "a.md").read_text() == "B\n"


# -- 7. remote changes show up ------------------------------------------------------------


def test_remote_update_visible_after_sync(mounts, server):
    store = mounts.new_store()
    ids = seed(server, store, {"/r.md": "version one\n", "/gone.md": "bye\n",
                               "/dir/moved.md": "moving\n"})
    m = mounts.mount(store, "--poll-interval", "60")
    f = m.path / "r.md"
    assert f.read_text() == "version one\n"
    with open(f) as fh:  # keep the pages cached
        assert fh.read() == "version one\n"
    client = server.sdk().beta.memory_stores.memories
    client.update(ids["/r.md"], memory_store_id=store, content="version two, longer\n")
    client.create(store, path="/new.md", content="brand new\n")
    client.delete(ids["/gone.md"], memory_store_id=store)
    assert (m.path / "dir" / "moved.md").read_text() == "moving\n"
    client.update(ids["/dir/moved.md"], memory_store_id=store, path="/elsewhere/moved.md")
    m.sync_now()
    wait_for(lambda: f.read_text() == "version two, longer\n")
    assert run("cat", str(f)).stdout == "version two, longer\n"
    assert os.stat(f).st_size == len("version two, longer\n")
    wait_for(lambda: (m.path / "new.md").exists())
    assert (m.path / "new.md").read_text() == "brand new\n"
    wait_for(lambda: not (m.path / "gone.md").exists())
    wait_for(lambda: (m.path / "elsewhere" / "moved.md").exists())
    assert (m.path / "elsewhere" / "moved.md").read_text() == "moving\n"
    assert not (m.path / "dir").exists()  # emptied by the remote rename
    assert sorted(os.listdir(m.path)) == ["elsewhere", "new.md", "r.md"]
    assert os.getxattr(m.path / "elsewhere" / "moved.md",
                       "user.memfs.memory_id").decode() == ids["/dir/moved.md"]


def test_remote_update_visible_by_polling(mounts, server):
    store = mounts.new_store()
    ids = seed(server, store, {"/p.md": "old\n"})
    m = mounts.mount(store)  # poll interval 1 s
    f = m.path / "p.md"
    assert f.read_text() == "old\n"
    server.sdk().beta.memory_stores.memories.update(ids["/p.md"], memory_store_id=store,
                                                     content="new content\n")
    wait_for(lambda: f.read_text() == "new content\n", timeout=30)


@pytest.mark.parametrize("after", ["grown", "shrunk"])
def test_an_append_lands_at_the_end_after_a_remote_change(mounts, server, after):
    """An append (O_APPEND) after another writer's change: the kernel gives a write the
    file's size as it cached it, and with no writeback cache the filesystem must find
    the end itself (libfuse). Before (found by a helper, 6 December) the append went
    at the old size: it overwrote the other writer's line (grown) or left NUL bytes
    before it (shrunk), pushed with a matching precondition, so no conflict said so."""
    store = mounts.new_store()
    ids = seed(server, store, {"/log.md": "one\ntwo\n"})
    m = mounts.mount(store, "--poll-interval", "60")
    f = m.path / "log.md"
    assert os.stat(f).st_size == 8 and f.read_text() == "one\ntwo\n"  # cached by the kernel
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    theirs = "one\ntwo\nTHEIRS\n" if after == "grown" else "1\n"
    server.sdk().beta.memory_stores.memories.update(ids["/log.md"], memory_store_id=store,
                                                     content=theirs)
    m.sync_now()  # applied, and the kernel told
    try:
        os.write(fd, b"mine\n")  # a writer that holds its file open: a log, a shell's
    finally:                     # `exec 3>>f`: the kernel's size is still the old one
        os.close(fd)
    with open(f, "a") as same:  # and a new "a" open, as an agent's file tool appends
        same.write("more\n")
    m.wait_synced()
    assert server_memories(server, store) == {"/log.md": theirs + "mine\nmore\n"}
    assert f.read_text() == theirs + "mine\nmore\n"
    assert m.status()["conflicts"] == []
