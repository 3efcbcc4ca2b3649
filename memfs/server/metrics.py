"""Prometheus metrics of `memfs serve` (``--metrics``: ``GET /_memfs/metrics``).

Everything is counted whether or not the endpoint is enabled (a counter costs
a few microseconds); ``--metrics`` only decides whether it is served. One
registry per server (not the process-global one), so an in-process test can run
several. The exposition is ``prometheus_client``'s; per-store gauges are read
from the database at scrape time (:class:`StoreCollector`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from memfs.server.db import Database

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: Request latencies: a cached read takes ~1 ms, a contended PostgreSQL write tens.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0)
DB_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class StoreCollector(Collector):
    """Stores by state, memories and versions per store: read at scrape time."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = self.db.store_counts()
        stores = GaugeMetricFamily("memfs_server_stores", "Memory stores, by state.",
                                   labels=["state"])
        archived = sum(1 for _, a, _, _ in rows if a)
        stores.add_metric(["active"], len(rows) - archived)
        stores.add_metric(["archived"], archived)
        memories = GaugeMetricFamily("memfs_server_store_memories",
                                     "Live memories of each store.", labels=["store_id"])
        versions = GaugeMetricFamily("memfs_server_store_versions",
                                     "Versions (history rows) of each store.",
                                     labels=["store_id"])
        for store_id, _, n_mem, n_ver in rows:
            memories.add_metric([store_id], n_mem)
            versions.add_metric([store_id], n_ver)
        yield stores
        yield memories
        yield versions


class ServerMetrics:
    """The server's counters, gauges and histograms (names in docs/SERVER.md)."""

    def __init__(self, db: Database | None = None) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "memfs_server_requests", "Requests answered, by route template, method and status"
            " (status 0: the connection was dropped without an answer).",
            ["route", "method", "status"], registry=r)
        self.latency = Histogram(
            "memfs_server_request_duration_seconds",
            "Time from the request head to the end of the answer, by route and method.",
            ["route", "method"], buckets=LATENCY_BUCKETS, registry=r)
        self.bodies_refused = Counter(
            "memfs_server_bodies_refused",
            "Request bodies refused: too_large, timeout, budget (server-wide buffer full),"
            " depth, values, not_finite, not_json.", ["reason"], registry=r)
        self.connections_open = Gauge(
            "memfs_server_connections_open", "Open client connections.", registry=r)
        self.connections_refused = Counter(
            "memfs_server_connections_refused",
            "Connections closed at once: cap (server-wide) or per_client.", ["reason"],
            registry=r)
        self.idle_closed = Counter(
            "memfs_server_idle_connections_closed",
            "Idle connections closed early because the server was near its connection cap.",
            registry=r)
        self.heads_refused = Counter(
            "memfs_server_request_heads_refused",
            "Request heads refused: too_large (over 16 KiB), timeout, malformed, framing"
            " (content-length with transfer-encoding).", ["reason"], registry=r)
        self.db_time = Histogram(
            "memfs_server_db_duration_seconds",
            "Time of each database operation (one transaction), by operation.",
            ["op"], buckets=DB_BUCKETS, registry=r)
        self.db_errors = Counter(
            "memfs_server_db_errors",
            "Database operations that failed with an unexpected error (answered 500).",
            ["op"], registry=r)
        self.auth_failures = Counter(
            "memfs_server_auth_failures",
            "401 answers: key (wrong or missing API key), token_malformed, token_unknown"
            " (looked up), token_cached (refused from the negative cache).", ["reason"],
            registry=r)
        self.attributed = Counter(
            "memfs_server_session_header_requests",
            "Requests attributed to a session through x-memfs-session-id (with the API key).",
            registry=r)
        if db is not None:
            r.register(StoreCollector(db))

    def exposition(self) -> bytes:
        """The text exposition (reads the database: call it off the event loop)."""
        return generate_latest(self.registry)
