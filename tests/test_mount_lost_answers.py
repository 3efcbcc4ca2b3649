"""Lost answers through real mounts: a request the server applied whose answer never came,
then a local change to that file (issue 20).

Every test makes the answer really lost: `memfs serve`'s gate holds the request after the
commit (the test sees it applied on the server, status 200), then resets the connection
instead of answering. A create or an update is then in doubt (the client never sends it
again), and the test holds every read a pass could settle it with; a delete is sent again
by the client, and each retry's answer is lost too. While that is held the mount still
does not know what happened: the test checks that, changes the file (unlink, rename,
edit; or re-creates a deleted one, with new content or the same), releases everything,
and checks the store ends exactly as the user left the mount: nothing deleted comes
back, nothing is duplicated, no conflict, and unmount reports 0 left.

`test_applied_then_answered_an_error_then_local_change` has the server apply the request
and answer a 5xx instead (a gateway cut off after the commit).
`test_daemon_killed_while_the_answer_is_held_then_local_change` kills the daemon
(SIGKILL) while the applied request's answer is held instead, and makes the change on the
next daemon's mount: what it knows of the request is its journal.
`test_daemon_killed_again_while_it_settles_the_doubt` makes the change on that next
daemon's mount while its first look at the outcome is held, then kills it too.

The same cross product without a kernel, at every hold point, with every outcome and with
the daemon killed, is `test_lost_answers` in tests/test_interleavings.py.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from gate import Gate
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import cat, conflicts, flush, sdk_by_path, wait_for, xattr

pytestmark = [pytest.mark.mount, needs_fuse]

MOUNT_ARGS = ("--write-back-delay", "0.2", "--delete-delay", "0", "--poll-interval", "0.5")
#: The mount's client sends a DELETE at most this often (1 + its 2 retries). A create or
#: an update that may have been applied is never sent again (docs/CLIENT.md).
ATTEMPTS = 3

CASES = [
    ("create", "rm"), ("create", "mv"), ("create", "edit"),
    ("update", "rm"), ("update", "mv"), ("update", "edit"),
    ("rename", "rm"), ("rename", "mv"), ("rename", "edit"),
    ("delete", "recreate"), ("delete", "recreate_same"),
]


def _expected(kind: str, op: str) -> dict[str, str]:
    """The user's tree at the end: what the server must hold."""
    content = {"create": "version one\n", "update": "v2\n", "rename": "v1\n"}.get(kind)
    where = "/d/y.md" if kind == "rename" else "/d/x.md"
    if op == "rm":
        return {}
    if op == "mv":
        return {"/d/z.md": content}
    if op == "edit":
        return {where: "edited\n"}
    if op == "recreate_same":  # delete, then the file made again with what it held
        return {"/d/x.md": "v1\n"}
    return {"/d/x.md": "again\n"}  # delete, then the file is made again


def _start(mounts, kind: str, *extra: str):
    """A new store and its mount with /d (`extra`: more mount options); /d/x.md synced
    (v1) unless the request is its create: (store, mount, x, x's memory id, the gate's
    path rule for the request)."""
    store = mounts.new_store()
    m = mounts.mount(store, *MOUNT_ARGS, *extra)
    x = m.path / "d" / "x.md"
    x.parent.mkdir()
    mid = None
    if kind != "create":
        x.write_text("v1\n")
        m.wait_synced()
        mid = xattr(x, "user.memfs.memory_id")
        assert mid
    return store, m, x, mid, rf"/memory_stores/{store}/memories" + (f"/{mid}$" if mid else "$")


def _request(kind: str, x: Path) -> Path:
    """The user's change that sends the request of `kind` for /d/x.md; the file's path
    after it."""
    if kind == "create":
        x.write_text("version one\n")
    elif kind == "update":
        x.write_text("v2\n")
    elif kind == "rename":
        os.rename(x, x.parent / "y.md")
        return x.parent / "y.md"
    else:
        x.unlink()
    return x


def _change(op: str, current: Path, x: Path) -> None:
    """The user's change to the file (at `current`; `x` its first path, in /d)."""
    if op == "rm":
        current.unlink()
    elif op == "mv":
        os.rename(current, x.parent / "z.md")
    elif op == "edit":
        current.write_text("edited\n")
    elif op == "recreate_same":  # what the deleted memory holds: nothing to push if it
        x.write_text("v1\n")    # were that memory still (its DELETE is out)
    else:
        x.write_text("again\n")


def _ends_as_left(m, server, store: str, want: dict[str, str], mid: str | None = None) -> None:
    """After a flush the server and the mount hold `want` (the mount follows another
    writer's change within a few polls), with no conflict, and unmount says 0 left;
    `mid`: the one memory left is the one it always was."""
    flush(m)
    m.wait_synced()
    for _ in range(40):
        try:
            tree = {"/" + str(p.relative_to(m.path)): cat(p) for p in m.path.rglob("*.md")}
        except (OSError, subprocess.CalledProcessError):
            tree = None  # a file or directory went while it was listed: look again
        if tree == want:
            break
        time.sleep(0.25)
    assert server_memories(server, store) == want
    assert tree == want
    assert conflicts(m) == []
    if mid is not None:
        [(path, _content)] = want.items()
        assert sdk_by_path(server, store)[path].id == mid
    out = m.unmount()
    assert re.search(r"pushed \d+ change\(s\), 0 left", out), out
    assert server_memories(server, store) == want


@pytest.mark.parametrize(("kind", "op"), CASES, ids=[f"{k}-then-{o}" for k, o in CASES])
def test_lost_answer_then_local_change(mounts, server, kind, op):
    store, m, x, mid, rule = _start(mounts, kind)
    with Gate(server) as gate:
        gate.hold("DELETE" if kind == "delete" else "POST", rule, when="after",
                  count=ATTEMPTS if kind == "delete" else 1, drop=True)
        current = _request(kind, x)
        [first] = gate.wait_held(1)
        assert first["status"] == 200, first          # applied and committed...
        on_server = sdk_by_path(server, store)
        if kind == "create":
            made = on_server["/d/x.md"]
            mid = made.id
        elif kind == "update":
            assert server_memories(server, store) == {"/d/x.md": "v2\n"}
        elif kind == "rename":
            assert on_server["/d/y.md"].id == mid
        else:
            assert on_server == {}
        if kind != "delete":
            # The request is in doubt until a pass asks the server: every read that
            # could answer it (the versions, the memory) waits, and the doubt with it.
            gate.hold("GET", rf"/memory_stores/{store}/(memory_versions|memories/)")
        gate.release(first["seq"])                    # ...and its answer lost (reset)
        [untold] = gate.wait_held(1)                  # a retry (DELETE) or a pass's read
        assert untold["seq"] != first["seq"]
        if kind in ("create", "update"):              # the mount does not know yet
            assert xattr(current, "user.memfs.state") == "pending"
            assert xattr(current, "user.memfs.memory_id") == (mid if kind != "create"
                                                               else None)
        _change(op, current, x)                       # while the outcome is unknown
        if kind == "delete":
            for _ in range(ATTEMPTS - 1):             # every retry's answer is lost too
                gate.wait_held(1)
                gate.release()
        gate.clear()
    _ends_as_left(m, server, store, _expected(kind, op), mid if op in ("mv", "edit") else None)


# -- applied, answered with an error ---------------------------------------------------------

#: Every kind and change of CASES, the statuses spread over them: 500 and 503 say the
#: server is done with the request, a gateway's 502 and 504 that it may land later
#: (docs/SYNC.md). Every status for every pair, without a kernel: the `fail` outcomes of
#: tests/test_interleavings.py.
ERROR_CASES = [(kind, op, (500, 502, 503, 504)[i % 4]) for i, (kind, op) in enumerate(CASES)]


@pytest.mark.parametrize(("kind", "op", "status"), ERROR_CASES,
                         ids=[f"{k}-{s}-then-{o}" for k, o, s in ERROR_CASES])
def test_applied_then_answered_an_error_then_local_change(mounts, server, kind, op, status):
    """The server applies the request and answers a 5xx instead of its result (a gateway
    cut off after the commit): the mount must not take the error for "not applied" and
    send the request as if it had never gone out. A create, an update or a rename is in
    doubt until a pass asks the server; every read that could tell is held while the user
    changes the file. A delete is sent again by the client and each attempt answered the
    same (its retries find the memory gone); the user makes the file again meanwhile.
    The store ends as the user left the mount (`--no-feed`: the feed's polls would read
    the versions the test holds)."""
    _applied_then_answered(mounts, server, kind, op, lambda gate, method, rule: (
        gate.refuse(method, rule, status, count=ATTEMPTS if kind == "delete" else 1,
                    when="after"), f"answered {status}"))


@pytest.mark.parametrize(("kind", "op"), CASES, ids=[f"{k}-then-{o}" for k, o in CASES])
def test_applied_then_answered_200_cut_short_then_local_change(mounts, server, kind, op):
    """The server applies the request and its 200 arrives cut short (a gateway's page, a
    body with no length to tell): an answer memfs cannot read is a lost answer, not a
    refusal. Taken for a refusal (found by a helper, 6 December), a create's file deleted
    meanwhile came back, a renamed one left a copy, an edit became a conflict, and a
    delete's file made again with the same bytes vanished; unmount said 0 left."""
    _applied_then_answered(mounts, server, kind, op, lambda gate, method, rule: (
        gate.garble(method, rule, count=1), "its answer cut short"))


def _applied_then_answered(mounts, server, kind: str, op: str, answer) -> None:
    """The request of `kind` applied, then answered as `answer(gate, method, path rule)`
    says (the rule, and how); every read that could tell what happened held while the
    user makes the change `op`; then the store must end as the user left the mount."""
    store, m, x, mid, rule = _start(mounts, kind, "--no-feed")
    reads = rf"/memory_stores/{store}/(memory_versions|memories/)"
    with Gate(server) as gate:
        if kind != "delete":
            gate.hold("GET", reads)                   # the doubt's look, held below
        answered, how = answer(gate, "DELETE" if kind == "delete" else "POST", rule)
        current = _request(kind, x)
        wait_for(lambda: gate.caught(answered) == answered["count"],
                 what=f"the {kind} applied and {how}")
        applied = {"create": {"/d/x.md": "version one\n"}, "update": {"/d/x.md": "v2\n"},
                   "rename": {"/d/y.md": "v1\n"}, "delete": {}}[kind]
        assert server_memories(server, store) == applied
        if kind == "create":
            mid = sdk_by_path(server, store)["/d/x.md"].id
        if kind != "delete":
            gate.wait_held(1)                         # the mount asks: no answer yet
            assert xattr(current, "user.memfs.state") == "pending"
        _change(op, current, x)                       # while the outcome is unknown
        gate.clear()
    _ends_as_left(m, server, store, _expected(kind, op), mid if op in ("mv", "edit") else None)


# -- the lost answer's aftermath meets an outage ---------------------------------------------

OUTAGE_CASES = [("create", "edit"), ("update", "rm"), ("rename", "edit")]


@pytest.mark.parametrize(("kind", "op"), OUTAGE_CASES,
                         ids=[f"{k}-then-{o}" for k, o in OUTAGE_CASES])
def test_lost_answer_then_local_change_then_an_outage_while_it_is_settled(mounts, server,
                                                                          kind, op):
    """The request applied, its answer lost, the file changed; then every read that could
    settle the doubt fails (503, each of the client's attempts, for two passes): the
    mount must keep waiting, not take the outage for "the server shows no trace" (a
    create taken for another writer's, the user's edit filed as a conflict). The same
    without a kernel, for every kind, operation and fault: tests/test_lost_answers_wide.py,
    `test_lost_answers_then_their_aftermath_faulted`. Without the change feed, whose
    polls read the versions too (the outage is the doubt's), and with no lost-answer
    wait: a pass that read "no trace" would act on it at once."""
    store, m, x, mid, rule = _start(mounts, kind, "--no-feed", "--lost-answer-wait", "0")
    reads = rf"/memory_stores/{store}/(memory_versions|memories/)"
    with Gate(server) as gate:
        gate.hold("POST", rule, when="after", count=1, drop=True)
        current = _request(kind, x)
        [first] = gate.wait_held(1)
        assert first["status"] == 200, first          # applied and committed...
        if kind == "create":
            mid = sdk_by_path(server, store)["/d/x.md"].id
        outage = gate.refuse("GET", reads, 503, count=2 * ATTEMPTS)
        gate.hold("GET", reads)                       # after the outage: held, below
        gate.release(first["seq"])                    # ...and its answer lost (reset)
        _change(op, current, x)                       # while the outcome is unknown
        wait_for(lambda: gate.caught(outage) >= 2 * ATTEMPTS,
                 what="two passes' reads failing")
        gate.wait_held(1)                             # the outage over, the next read held:
        assert conflicts(m) == []                     # nothing decided on the outage
        gate.clear()
    _ends_as_left(m, server, store, _expected(kind, op), mid if op in ("mv", "edit") else None)


def test_a_then_b_then_a_again_whose_update_never_applied_keeps_a(mounts, server):
    """x.md is written v1, then B, then v1 again, each pushed; the last update is refused
    with a 503 before the server applies it (a proxy's error: the mount cannot tell it
    from one after the commit, so the update is in doubt). The versions since shortly
    before it was sent hold the first v1: that is not this request's (the memory held B,
    its precondition, after it), so the update is sent again and the user's v1 stays
    (before: taken as applied and written over since, the tree went back to B)."""
    store, m, x, mid, rule = _start(mounts, "update")
    x.write_text("B\n")
    m.wait_synced()
    with Gate(server) as gate:
        refusal = gate.refuse("POST", rule, 503, count=1)
        gate.hold("POST", rule, when="before", count=1)  # what is sent after it
        x.write_text("v1\n")
        [again] = gate.wait_held(1)
        assert gate.caught(refusal) == 1                  # the update refused
        assert server_memories(server, store) == {"/d/x.md": "B\n"}  # never applied
        gate.release(again["seq"])                        # sent again
    _ends_as_left(m, server, store, {"/d/x.md": "v1\n"}, mid)


def test_a_file_moved_and_moved_back_whose_move_back_never_applied_stays_back(mounts, server):
    """x.md is moved to y.md (pushed), then back to x.md; the move back is refused with a
    503 before the server applies it (in doubt, as above). The versions since shortly
    before it was sent hold x.md with the same bytes, the memory's creation: seen by the
    mount before the move back went out (the first move's answer named a newer version),
    so not its version; the move is sent again and the file stays at x.md (before: taken
    as applied and moved since, the file went back to y.md; docs/SEMANTICS.md)."""
    store, m, x, mid, rule = _start(mounts, "rename")
    y = x.parent / "y.md"
    os.rename(x, y)
    m.wait_synced()
    with Gate(server) as gate:
        refusal = gate.refuse("POST", rule, 503, count=1)
        gate.hold("POST", rule, when="before", count=1)  # what is sent after it
        os.rename(y, x)
        [again] = gate.wait_held(1)
        assert gate.caught(refusal) == 1                  # the move back refused
        assert server_memories(server, store) == {"/d/y.md": "v1\n"}  # never applied
        gate.release(again["seq"])                        # sent again
    _ends_as_left(m, server, store, {"/d/x.md": "v1\n"}, mid)


# -- a request the server applies late ------------------------------------------------------

LATE_CASES = [(kind, op) for kind in ("create", "update", "rename") for op in ("rm", "mv", "edit")]


def _user_tree(m) -> dict[str, str]:
    return {"/" + str(p.relative_to(m.path)): cat(p) for p in m.path.rglob("*.md")}


@pytest.mark.parametrize(("kind", "op"), LATE_CASES, ids=[f"{k}-then-{o}" for k, o in LATE_CASES])
def test_a_request_applied_late_then_local_change(mounts, server, kind, op):
    """The mount's create, update or rename gets no answer, and the server applies it
    only later (the gate's `late` rule: the connection reset at once, the request applied
    when released). The mount's passes find no trace of it meanwhile and must not take
    that for "never applied" (`--lost-answer-wait`); the user changes the file; then the
    request lands. The mount never shows a tree the user did not leave (a removed file
    does not come back, not even for a while), and the store ends as they left it."""
    store, m, x, mid, rule = _start(mounts, kind)
    versions = rf"/memory_stores/{store}/memory_versions$"
    with Gate(server) as gate:
        gate.hold("POST", rule, when="late", count=1)
        current = _request(kind, x)
        [late] = gate.wait_held(1)                    # its client got no answer
        _change(op, current, x)                       # while the outcome is unknown
        mine = _user_tree(m)
        gate.hold("GET", versions, when="after", count=1)
        looks = [h for h in gate.wait_held(2) if h["seq"] != late["seq"]]
        gate.release(looks[0]["seq"])                 # a pass asked: no trace of it yet
        assert _user_tree(m) == mine
        gate.release(late["seq"])                     # it lands (applied on return)
        for full in (False, True, False):             # passes that find it: the feed's,
            m.sync_now(full=full)                     # a full listing's, the feed's again
            assert _user_tree(m) == mine
    _ends_as_left(m, server, store, _expected(kind, op), mid if op in ("mv", "edit") else None)


def test_a_file_made_again_with_its_deleted_bytes_whose_create_lands_late(mounts, server):
    """`rm x.md` (its delete applied), then x.md made again with the same bytes (`git
    checkout x.md`); the create gets no answer, and the server applies it only later.
    The passes meanwhile find the deleted memory's creation among the versions (same
    path, same bytes): not the create's, this mount held that memory. x.md never leaves
    the tree, and the store ends with it. Before, the deleted memory was taken for the
    create's and the next listing removed x.md (for good, had the create never landed)."""
    store, m, x, _mid, _rule = _start(mounts, "delete")
    x.unlink()
    m.wait_synced()                                   # the delete applied, and heard
    assert server_memories(server, store) == {}
    mine = {"/d/x.md": "v1\n"}
    with Gate(server) as gate:
        gate.hold("POST", rf"/memory_stores/{store}/memories$", when="late", count=1)
        x.write_text("v1\n")
        [late] = gate.wait_held(1)                    # its client got no answer
        for full in (False, True, False):             # passes that look for it
            m.sync_now(full=full)
            assert _user_tree(m) == mine
        gate.release(late["seq"])                     # it lands
        for full in (False, True, False):
            m.sync_now(full=full)
            assert _user_tree(m) == mine
    _ends_as_left(m, server, store, mine)


@pytest.mark.parametrize("op", ["keep", "rm"])
def test_unmount_waits_for_a_request_that_may_still_land(mounts, server, op):
    """A create gets no answer and is not applied yet when the user unmounts (after
    removing the file, or not): the unmount's flush neither sends it again nor takes "no
    trace" for "never applied" while the server may still apply it; it lands, the flush
    finds it and finishes what the user left (the removed file's memory deleted), and
    the report is exact: 0 left, the store as the user left it."""
    store, m, x, _mid, rule = _start(mounts, "create")
    with Gate(server) as gate:
        gate.hold("POST", rule, when="late", count=1)
        x.write_text("version one\n")
        [late] = gate.wait_held(1)
        if op == "rm":
            x.unlink()
        gate.hold("GET", rf"/memory_stores/{store}/memory_versions$", when="after", count=1)
        with ThreadPoolExecutor(1) as pool:
            unmount = pool.submit(m.unmount)
            looks = [h for h in gate.wait_held(2) if h["seq"] != late["seq"]]
            gate.release(looks[0]["seq"])             # the flush asked: no trace yet
            assert not unmount.done()                 # and it waits rather than resend
            gate.release(late["seq"])                 # it lands
            out = unmount.result(timeout=60)
    assert re.search(r"pushed \d+ change\(s\), 0 left", out), out
    assert server_memories(server, store) == ({} if op == "rm" else
                                              {"/d/x.md": "version one\n"})


def test_an_unmount_that_cannot_wait_for_a_request_in_doubt_names_it(mounts, server):
    """The flush's time runs out while a request that may still land is out: "1 left",
    and which file and why (it said only "1 left ... stay journaled": a helper)."""
    store, m, x, _mid, rule = _start(mounts, "create")
    with Gate(server) as gate:
        gate.hold("POST", rule, when="late", count=1)
        x.write_text("version one\n")
        gate.wait_held(1)
        out = m.unmount("--timeout", "2", kept=True)
    assert "1 left" in out, out
    assert "  1 request(s) whose answer was lost may yet be applied by the server: the " \
        "next mount asks it, and sends what it did not apply:\n    /d/x.md: its create " \
        "was sent, its answer lost\n" in out, out
    m.mount()
    m.wait_synced(timeout=60)
    assert server_memories(server, store) == {"/d/x.md": "version one\n"}


# -- another writer after the lost answer ---------------------------------------------------

THEIRS = [("create", "delete"), ("create", "rename"), ("rename", "rename"), ("update", "delete")]


@pytest.mark.parametrize(("kind", "theirs"), THEIRS, ids=[f"{k}-then-their-{t}" for k, t in THEIRS])
def test_another_writer_after_the_lost_answer(mounts, server, kind, theirs):
    """The mount's request applied, its answer lost; before the mount learns of it another
    writer deletes or moves what it wrote. Their change stands: the mount follows it, and
    nothing comes back or is duplicated. (While the client re-sent such a request blindly,
    the create came back after their delete, or stayed at its path beside their moved
    copy, and the rename moved theirs back.) A create whose memory they deleted leaves
    the file's bytes as a conflict too: the server cannot tell that creation from another
    writer's of the same bytes at the same path (`decide.created_row`; the next test).
    (`--lost-answer-wait 1`: a create that left no trace at its path waits that long
    before it counts as never applied; the default 30 s is the same path, slower.)"""
    store, m, x, mid, rule = _start(mounts, kind, "--lost-answer-wait", "1")
    d = x.parent
    mems = server.sdk().beta.memory_stores.memories
    with Gate(server) as gate:
        gate.hold("POST", rule, when="after", count=1, drop=True)
        if kind == "create":
            x.write_text("v1\n")
        elif kind == "update":
            x.write_text("v2\n")
        else:
            os.rename(x, d / "y.md")
        [first] = gate.wait_held(1)
        assert first["status"] == 200, first          # applied...
        [memory] = sdk_by_path(server, store).values()
        if theirs == "delete":                        # ...then another writer's change
            mems.delete(memory.id, memory_store_id=store)
        else:
            mems.update(memory.id, memory_store_id=store, path="/d/z.md")
        gate.release(first["seq"])                    # and the mount's answer lost
    if (kind, theirs) == ("create", "delete"):
        _kept_as_a_conflict(m, server, store, "v1\n")
        return
    _ends_as_left(m, server, store, {} if theirs == "delete" else {"/d/z.md": "v1\n"})


def _kept_as_a_conflict(m, server, store: str, content: str, *, path: str = "/d/x.md",
                        reason: str = "cannot tell whether it was ours",
                        logged: str = "could not tell whether its create made the memory",
                        ) -> None:
    """The memory `path`'s request made (or took for its own), or that another writer
    made alike, is gone: so is the file; its bytes are one conflict (said so in the log,
    and named by a flush, as an unmount would), which `memfs conflicts restore` puts
    back, and the store ends with it."""
    file = m.path / path.lstrip("/")
    flush(m)
    for _ in range(40):
        if not file.exists():
            break
        time.sleep(0.25)
    assert server_memories(server, store) == {}
    assert not file.exists()
    [row] = conflicts(m)
    [aside] = flush(m)["conflicts"]         # what an unmount now would name (status 3)
    assert (aside["id"], aside["path"]) == (row["id"], path)
    assert (row["path"], row["local_content"]) == (path, content), row
    assert reason in row["reason"]
    assert logged in (m.state_dir / "daemon.log").read_text()
    m.memfs("conflicts", "restore", str(row["id"]), "--mountpoint", str(m.path))
    assert cat(file) == content
    flush(m)
    m.wait_synced()
    assert server_memories(server, store) == {path: content}
    assert conflicts(m) == []
    out = m.unmount()
    assert re.search(r"pushed \d+ change\(s\), 0 left", out), out


def test_a_create_refused_beside_a_like_creation_deleted_since_keeps_the_file(mounts,
                                                                              server):
    """Another writer created /d/x.md holding v1 and deleted it; then x.md is written v1
    through the mount, and its create meets a 503 (not applied, but it may have been, for
    all the mount knows). Among the versions created since, their creation holds the same
    bytes at the same path: ours or theirs, the server cannot say, and it is gone. Before,
    it was taken for ours and the file went with their delete: nothing was left of what
    the user wrote. Now its bytes are kept as a conflict, and restored they reach the
    server."""
    store = mounts.new_store()
    mems = server.sdk().beta.memory_stores.memories
    theirs = mems.create(memory_store_id=store, path="/d/x.md", content="v1\n")
    mems.delete(theirs.id, memory_store_id=store)
    m = mounts.mount(store, *MOUNT_ARGS)             # (its listing: nothing of theirs)
    with Gate(server) as gate:
        gate.refuse("POST", rf"/memory_stores/{store}/memories$", 503, count=1)
        (m.path / "d").mkdir()
        (m.path / "d" / "x.md").write_text("v1\n")
        _kept_as_a_conflict(m, server, store, "v1\n")


@pytest.mark.parametrize(("wait", "knows", "adopted"),
                         [("0", True, None), ("5", True, None), ("0", False, None),
                          ("0", False, "deletes"), ("0", False, "edits")],
                         ids=["0", "5", "0-writer-unknown", "0-writer-unknown-deletes-only",
                              "0-writer-unknown-edits-only"])
def test_our_update_in_doubt_meeting_their_like_bytes_since_deleted_keeps_ours(
        mounts, server, wait, knows, adopted):
    """An agent's session writes v2 to /x.md and deletes it while the mount hears nothing
    (it polls only when asked); the user, not having heard, writes v2 to x.md, and the
    update's answer is lost (it met the deleted memory; the connection is reset). The
    memory's versions hold v2, recorded as the session's, and the mount knows it writes
    as its API key: whether ours met their bytes (an update finding its bytes there makes
    no version) or never arrived, the server cannot tell. Their delete stands and the
    user's v2 is kept as a conflict, which `memfs conflicts restore` brings back. Before,
    that version was taken for our update and their delete took the user's file: nothing
    kept (found by the random search, 6 December). With a lost-answer wait of 0 the next
    pass resolves the doubt before it reads their delete; with 5 s, the request may still
    land when a pass reads the delete, which keeps the edited file as a new one
    (`Absent.KEEP_AS_NEW`): the doubt, resolved later, finds nothing holding the memory,
    and the file is created again, no conflict. When the feed has not read a creation
    of the mount's back yet (`knows` False), the doubt reads that version itself (one
    GET) to learn who the mount writes as; before, their version was taken for ours.
    A mount that created nothing (`adopted`: x.md and y.md made by another client on its
    key) learns it from the deletion of y.md, its own (one listing). One that only
    edits (x.md alone adopted) never learns it: the version holding v2 may be theirs,
    so the user's v2 is kept as a conflict all the same, which says why."""
    store = mounts.new_store()
    if adopted:
        mems = server.sdk().beta.memory_stores.memories
        for path in ("/x.md", "/y.md") if adopted == "deletes" else ("/x.md",):
            mems.create(memory_store_id=store, path=path, content="v1\n")
    m = mounts.mount(store, "--write-back-delay", "0.2", "--delete-delay", "0",
                     "--poll-interval", "3600", "--lost-answer-wait", wait)
    x = m.path / "x.md"
    if adopted == "deletes":
        (m.path / "y.md").unlink()
    elif not adopted:
        x.write_text("v1\n")
    m.wait_synced()
    mid = xattr(x, "user.memfs.memory_id")
    if knows:
        m.sync_now()                              # the feed reads our creation back
    assert (_writer(m) is not None) == knows
    agent = server.sdk(default_headers={"x-memfs-session-id": "sesn_01agent"})
    agent.beta.memory_stores.memories.update(mid, memory_store_id=store, content="v2\n")
    agent.beta.memory_stores.memories.delete(mid, memory_store_id=store)
    with Gate(server) as gate:
        gate.hold("POST", rf"/memory_stores/{store}/memories/{mid}$", when="after", count=1,
                  drop=True)
        x.write_text("v2\n")
        [post] = gate.wait_held(1)
        assert post["status"] == 404, post        # it met the deleted memory...
        gate.release(post["seq"])                 # ...and its answer is lost
        gate.clear()
    if wait == "5":                               # (with 0 the next push pass may have
        assert xattr(x, "user.memfs.state") == "pending"  # resolved it already)
    m.sync_now()                                  # a pass: the doubt first, then the feed
    if adopted == "edits":                        # nothing to learn it from
        assert _writer(m) is None
        _kept_as_a_conflict(m, server, store, "v2\n", path="/x.md",
                            reason="has not learned who it writes as, cannot tell whether "
                                   "those bytes were ours",
                            logged="could not tell whether its write reached the memory")
        return
    assert _writer(m)["type"] == "api_actor"      # learned by now, whichever way
    if wait == "0":
        _kept_as_a_conflict(m, server, store, "v2\n", path="/x.md",
                            reason="the server cannot tell whether ours was applied",
                            logged="could not tell whether its write reached the memory")
        return
    assert "was deleted on the server but edited here; re-creating it" in (
        m.state_dir / "daemon.log").read_text()
    _ends_as_left(m, server, store, {"/x.md": "v2\n"})
    assert sdk_by_path(server, store)["/x.md"].id != mid  # a new memory


def test_a_listing_read_before_a_write_of_its_bytes_keeps_the_write(mounts, server):
    """An agent's session writes 'same' to /x.md; a full listing reads it, and before its
    answer is applied the agent deletes x.md and the user, not having heard, writes
    'same' too. The listing's row equals the file, but it was read before the user's
    write: taken as synced, the agent's delete then took the file. It is read again
    instead: gone, so the file is created again. (Polls only when asked, so that no
    other pass reads 'same' first: a file that already shows those bytes is not changed
    by writing them again.)"""
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "0.2", "--delete-delay", "0",
                     "--poll-interval", "3600")
    x = m.path / "x.md"
    x.write_text("v1\n")
    m.wait_synced()
    m.sync_now(full=True)                             # nothing else under way
    mid = xattr(x, "user.memfs.memory_id")
    agent = server.sdk(default_headers={"x-memfs-session-id": "sesn_01agent"})
    agent.beta.memory_stores.memories.update(mid, memory_store_id=store, content="same\n")
    with Gate(server) as gate, ThreadPoolExecutor(1) as pool:
        gate.hold("GET", rf"/memory_stores/{store}/memories$", when="after", count=1)
        listing = pool.submit(m.sync_now, full=True)
        [held] = gate.wait_held(1)                    # read, its answer not applied yet
        agent.beta.memory_stores.memories.delete(mid, memory_store_id=store)
        x.write_text("same\n")
        gate.release(held["seq"])
        listing.result(timeout=60)
        gate.clear()
    m.sync_now()                                      # the memory read again: gone
    _ends_as_left(m, server, store, {"/x.md": "same\n"})
    assert sdk_by_path(server, store)["/x.md"].id != mid  # created again


def _writer(m) -> dict | None:
    """Who the mount knows it writes as (state.db's meta, read-only beside the daemon)."""
    db = sqlite3.connect(f"file:{m.state_dir / 'state.db'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'writer'").fetchone()
    finally:
        db.close()
    return json.loads(row[0])["value"] if row else None


def test_our_create_in_doubt_deleted_here_spares_another_writers_like_creation(mounts,
                                                                               server):
    """A create of /d/x.md meets a 503 (not applied, but it may have been, for all the
    mount knows); the user removes d; an agent's session creates /d/x.md with the same
    bytes before the mount asks what its create did. The server records that creation
    as the session's, and the mount knows it writes as its API key (read from a memory
    it created): their memory is not taken for ours, so the user's delete does not go to
    it, and it shows in the mount. Before, it was taken for ours and deleted: the
    agent's file gone, nothing kept. The mount's reads of the versions wait at the gate
    until both changes are made. (It polls only when asked: a poll the gate held would
    hold the create back too, which runs one pass at a time with it.)"""
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "0.2", "--delete-delay", "0",
                     "--poll-interval", "3600", "--lost-answer-wait", "1")
    (m.path / "a.md").write_text("a\n")
    m.wait_synced()
    m.sync_now()                            # the feed reads our version
    assert _writer(m)["type"] == "api_actor"
    agent = server.sdk(default_headers={"x-memfs-session-id": "sesn_01agent"})
    with Gate(server) as gate:
        gate.hold("GET", rf"/memory_stores/{store}/memory_versions")
        gate.refuse("POST", rf"/memory_stores/{store}/memories$", 503, count=1)
        (m.path / "d").mkdir()
        (m.path / "d" / "x.md").write_text("v1\n")
        deadline = time.monotonic() + 30
        while not m.live_status()["pending"]["unconfirmed"]:   # the 503 came
            assert time.monotonic() < deadline, m.live_status()["pending"]
            time.sleep(0.05)
        subprocess.run(["rm", "-r", str(m.path / "d")], check=True)
        theirs = agent.beta.memory_stores.memories.create(store, path="/d/x.md",
                                                           content="v1\n")
        gate.clear()
    flush(m)
    m.sync_now()
    deadline = time.monotonic() + 30
    while not (m.path / "d" / "x.md").exists():
        assert time.monotonic() < deadline, "their file never showed"
        time.sleep(0.25)
    assert server_memories(server, store) == {"/a.md": "a\n", "/d/x.md": "v1\n"}
    assert sdk_by_path(server, store)["/d/x.md"].id == theirs.id
    assert cat(m.path / "d" / "x.md") == "v1\n"
    assert conflicts(m) == []
    out = m.unmount()
    assert re.search(r"pushed \d+ change\(s\), 0 left", out), out


def test_their_rename_then_our_lost_update_then_an_edit(mounts, server):
    """The mount's update of /d/x.md's content is on its way when another writer moves
    it to /d/z.md; the update is applied there, its answer lost, and the file is edited
    again. The update sent no path: the memory holding our content at /d/z.md is its
    answer. Their move stands, our edit follows our update, no conflict is made (before:
    looked for at /d/x.md, our write was not found; the edit went out against the old
    base and was filed as a conflict with our own write; found by the long Hypothesis
    run of the interleaving harness, 4 December). The lost-answer wait is an hour: the
    answer must be found, not waited out (waited out, the 409 of the edit finds our
    write as the update sent before, and the test could not tell)."""
    store, m, x, mid, rule = _start(mounts, "update", "--lost-answer-wait", "3600")
    mems = server.sdk().beta.memory_stores.memories

    def held_post() -> dict:
        deadline = time.monotonic() + 30
        while not (posts := [h for h in gate.held() if h["method"] == "POST"]):
            assert time.monotonic() < deadline, gate.held()
            time.sleep(0.05)
        return posts[0]

    with Gate(server) as gate:
        gate.hold("POST", rule, when="before", count=1)
        x.write_text("v2\n")                                     # our content-only update
        ours = held_post()                                       # on its way, not applied
        # The mount's polls and reads wait from now: it learns nothing until the end.
        gate.hold("GET", rf"/memory_stores/{store}/(memory_versions|memories/)")
        mems.update(mid, memory_store_id=store, path="/d/z.md")   # their move
        gate.hold("POST", rule, when="after", count=1, drop=True)
        gate.release(ours["seq"])
        applied = held_post()
        assert applied["status"] == 200, applied                 # applied at /d/z.md...
        assert server_memories(server, store) == {"/d/z.md": "v2\n"}
        gate.release(applied["seq"])                             # ...its answer lost
        assert xattr(x, "user.memfs.state") == "pending"
        x.write_text("edited\n")                                 # while the outcome is unknown
        gate.clear()
    _ends_as_left(m, server, store, {"/d/z.md": "edited\n"}, mid)


@pytest.mark.parametrize("kind", ["create", "update", "rename"])
def test_lost_answer_then_their_edit_during_our_round_trip_over_a_sibling(mounts, server,
                                                                          kind):
    """The request is applied, its answer lost; meanwhile the file is moved over its
    sibling /d/k.md (taking k's memory) and back while another writer edits the file's
    memory. The file holds what our request wrote: it takes its own memory back, their
    edit is a plain update, and k's memory is the one deleted (before: a conflict with
    our own write; found by `their_edit_in_my_round_trip` of the widened product,
    4 December). The lost-answer wait is an hour: the answer must be found. (For the
    create, 2 s: a creation another writer has changed since could be theirs, made alike
    before ours, and is taken for ours only once our own could no longer land,
    `decide.created_row`; the file holds k's memory then, so nothing is kept aside.)"""
    store, m, x, mid, rule = _start(mounts, kind, "--lost-answer-wait",
                                    "2" if kind == "create" else "3600")
    (x.parent / "k.md").write_text("k\n")
    m.wait_synced()
    mems = server.sdk().beta.memory_stores.memories
    with Gate(server) as gate:
        gate.hold("POST", rule, when="after", count=1, drop=True)
        current = _request(kind, x)
        [first] = gate.wait_held(1)
        assert first["status"] == 200, first                    # applied and committed...
        mid = mid or sdk_by_path(server, store)["/d/x.md"].id
        os.rename(current, x.parent / "k.md")                    # over the sibling
        mems.update(mid, memory_store_id=store, content="theirs\n")
        os.rename(x.parent / "k.md", current)                    # and back
        gate.release(first["seq"])                               # ...its answer lost
    _ends_as_left(m, server, store, {f"/d/{current.name}": "theirs\n"}, mid)


def test_a_create_in_doubt_whose_file_a_like_synced_one_replaced_keeps_that_file(mounts,
                                                                                server):
    """Another client with the mount's API key (the same user on another machine: the
    server records its writes as the mount's) creates /c.md holding 'same' and deletes
    it while the mount hears nothing (it polls only when asked). The user writes 'same'
    to c.md, and the create meets a 503; while the mount reads what it did, the user
    moves d.md, synced holding 'same' too, over c.md. The deleted creation is taken for
    ours (the server cannot say whose it was), but not given back to the moved file:
    that file keeps d's memory, which moves to /c.md. Before, the file took the created
    memory back (as a file moved over another and back), their delete took it, and d's
    memory went with the move: the user's file was lost (found by a mutant of
    `push_overtaken` that survived, 6 December)."""
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "0.2", "--delete-delay", "0",
                     "--poll-interval", "3600")
    d, c = m.path / "d.md", m.path / "c.md"
    d.write_text("same\n")
    m.wait_synced()
    mine = xattr(d, "user.memfs.memory_id")
    other = server.sdk().beta.memory_stores.memories           # the same key
    theirs = other.create(store, path="/c.md", content="same\n")
    other.delete(theirs.id, memory_store_id=store)
    with Gate(server) as gate:
        gate.hold("GET", rf"/memory_stores/{store}/memory_versions", count=1)
        gate.refuse("POST", rf"/memory_stores/{store}/memories$", 503, count=1)
        c.write_text("same\n")
        gate.wait_held(1)                            # the create's outcome is being read
        assert xattr(c, "user.memfs.state") == "pending"
        os.rename(d, c)
        gate.clear()
    _ends_as_left(m, server, store, {"/c.md": "same\n"}, mine)


# -- the daemon killed while the answer is held ----------------------------------------------

CRASH_CASES = [("create", "rm"), ("update", "edit"), ("rename", "mv"), ("delete", "recreate")]


def _applied_then_killed(gate: Gate, server, store: str, m, kind: str, x: Path,
                         mid: str | None, rule: str) -> tuple[Path, str | None]:
    """The user's change sends the request of `kind`; the server applies it, and the
    daemon is SIGKILLed before the answer comes: (the file's path now, its memory id)."""
    gate.hold("DELETE" if kind == "delete" else "POST", rule, when="after", count=1,
              drop=True)
    current = _request(kind, x)
    [held] = gate.wait_held(1)
    assert held["status"] == 200, held                # applied and committed...
    on_server = sdk_by_path(server, store)
    if kind == "create":
        mid = on_server["/d/x.md"].id
    elif kind == "rename":
        assert on_server["/d/y.md"].id == mid
    m.kill9()                                         # ...and the daemon dies untold
    gate.clear()
    return current, mid


@pytest.mark.parametrize(("kind", "op"), CRASH_CASES,
                         ids=[f"{k}-then-{o}" for k, o in CRASH_CASES])
def test_daemon_killed_while_the_answer_is_held_then_local_change(mounts, server, kind, op):
    """The request applied on the server, the daemon killed (SIGKILL) before its answer
    came: the next daemon knows of it only from its journal. The user changes the file
    on the new mount; the store must end as they left it, with no conflict (the
    interleaving harness's crash runs, `explore(crashes=CRASHES)`, through a real mount)."""
    store, m, x, mid, rule = _start(mounts, kind)
    with Gate(server) as gate:
        current, mid = _applied_then_killed(gate, server, store, m, kind, x, mid, rule)
    m = mounts.mount(store, *MOUNT_ARGS)              # a new daemon, on its journal
    _change(op, current, x)
    _ends_as_left(m, server, store, _expected(kind, op), mid if op in ("mv", "edit") else None)


@pytest.mark.parametrize(("kind", "op"), CRASH_CASES,
                         ids=[f"{k}-then-{o}" for k, o in CRASH_CASES])
def test_daemon_killed_again_while_it_settles_the_doubt(mounts, server, kind, op):
    """As above, and the next daemon is killed too, while its first look at the request's
    outcome is held (the read that settles a create or an update in doubt; a delete's
    second DELETE). The user changes the file on that mount meanwhile. The third daemon
    knows of the request only from the journal the first one wrote, which the second
    must leave whole until it has the answer (the interleaving harness's
    `explore(twice=True)`, through real mounts)."""
    store, m, x, mid, rule = _start(mounts, kind)
    with Gate(server) as gate:
        current, mid = _applied_then_killed(gate, server, store, m, kind, x, mid, rule)
        if kind == "delete":                          # the next one sends it again
            gate.hold("DELETE", rule, when="before", count=1)
        else:                                         # the next one asks what happened
            gate.hold("GET", rf"/memory_stores/{store}/(memory_versions|memories/)",
                      when="before", count=1)
        m = mounts.mount(store, *MOUNT_ARGS)
        [settling] = gate.wait_held(1)                # the first request was released
        _change(op, current, x)                       # while the outcome is unknown
        m.kill9()                                     # and it dies before it learns it
        gate.clear()
    m = mounts.mount(store, *MOUNT_ARGS)              # a third daemon, on the journal
    _ends_as_left(m, server, store, _expected(kind, op), mid if op in ("mv", "edit") else None)


# -- a workload under lost answers ---------------------------------------------------------

#: Seeds and operations per seed (MEMFS_LOST_WORKLOAD="SEEDS:OPS" for a longer run, e.g.
#: "20:600", the issue's check).
_SPEC = os.environ.get("MEMFS_LOST_WORKLOAD", "2:200")
SEEDS, OPS = (int(v) for v in _SPEC.split(":"))


def _workload(root, rng, ops: int) -> None:
    """Creates, appends, editor saves (temp file + rename over), renames of files and
    directories, deletes and mkdirs, as a user and their tools make them."""
    import time

    dirs = [root]
    for counter in range(1, ops + 1):
        files = [p for d in dirs if d.exists() for p in d.iterdir() if p.is_file()]
        op = rng.choice(["create", "create", "append", "save", "rename", "delete", "mkdir",
                         "rename_dir"])
        if op == "create" or not files:
            (rng.choice(dirs) / f"f{counter}.md").write_text(f"created {counter}\n")
        elif op == "append":
            with open(rng.choice(files), "a") as f:
                f.write(f"appended {counter}\n")
        elif op == "save":
            target = rng.choice(files)
            tmp = target.with_name(f".{target.name}.{counter}.tmp")
            tmp.write_text(f"saved {counter}\n")
            os.rename(tmp, target)
        elif op == "rename":
            src = rng.choice(files)
            os.rename(src, rng.choice(dirs) / f"r{counter}.md")
        elif op == "delete":
            rng.choice(files).unlink()
        elif op == "mkdir" and len(dirs) < 6:
            new = rng.choice(dirs) / f"d{counter}"
            new.mkdir()
            dirs.append(new)
        elif op == "rename_dir" and len(dirs) > 1:
            src = rng.choice(dirs[1:])
            dst = src.with_name(f"m{counter}")
            os.rename(src, dst)
            dirs = [dst / p.relative_to(src) if p.is_relative_to(src) else p for p in dirs]
        if rng.random() < 0.1:
            time.sleep(0.05)  # let pushes (and their lost answers) fall between the ops


#: How the answers go astray: dropped after the commit (no answer), or an error answered
#: after the commit (a 502 from a gateway: the request may still land; a 500: done), or
#: each of those and a 503 before anything is applied, which the client cannot tell apart.
LOSSES = {"dropped": {"drop_rate": 0.2},
          "502-after-commit": {"error_after_rate": 0.2, "error_after_status": 502},
          "500-after-commit": {"error_after_rate": 0.2, "error_after_status": 500},
          "mixed": {"drop_rate": 0.1, "error_after_rate": 0.1, "error_after_status": 504,
                    "error_rate": 0.1, "error_status": 503}}


@pytest.mark.parametrize("seed", range(SEEDS))
@pytest.mark.parametrize("loss", list(LOSSES))
def test_workload_with_lost_answers_ends_exact(mounts, server, seed, loss):
    """20 % of the answers lost after the commit (dropped, or answered a 5xx; "mixed": 10 %
    dropped, 10 % answered 504 after it, 10 % refused with a 503 before anything is
    applied): the server ends equal to the mount's tree, with no conflict, and the
    unmount report is exact."""
    import random

    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "0.05", "--delete-delay", "0",
                     "--poll-interval", "0.3")
    server.set_faults(**LOSSES[loss])
    try:
        _workload(m.path, random.Random(seed), OPS)
        tree = {"/" + str(p.relative_to(m.path)): p.read_text()
                for p in m.path.rglob("*") if p.is_file()}
        assert conflicts(m) == [], "no other writer: no conflict"
        out = m.unmount("--timeout", "120")
    finally:
        server.clear_faults()
    assert re.search(r"pushed \d+ change\(s\), 0 left", out), out
    got = server_memories(server, store)
    if got != tree:  # the daemon's own account, for the failure report
        print((m.state_dir / "daemon.log").read_text()[-20000:])
    assert got == tree


# -- a file that never stops changing --------------------------------------------------------


def test_a_file_that_keeps_changing_is_pushed_while_it_changes(mounts, server):
    """A log or an autosaving editor rewrites a file more often than the write-back delay:
    `--max-push-delay` still pushes it while the writes go on (before it, the file
    reached the server only once the writes stopped)."""
    import time

    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "5", "--max-push-delay", "1")
    log = m.path / "log.md"
    lines = []
    seen = None
    for i in range(300):  # at most a minute of writes; the first push ends the loop
        lines.append(f"line {i}\n")
        with open(log, "a") as f:
            f.write(lines[-1])
        time.sleep(0.2)
        seen = server_memories(server, store).get("/log.md")
        if seen is not None:
            break
    assert seen is not None, "never pushed while the writes went on"
    assert seen == "".join(lines[:seen.count("\n")])  # a state the file really had
    flush(m)
    assert server_memories(server, store) == {"/log.md": "".join(lines)}


def test_a_create_unlinked_in_flight_then_a_crash_then_a_new_directory(mounts, server):
    """/d/e.md's create is applied, the user removes the file before the answer comes,
    and the daemon dies (kill -9) with the answer still held. Restarted, it reads state.db
    again: the doubt names the unlinked file's inode, the highest one. The user makes a
    directory before the restarted daemon asks what its create did. That directory once
    got the same inode, so the create's answer landed on it: the memory the user
    deleted stayed on the server (and came back to the tree at the next listing), while
    unmount said all was pushed. Found by Hypothesis. The restarted daemon's reads of
    the versions wait at the gate until the directory is made."""
    store = mounts.new_store()
    m = mounts.mount(store, *MOUNT_ARGS)
    (m.path / "a.md").write_text("a\n")
    m.wait_synced()
    with Gate(server) as gate:
        gate.hold("POST", rf"/memory_stores/{store}/memories$", when="after", count=1)
        (m.path / "d").mkdir()
        (m.path / "d" / "e.md").write_text("e\n")
        gate.wait_held(1)                         # applied; its answer held
        (m.path / "d" / "e.md").unlink()
        m.kill9()                                 # the daemon dies waiting for it
        gate.clear()
        assert sdk_by_path(server, store).keys() == {"/a.md", "/d/e.md"}
        gate.hold("GET", rf"/memory_stores/{store}/memory_versions")
        m.mount()
        (m.path / "e").mkdir()                    # before the doubt is looked into
        gate.clear()
    flush(m)
    m.sync_now(full=True)
    assert server_memories(server, store) == {"/a.md": "a\n"}
    assert sorted(p.name for p in m.path.iterdir()) == ["a.md", "d", "e"]
    assert (m.path / "e").is_dir() and list((m.path / "e").iterdir()) == []
    assert conflicts(m) == []
    out = m.unmount()
    assert re.search(r"pushed \d+ change\(s\), 0 left", out), out
