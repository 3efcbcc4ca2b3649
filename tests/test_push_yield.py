"""Pushes yield to the mount (memfs/sync/pusher.py `_yield_to_mount`), handler level.

Pushes run on the trio thread that answers FUSE. While requests keep coming (a
`cp -r`), a push waits for a quiet moment, at most YIELD_MAX, then goes as one of
at most BUSY_CONCURRENCY; a flush (unmount, `memfs restore`, a session's end) never
waits. Checked by what was true when each request started, never by timing.
"""

from __future__ import annotations

import trio

# ruff: noqa: F811  (pytest fixtures imported from test_sync_engine are arguments here)
from test_sync_engine import Engine, eng, make_engine  # noqa: F401

from memfs.core.signals import IdleClock
from memfs.sync import pusher as pusher_mod


class Clock(IdleClock):
    """The mount's idle clock as the test sets it: `idle_for()` is what `fn` says."""

    __slots__ = ("fn",)

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def idle_for(self) -> float:
        return self.fn()


def watch_creates(eng: Engine, busy: list[bool]) -> list[tuple[bool, int]]:
    """Wrap create_memory: (mount busy when it started, requests in flight) per call."""
    seen: list[tuple[bool, int]] = []
    inflight = [0]
    create = eng.client.create_memory

    async def watched(*a, **kw):
        inflight[0] += 1
        seen.append((busy[0], inflight[0]))
        try:
            await trio.sleep(0.05)  # a slow network: concurrent requests overlap
            return await create(*a, **kw)
        finally:
            inflight[0] -= 1

    eng.client.create_memory = watched
    return seen


async def busy_with_files(eng: Engine, monkeypatch, yield_max: float,
                          n: int = 6) -> tuple[list[bool], list[tuple[bool, int]]]:
    """n files to push, FUSE busy (a switch the test flips), creates watched."""
    monkeypatch.setattr(pusher_mod, "YIELD_MAX", yield_max)
    for i in range(n):
        await eng.write(f"/f{i}.md", f"file {i}\n".encode())
    busy = [True]
    eng.ctx.clock = Clock(lambda: 0.0 if busy[0] else 10.0)
    return busy, watch_creates(eng, busy)


async def test_a_push_waits_while_the_mount_is_busy_and_goes_once_quiet(eng, monkeypatch):
    busy, seen = await busy_with_files(eng, monkeypatch, 30.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eng.push)
        await trio.sleep(10 * pusher_mod.BUSY_WINDOW)
        assert seen == []  # FUSE busy: nothing sent yet
        busy[0] = False
    assert len(seen) == 6 and not any(b for b, _ in seen)
    assert max(n for _, n in seen) > pusher_mod.BUSY_CONCURRENCY  # quiet: all at once
    assert eng.state.dirty_files() == []


async def test_a_mount_that_stays_busy_still_pushes_a_few_at_a_time(eng, monkeypatch):
    _busy, seen = await busy_with_files(eng, monkeypatch, 0.2)
    await eng.push()
    assert len(seen) == 6 and all(b for b, _ in seen)
    assert max(n for _, n in seen) <= pusher_mod.BUSY_CONCURRENCY
    assert eng.state.dirty_files() == []


async def test_a_flush_does_not_wait_for_a_quiet_mount(eng, monkeypatch):
    _busy, seen = await busy_with_files(eng, monkeypatch, 30.0)
    with trio.fail_after(20):  # well under YIELD_MAX: a flush that waited would fail here
        await eng.push(flush=True)
    assert len(seen) == 6 and max(n for _, n in seen) > pusher_mod.BUSY_CONCURRENCY


async def test_a_flush_ends_the_wait_of_a_pass_under_way(eng, monkeypatch):
    """The pass holds the sync lock while it waits; an unmount's flush queues behind it and
    must not wait out YIELD_MAX (nor the busy pushes' two at a time)."""
    busy, seen = await busy_with_files(eng, monkeypatch, 30.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eng.push)  # polite: waits for the busy mount
        await trio.sleep(5 * pusher_mod.BUSY_WINDOW)
        assert seen == []
        with trio.fail_after(20):  # well under YIELD_MAX
            await eng.pusher.flush(timeout=60)
    assert len(seen) == 6 and all(b for b, _ in seen) and busy[0]
    assert max(n for _, n in seen) > pusher_mod.BUSY_CONCURRENCY
    assert eng.state.dirty_files() == []


async def test_a_short_gap_in_a_busy_mount_lets_a_few_pushes_go(eng, monkeypatch):
    """A gap between FUSE requests longer than BUSY_WINDOW but shorter than QUIET_WINDOW
    (a `cp -r` preempted on a loaded machine) lets at most BUSY_CONCURRENCY pushes go,
    at once (no YIELD_MAX wait); full concurrency waits for a quiet mount."""
    _busy, seen = await busy_with_files(eng, monkeypatch, 30.0)
    gap = (pusher_mod.BUSY_WINDOW + pusher_mod.QUIET_WINDOW) / 2
    eng.ctx.clock = Clock(lambda: gap)
    with trio.fail_after(20):  # well under YIELD_MAX
        await eng.push()
    assert len(seen) == 6
    assert max(n for _, n in seen) <= pusher_mod.BUSY_CONCURRENCY
    assert eng.state.dirty_files() == []


async def test_pushes_waiting_for_a_quiet_mount_do_not_all_poll(eng, monkeypatch):
    """One waiting push watches the mount, the others queue behind it: a pass of many
    files costs a busy mount one check every BUSY_WINDOW, not one per push."""
    busy, seen = await busy_with_files(eng, monkeypatch, 30.0)
    checks = [0]

    def idle_for() -> float:
        checks[0] += 1
        return 0.0 if busy[0] else 10.0

    eng.ctx.clock = Clock(idle_for)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eng.push)
        await trio.sleep(20 * pusher_mod.BUSY_WINDOW)
        assert seen == []
        # about 20 checks by the one watching, plus one each as the others arrive
        assert checks[0] <= 20 + 6 + 5
        busy[0] = False
    assert len(seen) == 6 and max(n for _, n in seen) > pusher_mod.BUSY_CONCURRENCY


async def held_answer(eng: Engine, monkeypatch) -> list[bool]:
    """A create sent while the mount is quiet; the mount turns busy as it goes out (a
    `cp -r` beginning while the pass's requests are in flight). Returns once the server
    has applied it, with the push's answer not taken in: the busy switch."""
    monkeypatch.setattr(pusher_mod, "YIELD_MAX", 30.0)
    monkeypatch.setattr(pusher_mod, "ANSWER_WAIT_MAX", 30.0)
    await eng.write("/a.md", b"one\n")
    busy = [False]
    eng.ctx.clock = Clock(lambda: 0.0 if busy[0] else 10.0)
    create = eng.client.create_memory

    async def create_then_busy(*a, **kw):
        busy[0] = True
        return await create(*a, **kw)

    eng.client.create_memory = create_then_busy
    return busy


async def applied_on_server_only(eng: Engine) -> None:
    """Wait until the server holds /a.md; then, a few of the watcher's turns later, the
    mount has still not taken the answer in."""
    with trio.fail_after(20):
        while "/a.md" not in await eng.remote():
            await trio.sleep(0.02)
    await trio.sleep(5 * pusher_mod.BUSY_WINDOW)  # (read at once, were it not held)
    assert eng.state.sync_state(eng.fs.node("/a.md")) != "synced"


async def test_an_answer_that_meets_a_busy_mount_is_read_once_it_is_quiet(eng, monkeypatch):
    """The answer of a push sent in a quiet mount waits in its socket while FUSE is busy
    (`Pusher._answer_ready`): the copy does not pay for it. A push started while busy
    does not wait (test_a_short_gap_in_a_busy_mount_lets_a_few_pushes_go)."""
    busy = await held_answer(eng, monkeypatch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eng.push)
        await applied_on_server_only(eng)
        busy[0] = False
    assert eng.state.sync_state(eng.fs.node("/a.md")) == "synced"
    assert eng.state.dirty_files() == []


async def test_a_mount_that_stays_busy_reads_a_held_answer_after_the_longest_wait(
        eng, monkeypatch):
    """The mount never turns quiet: the held answer is read after ANSWER_WAIT_MAX, and
    the pass ends."""
    busy = await held_answer(eng, monkeypatch)
    monkeypatch.setattr(pusher_mod, "ANSWER_WAIT_MAX", 0.3)
    with trio.fail_after(20):
        await eng.push()
    assert busy[0] and eng.state.sync_state(eng.fs.node("/a.md")) == "synced"


async def test_a_flush_takes_in_the_answers_a_busy_mount_held(eng, monkeypatch):
    """An unmount (a flush) does not wait for a quiet mount: the held answer is read."""
    busy = await held_answer(eng, monkeypatch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eng.push)
        await applied_on_server_only(eng)
        with trio.fail_after(20):  # well under YIELD_MAX
            result = await eng.pusher.flush(25.0)
    assert busy[0] and result.left == 0
    assert eng.state.sync_state(eng.fs.node("/a.md")) == "synced"


async def test_a_busy_mount_lets_one_push_start_per_interval(eng, monkeypatch):
    """However often a copy pauses for BUSY_WINDOW, pushes start while busy at most one
    per BUSY_INTERVAL: the mount takes in a bounded number of answers a second."""
    busy, seen = await busy_with_files(eng, monkeypatch, 30.0)
    monkeypatch.setattr(pusher_mod, "BUSY_INTERVAL", 30.0)
    gap = (pusher_mod.BUSY_WINDOW + pusher_mod.QUIET_WINDOW) / 2
    eng.ctx.clock = Clock(lambda: gap if busy[0] else 10.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eng.push)
        with trio.fail_after(20):
            while not seen:
                await trio.sleep(pusher_mod.BUSY_WINDOW)
        await trio.sleep(20 * pusher_mod.BUSY_WINDOW)  # gaps enough for all six, but
        assert len(seen) == 1 and seen[0][0]            # one busy start per interval
        busy[0] = False
    assert len(seen) == 6 and eng.state.dirty_files() == []
