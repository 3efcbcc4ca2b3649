"""The main job with no account: `memfs` starts and uses the embedded local server."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx
import pytest
import trio
from mountutil import needs_fuse

from memfs.local.titles import is_serve_of


def _memfs(env, *args, check=True):
    proc = subprocess.run([sys.executable, "-m", "memfs", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture
def local_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    info = tmp_path / "data" / "memfs" / "local-server.json"
    try:
        yield env
    finally:
        if info.exists():  # end the server this test started, by its pid
            try:
                os.kill(json.loads(info.read_text())["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass


@needs_fuse
def test_mount_on_the_embedded_server(local_env, tmp_path):
    store = _memfs(local_env, "stores", "create", "demo").stdout.strip().splitlines()[-1]
    data = tmp_path / "data" / "memfs"
    info = json.loads((data / "local-server.json").read_text())
    key_file = data / "local-server.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    key = key_file.read_text().strip()

    # Loopback is shared by every local user: without the key, nothing is readable.
    r = httpx.get(f"{info['url']}/v1/memory_stores",
                  headers={"anthropic-beta": "agent-memory-2026-07-22"})
    assert r.status_code == 401

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    _memfs(local_env, "mount", store, str(mnt))
    try:
        (mnt / "notes").mkdir()
        (mnt / "notes" / "a.md").write_text("remember this\n")
        out = _memfs(local_env, "unmount", str(mnt)).stdout
        assert "0 left" in out
    finally:
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)

    sdk = anthropic.Anthropic(base_url=info["url"], api_key=key, max_retries=0)
    memories = {m.path: m.content for m in
                sdk.beta.memory_stores.memories.list(store, view="full", limit=20)}
    assert memories == {"/notes/a.md": "remember this\n"}
    # The key never shows in the server's command line.
    cmdline = Path(f"/proc/{info['pid']}/cmdline").read_bytes()
    assert key.encode() not in cmdline
    # A second command reuses the running server.
    listed = _memfs(local_env, "stores", "list", "--json").stdout
    assert [s["id"] for s in json.loads(listed)] == [store]
    assert json.loads((data / "local-server.json").read_text())["pid"] == info["pid"]


@needs_fuse
async def test_mcp_over_a_mount_of_the_embedded_server(local_env, tmp_path):
    """`memfs mcp --mount` on a mount of the embedded server (the README's main job)
    talks to that server with its key: the store's name, and a change that lands.
    (It took the mount's URL for a configured one and sent no key: 401 on both.)"""
    from test_mcp import call, stdio_session

    store = _memfs(local_env, "stores", "create", "Team Notes").stdout.strip().splitlines()[-1]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    _memfs(local_env, "mount", store, str(mnt), "--poll-interval", "3600")
    try:
        # The store named by its slug, as without --mount (its name from the daemon).
        async with stdio_session(local_env, "--mount", str(mnt), "team-notes") as session:
            assert await call(session, {"command": "create", "path": "/memories/a.md",
                                        "file_text": "from the agent\n"}) \
                == ("ok", "File created successfully at: /memories/a.md")
            uris = [r.uri for r in (await session.list_resources()).resources]
        assert uris == ["memory://team-notes/a.md"]
        assert "0 left" in _memfs(local_env, "unmount", str(mnt)).stdout
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
    data = tmp_path / "data" / "memfs"
    info = json.loads((data / "local-server.json").read_text())
    key = (data / "local-server.key").read_text().strip()
    sdk = anthropic.Anthropic(base_url=info["url"], api_key=key, max_retries=0)
    assert [(m.path, m.content) for m in sdk.beta.memory_stores.memories.list(
        store, view="full", limit=20)] == [("/a.md", "from the agent\n")]


async def test_long_lived_commands_follow_the_embedded_server_to_its_new_port(local_env,
                                                                            tmp_path):
    """The embedded server picks a free port at each start. A mount follows it; so do the
    commands that outlive one request (`memfs mcp`, `memfs tool`, `memfs watch STORE`):
    they kept its old port and failed ('not reachable') until restarted."""
    from test_mcp import call, stdio_session
    from test_watch import Watcher

    store = _memfs(local_env, "stores", "create", "Followed").stdout.strip().splitlines()[-1]
    data = tmp_path / "data" / "memfs"
    first = json.loads((data / "local-server.json").read_text())["url"]
    tool = subprocess.Popen([sys.executable, "-m", "memfs", "tool", store], env=local_env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    watch = Watcher(local_env, "--json", "--poll-interval", "0.2", store)

    def run_tool(path: str) -> dict:
        assert tool.stdin is not None and tool.stdout is not None
        tool.stdin.write(json.dumps({"command": "create", "path": f"/memories{path}",
                                     "file_text": "x\n"}) + "\n")
        tool.stdin.flush()
        return json.loads(tool.stdout.readline())

    try:
        async with stdio_session(local_env, store) as session:
            assert (await call(session, {"command": "create", "path": "/memories/a.md",
                                         "file_text": "before\n"}))[0] == "ok"
            assert "ok" in await trio.to_thread.run_sync(run_tool, "/b.md")
            watch.wait_started()
            now = first
            for _ in range(5):  # a new port (the same one again is unlikely, not impossible)
                _memfs(local_env, "serve", "stop")
                _memfs(local_env, "stores", "list")
                now = json.loads((data / "local-server.json").read_text())["url"]
                if now != first:
                    break
            assert now != first
            assert await call(session, {"command": "create", "path": "/memories/c.md",
                                        "file_text": "after\n"}) \
                == ("ok", "File created successfully at: /memories/c.md")
            assert "ok" in await trio.to_thread.run_sync(run_tool, "/d.md")
            seen: set[str] = set()
            while not {"/c.md", "/d.md"} <= seen:  # a.md and b.md first, if it saw them
                seen.add((await trio.to_thread.run_sync(watch.next))["path"])
            assert seen <= {"/a.md", "/b.md", "/c.md", "/d.md"}
    finally:
        tool.kill()
        tool.wait()
        watch.stop()
    key = (data / "local-server.key").read_text().strip()
    sdk = anthropic.Anthropic(base_url=now, api_key=key, max_retries=0)
    assert sorted(m.path for m in sdk.beta.memory_stores.memories.list(store, limit=20)) == [
        "/a.md", "/b.md", "/c.md", "/d.md"]


# ----------------------------------------------------------------------------- lifecycle


def _servers_on(db: Path) -> list[int]:
    """Pids of `memfs serve` processes on this database."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmdline = (p / "cmdline").read_bytes()
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if is_serve_of(cmdline, str(db)) and state != "Z":  # its title (or argv)
            pids.append(int(p.name))
    return pids


def test_racing_starts_start_one_server(local_env, tmp_path):
    procs = [subprocess.Popen([sys.executable, "-m", "memfs", "stores", "list", "--json"],
                              env=local_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out) == []
    data = tmp_path / "data" / "memfs"
    assert _servers_on(data / "local.db") == [json.loads(
        (data / "local-server.json").read_text())["pid"]]


def test_health_check_cannot_be_fooled(local_env, tmp_path):
    """A stranger on the recorded port answers health 200 to everything: memfs must
    not take it for its server, and must never send it the key."""
    import http.server
    import threading

    seen: list[dict] = []

    class Impostor(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(dict(self.headers))
            body = b'{"ok": true, "server_id": "fake", "proof": "00", "data": []}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    fake = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Impostor)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    try:
        data = tmp_path / "data" / "memfs"
        data.mkdir(parents=True, mode=0o700)
        fake_url = f"http://127.0.0.1:{fake.server_address[1]}"
        (data / "local-server.json").write_text(json.dumps({"url": fake_url, "pid": 1}))
        key = "memfs-local-the-real-key"
        (data / "local-server.key").write_text(key + "\n")
        out = _memfs(local_env, "stores", "list", "--json").stdout
        assert json.loads(out) == []
        info = json.loads((data / "local-server.json").read_text())
        assert info["url"] != fake_url  # a real server was started instead
        assert seen, "the impostor was never even asked"
        for headers in seen:
            assert key not in json.dumps(headers)
            assert "x-api-key" not in {k.lower() for k in headers}
    finally:
        fake.shutdown()
        fake.server_close()


def test_serve_stop_and_status(local_env, tmp_path):
    assert json.loads(_memfs(local_env, "serve", "status", "--json").stdout)["running"] is False
    assert "not running" in _memfs(local_env, "serve", "stop").stdout
    _memfs(local_env, "stores", "create", "s")
    data = tmp_path / "data" / "memfs"
    st = json.loads(_memfs(local_env, "serve", "status", "--json").stdout)
    info = json.loads((data / "local-server.json").read_text())
    assert st["running"] is True and st["pid"] == info["pid"] and st["server_id"]
    assert st["url"] == info["url"]
    # Its log is the rotating one, private.
    assert stat.S_IMODE((data / "local-server.log").stat().st_mode) == 0o600
    # `ps` shows what it is (memfs/local/titles.py): its database and URL, never its key.
    title = Path(f"/proc/{info['pid']}/cmdline").read_bytes().rstrip(b"\0").decode()
    assert title == f"memfs serve: {data / 'local.db'} on {info['url']}"
    out = _memfs(local_env, "serve", "stop").stdout
    assert f"stopped (pid {info['pid']})" in out
    assert _servers_on(data / "local.db") == []
    assert json.loads(_memfs(local_env, "serve", "status", "--json").stdout)["running"] is False
    # The next command starts it again, on the same database (same server id).
    _memfs(local_env, "stores", "list")
    st2 = json.loads(_memfs(local_env, "serve", "status", "--json").stdout)
    assert st2["running"] and st2["server_id"] == st["server_id"]


def test_stop_does_not_signal_a_stranger(local_env, tmp_path):
    """A record whose pid now belongs to another program is dropped, not killed."""
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        data = tmp_path / "data" / "memfs"
        data.mkdir(parents=True, mode=0o700)
        (data / "local-server.json").write_text(json.dumps(
            {"url": "http://127.0.0.1:9", "pid": stranger.pid}))
        out = _memfs(local_env, "serve", "stop").stdout
        assert "stale" in out and stranger.poll() is None
        assert not (data / "local-server.json").exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_a_recorded_server_without_the_proof_is_replaced(local_env, tmp_path):
    """Our own server that cannot answer the challenge (an older memfs, started
    before the proof existed) is stopped, not left running beside the new one."""
    data = tmp_path / "data" / "memfs"
    data.mkdir(parents=True, mode=0o700)
    env = {k: v for k, v in local_env.items() if k != "MEMFS_SERVE_API_KEY"}
    old = subprocess.Popen([sys.executable, "-m", "memfs", "serve", "--db",
                            str(data / "local.db"), "--port", "0"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        url = old.stdout.readline().decode().split("listening on ", 1)[1].strip()
        (data / "local-server.json").write_text(json.dumps({"url": url, "pid": old.pid}))
        _memfs(local_env, "stores", "list")
        assert old.wait(timeout=15) == 0  # stopped gracefully
        info = json.loads((data / "local-server.json").read_text())
        assert info["pid"] != old.pid and info["url"] != url
        assert _servers_on(data / "local.db") == [info["pid"]]
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()
