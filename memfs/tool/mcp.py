"""`memfs mcp`: memory stores as an MCP server, for every harness that speaks MCP.

Built on the official ``mcp`` SDK's low-level ``Server`` (its high-level ``MCPServer``
has no ``resources/subscribe`` nor a paginated resource list of our own).

* **Tools**: the memory tool's six commands, answered by the very code behind
  ``MemoryStoreTool`` (:class:`memfs.tool.store.StoreMemory`), and ``search``. One
  store is ``/memories``; several are ``/memories/<slug>`` each, as in a session
  mount, and the commands of one are that store's ``StoreMemory`` with the slug as its
  base. A read-only store refuses changes with the tool's own sentence.
* **Resources**: every memory is ``memory://<slug>/<path>``, listed a page at a
  time. ``resources/subscribe`` (and the 2026 ``subscriptions/listen``) get
  ``notifications/resources/updated`` when a memory changes anywhere, and every
  session gets ``list_changed`` when memories appear, move or go.
* **Source**: straight over the API (changes are seen by polling the store's versions
  list, one request per poll interval and store, as a mount's feed does), or over a
  live mount (``--mount``): reads come from the mount's cache and changes from the
  daemon's own feed (its ``events`` stream), so an idle server costs no request.

Everything here runs under anyio: trio for stdio, asyncio under uvicorn for HTTP.
"""

from __future__ import annotations

import hmac
import logging
import mimetypes
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourcesListChanged,
    ResourceUpdated,
)
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from memfs.api import errors as api_errors
from memfs.api.client import MemoryStoresClient
from memfs.core import paths
from memfs.core.nodes import META_NAME, PARK_NAME
from memfs.core.version import VERSION
from memfs.local import control
from memfs.local.registry import read_registry
from memfs.mount.marker import MARKER_NAME
from memfs.mount.sync_xattrs import state_of
from memfs.sync.watch import poll_store
from memfs.tool.store import COMMANDS, StoreMemory
from memfs.tool.text import (
    ROOT,
    ToolFailure,
    ToolPath,
    as_sdk_reads,
    missing,
    missing_short,
    render_directory,
    render_file,
    resolve,
)

log = logging.getLogger("memfs.mcp")

URI_SCHEME = "memory://"
RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for an unknown resource
#: The most search results one call returns.
MAX_MATCHES = 200
#: Seconds the server waits, at start, for each store's change feed position.
STARTUP_WAIT = 10.0

mimetypes.add_type("text/markdown", ".md")


@dataclass
class Served:
    """One store the server serves."""

    slug: str                     # its directory (several stores) and its URI host
    store_id: str
    name: str
    memory: StoreMemory           # the memory tool's commands on it
    read_only: bool = False
    mount_dir: Path | None = None  # --mount: its directory in the live mount


@dataclass
class MountLink:
    """--mount: the live mount whose cache and feed the server uses."""

    control_dir: Path
    store: str | None = None      # a session root: follow this store only (None: all)
    root: Path | None = None      # the mountpoint
    store_ids: frozenset[str] = frozenset()  # the stores served from it

    def check(self) -> None:
        """Raise ToolFailure unless the mount of these stores is still there. Unmounted,
        its mountpoint is an empty folder: a view said every file "does not exist" and
        a search found nothing (found by a helper, 6 December). A mount of the same
        stores made again at the same place is followed; one of another store is not
        (the kernel gives a new mount the device number of the last one: the registry
        says which stores a mount holds)."""
        if self.root is None:
            return
        try:
            os.stat(self.root)
        except OSError as exc:
            raise ToolFailure(self._gone(exc.strerror or str(exc))) from None
        info = read_registry(str(self.root)) or {}
        ids = {info.get("store_id")} | {s.get("store_id") for s in info.get("stores", [])}
        if not (os.path.ismount(self.root) and info.get("state_dir")):
            raise ToolFailure(self._gone("not mounted"))
        if not self.store_ids <= ids:
            raise ToolFailure(self._gone("another store is mounted there now"))
        self.control_dir = Path(info["state_dir"])

    def _gone(self, why: str) -> str:
        return (f"The mount at {self.root} is gone ({why}): nothing was read or changed. "
                "Mount it again (memfs mount), or run memfs mcp without --mount.")


def _text(answer: str, *, error: bool = False, structured: Any = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=answer)], is_error=error,
                                structured_content=structured)


_PATH = {"type": "string", "description": "A path under /memories, e.g. /memories/notes.md"}
_TOOLS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "view": ("Show a directory's files (two levels deep) or a file's lines, numbered.",
             {"path": _PATH, "view_range": {
                 "type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                 "description": "[first line, last line] of a file, 1-based; -1: the end"}},
             ["path"]),
    "create": ("Create a file (a new memory) with this content.",
               {"path": _PATH, "file_text": {"type": "string"}}, ["path", "file_text"]),
    "str_replace": ("Replace the one occurrence of old_str in a file with new_str.",
                    {"path": _PATH, "old_str": {"type": "string"},
                     "new_str": {"type": "string"}}, ["path", "old_str"]),
    "insert": ("Insert text after line insert_line of a file (0: at the top).",
               {"path": _PATH, "insert_line": {"type": "integer"},
                "insert_text": {"type": "string"}}, ["path", "insert_line", "insert_text"]),
    "delete": ("Delete a file, or a directory with everything below it.",
               {"path": _PATH}, ["path"]),
    "rename": ("Rename or move a file or a directory.",
               {"old_path": _PATH, "new_path": _PATH}, ["old_path", "new_path"]),
    "search": ("Search the memories' content: a literal text, or a regular expression "
               "(Python syntax) with regex=true. Answers path:line: text, one match a line.",
               {"pattern": {"type": "string"},
                "regex": {"type": "boolean", "default": False},
                "ignore_case": {"type": "boolean", "default": False},
                "path": {**_PATH, "description": "Search only below this directory "
                         "(default: /memories)"}},
               ["pattern"]),
}
_READS = {"view", "search"}


class MemoryMCP:
    """The MCP server of some stores (one `Server`, any number of sessions)."""

    def __init__(self, stores: list[Served], *, base_url: str, api_key: str | None,
                 mount: MountLink | None = None, poll_interval: float = 2.0,
                 page_size: int = 100,
                 locate: Callable[[], Awaitable[str | None]] | None = None) -> None:
        """``locate``: where the server runs now when it cannot be reached where it
        was (the embedded server's new port; the stores' `StoreMemory` take it too)."""
        if not stores:
            raise ValueError("no store to serve")
        self.stores = stores
        self.by_slug = {s.slug: s for s in stores}
        self.by_id = {s.store_id: s for s in stores}
        self.single = len(stores) == 1
        self.base_url, self._api_key, self.locate = base_url, api_key, locate
        self.mount = mount
        self.poll_interval = poll_interval
        self.page_size = page_size
        # Commands on /memories itself when several stores hide below it: every one of
        # them is answered before a request is made (view is answered here).
        self._root_tool = StoreMemory(stores[0].store_id, base_url, api_key, locate=locate)
        self.bus = InMemorySubscriptionBus()  # subscriptions/listen (2026-07-28 clients)
        # The SDK hands each request its own ServerSession; notifications outside a
        # request go through the connection it holds: one session kept per connection.
        self.sessions: dict[int, Any] = {}            # for list_changed
        self.subscribed: dict[str, dict[int, Any]] = {}  # uri -> resources/subscribe
        self.server: Server = _Server(
            "memfs", version=VERSION, instructions=self._instructions(),
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
            on_list_resources=self._list_resources, on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe, on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=ListenHandler(self.bus))
        self.init_options = self.server.create_initialization_options()

    def _instructions(self) -> str:
        where = ROOT if self.single else ", ".join(f"{ROOT}/{s.slug}" for s in self.stores)
        ro = [f"{ROOT}/{s.slug}" if not self.single else ROOT
              for s in self.stores if s.read_only]
        return ("Persistent memory: text files under /memories that last between "
                f"conversations and are shared with other agents ({where}). The tools are "
                "the memory tool's commands, plus `search`."
                + (f" Read-only: {', '.join(ro)}." if ro else ""))

    # -- tools -------------------------------------------------------------------------------

    async def _list_tools(self, ctx, params) -> types.ListToolsResult:
        self._seen(ctx)
        tools = []
        for name, (description, props, required) in _TOOLS.items():
            tools.append(types.Tool(
                name=name, description=description,
                input_schema={"type": "object", "properties": props, "required": required},
                annotations=types.ToolAnnotations(read_only_hint=name in _READS,
                                                  destructive_hint=name in ("delete",))))
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        self._seen(ctx)
        args = dict(params.arguments or {})
        try:
            if params.name == "search":
                answer, rows = await self.search(args)
                return _text(answer, structured={"matches": rows})
            if params.name not in COMMANDS:
                raise ToolFailure(f"Unknown tool: {params.name}")
            return _text(await self.command({**as_sdk_reads(args), "command": params.name}))
        except ToolFailure as exc:
            return _text(exc.message, error=True)
        except Exception as exc:  # a bug must not end the session
            log.exception("memfs mcp: %s failed", params.name)
            return _text(f"memfs mcp failed: {exc!r}", error=True)

    async def command(self, command: dict[str, Any]) -> str:
        """One memory tool command: the answer, or ToolFailure with the tool's message."""
        if self.single:
            return await self._run(self.stores[0], command)
        key = "old_path" if command["command"] == "rename" else "path"
        raw = command.get(key)
        if not isinstance(raw, str):
            return await self._root_tool.execute(command)  # its word for a missing field
        target = resolve(raw)
        if target.is_root:
            if command["command"] == "view":
                return await self._view_all(target)
            return await self._root_tool.execute(command)
        store = self.by_slug.get(target.segments[0])
        if store is None:
            raise ToolFailure(self._nowhere(command["command"], raw))
        new = command.get("new_path")
        if command["command"] == "rename" and isinstance(new, str) and \
                resolve(new).segments[:1] != target.segments[:1]:
            raise ToolFailure(f"Cannot rename {raw} to {new}: a memory cannot move from one "
                              "memory store to another.")
        return await self._run(store, command)

    def _nowhere(self, command: str, raw: str) -> str:
        if command in ("delete", "rename"):
            return missing_short(raw)
        if command == "create":
            return (f"File {raw} was not created: {ROOT} holds one directory per memory "
                    f"store ({', '.join(s.slug for s in self.stores)}); create it in one "
                    "of them.")
        return missing(raw)

    async def _mount_there(self, store: Served) -> None:
        """ToolFailure when the mount `store` is read from is gone."""
        if store.mount_dir is not None and self.mount is not None:
            await anyio.to_thread.run_sync(self.mount.check)

    async def _from_mount(self, store: Served, read: Callable[[], Any]) -> Any:
        """`read` of the mount (in a worker thread), between two checks that it is
        there: a walk skips what it cannot read, so a mount that died during it gave a
        search "No matches" (found by a helper, 6 December)."""
        await self._mount_there(store)
        try:
            return await anyio.to_thread.run_sync(read)
        finally:
            await self._mount_there(store)  # "gone" over whatever the read made of it

    async def _run(self, store: Served, command: dict[str, Any]) -> str:
        if store.mount_dir is not None and command["command"] == "view" and \
                command.get("path") is not None:
            return await self._view_mount(store, command["path"], command.get("view_range"))
        if store.mount_dir is not None and self.mount is not None:
            await self._mount_there(store)  # (a view checks in `_from_mount`)
            # A change goes to the server: first what the mount shows goes there too, so
            # the change is made to the text `view` showed, not to an older one.
            await anyio.to_thread.run_sync(self._mount_flush)
            _refuse_what_only_the_mount_holds(store, command)
        answer = await store.memory.execute(command)
        if store.mount_dir is not None and self.mount is not None:
            await anyio.to_thread.run_sync(self._mount_sync)  # the mount shows it at once
        return answer

    def _mount_flush(self) -> None:
        """Before a change: the mount's daemon pushes what it holds (bounded)."""
        assert self.mount is not None
        try:
            control.request(self.mount.control_dir, {"cmd": "flush", "timeout": FLUSH_WAIT},
                            timeout=FLUSH_WAIT + 30)
        except (OSError, ValueError) as exc:
            log.warning("the mount's daemon did not flush: %s", exc)

    def _mount_sync(self) -> None:
        """After a change: the mount's daemon polls its feed now (else within a poll)."""
        assert self.mount is not None
        try:
            control.request(self.mount.control_dir, {"cmd": "sync"}, timeout=30)
        except (OSError, ValueError) as exc:
            log.warning("the mount's daemon did not sync: %s", exc)

    async def _view_all(self, target: ToolPath) -> str:
        rows = []
        for store in self.stores:
            for path, size in await self._listing(store):
                rows.append(((store.slug, *path[1:].split("/")), size))
        # an empty store too: a model that views the root first must see where to write
        return render_directory(target.raw, rows, directories=[(s.slug,) for s in self.stores])

    async def _view_mount(self, store: Served, path: object, view_range: object) -> str:
        target = resolve(path, store.memory.base)
        if not self._listable(target.memory_path):
            raise ToolFailure(missing(target.raw))
        assert store.mount_dir is not None
        where = store.mount_dir.joinpath(*target.segments)

        def read() -> str:
            try:
                if where.is_dir():
                    rows = [(p.split("/")[len(target.segments) + 1:], size)
                            for p, size in _walk(store.mount_dir, target.memory_path)]
                    if not rows and not target.is_root:
                        raise ToolFailure(missing(target.raw))
                    return render_directory(target.raw, rows)
                state = state_of(where)
                if state == "refused":
                    raise ToolFailure(f"{target.raw} is not shown: the mount holds a version "
                                      "of it that the server refused (not UTF-8, or over a "
                                      "limit: memfs status says why).")
                if state not in MEMORY_STATES:  # a temp file, .memfs: the API's view
                    raise FileNotFoundError
                text = where.read_bytes().decode("utf-8", "replace")
            except (FileNotFoundError, NotADirectoryError):
                raise ToolFailure(missing(target.raw)) from None
            return render_file(target.raw, text, view_range)

        return await self._from_mount(store, read)

    @staticmethod
    def _listable(memory_path: str) -> bool:
        if memory_path == "/":
            return True
        try:
            paths.validate_path(memory_path)
        except paths.PathError:
            return False
        return True

    async def _listing(self, store: Served) -> list[tuple[str, int]]:
        """(path, size) of every memory of a store: from the mount, else one listing."""
        if store.mount_dir is not None:
            mount_dir = store.mount_dir
            return await self._from_mount(store, lambda: list(_walk(mount_dir, "/")))
        return [(m.path, m.content_size_bytes) for m in await store.memory.memories()]

    async def _contents(self, store: Served, prefix: str) -> list[tuple[str, str]]:
        """(path, content) of every memory below `prefix` (a directory, ending in /)."""
        if store.mount_dir is not None:
            mount_dir = store.mount_dir

            def read() -> list[tuple[str, str]]:
                out = []
                for path, _ in _walk(mount_dir, prefix):
                    try:
                        data = (mount_dir / path[1:]).read_bytes()
                    except OSError:
                        continue  # deleted meanwhile
                    out.append((path, data.decode("utf-8", "replace")))
                return out

            return await self._from_mount(store, read)
        return [(m.path, m.content or "") for m in await store.memory.memories(
            prefix, content=True)]

    # -- search ------------------------------------------------------------------------------

    async def search(self, args: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ToolFailure("The search tool needs `pattern`, a non-empty string")
        flags = re.IGNORECASE if args.get("ignore_case") else 0
        try:
            rx = re.compile(pattern if args.get("regex") else re.escape(pattern), flags)
        except re.error as exc:
            raise ToolFailure(f"Invalid regular expression {pattern!r}: {exc}") from None
        raw = args.get("path", ROOT)
        target = resolve(raw)
        rows: list[dict[str, Any]] = []
        more = False
        there = False  # the path is a store, a directory or a file: else it does not exist
        for store in self.stores:
            if self.single:
                inside, below = True, target.segments
            else:
                inside = target.is_root or target.segments[0] == store.slug
                below = target.segments[1:]
            if not inside:
                continue
            prefix = "/" + "".join(f"{s}/" for s in below)
            shown = ROOT if self.single else f"{ROOT}/{store.slug}"
            contents = await self._contents(store, prefix)
            if not contents and below:  # not a directory: the file itself, if it is one
                exact = "/" + "/".join(below)
                contents = [(path, text) for path, text in await self._contents(
                    store, "/" + "".join(f"{s}/" for s in below[:-1])) if path == exact]
            there = there or bool(contents) or not below
            for path, content in sorted(contents):
                for number, line in enumerate(content.split("\n"), 1):
                    if rx.search(line):
                        if len(rows) == MAX_MATCHES:
                            more = True
                            break
                        rows.append({"path": shown + path, "line": number, "text": line})
        if not there:
            raise ToolFailure(missing(target.raw))
        if not rows:
            return f"No matches for {pattern!r} in {target.raw}.", rows
        head = f"{len(rows)} match(es) for {pattern!r} in {target.raw}" + (
            f" (the first {MAX_MATCHES}; narrow the search for the rest)" if more else "")
        return head + ":\n" + "\n".join(f"{r['path']}:{r['line']}: {r['text']}"
                                        for r in rows), rows

    # -- resources ---------------------------------------------------------------------------

    def uri(self, store: Served, path: str) -> str:
        return f"{URI_SCHEME}{store.slug}{quote(path, safe='/')}"

    def _parse_uri(self, uri: str) -> tuple[Served, str]:
        if not uri.startswith(URI_SCHEME):
            raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri} (memfs serves "
                           f"{URI_SCHEME}<store>/<path>)")
        slug, _, path = uri[len(URI_SCHEME):].partition("/")
        store = self.by_slug.get(slug)
        path = "/" + unquote(path)
        if store is None or path == "/" or not self._listable(path):
            raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")
        return store, path

    async def _list_resources(self, ctx, params) -> types.ListResourcesResult:
        self._seen(ctx)
        cursor = getattr(params, "cursor", None) if params is not None else None
        if cursor and not (cursor.isascii() and cursor.isdigit()):  # ours are offsets
            raise MCPError(types.INVALID_PARAMS, f"bad cursor {cursor!r}")
        start = int(cursor) if cursor else 0
        rows: list[tuple[Served, str, int]] = []
        try:
            for store in self.stores:
                rows += [(store, p, size) for p, size in sorted(await self._listing(store))]
        except ToolFailure as exc:
            raise MCPError(types.INTERNAL_ERROR, exc.message) from None
        page = rows[start:start + self.page_size]
        resources = [types.Resource(
            uri=self.uri(store, path), name=f"{store.slug}{path}", title=path,
            description=f"memory {path} of the store {store.name}",
            mime_type=_mime(path), size=size) for store, path, size in page]
        more = start + self.page_size < len(rows)
        return types.ListResourcesResult(resources=resources,
                                         next_cursor=str(start + self.page_size) if more
                                         else None)

    async def _read_resource(self, ctx, params: types.ReadResourceRequestParams,
                             ) -> types.ReadResourceResult:
        uri = str(params.uri)
        store, path = self._parse_uri(uri)
        if store.mount_dir is not None:
            where = store.mount_dir / path[1:]

            def read() -> bytes:
                if not _is_memory(where):  # a temp or refused file, .memfs: none of it
                    raise FileNotFoundError
                return where.read_bytes()

            try:
                text = (await self._from_mount(store, read)).decode("utf-8", "replace")
            except ToolFailure as exc:  # the mount is gone
                raise MCPError(types.INTERNAL_ERROR, exc.message) from None
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}") from None
        else:
            try:
                memory = await store.memory.read_memory(path)
            except ToolFailure as exc:
                raise MCPError(types.INTERNAL_ERROR, exc.message) from None
            if memory is None:
                raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")
            text = memory.content or ""
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, mime_type=_mime(path), text=text)])

    async def _subscribe(self, ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        self._seen(ctx)
        uri = str(params.uri)
        self._parse_uri(uri)
        self.subscribed.setdefault(uri, {})[_connection(ctx)] = ctx.session
        return types.EmptyResult()

    async def _unsubscribe(self, ctx, params: types.UnsubscribeRequestParams,
                           ) -> types.EmptyResult:
        self.subscribed.get(str(params.uri), {}).pop(_connection(ctx), None)
        return types.EmptyResult()

    # -- changes -----------------------------------------------------------------------------

    async def changed(self, event: dict[str, Any]) -> None:
        """One applied change: `updated` to the memory's subscribers, and `list_changed`
        to every session when a memory appeared, moved or went."""
        store = self.by_id.get(event.get("store_id", ""))
        if store is None or not event.get("path"):
            return
        uris = [self.uri(store, event["path"])]
        if event.get("old_path"):
            uris.append(self.uri(store, event["old_path"]))
        for uri in uris:
            await self.bus.publish(ResourceUpdated(uri=uri))
            for key, session in list(self.subscribed.get(uri, {}).items()):
                await self._notify(key, session.send_resource_updated, uri)
        if event.get("kind") != "modified":
            await self.bus.publish(ResourcesListChanged())
            for key, session in list(self.sessions.items()):
                await self._notify(key, session.send_resource_list_changed)

    def _seen(self, ctx) -> None:
        self.sessions.setdefault(_connection(ctx), ctx.session)

    async def _notify(self, key: int, send, *args) -> None:
        try:
            await send(*args)
        except Exception as exc:  # a connection that went away
            log.info("notification not sent: %s", exc)
            self.sessions.pop(key, None)
            for subs in self.subscribed.values():
                subs.pop(key, None)

    async def follow(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Feed `changed` forever: the mount's events, else each store's versions list.
        Started once every store's starting point is known (at most STARTUP_WAIT
        seconds: an unreachable store must not keep the server from answering), so a
        change made after the first request is never taken for an old one."""
        if self.mount is not None:
            task_status.started()
            await self._follow_mount()
            return
        async with anyio.create_task_group() as tg:
            known = [anyio.Event() for _ in self.stores]
            for store, event in zip(self.stores, known, strict=True):
                tg.start_soon(self._poll, store, event.set)
            with anyio.move_on_after(STARTUP_WAIT):
                for event in known:
                    await event.wait()
            task_status.started()

    async def _poll(self, store: Served, ready) -> None:
        while True:
            try:
                async with MemoryStoresClient(self.base_url, self._api_key,
                                              sleep=anyio.sleep, locate=self.locate) as client:
                    try:
                        async for event in poll_store(client, store.store_id, store.slug,
                                                      None, self.poll_interval, ready):
                            await self.changed(event.to_json())
                    finally:
                        self.base_url = client.base_url  # the next client's start
            except (api_errors.APIError, OSError) as exc:
                log.warning("polling %s: %s", store.slug, exc)
            await anyio.sleep(self.poll_interval)

    async def _follow_mount(self) -> None:
        """The daemon's `events` stream; when the daemon goes away, try again every
        poll interval."""
        assert self.mount is not None
        request: dict[str, Any] = {"cmd": "events"}
        if self.mount.store:
            request["store"] = self.mount.store
        while True:
            try:
                async for line in control.stream_async(self.mount.control_dir, request):
                    if "kind" in line:
                        await self.changed(line)
            except (OSError, ValueError) as exc:
                log.warning("the mount's events: %s", exc)
            await anyio.sleep(self.poll_interval)


class _Server(Server):
    """The SDK's server, whose every session announces the `list_changed` notifications
    memfs sends: the streamable HTTP transport starts each session with the server's
    own options, which would announce none."""

    def create_initialization_options(self, notification_options=None, *args, **kwargs):
        return super().create_initialization_options(
            notification_options or NotificationOptions(resources_changed=True),
            *args, **kwargs)


def _connection(ctx) -> int:
    """Which client connection a request came on (the SDK keeps it in the session)."""
    return id(getattr(ctx.session, "_connection", ctx.session))


#: Seconds a change under --mount lets the mount's daemon push before it is made.
FLUSH_WAIT = 10.0
#: `user.memfs.state` of a mount's file that is a memory (or will be, once pushed); the
#: others are editor temp files ("local-only") and files the server refused.
MEMORY_STATES = frozenset({"synced", "pending", "error", "conflict"})


def _is_memory(path: Path) -> bool:
    return state_of(path) in MEMORY_STATES


def _refuse_what_only_the_mount_holds(store: Served, command: dict[str, Any]) -> None:
    """What the mount holds and the server does not show, refused before the change
    goes to the server, as the tool refuses it there. A change to a file whose own
    changes in the mount did not reach the server even after the flush (offline, or
    refused for its bytes) would be made to the server's older text, and the mount
    would keep the user's as a conflict. A create or a rename onto a directory or a
    file the server does not hold (an empty directory, an editor temp file) would make
    a memory that collides with it: the mount would not show it."""
    assert store.mount_dir is not None
    for key in ("path", "old_path", "new_path"):
        raw = command.get(key)
        if not isinstance(raw, str):
            continue
        try:
            target = resolve(raw, store.memory.base)
        except ToolFailure:
            continue  # the command says what is wrong with it
        if not target.segments:
            continue
        made_there = (command.get("command"), key) in (("create", "path"),
                                                       ("rename", "new_path"))
        if target.segments[0] in (META_NAME, PARK_NAME):  # the mount's own names
            if not made_there:  # as view says: the mount shows no memory there
                raise ToolFailure(missing_short(target.raw) if command.get("command") in
                                  ("delete", "rename") else missing(target.raw))
            raise ToolFailure(
                (f"File {target.raw} was not created: " if key == "path" else
                 f"Cannot rename {command.get('old_path')} to {target.raw}: ")
                + f"{target.shown('/' + target.segments[0])} is the mount's own (memfs "
                "keeps it for itself), so a memory there would not show in the mount.")
        where = store.mount_dir.joinpath(*target.segments)
        state = state_of(where)
        if key != "new_path" and state in ("pending", "error"):
            raise ToolFailure(f"{target.raw} was not changed: the mount holds changes of it "
                              "that have not reached the server yet (memfs status); try "
                              "again once they have.")
        if state == "refused":
            raise ToolFailure(f"{target.raw} was not changed: the mount holds a version of "
                              "it that the server refused (not UTF-8, or over a limit: "
                              "memfs status says why); change it in the mount.")
        if not made_there:
            continue
        if state != "synced" and os.path.lexists(where):
            # `view` says it does not exist (it is no memory): say why both hold
            raise ToolFailure((f"File {target.raw} already exists" if key == "path"
                               else f"The destination {target.raw} already exists")
                              + " in the mount, as no memory (an editor's temp file or a "
                              "directory with no memory in it), so view does not show it.")
        for depth in range(1, len(target.segments)):  # under a file only the mount holds
            above = store.mount_dir.joinpath(*target.segments[:depth])
            if os.path.lexists(above) and not os.path.isdir(above):
                file = target.shown("/" + "/".join(target.segments[:depth]))
                raise ToolFailure(
                    (f"File {target.raw} was not created: " if key == "path" else
                     f"Cannot rename {command.get('old_path')} to {target.raw}: ")
                    + f"{file} is a file, so it cannot hold other files.")


def _walk(mount_dir: Path, prefix: str) -> list[tuple[str, int]]:
    """(memory path, size) of every memory below `prefix` in a mount's store directory:
    not the session marker, the version tree (`--show-meta`), editor temp files or
    files the server refused, which the API does not show either."""
    out = []
    top = mount_dir / prefix.strip("/") if prefix.strip("/") else mount_dir
    for folder, dirs, files in os.walk(top):
        rel = os.path.relpath(folder, mount_dir)
        base = "" if rel == "." else "/" + rel
        if base == "":
            dirs[:] = [d for d in dirs if d != META_NAME]
        for name in files:
            if base == "" and name == MARKER_NAME:
                continue
            where = os.path.join(folder, name)
            try:
                size = os.lstat(where).st_size
            except OSError:
                continue
            if _is_memory(Path(where)):
                out.append((f"{base}/{name}", size))
    return out


def _mime(path: str) -> str:
    return mimetypes.guess_type(path)[0] or "text/plain"


# -- transports -------------------------------------------------------------------------------


async def serve_stdio(app: MemoryMCP) -> None:
    """JSON-RPC on stdin/stdout until stdin closes (logs go to stderr)."""
    from mcp.server.stdio import stdio_server

    async with anyio.create_task_group() as tg:
        await tg.start(app.follow)
        async with stdio_server() as (read, write):
            await app.server.run(read, write, app.init_options)
        tg.cancel_scope.cancel()


class BearerGate:
    """ASGI: every HTTP request needs `Authorization: Bearer <token>` (compared in
    constant time); without it, 401 before the MCP app sees anything."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self._expected = app, token.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, value = given.strip().partition(b" ")
            # The scheme in any case (RFC 9110: `bearer` was refused; a helper).
            if not (hmac.compare_digest(value.strip(), self._expected)
                    and scheme.lower() == b"bearer"):
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="memfs mcp"')]})
                await send({"type": "http.response.body", "body":
                            b'{"error":"invalid_token","error_description":'
                            b'"memfs mcp needs its bearer token"}'})
                return
        await self.app(scope, receive, send)


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def guard(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection for a loopback address: only a Host and an Origin that
    name the loopback are answered, so a web page a browser loads from elsewhere cannot
    reach the server through a name that resolves to it. The SDK turns it on only for
    three spellings of the loopback (not 127.0.0.2, nor `[::1]` as given here);
    elsewhere the bearer token, which a page does not have, guards it (None)."""
    if not is_loopback(host):
        return None
    bare = host.strip("[]")
    given = f"[{bare}]" if ":" in bare else bare
    names = dict.fromkeys([given, "127.0.0.1", "localhost", "[::1]"])
    return TransportSecuritySettings(  # any port, or none (port 80: clients leave it out)
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*(f"{n}:*" for n in names), *names],
        allowed_origins=[*(f"http://{n}:*" for n in names), *(f"http://{n}" for n in names)])


async def serve_http(app: MemoryMCP, host: str, port: int, token: str | None,
                     on_listening) -> None:
    """Streamable HTTP at http://HOST:PORT/mcp under uvicorn (asyncio)."""
    import socket

    import uvicorn

    asgi: Any = app.server.streamable_http_app(host=host, transport_security=guard(host))
    if token:
        asgi = BearerGate(asgi, token)
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(64)
    on_listening(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(asgi, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tg:
        await tg.start(app.follow)
        await server.serve(sockets=[sock])
        tg.cancel_scope.cancel()
