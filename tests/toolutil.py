"""Helpers for the memory-tool tests (tests/test_tool_*.py)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from conftest import ServerProc, start_server

from memfs.tool import AsyncMemoryStoreTool, MemoryStoreTool
from memfs.tool.store import StoreMemory


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    """One `memfs serve` for a whole module (Hypothesis cannot use per-test fixtures)."""
    sp = start_server(
        tmp_path_factory.mktemp("tool-serve"), api_key="test-key", extra_args=("--fault-control",)
    )
    try:
        yield sp
    finally:
        sp.stop()


def new_store(server: ServerProc, name: str = "tool") -> str:
    return server.sdk().beta.memory_stores.create(name=name).id


def store_files(server: ServerProc, store_id: str) -> dict[str, str]:
    """{memory path: content} of every memory in the store, read with the official SDK."""
    out = {}
    for m in server.sdk().beta.memory_stores.memories.list(store_id, view="full", limit=20):
        if m.type == "memory":
            out[m.path] = m.content
    return out


def folder_files(root: pathlib.Path) -> dict[str, str]:
    """{'/' + relative path: content} of every file below ``root`` (hidden ones too)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = pathlib.Path(dirpath) / name
            out["/" + full.relative_to(root).as_posix()] = full.read_text(encoding="utf-8")
    return out


def sync_tool(server: ServerProc, store_id: str) -> MemoryStoreTool:
    return MemoryStoreTool(store_id, base_url=server.base_url, api_key=server.api_key)


def async_tool(server: ServerProc, store_id: str) -> AsyncMemoryStoreTool:
    return AsyncMemoryStoreTool(store_id, base_url=server.base_url, api_key=server.api_key)


def with_engine(tool: Any, **options: Any) -> Any:
    """The tool with its store engine rebuilt with other client options (retries, timeout);
    the tool's own `lost_answer_wait` kept unless given."""
    engine = tool._store
    options.setdefault("lost_answer_wait", engine.lost_answer_wait)
    tool._store = StoreMemory(engine.store_id, engine.base_url, engine._api_key, **options)
    return tool


def outcome(tool: Any, command: dict[str, Any]) -> tuple[str, Any]:
    """("ok", text), ("error", text) for a ToolError, or ("crash", repr) for anything else."""
    try:
        return "ok", tool.call(command)
    except ToolError as exc:
        return "error", exc.content
    except Exception as exc:
        return "crash", exc
