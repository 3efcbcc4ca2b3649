"""The pusher's and the reconciler's loops, run for a few turns on the harness's engine (a
mount runs them; the interleaving harness runs the passes itself): when they wake, how long
they wait, how they go on after a refusal, a lost server or a bug. Clocks are stopped or
recorded, never raced. Each test pins a mutant that no test killed (docs/TESTING.md,
"Mutation testing").
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import trio
import trio.testing
from interleave import ORIGIN, FaultRule, Hold
from onepass import data, harness, held_pass, lost_update, sent, synced, until

from memfs.state.blobs import sha256
from memfs.sync import pusher as pusher_mod
from memfs.sync import reconciler as reconciler_mod


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


async def test_a_listing_that_meets_no_server_goes_offline_and_the_loop_goes_on(tmp_path):
    """The listing's connection drops (no answer): the reconciler's loop says the mount is
    offline and keeps running; woken, its next listing shows the store, and the mount
    is online again."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/n.md", "new")
        eng.transport.rules = [FaultRule(lambda r: r.is_listing, kind="lose",
                                         origins=("setup",), times=1)]
        # What the status said when the loop went offline, recorded then: its offline
        # wait is the backoff's, drawn from 0 to 1 s, too short to be sure to see it.
        offline: list[tuple[bool, str | None]] = []
        went_offline = eng.ctx.went_offline

        def record(exc: Exception) -> float:
            delay = went_offline(exc)
            offline.append((eng.ctx.status.online, eng.ctx.status.offline_reason))
            return delay

        eng.ctx.went_offline = record
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.reconciler.run)
            await until(lambda: offline)
            [(online, reason)] = offline
            assert not online and reason.startswith("APIConnectionError")
            eng.ctx.reconcile_wakeup.set()  # not the backoff's wait
            await until(lambda: eng.tree_sha("/n.md") == sha256(data("new")))
            assert eng.ctx.status.online and eng.ctx.status.offline_reason is None
            loops.cancel_scope.cancel()


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


def break_the_pass(eng, monkeypatch) -> None:
    """Every push pass raises, as a bug in the pass would."""
    async def broken(**_: Any) -> pusher_mod.PassResult:
        raise RuntimeError("a bug in the pass")
    monkeypatch.setattr(eng.pusher, "push_pass", broken)


async def test_a_push_pass_that_fails_as_a_bug_is_shown_and_the_loop_goes_on(
        tmp_path, monkeypatch):
    """A bug in a whole push pass (here: one raised by the pass) does not stop the
    pusher's loop; `memfs status` shows its kind and message."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay = 0.0
        await eng.op_write("/a.md", "v1")
        break_the_pass(eng, monkeypatch)
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: eng.ctx.status.last_error is not None)
            await eng.pusher.stop()
        assert eng.ctx.status.last_error == "push: RuntimeError: a bug in the pass"


async def test_the_idle_push_loop_wakes_for_a_close(tmp_path):
    """The pusher's loop, nothing to push: it sleeps until a change, with no deadline.
    A file then written and closed wakes it (the close's wake-up, not the server being
    found again) and the file is pushed."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay = 0.0
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await trio.testing.wait_all_tasks_blocked()
            assert eng.server() == {}
            await eng.op_write("/a.md", "v1")
            await until(lambda: "/a.md" in eng.server())
            await eng.pusher.stop()
        assert eng.pusher.pending_total() == 0


async def test_the_push_loop_waits_five_seconds_after_a_pass_that_pushed_nothing(
        tmp_path, monkeypatch):
    """A push pass that could push nothing of what was due (here: it failed as a bug):
    the pusher's loop waits 5 s before it tries again, unless a change wakes it."""
    fake = _Trio()
    monkeypatch.setattr(pusher_mod, "trio", fake)
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay = 0.0
        await eng.op_write("/a.md", "v1")
        break_the_pass(eng, monkeypatch)
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: eng.ctx.status.last_error is not None)
            await trio.testing.wait_all_tasks_blocked()
            assert fake.waits[-1] == 5.0
            await eng.pusher.stop()


# -- wave w1b --


async def test_a_listing_pass_that_fails_as_a_bug_is_shown_and_the_loop_goes_on(
        tmp_path, monkeypatch):
    """A bug in a whole reconcile pass (here: one raised by the pass) does not stop the
    reconciler's loop; `memfs status` shows its kind and message, and that no sync got
    through since it began failing."""
    async with harness(tmp_path) as eng:
        calls: list[dict] = []

        async def broken(**kwargs: Any) -> None:
            calls.append(kwargs)
            raise RuntimeError("a bug in the pass")
        monkeypatch.setattr(eng.reconciler, "reconcile_pass", broken)
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.reconciler.run)
            await until(lambda: calls)
            await trio.testing.wait_all_tasks_blocked()
            loops.cancel_scope.cancel()
        assert eng.ctx.status.last_error == "reconcile: RuntimeError: a bug in the pass"
        assert eng.ctx.status.failing_since is not None


# -- wave w3a --


async def test_a_flush_counts_what_every_one_of_its_passes_pushed(tmp_path):
    """A flush that takes two passes: the first creates b.md while a.md's update meets
    404 (another writer deleted it) and a.md lets go of its memory; the second creates
    a.md again. The flush says 2 pushed (what the unmount reports), not only what its
    last pass pushed."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_r_delete("/a.md")
        await eng.op_write("/a.md", "v2")
        await eng.op_write("/b.md", "new")
        first = len(eng.transport.records)
        result = await eng.pusher.flush(60.0)
        assert sorted(sent(eng, first)) == sorted(
            [f"POST {mid}", f"GET {mid}", "POST memories", "POST memories"])
        assert (result.pushed, result.left, result.offline) == (2, 0, None)
        a, b = eng.node("/a.md").memory_id, eng.node("/b.md").memory_id
        assert a != mid and eng.server() == {"/a.md": (a, sha256(data("v2"))),
                                             "/b.md": (b, sha256(data("new")))}


async def test_after_a_pass_that_pushed_nothing_the_push_loop_wakes_for_a_close(tmp_path):
    """The store is full: a.md's create is answered 400 and waits (nothing pushed,
    nothing changed), so the pusher's loop waits up to 5 s before it tries again. A
    place freed there and b.md then written here: b.md's close wakes the loop at once
    (it does not wait out the 5 s, nor for the server to be found again) and both go."""
    full = FaultRule(lambda r: r.method == "POST", status=400,
                     error_type="invalid_request_error",
                     message="the store already holds the maximum number of memories",
                     origins=("setup",))
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay = 0.0
        eng.transport.rules = [full]
        await eng.op_write("/a.md", "v1")
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: eng.ctx.status.warnings)
            await trio.testing.wait_all_tasks_blocked()
            assert eng.server() == {}
            assert {w.split(" ", 1)[1] for w in eng.ctx.status.warnings} == {
                "/a.md waits: the store holds its 2,000-memory maximum"}
            eng.transport.rules = []
            await eng.op_write("/b.md", "v2")
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(eng.server()) == ["/a.md", "/b.md"]
            await eng.pusher.stop()
        assert eng.pusher.pending_total() == 0
# -- wave w3b --


async def test_the_listing_loop_counts_a_pass_that_ended_while_it_waited_as_its_own(
        tmp_path):
    """The mount's first listing and the reconciler's loop start together: the loop's pass
    waits for the listing (the sync lock) and, once it ends, counts it as its own: no
    feed poll follows it at once (the poll comes a poll interval later)."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.poll_interval = 60.0  # (no second turn of the loop in this test)
        async with trio.open_nursery() as loops:

            async def meanwhile() -> None:
                loops.start_soon(eng.reconciler.run)
                await trio.testing.wait_all_tasks_blocked()

            await held_pass(eng, "before", meanwhile, action=eng.op_reconcile)
            await until(lambda: eng.reconciler.last_pass is not None)
            await trio.testing.wait_all_tasks_blocked()
            loops.cancel_scope.cancel()
        assert eng.ctx.metrics.feed_polls == 0
        assert sorted(sent(eng)) == ["GET memories", "GET memory_versions"]
# -- wave w2a --


async def test_after_a_pass_that_moved_a_file_without_pushing_it_the_loop_sleeps_until_a_change(
        tmp_path, monkeypatch):
    """The loop's pass sends a.md, whose content the server refuses (400): nothing was
    pushed, yet the pass did something (the file is now refused, kept locally). Nothing
    is left to push, so the loop sleeps until the next change, not a 5 s retry."""
    fake = _Trio()
    monkeypatch.setattr(pusher_mod, "trio", fake)
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay = 0.0
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", status=400,
                                         error_type="invalid_request_error",
                                         origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v1")
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: eng.state.sync_state(eng.node("/a.md")) == "refused")
            await until(lambda: len(fake.waits) == 2)
            await trio.testing.wait_all_tasks_blocked()
            assert fake.waits == [math.inf, math.inf]
            await eng.pusher.stop()
# -- wave w5a --


class _TrioSleeps(_Trio):
    """The pusher's `trio`, its loop's waits and its sleeps recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await trio.sleep(seconds)


class _WallClock(_Monotonic):
    """The pusher's `time`, its wall clock stopped (moved by the test)."""

    def time(self) -> float:
        return self.now


@pytest.mark.parametrize("delay, pause", [(0.1, 0.05), (1.0, 0.1)],
                         ids=["half_the_delay", "at_most_a_tenth_of_a_second"])
async def test_a_close_before_the_write_is_due_lets_the_burst_land_a_moment(
        tmp_path, monkeypatch, delay, pause):
    """A close wakes the pusher's loop before the write is due: before it looks again,
    the loop lets the rest of a burst (a `cp -r`) land for half the write-back delay, at
    most 0.1 s (a close does not hold the next look at the queue longer). Once the
    delay is out, the write goes."""
    fake, clock = _TrioSleeps(), _WallClock()
    monkeypatch.setattr(pusher_mod, "trio", fake)
    monkeypatch.setattr(pusher_mod, "time", clock)
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay = delay
        await eng.op_write("/a.md", "v1")
        clock.now = eng.node("/a.md").changed_at  # the close's moment: not due yet
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: fake.sleeps)
            assert fake.sleeps[0] == pause and eng.server() == {}
            clock.now += delay
            await until(lambda: "/a.md" in eng.server())
            await eng.pusher.stop()


async def test_a_flush_pushes_at_once_what_is_not_due_yet(tmp_path):
    """A flush (the unmount's, `memfs sync`) does not wait out the delays: a write made
    now (write-back delay a minute) and a delete made now (delete delay an hour) both
    reach the server in its one pass."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        eng.ctx.options.write_back_delay = 60.0
        await eng.op_unlink("/a.md")
        await eng.op_write("/b.md", "new")
        assert eng.pusher.next_due_in() > 0  # nothing due yet
        first = len(eng.transport.records)
        result = await eng.pusher.flush(60.0)
        assert sorted(sent(eng, first)) == sorted([f"DELETE {mid}", "POST memories"])
        assert (result.pushed, result.left, result.offline) == (2, 0, None)
        b = eng.node("/b.md").memory_id
        assert eng.server() == {"/b.md": (b, sha256(data("new")))}


# -- wave w4a --


async def test_a_flush_counts_the_progress_of_every_one_of_its_passes(tmp_path):
    """A flush that takes two passes: a.md's update meets 404 (another writer deleted
    it) and a.md lets go of its memory (progress, nothing pushed); the next pass creates
    a.md again. The flush's result counts both steps: 1 pushed, 2 steps of progress."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_r_delete("/a.md")
        await eng.op_write("/a.md", "v2")
        result = await eng.pusher.flush(60.0)
        assert (result.pushed, result.progress, result.left) == (1, 2, 0)
        assert eng.server() == {"/a.md": (eng.node("/a.md").memory_id, sha256(data("v2")))}


# -- wave w8a --


async def test_a_flush_that_meets_the_server_down_once_retries_and_pushes(tmp_path):
    """A flush whose first pass meets a 503 (the server down for a moment; the create
    may have been applied, so the next pass first looks for it): it waits out its
    backoff (made short here) and tries again before its timeout, so the file is
    pushed, nothing is left and the flush does not say offline."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        eng.ctx.backoff.base = 0.01
        eng.transport.rules = [FaultRule(lambda r: True, kind="fail", origins=("setup",),
                                         times=1)]
        first = len(eng.transport.records)
        result = await eng.pusher.flush(30.0)
        assert sent(eng, first) == ["POST memories", "GET memory_versions", "POST memories"]
        assert [r.status for r in eng.transport.records[first:]] == [503, 200, 200]
        assert (result.pushed, result.left, result.offline) == (1, 0, None)
        assert eng.server() == {"/a.md": (eng.node("/a.md").memory_id, sha256(data("v1")))}


# -- wave w9a --


async def test_a_flush_that_meets_the_server_down_once_says_what_it_met(tmp_path):
    """As test_a_flush_that_meets_the_server_down_once_retries_and_pushes: the 503 the
    flush waited out is what `memfs status` shows as the last error (its class and the
    server's answer), in the daemon's status and in the state a status without a daemon
    reads."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        eng.ctx.backoff.base = 0.01
        eng.transport.rules = [FaultRule(lambda r: True, kind="fail", origins=("setup",),
                                         times=1)]
        result = await eng.pusher.flush(30.0)
        assert (result.pushed, result.left, result.offline) == (1, 0, None)
        error = "ServerError: refused by the test (HTTP 503, api_error)"
        assert eng.ctx.status.last_error == error
        assert eng.state.get_meta("last_error") == error


# -- wave w11b --


async def test_stopping_a_push_loop_that_never_ran_returns_at_once(tmp_path):
    """A read-only mount (or one shut down before its loops started) never runs the
    pusher's loop; its unmount still stops the pusher, which must return at once, not
    wait for a loop that will never say it ended (the unmount would hang)."""
    async with harness(tmp_path) as eng:
        stopped = False

        async def unmount() -> None:
            nonlocal stopped
            await eng.pusher.stop()
            stopped = True

        async with trio.open_nursery() as nursery:
            nursery.start_soon(unmount)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        assert stopped


# -- wave w12a --


async def test_the_push_loop_offline_says_why_in_the_status(tmp_path):
    """No server answers the loop's pass: `memfs status` says the mount is offline and
    names the error the push met (not a blank one)."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: True, kind="fail", origins=("setup",))]
        await eng.op_write("/a.md", "v1")
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: not eng.ctx.status.online)
            await eng.pusher.stop()
        reason = eng.ctx.status.offline_reason
        assert reason == eng.ctx.status.last_error
        assert reason.startswith("ServerError: refused by the test (HTTP 503")



# -- wave w12b --


async def test_a_refused_listing_is_said_in_the_status_warnings(tmp_path):
    """The listing is refused (403): `memfs status` lists a warning that says the
    listing failed and why (the same text as its last error), not an empty one."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET", origins=("setup",),
                                         times=1)]
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.reconciler.run)
            await until(lambda: (eng.ctx.status.last_error or "").startswith("listing failed"))
            loops.cancel_scope.cancel()
        error = eng.ctx.status.last_error
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [error]



# -- wave w13a --




async def test_a_flush_that_leaves_a_refused_file_says_what_is_left(tmp_path):
    """A flush whose file the server refuses (403): the first pass tries it once, the
    next finds nothing it may send (the file waits out its backoff) and the flush ends
    there, before its timeout, saying what it did and that the file is left."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/a.md", "v1")
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST", origins=("setup",))]
        first = len(eng.transport.records)
        result = await eng.pusher.flush(30.0)
        assert sent(eng, first) == ["POST memories"]
        assert (result.pushed, result.progress, result.left, result.offline) == (0, 1, 1, None)
        assert eng.server() == {} and eng.node("/a.md").fail_count == 1




# -- wave w14a --


async def test_stopping_the_push_loop_during_its_first_pass_waits_for_that_pass(tmp_path):
    """An unmount while the pusher's loop is in its very first pass (it never idled yet):
    the stop waits for the pass under way (its request answered and applied), then the
    loop ends; the file is on the server and nothing is left to push."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.write_back_delay = 0.0
        await eng.op_write("/a.md", "v1")
        hold = Hold(0, "before")
        eng.transport.holds, eng.transport.action_count = {0: hold}, 0
        eng.transport.reached = trio.Event()
        stopped: list[bool] = []

        async def loop() -> None:
            ORIGIN.set("action")  # (this task's requests are the ones the hold counts)
            await eng.pusher.run()

        async def stop() -> None:
            await eng.pusher.stop()
            stopped.append(True)

        async with trio.open_nursery() as loops:
            loops.start_soon(loop)
            await eng.transport.reached.wait()
            loops.start_soon(stop)
            await trio.testing.wait_all_tasks_blocked()
            assert stopped == []  # the pass under way is not cut short
            hold.release.set()
        eng.transport.holds = {}
        assert stopped == [True] and "/a.md" in eng.server()
        assert eng.pusher.pending_total() == 0


# -- wave r6w4 --


async def test_a_refused_listing_names_the_servers_error_in_the_status(tmp_path):
    """The listing is refused (403): the status says which error the server gave
    (PermissionDeniedError) and its message, not a type nobody raised."""
    async with harness(tmp_path) as eng:
        eng.transport.rules = [FaultRule(lambda r: r.method == "GET", origins=("setup",),
                                         times=1)]
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.reconciler.run)
            await until(lambda: (eng.ctx.status.last_error or "").startswith("listing failed"))
            loops.cancel_scope.cancel()
        error = eng.ctx.status.last_error
        assert error.startswith("listing failed: PermissionDeniedError: ")
        assert "refused by the test" in error


# -- wave r6w5 --


async def test_the_push_loop_resolves_a_request_in_doubt_at_once(tmp_path):
    """a.md's update was applied, its answer lost; the write-back delay is a minute. A
    request in doubt is due now (`next_due_in` 0), not when the file's delay is out: the
    loop's pass finds our write applied and a.md is synced."""
    async with harness(tmp_path) as eng:
        mid = await lost_update(eng)
        eng.ctx.options.write_back_delay = 60.0
        assert eng.pusher.next_due_in() == 0.0
        async with trio.open_nursery() as loops:
            loops.start_soon(eng.pusher.run)
            await until(lambda: not eng.state.doubts)
            await eng.pusher.stop()
        assert eng.server()["/a.md"] == (mid, sha256(data("v2")))
        assert eng.pusher.pending_total() == 0 and eng.ctx.status.pushed == 2
