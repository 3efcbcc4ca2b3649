"""`memfs.SessionMounts`, driven the way the SDK's environment worker drives its
`SessionMemoryStores` (download; the tools' roots; `sync_if_due` after each tool call;
`finish` at a clean end; `flush_writes`; `dispose`), through a real mount against a
real `memfs serve`, with the official SDK's AsyncAnthropic as the worker's client."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import pathlib
import signal
import subprocess
import sys

import anthropic
import pytest
from mountutil import is_mounted, needs_fuse, server_memories

# The one line a worker changes (instead of the SDK's
# `from anthropic.lib.tools._memories import SessionMemoryStores`):
from memfs import SessionMounts as SessionMemoryStores
from memfs.session_mounts import MemoryWriteError, SessionMountError

pytestmark = needs_fuse


@pytest.fixture
def worker_env(server, tmp_path, monkeypatch):
    """The worker's process environment (isolated memfs state), and a cleanup of
    whatever the drop-in mounted, even when the test fails."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    roots: list[pathlib.Path] = []
    yield roots
    reg = tmp_path / "xdg-cache" / "memfs" / "mounts"
    for root in roots:
        if is_mounted(root):
            subprocess.run([sys.executable, "-m", "memfs", "unmount", str(root),
                            "--timeout", "5"], capture_output=True, timeout=60)
        for flags in ("-u", "-uz"):
            if is_mounted(root):
                subprocess.run(["fusermount3", flags, str(root)], capture_output=True)
    for f in reg.glob("*.json") if reg.exists() else ():
        try:
            os.kill(int(json.loads(f.read_text())["pid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


def _relocated(session, base: pathlib.Path):
    """The session with its mount paths moved from /mnt/memory to `base` (the test
    machine's /mnt is not ours); the directory names stay the service's."""
    resources = [r.model_copy(update={"mount_path": str(base / os.path.basename(r.mount_path))})
                 if r.type == "memory_store" else r for r in session.resources]
    return session.model_copy(update={"resources": resources})


def _sessions_token(server, sid: str) -> str:
    """What the work item's secret carries: a token scoped to the session."""
    import httpx

    r = httpx.post(f"{server.base_url}/_memfs/sessions/{sid}/token",
                   headers={"x-api-key": server.api_key}, timeout=10)
    r.raise_for_status()
    return r.json()["token"]


async def _worker_item(server, tmp_path, sid: str, roots_out: list, *,
                       bearer: bool = False) -> dict:
    if bearer:  # the SDK worker's sub-client: the sessions token as a bearer token
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key=None,
                                          auth_token=_sessions_token(server, sid),
                                          max_retries=0)
    else:
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key=server.api_key,
                                          max_retries=0)
    session = _relocated(await client.beta.sessions.retrieve(sid), tmp_path / "memory")
    roots_out.append(tmp_path / "memory")
    stores = SessionMemoryStores(client, workdir=tmp_path / "work", sync_interval=5.0)
    await stores.download(session)
    rw, ro = stores.roots
    assert stores.read_only_roots == [ro]
    assert (rw / ".anthropic-memory-store").read_text().startswith("version 1\n")
    # The agent's tool calls, each followed by the worker's sync_if_due.
    calls = [
        lambda: (rw / "notes.md").write_text("first note\n"),
        lambda: (rw / "notes.md").write_text((rw / "notes.md").read_text() + "second\n"),
        lambda: (rw / "topics").mkdir(),
        lambda: (rw / "topics" / "fuse.md").write_text("mounts are live\n"),
        lambda: (ro / "guide.md").read_text(),
    ]
    for call in calls:
        call()
        await stores.sync_if_due()
    # The file tools' save, as the SDK's worker (2.17) hands it to them, and what it
    # calls after a stopped call: both were missing, and every item failed (a helper).
    import functools

    import anyio

    write = functools.partial(stores.write_file, lock=anyio.Lock())
    assert await write(rw / "tools" / "a.md", "by the tool\n", None) is True
    assert await write(rw / "tools" / "a.md", "edited\n", "by the tool\n") is True
    with pytest.raises(MemoryWriteError, match="changed since it was read"):
        await write(rw / "tools" / "a.md", "stale\n", "by the tool\n")
    assert (rw / "tools" / "a.md").read_text() == "edited\n"
    # Refused text leaves the file as it was (it was emptied first, and the empty file
    # pushed: a review); the file's mode is kept.
    (rw / "tools" / "a.md").chmod(0o600)
    for refused_text, says in (("y" * 102_401, "a memory holds at most 102,400"),
                               ("lone \ud800", "lone surrogate")):
        with pytest.raises(MemoryWriteError, match=says):
            await write(rw / "tools" / "a.md", refused_text, "edited\n")
    assert await write(rw / "tools" / "a.md", "edited\n", "edited\n") is True
    assert (rw / "tools" / "a.md").stat().st_mode & 0o777 == 0o600
    # A file turned to bytes that are not UTF-8 since it was read: changed, said so.
    (rw / "tools" / "raw.md").write_bytes(b"\xff\n")
    with pytest.raises(MemoryWriteError, match="changed since it was read"):
        await write(rw / "tools" / "raw.md", "text\n", "what the tool read\n")
    (rw / "tools" / "raw.md").unlink()
    # Through a link to the folders (the tools resolve their targets): still a store's.
    (tmp_path / "via").symlink_to(rw.parent)
    with pytest.raises(MemoryWriteError, match="changed since it was read"):
        await write(tmp_path / "via" / rw.name / "tools" / "a.md", "x\n", "stale\n")
    assert await write(tmp_path / "work" / "scratch.md", "x", None) is False
    with pytest.raises(OSError) as refused_save:
        await write(ro / "tool.md", "x", None)
    assert refused_save.value.errno == errno.EROFS
    await stores.restore_missing()
    with pytest.raises(OSError) as refused:  # a read-only store refuses every program
        (ro / "mine.md").write_text("x")
    await stores.finish()
    with pytest.raises(RuntimeError, match="already called"):
        await stores.finish()
    await stores.flush_writes()
    result = {"refused_errno": refused.value.errno,
              "root_mounted_before_dispose": is_mounted(tmp_path / "memory")}
    await stores.dispose()
    result["root_exists_after"] = (tmp_path / "memory").exists()
    result["root_mounted_after"] = is_mounted(tmp_path / "memory")
    await client.close()
    return result


@pytest.mark.parametrize("bearer", [False, True], ids=["account-key", "sessions-token"])
def test_worker_loop_on_asyncio(server, tmp_path, worker_env, bearer):
    sdk = server.sdk()
    mine = sdk.beta.memory_stores.create(name="Agent Memory").id
    guide = sdk.beta.memory_stores.create(name="Team Guide").id
    sdk.beta.memory_stores.memories.create(guide, path="/guide.md", content="be kind\n")
    sid = sdk.beta.sessions.create(agent="agent_x", environment_id="env_x", resources=[
        {"type": "memory_store", "memory_store_id": mine},
        {"type": "memory_store", "memory_store_id": guide, "access": "read_only"},
    ]).id
    result = asyncio.run(_worker_item(server, tmp_path, sid, worker_env, bearer=bearer))

    assert result == {"refused_errno": errno.EROFS, "root_mounted_before_dispose": True,
                      "root_exists_after": False, "root_mounted_after": False}
    assert server_memories(server, mine) == {"/notes.md": "first note\nsecond\n",
                                             "/topics/fuse.md": "mounts are live\n",
                                             "/tools/a.md": "edited\n"}
    assert server_memories(server, guide) == {"/guide.md": "be kind\n"}
    authors = {(v.created_by.type, getattr(v.created_by, "session_id", None))
               for v in sdk.beta.memory_stores.memory_versions.list(mine)}
    assert authors == {("session_actor", sid)}


async def test_roots_are_the_folders_the_mount_shows(server, tmp_path, worker_env):
    """`roots` names exactly the folders `memfs mount --session` makes, where a store's
    name does not give its folder as is: two stores of one name, a name the slug
    changes, resources without a mount path or with a `..` in it (given the slug of
    their name, as the mount gives it, not refused)."""
    sdk = server.sdk()
    a, b, odd = (sdk.beta.memory_stores.create(name=n).id
                 for n in ("Notes", "Notes", "../Odd Name!"))
    sid = sdk.beta.sessions.create(agent="x", environment_id="e", resources=[
        {"type": "memory_store", "memory_store_id": a},
        {"type": "memory_store", "memory_store_id": b},
        {"type": "memory_store", "memory_store_id": odd, "access": "read_only"}]).id
    client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key=server.api_key,
                                      max_retries=0)
    session = await client.beta.sessions.retrieve(sid)
    work = tmp_path / "work"
    paths = [None, None, f"{work}/memory/../escape"]
    session = session.model_copy(update={"resources": [
        r.model_copy(update={"mount_path": p})
        for r, p in zip(session.resources, paths, strict=True)]})
    root = work / "memory"
    worker_env.append(root)
    stores = SessionMemoryStores(client, workdir=work)
    try:
        await stores.download(session)
        assert stores.roots == [root / "notes", root / "notes-2", root / "odd-name"]
        assert stores.read_only_roots == [root / "odd-name"]
        assert sorted(os.listdir(root)) == [p.name for p in stores.roots]
        for folder, store in zip(stores.roots, (a, b, odd), strict=True):
            assert (folder / ".anthropic-memory-store").read_text().endswith(store)
        assert not (work / "escape").exists()
    finally:
        await stores.dispose()
        await client.close()


async def test_download_refusals(server, tmp_path, worker_env):
    """What the SDK refuses, refused alike: a root that is not empty, and (ours) stores
    whose mount paths do not share a parent."""
    sdk = server.sdk()
    a = sdk.beta.memory_stores.create(name="A").id
    b = sdk.beta.memory_stores.create(name="B").id
    sid = sdk.beta.sessions.create(agent="x", environment_id="e", resources=[
        {"type": "memory_store", "memory_store_id": a},
        {"type": "memory_store", "memory_store_id": b}]).id
    client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key=server.api_key,
                                      max_retries=0)
    session = await client.beta.sessions.retrieve(sid)
    stores = SessionMemoryStores(client, workdir=tmp_path)

    def with_paths(*paths):
        rs = [r.model_copy(update={"mount_path": p}) for r, p in zip(session.resources, paths,
                                                                      strict=True)]
        return session.model_copy(update={"resources": rs})

    # The SDK's error, so that a worker's `except SessionMemoryError` catches it (a helper).
    from anthropic.lib.tools._memories import SessionMemoryError

    with pytest.raises(SessionMemoryError, match="share one parent") as refused:
        await stores.download(with_paths(str(tmp_path / "x" / "a"), str(tmp_path / "y" / "b")))
    assert isinstance(refused.value, SessionMountError)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "leftover.md").write_text("a dead run's file")
    with pytest.raises(SessionMountError, match="already exists"):
        await stores.download(with_paths(str(busy / "a"), str(busy / "b")))
    assert (busy / "leftover.md").read_text() == "a dead run's file"  # left as found
    with pytest.raises(ValueError, match="at least 5"):
        SessionMemoryStores(client, workdir=tmp_path, sync_interval=1.0)
    await client.close()


async def test_the_control_directory_is_read_once_and_again_only_when_it_fails(
        tmp_path, monkeypatch, caplog):
    """`sync_if_due` runs after every tool call: it asks the control directory it knows
    and reads the mount registry again only when that one does not answer."""
    from memfs.local import control, registry

    one, two = tmp_path / "one", tmp_path / "two"
    live: dict = {"dir": one}  # the daemon that answers; None: no daemon registered
    reads: list[str] = []
    asked: list[pathlib.Path] = []

    def read_registry(mountpoint: str) -> dict | None:
        reads.append(mountpoint)
        return None if live["dir"] is None else {"state_dir": str(live["dir"])}

    def request(state_dir: pathlib.Path, payload: dict, *, timeout: float) -> dict:
        asked.append(state_dir)
        if state_dir != live["dir"] or live.get("hung"):
            raise TimeoutError("timed out")
        return {"status": {"stores": []}}

    monkeypatch.setattr(registry, "read_registry", read_registry)
    monkeypatch.setattr(control, "request", request)
    stores = SessionMemoryStores(object(), workdir=tmp_path)
    stores._root = tmp_path / "memory"  # as `download` leaves it (no control dir yet)
    for _ in range(3):
        await stores.sync_if_due()
    assert (len(reads), asked) == (1, [one, one, one])
    live["dir"] = two  # a restarted daemon: one failed ask, one read, then the new one
    await stores.sync_if_due()
    await stores.sync_if_due()
    assert (len(reads), asked[3:]) == (2, [one, two, two])
    assert "does not answer" not in caplog.text
    live["hung"] = True  # the registered daemon does not answer: asked once, not twice
    await stores.sync_if_due()
    assert (len(reads), asked[6:]) == (3, [two])
    assert caplog.text.count("does not answer: timed out") == 1
    live["hung"] = False
    live["dir"] = None  # gone: said as before, and asked again the next time
    await stores.sync_if_due()
    await stores.sync_if_due()
    assert (len(reads), asked[7:]) == (5, [two, two])
    assert caplog.text.count(f"no memfs daemon is registered for {stores._root}") == 2


async def test_a_flush_names_what_stays_local(server, tmp_path, worker_env, caplog):
    """A file the server refuses (not UTF-8) is counted and named, with its store's
    folder and the reason, by flush_writes (as by finish); dispose still unmounts."""
    import logging

    import trio

    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Agent Memory").id
    sid = sdk.beta.sessions.create(agent="x", environment_id="e", resources=[
        {"type": "memory_store", "memory_store_id": store}]).id
    client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key=server.api_key,
                                      max_retries=0)
    session = _relocated(await client.beta.sessions.retrieve(sid), tmp_path / "memory")
    worker_env.append(tmp_path / "memory")
    stores = SessionMemoryStores(client, workdir=tmp_path / "work")
    try:
        await stores.download(session)
        (folder,) = stores.roots
        (folder / "bad.md").write_bytes(b"\xff not UTF-8\n")
        (folder / "good.md").write_text("fine\n")
        with trio.fail_after(30):
            while not ((await stores._status()) or {}).get("stores", [{}])[0].get(
                    "pending", {}).get("refused"):
                await trio.sleep(0.1)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="memfs.session_mounts"):
            for _ in range(3):  # after each tool call: said once (it was each time)
                await stores.sync_if_due()
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1 and said[0].startswith("the server refused /bad.md in "), said
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="memfs.session_mounts"):
            await stores.flush_writes()
        kept = [r.getMessage() for r in caplog.records if "stay here" in r.getMessage()]
        assert len(kept) == 1 and kept[0].startswith(
            f"memory: 1 file(s) stay here only, NOT on the server: /{folder.name}/bad.md: "
        ), kept
    finally:
        await stores.dispose()
        await client.close()
    assert not is_mounted(tmp_path / "memory")
    assert server_memories(server, store) == {"/good.md": "fine\n"}


async def test_a_save_the_mount_does_not_answer_is_bounded(tmp_path, monkeypatch):
    """The SDK's save gives up after 30 s (not confirmed) and lets the worker's lock go;
    ours waited for good on a hung mount (a review). Here a write that hangs, and a
    bound of 0.5 s."""
    import threading

    import anyio

    from memfs import session_mounts

    release = threading.Event()
    monkeypatch.setattr(session_mounts, "FLUSH_TIMEOUT", 0.5)
    monkeypatch.setattr(session_mounts, "_write_if_unchanged",
                        lambda *args: release.wait(30))
    stores = SessionMemoryStores(None, workdir=tmp_path)
    folder = tmp_path / "memory" / "store"
    folder.mkdir(parents=True)
    stores._stores = [(folder, False)]  # noqa: SLF001 - as download leaves it
    lock = anyio.Lock()
    try:
        with pytest.raises(MemoryWriteError, match="did not confirm the change"):
            await stores.write_file(folder / "a.md", "x", None, lock=lock)
        assert not lock.locked()
    finally:
        release.set()
