"""The harness of the one-pass tests (tests/test_one_*.py, tests/test_sync_loops.py): the
daemon's `StoreEngine` over interleave.py's in-process server, and what those tests share
(files synced, an update in doubt, a pass with one request held, the requests it sent)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing
from interleave import ORIGIN, Database, Engine, FaultRule, HeldTransport, Hold, make_engine

from memfs.core.nodes import PARK_DIR


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


def learns_writer(eng: Engine) -> list[str]:
    """The request a doubt sends the first time it meets a version holding its write
    before the mount knows who it writes as: one GET of the version a create of its own
    made (`SyncContext.learn_writer_now`), or of the versions of a memory a delete of
    its own removed."""
    assert eng.ctx.writer is None and eng.ctx.writer_witness is not None
    kind, ident = eng.ctx.writer_witness
    return [f"GET {ident}" if kind == "version" else "GET memory_versions"]


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


async def until(check, seconds: float = 30.0) -> None:
    """Wait for check() to hold; a loop that never gets there fails the test."""
    with trio.fail_after(seconds):
        while not check():
            await trio.sleep(0.01)


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


async def update_met_by_404(eng: Engine) -> str:
    """a.md synced at v1, then written v2, its next update to be answered 404 once (not
    pushed yet). Its memory id."""
    await synced(eng, a="v1")
    mid = eng.node("/a.md").memory_id
    await eng.op_write("/a.md", "v2")
    eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                     status=404, error_type="not_found_error",
                                     origins=("setup",), times=1)]
    return mid


async def parked_by_another(eng: Engine) -> tuple[str, str]:
    """a.md synced at v1, then its memory parked by another client (the first step of
    its swap) and that listed here. Its memory id and the park's path."""
    await synced(eng, a="v1")
    mid = eng.node("/a.md").memory_id
    park = f"{PARK_DIR}/{mid}.0badcafe"
    await eng.op_r_rename("/a.md", park)
    await eng.op_reconcile()
    return mid, park


async def refused_update(eng: Engine) -> str:
    """a.md synced at v1, then written v2: the update refused once (403), so the file
    waits with v2 as its last send (`sent_sha`). Its memory id."""
    await synced(eng, a="v1")
    mid = eng.node("/a.md").memory_id
    eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                     origins=("setup",), times=1)]
    await eng.op_write("/a.md", "v2")
    await eng.op_push()
    return mid
