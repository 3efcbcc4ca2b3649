"""Helpers for the sync tests: the SDK as the second writer, polling, conflicts."""

from __future__ import annotations

import json
import os
import subprocess
import time

from memfs.local import control

#: Mount options under which nothing moves but what a test asks for (`flush`, `sync_now`):
#: background polls, the write-back delay and the delete delay are an hour.
QUIET = ("--poll-interval", "3600", "--write-back-delay", "3600", "--delete-delay", "3600")


def wait_for(pred, timeout: float = 30.0, what: str = "condition", interval: float = 0.1):
    """Poll pred() until it returns a truthy value (returned); never asserts on time."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = pred()
        except (OSError, AssertionError, ValueError,
                subprocess.CalledProcessError) as exc:  # mid-change reads
            last = exc
            value = None
        else:
            value = last
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
        time.sleep(interval)


def cat(path) -> str:
    """Read a file the way a user does: `cat` in a fresh process."""
    return subprocess.run(["cat", str(path)], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def xattr(path, name: str = "user.memfs.state") -> str | None:
    try:
        return os.getxattr(str(path), name).decode()
    except OSError:
        return None


def sdk_by_path(server, store: str) -> dict:
    """{path: memory} (view=basic) via the official SDK."""
    out = {}
    for m in server.sdk().beta.memory_stores.memories.list(store, view="basic", limit=100):
        if m.type == "memory":
            out[m.path] = m
    return out


def sdk_create(server, store: str, path: str, content: str):
    return server.sdk().beta.memory_stores.memories.create(store, path=path, content=content)


def sdk_update(server, store: str, memory_id: str, **fields):
    return server.sdk().beta.memory_stores.memories.update(
        memory_id, memory_store_id=store, **fields)


def sdk_delete(server, store: str, memory_id: str):
    return server.sdk().beta.memory_stores.memories.delete(memory_id, memory_store_id=store)


def versions(server, store: str, memory_id: str | None = None) -> list:
    kw = {"memory_id": memory_id} if memory_id else {}
    return list(server.sdk().beta.memory_stores.memory_versions.list(
        store, view="full", limit=100, **kw))


def flush(m, timeout: float = 30.0) -> dict:
    """Push everything pending now (write-back delay waived) via the control socket."""
    reply = control.request(m.state_dir, {"cmd": "flush", "timeout": timeout},
                            timeout=timeout + 30)
    assert reply.get("ok"), reply
    return reply


def pushed(m, server, store: str, files: dict[str, str]) -> dict[str, str]:
    """Write each file (name: content) into the mount and flush: the memory id of each
    path on the server."""
    for name, content in files.items():
        (m.path / name).write_text(content)
    flush(m)
    return {p: x.id for p, x in sdk_by_path(server, store).items()}


def conflicts(m, *extra: str) -> list[dict]:
    return json.loads(m.memfs("conflicts", str(m.path), "--json", *extra).stdout)
