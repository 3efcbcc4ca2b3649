"""Live progress on a terminal (a pseudo-terminal here), nothing extra without one:
`memfs unmount`'s flush, a first mount's listing, `memfs status --watch`."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time

from mountutil import MountProc, mount_env, needs_fuse

from memfs.cli.progress import _sum, describe, human_bytes

pytestmark = needs_fuse


def test_describe() -> None:
    assert human_bytes(999) == "999 B" and human_bytes(12_300) == "12.3 kB"
    line = describe({"done": 3, "total": 10, "bytes_done": 2000, "bytes_left": 5000,
                     "error": "offline: connection refused"})
    assert line == "3/10 item(s), 7 left; 2.0 kB done, 5.0 kB left | offline: connection refused"
    assert describe({"label": "listing the store", "done": 0, "total": None}).startswith(
        "listing the store; 0 item(s)")


def test_a_session_roots_stores_summed() -> None:
    a = {"done": 1, "total": 3, "bytes_done": 10, "bytes_left": 20, "error": None}
    b = {"done": 2, "total": 2, "bytes_done": 5, "bytes_left": 0, "error": "offline: x"}
    assert _sum([a, b], 3) == {"done": 3, "total": 5, "bytes_done": 15, "bytes_left": 20,
                               "error": "offline: x", "label": "2 of 3 reporting"}
    assert _sum([a, {"done": 0, "total": None}], 2)["total"] is None


def run_pty(env: dict, *args: str, interrupt_after: float | None = None,
            timeout: float = 90) -> tuple[int, str]:
    """`memfs ARGS` with stdin/stdout/stderr on a pseudo-terminal; (exit status, output)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {**env, "TERM": "xterm-256color"}
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([sys.executable, "-m", "memfs", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out, started, interrupted = b"", time.monotonic(), False
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer has closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elapsed = time.monotonic() - started
            if interrupt_after is not None and not interrupted and elapsed > interrupt_after:
                proc.send_signal(signal.SIGINT)
                interrupted = True
            if elapsed > timeout:
                raise AssertionError(f"memfs {args} hung; output so far:\n{out!r}")
        return proc.wait(timeout=30), out.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_unmount_progress_on_a_terminal_only(server, mounts) -> None:
    store = mounts.new_store("progress")
    expected = {}
    for label in ("tty", "pipe"):
        m = mounts.mount(store, "--write-back-delay", "3600", name=f"mnt-{label}")
        for i in range(12):
            (m.path / f"f{i}.md").write_text(label[0] * 5000)
        server.set_faults(latency=0.4)  # the flush takes a few seconds
        try:
            if label == "tty":
                code, out = run_pty(m.env, "unmount", str(m.path))
                m._wait_pid()
                assert code == 0, out
                assert f"flushing {m.path}" in out
                assert "item(s)" in out and "kB left" in out
                assert f"unmounted {m.path}: pushed 12 change(s), 0 left" in out
            else:
                proc = m.memfs("unmount", str(m.path))
                m._wait_pid()
                expected = proc
        finally:
            server.clear_faults()
        for i in range(12):
            (m.path / f"f{i}.md").unlink(missing_ok=True)  # unmounted: the bare directory
    assert expected.stdout == f"unmounted {mounts.tmp_path / 'mnt-pipe'}: pushed 12 change(s)," \
        " 0 left\n"
    assert expected.stderr == ""


def test_first_mount_progress(server, mounts, tmp_path) -> None:
    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Big Store").id
    for i in range(5):
        sdk.beta.memory_stores.memories.create(store, path=f"/d{i}/m.md", content="y" * 3000)
    env = mount_env(server, tmp_path)
    for label in ("tty", "pipe"):
        path = tmp_path / f"first-{label}"
        path.mkdir()
        m = MountProc(path, store, env, ())
        mounts.made.append(m)  # cleaned up (unmounted, daemon killed) even on failure
        server.set_faults(latency=0.5)  # the first listing takes a few requests of 0.5 s
        try:
            args = ("mount", store, str(path), "--cache-dir", str(tmp_path / f"cache-{label}"))
            if label == "tty":
                code, out = run_pty(env, *args)
                assert code == 0, out
                assert f"mounting Big Store at {path}" in out
                assert "listing the store" in out or "fetching" in out
                assert f"mounted Big Store ({store}) at {path}" in out
            else:
                proc = m.memfs(*args)
                assert proc.stdout == f"mounted Big Store ({store}) at {path}\n"
                assert proc.stderr == ""
        finally:
            server.clear_faults()
        reg = m.registry()
        m.pid = int(reg["pid"])
        assert sorted(p.name for p in path.iterdir()) == [f"d{i}" for i in range(5)]
        m.unmount()


def test_status_watch(server, mounts) -> None:
    m = mounts.mount(mounts.new_store("watched"))
    code, out = run_pty(m.env, "status", str(m.path), "--watch", "--interval", "0.3",
                        interrupt_after=2.5)
    assert code == 0, out
    assert out.count(f"{m.path}: store watched ({m.store_id})") >= 3, out  # redrawn several times
    proc = subprocess.Popen([sys.executable, "-m", "memfs", "status", str(m.path), "--watch",
                             "--interval", "0.3"], env=m.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and stderr == ""
    once = m.memfs("status", str(m.path)).stdout
    blocks = stdout.strip().split("\n\n")
    assert len(blocks) >= 2
    assert blocks[0].splitlines()[0] == once.splitlines()[0]  # the same report, repeated
    assert "\x1b" not in stdout


def test_unmount_progress_shows_the_error_offline(server, mounts) -> None:
    m = mounts.mount(mounts.new_store("offline flush"), "--write-back-delay", "3600")
    (m.path / "kept.md").write_text("z" * 3000)
    server.set_faults(error_rate=1.0)
    try:
        code, out = run_pty(m.env, "unmount", str(m.path), "--timeout", "3")
        m._wait_pid()
    finally:
        server.clear_faults()
    assert code == 3, out  # unmounted, one change kept for the next mount
    assert "offline:" in out  # the current error, live
    assert "pushed 0 change(s), 1 left" in out


def test_session_root_progress(server, mounts, tmp_path) -> None:
    """`memfs mount --all` and its unmount on a terminal: progress summed over the stores."""
    from mountutil import GroupMountProc

    sdk = server.sdk()
    for name in ("One", "Two"):
        sid = sdk.beta.memory_stores.create(name=name).id
        for i in range(3):
            sdk.beta.memory_stores.memories.create(sid, path=f"/d{i}.md", content="z" * 3000)
    env = mount_env(server, tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    m = GroupMountProc(root, "", env, ())
    mounts.made.append(m)
    server.set_faults(latency=0.5)  # the first listings take a few requests of 0.5 s
    try:
        code, out = run_pty(env, "mount", "--all", str(root), "--write-back-delay", "3600")
    finally:
        server.clear_faults()
    assert code == 0, out
    assert f"mounting 2 store(s) at {root}" in out
    assert f"mounted every store at {root}: one, two" in out
    m.pid = int(m.registry()["pid"])
    for name in ("one", "two"):
        for i in range(4):
            (root / name / f"new{i}.md").write_text("w" * 4000)
    server.set_faults(latency=0.4)  # the flush takes a few seconds
    try:
        code, out = run_pty(env, "unmount", str(root))
    finally:
        server.clear_faults()
    m._wait_pid()
    assert code == 0, out
    assert f"flushing {root}" in out and "item(s)" in out
    assert f"unmounted {root}: pushed 8 change(s), 0 left" in out
