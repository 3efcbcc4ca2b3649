"""`memfs serve --metrics` (issue 24): a known workload through the official SDK, then
a scrape parsed by prometheus_client's own parser, whose values must match what the
workload did and what the server itself answers (its lists and version counts). Both
backends."""

from __future__ import annotations

import anthropic
import httpx
import pytest
from test_server_limits import mint_token, new_session, sample, scrape
from test_server_limits import serve as serve  # noqa: PLC0414 - the fixture, used by name

MEMORIES = "/v1/memory_stores/{store_id}/memories"
MEMORY = "/v1/memory_stores/{store_id}/memories/{memory_id}"


def test_metrics_match_a_known_workload(serve):
    sp = serve("--metrics")
    sdk = sp.sdk()
    ms = sdk.beta.memory_stores
    a = ms.create(name="alpha").id
    b = ms.create(name="beta").id
    ids_a = [ms.memories.create(a, path=f"/a/{i}", content=f"a{i}").id for i in range(5)]
    ids_b = [ms.memories.create(b, path=f"/b/{i}", content=f"b{i}").id for i in range(3)]
    for mid in ids_a[:2]:
        ms.memories.update(mid, memory_store_id=a, content="changed")
    ms.memories.delete(ids_b[0], memory_store_id=b)
    for _ in range(2):
        ms.memories.list(a)
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.retrieve("mem_missing", memory_store_id=a)
    ms.archive(b)
    # A body over its route's bound, refused before it is read.
    r = httpx.post(f"{sp.base_url}/v1/memory_stores/{a}/memories", headers=sp.headers,
                   content=b" " * (2 * 1024 * 1024), timeout=30)
    assert r.status_code == 413

    samples = scrape(sp)

    def requests(route: str, method: str, status: int) -> float:
        return sample(samples, "memfs_server_requests_total", route=route, method=method,
                      status=str(status))

    assert requests("/v1/memory_stores", "POST", 200) == 2
    assert requests(MEMORIES, "POST", 200) == 8
    assert requests(MEMORY, "POST", 200) == 2
    assert requests(MEMORY, "DELETE", 200) == 1
    assert requests(MEMORIES, "GET", 200) == 2
    assert requests(MEMORY, "GET", 404) == 1
    assert requests("/v1/memory_stores/{store_id}/archive", "POST", 200) == 1
    assert requests(MEMORIES, "POST", 413) == 1
    assert sample(samples, "memfs_server_request_duration_seconds_count", route=MEMORIES,
                  method="POST") == 9
    assert sample(samples, "memfs_server_bodies_refused_total", reason="too_large") == 1
    # Each operation that reached the database is timed once; none failed.
    assert sample(samples, "memfs_server_db_duration_seconds_count", op="create_memory") == 8
    assert sample(samples, "memfs_server_db_duration_seconds_count", op="update_memory") == 2
    assert not [k for k in samples if k[0] == "memfs_server_db_errors_total"]
    assert sample(samples, "memfs_server_connections_open") >= 1
    # Per-store counts: what the server's own answers say.
    live_a = len(ms.memories.list(a).data)
    live_b = len(ms.memories.list(b).data)
    versions_a = len(ms.memory_versions.list(a, limit=100).data)
    versions_b = len(ms.memory_versions.list(b, limit=100).data)
    assert (live_a, live_b, versions_a, versions_b) == (5, 2, 7, 4)  # the workload's
    assert sample(samples, "memfs_server_store_memories", store_id=a) == live_a
    assert sample(samples, "memfs_server_store_memories", store_id=b) == live_b
    assert sample(samples, "memfs_server_store_versions", store_id=a) == versions_a
    assert sample(samples, "memfs_server_store_versions", store_id=b) == versions_b
    assert sample(samples, "memfs_server_stores", state="active") == 1
    assert sample(samples, "memfs_server_stores", state="archived") == 1


def test_metrics_are_protected_like_the_api(serve):
    sp = serve("--metrics")
    url = f"{sp.base_url}/_memfs/metrics"
    for headers in ({}, {"x-api-key": "wrong"}, {"authorization": "Bearer wrong"}):
        r = httpx.get(url, headers=headers, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(url, headers={"authorization": "Bearer test-key"},
                     timeout=10).status_code == 200
    session = new_session(sp).json()["id"]
    r = httpx.get(url, headers={"x-api-key": mint_token(sp, session)}, timeout=10)
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    r = httpx.post(url, headers={"x-api-key": "test-key"}, timeout=10)
    assert r.status_code == 405
    samples = scrape(sp)
    assert sample(samples, "memfs_server_auth_failures_total", reason="key") == 3


def test_no_metrics_without_the_flag(serve):
    sp = serve()
    r = httpx.get(f"{sp.base_url}/_memfs/metrics", headers={"x-api-key": "test-key"},
                  timeout=10)
    assert r.status_code == 404
