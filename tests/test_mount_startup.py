"""How `memfs mount` starts its daemon: before the store is looked up (the two
processes import side by side), its configuration and API key through a pipe.

A mount that fails leaves no daemon behind; a daemon that gets no configuration
exits having touched nothing; the key never reaches the daemon's environment;
`memfs mount` imports neither pyfuse3 nor, before the daemon is started, trio or
httpx; `memfs status` and `unmount` import neither trio nor httpx at all.
"""

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from mountutil import is_mounted, mount_env, mounts, needs_fuse  # noqa: F401

REPO = pathlib.Path(__file__).resolve().parent.parent


def daemons_of(env: dict) -> set[int]:
    """Live `memfs.mount.daemon` processes started with this environment's cache root."""
    mark = f"XDG_CACHE_HOME={env['XDG_CACHE_HOME']}".encode()
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"memfs.mount.daemon" not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.add(int(pid))
    return found


def mount_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memfs", "mount", *args], env=env,
                          capture_output=True, text=True, timeout=90)


@needs_fuse
def test_a_failed_mount_leaves_no_daemon(mounts, server, tmp_path):
    store = mounts.new_store()
    env = mount_env(server, tmp_path)
    mp = tmp_path / "mp"
    mp.mkdir()
    cases = [
        (env, "memstore_doesnotexist", "unknown store"),
        (dict(env, ANTHROPIC_API_KEY="wrong-key"), store, "bad credentials"),
        (dict(env, ANTHROPIC_BASE_URL="http://127.0.0.1:1"), store, "cannot reach"),
    ]
    for case_env, what, words in cases:
        proc = mount_cli(case_env, what, str(mp))
        assert proc.returncode == 1 and words in proc.stderr, proc
        assert "Traceback" not in proc.stderr, proc.stderr
        assert not is_mounted(mp)
        assert daemons_of(env) == set(), words  # the daemon started early is gone
    assert not (tmp_path / "xdg-cache" / "memfs" / "mounts").exists() or \
        not list((tmp_path / "xdg-cache" / "memfs" / "mounts").glob("*.json"))


def test_memfs_mount_starts_its_daemon_before_click_loads_and_uses_that_one(tmp_path):
    """`memfs mount` starts the daemon first thing (before click and the CLI's
    modules: about 30 ms sooner), `cli/mount.py` takes that process rather than starting
    another, and a mount that fails before handing it over leaves no daemon."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(REPO))
    env.pop("_MEMFS_COMPLETE", None)
    code = ("import sys\n"
            "from memfs.cli import spawn\n"
            "real = spawn.start\n"
            "def start():\n"
            "    print('start; click loaded:', 'click' in sys.modules, flush=True)\n"
            "    return real()\n"
            "spawn.start = start\n"
            "sys.argv = ['memfs', *sys.argv[1:]]\n"
            "spawn.main()\n")
    missing = tmp_path / "no-such-dir"
    for args, status, words in (
        (["mount", "memstore_x", str(missing)], 1, "does not exist"),  # cli/mount.py refuses
        (["mount", "memstore_x"], 2, "give STORE and MOUNTPOINT"),  # a usage error
    ):
        proc = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == status and words in proc.stderr, proc
        assert proc.stdout == "start; click loaded: False\n", proc.stdout  # once, early
        assert daemons_of(env) == set(), args  # killed, not left to time out
    for args in (["mount", "--help"], ["mount", "-f", "s", "m"], ["status"], []):
        assert not spawn_wanted(args), args
    assert spawn_wanted(["mount", "memstore_x", "/mnt/m", "--read-only"])


def spawn_wanted(args: list[str]) -> bool:
    from memfs.cli import spawn

    return spawn.wants_early_daemon(args)


@needs_fuse
def test_the_api_key_reaches_the_daemon_through_the_pipe_only(mounts, server):
    assert server.api_key
    store = mounts.new_store()
    m = mounts.mount(store)
    with open(f"/proc/{m.pid}/environ", "rb") as f:
        environ = f.read()
    assert server.api_key.encode() not in environ
    assert b"ANTHROPIC_API_KEY=" not in environ
    with open(f"/proc/{m.pid}/cmdline", "rb") as f:
        assert server.api_key.encode() not in f.read()
    (m.path / "a.md").write_text("the daemon holds the key\n")
    m.wait_synced()
    assert server.sdk().beta.memory_stores.memories.list(store).data[0].path == "/a.md"
    m.unmount()


def test_a_daemon_given_no_configuration_exits_untouched(tmp_path):
    config_r, config_w = os.pipe()
    ready_r, ready_w = os.pipe()
    env = dict(os.environ, MEMFS_CONFIG_FD=str(config_r), MEMFS_READY_FD=str(ready_w),
               XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "memfs.mount.daemon"], env=env,
                            pass_fds=(config_r, ready_w), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    os.close(config_r)
    os.close(ready_w)
    os.close(config_w)  # `memfs mount` gave up: end of file, no configuration
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == b"" and err == b""
    with os.fdopen(ready_r, "rb") as ready:
        assert ready.read() == b""  # neither READY nor ERROR
    assert not (tmp_path / "cache").exists()


def test_mount_starts_its_daemon_before_importing_trio_or_httpx(tmp_path):
    """`memfs.cli.main` and the mount command import no network or FUSE library: the daemon
    process is started before the store lookup pulls trio and httpx in."""
    code = ("import sys, memfs.cli.main, memfs.cli.mount\n"
            "heavy = {'trio', 'httpx', 'pyfuse3', 'anyio'} & set(sys.modules)\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@needs_fuse
def test_status_and_unmount_talk_to_the_daemon_without_trio(mounts):
    """The control socket's client is the standard library: `memfs status` and `memfs
    unmount` on a live mount import neither trio nor httpx (trio alone took half of
    `memfs status`'s 0.3 s)."""
    m = mounts.mount(mounts.new_store())
    env = dict(m.env, PYTHONPROFILEIMPORTTIME="1")
    for args in (("status", str(m.path), "--json"), ("unmount", str(m.path))):
        proc = subprocess.run([sys.executable, "-m", "memfs", *args], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
        assert "memfs.local.control" in imported, args  # it did ask the daemon
        assert not {"trio", "httpx", "anyio"} & imported, args
        if args[0] == "status":  # the daemon's own report, not the offline one
            assert json.loads(proc.stdout)["running"] is True
    m._wait_pid()
    assert not is_mounted(m.path)


def test_every_command_is_listed_and_runs_lazily():
    out = subprocess.run([sys.executable, "-m", "memfs", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for command in ("conflicts", "history", "mount", "restore", "serve", "sessions", "show",
                    "status", "stores", "tool", "unmount"):
        assert f"\n  {command} " in out.stdout, (command, out.stdout)
    sub = subprocess.run([sys.executable, "-m", "memfs", "history", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0 and "memfs history [OPTIONS]" in sub.stdout, sub


def test_a_daemon_that_cannot_start_says_why(tmp_path, monkeypatch):
    """Not only a locked store: any failure while the daemon builds its stores reaches
    `memfs mount` as an ERROR line naming it, and daemon.log holds the traceback."""
    import logging

    from memfs.core.mountconfig import MountConfig
    from memfs.mount import daemon

    def broken(*args, **kwargs):
        raise RuntimeError("state.db is not what it should be")

    monkeypatch.setattr(daemon, "MountDaemon", broken)
    cfg = MountConfig(store_id="memstore_x", mountpoint=str(tmp_path / "mnt"),
                      base_url="http://127.0.0.1:9", state_dir=str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    r, w = os.pipe()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    umask = os.umask(0o022)  # run() makes the process's umask private: give it back after
    os.umask(umask)
    try:
        assert daemon.run(cfg, foreground=False, api_key=None, ready_fd=w) == 1
    finally:
        os.umask(umask)
        for h in root.handlers:
            if h not in handlers:
                h.close()
        root.handlers[:], root.level = handlers, level
    line = os.read(r, 4096).decode()
    os.close(r)
    assert line.startswith("ERROR the daemon could not start: RuntimeError: state.db is not")
    assert "daemon.log" in line
    log = (tmp_path / "state" / "daemon.log").read_text()
    assert "the daemon could not start" in log and "Traceback" in log


@needs_fuse
def test_a_folder_named_memfs_in_the_current_directory_does_not_matter(mounts, server, tmp_path):
    """`memfs mount` from a directory holding a folder named `memfs` (an empty one: a
    namespace package Python would import instead of memfs) mounts all the same: every
    process memfs starts runs `python -P`, without the current directory on its path."""
    import shutil

    cwd = tmp_path / "work"
    (cwd / "memfs").mkdir(parents=True)
    store = mounts.new_store()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = mount_env(server, tmp_path)
    cli = shutil.which("memfs", path=str(pathlib.Path(sys.executable).parent))
    assert cli, "the memfs console script is installed beside this Python"
    try:
        done = subprocess.run([cli, "mount", store, str(mnt), "--write-back-delay", "0"],
                              env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        (mnt / "a.md").write_text("from a folder with a memfs/ in it\n")
        assert (mnt / "a.md").read_text() == "from a folder with a memfs/ in it\n"
        out = subprocess.run([cli, "unmount", str(mnt)], env=env, cwd=cwd,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "0 left" in out.stdout
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
    assert server.sdk().beta.memory_stores.memories.list(store).data[0].path == "/a.md"


@needs_fuse
def test_a_first_listing_that_fails_is_said(mounts, server):
    """A store never mounted whose first listing fails (the server died or refused it
    after the store was looked up) mounts empty, and says so: `memfs mount` promises
    the tree is there when it returns. Before (found by a helper, 6 December), it
    printed "mounted" over an empty tree in silence. The tree comes once the server
    answers."""
    from gate import Gate
    from synchelpers import sdk_create, wait_for

    store = mounts.new_store("Listed Late")
    sdk_create(server, store, "/a.md", "there\n")
    with Gate(server) as gate:
        gate.refuse("GET", rf"/v1/memory_stores/{store}/memories$", 503)
        m = mounts.mount(store, "--poll-interval", "0.2")
        err = m.outputs[-1].stderr
        assert "memfs: warning: Listed Late: its first listing failed (" in err, err
        assert "the mount shows what the cache holds until the server answers" in err, err
        assert not (m.path / "a.md").exists()
    wait_for(lambda: (m.path / "a.md").exists(), what="the tree once the server answers")
    assert (m.path / "a.md").read_text() == "there\n"
    m.unmount()
