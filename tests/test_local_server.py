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
from mountutil import needs_fuse


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
