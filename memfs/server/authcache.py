"""Session tokens the database has already refused, remembered briefly.

A forged token of the right shape costs a database lookup before its 401; a
client repeating one (a flood) would cost one per request. A refused token
never becomes valid (tokens are random, and a session is never un-archived or
un-deleted), so remembering the refusal is safe; it is kept only ``ttl``
seconds and at most ``size`` entries, keyed by the token's SHA-256 (the token
itself is not kept).
"""

from __future__ import annotations

import time


class RefusedTokens:
    """``sha256 → message`` of recent 401s, oldest dropped first."""

    def __init__(self, ttl: float = 30.0, size: int = 10_000) -> None:
        self.ttl = ttl
        self.size = size
        self._entries: dict[str, tuple[float, str]] = {}

    def get(self, digest: str) -> str | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[0] < time.monotonic():
            del self._entries[digest]
            return None
        return entry[1]

    def put(self, digest: str, message: str) -> None:
        self._entries.pop(digest, None)
        while len(self._entries) >= self.size:
            del self._entries[next(iter(self._entries))]
        self._entries[digest] = (time.monotonic() + self.ttl, message)
