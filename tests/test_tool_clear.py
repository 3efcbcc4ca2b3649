"""`clear_all_memory()` of MemoryStoreTool / AsyncMemoryStoreTool against a real
`memfs serve`: every memory of the store is deleted, as the SDK's local filesystem tool
empties its folder; an empty store is already clear; other stores are untouched."""

from __future__ import annotations

import asyncio

from anthropic.lib.tools import ToolError
from toolutil import async_tool, new_store, store_files, sync_tool, with_engine

from memfs.api.client import MemoryStoresClient


def fill(server, store: str) -> None:
    sdk = server.sdk()
    for path in ("/a.md", "/d/b.md", "/d/e/c.md", "/x.txt"):
        sdk.beta.memory_stores.memories.create(store, path=path, content=path)


def test_sync_clear_all_memory(server):
    store, other = new_store(server), new_store(server, "other")
    fill(server, store)
    fill(server, other)
    tool = sync_tool(server, store)
    assert tool.clear_all_memory() == "All memory cleared"
    assert store_files(server, store) == {}
    assert len(store_files(server, other)) == 4
    assert tool.clear_all_memory() == "All memory cleared"  # already empty: fine
    view = tool.call({"command": "view", "path": "/memories"})
    assert view.endswith("/memories")  # an empty root, as after the SDK's clear
    tool.call({"command": "create", "path": "/memories/new.md", "file_text": "again"})
    assert store_files(server, store) == {"/new.md": "again"}


def test_async_clear_all_memory_on_asyncio(server):
    store = new_store(server)
    fill(server, store)
    tool = async_tool(server, store)
    assert asyncio.run(tool.clear_all_memory()) == "All memory cleared"
    assert store_files(server, store) == {}


def test_clear_all_memory_failures_are_tool_errors(server):
    store = new_store(server)
    fill(server, store)
    down = with_engine(sync_tool(server, store), max_retries=0, timeout=5.0)
    down._store.base_url = "http://127.0.0.1:9"  # nothing listens there
    try:
        down.clear_all_memory()
        raise AssertionError("no error")
    except ToolError as exc:
        assert str(exc.content).startswith("The memory store is not reachable right now")
    assert len(store_files(server, store)) == 4  # nothing was deleted


async def test_clear_all_catches_an_edit_made_after_the_listing(server, monkeypatch):
    """The same precondition rule as a delete: a memory edited between the listing and
    its delete (a real edit, through the SDK, right after the real listing) is re-read
    and deleted as it is now, never left behind nor reported as failed."""
    store = new_store(server)
    fill(server, store)
    a_id = _id(server, store, "/a.md")
    real_list = MemoryStoresClient.list_memories
    edited = []

    def listing_then_edit(self, *args, **kw):
        async def gen():
            async for item in real_list(self, *args, **kw):
                yield item
            if not edited:
                edited.append(server.sdk().beta.memory_stores.memories.update(
                    a_id, memory_store_id=store, content="edited"))
        return gen()

    monkeypatch.setattr(MemoryStoresClient, "list_memories", listing_then_edit)
    assert await async_tool(server, store)._store.clear_all() == "All memory cleared"
    assert edited and store_files(server, store) == {}


def _id(server, store: str, path: str) -> str:
    for m in server.sdk().beta.memory_stores.memories.list(store, limit=20):
        if m.type == "memory" and m.path == path:
            return m.id
    raise AssertionError(path)
