"""`memfs mcp`: the official `mcp` client against `memfs mcp` on a real `memfs serve`,
over stdio and streamable HTTP: tools answer as `MemoryStoreTool` does, memories are
resources, subscriptions hear of changes made with the official `anthropic` SDK."""

from __future__ import annotations

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import httpx2
import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ResourceListChangedNotification, ResourceUpdatedNotification
from mountutil import mount_env
from test_session_mount import make_session
from toolutil import new_store, outcome, store_files, sync_tool

#: One command of each kind, valid and not, as a model would send them.
COMMANDS = [
    {"command": "view", "path": "/memories"},
    {"command": "create", "path": "/memories/notes/a.md", "file_text": "one\ntwo\nthree\n"},
    {"command": "create", "path": "/memories/notes/a.md", "file_text": "again"},
    {"command": "create", "path": "/memories/.hidden", "file_text": "h"},
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/memories/notes/a.md"},
    {"command": "view", "path": "/memories/notes/a.md", "view_range": [2, -1]},
    {"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "two",
     "new_str": "TWO"},
    {"command": "str_replace", "path": "/memories/notes/a.md", "old_str": "absent",
     "new_str": "x"},
    {"command": "insert", "path": "/memories/notes/a.md", "insert_line": 1,
     "insert_text": "one and a half"},
    {"command": "insert", "path": "/memories/notes/a.md", "insert_line": 99,
     "insert_text": "x"},
    # integers as the SDK reads them (pydantic's lax mode): "4" and 5.0 are ints
    {"command": "insert", "path": "/memories/notes/a.md", "insert_line": "4",
     "insert_text": "four"},
    {"command": "insert", "path": "/memories/notes/a.md", "insert_line": 5.0,
     "insert_text": "five"},
    {"command": "insert", "path": "/memories/notes/a.md", "insert_line": 1.5,
     "insert_text": "x"},
    {"command": "view", "path": "/memories/notes/a.md", "view_range": ["2", 3.0]},
    {"command": "rename", "path": None, "old_path": "/memories/notes",
     "new_path": "/memories/kept"},
    {"command": "rename", "old_path": "/memories/gone.md", "new_path": "/memories/b.md"},
    {"command": "view", "path": "/memories/kept/a.md"},
    {"command": "delete", "path": "/memories/.hidden"},
    {"command": "delete", "path": "/memories/.hidden"},
    {"command": "view", "path": "/etc/passwd"},
    {"command": "view", "path": "/memories/../x"},
    {"command": "delete", "path": "/memories"},
    {"command": "view", "path": "/memories"},
]


def env_for(server, tmp_path) -> dict:
    env = mount_env(server, tmp_path)
    env.pop("MEMFS_LOG_LEVEL", None)
    return env


@contextlib.asynccontextmanager
async def stdio_session(env: dict, *args: str, notes: list | None = None,
                        ) -> AsyncIterator[ClientSession]:
    """`memfs mcp ARGS` as a client launches it; notifications appended to `notes`."""

    async def handler(message) -> None:
        if notes is not None and not isinstance(message, Exception):
            notes.append(message)

    params = StdioServerParameters(command=sys.executable, args=["-m", "memfs", "mcp", *args],
                                   env=env)
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, message_handler=handler) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, command: dict) -> tuple[str, str]:
    args = {k: v for k, v in command.items() if k != "command" and v is not None}
    result = await session.call_tool(command["command"], args)
    return ("error" if result.is_error else "ok"), result.content[0].text


async def test_stdio_tools_answer_as_memory_store_tool(server, tmp_path):
    ours, theirs = new_store(server, "mcp"), new_store(server, "reference")
    reference = sync_tool(server, theirs)
    async with stdio_session(env_for(server, tmp_path), ours) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"view", "create", "str_replace", "insert", "delete", "rename",
                              "search"}
        assert tools["insert"].input_schema["required"] == ["path", "insert_line",
                                                            "insert_text"]
        for command in COMMANDS:
            expected = await trio.to_thread.run_sync(
                outcome, reference, {k: v for k, v in command.items() if v is not None})
            assert await call(session, command) == expected, command
        assert store_files(server, ours) == store_files(server, theirs)
        # search: literal and regex, from the API's full listing
        await call(session, {"command": "create", "path": "/memories/b.md",
                             "file_text": "alpha\nBeta 42\n"})
        result = await session.call_tool("search", {"pattern": "beta", "ignore_case": True})
        assert not result.is_error
        assert result.content[0].text == \
            "1 match(es) for 'beta' in /memories:\n/memories/b.md:2: Beta 42"
        assert result.structured_content == {
            "matches": [{"path": "/memories/b.md", "line": 2, "text": "Beta 42"}]}
        result = await session.call_tool("search", {"pattern": r"^(one|TWO)", "regex": True})
        assert result.content[0].text.splitlines()[1:] == [
            "/memories/kept/a.md:1: one", "/memories/kept/a.md:2: one and a half",
            "/memories/kept/a.md:3: TWO"]
        result = await session.call_tool("search", {"pattern": "(", "regex": True})
        assert result.is_error and "Invalid regular expression" in result.content[0].text
        # a path that does not exist is said so, as view says it (it was "No matches")
        result = await session.call_tool("search", {"pattern": "a", "path": "/memories/nope"})
        assert result.is_error and result.content[0].text == (
            "The path /memories/nope does not exist. Please provide a valid path.")
        result = await session.call_tool("search", {"pattern": "zzz", "path": "/memories/b.md"})
        assert not result.is_error and result.content[0].text.startswith("No matches")


# Clients before protocol 2026-07-28 subscribe with resources/subscribe, which the SDK now
# flags as deprecated; memfs serves them still (test_listen_streams_of_2026_clients: the new way).
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_stdio_resources_paginate_read_and_notify(server, tmp_path):
    store = new_store(server, "Res Notes")
    sdk = server.sdk()
    for i in range(3):
        sdk.beta.memory_stores.memories.create(store, path=f"/d/{i}.md", content=f"# {i}\n")
    notes: list = []
    args = (store, "--page-size", "2", "--poll-interval", "0.2")
    async with stdio_session(env_for(server, tmp_path), *args, notes=notes) as session:
        first = await session.list_resources()
        assert [r.uri for r in first.resources] == ["memory://res-notes/d/0.md",
                                                    "memory://res-notes/d/1.md"]
        assert first.resources[0].mime_type == "text/markdown"
        assert first.resources[0].size == 4 and first.next_cursor
        from mcp.types import PaginatedRequestParams

        second = await session.list_resources(
            params=PaginatedRequestParams(cursor=first.next_cursor))
        assert [r.uri for r in second.resources] == ["memory://res-notes/d/2.md"]
        assert second.next_cursor is None
        for bad in ("-2", "abc", "1.0"):  # ours are offsets; "-2" was an empty page
            with pytest.raises(Exception, match="bad cursor"):
                await session.list_resources(params=PaginatedRequestParams(cursor=bad))
        read = await session.read_resource("memory://res-notes/d/1.md")
        assert read.contents[0].text == "# 1\n"
        assert read.contents[0].mime_type == "text/markdown"
        with pytest.raises(Exception, match="Resource not found"):
            await session.read_resource("memory://res-notes/nope.md")

        await session.subscribe_resource("memory://res-notes/d/1.md")
        mid = next(m.id for m in sdk.beta.memory_stores.memories.list(store, path_prefix="/d/")
                   if m.path == "/d/1.md")
        sdk.beta.memory_stores.memories.update(mid, memory_store_id=store,
                                               content="# one\n")

        def updated() -> list:
            return [n for n in notes if isinstance(n, ResourceUpdatedNotification)]

        with trio.fail_after(60):
            while not updated():
                await trio.sleep(0.05)
        assert updated()[0].params.uri == "memory://res-notes/d/1.md"
        assert (await session.read_resource("memory://res-notes/d/1.md")).contents[0].text \
            == "# one\n"
        sdk.beta.memory_stores.memories.create(store, path="/new.md", content="n")
        with trio.fail_after(60):
            while not any(isinstance(n, ResourceListChangedNotification) for n in notes):
                await trio.sleep(0.05)


async def test_stdio_several_stores_and_a_read_only_one(server, tmp_path):
    sdk = server.sdk()
    prefs = sdk.beta.memory_stores.create(name="User Preferences").id
    docs = sdk.beta.memory_stores.create(name="Reference Docs").id
    empty = sdk.beta.memory_stores.create(name="Scratch").id
    sdk.beta.memory_stores.memories.create(docs, path="/api.md", content="GET /x\n")
    sid = make_session(sdk, [
        {"type": "memory_store", "memory_store_id": prefs},
        {"type": "memory_store", "memory_store_id": docs, "access": "read_only"},
        {"type": "memory_store", "memory_store_id": empty},
    ])
    async with stdio_session(env_for(server, tmp_path), "--session", sid) as session:
        assert await call(session, {"command": "create",
                                    "path": "/memories/user-preferences/style.md",
                                    "file_text": "tabs\n"}) == (
            "ok", "File created successfully at: /memories/user-preferences/style.md")
        assert store_files(server, prefs) == {"/style.md": "tabs\n"}
        kind, text = await call(session, {"command": "view", "path": "/memories"})
        assert kind == "ok" and text.splitlines()[1:] == [
            "12B\t/memories", "7B\t/memories/reference-docs/",
            "7B\t/memories/reference-docs/api.md", "0B\t/memories/scratch/",
            "5B\t/memories/user-preferences/", "5B\t/memories/user-preferences/style.md"]
        # (an empty store is listed too: before, a model that viewed /memories first, as
        # the memory protocol says, never saw it; found by a helper, 6 December)
        # The read-only store: every change refused with the tool's sentence, nothing sent.
        for command in (
                {"command": "create", "path": "/memories/reference-docs/x.md", "file_text": "x"},
                {"command": "str_replace", "path": "/memories/reference-docs/api.md",
                 "old_str": "GET", "new_str": "PUT"},
                {"command": "delete", "path": "/memories/reference-docs/api.md"}):
            kind, text = await call(session, command)
            assert kind == "error" and text.endswith(
                "was not changed: the memory store at /memories/reference-docs is read-only.")
        assert store_files(server, docs) == {"/api.md": "GET /x\n"}
        assert await call(session, {"command": "view",
                                    "path": "/memories/reference-docs/api.md"}) == (
            "ok", "Here's the content of /memories/reference-docs/api.md with line numbers:\n"
                  "     1\tGET /x\n     2\t")
        assert await call(session, {"command": "rename",
                                    "old_path": "/memories/user-preferences/style.md",
                                    "new_path": "/memories/reference-docs/style.md"}) == (
            "error", "Cannot rename /memories/user-preferences/style.md to "
                     "/memories/reference-docs/style.md: a memory cannot move from one memory "
                     "store to another.")
        assert await call(session, {"command": "view", "path": "/memories/other/x"}) == (
            "error", "The path /memories/other/x does not exist. Please provide a valid path.")
        uris = [r.uri for r in (await session.list_resources()).resources]
        assert uris == ["memory://user-preferences/style.md", "memory://reference-docs/api.md"]


def start_http(env: dict, *args: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "memfs", "mcp", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line, warned = proc.stderr.readline(), []
    while line.startswith("memfs: warning:"):  # said before it serves
        warned.append(line.strip())
        line = proc.stderr.readline()
    proc.warned = warned  # type: ignore[attr-defined]
    if "serving http://" not in line:
        proc.kill()
        proc.wait(30)
        raise AssertionError(line + (proc.stderr.read() or ""))
    return proc, int(line.split(":")[-1].split("/")[0])


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


# Clients before protocol 2026-07-28 subscribe with resources/subscribe, which the SDK now
# flags as deprecated; memfs serves them still (test_listen_streams_of_2026_clients: the new way).
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_http_tools_and_subscription(server, tmp_path):
    store = new_store(server, "web")
    reference = sync_tool(server, new_store(server, "web-ref"))
    proc, port = start_http(env_for(server, tmp_path), store, "--http", "127.0.0.1:0",
                            "--poll-interval", "0.2")
    notes: list = []

    async def handler(message) -> None:
        notes.append(message)

    try:
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write):
            async with ClientSession(read, write, message_handler=handler) as session:
                hello = await session.initialize()
                # announced as over stdio (before, each HTTP session took the SDK's
                # defaults and announced none of the list_changed it was then sent)
                assert hello.capabilities.resources.list_changed is True
                assert hello.capabilities.resources.subscribe is True
                assert len((await session.list_tools()).tools) == 7
                for command in COMMANDS[:8]:
                    expected = await trio.to_thread.run_sync(
                        outcome, reference, {k: v for k, v in command.items() if v is not None})
                    assert await call(session, command) == expected, command
                uri = "memory://web/notes/a.md"
                await session.subscribe_resource(uri)
                sdk = server.sdk()
                mid = next(m.id for m in sdk.beta.memory_stores.memories.list(
                    store, path_prefix="/notes/"))
                sdk.beta.memory_stores.memories.update(mid, memory_store_id=store,
                                                       content="changed\n")
                with trio.fail_after(60):
                    while not any(isinstance(n, ResourceUpdatedNotification)
                                  and n.params.uri == uri for n in notes):
                        await trio.sleep(0.05)
    finally:
        stop(proc)


async def test_http_beyond_loopback_needs_its_token(server, tmp_path):
    store = new_store(server, "guarded")
    env = env_for(server, tmp_path)
    refused = subprocess.run([sys.executable, "-m", "memfs", "mcp", store, "--http",
                              "0.0.0.0:0"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert "0.0.0.0 is not a loopback address" in refused.stderr
    assert "MEMFS_MCP_TOKEN" in refused.stderr and "Traceback" not in refused.stderr
    blank = subprocess.run([sys.executable, "-m", "memfs", "mcp", store, "--http", "0.0.0.0:0"],
                           env={**env, "MEMFS_MCP_TOKEN": "  "}, capture_output=True,
                           text=True, timeout=60)  # (it started, and refused everyone)
    assert blank.returncode == 1 and "MEMFS_MCP_TOKEN" in blank.stderr, blank.stderr
    unknown = subprocess.run([sys.executable, "-m", "memfs", "mcp", "--session", "sesn_nope"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 1 and "cannot read session 'sesn_nope'" in unknown.stderr, \
        unknown.stderr

    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    token.chmod(0o644)
    proc, port = start_http(env, store, "--http", "0.0.0.0:0", "--token-file", str(token))
    try:
        # Used, with a warning, as an API key file others can read is (a review).
        assert proc.warned == [f"memfs: warning: the token file {token} is readable by "
                               f"others (mode 644): chmod 600 {token}"]
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient() as plain:
            response = await plain.post(url, json={"jsonrpc": "2.0", "id": 1,
                                                   "method": "tools/list"})
            assert response.status_code == 401
            for wrong in ("Basic s3cret-token", "Bearer s3cret-token2", "Bearer", "s3cret-token"):
                response = await plain.post(url, headers={"Authorization": wrong}, json={
                    "jsonrpc": "2.0", "id": 1, "method": "tools/list"})
                assert response.status_code == 401, wrong
        async with httpx2.AsyncClient(
                headers={"Authorization": "bearer  s3cret-token"}) as authed:  # any case
            async with streamable_http_client(url, http_client=authed) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    assert len((await session.list_tools()).tools) == 7
    finally:
        stop(proc)


async def test_http_on_any_loopback_address_answers_only_loopback_names(server, tmp_path):
    """DNS rebinding: a page a browser loaded from elsewhere reaches a loopback server
    through a name of its own that resolves there, so a request that names another host
    (Host, Origin) is refused. The SDK guards only three spellings of the loopback;
    127.0.0.2 and [::1] as given to --http were open (found by a helper, 6 December)."""
    from memfs.tool.mcp import guard

    assert guard("[::1]").allowed_hosts == ["[::1]:*", "127.0.0.1:*", "localhost:*",
                                            "[::1]", "127.0.0.1", "localhost"]
    assert guard("0.0.0.0") is None  # its bearer token guards it
    store = new_store(server, "rebind")
    proc, port = start_http(env_for(server, tmp_path), store, "--http", "127.0.0.2:0")
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    try:
        url = f"http://127.0.0.2:{port}/mcp"
        async with httpx2.AsyncClient() as client:
            evil = await client.post(url, json=hello, headers={
                **accept, "Host": "evil.example", "Origin": "http://evil.example"})
            assert evil.status_code == 421, evil.text
            evil_origin = await client.post(url, json=hello, headers={
                **accept, "Origin": "http://evil.example"})
            assert evil_origin.status_code == 403, evil_origin.text
            ok = await client.post(url, json=hello, headers=accept)
            assert ok.status_code == 200, ok.text
            # port 80 as a client names it: no port in Host nor Origin (was 421)
            bare = await client.post(url, json=hello, headers={
                **accept, "Host": "127.0.0.2", "Origin": "http://localhost"})
            assert bare.status_code == 200, bare.text
    finally:
        stop(proc)


def exits_when_stdin_closes(env: dict, *args: str) -> None:
    """A stdio server must end with its input, writing nothing but JSON-RPC to stdout."""
    proc = subprocess.run([sys.executable, "-m", "memfs", "mcp", *args], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr


def test_stdio_ends_with_stdin_and_refuses_bad_input(server, tmp_path):
    store = new_store(server, "quiet")
    env = env_for(server, tmp_path)
    exits_when_stdin_closes(env, store)
    for args, message in ((["no-such-store"], "no-such-store"),
                          (["--mount", str(tmp_path)], "is not a live memfs mount"),
                          ([store, "--http", "127.0.0.1:x"], "give HOST:PORT"),
                          ([store, "--token-file", str(tmp_path / "t")], "goes with --http")):
        proc = subprocess.run([sys.executable, "-m", "memfs", "mcp", *args], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode != 0 and message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr


async def test_listen_streams_of_2026_clients(server, tmp_path):
    """A client of the 2026-07-28 protocol (the SDK's `Client`, which negotiates it) gets
    the same changes on a `subscriptions/listen` stream."""
    from mcp import Client
    from mcp.shared.subscriptions import ResourceUpdated

    store = new_store(server, "listened")
    sdk = server.sdk()
    mid = sdk.beta.memory_stores.memories.create(store, path="/a.md", content="1").id
    params = StdioServerParameters(command=sys.executable, env=env_for(server, tmp_path),
                                   args=["-m", "memfs", "mcp", store, "--poll-interval", "0.2"])
    async with Client(params) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= {"view", "search"}
        async with client.listen(resource_subscriptions=["memory://listened/a.md"]) as sub:
            sdk.beta.memory_stores.memories.update(mid, memory_store_id=store, content="2")
            with trio.fail_after(60):
                event = await sub.__anext__()
        assert event == ResourceUpdated(uri="memory://listened/a.md")
