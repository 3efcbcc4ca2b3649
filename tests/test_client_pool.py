"""memfs/api/pool.py: the linear pool decides exactly as httpcore's own.

Both `_assign_requests_to_connections` run on the same random pool states (fake
connections and requests whose answers are fixed per state, so any order of asking
gives the same answers), and every outcome is compared: the connections kept and in
what order, the ones returned for closing, which request got which connection, the
connections created. The real pool is in every mount test (the client installs it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import httpcore
import httpx

from memfs.api import pool
from memfs.api.client import MemoryStoresClient

ORIGINS = ["a", "b"]


@dataclass(eq=False)
class Conn:
    name: str
    origin: str
    closed: bool = False
    expired: bool = False
    idle: bool = False
    available: bool = False

    def is_closed(self) -> bool:
        return self.closed

    def has_expired(self) -> bool:
        return self.expired

    def is_idle(self) -> bool:
        return self.idle

    def is_available(self) -> bool:
        return self.available

    def can_handle_request(self, origin: str) -> bool:
        return origin == self.origin


@dataclass
class Url:
    origin: str


@dataclass
class Req:
    url: Url


@dataclass(eq=False)
class PoolRequest:
    request: Req
    connection: Conn | None = None
    assigned: list[str] = field(default_factory=list)

    def is_queued(self) -> bool:
        return self.connection is None

    def assign_to_connection(self, connection: Conn) -> None:
        self.connection = connection
        self.assigned.append(connection.name)


def _state(rng: random.Random) -> tuple[list[Conn], list[PoolRequest], int, int]:
    conns = []
    for i in range(rng.randint(0, 8)):
        state = rng.choice(["closed", "expired", "idle", "active", "available"])
        conns.append(Conn(f"c{i}", rng.choice(ORIGINS), closed=state == "closed",
                          expired=state == "expired",
                          idle=state in ("idle", "available") and rng.random() < 0.8,
                          available=state in ("available", "idle") and rng.random() < 0.7))
    requests = []
    for _ in range(rng.randint(0, 6)):
        r = PoolRequest(Req(Url(rng.choice(ORIGINS))))
        if rng.random() < 0.3 and conns:
            r.connection = rng.choice(conns)  # already assigned: not queued
        requests.append(r)
    return conns, requests, rng.randint(1, 8), rng.randint(0, 8)


def _run(cls, conns, requests, max_connections, max_keepalive):
    made: list[tuple[str, str]] = []

    def create_connection(origin: str) -> Conn:
        made.append((f"new{len(made)}", origin))
        return Conn(f"new{len(made) - 1}", origin)

    p = cls.__new__(cls)
    p._connections = list(conns)
    p._requests = list(requests)
    p._max_connections = max_connections
    p._max_keepalive_connections = max_keepalive
    p.create_connection = create_connection
    closing = p._assign_requests_to_connections()
    return ([c.name for c in p._connections], [c.name for c in closing],
            [r.assigned for r in requests], made)


def test_the_linear_pool_decides_as_httpcores_on_random_states():
    rng = random.Random(7)
    for case in range(3000):
        seed = rng.random()
        results = []
        for cls in (httpcore.AsyncConnectionPool, pool._LinearPool):
            conns, requests, max_c, max_k = _state(random.Random(seed))
            results.append(_run(cls, conns, requests, max_c, max_k))
        assert results[0] == results[1], (case, seed)


def test_the_client_gets_the_linear_pool_and_a_test_transport_is_left_alone():
    client = MemoryStoresClient("http://127.0.0.1:9")
    assert type(client._http._transport._pool) is pool._LinearPool
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    assert MemoryStoresClient("http://127.0.0.1:9", transport=mock)._http._transport is mock
    assert pool.install(httpx.AsyncClient(transport=mock)) is False
