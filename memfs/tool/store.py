"""The memory tool's six commands carried out on a Memory Store (no FUSE, no ``anthropic``).

:class:`StoreMemory` is the engine behind :mod:`memfs.tool` and ``memfs tool``. Each
command opens one :class:`~memfs.api.client.MemoryStoresClient` for its own duration:

* the sync tool runs every command in its own ``trio.run`` (it is called from plain
  threads, and the SDK's async runner hands sync tools to worker threads), and an httpx
  connection pool cannot outlive the event loop that opened it;
* the async tool is awaited on whatever loop the caller runs: the SDK's async tool
  runner is asyncio, memfs is trio. httpx runs on both, and the client's one trio call
  (its retry sleep) is swapped for ``anyio.sleep``, so no second loop or thread is
  needed. A fresh client per command also never ties a pool to one loop.

The TLS context, the expensive part of a client (~30 ms), is built once per process.

Consistency: a store has no transactions, so every change is a read-modify-write. An
edit (``str_replace``, ``insert``) is sent with the ``content_sha256`` it was computed
from; when another writer got there first the server refuses it (409), and the command
is re-read and re-applied to the fresh content, or fails with the answer that fresh
content gives (the text is gone, or now occurs twice). Deletes and renames carry the same
precondition and are re-applied the same way. A write whose response was lost is
recognised in the store's version history, so it is neither reported as failed nor
applied twice; one that is not there was not applied and is sent again. What another
writer did after it (an edit, a delete, a rename) stands: the client never re-sends a
write blindly, which could undo it. Nor too soon: a create or a rename whose answer never
came may still be applied late by a server at work on it, so "not in the history" counts
only ``lost_answer_wait`` after the loss (:meth:`StoreMemory._traced`).
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar, cast

import anyio
import httpx

from memfs.api import errors as api_errors
from memfs.api import tls
from memfs.api.client import MemoryStoresClient
from memfs.api.models import Memory, MemoryPrefix, content_sha256, versions_since
from memfs.core import paths
from memfs.core.mountconfig import SyncOptions
from memfs.tool.text import (
    ROOT,
    ToolFailure,
    ToolPath,
    insert_lines,
    missing,
    missing_short,
    not_a_file,
    read_only,
    render_directory,
    render_file,
    replace_once,
    resolve,
)

__all__ = ["StoreMemory", "COMMANDS"]

T = TypeVar("T")

#: The commands of ``memory_20250818`` and their required fields.
COMMANDS: dict[str, tuple[str, ...]] = {
    "view": ("path",),
    "create": ("path", "file_text"),
    "str_replace": ("path", "old_str"),
    "insert": ("path", "insert_line", "insert_text"),
    "delete": ("path",),
    "rename": ("old_path", "new_path"),
}

#: Re-reads of a memory that keeps changing under an edit before giving up.
MAX_ATTEMPTS = 25
#: Times a create whose answer was lost, and which the history shows was not applied,
#: is sent again.
RESENDS = 3
#: Rounds of "list what is below the directory, act on it" for a directory delete or
#: rename, so memories created below it meanwhile are caught too.
MAX_DIRECTORY_ROUNDS = 5
#: Files a directory rename that stopped part way names as still to move (the rest
#: are counted).
LEFT_NAMED = 10

DIRECTORY = "directory"  # what lookup() returns for an implied directory

@dataclass
class _Call:
    """One command's client. It never sends a write that may have been applied again
    (memfs/api/client.py): the command asks the history what became of it."""

    client: MemoryStoresClient
    store_id: str


class _Ambiguous(Exception):
    """A write whose outcome is unknown (the store failed while or after sending it)."""

    def __init__(self, cause: api_errors.APIError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _describe(exc: api_errors.APIError) -> str:
    """An API error in a sentence for the model, without the client's plumbing."""
    status = f"HTTP {exc.status}, " if exc.status is not None else ""
    return f"{exc.message} ({status}{exc.type})"


def _refused_reason(exc: api_errors.APIError) -> str:
    return exc.message.rstrip(".")


class StoreMemory:
    """The memory tool's commands on one store. Safe to use from many tasks and threads."""

    def __init__(
        self,
        store_id: str,
        base_url: str,
        api_key: str | None,
        *,
        max_retries: int = 6,
        timeout: float = 30.0,
        backoff_base: float = 0.25,
        backoff_max: float = 4.0,
        base: tuple[str, ...] = (),
        read_only: bool = False,
        lost_answer_wait: float = SyncOptions.lost_answer_wait,
        locate: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        """``base``: the store is ``/memories/<base...>`` (``memfs mcp`` with several
        stores); ``read_only``: every change is refused, before anything is sent;
        ``lost_answer_wait``: seconds a write whose answer never came may still land
        (a mount's ``--lost-answer-wait``, the same default); ``locate``: where the
        server runs now, when it cannot be reached where it was (the embedded
        server's new port: ``ServerChoice.locate``)."""
        if not isinstance(store_id, str) or not store_id:
            raise ValueError("store_id must be a non-empty string")
        self.store_id = store_id
        self.base = base
        self.root = "/".join((ROOT, *base))
        self.read_only = read_only
        self.lost_answer_wait = lost_answer_wait
        self.base_url = base_url
        self._api_key = api_key
        self._client_options: dict[str, Any] = {
            "max_retries": max_retries,
            "timeout": timeout,
            "backoff_base": backoff_base,
            "backoff_max": backoff_max,
            "locate": locate,
        }

    def __repr__(self) -> str:
        return f"<StoreMemory {self.store_id} at {self.base_url}>"

    # ------------------------------------------------------------------ plumbing

    @asynccontextmanager
    async def _call(self) -> AsyncIterator[_Call]:
        # One verified TLS context for every command: building one costs ~30 ms.
        transport = httpx.AsyncHTTPTransport(verify=tls.context())
        client = MemoryStoresClient(
            self.base_url,
            self._api_key,
            transport=transport,
            sleep=anyio.sleep,
            **self._client_options,
        )
        try:
            yield _Call(client, self.store_id)
        finally:
            self.base_url = client.base_url  # where the next call starts (`locate`)
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def execute(self, command: Mapping[str, Any]) -> str:
        """Run one tool input (``{"command": "view", "path": ...}``); ToolFailure on error.

        Used by ``memfs tool``, which has no SDK to parse the input: missing fields get a
        clear message here instead of the reference's Python exception.
        """
        if not isinstance(command, Mapping):
            raise ToolFailure("A command must be a JSON object")
        name = command.get("command")
        if name not in COMMANDS:
            raise ToolFailure(f"Unknown command: {name}")
        absent = [f for f in COMMANDS[name] if command.get(f) is None]
        if absent:
            raise ToolFailure(
                f"The {name} command needs {', '.join(f'`{f}`' for f in absent)}"
            )
        if name == "view":
            return await self.view(command["path"], command.get("view_range"))
        if name == "create":
            return await self.create(command["path"], command["file_text"])
        if name == "str_replace":
            return await self.str_replace(
                command["path"], command["old_str"], command.get("new_str")
            )
        if name == "insert":
            return await self.insert(
                command["path"], command["insert_line"], command["insert_text"]
            )
        if name == "delete":
            return await self.delete(command["path"])
        return await self.rename(command["old_path"], command["new_path"])

    async def _guard(self, what: Callable[[_Call], Awaitable[T]], changing: str | None) -> T:
        """Run a command; turn every store error into a ToolFailure the model can act on.

        ``changing`` names what a modifying command changes, to say whether it was
        applied; None for reads.
        """
        try:
            async with self._call() as call:
                return await what(call)
        except ToolFailure:
            raise
        except _Ambiguous as exc:
            raise ToolFailure(
                f"The memory store did not answer ({_describe(exc.cause)}): the change to "
                f"{changing} may or may not have been saved. View it before trying again."
            ) from None
        except api_errors.NotFoundError as exc:
            raise ToolFailure(
                f"The memory store {self.store_id} was not found ({_describe(exc)})."
            ) from None
        except (api_errors.AuthenticationError, api_errors.PermissionDeniedError) as exc:
            raise ToolFailure(
                f"The memory store {self.store_id} refused this API key ({_describe(exc)})."
            ) from None
        except api_errors.TRANSIENT as exc:
            tail = f" {changing} was not changed." if changing else ""
            raise ToolFailure(
                f"The memory store is not reachable right now ({_describe(exc)}).{tail} "
                "Try the command again."
            ) from None
        except api_errors.APIResponseValidationError as exc:
            raise ToolFailure(
                f"The memory store gave an answer memfs does not understand ({exc.message})."
                + (f" The change to {changing} may or may not have been saved." if changing else "")
            ) from None
        except api_errors.APIError as exc:
            tail = f" {changing} was not changed." if changing else ""
            raise ToolFailure(
                f"The memory store refused the command ({_describe(exc)}).{tail}"
            ) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            # A misconfigured base URL and the like; never an exception from inside httpx.
            raise ToolFailure(
                f"The memory store at {self.base_url} cannot be used: {exc}"
            ) from None

    async def _optimistic(self, attempt: Callable[[_Call], Awaitable[T | _Again]],
                          gave_up: Exception, changing: str | None) -> T:
        """A command's optimistic loop (:func:`_retrying`) on one client, its store
        errors turned into what the model reads (:meth:`_guard`)."""
        return await self._guard(lambda call: _retrying(lambda: attempt(call), gave_up),
                                 changing)

    def _resolve(self, path: object, *, changing: bool = True) -> ToolPath:
        """The path in this store; a change of a read-only store is refused here."""
        target = resolve(path, self.base)
        if changing and self.read_only:
            raise ToolFailure(read_only(target.raw, self.root))
        return target

    # ------------------------------------------------------------------ lookups

    @staticmethod
    def _listable(target: ToolPath) -> bool:
        """False for names the API refuses: no memory can be there, so it does not exist."""
        try:
            paths.validate_path(target.memory_path)
        except paths.PathError:
            return False
        return True

    async def _lookup(self, call: _Call, target: ToolPath) -> Memory | str | None:
        """The memory at ``target`` (a file), DIRECTORY (memories below it), or None."""
        if target.is_root:
            return DIRECTORY
        if not self._listable(target):
            return None
        path = target.memory_path
        parent = path.rsplit("/", 1)[0] + "/"
        async for item in call.client.list_memories(
            call.store_id, path_prefix=parent, depth=1, limit=100
        ):
            if isinstance(item, Memory) and item.path == path:
                return item
            if isinstance(item, MemoryPrefix) and item.path == path + "/":
                return DIRECTORY
        return None

    async def _below(self, call: _Call, target: ToolPath) -> list[Memory]:
        """Every memory below a directory (the whole store for the root)."""
        prefix = "/" if target.is_root else target.memory_path + "/"
        listing = call.client.list_memories(call.store_id, path_prefix=prefix, limit=100)
        return [item async for item in listing if isinstance(item, Memory)]

    async def _read(self, call: _Call, memory: Memory) -> Memory | None:
        """The memory with its content; None if it was deleted meanwhile."""
        return await call.client.find_memory(call.store_id, memory.id, view="full")

    async def _landed(self, call: _Call, memory: Memory, new_sha: str,
                      new_path: str | None = None) -> bool:
        """Did our write over ``memory`` (content ``new_sha``, at ``new_path`` for a
        rename) happen (its response was lost)?

        The memory's versions newer than the one we read hold it if it did, even if
        another writer edited, moved or deleted the memory since. Another writer making
        the very same change from the very same base is indistinguishable from our own
        write, and is taken as it.
        """
        path = new_path or memory.path
        async for version in call.client.list_versions(call.store_id, memory_id=memory.id):
            if version.id == memory.memory_version_id:
                return False
            if (version.operation != "deleted" and version.content_sha256 == new_sha
                    and version.path == path):
                return True
        return False

    # ------------------------------------------------------------------ for memfs mcp

    async def memories(self, prefix: str = "/", *, content: bool = False) -> list[Memory]:
        """Every memory below `prefix` (a directory path ending in ``/``), with its
        content if asked: the MCP server's resources and its search without a mount.
        Store errors are the commands' sentences (ToolFailure)."""

        async def run(call: _Call) -> list[Memory]:
            listing = call.client.list_memories(
                call.store_id, path_prefix=prefix, view="full" if content else "basic",
                limit=100,
            )
            return [item async for item in listing if isinstance(item, Memory)]

        return await self._guard(run, None)

    async def read_memory(self, memory_path: str) -> Memory | None:
        """The memory at a store path with its content; None when there is none."""
        target = ToolPath(self.root + memory_path, tuple(memory_path.strip("/").split("/")),
                          self.root)

        async def run(call: _Call) -> Memory | None:
            found = await self._lookup(call, target)
            return await self._read(call, found) if isinstance(found, Memory) else None

        return await self._guard(run, None)

    # ------------------------------------------------------------------ commands

    async def view(self, path: object, view_range: object = None) -> str:
        target = self._resolve(path, changing=False)

        async def attempt(call: _Call) -> str | _Again:
            found = await self._lookup(call, target)
            if found is None:
                raise ToolFailure(missing(target.raw))
            if found == DIRECTORY:
                below = await self._below(call, target)
                if not below and not target.is_root:
                    return _Again.NOW  # emptied since the lookup: look again
                cut = len(target.segments)
                rows = [(m.path[1:].split("/")[cut:], m.content_size_bytes) for m in below]
                return render_directory(target.raw, rows)
            assert isinstance(found, Memory)
            full = await self._read(call, found)
            if full is None:
                return _Again.NOW  # deleted since the lookup: look again
            return render_file(target.raw, full.content or "", view_range)

        return await self._optimistic(attempt, ToolFailure(missing(target.raw)), None)

    async def create(self, path: object, file_text: object) -> str:
        target = self._resolve(path)
        if not isinstance(file_text, str):
            raise ToolFailure("The create command needs `file_text` to be a string")

        async def run(call: _Call) -> str:
            if await self._lookup(call, target) is not None:
                raise ToolFailure(f"File {target.raw} already exists")
            self._check_creatable(target, file_text)
            done = f"File created successfully at: {target.raw}"
            sha, sent_at = content_sha256(file_text), time.time()
            for attempt in range(RESENDS + 1):
                try:
                    await call.client.create_memory(call.store_id, target.memory_path,
                                                    file_text)
                    return done
                except api_errors.PathConflictError as exc:
                    blocker = exc.conflicting_path or ""
                    if blocker and blocker != target.memory_path and paths.is_ancestor(
                        blocker, target.memory_path
                    ):
                        raise ToolFailure(
                            f"File {target.raw} was not created: {self.root}{blocker} is a "
                            "file, so it cannot hold other files."
                        ) from None
                    if attempt:  # an earlier attempt of ours may have landed late
                        ours = await _quietly(self._created(call, target, sha, sent_at))
                        if ours:
                            return done
                        if ours is None:
                            raise _Ambiguous(exc) from None
                    raise ToolFailure(f"File {target.raw} already exists") from None
                except api_errors.BadRequestError as exc:
                    raise ToolFailure(await self._refused_create(call, target, exc)) from None
                except api_errors.TRANSIENT as exc:
                    if not api_errors.may_have_applied(exc):
                        raise  # the client's own retries are spent: it was not sent
                    ours = await self._traced(
                        lambda: self._created(call, target, sha, sent_at), exc)
                    if ours:
                        return done  # what happened to it since is another writer's
                    if ours is None or attempt == RESENDS:
                        raise _Ambiguous(exc) from None
                    await _pause(attempt)  # not in the history: it was not applied
            raise AssertionError("unreachable")

        return await self._guard(run, target.raw)

    def _check_creatable(self, target: ToolPath, file_text: str) -> None:
        try:
            paths.validate_path(target.memory_path)
        except paths.PathError as exc:
            raise ToolFailure(
                f"File {target.raw} was not created: the memory store does not accept this "
                f"path ({_refused_reason(exc)})."
            ) from None
        size = len(file_text.encode("utf-8", "surrogatepass"))
        if size > paths.MAX_CONTENT_BYTES:
            raise ToolFailure(
                f"File {target.raw} was not created: its content is {size:,} bytes and a "
                f"memory holds at most {paths.MAX_CONTENT_BYTES:,} bytes."
            )
        try:
            file_text.encode("utf-8")
        except UnicodeEncodeError:  # (its sha, taken before it is sent, raised)
            raise ToolFailure(
                f"File {target.raw} was not created: the memory store does not accept its "
                "content (content is not valid UTF-8 (lone surrogate))."
            ) from None

    async def _created(self, call: _Call, target: ToolPath, sha: str, sent_at: float) -> bool:
        """After a lost answer: was a memory created at the path with our content since
        we sent it? Whatever became of it since (edited, moved, deleted) is another
        writer's doing. Another writer creating the same bytes at the same path is
        indistinguishable from our own create, and is taken as it."""
        async for version in call.client.list_versions(
            call.store_id, operation="created", created_gte=versions_since(sent_at)
        ):
            if version.path == target.memory_path and version.content_sha256 == sha:
                return True
        return False

    async def _traced(self, landed: Callable[[], Awaitable[bool]],
                      exc: api_errors.APIError) -> bool | None:
        """After a lost answer: did the write land (True), not (False), or is it unknown
        (None: the history cannot be read either)?

        A request the server may still be at work on (:func:`api_errors.may_land_later`:
        no answer came, or a gateway's 502 or 504) can be applied after a first look finds no
        trace of it. Sent again then, the original could land after the resend and after
        whatever the agent or another writer did next, and undo it: re-create a memory
        they deleted, move back one they moved. So "no trace" counts only
        ``lost_answer_wait`` seconds after the loss; until then the history is read again
        about once a second. An edit needs no wait (its precondition stops a late original
        once the resend has landed); a 5xx came once the server was done.
        """
        wait = self.lost_answer_wait if api_errors.may_land_later(exc) else 0.0
        until = time.monotonic() + wait
        while True:
            ours = await _quietly(landed())
            left = until - time.monotonic()
            if ours is not False or left <= 0:
                return ours
            await anyio.sleep(min(1.0, left))

    async def _refused_create(
        self, call: _Call, target: ToolPath, exc: api_errors.BadRequestError
    ) -> str:
        if exc.client_side:
            return f"File {target.raw} was not created: {_refused_reason(exc)}."
        count = 0
        async for _ in call.client.list_memories(call.store_id, limit=100):
            count += 1
        if count >= paths.MAX_MEMORIES_PER_STORE:
            return (
                f"File {target.raw} was not created: the memory store already holds "
                f"{count:,} memories, the most it can hold. Delete a memory first."
            )
        return f"File {target.raw} was not created: the memory store refused it ({_describe(exc)})."

    async def str_replace(self, path: object, old_str: object, new_str: object = None) -> str:
        if not isinstance(old_str, str):
            raise ToolFailure("The str_replace command needs `old_str` to be a string")
        if new_str is None:
            new_str = ""  # the memory tool's documentation: an omitted new_str deletes old_str
        if not isinstance(new_str, str):
            raise ToolFailure("The str_replace command needs `new_str` to be a string")
        target = self._resolve(path)
        replacement: str = new_str
        return await self._edit(
            target, lambda content: replace_once(target.raw, content, old_str, replacement)
        )

    async def insert(self, path: object, insert_line: object, insert_text: object) -> str:
        if not isinstance(insert_text, str):
            raise ToolFailure("The insert command needs `insert_text` to be a string")
        target = self._resolve(path)
        return await self._edit(
            target, lambda content: insert_lines(target.raw, content, insert_line, insert_text)
        )

    async def _edit(self, target: ToolPath, apply: Callable[[str], tuple[str, str]]) -> str:
        """Read, apply, write with the read's sha as precondition; again while it races."""
        #: writes whose answer was lost and which the history did not show (then):
        #: (the memory as read, the sha sent, what the command answers if it landed)
        unanswered: list[tuple[Memory, str, str]] = []

        async def attempt(call: _Call) -> str | _Again:
            found = await self._lookup(call, target)
            if found is None:
                raise ToolFailure(missing(target.raw))
            if not isinstance(found, Memory):
                raise ToolFailure(not_a_file(target.raw))
            memory = await self._read(call, found)
            if memory is None:
                return _Again.NOW  # deleted since the lookup: look again
            for sent, sha, done in unanswered:
                # Landed late, before this read? Applied again it would be there twice.
                # (Landing after the read, it makes our precondition fail: look again.)
                if await self._landed(call, sent, sha):
                    return done
            edited, answer = apply(memory.content or "")
            size = len(edited.encode("utf-8", "surrogatepass"))
            if size > paths.MAX_CONTENT_BYTES:
                raise ToolFailure(
                    f"No change was made to {target.raw}: the edited file would be "
                    f"{size:,} bytes and a memory holds at most "
                    f"{paths.MAX_CONTENT_BYTES:,} bytes."
                )
            try:
                await call.client.update_memory(
                    call.store_id,
                    memory.id,
                    content=edited,
                    precondition_sha=memory.content_sha256,
                )
                return answer
            except api_errors.PreconditionFailedError:
                pass  # someone else wrote first (or a late landing of ours): look again
            except api_errors.NotFoundError:
                pass  # deleted or gone meanwhile: the next lookup says which
            except api_errors.TRANSIENT as exc:
                if not api_errors.may_have_applied(exc):
                    raise  # the client's own retries are spent: it was not sent
                ours = await _quietly(self._landed(call, memory, content_sha256(edited)))
                if ours:
                    return answer  # what happened to it since is another writer's
                if ours is None:
                    raise _Ambiguous(exc) from None
                # Not in the history: not applied. The next attempt looks once more
                # (it may still land late), then re-reads and sends it again.
                unanswered.append((memory, content_sha256(edited), answer))
            return _Again.LATER

        gave_up = ToolFailure(
            f"No change was made to {target.raw}: it kept changing while the edit was "
            f"being applied ({MAX_ATTEMPTS} attempts). Try the command again."
        )
        return await self._optimistic(attempt, gave_up, target.raw)

    async def delete(self, path: object) -> str:
        target = self._resolve(path)
        if target.is_root:
            raise ToolFailure(f"Cannot delete the {self.root} directory itself")

        async def attempt(call: _Call) -> str | _Again:
            found = await self._lookup(call, target)
            if found is None:
                raise ToolFailure(missing_short(target.raw))
            if found == DIRECTORY:
                await self._delete_directory(call, target)
                return f"Successfully deleted {target.raw}"
            assert isinstance(found, Memory)
            try:
                await call.client.delete_memory(
                    call.store_id, found.id, expected_sha=found.content_sha256
                )
                return f"Successfully deleted {target.raw}"
            except api_errors.PreconditionFailedError:
                pass  # edited meanwhile: delete what it is now
            except api_errors.NotFoundError:
                pass  # the next lookup tells whether it is gone or moved
            except api_errors.TRANSIENT as exc:
                if await _quietly(self._gone(call, target, found)):
                    return f"Successfully deleted {target.raw}"
                raise _Ambiguous(exc) from None
            return _Again.LATER

        return await self._optimistic(attempt, _kept_changing(target.raw, "deleted"), target.raw)

    async def clear_all(self) -> str:
        """The SDK's ``clear_all_memory``: every memory of the store deleted, as a
        delete of the root directory would (each with its precondition, rounds that
        catch memories created meanwhile); an empty store is already clear."""
        root = resolve(ROOT)

        async def run(call: _Call) -> str:
            await self._delete_directory(call, root, empty_ok=True)
            return "All memory cleared"

        return await self._guard(run, ROOT)

    async def _gone(self, call: _Call, target: ToolPath, memory: Memory) -> bool:
        """After a lost answer: is the memory no longer at the path?"""
        now = await self._lookup(call, target)
        return not (isinstance(now, Memory) and now.id == memory.id)

    async def _delete_directory(self, call: _Call, target: ToolPath, *,
                                empty_ok: bool = False) -> None:
        """Delete every memory below ``target``; a failure says how far it got."""
        done = 0
        for _ in range(MAX_DIRECTORY_ROUNDS):
            below = await self._below(call, target)
            if not below:
                if done == 0 and not empty_ok:  # emptied by someone else since the lookup
                    raise ToolFailure(missing_short(target.raw))
                return
            for memory in below:
                try:
                    await self._delete_one(call, memory)
                except api_errors.APIError as exc:
                    left = len(await self._below_quietly(call, target))
                    raise ToolFailure(
                        f"{target.raw} was only partly deleted: {done} file(s) below it were "
                        f"deleted, then the memory store failed ({_describe(exc)}). "
                        f"{left if left >= 0 else 'Some'} file(s) are still there; run the "
                        "command again to delete them."
                    ) from None
                done += 1
        raise ToolFailure(
            f"{target.raw} was only partly deleted: files kept appearing below it. "
            "Run the command again."
        )

    async def _delete_one(self, call: _Call, memory: Memory) -> None:
        async def attempt() -> None | _Again:
            nonlocal memory
            try:
                await call.client.delete_memory(
                    call.store_id, memory.id, expected_sha=memory.content_sha256
                )
                return None
            except api_errors.NotFoundError:
                return None  # somebody else deleted it
            except api_errors.PreconditionFailedError:
                fresh = await self._read(call, memory)
                if fresh is None:
                    return None
                memory = fresh
                return _Again.LATER

        await _retrying(attempt, api_errors.PreconditionFailedError(
            "the memory kept changing", status=409, type="memory_precondition_failed_error"
        ))

    async def _below_quietly(self, call: _Call, target: ToolPath) -> list[Memory]:
        try:
            return await self._below(call, target)
        except api_errors.APIError:
            return []

    async def rename(self, old_path: object, new_path: object) -> str:
        old = self._resolve(old_path)
        new = self._resolve(new_path)
        if old.is_root:
            raise ToolFailure(f"Cannot rename the {self.root} directory itself")
        done = f"Successfully renamed {old.raw} to {new.raw}"
        unanswered: set[str] = set()  # memories whose lost rename the history did not show

        async def attempt(call: _Call) -> str | _Again:
            there = await self._lookup(call, new)
            if isinstance(there, Memory) and there.id in unanswered:
                return done  # an attempt not in the history then landed late
            if there is not None:
                raise ToolFailure(f"The destination {new.raw} already exists")
            found = await self._lookup(call, old)
            if found is None:
                raise ToolFailure(missing_short(old.raw))
            self._check_destination(old, new, found == DIRECTORY)
            if found == DIRECTORY:
                await self._rename_directory(call, old, new)
                return done
            assert isinstance(found, Memory)
            try:
                await call.client.update_memory(
                    call.store_id,
                    found.id,
                    path=new.memory_path,
                    precondition_sha=found.content_sha256,
                )
                return done
            except api_errors.PathConflictError as exc:
                raise ToolFailure(self._rename_blocked(old, new, exc)) from None
            except (api_errors.PreconditionFailedError, api_errors.NotFoundError):
                pass  # edited, moved or deleted meanwhile: look again
            except api_errors.TRANSIENT as exc:
                if not api_errors.may_have_applied(exc):
                    raise  # the client's own retries are spent: it was not sent
                ours = await self._traced(
                    lambda: self._landed(call, found, found.content_sha256, new.memory_path),
                    exc)
                if ours:
                    return done  # what happened to it since is another writer's
                if ours is None:
                    raise _Ambiguous(exc) from None
                unanswered.add(found.id)  # not in the history: not applied; look again
            return _Again.LATER

        return await self._optimistic(attempt, _kept_changing(old.raw, "renamed"), old.raw)

    def _check_destination(self, old: ToolPath, new: ToolPath, is_directory: bool) -> None:
        """Refuse, before anything moves, what the store cannot do."""
        if new.segments[: len(old.segments)] == old.segments:
            if is_directory:
                raise ToolFailure(
                    f"Cannot rename {old.raw} to {new.raw}: a directory cannot be moved "
                    "inside itself."
                )
            raise ToolFailure(
                f"Cannot rename {old.raw} to {new.raw}: {old.raw} is a file, so it cannot "
                "hold other files."
            )
        try:
            paths.validate_path(new.memory_path)
        except paths.PathError as exc:
            raise ToolFailure(
                f"Cannot rename {old.raw} to {new.raw}: the memory store does not accept the "
                f"new path ({_refused_reason(exc)})."
            ) from None

    @staticmethod
    def _rename_blocked(old: ToolPath, new: ToolPath, exc: api_errors.PathConflictError) -> str:
        blocker = exc.conflicting_path or ""
        if blocker and paths.is_ancestor(blocker, new.memory_path):
            return (
                f"Cannot rename {old.raw} to {new.raw}: {new.root}{blocker} is a file, so it "
                "cannot hold other files."
            )
        return f"The destination {new.raw} already exists"

    async def _rename_directory(self, call: _Call, old: ToolPath, new: ToolPath) -> None:
        """Move every memory below ``old`` to the same place below ``new``."""
        old_prefix, new_prefix = old.memory_path, new.memory_path
        below = await self._below(call, old)
        if not below:  # emptied by someone else since the lookup
            raise ToolFailure(missing_short(old.raw))
        for memory in below:  # every new path is checked before the first one moves
            moved = new_prefix + memory.path[len(old_prefix) :]
            try:
                paths.validate_path(moved)
            except paths.PathError as exc:
                raise ToolFailure(
                    f"Cannot rename {old.raw} to {new.raw}: the memory store does not accept "
                    f"the new path of {self.root}{memory.path} ({_refused_reason(exc)})."
                ) from None
        done = 0
        for _ in range(MAX_DIRECTORY_ROUNDS):
            if not below:
                return
            for i, memory in enumerate(below):
                moved = new_prefix + memory.path[len(old_prefix) :]
                try:
                    await self._move_one(call, memory, moved)
                except (api_errors.APIError, ToolFailure) as exc:
                    why = exc.message if isinstance(exc, ToolFailure) else _describe(exc)
                    if done == 0 and isinstance(exc, api_errors.PathConflictError):
                        raise ToolFailure(self._rename_blocked(old, new, exc)) from None
                    if done == 0 and await _quietly(self._below(call, new)) == []:
                        raise ToolFailure(f"{old.raw} was not renamed: it stopped ({why}) "
                                          "before any file moved. Try the command again."
                                          ) from None
                    now = await _quietly(self._below(call, old))  # as it is now
                    left = below[i:] if now is None else now
                    raise ToolFailure(self._partly_renamed(old, new, done, why, left)) from None
                done += 1
            below = await self._below(call, old)
        raise ToolFailure(self._partly_renamed(old, new, done, "files kept appearing below "
                                               f"{old.raw}", below))

    def _partly_renamed(self, old: ToolPath, new: ToolPath, done: int, why: str,
                        left: list[Memory]) -> str:
        """What a directory rename that stopped part way did, and how to finish it: the
        command itself cannot be run again (its destination exists now), so the files
        still to move are named, each to be renamed on its own."""
        names = [self.root + m.path for m in left[:LEFT_NAMED]]
        more = f" and {len(left) - LEFT_NAMED} more" if len(left) > LEFT_NAMED else ""
        return (
            f"{old.raw} was only partly renamed: {done} file(s) moved to {new.raw}, then it "
            f"stopped ({why}). Still below {old.raw}: {', '.join(names)}{more}. "
            f"Rename each of them to the same place below {new.raw} to finish (renaming "
            f"{old.raw} again would stop at once: {new.raw} exists now)."
        )

    async def _move_one(self, call: _Call, memory: Memory, moved: str) -> None:
        async def attempt() -> None | _Again:
            nonlocal memory
            try:
                await call.client.update_memory(
                    call.store_id, memory.id, path=moved, precondition_sha=memory.content_sha256
                )
                return None
            except api_errors.NotFoundError:
                return None  # deleted meanwhile: nothing left to move
            except api_errors.PreconditionFailedError:
                fresh = await self._read(call, memory)
                if fresh is None or fresh.path != memory.path:
                    return None  # deleted or moved by someone else meanwhile
                memory = fresh
                return _Again.LATER
            except api_errors.TRANSIENT as exc:
                if not api_errors.may_have_applied(exc):
                    raise  # the client's own retries are spent: it was not sent
                # As a file's rename: not sent again while the original may still land.
                moving = memory
                ours = await self._traced(
                    lambda: self._landed(call, moving, moving.content_sha256, moved), exc)
                if ours is None:
                    raise
                return None if ours else _Again.NOW

        await _retrying(attempt, ToolFailure("the memory kept changing"))


class _Again(Enum):
    """What one attempt of an optimistic loop (:func:`_retrying`) asks for instead
    of an answer."""

    NOW = "now"      # what was read is gone: look again at once
    LATER = "later"  # another writer raced us: a short random pause, then again


async def _retrying(attempt: Callable[[], Awaitable[T | _Again]], gave_up: Exception) -> T:
    """Read, act with what was read as precondition, and again while others race:
    ``attempt`` returns its answer, or :class:`_Again`; after :data:`MAX_ATTEMPTS`
    attempts, ``gave_up`` is raised."""
    for n in range(MAX_ATTEMPTS):
        got = await attempt()
        if got is _Again.LATER:
            await _pause(n)
        elif got is not _Again.NOW:
            return cast(T, got)
    raise gave_up


def _kept_changing(raw: str, undone: str) -> ToolFailure:
    return ToolFailure(f"{raw} was not {undone}: it kept changing ({MAX_ATTEMPTS} attempts). "
                       "Try the command again.")


async def _quietly(check: Awaitable[T]) -> T | None:
    """A check made after a failure: None (unknown) when the store fails it too."""
    try:
        return await check
    except api_errors.APIError:
        return None


async def _pause(attempt: int) -> None:
    """A short random wait between re-reads, so racing writers stop colliding."""
    await anyio.sleep(random.random() * min(0.5, 0.01 * 2**attempt))
