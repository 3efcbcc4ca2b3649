"""One push pass whose request meets another writer's change, checked right after it: a
409 (path taken, by a stranger, by our own pending delete, by a file of ours that moves), a
412 (precondition failed) or a 404 (deleted there), and the reads that follow each; rename
chains and swaps. Held requests (tests/onepass.py `held_pass`) put the other writer's change
between a request and its answer. Each test pins a mutant of the pusher that no test killed
(docs/TESTING.md, "Mutation testing"); two found defects, now fixed.
"""

from __future__ import annotations

import logging
import re

import pytest
import trio
from interleave import RESERVED_PREFIX, FaultRule, age_tombstones
from onepass import (
    data,
    harness,
    held_pass,
    refused_update,
    sent,
    synced,
    update_met_by_404,
)

from memfs.core.nodes import PARK_DIR
from memfs.state.blobs import sha256


async def test_a_failed_precondition_is_a_conflict_in_the_same_pass(tmp_path):
    """Another writer changed a.md; our edit's update meets 409 (precondition failed): in
    that pass the server's version takes the tree and ours is kept as a conflict."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="base")
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_write("/a.md", "mine")
        result = await eng.pusher.push_pass()
        assert (result.pushed, result.progress) == (0, 1)  # a conflict is no push
        assert eng.tree_sha("/a.md") == sha256(data("theirs"))
        rows = eng.state.conflicts()
        assert [(r["path"], r["local_sha"]) for r in rows] == [("/a.md", sha256(data("mine")))]
        assert not eng.state.is_dirty(eng.node("/a.md"))


async def test_an_edit_answered_from_where_another_writer_moved_it_follows_them(tmp_path):
    """Another writer renamed a.md to b.md; our edit (content only, no path sent) is
    answered with the memory at /b.md. Their rename is the reconciler's to follow: the
    base path stays /a.md after the push (taking /b.md would make our /a.md a rename of
    ours, pushed back over theirs), and the next poll moves the file."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()
        await eng.op_r_rename("/a.md", "/b.md")
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        node = eng.node("/a.md")
        assert (node.base_path, node.base_sha) == ("/a.md", sha256(data("v2")))
        await eng.op_poll()
        await eng.op_push()
        assert eng.server() == {"/b.md": (node.memory_id, sha256(data("v2")))}
        assert eng.node("/a.md") is None and eng.tree_sha("/b.md") == sha256(data("v2"))


async def test_a_rename_onto_our_own_pending_delete_sends_that_delete_early(tmp_path):
    """b.md renamed to a.md, which was just unlinked (its delete waits out the delay):
    the rename meets 409 on our own deleted memory, so that delete goes now and the
    rename after it, in the same pass."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        b_mid = eng.node("/b.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_push()
        assert eng.server() == {"/a.md": (b_mid, sha256(data("B")))}
        assert eng.state.tombstones == {} and eng.pusher.pending_total() == 0


async def test_a_failed_precondition_on_our_own_bytes_lands_them(tmp_path):
    """Another writer wrote exactly our new bytes first; we also renamed the file, so our
    update changes something and its precondition is checked: 409 (precondition failed),
    and the memory holds the content we sent. That content is ours, landed: the base
    takes it in that pass, no conflict, and only the rename is left to send."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_write("/a.md", "v2")
        await eng.op_rename("/a.md", "/b.md")
        first = len(eng.transport.records)
        await eng.op_push()
        node = eng.node("/b.md")
        assert "POST" in sent(eng, first)[0] and eng.state.conflicts() == []
        assert (node.base_path, node.base_sha) == ("/a.md", sha256(data("v2")))
        await eng.op_push()
        assert eng.server() == {"/b.md": (node.memory_id, sha256(data("v2")))}


async def test_a_rename_into_a_place_another_rename_frees_goes_next_pass(tmp_path):
    """b.md renamed to c.md, then a.md to b.md. If a's rename goes first it meets 409 at
    /b.md, held by our own b, which moves away (a chain, not a cycle): a waits for the
    next pass, and nothing is logged as a failure."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        a_mid, b_mid = eng.node("/a.md").memory_id, eng.node("/b.md").memory_id
        await eng.op_rename("/b.md", "/c.md")
        await eng.op_rename("/a.md", "/b.md")
        await eng.op_push()
        await eng.op_push()
        assert eng.server() == {"/b.md": (a_mid, sha256(data("A"))),
                                "/c.md": (b_mid, sha256(data("B")))}
        assert eng.ctx.status.last_error is None


async def test_a_rename_blocked_by_one_of_ours_moving_to_a_free_place_waits(tmp_path):
    """b.md renamed to c.md, then a.md to b.md; the server refuses b's rename for now.
    a's rename meets 409 at /b.md, held by our own b, which waits to move to /c.md,
    a place no file of ours is leaving (a chain that ends, not a cycle): a waits for
    b, nothing is parked, nothing is logged as a failure; once b's refusal is over,
    both land."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        a_mid, b_mid = eng.node("/a.md").memory_id, eng.node("/b.md").memory_id
        await eng.op_rename("/b.md", "/c.md")
        await eng.op_rename("/a.md", "/b.md")
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id == b_mid,
                                         origins=("setup",), times=1)]
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sorted(sent(eng, first)) == sorted([f"POST {a_mid}", f"POST {b_mid}"])
        assert [r.status for r in eng.transport.records[first:]
                if r.memory_id == a_mid] == [409]
        assert (result.pushed, result.progress) == (0, 1)  # b's refusal, a waits
        assert eng.ctx.status.last_error is None
        a = eng.node("/b.md")
        assert (a.memory_id, a.fail_count, a.error, a.base_path) == (a_mid, 0, None, "/a.md")
        assert eng.server() == {"/a.md": (a_mid, sha256(data("A"))),
                                "/b.md": (b_mid, sha256(data("B")))}
        await eng.pusher.flush(60.0)
        assert eng.server() == {"/b.md": (a_mid, sha256(data("A"))),
                                "/c.md": (b_mid, sha256(data("B")))}
        assert eng.ctx.status.last_error is None and eng.state.conflicts() == []


async def test_a_create_whose_path_another_writer_took_after_an_unlink_sends_nothing(
        tmp_path):
    """a.md's create is on its way; meanwhile it is unlinked here and another writer
    creates /a.md. The create meets 409 (path taken): the file is gone, so there is
    nothing to settle: no read of their memory, no conflict, nothing logged, and their
    a.md comes to the tree with the next listing."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "mine")
        first = len(eng.transport.records)

        async def meanwhile() -> None:
            await eng.op_unlink("/a.md")
            await eng.op_r_create("/a.md", "theirs")

        result = await held_pass(eng, "before", meanwhile)
        assert sent(eng, first) == ["POST memories"]
        assert eng.transport.records[first].status == 409
        assert (result.pushed, result.progress, result.left) == (0, 0, 0)
        assert eng.ctx.status.last_error is None and eng.state.conflicts() == []
        assert eng.node("/a.md") is None and not eng.state.doubts
        [(mid, sha)] = eng.server().values()
        await eng.op_reconcile()
        assert (eng.node("/a.md").memory_id, eng.tree_sha("/a.md")) == (mid, sha)


async def test_a_create_meets_a_memory_deleted_before_it_is_read_goes_next_pass(tmp_path):
    """a.md's create meets 409: another writer's memory holds /a.md. Before the pusher
    reads that memory, they delete it (the read meets 404): the path is free again, so
    there is nothing to settle (no conflict, nothing logged) and the next pass creates
    a.md."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_r_create("/a.md", "theirs")
        [(their_mid, _sha)] = eng.server().values()
        await eng.op_write("/a.md", "mine")
        first = len(eng.transport.records)
        result = await held_pass(eng, "after", lambda: eng.op_r_delete("/a.md"))
        assert sent(eng, first) == ["POST memories", f"GET {their_mid}"]
        assert [r.status for r in eng.transport.records[first:]] == [409, 404]
        assert (result.pushed, result.progress) == (0, 0)
        assert eng.ctx.status.last_error is None and eng.state.conflicts() == []
        node = eng.node("/a.md")
        assert (node.memory_id, node.fail_count, node.sha) == (None, 0, sha256(data("mine")))
        result = await eng.pusher.push_pass()
        assert result.pushed == 1
        assert eng.server() == {"/a.md": (eng.node("/a.md").memory_id, sha256(data("mine")))}


async def test_a_create_meets_a_memory_already_holding_its_bytes_and_takes_it(tmp_path):
    """a.md written here; before its create goes, another writer creates /a.md with the
    very same bytes (no listing in between). The create meets 409 (path taken) on a memory
    holding what it sent: that memory becomes the file's, counted as pushed, with no
    conflict and nothing left to send."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/a.md", "same")
        await eng.op_r_create("/a.md", "same")
        [(mid, _sha)] = eng.server().values()
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == ["POST memories", f"GET {mid}"]
        assert (result.pushed, result.progress) == (1, 1)
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_sha) == (mid, sha256(data("same")))
        assert eng.state.conflicts() == [] and eng.pusher.pending_total() == 0


async def test_a_create_meets_a_memory_holding_what_an_earlier_create_sent(tmp_path):
    """a.md's create of v1 was refused (403); another writer then creates /a.md holding
    v1, the bytes we sent; a.md is written v2 here. Its create meets 409 (path taken) on
    a memory holding what our earlier create sent: taken as ours (no conflict), and v2
    goes over it."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", origins=("setup",),
                                         times=1)]
        await eng.op_write("/a.md", "v1")
        await eng.op_push()
        await eng.op_r_create("/a.md", "v1")
        [(mid, _sha)] = eng.server().values()
        await eng.op_write("/a.md", "v2")
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == ["POST memories", f"GET {mid}"]
        assert (result.pushed, result.progress) == (1, 1)
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_sha) == (mid, sha256(data("v1")))
        assert eng.state.conflicts() == []
        await eng.op_push()
        assert eng.server() == {"/a.md": (mid, sha256(data("v2")))}


async def test_an_update_meets_a_memory_holding_what_an_earlier_update_sent(tmp_path):
    """a.md's update to v2 was refused (403); another writer then writes v2, the bytes we
    sent; a.md is written v3 here. Its update (expecting v1) meets 409 (precondition
    failed) on a memory holding what our earlier update sent: taken as ours (no
    conflict), and v3 goes over it."""
    async with harness(tmp_path) as eng:
        mid = await refused_update(eng)
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_write("/a.md", "v3")
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"POST {mid}", f"GET {mid}"]
        assert (result.pushed, result.progress) == (1, 1)
        assert eng.node("/a.md").base_sha == sha256(data("v2"))
        assert eng.state.conflicts() == []
        await eng.op_push()
        assert eng.server() == {"/a.md": (mid, sha256(data("v3")))}


async def test_a_delete_meets_our_refused_bytes_while_the_file_comes_back(tmp_path):
    """a.md's update to v2 was refused (403: it waits); then a.md is unlinked, and another
    writer writes v2, the very bytes we last sent. The delete (expecting v1) meets 409:
    the memory holds what we sent, ours. Meanwhile a.md is written again here (it takes
    back its memory): the delete is not sent again, nothing is logged as a bug, and the
    new a.md goes over v2 with no conflict."""
    async with harness(tmp_path) as eng:
        mid = await refused_update(eng)
        assert eng.node("/a.md").sent_sha == sha256(data("v2"))  # (the last request's)
        await eng.op_unlink("/a.md")
        await eng.op_r_edit("/a.md", "v2")
        age_tombstones(eng)
        first = len(eng.transport.records)
        result = await held_pass(eng, "before", lambda: eng.op_write("/a.md", "v3"))
        assert sent(eng, first) == [f"DELETE {mid}", f"GET {mid}"]
        assert (result.pushed, result.progress) == (0, 1)
        assert eng.ctx.status.last_error is None and eng.state.tombstones == {}
        assert eng.node("/a.md").memory_id == mid
        await eng.pusher.flush(60.0)
        assert eng.server() == {"/a.md": (mid, sha256(data("v3")))}
        assert eng.state.conflicts() == [] and eng.ctx.status.last_error is None


async def test_a_delete_of_a_memory_changed_there_is_dropped_and_said_so(tmp_path):
    """a.md unlinked here; another writer changes it before the delete goes out (a
    flush sends it at once). The delete, sent with the sha we deleted, is refused; the
    pending delete is dropped, the memory stays and `memfs status` says so."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_r_edit("/a.md", "v2")
        await eng.pusher.push_pass(flush=True)
        assert eng.state.tombstones == {}
        assert eng.server() == {"/a.md": (mid, sha256(data("v2")))}
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == \
            ["/a.md was deleted here but changed on the server; restoring the server's version"]


@pytest.mark.parametrize("settled_by", ["reconcile", "push"])
@pytest.mark.parametrize("new_file", ["while_the_delete_is_out", "after_it"])
async def test_a_new_file_where_a_refused_delete_stood_says_why_it_conflicts(tmp_path,
                                                                          new_file,
                                                                          settled_by):
    """As above, and a.md is made again here, while the DELETE is out (so it cannot take
    the memory back) or after it was refused. The server's a.md wins the path (at the
    next listing, or when the new file's create meets it) and the new file is kept as a
    conflict whose reason says what happened: deleted here but changed on the server.
    Before, it said another writer had created the same path: a memory this mount held
    is no new creation of theirs."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_r_edit("/a.md", "v2")
        age_tombstones(eng)
        if new_file == "after_it":
            await eng.pusher.push_pass()
            await eng.op_write("/a.md", "mine")
        else:
            await held_pass(eng, "before", lambda: eng.op_write("/a.md", "mine"))
        assert eng.state.tombstones == {}
        await (eng.op_reconcile() if settled_by == "reconcile" else eng.op_push())
        [row] = eng.state.conflicts()
        assert (row["path"], row["memory_id"], row["local_sha"], row["reason"]) == (
            "/a.md", mid, sha256(data("mine")), "deleted here but changed on the server")
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert eng.server() == {"/a.md": (mid, sha256(data("v2")))}
        assert eng.ctx.status.warnings[-1].split(" ", 1)[1] == (
            f"conflict #{row['id']} at /a.md: deleted here but changed on the server; the "
            "server's version is in the tree, yours is kept (memfs conflicts)")


async def test_a_delete_that_meets_a_change_whose_read_is_refused_waits(tmp_path, caplog):
    """As above, but the read of the memory that follows the 409 is refused (403). Nothing
    was deleted (the 409 said so): the pending delete waits with the reason (revivable
    again), and no error is logged as a bug. Before, the refusal escaped the delete
    ("push of Tombstone(...) failed", found by Hypothesis on 4 December evening)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_r_edit("/a.md", "v2")
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id == mid,
                                         origins=("setup",), times=1)]
        caplog.set_level(logging.ERROR, logger="memfs")
        result = await eng.pusher.push_pass(flush=True)
        assert [r.getMessage() for r in caplog.records] == []
        assert result.pushed == 0                          # nothing was deleted
        tomb = eng.state.tombstones[mid]
        assert tomb.delete_sent_at is None and "PermissionDeniedError" in tomb.error
        assert eng.ctx.status.warnings[-1].split(" ", 1)[1] == (
            "cannot delete /a.md: refused by the test (HTTP 403, permission_error); it waits, "
            "the rest goes on")
        assert eng.server() == {"/a.md": (mid, sha256(data("v2")))}


async def test_a_delete_sent_early_for_a_rename_says_so_in_the_log(tmp_path, caplog):
    """The log names the memory deleted before its delay was out, its path, and the path
    that needed its place."""
    caplog.set_level(logging.INFO, logger="memfs.sync.pusher")
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        a_mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_push()
        assert f"deleted {a_mid} (/a.md) early: /a.md needs its place" in caplog.messages


async def test_a_rename_onto_our_own_delete_waits_and_says_why_when_deletes_are_off(tmp_path):
    """As test_a_rename_onto_our_own_pending_delete_sends_that_delete_early, with
    `--deletes log-only`: the delete is not sent early; the rename waits, and `memfs
    status` says what holds its place and why."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        a_mid, b_mid = eng.node("/a.md").memory_id, eng.node("/b.md").memory_id
        eng.ctx.options.deletes = "log-only"
        await eng.op_unlink("/a.md")
        await eng.op_rename("/b.md", "/a.md")
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"POST {b_mid}"] and result.pushed == 0
        assert eng.server() == {"/a.md": (a_mid, sha256(data("A"))),
                                "/b.md": (b_mid, sha256(data("B")))}
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "/a.md waits: the server still holds /a.md (deleted here) and deletes are "
            "log-only"]


async def test_a_rename_onto_our_delete_whose_file_is_unlinked_meanwhile_goes_on(tmp_path):
    """b.md renamed to a.md, which was just unlinked: the rename meets 409 on our own
    deleted memory, whose delete goes at once; while it is under way the new a.md is
    unlinked too. The pass counts that file as moved on and sends nothing more for it
    (its own delete waits out the delay); nothing is logged as a bug."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        b_mid = eng.node("/b.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_rename("/b.md", "/a.md")
        first = len(eng.transport.records)
        result = await held_pass(eng, "before", lambda: eng.op_unlink("/a.md"), index=1)
        assert (result.pushed, result.progress) == (0, 1)
        assert len(eng.transport.records) - first == 2 and eng.ctx.status.last_error is None
        assert list(eng.state.tombstones) == [b_mid]
        assert eng.server() == {"/b.md": (b_mid, sha256(data("B")))}


async def test_a_rename_onto_a_path_a_stranger_took_there_is_a_conflict_saying_so(tmp_path):
    """a.md renamed to b.md here while another writer creates /b.md: their b.md wins the
    path, ours is kept as a conflict that says why."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        await eng.op_rename("/a.md", "/b.md")
        await eng.op_r_create("/b.md", "theirs")
        await eng.op_push()
        assert [r["reason"] for r in eng.state.conflicts()] == \
            ["another memory holds this path on the server"]


async def test_a_swap_parks_one_memory_and_says_so_in_the_log(tmp_path, caplog):
    """a.md and b.md swapped: the log names the memory moved out of the way and the
    private place it was parked at."""
    caplog.set_level(logging.INFO, logger="memfs.sync.pusher")
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        mids = {eng.node("/a.md").memory_id, eng.node("/b.md").memory_id}
        await eng.op_rename("/a.md", "/c.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_rename("/c.md", "/b.md")
        await eng.op_push()
        parked = [m.split() for m in caplog.messages if m.startswith("rename cycle: parked ")]
        assert len(parked) == 1 and parked[0][3] in mids
        assert parked[0][5].startswith(f"{PARK_DIR}/{parked[0][3]}.")


async def test_a_swap_whose_park_is_refused_makes_the_file_wait_and_says_why(tmp_path):
    """a.md and b.md swapped; breaking the cycle moves a memory to a private place first
    (its park), which the server refuses (403): that file waits with the refusal as its
    error and the status says so; nothing is logged as a bug, the server is unchanged."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        before = eng.server()
        await eng.op_rename("/a.md", "/c.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_rename("/c.md", "/b.md")
        eng.transport.rules = [FaultRule(
            lambda r: r.method == "POST"
            and str((r.body or {}).get("path", "")).startswith(RESERVED_PREFIX),
            origins=("setup",))]
        first = len(eng.transport.records)
        await eng.op_push()
        parks = [r for r in eng.transport.records[first:] if r.status == 403]
        assert parks and eng.server() == before
        waiting = [n for n in eng.state.files() if n.error]
        assert waiting and all(n.fail_count == 1 and n.error.startswith("PermissionDenied")
                               and "refused by the test" in n.error for n in waiting)
        assert eng.ctx.status.last_error is None
        notes = [n.split(" ", 1)[1] for n in eng.ctx.status.warnings]  # (after the time)
        assert sorted(notes) == sorted(
            f"cannot push {eng.state.path_of(n)}: refused by the test (HTTP 403, "
            "permission_error); it waits, the rest goes on" for n in waiting)


async def test_a_swap_blocked_by_a_memory_at_the_park_directory_says_why(tmp_path):
    """a.md and b.md swapped while another client holds a memory at /.memfs-moving itself
    (the server takes that path; mounts hide it): every park meets 409 on it. The files
    wait with backoff and the status says what blocks them and the way out; they stalled
    silently before, every pass, across remounts (found by a helper)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        await eng.op_r_create(PARK_DIR, "theirs")
        before = eng.server()
        await eng.op_rename("/a.md", "/c.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_rename("/c.md", "/b.md")
        await eng.pusher.push_pass()
        assert eng.server() == before
        waiting = sorted(eng.state.path_of(n) for n in eng.state.files()
                         if n.error and n.error.startswith("PathConflictError: "))
        assert waiting == ["/a.md", "/b.md"]  # each of the cycle tried to park
        notes = [w.split(" ", 1)[1] for w in eng.ctx.status.warnings]
        assert sorted(n.split(":", 1)[0] for n in notes) == ["cannot push /a.md",
                                                             "cannot push /b.md"]
        assert all(n.endswith(
            f"; it waits, the rest goes on (another client's memory at {PARK_DIR}, where memfs "
            "parks a memory while a cycle of renames goes out, blocks the cycle: move or "
            "delete that memory)") for n in notes), notes
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert not [r for r in eng.transport.records[first:]
                    if str((r.body or {}).get("path", "")).startswith(PARK_DIR)]  # it waits


async def test_a_conflict_met_while_the_file_has_unsaved_writes_waits_and_says_why(tmp_path):
    """a.md's update (v2) goes out while another writer's edit is on the server and, by
    the time its 409 comes back, a.md is open here with unsaved writes: the conflict
    waits for the close, nothing of the file is touched, and the file's error says why."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_write("/a.md", "v2")

        async def meanwhile() -> None:
            await eng.op_open_write("/a.md", "unsaved")

        result = await held_pass(eng, "before", meanwhile)
        assert (result.pushed, result.progress) == (0, 0)
        node = eng.node("/a.md")
        assert node.error == ("changed on the server while open here with unsaved writes; "
                              "settles after the close")
        assert node.base_sha == sha256(data("v1")) and eng.state.conflicts() == []
        assert eng.server() == {"/a.md": (mid, sha256(data("theirs")))}
        await eng.op_close("/a.md")


async def test_a_file_edited_here_and_deleted_there_is_created_again_and_said_so(tmp_path):
    """Another writer deleted a.md's memory; a.md is edited here. Its update meets 404,
    confirmed by a GET: in that pass the file lets go of the memory and `memfs status`
    says it is re-created; the next pass creates it."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_r_delete("/a.md")
        await eng.op_write("/a.md", "v2")
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"POST {mid}", f"GET {mid}"]
        assert (result.pushed, result.progress) == (0, 1)
        assert eng.node("/a.md").memory_id is None and eng.ctx.status.last_error is None
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "/a.md was deleted on the server but edited here; re-creating it"]
        await eng.op_push()
        new = eng.node("/a.md").memory_id
        assert new != mid and eng.server() == {"/a.md": (new, sha256(data("v2")))}


async def test_an_edit_refused_then_found_deleted_there_becomes_a_create(tmp_path):
    """a.md edited here while another writer edits it (our update is refused: the
    server moved) and then deletes it before we read it: the file is the only copy,
    it becomes a new file to create and `memfs status` says so; nothing is a bug."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_write("/a.md", "mine")
        await eng.op_r_edit("/a.md", "theirs")
        await held_pass(eng, "before", lambda: eng.op_r_delete("/a.md"), index=1)
        assert eng.node("/a.md").memory_id is None and eng.ctx.status.last_error is None
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == \
            ["/a.md was deleted on the server but edited here; re-creating it"]


async def test_a_refused_read_after_a_404_makes_the_file_wait_like_any_refusal(tmp_path):
    """a.md edited here and deleted there; reading the memory back after the 404 is
    refused (403). Like any other 403 on a push, the file waits (backoff) with the
    refusal as its error (it was logged as a bug and retried every pass)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_write("/a.md", "v2")
        await eng.op_r_delete("/a.md")
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id,
                                         origins=("setup",))]
        await eng.op_push()
        node = eng.node("/a.md")
        assert node.fail_count == 1 and (node.error or "").startswith("PermissionDenied")
        assert eng.ctx.status.last_error is None


# -- wave w1a --


async def test_a_park_of_a_memory_changed_there_meanwhile_is_not_sent_over_it(tmp_path):
    """a.md and b.md swapped, one request at a time; the first rename meets 409 and its
    memory is to be parked, but another writer edits that memory before the park goes
    out. The park is preconditioned on our base, so the server refuses it (409): the
    edited memory stays where it is, nothing of ours lands in the park place over it,
    and the pass does not count the park as a push."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        await eng.op_rename("/a.md", "/c.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_rename("/c.md", "/b.md")
        eng.ctx.options.push_concurrency = 1
        parks = []

        async def meanwhile() -> None:
            rec = eng.transport.holds[1].rec
            assert str(rec.body["path"]).startswith(f"{PARK_DIR}/{rec.memory_id}.")
            parks.append(rec)
            [path] = [p for p, (m, _) in eng.server().items() if m == rec.memory_id]
            await eng.op_r_edit(path, "theirs")

        result = await held_pass(eng, "before", meanwhile, index=1)
        [park] = parks
        assert park.status == 409
        [(path, sha)] = [(p, s) for p, (m, s) in eng.server().items() if m == park.memory_id]
        assert not path.startswith(PARK_DIR) and sha == sha256(data("theirs"))
        # The refused park counts for nothing (the other file's rename is the one push).
        assert (result.pushed, result.progress, result.left) == (1, 1, 2)


# -- wave w3a --


async def test_a_delete_meets_our_own_unheard_bytes_and_goes_again_in_the_same_pass(tmp_path):
    """a.md's update to v2 was refused (403: it waits); then a.md is unlinked, and another
    writer writes v2, the very bytes we last sent. The delete (expecting v1) is refused;
    the memory holds what we sent, ours: in that same pass the delete goes again,
    expecting v2, and the memory is gone from the server."""
    async with harness(tmp_path) as eng:
        mid = await refused_update(eng)
        await eng.op_unlink("/a.md")
        await eng.op_r_edit("/a.md", "v2")
        age_tombstones(eng)
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"DELETE {mid}", f"GET {mid}", f"DELETE {mid}"]
        assert [r.status for r in eng.transport.records[first:]] == [409, 200, 200]
        assert (result.pushed, result.progress, result.left) == (1, 1, 0)
        assert eng.server() == {} and eng.state.tombstones == {}
        assert eng.state.conflicts() == [] and eng.ctx.status.last_error is None
# -- wave w2a --


async def test_an_update_met_by_a_404_of_a_memory_still_there_is_tried_again(tmp_path):
    """a.md's update is answered 404, yet reading the memory back finds it (a passing
    fault of the server): nothing happened in that pass (no push counted, no progress,
    which would keep a flush going; nothing noted), the file keeps its memory and stays
    pending; the next pass pushes it."""
    async with harness(tmp_path) as eng:
        mid = await update_met_by_404(eng)
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"POST {mid}", f"GET {mid}"]
        assert (result.pushed, result.progress, result.left) == (0, 0, 1)
        assert eng.node("/a.md").memory_id == mid and eng.ctx.status.warnings == []
        result = await eng.pusher.push_pass()
        assert result.pushed == 1 and eng.server() == {"/a.md": (mid, sha256(data("v2")))}


async def test_a_swap_parks_one_memory_in_its_pass_at_a_short_private_name(tmp_path):
    """a.md and b.md swapped: the pass moves one memory to a private place, named after
    it with 8 random hex digits, and takes the answer in that pass (the memory's base is
    its park, nothing fails as a bug). The park and the other file's rename count as
    pushed; the parked file's own rename is left for the next pass."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        await eng.op_rename("/a.md", "/c.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_rename("/c.md", "/b.md")
        eng.ctx.options.push_concurrency = 1
        result = await eng.pusher.push_pass()
        [(park, mid)] = [(p, m) for p, (m, _) in eng.server().items() if p.startswith(PARK_DIR)]
        assert re.fullmatch(re.escape(f"{PARK_DIR}/{mid}.") + "[0-9a-f]{8}", park)
        [node] = [n for n in eng.state.files() if n.memory_id == mid]
        assert node.base_path == park and eng.ctx.status.last_error is None
        assert (result.pushed, result.progress, result.left) == (2, 2, 1)


# -- wave w4a --


@pytest.mark.timeout(20)  # a walk that never ends is cut here, not at the suite's 300 s
async def test_a_rename_meets_one_of_ours_that_is_in_a_swap_of_its_own_and_waits(tmp_path):
    """b.md and c.md swapped here (their renames refused for now: they wait); a.md
    renamed to x.md, while another writer moved b's memory to /x.md. a's rename meets
    409 at /x.md, held by our own b, which is in a cycle with c, not with a: the walk
    along the moves ends (b, c, b again) without parking a; a waits, nothing else is
    sent, nothing is logged as a failure."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B", c="C")
        a_mid, b_mid, c_mid = (eng.node(f"/{n}.md").memory_id for n in "abc")
        await eng.op_rename("/b.md", "/t.md")
        await eng.op_rename("/c.md", "/b.md")
        await eng.op_rename("/t.md", "/c.md")
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST"
                                         and r.memory_id in (b_mid, c_mid), origins=("setup",))]
        await eng.op_push()  # b and c refused: they wait out their backoff
        eng.transport.rules = []
        await eng.op_rename("/a.md", "/x.md")
        await eng.op_r_rename("/b.md", "/x.md")
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"POST {a_mid}"]
        assert eng.transport.records[first].status == 409
        assert (result.pushed, result.progress) == (0, 0)
        a = eng.node("/x.md")
        assert (a.memory_id, a.base_path, a.error) == (a_mid, "/a.md", None)
        assert eng.ctx.status.last_error is None and not eng.state.parks
        assert eng.server() == {"/a.md": (a_mid, sha256(data("A"))),
                                "/x.md": (b_mid, sha256(data("B"))),
                                "/c.md": (c_mid, sha256(data("C")))}


async def test_a_parked_memory_is_told_to_the_feed_as_our_own_write(tmp_path):
    """a.md and b.md swapped: one memory is parked at a private place. The park is our
    own write: the change feed is told its version (the next poll does not take it for
    another writer's), and the pass counts it, with nothing logged as a failure."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        await eng.op_rename("/a.md", "/c.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_rename("/c.md", "/b.md")
        eng.ctx.options.push_concurrency = 1  # the first rename meets 409, then parks
        own = set(eng.pusher.feed.own)
        result = await eng.pusher.push_pass()
        server = eng.server()
        assert len(server) == 2 and len([p for p in server if p.startswith(f"{PARK_DIR}/")]) == 1
        assert set(eng.pusher.feed.own) - own == {  # the park's version, and the rename's
            eng.db.get_memory(eng.store_id, m)["memory_version_id"] for m, _ in server.values()}
        assert (result.pushed, result.progress, result.left) == (2, 2, 1)
        assert eng.ctx.status.last_error is None


# -- wave w6a --


async def test_a_delete_refused_for_a_change_there_reads_its_head_and_has_the_feed_name_it(
        tmp_path):
    """As test_a_delete_of_a_memory_changed_there_is_dropped_and_said_so: the refused
    delete is followed by one read of the memory's head (`view=basic`: not its content,
    which the reconciler fetches if it needs it), then the change feed is told to name
    the memory on its next poll (it may have shown that version already) and the
    reconciler is woken; the pass counts a step, not a push, and no bug is recorded."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_r_edit("/a.md", "v2")
        assert eng.pusher.feed is not None and not eng.pusher.feed.rechecks
        eng.ctx.reconcile_wakeup = trio.Event()  # (as the reconciler renews it)
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass(flush=True)
        assert sent(eng, first) == [f"DELETE {mid}", f"GET {mid}"]
        assert eng.transport.records[first + 1].query["view"] == "basic"
        assert (result.pushed, result.progress, result.left) == (0, 1, 0)
        assert eng.pusher.feed.rechecks == {mid}
        assert eng.ctx.reconcile_wakeup.is_set() and eng.ctx.status.last_error is None



# -- wave w7a --


async def test_a_create_meeting_another_writers_new_memory_is_a_conflict_saying_so(tmp_path):
    """a.md made here (not pushed yet) while another writer creates /a.md with other
    bytes: our create meets their memory at the path, which wins it; ours is kept as a
    conflict whose reason says another writer created the same path."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/a.md", "mine")
        await eng.op_r_create("/a.md", "theirs")
        theirs = eng.server()["/a.md"]
        await eng.op_push()
        assert [r["reason"] for r in eng.state.conflicts()] == \
            ["another writer created the same path"]
        assert eng.server()["/a.md"] == theirs and eng.ctx.status.last_error is None


async def test_a_park_of_a_memory_another_writer_just_edited_is_refused(tmp_path):
    """a.md and b.md swapped here; breaking the cycle parks one memory, and another writer
    edits that memory (still at its old path there) just before the park reaches the
    server. The park carries the base it moves, so it is refused: their edit stays at
    its path for every other client (not moved to a private place) and the next pass
    meets the edit through the normal path."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        await eng.op_rename("/a.md", "/c.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_rename("/c.md", "/b.md")
        first = len(eng.transport.records)
        parked: list[tuple[str, str]] = []

        async def their_edit() -> None:  # (which memory is parked first is up to trio)
            mid = eng.transport.holds[1].rec.path.rsplit("/", 1)[1]
            [path] = [p for p, (m, _) in eng.server().items() if m == mid]
            parked.append((mid, path))
            await eng.op_r_edit(path, "theirs")

        await held_pass(eng, "before", their_edit, index=1)
        [(mid, path)] = parked
        park = eng.transport.records[first + 1]
        assert park.body["path"].startswith(f"{PARK_DIR}/{mid}.")
        base = sha256(data({"/a.md": "A", "/b.md": "B"}[path]))
        assert park.body.get("precondition") == {"type": "content_sha256",
                                                  "content_sha256": base}
        assert park.status == 409
        assert eng.server()[path] == (mid, sha256(data("theirs")))
        [node] = [n for n in eng.state.files() if n.memory_id == mid]
        assert node.base_path == path



# -- wave w8a --


async def test_a_failed_precondition_on_exactly_the_bytes_it_sent_counts_as_pushed(tmp_path):
    """As test_a_failed_precondition_on_our_own_bytes_lands_them (another writer wrote
    exactly our new bytes; our update, which also renames, meets 409): the memory holds
    what this very request sent, so the pass counts a push, reads only the memory's
    head, and settles no conflict (no read of the content, no conflict row)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_write("/a.md", "v2")
        await eng.op_rename("/a.md", "/b.md")
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"POST {mid}", f"GET {mid}"]
        assert [r.status for r in eng.transport.records[first:]] == [409, 200]
        assert (result.pushed, result.progress) == (1, 1)
        assert eng.state.conflicts() == [] and eng.ctx.status.warnings == []


async def test_a_create_meets_another_writers_memory_at_its_path_and_is_kept_as_a_conflict(
        tmp_path):
    """a.md written here; before its create goes, another writer creates /a.md with other
    bytes. The create meets 409 (path taken) on their memory: in that pass their a.md
    takes the tree (the file holds their memory), ours is kept as a conflict, and the
    conflict and `memfs status` both say why: another writer created the same path."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/a.md", "mine")
        await eng.op_r_create("/a.md", "theirs")
        [(their_mid, _sha)] = eng.server().values()
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == ["POST memories", f"GET {their_mid}", f"GET {their_mid}"]
        assert (result.pushed, result.progress) == (0, 1)
        node = eng.node("/a.md")
        assert (node.memory_id, eng.tree_sha("/a.md")) == (their_mid, sha256(data("theirs")))
        [row] = eng.state.conflicts()
        assert (row["path"], row["local_sha"], row["reason"]) == (
            "/a.md", sha256(data("mine")), "another writer created the same path")
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            f"conflict #{row['id']} at /a.md: another writer created the same path; the "
            "server's version is in the tree, yours is kept (memfs conflicts)"]
        assert eng.ctx.status.last_error is None and eng.pusher.pending_total() == 0


# -- wave w10a --


async def test_a_failed_precondition_reads_the_head_and_the_conflict_says_why(tmp_path):
    """Another writer changed a.md; our edit's update meets 409 (precondition failed). The
    pass reads the memory's head (`view=basic`: not its content) to tell their change from
    a lost answer of ours; it is theirs, so ours is kept as a conflict whose reason (in
    `memfs conflicts` and `memfs status`) says both sides changed it at the same time."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="base")
        mid = eng.node("/a.md").memory_id
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_write("/a.md", "mine")
        first = len(eng.transport.records)
        await eng.op_push()
        assert sent(eng, first)[:2] == [f"POST {mid}", f"GET {mid}"]
        assert eng.transport.records[first + 1].query["view"] == "basic"
        [row] = eng.state.conflicts()
        assert row["reason"] == "changed on the server and here at the same time"
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            f"conflict #{row['id']} at /a.md: changed on the server and here at the same "
            "time; the server's version is in the tree, yours is kept (memfs conflicts)"]


async def test_a_create_under_a_strangers_file_path_waits_and_says_why(tmp_path):
    """d/x.md made here; another writer creates a memory at /d (a file where we have a
    directory). Our create meets 409 on their memory, an ancestor of our path, not our
    path itself: the file waits (its error and `memfs status` say why), no conflict, and
    the pass goes on without a bug."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/d/x.md", "mine")
        await eng.op_r_create("/d", "theirs")
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == ["POST memories"]
        assert (result.pushed, result.progress) == (0, 1)
        node = eng.node("/d/x.md")
        why = ("path conflict: '/d' is a memory, so '/d/x.md' cannot be below it "
               "(HTTP 409, memory_path_conflict_error)")
        assert (node.memory_id, node.error) == (None, f"PathConflictError: {why}")
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            f"cannot push /d/x.md: {why}; it waits, the rest goes on (the server has a "
            "file at /d, where this mount has a directory: rename one of them)"]
        assert eng.state.conflicts() == [] and eng.ctx.status.last_error is None


async def test_a_create_over_a_strangers_directory_waits_and_says_the_way_out(tmp_path):
    """d made here as a file; another writer creates /d/x.md (a directory where we have
    a file). Our create meets 409 on a memory below its path: the file waits, and the
    warning says what lets it through, a rename (the 409 alone named no way out; found
    by a helper)."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/d", "mine")
        await eng.op_r_create("/d/x.md", "theirs")
        result = await eng.pusher.push_pass()
        assert (result.pushed, result.progress) == (0, 1)
        assert eng.node("/d").error.startswith("PathConflictError: ")
        [note] = [w.split(" ", 1)[1] for w in eng.ctx.status.warnings]
        assert note.startswith("cannot push /d: ") and note.endswith(
            "; it waits, the rest goes on (the server has /d/x.md below /d, where this "
            "mount has a file: rename one of them)"), note
        assert eng.state.conflicts() == []


async def test_a_delete_refused_for_a_change_then_deleted_there_is_done(tmp_path):
    """a.md unlinked here; another writer edits it, so our delete meets 409 (precondition
    failed); before the read that follows, they delete it too. The memory is gone, as we
    wanted: the pending delete is settled, counted as pushed, and no bug is recorded."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_r_edit("/a.md", "v2")
        first = len(eng.transport.records)

        async def their_delete() -> None:
            await eng.op_r_delete("/a.md")

        result = await held_pass(eng, "before", their_delete, index=1,
                                 action=lambda: eng.pusher.push_pass(flush=True))
        assert sent(eng, first) == [f"DELETE {mid}", f"GET {mid}"]
        assert [r.status for r in eng.transport.records[first:]] == [409, 404]
        assert (result.pushed, result.progress, result.left) == (1, 1, 0)
        assert eng.state.tombstones == {} and eng.server() == {}
        assert eng.ctx.status.last_error is None and eng.ctx.status.warnings == []


async def test_a_swap_of_edited_files_whose_park_answer_is_lost_finds_it_applied(tmp_path):
    """a.md and b.md both edited and swapped here; breaking the cycle parks one memory
    (a path-only update: the content it holds stays its base), and the park's answer is
    lost. The next pass asks the server (one read of the memory's head), finds the park
    applied as sent (the base content at the park's path) and takes it as the answer:
    no history read, and the swap then lands with the new contents."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        await eng.op_write("/a.md", "A2")
        await eng.op_write("/b.md", "B2")
        await eng.op_rename("/a.md", "/c.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_rename("/c.md", "/b.md")
        a_mid, b_mid = eng.node("/b.md").memory_id, eng.node("/a.md").memory_id
        eng.transport.rules = [FaultRule(
            lambda r: r.method == "POST" and (r.body or {}).get("path", "").startswith(
                PARK_DIR), kind="lose", origins=("setup",), times=1)]
        await eng.op_push()
        [ticket] = eng.state.doubts.values()
        assert eng.server()[eng.state.parks[ticket.memory_id]][0] == ticket.memory_id
        eng.transport.rules = []
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first)[0] == f"GET {ticket.memory_id}"
        assert "GET memory_versions" not in sent(eng, first)
        assert not eng.state.doubts and result.pushed >= 1
        await eng.op_push()
        assert eng.server() == {"/a.md": (b_mid, sha256(data("B2"))),
                                "/b.md": (a_mid, sha256(data("A2")))}


async def test_a_park_is_journaled_as_the_path_only_update_it_sends(tmp_path):
    """a.md and b.md both edited and swapped here; breaking the cycle parks one memory.
    While the park is on its way, the request journaled for it (what the next pass asks
    the server about if its answer is lost) says what it sends: a new path, no content
    (the memory keeps its base bytes; the edit goes with the real rename)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        await eng.op_write("/a.md", "A2")
        await eng.op_write("/b.md", "B2")
        await eng.op_rename("/a.md", "/c.md")
        await eng.op_rename("/b.md", "/a.md")
        await eng.op_rename("/c.md", "/b.md")
        journaled: list = []

        async def look() -> None:
            journaled.extend(eng.state.doubts.values())

        first = len(eng.transport.records)
        await held_pass(eng, "before", look, index=1)
        park = eng.transport.records[first + 1]
        assert park.body["path"].startswith(f"{PARK_DIR}/") and "content" not in park.body
        [ticket] = journaled
        assert park.path.endswith(f"/{ticket.memory_id}")
        assert (ticket.content_sent, ticket.path_sent) == (False, True)
        assert ticket.written == (park.body["path"], park.body["precondition"]["content_sha256"])



# -- wave w9a --


async def test_a_create_under_another_writers_memory_waits_and_says_why(tmp_path):
    """notes/x.md made here while another writer creates a memory at /notes itself (a
    file where ours needs a directory): our create meets 409 on an ancestor of its path,
    which no local file can settle. The file waits (its backoff, its error) and `memfs
    status` says which file and why; nothing is logged as a bug and their memory stays."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_mkdir("/notes")
        await eng.op_write("/notes/x.md", "mine")
        await eng.op_r_create("/notes", "theirs")
        theirs = eng.server()
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == ["POST memories"]
        assert (result.pushed, result.progress) == (0, 1)
        node = eng.node("/notes/x.md")
        why = ("path conflict: '/notes' is a memory, so '/notes/x.md' cannot be below it "
               "(HTTP 409, memory_path_conflict_error)")
        assert (node.fail_count, node.error) == (1, f"PathConflictError: {why}")
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            f"cannot push /notes/x.md: {why}; it waits, the rest goes on (the server has a "
            "file at /notes, where this mount has a directory: rename one of them)"]
        assert eng.server() == theirs and eng.ctx.status.last_error is None


# -- wave r6w2 --


async def test_a_refused_early_delete_leaves_the_rename_for_the_next_pass(tmp_path):
    """b.md renamed to a.md, which was just unlinked: the rename meets 409 on our own
    deleted memory, whose delete goes early and is refused (403). The place is not free:
    the rename is not sent again in that pass (it waits), both memories stay, and `memfs
    status` says the delete waits."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        a_mid, b_mid = eng.node("/a.md").memory_id, eng.node("/b.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_rename("/b.md", "/a.md")
        eng.transport.rules = [FaultRule(lambda r: r.method == "DELETE",
                                         origins=("setup",), times=1)]
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"POST {b_mid}", f"DELETE {a_mid}"]
        assert result.pushed == 0
        assert eng.server() == {"/a.md": (a_mid, sha256(data("A"))),
                                "/b.md": (b_mid, sha256(data("B")))}
        [note] = [w.split(" ", 1)[1] for w in eng.ctx.status.warnings]
        assert note.startswith("cannot delete /a.md: ") and note.endswith(
            "; it waits, the rest goes on")
        assert eng.node("/a.md").base_path == "/b.md"


async def test_a_refused_read_after_a_412_makes_the_file_wait_like_any_refusal(tmp_path):
    """a.md edited here and there; our update meets 409 (precondition failed), and
    reading the memory back is refused (403). Like any other 403 on a push, the file
    waits (backoff) with the refusal as its error, and `memfs status` says so; nothing
    is logged as a bug."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_write("/a.md", "mine")
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id,
                                         origins=("setup",))]
        first = len(eng.transport.records)
        await eng.op_push()
        assert sent(eng, first) == [f"POST {mid}", f"GET {mid}"]
        node = eng.node("/a.md")
        assert node.fail_count == 1 and (node.error or "").startswith("PermissionDenied")
        assert eng.ctx.status.last_error is None and eng.state.conflicts() == []
        [note] = [w.split(" ", 1)[1] for w in eng.ctx.status.warnings]
        assert note.startswith("cannot push /a.md: ") and note.endswith(
            "; it waits, the rest goes on")


# -- wave r6w6 --


async def test_an_update_met_by_a_404_reads_the_memorys_head_not_its_content(tmp_path):
    """a.md's update is answered 404; the pass reads the memory back to confirm it is
    gone: its head only (`view=basic`), as every other read after an answer, not its
    content, which a memory found there after all would only be pushed over again."""
    async with harness(tmp_path) as eng:
        mid = await update_met_by_404(eng)
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"POST {mid}", f"GET {mid}"]
        assert eng.transport.records[first + 1].query["view"] == "basic"
        assert eng.node("/a.md").memory_id == mid



# -- wave r6w5 --


async def test_a_create_meeting_a_strangers_memory_reads_its_head_then_its_content(tmp_path):
    """a.md made here while another writer creates /a.md with other bytes: our create
    meets 409 (path taken). The pass first reads their memory's head (`view=basic`:
    not its content) to tell a stranger from a lost create of ours; only the conflict
    that follows reads the content it puts in the tree."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/a.md", "mine")
        await eng.op_r_create("/a.md", "theirs")
        [(their_mid, _sha)] = eng.server().values()
        first = len(eng.transport.records)
        await eng.op_push()
        assert sent(eng, first) == ["POST memories", f"GET {their_mid}", f"GET {their_mid}"]
        assert [r.query.get("view") for r in eng.transport.records[first + 1:]] == [
            "basic", "full"]


async def test_a_refused_read_after_a_path_conflict_makes_the_file_wait_like_any_refusal(
        tmp_path):
    """a.md made here while another writer creates /a.md; our create meets 409 (path
    taken), and reading their memory is refused (403). Like any other 403 on a push,
    the file waits (backoff) with the refusal as its error, and `memfs status` says so;
    nothing is logged as a bug."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/a.md", "mine")
        await eng.op_r_create("/a.md", "theirs")
        [(their_mid, _sha)] = eng.server().values()
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id,
                                         origins=("setup",))]
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == ["POST memories", f"GET {their_mid}"]
        assert (result.pushed, result.progress) == (0, 1)
        node = eng.node("/a.md")
        assert node.memory_id is None and node.fail_count == 1
        assert (node.error or "").startswith("PermissionDenied")
        assert eng.ctx.status.last_error is None and eng.state.conflicts() == []
        [note] = [w.split(" ", 1)[1] for w in eng.ctx.status.warnings]
        assert note.startswith("cannot push /a.md: ") and note.endswith(
            "; it waits, the rest goes on")


async def test_a_failed_precondition_conflict_keeps_the_files_memory_and_deletes_nothing(
        tmp_path):
    """Another writer changed a.md; our edit's update meets 409 (precondition failed) and
    ours is kept as a conflict. The file still holds the same memory, which is not
    queued for deletion: nothing is left to push, and the next pass sends nothing."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="base")
        mid = eng.node("/a.md").memory_id
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_write("/a.md", "mine")
        result = await eng.pusher.push_pass()
        assert (result.pushed, result.progress, result.left) == (0, 1, 0)
        assert len(eng.state.conflicts()) == 1
        assert eng.node("/a.md").memory_id == mid and eng.state.tombstones == {}
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass(flush=True)
        assert (sent(eng, first), result.progress, result.left) == ([], 0, 0)
        assert eng.server() == {"/a.md": (mid, sha256(data("theirs")))}
