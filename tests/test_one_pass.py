"""What one push pass did, checked right after it (no settling passes): what it sent, what
the server holds, what each file's state became; when a write is due, how refusals and
rate limits make a file wait, how a busy mount holds the pass back.

The interleaving scenarios check where a run settles, after flush and reconcile passes; a
pass that decided wrong is often repaired by the next one, which those checks cannot see.
These tests (and tests/test_one_conflict.py, test_one_listing.py, test_one_doubt.py,
test_sync_loops.py) run one pass over the harness's engine (the daemon's `StoreEngine` and
its in-process server: tests/interleave.py, tests/onepass.py). Each pins a mutant of the
sync core that no test killed (docs/TESTING.md, "Mutation testing"), shown failing with it.
"""

from __future__ import annotations

import logging
import math
import time

import pytest
import trio
import trio.testing
from interleave import HOUR, ORIGIN, FaultRule, Hold, age_tombstones
from onepass import data, harness, held_pass, lost_update, sent, synced, until

from memfs.core.paths import MAX_MEMORIES_PER_STORE
from memfs.core.signals import IdleClock
from memfs.state.blobs import sha256
from memfs.state.report import pending
from memfs.sync import pusher as pusher_mod
from memfs.sync.events import Subscriber


async def test_content_that_cannot_be_a_memory_is_refused_without_a_request(tmp_path):
    """Bytes that are not UTF-8: refused locally (the file says why), nothing sent."""
    async with harness(tmp_path) as eng:
        await eng._put("/bad.md", b"\xff\xfe not text\n")
        first = len(eng.transport.records)
        await eng.op_push()
        node = eng.node("/bad.md")
        assert eng.state.sync_state(node) == "refused" and "UTF-8" in node.refused_reason
        assert sent(eng, first) == []


async def test_a_synced_file_whose_new_content_is_refused_is_left_alone(tmp_path):
    """Once refused, the file is not news to the next pass (nothing sent, no progress
    counted, which would keep a flush going), until its content changes again."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng._put("/a.md", b"\xff not text\n")
        await eng.op_push()
        assert eng.state.sync_state(eng.node("/a.md")) == "refused"
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert (result.progress, result.pushed, sent(eng, first)) == (0, 0, [])
        assert eng.pusher.pending_total() == 0  # refused, not pending (status lists it)


async def test_a_refused_file_renamed_moves_its_memory(tmp_path):
    """A synced file whose new content is refused, then renamed: the rename still goes
    out (the memory follows, holding the content it had), the content stays local."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng._put("/a.md", b"\xff not text\n")
        await eng.op_rename("/a.md", "/b.md")
        await eng.op_push()
        assert eng.server() == {"/b.md": (mid, sha256(data("v1")))}
        assert eng.state.sync_state(eng.node("/b.md")) == "refused"


async def test_a_refusal_makes_the_file_wait_and_says_why_in_the_same_pass(tmp_path):
    """The server refuses the create (403): the file keeps its content, waits (a retry
    time, doubling) and carries the refusal as its error; nothing is in doubt. A pass
    before its retry time sends nothing."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", origins=("setup",),
                                         times=1)]
        await eng.op_write("/a.md", "v1")
        await eng.op_push()
        node = eng.node("/a.md")
        assert node.fail_count == 1 and node.retry_at and "refused by the test" in node.error
        assert eng.state.sync_state(node) != "synced" and not eng.state.doubts
        assert eng.server() == {}
        node.retry_at += 3600  # (the backoff's 2 s could pass on a stalled machine)
        first = len(eng.transport.records)
        await eng.op_push()
        assert sent(eng, first) == [] and node.fail_count == 1


async def test_a_create_into_a_store_gone_makes_the_file_wait(tmp_path):
    """The store was deleted: the create meets 404. No memory can be gone (it has none
    yet): the file waits with the error, its content kept."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        eng.db.delete_store(eng.store_id)
        await eng.op_write("/a.md", "v1")
        await eng.op_push()
        node = eng.node("/a.md")
        assert node.fail_count == 1 and node.retry_at and "NotFound" in node.error
        assert eng.tree_sha("/a.md") == sha256(data("v1"))


async def test_next_due_in_follows_the_write_back_delay_and_the_backoff(tmp_path):
    async with harness(tmp_path) as eng:
        assert eng.pusher.next_due_in() is None  # nothing to push
        await eng.op_write("/a.md", "v1")
        assert eng.pusher.next_due_in() <= 0  # write-back delay 0: due now
        ticket = eng.state.begin_push(eng.node("/a.md"))
        assert eng.pusher.next_due_in() <= 0  # a request in doubt: find out now
        eng.state.push_answered(ticket)  # a refusal (Pusher._send, then _failed)
        eng.state.push_failed(ticket, "refused", transient=False)
        assert eng.pusher.next_due_in() > 0  # its backoff runs


async def test_a_rate_limited_push_holds_the_next_pass_for_its_retry_after(tmp_path):
    """The server answers a.md's create 429 with retry-after 30 s: the mount goes offline,
    and a pass started before those 30 s are out (the loop woken early, a `memfs sync`)
    sends nothing until then: no request at all, the file still waiting, nothing in
    doubt."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", status=429,
                                         error_type="rate_limit_error", origins=("setup",),
                                         times=1, headers={"retry-after": "30"})]
        await eng.op_write("/a.md", "v1")
        result = await eng.pusher.push_pass()
        assert (type(result.offline).__name__, result.offline.retry_after) == \
            ("RateLimitError", 30.0)
        first = len(eng.transport.records)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(eng.pusher.push_pass)
            await trio.testing.wait_all_tasks_blocked()  # the pass waits, all else is idle
            assert sent(eng, first) == []
            nursery.cancel_scope.cancel()
        assert eng.server() == {} and not eng.state.doubts
        assert eng.state.is_dirty(eng.node("/a.md"))


async def test_a_refused_delete_waits_and_says_why(tmp_path):
    """The server refuses a.md's delete (403): the delete stays pending with a retry time,
    and `memfs status` shows the refusal with its kind; the status notes it too."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        age_tombstones(eng)
        eng.transport.rules = [FaultRule(lambda r: r.method == "DELETE", origins=("setup",),
                                         times=1)]
        pushed_at = time.time()
        await eng.op_push()
        [item] = pending(eng.state)["deletes"]
        refusal = "refused by the test (HTTP 403, permission_error)"
        assert (item["memory_id"], item["error"]) == (mid, f"PermissionDeniedError: {refusal}")
        assert item["retry_at"] > pushed_at  # (a backoff from the refusal on)
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == \
            [f"cannot delete /a.md: {refusal}; it waits, the rest goes on"]
        assert eng.server() == {"/a.md": (mid, sha256(data("v1")))}


async def test_a_write_back_pass_waits_for_a_quiet_mount(tmp_path, monkeypatch):
    """While the mount is busy (a `cp -r` under way), a write-back pass sends nothing
    until a quiet moment comes (the longest wait made endless here: no clock involved);
    once the mount is quiet, it goes."""
    monkeypatch.setattr(pusher_mod, "YIELD_MAX", math.inf)
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        first = len(eng.transport.records)
        async with trio.open_nursery() as nursery:
            with eng.clock.busy():
                nursery.start_soon(eng.pusher.push_pass)
                await trio.testing.wait_all_tasks_blocked()  # the pass waits, all else idle
                assert sent(eng, first) == []
        assert sent(eng, first) == ["POST memories"]
        assert eng.server() == {"/a.md": (eng.node("/a.md").memory_id, sha256(data("v1")))}


async def test_a_log_only_delete_is_logged_and_not_sent(tmp_path, caplog):
    """`--deletes log-only`: a due delete is not sent and stays pending; the log, which is
    what the mode is for, names the memory and where it was."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        eng.ctx.options.deletes = "log-only"
        await eng.op_unlink("/a.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        with caplog.at_level(logging.INFO, logger=pusher_mod.__name__):
            await eng.op_push()
        assert f"log-only: would delete {mid} (/a.md)" in caplog.messages
        assert sent(eng, first) == [] and mid in eng.state.tombstones


async def test_a_write_waits_out_its_write_back_delay_from_its_last_change(tmp_path):
    """With a write-back delay of 30 s (and at most 60 s after the first change), a
    closed file goes out 30 s after its change (not 30 s after the clock's zero, long
    past): a push pass before then sends nothing, and the loop sleeps until then."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay, eng.ctx.options.max_push_delay = 30.0, 60.0
        await eng.op_write("/a.md", "v1")
        node = eng.node("/a.md")
        assert eng.pusher._due_at(node) == node.changed_at + 30.0
        before = time.time()
        due_in = eng.pusher.next_due_in()
        after = time.time()
        assert node.changed_at + 30.0 - after <= due_in <= node.changed_at + 30.0 - before
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert (result.pushed, result.left, sent(eng, first)) == (0, 1, [])


async def test_next_due_in_counts_a_pending_delete_only_when_deletes_are_enabled(tmp_path):
    """An unlinked file's delete is due the delete delay after the unlink: the push loop
    wakes for it then. With deletes log-only, nothing is ever sent: nothing is due."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_unlink("/a.md")
        [tomb] = eng.state.tombstones.values()
        delay = eng.ctx.options.delete_delay
        before = time.time()
        due_in = eng.pusher.next_due_in()
        after = time.time()
        assert due_in is not None
        assert tomb.deleted_at + delay - after <= due_in <= tomb.deleted_at + delay - before
        eng.ctx.options.deletes = "log-only"
        assert eng.pusher.next_due_in() is None


async def test_a_connection_failure_starts_no_more_requests_in_that_pass(tmp_path):
    """Two new files, one request at a time: the first create's connection fails (its
    answer lost). The server is unreachable: the pass starts no request for the other
    file (it waits for the next pass), and goes offline with the first in doubt."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.push_concurrency = 1
        await eng.op_write("/a.md", "A")
        await eng.op_write("/b.md", "B")
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", kind="lose",
                                         origins=("setup",), times=1)]
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == ["POST memories"]
        assert result.offline is not None and (result.pushed, result.left) == (0, 2)
        assert len(eng.state.doubts) == 1


async def test_content_missing_from_the_cache_is_not_pushed_and_says_so(tmp_path):
    """a.md's content is gone from the cache (its blob file removed) and no memory ever
    held it: nothing is sent, the file stays pending, and `memfs status` says why."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        await eng.quiet()  # the blob writer has written its file
        sha = sha256(data("v1"))
        eng.cache.lru.pop(sha, None)
        eng.cache._path(sha).unlink()
        assert eng.cache.get(sha) is None
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert (result.pushed, result.progress, sent(eng, first)) == (0, 0, [])
        assert eng.state.is_dirty(eng.node("/a.md"))
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "content of /a.md is missing from the cache; cannot push it"]


@pytest.mark.parametrize("message", [
    None,  # the server's own (memfs serve): "... holds its 2,000-memory maximum; ..."
    "memory store has reached its 2000-memory limit",
    "the store already holds the maximum number of memories",
])
async def test_a_create_into_a_full_store_waits_without_being_refused(tmp_path, message):
    """The store holds its 2,000 memories: the create is answered 400. That is not a
    refusal of the file (it goes once a delete frees a place): it stays pending, its
    content not marked refused, nothing in doubt, and `memfs status` says why. The
    cap's message is the server's, or one another server might word with "2000" or
    "maximum number of memories"."""
    async with harness(tmp_path) as eng:
        if message is None:
            for i in range(MAX_MEMORIES_PER_STORE):
                eng.db.create_memory(eng.store_id, path=f"/s/{i:04d}", content="", actor=None)
        else:
            eng.transport.rules = [FaultRule(lambda r: r.method == "POST", status=400,
                                             error_type="invalid_request_error",
                                             message=message, origins=("setup",))]
        await eng.op_write("/a.md", "v1")
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == ["POST memories"]
        assert eng.transport.records[first].status == 400
        assert (result.pushed, result.progress, result.left) == (0, 0, 1)
        node = eng.node("/a.md")
        assert eng.state.sync_state(node) == "pending" and node.refused_sha is None
        assert not eng.state.doubts
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "/a.md waits: the store holds its 2,000-memory maximum"]


async def test_a_write_waits_out_the_write_back_delay_but_not_past_the_longest(tmp_path):
    """A file just written goes out `write_back_delay` after its last change; one that
    keeps changing goes out `max_push_delay` after its first change all the same."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay, eng.ctx.options.max_push_delay = 60.0, 120.0
        await eng.op_write("/a.md", "v1")
        result = await eng.pusher.push_pass()
        assert (result.pushed, eng.server()) == (0, {})
        assert 0 < eng.pusher.next_due_in() <= 60.0
        eng.node("/a.md").dirty_since -= 121.0  # first changed two minutes ago
        result = await eng.pusher.push_pass()
        assert result.pushed == 1 and "/a.md" in eng.server()


async def test_status_says_when_a_file_that_keeps_changing_goes_out(tmp_path):
    """`memfs status` shows each dirty file's `due_at` by the pusher's own rule: for a
    file that keeps changing, `max_push_delay` after its first unpushed change, not the
    write-back delay after its last one (which a log written every second never
    reaches)."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay, eng.ctx.options.max_push_delay = 60.0, 120.0
        await eng.op_write("/a.md", "v1")
        node = eng.node("/a.md")
        [item] = eng.store.status()["pending"]["creates"]
        assert item["due_at"] == eng.pusher._due_at(node) == node.changed_at + 60.0
        node.dirty_since = node.changed_at - 100.0  # first changed 100 s ago, still going
        [item] = eng.store.status()["pending"]["creates"]
        assert item["due_at"] == eng.pusher._due_at(node) == node.dirty_since + 120.0


class GapClock(IdleClock):
    """A mount that keeps busy with short gaps (a `cp -r` on a loaded machine): FUSE was
    last asked longer ago than BUSY_WINDOW, never as long as QUIET_WINDOW."""

    def idle_for(self) -> float:
        return (pusher_mod.BUSY_WINDOW + pusher_mod.QUIET_WINDOW) / 2


class BusyWindowClock(IdleClock):
    """FUSE was last asked exactly BUSY_WINDOW ago, and stays so (a copy's steady gaps)."""

    def idle_for(self) -> float:
        return pusher_mod.BUSY_WINDOW


async def test_pushes_started_while_the_mount_is_busy_are_two_at_a_time_at_most(
        tmp_path, monkeypatch):
    """While the mount is busy, pushes go as at most BUSY_CONCURRENCY (2) requests at
    once, even when the pace between starts allows more: with two of them still
    waiting for the server, a third file's push does not start."""
    monkeypatch.setattr(pusher_mod, "BUSY_INTERVAL", 0.0)
    async with harness(tmp_path) as eng:
        for name in ("a", "b", "c"):
            await eng.op_write(f"/{name}.md", name)
        holds = {0: Hold(0, "before"), 1: Hold(1, "before")}
        eng.transport.holds, eng.transport.action_count = holds, 0
        eng.ctx.clock = GapClock()

        async def act() -> None:
            ORIGIN.set("action")
            await eng.pusher.push_pass()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(act)
            await until(lambda: all(h.rec is not None for h in holds.values()))
            await trio.testing.wait_all_tasks_blocked()
            assert eng.transport.action_count == 2  # the third waits for a free slot
            for hold in holds.values():
                hold.release.set()
        eng.transport.holds = {}
        assert eng.transport.action_count == 3 and len(eng.server()) == 3


async def test_content_the_server_refuses_is_kept_locally_and_not_sent_again(tmp_path):
    """The server refuses a.md's content (400, a check the mount does not make itself):
    the file is marked refused with the server's reason and `memfs status` says so;
    the next pass sends nothing for it (only new content would go)."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", status=400,
                                         error_type="invalid_request_error",
                                         message="content rejected by the test",
                                         origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v1")
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == ["POST memories"]
        assert (result.pushed, result.progress) == (0, 1)
        node = eng.node("/a.md")
        assert eng.state.sync_state(node) == "refused"
        assert node.refused_reason == "content rejected by the test"
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "the server refused /a.md: content rejected by the test; kept locally"]
        assert eng.ctx.status.last_error is None
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert (result.pushed, result.progress, sent(eng, first)) == (0, 0, [])


async def test_a_pass_held_by_a_retry_after_goes_once_it_is_out(tmp_path):
    """The server answers a.md's create 429 with a retry-after of 100 ms: a pass started at
    once waits that out, then sends the create (not a bug's traceback): a.md is pushed in
    that pass."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", status=429,
                                         error_type="rate_limit_error", origins=("setup",),
                                         times=1, headers={"retry-after-ms": "100"})]
        await eng.op_write("/a.md", "v1")
        refused_by = trio.current_time()
        result = await eng.pusher.push_pass()
        assert result.offline.retry_after == 0.1
        first = len(eng.transport.records)
        with trio.fail_after(60):  # (a pass that never goes)
            result = await eng.pusher.push_pass()
        assert trio.current_time() >= refused_by + 0.1  # (its retry-after, waited out)
        assert (result.pushed, result.offline, sent(eng, first)) == (1, None, ["POST memories"])
        assert eng.server() == {"/a.md": (eng.node("/a.md").memory_id, sha256(data("v1")))}
        assert eng.ctx.status.last_error is None


async def test_a_push_that_fails_as_a_bug_is_logged_with_its_file(tmp_path, caplog,
                                                                   monkeypatch):
    """One file's push raises (a bug): the log names the file, `memfs status` shows the
    error, the other files go on and the next pass tries it again."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        node = eng.node("/a.md")

        async def bug(_node):
            raise RuntimeError("a bug in the push")

        monkeypatch.setattr(eng.pusher, "_push_node", bug)
        await eng.op_push()
        assert f"push of {node!r} failed" in caplog.messages
        assert eng.ctx.status.last_error == "push: RuntimeError: a bug in the push"


async def test_a_flush_that_cannot_reach_the_server_says_offline_and_what_is_left(
        tmp_path, autojump_clock):
    """A flush while the server answers every request 503: it gives up at its timeout and
    says it was offline, with one file left to push; the pusher no longer counts it as
    flushing (a later pass waits for a quiet mount again). On trio's clock that jumps when
    every task waits, the flush's backoff sleeping on it: on the real clock a loaded
    machine could spend the flush's 0.2 s before its first request was answered (seen
    under mutmut), and it would end with nothing to say."""
    async with harness(tmp_path) as eng:
        eng.ctx.clock.moved_on = HOUR + 1.0  # the harness's pauses then sleep (trio's clock)
        await eng.op_write("/a.md", "v1")
        eng.transport.rules = [FaultRule(lambda r: True, kind="fail", origins=("setup",))]
        result = await eng.pusher.flush(0.2)
        assert result.offline is not None and (result.pushed, result.left) == (0, 1)
        assert eng.pusher._flushing == 0


# -- wave w1a --


async def test_a_pass_counts_each_file_it_pushed_as_progress(tmp_path):
    """Two new files pushed in one pass: each is a push and a step of progress (a flush
    reads the progress to decide whether to go on)."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "A")
        await eng.op_write("/b.md", "B")
        result = await eng.pusher.push_pass()
        assert (result.pushed, result.progress, result.left) == (2, 2, 0)


async def test_a_file_unlinked_or_given_refused_bytes_again_during_a_pass_sends_nothing(
        tmp_path):
    """A pass sends x.md's delete first; while it is out, the new b.md is unlinked and
    c.md (once refused, then fixed) gets its refused bytes back. Neither has anything to
    send when its turn comes: the pass counts the delete alone, as pushed and as progress."""
    async with harness(tmp_path) as eng:
        await synced(eng, x="x")
        mid = eng.node("/x.md").memory_id
        await eng._put("/c.md", b"\xff not text\n")
        await eng.op_push()
        assert eng.state.sync_state(eng.node("/c.md")) == "refused"
        await eng.op_write("/c.md", "fixed")
        await eng.op_write("/b.md", "B")
        await eng.op_unlink("/x.md")
        age_tombstones(eng)
        first = len(eng.transport.records)

        async def meanwhile() -> None:
            await eng.op_unlink("/b.md")
            await eng._put("/c.md", b"\xff not text\n")

        result = await held_pass(eng, "before", meanwhile)
        assert sent(eng, first) == [f"DELETE {mid}"]
        assert (result.pushed, result.progress) == (1, 1)
        assert eng.server() == {} and eng.state.sync_state(eng.node("/c.md")) == "refused"


async def test_a_sent_delete_is_told_with_its_memory(tmp_path):
    """`memfs watch` hears a delete the server applied as "pushed", naming the memory."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        age_tombstones(eng)
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.op_push()
        event = sub.receive.receive_nowait()
        assert (event.kind, event.path, event.memory_id) == ("pushed", "/a.md", mid)
        assert eng.server() == {}


async def test_deletes_disabled_sends_no_delete(tmp_path):
    """`--deletes disabled`: a due delete is never sent; it stays pending and the server
    keeps the memory."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        eng.ctx.options.deletes = "disabled"
        await eng.op_unlink("/a.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        await eng.op_push()
        assert sent(eng, first) == [] and mid in eng.state.tombstones
        assert eng.server() == {"/a.md": (mid, sha256(data("v1")))}


async def test_a_pass_sends_deletes_up_to_a_quarter_of_the_known_memories(tmp_path, caplog):
    """40 memories, 10 unlinked: the cap is a quarter of the 40 known (memories and
    pending deletes), so all 10 go in one pass and the log says nothing of a cap. Then
    14 more unlinked (30 known): 8 go (the cap's floor), 6 wait, and the log says so."""
    async with harness(tmp_path) as eng:
        await synced(eng, **{f"f{i:02d}": str(i) for i in range(40)})
        for i in range(10):
            await eng.op_unlink(f"/f{i:02d}.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        with caplog.at_level(logging.INFO, logger=pusher_mod.__name__):
            await eng.op_push()
        assert [s.split()[0] for s in sent(eng, first)] == ["DELETE"] * 10
        assert len(eng.server()) == 30 and not eng.state.tombstones
        assert not [m for m in caplog.messages if m.startswith("delete cap reached")]
        for i in range(10, 24):
            await eng.op_unlink(f"/f{i:02d}.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        with caplog.at_level(logging.INFO, logger=pusher_mod.__name__):
            await eng.op_push()
        assert len(sent(eng, first)) == 8 and len(eng.state.tombstones) == 6
        assert "delete cap reached: sending 8 deletes, holding 6 for later passes" \
            in caplog.messages


# -- wave w2a --


async def test_a_pass_that_pushes_files_only_marks_the_mount_online_and_stamps_the_push(
        tmp_path):
    """The mount went offline (a pass met no server); the next pass pushes a file and
    no delete: the mount is online again and `memfs status` shows when it last pushed."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", kind="fail",
                                         origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v1")
        result = await eng.pusher.push_pass()
        eng.ctx.went_offline(result.offline)  # (what the loop does with it)
        assert not eng.ctx.status.online and eng.ctx.status.last_push_at is None
        before = time.time()
        result = await eng.pusher.push_pass()
        assert (result.pushed, result.offline) == (1, None)
        assert eng.ctx.status.online
        assert before <= eng.ctx.status.last_push_at <= time.time()


async def test_a_pass_whose_doubt_cannot_be_resolved_says_what_is_left(tmp_path):
    """a.md's update is in doubt (its answer lost); the next pass's read to find out what
    happened meets no server: the pass is offline, sends nothing more, and says one file
    is left to push (what `memfs sync` reports)."""
    async with harness(tmp_path) as eng:
        await lost_update(eng)
        eng.transport.rules = [FaultRule(lambda r: True, kind="fail", origins=("setup",))]
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert result.offline is not None and (result.pushed, result.left) == (0, 1)
        assert all(s.startswith("GET") for s in sent(eng, first)) and eng.state.doubts


async def test_the_delete_of_the_only_source_of_a_files_content_waits_for_it(tmp_path):
    """Another writer's c.md, listed here but never read (its content not cached), is
    renamed over a.md: a.md's memory takes c.md's content, and c.md's memory becomes a
    pending delete, the only place that content is. The pass does not send that delete:
    it sends a.md's update (its content read from c.md's memory); the next pass, the
    content now here, sends the delete."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        a_mid = eng.node("/a.md").memory_id
        await eng.op_r_create("/c.md", "C")
        await eng.op_reconcile()
        c_mid = eng.node("/c.md").memory_id
        c_sha = sha256(data("C"))
        assert not eng.cache.has(c_sha)
        await eng.op_rename("/c.md", "/a.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert f"DELETE {c_mid}" not in sent(eng, first)
        assert list(eng.state.tombstones) == [c_mid]
        assert eng.server() == {"/a.md": (a_mid, c_sha), "/c.md": (c_mid, c_sha)}
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        assert sent(eng, first) == [f"DELETE {c_mid}"]
        assert eng.server() == {"/a.md": (a_mid, c_sha)} and not eng.state.tombstones


async def test_a_file_whose_content_cannot_be_read_back_waits_and_says_why(tmp_path):
    """The same rename, and the read of c.md's content is refused (a 403, not a
    transient error): a.md waits as a refused request does (its error, a retry
    later), `memfs status` hears why, and nothing is logged as a fault of memfs. Before,
    the refusal escaped the pusher as an unexpected error with its traceback (found by
    the random search from an adopted start, 6 December). Once the read is allowed, a
    retry sends the update."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        a_mid = eng.node("/a.md").memory_id
        await eng.op_r_create("/c.md", "C")
        await eng.op_reconcile()
        c_mid = eng.node("/c.md").memory_id
        await eng.op_rename("/c.md", "/a.md")
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id == c_mid,
                                         origins=("setup",))]
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {c_mid}"] and result.offline is None
        assert (result.pushed, result.progress) == (0, 1)  # it moved on, nothing went out
        node = eng.node("/a.md")
        assert node.fail_count == 1 and node.retry_at > time.time()
        assert node.error == ("PermissionDeniedError: refused by the test (HTTP 403, "
                              "permission_error)")
        assert "cannot read /a.md back from the server to push it" in eng.ctx.status.warnings[-1]
        assert eng.state_errors == [] and eng.ctx.status.last_error is None
        eng.transport.rules = []
        await eng.pusher.push_pass(retry_failed=True)
        c_sha = sha256(data("C"))
        assert eng.server()["/a.md"] == (a_mid, c_sha) and eng.node("/a.md").error is None


async def test_a_push_may_start_while_the_mount_is_busy_once_the_interval_is_out(
        tmp_path, mock_clock):
    """While the mount is busy (short gaps), pushes start one per BUSY_INTERVAL at
    most: with the first still waiting for the server, the second does not start at
    once; it starts as soon as BUSY_INTERVAL has passed since the first (the trio clock
    stopped, then moved by exactly that)."""
    async with harness(tmp_path) as eng:
        mock_clock.autojump_threshold = 0  # (the writes' blob writer polls the clock)
        for name in ("a", "b"):
            await eng.op_write(f"/{name}.md", name)
        mock_clock.autojump_threshold = math.inf  # the clock stops
        mock_clock.jump(1000.0)  # (a clock long started, as trio's own)
        hold = Hold(0, "before")
        eng.transport.holds, eng.transport.action_count = {0: hold}, 0
        eng.transport.reached = trio.Event()
        eng.ctx.clock = GapClock()

        async def act() -> None:
            ORIGIN.set("action")
            await eng.pusher.push_pass()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(act)
                await eng.transport.reached.wait()
                await trio.testing.wait_all_tasks_blocked()
                assert eng.transport.action_count == 1  # the second waits for its turn
                mock_clock.jump(pusher_mod.BUSY_INTERVAL)
                await trio.testing.wait_all_tasks_blocked()
                assert eng.transport.action_count == 2
                hold.release.set()
        finally:
            hold.release.set()
            mock_clock.autojump_threshold = 0  # (the clean-up's waits end)
        eng.transport.holds = {}
        assert len(eng.server()) == 2


# -- wave w5a --


async def test_a_file_refused_first_and_renamed_after_moves_its_memory(tmp_path):
    """A synced file is given content the server cannot hold (refused by a pass), and only
    then renamed: the next pass still sends the rename (the memory follows, holding the
    content it had); the refused content stays local and the file stays refused."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng._put("/a.md", b"\xff not text\n")
        await eng.op_push()
        assert eng.state.sync_state(eng.node("/a.md")) == "refused"
        await eng.op_rename("/a.md", "/b.md")
        assert eng.pusher.pending_total() == 1  # the rename waits to go out
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"POST {mid}"] and result.progress == 1
        assert eng.server() == {"/b.md": (mid, sha256(data("v1")))}
        assert eng.state.sync_state(eng.node("/b.md")) == "refused"
        assert eng.pusher.pending_total() == 0


# -- wave w6a --


class BusyUntilClock(IdleClock):
    """A mount busy without a gap (FUSE asked at every moment) until `quiet_from` on
    the trio clock, quiet from then on (never, by default)."""

    def __init__(self, quiet_from: float = math.inf) -> None:
        super().__init__()
        self.quiet_from = quiet_from

    def idle_for(self) -> float:
        return max(0.0, trio.current_time() - self.quiet_from)


async def test_an_answer_that_meets_a_busy_mount_waits_for_quiet_or_its_limit(
        tmp_path, mock_clock):
    """The answer of a push sent while the mount was quiet is read (`_answer_ready`, run
    by the client's real transport, which this harness replaces) at once on a quiet
    mount; while a copy goes on for a second, once the mount has been quiet for
    QUIET_WINDOW after it; while a copy never stops, after ANSWER_WAIT_MAX (the trio
    clock jumps to each wake-up)."""
    mock_clock.autojump_threshold = 0
    async with harness(tmp_path) as eng:
        start = trio.current_time()
        await eng.pusher._answer_ready()
        assert trio.current_time() == start
        eng.ctx.clock = BusyUntilClock(start + 1.0)
        await eng.pusher._answer_ready()
        waited = trio.current_time() - start - 1.0
        assert pusher_mod.QUIET_WINDOW <= waited < pusher_mod.QUIET_WINDOW + pusher_mod.BUSY_WINDOW
        eng.ctx.clock = BusyUntilClock()
        start = trio.current_time()
        await eng.pusher._answer_ready()
        waited = trio.current_time() - start
        assert pusher_mod.ANSWER_WAIT_MAX <= waited < (
            pusher_mod.ANSWER_WAIT_MAX + pusher_mod.BUSY_WINDOW)


async def test_a_push_that_never_finds_a_gap_goes_at_the_look_that_reaches_yield_max(
        tmp_path, mock_clock, monkeypatch):
    """A mount busy without a gap (never BUSY_WINDOW between FUSE requests): a push looks
    every BUSY_WINDOW and goes, as one started while busy, at the look that reaches
    YIELD_MAX, not one look later. (BUSY_WINDOW is a quarter second here, so that its
    looks reach YIELD_MAX exactly on the stopped trio clock.)"""
    monkeypatch.setattr(pusher_mod, "BUSY_WINDOW", 0.25)
    mock_clock.autojump_threshold = 0
    async with harness(tmp_path) as eng:
        mock_clock.jump(1000.0 - trio.current_time())  # (a clock long started, as trio's own)
        eng.ctx.clock = BusyUntilClock()
        start = trio.current_time()
        assert await eng.pusher._yield_to_mount() is True
        assert trio.current_time() - start == pusher_mod.YIELD_MAX
# -- wave w4a --


async def test_a_file_changed_while_its_content_is_fetched_back_sends_nothing(tmp_path):
    """a.md takes another writer's edit (not read here, so not cached), then is renamed
    over b.md: b's memory is to take that content, which the pass fetches back from a's
    memory first. While that read is out, b.md is written again here: the pass sends
    nothing for it and counts nothing (the next pass sends the new bytes)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        a_mid = eng.node("/a.md").memory_id
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_reconcile()
        assert not eng.cache.has(eng.node("/a.md").sha)
        await eng.op_rename("/a.md", "/b.md")
        first = len(eng.transport.records)

        async def meanwhile() -> None:
            await eng.op_write("/b.md", "mine")

        result = await held_pass(eng, "before", meanwhile)
        assert sent(eng, first) == [f"GET {a_mid}"]
        assert (result.pushed, result.progress, result.left) == (0, 0, 2)
        assert eng.ctx.status.pushed == 2  # the two files synced, nothing since


@pytest.mark.parametrize("clock", [GapClock, BusyWindowClock],
                         ids=["short_gaps", "gaps_of_exactly_the_busy_window"])
async def test_a_gap_in_a_busy_mount_lets_a_push_go_at_once(tmp_path, monkeypatch, clock):
    """The mount is busy with short gaps (FUSE last asked longer ago than BUSY_WINDOW, or
    exactly that long, never as long as QUIET_WINDOW: a `cp -r` on a loaded machine). A
    write-back pass's push goes in such a gap, as one of the few started while busy; it
    does not wait for YIELD_MAX (made endless here: the push goes at once or never)."""
    monkeypatch.setattr(pusher_mod, "YIELD_MAX", math.inf)
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        eng.ctx.clock = clock()
        first = len(eng.transport.records)
        got = []

        async def act() -> None:
            got.append(await eng.pusher.push_pass())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(act)
            await trio.testing.wait_all_tasks_blocked()  # the pass ended, or waits on
            nursery.cancel_scope.cancel()
        assert sent(eng, first) == ["POST memories"]
        assert [(r.pushed, r.left) for r in got] == [(1, 0)]


# -- wave w7a --


async def test_busy_pushes_that_ended_free_their_slots_for_the_next_busy_pass(
        tmp_path, monkeypatch):
    """A pass pushed a.md while the mount was busy, and it landed. The mount is still busy
    when the next pass has b.md and c.md to push: both go at once (BUSY_CONCURRENCY, 2),
    the slot a.md's push took is free again."""
    monkeypatch.setattr(pusher_mod, "BUSY_INTERVAL", 0.0)
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "a")
        eng.ctx.clock = GapClock()
        result = await eng.pusher.push_pass()
        assert result.pushed == 1 and "/a.md" in eng.server()
        for name in ("b", "c"):
            await eng.op_write(f"/{name}.md", name)
        holds = {0: Hold(0, "before"), 1: Hold(1, "before")}
        eng.transport.holds, eng.transport.action_count = holds, 0

        async def act() -> None:
            ORIGIN.set("action")
            await eng.pusher.push_pass()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(act)
                await until(lambda: all(h.rec is not None for h in holds.values()), 5.0)
                assert eng.transport.action_count == 2
                for hold in holds.values():
                    hold.release.set()
        finally:
            for hold in holds.values():
                hold.release.set()
        eng.transport.holds = {}
        assert len(eng.server()) == 3


# -- wave w8a --


async def test_a_new_file_unlinked_while_its_pass_waits_its_turn_is_not_created(tmp_path):
    """Two new files, one push at a time: while the first one's create is on its way,
    the other is unlinked here. When its turn comes it is no longer in the tree: no
    create goes out for it (the server never holds a memory for a file already gone),
    and nothing of it is left to push."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.push_concurrency = 1
        await eng.op_write("/a.md", "A")
        await eng.op_write("/b.md", "B")
        first = len(eng.transport.records)
        kept: list[str] = []

        async def meanwhile() -> None:
            [rec] = eng.transport.records[first:]
            kept.append("/a.md" if rec.body["content"] == "A\n" else "/b.md")
            await eng.op_unlink("/b.md" if kept == ["/a.md"] else "/a.md")

        result = await held_pass(eng, "before", meanwhile)
        assert sent(eng, first) == ["POST memories"]
        assert (result.pushed, result.progress, result.left) == (1, 1, 0)
        [path] = kept
        assert eng.server() == {path: (eng.node(path).memory_id, eng.tree_sha(path))}
        assert eng.ctx.status.last_error is None and not eng.state.tombstones


async def test_a_flush_pass_does_not_wait_for_a_quiet_mount(tmp_path, monkeypatch):
    """As test_a_write_back_pass_waits_for_a_quiet_mount, but the pass is a flush's (what
    the user waits for: `memfs sync`, the unmount): while the mount is busy it sends at
    once, even with no flush counted as waiting (`flush()` counts one; the pass itself
    must not wait either)."""
    monkeypatch.setattr(pusher_mod, "YIELD_MAX", math.inf)
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        first = len(eng.transport.records)
        got = []

        async def act() -> None:
            got.append(await eng.pusher.push_pass(flush=True))

        async with trio.open_nursery() as nursery:
            with eng.clock.busy():
                nursery.start_soon(act)
                await trio.testing.wait_all_tasks_blocked()  # the pass ended, or waits on
                assert sent(eng, first) == ["POST memories"]
                assert [(r.pushed, r.left) for r in got] == [(1, 0)]
        assert eng.pusher._flushing == 0


# -- wave w10a --


async def test_content_refused_here_is_said_so_in_the_status_with_its_reason(tmp_path):
    """Bytes that are not UTF-8: the file stays local-only, and `memfs status` says so,
    naming the file and why (once: the next pass does not say it again)."""
    async with harness(tmp_path) as eng:
        await eng._put("/bad.md", b"\xff\xfe not text\n")
        await eng.op_push()
        await eng.op_push()
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "/bad.md stays local-only: content is not valid UTF-8 (byte 0)"]


# -- wave w9a --


async def test_a_write_back_pass_sends_its_deletes_only_once_the_mount_is_quiet(
        tmp_path, monkeypatch):
    """As test_a_write_back_pass_waits_for_a_quiet_mount, for a due delete: while the
    mount is busy (a `cp -r` under way) the pass sends no DELETE; once it is quiet, the
    delete goes and the memory is gone from the server."""
    monkeypatch.setattr(pusher_mod, "YIELD_MAX", math.inf)
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        async with trio.open_nursery() as nursery:
            with eng.clock.busy():
                nursery.start_soon(eng.pusher.push_pass)
                await trio.testing.wait_all_tasks_blocked()  # the pass waits, all else idle
                assert sent(eng, first) == []
        assert sent(eng, first) == [f"DELETE {mid}"]
        assert eng.server() == {} and not eng.state.tombstones


async def test_a_delete_whose_file_comes_back_while_it_waits_its_turn_is_no_push(tmp_path):
    """a.md and b.md unlinked; their deletes go one at a time. While the first DELETE is
    out, the other file is written again here (it takes back its memory): its delete
    is not sent, and the pass counts one push (the delete that went) and two steps of
    progress (that delete, and the other dropped)."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.push_concurrency = 1
        await synced(eng, a="A", b="B")
        mids = {eng.node(p).memory_id: p for p in ("/a.md", "/b.md")}
        await eng.op_unlink("/a.md")
        await eng.op_unlink("/b.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        back: list[str] = []

        async def meanwhile() -> None:
            [rec] = eng.transport.records[first:]
            [other] = [p for m, p in mids.items() if m != rec.path.rsplit("/", 1)[1]]
            back.append(other)
            await eng.op_write(other, "again")

        result = await held_pass(eng, "before", meanwhile)
        [path] = back
        [gone] = [m for m, p in mids.items() if p != path]
        assert sent(eng, first) == [f"DELETE {gone}"]
        assert (result.pushed, result.progress) == (1, 2)
        assert not eng.state.tombstones and eng.node(path).memory_id != gone
        assert eng.ctx.status.pushed == 1 + 2  # (the two creates of `synced`)


async def test_a_pass_sends_at_most_50_deletes_however_many_memories_are_known(tmp_path):
    """204 memories, 60 of them unlinked: a quarter of the known memories would be 51,
    but a pass sends at most 50 deletes; the other 10 wait for the next pass."""
    async with harness(tmp_path) as eng:
        await synced(eng, **{f"f{i:03d}": str(i) for i in range(204)})
        for i in range(60):
            await eng.op_unlink(f"/f{i:03d}.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert [s.split()[0] for s in sent(eng, first)] == ["DELETE"] * 50
        assert (result.pushed, result.left) == (50, 10)
        assert len(eng.server()) == 154 and len(eng.state.tombstones) == 10


# -- wave w11b --


async def test_a_rename_only_push_reads_nothing_of_the_content(tmp_path):
    """a.md, pushed, is renamed to b.md while its content is only on disk: the pass sends
    the new path alone, and reads nothing of the bytes it does not send (a large file's
    rename costs no read of its content, nor memory for it)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="text")
        await eng.op_rename("/a.md", "/b.md")
        await eng.quiet()  # the blob writer has written its file
        sha = sha256(data("text"))
        eng.cache.lru.pop(sha, None)
        assert eng.cache._path(sha).exists()
        mid = eng.node("/b.md").memory_id
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"POST {mid}"]
        assert "content" not in eng.transport.records[first].body
        assert (result.pushed, eng.server()["/b.md"]) == (1, (mid, sha))
        assert sha not in eng.cache.lru


async def test_the_answer_of_a_push_started_while_busy_is_read_at_once(tmp_path, monkeypatch):
    """The mount is busy with short gaps (a `cp -r` on a loaded machine) and stays so. A
    write-back pass's push goes in a gap, as one of the few started while busy; its
    answer is read at once (the transport here awaits the client's answer hook where a
    real connection reads the answer's headers), not held for a quiet mount, which never
    comes (ANSWER_WAIT_MAX, YIELD_MAX made endless here): the pass goes on during a long
    copy."""
    monkeypatch.setattr(pusher_mod, "YIELD_MAX", math.inf)
    monkeypatch.setattr(pusher_mod, "ANSWER_WAIT_MAX", math.inf)
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        eng.ctx.clock = GapClock()
        serve = eng.transport.handle_async_request

        async def answered(request):
            response = await serve(request)
            trace = request.extensions.get("trace")
            if trace is not None:
                await trace("http11.receive_response_headers.started", {})
            return response

        monkeypatch.setattr(eng.transport, "handle_async_request", answered)
        first = len(eng.transport.records)
        got = []

        async def act() -> None:
            got.append(await eng.pusher.push_pass())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(act)
            await trio.testing.wait_all_tasks_blocked()  # the pass ended, or waits on
            nursery.cancel_scope.cancel()
        assert sent(eng, first) == ["POST memories"]
        assert [(r.pushed, r.left) for r in got] == [(1, 0)]
        assert eng.state.sync_state(eng.node("/a.md")) == "synced"


# -- wave w11a --


async def test_a_delete_goes_out_when_another_file_holds_its_bytes_in_the_cache(tmp_path):
    """a.md and b.md synced; b.md is given a.md's bytes (written here, so cached), then
    a.md is unlinked. a's memory is not the only source of b's new content, so its
    delete, once due, goes out in the same pass as b's update: nothing is held back."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        a_mid, b_mid = eng.node("/a.md").memory_id, eng.node("/b.md").memory_id
        await eng.op_write("/b.md", "A")
        await eng.op_unlink("/a.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"DELETE {a_mid}", f"POST {b_mid}"]
        assert (result.pushed, result.left) == (2, 0) and not eng.state.tombstones
        assert eng.server() == {"/b.md": (b_mid, sha256(data("A")))}


async def test_a_delete_goes_out_at_the_very_moment_its_delay_is_out(tmp_path, monkeypatch):
    """a.md unlinked here: its delete is due `delete_delay` after the unlink, to the
    moment: a pass a clock tick before sends nothing; at that moment the loop's
    `next_due_in` says 0 (a pass now) and the pass it runs sends the delete (instead
    of finding nothing due and idling a retry period)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        due = eng.state.tombstones[mid].deleted_at + eng.ctx.options.delete_delay
        now = [math.nextafter(due, 0.0)]
        monkeypatch.setattr(pusher_mod, "time", type("Clock", (), {
            "time": staticmethod(lambda: now[0])}))
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert (sent(eng, first), result.pushed) == ([], 0)
        assert eng.pusher.next_due_in() > 0
        now[0] = due
        assert eng.pusher.next_due_in() == 0.0
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"DELETE {mid}"]
        assert (result.pushed, result.left) == (1, 0) and not eng.state.tombstones
        assert eng.server() == {}


# -- wave w12a --


async def test_a_delete_goes_out_beside_a_new_file_holding_the_same_cached_content(tmp_path):
    """a.md is deleted and b.md written with the very bytes a.md held: b.md's content is
    in the cache (not needed from a.md's memory), so a.md's delete goes out in the same
    pass as b.md's create instead of waiting."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="same")
        mid = eng.node("/a.md").memory_id
        await eng.op_write("/b.md", "same")
        await eng.op_unlink("/a.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first)[0] == f"DELETE {mid}"
        assert (result.pushed, result.left) == (2, 0) and not eng.state.tombstones
        assert sorted(eng.server()) == ["/b.md"]


async def test_two_flushes_at_once_each_count_as_flushing_until_they_end(tmp_path):
    """An unmount's flush and a `memfs flush` at once, against a server answering 503:
    while the long one still runs after the short one gives up, the pusher still counts a
    flush (a pass under way does not wait for a quiet mount); once the long one is
    cancelled too, none."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        eng.transport.rules = [FaultRule(lambda r: True, kind="fail", origins=("setup",))]
        during: list[int] = []

        async with trio.open_nursery() as nursery:
            nursery.start_soon(eng.pusher.flush, 3600.0)
            await eng.pusher.flush(0.2)
            during.append(eng.pusher._flushing)
            nursery.cancel_scope.cancel()
        assert during == [1] and eng.pusher._flushing == 0


# -- wave w13a --


async def test_a_file_moved_deeper_than_a_memory_path_may_go_stays_local_and_says_why(
        tmp_path):
    """A file 21 levels deep, one more than a memory path may have. The mount refuses to
    make one (ENAMETOOLONG), so the move is made in state here, as a state journaled
    without that check would hold it: nothing is sent for it (the server would refuse
    it), the file stays local-only and `memfs status` says which file and why."""
    async with harness(tmp_path) as eng:
        deep = "/" + "/".join(f"d{i}" for i in range(19))
        await eng.op_reconcile()
        await eng.op_mkdir(deep)
        await eng.op_mkdir("/top")
        await eng.op_write(f"{deep}/x.md", "mine")
        eng.state.rename(eng.node("/d0"), eng.node("/top"), "d0", None)
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [] and eng.server() == {}
        assert (result.pushed, result.progress) == (0, 1)
        path = f"/top{deep}/x.md"
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            f"{path} stays local-only: path has 21 segments; the maximum is 20"]


# -- wave w14a --


async def test_a_refused_files_rename_whose_answer_was_lost_is_found_applied(tmp_path):
    """A synced file given bytes the server cannot hold, then renamed: the pass sends the
    rename alone (the memory keeps the content it had), and its answer is lost. The next
    pass finds the memory at the new path holding its old content: the rename did land
    (counted as pushed), nothing is sent again, the file stays refused."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng._put("/a.md", b"\xff not text\n")
        await eng.op_rename("/a.md", "/b.md")
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="lose", origins=("setup",), times=1)]
        await eng.op_push()
        assert eng.state.doubts
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert not eng.state.doubts and result.pushed == 1
        assert [s for s in sent(eng, first) if s.startswith("POST")] == []
        assert eng.server() == {"/b.md": (mid, sha256(data("v1")))}
        assert eng.node("/b.md").base_path == "/b.md"
        assert eng.state.sync_state(eng.node("/b.md")) == "refused"


async def test_an_edit_refused_412_after_its_file_was_unlinked_counts_as_not_pushed(tmp_path):
    """Another writer edits a.md on the server while this mount's edit is out; the file is
    unlinked here before the answer comes: a 412. No file holds the memory any more, so
    there is no conflict to keep: the edit did not reach the server and the pass does not
    count it as pushed (`memfs status` would show one push too many)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_write("/a.md", "v2")
        pushed_before = eng.ctx.status.pushed

        async def meanwhile() -> None:
            await eng.op_r_edit("/a.md", "theirs")
            await eng.op_unlink("/a.md")

        result = await held_pass(eng, "before", meanwhile)
        assert (result.pushed, eng.ctx.status.pushed - pushed_before) == (0, 0)
        assert [v[1] for v in eng.server().values()] == [sha256(data("theirs"))]


async def test_a_delete_goes_out_while_a_renamed_file_holds_its_bytes_uncached(tmp_path):
    """Another writer's c.md and d.md hold the same bytes, listed here but never read (not
    cached). c.md is renamed, d.md unlinked: c's rename sends no content (its memory
    keeps it), so d's memory is not the only source of anything; d's delete goes out in
    the same pass as c's rename, not held back waiting for a fetch."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/c.md", "same")
        await eng.op_r_create("/d.md", "same")
        await eng.op_reconcile()
        c_mid, d_mid = eng.node("/c.md").memory_id, eng.node("/d.md").memory_id
        assert not eng.cache.has(eng.node("/c.md").sha)
        await eng.op_rename("/c.md", "/e.md")
        await eng.op_unlink("/d.md")
        age_tombstones(eng)
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"DELETE {d_mid}", f"POST {c_mid}"]
        assert (result.pushed, result.left) == (2, 0) and not eng.state.tombstones
        assert eng.server() == {"/e.md": (c_mid, sha256(data("same")))}


# -- wave r6w3 --


async def test_a_held_answer_is_read_at_the_look_that_reaches_answer_wait_max(
        tmp_path, mock_clock, monkeypatch):
    """A copy that never stops (FUSE asked at every moment): the answer of a push sent
    while the mount was quiet is read at the look that reaches ANSWER_WAIT_MAX, not one
    look later. (BUSY_WINDOW is a quarter second here, so that its looks reach
    ANSWER_WAIT_MAX exactly on the stopped trio clock.)"""
    monkeypatch.setattr(pusher_mod, "BUSY_WINDOW", 0.25)
    mock_clock.autojump_threshold = 0
    async with harness(tmp_path) as eng:
        mock_clock.jump(1000.0 - trio.current_time())  # (a clock long started, as trio's own)
        eng.ctx.clock = BusyUntilClock()
        start = trio.current_time()
        await eng.pusher._answer_ready()
        assert trio.current_time() - start == pusher_mod.ANSWER_WAIT_MAX


# -- wave r6w7 --


class SetIdleClock(IdleClock):
    """FUSE was last asked `idle` seconds ago, whatever the time: the test sets it."""

    def __init__(self, idle: float) -> None:
        super().__init__()
        self.idle = idle

    def idle_for(self) -> float:
        return self.idle


async def test_a_push_that_finds_the_mount_quiet_goes_at_once_not_counted_as_busy(
        tmp_path, mock_clock, monkeypatch):
    """A push on a quiet mount goes at once and does not count as one started while busy
    (`_yield_to_mount` says False: it takes none of the BUSY_CONCURRENCY slots). While a
    push watches a mount busy without a gap (YIELD_MAX made endless, the trio clock
    stopped), FUSE falls silent for exactly QUIET_WINDOW: a new push goes at once, not
    queued behind the watcher, and the watcher goes at its next look, also as a quiet
    push, not a busy one."""
    monkeypatch.setattr(pusher_mod, "YIELD_MAX", math.inf)
    async with harness(tmp_path) as eng:
        assert await eng.pusher._yield_to_mount() is False  # (a clock no mount touches)
        clock = eng.ctx.clock = SetIdleClock(0.0)
        mock_clock.autojump_threshold = math.inf  # the clock stops
        got: list[tuple[str, bool]] = []

        async def push(name: str) -> None:
            got.append((name, await eng.pusher._yield_to_mount()))

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(push, "watcher")
                await trio.testing.wait_all_tasks_blocked()
                assert got == []  # it watches, sleeping BUSY_WINDOW
                clock.idle = pusher_mod.QUIET_WINDOW
                nursery.start_soon(push, "new")
                await trio.testing.wait_all_tasks_blocked()
                assert got == [("new", False)]  # (the clock has not moved)
                mock_clock.jump(pusher_mod.BUSY_WINDOW)
                await trio.testing.wait_all_tasks_blocked()
                assert got == [("new", False), ("watcher", False)]
        finally:
            mock_clock.autojump_threshold = 0  # (the clean-up's waits end)
        assert eng.pusher._busy_pushes == 0


async def test_an_unmount_ends_a_push_s_wait_for_a_quiet_mount(
        tmp_path, mock_clock, monkeypatch):
    """A push watches a mount busy without a gap (YIELD_MAX made endless, the trio clock
    stopped) when the unmount stops the pusher: at its next look the push goes, as one
    that does not count among those started while busy (a pass under way finishes)."""
    monkeypatch.setattr(pusher_mod, "YIELD_MAX", math.inf)
    async with harness(tmp_path) as eng:
        eng.ctx.clock = SetIdleClock(0.0)
        mock_clock.autojump_threshold = math.inf  # the clock stops
        got: list[bool] = []

        async def push() -> None:
            got.append(await eng.pusher._yield_to_mount())

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(push)
                await trio.testing.wait_all_tasks_blocked()
                mock_clock.jump(pusher_mod.BUSY_WINDOW)
                await trio.testing.wait_all_tasks_blocked()
                assert got == []  # still busy: it looks again
                await eng.pusher.stop()
                mock_clock.jump(pusher_mod.BUSY_WINDOW)
                await trio.testing.wait_all_tasks_blocked()
                assert got == [False]
        finally:
            mock_clock.autojump_threshold = 0  # (the clean-up's waits end)



# -- wave r6w8 --


async def test_a_pushed_create_and_edit_are_told_with_their_path_memory_and_version(tmp_path):
    """`memfs watch` hears each write the server applied as "pushed": at the file's path,
    naming its memory and the version the server's answer made (the version id by which
    the watcher finds the author and the change feed knows the write as ours)."""
    async with harness(tmp_path) as eng:
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.op_write("/a.md", "v1")
        await eng.op_push()
        mid = eng.node("/a.md").memory_id
        made = eng.db.get_memory(eng.store_id, mid)["memory_version_id"]
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        edited = eng.db.get_memory(eng.store_id, mid)["memory_version_id"]
        events = [sub.receive.receive_nowait() for _ in range(2)]
        assert [(e.kind, e.path, e.memory_id, e.version_id) for e in events] == [
            ("pushed", "/a.md", mid, made), ("pushed", "/a.md", mid, edited)]
        assert made != edited
        with pytest.raises(trio.WouldBlock):
            sub.receive.receive_nowait()  # one event a write


async def test_a_note_said_at_every_pass_is_kept_once_with_its_latest_time(tmp_path, caplog):
    """A create that waits for a full store is tried at every pass, and each try says
    why: `memfs status` keeps that note once (the newest time), not once per pass,
    so the other warnings are not pushed out, and the log has it once."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", status=400,
                                         error_type="invalid_request_error",
                                         message="memory store has reached its 2000-memory limit",
                                         origins=("setup",))]
        await eng.op_write("/a.md", "v1")
        eng.ctx.status.note("an earlier warning")
        with caplog.at_level(logging.DEBUG, logger="memfs.sync.common"):
            for _ in range(3):
                await eng.pusher.push_pass()
        waits = "/a.md waits: the store holds its 2,000-memory maximum"
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "an earlier warning", waits]
        assert [r.levelno for r in caplog.records if r.getMessage() == waits] == [
            logging.WARNING, logging.DEBUG, logging.DEBUG]


async def test_a_rename_the_server_refuses_waits_with_backoff_and_keeps_its_content(tmp_path):
    """a.md renamed to b.md; the server refuses the rename (400: an archived store, a
    path its rules refuse). The content was not what was refused: the file is not marked
    refused, and the rename waits with backoff and says why, instead of going out again
    at every pass (it did, every 3 s, found by a helper)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        await eng.op_rename("/a.md", "/b.md")
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and bool(r.memory_id),
                                         status=400, error_type="invalid_request_error",
                                         message="memory store is archived and read-only",
                                         origins=("setup",))]
        first = len(eng.transport.records)
        await eng.pusher.push_pass()
        await eng.pusher.push_pass()
        mid = eng.node("/b.md").memory_id
        assert sent(eng, first) == [f"POST {mid}"]  # once: the second pass waits
        node = eng.node("/b.md")
        assert node.refused_sha is None and node.fail_count == 1
        assert node.error == ("BadRequestError: memory store is archived and read-only "
                              "(HTTP 400, invalid_request_error)"), node.error
        assert eng.server()["/a.md"][1] == sha256(data("A"))


async def test_a_memory_another_client_made_at_a_temp_name_syncs_like_any_other(tmp_path):
    """Another client made /notes~ (a name memfs keeps local when a file here takes it):
    it is a memory, so an edit here goes out, it counts against the cap, and its state
    is `pending`, not `local-only`. Before, the edit stayed here, named as a temp file
    kept by design, while a delete here went out (found by a helper)."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_r_create("/notes~", "theirs")
        await eng.op_reconcile()
        node = eng.node("/notes~")
        assert node.memory_id is not None and eng.state.memory_count() == 1
        await eng.op_write("/notes~", "mine")
        assert eng.state.sync_state(eng.node("/notes~")) == "pending"
        await eng.op_push()
        assert eng.server()["/notes~"][1] == sha256(data("mine"))
        await eng.op_write("/new~", "a temp file of ours")  # stays local, as before
        await eng.op_push()
        assert "/new~" not in eng.server() and eng.state.memory_count() == 1
