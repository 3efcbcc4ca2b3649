"""memfs serve: wire-level rules (beta header, auth, envelope, routing) and the CLI."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys

import anthropic
import httpx
import pytest
from conftest import REPO, start_server

from memfs.api import betas as betas

MEM = "agent-memory-2026-07-22"
LEGACY = "managed-agents-2026-04-01"


def raw(server, method, path, *, headers=None, beta=MEM, key="default", **kw):
    h = {"anthropic-version": "2023-06-01"}
    if beta is not None:
        h["anthropic-beta"] = beta
    if key == "default":
        key = server.api_key
    if key is not None:
        h["x-api-key"] = key
    h.update(headers or {})
    return httpx.request(method, server.base_url + path, headers=h, timeout=10, **kw)


def assert_error(r, status, etype):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == etype
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["request_id"] == r.headers["request-id"]
    assert r.headers["request-id"].startswith("req_")
    assert r.headers["content-type"] == "application/json"
    return body


def test_client_and_server_share_one_definition_of_the_betas():
    """The client sends and the server checks the same strings (memfs.api.betas),
    and the server gets them without importing the client (httpx, trio)."""
    code = (
        "import sys, memfs.server.http as h, memfs.api.betas as b\n"
        "assert 'memfs.api.client' not in sys.modules, 'the server imported the client'\n"
        "import memfs.api.client as c\n"
        "assert (h.MEMORY_BETA, h.SESSIONS_BETA) == (c.MEMORY_BETA, c.SESSIONS_BETA)"
        " == (b.MEMORY_BETA, b.SESSIONS_BETA)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (MEM, LEGACY) == (betas.MEMORY_BETA, betas.SESSIONS_BETA)


def test_beta_header_rules(server):
    ok = raw(server, "GET", "/v1/memory_stores")
    assert ok.status_code == 200 and ok.json() == {"data": [], "next_page": None}
    assert ok.headers["request-id"].startswith("req_")
    for beta in (LEGACY, f"message-batches-2024-09-24,{MEM}", f"{MEM} , other-beta"):
        assert raw(server, "GET", "/v1/memory_stores", beta=beta).status_code == 200
    assert_error(raw(server, "GET", "/v1/memory_stores", beta=None), 400, "invalid_request_error")
    assert_error(
        raw(server, "GET", "/v1/memory_stores", beta="files-api-2025-04-14"),
        400,
        "invalid_request_error",
    )
    both = raw(server, "GET", "/v1/memory_stores", beta=f"{MEM},{LEGACY}")
    assert_error(both, 400, "invalid_request_error")
    # Repeated header lines count too.
    rep = httpx.get(
        server.base_url + "/v1/memory_stores",
        headers=[("x-api-key", "test-key"), ("anthropic-beta", MEM), ("anthropic-beta", LEGACY)],
    )
    assert_error(rep, 400, "invalid_request_error")
    rep_ok = httpx.get(
        server.base_url + "/v1/memory_stores",
        headers=[("x-api-key", "test-key"), ("anthropic-beta", "x-1"), ("anthropic-beta", MEM)],
    )
    assert rep_ok.status_code == 200
    # The SDK with extra betas still works (comma-joined).
    ms = server.sdk().beta.memory_stores
    assert ms.create(name="b", betas=["message-batches-2024-09-24"]).name == "b"
    with pytest.raises(anthropic.BadRequestError):
        ms.create(name="b", betas=[LEGACY])  # SDK appends the memory beta → both


def test_auth(server):
    for key in (None, "wrong"):
        assert_error(raw(server, "GET", "/v1/memory_stores", key=key), 401, "authentication_error")
    bearer = raw(
        server, "GET", "/v1/memory_stores", key=None, headers={"authorization": "Bearer test-key"}
    )
    assert bearer.status_code == 200
    # each refusal names what the request sent (a wrong bearer token was said to be an
    # invalid x-api-key: found by a helper, 6 December)
    said = {name: assert_error(raw(server, "GET", "/v1/memory_stores", **kw), 401,
                               "authentication_error")["error"]["message"]
            for name, kw in (("none", {"key": None}), ("key", {"key": "wrong"}),
                             ("bearer", {"key": None, "headers": {
                                 "authorization": "Bearer wrong"}}))}
    assert said == {"none": "x-api-key header is required (or Authorization: Bearer)",
                    "key": "invalid x-api-key", "bearer": "invalid bearer token"}
    with pytest.raises(anthropic.AuthenticationError):
        server.sdk(api_key="nope").beta.memory_stores.list()
    tok = anthropic.Anthropic(base_url=server.base_url, auth_token="test-key", max_retries=0)
    assert list(tok.beta.memory_stores.list()) == []
    # health needs no auth; nor does readiness (one query on the database)
    h = httpx.get(server.base_url + "/_memfs/health")
    assert h.status_code == 200 and h.json()["ok"] is True and h.json()["server_id"]
    r = httpx.get(server.base_url + "/_memfs/ready")
    assert r.status_code == 200 and r.json() == {"ok": True}
    for probe in ("/_memfs/health", "/_memfs/ready"):  # as some balancers probe (was 405)
        h = httpx.head(server.base_url + probe)
        assert h.status_code == 200 and h.content == b"", (probe, h)


def test_routing_and_envelope(server):
    assert_error(raw(server, "GET", "/v1/nope"), 404, "not_found_error")
    assert_error(raw(server, "GET", "/v2/memory_stores"), 404, "not_found_error")
    assert_error(raw(server, "GET", "/v1/memory_stores/a/b/c/d"), 404, "not_found_error")
    assert_error(raw(server, "GET", "/v1/memory_stores/memstore_x"), 404, "not_found_error")
    r = raw(server, "PATCH", "/v1/memory_stores/memstore_x")
    assert_error(r, 405, "invalid_request_error")
    assert "POST" in r.headers["allow"]
    assert_error(raw(server, "DELETE", "/v1/memory_stores"), 405, "invalid_request_error")
    assert_error(raw(server, "PUT", "/v1/memory_stores/x/memories/y"), 405, "invalid_request_error")
    assert_error(
        raw(server, "POST", "/v1/memory_stores", content=b"{not json"), 400, "invalid_request_error"
    )
    assert_error(raw(server, "POST", "/v1/memory_stores", json=[1]), 400, "invalid_request_error")
    lone = b'{"name": "bad \\ud800 name"}'
    assert_error(
        raw(server, "POST", "/v1/memory_stores", content=lone), 400, "invalid_request_error"
    )
    for cursor in ("page_", "page_W10", "page_eyJmIjoxLCJrIjpbMV19", "nope"):
        r = raw(server, "GET", "/v1/memory_stores", params={"page": cursor})
        assert_error(r, 400, "invalid_request_error")
    # ?beta=true accepted and ignored; so are unknown legacy params.
    s = raw(server, "POST", "/v1/memory_stores?beta=true", json={"name": "q"}).json()
    assert raw(server, "GET", f"/v1/memory_stores/{s['id']}").json() == s
    lst = raw(server, "GET", f"/v1/memory_stores/{s['id']}/memories?beta=true&order=asc")
    assert lst.status_code == 200
    # Every documented key is present on the wire, including nulls.
    m = raw(
        server, "POST", f"/v1/memory_stores/{s['id']}/memories", json={"path": "/a", "content": "b"}
    ).json()
    assert set(m) == {
        "type",
        "id",
        "memory_store_id",
        "path",
        "content",
        "content_size_bytes",
        "content_sha256",
        "memory_version_id",
        "created_at",
        "updated_at",
    }
    assert m["content"] is None and m["created_at"].endswith("Z")
    assert set(s) == {
        "type",
        "id",
        "name",
        "description",
        "metadata",
        "created_at",
        "updated_at",
        "archived_at",
    }
    v = raw(server, "GET", f"/v1/memory_stores/{s['id']}/memory_versions").json()["data"][0]
    assert set(v) == {
        "type",
        "id",
        "memory_store_id",
        "memory_id",
        "operation",
        "path",
        "content",
        "content_size_bytes",
        "content_sha256",
        "created_by",
        "created_at",
        "redacted_at",
        "redacted_by",
    }
    # Keep-alive: many requests over one connection.
    with httpx.Client(base_url=server.base_url, headers=server.headers) as c:
        for _ in range(20):
            assert c.get("/v1/memory_stores").status_code == 200


def test_no_api_key_server(tmp_path):
    sp = start_server(tmp_path)
    try:
        ms = sp.sdk().beta.memory_stores
        sid = ms.create(name="open").id
        ms.memories.create(sid, path="/a", content="")
        v = ms.memory_versions.list(sid).data[0]
        assert v.created_by.api_key_id == "apikey_local"
        r = httpx.get(sp.base_url + "/v1/memory_stores", headers={"anthropic-beta": MEM})
        assert r.status_code == 200
        # Without --fault-control the fault endpoint does not exist.
        assert httpx.get(sp.base_url + "/_memfs/faults").status_code == 404
    finally:
        sp.stop()


def test_cli_files_key_file_signals_and_logging(tmp_path):
    keyfile = tmp_path / "key"
    keyfile.write_text("s3cret-key\n")
    db = tmp_path / "new" / "dir" / "m.db"
    env = {k: v for k, v in os.environ.items() if k != "MEMFS_SERVE_API_KEY"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memfs",
            "serve",
            "--db",
            str(db),
            "--port",
            "0",
            "--api-key-file",
            str(keyfile),
            "--verbose",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=str(REPO),
    )
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("memfs serve: listening on http://127.0.0.1:")
        url = line.split(" on ", 1)[1].strip()
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
        r = httpx.get(url + "/v1/memory_stores", headers={"anthropic-beta": MEM})
        assert r.status_code == 401
        r = httpx.get(
            url + "/v1/memory_stores", headers={"anthropic-beta": MEM, "x-api-key": "s3cret-key"}
        )
        assert r.status_code == 200
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        err = proc.stderr.read().decode()
        assert "/v1/memory_stores" in err  # --verbose logs requests
        assert "s3cret-key" not in err
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_quiet_by_default_and_sigint(server):
    server.sdk().beta.memory_stores.list()
    os.kill(server.proc.pid, signal.SIGINT)
    assert server.proc.wait(timeout=10) == 0
    server.stop()
    assert "/v1/memory_stores" not in server.log_path.read_text()


def test_ready_says_503_while_the_database_takes_no_query(tmp_path):
    """A balancer's readiness probe: health answers from the process alone (it stayed 200
    while every database request hung, found by a helper on PostgreSQL); ready runs one
    query and says 503, and why, when none runs in time (here SQLite's one connection
    held by a transaction that does not end)."""
    import asyncio

    from memfs.server.app import MemfsApp
    from memfs.server.db import Database

    db = Database(tmp_path / "m.db")
    app = MemfsApp(db, api_key="k")

    async def ready() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://memfs") as c:
            return await c.get("/_memfs/ready")

    try:
        assert asyncio.run(ready()).json() == {"ok": True}
        with db._lock:  # noqa: SLF001 - a transaction that does not end
            r = asyncio.run(ready())
        assert r.status_code == 503
        assert r.json() == {"ok": False, "error": "the database is busy: no query within 2 s"}
        assert asyncio.run(ready()).status_code == 200
    finally:
        db.close()
