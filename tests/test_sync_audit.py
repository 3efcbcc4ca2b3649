"""Audit: several writers race on a few files; afterwards every version anyone
wrote is either on the server (in its memory's version history) or preserved
as a conflict (`memfs conflicts --json`). Nothing is lost.

Writers: two threads using the official SDK (plain updates, last writer wins on
the server) and one writing through the mount. The mount writer waits after
each write until that file is clean again (pushed, or replaced by the server's
version in a conflict) before its next write, so none of its versions is
merely coalesced away by the write-back delay: each must reach the server or
the conflicts table.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import sdk_by_path, versions

pytestmark = needs_fuse

FILES = ("/a.md", "/b.md", "/c.md")
RACE_SECONDS = 5.0


def _clean(path) -> bool:
    try:
        return (os.getxattr(path, "user.memfs.sha256")
                == os.getxattr(path, "user.memfs.base_sha256"))
    except OSError:
        return False


def test_racing_writers_lose_nothing(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)  # write-back 0.1 s, poll 1 s
    for p in FILES:
        (m.path / p.lstrip("/")).write_text(f"initial {p}\n")
    m.wait_synced()
    ids = {p: mem.id for p, mem in sdk_by_path(server, store).items()}
    assert set(ids) == set(FILES)

    written: list[str] = [f"initial {p}\n" for p in FILES]
    lock = threading.Lock()
    stop = time.monotonic() + RACE_SECONDS
    errors: list[BaseException] = []

    def sdk_writer(tag: str, seed: int) -> None:
        rng = random.Random(seed)
        client = server.sdk()
        n = 0
        try:
            while time.monotonic() < stop:
                p = rng.choice(FILES)
                content = f"{tag} {n} {p}\n"
                client.beta.memory_stores.memories.update(
                    ids[p], memory_store_id=store, content=content)
                with lock:
                    written.append(content)
                n += 1
                time.sleep(rng.uniform(0.05, 0.4))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=sdk_writer, args=(f"sdk{i}", i)) for i in range(2)]
    for t in threads:
        t.start()
    rng = random.Random(99)
    n = 0
    while time.monotonic() < stop:
        p = rng.choice(FILES)
        f = m.path / p.lstrip("/")
        content = f"mount {n} {p}\n"
        f.write_text(content)
        with lock:
            written.append(content)
        n += 1
        deadline = time.monotonic() + 20
        while not _clean(f) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.3))
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert n >= 3  # the race really ran

    said = m.unmount(kept=None)  # conflicts are named (exit status 3)
    on_server = {v.content for v in versions(server, store) if v.content is not None}
    rows = json.loads(m.memfs("conflicts", str(m.path), "--json").stdout)
    preserved = {c["local_content"] for c in rows}
    assert all(f"#{c['id']} {c['path']}: " in said for c in rows), said
    print(f"AUDIT written={len(written)} on server={len(on_server)} "
          f"conflicts={len(preserved)}")
    lost = [c for c in written if c not in on_server and c not in preserved]
    assert not lost, f"lost versions: {lost}"
    # No false conflicts: a preserved version never also reached the server.
    assert not (preserved & on_server), preserved & on_server
    # Still one memory per file: no duplicates, nothing deleted.
    assert {p: mem.id for p, mem in sdk_by_path(server, store).items()} == ids
    assert set(server_memories(server, store)) == set(FILES)
