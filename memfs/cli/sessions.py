"""`memfs sessions`: make and look at sessions, so a session mount can be tried locally.

On `memfs serve` (the embedded local server by default) a session only attaches memory
stores: nothing runs in it. `memfs sessions create --store NOTES --store DOCS:read_only`
prints the new session's id for `memfs mount --session ID`. On the hosted API sessions
are made by the Managed Agents service; `list` and `show` work there too.
"""

from __future__ import annotations

import json

import click

from memfs.api import errors as api_errors
from memfs.api.oneshot import call_with_client
from memfs.cli import storenames
from memfs.cli.completion import complete_stores
from memfs.cli.errors import call, command_server, describe
from memfs.cli.options import JSON_HELP, server_options
from memfs.core.shown import shown

ACCESS = ("read_write", "read_only")


def _session_json(s) -> dict:
    return {"id": s.id, "status": s.status, "created_at": s.created_at,
            "archived_at": s.archived_at,
            "memory_stores": [{"memory_store_id": r.memory_store_id, "name": r.name,
                               "access": r.access, "mount_path": r.mount_path}
                              for r in s.memory_stores]}


def _describe(s) -> str:
    lines = [f"{s.id}" + (" (archived)" if s.archived_at else "")]
    for r in s.memory_stores:
        lines.append("  " + "\t".join(shown(x) for x in (
            r.mount_path or "-", r.memory_store_id, r.access, r.name)))
    return "\n".join(lines)


@click.group()
def sessions():
    """Sessions: the memory stores an agent session sees at /mnt/memory."""


@sessions.command("create")
@click.option("--store", "stores_", multiple=True, required=True, metavar="STORE[:read_only]",
              shell_complete=complete_stores,
              help="Attach this store (an id, a name or its slug), read-write unless "
              "`:read_only` follows (repeatable, at most 8).")
@click.option("--agent", default="memfs", show_default=True, help="Agent id (echoed).")
@click.option("--environment", default="memfs", show_default=True,
              help="Environment id (echoed).")
@server_options
def sessions_create(stores_, agent, environment, base_url, api_key_file):
    """Create a session with these stores attached; prints its id on the last line."""
    url, key, _embedded = command_server(base_url, api_key_file)
    wanted = []
    for spec in stores_:
        name, access = spec, "read_write"
        if ":" in spec and spec.rsplit(":", 1)[1] in ACCESS:
            name, access = spec.rsplit(":", 1)
        wanted.append((name, access))

    async def go(c):  # one client, one listing for every --store
        stores = [s async for s in c.list_stores(include_archived=True)]
        attached = [(_choose(name, stores, url), access) for name, access in wanted]
        return await c.create_session(attached, agent=agent, environment_id=environment)

    s = call(url, key, go, "cannot create the session")
    for r in s.memory_stores:
        click.echo("  " + "\t".join(shown(x) for x in (r.mount_path, r.access, r.name)),
                   err=True)
    click.echo(s.id)


def _choose(name: str, stores: list, url: str) -> str:
    """The id of the store `name` names; a miss on `X:readonly` and the like hints at
    the access suffix it meant (only `:read_only` and `:read_write` are one)."""
    try:
        return storenames.choose(name, stores, where=f" on {url}").id
    except storenames.StoreNotFound as exc:
        base, sep, suffix = name.rpartition(":")
        if not sep:
            raise
        raise storenames.StoreNotFound(
            f"{exc.message}; {suffix!r} is not an access: to attach {base!r} read-only, "
            f"write {base}:read_only (or :read_write)") from None


@sessions.command("list")
@click.option("--store", default=None, shell_complete=complete_stores,
              help="Only sessions that attach this store.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@server_options
def sessions_list(store, as_json, base_url, api_key_file):
    """List sessions (newest first), with the stores each attaches."""
    url, key, _embedded = command_server(base_url, api_key_file)

    async def go(c):  # one client resolves --store and lists
        store_id = None
        if store:
            with storenames.resolve_errors(url, store):
                store_id = (await storenames.resolve(c, store)).id
        return [s async for s in c.list_sessions(store_id)]

    items = call(url, key, go, "cannot list sessions")
    if as_json:
        click.echo(json.dumps([_session_json(s) for s in items], indent=2))
        return
    for s in items:
        click.echo(_describe(s))


@sessions.command("show")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@server_options
def sessions_show(session_id, as_json, base_url, api_key_file):
    """One session and its stores."""
    url, key, _embedded = command_server(base_url, api_key_file)
    try:
        s = call_with_client(url, key, lambda c: c.get_session(session_id))
    except api_errors.NotFoundError:
        raise click.ClickException(f"unknown session {session_id} on {url}") from None
    except api_errors.APIError as exc:
        raise click.ClickException(describe(url, exc, f"cannot show session {session_id}")) \
            from None
    click.echo(json.dumps(_session_json(s), indent=2) if as_json else _describe(s))
