"""A request in doubt whose own version the server no longer shows: another client
redacted it (on the hosted API it may also have aged out of the 30-day version history)
before the doubt was resolved. Such a request is taken as never applied (docs/SYNC.md,
"Lost answers"); these tests hold what follows: nothing written is lost, and the one
case that duplicates (a create its memory renamed since) is the documented cost.
"""

from __future__ import annotations

import pytest
from interleave import Engine, FaultRule, wait_over
from onepass import data, harness, lost_update

from memfs.state.blobs import sha256


def redact_ours(eng: Engine, mid: str, text: str) -> None:
    """Another client redacts the version our request wrote: the first of `mid` that
    holds `text` (no longer its head)."""
    versions = eng.db.list_versions(eng.store_id, memory_id=mid, limit=100)["data"]
    ours = min((v for v in versions if v["content_sha256"] == sha256(data(text))),
               key=lambda v: v["created_at"])
    eng.db.redact_version(eng.store_id, ours["id"], actor=None)


async def lost_create(eng: Engine) -> str:
    """b.md written and pushed: the create applied, its answer lost. Its memory id."""
    eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and not r.memory_id,
                                     kind="lose", origins=("setup",), times=1)]
    await eng.op_write("/b.md", "mine")
    await eng.op_push()
    assert eng.state.doubts
    [(mid, _sha)] = eng.server().values()
    return mid


async def settle(eng: Engine) -> None:
    wait_over(eng)  # past the wait: no trace now is taken as never applied
    await eng.op_push()
    await eng.op_reconcile()
    await eng.op_push()
    assert not eng.state.doubts and eng.pusher.pending_total() == 0


def kept(eng: Engine) -> list[tuple[str, str]]:
    return [(c["path"], c["local_sha"]) for c in eng.state.conflicts()]


async def test_an_update_renamed_then_redacted_is_found_by_its_precondition(tmp_path):
    """v2's update applied, its answer lost; another writer renamed the memory, then
    redacted v2's version. Sent again against v1, the update meets the rename's version,
    which holds our bytes: taken as ours, no conflict, the file follows the rename."""
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        await eng.op_r_rename("/a.md", "/r.md")
        redact_ours(eng, mid, "v2")
        await settle(eng)
        assert eng.server() == {"/r.md": (mid, sha256(data("v2")))}
        assert eng.user_tree() == {"/r.md": sha256(data("v2"))} and kept(eng) == []


@pytest.mark.parametrize("kind", ["update", "create"])
async def test_a_request_written_over_then_redacted_ends_in_a_conflict_that_keeps_it(
        tmp_path, kind):
    """The request applied, its answer lost; another writer changed the memory, then
    redacted our version. Not applied, as far as the server shows: the update goes out
    again against v1, the create again at its path; either meets the other writer's
    version, which stands, and the conflict keeps ours. One memory."""
    path, mine = ("/a.md", "v2") if kind == "update" else ("/b.md", "mine")
    async with harness(tmp_path) as eng:
        mid = await (lost_update if kind == "update" else lost_create)(eng)
        await eng.op_r_edit(path, "theirs")
        redact_ours(eng, mid, mine)
        await settle(eng)
        assert eng.server() == {path: (mid, sha256(data("theirs")))}
        assert eng.user_tree() == {path: sha256(data("theirs"))}
        assert kept(eng) == [(path, sha256(data(mine)))]


async def test_a_create_renamed_then_redacted_is_made_again(tmp_path):
    """b.md's create applied, its answer lost; another writer renamed the memory to r.md,
    then redacted its creation. Nothing the server shows names the memory as ours, so b.md
    is created again: two memories hold our bytes, nothing is lost. Taking r.md's memory
    as ours because it holds the same bytes was the alternative, and the worse one: where
    the guess is wrong (another writer's file of the same content, an empty one say),
    b.md would vanish into r.md; a duplicate hides nothing."""
    async with harness(tmp_path) as eng:
        mid = await lost_create(eng)
        await eng.op_r_rename("/b.md", "/r.md")
        redact_ours(eng, mid, "mine")
        await settle(eng)
        server = eng.server()
        assert server["/r.md"] == (mid, sha256(data("mine")))
        assert server["/b.md"][1] == sha256(data("mine")) and server["/b.md"][0] != mid
        assert eng.user_tree() == {"/b.md": sha256(data("mine")),
                                   "/r.md": sha256(data("mine"))}
        assert kept(eng) == []
