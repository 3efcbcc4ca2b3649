"""Store names as directory names: the session container's ``/mnt/memory/<slug>``.

The service derives a resource's ``mount_path`` from the store's name: lowercase
ASCII, every run of other characters one hyphen, trimmed. Two decisions of ours
where the service's behaviour is unpublished (docs/SESSIONS.md): a name with no
ASCII letter or digit falls back to the slug of the store's id, and when two
stores of one session (or of one `--all` root) share a slug, the first keeps it
and later ones get ``-2``, ``-3``... in order.
"""

from __future__ import annotations

import re

_OTHER = re.compile(r"[^a-z0-9]+")


def slug(name: str) -> str:
    """'User Preferences' -> 'user-preferences'; '' when nothing is left."""
    lowered = "".join(c.lower() if "A" <= c <= "Z" else c for c in name)
    return _OTHER.sub("-", lowered).strip("-")


def mount_slugs(stores: list[tuple[str, str]]) -> list[str]:
    """The directory of each (name, store_id) in order, unique among them."""
    out: list[str] = []
    taken: set[str] = set()
    for name, store_id in stores:
        base = slug(name) or slug(store_id)
        candidate, n = base, 2
        while candidate in taken:
            candidate = f"{base}-{n}"
            n += 1
        taken.add(candidate)
        out.append(candidate)
    return out
