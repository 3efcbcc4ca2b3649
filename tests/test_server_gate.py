"""memfs serve: the request gate (/_memfs/gate) holds requests before or after they apply."""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import start_server
from gate import Gate


@pytest.fixture
def gate(server):
    with Gate(server) as g:
        yield g


@pytest.fixture
def pool():
    with ThreadPoolExecutor(4) as p:
        yield p


def _store_with(server, **memories: str) -> tuple[str, dict[str, str]]:
    ms = server.sdk().beta.memory_stores
    sid = ms.create(name="gate").id
    return sid, {name: ms.memories.create(sid, path=f"/{name}.md", content=text).id
                 for name, text in memories.items()}


def _content(server, sid: str, mid: str) -> str:
    return server.sdk().beta.memory_stores.memories.retrieve(mid, memory_store_id=sid).content


def _update(server, sid: str, mid: str, text: str) -> str:
    m = server.sdk().beta.memory_stores.memories.update(mid, memory_store_id=sid, content=text)
    return m.id


def test_held_before_is_not_applied_until_released(server, gate, pool):
    sid, ids = _store_with(server, a="old")
    rule = gate.hold("POST", rf"/memories/{ids['a']}$", when="before")
    fut = pool.submit(_update, server, sid, ids["a"], "new")
    held = gate.wait_held(1)
    assert [(h["method"], h["when"], h["rule"]) for h in held] == [("POST", "before", rule["id"])]
    assert held[0]["path"] == f"/v1/memory_stores/{sid}/memories/{ids['a']}"
    time.sleep(0.3)
    # In flight, not applied: the client waits, every other client sees the old content.
    assert not fut.done()
    assert _content(server, sid, ids["a"]) == "old"
    versions = server.sdk().beta.memory_stores.memory_versions.list(sid, memory_id=ids["a"])
    assert [v.operation for v in versions] == ["created"]
    assert gate.release() == [held[0]["seq"]]
    assert fut.result(timeout=10) == ids["a"]
    assert _content(server, sid, ids["a"]) == "new"
    assert gate.held() == []


def test_held_after_is_committed_while_the_client_waits(server, gate, pool):
    sid, ids = _store_with(server, a="old")
    gate.hold("POST", rf"/memories/{ids['a']}$", when="after")
    fut = pool.submit(_update, server, sid, ids["a"], "new")
    held = gate.wait_held(1)
    assert held[0]["when"] == "after" and held[0]["status"] == 200
    time.sleep(0.3)
    assert not fut.done()  # no response yet
    assert _content(server, sid, ids["a"]) == "new"  # but committed and visible
    versions = server.sdk().beta.memory_stores.memory_versions.list(sid, memory_id=ids["a"])
    assert [v.operation for v in versions] == ["modified", "created"]
    gate.release(held[0]["seq"])
    assert fut.result(timeout=10) == ids["a"]


def test_held_after_records_a_refusal(server, gate, pool):
    sid, ids = _store_with(server, a="old")
    gate.hold("POST", "/memories/", when="after")

    def stale_update():
        with httpx.Client(headers=server.headers, timeout=30) as c:
            return c.post(f"{server.base_url}/v1/memory_stores/{sid}/memories/{ids['a']}",
                          json={"content": "x", "precondition": {
                              "type": "content_sha256", "content_sha256": "0" * 64}})

    fut = pool.submit(stale_update)
    held = gate.wait_held(1)
    assert held[0]["status"] == 409
    gate.release()
    assert fut.result(timeout=10).status_code == 409


@pytest.mark.parametrize("status", [500, 502, 504])
def test_respond_after_applies_then_answers_the_error(server, gate, status):
    sid, ids = _store_with(server, a="old")
    rule = gate.refuse("POST", rf"/memories/{ids['a']}$", status, count=1, when="after")
    r = _raw_update(server, sid, ids["a"], {"content": "new"})
    assert r.status_code == status and r.json()["error"]["type"] == "api_error"
    assert _content(server, sid, ids["a"]) == "new"  # applied all the same
    assert gate.held() == [] and gate.snapshot()["rules"][0]["caught"] == rule["count"] == 1
    assert _raw_update(server, sid, ids["a"], {"content": "newer"}).status_code == 200


def _raw_update(server, sid: str, mid: str, body: dict) -> httpx.Response:
    """One POST, no retries (the SDK would send it again after a reset)."""
    with httpx.Client(headers=server.headers, timeout=10) as c:
        return c.post(f"{server.base_url}/v1/memory_stores/{sid}/memories/{mid}", json=body)


def test_held_late_gets_no_answer_and_is_applied_once_released(server, gate, pool):
    """A "late" rule: the client's connection is reset at once, nothing is applied
    while the request is held, and the release answers once it has been applied."""
    sid, ids = _store_with(server, a="old")
    rule = gate.hold("POST", rf"/memories/{ids['a']}$", when="late")
    fut = pool.submit(_raw_update, server, sid, ids["a"], {"content": "new"})
    with pytest.raises(httpx.TransportError):  # no answer: the connection reset
        fut.result(timeout=10)
    [held] = gate.wait_held(1)
    assert (held["method"], held["when"], held["rule"]) == ("POST", "late", rule["id"])
    assert _content(server, sid, ids["a"]) == "old"
    assert gate.release() == [held["seq"]]
    assert _content(server, sid, ids["a"]) == "new"  # applied before the release answered
    versions = server.sdk().beta.memory_stores.memory_versions.list(sid, memory_id=ids["a"])
    assert [v.operation for v in versions] == ["modified", "created"]


def test_held_late_applies_what_it_would_have_then(server, gate, pool):
    """Applied late, a request meets the store as it is then: its precondition is
    checked against what another client wrote meanwhile (a refusal goes to no one)."""
    sid, ids = _store_with(server, a="old")
    gate.hold("POST", rf"/memories/{ids['a']}$", when="late", count=1)
    old_sha = hashlib.sha256(b"old").hexdigest()
    fut = pool.submit(_raw_update, server, sid, ids["a"], {"content": "late", "precondition": {
        "type": "content_sha256", "content_sha256": old_sha}})
    with pytest.raises(httpx.TransportError):
        fut.result(timeout=10)
    gate.wait_held(1)
    _update(server, sid, ids["a"], "theirs")
    gate.release()
    assert _content(server, sid, ids["a"]) == "theirs"


def test_release_one_by_seq_then_clear_releases_the_rest(server, gate, pool):
    sid, ids = _store_with(server, a="a0", b="b0")
    gate.hold("POST", "/memories/mem_", when="before")
    fa = pool.submit(_update, server, sid, ids["a"], "a1")
    gate.wait_held(1)
    fb = pool.submit(_update, server, sid, ids["b"], "b1")
    held = gate.wait_held(2)
    assert [h["seq"] for h in held] == sorted(h["seq"] for h in held)
    by_path = {h["path"].rsplit("/", 1)[1]: h["seq"] for h in held}
    assert gate.release(by_path[ids["b"]]) == [by_path[ids["b"]]]
    assert fb.result(timeout=10) == ids["b"]
    assert _content(server, sid, ids["b"]) == "b1"
    assert not fa.done() and _content(server, sid, ids["a"]) == "a0"
    # Releasing a seq that is no longer held is a 404.
    with pytest.raises(httpx.HTTPStatusError) as ei:
        gate.release(by_path[ids["b"]])
    assert ei.value.response.status_code == 404
    assert gate.clear() == [by_path[ids["a"]]]
    assert fa.result(timeout=10) == ids["a"]
    snap = gate.snapshot()
    assert snap["rules"] == [] and snap["held"] == [] and snap["total_held"] == 2
    # With the rules gone nothing is held any more.
    assert _update(server, sid, ids["a"], "a2") == ids["a"]


def test_rules_filter_by_method_path_and_count(server, gate, pool):
    sid, ids = _store_with(server, a="a0", b="b0")
    gate.hold("POST", rf"/memories/{ids['a']}$", when="before", count=1)
    # Other methods and other paths pass straight through.
    assert _content(server, sid, ids["a"]) == "a0"
    assert _update(server, sid, ids["b"], "b1") == ids["b"]
    first = pool.submit(_update, server, sid, ids["a"], "a1")
    held = gate.wait_held(1)
    # count=1: the rule caught its one request; the next one is not held.
    assert _update(server, sid, ids["a"], "a2") == ids["a"]
    assert not first.done()
    gate.release(held[0]["seq"])
    first.result(timeout=10)
    assert _content(server, sid, ids["a"]) == "a1"  # the held one applied last
    rule = gate.snapshot()["rules"][0]
    assert rule["caught"] == 1 and rule["count"] == 1


def test_timeout_releases_by_itself(server, gate, pool):
    sid, ids = _store_with(server, a="old")
    gate.hold("*", "/memories/", when="before", timeout=0.5)
    t0 = time.monotonic()
    fut = pool.submit(_update, server, sid, ids["a"], "new")
    gate.wait_held(1)
    assert fut.result(timeout=10) == ids["a"]
    assert 0.4 < time.monotonic() - t0 < 5
    snap = gate.snapshot()
    assert snap["held"] == [] and snap["timed_out"] == 1
    assert _content(server, sid, ids["a"]) == "new"  # the rule still holds GETs: 0.5 s


def test_wait_held_times_out_with_what_is_held(server, gate):
    gate.hold("POST", "/never/", when="before")
    t0 = time.monotonic()
    r = httpx.get(gate.url, params={"min_held": 1, "timeout": 0.3}, timeout=10)
    assert r.status_code == 200 and r.json()["held"] == []
    assert time.monotonic() - t0 >= 0.25
    with pytest.raises(AssertionError):
        gate.wait_held(1, timeout=0.3)


@pytest.mark.parametrize("body", [
    {"when": "during"},
    {"when": "late", "drop": True},
    {"when": "late", "respond": 403},
    {"when": "after", "respond": 418},
    {"path": "(", "when": "before"},
    {"when": "before", "count": 0},
    {"when": "before", "count": True},
    {"when": "before", "timeout": 121},
    {"when": "before", "timeout": 0},
    {"when": "before", "other": 1},
    ["not", "an", "object"],
])
def test_bad_rules_are_400(server, body):
    r = httpx.post(f"{server.base_url}/_memfs/gate", json=body, timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(f"{server.base_url}/_memfs/gate", timeout=10).json()["rules"] == []


def test_gate_needs_fault_control(tmp_path):
    sp = start_server(tmp_path, api_key="k")
    try:
        for method in ("GET", "POST", "DELETE"):
            r = httpx.request(method, f"{sp.base_url}/_memfs/gate", json={}, timeout=10)
            assert r.status_code == 404
        assert httpx.post(f"{sp.base_url}/_memfs/gate/release", json={},
                          timeout=10).status_code == 404
    finally:
        sp.stop()


def test_sigterm_with_held_requests_exits_promptly(server, pool):
    sid, ids = _store_with(server, a="old")
    gate = Gate(server)
    gate.hold("POST", "/memories/", when="after")
    fut = pool.submit(_update, server, sid, ids["a"], "new")
    gate.wait_held(1)
    t0 = time.monotonic()
    server.stop()
    assert time.monotonic() - t0 < 5
    assert server.proc.returncode == 0
    fut.exception(timeout=10)  # answered or cut off, but not hanging


def test_sigterm_lets_a_request_in_flight_finish_and_answer(server, pool):
    """Shutdown is graceful: a request the server is still working on when SIGTERM
    arrives (half a second of injected latency) is applied and answered before the
    process exits, and the next start has it."""
    sid, ids = _store_with(server, a="old")
    gate = Gate(server)
    gate.hold("POST", rf"/memories/{ids['a']}$", when="before")
    fut = pool.submit(_update, server, sid, ids["a"], "new")
    gate.wait_held(1)
    server.set_faults(latency=0.5)  # from here on, a request sleeps before its work
    gate.release()
    time.sleep(0.1)
    server.stop()
    assert server.proc.returncode == 0
    assert fut.result(timeout=10) == ids["a"]  # its answer came, not a reset
    server.start()
    assert _content(server, sid, ids["a"]) == "new"
