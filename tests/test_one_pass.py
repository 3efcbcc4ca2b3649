"""What one push pass or one listing did, checked right after it (no settling passes).

The interleaving scenarios check where a run settles, after flush and reconcile
passes; a pass that decided wrong is often repaired by the next one, which those
checks cannot see. These tests run one pass over the harness's engine (the daemon's
`StoreEngine` and its in-process server, tests/interleave.py) and check what that pass
sent, what the server holds and what the file's state became, before anything else
runs; a few run the pusher's or the reconciler's loop for some turns. Each pins a
mutant of the sync core that no test killed (docs/TESTING.md, "Mutation testing"),
shown failing with it; the sections at the end are named after the batches of
survivors they answer. Writing them turned up defects too (a change the feed showed
while the file had unsaved writes waited for the next full listing).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from interleave import (
    ORIGIN,
    RESERVED_PREFIX,
    Database,
    Engine,
    FaultRule,
    HeldTransport,
    Hold,
    age_tombstones,
    make_engine,
)

from memfs.core.nodes import PARK_DIR
from memfs.core.paths import MAX_MEMORIES_PER_STORE
from memfs.core.signals import IdleClock
from memfs.mount.engine import store_status
from memfs.state.blobs import sha256
from memfs.state.report import pending
from memfs.sync import doubts
from memfs.sync import feed as feed_mod
from memfs.sync import pusher as pusher_mod
from memfs.sync import reconciler as reconciler_mod
from memfs.sync.events import Subscriber
from memfs.sync.reconciler import PARK_PATIENCE


@contextlib.asynccontextmanager
async def harness(tmp: Path) -> AsyncIterator[Engine]:
    db = Database(":memory:")
    eng = make_engine(tmp, HeldTransport(db, db.create_store(name="one-pass")["id"]))
    try:
        async with trio.open_nursery() as background:
            await eng.store.start_content(background)
            yield eng
            background.cancel_scope.cancel()
    finally:
        await eng.store.client.aclose()
        eng.store.close()


def sent(eng: Engine, since: int = 0) -> list[str]:
    """The requests since record `since`: "METHOD what" (what: memories, or mem_…)."""
    return [f"{r.method} {r.path.rsplit('/', 1)[-1]}" for r in eng.transport.records[since:]]


def data(text: str) -> bytes:
    return (text + "\n").encode()


async def synced(eng: Engine, **files: str) -> None:
    """Files written and pushed, the server holding each."""
    for name, text in files.items():
        await eng.op_write(f"/{name}.md", text)
    result = await eng.pusher.push_pass()
    assert result.pushed == len(files) and eng.pusher.pending_total() == 0


async def lost_update(eng: Engine) -> str:
    """a.md synced at v1, then written v2: the update applied, its answer lost (in
    doubt). Its memory id."""
    await synced(eng, a="v1")
    mid = eng.node("/a.md").memory_id
    eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                     kind="lose", origins=("setup",), times=1)]
    await eng.op_write("/a.md", "v2")
    await eng.op_push()
    assert eng.state.doubts
    return mid


# -- the push pass ---------------------------------------------------------------------------


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


async def test_a_refusal_makes_the_file_wait_and_says_why_in_the_same_pass(tmp_path):
    """The server refuses the create (403): the file keeps its content, waits (a retry
    time, doubling) and carries the refusal as its error; nothing is in doubt."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", origins=("setup",),
                                         times=1)]
        await eng.op_write("/a.md", "v1")
        await eng.op_push()
        node = eng.node("/a.md")
        assert node.fail_count == 1 and node.retry_at and "refused by the test" in node.error
        assert eng.state.sync_state(node) != "synced" and not eng.state.doubts
        assert eng.server() == {}


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


# -- the loops (a mount runs them; here for a few turns) -------------------------------------


async def until(check, seconds: float = 10.0) -> None:
    """Wait for check() to hold; a loop that never gets there fails the test."""
    with trio.fail_after(seconds):
        while not check():
            await trio.sleep(0.01)


async def test_the_push_loop_sends_a_write_once_its_write_back_delay_has_passed(tmp_path):
    """The pusher's loop, started after a close: it waits out the write-back delay (the
    close's wake-up taken, nothing else wakes it) and then pushes."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay = 0.3
        await eng.op_write("/a.md", "v1")
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: "/a.md" in eng.server())
            await eng.pusher.stop()
        assert eng.pusher.pending_total() == 0


async def test_a_refused_listing_is_reported_and_the_loop_goes_on(tmp_path):
    """The listing is refused (403, not a connection failure): the reconciler's loop says
    so in the status and keeps running; woken, its next listing shows the store."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/n.md", "new")
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET", origins=("setup",),
                                         times=1)]
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.reconciler.run)
            await until(lambda: (eng.ctx.status.last_error or "").startswith("listing failed"))
            eng.ctx.reconcile_wakeup.set()  # not the 5 s a refusal waits
            await until(lambda: eng.tree_sha("/n.md") == sha256(data("new")))
            loops.cancel_scope.cancel()


async def test_each_feed_poll_is_counted_and_a_full_listing_is_not_one(tmp_path):
    """`memfs_feed_polls` (the metrics endpoint): one per poll of the change feed."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        assert eng.ctx.metrics.feed_polls == 0
        await eng.op_poll()
        await eng.op_poll()
        assert eng.ctx.metrics.feed_polls == 2


async def test_a_change_the_feed_let_wait_is_not_counted_as_missed(tmp_path):
    """A change the feed named while the file had unsaved writes waits; the safety net's
    full listing then applies it. The feed missed nothing (it named the change), and the
    count that must stay 0 stays 0."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()  # the feed's starting point
        await eng.op_open_write("/a.md", "v1")
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_poll()
        await eng.op_close("/a.md")
        eng.reconciler.last_full -= eng.ctx.options.full_resync  # the safety net is due
        listed = eng.ctx.status.last_full_listing_at
        await eng.op_poll()
        assert eng.ctx.status.last_full_listing_at != listed  # (a full listing)
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert eng.ctx.status.feed_missed == 0
        assert not any("missed" in note for note in eng.ctx.status.warnings)


# -- the listing -------------------------------------------------------------------------------


async def test_a_listing_saves_when_it_last_synced(tmp_path):
    """For `memfs status` of an unmounted store (it reads state.db): when the last pass
    ended, and how long it took (no longer than the listing, seen from outside)."""
    async with harness(tmp_path) as eng:
        before = time.time()
        await eng.op_reconcile()
        after = time.time()
        at, seconds = (float(eng.state.get_meta(k)) for k in ("last_sync_at",
                                                               "last_sync_seconds"))
        assert before <= at <= after and 0 <= seconds <= after - before
        assert (at, seconds) == (eng.ctx.status.last_sync_at, eng.ctx.status.last_sync_seconds)


async def test_a_full_listing_leaves_a_file_deleted_here_deleted(tmp_path):
    """a.md unlinked: its delete waits out the delay, the memory still on the server. A
    full listing shows that memory (no file holds it): it stays a pending delete, not a
    new memory to show (the file must not come back)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_reconcile()
        assert eng.node("/a.md") is None and mid in eng.state.tombstones


async def test_a_listing_that_meets_an_unpushed_edit_keeps_it_as_a_conflict(tmp_path):
    """a.md edited here (not pushed yet) and there: the listing puts the server's version
    in the tree and keeps ours as a conflict that says why (`memfs conflicts` shows it)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="base")
        await eng.op_write("/a.md", "mine")
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("theirs"))
        [row] = eng.state.conflicts()
        assert (row["local_sha"], row["reason"]) == \
            (sha256(data("mine")), "changed on the server and here at the same time")


async def test_a_new_memory_from_the_server_is_told_as_created(tmp_path):
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.op_r_create("/n.md", "new")
        await eng.op_reconcile()
        event = sub.receive.receive_nowait()
        assert (event.kind, event.path) == ("created", "/n.md")


async def test_a_feed_batch_goes_on_past_a_memory_made_and_deleted_elsewhere(tmp_path):
    """One poll's changes: x made and deleted by another writer (nothing to do here),
    then an edit of a.md and a new z.md: both applied in that poll."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()  # the feed's first poll: its starting point
        await eng.op_r_create("/x.md", "x")
        x_mid = eng.server()["/x.md"][0]
        await eng.op_r_delete("/x.md")
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_r_create("/z.md", "z")
        await eng.op_r_create("/y.md", "y")
        y_mid = eng.server()["/y.md"][0]
        await eng.op_r_delete("/y.md")
        first = len(eng.transport.records)
        await eng.op_poll()
        assert not {f"GET {x_mid}", f"GET {y_mid}"} & set(sent(eng, first))  # never here
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert eng.tree_sha("/z.md") == sha256(data("z"))


async def test_a_remote_rename_is_told_as_renamed(tmp_path):
    """`memfs watch` hears a memory moved on the server as "renamed", with both paths."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.op_r_rename("/a.md", "/b.md")
        await eng.op_reconcile()
        event = sub.receive.receive_nowait()
        assert (event.kind, event.path, event.old_path) == ("renamed", "/b.md", "/a.md")
        assert eng.tree_sha("/b.md") == sha256(data("v1"))


async def test_a_change_seen_while_the_file_had_unsaved_writes_is_read_again(tmp_path):
    """A poll met another writer's v2 while a.md was open with unsaved writes: the row
    waits (content WAIT). Those writes were v1 again (nothing to push at the close), so
    no push meets the change either: the next poll names a.md once more and takes v2."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()  # the feed's starting point
        await eng.op_open_write("/a.md", "v1")
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_poll()
        assert eng.tree_sha("/a.md") == sha256(data("v1"))  # waits for the close
        await eng.op_close("/a.md")
        await eng.op_push()
        await eng.op_poll()
        assert eng.tree_sha("/a.md") == sha256(data("v2"))


# -- requests that meet another writer's change (mutation survivors) ---------------------------


async def held_pass(eng: Engine, point: str, meanwhile: Callable[[], Awaitable[None]],
                    *, index: int = 0, action: Callable[[], Awaitable[Any]] | None = None,
                    ) -> Any:
    """One push pass (or `action`) whose request `index` waits at `point`
    (interleave.py: "before" the server applies it, "after": applied, its answer not
    delivered yet) while `meanwhile` runs; then it goes on. What the pass returned."""
    hold = Hold(index, point)
    eng.transport.holds, eng.transport.action_count = {index: hold}, 0
    eng.transport.reached = trio.Event()
    got: list[Any] = []

    async def act() -> None:
        ORIGIN.set("action")  # (this task's own context: the hold counts its requests)
        try:
            got.append(await (action or eng.pusher.push_pass)())
        finally:
            eng.transport.reached.set()  # a pass that sent nothing fails the assert below

    async with trio.open_nursery() as nursery:
        nursery.start_soon(act)
        await eng.transport.reached.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert hold.rec is not None
        await meanwhile()
        hold.release.set()
    eng.transport.holds = {}
    return got[0]


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


# -- mutation survivors, batch 1 ----------------------------------------------------------------


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


async def test_a_listing_that_meets_no_server_goes_offline_and_the_loop_goes_on(tmp_path):
    """The listing's connection drops (no answer): the reconciler's loop says the mount is
    offline and keeps running; woken, its next listing shows the store, and the mount
    is online again."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/n.md", "new")
        eng.transport.rules = [FaultRule(lambda r: r.is_listing, kind="lose",
                                         origins=("setup",), times=1)]
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.reconciler.run)
            await until(lambda: not eng.ctx.status.online)
            assert eng.ctx.status.offline_reason.startswith("APIConnectionError")
            eng.ctx.reconcile_wakeup.set()  # not the backoff's wait
            await until(lambda: eng.tree_sha("/n.md") == sha256(data("new")))
            assert eng.ctx.status.online and eng.ctx.status.offline_reason is None
            loops.cancel_scope.cancel()


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


async def test_a_feed_read_older_than_a_fetch_does_not_roll_the_file_back(tmp_path):
    """The feed names a.md (another writer's v2); while its read of a.md is on the way back,
    the writer makes v3 and a read here (a cache miss) fetches v3, which the file takes.
    The poll's answer (v2) is older than that base: it is skipped, and a.md stays v3."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/a.md", "v1")
        await eng.op_reconcile()  # a.md listed, its content not fetched
        mid = eng.node("/a.md").memory_id
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_edit("/a.md", "v2")
        first = len(eng.transport.records)

        async def meanwhile() -> None:
            await eng.op_r_edit("/a.md", "v3")
            await eng.op_read("/a.md")
            assert eng.node("/a.md").base_sha == sha256(data("v3"))

        await held_pass(eng, "after", meanwhile, index=1, action=eng.op_poll)
        assert sent(eng, first)[:2] == ["GET memory_versions", f"GET {mid}"]  # (held: 1)
        assert eng.tree_sha("/a.md") == sha256(data("v3"))
        assert eng.node("/a.md").base_sha == sha256(data("v3"))


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
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        node = eng.node("/a.md")
        assert (node.base_sha, node.sha) == (sha256(data("v3")), sha256(data("v3")))
        assert not eng.state.doubts and not eng.state.is_dirty(node)
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions"]
        assert (result.pushed, result.progress) == (0, 1)  # resolved, no push of ours


async def test_a_memory_deleted_here_and_changed_there_is_restored_and_said_so(tmp_path):
    """a.md unlinked here (its delete waits out the delay); another writer changes it. The
    listing restores the server's version and says so in `memfs status`."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_unlink("/a.md")
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("v2")) and eng.state.tombstones == {}
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == \
            ["/a.md was deleted here but changed on the server; restoring the server's version"]


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


# -- mutation survivors, batch 2a ---------------------------------------------------------------


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


def test_versions_in_doubt_are_read_from_no_earlier_than_the_epoch():
    """A request sent less than SKEW after 1970 (a board with no real-time clock, before
    its clock is set): the versions are read from the epoch on, to the microsecond."""
    assert doubts._since(0.0) == "1970-01-01T00:00:00.000000Z"
    assert doubts._since(doubts.SKEW + 0.5) == "1970-01-01T00:00:00.500000Z"


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
        result = await eng.pusher.push_pass()
        assert [r.method for r in eng.transport.records[first:]] == ["GET", "GET"]
        assert (result.pushed, eng.ctx.status.pushed) == (1, pushed + 1)
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_sha, node.sha) == (mid, sha256(data("v2")),
                                                            sha256(data("v2")))
        assert not eng.state.doubts and not eng.state.is_dirty(node)
        assert eng.state.conflicts() == []
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("v3")) and eng.state.conflicts() == []


async def test_a_remote_rename_onto_a_new_local_file_waits_and_says_why(tmp_path):
    """Another writer renamed a.md to b.md while a new b.md, not pushed yet, is open here
    with unsaved writes: the listing cannot move a.md onto it (no later row frees the
    place), leaves a.md where it is and says why in `memfs status`."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        await eng.op_write("/b.md", "mine")
        await eng.op_open_write("/b.md", "mine, more")
        await eng.op_r_rename("/a.md", "/b.md")
        await eng.op_reconcile()
        a = eng.node("/a.md")
        assert (a.base_path, eng.state.is_dirty(a)) == ("/a.md", False)
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "cannot move /a.md to /b.md (renamed on the server): the place is taken locally"]
        await eng.op_close("/b.md")


async def test_a_pending_delete_of_a_memory_deleted_elsewhere_is_settled_by_a_listing(
        tmp_path):
    """a.md unlinked here (its delete waits out the delay) and deleted on the server by
    another writer: the listing confirms it gone (404) and nothing is left to send."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_r_delete("/a.md")
        first = len(eng.transport.records)
        await eng.op_reconcile()
        assert f"GET {mid}" in sent(eng, first)
        assert eng.state.tombstones == {} and eng.pusher.pending_total() == 0
        first = len(eng.transport.records)
        age_tombstones(eng)
        await eng.op_push()
        assert sent(eng, first) == []


async def test_status_shows_a_feed_anchored_at_an_empty_stores_start(tmp_path):
    """A listing of a store that never had a version anchors the feed at its start:
    `memfs status` says "the store's start", not a time."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        assert store_status(eng.store)["feed"]["position"] == "the store's start"
        await eng.op_r_create("/n.md", "new")
        await eng.op_poll()
        assert store_status(eng.store)["feed"]["position"] != "the store's start"


async def test_another_clients_park_is_left_alone_until_it_is_abandoned(tmp_path):
    """Another client moved a.md's memory to a park place (its swap under way): the
    listing leaves the file alone (nothing to push). Once that park has stood longer
    than PARK_PATIENCE, it is abandoned: our place wins and the push moves it back."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        park = f"{PARK_DIR}/{mid}.0badcafe"
        await eng.op_r_rename("/a.md", park)
        await eng.op_reconcile()
        assert eng.node("/a.md").base_path == "/a.md" and eng.pusher.pending_total() == 0
        eng.reconciler._parked_since[mid] -= PARK_PATIENCE + 1.0
        await eng.op_reconcile()
        assert eng.node("/a.md").base_path == park and eng.pusher.pending_total() == 1
        await eng.op_push()
        assert eng.server() == {"/a.md": (mid, sha256(data("v1")))}


async def test_a_lost_update_written_over_after_a_listing_took_theirs_is_not_sent_again(
        tmp_path):
    """a.md's update to v2 was applied, its answer lost; another writer wrote v3 over it.
    A listing came while the doubt could not be resolved (its read refused): v3 took the
    tree and our v2 is kept as a conflict. The next pass finds v2 among the versions, but
    the base has moved since (the listing set it): our write is superseded, so nothing is
    sent, the file stays clean at v3 and the conflict stays."""
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET" and r.memory_id == mid,
                                         origins=("setup",), times=1)]
        await eng.op_r_edit("/a.md", "v3")
        await eng.op_reconcile()
        node = eng.node("/a.md")
        assert eng.state.doubts and node.base_sha == sha256(data("v3"))
        [row] = eng.state.conflicts()
        first = len(eng.transport.records)
        result = await eng.pusher.push_pass()
        assert sent(eng, first) == [f"GET {mid}", "GET memory_versions"]
        assert (result.pushed, result.progress, result.left) == (0, 1, 0)
        assert (node.sha, node.base_sha) == (sha256(data("v3")), sha256(data("v3")))
        assert not eng.state.doubts and not eng.state.is_dirty(node)
        assert eng.state.conflicts() == [row] and row["local_sha"] == sha256(data("v2"))


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


# -- mutation survivors, batch 2b ---


async def test_a_listing_takes_a_memory_holding_a_new_files_bytes_as_its_own(tmp_path):
    """a.md written here, not pushed yet; another writer creates /a.md with the very same
    bytes. The listing makes their memory this file's (no conflict, nothing to push)."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/a.md", "same")
        await eng.op_r_create("/a.md", "same")
        [(mid, _sha)] = eng.server().values()
        await eng.op_reconcile()
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_path, node.base_sha) == \
            (mid, "/a.md", sha256(data("same")))
        assert eng.state.conflicts() == [] and eng.pusher.pending_total() == 0


async def test_a_write_waits_out_the_write_back_delay_but_not_past_the_longest(tmp_path):
    """A file just written goes out `write_back_delay` after its last change; one that
    keeps changing goes out `max_push_delay` after its first change all the same."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay, eng.ctx.options.max_push_delay = 60.0, 120.0
        await eng.op_write("/a.md", "v1")
        result = await eng.pusher.push_pass()
        assert (result.pushed, eng.server()) == (0, {})
        assert 50.0 < eng.pusher.next_due_in() <= 60.0
        eng.node("/a.md").dirty_since -= 121.0  # first changed two minutes ago
        result = await eng.pusher.push_pass()
        assert result.pushed == 1 and "/a.md" in eng.server()


async def test_the_push_loop_takes_its_wake_up_and_sleeps_until_the_next(tmp_path):
    """The loop, woken by a close, pushes the file and then sleeps until the next change:
    the wake-up it took is spent (a loop that kept it would wake and rescan every file,
    ten times a second, for as long as the mount is up)."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay = 0.2
        await eng.op_write("/a.md", "v1")
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: "/a.md" in eng.server())
            await trio.testing.wait_all_tasks_blocked()
            assert not eng.ctx.push_wakeup.is_set()
            await eng.pusher.stop()


async def test_the_push_loop_offline_waits_for_the_server_then_pushes_at_once(tmp_path):
    """No server answers: the loop's pass goes offline (the status says so) and the loop
    backs off; when the server is found again (the reconciler's listing comes back
    online), the loop pushes at once, not at the end of its backoff."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: True, kind="fail", origins=("setup",))]
        await eng.op_write("/a.md", "v1")
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: not eng.ctx.status.online)
            eng.transport.rules = []
            eng.ctx.came_online()  # what the reconciler does on its next good listing
            await until(lambda: "/a.md" in eng.server())
            await eng.pusher.stop()
        assert eng.pusher.pending_total() == 0 and eng.ctx.status.online


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


async def test_a_poll_reads_our_own_writes_as_ours(tmp_path):
    """The feed's cost per poll (`memfs status`): the versions our own pushes wrote are
    counted as ours, no news to apply."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()  # the feed's starting point
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        await eng.op_poll()
        cost = eng.ctx.status.feed_polls[-1]
        assert (cost["versions"], cost["own"]) == (2, 2)


async def test_a_poll_after_our_own_deletes_reads_them_as_no_news(tmp_path, monkeypatch):
    """`rm` of many files: their deletes pushed, the next poll reads those versions. No
    file and no pending delete holds them: already applied here, they are no news, and
    the poll does not fall back to a full listing (as it does when too many are)."""
    monkeypatch.setattr(feed_mod, "MAX_VERSIONS", 2)
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B", c="C")
        await eng.op_poll()  # the feed's starting point
        for name in ("a", "b", "c"):
            await eng.op_unlink(f"/{name}.md")
        age_tombstones(eng)
        await eng.op_push()
        assert eng.server() == {} and eng.state.tombstones == {}
        listed = eng.ctx.status.last_full_listing_at
        first = len(eng.transport.records)
        await eng.op_poll()
        assert eng.ctx.status.last_full_listing_at == listed
        assert not any(r.is_listing for r in eng.transport.records[first:])


async def test_a_listing_shows_a_new_memory_where_one_of_ours_moved_away(tmp_path):
    """Another writer moves the file /notes to /old-notes and creates /notes/today.md
    (a directory where the file was). One listing moves our file first, then shows the
    new memory in the new directory; nothing is said to collide."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/notes", "N")
        await eng.op_push()
        mid = eng.node("/notes").memory_id
        await eng.op_r_rename("/notes", "/old-notes")
        await eng.op_r_create("/notes/today.md", "T")
        await eng.op_reconcile()
        assert eng.node("/old-notes").memory_id == mid
        assert eng.tree_sha("/notes/today.md") == sha256(data("T"))
        assert not any("overlaps" in note for note in eng.ctx.status.warnings)


class GapClock(IdleClock):
    """A mount that keeps busy with short gaps (a `cp -r` on a loaded machine): FUSE was
    last asked longer ago than BUSY_WINDOW, never as long as QUIET_WINDOW."""

    def idle_for(self) -> float:
        return (pusher_mod.BUSY_WINDOW + pusher_mod.QUIET_WINDOW) / 2


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


async def test_a_delete_meets_our_refused_bytes_while_the_file_comes_back(tmp_path):
    """a.md's update to v2 was refused (403: it waits); then a.md is unlinked, and another
    writer writes v2, the very bytes we last sent. The delete (expecting v1) meets 409:
    the memory holds what we sent, ours. Meanwhile a.md is written again here (it takes
    back its memory): the delete is not sent again, nothing is logged as a bug, and the
    new a.md goes over v2 with no conflict."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
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
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
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


async def test_a_listing_shows_a_new_memory_where_a_chain_of_ours_moved_away(tmp_path):
    """As test_a_listing_shows_a_new_memory_where_one_of_ours_moved_away, but our /notes
    moves to /old-notes, which our other file leaves for /older later in the pass (a
    chain): /notes moves only once the rest of the pass is applied, and the new
    /notes/today.md is tried again after it, in the same listing. (It was not: the file
    was missing, the status said it overlapped a local file, and the feed's next polls
    did not bring it either, the listing having shown it: it waited for the next full
    listing, `full_resync`, 10 minutes.)"""
    async with harness(tmp_path) as eng:
        await eng.op_write("/notes", "N")
        await eng.op_write("/old-notes", "O")
        await eng.op_push()
        await eng.op_r_rename("/old-notes", "/older")
        await eng.op_r_rename("/notes", "/old-notes")
        await eng.op_r_create("/notes/today.md", "T")
        await eng.op_reconcile()
        assert (eng.tree_sha("/old-notes"), eng.tree_sha("/older")) == \
            (sha256(data("N")), sha256(data("O")))
        assert eng.tree_sha("/notes/today.md") == sha256(data("T"))
        assert not any("overlaps" in note for note in eng.ctx.status.warnings)


# -- mutation survivors, batch 3 ---


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


async def test_a_full_listing_lists_the_root_then_each_directory_at_once(tmp_path):
    """A store with memories at the root and in two directories: a full listing asks for
    the root's own entries (`depth=1`: its files, and one marker per directory), then
    lists the directories by prefix, both at once (a store of many directories is listed
    in the time of its largest one, not page after page); every memory is shown."""
    async with harness(tmp_path) as eng:
        for path in ("/r.md", "/a/x.md", "/b/c/y.md"):
            await eng.op_r_create(path, path)
        first = len(eng.transport.records)

        def listings() -> list[tuple[str | None, str | None]]:
            return sorted(((r.query.get("depth"), r.query.get("path_prefix"))
                           for r in eng.transport.records[first:] if r.is_listing), key=str)

        async def meanwhile() -> None:  # the first directory's listing held: both went
            assert listings() == [("1", None), (None, "/a/"), (None, "/b/")]

        # (requests 0 and 1: the root's listing and the feed's head, read alongside it)
        await held_pass(eng, "before", meanwhile, index=2, action=eng.op_reconcile)
        assert listings() == [("1", None), (None, "/a/"), (None, "/b/")]
        assert {p: eng.tree_sha(p) for p in ("/r.md", "/a/x.md", "/b/c/y.md")} == \
            {p: sha256(data(p)) for p in ("/r.md", "/a/x.md", "/b/c/y.md")}


async def test_a_new_memory_met_while_a_new_file_there_had_unsaved_writes_is_read_again(
        tmp_path):
    """a.md is new here (not pushed yet) and open with unsaved writes when the feed shows
    another writer's new /a.md: that row waits for the close. The feed will not show the
    memory again, so the next poll names it once more (no push in between): their a.md
    takes the tree and ours is kept as a conflict."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()  # the feed's starting point
        await eng.op_write("/a.md", "mine")
        await eng.op_open_write("/a.md", "mine, more")
        await eng.op_r_create("/a.md", "theirs")
        [(mid, _sha)] = eng.server().values()
        await eng.op_poll()
        assert eng.node("/a.md").memory_id is None and eng.state.conflicts() == []
        await eng.op_close("/a.md")
        first = len(eng.transport.records)
        await eng.op_poll()
        assert f"GET {mid}" in sent(eng, first)
        node = eng.node("/a.md")
        assert (node.memory_id, eng.tree_sha("/a.md")) == (mid, sha256(data("theirs")))
        [row] = eng.state.conflicts()
        assert (row["local_sha"], row["reason"]) == \
            (sha256(data("mine, more")), "another writer created the same path")


async def test_a_memory_deleted_here_and_moved_there_onto_a_new_file_is_a_conflict(tmp_path):
    """a.md unlinked here (its delete waits out the delay) and a new b.md written here (not
    pushed yet); another writer edits a.md and moves it to /b.md. Their edit wins over our
    delete, which is dropped; /b.md is taken here, so once the rest of the listing is
    applied their b.md takes the tree and ours is kept as a conflict: nothing is left to
    delete."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_write("/b.md", "mine")
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_r_rename("/a.md", "/b.md")
        await eng.op_reconcile()
        assert eng.state.tombstones == {}
        node = eng.node("/b.md")
        assert (node.memory_id, eng.tree_sha("/b.md")) == (mid, sha256(data("theirs")))
        assert [r["local_sha"] for r in eng.state.conflicts()] == [sha256(data("mine"))]
        assert eng.node("/a.md") is None


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


async def test_a_remote_edit_a_listing_takes_drops_the_kernels_cached_pages(tmp_path):
    """a.md was read here (the kernel may hold its pages); another writer edits it. The
    listing that takes their version queues an invalidation of a.md's inode (the daemon
    sends it outside any FUSE request): the next read shows their bytes, not the old
    pages."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_reconcile()
        eng.ctx.take_invalidations()
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_reconcile()
        assert eng.ctx.take_invalidations() == [("inode", eng.node("/a.md").ino)]
        assert eng.tree_sha("/a.md") == sha256(data("v2"))


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
        with trio.fail_after(10):
            result = await eng.pusher.push_pass()
        assert trio.current_time() >= refused_by + 0.1  # (its retry-after, waited out)
        assert (result.pushed, result.offline, sent(eng, first)) == (1, None, ["POST memories"])
        assert eng.server() == {"/a.md": (eng.node("/a.md").memory_id, sha256(data("v1")))}
        assert eng.ctx.status.last_error is None


# -- mutation survivors, batch 4c ---


async def test_a_pending_delete_of_a_memory_deleted_elsewhere_is_settled_by_a_poll(tmp_path):
    """As test_a_pending_delete_of_a_memory_deleted_elsewhere_is_settled_by_a_listing, but
    the feed names the delete: the poll confirms it gone (404) and the pending delete is
    settled in that poll, nothing left to send."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_poll()  # the feed's starting point
        await eng.op_unlink("/a.md")
        await eng.op_r_delete("/a.md")
        first = len(eng.transport.records)
        await eng.op_poll()
        assert f"GET {mid}" in sent(eng, first)
        assert eng.state.tombstones == {} and eng.pusher.pending_total() == 0


async def test_a_file_edited_here_and_deleted_there_is_kept_and_said_so(tmp_path):
    """a.md edited here (not pushed yet) while another writer deletes it: the listing keeps
    the file, to be re-created, and `memfs status` says so."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_write("/a.md", "mine")
        await eng.op_r_delete("/a.md")
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("mine"))
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "/a.md was deleted on the server but edited here; re-creating it from the file"]


async def test_a_poll_applies_the_deletes_it_names_before_the_other_changes(tmp_path):
    """One poll names a memory deleted by another writer and an edit of another one (the
    delete's memory the newer of the two): `memfs watch` hears the delete first (deletes
    go first, they free paths the other rows may need), then the edit."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        by_id = sorted((eng.node(p).memory_id, p) for p in ("/a.md", "/b.md"))
        (_older, edited), (gone_mid, gone) = by_id
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_delete(gone)
        await eng.op_r_edit(edited, "theirs")
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.op_poll()
        events = [sub.receive.receive_nowait() for _ in range(2)]
        assert [(e.kind, e.path) for e in events] == [("deleted", gone), ("modified", edited)]
        assert events[0].memory_id == gone_mid


class _Trio:
    """The reconciler's `trio`, with the waits of its loop (`move_on_after`) recorded."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(trio, name)

    def move_on_after(self, seconds: float) -> trio.CancelScope:
        self.waits.append(seconds)
        return trio.move_on_after(seconds)


class _Monotonic:
    """The reconciler's `time`, its monotonic clock stopped (moved by the test)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def monotonic(self) -> float:
        return self.now


async def test_the_listing_loop_waits_a_turn_after_a_pass_and_five_seconds_after_a_refusal(
        tmp_path, monkeypatch):
    """A pass just ran (the mount's first listing): the reconciler's loop waits one poll
    interval before its own. Then its listing is refused (403): it waits 5 s (longer
    than the 1 s poll interval) before the next, unless woken."""
    fake = _Trio()
    monkeypatch.setattr(reconciler_mod, "trio", fake)
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET", origins=("setup",),
                                         times=1)]
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.reconciler.run)
            await until(lambda: len(fake.waits) == 1)
            eng.ctx.reconcile_wakeup.set()  # not the poll interval
            await until(lambda: (eng.ctx.status.last_error or "").startswith("listing failed"))
            await until(lambda: len(fake.waits) == 2)
            loops.cancel_scope.cancel()
        assert fake.waits == [eng.ctx.options.poll_interval, 5.0]


async def test_the_listing_loop_goes_at_once_when_a_poll_interval_has_passed(
        tmp_path, monkeypatch):
    """The last pass ended exactly one poll interval ago: the loop's pass is due, it runs
    at once (no wait first)."""
    clock = _Monotonic()
    monkeypatch.setattr(reconciler_mod, "time", clock)
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        assert eng.reconciler.last_pass == 1000.0
        clock.now += eng.ctx.options.poll_interval
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.reconciler.run)
            await trio.testing.wait_all_tasks_blocked()
            assert eng.reconciler.last_pass == clock.now  # ran, not waiting
            loops.cancel_scope.cancel()


async def test_a_poll_lists_everything_once_full_resync_has_passed(tmp_path, monkeypatch):
    """The last full listing was exactly `full_resync` ago: the next pass is the safety
    net's full listing, not a feed poll."""
    clock = _Monotonic()
    monkeypatch.setattr(reconciler_mod, "time", clock)
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_poll()
        assert eng.ctx.metrics.feed_polls == 1  # (the feed is trusted: a poll)
        clock.now += eng.ctx.options.full_resync
        listed = eng.ctx.status.last_full_listing_at
        await eng.op_poll()
        assert eng.ctx.metrics.feed_polls == 1
        assert eng.ctx.status.last_full_listing_at != listed


# -- mutation survivors, batch 4a ---


async def test_lost_answers_of_two_updates_found_applied_count_two_and_say_so_in_the_log(
        tmp_path, caplog):
    """a.md and b.md edited, both updates applied and both answers lost. The next pass
    finds both applied: two pushes, and the log names each file and its memory."""
    caplog.set_level(logging.INFO, logger="memfs.sync.doubts")
    async with harness(tmp_path) as eng:
        await synced(eng, a="a1", b="b1")
        mids = {p: eng.node(p).memory_id for p in ("/a.md", "/b.md")}
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="lose", origins=("setup",), times=1)]
        await eng.op_write("/a.md", "a2")
        await eng.op_push()  # (a lost answer ends the pass: b's goes in the next one)
        eng.transport.rules = [  # a's doubt cannot be read yet; b's answer lost too
            FaultRule(lambda r: r.method == "GET" and r.memory_id == mids["/a.md"],
                      origins=("setup",), times=1),
            FaultRule(lambda r: r.method == "POST" and r.memory_id == mids["/b.md"],
                      kind="lose", origins=("setup",), times=1)]
        await eng.op_write("/b.md", "b2")
        await eng.op_push()
        assert len(eng.state.doubts) == 2
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
    monkeypatch.setattr(doubts, "SKEW", 0.0)
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
        assert eng.transport.records[first].query["created_at[gte]"] == doubts._since(
            ticket.sent_at)
        assert result.pushed == 1 and not eng.state.doubts
        mid = eng.node("/a.md").memory_id
        assert mid != theirs
        assert eng.server() == {"/a.md": (mid, sha256(data("v1"))),
                                "/b.md": (theirs, sha256(data("v1")))}


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


# -- mutation survivors, batch 4b ---


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


async def test_a_flush_that_cannot_reach_the_server_says_offline_and_what_is_left(tmp_path):
    """A flush while the server answers every request 503: it gives up at its timeout and
    says it was offline, with one file left to push; the pusher no longer counts it as
    flushing (a later pass waits for a quiet mount again)."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        eng.transport.rules = [FaultRule(lambda r: True, kind="fail", origins=("setup",))]
        result = await eng.pusher.flush(0.2)
        assert result.offline is not None and (result.pushed, result.left) == (0, 1)
        assert eng.pusher._flushing == 0


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


async def test_a_push_pass_that_fails_as_a_bug_is_shown_and_the_loop_goes_on(
        tmp_path, monkeypatch):
    """A bug in a whole push pass (here: one raised by the pass) does not stop the
    pusher's loop; `memfs status` shows its kind and message."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay = 0.0
        await eng.op_write("/a.md", "v1")

        async def broken(**_: Any) -> pusher_mod.PassResult:
            raise RuntimeError("a bug in the pass")
        monkeypatch.setattr(eng.pusher, "push_pass", broken)
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: eng.ctx.status.last_error is not None)
            await eng.pusher.stop()
        assert eng.ctx.status.last_error == "push: RuntimeError: a bug in the pass"


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
