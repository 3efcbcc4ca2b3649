"""memfs serve against hostile input (issue 11): every input gets a 4xx in the API's
envelope, the server stays responsive, and its memory stays bounded.

Transport-level attacks (HTTP/0.9 request lines, bad chunk sizes, unauthenticated
bodies, slowloris) go over raw sockets to a real `memfs serve`; application-level
ones (JSON depth, timestamps, cursors) run on both backends through the `server`
fixture, and once more in-process through httpx.ASGITransport.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time

import httpx
import pytest
from conftest import start_server

from memfs.api.betas import SESSIONS_BETA
from memfs.server.app import MemfsApp
from memfs.server.db import Database, _fingerprint

MEM = "agent-memory-2026-07-22"
MB = 1024 * 1024


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def connect(server, source: str | None = None) -> socket.socket:
    """A socket to the server; ``source`` another loopback address (127.0.0.2…) to
    connect as another client (the server's connection share is per address)."""
    return socket.create_connection(("127.0.0.1", server.port), timeout=10,
                                    source_address=(source, 0) if source else None)


def read_response(s: socket.socket, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response (Content-Length framed), as (status, headers, body)."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data!r}")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in
               (ln.split(":", 1) for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    try:
        while len(body) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    except ConnectionResetError:
        # Answered early, then closed on a body it did not read: the RST can beat
        # the last segment. The status line is the answer.
        body = b""
    return status, headers, body[:length]


def assert_envelope(status: int, headers: dict[str, str], body: bytes, want: int) -> dict:
    assert status == want, body
    assert headers["content-type"] == "application/json"
    if not body and headers.get("connection") == "close":
        return {}  # cut off by the reset (see read_response)
    doc = json.loads(body)
    assert doc["type"] == "error" and doc["error"]["message"]
    assert doc["request_id"].startswith("req_")
    assert b"Traceback" not in body
    return doc


def healthy(server) -> bool:
    return httpx.get(f"{server.base_url}/_memfs/health", timeout=5).status_code == 200


@pytest.fixture
def plain(tmp_path):
    """A SQLite server with a key, for transport-level attacks (backend-independent)."""
    sp = start_server(tmp_path, api_key="test-key")
    try:
        yield sp
    finally:
        sp.stop()


# ----------------------------------------------------------------------------- transport


def test_http09_request_line_gets_400_and_no_traceback(plain):
    for _ in range(50):
        with connect(plain) as s:
            s.sendall(b"GET /x\r\n\r\n")
            assert_envelope(*read_response(s), 400)
    assert healthy(plain)
    plain.stop()
    log = plain.log_path.read_text()
    assert "Traceback" not in log and len(log) < 2000, log[-2000:]


def test_malformed_http_gets_400_envelope(plain):
    """Request lines, framing and headers h11 refuses: 400 in the envelope, every time."""
    h = b"host: x\r\nx-api-key: test-key\r\nanthropic-beta: " + MEM.encode() + b"\r\n"
    inputs = [
        b"GET /v1/memory_stores/\xff\xfe HTTP/1.1\r\n" + h + b"\r\n",  # non-ASCII target
        b"GET /v1/memory_stores?page=\xff HTTP/1.1\r\n" + h + b"\r\n",
        b"POST /v1/memory_stores HTTP/1.1\r\n" + h + b"content-length: -1\r\n\r\n",
        b"POST /v1/memory_stores HTTP/1.1\r\n" + h + b"content-length: 1, 2\r\n\r\nab",
        b"POST /v1/memory_stores HTTP/1.1\r\n" + h + b"transfer-encoding: gzip\r\n\r\n",
        b"GET /v1/memory_stores HTTP/1.1\r\n" + h + b"x-a: a\x00b\r\n\r\n",
        b"GET /v1/memory_stores HTTP/1.1\r\nx-api-key: test-key\r\n\r\n",  # no host
        bytes.fromhex("160301020001") + b"\x00" * 50,  # a TLS ClientHello
        b"GET /x\r\n\r\n",
        b"\r\n\r\n\r\n",
    ]
    for data in inputs:
        with connect(plain) as s:
            s.sendall(data)
            assert_envelope(*read_response(s), 400)
    assert healthy(plain)


@pytest.mark.parametrize("size_line", [b"-1", b"zz", b"1" * 40])
def test_bad_chunk_sizes_get_400(plain, size_line):
    with connect(plain) as s:
        s.sendall(b"POST /v1/memory_stores HTTP/1.1\r\nhost: x\r\nx-api-key: test-key\r\n"
                  b"anthropic-beta: " + MEM.encode() + b"\r\ntransfer-encoding: chunked\r\n\r\n"
                  + size_line + b"\r\n" + b"a" * 100 + b"\r\n0\r\n\r\n")
        assert_envelope(*read_response(s), 400)
    assert healthy(plain)


def test_unauthenticated_body_is_never_read(plain):
    """401 right after the headers: the server never waits for (or buffers) the
    200 MB the request announces."""
    before = rss_kb(plain.proc.pid)
    for te in (b"content-length: 209715200", b"transfer-encoding: chunked"):
        with connect(plain) as s:
            s.sendall(b"POST /v1/memory_stores HTTP/1.1\r\nhost: x\r\nanthropic-beta: "
                      + MEM.encode() + b"\r\n" + te + b"\r\n\r\n")
            status, headers, body = read_response(s, timeout=5)
            assert_envelope(status, headers, body, 401)
            assert headers["connection"] == "close"

    def push(results: list) -> None:  # ten parallel 31 MB bodies without a key
        try:
            with connect(plain) as s:
                s.sendall(b"POST /v1/memory_stores HTTP/1.1\r\nhost: x\r\nanthropic-beta: "
                          + MEM.encode() + b"\r\ncontent-length: " + str(31 * MB).encode()
                          + b"\r\n\r\n")
                try:
                    for _ in range(31):
                        s.sendall(b"x" * MB)
                except OSError:
                    pass  # the server closed on us: expected
                try:
                    results.append(read_response(s, timeout=5)[0])
                except OSError:
                    results.append("reset")
        except Exception as exc:  # pragma: no cover - reported by the assert below
            results.append(repr(exc))

    results: list = []
    threads = [threading.Thread(target=push, args=(results,)) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(r in (401, "reset") for r in results) and 401 in results, results
    grew = rss_kb(plain.proc.pid) - before
    assert grew < 30 * 1024, f"server grew by {grew} kB"
    assert healthy(plain)


def test_body_cap_is_enforced_while_streaming(plain):
    before = rss_kb(plain.proc.pid)
    head = (b"POST /v1/memory_stores HTTP/1.1\r\nhost: x\r\nx-api-key: test-key\r\n"
            b"anthropic-beta: " + MEM.encode() + b"\r\n")
    with connect(plain) as s:  # a declared length over the cap: refused before reading
        s.sendall(head + b"content-length: " + str(40 * MB).encode() + b"\r\n\r\n")
        assert_envelope(*read_response(s), 413)
    with connect(plain) as s:  # chunked: counted as it arrives
        s.sendall(head + b"transfer-encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n" % MB + b"x" * MB + b"\r\n"
        try:
            for _ in range(40):
                s.sendall(chunk)
        except OSError:
            pass
        assert_envelope(*read_response(s), 413)
    assert rss_kb(plain.proc.pid) - before < 120 * 1024
    assert healthy(plain)


def test_slowloris_is_bounded_and_the_server_stays_responsive(tmp_path):
    sp = start_server(tmp_path, api_key="k", extra_args=("--header-timeout", "1"))
    try:
        before = rss_kb(sp.proc.pid)
        socks = []
        for _ in range(200):
            s = connect(sp)
            s.sendall(b"GET /v1/memory_stores HTTP/1.1\r\nhost: x\r\n")  # never finishes
            socks.append(s)
        # Served while 200 half-open requests are pending.
        with httpx.Client(base_url=sp.base_url, headers={"x-api-key": "k",
                                                           "anthropic-beta": MEM}) as c:
            t0 = time.monotonic()
            for _ in range(20):
                assert c.get("/v1/memory_stores").status_code == 200
            assert time.monotonic() - t0 < 5
        time.sleep(0.5)
        for s in socks:  # drip one more header byte: still incomplete
            try:
                s.sendall(b"x")
            except OSError:
                pass
        # Within the deadline (+ slack), every one of them got 408 and was closed.
        closed = 0
        for s in socks:
            try:
                status, headers, body = read_response(s, timeout=5)
                assert_envelope(status, headers, body, 408)
                closed += 1
            except (ConnectionError, OSError):
                closed += 1
            finally:
                s.close()
        assert closed == 200
        assert rss_kb(sp.proc.pid) - before < 30 * 1024
        assert healthy(sp)
    finally:
        sp.stop()


def test_connection_cap(tmp_path):
    sp = start_server(tmp_path, extra_args=("--max-connections", "20", "--header-timeout", "1"))
    try:
        socks = [connect(sp) for _ in range(40)]
        time.sleep(0.3)
        refused = 0
        for s in socks:
            s.settimeout(0.2)
            try:
                if s.recv(4096).startswith(b"HTTP/1.1 503"):
                    refused += 1
            except OSError:
                pass
        assert refused >= 15  # the ones past the cap were turned away at once
        for s in socks:
            s.close()
        time.sleep(1.5)  # the rest met the header deadline
        assert healthy(sp)
    finally:
        sp.stop()


def test_500_concurrent_requests(plain):
    """500 connections at once, each one request (raw asyncio sockets: an HTTP client
    library would be the bottleneck here, not the server)."""
    request = (b"GET /v1/memory_stores HTTP/1.1\r\nhost: x\r\nx-api-key: test-key\r\n"
               b"anthropic-beta: " + MEM.encode() + b"\r\nconnection: close\r\n\r\n")

    async def one() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", plain.port)
        writer.write(request)
        await writer.drain()
        data = await reader.read()
        writer.close()
        return data

    async def main() -> list[bytes]:
        return await asyncio.wait_for(asyncio.gather(*(one() for _ in range(500))), 60)

    answers = asyncio.run(main())
    assert all(a.startswith(b"HTTP/1.1 200 ") and a.endswith(b'"next_page":null}')
               for a in answers), {a[:40] for a in answers}
    assert healthy(plain)


# ----------------------------------------------------------------------------- application


def forged_cursor(fingerprint: str, key: list[str]) -> str:
    keys = ",".join(f'"{k}"' for k in key)
    raw = '{"f":"' + fingerprint + '","k":[' + keys + "]}"
    return "page_" + base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def test_a_cursor_holding_nul_is_refused_on_every_paged_list(server):
    """Every list that pages refuses a cursor whose key holds NUL (no stored key does)
    with 400, on both backends: the cursor is forged, and PostgreSQL text could not
    even compare it. A list filter holding NUL is the empty page instead."""
    sid = server.sdk().beta.memory_stores.create(name="n").id
    base = server.base_url
    sessions_h = {**server.headers, "anthropic-beta": SESSIONS_BETA}
    for path, fp, headers in (
        ("/v1/memory_stores", _fingerprint("stores", False, None, None), server.headers),
        (f"/v1/memory_stores/{sid}/memories", _fingerprint("memories", sid, "/", 0),
         server.headers),
        (f"/v1/memory_stores/{sid}/memory_versions",
         _fingerprint("versions", sid, None, None, None, None, None, None, None),
         server.headers),
        ("/v1/sessions", _fingerprint("sessions", None, None, False, "desc", None, None, None,
                                      None), sessions_h),
    ):
        keys = (["/a\\u0000"] if path.endswith("/memories")
                else ["2026-01-01T00:00:00.000000Z", "x\\u0000"])
        r = httpx.get(base + path, headers=headers, timeout=10,
                      params={"page": forged_cursor(fp, keys)})
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"]["message"] == "page is not a valid page cursor", r.text
        clean = [k.replace("\\u0000", "") for k in keys]  # the same cursor without NUL
        r = httpx.get(base + path, headers=headers, timeout=10,
                      params={"page": forged_cursor(fp, clean)})
        assert r.status_code == 200, (path, r.text)
    for name in ("memory_store_id", "agent_id"):
        r = httpx.get(f"{base}/v1/sessions", headers=sessions_h, params={name: "x\x00"},
                      timeout=10)
        assert r.status_code == 200 and r.json() == {"data": [], "next_page": None}, r.text


def hostile_requests(sid: str) -> list[tuple[str, str, dict]]:
    """(method, path, httpx kwargs) that must each get 400."""
    # Deep enough to exhaust a recursive parser, small enough for every route's body bound.
    deep = b"[" * 50_000 + b"]" * 50_000
    deep_obj = b'{"name": ' + b'{"a":' * 20_000 + b"1" + b"}" * 20_000 + b"}"
    mem_fp = _fingerprint("memories", sid, "/", 0)
    return [
        ("POST", "/v1/memory_stores", {"content": deep}),
        ("POST", "/v1/memory_stores", {"content": deep_obj}),
        ("POST", f"/v1/memory_stores/{sid}/memories", {"content": deep}),
        ("GET", "/v1/memory_stores", {"params": {"created_at[gte]": "0001-01-01T00:00:00+14:00"}}),
        ("GET", "/v1/memory_stores", {"params": {"created_at[lte]": "9999-12-31T23:59:59-14:00"}}),
        # Not RFC 3339, though Python's fromisoformat reads each (found by a helper).
        *[("GET", "/v1/memory_stores", {"params": {"created_at[gte]": when}})
          for when in ("2020-01-01", "2020-W01-1", "20200101T000000", " 2020-01-01T00:00:00Z")],
        # Not an integer as the API writes one, though int() reads each.
        *[("GET", "/v1/memory_stores", {"params": {"limit": n}}) for n in ("1_0", "+3", " 2",
                                                                           "\u0661")],
        ("GET", f"/v1/memory_stores/{sid}/memory_versions",
         {"params": {"created_at[gte]": "0001-01-01T00:00:00+14:00"}}),
        ("GET", f"/v1/memory_stores/{sid}/memories",
         {"params": {"page": forged_cursor(mem_fp, ["\\ud800"])}}),
        ("GET", f"/v1/memory_stores/{sid}/memories",
         {"params": {"page": forged_cursor(mem_fp, ["/a\\udfff/"])}}),
        ("GET", "/v1/memory_stores",
         {"params": {"page": forged_cursor(_fingerprint("stores", False, None, None),
                                           ["\\ud800", "x"])}}),
        ("POST", "/v1/memory_stores", {"content": b'{"name": "x", "\\ud800": 1}'}),
        ("POST", "/v1/memory_stores", {"content": b"\xff\xfe{}"}),
        # JSON is UTF-8: the same object in UTF-16, which json.loads of bytes reads.
        ("POST", "/v1/memory_stores", {"content": '{"name": "x"}'.encode("utf-16")}),
        ("POST", "/v1/memory_stores", {"content": b'{"name": "x"}',
                                        "headers": {"content-length": "abc"}}),
    ]


def test_hostile_application_inputs_get_400(server):
    sid = server.sdk().beta.memory_stores.create(name="h").id
    headers = server.headers
    for method, path, kw in hostile_requests(sid):
        kw = dict(kw)
        h = {**headers, **kw.pop("headers", {})}
        try:
            r = httpx.request(method, server.base_url + path, headers=h, timeout=30, **kw)
        except httpx.TransportError:
            if "content-length" in h and h["content-length"] == "abc":
                continue  # h11 refuses to even send it on some versions
            raise
        assert r.status_code == 400, (method, path, r.status_code, r.text[:300])
        body = r.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert "Traceback" not in r.text
    assert healthy(server)
    server.stop()
    assert "Traceback" not in server.log_path.read_text()


def test_hostile_inputs_in_process(tmp_path):
    """The same inputs straight into the ASGI app (httpx.ASGITransport): fast, and no
    transport between the test and the pipeline."""
    db = Database(tmp_path / "m.db")
    app = MemfsApp(db, api_key="k")
    headers = {"x-api-key": "k", "anthropic-beta": MEM}

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://memfs",
                                     headers=headers) as c:
            r = await c.post("/v1/memory_stores", json={"name": "s"})
            sid = r.json()["id"]
            for method, path, kw in hostile_requests(sid):
                if "headers" in kw:
                    continue  # a malformed framing header: only meaningful on a socket
                r = await c.request(method, path, **kw)
                assert r.status_code == 400, (method, path, r.text[:300])
                assert r.json()["error"]["type"] == "invalid_request_error"
            # The body cap, without a socket.
            r = await c.post("/v1/memory_stores", content=b" " * (32 * MB + 1))
            assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
            # No key: 401 before the body.
            r = await c.post("/v1/memory_stores", content=b"{", headers={"x-api-key": "no"})
            assert r.status_code == 401
            # Health proof: only the key's holder can answer the challenge.
            r = await c.get("/_memfs/health", params={"challenge": "abc"})
            from memfs.core.healthproof import health_proof
            assert r.json()["proof"] == health_proof("k", "abc")

    try:
        asyncio.run(main())
    finally:
        db.close()


# ----------------------------------------------------------------------------- logs


def test_log_file_rotates_and_json_format(tmp_path):
    log = tmp_path / "logs" / "serve.log"
    sp = start_server(tmp_path, api_key="very-secret-key",
                      extra_args=("--verbose", "--log-file", str(log), "--log-format", "json",
                                  "--log-max-bytes", "4096", "--log-backups", "2"))
    try:
        with httpx.Client(base_url=sp.base_url, headers={"x-api-key": "very-secret-key",
                                                           "anthropic-beta": MEM}) as c:
            for _ in range(150):
                assert c.get("/v1/memory_stores").status_code == 200
    finally:
        sp.stop()
    files = sorted(p.name for p in log.parent.iterdir())
    assert files == ["serve.log", "serve.log.1", "serve.log.2"]
    for p in log.parent.iterdir():
        assert p.stat().st_size <= 4096 + 512
        text = p.read_text()
        assert "very-secret-key" not in text
        for line in text.splitlines():
            rec = json.loads(line)
            assert {"ts", "level", "logger", "msg"} <= set(rec)
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert any("/v1/memory_stores" in json.loads(ln)["msg"]
               for ln in log.read_text().splitlines())


def test_buffered_bodies_have_a_server_wide_budget(tmp_path):
    """Authenticated clients together cannot make the server hold more request-body
    bytes than its budget: the request past it gets 503, and the budget comes back
    once the holder is answered."""
    from memfs.server.app import Limits

    db = Database(tmp_path / "m.db")
    app = MemfsApp(db, api_key="k", fault_control=True, limits=Limits(max_buffered=150 * 1024))
    headers = {"x-api-key": "k", "anthropic-beta": MEM}
    big = json.dumps({"name": "x" * (100 * 1024)}).encode()  # under the route's 128 KiB

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://memfs",
                                     headers=headers, timeout=30) as c:
            await c.post("/_memfs/gate", json={"method": "POST", "path": "^/v1/memory_stores$",
                                               "when": "after", "count": 1})
            first = asyncio.create_task(c.post("/v1/memory_stores", content=big))
            held = await c.get("/_memfs/gate", params={"min_held": 1, "timeout": 10})
            assert len(held.json()["held"]) == 1  # its 100 kB body is still charged
            second = await c.post("/v1/memory_stores", content=big)
            assert second.status_code == 503
            assert second.json()["error"]["type"] == "overloaded_error"
            await c.post("/_memfs/gate/release", json={})
            assert (await first).status_code == 400  # a 100 kB name: answered normally
            third = await c.post("/v1/memory_stores", content=big)
            assert third.status_code == 400  # the budget came back
            assert app.budget.used == 0

    try:
        asyncio.run(main())
    finally:
        db.close()


def test_no_log_line_injection(tmp_path):
    sp = start_server(tmp_path, api_key="k", extra_args=("--verbose",))
    try:
        r = httpx.get(f"{sp.base_url}/v1/x%0D%0A2026-01-01 00:00:00 forged%0Aline",
                      headers={"x-api-key": "k", "anthropic-beta": MEM})
        assert r.status_code == 404
    finally:
        sp.stop()
    lines = sp.log_path.read_text().splitlines()
    assert not any(ln.startswith(("2026-01-01 00:00:00 forged", "line")) for ln in lines)
    assert any("/v1/x%0D%0A" in ln for ln in lines)


def test_a_client_that_never_reads_its_response_is_cut_off(tmp_path):
    sp = start_server(tmp_path, api_key="k", extra_args=("--send-timeout", "1"))
    try:
        ms = sp.sdk().beta.memory_stores
        sid = ms.create(name="big").id
        for i in range(20):
            ms.memories.create(sid, path=f"/m{i:02d}", content="x" * 100_000)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", sp.port))
        # Eight pipelined ~2 MB pages, never read: more than the kernel buffers hold,
        # so the rest waits in the server, which gives up after --send-timeout.
        s.sendall(8 * f"GET /v1/memory_stores/{sid}/memories?view=full&limit=20 HTTP/1.1\r\n"
                  f"host: x\r\nx-api-key: k\r\nanthropic-beta: {MEM}\r\n\r\n".encode())
        time.sleep(3)
        assert healthy(sp)
        got = b""
        s.settimeout(10)
        try:
            while chunk := s.recv(1 << 20):
                got += chunk
        except ConnectionResetError:
            pass
        s.close()
        assert got.startswith(b"HTTP/1.1 200 ")
        assert len(got) < 8 * 2_000_000  # cut off: the eight pages never arrived whole
    finally:
        sp.stop()
    assert "did not take its response" in sp.log_path.read_text()


def test_nul_in_ids_filters_and_cursors(server):
    """NUL can be sent (%00) but is in no stored id: same answers on both backends
    (PostgreSQL text cannot even hold it), never a 500."""
    sid = server.sdk().beta.memory_stores.create(name="n").id
    base = server.base_url
    h = server.headers
    for method, path, want in [
        ("GET", "/v1/memory_stores/memstore_%00", 404),
        ("POST", "/v1/memory_stores/%00/archive", 404),
        ("DELETE", "/v1/memory_stores/%00", 404),
        ("GET", f"/v1/memory_stores/{sid}/memories/mem_%00", 404),
        ("DELETE", f"/v1/memory_stores/{sid}/memories/%00", 404),
        ("GET", f"/v1/memory_stores/{sid}/memory_versions/%00", 404),
        ("POST", f"/v1/memory_stores/{sid}/memory_versions/%00/redact", 404),
        ("GET", f"/v1/memory_stores/{sid}/memories?path_prefix=/a%00/", 400),
    ]:
        r = httpx.request(method, base + path, headers=h, timeout=10)
        assert r.status_code == want, (path, r.text)
    for name in ("memory_id", "session_id", "api_key_id", "service_account_id"):
        r = httpx.get(f"{base}/v1/memory_stores/{sid}/memory_versions", headers=h,
                      params={name: "x\x00"}, timeout=10)
        assert r.status_code == 200 and r.json() == {"data": [], "next_page": None}
    fp = _fingerprint("memories", sid, "/", 0)
    r = httpx.get(f"{base}/v1/memory_stores/{sid}/memories", headers=h, timeout=10,
                  params={"page": forged_cursor(fp, ["/a\\u0000"])})
    assert r.status_code == 400
