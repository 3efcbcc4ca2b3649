"""memfs serve test controls beyond test_server_gate.py: `respond` rules, and the
health proof the embedded server's start check relies on."""

from __future__ import annotations

import anthropic
import httpx
import pytest
from gate import Gate

from memfs.core.healthproof import health_proof


def test_respond_rule_refuses_one_request_without_applying_it(server):
    ms = server.sdk().beta.memory_stores
    sid = ms.create(name="r").id
    a = ms.memories.create(sid, path="/a.md", content="a")
    b = ms.memories.create(sid, path="/b.md", content="b")
    with Gate(server) as gate:
        rule = gate.refuse("DELETE", rf"/memories/{a.id}$", 403, count=1)
        assert rule["respond"] == 403
        with pytest.raises(anthropic.PermissionDeniedError) as ei:
            ms.memories.delete(a.id, memory_store_id=sid)
        assert ei.value.body["error"]["type"] == "permission_error"
        ms.memories.delete(b.id, memory_store_id=sid)  # other requests go through
        assert ms.memories.retrieve(a.id, memory_store_id=sid).content == "a"  # not applied
        assert [v.operation for v in ms.memory_versions.list(sid, memory_id=a.id)] == ["created"]
        ms.memories.delete(a.id, memory_store_id=sid)  # count=1: the next one applies
        assert gate.snapshot()["held"] == []
    assert list(ms.memories.list(sid)) == []


@pytest.mark.parametrize("body", [
    {"when": "late", "respond": 403},   # a late request is applied after its reset
    {"when": "before", "respond": 501},  # not a status the gate answers
    {"when": "before", "respond": "403"},
])
def test_bad_respond_rules_are_400(server, body):
    r = httpx.post(f"{server.base_url}/_memfs/gate", json=body, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_health_proof(server):
    r = httpx.get(f"{server.base_url}/_memfs/health", params={"challenge": "c-123"})
    doc = r.json()
    assert doc["ok"] is True and doc["proof"] == health_proof("test-key", "c-123")
    assert doc["proof"] != health_proof("other-key", "c-123")
    assert "proof" not in httpx.get(f"{server.base_url}/_memfs/health").json()
    for bad in ("", "x" * 129):
        r = httpx.get(f"{server.base_url}/_memfs/health", params={"challenge": bad})
        assert r.status_code == 400
