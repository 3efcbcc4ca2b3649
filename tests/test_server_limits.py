"""memfs serve for a team (issue 24): the findings of a hostile run, one test each,
on both backends, against a real `memfs serve` process. Each checks the status, the
error envelope and that the server's memory stays bounded: its RSS (and peak RSS,
VmHWM) read from /proc/PID/status, not assumed.

1 bodies bounded per route before parsing   6 the 16 KiB request-head limit
2 session fields bounded                    7 malformed session tokens, no database
3 nesting depth                             8 content-length with chunked: 400, closed
4 NaN / Infinity                            9 a non-loopback --host needs a key
5 a connection flood from one client        10 --db directories 0700; x-memfs-session-id
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import pathlib
import resource
import select
import socket
import subprocess
import sys
import threading
import time
import tracemalloc

import httpx
import pytest
from conftest import REPO, start_server
from prometheus_client.parser import text_string_to_metric_families
from test_server_hostile import assert_envelope, connect, healthy, read_response

from memfs.server.app import MemfsApp
from memfs.server.db import Database

MEM = "agent-memory-2026-07-22"
SESSIONS_BETA = "managed-agents-2026-04-01"
MB = 1024 * 1024


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in kB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1])
    return out


class Memory:
    """The server's RSS before a test step, and how much its RSS and its peak grew."""

    def __init__(self, server) -> None:
        self.pid = server.proc.pid
        self.before = proc_status(self.pid)["VmRSS"]

    def grew(self) -> tuple[int, int]:
        """(RSS now − before, peak − before), in kB."""
        now = proc_status(self.pid)
        return now["VmRSS"] - self.before, now["VmHWM"] - self.before

    def assert_bounded(self, peak_mb: int, what: str) -> None:
        rss, peak = self.grew()
        print(f"{what}: server RSS +{rss // 1024} MB, peak +{peak // 1024} MB")
        assert peak < peak_mb * 1024, f"{what}: server peak RSS grew by {peak} kB"


@pytest.fixture
def serve(tmp_path, db_backend, request):
    """start(*extra_args, api_key="test-key"): a real `memfs serve` on this test's backend."""
    started = []

    def start(*args: str, api_key: str | None = "test-key"):
        db_url = request.getfixturevalue("pg_url") if db_backend == "postgresql" else None
        sp = start_server(tmp_path / f"s{len(started)}", api_key=api_key, extra_args=args,
                          db_url=db_url)
        started.append(sp)
        return sp

    try:
        yield start
    finally:
        for sp in started:
            sp.stop()


def scrape(server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /_memfs/metrics, parsed by prometheus_client's own parser:
    {(sample name, sorted labels): value}."""
    r = httpx.get(f"{server.base_url}/_memfs/metrics",
                  headers={"x-api-key": server.api_key}, timeout=10)
    assert r.status_code == 200, r.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def raw_head(method: str, path: str, *, key: str = "test-key", beta: str = MEM) -> bytes:
    """A request head without its final blank line."""
    return (f"{method} {path} HTTP/1.1\r\nhost: x\r\nx-api-key: {key}\r\n"
            f"anthropic-beta: {beta}\r\ncontent-type: application/json\r\n").encode()


def raw_request(method: str, path: str, body: bytes = b"", *, extra: bytes = b"") -> bytes:
    return (raw_head(method, path) + extra + b"content-length: " + str(len(body)).encode()
            + b"\r\n\r\n" + body)


def post(server, path: str, content: bytes, *, beta: str = MEM,
         key: str | None = None) -> httpx.Response:
    h = {"x-api-key": key or server.api_key, "anthropic-beta": beta,
         "content-type": "application/json"}
    return httpx.post(server.base_url + path, content=content, headers=h, timeout=60)


def refused(r: httpx.Response, status: int, etype: str, words: str) -> None:
    """The API's error envelope, with ``words`` in the message."""
    assert r.status_code == status, r.text[:300]
    doc = r.json()
    assert doc["type"] == "error" and doc["error"]["type"] == etype, doc
    assert words in doc["error"]["message"], doc
    assert doc["request_id"].startswith("req_") and "Traceback" not in r.text


def new_session(server, **kw: object) -> httpx.Response:
    body = {"agent": "agent_1", "environment_id": "env_1", **kw}
    return post(server, "/v1/sessions", json.dumps(body).encode(), beta=SESSIONS_BETA)


def mint_token(server, session_id: str) -> str:
    r = httpx.post(f"{server.base_url}/_memfs/sessions/{session_id}/token",
                   headers={"x-api-key": server.api_key}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["token"]


# ------------------------------------------------------------------ 1. bodies


def list_body(size: int) -> bytes:
    """A JSON array of 60-byte strings, ``size`` bytes: valid, within the value and
    depth bounds, and not the object any route wants (the worst that gets parsed)."""
    item = b'"' + b"x" * 58 + b'"'
    n = size // (len(item) + 1)
    return b"[" + b",".join([item] * n) + b"]"


def test_1_bodies_are_bounded_per_route_before_parsing(serve):
    sp = serve("--metrics")
    sid = sp.sdk().beta.memory_stores.create(name="b").id
    session = new_session(sp, resources=[{"type": "memory_store", "memory_store_id": sid}])
    token = mint_token(sp, session.json()["id"])
    mem = Memory(sp)

    # A 31 MB [{},{},…] declared: refused from the head, before one byte of it is read.
    for path in ("/v1/memory_stores", f"/v1/memory_stores/{sid}/memories", "/v1/sessions"):
        with connect(sp) as s:
            s.sendall(raw_head("POST", path) + b"content-length: " + str(31 * MB).encode()
                      + b"\r\n\r\n")
            doc = assert_envelope(*read_response(s), 413)
            assert doc["error"]["type"] == "request_too_large"
    # Chunked: refused as soon as it passes the route's bound (1 MiB for memory writes).
    with connect(sp) as s:
        s.sendall(raw_head("POST", f"/v1/memory_stores/{sid}/memories")
                  + b"transfer-encoding: chunked\r\n\r\n")
        try:
            for _ in range(31):
                s.sendall(b"%x\r\n" % MB + b"[{}," * (MB // 4) + b"\r\n")
        except OSError:
            pass  # closed on us: expected
        assert_envelope(*read_response(s), 413)
    # Each route's bound: a store write takes 128 KiB, an archive 16 KiB.
    refused(post(sp, "/v1/memory_stores", b" " * (200 * 1024)), 413, "request_too_large",
            "at most 131072 bytes")
    refused(post(sp, f"/v1/memory_stores/{sid}/archive", b" " * (20 * 1024)), 413,
            "request_too_large", "at most 16384 bytes")
    # Within the bound, [{},{},…] is refused on its shape before it is parsed.
    refused(post(sp, f"/v1/memory_stores/{sid}/memories", b"[" + b"{}," * 300_000 + b"{}]"),
            400, "invalid_request_error", "more than 20000 JSON values")
    # Escaped quotes and no closing one: refused in one pass over the body.
    refused(post(sp, f"/v1/memory_stores/{sid}/memories", b'"' + b'\\"' * 500_000), 400,
            "invalid_request_error", "not valid JSON")
    # A session token on its own store: the same bounds.
    refused(post(sp, f"/v1/memory_stores/{sid}/memories", b"[" + b"{}," * 300_000 + b"{}]",
                 key=token), 400, "invalid_request_error", "more than 20000 JSON values")
    refused(post(sp, f"/v1/memory_stores/{sid}/memories", b" " * (2 * MB), key=token),
            413, "request_too_large", "at most 1048576 bytes")
    # The largest body a memory write can need is still taken: 102,400 content bytes,
    # every one escaped as \u0001 (six bytes each).
    r = post(sp, f"/v1/memory_stores/{sid}/memories",
             json.dumps({"path": "/escaped", "content": "\x01" * 102_400}).encode())
    assert r.status_code == 200, r.text[:300]

    # Four at once, three rounds, of the worst body that is parsed (~1 MiB, then refused
    # for not being an object): the server's peak stays bounded, rounds do not add up,
    # and another client is served meanwhile.
    worst = list_body(MB - 1024)
    rounds = []
    served = []

    def other_client(stop: threading.Event) -> None:
        with httpx.Client(base_url=sp.base_url, headers=sp.headers, timeout=30) as c:
            while not stop.is_set():
                t0 = time.monotonic()
                served.append((c.get("/v1/memory_stores").status_code,
                               time.monotonic() - t0))

    stop = threading.Event()
    watcher = threading.Thread(target=other_client, args=(stop,))
    watcher.start()
    try:
        for _ in range(3):
            answers: list[httpx.Response] = []

            def one(out: list[httpx.Response] = answers) -> None:
                out.append(post(sp, f"/v1/memory_stores/{sid}/memories", worst))

            threads = [threading.Thread(target=one) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            for r in answers:
                refused(r, 400, "invalid_request_error", "must be a JSON object")
            assert len(answers) == 4
            rounds.append(proc_status(sp.proc.pid)["VmRSS"])
    finally:
        stop.set()
        watcher.join(60)
    assert served and all(status == 200 for status, _ in served)
    waits = sorted(t for _, t in served)
    print(f"other client during the rounds: {len(waits)} requests,"
          f" p50 {waits[len(waits) // 2] * 1000:.1f} ms, max {waits[-1] * 1000:.1f} ms")
    print("RSS after each round (kB):", rounds)
    assert rounds[2] - rounds[0] < 24 * 1024, rounds  # the rounds do not add up
    mem.assert_bounded(160, "bodies")
    samples = scrape(sp)
    assert sample(samples, "memfs_server_bodies_refused_total", reason="too_large") >= 7
    assert sample(samples, "memfs_server_bodies_refused_total", reason="values") == 2
    assert healthy(sp)


def test_1_a_refused_body_keeps_nothing_alive(tmp_path, db_backend, request):
    """With the collector off, refused requests must not leave their parsed bodies
    behind (an exception kept alive through its traceback would hold them)."""
    target = request.getfixturevalue("pg_url") if db_backend == "postgresql" else \
        tmp_path / "m.db"
    db = Database(target)
    app = MemfsApp(db, api_key="k")
    h = {"x-api-key": "k", "anthropic-beta": MEM}
    worst = list_body(MB - 1024)

    async def main() -> int:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://memfs",
                                     headers=h, timeout=60) as c:
            sid = (await c.post("/v1/memory_stores", json={"name": "s"})).json()["id"]
            await c.post(f"/v1/memory_stores/{sid}/memories", content=worst)  # warm up
            gc.collect()
            gc.disable()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                for _ in range(8):
                    r = await c.post(f"/v1/memory_stores/{sid}/memories", content=worst)
                    assert r.status_code == 400 and "JSON object" in r.text
                    r = await c.post("/v1/memory_stores", content=b"[" + b"1.5," * 25_000
                                     + b"NaN]")
                    assert r.status_code == 400
                return tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
                gc.enable()

    try:
        left = asyncio.run(main())
    finally:
        db.close()
    print(f"left allocated after 16 refused bodies (collector off): {left // 1024} kB")
    assert left < 2 * MB  # each parsed body is ~3 MB: none of them survived


# ------------------------------------------------------------ 2-4. session fields


def test_2_session_fields_are_bounded(serve):
    sp = serve()
    mem = Memory(sp)
    big = "x" * (8 * MB // 10)
    cases = [
        ({"budget": {"note": "x" * 5000}}, "budget is too large"),
        ({"title": "t" * 1025}, "title is at most 1024 characters"),
        ({"agent": {"type": "agent_with_overrides", "id": "a", "system": "s" * 32_769}},
         "agent.system is at most 32768 characters"),
        ({"agent": {"type": "agent_with_overrides", "id": "a", "model": "m" * 300}},
         "agent.model id must be at most 256 characters"),
        ({"agent": {"type": "agent_with_overrides", "id": "a",
                    "model": {"id": "m", "extra": "e" * 2000}}}, "agent.model is too large"),
        ({"agent": {"type": "agent_with_overrides", "id": "a",
                    "tools": [{"type": "t"}] * 129}}, "agent.tools holds at most 128"),
        ({"vault_ids": ["vlt"] * 65}, "vault_ids holds at most 64"),
        ({"vault_ids": ["v" * 300]}, "vault_ids entries are at most 256"),
        # every part within its bound, the whole over 128 KiB
        ({"agent": {"type": "agent_with_overrides", "id": "a", "system": "é" * 32_000,
                    "tools": [{"type": "custom", "description": "d" * 1000}] * 100}},
         "the session is too large"),
    ]
    for extra, words in cases:
        refused(new_session(sp, **extra), 400, "invalid_request_error", words)
    # 20 attempts with an 800 kB budget (the 8 MB ones no longer even fit a body).
    for _ in range(20):
        refused(new_session(sp, budget={"note": big}), 400, "invalid_request_error",
                "budget is too large")
    ok = new_session(sp, title="t" * 1024, budget={"max_usd": 5},
                     vault_ids=["vlt_1"] * 64,
                     agent={"type": "agent_with_overrides", "id": "a", "system": "s" * 32_768,
                            "tools": [{"type": "t"}] * 128})
    assert ok.status_code == 200, ok.text[:300]
    listed = sp.sdk().beta.sessions.list()
    assert [s.id for s in listed.data] == [ok.json()["id"]]
    mem.assert_bounded(64, "session fields")


def test_3_nesting_past_a_small_bound_is_refused(serve):
    sp = serve()
    mem = Memory(sp)

    def with_budget(levels: int) -> bytes:
        """A session whose budget nests ``levels`` objects deep (the body is one more)."""
        return ('{"agent": "a", "environment_id": "e", "budget": ' + '{"a":' * levels + "1"
                + "}" * levels + "}").encode()

    # The 968 levels (its list page then answered 500), and just past the bound.
    for levels in (967, 32):
        refused(post(sp, "/v1/sessions", with_budget(levels), beta=SESSIONS_BETA), 400,
                "invalid_request_error", "nests deeper than 32 levels")
    refused(post(sp, "/v1/memory_stores", b'{"name": "n", "metadata": '
                 + b"[" * 5000 + b"]" * 5000 + b"}"), 400, "invalid_request_error",
            "nests deeper than 32 levels")
    # Within the bound: created, and every list page that includes it answers.
    ok = post(sp, "/v1/sessions", with_budget(31), beta=SESSIONS_BETA)  # 32 levels: taken
    assert ok.status_code == 200, ok.text[:300]
    r = httpx.get(f"{sp.base_url}/v1/sessions", timeout=10,
                  headers={"x-api-key": "test-key", "anthropic-beta": SESSIONS_BETA})
    assert r.status_code == 200 and len(r.json()["data"]) == 1
    mem.assert_bounded(32, "nesting")


def test_4_nan_and_infinity_are_refused(serve):
    sp = serve()
    mem = Memory(sp)
    sid = sp.sdk().beta.memory_stores.create(name="n").id
    for number in ("NaN", "Infinity", "-Infinity", "1e999", "-1e400"):
        for path, raw, beta in [
            ("/v1/sessions", '{"agent": "a", "environment_id": "e", "budget": {"usd": %s}}',
             SESSIONS_BETA),
            ("/v1/memory_stores", '{"name": "x", "metadata": {"k": %s}}', MEM),
            (f"/v1/memory_stores/{sid}/memories", '{"path": "/a", "content": "c", "x": %s}',
             MEM),
        ]:
            refused(post(sp, path, (raw % number).encode(), beta=beta), 400,
                    "invalid_request_error", "NaN or Infinity")
    # Nothing was stored: every answer stays strict JSON.
    for path, beta in (("/v1/sessions", SESSIONS_BETA), ("/v1/memory_stores", MEM)):
        r = httpx.get(sp.base_url + path, timeout=10,
                      headers={"x-api-key": "test-key", "anthropic-beta": beta})

        def strict(name: str) -> None:
            raise AssertionError(f"{name} in an answer")

        doc = json.loads(r.text, parse_constant=strict)
        assert len(doc["data"]) == (0 if "sessions" in path else 1)
    mem.assert_bounded(32, "NaN")


# ------------------------------------------------------------ 5. connection flood


@pytest.fixture
def many_fds():
    """Enough file descriptors for 1,100+ sockets here and in the server (a child
    process inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 8192 if hard == resource.RLIM_INFINITY else min(hard, 8192)
    if want < 2400:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is too low for the flood test")
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Flooder:
    """One client (source address 127.0.0.2) holding as many idle connections as the
    server lets it, reconnecting whenever one is closed, until stopped."""

    def __init__(self, port: int, target: int) -> None:
        self.port = port
        self.target = target
        self.socks: dict[int, socket.socket] = {}
        self.poll = select.poll()
        self.opened = 0
        self.closed_by_server = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.lock = threading.Lock()  # the thread and the test both reap: one poll() at a time

    def open_one(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", self.port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return
        self.socks[s.fileno()] = s
        self.poll.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
        self.opened += 1

    def reap(self) -> None:
        with self.lock:
            self._reap()

    def _reap(self) -> None:
        for fd, _ in self.poll.poll(0):
            s = self.socks.pop(fd, None)
            if s is not None:
                self.poll.unregister(fd)
                s.close()
                self.closed_by_server += 1

    def fill(self) -> None:
        with self.lock:
            while len(self.socks) < self.target:
                self.open_one()

    def run(self) -> None:
        while not self.stop.is_set():
            self.reap()
            self.fill()
            time.sleep(0.2)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        for s in self.socks.values():
            s.close()
        self.socks.clear()


def test_5_one_client_cannot_lock_out_the_others(many_fds, serve):
    sp = serve("--metrics", "--header-timeout", "5")
    mem = Memory(sp)
    flood = Flooder(sp.port, 1_100)
    started = time.monotonic()
    flood.fill()  # 1,100 idle sockets at once
    time.sleep(1.0)
    flood.thread.start()  # and from now on, reconnecting to keep 1,100
    latencies = []
    statuses = []
    try:
        time.sleep(1.0)
        held = sample(scrape(sp), "memfs_server_connections_open")
        print(f"flooder: {flood.opened} opened, {len(flood.socks)} held; server sees"
              f" {held:.0f} open")
        assert held >= 800  # it did fill the server: the rest is what it did not get
        sdk = sp.sdk(max_retries=0)
        store = sdk.beta.memory_stores.create(name="during the flood").id
        for i in range(120):
            # every fourth request on a fresh connection (a new client arriving)
            client = sdk if i % 4 else sp.sdk(max_retries=0)
            t0 = time.monotonic()
            try:
                if i % 2:
                    client.beta.memory_stores.memories.create(store, path=f"/m{i}",
                                                             content="c")
                else:
                    client.beta.memory_stores.memories.list(store)
                statuses.append(200)
            except Exception as exc:  # reported below
                statuses.append(getattr(exc, "status_code", repr(exc)))
            latencies.append(time.monotonic() - t0)
            if client is not sdk:
                client.close()
        flood.reap()
    finally:
        flood.close()
    latencies.sort()
    p50, p99 = (latencies[round(q * (len(latencies) - 1))] for q in (0.5, 0.99))
    print(f"legitimate client during the flood: {len(latencies)} requests,"
          f" p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms;"
          f" flooder opened {flood.opened}, {flood.closed_by_server} closed by the server")
    assert statuses == [200] * 120, [s for s in statuses if s != 200][:5]
    samples = scrape(sp)
    refused_n = sum(v for (n, _), v in samples.items()
                    if n == "memfs_server_connections_refused_total")
    shed = sample(samples, "memfs_server_idle_connections_closed_total")
    print(f"server: {refused_n:.0f} connections refused, {shed:.0f} idle ones closed early")
    assert refused_n > 100 and shed > 0
    mem.assert_bounded(200, "flood")
    assert healthy(sp)
    sp.stop()
    elapsed = time.monotonic() - started
    lines = [ln for ln in sp.log_path.read_text().splitlines() if "refused" in ln]
    print("\n".join(lines[:3]))
    # Thousands refused, and logged at most once every 10 s (with the count).
    assert 1 <= len(lines) <= 1 + elapsed / 10, (elapsed, lines)
    assert "Traceback" not in sp.log_path.read_text()


def test_5_the_ledger_in_process():
    """The fairness rules on their own: room while below 90 %; from there a client
    over its share is refused and every other newcomer closes idle connections of
    the busiest clients, oldest first, never busy ones."""
    from memfs.server.connections import ConnectionLedger, client_key

    class Conn:
        def __init__(self, key: str, t: float, idle: bool = True) -> None:
            self.client_key, self.last_active, self.idle = key, t, idle
            self.closed = False

        def is_idle(self) -> bool:
            return self.idle and not self.closed

        def close_idle(self) -> None:
            self.closed = True

    assert client_key(("2001:db8:1:2:3:4:5:6", 1, 0, 0)) == "2001:db8:1:2::/64"
    assert client_key(("::ffff:10.0.0.1", 1, 0, 0)) == "10.0.0.1"
    assert client_key(("10.0.0.1", 1)) == "10.0.0.1"
    refused: list[str] = []
    ledger = ConnectionLedger(20, 4, on_refused=refused.append)
    busy = [Conn("a", -1.0, idle=False) for _ in range(5)]
    flood = [Conn("a", float(i)) for i in range(12)]
    other = Conn("b", 100.0)
    for c in [*busy, *flood, other]:
        assert ledger.admit(c) is None  # 18 open: below 90 % of 20, no share applies
    assert ledger.admit(Conn("a", 50.0)) == "per_client"  # at 90 %: "a" is over its share
    newcomer = Conn("c", 200.0)
    assert ledger.admit(newcomer) is None  # made room: 18 → 16 (80 %), then admitted
    assert [c.closed for c in flood] == [True, True] + [False] * 10  # a's oldest idle ones
    assert not other.closed and not any(c.closed for c in busy)
    assert ledger.total == 17 and refused == ["per_client"]


# ------------------------------------------------------------ 6. request head


def test_6_the_16_kib_head_limit_holds_in_one_read(serve):
    sp = serve()
    mem = Memory(sp)
    ok = raw_request("GET", "/v1/memory_stores")
    heads = {
        "20 KB header": ok.replace(b"host: x\r\n", b"host: x\r\nx-pad: " + b"a" * 20_000
                                   + b"\r\n"),
        "64 KB header": ok.replace(b"host: x\r\n", b"host: x\r\nx-pad: " + b"a" * 65_000
                                   + b"\r\n"),
        "100 KB request line": ok.replace(b"/v1/memory_stores", b"/v1/memory_stores?q="
                                          + b"a" * 100_000),
        "10,000 headers": ok.replace(b"host: x\r\n", b"host: x\r\n" + b"x-a: b\r\n" * 10_000),
    }
    for what, data in heads.items():
        for _ in range(20):
            with connect(sp) as s:
                s.sendall(data)  # one write: the head arrives in as few reads as it can
                doc = assert_envelope(*read_response(s), 400)
                assert "request head is larger than 16384 bytes" in doc["error"]["message"], what
    # Just under the limit: served.
    with connect(sp) as s:
        s.sendall(ok.replace(b"host: x\r\n", b"host: x\r\nx-pad: " + b"a" * 15_000 + b"\r\n"))
        assert read_response(s)[0] == 200
    # A pipelined second request with a large head: the first is served, the second refused.
    with connect(sp) as s:
        s.sendall(ok + heads["20 KB header"])
        s.settimeout(10)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except ConnectionResetError:
            pass
        first, second = got.split(b"HTTP/1.1 ")[1:]
        assert first.startswith(b"200 ")
        assert second.startswith(b"400 ") and b"request head is larger" in second
    mem.assert_bounded(32, "heads")
    assert healthy(sp)


# ------------------------------------------------------------ 7. session tokens


def test_7_malformed_tokens_never_reach_the_database(serve):
    sp = serve("--metrics")
    mem = Memory(sp)
    sid = sp.sdk().beta.memory_stores.create(name="t").id
    session_id = new_session(sp, resources=[{"type": "memory_store",
                                             "memory_store_id": sid}]).json()["id"]
    token = mint_token(sp, session_id)
    malformed = ["memfs_sesstok_", "memfs_sesstok_short", "memfs_sesstok_" + "a" * 44,
                 "memfs_sesstok_" + "a" * 42 + "!", "memfs_sesstok_" + "é" * 43,
                 "memfs_sesstok_" + "a" * 10_000]
    with httpx.Client(base_url=sp.base_url, timeout=10) as c:
        for i in range(300):
            bad = malformed[i % len(malformed)]
            r = c.get(f"/v1/memory_stores/{sid}/memories",
                      headers={"x-api-key": bad.encode(), "anthropic-beta": MEM})
            refused(r, 401, "authentication_error", "invalid session token")
        samples = scrape(sp)
        assert sample(samples, "memfs_server_db_duration_seconds_count", op="session_grant") == 0
        assert sample(samples, "memfs_server_auth_failures_total",
                      reason="token_malformed") == 300
        # Well formed but unknown, 100 times: one lookup, then the cached refusal.
        forged = "memfs_sesstok_" + "A" * 43
        for _ in range(100):
            refused(c.get(f"/v1/memory_stores/{sid}/memories",
                          headers={"x-api-key": forged, "anthropic-beta": MEM}),
                    401, "authentication_error", "invalid session token")
        samples = scrape(sp)
        assert sample(samples, "memfs_server_db_duration_seconds_count", op="session_grant") == 1
        assert sample(samples, "memfs_server_auth_failures_total", reason="token_cached") == 99
        # The real token works, and stops working at once when its session is archived.
        h = {"x-api-key": token, "anthropic-beta": MEM}
        assert c.get(f"/v1/memory_stores/{sid}/memories", headers=h).status_code == 200
        sp.sdk().beta.sessions.archive(session_id)
        refused(c.get(f"/v1/memory_stores/{sid}/memories", headers=h), 401,
                "authentication_error", "archived")
        refused(c.get(f"/v1/memory_stores/{sid}/memories", headers=h), 401,
                "authentication_error", "archived")
    mem.assert_bounded(32, "tokens")


# ------------------------------------------------------------ 8. CL + TE


def test_8_content_length_with_chunked_is_refused_and_closed(serve):
    sp = serve()
    mem = Memory(sp)
    smuggled = (b"GET /v1/memory_stores HTTP/1.1\r\nhost: x\r\nx-api-key: test-key\r\n"
                b"anthropic-beta: " + MEM.encode() + b"\r\n\r\n")
    body = b'0\r\n\r\n' + smuggled
    for path in ("/v1/memory_stores", "/_memfs/health", "/v1/nowhere"):
        with connect(sp) as s:
            s.sendall(raw_request("POST", path, body,
                                  extra=b"transfer-encoding: chunked\r\n"))
            status, headers, data = read_response(s)
            doc = assert_envelope(status, headers, data, 400)
            assert "transfer-encoding" in doc["error"]["message"]
            assert headers["connection"] == "close"
            s.settimeout(5)
            rest = b""
            try:
                while chunk := s.recv(65536):
                    rest += chunk
            except ConnectionResetError:
                pass
            assert rest == b""  # closed: the trailing bytes never ran as a request
    mem.assert_bounded(16, "framing")
    assert healthy(sp)


# ------------------------------------------------------------ 9. --host


def serve_command(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "memfs", "serve", "--db", db, "--port", "0", *args]


def test_9_a_non_loopback_host_needs_a_key(tmp_path, db_backend, request):
    db = request.getfixturevalue("pg_url") if db_backend == "postgresql" else \
        str(tmp_path / "s" / "m.db")
    env = {k: v for k, v in os.environ.items() if k != "MEMFS_SERVE_API_KEY"}
    env["PYTHONPATH"] = str(REPO)
    for host in ("0.0.0.0", "::"):
        r = subprocess.run(serve_command(db, "--host", host), capture_output=True, text=True,
                           env=env, timeout=60, cwd=REPO)
        assert r.returncode == 2, r
        assert "no API key is set" in r.stderr and "--allow-unauthenticated" in r.stderr
        assert "Traceback" not in r.stderr and r.stdout == ""
    # Loopback needs nothing; any address with a key, or when asked explicitly, starts.
    for args, key in [(("--host", "127.0.0.1"), None), (("--host", "0.0.0.0"), "k"),
                      (("--host", "0.0.0.0", "--allow-unauthenticated"), None)]:
        sp = start_server(tmp_path / f"ok{len(args)}{key}", api_key=key, extra_args=args,
                          db_url=db if db.startswith("postgresql") else None)
        try:
            assert httpx.get(f"http://127.0.0.1:{sp.port}/_memfs/health",
                             timeout=10).status_code == 200
        finally:
            sp.stop()


# ------------------------------------------------------------ 10. dirs, attribution


def test_10_db_directories_are_private(tmp_path):
    """SQLite only (a PostgreSQL database has no directories)."""
    old = os.umask(0o022)
    try:
        sp = start_server(tmp_path, api_key="k")
    finally:
        os.umask(old)
    try:
        db = pathlib.Path(sp.db)
        assert oct(db.stat().st_mode & 0o777) == "0o600"
        assert oct(db.parent.stat().st_mode & 0o777) == "0o700"
    finally:
        sp.stop()
    deep = tmp_path / "a" / "b" / "c" / "m.db"
    r = subprocess.run(serve_command(str(deep), "--host", "127.0.0.1", "--api-key", "k",
                                     "--port", "-1"),
                       capture_output=True, text=True, timeout=60, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode != 0  # port -1: it stops after opening the database
    for d in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert oct(d.stat().st_mode & 0o777) == "0o700", d


def test_10_session_header_attribution_is_logged_and_counted(serve):
    sp = serve("--metrics", "--verbose")
    mem = Memory(sp)
    sid = sp.sdk().beta.memory_stores.create(name="a").id
    h = {**sp.headers, "x-memfs-session-id": "sesn_anyone"}
    r = httpx.post(f"{sp.base_url}/v1/memory_stores/{sid}/memories", headers=h,
                   json={"path": "/a", "content": "c"}, timeout=10)
    assert r.status_code == 200
    versions = sp.sdk().beta.memory_stores.memory_versions.list(sid, session_id="sesn_anyone")
    assert [v.memory_id for v in versions.data] == [r.json()["id"]]
    refused(httpx.post(f"{sp.base_url}/v1/memory_stores/{sid}/memories",
                       headers={**h, "x-memfs-session-id": "nope"},
                       json={"path": "/b", "content": "c"}, timeout=10),
            400, "invalid_request_error", "x-memfs-session-id")
    assert sample(scrape(sp), "memfs_server_session_header_requests_total") == 1
    mem.assert_bounded(16, "attribution")
    sp.stop()
    lines = [ln for ln in sp.log_path.read_text().splitlines() if " as sesn_anyone" in ln]
    assert len(lines) == 1 and f"/v1/memory_stores/{sid}/memories 200" in lines[0]
