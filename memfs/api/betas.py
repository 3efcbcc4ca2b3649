"""The ``anthropic-beta`` values of the Memory Stores API, for both of its ends.

The client sends them (:mod:`memfs.api.client`) and `memfs serve` checks them
(:mod:`memfs.server.http`): one definition, so the two cannot drift. A module of
its own, holding nothing but strings, because the server must not import the
client (httpx, trio); ``memfs.api``'s package import stays light (the client's
names load on first use).
"""

#: Every memory store request carries this one.
MEMORY_BETA = "agent-memory-2026-07-22"
#: The managed-agents beta: what session endpoints take instead of the memory one
#: (and what memory endpoints took before it; `memfs serve` still accepts it there).
SESSIONS_BETA = "managed-agents-2026-04-01"
