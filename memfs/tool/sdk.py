"""Anthropic's client-side memory tool (``memory_20250818``) straight over a Memory Store.

    from memfs.tool import MemoryStoreTool
    tool = MemoryStoreTool("memstore_01...")          # or AsyncMemoryStoreTool
    runner = client.beta.messages.tool_runner(model=..., max_tokens=..., messages=..., tools=[tool])

No FUSE mount is needed: each command goes to the store through memfs's API client
(:mod:`memfs.tool.store`). The classes subclass the SDK's abstract memory tools, so they
drop into its tool runners unchanged; answers and error texts are those of the SDK's
``BetaLocalFilesystemMemoryTool`` (see docs/TOOL.md for the two documented differences).

This module needs the ``anthropic`` package (the ``tool`` extra of the ``memfs-fuse``
distribution: ``pip install -e '.[tool]'`` in a checkout); the rest of
memfs never imports it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from memfs.core.mountconfig import SyncOptions
from memfs.local.server_choice import choose_server
from memfs.tool.store import StoreMemory
from memfs.tool.text import ToolFailure

__all__ = ["MemoryStoreTool", "AsyncMemoryStoreTool"]

T = TypeVar("T")


def _engine(store_id: str, base_url: str | None, api_key: str | None,
            lost_answer_wait: float, read_only: bool) -> StoreMemory:
    server = choose_server(base_url, api_key)
    return StoreMemory(store_id, server.url, server.key, lost_answer_wait=lost_answer_wait,
                       read_only=read_only, locate=server.locate)


def _in_event_loop() -> bool:
    """Is this thread running trio or asyncio (where ``trio.run`` cannot start)?"""
    try:
        trio.lowlevel.current_trio_token()
        return True
    except RuntimeError:
        pass
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


def _run_blocking(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run one command to completion from synchronous code.

    The normal case is a plain thread (the SDK's sync runner, or a worker thread of its
    async runner): a private ``trio.run``. A caller that is itself inside an event loop
    gets the run on a helper thread, since loops do not nest.
    """
    if not _in_event_loop():
        return trio.run(fn, *args)
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, trio.run(fn, *args)))
        except BaseException as exc:  # handed back to the caller's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=target, name="memfs-tool", daemon=True)
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if ok:
        return value
    raise value


class _OnStore:
    """What both tools share: the store they act on and the engine that reaches it."""

    def __init__(
        self,
        store_id: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        lost_answer_wait: float = SyncOptions.lost_answer_wait,
        read_only: bool = False,
    ) -> None:
        """``lost_answer_wait``: how long a create or rename whose answer never came may
        still land, and is waited for before it is sent again (docs/TOOL.md);
        ``read_only``: every change is refused before anything is sent (a session's
        read-only store, as the mount and `memfs mcp --session` refuse it). On the
        embedded server, a restart on another port is followed."""
        super().__init__(cache_control=cache_control)  # type: ignore[call-arg]
        self.store_id = store_id
        self._store = _engine(store_id, base_url, api_key, lost_answer_wait, read_only)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store_id!r}, base_url={self._store.base_url!r})"


class MemoryStoreTool(_OnStore, BetaAbstractMemoryTool):
    """The memory tool on a Memory Store, for the SDK's synchronous tool runner.

    ``base_url`` and ``api_key`` default to what every memfs command uses:
    ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY`` or ``ANTHROPIC_API_KEY_FILE``, else
    the embedded local server (started on first use). Calls may come from any thread.
    """

    def _run(self, fn: Callable[..., Awaitable[str]], *args: Any) -> str:
        try:
            return _run_blocking(fn, *args)
        except ToolFailure as exc:
            raise ToolError(exc.message) from None

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return self._run(self._store.view, command.path, command.view_range)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return self._run(self._store.create, command.path, command.file_text)

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return self._run(self._store.str_replace, command.path, command.old_str, command.new_str)

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return self._run(
            self._store.insert, command.path, command.insert_line, command.insert_text
        )

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return self._run(self._store.delete, command.path)

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return self._run(self._store.rename, command.old_path, command.new_path)

    def clear_all_memory(self) -> str:
        """Delete every memory of the store (the SDK's local tool empties its folder)."""
        return self._run(self._store.clear_all)


class AsyncMemoryStoreTool(_OnStore, BetaAsyncAbstractMemoryTool):
    """The memory tool on a Memory Store, for the SDK's async tool runner.

    Awaitable on asyncio (what the SDK's runner uses) and on trio alike; configured like
    :class:`MemoryStoreTool`.
    """

    @staticmethod
    async def _run(pending: Awaitable[str]) -> str:
        try:
            return await pending
        except ToolFailure as exc:
            raise ToolError(exc.message) from None

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return await self._run(self._store.view(command.path, command.view_range))

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await self._run(self._store.create(command.path, command.file_text))

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await self._run(
            self._store.str_replace(command.path, command.old_str, command.new_str)
        )

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await self._run(
            self._store.insert(command.path, command.insert_line, command.insert_text)
        )

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await self._run(self._store.delete(command.path))

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await self._run(self._store.rename(command.old_path, command.new_path))

    async def clear_all_memory(self) -> str:
        """Delete every memory of the store (the SDK's local tool empties its folder)."""
        return await self._run(self._store.clear_all())
