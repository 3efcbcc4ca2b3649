"""`memfs mount --metrics-addr`: a mount's Prometheus endpoint.

Real mounts against a real `memfs serve`, the server driven with the official
`anthropic` SDK; every scrape is parsed with prometheus_client's own parser, and its
values are checked against `memfs status --json` and the workload's known counts.
The pieces below the endpoint (buckets, paths, addresses) are checked directly too.
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys

import httpx
import pytest
from mountutil import is_mounted, mount_env, needs_fuse, server_memories
from prometheus_client.parser import text_string_to_metric_families
from synchelpers import flush, versions, wait_for

from memfs.core.metrics import FUSE_BUCKETS, FuseTiming, StoreMetrics, classify, purpose
from memfs.core.mountconfig import is_loopback, parse_metrics_addr
from memfs.local import control
from memfs.mount.metrics_export import families, outcome

# -- helpers ---------------------------------------------------------------------------------


class Scrape:
    """One scrape, parsed by the official parser: samples by name and labels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples = [s for f in self.families.values() for s in f.samples]

    def get(self, metric: str, /, **labels: str) -> float:
        """The one sample `name` whose labels include `labels` (0 when absent: a counter
        never bumped is not exported)."""
        found = [s.value for s in self.samples
                 if s.name == metric and labels.items() <= s.labels.items()]
        assert len(found) <= 1, (metric, labels, found)
        return found[0] if found else 0.0

    def total(self, metric: str, /, **labels: str) -> float:
        return sum(s.value for s in self.samples
                   if s.name == metric and labels.items() <= s.labels.items())


def scrape(url: str) -> Scrape:
    r = httpx.get(url, timeout=30)
    assert r.status_code == 200, r.text
    return Scrape(r.text)


def pending_counts(status: dict) -> dict[str, int]:
    p = status["pending"]
    return {"create": len(p["creates"]), "update": len(p["updates"]),
            "rename": len(p["renames"]), "delete": len(p["deletes"])}


def _shown(status: dict) -> list:
    """What of `memfs status --json` the metrics show, per store."""
    stores = status["stores"] if status.get("group") else [status]
    return [(st["store_id"], pending_counts(st), len(st["pending"]["refused"]),
             len(st["pending"]["local_only"]), len(st["conflicts"]), st["pushed_total"],
             st["online"], st["last_sync_at"], st["last_push_at"]) for st in stores]


def scrape_with_status(url: str, m) -> tuple[Scrape, dict]:
    """A scrape and `memfs status --json` of one moment: the status read before and
    after the scrape shows the same (a poll may land between two reads: read again)."""
    for _ in range(20):
        first = m.status()
        s = scrape(url)
        status = m.status()
        if _shown(first) == _shown(status):
            return s, status
    raise AssertionError("the mount's status never held still for a scrape")


def check_matches_status(s: Scrape, status: dict) -> None:
    """Every gauge `memfs status --json` also shows, equal to it (one store)."""
    sid = status["store_id"]
    for kind, n in pending_counts(status).items():
        assert s.get("memfs_pending_changes", store=sid, kind=kind) == n, kind
    assert s.get("memfs_refused_files", store=sid) == len(status["pending"]["refused"])
    assert s.get("memfs_local_only_files", store=sid) == len(status["pending"]["local_only"])
    assert s.get("memfs_conflicts", store=sid) == len(status["conflicts"])
    assert s.get("memfs_pushed_total", store=sid) == status["pushed_total"]
    assert s.get("memfs_online", store=sid) == (1 if status["online"] else 0)
    assert s.get("memfs_last_sync_timestamp_seconds", store=sid) == status["last_sync_at"]
    if status["last_push_at"] is not None:
        assert s.get("memfs_last_push_timestamp_seconds", store=sid) == status["last_push_at"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a plain mount ---------------------------------------------------------------------------


@needs_fuse
def test_plain_mount_metrics_match_status_and_the_workload(mounts, server):
    sdk = server.sdk()
    store = mounts.new_store()
    shared = sdk.beta.memory_stores.memories.create(store, path="/shared.md",
                                                    content="base\n").id
    sdk.beta.memory_stores.memories.create(store, path="/notes/r.md", content="read me\n")
    # A long write-back delay: what is written stays pending until the flush below; no
    # prefetch: the read below is the one fetch.
    m = mounts.mount(store, "--metrics-addr", "0", "--write-back-delay", "600",
                     "--no-prefetch", defaults=False)
    url = m.status()["metrics_url"]
    assert url.startswith("http://127.0.0.1:"), url  # no host given: loopback
    assert f"metrics: {url}" in m.memfs("status", str(m.path)).stdout

    # A conflict: edited here, changed on the server (the SDK) before the push.
    (m.path / "shared.md").write_text("mine\n")
    sdk.beta.memory_stores.memories.update(shared, memory_store_id=store, content="theirs\n")
    m.sync_now()
    wait_for(lambda: (m.path / "shared.md").read_text() == "theirs\n", what="server wins")
    # Three creates and a file that is not UTF-8 (refused when its push comes).
    for name in ("a.md", "b.md", "c.md"):
        (m.path / name).write_text(f"{name}\n")
    (m.path / "bin.dat").write_bytes(bytes([0xFF, 0xFE, 0x80]) * 10)
    assert (m.path / "notes" / "r.md").read_text() == "read me\n"
    with pytest.raises(PermissionError):
        (m.path / "hard.md").hardlink_to(m.path / "a.md")

    before, status = scrape_with_status(url, m)
    check_matches_status(before, status)
    assert pending_counts(status) == {"create": 4, "update": 0, "rename": 0, "delete": 0}
    assert before.get("memfs_conflicts", store=store) == 1
    assert before.total("memfs_pushes_total", store=store) == 0  # nothing was due yet
    # FUSE: exactly the four files were created; each op has a full histogram.
    assert before.get("memfs_fuse_request_duration_seconds_count", store=store,
                      op="create") == 4
    assert before.get("memfs_fuse_request_duration_seconds_bucket", store=store, op="create",
                      le="+Inf") == 4
    assert before.get("memfs_fuse_request_duration_seconds_sum", store=store, op="create") > 0
    assert before.get("memfs_fuse_errors_total", store=store, op="link",
                      errno="EPERM") == 1  # the hard link refused
    # The read of r.md: the one miss, its batch (/notes/) the one blob fetched, by a read.
    assert before.get("memfs_cache_misses_total", store=store) == 1
    assert before.get("memfs_fetched_blobs_total", store=store) == 1
    assert before.get("memfs_fetch_requests_total", store=store, purpose="read",
                      outcome="ok") >= 1
    assert before.get("memfs_fetch_received_bytes_total", store=store) > len("read me\n")
    assert before.get("memfs_cache_hits_total", store=store) >= 1  # shared.md's reads
    assert before.get("memfs_fuse_request_duration_seconds_count", store=store,
                      op="read") >= 2
    # The sync above polled the feed: at least one poll, each poll at least a request.
    polls = before.get("memfs_feed_polls_total", store=store)
    assert polls >= 1
    assert before.get("memfs_feed_requests_total", store=store) > polls  # + the heads
    assert before.get("memfs_feed_received_bytes_total", store=store) > 0
    assert before.get("memfs_api_requests_total", store=store, purpose="sync",
                      endpoint="versions", status="200") == \
        before.get("memfs_feed_requests_total", store=store)
    assert 0 <= before.get("memfs_seconds_since_last_sync", store=store) < 600
    assert before.get("memfs_pending_overdue_seconds", store=store) == 0  # due in 600 s
    assert before.get("memfs_store_info", store=store, name="",
                      mountpoint=str(m.path)) == 1
    assert before.get("process_resident_memory_bytes") > 0

    done = flush(m)
    assert (done["pushed"], done["left"]) == (3, 0)
    after, status = scrape_with_status(url, m)
    check_matches_status(after, status)
    assert pending_counts(status) == {"create": 0, "update": 0, "rename": 0, "delete": 0}
    assert [r["path"] for r in status["pending"]["refused"]] == ["/bin.dat"]
    assert after.get("memfs_refused_files", store=store) == 1
    assert after.get("memfs_conflicts", store=store) == 1
    # The pushes: three creates, all applied; the refused file never went out.
    assert after.get("memfs_pushes_total", store=store, kind="create", outcome="ok") == 3
    assert after.total("memfs_pushes_total", store=store) == 3
    assert after.get("memfs_pushed_total", store=store) == 3 == status["pushed_total"]
    assert after.get("memfs_api_requests_total", store=store, purpose="push",
                      endpoint="create", status="200") == 3
    sent = after.get("memfs_api_sent_bytes_total", store=store, purpose="push",
                     endpoint="create")
    assert sent > len("a.md\nb.md\nc.md\n")
    # The server's own count: 3 writes of the SDK (2 creates, 1 update), 3 of the mount.
    ops = sorted(v.operation for v in versions(server, store))
    assert ops == ["created"] * 5 + ["modified"]
    assert after.total("memfs_pushes_total", store=store, outcome="ok") == len(ops) - 3
    # Counters only grow.
    for name in ("memfs_feed_polls_total", "memfs_feed_requests_total",
                 "memfs_fetched_blobs_total"):
        assert after.get(name, store=store) >= before.get(name, store=store), name
    m.unmount(kept=True)  # exit status 3: bin.dat (not UTF-8) stays here only
    assert server_memories(server, store) == {
        "/shared.md": "theirs\n", "/notes/r.md": "read me\n",
        "/a.md": "a.md\n", "/b.md": "b.md\n", "/c.md": "c.md\n"}


@needs_fuse
def test_metrics_addr_errors_are_one_line_and_mount_nothing(mounts, server, tmp_path):
    store = mounts.new_store()
    env = mount_env(server, tmp_path)
    where = tmp_path / "mnt"
    where.mkdir()

    def mount(*args: str, at=where) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memfs", "mount", store, str(at),
                               *args], env=env, capture_output=True, text=True, timeout=120)

    # Another host than loopback is served only when named, and said out loud (here the
    # mount then fails on its missing mountpoint: nothing listens).
    wide = mount("--metrics-addr", "0.0.0.0:9464", at=tmp_path / "missing")
    assert "metrics at 0.0.0.0:9464 are served to the network" in wide.stderr, wide.stderr
    bad = mount("--metrics-addr", "127.0.0.1:http")
    assert bad.returncode == 2 and "HOST:PORT" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr
    with socket.socket() as taken:  # the port is in use: the daemon says so, mounts nothing
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = mount("--metrics-addr", f"127.0.0.1:{port}")
    assert busy.returncode == 1, busy.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in busy.stderr, busy.stderr
    assert "Traceback" not in busy.stderr and len(busy.stderr.strip().splitlines()) == 1
    assert not is_mounted(where)


@needs_fuse
def test_offline_and_back_in_metrics(mounts, server):
    """The server stops: the mount's metrics say offline, the push that cannot go out
    and its pending create, as `memfs status` does; then back online, pushed."""
    store = mounts.new_store()
    m = mounts.mount(store, "--metrics-addr", "0", "--lost-answer-wait", "1")  # a cut request
    url = m.status()["metrics_url"]
    (m.path / "a.md").write_text("a\n")
    m.wait_synced()
    server.stop()
    (m.path / "b.md").write_text("b\n")

    def offline() -> bool:  # each attempt is counted: the client retries before giving up
        s = scrape(url)
        return s.get("memfs_online", store=store) == 0 and s.get(
            "memfs_pushes_total", store=store, kind="create", outcome="unreachable") > 0

    wait_for(offline, what="the push of b.md fails, the mount goes offline")
    s, status = scrape_with_status(url, m)
    assert s.get("memfs_online", store=store) == 0
    assert status["online"] is False
    check_matches_status(s, status)
    assert s.get("memfs_pending_changes", store=store, kind="create") == 1
    assert s.get("memfs_pushes_total", store=store, kind="create", outcome="ok") == 1
    server.start()  # the same port and database
    wait_for(lambda: control.request(m.state_dir, {"cmd": "sync"}, timeout=30)["ok"],
             what="back online")
    m.wait_synced()
    s, status = scrape_with_status(url, m)
    check_matches_status(s, status)
    assert s.get("memfs_online", store=store) == 1
    assert s.get("memfs_pushes_total", store=store, kind="create", outcome="ok") == 2
    assert s.get("memfs_pending_changes", store=store, kind="create") == 0
    assert s.get("memfs_seconds_since_last_sync", store=store) < 60


# -- a session root --------------------------------------------------------------------------


@needs_fuse
def test_session_root_metrics_per_store(mounts, server):
    sdk = server.sdk()
    first = sdk.beta.memory_stores.create(name="First").id
    second = sdk.beta.memory_stores.create(name="Second").id
    mid = sdk.beta.memory_stores.memories.create(second, path="/s.md", content="base\n").id
    sid = sdk.beta.sessions.create(agent="agent_test", environment_id="env_test", resources=[
        {"type": "memory_store", "memory_store_id": first},
        {"type": "memory_store", "memory_store_id": second}]).id
    port = free_port()
    m = mounts.mount_group("--session", sid, args=(
        "--metrics-addr", f"127.0.0.1:{port}", "--write-back-delay", "600",
        "--poll-interval", "5"), defaults=False)  # a poll moves last_sync_at: few here
    url = f"http://127.0.0.1:{port}/metrics"
    assert m.status()["metrics_url"] == url
    (m.path / "first" / "one.md").write_text("1\n")
    (m.path / "first" / "two.md").write_text("2\n")
    (m.path / "second" / "s.md").write_text("mine\n")  # then a conflict, made via the SDK
    (m.path / "second" / "bin.dat").write_bytes(b"\xff\xfe")
    sdk.beta.memory_stores.memories.update(mid, memory_store_id=second, content="theirs\n")
    m.sync_now()
    wait_for(lambda: (m.path / "second" / "s.md").read_text() == "theirs\n",
             what="server wins")

    s, status = scrape_with_status(url, m)
    stores = {st["store_id"]: st for st in status["stores"]}
    assert set(stores) == {first, second}
    for store, st in stores.items():
        check_matches_status(s, st)
        assert s.get("memfs_store_info", store=store, name=st["name"],
                     mountpoint=st["mountpoint"]) == 1
    assert s.get("memfs_pending_changes", store=first, kind="create") == 2
    assert s.get("memfs_pending_changes", store=second, kind="create") == 1
    assert (s.get("memfs_conflicts", store=first), s.get("memfs_conflicts", store=second)) \
        == (0, 1)
    assert s.get("memfs_fuse_request_duration_seconds_count", store=first, op="create") == 2
    assert s.get("memfs_fuse_request_duration_seconds_count", store=second, op="create") == 1
    # Every metric of a store carries its label; only mount-wide ones do not.
    for sample in s.samples:
        if sample.name.startswith("memfs_") and not sample.name.startswith("memfs_fuse_fast"):
            assert sample.labels.get("store") in (first, second), sample

    flush(m)
    s, status = scrape_with_status(url, m)
    stores = {st["store_id"]: st for st in status["stores"]}
    for st in stores.values():
        check_matches_status(s, st)
    assert s.get("memfs_pushes_total", store=first, kind="create", outcome="ok") == 2
    assert s.total("memfs_pushes_total", store=second) == 0  # bin.dat refused, s.md synced
    assert s.get("memfs_refused_files", store=second) == 1
    m.unmount(kept=True)  # exit status 3: bin.dat (not UTF-8) stays here only
    assert server_memories(server, first) == {"/one.md": "1\n", "/two.md": "2\n"}


# -- the pieces ------------------------------------------------------------------------------


def test_fuse_timing_buckets_and_exposition():
    """Latencies land in the bucket of their upper bound; the exposition is cumulative,
    as the official parser reads it back."""
    t = FuseTiming()
    for seconds in (0.00001, 0.00005, 0.0003, 0.002, 20.0):
        t.record("read", seconds)
    t.error("lookup", 2)
    t.error("lookup", 2)
    row = t.ops["read"]
    assert row[1] == 2  # <= 50 µs: 10 µs and exactly 50 µs
    assert row[1 + FUSE_BUCKETS.index(0.0005)] == 1
    assert row[1 + FUSE_BUCKETS.index(0.0025)] == 1
    assert row[-1] == 1  # past the last bound: only in +Inf
    status = {"online": True, "read_only": False, "last_sync_at": None, "last_push_at": None,
              "pushed_total": 0, "feed": {"missed": 0}, "conflicts": [],
              "pending": {"creates": [], "updates": [], "renames": [], "deletes": [
                  {"path": "/x", "due_at": 100.0}], "refused": [], "local_only": []}}
    store = {"id": "memstore_x", "name": "x", "mountpoint": "/m/x", "status": status,
             "fuse": t.ops, "fuse_errors": t.errors, "cache_hits": 0, "cache_misses": 0,
             "feed_polls": 0, "fetched_blobs": 0,
             "requests": {("push", "delete", 409): [2, 10, 20], ("read", "get", 0): [1, 5, 0]}}
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import Collector, CollectorRegistry

    class One(Collector):
        def collect(self):
            return families({"now": 160.0, "stores": [store], "fast_opens": {}})

    reg = CollectorRegistry(auto_describe=False)
    reg.register(One())
    s = Scrape(generate_latest(reg).decode())
    hist = {x.labels["le"]: x.value for x in s.samples
            if x.name == "memfs_fuse_request_duration_seconds_bucket"}
    assert hist["5e-05"] == 2 and hist["0.0005"] == 3 and hist["10.0"] == 4
    assert hist["+Inf"] == 5 == s.get("memfs_fuse_request_duration_seconds_count", op="read")
    assert s.get("memfs_fuse_request_duration_seconds_sum") == pytest.approx(20.00236)
    assert s.get("memfs_fuse_errors_total", op="lookup", errno="ENOENT") == 2
    assert math.isinf(s.get("memfs_seconds_since_last_sync"))
    assert s.get("memfs_pending_overdue_seconds") == 60.0
    never_sent = {**store, "deletes_sent": False}  # --deletes log-only|disabled
    gauges = {m.name: m for m in families({"now": 160.0, "stores": [never_sent],
                                           "fast_opens": {}})}
    assert gauges["memfs_pending_overdue_seconds"].samples[0].value == 0.0
    assert s.get("memfs_pushes_total", kind="delete", outcome="conflict") == 2
    assert s.get("memfs_fetch_requests_total", purpose="read", outcome="unreachable") == 1
    assert s.get("memfs_api_received_bytes_total", purpose="push", endpoint="delete") == 20


def test_requests_are_counted_by_purpose_and_endpoint():
    m = StoreMetrics()
    m.response("get", 200, 0, 7)
    with purpose("push"):
        m.response("create", 200, 30, 40)
        m.response("create", 200, 30, 40)
    assert m.requests == {("read", "get", 200): [1, 0, 7], ("push", "create", 200): [2, 60, 80]}
    base = "/v1/memory_stores/memstore_1"
    assert classify("POST", f"{base}/memories") == ("memstore_1", "create")
    assert classify("POST", f"{base}/memories/mem_2") == ("memstore_1", "update")
    assert classify("DELETE", f"{base}/memories/mem_2") == ("memstore_1", "delete")
    assert classify("GET", f"{base}/memories") == ("memstore_1", "list")
    assert classify("GET", f"{base}/memory_versions") == ("memstore_1", "versions")
    assert classify("GET", f"{base}/memory_versions/v_1") == ("memstore_1", "version")
    assert classify("GET", base) == ("memstore_1", "store")
    assert classify("GET", "/v1/memory_stores") is None
    assert classify("GET", "/v1/sessions/s_1") is None
    assert [outcome(c) for c in (0, 200, 409, 400, 413, 404, 401, 429, 503, 403)] == [
        "unreachable", "ok", "conflict", "refused", "refused", "not_found", "unauthorized",
        "transient", "transient", "rejected"]


def test_metrics_addr_forms():
    assert parse_metrics_addr("9464") == ("127.0.0.1", 9464)
    assert parse_metrics_addr(":9464") == ("127.0.0.1", 9464)
    assert parse_metrics_addr("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_metrics_addr("[::1]:0") == ("::1", 0)
    assert parse_metrics_addr("localhost:1") == ("localhost", 1)
    for bad in ("", "host:", "1.2.3.4:70000", "a b:1", "host:-1"):
        with pytest.raises(ValueError):
            parse_metrics_addr(bad)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1")
    assert not is_loopback("example.com")
