"""memfs serve: persistence, concurrency, the 2,000-memory cap, fault injection."""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import pytest
from conftest import start_server

from memfs.core.paths import MAX_MEMORIES_PER_STORE


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def test_persistence_across_restart_and_crash(server):
    ms = server.sdk().beta.memory_stores
    s = ms.create(name="persist", metadata={"k": "v"})
    ids = [ms.memories.create(s.id, path=f"/m{i:02d}", content=str(i)).id for i in range(30)]
    ms.memories.update(ids[0], memory_store_id=s.id, content="changed")
    page = ms.memories.list(s.id, limit=10)
    port = server.port

    server.restart()
    assert server.port == port  # same port
    ms = server.sdk().beta.memory_stores
    assert ms.retrieve(s.id).metadata == {"k": "v"}
    assert ms.memories.retrieve(ids[0], memory_store_id=s.id).content == "changed"
    # A cursor issued before the restart still works.
    rest = [m.id for m in ms.memories.list(s.id, limit=10, page=page.next_page)]
    assert rest == ids[10:]

    m = ms.memories.create(s.id, path="/after-restart", content="x")
    server.kill()  # crash: committed writes survive
    server.start()
    ms = server.sdk().beta.memory_stores
    assert ms.memories.retrieve(m.id, memory_store_id=s.id).content == "x"
    assert len(list(ms.memory_versions.list(s.id))) == 32


def test_concurrent_creates_and_racing_preconditions(server):
    client = server.sdk()
    ms = client.beta.memory_stores
    sid = ms.create(name="race").id
    n_threads = 20

    def create(i):
        return ms.memories.create(sid, path=f"/t/{i}.md", content=f"c{i}").id

    with ThreadPoolExecutor(n_threads) as pool:
        created = list(pool.map(create, range(100)))
    assert len(set(created)) == 100
    assert len(list(ms.memories.list(sid, limit=100))) == 100

    target = ms.memories.create(sid, path="/shared.md", content="v0")
    current = "v0"
    for rnd in range(5):
        barrier = threading.Barrier(n_threads)
        expected = sha(current)

        def race(t, rnd=rnd, expected=expected, barrier=barrier):
            barrier.wait()
            try:
                ms.memories.update(
                    target.id,
                    memory_store_id=sid,
                    content=f"r{rnd}-t{t}",
                    precondition={"type": "content_sha256", "content_sha256": expected},
                )
                return f"r{rnd}-t{t}"
            except anthropic.ConflictError as e:
                assert e.body["error"]["type"] == "memory_precondition_failed_error"
                return None

        with ThreadPoolExecutor(n_threads) as pool:
            results = list(pool.map(race, range(n_threads)))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1, results
        current = winners[0]
        assert ms.memories.retrieve(target.id, memory_store_id=sid).content == current
    vs = list(ms.memory_versions.list(sid, memory_id=target.id))
    assert len(vs) == 6  # created + one per round: no lost or duplicate rows

    # Racing creates of one path: exactly one wins, the rest get 409 with its id.
    barrier = threading.Barrier(n_threads)

    def same_path(t):
        barrier.wait()
        try:
            return ("ok", ms.memories.create(sid, path="/one", content=str(t)).id)
        except anthropic.ConflictError as e:
            return ("conflict", e.body["error"]["conflicting_memory_id"])

    with ThreadPoolExecutor(n_threads) as pool:
        outcomes = list(pool.map(same_path, range(n_threads)))
    oks = [mid for kind, mid in outcomes if kind == "ok"]
    assert len(oks) == 1
    assert all(mid == oks[0] for _, mid in outcomes)


def test_store_cap_2000(server):
    ms = server.sdk().beta.memory_stores
    sid = ms.create(name="full").id
    base = f"{server.base_url}/v1/memory_stores/{sid}/memories"

    def worker(chunk):
        with httpx.Client(headers=server.headers, timeout=30) as c:
            for i in chunk:
                r = c.post(base, json={"path": f"/d{i % 20}/m{i}", "content": "x"})
                assert r.status_code == 200, r.text

    chunks = [range(k, MAX_MEMORIES_PER_STORE, 8) for k in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(worker, chunks))

    with pytest.raises(anthropic.BadRequestError) as ei:
        ms.memories.create(sid, path="/one-too-many", content="x")
    err = ei.value.body["error"]
    assert err["type"] == "invalid_request_error" and "2,000-memory maximum" in err["message"]
    # Existing memories remain readable and editable (including renames).
    first = ms.memories.list(sid, limit=1).data[0]
    ms.memories.update(first.id, memory_store_id=sid, content="edited", path="/renamed")
    assert ms.memories.retrieve(first.id, memory_store_id=sid).content == "edited"
    # A conflicting create still reports the conflict (useful to adopt a lost create).
    with pytest.raises(anthropic.ConflictError):
        ms.memories.create(sid, path="/renamed", content="x")
    # Deleting one frees a slot.
    ms.memories.delete(first.id, memory_store_id=sid)
    ms.memories.create(sid, path="/one-more", content="x")


def test_fault_errors_and_429(server):
    ms = server.sdk().beta.memory_stores
    sid = ms.create(name="f").id
    for status, exc, etype in (
        (503, anthropic.InternalServerError, "api_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ):
        server.set_faults(error_rate=1.0, error_status=status)
        with pytest.raises(exc) as ei:
            ms.memories.create(sid, path="/never", content="x")
        assert ei.value.status_code == status
        assert ei.value.body["error"]["type"] == etype
        assert ei.value.body["request_id"].startswith("req_")
    server.clear_faults()
    assert list(ms.memories.list(sid)) == []  # injected errors are not processed

    server.set_faults(rate_429=1.0, retry_after=7)
    r = httpx.get(f"{server.base_url}/v1/memory_stores", headers=server.headers)
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert r.json()["error"]["type"] == "rate_limit_error"
    with pytest.raises(anthropic.RateLimitError):
        ms.list()
    # health and the control endpoint are never faulted
    assert httpx.get(f"{server.base_url}/_memfs/health").status_code == 200
    snap = httpx.get(f"{server.base_url}/_memfs/faults").json()
    assert snap["rate_429"] == 1.0 and snap["retry_after"] == 7.0

    # SDK retries honour retry-after and recover once the fault is cleared.
    server.set_faults(rate_429=0.5, retry_after=0.01)
    retrying = server.sdk(max_retries=10).beta.memory_stores
    for i in range(5):
        retrying.memories.create(sid, path=f"/retry{i}", content="x")
    server.clear_faults()
    assert len(list(ms.memories.list(sid))) == 5

    bad = httpx.post(f"{server.base_url}/_memfs/faults", json={"error_status": 404})
    assert bad.status_code == 400
    assert httpx.post(f"{server.base_url}/_memfs/faults", json={"nope": 1}).status_code == 400


def test_fault_latency(server):
    ms = server.sdk().beta.memory_stores
    server.set_faults(latency=0.3)
    t0 = time.monotonic()
    ms.list()
    assert time.monotonic() - t0 >= 0.3
    server.clear_faults()
    t0 = time.monotonic()
    ms.list()
    assert time.monotonic() - t0 < 0.3


def test_fault_drop_commits_then_resets(server):
    ms = server.sdk().beta.memory_stores
    sid = ms.create(name="drop").id
    server.set_faults(drop_rate=1.0)
    with pytest.raises(anthropic.APIConnectionError):
        ms.memories.create(sid, path="/dropped.md", content="committed")
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.base_url}/v1/memory_stores", headers=server.headers)
    server.clear_faults()
    got = list(ms.memories.list(sid, view="full"))
    assert [(m.path, m.content) for m in got] == [("/dropped.md", "committed")]
    # The retried create (as a client would after a lost response) sees the conflict + id.
    with pytest.raises(anthropic.ConflictError) as ei:
        ms.memories.create(sid, path="/dropped.md", content="committed")
    assert ei.value.body["error"]["conflicting_memory_id"] == got[0].id


def test_fault_error_after_commits_then_answers_the_error(server):
    ms = server.sdk().beta.memory_stores
    sid = ms.create(name="error-after").id
    server.set_faults(error_after_rate=1.0, error_after_status=504)
    with pytest.raises(anthropic.APIStatusError) as ei:
        ms.memories.create(sid, path="/answered.md", content="committed")
    assert ei.value.status_code == 504 and ei.value.body["error"]["type"] == "api_error"
    server.clear_faults()
    got = list(ms.memories.list(sid, view="full"))
    assert [(m.path, m.content) for m in got] == [("/answered.md", "committed")]
    r = httpx.post(f"{server.base_url}/_memfs/faults", json={"error_after_status": 501},
                   timeout=10)
    assert r.status_code == 400 and "500, 502, 503 or 504" in r.text


def test_fault_flags_on_command_line(tmp_path):
    sp = start_server(
        tmp_path,
        api_key="k",
        extra_args=("--fault-error-rate", "1", "--fault-error-status", "529", "--fault-seed", "3"),
    )
    try:
        with pytest.raises(anthropic.OverloadedError):
            sp.sdk().beta.memory_stores.list()
        assert httpx.get(f"{sp.base_url}/_memfs/health").json()["ok"] is True
    finally:
        sp.stop()
    sp = start_server(
        tmp_path / "b", extra_args=("--fault-429-rate", "1", "--fault-retry-after", "2")
    )
    try:
        r = httpx.get(
            f"{sp.base_url}/v1/memory_stores", headers={"anthropic-beta": "agent-memory-2026-07-22"}
        )
        assert r.status_code == 429 and r.headers["retry-after"] == "2"
    finally:
        sp.stop()
    sp = start_server(tmp_path / "c", extra_args=("--fault-error-after-rate", "1",
                                                  "--fault-error-after-status", "500",
                                                  "--fault-control"))
    try:
        ms = sp.sdk().beta.memory_stores
        with pytest.raises(anthropic.InternalServerError):
            ms.create(name="applied")
        sp.clear_faults()
        assert [s.name for s in ms.list()] == ["applied"]  # applied, answered 500
    finally:
        sp.stop()
