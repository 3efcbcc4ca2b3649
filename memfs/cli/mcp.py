"""`memfs mcp [STORE ...]`: memory stores as an MCP server (memfs/tool/mcp.py).

Which stores: the STOREs named (id, name or slug), a session's (`--session`, each
with its access), a live mount's (`--mount`), or else every store of the account.
This module imports neither the ``mcp`` SDK nor trio until the command runs, so
`memfs --help` works without the ``mcp`` extra.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from memfs.cli.completion import complete_stores

#: The environment variable that may hold the HTTP bearer token (never argv).
TOKEN_ENV = "MEMFS_MCP_TOKEN"


def _token(token_file: str | None) -> str | None:
    if token_file:
        try:
            text = Path(token_file).read_text().strip()
        except OSError as exc:
            raise click.ClickException(f"cannot read --token-file {token_file}: "
                                       f"{exc.strerror or exc}") from None
        if not text:
            raise click.ClickException(f"--token-file {token_file} is empty")
        from memfs.cli.errors import warn_open_secret

        warn_open_secret(token_file, "the token file")  # as an API key file (a review)
        return text
    return os.environ.get(TOKEN_ENV, "").strip() or None  # (spaces: no token, refused)


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    try:
        number = int(port)
        if not 0 <= number <= 65535:
            raise ValueError
    except ValueError:
        raise click.BadParameter(f"{text!r}: give HOST:PORT, e.g. 127.0.0.1:8765",
                                 param_hint="--http") from None
    return host or "127.0.0.1", number


@click.command("mcp")
@click.argument("stores", nargs=-1, metavar="[STORE]...", shell_complete=complete_stores)
@click.option("--session", "session_id", default=None, metavar="SESSION_ID",
              help="Serve the stores of this session, each under its directory name and "
              "with its access (read_only stays read-only).")
@click.option("--mount", "mount", default=None, metavar="MNT",
              help="Serve over a live memfs mount (a store or a session root): reads come "
              "from its cache and changes from its feed, at no request.")
@click.option("--read-only", is_flag=True, help="Refuse every change, in every store.")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Streamable HTTP at http://HOST:PORT/mcp instead of stdio. A non-loopback "
              f"HOST needs a bearer token (${TOKEN_ENV} or --token-file).")
@click.option("--token-file", default=None, help="With --http: the bearer token every "
              f"request must carry (default: ${TOKEN_ENV}).")
@click.option("--poll-interval", default=2.0, show_default=True, type=click.FloatRange(0.1),
              help="Without --mount: seconds between polls of each store's versions "
              "(resource notifications).")
@click.option("--page-size", default=100, show_default=True, type=click.IntRange(1, 1000),
              help="Resources per resources/list page.")
@click.option("--base-url", default=None, help="API base URL (default: $ANTHROPIC_BASE_URL, "
              "else the embedded local server).")
@click.option("--api-key-file", default=None, help="Read the API key from this file "
              "(default: $ANTHROPIC_API_KEY).")
def mcp(stores: tuple[str, ...], session_id: str | None, mount: str | None, read_only: bool,
        http: str | None, token_file: str | None, poll_interval: float, page_size: int,
        base_url: str | None, api_key_file: str | None) -> None:
    """Serve memory stores over MCP: the memory tool's commands, `search`, and every
    memory as a resource (memory://<store>/<path>), with change notifications.

    stdio by default (for Claude Code, Claude Desktop and other harnesses)."""
    logging.basicConfig(stream=sys.stderr, level=os.environ.get("MEMFS_LOG_LEVEL", "WARNING"),
                        format="memfs mcp: %(levelname)s %(message)s")
    try:
        import mcp as _sdk  # noqa: F401
    except ImportError:
        raise click.ClickException("memfs mcp needs the MCP SDK: pip install -e '.[mcp]' "
                                   "in the memfs checkout (`memfs` on PyPI is another "
                                   "project)") from None
    if token_file and not http:
        raise click.UsageError("--token-file goes with --http")
    token = _token(token_file)
    host_port = _host_port(http) if http else None
    if host_port is not None:
        from memfs.tool.mcp import is_loopback

        if not is_loopback(host_port[0]) and not token:
            raise click.ClickException(
                f"--http {http}: {host_port[0]} is not a loopback address, so every request "
                f"must carry a bearer token: set ${TOKEN_ENV} or give --token-file")
    app = _build(stores, session_id, mount, read_only, poll_interval, page_size, base_url,
                 api_key_file)
    import anyio

    from memfs.tool import mcp as mcp_server

    try:
        if host_port is None:
            anyio.run(mcp_server.serve_stdio, app, backend="trio")
        else:
            host, port = host_port

            def listening(bound: int) -> None:
                click.echo(f"memfs mcp: serving http://{host}:{bound}/mcp"
                           + (" (bearer token required)" if token else ""), err=True)

            anyio.run(mcp_server.serve_http, app, host, port, token, listening,
                      backend="asyncio")
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise click.ClickException(f"cannot serve: {exc.strerror or exc}") from None


def _build(stores: tuple[str, ...], session_id: str | None, mount: str | None,
           read_only: bool, poll_interval: float, page_size: int, base_url: str | None,
           api_key_file: str | None):
    from memfs.api.oneshot import call_with_client
    from memfs.cli.errors import command_server, mount_server
    from memfs.core.slug import mount_slugs, slug
    from memfs.tool.mcp import MemoryMCP, MountLink, Served
    from memfs.tool.store import StoreMemory

    # rows: (store id, display name, directory name or None, read-only, mount dir)
    link: MountLink | None = None
    if mount is not None:
        link, rows, info = _mount_rows(mount, stores)
        server = (command_server(base_url, api_key_file) if base_url
                  else mount_server(info, api_key_file))
        url, key = server.url, server.key
        if rows and rows[0][1] is None:  # a store mount whose daemon has no name for it
            try:
                store = call_with_client(url, key, lambda c: c.get_store(rows[0][0]))
                rows = [(store.id, store.name, None, *rows[0][3:])]
            except Exception as exc:  # offline: the id stands for the name
                logging.getLogger("memfs.mcp").warning("store name: %s", exc)
                rows = [(rows[0][0], rows[0][0], *rows[0][2:])]
    else:
        server = command_server(base_url, api_key_file)
        url, key = server.url, server.key
        rows = _store_rows(url, key, stores, session_id)
    if not rows:
        raise click.ClickException("no memory store to serve")
    if len({r[0] for r in rows}) != len(rows):
        raise click.UsageError("a store is named twice")
    names = mount_slugs([(r[1], r[0]) for r in rows])
    served = []
    several = len(rows) > 1
    for (store_id, name, directory, ro, mount_dir), fallback in zip(rows, names, strict=True):
        where = directory or fallback
        served.append(Served(
            slug=where or slug(store_id), store_id=store_id, name=name or store_id,
            memory=StoreMemory(store_id, url, key, base=(where,) if several else (),
                               read_only=ro or read_only, locate=server.locate),
            read_only=ro or read_only, mount_dir=mount_dir))
    return MemoryMCP(served, base_url=url, api_key=key, mount=link,
                     poll_interval=poll_interval, page_size=page_size, locate=server.locate)


def _store_rows(url: str, key: str | None, stores: tuple[str, ...],
                session_id: str | None) -> list:
    """The rows of the stores to serve without a mount: a session's, the STOREs
    named, or every store of the account."""
    from memfs.api.oneshot import call_with_client
    from memfs.cli import storenames
    from memfs.cli.group import session_layout

    if session_id is not None:
        if stores:
            raise click.UsageError("give STOREs or --session, not both")
        with storenames.resolve_errors(url, session_id, f"cannot read session {session_id!r}"):
            session = call_with_client(url, key, lambda c: c.get_session(session_id))
        return [(r.memory_store_id, r.name or r.memory_store_id, name,
                 r.access == "read_only", None) for r, name in session_layout(session.resources)[1]]
    if stores:
        found = [storenames.resolve_for_cli(url, key, text).store for text in stores]
        return [(s.id, s.name, None, bool(s.archived_at), None) for s in found]

    async def every(c):
        return [s async for s in c.list_stores()]

    with storenames.resolve_errors(url, "", "cannot list the stores"):
        listed = sorted(call_with_client(url, key, every), key=lambda s: (s.created_at, s.id))
    return [(s.id, s.name, None, False, None) for s in listed]


def _mount_rows(mount: str, stores: tuple[str, ...]):
    """(MountLink, rows, its registry entry) of a live mount: a store mount or a
    session root (all its stores, or the STOREs named among them)."""
    from memfs.core.slug import slug
    from memfs.local import control
    from memfs.local.registry import read_registry, root_store
    from memfs.tool.mcp import MountLink

    path = os.path.abspath(mount)
    info = read_registry(path)
    under = None if info else root_store(path)
    if under is not None:  # a store's directory under a live root: that store of it
        link, rows, info = _mount_rows(under[0], stores or (under[2],))
        if any(r[2] != under[2] for r in rows):  # STOREs named by id or name: its own
            raise click.UsageError(f"{mount} holds {under[2]} only")
        return link, rows, info
    if not info:
        raise click.ClickException(f"{mount} is not a live memfs mount (see `memfs status`)")
    control_dir = Path(info["state_dir"])
    try:
        status = control.request(control_dir, {"cmd": "status"})["status"]
    except (OSError, ValueError, KeyError) as exc:
        raise click.ClickException(f"the daemon of {mount} does not answer: {exc}") from None
    if "stores" not in info:  # a plain mount: one store, the mountpoint itself
        name = status.get("store_name")  # None: asked of the server (`_build`)
        if stores and not {info["store_id"], name, name and slug(name)} & set(stores):
            raise click.UsageError(f"{mount} holds {name or info['store_id']} only")
        ro = bool(status.get("read_only"))
        rows = [(info["store_id"], name, None, ro, Path(path))]
        return MountLink(control_dir, None, Path(path), _ids(rows)), rows, info
    by_id = {s.get("store_id"): s for s in status.get("stores", [])}
    rows = []
    for s in info["stores"]:
        named = by_id.get(s["store_id"], {}).get("store_name")
        if stores and not ({s["name"], s["store_id"], named} & set(stores)):
            continue
        ro = bool(by_id.get(s["store_id"], {}).get("read_only"))
        rows.append((s["store_id"], s["name"], s["name"], ro, Path(path) / s["name"]))
    if stores and len(rows) != len(stores):
        raise click.UsageError(f"not every STORE is a directory of {mount} "
                               f"({', '.join(s['name'] for s in info['stores'])})")
    only = rows[0][2] if len(rows) == 1 and len(info["stores"]) > 1 else None
    return MountLink(control_dir, only, Path(path), _ids(rows)), rows, info


def _ids(rows: list) -> frozenset[str]:
    """The stores served from a mount: how the MCP server tells, at each call, that
    the mount there is still theirs."""
    return frozenset(r[0] for r in rows)
