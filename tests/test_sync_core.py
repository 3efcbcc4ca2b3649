"""Named regressions for the sync core's races and refusals (issue 7), handler level.

The engine of tests/test_sync_engine.py (State + FUSE router + Pusher +
Reconciler against a real `memfs serve`), with one API call held by trio
events *before* or *after* the server applied it, so the test acts while the
request is provably in flight (`hold.reached` is set only once the call is
on hold). No sleeps; every window is opened deterministically.
"""

from __future__ import annotations

import errno
import os

import pytest
import trio
from fs_helpers import ROOT, b, ctx, fuse_errno

# ruff: noqa: F811  (pytest fixtures imported from test_sync_engine are arguments here)
from test_sync_engine import HOUR, Engine, eng, make_engine  # noqa: F401

from memfs.api import errors as api_errors
from memfs.core.nodes import PARK_DIR
from memfs.state import conflicts as conflict_cmds
from memfs.sync.common import Backoff


class Hold:
    """Hold the next call of one client method, before or after it is applied."""

    def __init__(self, client, name: str, when: str = "after", *, lose: bool = False) -> None:
        self.reached, self.go = trio.Event(), trio.Event()
        self.calls: list[tuple] = []
        orig = getattr(client, name)

        async def held(*args, **kw):
            setattr(client, name, orig)  # only the next call is held
            self.calls.append((args, kw))
            if when == "before":
                self.reached.set()
                await self.go.wait()
                return await orig(*args, **kw)
            result = await orig(*args, **kw)
            self.reached.set()
            await self.go.wait()
            if lose:  # applied, but the answer never arrives
                raise api_errors.APIConnectionError("connection reset (test)")
            return result

        setattr(client, name, held)


async def while_held(hold: Hold, action, interference) -> None:
    """Run action; once its request is on hold, run interference; then release."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(action)
        await hold.reached.wait()
        await interference()
        hold.go.set()


async def editor_save(eng: Engine, path: str, data: bytes) -> None:
    await eng.write(path + ".tmp", data)
    await eng.rename(path + ".tmp", path)


async def settle(eng: Engine) -> None:
    eng.age()
    for _ in range(5):
        await eng.push(flush=True)
        await eng.reconcile()
    assert eng.pusher.pending_total() == 0


# -- defect 1: editor save while the previous upload is in flight ------------------------------


@pytest.mark.parametrize("via", ["pass", "flush"])
async def test_editor_save_while_update_in_flight(eng, via):
    await eng.write("/x.md", b"v1\n")
    await eng.push()
    mid = eng.fs.node("/x.md").memory_id
    await eng.write("/x.md", b"v2\n")
    hold = Hold(eng.client, "update_memory")
    action = eng.push if via == "pass" else (lambda: eng.pusher.flush(30))
    await while_held(hold, action, lambda: editor_save(eng, "/x.md", b"v3 newest\n"))
    node = eng.fs.node("/x.md")
    assert node.memory_id == mid and mid not in eng.state.tombstones
    if via == "pass":  # a flush goes on and sends v3 too
        assert eng.state.is_dirty(node)
    await settle(eng)
    assert await eng.remote() == {"/x.md": (mid, "v3 newest\n")}
    assert eng.state.conflicts() == []
    assert await eng.operations(mid) == ["created", "modified", "modified"]


async def test_editor_save_while_create_in_flight_keeps_the_new_memory(eng):
    await eng.write("/x.md", b"v1\n")
    hold = Hold(eng.client, "create_memory")
    await while_held(hold, eng.push, lambda: editor_save(eng, "/x.md", b"v2\n"))
    node = eng.fs.node("/x.md")
    mid = node.memory_id
    assert mid is not None  # the successor holds the memory the create made
    await settle(eng)
    assert await eng.remote() == {"/x.md": (mid, "v2\n")}
    assert await eng.remote_count() == 1


async def test_editor_save_while_create_answer_is_lost(eng):
    await eng.write("/x.md", b"v1\n")
    hold = Hold(eng.client, "create_memory", lose=True)
    await while_held(hold, eng.push, lambda: editor_save(eng, "/x.md", b"v2\n"))
    await settle(eng)
    [(path, (mid, content))] = (await eng.remote()).items()
    assert (path, content) == ("/x.md", "v2\n")
    assert eng.state.conflicts() == []   # our own lost create is adopted, not a conflict
    assert await eng.operations(mid) == ["created", "modified"]


async def test_unlink_while_update_in_flight_deletes_with_the_right_precondition(eng):
    await eng.write("/x.md", b"v1\n")
    await eng.push()
    await eng.write("/x.md", b"v2\n")
    hold = Hold(eng.client, "update_memory")
    await while_held(hold, eng.push, lambda: eng.unlink("/x.md"))
    await settle(eng)
    assert await eng.remote() == {}
    assert eng.state.lookup_path("/x.md") is None


async def test_unlink_while_create_in_flight_deletes_the_new_memory(eng):
    await eng.write("/x.md", b"v1\n")
    hold = Hold(eng.client, "create_memory")
    await while_held(hold, eng.push, lambda: eng.unlink("/x.md"))
    await settle(eng)
    assert await eng.remote() == {}


# -- defect 2: one refused request never blocks the queue ---------------------------------------


async def test_refused_delete_waits_alone(eng):
    for name in ("a", "b"):
        await eng.write(f"/{name}.md", b"1\n")
    await eng.push()
    mid_a = eng.fs.node("/a.md").memory_id
    await eng.unlink("/a.md")
    eng.age()
    orig = eng.client.delete_memory

    async def refuse(store, mid, **kw):
        if mid == mid_a:
            raise api_errors.PermissionDeniedError("no deletes for you", status=403)
        return await orig(store, mid, **kw)

    eng.client.delete_memory = refuse
    await eng.write("/b.md", b"2\n")
    await eng.write("/c.md", b"new\n")
    result = await eng.push()                       # no exception escapes the pass
    assert result.offline is None
    remote = await eng.remote()
    assert remote["/b.md"][1] == "2\n" and remote["/c.md"][1] == "new\n"
    tomb = eng.state.tombstones[mid_a]
    assert "PermissionDenied" in tomb.error and tomb.retry_at is not None
    flushed = await eng.pusher.flush(5)             # tries it once, reports it, returns
    assert flushed.left == 1
    eng.client.delete_memory = orig
    await eng.pusher.flush(5)
    assert "/a.md" not in await eng.remote()


async def test_refused_update_waits_alone_with_backoff(eng):
    await eng.write("/a.md", b"1\n")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    orig = eng.client.update_memory

    async def refuse(store, memory_id, **kw):
        if memory_id == mid:
            raise api_errors.APIStatusError("unprocessable", status=422)
        return await orig(store, memory_id, **kw)

    eng.client.update_memory = refuse
    await eng.write("/a.md", b"2\n")
    await eng.write("/b.md", b"b\n")
    await eng.push()
    node = eng.fs.node("/a.md")
    assert eng.state.sync_state(node) == "error" and node.fail_count == 1
    assert (await eng.remote())["/b.md"][1] == "b\n"
    eng.take_calls()
    await eng.push()                                # still backing off: not resent
    assert eng.take_calls() == []
    eng.client.update_memory = orig
    await eng.write("/a.md", b"3\n")                # a local change retries at once
    await eng.push()
    assert (await eng.remote())["/a.md"][1] == "3\n"
    assert eng.state.sync_state(node) == "synced" and node.error is None


# -- defect 3: restore never destroys a newer edit ------------------------------------------------


async def test_restore_over_pending_edit_keeps_it_as_a_conflict(eng):
    await eng.write("/a.md", b"base\n")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.write("/a.md", b"mine\n")
    await eng.other.update_memory(eng.store_id, mid, content="theirs\n")
    await eng.push()                                   # precondition fails: conflict
    [row] = eng.state.conflicts()
    await eng.write("/a.md", b"newer, offline\n")      # pending
    conflict_cmds.restore(eng.state, eng.cache, row["id"])
    assert await eng.read("/a.md") == b"mine\n"
    [kept] = eng.state.conflicts()
    assert eng.cache.get(kept["local_sha"]) == b"newer, offline\n"
    assert eng.cache.gc(eng.state.referenced_shas()) >= 0
    assert eng.cache.get(kept["local_sha"]) == b"newer, offline\n"  # survives GC
    await settle(eng)
    assert await eng.remote() == {"/a.md": (mid, "mine\n")}


async def test_restore_refuses_a_file_with_unsaved_writes(eng):
    await eng.write("/a.md", b"base\n")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.write("/a.md", b"mine\n")
    await eng.other.update_memory(eng.store_id, mid, content="theirs\n")
    await eng.push()
    [row] = eng.state.conflicts()
    fi = await eng.fs.open(eng.fs.ino("/a.md"), os.O_RDWR)
    await eng.ops.write(fi.fh, 0, b"typing")
    with pytest.raises(conflict_cmds.ConflictError, match="unsaved"):
        conflict_cmds.restore(eng.state, eng.cache, row["id"])
    await eng.ops.release(fi.fh)
    assert len(eng.state.conflicts()) == 1


# -- defect 4: pusher-side conflicts respect open, dirty buffers ---------------------------------


async def test_precondition_failure_with_unsaved_writes_waits_for_close(eng):
    await eng.write("/a.md", b"v1\n")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.write("/a.md", b"v2 closed\n")
    await eng.other.update_memory(eng.store_id, mid, content="theirs\n")
    fi = await eng.fs.open(eng.fs.ino("/a.md"), os.O_RDWR)
    await eng.ops.write(fi.fh, 0, b"v3")              # unsaved writes
    await eng.push()                                 # precondition fails: must wait
    node = eng.fs.node("/a.md")
    assert eng.state.conflicts() == [] and node.base_sha != (await eng.remote())["/a.md"]
    assert "unsaved writes" in node.error
    await eng.ops.flush(fi.fh)                       # the writer closes
    await eng.ops.release(fi.fh)
    await eng.push()
    assert await eng.remote() == {"/a.md": (mid, "theirs\n")}  # never pushed over theirs
    [row] = eng.state.conflicts()
    assert eng.cache.get(row["local_sha"]) == b"v3 closed\n"
    assert await eng.read("/a.md") == b"theirs\n"


# -- defect 5: absent from a listing is confirmed first -------------------------------------------


@pytest.mark.parametrize("dirty", [False, True], ids=["clean", "dirty"])
async def test_memory_missing_from_listing_is_confirmed(eng, dirty):
    await eng.write("/z.md", b"zed\n")
    await eng.push()
    mid = eng.fs.node("/z.md").memory_id
    if dirty:
        await eng.write("/z.md", b"zed, edited\n")
    await eng.other.update_memory(eng.store_id, mid, path="/a.md")
    orig = eng.reconciler.list_remote

    async def listing_that_missed_it(*args):  # the rename fell between two pages
        return [m for m in await orig(*args) if m.id != mid]

    eng.reconciler.list_remote = listing_that_missed_it
    await eng.reconcile()
    eng.reconciler.list_remote = orig
    node = eng.fs.node("/a.md")                      # followed, not deleted
    assert node.memory_id == mid
    await settle(eng)
    want = "zed, edited\n" if dirty else "zed\n"
    assert await eng.remote() == {"/a.md": (mid, want)}


async def test_confirmed_delete_still_removes_a_clean_file(eng):
    await eng.write("/z.md", b"zed\n")
    await eng.push()
    mid = eng.fs.node("/z.md").memory_id
    await eng.other.delete_memory(eng.store_id, mid)
    await eng.reconcile()
    assert eng.state.lookup_path("/z.md") is None


# -- defect 6: a page older than a fetch never rolls the base back --------------------------------


async def test_listing_page_older_than_a_fetch_is_skipped(eng):
    created = await eng.other.create_memory(eng.store_id, "/a.md", "s1\n")
    await eng.reconcile()                             # added lazily: no blob cached
    hold = Hold(eng.reconciler, "list_remote")

    async def interfere():
        await eng.other.update_memory(eng.store_id, created.id, content="s2\n")
        assert await eng.read("/a.md") == b"s2\n"      # cache miss: fetch moves the base
        await eng.write("/a.md", b"mine\n")            # a save over s2

    await while_held(hold, lambda: eng.reconciler.reconcile_pass(full=True), interfere)
    assert eng.state.conflicts() == []
    await eng.push()
    assert await eng.remote() == {"/a.md": (created.id, "mine\n")}
    assert eng.state.conflicts() == []


# -- defect 7: one transaction per transition ------------------------------------------------------


async def test_conflict_row_and_base_commit_together(eng, monkeypatch):
    await eng.write("/a.md", b"base\n")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.write("/a.md", b"mine\n")
    await eng.other.update_memory(eng.store_id, mid, content="theirs\n")
    state = eng.state

    def crash(*_a, **_kw):
        raise OSError("simulated crash inside the transaction")

    monkeypatch.setattr(type(state), "_mark_base", crash)
    await eng.push()                                  # the transition fails halfway
    assert "simulated crash" in eng.ctx.status.last_error
    monkeypatch.undo()
    assert state.conflicts() == []                    # no half-written conflict row
    reopened = eng.fs.reopen_state()
    assert reopened.conflicts() == [] and reopened.lookup_path("/a.md").sha == state.lookup_path(
        "/a.md").sha
    reopened.close()
    await eng.push()                                  # and it settles properly next time
    assert len(state.conflicts()) == 1


# -- defect 8: rename cycles (parking) -----------------------------------------------------------


async def swap(eng: Engine) -> None:
    await eng.rename("/a.md", "/t.md")
    await eng.rename("/b.md", "/a.md")
    await eng.rename("/t.md", "/b.md")


async def test_swap_converges_and_hides_the_park(eng):
    await eng.write("/a.md", b"A\n")
    await eng.write("/b.md", b"B\n")
    await eng.push()
    ids = {p: eng.fs.node(p).memory_id for p in ("/a.md", "/b.md")}
    await swap(eng)
    for _ in range(4):
        await eng.push()
        await eng.reconcile()
        assert eng.state.lookup_path(PARK_DIR) is None   # never shown locally
    assert await eng.remote() == {"/a.md": (ids["/b.md"], "B\n"), "/b.md": (ids["/a.md"], "A\n")}
    assert eng.state.parks == {}


async def test_swap_converges_when_a_stranger_holds_the_park_path(eng):
    await eng.write("/a.md", b"A\n")
    await eng.write("/b.md", b"B\n")
    await eng.push()
    ids = {p: eng.fs.node(p).memory_id for p in ("/a.md", "/b.md")}
    for mid in ids.values():  # someone else sits at the old fixed park paths
        await eng.other.create_memory(eng.store_id, f"{PARK_DIR}/{mid}", "squatter\n")
    await swap(eng)
    for _ in range(4):
        await eng.push()
        await eng.reconcile()
    remote = await eng.remote()
    assert remote["/a.md"] == (ids["/b.md"], "B\n") and remote["/b.md"] == (ids["/a.md"], "A\n")
    assert eng.state.lookup_path(PARK_DIR) is None   # the squatters are not shown


async def test_park_answer_lost_then_restart_converges(eng):
    await eng.write("/a.md", b"A\n")
    await eng.write("/b.md", b"B\n")
    await eng.push()
    ids = {p: eng.fs.node(p).memory_id for p in ("/a.md", "/b.md")}
    await swap(eng)
    orig = eng.client.update_memory

    async def lose_parks(store, mid, **kw):
        result = await orig(store, mid, **kw)
        if kw.get("path", "").startswith(PARK_DIR):
            raise api_errors.APIConnectionError("reset after the park (test)")
        return result

    eng.client.update_memory = lose_parks
    await eng.push()
    eng.client.update_memory = orig
    assert eng.state.parks                            # journaled before it was sent
    for _ in range(4):
        await eng.reconcile()
        await eng.push()
    assert await eng.remote() == {"/a.md": (ids["/b.md"], "B\n"), "/b.md": (ids["/a.md"], "A\n")}


async def test_reserved_park_name_is_refused(eng):
    assert await fuse_errno(eng.fs.create(ROOT, PARK_DIR[1:], b"x")) == errno.EINVAL
    assert await fuse_errno(eng.ops.mkdir(ROOT, b(PARK_DIR[1:]), 0o755, ctx())) == errno.EINVAL


# -- defect 10: the flush keeps going through transient trouble ----------------------------------


async def test_flush_retries_transient_errors_until_done(eng):
    eng.ctx.backoff = Backoff(base=0.01, cap=0.05)
    for i in range(12):
        await eng.write(f"/n{i}.md", f"{i}\n".encode())
    orig = eng.client.create_memory
    calls = 0

    async def flaky(*args, **kw):
        nonlocal calls
        calls += 1
        if calls % 3:
            raise api_errors.RateLimitError("slow down", status=429, retry_after=0.01)
        return await orig(*args, **kw)

    eng.client.create_memory = flaky
    result = await eng.pusher.flush(60)
    assert (result.pushed, result.left) == (12, 0)
    assert await eng.remote_count() == 12


# -- found by the interleaving harness --------------------------------------------------------


async def test_remote_rename_onto_a_local_file_not_pushed_yet(eng):
    """Another client renames one of our memories onto the path of a local file that
    never reached the server: the memory wins the path (as a create that lost it),
    the local file's content is kept as a conflict, and nothing is stuck."""
    await eng.write("/a.md", b"A\n")
    await eng.push()
    mid = eng.fs.node("/a.md").memory_id
    await eng.write("/c.md", b"mine\n")
    await eng.other.update_memory(eng.store_id, mid, path="/c.md")
    await eng.push()                                 # the create meets our own memory
    await settle(eng)
    assert await eng.remote() == {"/c.md": (mid, "A\n")}
    assert await eng.read("/c.md") == b"A\n"
    assert eng.state.lookup_path("/a.md") is None
    [row] = eng.state.conflicts()
    assert eng.cache.get(row["local_sha"]) == b"mine\n"


async def test_a_memory_parked_by_another_client_is_not_shown(eng):
    await eng.other.create_memory(eng.store_id, f"{PARK_DIR}/mem_x.1234", "in transit\n")
    await eng.reconcile()
    assert eng.state.lookup_path(PARK_DIR) is None
    assert eng.pusher.pending_total() == 0


async def test_an_update_answer_does_not_adopt_their_rename_as_ours(eng):
    """Our content update lands after another client moved the memory: its answer
    shows the new path, which is their rename to follow, not a rename of ours."""
    await eng.write("/a.md", b"a1\n")
    await eng.write("/b.md", b"b1\n")
    await eng.push()
    mid_a = eng.fs.node("/a.md").memory_id
    mid_b = eng.fs.node("/b.md").memory_id
    await eng.write("/a.md", b"a2\n")
    await eng.other.update_memory(eng.store_id, mid_a, path="/c.md")
    await eng.other.update_memory(eng.store_id, mid_b, path="/a.md")
    await eng.write("/c.md", b"mine\n")              # a new local file where a.md went
    await eng.push()
    await settle(eng)
    assert await eng.remote() == {"/c.md": (mid_a, "a2\n"), "/a.md": (mid_b, "b1\n")}
    [row] = eng.state.conflicts()                    # the new local file lost the path
    assert eng.cache.get(row["local_sha"]) == b"mine\n"


async def test_rename_over_with_content_never_read_recovers_it(eng):
    """A clean file takes a remote edit (content not fetched), then is renamed over
    another: its content is fetched from the memory it came from before that memory's
    delete goes out, and the save keeps the target's id."""
    await eng.write("/a.md", b"a1\n")
    await eng.write("/b.md", b"b1\n")
    await eng.push()
    mid_a = eng.fs.node("/a.md").memory_id
    mid_b = eng.fs.node("/b.md").memory_id
    await eng.other.update_memory(eng.store_id, mid_a, content="a2 from elsewhere\n")
    await eng.reconcile()                             # taken lazily: not cached
    assert not eng.cache.has(eng.fs.node("/a.md").sha)
    await eng.rename("/a.md", "/b.md")
    assert await eng.read("/b.md") == b"a2 from elsewhere\n"   # readable meanwhile
    await settle(eng)
    assert await eng.remote() == {"/b.md": (mid_b, "a2 from elsewhere\n")}
    assert mid_a not in eng.state.tombstones


async def test_content_never_read_renamed_over_then_its_memory_changed_there(eng):
    """A file taken from the server and never read is renamed over another; its own
    memory, to be deleted, is changed on the server meanwhile (so it comes back, with
    the change): the renamed file's content is still found, in that memory's versions.
    Before, nothing remembered where it came from: the file read EIO, never pushed."""
    await eng.write("/a.md", b"a1\n")
    await eng.push()
    mid_a = eng.fs.node("/a.md").memory_id
    created = await eng.other.create_memory(eng.store_id, path="/c.md", content="c1\n")
    await eng.reconcile()                             # /c.md taken lazily: not cached
    assert not eng.cache.has(eng.fs.node("/c.md").sha)
    await eng.other.update_memory(eng.store_id, created.id, content="c2\n")
    await eng.rename("/c.md", "/a.md")                # a's memory takes c's bytes
    await eng.reconcile()                             # c's memory comes back with c2
    assert await eng.read("/a.md") == b"c1\n"
    await settle(eng)
    assert await eng.remote() == {"/a.md": (mid_a, "c1\n"), "/c.md": (created.id, "c2\n")}


async def test_content_never_read_renamed_over_its_memory_changed_then_a_restart(eng):
    """As above, with the daemon restarted before the content is read: where it can be
    found (a memory that held it once) is in state.db, not only in memory. Before, the
    restarted mount read EIO and never pushed the file."""
    await eng.write("/a.md", b"a1\n")
    await eng.push()
    mid_a = eng.fs.node("/a.md").memory_id
    created = await eng.other.create_memory(eng.store_id, path="/c.md", content="c1\n")
    await eng.reconcile()
    await eng.other.update_memory(eng.store_id, created.id, content="c2\n")
    await eng.rename("/c.md", "/a.md")
    await eng.reconcile()                             # c's memory comes back with c2
    await eng.restart()
    assert not eng.cache.has(eng.fs.node("/a.md").sha)
    assert await eng.read("/a.md") == b"c1\n"
    await settle(eng)
    assert await eng.remote() == {"/a.md": (mid_a, "c1\n"), "/c.md": (created.id, "c2\n")}


@pytest.mark.parametrize("answer", ["answered", "lost"])
async def test_a_file_made_again_with_its_bytes_while_its_delete_is_out_stays(eng, answer):
    """`rm x.md`, and its DELETE goes out; meanwhile x.md is made again with the very bytes
    the memory holds (`git checkout x.md`). The DELETE is applied (its answer heard or
    lost): the new file is a new memory. Before, it revived the memory being deleted,
    held it clean, and the next listing took it for another writer's delete: the file
    was removed, on the server and here."""
    await eng.write("/x.md", b"v1\n")
    await eng.push()
    mid = eng.fs.node("/x.md").memory_id
    await eng.unlink("/x.md")
    eng.age()
    orig = eng.client.delete_memory

    async def made_again_meanwhile(store, memory_id, **kw):
        if answer == "answered":
            await eng.write("/x.md", b"v1\n")     # before the server applies it
        result = await orig(store, memory_id, **kw)
        if answer == "lost":
            await eng.write("/x.md", b"v1\n")     # applied; the answer never comes
            raise api_errors.APIConnectionError("reset after the delete (test)")
        return result

    eng.client.delete_memory = made_again_meanwhile
    await eng.push()
    eng.client.delete_memory = orig
    assert eng.fs.node("/x.md").memory_id is None     # a file of its own
    await settle(eng)
    assert await eng.read("/x.md") == b"v1\n"
    [(path, (new_id, content))] = (await eng.remote()).items()
    assert (path, content) == ("/x.md", "v1\n") and new_id != mid
    assert eng.state.conflicts() == []


async def test_a_lost_create_is_not_taken_for_the_memory_deleted_before_it(eng):
    """`rm x.md` (its delete goes out: the memory is gone), then x.md made again with the
    same bytes (`git checkout x.md`), and that create gets no answer (it never reached
    the server). The versions created since shortly before it was sent list the deleted
    memory's creation, at /x.md with those bytes; this mount held that memory, so it is
    not what the create made: the create waits out the lost-answer wait, then goes
    again. Before, the deleted memory was taken as the create's, the next listing found
    it gone, and the file was removed: here and on the server."""
    await eng.write("/x.md", b"v1\n")
    await eng.push()
    mid = eng.fs.node("/x.md").memory_id
    await eng.unlink("/x.md")
    eng.age()
    await eng.push()
    assert await eng.remote() == {} and not eng.state.tombstones and mid in eng.state.known
    await eng.write("/x.md", b"v1\n")
    orig = eng.client.create_memory

    async def no_answer(*args, **kw):
        raise api_errors.APIConnectionError("reset before the server read it (test)")

    eng.client.create_memory = no_answer
    await eng.push()
    eng.client.create_memory = orig
    assert eng.state.doubts
    await eng.push()                               # asked: no trace of it, nothing sent
    await eng.reconcile()
    assert eng.state.doubts and eng.fs.node("/x.md").memory_id is None
    eng.ctx.options.lost_answer_wait = 0.0
    await settle(eng)                              # not applied after all: created now
    assert await eng.read("/x.md") == b"v1\n"
    [(path, (new_id, content))] = (await eng.remote()).items()
    assert (path, content) == ("/x.md", "v1\n") and new_id not in (None, mid)


async def _pushed_then_a_renamed_to_c(eng) -> tuple[str, str]:
    """/a.md and /b.md pushed, then a renamed to /c.md here (not pushed): their ids."""
    await eng.write("/a.md", b"a1\n")
    await eng.write("/b.md", b"b1\n")
    await eng.push()
    ids = eng.fs.node("/a.md").memory_id, eng.fs.node("/b.md").memory_id
    await eng.rename("/a.md", "/c.md")
    return ids


async def test_their_swap_meets_our_pending_rename_into_it(eng):
    """We renamed a→c (not pushed); they renamed b→c and a→b. The server decided both
    places: b's memory holds /c, a's holds /b, which b's file holds here. The two files
    swap places (our rename yields, as above); before, each waited on the other for
    ever and the pass never settled."""
    mid_a, mid_b = await _pushed_then_a_renamed_to_c(eng)
    await eng.other.update_memory(eng.store_id, mid_b, path="/c.md")
    await eng.other.update_memory(eng.store_id, mid_a, path="/b.md")
    await eng.push()
    await settle(eng)
    assert await eng.remote() == {"/b.md": (mid_a, "a1\n"), "/c.md": (mid_b, "b1\n")}
    assert await eng.read("/b.md") == b"a1\n" and await eng.read("/c.md") == b"b1\n"
    assert eng.state.conflicts() == []


async def test_their_rename_wins_over_our_pending_rename_and_new_file(eng):
    """We renamed a→c (not pushed) and created a new a; they renamed b→c. The server
    decided /c: b's memory takes it, our a goes back to /a (its memory's path), and
    the new local /a, which never reached the server, is kept as a conflict."""
    mid_a, mid_b = await _pushed_then_a_renamed_to_c(eng)
    await eng.other.update_memory(eng.store_id, mid_b, path="/c.md")
    await eng.write("/a.md", b"new a\n")
    await eng.push()
    await settle(eng)
    assert await eng.remote() == {"/a.md": (mid_a, "a1\n"), "/c.md": (mid_b, "b1\n")}
    [row] = eng.state.conflicts()
    assert eng.cache.get(row["local_sha"]) == b"new a\n"
