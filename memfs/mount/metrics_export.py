"""A mount's Prometheus endpoint (`memfs mount --metrics-addr HOST:PORT`).

prometheus_client serves ``/metrics`` from its own thread (its WSGI server), so a
scrape never waits on FUSE and FUSE never waits on a scrape. What it exports is
read on scrape by `MountCollector`: one short call onto the trio thread
(`trio.from_thread.run_sync`) copies every store's status, the very dict
`memfs status --json` shows, and its counters (memfs/core/metrics.py); the
families are then built in the scrape's thread. No State is ever read from
another thread, and nothing is kept between scrapes.

Every store's metrics carry a ``store`` label (the store's id), in a plain mount
as under a session root; ``memfs_store_info`` gives its directory name and
mountpoint. Mount-wide: fast opens (memfs/mount/fastopen.py) and the ``process_*``
metrics of the daemon.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from typing import Protocol

import trio
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from memfs.api.client import MemoryStoresClient
from memfs.core.metrics import FUSE_BUCKETS, classify
from memfs.core.mountconfig import parse_metrics_addr
from memfs.mount import fastopen
from memfs.mount.engine import StoreEngine


class Mount(Protocol):
    """What the endpoint reads of the mount's daemon (memfs/mount/daemon.py): its stores,
    its client (every answer is counted as it arrives) and the trio token to reach them."""

    engines: list[StoreEngine]
    client: MemoryStoresClient
    trio_token: trio.lowlevel.TrioToken | None

log = logging.getLogger(__name__)

PENDING_KINDS = (("creates", "create"), ("updates", "update"), ("renames", "rename"),
                 ("deletes", "delete"))
PUSH_ENDPOINTS = ("create", "update", "delete")
FETCH_PURPOSES = ("read", "prefetch")


def outcome(status: int) -> str:
    """A request's answer in a few words (the pushes' outcomes)."""
    if status == 0:
        return "unreachable"  # no answer: a connection failure or a timeout
    if 200 <= status < 300:
        return "ok"
    if status == 409:
        return "conflict"  # the stored sha moved, or another memory holds the path
    if status in (400, 413):
        return "refused"  # the content or path is not acceptable: never resent as is
    if status == 404:
        return "not_found"
    if status == 401:
        return "unauthorized"
    if status in (408, 429) or status >= 500:
        return "transient"
    return "rejected"  # 403, 422...: that file waits with its own backoff


class MountCollector(Collector):
    """Builds the families from one snapshot taken on the trio thread per scrape."""

    def __init__(self, daemon: Mount) -> None:
        self.daemon = daemon

    def observe(self, method: str, path: str, status: int, sent: int, received: int) -> None:
        """The API client's `on_response` (on the trio thread): count the request for
        the store its path names."""
        where = classify(method, path)
        if where is None:
            return
        for engine in self.daemon.engines:
            if engine.cfg.store_id == where[0]:
                engine.ctx.metrics.response(where[1], status, sent, received)
                return

    def snapshot(self) -> dict:
        """Everything a scrape shows, copied (runs on the trio thread)."""
        stores = []
        for engine in self.daemon.engines:
            m = engine.ctx.metrics
            stores.append({
                "id": engine.cfg.store_id, "name": engine.name or "",
                "mountpoint": engine.cfg.mountpoint, "status": engine.status(),
                "deletes_sent": engine.cfg.options.deletes == "enabled",
                "fuse": {op: list(row) for op, row in m.fuse.ops.items()},
                "fuse_errors": dict(m.fuse.errors),
                "cache_hits": m.cache_hits, "cache_misses": m.cache_misses,
                "feed_polls": m.feed_polls, "fetched_blobs": engine.ctx.fetcher.filled,
                "requests": {k: list(v) for k, v in m.requests.items()}})
        return {"now": time.time(), "stores": stores, "fast_opens": fastopen.stats()}

    def collect(self) -> Iterator[Metric]:
        token = self.daemon.trio_token
        if token is None:
            return
        try:
            snap = trio.from_thread.run_sync(self.snapshot, trio_token=token)
        except trio.RunFinishedError:  # the daemon is shutting down
            return
        yield from families(snap)


def families(snap: dict) -> Iterator[Metric]:
    """The Prometheus families of one snapshot."""
    now = snap["now"]

    def gauge(name: str, doc: str, labels: tuple = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=["store", *labels])

    def counter(name: str, doc: str, labels: tuple = ()) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=["store", *labels])

    info = gauge("memfs_store_info", "A store of this mount: its directory and mountpoint.",
                 ("name", "mountpoint"))
    online = gauge("memfs_online", "1 while the store's server answers, 0 while offline.")
    read_only = gauge("memfs_read_only", "1 when nothing of this store is ever pushed.")
    pending = gauge("memfs_pending_changes", "Local changes not on the server yet, by kind "
                    "(as `memfs status` lists them).", ("kind",))
    refused = gauge("memfs_refused_files", "Files whose content the server refused (not "
                    "UTF-8, too large...): kept local until their content changes.")
    local_only = gauge("memfs_local_only_files", "Files kept local-only (editor temp files; "
                       "on a read-only mount, files changed here).")
    conflicts = gauge("memfs_conflicts", "Conflict rows: local versions kept after the "
                      "server's won (`memfs conflicts`).")
    overdue = gauge("memfs_pending_overdue_seconds", "How long the most overdue pending "
                    "change has been due to be pushed (0 when none is due).")
    last_sync = gauge("memfs_last_sync_timestamp_seconds", "When the last successful sync "
                      "(a feed poll or a full listing) ended.")
    since_sync = gauge("memfs_seconds_since_last_sync", "Seconds since the last successful "
                       "sync; +Inf before the first one of this daemon.")
    last_push = gauge("memfs_last_push_timestamp_seconds", "When the last push pass that "
                      "reached the server ended.")
    pushed = counter("memfs_pushed", "Changes the server applied (`pushed_total` of "
                     "`memfs status`).")
    pushes = counter("memfs_pushes", "Push requests (each attempt) by kind and outcome.",
                     ("kind", "outcome"))
    polls = counter("memfs_feed_polls", "Change-feed polls.")
    feed_requests = counter("memfs_feed_requests", "Change-feed requests (pages, and the "
                            "position read with each full listing).")
    feed_bytes = counter("memfs_feed_received_bytes", "Bytes of change-feed answers.")
    feed_missed = counter("memfs_feed_missed", "Changes a safety-net full listing found "
                          "that the feed had not brought (should stay 0).")
    fetches = counter("memfs_fetch_requests", "Content fetches (a read's miss, the batches "
                      "it starts, prefetch), by outcome.", ("purpose", "outcome"))
    fetch_bytes = counter("memfs_fetch_received_bytes", "Bytes of content fetches.")
    blobs = counter("memfs_fetched_blobs", "Blobs fetched into the cache.")
    hits = counter("memfs_cache_hits", "Reads whose content the blob cache held.")
    misses = counter("memfs_cache_misses", "Reads whose content had to be fetched.")
    requests = counter("memfs_api_requests", "Requests to the Memory Stores API (each "
                       "attempt) by purpose, endpoint and HTTP status (0: no answer).",
                       ("purpose", "endpoint", "status"))
    sent = counter("memfs_api_sent_bytes", "Request bytes sent to the API.",
                   ("purpose", "endpoint"))
    received = counter("memfs_api_received_bytes", "Answer bytes received from the API.",
                       ("purpose", "endpoint"))
    fuse = HistogramMetricFamily("memfs_fuse_request_duration_seconds", "FUSE requests "
                                 "answered in Python, by operation: latency.",
                                 labels=["store", "op"])
    fuse_errors = counter("memfs_fuse_errors", "FUSE requests answered with an error, by "
                          "operation and errno (ENOENT of a lookup is normal).", ("op", "errno"))

    for s in snap["stores"]:
        sid, st = s["id"], s["status"]
        info.add_metric([sid, s["name"], s["mountpoint"]], 1)
        online.add_metric([sid], 1 if st["online"] else 0)
        read_only.add_metric([sid], 1 if st["read_only"] else 0)
        p = st["pending"]
        for key, kind in PENDING_KINDS:
            pending.add_metric([sid, kind], len(p[key]))
        refused.add_metric([sid], len(p["refused"]))
        local_only.add_metric([sid], len(p["local_only"]))
        conflicts.add_metric([sid], len(st["conflicts"]))
        # Deletes never sent (--deletes log-only|disabled) are never overdue.
        dues = [item["due_at"] for key, _ in PENDING_KINDS for item in p[key]
                if item.get("due_at") is not None
                and (key != "deletes" or s.get("deletes_sent", True))]
        overdue.add_metric([sid], max(0.0, now - min(dues)) if dues else 0.0)
        if st["last_sync_at"] is not None:
            last_sync.add_metric([sid], st["last_sync_at"])
            since_sync.add_metric([sid], max(0.0, now - st["last_sync_at"]))
        else:
            since_sync.add_metric([sid], math.inf)
        if st["last_push_at"] is not None:
            last_push.add_metric([sid], st["last_push_at"])
        pushed.add_metric([sid], st["pushed_total"])
        feed_missed.add_metric([sid], st["feed"]["missed"])
        polls.add_metric([sid], s["feed_polls"])
        blobs.add_metric([sid], s["fetched_blobs"])
        hits.add_metric([sid], s["cache_hits"])
        misses.add_metric([sid], s["cache_misses"])

        by_push: dict[tuple[str, str], int] = {}
        by_fetch: dict[tuple[str, str], int] = {}
        feed_n = feed_b = fetch_b = 0
        by_bytes: dict[tuple[str, str], list[int]] = {}
        for (purpose, endpoint, status), (n, out, got) in sorted(s["requests"].items()):
            requests.add_metric([sid, purpose, endpoint, str(status)], n)
            row = by_bytes.setdefault((purpose, endpoint), [0, 0])
            row[0] += out
            row[1] += got
            if endpoint in PUSH_ENDPOINTS:
                key = (endpoint, outcome(status))
                by_push[key] = by_push.get(key, 0) + n
            elif purpose == "sync" and endpoint == "versions":
                feed_n += n
                feed_b += got
            elif purpose in FETCH_PURPOSES:
                key = (purpose, outcome(status))
                by_fetch[key] = by_fetch.get(key, 0) + n
                fetch_b += got
        for (purpose, endpoint), (out, got) in by_bytes.items():
            sent.add_metric([sid, purpose, endpoint], out)
            received.add_metric([sid, purpose, endpoint], got)
        for (kind, result), n in sorted(by_push.items()):
            pushes.add_metric([sid, kind, result], n)
        for (purpose, result), n in sorted(by_fetch.items()):
            fetches.add_metric([sid, purpose, result], n)
        feed_requests.add_metric([sid], feed_n)
        feed_bytes.add_metric([sid], feed_b)
        fetch_bytes.add_metric([sid], fetch_b)

        for op, row in sorted(s["fuse"].items()):
            total, buckets = 0, []
            for bound, count in zip((*FUSE_BUCKETS, math.inf), row[1:], strict=True):
                total += count
                buckets.append((floatToGoString(bound), total))
            fuse.add_metric([sid, op], buckets, sum_value=row[0])
        for (op, name), n in sorted(s["fuse_errors"].items()):
            fuse_errors.add_metric([sid, op, name], n)

    fast = CounterMetricFamily("memfs_fuse_fast_opens", "Read-only opens (and their "
                               "release) answered below Python, for the whole mount "
                               "(memfs/mount/fastopen.py).")
    fast.add_metric([], snap["fast_opens"].get("answered_opens", 0))
    yield from (info, online, read_only, pending, refused, local_only, conflicts, overdue,
                last_sync, since_sync, last_push, pushed, pushes, polls, feed_requests,
                feed_bytes, feed_missed, fetches, fetch_bytes, blobs, hits, misses, requests,
                sent, received, fuse, fuse_errors, fast)


class MetricsServer:
    """The endpoint: prometheus_client's HTTP server in its own daemon thread."""

    def __init__(self, daemon: Mount, addr: str) -> None:
        host, port = parse_metrics_addr(addr)
        self.collector = MountCollector(daemon)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)  # the daemon's memory, CPU, open files
        # Raises OSError (the port is taken, the address is not this host's): the
        # daemon reports it and does not mount.
        self._httpd, self._thread = start_http_server(port, addr=host, registry=self.registry)
        bound = self._httpd.server_address
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        self.url = f"http://{shown}:{bound[1]}/metrics"
        daemon.client.observers.append(self.collector.observe)
        log.info("metrics at %s", self.url)

    def close(self) -> None:
        """Stop serving, without waiting: the server notices at its next poll (up to
        0.5 s, which `memfs unmount`, waiting for the daemon to exit, would wait out)."""

        def stop() -> None:
            self._httpd.shutdown()
            self._httpd.server_close()

        threading.Thread(target=stop, name="metrics-stop", daemon=True).start()
