"""Who holds `memfs serve`'s connections, so that no one client can take them all.

A global cap alone lets one client lock everyone out: it opens as many idle
sockets as the cap allows, and every other client is refused. So:

* **Near the cap, a share per client.** While fewer than ``high_water`` (90 %)
  of the cap are open, any client may open more (500 parallel requests from
  one CI machine are fine). From there on, a client address (an IPv6 client:
  its /64, which one host usually owns whole) already holding ``per_client``
  connections is refused at once with 503, and
* **idle ones go first.** Every other newcomer first makes room: the idle
  connections (no request in progress: a kept-alive one, or one that has not
  finished a request head) of the clients holding the most are closed, oldest
  first, down to ``low_water`` (80 %). Requests in progress are never cut.
  Behind a load balancer every connection comes from the balancer: raise
  ``--max-connections-per-client`` to ``--max-connections``.
* **One log line, not one per refusal.** Refusals are counted and logged at
  most once every ``LOG_EVERY`` seconds, with how many there were.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("memfs.server")

LOG_EVERY = 10.0


class Held(Protocol):
    """A connection as the ledger sees it (the server's h11 protocol)."""

    client_key: str
    last_active: float

    def is_idle(self) -> bool: ...

    def close_idle(self) -> None: ...


def client_key(peer: object) -> str:
    """The address a connection counts against: its IP, an IPv6 one by /64."""
    if not (isinstance(peer, tuple) and peer):
        return "-"
    try:
        ip = ipaddress.ip_address(str(peer[0]).split("%", 1)[0])
    except ValueError:
        return str(peer[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class ConnectionLedger:
    """Connections by client, the cap, and the shedding of idle ones."""

    def __init__(self, max_connections: int, per_client: int,
                 on_refused: Callable[[str], None] | None = None,
                 on_shed: Callable[[int], None] | None = None) -> None:
        self.max_connections = max_connections
        self.per_client = per_client
        self.high_water = max(1, max_connections * 9 // 10)
        self.low_water = max(1, max_connections * 8 // 10)
        self.by_client: dict[str, set[Held]] = {}
        self.total = 0
        self.on_refused = on_refused  # (reason): for the metrics
        self.on_shed = on_shed  # (how many): for the metrics
        self._refused_since_log = 0
        self._last_log = float("-inf")

    def admit(self, conn: Held) -> str | None:
        """Count ``conn`` in, or say why it is refused: ``"per_client"`` or ``"cap"``."""
        if self.total >= self.high_water:
            held = self.by_client.get(conn.client_key)
            if held is not None and len(held) >= self.per_client:
                return self._refuse("per_client", conn.client_key)
            self.shed_idle()
        if self.total >= self.max_connections:
            return self._refuse("cap", conn.client_key)
        self.by_client.setdefault(conn.client_key, set()).add(conn)
        self.total += 1
        return None

    def release(self, conn: Held) -> None:
        held = self.by_client.get(conn.client_key)
        if held is None or conn not in held:
            return
        held.discard(conn)
        self.total -= 1
        if not held:
            del self.by_client[conn.client_key]

    def shed_idle(self) -> int:
        """Close idle connections, the busiest clients' and the oldest first, down
        to ``low_water``. Returns how many were closed."""
        excess = self.total - self.low_water
        if excess <= 0:
            return 0
        idle = [c for held in self.by_client.values() for c in held if c.is_idle()]
        idle.sort(key=lambda c: (-len(self.by_client[c.client_key]), c.last_active))
        victims = idle[:excess]
        for conn in victims:
            self.release(conn)
            conn.close_idle()
        if victims and self.on_shed is not None:
            self.on_shed(len(victims))
        return len(victims)

    def _refuse(self, reason: str, key: str) -> str:
        if self.on_refused is not None:
            self.on_refused(reason)
        self._refused_since_log += 1
        now = time.monotonic()
        if now - self._last_log >= LOG_EVERY:
            busiest = max(self.by_client.items(), key=lambda kv: len(kv[1]), default=None)
            log.warning(
                "refused %d connection(s) since the last such line (at most one every %gs;"
                " cap %d, %d per client; %d open; the busiest client, %s, holds %d);"
                " this one: %s from %s",
                self._refused_since_log, LOG_EVERY, self.max_connections, self.per_client,
                self.total, busiest[0] if busiest else "-", len(busiest[1]) if busiest else 0,
                reason, key)
            self._refused_since_log = 0
            self._last_log = now
        return reason
