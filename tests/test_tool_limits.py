"""Store limits and store failures come back as tool errors with clear text.

The SDK's local tool has no size or count limit and learns about bad names and
file-versus-directory clashes only from OS exceptions; over a store these are the API's
refusals (400, 409). Every one of them must reach the model as a ToolError that says
what happened, never as an exception from inside httpx.
"""

from __future__ import annotations

import pytest
import trio
from toolutil import new_store, outcome, store_files, sync_tool, with_engine

from memfs.api import MemoryStoresClient

pytestmark = pytest.mark.timeout(120)

LIMIT = 102_400


def run(tool, **command):
    return outcome(tool, command)


def test_content_over_102400_bytes(server):
    store = new_store(server)
    tool = sync_tool(server, store)
    assert run(tool, command="create", path="/memories/big.md", file_text="é" * 51_201) == (
        "error",
        "File /memories/big.md was not created: its content is 102,402 bytes and a memory "
        "holds at most 102,400 bytes.",
    )
    full = "x" * (LIMIT - 4) + "tail"
    assert run(tool, command="create", path="/memories/big.md", file_text=full)[0] == "ok"
    assert run(tool, command="str_replace", path="/memories/big.md", old_str="tail",
               new_str="tail!") == (
        "error",
        "No change was made to /memories/big.md: the edited file would be 102,401 bytes and "
        "a memory holds at most 102,400 bytes.",
    )
    assert run(tool, command="insert", path="/memories/big.md", insert_line=0,
               insert_text="z")[1].startswith("No change was made to /memories/big.md: the "
                                              "edited file would be 102,403 bytes")
    assert store_files(server, store) == {"/big.md": full}


def test_a_lone_surrogate_is_a_sentence_in_every_command(server):
    """Text a JSON caller can send that is not UTF-8: a create raised from inside (the
    sha it takes before sending), where an edit gave the API's refusal as a sentence."""
    store = new_store(server)
    tool = sync_tool(server, store)
    assert run(tool, command="create", path="/memories/s.md", file_text="a\ud800b") == (
        "error", "File /memories/s.md was not created: the memory store does not accept its "
                 "content (content is not valid UTF-8 (lone surrogate)).")
    assert run(tool, command="create", path="/memories/s.md", file_text="ab")[0] == "ok"
    kind, text = run(tool, command="str_replace", path="/memories/s.md", old_str="b",
                     new_str="\ud800")
    assert kind == "error" and "lone surrogate" in text and "was not changed" in text
    assert store_files(server, store) == {"/s.md": "ab"}


def test_a_read_only_tool_refuses_every_change_before_sending(server):
    """`MemoryStoreTool(read_only=True)`: a session's read-only store, as the mount and
    `memfs mcp --session` refuse it."""
    from memfs.tool.sdk import MemoryStoreTool

    store = new_store(server)
    tool = MemoryStoreTool(store, base_url=server.base_url, api_key=server.api_key,
                           read_only=True)
    assert run(tool, command="create", path="/memories/a.md", file_text="x") == (
        "error", "/memories/a.md was not changed: the memory store at /memories is read-only.")
    assert run(tool, command="view", path="/memories")[0] == "ok"
    assert store_files(server, store) == {}


def test_the_2001st_memory(server):
    store = new_store(server)

    async def fill() -> None:
        async with MemoryStoresClient(server.base_url, server.api_key) as client:
            limiter = trio.CapacityLimiter(16)

            async def one(i: int) -> None:
                async with limiter:
                    await client.create_memory(store, f"/m/{i:04}.md", f"{i}\n")

            async with trio.open_nursery() as nursery:
                for i in range(2_000):
                    nursery.start_soon(one, i)

    trio.run(fill)
    tool = sync_tool(server, store)
    assert run(tool, command="create", path="/memories/one-more.md", file_text="x") == (
        "error",
        "File /memories/one-more.md was not created: the memory store already holds 2,000 "
        "memories, the most it can hold. Delete a memory first.",
    )
    # Existing memories stay editable and movable.
    assert run(tool, command="insert", path="/memories/m/0007.md", insert_line=1,
               insert_text="more")[0] == "ok"
    assert run(tool, command="rename", old_path="/memories/m/0007.md",
               new_path="/memories/seven.md")[0] == "ok"
    assert run(tool, command="delete", path="/memories/m/0008.md")[0] == "ok"
    assert run(tool, command="create", path="/memories/one-more.md", file_text="x")[0] == "ok"


@pytest.mark.parametrize(("name", "reason"), [
    ("a\x01b.md", "path must not contain control or format characters (found U+0001)"),
    ("a\u200bb.md", "path must not contain control or format characters (found U+200B)"),
    ("e\u0301.md", "path must be NFC-normalized"),
    ("x" * 1030, "path is 1031 bytes; the maximum is 1024"),
    ("/".join("s" * 21), "path has 21 segments; the maximum is 20"),
])
def test_names_the_api_refuses(server, name, reason):
    store = new_store(server)
    tool = sync_tool(server, store)
    path = f"/memories/{name}"
    assert run(tool, command="create", path=path, file_text="x") == (
        "error",
        f"File {path} was not created: the memory store does not accept this path ({reason}).",
    )
    assert run(tool, command="view", path=path) == (
        "error", f"The path {path} does not exist. Please provide a valid path.")
    run(tool, command="create", path="/memories/ok.md", file_text="x")
    assert run(tool, command="rename", old_path="/memories/ok.md", new_path=path) == (
        "error",
        f"Cannot rename /memories/ok.md to {path}: the memory store does not accept the new "
        f"path ({reason}).",
    )
    assert store_files(server, store) == {"/ok.md": "x"}


def test_a_file_where_a_directory_is_needed_and_the_reverse(server):
    store = new_store(server)
    tool = sync_tool(server, store)
    for path in ("/memories/a.md", "/memories/b.md", "/memories/d/x.md"):
        assert run(tool, command="create", path=path, file_text="x")[0] == "ok"
    blocked = "/memories/a.md is a file, so it cannot hold other files."
    assert run(tool, command="create", path="/memories/a.md/x", file_text="") == (
        "error", f"File /memories/a.md/x was not created: {blocked}")
    assert run(tool, command="create", path="/memories/a.md/y/z", file_text="") == (
        "error", f"File /memories/a.md/y/z was not created: {blocked}")
    # A directory where a file is asked for: what the local tool says too.
    assert run(tool, command="create", path="/memories/d", file_text="") == (
        "error", "File /memories/d already exists")
    assert run(tool, command="rename", old_path="/memories/b.md",
               new_path="/memories/a.md/b.md") == (
        "error", f"Cannot rename /memories/b.md to /memories/a.md/b.md: {blocked}")
    assert run(tool, command="rename", old_path="/memories/d", new_path="/memories/a.md/d") == (
        "error", f"Cannot rename /memories/d to /memories/a.md/d: {blocked}")
    assert run(tool, command="rename", old_path="/memories/d", new_path="/memories/d/sub") == (
        "error",
        "Cannot rename /memories/d to /memories/d/sub: a directory cannot be moved inside "
        "itself.")
    assert run(tool, command="rename", old_path="/memories/a.md",
               new_path="/memories/a.md/x") == (
        "error", f"Cannot rename /memories/a.md to /memories/a.md/x: {blocked}")
    assert store_files(server, store) == {"/a.md": "x", "/b.md": "x", "/d/x.md": "x"}


def test_store_failures_are_tool_errors(server):
    store = new_store(server)
    quick = {"max_retries": 1, "backoff_base": 0.001, "backoff_max": 0.01, "timeout": 5.0}
    view = {"command": "view", "path": "/memories"}

    gone = with_engine(sync_tool(server, "memstore_nope"), **quick)
    kind, text = outcome(gone, view)
    assert kind == "error" and text.startswith("The memory store memstore_nope was not found")

    wrong_key = with_engine(sync_tool(server, store), **quick)
    wrong_key._store._api_key = "not-the-key"
    kind, text = outcome(wrong_key, view)
    assert kind == "error" and text.startswith(f"The memory store {store} refused this API key")

    down = with_engine(sync_tool(server, store), **quick)
    down._store.base_url = "http://127.0.0.1:9"  # nothing listens there
    kind, text = outcome(down, {"command": "create", "path": "/memories/x", "file_text": ""})
    assert kind == "error" and text.startswith("The memory store is not reachable right now")
    assert text.endswith("/memories/x was not changed. Try the command again.")

    server.set_faults(error_rate=1.0)
    try:
        kind, text = outcome(with_engine(sync_tool(server, store), **quick), view)
    finally:
        server.clear_faults()
    assert kind == "error" and text.startswith("The memory store is not reachable right now")
    assert "HTTP 503" in text

    nonsense = with_engine(sync_tool(server, store), **quick)
    nonsense._store.base_url = "ftp://example.invalid"
    kind, text = outcome(nonsense, view)
    assert kind == "error" and "unsupported protocol 'ftp://'" in text
