"""`memfs stores`: list, create and archive the memory stores of a server."""

from __future__ import annotations

import json

import click

from memfs.cli import storenames
from memfs.cli.completion import complete_stores
from memfs.cli.errors import call, command_server
from memfs.cli.options import JSON_HELP, server_options
from memfs.core.shown import shown


@click.group()
def stores():
    """List, create and archive memory stores."""


def _store_json(s) -> dict:
    return {"id": s.id, "name": s.name, "description": s.description,
            "created_at": s.created_at, "archived_at": s.archived_at}


@stores.command("list")
@server_options
@click.option("--include-archived", is_flag=True, help="List archived stores too (marked).")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def stores_list(base_url, api_key_file, include_archived, as_json):
    """List the stores on the server."""
    url, key, _embedded = command_server(base_url, api_key_file)

    async def go(c):
        return [s async for s in c.list_stores(include_archived=include_archived)]

    items = call(url, key, go, "cannot list stores")
    if as_json:
        click.echo(json.dumps([_store_json(s) for s in items], indent=2))
        return
    for s in items:
        click.echo(f"{s.id}\t{shown(s.name)}" + ("\t(archived)" if s.archived_at else ""))


@stores.command("create")
@click.argument("name")
@click.option("--description", default=None, help="The store's description (free text).")
@server_options
def stores_create(name, description, base_url, api_key_file):
    """Create a store; prints its id."""
    url, key, _embedded = command_server(base_url, api_key_file)
    s = call(url, key, lambda c: c.create_store(name, description=description),
             f"cannot create store {name!r}")
    click.echo(s.id)


@stores.command("archive")
@click.argument("store_id", metavar="STORE", shell_complete=complete_stores)
@server_options
def stores_archive(store_id, base_url, api_key_file):
    """Archive STORE (an id, a name or a slug; one-way: it becomes read-only)."""
    url, key, _embedded = command_server(base_url, api_key_file)
    found = storenames.resolve_for_cli(url, key, store_id)
    if found.archived:
        click.echo(f"{found.describe()} is already archived")
        return
    s = call(url, key, lambda c: c.archive_store(found.id),
             f"cannot archive {found.describe()}")
    click.echo(f"archived {s.id}")
