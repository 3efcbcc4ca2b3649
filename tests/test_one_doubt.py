"""Requests in doubt (applied or not, their answer lost), resolved by the next pass: what
that pass read, decided and sent. Each test pins a mutant of memfs/sync/doubts.py or of the
pusher's handling of doubts that no test killed (docs/TESTING.md, "Mutation testing").
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace

import pytest
import trio
from interleave import MEMFS, FaultRule, age_tombstones, listing_pass, wait_over
from onepass import data, harness, learns_writer, lost_update, sent, synced

from memfs.api import models
from memfs.api.client import MemoryStoresClient
from memfs.core.mountconfig import SyncOptions
from memfs.state.blobs import BlobCache, sha256
from memfs.state.state import State
from memfs.sync.common import SyncContext
from memfs.sync.events import Subscriber


async def test_a_lost_update_answer_found_applied_lands_on_its_memory(tmp_path):
    """The update's answer was lost. The next pass asks the server first (one GET), finds
    our write applied, and applies it as the answer: the file is clean, its memory the
    same, and nothing is sent again."""
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        first, pushed = len(eng.transport.records), eng.ctx.status.pushed
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.op_push()
        event = sub.receive.receive_nowait()  # `memfs watch` hears the push, of that memory
        assert (event.kind, event.path, event.memory_id) == ("pushed", "/a.md", mid)
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_sha, node.sent_sha) == (mid, sha256(data("v2")), None)
        assert eng.ctx.status.pushed == pushed + 1  # the lost answer's push, counted once
        assert not eng.state.doubts and not eng.state.is_dirty(node)
        assert sent(eng, first) == [f"GET {mid}"]


async def test_a_file_deleted_while_its_update_is_in_doubt_stays_deleted(tmp_path):
    """a.md edited to v2, the update's answer lost (applied); then a.md is unlinked. The
    doubt cannot be resolved yet (the server refuses its read), and a full listing
    shows the memory holding v2: what we last sent, not another writer's change. The
    file stays deleted, its pending delete now expects v2 (the delete and the request in
    doubt are what is pending), and it goes out later."""
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        await eng.op_unlink("/a.md")
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id == mid,
                                         origins=("setup",), times=1)]
        first = len(eng.transport.records)
        await eng.op_reconcile()
        assert f"GET {mid}" in sent(eng, first) and eng.state.doubts  # refused: it waits
        assert eng.node("/a.md") is None and list(eng.state.files()) == []
        assert eng.state.tombstones[mid].base_sha == sha256(data("v2"))
        assert eng.pusher.pending_total() == 2  # the delete, and the update in doubt
        age_tombstones(eng)
        first = len(eng.transport.records)
        await eng.op_push()
        assert sent(eng, first) == [f"GET {mid}", f"DELETE {mid}"]  # the doubt, then the delete
        assert eng.transport.records[-1].query["expected_content_sha256"] == sha256(data("v2"))
        assert eng.server() == {} and eng.state.tombstones == {} and not eng.state.doubts


async def test_a_doubt_whose_file_took_the_server_version_since_keeps_it(tmp_path):
    """a.md's update to v2 was applied, its answer lost; another writer then made v3, and
    a listing (the doubt's read refused for now) took v3 into the tree, ours kept as a
    conflict. The next pass finds v2 in the memory's versions: applied, but written over
    since, and the base the listing set stands: a.md is v3 and clean, nothing to send."""
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        await eng.op_r_edit("/a.md", "v3")
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id == mid,
                                         origins=("setup",), times=1)]
        await eng.op_reconcile()
        node = eng.node("/a.md")
        assert eng.state.doubts and node.base_sha == sha256(data("v3"))
        first, learn = len(eng.transport.records), learns_writer(eng)
        result = await eng.pusher.push_pass()
        node = eng.node("/a.md")
        assert (node.base_sha, node.sha) == (sha256(data("v3")), sha256(data("v3")))
        assert not eng.state.doubts and not eng.state.is_dirty(node)
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions", *learn]
        assert (result.pushed, result.progress) == (0, 1)  # resolved, no push of ours


def test_versions_in_doubt_are_read_from_no_earlier_than_the_epoch():
    """A request sent less than SKEW after 1970 (a board with no real-time clock, before
    its clock is set): the versions are read from the epoch on, to the microsecond."""
    assert models.versions_since(0.0) == "1970-01-01T00:00:00.000000Z"
    assert models.versions_since(models.SKEW + 0.5) == "1970-01-01T00:00:00.500000Z"


async def test_a_lost_update_written_over_since_lands_and_the_next_listing_takes_theirs(
        tmp_path):
    """a.md's update to v2 was applied, its answer lost; then another writer wrote v3.
    The next pass reads the memory (v3) and its versions since: ours is among them, so
    our update landed (counted as pushed, the base is v2, nothing is sent again and no
    conflict); the next listing brings v3."""
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        await eng.op_r_edit("/a.md", "v3")
        first, pushed = len(eng.transport.records), eng.ctx.status.pushed
        learn = learns_writer(eng)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions", *learn]
        assert (result.pushed, eng.ctx.status.pushed) == (1, pushed + 1)
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_sha, node.sha) == (mid, sha256(data("v2")),
                                                            sha256(data("v2")))
        assert not eng.state.doubts and not eng.state.is_dirty(node)
        assert eng.state.conflicts() == []
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("v3")) and eng.state.conflicts() == []


async def test_a_lost_update_written_over_after_a_listing_took_theirs_is_not_sent_again(
        tmp_path, caplog):
    """a.md's update to v2 was applied, its answer lost; another writer wrote v3 over it.
    A listing came while the doubt could not be resolved (its read refused): v3 took the
    tree and our v2 is kept as a conflict. The next pass finds v2 among the versions, but
    the base has moved since (the listing set it): our write is superseded, so nothing is
    sent, the file stays clean at v3 and the conflict stays. The status said why the
    doubt waited, and the log says how it ended."""
    caplog.set_level(logging.INFO, logger="memfs.sync.doubts")
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id == mid,
                                         origins=("setup",), times=1)]
        await eng.op_r_edit("/a.md", "v3")
        await eng.op_reconcile()
        node = eng.node("/a.md")
        assert eng.state.doubts and node.base_sha == sha256(data("v3"))
        assert any(n.split(" ", 1)[1].startswith(
            "cannot tell whether the change to /a.md reached the server (")
            and n.endswith("); it waits") for n in eng.ctx.status.warnings)
        [row] = eng.state.conflicts()
        first, learn = len(eng.transport.records), learns_writer(eng)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions", *learn]
        assert (result.pushed, result.progress, result.left) == (0, 1, 0)
        assert (node.sha, node.base_sha) == (sha256(data("v3")), sha256(data("v3")))
        assert not eng.state.doubts and not eng.state.is_dirty(node)
        assert eng.state.conflicts() == [row] and row["local_sha"] == sha256(data("v2"))
        assert ("request in doubt for /a.md: applied on the server, and written over "
                "since") in caplog.messages


async def _two_updates_in_doubt(eng, b_fault: str = "lose") -> dict[str, str]:
    """a.md and b.md synced, then edited: a's update applied and its answer lost, b's
    the same (`b_fault` "lose") or never applied, every attempt answered 503 ("fail"):
    two requests in doubt. Their memory ids by path."""
    await synced(eng, a="a1", b="b1")
    mids = {p: eng.node(p).memory_id for p in ("/a.md", "/b.md")}
    eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                     kind="lose", origins=("setup",), times=1)]
    await eng.op_write("/a.md", "a2")
    await eng.op_push()  # (a lost answer ends the pass: b's goes in the next one)
    eng.transport.rules = [  # a's doubt cannot be read yet; b's update goes astray too
        FaultRule(lambda r: r.method == "GET" and r.memory_id == mids["/a.md"],
                  origins=("setup",), times=1),
        FaultRule(lambda r: r.method == "POST" and r.memory_id == mids["/b.md"],
                  kind=b_fault, origins=("setup",), times=1 if b_fault == "lose" else None)]
    await eng.op_write("/b.md", "b2")
    await eng.op_push()
    assert len(eng.state.doubts) == 2
    return mids


async def test_lost_answers_of_two_updates_found_applied_count_two_and_say_so_in_the_log(
        tmp_path, caplog):
    """a.md and b.md edited, both updates applied and both answers lost. The next pass
    finds both applied: two pushes, and the log names each file and its memory."""
    caplog.set_level(logging.INFO, logger="memfs.sync.doubts")
    async with harness(tmp_path) as eng:
        mids = await _two_updates_in_doubt(eng)
        first, pushed = len(eng.transport.records), eng.ctx.status.pushed
        result = await eng.pusher.push_pass()
        assert sorted(sent(eng, first)) == sorted(f"GET {m}" for m in mids.values())
        assert (result.pushed, eng.ctx.status.pushed) == (2, pushed + 2)
        assert not eng.state.doubts
        for path, mid in mids.items():
            assert (f"request in doubt for {path}: applied on the server ({mid}); its lost "
                    "answer is applied now") in caplog.messages


async def test_an_update_in_doubt_not_applied_is_said_so_in_the_log_and_sent_again(
        tmp_path, caplog):
    """a.md's update met 503s (a proxy's: it may have been applied); the memory shows no
    trace of it. The next pass says so in the log and sends the update again."""
    caplog.set_level(logging.INFO, logger="memfs.sync.doubts")
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="fail", origins=("setup",))]
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        assert eng.state.doubts and eng.server() == {"/a.md": (mid, sha256(data("v1")))}
        eng.transport.rules = []
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert "request in doubt for /a.md: not applied on the server" in caplog.messages
        assert sent(eng, first)[0] == f"GET {mid}" and sent(eng, first)[-1] == f"POST {mid}"
        assert result.pushed == 1 and not eng.state.doubts
        assert eng.server() == {"/a.md": (mid, sha256(data("v2")))}


async def test_a_create_in_doubt_skips_a_like_memory_created_before_it_was_sent(
        tmp_path, monkeypatch):
    """Another writer created /a.md holding v1 and moved it to b.md (this mount has not
    listed it yet); then a.md is written v1 here, and its create meets 503s (not applied;
    it may have been, for all the mount knows). The next pass reads only the memories
    created since the create was sent (SKEW set to 0 here): theirs, older, is not taken
    for ours, and the create goes out again."""
    monkeypatch.setattr(models, "SKEW", 0.0)
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_r_create("/a.md", "v1")
        await eng.op_r_rename("/a.md", "/b.md")
        [(theirs, _sha)] = eng.server().values()
        await trio.sleep(0.001)  # (their create is older than ours by the clock)
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", kind="fail",
                                         origins=("setup",))]
        await eng.op_write("/a.md", "v1")
        await eng.op_push()
        [ticket] = eng.state.doubts.values()
        eng.transport.rules = []
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == ["GET memory_versions", "POST memories"]
        assert eng.transport.records[first].query["created_at[gte]"] == models.versions_since(
            ticket.sent_at)
        assert eng.transport.records[first].query["operation"] == "created"
        assert result.pushed == 1 and not eng.state.doubts
        mid = eng.node("/a.md").memory_id
        assert mid != theirs
        assert eng.server() == {"/a.md": (mid, sha256(data("v1"))),
                                "/b.md": (theirs, sha256(data("v1")))}


# -- wave w4b --


async def test_an_update_in_doubt_reads_only_its_own_memorys_versions(tmp_path):
    """a.md's update to v2 met a 503 (not applied, for all the mount knows); meanwhile
    another writer moved a.md's memory to c.md and created a new memory at a.md holding
    the same v2 bytes. The next pass reads a.md's memory (at c.md, v1) and its own
    versions since, not the store's: ours is not among them, so v2 is sent again to our
    memory, not taken as landed because another memory holds those bytes."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="fail", origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        assert eng.state.doubts
        await eng.op_r_rename("/a.md", "/c.md")
        await eng.op_r_create("/a.md", "v2")
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions", f"POST {mid}"]
        assert eng.transport.records[first + 1].query["memory_id"] == mid
        assert not eng.state.doubts
        assert eng.server()["/c.md"] == (mid, sha256(data("v2")))  # our v2 reached ours
# -- wave w5b --


async def test_a_lost_update_found_applied_by_a_listing_counts_as_a_push(tmp_path):
    """a.md's update to v2 was applied, its answer lost. A listing comes before the next
    push pass: it resolves the doubt first, finds our write applied and applies it as its
    answer (not as another writer's change): `memfs status` counts one more push, the
    file is clean at v2 and nothing is sent again."""
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        pushed = eng.ctx.status.pushed
        await eng.op_reconcile()
        assert eng.ctx.status.pushed == pushed + 1
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_sha, node.sha) == (mid, sha256(data("v2")),
                                                            sha256(data("v2")))
        assert not eng.state.doubts and not eng.state.is_dirty(node)
        assert eng.state.conflicts() == [] and eng.pusher.pending_total() == 0


async def test_two_doubts_resolved_in_one_pass_count_as_two_steps(tmp_path):
    """a.md's and b.md's updates both went out: a's was applied and its answer lost, b's
    met 503s and was not applied. The next pass resolves both (two steps: a's answer
    applied, b's forgotten), then sends b again (a third): one push found, one sent."""
    async with harness(tmp_path) as eng:
        mids = await _two_updates_in_doubt(eng, b_fault="fail")
        eng.transport.rules = []
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sorted(sent(eng, first)) == sorted(
            [f"GET {mids['/a.md']}", f"GET {mids['/b.md']}", "GET memory_versions",
             f"POST {mids['/b.md']}"])
        assert (result.pushed, result.progress, result.left) == (2, 3, 0)
        assert not eng.state.doubts
        assert eng.server() == {"/a.md": (mids["/a.md"], sha256(data("a2"))),
                                "/b.md": (mids["/b.md"], sha256(data("b2")))}


async def test_doubts_resolved_before_a_read_fails_are_counted_and_kept(tmp_path):
    """a.md's and b.md's updates were both applied, their answers lost. The next pass
    resolves a's (one GET: applied) while b's read fails every attempt (503): the pass
    goes offline, and a's push still counts, in the pass's result (the unmount's report
    adds those up) and in `memfs status` (before: the tally of the doubts already
    resolved was dropped with the error, and so were the memories the feed must read
    again)."""
    async with harness(tmp_path) as eng:
        mids = await _two_updates_in_doubt(eng)
        eng.transport.rules = [FaultRule(  # b's doubt: every read of it fails
            lambda r: r.method == "GET" and r.memory_id == mids["/b.md"], kind="fail",
            origins=("setup",))]
        pushed = eng.ctx.status.pushed
        result = await eng.pusher.push_pass()
        assert result.offline is not None
        assert [t.memory_id for t in eng.state.doubts.values()] == [mids["/b.md"]]
        assert (result.pushed, result.progress) == (1, 1)  # a's, found applied
        assert eng.ctx.status.pushed == pushed + 1


async def test_a_create_found_overtaken_by_a_poll_is_read_again_by_that_poll(tmp_path):
    """a.md's create was applied, its answer lost; another writer then edited the memory
    it made. A feed poll meanwhile shows both versions and leaves them to the doubt. Once
    the wait is over, the next poll resolves the doubt first (ours or theirs alike: the
    file's bytes kept as a conflict, the creation taken as the answer) and hands the
    memory to the feed to read again: the same poll brings their edit (without that, the
    feed, already past their version, would leave the file at our bytes until a full
    listing)."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and not r.memory_id,
                                         kind="lose", origins=("setup",), times=1)]
        await eng.op_write("/a.md", "mine")
        await eng.op_push()
        assert eng.state.doubts
        eng.transport.rules = []
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_poll()                   # the doubt still young: both left to it
        assert eng.state.doubts and eng.tree_sha("/a.md") == sha256(data("mine"))
        await eng.op_age()                    # the wait is over
        await eng.op_poll()
        assert not eng.state.doubts
        [mid] = [m for m, _sha in eng.server().values()]
        assert eng.node("/a.md").memory_id == mid
        assert eng.tree_sha("/a.md") == sha256(data("theirs"))  # their edit, this poll
        assert [c["local_sha"] for c in eng.state.conflicts()] == [sha256(data("mine"))]


@pytest.mark.parametrize("their_change", ["edit", "delete"])
async def test_a_create_found_overtaken_before_another_doubts_read_fails_is_still_read_again(
        tmp_path, their_change):
    """a.md's and b.md's creates were both applied, their answers lost; another writer
    then edited (or deleted) the memory a's made. Once the wait is over, the next poll
    resolves a's doubt (overtaken: ours kept as a conflict) and then fails on b's read
    (503s): the pass goes offline, a's resolution kept. The memory is still read again:
    the next poll brings their change to a.md. (More than one thing asks for that read:
    the doubt's resolution, `Resolved.reread`, handed to the feed even when a later read
    fails; the young poll that left their version to the doubt; the feed's re-read of
    its unsettled window. This holds the outcome, whichever of them brings it.)"""
    async with harness(tmp_path) as eng:
        def create() -> FaultRule:
            return FaultRule(lambda r: r.method == "POST" and not r.memory_id, kind="lose",
                             origins=("setup",), times=1)

        eng.transport.rules = [create()]
        await eng.op_write("/a.md", "mine")
        await eng.op_push()
        eng.transport.rules = [  # a's doubt cannot be read yet; b's create goes astray too
            FaultRule(lambda r: r.method == "GET" and not r.memory_id, origins=("setup",),
                      times=1),
            create()]
        await eng.op_write("/b.md", "b")
        await eng.op_push()
        assert len(eng.state.doubts) == 2
        mids = {path: mid for path, (mid, _sha) in eng.server().items()}
        read_b = FaultRule(lambda r: r.method == "GET" and r.memory_id == mids["/b.md"],
                           origins=("setup",))
        eng.transport.rules = [read_b]        # b's doubt waits (its memory's read refused)
        if their_change == "edit":
            await eng.op_r_edit("/a.md", "theirs")
        else:
            await eng.op_r_delete("/a.md")
        await eng.op_poll()                   # a's doubt still young: left to it
        assert len(eng.state.doubts) == 2
        await eng.op_age()                    # the wait is over
        eng.transport.rules = [replace(read_b, kind="fail")]  # 503s: the pass fails
        assert (await listing_pass(eng, full=False)).startswith("offline")
        assert [t.path for t in eng.state.doubts.values()] == ["/b.md"]  # a's resolved
        assert eng.tree_sha("/a.md") == sha256(data("mine"))
        eng.transport.rules = []
        await eng.op_poll()
        assert not eng.state.doubts
        if their_change == "edit":  # their edit, this poll
            assert eng.node("/a.md").memory_id == mids["/a.md"]
            assert eng.tree_sha("/a.md") == sha256(data("theirs"))
        else:  # their delete, this poll
            assert eng.node("/a.md") is None and "/a.md" not in eng.server()
        assert [c["local_sha"] for c in eng.state.conflicts()] == [sha256(data("mine"))]


# -- wave w11c --


async def test_an_update_in_doubt_reads_its_head_without_content_and_its_recent_versions(
        tmp_path):
    """a.md's update to v2 was applied, its answer lost; another writer then wrote v3. The
    next pass reads the memory's head without its content (the basic view: its path and
    sha are all a doubt needs) and only the versions created since the update was sent
    (SKEW earlier), not the memory's whole history."""
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        [ticket] = eng.state.doubts.values()
        await eng.op_r_edit("/a.md", "v3")
        first, learn = len(eng.transport.records), learns_writer(eng)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions", *learn]
        head, versions = eng.transport.records[first:first + 2]
        assert head.query["view"] == "basic"
        assert versions.query["memory_id"] == mid
        assert versions.query["created_at[gte]"] == models.versions_since(ticket.sent_at)
        assert not eng.state.doubts


# -- wave w14b --


async def test_a_create_in_doubt_whose_read_is_refused_says_how_many_wait(tmp_path):
    """a.md's create was applied, its answer lost; the next pass's read of the versions
    created since is refused (403, not "offline"). `memfs status` says how many creates
    cannot be told yet and that they wait; the doubt stays for the next pass."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and not r.memory_id,
                                         kind="lose", origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v1")
        await eng.op_push()
        assert len(eng.state.doubts) == 1
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET", origins=("setup",),
                                         times=1)]
        first = len(eng.transport.records)
        await eng.op_push()
        assert sent(eng, first) == ["GET memory_versions"]
        assert len(eng.state.doubts) == 1
        [note] = [n.split(" ", 1)[1] for n in eng.ctx.status.warnings
                  if "cannot tell" in n]
        assert note.startswith("cannot tell whether 1 create(s) reached the server (")
        assert note.endswith("); it waits")


# -- wave r6w2 --


async def test_a_lost_update_written_over_after_a_listing_then_unlinked_deletes_theirs(
        tmp_path):
    """a.md's update to v2 was applied, its answer lost; another writer wrote v3 over it,
    and a listing (the doubt's read refused for now) took v3 into the tree, ours kept as
    a conflict. Then a.md is unlinked: its pending delete is of v3, the version seen.
    The next pass finds v2 among the versions, but the base has moved since: our write
    is superseded and the delete stays against v3, so a flush deletes the memory (it
    is not taken for a change made there, restored)."""
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id == mid,
                                         origins=("setup",), times=1)]
        await eng.op_r_edit("/a.md", "v3")
        await eng.op_reconcile()
        assert eng.state.doubts and eng.node("/a.md").base_sha == sha256(data("v3"))
        await eng.op_unlink("/a.md")
        assert eng.state.tombstones[mid].base_sha == sha256(data("v3"))
        first, learn = len(eng.transport.records), learns_writer(eng)
        await eng.pusher.push_pass(flush=True)
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions", *learn,
                                    f"DELETE {mid}"]
        assert eng.server() == {} and eng.state.tombstones == {} and not eng.state.doubts
        assert not [w for w in eng.ctx.status.warnings if "restoring" in w]


# -- wave r6w5 --


async def test_an_update_whose_answer_was_lost_is_not_sent_again_by_the_client(tmp_path):
    """a.md's update to v2 is applied but its answer lost, with client retries on: the
    client does not send it again (a blind retry could undo what another writer did
    meanwhile; a refusal would answer the retry only). The request stays in doubt, and
    the next pass asks the server first, finds v2 applied and lands it: a.md is synced,
    nothing left to push, and the second rule (a refusal) never met a request."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id

        async def no_wait(_seconds: float) -> None:
            pass

        eng.ctx.client.max_retries, eng.ctx.client._sleep = 1, no_wait  # one retry, unwaited

        def update(rec) -> bool:
            return rec.method == "POST" and rec.memory_id == mid

        eng.transport.rules = [FaultRule(update, kind="lose", origins=("setup",), times=1),
                               FaultRule(update, origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v2")
        first = len(eng.transport.records)
        await eng.op_push()
        assert [(r.method, r.outcome) for r in eng.transport.records[first:]] == [
            ("POST", "lost")]
        assert [t.memory_id for t in eng.state.doubts.values()] == [mid]
        result = await eng.pusher.push_pass()
        assert (result.pushed, result.left) == (1, 0) and not eng.state.doubts
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_sha) == (mid, sha256(data("v2")))
        assert [r.method for r in eng.transport.records[first:]].count("POST") == 1


# -- a request the server applies after its answer was lost ------------------------------


def late_create(after: int) -> list[FaultRule]:
    """b.md's create gets no answer and is not applied yet: the server applies it just
    before the `after`-th request after it (a server still at work on it)."""
    return [FaultRule(lambda r: r.method == "POST" and not r.memory_id, kind="late",
                      late_after=after, origins=("setup",), times=1)]


async def test_a_create_that_lands_after_its_file_was_unlinked_does_not_bring_it_back(
        tmp_path, caplog):
    """b.md's create got no answer and the server shows no trace of it; the user unlinks
    b.md. Within the lost-answer wait the next pass asks, finds nothing, and takes
    nothing for granted; then the create lands. The next read finds it applied: the
    memory it made becomes a pending delete, preconditioned on our bytes, and goes.
    Taken as never applied at once (the wait 0), the late create would bring b.md back
    on the next listing."""
    caplog.set_level(logging.INFO, logger="memfs.sync.doubts")
    async with harness(tmp_path) as eng:
        eng.transport.rules = late_create(after=2)
        await eng.op_write("/b.md", "mine")
        await eng.op_push()
        assert eng.state.doubts and eng.server() == {}
        await eng.op_unlink("/b.md")
        first = len(eng.transport.records)
        await eng.pusher.push_pass()  # within the wait: asks (1), sends nothing
        assert sent(eng, first) == ["GET memory_versions"] and eng.state.doubts
        assert any("b.md: not settled yet; asked again until" in m for m in caplog.messages)
        await eng.op_reconcile()  # the create lands before its second request
        assert not eng.state.doubts
        [(mid, sha)] = eng.server().values()
        assert list(eng.state.tombstones) == [mid] and sha == sha256(data("mine"))
        age_tombstones(eng)
        await eng.pusher.push_pass()
        await eng.op_reconcile()
        assert eng.server() == {} and eng.user_tree() == {}
        assert eng.state.conflicts() == [] and eng.pusher.pending_total() == 0


async def test_a_listing_that_meets_a_late_create_of_ours_waits_for_its_doubt(tmp_path):
    """b.md's create got no answer; the user unlinks b.md and writes a new b.md. Nothing
    is sent for b.md while the create may still land (a file at the path it wrote). A
    listing finds the late create's memory at b.md, within the wait, its doubt not yet
    resolved: the memory is ours, not another writer's, so it waits (`Unknown.DOUBT`)
    rather than filing the new b.md as a conflict. The next pass resolves the doubt as
    applied: the new b.md takes that memory and updates it."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = late_create(after=3)
        await eng.op_write("/b.md", "mine")
        await eng.op_push()
        await eng.op_unlink("/b.md")
        await eng.op_write("/b.md", "again")
        first = len(eng.transport.records)
        await eng.pusher.push_pass()  # asks (1); the new b.md waits for the doubt
        assert sent(eng, first) == ["GET memory_versions"]
        assert eng.state.doubts and eng.server() == {}
        await eng.op_reconcile()  # asks (2); the create lands; the listing (3) shows it
        assert eng.state.doubts and len(eng.server()) == 1
        assert eng.state.conflicts() == [] and eng.node("/b.md").memory_id is None
        await eng.pusher.push_pass()
        await eng.op_reconcile()
        [(mid, sha)] = eng.server().values()
        assert sha == sha256(data("again")) and eng.node("/b.md").memory_id == mid
        assert eng.user_tree() == {"/b.md": sha256(data("again"))}
        assert eng.state.conflicts() == [] and eng.pusher.pending_total() == 0


async def test_a_flush_waits_out_the_lost_answer_wait_then_sends_again(tmp_path):
    """a.md's update got no answer and the server never applies it. An unmount's flush
    within the lost-answer wait (0.3 s here) asks, finds no trace, and asks again until
    the wait is over, within its own bound: then the update is taken as never applied
    and sent again, and nothing is left."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        eng.ctx.options.lost_answer_wait = 0.3
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="late", late_after=1000, origins=("setup",),
                                         times=1)]  # never lands while it matters
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        assert eng.state.doubts
        result = await eng.pusher.flush(30.0)
        assert (result.pushed, result.left) == (1, 0) and not eng.state.doubts
        assert eng.server() == {"/a.md": (mid, sha256(data("v2")))}


async def update_in_doubt(eng) -> str:
    """a.md synced, then its update to v2 gets no answer, and the server never applies it
    while it matters; returns its memory id."""
    await synced(eng, a="v1")
    eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                     kind="late", late_after=1000, origins=("setup",),
                                     times=1)]
    await eng.op_write("/a.md", "v2")
    await eng.op_push()
    assert eng.state.doubts
    return eng.node("/a.md").memory_id


async def test_a_doubt_with_under_a_second_of_its_wait_left_still_waits(tmp_path):
    """a.md's update got no answer and the server shows no trace of it. With half a second
    of the lost-answer wait left the pass still only asks; once the wait is over it takes
    the update as never applied and sends it again."""
    async with harness(tmp_path) as eng:
        mid = await update_in_doubt(eng)
        [ticket] = eng.state.doubts.values()
        lost = eng.ctx.doubt_lost_at[ticket.doubt]
        wait = eng.ctx.options.lost_answer_wait
        eng.ctx.wall = lambda: lost + wait - 0.5
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions"]
        assert eng.state.doubts
        eng.ctx.wall = lambda: lost + wait + 0.01
        await eng.pusher.push_pass()
        assert not eng.state.doubts
        assert eng.server() == {"/a.md": (mid, sha256(data("v2")))}


async def test_a_doubt_a_previous_daemon_left_waits_from_this_ones_start(tmp_path):
    """A request in doubt of which this daemon never saw the answer lost (a previous
    daemon left it in the journal: no loss time in memory) may still land until the
    lost-answer wait after this daemon started: the pass asks and sends nothing; after
    that it is taken as never applied and sent again."""
    async with harness(tmp_path) as eng:
        mid = await update_in_doubt(eng)
        eng.ctx.doubt_lost_at.clear()  # as a daemon started on this journal has it
        eng.ctx.started_at = eng.ctx.wall()
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions"]
        assert eng.state.doubts
        started = eng.ctx.started_at
        eng.ctx.wall = lambda: started + eng.ctx.options.lost_answer_wait + 0.01
        await eng.pusher.push_pass()
        assert not eng.state.doubts
        assert eng.server() == {"/a.md": (mid, sha256(data("v2")))}



async def test_a_flush_asks_again_after_a_tenth_of_a_second_then_twice_as_long_up_to_one(
        tmp_path):
    """a.md's update got no answer and never lands. A flush within the lost-answer wait (5 s
    here, on the harness's clock) asks again after 0.1 s, then 0.2, 0.4, 0.8, then every
    second until the wait is over; then it sends the update again."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.lost_answer_wait = 5.0
        await update_in_doubt(eng)
        pauses: list[float] = []
        moved_on = eng.ctx.pause

        async def pause(seconds: float) -> None:
            pauses.append(round(seconds, 6))
            await moved_on(seconds)

        eng.ctx.pause = pause
        result = await eng.pusher.flush(60.0)
        assert (result.pushed, result.left) == (1, 0) and not eng.state.doubts
        assert pauses[:6] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0] and max(pauses) == 1.0
        assert 4.5 < sum(pauses) <= 5.0


async def test_a_listing_takes_another_writers_memory_while_an_unrelated_create_is_in_doubt(
        tmp_path):
    """b.md's create got no answer and may still land. A listing meets c.md, another
    writer's new memory: only a memory at the path of a create in doubt waits for it, so
    c.md comes into the tree at once."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = late_create(after=1000)  # never lands while it matters
        await eng.op_write("/b.md", "mine")
        await eng.op_push()
        assert eng.state.doubts
        await eng.op_r_create("/c.md", "theirs")
        await eng.op_reconcile()
        assert eng.state.doubts
        assert eng.user_tree() == {"/b.md": sha256(data("mine")),
                                   "/c.md": sha256(data("theirs"))}


async def test_a_create_landing_between_a_passs_question_and_its_listing_stays_deleted(
        tmp_path):
    """b.md's create got no answer; the user unlinks b.md. A full listing pass asks about
    the create (no trace yet), then the create lands, then the listing meets its memory
    at b.md: a memory at the path of a create in doubt waits for the doubt, as every
    memory the listing does not know does, even where the path is free (the first
    listing's fast way in). The next pass finds the create applied and deletes it. (The
    fast way took it as a new memory of another writer's: b.md came back.)"""
    async with harness(tmp_path) as eng:
        eng.transport.rules = late_create(after=2)
        await eng.op_write("/b.md", "mine")
        await eng.op_push()
        await eng.op_unlink("/b.md")
        first = len(eng.transport.records)
        await eng.op_reconcile()  # asks (1); the create lands; the listing (2 or 3) shows it
        asked = sent(eng, first)  # (the listing and the feed's anchor go in either order)
        assert asked[0] == "GET memory_versions" and "GET memories" in asked[1:3]
        assert len(eng.server()) == 1 and eng.user_tree() == {} and eng.state.doubts
        await eng.pusher.push_pass()  # the doubt: applied; its memory a pending delete
        age_tombstones(eng)
        await eng.pusher.push_pass()
        await eng.op_reconcile()
        assert eng.server() == {} and eng.user_tree() == {}
        assert eng.state.conflicts() == [] and eng.pusher.pending_total() == 0


# -- a creation the server cannot tell from ours (decide.created_row) --


async def _create_in_doubt_beside_theirs(eng, change, *, before=None, kind="fail") -> str:
    """Another writer created /c.md holding v1 and then changed, moved or deleted it
    (`change`), this mount listing none of it (nor what `before` did); then c.md is
    written v1 here and its create meets a 503 (not applied; it may have been, for all
    the mount knows), or gets no answer and lands only when the test says
    (`kind="late"`). Returns their id."""
    await eng.op_reconcile()
    if before is not None:
        await before()
    await eng.op_r_create("/c.md", "v1")
    theirs = eng.server()["/c.md"][0]
    await change()
    eng.transport.rules = [FaultRule(lambda r: r.method == "POST", kind=kind, late_after=1000,
                                     origins=("setup",), times=1)]
    await eng.op_write("/c.md", "v1")
    await eng.op_push()
    assert eng.state.doubts
    eng.transport.rules = []
    return theirs


async def test_a_create_in_doubt_whose_like_memory_was_deleted_since_keeps_the_file(tmp_path):
    """Their creation of c.md (v1) is listed among the versions since the create was
    sent: ours or theirs, the server cannot say, and that memory is gone. The file's
    bytes are kept as a conflict, the memory's state stands (the file goes with it, as
    their delete asks if the create was ours) and nothing is sent again."""
    async with harness(tmp_path) as eng:
        theirs = await _create_in_doubt_beside_theirs(
            eng, lambda: eng.op_r_delete("/c.md"))
        first = len(eng.transport.records)
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.pusher.push_pass()
        assert sent(eng, first) == ["GET memory_versions", f"GET {theirs}"]
        assert eng.transport.records[first + 1].query["view"] == "basic"  # no content
        assert not eng.state.doubts
        event = sub.receive.receive_nowait()  # `memfs watch` hears the conflict
        assert (event.kind, event.path, event.memory_id) == ("conflict", "/c.md", theirs)
        [row] = eng.state.conflicts()
        assert (row["path"], row["memory_id"], row["local_sha"], row["remote_sha"]) == (
            "/c.md", theirs, sha256(data("v1")), None)
        assert row["reason"].endswith("was deleted by another writer since, and the server "
                                      "cannot tell whether it was ours")
        assert any(n.endswith(f"conflict #{row['id']} at /c.md: could not tell whether its "
                              "create made the memory another writer has deleted since; the "
                              "server's state is in the tree, yours is kept (memfs conflicts)")
                   for n in eng.ctx.status.warnings)
        assert theirs in eng.reconciler.feed.rechecks  # the next poll reads it again
        await eng.op_reconcile()
        assert eng.tree_sha("/c.md") is None and eng.server() == {}
        await eng.op_restore("/c.md")
        await eng.op_push()
        [(mid, sha)] = eng.server().values()
        assert mid != theirs and sha == sha256(data("v1")) == eng.tree_sha("/c.md")


async def test_a_create_in_doubt_whose_like_memory_was_edited_since_keeps_the_file(tmp_path):
    """The same, their memory edited since: it stands in the tree, the file's v1 is kept
    as a conflict against their edit."""
    async with harness(tmp_path) as eng:
        theirs = await _create_in_doubt_beside_theirs(
            eng, lambda: eng.op_r_edit("/c.md", "theirs"))
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.pusher.push_pass()
        event = sub.receive.receive_nowait()
        assert (event.kind, event.path, event.memory_id) == ("conflict", "/c.md", theirs)
        assert event.version_id == eng.db.get_memory(eng.store_id, theirs)["memory_version_id"]
        [row] = eng.state.conflicts()
        assert (row["path"], row["memory_id"], row["local_sha"], row["remote_sha"]) == (
            "/c.md", theirs, sha256(data("v1")), sha256(data("theirs")))
        assert "was changed by another writer since" in row["reason"]
        await eng.op_reconcile()
        assert eng.server() == {"/c.md": (theirs, sha256(data("theirs")))}
        assert eng.tree_sha("/c.md") == sha256(data("theirs"))
        assert eng.node("/c.md").memory_id == theirs and not eng.state.doubts


async def test_a_create_in_doubt_whose_like_memory_holds_its_bytes_is_adopted(tmp_path):
    """Their creation of c.md (v1) still holds v1, moved to d.md: ours or theirs makes no
    difference (adopting loses nothing), and the file follows it at once, young or not:
    no conflict, nothing sent again."""
    async with harness(tmp_path) as eng:
        theirs = await _create_in_doubt_beside_theirs(
            eng, lambda: eng.op_r_rename("/c.md", "/d.md"))
        await eng.pusher.push_pass()
        assert not eng.state.doubts and not eng.state.conflicts()
        await eng.op_reconcile()
        assert eng.server() == {"/d.md": (theirs, sha256(data("v1")))}
        assert eng.node("/d.md").memory_id == theirs and eng.tree_sha("/c.md") is None


async def test_a_create_in_doubt_prefers_the_creation_that_still_holds_its_bytes(tmp_path):
    """Two creations of c.md holding v1 are listed: theirs, deleted since (newest), and
    another still holding v1 (moved to d.md). The one that holds our bytes is taken, with
    no conflict."""
    async with harness(tmp_path) as eng:
        async def moved_away():
            await eng.op_r_create("/c.md", "v1")
            await eng.op_r_rename("/c.md", "/d.md")

        await _create_in_doubt_beside_theirs(eng, lambda: eng.op_r_delete("/c.md"),
                                             before=moved_away)
        await eng.pusher.push_pass()
        assert not eng.state.doubts and not eng.state.conflicts()
        await eng.op_reconcile()
        kept = eng.server()["/d.md"][0]
        assert eng.node("/d.md").memory_id == kept and eng.tree_sha("/c.md") is None


async def test_a_young_create_in_doubt_beside_a_like_memory_deleted_since_waits_for_its_own(
        tmp_path):
    """As above, but the create got no answer at all (it may still land): the pass only
    asks, nothing is kept or sent. Then it lands, and the next pass finds it: the newest
    creation holding our bytes, taken as ours, with no conflict."""
    async with harness(tmp_path) as eng:
        theirs = await _create_in_doubt_beside_theirs(
            eng, lambda: eng.op_r_delete("/c.md"), kind="late")
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == ["GET memory_versions", f"GET {theirs}"]
        assert eng.state.doubts and not eng.state.conflicts()
        await eng.op_age()  # it lands now
        await eng.pusher.push_pass()
        assert not eng.state.doubts and not eng.state.conflicts()
        [(mid, sha)] = eng.server().values()
        assert mid != theirs and eng.node("/c.md").memory_id == mid
        assert sha == sha256(data("v1")) == eng.tree_sha("/c.md")


async def test_a_create_in_doubt_reads_no_memory_created_since_elsewhere(tmp_path):
    """c.md's create met a 503; meanwhile another writer created z.md (this mount has not
    listed it). The versions created since show z.md only: no memory of our path and
    bytes, nothing read, and the create goes out again."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", kind="fail",
                                         origins=("setup",), times=1)]
        await eng.op_write("/c.md", "v1")
        await eng.op_push()
        await eng.op_r_create("/z.md", "v1")
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == ["GET memory_versions", "POST memories"]
        assert not eng.state.doubts and not eng.state.conflicts()
        assert eng.node("/c.md").memory_id not in (None, eng.server()["/z.md"][0])


async def test_a_create_in_doubt_whose_like_memory_cannot_be_read_waits_alone(tmp_path):
    """Two creates in doubt: c.md's, with another writer's creation of the same bytes
    there (deleted since), and e.md's, with none. Reading their memory is refused (403):
    c.md's doubt waits, said so, and e.md's is settled all the same (sent again)."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_r_create("/c.md", "v1")
        theirs = eng.server()["/c.md"][0]
        await eng.op_r_delete("/c.md")
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", kind="fail",
                                         origins=("setup",), times=2)]
        await eng.op_write("/c.md", "v1")
        await eng.op_write("/e.md", "v2")
        await eng.op_push()
        assert len(eng.state.doubts) == 2
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id == theirs,
                                         origins=("setup",), times=1)]
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == ["GET memory_versions", f"GET {theirs}", "POST memories"]
        [ticket] = eng.state.doubts.values()
        assert ticket.path == "/c.md" and not eng.state.conflicts()
        assert eng.server()["/e.md"][1] == sha256(data("v2"))
        [note] = [n.split(" ", 1)[1] for n in eng.ctx.status.warnings if "cannot tell" in n]
        assert note.startswith("cannot tell whether the create of /c.md reached the server (")


async def test_a_create_in_doubt_among_like_memories_all_changed_keeps_the_newests(tmp_path):
    """Two creations of c.md holding v1, neither holding it now: the older edited, the
    newer deleted. The conflict names the newest (the likeliest to be ours)."""
    async with harness(tmp_path) as eng:
        async def edited_away():
            await eng.op_r_create("/c.md", "v1")
            await eng.op_r_rename("/c.md", "/d.md")
            await eng.op_r_edit("/d.md", "theirs")

        theirs = await _create_in_doubt_beside_theirs(
            eng, lambda: eng.op_r_delete("/c.md"), before=edited_away)
        await eng.pusher.push_pass()
        [row] = eng.state.conflicts()
        assert (row["memory_id"], row["remote_sha"]) == (theirs, None)


@pytest.mark.parametrize("change", ["edit", "unlink"])
async def test_a_create_in_doubt_overtaken_after_the_file_changed_keeps_nothing_more(
        tmp_path, change):
    """The same as the first of these, but c.md was edited (v2) or removed here after its
    create went out: what the create wrote is no longer the user's latest, so nothing is
    kept of it. The memory's deletion stands; an edited c.md goes out as a new file, a
    removed one stays removed."""
    async with harness(tmp_path) as eng:
        await _create_in_doubt_beside_theirs(eng, lambda: eng.op_r_delete("/c.md"))
        if change == "edit":
            await eng.op_write("/c.md", "v2")
        else:
            await eng.op_unlink("/c.md")
        await eng.pusher.push_pass()
        assert not eng.state.doubts and not eng.state.conflicts()
        await eng.op_reconcile()
        await eng.op_push()
        await eng.op_reconcile()
        want = {"/c.md": sha256(data("v2"))} if change == "edit" else {}
        assert {p: sha for p, (_mid, sha) in eng.server().items()} == want
        assert eng.tree_sha("/c.md") == want.get("/c.md") and not eng.state.conflicts()


# -- a creation the server records as another writer's (decide.by_another_writer) --


async def _knowing_its_writer(eng) -> None:
    """a.md pushed, and read back by the feed: the mount knows it writes as MEMFS."""
    await eng.op_write("/a.md", "a")
    await eng.op_push()
    await eng.op_reconcile()
    await eng.op_poll()
    assert eng.ctx.writer == MEMFS.to_json()


@pytest.mark.parametrize("here", ["kept", "unlinked"])
async def test_a_create_in_doubt_leaves_a_like_creation_the_server_records_as_anothers(
        tmp_path, here):
    """Their creation of c.md (v1) still holds v1, moved to d.md; the mount knows its own
    writer, and the server records that creation as another writer's: it is not the
    create's, whatever its bytes. The create (a 503: the server was done with it) counts
    as not applied: c.md goes out again beside their d.md, or, removed here meanwhile,
    nothing is sent and their d.md stays. Before, it was taken for ours: c.md followed
    it to d.md, and a c.md removed here took their memory with it."""
    async with harness(tmp_path) as eng:
        await _knowing_its_writer(eng)
        theirs = await _create_in_doubt_beside_theirs(
            eng, lambda: eng.op_r_rename("/c.md", "/d.md"))
        if here == "unlinked":
            await eng.op_unlink("/c.md")
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        again = ["POST memories"] if here == "kept" else []
        assert sent(eng, first) == ["GET memory_versions", *again]  # theirs is not read
        await eng.op_reconcile()
        assert not eng.state.doubts and not eng.state.conflicts()
        server = eng.server()
        assert server["/d.md"] == (theirs, sha256(data("v1")))
        assert eng.node("/d.md").memory_id == theirs
        if here == "kept":
            assert server["/c.md"][0] != theirs and eng.tree_sha("/c.md") == sha256(data("v1"))
        else:
            assert "/c.md" not in server and eng.node("/c.md") is None


async def test_a_create_in_doubt_of_its_own_writer_is_still_found(tmp_path):
    """The mount knows its writer, and its own create of c.md landed with its answer
    lost; c.md is removed here meanwhile. The creation is recorded as the mount's: it is
    the create's, and the delete goes to it (the file does not come back)."""
    async with harness(tmp_path) as eng:
        await _knowing_its_writer(eng)
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", kind="lose",
                                         origins=("setup",), times=1)]
        await eng.op_write("/c.md", "v1")
        await eng.op_push()
        assert eng.state.doubts
        eng.transport.rules = []
        await eng.op_unlink("/c.md")
        await eng.pusher.push_pass()      # the doubt: the creation is ours
        assert not eng.state.doubts
        [mid] = [m for p, (m, _sha) in eng.server().items() if p == "/c.md"]
        assert list(eng.state.tombstones) == [mid]  # a pending delete, preconditioned
        age_tombstones(eng)
        await eng.pusher.push_pass()
        await eng.op_reconcile()
        assert set(eng.server()) == {"/a.md"} and not eng.state.conflicts()
        assert eng.node("/c.md") is None


async def _listed(eng, path: str, text: str) -> None:
    """Another writer's memory at path, holding text, listed here: a synced file the
    mount did not create."""
    await eng.op_r_create(path, text)
    await eng.op_reconcile()


@contextlib.asynccontextmanager
async def _daemons(tmp_path):
    """(state.db, daemon): daemon(key) is a SyncContext on that one state.db, as a
    daemon started with that API key would make; all closed at the end."""
    state = State(tmp_path / "state.db")
    cache = BlobCache(tmp_path / "objects")
    clients: list[MemoryStoresClient] = []

    def daemon(key: str) -> SyncContext:
        clients.append(MemoryStoresClient("http://x.test", key))
        return SyncContext(state, cache, clients[-1], "memstore_x", SyncOptions())

    try:
        yield state, daemon
    finally:
        for c in clients:
            await c.aclose()
        cache.close()
        state.close()


async def test_the_writer_is_kept_for_the_same_key_and_learned_again_for_another(tmp_path):
    """Who the mount writes as outlives the daemon (state.db), for the key it was learned
    with; under another key it is unknown until a version of the new key's is read. The
    key itself is never written: a salted tag of it is."""
    async with _daemons(tmp_path) as (state, daemon):
        first = daemon("key-1")
        assert first.writer is None
        first.learn_writer(None)                     # a version with no writer recorded
        assert first.writer is None
        first.learn_writer({"type": "api_actor", "api_key_id": "apikey_1"})
        again = daemon("key-1")
        assert again.writer == {"type": "api_actor", "api_key_id": "apikey_1"}
        other = daemon("key-2")
        assert other.writer is None
        assert "key-1" not in (state.get_meta("writer") or "")


async def test_the_writer_is_not_learned_from_an_update_that_met_bytes_already_there(
        tmp_path):
    """Our update of a.md to 'same' meets another writer's 'same' (the API's no-op: 200,
    no version, whatever the precondition): the answer names their version. Read by
    the feed it is not taken for who this mount writes as; only a creation of ours is."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/a.md", "theirs")
        await eng.op_reconcile()
        await eng.op_r_edit("/a.md", "same")
        await eng.op_write("/a.md", "same")
        await eng.op_push()
        assert eng.node("/a.md").base_sha == sha256(data("same"))
        await eng.op_poll()
        await eng.op_poll()
        assert eng.ctx.writer is None
        await eng.op_write("/b.md", "b")
        await eng.op_push()
        await eng.op_poll()
        assert eng.ctx.writer == MEMFS.to_json()


async def test_a_doubt_journaled_without_a_version_seen_is_bounded_by_its_precondition(
        tmp_path, monkeypatch):
    """a.md written v1, then v2, then v1 again; the last update is never applied (a 503).
    Journaled with no version seen (an older memfs's `doubts` row, which a new one reads
    after an upgrade), its doubt still never takes the first v1's version for it: that
    one is older than the newest version holding v2, what the update's precondition
    named (`decide.doubt_row`'s `base`). It is sent again and the user's v1 stays."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="fail", origins=("setup",))]
        monkeypatch.setattr(eng.state, "seen_version", lambda memory_id: None)
        await eng.op_write("/a.md", "v1")
        await eng.op_push()
        [ticket] = eng.state.doubts.values()
        assert ticket.after_version is None
        assert eng.server() == {"/a.md": (mid, sha256(data("v2")))}  # never applied
        eng.transport.rules = []
        result = await eng.pusher.push_pass()
        assert result.pushed == 1 and not eng.state.doubts
        assert eng.server() == {"/a.md": (mid, sha256(data("v1")))}
        assert eng.node("/a.md").sha == sha256(data("v1"))


async def test_a_lost_answer_found_applied_names_the_version_the_next_request_follows(
        tmp_path):
    """a.md moved to b.md and back, each move's answer lost and found applied by the next
    pass (the memory holds it); then moved to b.md again, never applied (a 503). The
    version each doubt found is the newest the mount has seen, so the last move's doubt
    does not take the first move's version (b.md, the same bytes) for its own: it is sent
    again and the file stays at b.md (found by the mutation run: a doubt that named no
    version left the bound at the creation's)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        for src, dst in (("/a.md", "/b.md"), ("/b.md", "/a.md")):
            eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                             kind="lose", origins=("setup",), times=1)]
            await eng.op_rename(src, dst)
            await eng.op_push()
            assert eng.state.doubts and eng.server() == {dst: (mid, sha256(data("v1")))}
            eng.transport.rules = []
            await eng.op_push()                    # the doubt: applied
            assert not eng.state.doubts and eng.node(dst).base_path == dst
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="fail", origins=("setup",))]
        await eng.op_rename("/a.md", "/b.md")
        await eng.op_push()
        assert eng.state.doubts and eng.server() == {"/a.md": (mid, sha256(data("v1")))}
        eng.transport.rules = []
        await eng.pusher.push_pass()
        assert not eng.state.doubts
        assert eng.server() == {"/b.md": (mid, sha256(data("v1")))}
        assert eng.node("/b.md") is not None and eng.node("/a.md") is None


async def test_a_lost_answer_found_written_over_names_the_version_the_next_request_follows(
        tmp_path):
    """Another writer moved a.md to b.md holding v2 and back holding v1; then our update
    to v2 was applied, its answer lost, and another writer wrote v3 over it: the next
    pass finds our update in the memory's versions (applied before), and that version is
    the newest the mount has seen. Then a.md is moved to b.md, never applied (a 503). Its
    doubt does not take the other writer's b.md holding v2, older than our update, for its
    own: the move is sent again and stays the user's (the mutants of `_resolve_update`
    that drop the applied-before answer's version, docs/TESTING.md: the bound stayed at
    the creation's, and the move was never sent again)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await _their_b_md_holding_v2_unseen(eng)
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="lose", origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        assert eng.state.doubts and eng.server() == {"/a.md": (mid, sha256(data("v2")))}
        await eng.op_r_edit("/a.md", "v3")
        eng.transport.rules = []
        await eng.pusher.push_pass()          # applied before: the base is our v2
        assert not eng.state.doubts and eng.node("/a.md").base_sha == sha256(data("v2"))
        await _a_move_never_applied_is_sent_again(eng, mid)
        await eng.op_reconcile()              # their v3 taken (a rename only loses no content)
        await eng.op_push()                   # and the move goes out on it
        assert eng.server() == {"/b.md": (mid, sha256(data("v3")))}
        assert eng.user_tree() == {"/b.md": sha256(data("v3"))} and not eng.state.conflicts()


@pytest.mark.parametrize("taken", ["by its file", "by no file"])
async def test_a_landed_answer_names_the_version_the_next_request_follows(tmp_path, taken):
    """Another writer's b.md holding v2, unseen by the mount, and a.md as it last saw
    it (`_their_b_md_holding_v2_unseen`). Our update of a.md to v2 lands: with its
    answer, its file taking it; or its answer lost, a.md unlinked, and the next pass
    finds the update applied with nothing to hold the memory (a pending delete), then
    a.md made again with v2 (the memory given back). Then a.md is moved to b.md, never
    applied (a 503). The landed answer's version is the newest the mount has seen, so
    the move's doubt does not take the other writer's b.md holding v2, older than our
    update, for its own: the move is sent again and stays the user's. By its file, the
    version is noted twice (by `push_landed` and by `_mark_base`), and this fails only
    without both; by no file, `push_landed`'s note is the only one (its #33, #34, #35
    of the mutation run, docs/TESTING.md: the bound stayed at the creation's, and the
    move was never sent)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await _their_b_md_holding_v2_unseen(eng)
        if taken == "by its file":
            await eng.op_write("/a.md", "v2")
            await eng.op_push()
            assert not eng.state.doubts and eng.node("/a.md").base_sha == sha256(data("v2"))
        else:
            eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                             kind="lose", origins=("setup",), times=1)]
            await eng.op_write("/a.md", "v2")
            await eng.op_push()
            assert eng.state.doubts and eng.server() == {"/a.md": (mid, sha256(data("v2")))}
            await eng.op_unlink("/a.md")
            eng.transport.rules = []
            await eng.pusher.push_pass()      # applied: a pending delete, nothing holds it
            assert not eng.state.doubts and mid in eng.state.tombstones
            await eng.op_write("/a.md", "v2")  # the memory given back
            assert eng.node("/a.md").memory_id == mid and mid not in eng.state.tombstones
        await _a_move_never_applied_is_sent_again(eng, mid)
        assert eng.server() == {"/b.md": (mid, sha256(data("v2")))}
        assert eng.user_tree() == {"/b.md": sha256(data("v2"))} and not eng.state.conflicts()


async def _their_b_md_holding_v2_unseen(eng) -> None:
    """Another writer wrote v2 to a.md, moved it to b.md and back, and wrote v1 again,
    unseen by the mount: the memory is as the mount last saw it, and its versions hold
    b.md with v2, older than any request the mount sends next."""
    await eng.op_r_edit("/a.md", "v2")
    await eng.op_r_rename("/a.md", "/b.md")
    await eng.op_r_rename("/b.md", "/a.md")
    await eng.op_r_edit("/a.md", "v1")


async def _a_move_never_applied_is_sent_again(eng, mid: str) -> None:
    """a.md moved to b.md, the move never applied (503s): its doubt, resolved by the
    next pass, finds it not applied (not the other writer's older b.md) and sends it
    again."""
    eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                     kind="fail", origins=("setup",))]
    before = eng.server()
    await eng.op_rename("/a.md", "/b.md")
    await eng.op_push()
    [ticket] = eng.state.doubts.values()
    assert (ticket.content_sent, ticket.path) == (False, "/b.md")
    assert eng.server() == before                 # never applied
    eng.transport.rules = []
    first = len(eng.transport.records)
    await eng.pusher.push_pass()
    assert not eng.state.doubts
    assert f"POST {mid}" in sent(eng, first)      # not applied: the move is sent again


# -- our bytes in a version the server records as another writer's ------------------


async def _mine_lost_after_their_like_bytes(eng, then) -> None:
    """Another writer writes v2 to a.md, then `then` (deletes or edits it); the user, not
    having heard, writes v2 too, and the update's answer is lost (it met their change)."""
    await eng.op_r_edit("/a.md", "v2")
    await then()
    eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                     kind="lose", origins=("setup",), times=1)]
    await eng.op_write("/a.md", "v2")
    await eng.op_push()
    assert eng.state.doubts


async def test_an_update_in_doubt_meeting_their_like_bytes_since_deleted_keeps_ours(tmp_path):
    """The mount knows its writer. Another writer wrote v2 to a.md and deleted it; the
    user, not having heard, writes v2 to a.md, and the update's answer is lost (the
    memory was gone: it never applied). The memory's versions hold v2, but the server
    records that version as another writer's: ours may have met their bytes (the API's
    no-op) or never arrived. Taken as ours, their delete took the user's file (found by
    the random search, 6 December). So it is asked about again while it may still land;
    then the server's state stands (a.md deleted, nothing brought back) and the user's v2
    is kept as a conflict, which `memfs conflicts restore` brings back."""
    async with harness(tmp_path) as eng:
        await _knowing_its_writer(eng)
        mid = eng.node("/a.md").memory_id
        await _mine_lost_after_their_like_bytes(eng, lambda: eng.op_r_delete("/a.md"))
        first = len(eng.transport.records)
        await eng.pusher.push_pass()          # young: it may still land, so it waits
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions"]
        assert eng.state.doubts and eng.tree_sha("/a.md") == sha256(data("v2"))
        wait_over(eng)
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.pusher.push_pass()
        assert not eng.state.doubts
        event = sub.receive.receive_nowait()  # `memfs watch` hears the conflict
        assert (event.kind, event.path, event.memory_id) == ("conflict", "/a.md", mid)
        [row] = eng.state.conflicts()
        assert (row["path"], row["memory_id"], row["local_sha"], row["remote_sha"]) == (
            "/a.md", mid, sha256(data("v2")), None)
        assert row["reason"] == ("written here, its answer lost; another writer wrote the same "
                                 "bytes to the memory and deleted it since, and the server "
                                 "cannot tell whether ours was applied")
        assert any(n.endswith(f"conflict #{row['id']} at /a.md: could not tell whether its "
                              "write reached the memory another writer has deleted since; the "
                              "server's state is in the tree, yours is kept (memfs conflicts)")
                   for n in eng.ctx.status.warnings)
        assert mid in eng.reconciler.feed.rechecks  # the next poll reads it again
        await eng.op_reconcile()              # their delete stands
        assert eng.user_tree() == {} and eng.server() == {}
        await eng.op_restore("/a.md")
        await eng.op_push()
        assert eng.user_tree() == {"/a.md": sha256(data("v2"))}
        assert [sha for _mid, sha in eng.server().values()] == [sha256(data("v2"))]


async def test_a_create_in_doubt_whose_file_a_like_synced_one_replaced_keeps_that_file(
        tmp_path):
    """c.md's create is in doubt beside their like creation, deleted since (as above; the
    mount has created nothing, so it cannot tell another writer's creation from its
    own); then d.md, synced holding the same bytes, is moved over c.md. The answer takes
    their memory as created and deleted: the moved file keeps d's memory and goes out as
    its move, and nothing needs keeping aside (before, the answer gave the file the
    created memory back, as to a file moved over another and back, `_take_back`; their
    delete then took it, and d's memory went with the move: the moved file was lost;
    found by `push_overtaken` #7 surviving, 6 December)."""
    async with harness(tmp_path) as eng:
        await _create_in_doubt_beside_theirs(eng, lambda: eng.op_r_delete("/c.md"),
                                             before=lambda: _listed(eng, "/d.md", "v1"))
        assert eng.ctx.writer_witness is None
        [(mine, _sha)] = eng.server().values()
        await eng.op_rename("/d.md", "/c.md")
        await eng.pusher.push_pass()
        assert not eng.state.doubts and eng.state.conflicts() == []
        assert eng.state.lookup_path("/c.md").memory_id == mine
        await eng.op_reconcile()              # their delete takes nothing of ours
        age_tombstones(eng)
        await eng.op_push()
        assert eng.user_tree() == {"/c.md": sha256(data("v1"))}
        assert eng.server() == {"/c.md": (mine, sha256(data("v1")))}


async def test_an_update_in_doubt_learns_who_the_mount_writes_as_from_its_own_creation(
        tmp_path):
    """The same, on a mount whose feed never read a creation of its own back (a fresh
    mount, `--no-feed`, a daemon killed first): it does not know yet that it writes as
    MEMFS, so the version of their v2 looked like ours and their delete took the user's
    file (the harness: 6 of 19 runs). The doubt first reads the version a create of its
    own made (one GET, once; a 503 there leaves it for the next pass), learns its
    writer, and keeps the user's v2 as a conflict."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        [witness] = learns_writer(eng)
        await _mine_lost_after_their_like_bytes(eng, lambda: eng.op_r_delete("/a.md"))
        wait_over(eng)
        eng.transport.rules = [FaultRule(lambda r: r.path.endswith(witness[4:]), kind="fail",
                                         origins=("setup",))]
        first = len(eng.transport.records)
        await eng.pusher.push_pass()          # the witness's read fails: all kept
        assert sent(eng, first)[:3] == [f"GET {mid}", "GET memory_versions", witness]
        assert eng.state.doubts and eng.ctx.writer is None
        assert learns_writer(eng) == [witness]
        eng.transport.rules = []
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions", witness]
        assert eng.ctx.writer == MEMFS.to_json() and eng.ctx.writer_witness is None
        assert not eng.state.doubts
        [row] = eng.state.conflicts()
        assert (row["path"], row["memory_id"], row["local_sha"], row["remote_sha"]) == (
            "/a.md", mid, sha256(data("v2")), None)
        await eng.op_reconcile()              # their delete stands, ours is kept aside
        await eng.op_restore("/a.md")
        await eng.op_push()
        assert [sha for _mid, sha in eng.server().values()] == [sha256(data("v2"))]


async def test_an_update_in_doubt_learns_the_writer_from_a_delete_of_its_own(tmp_path):
    """The same on a mount that never created anything: it adopted a.md and b.md from
    another writer and deleted b.md. No update can tell who the mount writes as (one
    that finds its bytes there already is a no-op, its answer naming whoever wrote them),
    but a delete can: b's memory was deleted once, by us, so the doubt reads that
    deletion (one listing, once), learns its writer, and keeps the user's v2 as a
    conflict. Before, such a mount took their version for its own and their delete took
    the user's file (the harness: 6 of 19 runs)."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/a.md", "v1")
        await eng.op_r_create("/b.md", "b")
        await eng.op_reconcile()
        mid, deleted = eng.node("/a.md").memory_id, eng.node("/b.md").memory_id
        assert eng.ctx.writer_witness is None
        await eng.op_unlink("/b.md")
        age_tombstones(eng)
        await eng.op_push()
        assert eng.ctx.writer_witness == ("deleted", deleted)
        await _mine_lost_after_their_like_bytes(eng, lambda: eng.op_r_delete("/a.md"))
        wait_over(eng)
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions", "GET memory_versions"]
        learned = eng.transport.records[first + 2].query
        assert (learned["memory_id"], learned["operation"]) == (deleted, "deleted")
        assert eng.ctx.writer == MEMFS.to_json() and eng.ctx.writer_witness is None
        assert not eng.state.doubts
        [row] = eng.state.conflicts()
        assert (row["path"], row["memory_id"], row["local_sha"], row["remote_sha"]) == (
            "/a.md", mid, sha256(data("v2")), None)


async def test_a_deletion_the_server_no_longer_lists_is_said_and_forgotten(tmp_path, caplog):
    """A witness the server shows nothing of (a store whose history of deleted memories
    was purged): the log says so, and the mount decides as one that cannot learn its
    writer."""
    caplog.set_level(logging.INFO, logger="memfs.sync.common")
    async with harness(tmp_path) as eng:
        eng.ctx.witness(("deleted", "mem_0123456789abcdefghijkl"))
        await eng.ctx.learn_writer_now()
        assert (eng.ctx.writer, eng.ctx.writer_witness) == (None, None)
        assert eng.state.get_meta("writer_witness") is None
        said = [r.getMessage() for r in caplog.records if "learn who" in r.getMessage()]
        assert said == ["the deletion of memory mem_0123456789abcdefghijkl is not on the "
                        "server: cannot learn who this mount writes as"]


async def test_the_witness_of_the_writer_is_kept_for_the_same_key_only(tmp_path):
    """The version to learn the writer from outlives the daemon (a daemon killed before
    it read it), for the key it was made with; learned, the writer makes it moot."""
    async with _daemons(tmp_path) as (state, daemon):
        first = daemon("key-1")
        first.witness(("deleted", "mem_1"))
        first.witness(("version", "memver_2"))      # the first one stays
        again = daemon("key-1")
        assert first.writer_witness == again.writer_witness == ("deleted", "mem_1")
        assert daemon("key-2").writer_witness is None
        again.learn_writer({"type": "api_actor", "api_key_id": "apikey_1"})
        assert state.get_meta("writer_witness") is None  # moot, not kept
        again.witness(("version", "memver_3"))      # known: nothing to witness
        last = daemon("key-1")
        assert (last.writer, last.writer_witness) == (again.writer, None)
        assert "key-1" not in (state.get_meta("writer_witness") or "")
    (tmp_path / "created").mkdir()
    async with _daemons(tmp_path / "created") as (_state, daemon):
        daemon("key-1").witness(("version", "memver_1"))   # a creation's: kept the same
        assert daemon("key-1").writer_witness == ("version", "memver_1")


async def test_a_create_in_doubt_edited_by_them_takes_its_memory_back_after_a_round_trip(
        tmp_path):
    """c.md's create was applied, its answer lost; another writer edits the memory it
    made; c.md is moved over k.md (taking k's memory) and back. Once the request can no
    longer land, the creation (changed since) is taken as ours, and a memory changed,
    not deleted, is given back to the file holding its bytes: c.md is that memory again,
    takes their edit as a plain update, and k's memory is the one deleted (the real
    mount: `test_lost_answer_then_their_edit_during_our_round_trip_over_a_sibling`)."""
    async with harness(tmp_path) as eng:
        await synced(eng, k="k")
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and not r.memory_id,
                                         kind="lose", origins=("setup",), times=1)]
        await eng.op_write("/c.md", "v1")
        await eng.op_push()
        assert eng.state.doubts
        [(created, _sha)] = [v for p, v in eng.server().items() if p == "/c.md"]
        await eng.op_r_edit("/c.md", "theirs")
        await eng.op_rename("/c.md", "/k.md")
        await eng.op_rename("/k.md", "/c.md")
        wait_over(eng)
        await eng.pusher.push_pass()
        assert not eng.state.doubts and eng.state.conflicts() == []
        assert eng.node("/c.md").memory_id == created
        await eng.op_reconcile()
        age_tombstones(eng)
        await eng.op_push()
        assert eng.user_tree() == {"/c.md": sha256(data("theirs"))}
        assert eng.server() == {"/c.md": (created, sha256(data("theirs")))}


async def test_two_doubts_resolved_at_once_read_the_writer_once(tmp_path):
    """a.md's and b.md's updates were applied, their answers lost, and another writer
    edited both since: the pass resolves both doubts at once (`push_concurrency`), and
    each needs to know who the mount writes as; its first creation is read once."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1", b="v1")
        [witness] = learns_writer(eng)
        a = eng.node("/a.md").memory_id
        eng.transport.rules = [
            FaultRule(lambda r: r.method == "POST" and r.memory_id, kind="lose",
                      origins=("setup",), times=2),
            FaultRule(lambda r: r.method == "GET" and r.memory_id == a, origins=("setup",),
                      times=1)]                 # a's doubt waits while b's request goes
        await eng.op_write("/a.md", "v2")
        await eng.op_push()                   # a lost answer ends the pass: one at a time
        await eng.op_write("/b.md", "v2")
        await eng.op_push()
        assert len(eng.state.doubts) == 2
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_r_edit("/b.md", "theirs")
        first, reads, release = len(eng.transport.records), [], trio.Event()
        get_version = eng.ctx.client.get_version

        async def slow_get_version(*args, **kwargs):
            reads.append(args)
            await release.wait()              # a slow read: the other doubt goes on
            return await get_version(*args, **kwargs)

        eng.ctx.client.get_version = slow_get_version
        async with trio.open_nursery() as nursery:
            nursery.start_soon(eng.pusher.push_pass)
            await trio.testing.wait_all_tasks_blocked()
            release.set()
        assert len(reads) == 1 and sent(eng, first).count(witness) == 1
        assert len(sent(eng, first)) == 5
        assert eng.ctx.writer == MEMFS.to_json() and not eng.state.doubts


async def test_a_refused_read_of_the_writers_witness_is_forgotten_and_said(tmp_path, caplog):
    """The witness's read is refused (a 403, not a transient error): the log says so, the
    witness is forgotten (in state.db too), and the doubt decides as a mount that never
    learned its writer: the version holding our write may be another writer's, so once
    the request can no longer land the user's write is kept as a conflict."""
    caplog.set_level(logging.INFO, logger="memfs.sync.common")
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        [witness] = learns_writer(eng)
        await eng.op_r_edit("/a.md", "v3")
        eng.transport.rules = [FaultRule(lambda r: r.path.endswith(witness[4:]),
                                         origins=("setup",))]
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions", witness]
        assert eng.transport.records[first + 2].query["view"] == "basic"  # no content
        assert (eng.ctx.writer, eng.ctx.writer_witness) == (None, None)
        assert eng.state.get_meta("writer_witness") is None  # not read again at a restart
        said = [r.getMessage() for r in caplog.records if "learn who" in r.getMessage()]
        assert said == [f"cannot read version {witness[4:]} to learn who this mount writes "
                        "as: refused by the test (HTTP 403, permission_error)"]
        assert eng.state.doubts and eng.state.conflicts() == []  # young: it may still land
        wait_over(eng)
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions"]  # no witness now
        assert not eng.state.doubts
        [row] = eng.state.conflicts()
        assert (row["local_sha"], row["remote_sha"]) == (sha256(data("v2")),
                                                         sha256(data("v3")))


async def test_a_mount_that_created_nothing_asks_nothing_more(tmp_path, caplog):
    """A mount that only edits memories another writer made has no creation or deletion
    of its own to learn its writer from: its doubts read nothing more, and a version
    holding our write, changed by another writer since, may be theirs (an update that
    finds its bytes there makes no version): once the request can no longer land, their
    state stands and the user's write is kept as a conflict, which says why. Taken as
    ours (before, 6 December), their delete or edit would have taken the user's write
    had it never arrived."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/a.md", "v1")
        await eng.op_reconcile()
        mid = eng.node("/a.md").memory_id
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="lose", origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        await eng.op_r_edit("/a.md", "v3")
        assert eng.state.doubts and (eng.ctx.writer, eng.ctx.writer_witness) == (None, None)
        caplog.set_level(logging.INFO, logger="memfs.sync.common")
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions"]
        assert not [r for r in caplog.records if "learn who" in r.getMessage()]
        assert eng.state.doubts  # young: it may still land, so it waits
        wait_over(eng)
        await eng.pusher.push_pass()
        assert not eng.state.doubts
        [row] = eng.state.conflicts()
        assert (row["path"], row["memory_id"], row["local_sha"], row["remote_sha"]) == (
            "/a.md", mid, sha256(data("v2")), sha256(data("v3")))
        assert row["reason"] == ("written here, its answer lost; the memory held the same "
                                 "bytes, another writer changed it since, and this mount, "
                                 "which has not learned who it writes as, cannot tell "
                                 "whether those bytes were ours")
        await eng.op_reconcile()              # their edit stands
        assert eng.user_tree() == {"/a.md": sha256(data("v3"))}
        await eng.op_restore("/a.md")         # and the user's write comes back on asking
        await eng.op_push()
        assert eng.server()["/a.md"][1] == sha256(data("v2"))


async def test_a_create_in_doubt_learns_the_writer_and_leaves_their_like_creation(tmp_path):
    """c.md's create meets a 503 beside another writer's like creation, deleted since,
    on a mount whose feed has not read its own creation (d.md's) back. The doubt reads
    that creation first, learns it writes as MEMFS, and so knows theirs is not its
    create's: the create, which the server was done with, is sent again. Unknown, their
    creation was taken for ours, and the user's bytes kept as a conflict instead."""
    async with harness(tmp_path) as eng:
        theirs = await _create_in_doubt_beside_theirs(eng, lambda: eng.op_r_delete("/c.md"),
                                                      before=lambda: synced(eng, d="d"))
        first, learn = len(eng.transport.records), learns_writer(eng)
        await eng.pusher.push_pass()
        assert sent(eng, first) == ["GET memory_versions", *learn, "POST memories"]
        assert eng.ctx.writer == MEMFS.to_json() and not eng.state.doubts
        assert eng.state.conflicts() == []
        [(mid, sha)] = [v for p, v in eng.server().items() if p == "/c.md"]
        assert mid != theirs and sha == sha256(data("v1"))


async def test_an_update_in_doubt_meeting_their_like_bytes_since_edited_keeps_ours(tmp_path):
    """The same, their v2 edited to v3 since instead of deleted: their edit stands in the
    tree, the user's v2 is kept as a conflict against it (its sha and version, and the
    reason saying "changed")."""
    async with harness(tmp_path) as eng:
        await _knowing_its_writer(eng)
        mid = eng.node("/a.md").memory_id
        await _mine_lost_after_their_like_bytes(eng, lambda: eng.op_r_edit("/a.md", "v3"))
        wait_over(eng)
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.pusher.push_pass()
        assert not eng.state.doubts
        head = eng.transport.db.get_memory(eng.store_id, mid)
        event = sub.receive.receive_nowait()
        assert (event.kind, event.path, event.version_id) == (
            "conflict", "/a.md", head["memory_version_id"])
        [row] = eng.state.conflicts()
        assert (row["path"], row["memory_id"], row["local_sha"], row["remote_sha"]) == (
            "/a.md", mid, sha256(data("v2")), sha256(data("v3")))
        assert row["reason"] == ("written here, its answer lost; another writer wrote the same "
                                 "bytes to the memory and changed it since, and the server "
                                 "cannot tell whether ours was applied")
        await eng.op_reconcile()              # their edit stands
        assert eng.user_tree() == {"/a.md": sha256(data("v3"))}
