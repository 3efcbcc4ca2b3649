"""Real mounts for tests: `memfs mount` as a user runs it, cleaned up even on failure.

    m = mount_store(server, tmp_path, store_id, "--write-back-delay", "0.1")
    (m.path / "a.md").write_text("hi")
    m.wait_synced()           # until the daemon reports nothing pending
    m.unmount()               # `memfs unmount`; returns its stdout

Every mount is unmounted (`memfs unmount`, then `fusermount3 -u`, then `-uz`)
and its daemon ended by pid in `cleanup()`; the `mounts` fixture in
conftest-style use calls it for every mount a test made.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from memfs.local.pids import wait_gone

needs_fuse = pytest.mark.skipif(
    not os.path.exists("/dev/fuse") or os.geteuid() != 0,
    reason="real mounts need /dev/fuse and root",
)


def is_mounted(path: pathlib.Path) -> bool:
    """Whether path is a mountpoint now (/proc/mounts writes a space as \\040)."""
    real = str(path)
    with open("/proc/mounts") as f:
        return any(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)),
                          line.split()[1]) == real for line in f)


@dataclass
class MountProc:
    path: pathlib.Path
    store_id: str
    env: dict
    args: tuple
    pid: int | None = None
    state_dir: pathlib.Path | None = None
    outputs: list = field(default_factory=list)

    def memfs(self, *args: str, check: bool = True,
              timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "memfs", *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout)
        self.outputs.append(proc)
        if check and proc.returncode != 0:
            raise AssertionError(f"memfs {' '.join(args)} failed ({proc.returncode}):\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc

    def mount(self) -> subprocess.CompletedProcess:
        proc = self.memfs("mount", self.store_id, str(self.path), *self.args)
        reg = self.registry()
        self.pid, self.state_dir = int(reg["pid"]), pathlib.Path(reg["state_dir"])
        return proc

    def registry(self) -> dict:
        reg_dir = pathlib.Path(self.env["XDG_CACHE_HOME"]) / "memfs" / "mounts"
        for f in reg_dir.glob("*.json"):
            info = json.loads(f.read_text())
            if info["mountpoint"] == str(self.path):
                return info
        raise AssertionError(f"no registry entry for {self.path}")

    def status(self) -> dict:
        return json.loads(self.memfs("status", str(self.path), "--json").stdout)

    def live_status(self) -> dict:
        """What `status()` shows, asked of the running daemon on its control socket as
        `memfs status` asks it, without starting a process per poll (the command's own
        output is tested where it is the subject); `status()` when no daemon answers."""
        from memfs.local import control

        if self.state_dir is not None:
            try:
                return control.request(self.state_dir, {"cmd": "status"})["status"]
            except (OSError, ValueError, KeyError):
                pass
        return self.status()

    def pending_total(self) -> int:
        p = self.live_status()["pending"]
        return sum(len(p[k]) for k in ("creates", "updates", "renames", "deletes",
                                        "unconfirmed"))

    def wait_synced(self, timeout: float = 30.0, *, deletes: bool = True) -> None:
        """Until nothing is pending (optionally ignoring deletes still in their delay)."""
        deadline = time.monotonic() + timeout
        while True:
            p = self.live_status()["pending"]
            kinds = ("creates", "updates", "renames", "unconfirmed") + (
                ("deletes",) if deletes else ())
            if not any(p[k] for k in kinds):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"still pending after {timeout}s: {p}")
            time.sleep(0.1)

    def sync_now(self, *, full: bool = False) -> None:
        """Ask the daemon for an immediate reconcile pass (remote changes): a feed poll,
        or with `full` a full listing."""
        from memfs.local import control

        assert self.state_dir is not None
        reply = control.request(self.state_dir, {"cmd": "sync", "full": full}, timeout=30)
        assert reply.get("ok"), reply

    def unmount(self, *args: str, kept: bool | None = False) -> str:
        """`memfs unmount`; `kept`: changes are expected to stay local (exit status 3);
        None: either, as its output says (status 3 exactly when it names something kept
        here, not on the server)."""
        proc = self.memfs("unmount", str(self.path), *args, check=kept is False)
        if kept is None:
            assert proc.returncode == (3 if "NOT on the server" in proc.stdout else 0), (
                proc.returncode, proc.stdout, proc.stderr)
        elif kept:
            assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
        self._wait_pid()
        return proc.stdout

    def kill9(self) -> None:
        """Simulate a crash: SIGKILL the daemon, then clear the dead mount."""
        self._sigkill()
        subprocess.run(["fusermount3", "-uz", str(self.path)], capture_output=True)

    def _sigkill(self) -> None:
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._wait_pid()

    def _wait_pid(self, timeout: float = 20.0) -> None:
        if self.pid:
            wait_gone(self.pid, timeout)

    def cleanup(self) -> None:
        if is_mounted(self.path):
            try:
                self.memfs("unmount", str(self.path), "--timeout", "5", check=False, timeout=60)
            except subprocess.TimeoutExpired:
                pass
        for flags in ("-u", "-uz"):
            if is_mounted(self.path):
                subprocess.run(["fusermount3", flags, str(self.path)], capture_output=True)
        self._sigkill()


@dataclass
class GroupMountProc(MountProc):
    """A session root: `memfs mount --session ID ROOT` or `--all ROOT` (store_id holds
    the selecting flags, e.g. ("--session", sid))."""

    select: tuple = ()

    def mount(self) -> subprocess.CompletedProcess:
        proc = self.memfs("mount", *self.select, str(self.path), *self.args)
        reg = self.registry()
        self.pid, self.state_dir = int(reg["pid"]), pathlib.Path(reg["state_dir"])
        return proc

    def pending_total(self) -> int:
        total = 0
        for store in self.live_status()["stores"]:
            p = store["pending"]
            total += sum(len(p[k]) for k in ("creates", "updates", "renames", "deletes",
                                              "unconfirmed"))
        return total

    def wait_synced(self, timeout: float = 30.0, *, deletes: bool = True) -> None:
        deadline = time.monotonic() + timeout
        kinds = ("creates", "updates", "renames", "unconfirmed") + (
            ("deletes",) if deletes else ())
        while True:
            left = [(s["name"], k) for s in self.live_status()["stores"]
                    for k in kinds if s["pending"][k]]
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"still pending after {timeout}s: {left}")
            time.sleep(0.1)


def refuses_writes(directory: pathlib.Path, name: str = "probe.md") -> bool:
    """Whether a write in directory gets EROFS (a store turned read-only); a probe the
    write made is removed, unless the store turned read-only before its unlink."""
    probe = directory / name
    try:
        probe.write_text("x\n")
    except OSError as exc:
        assert exc.errno == errno.EROFS, exc
        return True
    try:
        probe.unlink()
    except OSError as exc:  # it turned read-only between the write and the unlink
        assert exc.errno == errno.EROFS, exc
        return True
    return False


def errno_of(fn) -> int:
    """The errno of the OSError fn() raises (fails the test when it raises none)."""
    try:
        fn()
    except OSError as exc:
        return exc.errno
    raise AssertionError("no error")


def mount_env(server, tmp_path: pathlib.Path) -> dict:
    env = dict(os.environ)
    env.update({
        "ANTHROPIC_BASE_URL": server.base_url,
        "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "MEMFS_LOG_LEVEL": "DEBUG",
    })
    if server.api_key:
        env["ANTHROPIC_API_KEY"] = server.api_key
    else:
        env.pop("ANTHROPIC_API_KEY", None)
    return env


class Mounts:
    """Makes mounts for one test and cleans every one of them up."""

    def __init__(self, server, tmp_path: pathlib.Path) -> None:
        self.server, self.tmp_path, self.made = server, tmp_path, []

    def new_store(self, name: str = "test") -> str:
        return self.server.sdk().beta.memory_stores.create(name=name).id

    def mount(self, store_id: str, *args: str, name: str = "mnt",
              defaults: bool = True) -> MountProc:
        path = self.tmp_path / name
        path.mkdir(exist_ok=True)
        if defaults:
            args = ("--write-back-delay", "0.1", "--poll-interval", "1",
                    "--delete-delay", "1", *args)
        m = MountProc(path, store_id, mount_env(self.server, self.tmp_path), args)
        self.made.append(m)
        m.mount()
        return m

    def mount_group(self, *select: str, args: tuple = (), name: str = "root",
                    defaults: bool = True, env: dict | None = None,
                    path: pathlib.Path | None = None) -> GroupMountProc:
        """`memfs mount <select...> ROOT <args>`, e.g. select=("--session", sid)."""
        path = path or self.tmp_path / name
        if defaults:
            args = ("--write-back-delay", "0.1", "--poll-interval", "1",
                    "--delete-delay", "1", *args)
        m = GroupMountProc(path, "", env or mount_env(self.server, self.tmp_path), args,
                           select=select)
        self.made.append(m)
        m.mount()
        return m

    def cleanup(self) -> None:
        for m in self.made:
            m.cleanup()


@pytest.fixture
def mounts(server, tmp_path):
    ms = Mounts(server, tmp_path)
    try:
        yield ms
    finally:
        ms.cleanup()


def server_memories(server, store_id: str) -> dict[str, str]:
    """{path: content} of every memory on the server, via the official SDK."""
    client = server.sdk()
    out = {}
    for m in client.beta.memory_stores.memories.list(store_id, view="full", limit=20):
        if m.type == "memory":
            out[m.path] = m.content
    return out


def strand_under_url_key(mounts: Mounts, server, store_id: str,
                         ) -> tuple[pathlib.Path, pathlib.Path]:
    """Leave store_id's state, with one pending create (/b.md = "pending\\n"), under the
    URL-derived key, as a memfs from before server ids did: a plain mount, a write it
    never pushes (its daemon dies), its state directory moved. Returns (that old
    directory, the one the current key names, now gone)."""
    from memfs.state import statedir

    m = mounts.mount(store_id, "--write-back-delay", "600", name=f"plain-{store_id}")
    (m.path / "b.md").write_text("pending\n")
    assert m.pending_total() == 1
    m.kill9()
    assert m.state_dir is not None
    old_dir = m.state_dir.parent.parent / statedir.server_id(server.base_url) / store_id
    old_dir.parent.mkdir(mode=0o700, exist_ok=True)
    os.rename(m.state_dir, old_dir)
    return old_dir, m.state_dir
