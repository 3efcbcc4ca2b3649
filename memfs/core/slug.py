"""Store names as directory names: the session container's ``/mnt/memory/<slug>``.

The service derives a memory-store resource's ``mount_path`` from the store's
name: "lowercased; non-alphanumeric runs become a single hyphen", ASCII letters
and digits only. memfs implements exactly that, and decides the cases the
service leaves unpublished (``docs/SERVER.md``, Sessions):

* leading and trailing hyphens are trimmed (``"  Team Notes! "`` → ``team-notes``);
* a name with no ASCII letter or digit (all symbols, or non-ASCII only) has an
  empty slug: the store's id is slugged instead (``memstore_01AbC`` →
  ``memstore-01abc``);
* two stores of one session (or of one ``--all`` root) whose slugs collide: the
  first keeps the slug, each later one takes the first free of ``slug-2``,
  ``slug-3``, … in order (the slug cut short so that each stays within 255 bytes).

Shared by the server (``memfs serve`` computes ``mount_path``) and the client.
"""

from __future__ import annotations

import re

__all__ = ["MOUNT_ROOT", "slug", "mount_slug", "mount_slugs", "unique"]

#: Where a session mounts its memory stores; ``mount_path`` = MOUNT_ROOT + slug.
MOUNT_ROOT = "/mnt/memory/"

_OTHER = re.compile(r"[^a-z0-9]+")


def slug(name: str) -> str:
    """The filesystem-safe slug of a store name; ``''`` when nothing is left.

    ASCII letters are lowercased (only those: ``str.lower`` would turn some
    non-ASCII letters into ASCII ones), then every run of characters other than
    ``[a-z0-9]`` becomes one hyphen, and leading/trailing hyphens are trimmed.

    >>> slug("User Preferences")
    'user-preferences'
    >>> slug("--Ünïcode  Notes!--")
    'n-code-notes'
    >>> slug("???")
    ''
    """
    lowered = "".join(c.lower() if "A" <= c <= "Z" else c for c in name)
    return _OTHER.sub("-", lowered).strip("-")


def mount_slugs(stores: list[tuple[str, str]]) -> list[str]:
    """The directory of each ``(name, store_id)`` in order, unique among them.

    A name whose :func:`slug` is empty uses the slug of its store id. A slug
    already taken by an earlier entry becomes the first free of ``slug-2``,
    ``slug-3``, … .

    >>> mount_slugs([("Notes", "memstore_a"), ("notes!", "memstore_b"), ("***", "memstore_C")])
    ['notes', 'notes-2', 'memstore-c']
    """
    out: list[str] = []
    taken: set[str] = set()
    for name, store_id in stores:
        candidate = mount_slug(name, store_id, taken)
        taken.add(candidate)
        out.append(candidate)
    return out


def mount_slug(name: str, store_id: str, taken: set[str]) -> str:
    """One store's directory given the names already `taken` (not added to them).

    The rule of :func:`mount_slugs`, for a store that arrives after the others: the
    ``--all`` watch names a store created later with it, so a directory's name never
    depends on whether its store was there at mount time or came later.

    >>> mount_slug("Notes", "memstore_b", {"notes"})
    'notes-2'
    """
    return unique(slug(name) or slug(store_id), taken)


#: The longest directory name (bytes): a suffix never takes a name past it.
NAME_MAX = 255


def unique(name: str, taken: set[str]) -> str:
    """`name`, or the first free of `name-2`, `name-3`, … when `name` is taken; `name`
    cut short (at a character's end) so that each stays a name of at most 255 bytes (two
    stores of 255-character names were `…-2`, 257 bytes: no program could open it, a
    helper)."""
    candidate, n = name, 2
    while candidate in taken:
        suffix = f"-{n}"
        head = name.encode()[:NAME_MAX - len(suffix)].decode("utf-8", "ignore")
        candidate, n = head + suffix, n + 1
    return candidate
