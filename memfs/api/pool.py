"""httpcore 1.0's connection pool without its quadratic bookkeeping.

httpcore runs `AsyncConnectionPool._assign_requests_to_connections` twice per request
(when it is queued and when its answer is closed). Its first loop asks, for every idle
connection, `len([c.is_idle() for c in self._connections])`: a list of every connection
built for each idle one, O(connections²) per call. A push pass keeps 32 connections
open (the push concurrency), so that is about 2,000 `is_idle()` calls per request: a
profile of a 600-file pass against `memfs serve` found a fifth of the daemon's CPU
there (upstream: encode/httpcore#1035, open). The list's length is simply the number
of connections, so `len(self._connections)` is the same test.

`_LinearPool._assign_requests_to_connections` is upstream's method with that one
expression replaced, and with the first available (or idle) connection found by a scan
that stops at it instead of lists of all of them: fewer questions of the same
connections, the same choices, the same result (tests/test_client_pool.py runs both on
random pool states and compares every outcome). Installed on the client's own default
transport only when its pool is exactly httpcore's class and has the method; anything
else (another httpcore, a test transport, a proxy) is left as it is.
"""

from __future__ import annotations

import httpcore
import httpx


class _LinearPool(httpcore.AsyncConnectionPool):
    def _assign_requests_to_connections(self) -> list:  # type: ignore[override]
        closing = []
        # Closed, expired, or surplus idle connections go (upstream's order and test).
        for connection in list(self._connections):
            if connection.is_closed():
                self._connections.remove(connection)
            elif connection.has_expired() or (
                    connection.is_idle()
                    and len(self._connections) > self._max_keepalive_connections):
                self._connections.remove(connection)
                closing.append(connection)

        # Queued requests to connections: an available one, a new one, or one made by
        # closing an idle one.
        for pool_request in [r for r in self._requests if r.is_queued()]:
            origin = pool_request.request.url.origin
            connection = next((c for c in self._connections
                               if c.can_handle_request(origin) and c.is_available()), None)
            if connection is not None:
                pool_request.assign_to_connection(connection)
            elif len(self._connections) < self._max_connections:
                connection = self.create_connection(origin)
                self._connections.append(connection)
                pool_request.assign_to_connection(connection)
            else:
                idle = next((c for c in self._connections if c.is_idle()), None)
                if idle is not None:
                    self._connections.remove(idle)
                    closing.append(idle)
                    connection = self.create_connection(origin)
                    self._connections.append(connection)
                    pool_request.assign_to_connection(connection)
        return closing


def install(client: httpx.AsyncClient) -> bool:
    """Give `client`'s default transport the linear pool; False when it is not
    httpcore's stock pool (then nothing changes)."""
    transport = getattr(client, "_transport", None)
    pool = getattr(transport, "_pool", None)
    if type(pool) is not httpcore.AsyncConnectionPool or not hasattr(
            httpcore.AsyncConnectionPool, "_assign_requests_to_connections"):
        return False
    pool.__class__ = _LinearPool
    return True
