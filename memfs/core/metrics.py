"""What one store of a mount counts for its metrics: plain numbers, cheap to bump.

The FUSE handlers and the sync tasks add to these as they go (an integer or a
list slot, on the trio thread: no lock, no label lookup); `memfs/mount/metrics_export.py`
turns them into Prometheus families when a scrape comes (`memfs mount
--metrics-addr`). Kept light (no prometheus_client here): the FUSE layer and the sync
code import it in every mount, exporting or not.

Which task a request to the server serves (push, sync, prefetch, read) is told
by `PURPOSE`, a context variable the engine sets where those tasks start; tasks
inherit it from the task that starts them, so the pusher's and the reconciler's
requests are told apart without a word in the pusher or the feed.
"""

from __future__ import annotations

import contextlib
import errno
from bisect import bisect_left
from collections.abc import Iterator
from contextvars import ContextVar

#: What the current task's requests to the server are for: "push" (the pusher, a
#: flush), "sync" (listings and the change feed), "prefetch", or "read" (the FUSE
#: handlers' cache-miss fetches and the batches they start, the `.memfs` tree).
PURPOSE: ContextVar[str] = ContextVar("memfs_purpose", default="read")

#: Upper bounds (seconds) of the FUSE latency buckets: a handler answered from memory
#: takes 20-100 µs, a close that commits 0.1-1 ms, a cache-miss read a round trip.
FUSE_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


@contextlib.contextmanager
def purpose(what: str) -> Iterator[None]:
    """Requests made inside (and by tasks started inside) are for `what`."""
    token = PURPOSE.set(what)
    try:
        yield
    finally:
        PURPOSE.reset(token)


class FuseTiming:
    """FUSE requests by operation: a latency histogram each, and errors by errno.

    One row per operation: [sum of seconds, count in bucket 0, ..., count past the
    last bound], not cumulative (the exporter adds them up at scrape time). Recording
    is a dict lookup, a bisect over 16 bounds and two additions: about 0.3 µs, where
    prometheus_client's Histogram.labels().observe() costs several times that."""

    __slots__ = ("ops", "errors")

    def __init__(self) -> None:
        self.ops: dict[str, list] = {}
        self.errors: dict[tuple[str, str], int] = {}

    def record(self, op: str, seconds: float) -> None:
        try:
            row = self.ops[op]
        except KeyError:
            row = self.ops[op] = [0.0] + [0] * (len(FUSE_BUCKETS) + 1)
        row[0] += seconds
        row[1 + bisect_left(FUSE_BUCKETS, seconds)] += 1

    def error(self, op: str, code: int | None) -> None:
        key = (op, errno.errorcode.get(code or 0, str(code)))
        self.errors[key] = self.errors.get(key, 0) + 1


class StoreMetrics:
    """One store's counters (a `SyncContext` holds them; its `StoreFS` shares them)."""

    def __init__(self) -> None:
        self.fuse = FuseTiming()  # filled only while exported (`StoreFS.timing`)
        self.cache_hits = 0    # reads whose content the blob cache held
        self.cache_misses = 0  # reads that had to fetch it from the server
        self.feed_polls = 0
        #: (purpose, endpoint, status) -> [attempts, bytes sent, bytes received];
        #: status 0: no answer came (a connection failure or a timeout)
        self.requests: dict[tuple[str, str, int], list[int]] = {}

    def response(self, endpoint: str, status: int, sent: int, received: int) -> None:
        key = (PURPOSE.get(), endpoint, status)
        row = self.requests.get(key)
        if row is None:
            row = self.requests[key] = [0, 0, 0]
        row[0] += 1
        row[1] += sent
        row[2] += received


_MEMORIES = {("POST", 1): "create", ("GET", 1): "list", ("POST", 2): "update",
             ("GET", 2): "get", ("DELETE", 2): "delete"}


def classify(method: str, path: str) -> tuple[str, str] | None:
    """(store id, endpoint) of an API request path; None for a request of no store
    (the store list, sessions). Endpoints: create, update, delete (pushes), get, list
    (listings, fetches), versions, version (the feed, history), store, other."""
    parts = path.split("/")  # "", "v1", "memory_stores", store id, ...
    if len(parts) < 4 or parts[1] != "v1" or parts[2] != "memory_stores":
        return None
    rest = parts[4:]
    if not rest:
        endpoint = "store"
    elif rest[0] == "memories":
        endpoint = _MEMORIES.get((method, len(rest)), "other")
    elif rest[0] == "memory_versions":
        endpoint = "versions" if len(rest) == 1 else "version"
    else:
        endpoint = "other"
    return parts[3], endpoint
