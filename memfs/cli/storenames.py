"""A store named on the command line: its id, its name, or its name's slug.

`memfs mount notes ~/n`, `memfs stores archive "Team notes"`, `memfs tool team-notes`:
every command that takes a store accepts any of the three. Resolution, in order:

1. an exact store id (a ``get_store`` when the text looks like one);
2. an exact name;
3. the slug of the name (:func:`slug`: lowercase ASCII, every run of other
   characters one hyphen, trimmed), compared with the slug of the text.

Several stores at the first step that matches: a `click` error listing the candidates
(id and name), so the user can pick the id. Archived stores resolve too (they are
listed with ``include_archived``); the caller decides what to say about them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import click

from memfs.api import errors as api_errors
from memfs.api.models import MemoryStore
from memfs.api.oneshot import call_with_client
from memfs.core.shown import shown
from memfs.core.slug import mount_slugs, slug

ID_PREFIX = "memstore_"


@dataclass
class Resolved:
    store: MemoryStore
    how: str  # "id" | "name" | "slug"

    @property
    def id(self) -> str:
        return self.store.id

    @property
    def archived(self) -> bool:
        return bool(self.store.archived_at)

    def describe(self) -> str:
        return f"{self.store.id} ({shown(self.store.name)})"


class StoreNotFound(click.ClickException):
    pass


class AmbiguousStore(click.ClickException):
    pass


def _line(s: MemoryStore) -> str:
    return f"  {s.id}\t{shown(s.name)}" + ("\t(archived)" if s.archived_at else "")


def choose(text: str, stores: list[MemoryStore], *, where: str = "") -> Resolved:
    """Pick the store `text` names among `stores` (pure: no network): by id, name, the
    name's slug, then the directory `memfs mcp` and `memfs mount --all` give it, which
    tells apart stores whose names share a slug (`beta-2`: they showed it, and every
    command refused it back: a helper)."""
    for how, match in (("id", lambda s: s.id == text),
                       ("name", lambda s: s.name == text)):
        found = [s for s in stores if match(s)]
        if len(found) == 1:
            return Resolved(found[0], how)
        if len(found) > 1:
            raise _ambiguous(text, found, where, how)
    # A slug and a directory name are one kind of word: `beta-2` may be the slug of
    # "Beta 2" and the directory of the second "beta". A directory that is one of the
    # stores the slug names settles it (the first "Beta" is `beta`); two different
    # stores are an error, never a guess (archiving one is for good: a review).
    directories = _directories(stores)
    by_slug = [s for s in stores if slug(text) and slug(s.name) == slug(text)]
    by_directory = [s for s in stores if directories.get(s.id) == text]
    if len(by_directory) == 1 and (not by_slug or by_directory[0] in by_slug):
        return Resolved(by_directory[0], "directory" if len(by_slug) != 1 else "slug")
    if len(by_slug) == 1 and not by_directory:
        return Resolved(by_slug[0], "slug")
    found = by_slug + [s for s in by_directory if s not in by_slug]
    if found:
        raise _ambiguous(text, found, where, "slug or directory")
    raise StoreNotFound(f"unknown store {text!r}{where} (not an id, a name or a name's slug;"
                        " see `memfs stores list --include-archived`)")


def _ambiguous(text: str, found: list[MemoryStore], where: str, how: str) -> AmbiguousStore:
    return AmbiguousStore(f"{text!r} matches {len(found)} stores{where} by {how}; use the "
                          "id:\n" + "\n".join(_line(s) for s in found))


def _directories(stores: list[MemoryStore]) -> dict[str, str]:
    """Each active store's directory as `memfs mcp` and `--all` name them: oldest first,
    a slug taken by an earlier store made unique (`core/slug.py`)."""
    active = sorted((s for s in stores if not s.archived_at), key=lambda s: (s.created_at, s.id))
    return dict(zip((s.id for s in active), mount_slugs([(s.name, s.id) for s in active]),
                    strict=True))


async def resolve(client, text: str) -> Resolved:
    """The store `text` names on the client's server. API errors other than "not
    found" for an id-looking text (offline, bad key) propagate to the caller."""
    where = f" on {client.base_url}"
    no_such_id = False
    if text.startswith(ID_PREFIX):
        try:
            return Resolved(await client.get_store(text), "id")
        except api_errors.NotFoundError:
            no_such_id = True  # perhaps a store whose name starts with memstore_
        except (api_errors.BadRequestError, ValueError):
            pass
    stores = [s async for s in client.list_stores(include_archived=True)]
    try:
        return choose(text, stores, where=where)
    except StoreNotFound:
        if no_such_id:  # the id's own word, not "not an id" (found by a helper)
            raise StoreNotFound(f"unknown store {text}{where}: no store has this id "
                                "(deleted, or never made there; see `memfs stores list "
                                "--include-archived`)") from None
        raise


def cached_id(text: str, base_url: str, cache_dir: str | None = None) -> str | None:
    """Offline: the id of the store `text` names among the stores mounted before from
    `base_url` (their state.db remembers id and name); None when none matches. A name
    several cached stores share is an error, as online."""
    from pathlib import Path

    from memfs.local.registry import cache_root
    from memfs.state.schema import STATE_DB
    from memfs.state.view import read_meta

    root = Path(cache_dir) if cache_dir else cache_root()
    seen: dict[str, MemoryStore] = {}
    for db in root.glob(f"*/*/{STATE_DB}"):
        meta = read_meta(db, "store_id", "store_name", "base_url")
        if meta.get("base_url") == base_url and meta.get("store_id"):
            seen[meta["store_id"]] = MemoryStore(id=meta["store_id"],
                                                 name=meta.get("store_name") or "")
    try:
        return choose(text, list(seen.values()), where=f" cached from {base_url}").id
    except StoreNotFound:
        return None


def resolve_sync(base_url: str, api_key: str | None, text: str) -> Resolved:
    """:func:`resolve` for the CLI (its own short-lived client, as every command's)."""
    return call_with_client(base_url, api_key, lambda c: resolve(c, text))


def resolve_for_cli(base_url: str, api_key: str | None, text: str) -> Resolved:
    """:func:`resolve_sync` with every API failure turned into a one-line click error."""
    with resolve_errors(base_url, text):
        return resolve_sync(base_url, api_key, text)


@contextmanager
def resolve_errors(base_url: str, text: str, doing: str | None = None) -> Iterator[None]:
    """API failures while resolving `text` as one-line click errors: also around a
    :func:`resolve` inside a command's own client, so it says what `resolve_for_cli` says.
    `doing` says what failed when it was not a store's lookup (a session's)."""
    from memfs.cli.errors import describe

    try:
        yield
    except (api_errors.AuthenticationError, api_errors.PermissionDeniedError) as exc:
        raise click.ClickException(describe(base_url, exc)) from None
    except api_errors.APIError as exc:
        raise click.ClickException(describe(
            base_url, exc, doing or f"cannot resolve store {text!r}")) from None
