"""memfs serve: sessions (/v1/sessions) and session tokens, driven through the official SDK.

Nothing runs in a session: these tests check what the SDK parses, the memory-store
resources (limits, snapshot, mount_path), the list filter and cursors, and the
session token (/_memfs/sessions/{id}/token): scope, read_only, attribution, revocation.
"""

from __future__ import annotations

import sqlite3

import anthropic
import httpx
import pytest
from conftest import start_server

from memfs.core.slug import mount_slugs, slug
from memfs.server.db import SCHEMA, Database, _statements

MEMORY_BETA = "agent-memory-2026-07-22"
SESSIONS_BETA = "managed-agents-2026-04-01"


def _res(store_id: str, **kw: object) -> dict:
    return {"type": "memory_store", "memory_store_id": store_id, **kw}


def _session(client: anthropic.Anthropic, *store_ids: str, **kw: object):
    kw.setdefault("agent", "agent_1")
    kw.setdefault("environment_id", "env_1")
    return client.beta.sessions.create(resources=[_res(s) for s in store_ids], **kw)


def _token(server, session_id: str) -> str:
    r = httpx.post(f"{server.base_url}/_memfs/sessions/{session_id}/token",
                   headers={"x-api-key": server.api_key}, timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"token"}
    return body["token"]


# ------------------------------------------------------------------------ lifecycle


def test_session_crud(server):
    c = server.sdk()
    store = c.beta.memory_stores.create(name="Team Notes", description="shared notes")
    s = c.beta.sessions.create(
        agent="agent_1",
        environment_id="env_1",
        title="a title",
        metadata={"k": "v"},
        vault_ids=["vlt_1"],
        budget={"type": "limit", "max_list_cost": {"amount": "2500", "currency": "USD"}},
        initial_events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}],
        resources=[_res(store.id, instructions="use it")],
    )
    assert s.type == "session" and s.id.startswith("sesn_")
    assert s.status == "idle" and s.archived_at is None and s.created_at == s.updated_at
    assert s.environment_id == "env_1" and s.title == "a title" and s.metadata == {"k": "v"}
    assert s.vault_ids == ["vlt_1"] and s.outcome_evaluations == []
    assert s.budget is not None and s.budget.max_list_cost.amount == "2500"
    assert s.agent.type == "agent" and s.agent.id == "agent_1" and s.agent.version == 1
    assert s.stats is not None and s.usage is not None
    (r,) = s.resources
    assert r.type == "memory_store" and r.memory_store_id == store.id
    assert (r.access, r.name, r.description, r.instructions, r.mount_path) == (
        "read_write", "Team Notes", "shared notes", "use it", "/mnt/memory/team-notes")

    got = c.beta.sessions.retrieve(s.id)
    assert got.model_dump(exclude={"stats"}) == s.model_dump(exclude={"stats"})

    a = c.beta.sessions.archive(s.id)
    assert a.archived_at is not None and a.updated_at == a.archived_at
    again = c.beta.sessions.archive(s.id)  # one-way, idempotent
    assert again.archived_at == a.archived_at
    assert c.beta.sessions.retrieve(s.id).archived_at == a.archived_at
    assert [x.id for x in c.beta.sessions.list()] == []
    assert [x.id for x in c.beta.sessions.list(include_archived=True)] == [s.id]

    d = c.beta.sessions.delete(s.id)
    assert d.id == s.id and d.type == "session_deleted"
    with pytest.raises(anthropic.NotFoundError):
        c.beta.sessions.retrieve(s.id)
    with pytest.raises(anthropic.NotFoundError):
        c.beta.sessions.delete(s.id)
    with pytest.raises(anthropic.NotFoundError):
        c.beta.sessions.archive(s.id)
    # The store is untouched by the session's deletion.
    assert c.beta.memory_stores.retrieve(store.id).name == "Team Notes"


def test_agent_references_are_echoed(server):
    c = server.sdk()
    s = _session(c, agent={"type": "agent", "id": "agent_2", "version": 3})
    assert (s.agent.id, s.agent.version, s.resources) == ("agent_2", 3, [])
    o = _session(c, agent={"type": "agent_with_overrides", "id": "agent_3",
                           "model": "claude-opus-4-5", "system": "be brief"})
    assert (o.agent.id, o.agent.model.id, o.agent.system) == ("agent_3", "claude-opus-4-5",
                                                              "be brief")
    for bad in ({"agent": 5}, {"agent": {"type": "agent"}}, {"agent": {"type": "x", "id": "a"}},
                {"agent": {"type": "agent", "id": "a", "version": 0}},
                {"environment_id": ""}):
        with pytest.raises(anthropic.BadRequestError):
            _session(c, **bad)
    with pytest.raises(anthropic.BadRequestError, match="Extra inputs"):
        _session(c, extra_body={"nope": 1})


def test_list_filter_and_pagination(server):
    c = server.sdk()
    a = c.beta.memory_stores.create(name="a").id
    b = c.beta.memory_stores.create(name="b").id
    with_a = [_session(c, a).id for _ in range(5)]
    with_b = _session(c, b).id
    both = _session(c, b, a).id
    none = _session(c).id
    want_a = (with_a + [both])[::-1]  # newest first

    assert [s.id for s in c.beta.sessions.list(memory_store_id=a, limit=2)] == want_a
    assert [s.id for s in c.beta.sessions.list(memory_store_id=b)] == [both, with_b]
    assert [s.id for s in c.beta.sessions.list()] == [none, both, with_b, *with_a[::-1]]
    assert list(c.beta.sessions.list(memory_store_id="memstore_nothing")) == []

    p1 = c.beta.sessions.list(memory_store_id=a, limit=4)
    assert [s.id for s in p1.data] == want_a[:4] and p1.next_page.startswith("page_")
    p2 = c.beta.sessions.list(memory_store_id=a, limit=4, page=p1.next_page)
    assert [s.id for s in p2.data] == want_a[4:] and p2.next_page is None
    asc = c.beta.sessions.list(memory_store_id=a, limit=4, order="asc")
    assert [s.id for s in asc.data] == want_a[::-1][:4]
    asc2 = c.beta.sessions.list(memory_store_id=a, limit=4, order="asc", page=asc.next_page)
    assert [s.id for s in asc2.data] == want_a[::-1][4:]

    # A cursor only continues the query that produced it.
    with pytest.raises(anthropic.BadRequestError, match="different query"):
        c.beta.sessions.list(memory_store_id=b, limit=4, page=p1.next_page)
    with pytest.raises(anthropic.BadRequestError):
        c.beta.sessions.list(page="page_garbage")
    for limit in (0, 101):
        with pytest.raises(anthropic.BadRequestError):
            c.beta.sessions.list(limit=limit)

    # Archived sessions are left out unless asked for; the filter still applies.
    c.beta.sessions.archive(with_a[0])
    assert [s.id for s in c.beta.sessions.list(memory_store_id=a)] == want_a[:-1]
    assert [s.id for s in c.beta.sessions.list(memory_store_id=a, include_archived=True)] \
        == want_a
    assert [s.id for s in c.beta.sessions.list(agent_id="agent_1", limit=100)][:1] == [none]
    assert list(c.beta.sessions.list(agent_id="agent_other")) == []
    first = c.beta.sessions.retrieve(with_a[1]).created_at
    later = [s.id for s in c.beta.sessions.list(memory_store_id=a, created_at_gt=first)]
    assert later == want_a[:-2]


def test_beta_headers(server):
    c = server.sdk()
    _session(c, betas=[MEMORY_BETA])  # the SDK appends managed-agents: accepted
    h = {"x-api-key": server.api_key, "anthropic-version": "2023-06-01"}
    url = f"{server.base_url}/v1/sessions"
    for beta in (None, MEMORY_BETA, "other-beta-2026-01-01"):
        hh = dict(h, **({"anthropic-beta": beta} if beta else {}))
        r = httpx.get(url, headers=hh, timeout=10)
        assert r.status_code == 400, beta
        assert SESSIONS_BETA in r.json()["error"]["message"]
    r = httpx.get(url, headers=dict(h, **{"anthropic-beta": f"x, {SESSIONS_BETA}"}), timeout=10)
    assert r.status_code == 200 and set(r.json()) == {"data", "next_page"}
    assert len(r.json()["data"]) == 1
    r = httpx.patch(url, headers=dict(h, **{"anthropic-beta": SESSIONS_BETA}), timeout=10)
    assert r.status_code == 405


def test_lone_surrogates_are_refused_part_by_part(server):
    """A lone surrogate (valid JSON, not UTF-8) anywhere in a session create is a 400
    naming the part it is in; nothing is created."""
    h = {"x-api-key": server.api_key, "anthropic-version": "2023-06-01",
         "anthropic-beta": SESSIONS_BETA, "content-type": "application/json"}
    store = server.sdk().beta.memory_stores.create(name="utf8").id
    base = '"agent": "a", "environment_id": "e"'
    lone = "\\ud800"
    cases = {
        f'"agent": "a{lone}", "environment_id": "e"': "agent.id must be valid UTF-8",
        f'"agent": {{"type": "agent_with_overrides", "id": "a", "system": "{lone}"}},'
        ' "environment_id": "e"': "agent must be valid UTF-8",
        f'"agent": "a", "environment_id": "e{lone}"': "environment_id must be valid UTF-8",
        f'{base}, "title": "{lone}"': "title must be valid UTF-8",
        f'{base}, "metadata": {{"k": "{lone}"}}': "metadata value must be valid UTF-8",
        f'{base}, "metadata": {{"{lone}": "v"}}': "metadata key must be valid UTF-8",
        f'{base}, "vault_ids": ["{lone}"]': "session must be valid UTF-8",
        f'{base}, "budget": {{"note": "{lone}"}}': "session must be valid UTF-8",
        f'{base}, "resources": [{{"type": "memory_store", "memory_store_id": "{store}",'
        f' "instructions": "{lone}"}}]': "resources[0].instructions must be valid UTF-8",
    }
    for body, message in cases.items():
        r = httpx.post(f"{server.base_url}/v1/sessions", headers=h,
                       content=("{" + body + "}").encode(), timeout=10)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["message"] == message + " (lone surrogate)", body
    assert server.sdk().beta.sessions.list().data == []


# ------------------------------------------------------------------------ resources


def test_memory_store_resource_limits(server):
    c = server.sdk()
    ids = [c.beta.memory_stores.create(name=f"store {i}").id for i in range(9)]
    with pytest.raises(anthropic.BadRequestError, match="at most 8"):
        _session(c, *ids)
    eight = _session(c, *ids[:8])
    assert [r.memory_store_id for r in eight.resources] == ids[:8]

    c.beta.memory_stores.archive(ids[8])
    with pytest.raises(anthropic.BadRequestError, match="archived") as exc:
        _session(c, ids[0], ids[8])
    assert exc.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError, match="memstore_missing"):
        _session(c, ids[0], "memstore_missing")
    with pytest.raises(anthropic.BadRequestError, match="attached twice"):
        _session(c, ids[0], ids[0])
    assert [x.id for x in c.beta.sessions.list()] == [eight.id]  # nothing half-created

    ok = c.beta.sessions.create(agent="a", environment_id="e", resources=[
        _res(ids[0], instructions="x" * 4096),
        _res(ids[1], access="read_only"),
        _res(ids[2], access=None, instructions=None),
    ])
    r0, r1, r2 = ok.resources
    assert (r0.access, r0.instructions) == ("read_write", "x" * 4096)
    assert (r1.access, r1.instructions) == ("read_only", None)
    assert (r2.access, r2.instructions) == ("read_write", None)
    for bad in (_res(ids[0], instructions="x" * 4097), _res(ids[0], access="write"),
                _res(ids[0], access=""), _res(ids[0], instructions=5),
                _res(ids[0], extra=1), {"type": "memory_store"},
                {"type": "file", "file_id": "file_1"}):
        with pytest.raises(anthropic.BadRequestError):
            c.beta.sessions.create(agent="a", environment_id="e", resources=[bad])
    # The raw JSON: an omitted access is echoed as "read_write", never null.
    raw = httpx.get(f"{server.base_url}/v1/sessions/{ok.id}", timeout=10, headers={
        "x-api-key": server.api_key, "anthropic-beta": SESSIONS_BETA}).json()
    assert raw["resources"][2]["access"] == "read_write"
    assert set(raw["resources"][0]) == {"type", "memory_store_id", "access", "name",
                                        "description", "instructions", "mount_path"}


def test_mount_paths_slugs_collisions_and_empty(server):
    c = server.sdk()
    names = ["Demo Memory", "demo memory!", "???", "日本語", "DEMO--memory", "  Café notes  "]
    stores = [c.beta.memory_stores.create(name=n) for n in names]
    s = _session(c, *(x.id for x in stores))
    paths = [r.mount_path for r in s.resources]
    assert paths[0] == "/mnt/memory/demo-memory"
    assert paths[1] == "/mnt/memory/demo-memory-2"
    assert paths[2] == "/mnt/memory/" + slug(stores[2].id)  # empty slug: the id's
    assert paths[3] == "/mnt/memory/" + slug(stores[3].id)
    assert paths[4] == "/mnt/memory/demo-memory-3"
    assert paths[5] == "/mnt/memory/caf-notes"
    assert paths == ["/mnt/memory/" + m for m in mount_slugs([(x.name, x.id) for x in stores])]
    assert paths[2].startswith("/mnt/memory/memstore-") and paths[2] == paths[2].lower()
    # Collisions are per session: alone, the second store keeps its plain slug.
    assert _session(c, stores[1].id).resources[0].mount_path == "/mnt/memory/demo-memory"
    # Resource order decides who keeps the slug.
    rev = _session(c, stores[1].id, stores[0].id)
    assert [r.mount_path for r in rev.resources] == ["/mnt/memory/demo-memory",
                                                     "/mnt/memory/demo-memory-2"]


def test_name_and_description_are_snapshotted(server):
    c = server.sdk()
    st = c.beta.memory_stores.create(name="Old Name", description="old description")
    plain = c.beta.memory_stores.create(name="plain")
    s = _session(c, st.id, plain.id)
    c.beta.memory_stores.update(st.id, name="New Name", description="new description")
    r, p = c.beta.sessions.retrieve(s.id).resources
    assert (r.name, r.description, r.mount_path) == ("Old Name", "old description",
                                                      "/mnt/memory/old-name")
    assert (p.name, p.description) == ("plain", "")
    (listed,) = [x for x in c.beta.sessions.list(memory_store_id=st.id) if x.id == s.id]
    assert listed.resources[0].name == "Old Name"
    # A session created after the rename sees the new name and slug.
    n = _session(c, st.id).resources[0]
    assert (n.name, n.description, n.mount_path) == ("New Name", "new description",
                                                      "/mnt/memory/new-name")
    # The snapshot outlives the store.
    c.beta.memory_stores.delete(st.id)
    assert c.beta.sessions.retrieve(s.id).resources[0].name == "Old Name"


# ------------------------------------------------------------------------ tokens


def test_token_writes_are_attributed_to_the_session(server):
    c = server.sdk()
    st = c.beta.memory_stores.create(name="notes")
    s = _session(c, st.id)
    token = _token(server, s.id)
    assert token.startswith("memfs_sesstok_") and len(token) > 40
    other = _token(server, s.id)
    assert other != token  # a fresh token per call; both work

    agent = server.sdk(api_key=token)
    mems = agent.beta.memory_stores.memories
    m = mems.create(st.id, path="/a.md", content="one")
    mems.update(m.id, memory_store_id=st.id, content="two")
    server.sdk(api_key=other).beta.memory_stores.memories.update(
        m.id, memory_store_id=st.id, path="/b.md")
    mems.delete(m.id, memory_store_id=st.id)
    c.beta.memory_stores.memories.create(st.id, path="/by-key.md", content="k")

    versions = c.beta.memory_stores.memory_versions
    by_session = list(versions.list(st.id, session_id=s.id))
    assert [v.operation for v in by_session] == ["deleted", "modified", "modified", "created"]
    for v in by_session:
        assert v.created_by.type == "session_actor" and v.created_by.session_id == s.id
    (key_write,) = [v for v in versions.list(st.id) if v.created_by.type != "session_actor"]
    assert key_write.created_by.type == "api_actor"
    # A token can read its stores: memories, versions, the store itself.
    assert agent.beta.memory_stores.retrieve(st.id).id == st.id
    assert [x.path for x in agent.beta.memory_stores.memories.list(st.id)] == ["/by-key.md"]
    assert len(list(agent.beta.memory_stores.memory_versions.list(st.id))) == 5


def test_token_scope(server):
    c = server.sdk()
    rw = c.beta.memory_stores.create(name="rw")
    ro = c.beta.memory_stores.create(name="ro")
    outside = c.beta.memory_stores.create(name="outside")
    seed = c.beta.memory_stores.memories.create(ro.id, path="/seed.md", content="s")
    c.beta.memory_stores.memories.create(outside.id, path="/x.md", content="x")
    s = c.beta.sessions.create(agent="a", environment_id="e", resources=[
        _res(rw.id), _res(ro.id, access="read_only")])
    agent = server.sdk(api_key=_token(server, s.id))
    mems = agent.beta.memory_stores.memories

    # read_only: reads work, every write is 403 permission_error.
    assert mems.retrieve(seed.id, memory_store_id=ro.id).content == "s"
    for write in (lambda: mems.create(ro.id, path="/n.md", content="n"),
                  lambda: mems.update(seed.id, memory_store_id=ro.id, content="t"),
                  lambda: mems.delete(seed.id, memory_store_id=ro.id)):
        with pytest.raises(anthropic.PermissionDeniedError) as exc:
            write()
        assert exc.value.body["error"]["type"] == "permission_error"
    # A store not attached to the session does not exist for the token.
    for call in (lambda: mems.list(outside.id),
                 lambda: mems.create(outside.id, path="/n.md", content="n"),
                 lambda: agent.beta.memory_stores.retrieve(outside.id)):
        with pytest.raises(anthropic.NotFoundError):
            call()
    # Everything but memories and versions of its stores: 403.
    for call in (lambda: agent.beta.memory_stores.list(),
                 lambda: agent.beta.memory_stores.create(name="new"),
                 lambda: agent.beta.memory_stores.update(rw.id, name="x"),
                 lambda: agent.beta.memory_stores.archive(rw.id),
                 lambda: agent.beta.memory_stores.delete(rw.id),
                 lambda: agent.beta.sessions.list()):
        with pytest.raises(anthropic.PermissionDeniedError):
            call()
    # Its own session it may read (a worker holding only the token learns its stores);
    # another session does not exist for it.
    assert [r.memory_store_id for r in agent.beta.sessions.retrieve(s.id).resources] == \
        [rw.id, ro.id]
    other = c.beta.sessions.create(agent="a", environment_id="e", resources=[_res(rw.id)])
    with pytest.raises(anthropic.NotFoundError):
        agent.beta.sessions.retrieve(other.id)
    assert c.beta.memory_stores.retrieve(rw.id).name == "rw"
    assert [m.path for m in c.beta.memory_stores.memories.list(ro.id)] == ["/seed.md"]
    assert mems.create(rw.id, path="/ok.md", content="ok").path == "/ok.md"


def test_token_route_and_revocation(server):
    c = server.sdk()
    st = c.beta.memory_stores.create(name="notes")
    s = _session(c, st.id)
    url = f"{server.base_url}/_memfs/sessions/{s.id}/token"
    token = _token(server, s.id)
    # The route needs the server's API key; a session token cannot mint tokens.
    assert httpx.post(url, timeout=10).status_code == 401
    assert httpx.post(url, headers={"x-api-key": "wrong"}, timeout=10).status_code == 401
    r = httpx.post(url, headers={"x-api-key": token}, timeout=10)
    assert r.status_code == 403 and token not in r.text
    assert httpx.get(url, headers={"x-api-key": server.api_key}, timeout=10).status_code == 405
    r = httpx.post(f"{server.base_url}/_memfs/sessions/sesn_missing/token",
                   headers={"x-api-key": server.api_key}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"

    agent = server.sdk(api_key=token)
    agent.beta.memory_stores.memories.create(st.id, path="/a.md", content="a")
    with pytest.raises(anthropic.AuthenticationError):
        server.sdk(api_key="memfs_sesstok_forged").beta.memory_stores.memories.list(st.id)
    bearer = httpx.get(f"{server.base_url}/v1/memory_stores/{st.id}/memories", timeout=10,
                       headers={"authorization": f"Bearer {token}", "anthropic-beta": MEMORY_BETA})
    assert bearer.status_code == 200

    # Tokens survive a restart (only their hashes are stored, in the database).
    server.restart()
    agent = server.sdk(api_key=token)
    assert len(list(agent.beta.memory_stores.memories.list(st.id))) == 1

    c = server.sdk()
    c.beta.sessions.archive(s.id)
    with pytest.raises(anthropic.AuthenticationError, match="archived"):
        agent.beta.memory_stores.memories.list(st.id)
    with pytest.raises(anthropic.AuthenticationError):
        agent.beta.memory_stores.memories.create(st.id, path="/b.md", content="b")
    r = httpx.post(url, headers={"x-api-key": server.api_key}, timeout=10)
    assert r.status_code == 400 and "archived" in r.json()["error"]["message"]

    s2 = _session(c, st.id)
    token2 = _token(server, s2.id)
    agent2 = server.sdk(api_key=token2)
    assert len(list(agent2.beta.memory_stores.memories.list(st.id))) == 1
    c.beta.sessions.delete(s2.id)
    with pytest.raises(anthropic.AuthenticationError):
        agent2.beta.memory_stores.memories.list(st.id)
    # The versions written through a deleted session keep naming it.
    assert list(c.beta.memory_stores.memory_versions.list(st.id, session_id=s.id))


def test_token_is_never_logged(tmp_path):
    sp = start_server(tmp_path, api_key="the-key", extra_args=("--verbose",))
    try:
        c = sp.sdk()
        st = c.beta.memory_stores.create(name="notes")
        s = _session(c, st.id)
        token = _token(sp, s.id)
        agent = sp.sdk(api_key=token)
        agent.beta.memory_stores.memories.create(st.id, path="/a.md", content="a")
        with pytest.raises(anthropic.PermissionDeniedError):
            agent.beta.memory_stores.list()
        c.beta.sessions.archive(s.id)
        with pytest.raises(anthropic.AuthenticationError) as exc:
            agent.beta.memory_stores.memories.list(st.id)
        assert token not in str(exc.value.body)
    finally:
        sp.stop()
    log = sp.log_path.read_text()
    assert "/_memfs/sessions/" in log and "POST /v1/sessions" in log  # --verbose logged
    assert token not in log and token[len("memfs_sesstok_"):] not in log
    assert token not in sp.db.read_bytes().decode("latin-1")


def test_sqlite_schema_2_is_upgraded(tmp_path):
    """A schema-2 file (before sessions) gets the session tables on open."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for stmt in _statements(SCHEMA):
        if "session" not in stmt:
            conn.execute(stmt)
    conn.execute("INSERT INTO stores (id, name, created_at, updated_at) VALUES "
                 "('memstore_old', 'Old', '2026-01-01T00:00:00.000000Z', "
                 "'2026-01-01T00:00:00.000000Z')")
    conn.execute("PRAGMA user_version=2")
    conn.commit()
    conn.close()
    db = Database(path)
    try:
        s = db.create_session(agent="a", environment_id="e",
                              resources=[_res("memstore_old")])
        assert s["resources"][0]["mount_path"] == "/mnt/memory/old"
        assert db.list_sessions(memory_store_id="memstore_old")["data"][0]["id"] == s["id"]
    finally:
        db.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 3
