"""The state transitions one at a time (memfs/state/transitions.py, State's local mutations).

Each test builds a State on a real state.db in a temp dir, brings one file into the
situation the transition is for, applies it, and checks what a reader of the tree,
the conflicts and a reopened state.db sees. These pin the guards the interleaving
harness reaches only through rare timings (the mutation run, docs/TESTING.md,
"Mutation testing", found them unpinned).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time
from pathlib import Path

import pytest

from memfs.core.nodes import Node, Remote
from memfs.state import transitions
from memfs.state.blobs import sha256
from memfs.state.schema import DOUBT_COLUMNS
from memfs.state.state import PARK_NAME, ROOT_INO, State
from memfs.state.transitions import MAX_FILE_BACKOFF, Deferred
from memfs.state.view import StateView

MID = "mem_x"


def _file(st: State, name: str, data: bytes, *, memory_id: str | None = MID):
    """A file as the handlers leave it after a write, pushed as memory_id (or not)."""
    node = st.new_node(st.nodes[ROOT_INO], name, is_dir=False, mode=0o100644, uid=0, gid=0)
    st.set_content(node, sha256(data), len(data))
    if memory_id is not None:
        st.adopt_own_write(node, Remote(memory_id, st.path_of(node), sha256(data)))
    return node


@pytest.fixture
def st(tmp_path: Path):
    state = State(tmp_path / "state.db")
    yield state
    state.close()


def _conflict(st: State, *row) -> int:
    """A conflict row on its own, as adoption imports one (State.import_conflicts)."""
    st.import_conflicts([row])
    return st.conflicts()[-1]["id"]


def _reopened(st: State, tmp: Path) -> State:
    return State(tmp / "state.db")


# -- take_remote: the conflict's compare-and-set on gen ------------------------------------


def test_take_remote_at_the_fetched_gen_keeps_ours_as_a_conflict(st, tmp_path):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"mine"), 4)
    gen = node.gen
    cid = st.take_remote(node, Remote(MID, "/x.md", sha256(b"theirs"), 6), "both changed",
                         gen=gen)
    assert cid is not None
    row = st.get_conflict(cid)
    assert (row["path"], row["local_sha"], row["remote_sha"]) == \
        ("/x.md", sha256(b"mine"), sha256(b"theirs"))
    assert (node.sha, node.size, node.base_sha) == (sha256(b"theirs"), 6, sha256(b"theirs"))
    assert not st.is_dirty(node)
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/x.md").sha == sha256(b"theirs")
    assert [c["id"] for c in again.conflicts()] == [cid]
    again.close()


def test_take_remote_after_a_local_change_since_the_fetch_applies_nothing(st, tmp_path):
    """The caller fetched the server's version at `gen`; the file changed here since:
    that version was decided against content the file no longer holds."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"mine"), 4)
    fetched_at = node.gen
    st.set_content(node, sha256(b"newer"), 5)  # a save lands while the GET is in flight
    with pytest.raises(Deferred):
        st.take_remote(node, Remote(MID, "/x.md", sha256(b"theirs"), 6), "both changed",
                       gen=fetched_at)
    assert (node.sha, node.size, node.base_sha) == (sha256(b"newer"), 5, sha256(b"base"))
    assert st.conflicts() == []
    assert st.is_dirty(node)
    again = _reopened(st, tmp_path)
    kept = again.lookup_path("/x.md")
    assert (kept.sha, kept.base_sha) == (sha256(b"newer"), sha256(b"base"))
    assert again.conflicts() == []
    again.close()


def test_take_remote_after_a_local_rename_since_the_fetch_applies_nothing(st):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"mine"), 4)
    fetched_at = node.gen
    st.rename(node, st.nodes[ROOT_INO], "y.md", None)
    with pytest.raises(Deferred):
        st.take_remote(node, Remote(MID, "/x.md", sha256(b"theirs"), 6), "both changed",
                       gen=fetched_at)
    assert node.sha == sha256(b"mine") and st.conflicts() == []
    assert st.path_of(node) == "/y.md" and node.base_path == "/x.md"


def test_a_stale_decision_stays_stale_after_the_server_content_is_applied(st):
    """gen only moves forward: a decision made before a local change must not become
    valid again because the server's content was applied since."""
    node = _file(st, "x.md", b"base")
    decided_at = node.gen
    st.set_content(node, sha256(b"base"), 4)  # a save of the same bytes: still clean
    st.remote_content(node, Remote(MID, "/x.md", sha256(b"v2"), 2))
    with pytest.raises(Deferred):
        st.take_remote(node, Remote(MID, "/x.md", sha256(b"v3"), 2), "both changed",
                       gen=decided_at)
    assert node.sha == sha256(b"v2") and st.conflicts() == []


def test_take_remote_over_a_local_rename_only_loses_nothing(st):
    """A file renamed here but not edited takes the server's content: no conflict row,
    the rename still goes out, and its memory stays its own."""
    node = _file(st, "x.md", b"base")
    st.rename(node, st.nodes[ROOT_INO], "y.md", None)
    cid = st.take_remote(node, Remote(MID, "/x.md", sha256(b"theirs"), 6), "both changed",
                         gen=node.gen)
    assert cid is None and st.conflicts() == []
    assert node.sha == sha256(b"theirs") and node.memory_id == MID
    assert st.tombstones == {} and st.holder(MID) is node
    assert st.is_dirty(node) and st.path_of(node) == "/y.md"


def test_take_remote_of_the_same_bytes_is_no_conflict(st):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"same"), 4)
    assert st.take_remote(node, Remote(MID, "/x.md", sha256(b"same"), 4), "both changed",
                          gen=node.gen) is None
    assert st.conflicts() == [] and not st.is_dirty(node)


@pytest.mark.parametrize("data,kept", [(b"", False), (b"mine", True)])
def test_take_remote_over_a_new_file_keeps_only_real_content(st, data, kept):
    """A local create that lost its path to another writer's memory: its content is
    kept as a conflict, unless it is empty (an empty new file loses nothing)."""
    node = _file(st, "x.md", data, memory_id=None)
    cid = st.take_remote(node, Remote("mem_other", "/x.md", sha256(b"theirs"), 6),
                         "another writer created the same path", gen=node.gen)
    assert (cid is not None) is kept
    assert [(c["local_sha"], c["memory_id"]) for c in st.conflicts()] == \
        ([(sha256(data), "mem_other")] if kept else [])
    assert node.memory_id == "mem_other" and node.sha == sha256(b"theirs")


def test_take_remote_against_a_stranger_tombstones_our_own_memory(st, tmp_path):
    """tombstone_own: our memory renamed onto a path a stranger's memory holds; the
    tree takes the stranger's, ours (all local content) is kept and deleted later."""
    node = _file(st, "x.md", b"base")
    cid = st.take_remote(node, Remote("mem_stranger", "/x.md", sha256(b"theirs"), 6),
                         "path taken", gen=node.gen, tombstone_own=True)
    assert cid is not None
    assert st.get_conflict(cid)["local_sha"] == sha256(b"base")
    assert node.memory_id == "mem_stranger" and st.holder("mem_stranger") is node
    assert list(st.tombstones) == [MID] and st.holder(MID) is None
    again = _reopened(st, tmp_path)
    assert list(again.tombstones) == [MID]
    again.close()


def test_take_remote_against_a_stranger_keeps_our_bytes_even_when_they_are_theirs(st):
    """Our memory renamed onto a path a stranger's memory holds with the same bytes:
    the file becomes theirs and ours is deleted, so the conflict row keeps our file
    (another writer's later delete of their memory takes the file: found by the random
    interleaving search, `renamed_onto_their_same_bytes_then_they_delete_it`)."""
    node = _file(st, "x.md", b"same")
    cid = st.take_remote(node, Remote("mem_stranger", "/x.md", sha256(b"same"), 4),
                         "path taken", gen=node.gen, tombstone_own=True)
    assert cid is not None
    row = st.get_conflict(cid)
    assert (row["local_sha"], row["memory_id"]) == (sha256(b"same"), "mem_stranger")
    assert node.memory_id == "mem_stranger" and list(st.tombstones) == [MID]


def test_applying_the_server_content_tells_the_content_hook(st):
    """The kernel's cached pages of the file are dropped (the open files' hook,
    mount/open_files.py) when the server's content replaces it."""
    node = _file(st, "x.md", b"base")
    heard = []
    st.on_content = lambda ino, *rest: heard.append(ino)
    st.take_remote(node, Remote(MID, "/x.md", sha256(b"theirs"), 6), "r", gen=node.gen)
    assert heard == [node.ino]


def test_a_conflict_shows_until_its_last_row_is_resolved(st):
    node = _file(st, "x.md", b"base")
    for theirs in (b"t1", b"t2"):
        st.set_content(node, sha256(b"mine" + theirs), 6)
        st.take_remote(node, Remote(MID, "/x.md", sha256(theirs), 2), "r", gen=node.gen)
    first, second = (c["id"] for c in st.conflicts())
    assert st.sync_state(node) == "conflict"
    st.discard_conflict(first)
    assert st.sync_state(node) == "conflict"
    st.discard_conflict(second)
    assert st.sync_state(node) == "synced"


def test_taking_the_server_version_clears_a_refusal_and_the_backoff(st):
    """The server's content is not the refused one: the file is no longer refused, and
    its next failure starts the backoff from its first step again."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"\xff"), 1)
    st.refuse_locally(node, "not UTF-8")
    ticket = st.begin_push(node)
    st.push_failed(ticket, "503", transient=False)
    st.push_failed(ticket, "503", transient=False)
    assert st.sync_state(node) == "refused"
    st.take_remote(node, Remote(MID, "/x.md", sha256(b"theirs"), 6), "r", gen=node.gen)
    assert not st.is_refused(node) and node.error is None and node.retry_at is None
    st.set_content(node, sha256(b"next"), 4)
    before = time.time()
    st.push_failed(st.begin_push(node), "403", transient=False)
    after = time.time()
    assert before + 2.0 <= node.retry_at <= after + 2.0  # the first step: 2 s


# -- restore_conflict (`memfs conflicts restore`) -------------------------------------------


def _conflicted(st: State, name: str = "x.md"):
    """A file whose edit lost to the server's: the tree holds theirs, row holds mine."""
    node = _file(st, name, b"base")
    st.set_content(node, sha256(b"mine"), 4)
    cid = st.take_remote(node, Remote(MID, f"/{name}", sha256(b"theirs"), 6), "both changed",
                         gen=node.gen)
    return node, cid


def test_restore_puts_the_kept_version_back_as_a_local_edit(st, tmp_path):
    node, cid = _conflicted(st)
    heard = []
    st.on_content = lambda ino, *rest: heard.append(ino)
    restored, created = st.restore_conflict(cid, 4)
    assert restored is node and not created and heard == [node.ino]
    assert (node.sha, node.size, node.memory_id) == (sha256(b"mine"), 4, MID)
    assert st.conflicts() == [] and st.sync_state(node) == "pending"
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/x.md")
    assert (back.sha, back.size, back.base_sha) == (sha256(b"mine"), 4, sha256(b"theirs"))
    assert again.conflicts() == [] and again.is_dirty(back)
    again.close()


def test_restore_keeps_a_newer_pending_edit_as_its_own_conflict(st, tmp_path, caplog):
    node, cid = _conflicted(st)
    st.set_content(node, sha256(b"newer"), 5)
    with caplog.at_level(logging.INFO, logger="memfs.state.transitions"):
        st.restore_conflict(cid, 4)
    assert node.sha == sha256(b"mine")
    [row] = st.conflicts()
    assert caplog.messages == [f"restore #{cid}: the pending edit of /x.md is kept as "
                               f"conflict #{row['id']}"]
    assert (row["path"], row["memory_id"], row["local_sha"], row["remote_sha"]) == \
        ("/x.md", MID, sha256(b"newer"), sha256(b"mine"))
    assert f"#{cid}" in row["reason"]
    assert st.sync_state(node) == "conflict"
    again = _reopened(st, tmp_path)
    assert [c["local_sha"] for c in again.conflicts()] == [sha256(b"newer")]
    again.close()


def test_restore_over_the_servers_version_or_a_refused_edit_adds_no_conflict(st):
    """Only an edit that is not on the server and could go there is worth a row."""
    node, cid = _conflicted(st)
    st.restore_conflict(cid, 4)  # the tree held the server's version (the base)
    assert st.conflicts() == []
    node2, cid2 = _conflicted(st, "y.md")
    st.set_content(node2, sha256(b"\xff"), 1)
    st.refuse_locally(node2, "not UTF-8")
    st.restore_conflict(cid2, 4)
    assert st.conflicts() == [] and node2.sha == sha256(b"mine")
    assert not st.is_refused(node2) and node2.refused_reason is None


def test_restore_of_a_deleted_file_recreates_it_with_its_memory(st, tmp_path):
    """Deleted here since (its memory's delete pending): the file comes back at its
    path, in the directories it had, and takes its memory back."""
    st.ensure_dir("/d")
    d = st.lookup_path("/d")
    st.set_attrs(d, uid=1234, gid=5678)
    node = st.new_node(d, "x.md", is_dir=False, mode=0o100644, uid=0, gid=0)
    st.set_content(node, sha256(b"base"), 4)
    st.adopt_own_write(node, Remote(MID, "/d/x.md", sha256(b"base")))
    st.set_content(node, sha256(b"mine"), 4)
    cid = st.take_remote(node, Remote(MID, "/d/x.md", sha256(b"theirs"), 6), "r",
                         gen=node.gen)
    st.remove(node)
    st.remove(d)
    assert list(st.tombstones) == [MID]
    restored, created = st.restore_conflict(cid, 4)
    assert created and restored is not node
    assert st.lookup_path("/d/x.md") is restored and st.lookup_path("/d").is_dir
    assert (restored.sha, restored.size) == (sha256(b"mine"), 4)
    assert restored.memory_id == MID and st.tombstones == {} and st.holder(MID) is restored
    assert st.is_dirty(restored)
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/d/x.md")
    assert (back.sha, back.memory_id, back.mode) == (sha256(b"mine"), MID, 0o100644)
    again.close()


def test_restore_finds_a_row_without_memory_by_its_path(st):
    node = _file(st, "x.md", b"", memory_id=None)
    st.set_content(node, sha256(b"mine"), 4)
    cid = st.take_remote(node, Remote("mem_other", "/x.md", sha256(b"theirs"), 6), "r",
                         gen=node.gen)
    st.discard_conflict(cid)
    cid = _conflict(st, "/x.md", None, sha256(b"mine"), None, "kept")
    restored, created = st.restore_conflict(cid, 4)
    assert restored is node and not created and node.sha == sha256(b"mine")


def test_restore_refuses_what_it_cannot_do_and_changes_nothing(st):
    with pytest.raises(LookupError, match="no conflict #99"):
        st.restore_conflict(99, 1)
    node, cid = _conflicted(st)
    st.set_open_dirty(node.ino, True)
    with pytest.raises(ValueError, match="^/x.md is open with unsaved changes; close it and "
                                         "try again$"):
        st.restore_conflict(cid, 4)
    st.set_open_dirty(node.ino, False)
    st.remove(node)
    st.ensure_dir("/x.md")
    with pytest.raises(ValueError, match="is a directory now"):
        st.restore_conflict(cid, 4)
    cid2 = _conflict(st, "/f/y.md", None, sha256(b"mine"), None, "kept")
    _file(st, "f", b"a file", memory_id=None)
    with pytest.raises(ValueError, match="a file stands where its directory should be"):
        st.restore_conflict(cid2, 4)
    assert sorted(c["id"] for c in st.conflicts()) == [cid, cid2]
    assert st.lookup_path("/f/y.md") is None


def test_discard_drops_the_row_and_says_what_it_was(st, tmp_path):
    node, cid = _conflicted(st)
    row = st.discard_conflict(cid)
    assert (row["id"], row["local_sha"]) == (cid, sha256(b"mine"))
    assert st.conflicts() == [] and st.sync_state(node) == "synced"
    with pytest.raises(LookupError, match=f"no conflict #{cid}"):
        st.discard_conflict(cid)
    again = _reopened(st, tmp_path)
    assert again.conflicts() == []
    again.close()


# -- answers and listings ------------------------------------------------------------------


def test_adopt_own_write_makes_what_we_sent_the_base(st, tmp_path):
    """A lost answer, found in a listing: the server holds our bytes."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"mine"), 4)
    st.begin_push(node)
    st.adopt_own_write(node, Remote(MID, "/x.md", sha256(b"mine"), 4))
    assert (node.base_sha, node.sent_sha) == (sha256(b"mine"), None)
    assert not st.is_dirty(node)
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/x.md").base_sha == sha256(b"mine")
    again.close()


def test_adopt_own_write_of_an_older_send_keeps_the_newer_one_in_flight(st):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    st.begin_push(node)
    st.set_content(node, sha256(b"v2"), 2)
    st.begin_push(node)
    first_change = node.dirty_since
    st.adopt_own_write(node, Remote(MID, "/x.md", sha256(b"v1"), 2))
    assert (node.base_sha, node.sent_sha) == (sha256(b"v1"), sha256(b"v2"))
    # still dirty: v2 stays due max_push_delay after the first change not yet pushed
    assert st.is_dirty(node) and node.dirty_since == first_change is not None


def test_a_landed_update_is_no_longer_in_flight(st, tmp_path):
    """Once its answer is applied, what was sent is the base and nothing is in flight:
    a later listing showing that sha again is another writer's (decide's rows adopt a
    remote sha equal to `sent_sha` as our own write)."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    ticket = st.begin_push(node)
    assert node.sent_sha == sha256(b"v1")
    assert st.push_landed(ticket, Remote(MID, "/x.md", sha256(b"v1"), 2)) is node
    assert (node.base_sha, node.sent_sha, st.is_dirty(node)) == (sha256(b"v1"), None, False)
    assert node.dirty_since is None  # clean: the next change starts the clock
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/x.md").sent_sha is None
    again.close()


def test_a_change_made_while_its_push_was_in_flight_is_due_from_the_landing(st):
    """v2 was written while v1's request was out: once v1 lands, v2 is due at most
    max_push_delay after the landing (`dirty_since`), not after its first change."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    ticket = st.begin_push(node)
    st.set_content(node, sha256(b"v2"), 2)
    before = time.time()
    st.push_landed(ticket, Remote(MID, "/x.md", sha256(b"v1"), 2))
    assert st.is_dirty(node) and node.dirty_since is not None and node.dirty_since >= before


def test_a_landing_clears_an_earlier_failure(st, tmp_path):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    st.push_failed(st.begin_push(node), "Forbidden: no", transient=False)
    assert (node.fail_count, node.error) == (1, "Forbidden: no") and node.retry_at
    st.push_landed(st.begin_push(node), Remote(MID, "/x.md", sha256(b"v1"), 2))
    assert (node.fail_count, node.retry_at, node.error) == (0, None, None)
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/x.md")
    assert (back.fail_count, back.retry_at, back.error) == (0, None, None)
    again.close()


def test_a_create_landing_after_a_local_rename_goes_to_the_renamed_file(st, tmp_path):
    """x.md was renamed to y.md while its create was in flight: the new memory is that
    file's (its rename is pushed next), not a stray memory deleted later."""
    node = _file(st, "x.md", b"v1", memory_id=None)
    ticket = st.begin_push(node)
    st.rename(node, st.nodes[ROOT_INO], "y.md", None)
    assert st.push_landed(ticket, Remote("mem_new", "/x.md", sha256(b"v1"), 2)) is node
    assert (node.memory_id, node.base_path, node.sent_sha) == ("mem_new", "/x.md", None)
    assert st.holder("mem_new") is node and st.tombstones == {}
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/y.md").memory_id == "mem_new" and again.tombstones == {}
    again.close()


def test_a_request_is_journaled_with_what_its_lost_answer_needs(st, tmp_path):
    """begin_push: the ticket holds what was sent and against what (doubts.py looks a
    lost answer up with it), the file records the send, and state.db holds the same
    ticket after a reopen. A second send while the first is in doubt remembers it."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    first = st.begin_push(node)
    st.set_content(node, sha256(b"v2"), 2)
    before = time.time()
    second = st.begin_push(node)
    assert (second.ino, second.memory_id, second.sha, second.path, second.base_sha,
            second.gen, second.previous_sent, second.content_sent, second.path_sent) == \
        (node.ino, MID, sha256(b"v2"), "/x.md", sha256(b"base"), node.gen, sha256(b"v1"),
         True, True)
    assert before <= second.sent_at <= time.time()
    assert node.sent_sha == sha256(b"v2")
    assert st.doubts == {first.doubt: first, second.doubt: second}
    again = _reopened(st, tmp_path)
    assert again.doubts == {first.doubt: first, second.doubt: second}
    assert again.lookup_path("/x.md").sent_sha == sha256(b"v2")
    again.close()


def test_a_local_change_starts_the_push_clock_once_and_clears_the_backoff(st, tmp_path):
    """_touch: every change moves `changed_at` (the write-back delay) and `gen`; the
    first one not yet pushed also starts `dirty_since` (max_push_delay), which later
    changes leave; a change ends a refusal's backoff (new content may go)."""
    node = _file(st, "x.md", b"base")
    assert node.dirty_since is None
    before = time.time()
    st.set_content(node, sha256(b"v1"), 2)
    first, gen = node.changed_at, node.gen
    assert first >= before and node.dirty_since == first
    st.push_failed(st.begin_push(node), "Forbidden: no", transient=False)
    assert node.fail_count == 1
    st.set_content(node, sha256(b"v2"), 2)
    assert node.changed_at >= first and node.dirty_since == first and node.gen == gen + 1
    assert (node.fail_count, node.retry_at, node.error) == (0, None, None)
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/x.md")
    assert (back.gen, back.fail_count, back.error) == (gen + 1, 0, None)
    again.close()


def test_a_content_change_tells_the_content_hook(st):
    node = _file(st, "x.md", b"base")
    heard = []
    st.on_content = lambda ino, *rest: heard.append(ino)
    st.set_content(node, sha256(b"v1"), 2)
    assert heard == [node.ino]


@pytest.mark.parametrize("new_sent", [False, True])
def test_a_create_landing_after_an_unlink_goes_to_a_new_file_at_its_path(st, tmp_path,
                                                                        new_sent):
    """x.md was unlinked while its create was in flight and a new x.md made: the new
    file, not sent yet, takes the memory (as at a tombstoned path; its content goes out
    as an update). One with its own create in flight does not: the memory is deleted
    after the delay, preconditioned on what we wrote."""
    node = _file(st, "x.md", b"v1", memory_id=None)
    ticket = st.begin_push(node)
    st.remove(node)
    new = _file(st, "x.md", b"new", memory_id=None)
    if new_sent:
        st.begin_push(new)
    landed = st.push_landed(ticket, Remote("mem_new", "/x.md", sha256(b"v1"), 2))
    if new_sent:
        assert landed is None and new.memory_id is None
        assert st.tombstones["mem_new"].base_sha == sha256(b"v1")
    else:
        assert landed is new and st.tombstones == {}
        assert (new.memory_id, new.base_sha, st.is_dirty(new)) == ("mem_new", sha256(b"v1"),
                                                                  True)
        again = _reopened(st, tmp_path)
        assert again.lookup_path("/x.md").memory_id == "mem_new"
        again.close()


def test_a_restart_never_gives_the_inode_of_a_file_in_doubt_to_a_new_one(st, tmp_path):
    """d/e.md's create goes out, the user unlinks it, the daemon dies before the answer.
    The doubt keeps the unlinked file's inode, the highest. After the restart a new
    directory must get another number: with that one it looked like the file in doubt
    (the create's answer landed on it, so the memory the user deleted stayed on the
    server, and the directory waited behind the doubt). Found by Hypothesis."""
    d = st.new_node(st.nodes[ROOT_INO], "d", is_dir=True, mode=0o40755, uid=0, gid=0)
    node = st.new_node(d, "e.md", is_dir=False, mode=0o100644, uid=0, gid=0)
    st.set_content(node, sha256(b"w3"), 2)
    ticket = st.begin_push(node)
    st.remove(node)
    st.close()
    again = _reopened(st, tmp_path)
    try:
        made = again.new_node(again.nodes[ROOT_INO], "e", is_dir=True, mode=0o40755, uid=0,
                              gid=0)
        assert made.ino > ticket.ino
        assert again.doubt_of(made) is None
        assert again.push_landed(again.doubts[ticket.doubt],
                                 Remote("mem_new", "/d/e.md", sha256(b"w3"), 2)) is None
        assert made.memory_id is None and again.by_memory == {}
        assert again.tombstones["mem_new"].base_sha == sha256(b"w3")  # deleted after the delay
    finally:
        again.close()


def test_a_refused_request_found_on_the_server_lands_after_its_doubt_ended(st):
    """Pusher._precondition_failed: the failed precondition (409) ended the request's
    doubt (`push_answered`, in `_send`), then the memory is found holding what we wrote
    (decide's OWN_WRITE): the same ticket lands, its doubt already gone."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    ticket = st.begin_push(node)
    st.push_answered(ticket)
    assert st.doubts == {}
    assert st.push_landed(ticket, Remote(MID, "/x.md", sha256(b"v1"), 2)) is node
    assert (node.base_sha, node.sent_sha, st.doubts) == (sha256(b"v1"), None, {})


def test_a_rename_answered_with_another_writers_content_keeps_our_base(st, tmp_path):
    """The API answers an update that changes nothing 200 without checking its
    precondition (a rename whose earlier answer was lost, after another writer's edit):
    only the path is ours; the base sha stays, so the next listing shows their change
    instead of our next push overwriting it."""
    node = _file(st, "x.md", b"base")
    st.rename(node, st.nodes[ROOT_INO], "y.md", None)
    ticket = st.begin_push(node, content=False)
    st.push_landed(ticket, Remote(MID, "/y.md", sha256(b"theirs"), 6))
    assert (node.base_path, node.base_sha, node.sha) == ("/y.md", sha256(b"base"),
                                                         sha256(b"base"))
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/y.md").base_sha == sha256(b"base")
    again.close()


def test_push_refused_marks_that_content_and_forgets_the_send(st, tmp_path):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"big"), 3)
    ticket = st.begin_push(node)
    st.push_refused(ticket, "too large")
    assert st.sync_state(node) == "refused" and node.refused_reason == "too large"
    assert node.sent_sha is None
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/x.md")
    assert (back.refused_sha, back.refused_reason, back.sent_sha) == \
        (sha256(b"big"), "too large", None)
    again.close()
    st.set_content(node, sha256(b"small"), 5)
    assert st.sync_state(node) == "pending"


def test_push_refused_for_a_file_gone_since_changes_nothing(st):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"big"), 3)
    ticket = st.begin_push(node)
    st.remove(node)
    st.push_refused(ticket, "too large")
    assert MID in st.tombstones and st.lookup_path("/x.md") is None


def test_an_update_landing_after_an_unlink_rebases_the_pending_delete(st, tmp_path):
    """x.md was unlinked while its update was in flight: the update's answer is the
    base of the pending delete (sent with that precondition), no longer in flight."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"mine"), 4)
    ticket = st.begin_push(node)
    st.remove(node)
    assert st.push_landed(ticket, Remote(MID, "/x.md", sha256(b"mine"), 4)) is None
    tomb = st.tombstones[MID]
    assert (tomb.base_path, tomb.base_sha, tomb.sent_sha) == ("/x.md", sha256(b"mine"), None)
    again = _reopened(st, tmp_path)
    back = again.tombstones[MID]
    assert (back.base_sha, back.sent_sha) == (sha256(b"mine"), None)
    again.close()


def test_an_update_landing_for_a_memory_nothing_holds_adds_nothing_and_says_so(st, caplog):
    """The memory's file forgot it while its update was in doubt (another writer deleted
    the memory and a listing kept the edited file as a new one; a real mount does it,
    `test_our_update_in_doubt_meeting_their_like_bytes_since_deleted_keeps_ours[5]`):
    nothing holds the answer, and the log says which."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"mine"), 4)
    ticket = st.begin_push(node)
    st.forget_memory(node)
    with caplog.at_level(logging.INFO, logger="memfs.state.transitions"):
        assert st.push_landed(ticket, Remote(MID, "/x.md", sha256(b"mine"), 4)) is None
    assert st.holder(MID) is None and st.tombstones == {} and node.memory_id is None
    assert caplog.messages == [f"memory {MID} answered for no local file; a listing "
                               "shows it if it is still there"]


def test_tombstone_rebased_on_our_own_write(st, tmp_path):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"mine"), 4)
    st.begin_push(node)
    st.remove(node)
    assert st.tombstones[MID].sent_sha == sha256(b"mine")
    st.tombstone_rebased(MID, sha256(b"mine"), "/y.md")  # our lost update moved it too
    tomb = st.tombstones[MID]
    assert (tomb.base_sha, tomb.sent_sha, tomb.base_path) == (sha256(b"mine"), None, "/y.md")
    again = _reopened(st, tmp_path)
    assert (again.tombstones[MID].base_sha, again.tombstones[MID].sent_sha,
            again.tombstones[MID].base_path) == (sha256(b"mine"), None, "/y.md")
    again.close()
    st.tombstone_rebased("mem_unknown", sha256(b"x"), "/z.md")  # no such delete: nothing
    assert list(st.tombstones) == [MID]


def test_a_pending_delete_follows_its_memory_moved_on_the_server(st, tmp_path):
    """Another writer moved x.md to y.md while our delete of it waits: a file made at
    x.md is a new one (it would hold a memory the server keeps at y.md, and neither would
    be pushed); one made at y.md is that memory again."""
    node = _file(st, "x.md", b"base")
    st.remove(node)
    st.tombstone_moved(MID, "/x.md")  # where it was: nothing changes
    st.tombstone_moved(MID, "/y.md")
    assert st.tombstones[MID].base_path == "/y.md"
    again = _reopened(st, tmp_path)
    assert again.tombstones[MID].base_path == "/y.md"
    again.close()
    made = st.new_node(st.nodes[ROOT_INO], "x.md", is_dir=False, mode=0o100644, uid=0, gid=0)
    assert made.memory_id is None and MID in st.tombstones
    st.tombstone_moved("mem_unknown", "/w.md")  # no such delete: nothing happens
    revived = st.new_node(st.nodes[ROOT_INO], "y.md", is_dir=False, mode=0o100644, uid=0, gid=0)
    assert revived.memory_id == MID and st.tombstones == {}


def test_doubt_of_finds_the_request_by_file_or_by_memory(st):
    node = _file(st, "x.md", b"base")
    new = _file(st, "y.md", b"new", memory_id=None)
    assert st.doubt_of(node) is None and st.doubt_of(new) is None
    st.set_content(node, sha256(b"mine"), 4)
    update = st.begin_push(node)
    create = st.begin_push(new)
    assert st.doubt_of(node) == update and st.doubt_of(new) == create
    # An editor's save replaces x.md: the memory's request belongs to the new file.
    tmp = _file(st, "x.md~", b"saved", memory_id=None)
    st.rename(tmp, st.nodes[ROOT_INO], "x.md", node)
    assert st.doubt_of(tmp).doubt == update.doubt
    other = _file(st, "z.md", b"z", memory_id="mem_z")
    assert st.doubt_of(other) is None


def test_remote_base_path_takes_their_path_and_keeps_our_rename(st, tmp_path):
    node = _file(st, "x.md", b"base")
    st.rename(node, st.nodes[ROOT_INO], "ours.md", None)
    st.remote_base_path(node, "/theirs.md")
    assert node.base_path == "/theirs.md" and st.path_of(node) == "/ours.md"
    assert st.is_dirty(node)
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/ours.md").base_path == "/theirs.md"
    again.close()


def test_conflict_rows_imported_count_and_persist(st, tmp_path):
    node = _file(st, "x.md", b"base")
    cid = _conflict(st, "/x.md", MID, sha256(b"mine"), sha256(b"theirs"), "by hand")
    assert st.get_conflict(cid) == {
        "id": cid, "path": "/x.md", "memory_id": MID, "local_sha": sha256(b"mine"),
        "remote_sha": sha256(b"theirs"), "reason": "by hand",
        "created_at": st.get_conflict(cid)["created_at"]}
    st.import_conflicts([("/x.md", MID, sha256(b"a"), None, "adopted"),
                         ("/gone.md", None, sha256(b"b"), None, "adopted")])
    assert [(c["path"], c["local_sha"]) for c in st.conflicts()] == \
        [("/x.md", sha256(b"mine")), ("/x.md", sha256(b"a")), ("/gone.md", sha256(b"b"))]
    assert st.sync_state(node) == "conflict"
    for row in st.conflicts()[:2]:
        st.discard_conflict(row["id"])
    assert st.sync_state(node) == "synced"
    again = _reopened(st, tmp_path)
    assert [c["path"] for c in again.conflicts()] == ["/gone.md"]
    again.close()


def test_forget_memory_turns_the_file_into_a_create(st, tmp_path):
    node = _file(st, "x.md", b"base")
    st.forget_memory(node)
    assert (node.memory_id, node.base_path, node.base_sha, node.sent_sha) == \
        (None, None, None, None)
    assert st.holder(MID) is None and st.is_dirty(node)
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/x.md").memory_id is None and again.holder(MID) is None
    again.close()


def test_a_forgotten_memory_stays_a_source_of_its_content(st, tmp_path, monkeypatch):
    """fetcher.recover asks a memory that once held a sha (its versions keep it): forgetting
    a memory remembers it as its content's source, the newest FORMER_SOURCES_KEPT of them,
    a sha noted again counting as the newest; state.db keeps the same (a restart)."""
    monkeypatch.setattr(transitions, "FORMER_SOURCES_KEPT", 2)
    a, b, again, d = (_file(st, f"{n}.md", data, memory_id=f"mem_{n}")
                      for n, data in (("a", b"A"), ("b", b"B"), ("c", b"A"), ("d", b"D")))
    st.forget_memory(a)
    st.forget_memory(b)
    assert dict(st.former_sources) == {sha256(b"A"): "mem_a", sha256(b"B"): "mem_b"}
    st.forget_memory(again)  # A's source is now mem_c, and the newest
    st.forget_memory(d)  # one too many: the oldest (B) goes
    assert dict(st.former_sources) == {sha256(b"A"): "mem_c", sha256(b"D"): "mem_d"}
    again = _reopened(st, tmp_path)
    assert list(again.former_sources.items()) == list(st.former_sources.items())
    again.close()


def test_every_memory_held_stays_known(st, tmp_path, monkeypatch):
    """A lost create is never taken for a memory this mount held (doubts._resolve_creates):
    every memory id a file takes is known, kept in state.db, after its memory is gone
    too; the newest KNOWN_KEPT of them."""
    monkeypatch.setattr(transitions, "KNOWN_KEPT", 2)
    a = _file(st, "a.md", b"A", memory_id="mem_a")
    st.forget_memory(a)
    assert list(st.known) == ["mem_a"] and st.holder("mem_a") is None
    _file(st, "b.md", b"B", memory_id="mem_b")
    st.adopt_own_write(a, Remote("mem_a2", "/a.md", sha256(b"A")))
    assert list(st.known) == ["mem_b", "mem_a2"]      # one too many: the oldest went
    again = _reopened(st, tmp_path)
    assert list(again.known) == ["mem_b", "mem_a2"]
    again.close()


def test_a_request_goes_out_after_the_newest_version_seen(st, tmp_path):
    """Each request is journaled with the newest version of its memory this mount had
    seen (an answer's `memory_version_id`): its own version, had it been applied, is
    newer, which is how a lost answer's doubt tells an earlier write of the same path and
    bytes from it (`decide.doubt_row`, `after`). A read that names no version keeps the
    one seen; a reopened state.db has both."""
    node = _file(st, "a.md", b"A")
    first = st.begin_push(node)
    assert first.after_version is None                       # none seen yet
    st.push_landed(first, Remote(MID, "/a.md", sha256(b"A"), 1, "ver_1"))
    assert st.seen_version(MID) == "ver_1"
    st.rename(node, st.nodes[ROOT_INO], "b.md", None)
    second = st.begin_push(node, content=False)
    assert second.after_version == "ver_1"
    st.push_landed(second, Remote(MID, "/b.md", sha256(b"A"), 1, "ver_2"))
    st.take_remote(node, Remote(MID, "/b.md", sha256(b"theirs"), 6), "theirs", gen=node.gen)
    assert st.seen_version(MID) == "ver_2"                   # a read without a version
    st.set_content(node, sha256(b"B"), 1)
    third = st.begin_push(node)
    again = _reopened(st, tmp_path)
    assert again.seen_version(MID) == "ver_2"
    assert again.doubts[third.doubt] == third and third.after_version == "ver_2"
    again.close()


def test_a_state_db_from_before_the_versions_seen_is_read_and_migrated(st, tmp_path):
    """A state.db an older memfs left (schema 2: no `known.version`, no
    `doubts.after_version`) is read as it is by an offline reader, its doubts included,
    and migrated by the next State: nothing seen yet, so the doubt counts every version
    since it was sent, as that memfs did."""
    node = _file(st, "a.md", b"A")
    ticket = st.begin_push(node)
    st.close()
    db = sqlite3.connect(tmp_path / "state.db")
    older = ", ".join(c for c in DOUBT_COLUMNS if c != "after_version")
    db.executescript(f"""
        CREATE TABLE k (memory_id TEXT PRIMARY KEY);
        INSERT INTO k SELECT memory_id FROM known;
        DROP TABLE known; ALTER TABLE k RENAME TO known;
        CREATE TABLE d AS SELECT {older} FROM doubts;
        DROP TABLE doubts; ALTER TABLE d RENAME TO doubts;
        PRAGMA user_version=2;""")
    db.commit()
    db.close()
    view = StateView(tmp_path / "state.db")
    assert list(view.doubts.values()) == [ticket] and list(view.known) == [MID]
    view.close()
    again = _reopened(st, tmp_path)
    assert list(again.doubts.values()) == [ticket] and again.seen_version(MID) is None
    again.push_landed(ticket, Remote(MID, "/a.md", sha256(b"A"), 1, "ver_1"))
    assert _reopened(again, tmp_path).seen_version(MID) == "ver_1"
    again.close()


def test_a_file_given_another_memory_no_longer_holds_the_first(st, tmp_path):
    """`by_memory` stays the inverse of the files' memory ids (what `holder` answers
    and the harness's check_state asserts) when a file's base becomes another memory."""
    node = _file(st, "x.md", b"base")
    st.adopt_own_write(node, Remote("mem_y", "/x.md", sha256(b"base")))
    assert st.holder(MID) is None and st.holder("mem_y") is node
    again = _reopened(st, tmp_path)
    assert again.holder(MID) is None and again.holder("mem_y").ino == node.ino
    again.close()


def test_a_memorys_former_content_stays_a_source_of_that_sha(st):
    """The server changed x.md (a clean file takes it): the memory's versions still hold
    the former content, so it stays a source of that sha for fetcher.recover."""
    node = _file(st, "x.md", b"base")
    st.remote_content(node, Remote(MID, "/x.md", sha256(b"v2"), 2), gen=node.gen)
    assert node.base_sha == sha256(b"v2")
    assert dict(st.former_sources) == {sha256(b"base"): MID}


@pytest.mark.parametrize("keep", [True, False])
def test_remote_deleted(st, tmp_path, keep):
    st.ensure_dir("/d")
    node = st.new_node(st.lookup_path("/d"), "x.md", is_dir=False, mode=0o100644, uid=0,
                       gid=0)
    st.adopt_own_write(node, Remote(MID, "/d/x.md", node.sha))
    st.remote_deleted(node, keep=keep)
    assert st.holder(MID) is None
    if keep:
        assert st.lookup_path("/d/x.md") is node and node.memory_id is None
        assert st.is_dirty(node)
    else:  # gone, and so is the directory it left empty
        assert st.lookup_path("/d/x.md") is None and st.lookup_path("/d") is None
    again = _reopened(st, tmp_path)
    assert (again.lookup_path("/d/x.md") is not None) is keep and again.holder(MID) is None
    again.close()


def test_remote_content_of_a_clean_file(st, tmp_path):
    node = _file(st, "x.md", b"base")
    st.rename(node, st.nodes[ROOT_INO], "y.md", None)  # a local rename: not content
    st.remote_content(node, Remote(MID, "/elsewhere.md", sha256(b"v2"), 2), gen=node.gen)
    assert (node.sha, node.size, node.base_sha) == (sha256(b"v2"), 2, sha256(b"v2"))
    assert node.base_path == "/x.md"  # a place is remote_moved's to change, not this
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/y.md")
    assert (back.sha, back.base_sha, back.base_path) == (sha256(b"v2"), sha256(b"v2"), "/x.md")
    again.close()


@pytest.mark.parametrize("why", ["edited", "open", "unlinked", "gen"])
def test_remote_content_defers_unless_the_file_is_clean(st, why):
    node = _file(st, "x.md", b"base")
    gen = node.gen
    if why == "edited":
        st.set_content(node, sha256(b"mine"), 4)
        gen = node.gen
    elif why == "open":
        st.set_open_dirty(node.ino, True)
    elif why == "unlinked":
        st.remove(node)
    else:
        st.set_content(node, sha256(b"base"), 4)  # same bytes, but a change since
    with pytest.raises(Deferred):
        st.remote_content(node, Remote(MID, "/x.md", sha256(b"v2"), 2), gen=gen)
    assert node.sha != sha256(b"v2")
    assert node.base_sha == (None if why == "unlinked" else sha256(b"base"))


# -- the server's renames and new memories ---------------------------------------------------


def _mem(st: State, path: str, data: bytes, memory_id: str):
    """A synced file at path (its directories created)."""
    dir_path, name = path.rsplit("/", 1)
    parent = st.ensure_dir(dir_path or "/")
    node = st.new_node(parent, name, is_dir=False, mode=0o100644, uid=0, gid=0)
    st.set_content(node, sha256(data), len(data))
    st.adopt_own_write(node, Remote(memory_id, path, sha256(data)))
    return node


def test_remote_moved_to_a_free_path_follows_and_prunes(st, tmp_path):
    node = _mem(st, "/d/x.md", b"x", MID)
    assert st.remote_moved(node, "/e/y.md")
    assert st.path_of(node) == "/e/y.md" and node.base_path == "/e/y.md"
    assert not st.is_dirty(node) and st.lookup_path("/d") is None
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/e/y.md")
    assert back is not None and back.base_path == "/e/y.md" and again.lookup_path("/d") is None
    again.close()


@pytest.mark.parametrize("theirs,kept", [(b"new", True), (b"", False), (b"x", False)])
def test_remote_moved_over_a_new_local_file_keeps_its_content(st, theirs, kept):
    """A file never pushed stands where the server put our memory: it leaves the tree,
    its content kept as a conflict (nothing to keep if it is empty or the same)."""
    node = _mem(st, "/x.md", b"x", MID)
    local = _file(st, "y.md", theirs, memory_id=None)
    assert st.remote_moved(node, "/y.md")
    assert st.lookup_path("/y.md") is node and local.ino not in st.nodes
    rows = [(c["path"], c["memory_id"], c["local_sha"], c["remote_sha"], c["reason"])
            for c in st.conflicts()]
    assert rows == ([("/y.md", MID, sha256(theirs), sha256(b"x"),
                      "the server gave this path to another memory")] if kept else [])


def test_remote_moved_sends_a_local_rename_there_back_home(st, caplog):
    """Our memory t, renamed here onto the path (not pushed): it goes back to its base
    path, its content kept; the server's rename is followed, and the log says so."""
    node = _mem(st, "/x.md", b"x", MID)
    other = _mem(st, "/t.md", b"t", "mem_t")
    st.rename(other, st.nodes[ROOT_INO], "y.md", None)
    assert st.remote_moved(node, "/y.md")
    assert caplog.messages == ["/y.md: renamed here, but the server gave that path to "
                               "another memory first; moved back to /t.md"]
    assert st.lookup_path("/y.md") is node and st.lookup_path("/t.md") is other
    assert other.memory_id == "mem_t" and st.conflicts() == []


def test_a_ring_of_the_servers_renames_moves_at_once_or_not_at_all(st, tmp_path):
    """a.md and b.md, each moved by the server to the other's place, move in one
    transaction (stepping aside in their own directory, which stays: no inode of it
    changes); when a place is not free even so (here a name it would step aside to),
    nothing moves, memory or state.db."""
    x, y = _mem(st, "/d/x.md", b"X", "mem_x"), _mem(st, "/d/y.md", b"Y", "mem_y")
    d = st.lookup_path("/d")
    assert st.remote_moved_in_a_ring([(x, "/d/y.md"), (y, "/d/x.md")])
    assert st.lookup_path("/d") is d and (st.path_of(x), st.path_of(y)) == ("/d/y.md", "/d/x.md")
    a, b = _mem(st, "/a.md", b"A", "mem_a"), _mem(st, "/b.md", b"B", "mem_b")
    assert st.remote_moved_in_a_ring([(a, "/b.md"), (b, "/a.md")])
    assert (st.path_of(a), st.path_of(b)) == ("/b.md", "/a.md")
    assert (a.base_path, b.base_path) == ("/b.md", "/a.md")
    assert sorted(n.name for n in st.files()) == ["a.md", "b.md", "x.md", "y.md"]  # none aside
    _file(st, f".memfs-swap-{b.ino}", b"in the way", memory_id=None)
    assert not st.remote_moved_in_a_ring([(a, "/a.md"), (b, "/b.md")])
    assert (st.path_of(a), st.path_of(b), a.base_path) == ("/b.md", "/a.md", "/b.md")
    again = _reopened(st, tmp_path)
    assert again.holder("mem_a").name == "b.md" and again.holder("mem_b").name == "a.md"
    again.close()


# -- a round trip takes a pending delete's memory back (docs/SEMANTICS.md, rename) ----------


def _over_k_and_back(st: State, node: Node) -> None:
    """mv node k.md (over the synced k.md: node takes k's memory), then back."""
    name = node.name
    k = st.lookup_path("/k.md")
    st.rename(node, st.nodes[ROOT_INO], "k.md", k)
    st.rename(node, st.nodes[ROOT_INO], name, None)


@pytest.mark.parametrize("request_", ["none", "update", "rename", "other-bytes"])
def test_a_round_trip_takes_back_what_the_server_holds_or_will(st, request_):
    """The file at its own memory's path again holds what that memory holds there, as
    its base, or as our request in flight wrote it (the answer not back): it is that
    memory again and k's is deleted. Other bytes keep k's memory (a plain rename over)."""
    _mem(st, "/k.md", b"k", "mem_k")
    node = _mem(st, "/x.md", b"v1", MID)
    if request_ in ("update", "other-bytes"):
        st.set_content(node, sha256(b"v2"), 2)
        st.begin_push(node)                      # content v2 sent, its answer not back
    elif request_ == "rename":
        st.rename(node, st.nodes[ROOT_INO], "y.md", None)
        st.begin_push(node, content=False)       # the path /y.md sent, not answered
    if request_ == "other-bytes":
        st.set_content(node, sha256(b"v3"), 2)
    _over_k_and_back(st, node)
    if request_ == "other-bytes":
        assert node.memory_id == "mem_k" and set(st.tombstones) == {MID}
        return
    assert node.memory_id == MID and set(st.tombstones) == {"mem_k"}
    assert st.holder(MID) is node and st.tombstones["mem_k"].base_path == "/k.md"
    # what it sent is still its own (a lost answer found later is ours)
    assert node.sent_sha == {"none": None, "update": sha256(b"v2"), "rename": sha256(b"v1")}[
        request_]


@pytest.mark.parametrize("how", ["create", "copy_back", "round_trip"])
def test_a_memory_whose_delete_went_out_is_never_given_back(st, tmp_path, how):
    """Once a pending delete's DELETE is out, the memory may be gone with the answer lost:
    a file made at its path (`create`), a copy of its bytes moved there (`copy_back`), the
    file moved over k.md and back (`round_trip`) stays a file of its own (or of k's
    memory). Refused (the server deleted nothing), the memory goes to a file made at its
    path without one, as it would have before; else it is revivable again."""
    k = _mem(st, "/k.md", b"k", "mem_k")
    node = _mem(st, "/x.md", b"v1", MID)
    if how == "round_trip":
        st.rename(node, st.nodes[ROOT_INO], "k.md", k)   # x takes k's memory; x's pending
    else:
        st.remove(node)

    def again() -> Node:
        """/x.md made again, holding what x's memory holds."""
        if how == "create":
            made = st.new_node(st.nodes[ROOT_INO], "x.md", is_dir=False, mode=0o100644,
                               uid=0, gid=0)
        else:
            made = node if how == "round_trip" else _file(st, "q.md", b"v1", memory_id=None)
            st.rename(made, st.nodes[ROOT_INO], "x.md", None)
        st.set_content(made, sha256(b"v1"), 2)
        return made

    st.tombstone_sending(MID)
    reopened = _reopened(st, tmp_path)
    assert reopened.tombstones[MID].delete_sent_at is not None  # journaled before it goes
    reopened.close()
    made = again()
    assert st.path_of(made) == "/x.md" and MID in st.tombstones and st.is_dirty(made)
    assert made.memory_id == ("mem_k" if how == "round_trip" else None)
    st.tombstone_failed(MID, "PermissionDeniedError: no delete scope (test)")
    if how != "round_trip":                        # taken by the file made meanwhile
        assert made.memory_id == MID and MID not in st.tombstones
        again_db = _reopened(st, tmp_path)
        assert again_db.lookup_path("/x.md").memory_id == MID
        again_db.close()
        return
    assert st.tombstones[MID].delete_sent_at is None and made.memory_id == "mem_k"
    st.rename(made, st.nodes[ROOT_INO], "k.md", None)
    made = again()                                 # the round trip takes it back now
    assert made.memory_id == MID and MID not in st.tombstones


@pytest.mark.parametrize("since", ["nothing", "changed"])
def test_a_create_answered_after_the_round_trip_takes_its_memory(st, since):
    """A new file's create is in flight; the file is moved over k.md (taking k's
    memory) and back; then the create's answer comes: the file holds what it created,
    at its path, so it takes the new memory and k's is deleted. Changed since, the file
    keeps k's memory and the new one is deleted (as for any create whose file took
    another memory meanwhile)."""
    _mem(st, "/k.md", b"k", "mem_k")
    node = _file(st, "x.md", b"v1", memory_id=None)
    ticket = st.begin_push(node)
    _over_k_and_back(st, node)
    assert node.memory_id == "mem_k" and not st.tombstones
    if since == "changed":
        st.set_content(node, sha256(b"v2"), 2)
    st.push_landed(ticket, Remote("mem_new", "/x.md", sha256(b"v1")))
    if since == "changed":
        assert node.memory_id == "mem_k" and set(st.tombstones) == {"mem_new"}
        return
    assert node.memory_id == "mem_new" and set(st.tombstones) == {"mem_k"}
    assert not st.is_dirty(node) and st.holder("mem_new") is node


@pytest.mark.parametrize("d", ["", "/d"])
def test_remote_moved_swaps_with_our_rename_whose_place_it_held(st, caplog, tmp_path, d):
    """Our a→y not pushed; the server moved x to /y and a to /x (a swap of places with
    the node the server moves): both move at once, nothing else changes."""
    node = _mem(st, f"{d}/x.md", b"x", MID)
    a = _mem(st, f"{d}/a.md", b"a", "mem_a")
    st.rename(a, st.nodes[a.parent], "y.md", None)
    st.remote_base_path(a, f"{d}/x.md")  # the listing's row for a: renamed on both sides
    assert st.remote_moved(node, f"{d}/y.md")
    assert st.lookup_path(f"{d}/y.md") is node and st.lookup_path(f"{d}/x.md") is a
    assert sorted(st.path_of(n) for n in st.files()) == [f"{d}/x.md", f"{d}/y.md"]
    assert node.base_path == f"{d}/y.md" and a.base_path == f"{d}/x.md"
    assert st.conflicts() == []
    assert caplog.messages == [f"{d}/y.md: renamed here, but the server gave that path to "
                               f"another memory, whose place was {d}/x.md; the two "
                               "swapped, moved back"]
    fresh = _reopened(st, tmp_path)
    assert fresh.lookup_path(f"{d}/y.md").memory_id == MID
    assert fresh.lookup_path(f"{d}/x.md").memory_id == "mem_a"
    assert sorted(fresh.path_of(n) for n in fresh.files()) == [f"{d}/x.md", f"{d}/y.md"]
    fresh.close()


@pytest.mark.parametrize("blocker", ["dir", "open", "local-only", "synced", "no-dir",
                                     "back-taken", "cycle"])
def test_remote_moved_yields_to_what_it_must_not_take(st, blocker):
    node = _mem(st, "/x.md", b"x", MID)
    target = "/y.md"
    if blocker == "dir":
        st.ensure_dir("/y.md")
    elif blocker == "open":
        st.set_open_dirty(_file(st, "y.md", b"y", memory_id=None).ino, True)
    elif blocker == "local-only":
        target = "/y.md~"
        _file(st, "y.md~", b"y", memory_id=None)
    elif blocker == "synced":  # another memory the server also has there
        _mem(st, "/y.md", b"y", "mem_y")
    elif blocker == "no-dir":  # a file stands where the directory should be
        _file(st, "f", b"f", memory_id=None)
        target = "/f/y.md"
    elif blocker == "back-taken":  # ours renamed there, its own path taken since
        other = _mem(st, "/t.md", b"t", "mem_t")
        st.rename(other, st.nodes[ROOT_INO], "y.md", None)
        st.ensure_dir("/t.md")
    else:  # a and b swapped here, not pushed: each one's way back is the other's
        a, b = _mem(st, "/a.md", b"a", "mem_a"), _mem(st, "/b.md", b"b", "mem_b")
        st.rename(a, st.nodes[ROOT_INO], "tmp.md", None)
        st.rename(b, st.nodes[ROOT_INO], "a.md", None)
        st.rename(a, st.nodes[ROOT_INO], "b.md", None)
        target = "/a.md"
    before = sorted((st.path_of(n), n.memory_id) for n in st.files())
    assert not st.remote_moved(node, target)
    assert st.path_of(node) == "/x.md" and node.base_path == "/x.md"
    assert sorted((st.path_of(n), n.memory_id) for n in st.files()) == before
    assert st.conflicts() == []


def test_add_remote_shows_a_new_memory(st, tmp_path):
    added = []
    st.on_added = added.append
    node = st.add_remote(Remote("mem_n", "/d/n.md", sha256(b"n"), 1))
    assert st.lookup_path("/d/n.md") is node and st.holder("mem_n") is node and added == [node.ino]
    assert (node.sha, node.size, node.base_sha, node.base_path) == \
        (sha256(b"n"), 1, sha256(b"n"), "/d/n.md")
    assert node.mode == 0o100644 and (node.uid, node.gid) == (os.getuid(), os.getgid())
    assert node.mtime_ns == node.ctime_ns == node.atime_ns > 0
    assert not st.is_dirty(node)
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/d/n.md")
    assert (back.memory_id, back.sha, back.mode) == ("mem_n", sha256(b"n"), 0o100644)
    again.close()


def test_add_remote_of_a_memory_deleted_here_cancels_the_delete(st):
    node = _mem(st, "/x.md", b"x", MID)
    st.remove(node)
    assert MID in st.tombstones
    back = st.add_remote(Remote(MID, "/x.md", sha256(b"changed"), 7))
    assert back is not None and st.tombstones == {} and st.holder(MID) is back


@pytest.mark.parametrize("blocker", ["file", "no-dir"])
def test_add_remote_where_the_place_is_taken_adds_nothing(st, blocker):
    _file(st, "f", b"mine", memory_id=None)
    path = "/f" if blocker == "file" else "/f/n.md"
    assert st.add_remote(Remote("mem_n", path, sha256(b"n"), 1)) is None
    assert st.holder("mem_n") is None and st.lookup_path("/f").sha == sha256(b"mine")


def test_set_attrs_persists_only_a_file_in_the_tree(st, tmp_path):
    node = _file(st, "x.md", b"x")
    st.set_attrs(node, mode=0o100600, uid=7, gid=8, atime_ns=1, mtime_ns=2, ctime_ns=3)
    assert (node.mode, node.uid, node.gid, node.atime_ns, node.mtime_ns, node.ctime_ns) == \
        (0o100600, 7, 8, 1, 2, 3)
    gone = _file(st, "gone.md", b"g", memory_id=None)
    st.remove(gone)
    st.set_attrs(gone, mode=0o100600, ctime_ns=5)
    assert gone.ctime_ns == 5
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/x.md")
    assert (back.mode, back.uid, back.gid, back.atime_ns, back.mtime_ns, back.ctime_ns) == \
        (0o100600, 7, 8, 1, 2, 3)
    assert again.lookup_path("/gone.md") is None and len(list(again.files())) == 1
    again.close()


def test_ensure_dir_makes_the_whole_chain_and_prune_removes_it(st, tmp_path):
    """The kernel hears of the topmost new (or removed) entry: its cached lookups of
    that name are dropped (State.on_entry, which SyncContext turns into an invalidation)."""
    heard = []
    st.on_entry = lambda parent, name: heard.append((parent, name))
    st.ensure_dir("/a")
    a = st.lookup_path("/a")
    heard.clear()
    leaf = st.ensure_dir("/a/b/c")
    b = st.lookup_path("/a/b")
    assert leaf is st.lookup_path("/a/b/c") and b.is_dir and leaf.is_dir
    assert heard == [(a.ino, "b")]
    for d in (b, leaf):
        assert d.mode == stat.S_IFDIR | 0o755 and (d.uid, d.gid) == (os.getuid(), os.getgid())
        assert d.atime_ns == d.mtime_ns == d.ctime_ns > 0
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/a/b/c").mode == stat.S_IFDIR | 0o755
    again.close()
    heard.clear()
    assert st.prune(leaf) == [(b.ino, "c"), (a.ino, "b"), (ROOT_INO, "a")]
    assert heard == [(b.ino, "c"), (a.ino, "b"), (ROOT_INO, "a")]
    assert st.lookup_path("/a") is None


@pytest.mark.parametrize("is_dir", [False, True])
def test_a_new_entry_is_born_now_and_so_is_its_directorys_change(st, tmp_path, is_dir):
    """stat of a file or directory just made shows its making in every time (atime,
    mtime, ctime), and its directory's mtime and ctime: here and after a reopen."""
    before = time.time_ns()
    mode = stat.S_IFDIR | 0o755 if is_dir else stat.S_IFREG | 0o644
    node = st.new_node(st.nodes[ROOT_INO], "x", is_dir=is_dir, mode=mode, uid=0, gid=0)
    after = time.time_ns()
    root = st.nodes[ROOT_INO]
    assert before <= node.atime_ns == node.mtime_ns == node.ctime_ns <= after
    assert root.mtime_ns == root.ctime_ns == node.ctime_ns
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/x")
    assert (back.atime_ns, back.mtime_ns, back.ctime_ns) == (node.ctime_ns,) * 3
    again.close()


def test_restore_follows_the_memory_to_where_the_file_is_now(st):
    """Renamed here since the conflict: the file holding the memory is restored, not a
    new file at the conflict's old path."""
    node, cid = _conflicted(st)
    st.rename(node, st.nodes[ROOT_INO], "moved.md", None)
    restored, created = st.restore_conflict(cid, 4)
    assert restored is node and not created
    assert st.lookup_path("/x.md") is None and st.path_of(node) == "/moved.md"
    assert node.sha == sha256(b"mine")


def test_a_recreated_file_is_its_directorys_owners_and_a_new_inode(st):
    st.ensure_dir("/d")
    d = st.lookup_path("/d")
    st.set_attrs(d, uid=1234, gid=5678)
    cid = _conflict(st, "/d/x.md", None, sha256(b"mine"), None, "kept")
    restored, created = st.restore_conflict(cid, 4)
    assert created and (restored.uid, restored.gid) == (1234, 5678)
    assert restored.atime_ns > 0 and restored.mode == 0o100644
    later = st.new_node(d, "later.md", is_dir=False, mode=0o100644, uid=0, gid=0)
    inos = [n.ino for n in st.nodes.values()]
    assert len(set(inos)) == len(inos) and later.ino > restored.ino


def test_imported_conflicts_keep_every_field(st):
    st.import_conflicts([("/x.md", MID, sha256(b"a"), sha256(b"b"), "adopted")])
    [row] = st.conflicts()
    assert (row["path"], row["memory_id"], row["local_sha"], row["remote_sha"],
            row["reason"]) == ("/x.md", MID, sha256(b"a"), sha256(b"b"), "adopted")


def test_doubt_of_a_new_file_is_only_its_own_request(st):
    sent = _file(st, "a.md", b"a", memory_id=None)
    quiet = _file(st, "b.md", b"b", memory_id=None)
    st.begin_push(sent)
    assert st.doubt_of(quiet) is None


def test_a_refusal_after_a_lost_answer_keeps_the_earlier_send_in_doubt(st):
    """v1 went out and its answer was lost; v2 is refused: v1 may be on the server, so
    it stays what was last sent (a listing showing it is then adopted, not a conflict)."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    st.begin_push(node)  # no answer: in doubt
    st.set_content(node, sha256(b"v2"), 2)
    st.push_refused(st.begin_push(node), "too large")
    assert node.sent_sha == sha256(b"v1")


def test_a_failing_delete_waits_longer_each_time(st):
    node = _file(st, "x.md", b"base")
    st.remove(node)
    waits = []
    for _ in range(3):
        before = time.time()
        st.tombstone_failed(MID, "403")
        after = time.time()
        waits.append((before, st.tombstones[MID].retry_at, after))
    for (before, retry_at, after), step in zip(waits, (2.0, 4.0, 8.0), strict=True):
        assert before + step <= retry_at <= after + step
    assert st.tombstones[MID].error == "403"
    st.tombstone_failed("mem_unknown", "403")  # no such delete: nothing happens
    assert list(st.tombstones) == [MID]


def test_a_refusal_repeated_for_a_week_still_waits_the_longest_step(st):
    """A file or a delete the server refuses every 10 minutes for a week counts over a
    thousand refusals: the next still waits MAX_FILE_BACKOFF (the doubling once
    overflowed a float at the 1,024th: the refusal itself raised)."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v2"), 2)
    node.fail_count = 5000
    st.push_failed(st.begin_push(node), "403", transient=False)
    gone = _file(st, "y.md", b"base", memory_id="mem_y")
    st.remove(gone)
    st.tombstones["mem_y"].fail_count = 5000
    st.tombstone_failed("mem_y", "403")
    now = time.time()
    for item in (node, st.tombstones["mem_y"]):
        assert item.fail_count == 5001
        assert now < item.retry_at <= now + MAX_FILE_BACKOFF


def test_a_decision_older_than_a_new_files_first_change_stays_stale(st):
    """gen counts up from where the file began, whatever the server's content does."""
    node = st.add_remote(Remote(MID, "/x.md", sha256(b"x"), 1))
    st.set_content(node, sha256(b"x"), 1)  # a save of the same bytes
    decided_at = node.gen
    st.set_content(node, sha256(b"x"), 1)
    st.remote_content(node, Remote(MID, "/x.md", sha256(b"v2"), 2))
    with pytest.raises(Deferred):
        st.take_remote(node, Remote(MID, "/x.md", sha256(b"v3"), 2), "r", gen=decided_at)


def test_a_failing_push_waits_longer_each_time_and_says_why(st, tmp_path):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"mine"), 4)
    for step in (2.0, 4.0, 8.0):
        before = time.time()
        st.push_failed(st.begin_push(node), "403 forbidden", transient=False)
        after = time.time()
        assert before + step <= node.retry_at <= after + step
    assert node.error == "403 forbidden" and st.sync_state(node) == "error"
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/x.md").error == "403 forbidden"
    again.close()
    retry_at = node.retry_at
    st.push_failed(st.begin_push(node), "503", transient=True)  # retried with the rest
    assert node.retry_at == retry_at and node.error == "403 forbidden"


def test_a_create_failure_goes_to_the_file_that_replaced_it(st):
    """A create was sent for a.md; an editor's save then renamed its temp file over
    a.md: the failure (and its backoff) belongs to the file standing there now."""
    a = _file(st, "a.md", b"a", memory_id=None)
    ticket = st.begin_push(a)
    saved = _file(st, "a.md~", b"a2", memory_id=None)
    st.rename(saved, st.nodes[ROOT_INO], "a.md", a)
    st.push_failed(ticket, "422 invalid", transient=False)
    assert saved.error == "422 invalid" and saved.retry_at is not None


def test_a_create_failure_after_the_file_got_a_memory_changes_nothing(st):
    a = _file(st, "a.md", b"a", memory_id=None)
    ticket = st.begin_push(a)
    st.adopt_own_write(a, Remote(MID, "/a.md", sha256(b"a")))  # a later answer gave it its memory
    st.push_failed(ticket, "422 invalid", transient=False)
    assert a.error is None and a.retry_at is None


def test_a_create_in_doubt_follows_the_file_that_replaced_it(st, tmp_path):
    a = _file(st, "a.md", b"a", memory_id=None)
    ticket = st.begin_push(a)
    saved = _file(st, "a.md~", b"a2", memory_id=None)
    st.rename(saved, st.nodes[ROOT_INO], "a.md", a)
    assert st.doubt_of(saved).doubt == ticket.doubt and st.doubt_of(saved).ino == saved.ino
    again = _reopened(st, tmp_path)
    assert [t.ino for t in again.doubts.values()] == [saved.ino]
    again.close()


def test_a_park_is_journaled_until_the_memory_lands_elsewhere(st, tmp_path):
    node = _file(st, "x.md", b"x")
    park = f"/{PARK_NAME}/x.1"
    st.begin_park(MID, park)
    assert st.parks == {MID: park}
    again = _reopened(st, tmp_path)
    assert again.parks == {MID: park}
    again.close()
    st.adopt_own_write(node, Remote(MID, park, sha256(b"x")))  # at the park: still parked
    assert st.parks == {MID: park}
    st.adopt_own_write(node, Remote(MID, "/y.md", sha256(b"x")))  # landed
    assert st.parks == {}
    again = _reopened(st, tmp_path)
    assert again.parks == {}
    again.close()


# -- requests that never took effect, and renames that pass identity on -------------------------


def test_a_request_that_never_took_effect_is_forgotten(st, tmp_path):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    ticket = st.begin_push(node)
    st.push_unanswered(ticket, maybe_applied=True)  # may have landed: stays in doubt
    assert node.sent_sha == sha256(b"v1") and st.doubt_of(node) == ticket
    st.push_unanswered(ticket, maybe_applied=False)  # provably never reached the server
    assert node.sent_sha is None and st.doubt_of(node) is None
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/x.md").sent_sha is None and again.doubts == {}
    again.close()


def test_a_request_not_applied_after_a_newer_send_keeps_the_newer(st):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    first = st.begin_push(node)
    st.set_content(node, sha256(b"v2"), 2)
    st.begin_push(node)
    st.push_not_applied(first)
    assert node.sent_sha == sha256(b"v2")


def test_a_delete_whose_last_update_never_took_effect(st, tmp_path):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    ticket = st.begin_push(node)
    st.remove(node)
    assert st.tombstones[MID].sent_sha == sha256(b"v1")
    st.push_not_applied(ticket)
    assert st.tombstones[MID].sent_sha is None
    again = _reopened(st, tmp_path)
    assert again.tombstones[MID].sent_sha is None
    again.close()


def test_an_editor_save_takes_the_memory_and_its_request_in_flight(st, tmp_path):
    """The temp file renamed over x.md takes x.md's memory, base and the sha of the
    update still in flight: that update's answer is for the new file."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    st.begin_push(node)
    epoch = node.base_epoch
    saved = _file(st, "x.md~", b"v2", memory_id=None)
    st.rename(saved, st.nodes[ROOT_INO], "x.md", node)
    assert (saved.memory_id, saved.base_path, saved.base_sha, saved.sent_sha) == \
        (MID, "/x.md", sha256(b"base"), sha256(b"v1"))
    assert saved.base_epoch == epoch and st.holder(MID) is saved
    assert node.memory_id is None and st.tombstones == {}
    assert st.successor(node.ino) is saved
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/x.md")
    assert (back.ino, back.memory_id, back.sent_sha) == (saved.ino, MID, sha256(b"v1"))
    again.close()


def test_a_save_over_a_file_whose_create_is_in_flight_keeps_that_create(st):
    """x.md's create was sent (no answer yet); an editor's save replaces x.md: if the
    create landed, its memory is the new file's."""
    node = _file(st, "x.md", b"v1", memory_id=None)
    st.begin_push(node)
    saved = _file(st, "x.md~", b"v2", memory_id=None)
    st.rename(saved, st.nodes[ROOT_INO], "x.md", node)
    assert saved.sent_sha == sha256(b"v1") and saved.memory_id is None


def test_a_save_by_a_file_with_a_request_of_its_own_keeps_its_own(st):
    node = _file(st, "x.md", b"v1", memory_id=None)
    st.begin_push(node)
    saved = _file(st, "y.md", b"v2", memory_id=None)
    st.begin_push(saved)
    st.rename(saved, st.nodes[ROOT_INO], "x.md", node)
    assert saved.sent_sha == sha256(b"v2")


def test_moving_a_directory_makes_every_decision_about_its_files_stale(st, tmp_path):
    st.ensure_dir("/d/sub")
    st.ensure_dir("/e")
    d, e = st.lookup_path("/d"), st.lookup_path("/e")
    inner = _mem(st, "/d/sub/a.md", b"a", "mem_a")
    top = _mem(st, "/d/b.md", b"b", "mem_b")
    decided = {n.ino: n.gen for n in (inner, top)}
    st.rename(d, e, "d", None)
    # (a Deferred below rolls back and reloads State from state.db: read times first)
    e_mtime, root_mtime = e.mtime_ns, st.nodes[ROOT_INO].mtime_ns
    for n in (inner, top):
        with pytest.raises(Deferred):
            st.take_remote(n, Remote(n.memory_id, n.base_path, sha256(b"t"), 1), "r",
                           gen=decided[n.ino])
        assert st.is_dirty(n)
    again = _reopened(st, tmp_path)
    assert again.lookup_path("/e/d/sub/a.md") is not None
    assert again.lookup_path("/e").mtime_ns == e_mtime
    assert again.nodes[ROOT_INO].mtime_ns == root_mtime
    again.close()


def test_an_update_answered_at_another_path_leaves_the_rename_to_the_reconciler(st):
    """Content only was sent, yet the answer shows the memory elsewhere: another client
    renamed it. The base keeps our path, so the listing's row follows their rename
    instead of our next push moving it back."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    ticket = st.begin_push(node, path=False)
    st.push_landed(ticket, Remote(MID, "/theirs.md", sha256(b"v1"), 2))
    assert node.base_path == "/x.md" and node.base_sha == sha256(b"v1")
    assert not st.is_dirty(node)


def test_a_request_not_applied_brings_back_the_send_before_it(st):
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    st.begin_push(node)  # v1: no answer
    st.set_content(node, sha256(b"v2"), 2)
    second = st.begin_push(node)
    st.push_not_applied(second)  # v2 never took effect; v1 may have
    assert node.sent_sha == sha256(b"v1")


def test_a_request_not_applied_reaches_the_file_that_revived_its_memory(st):
    """x.md was unlinked and created again (the new file takes the pending delete's
    memory and what was sent for it): the request's outcome is that file's."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    ticket = st.begin_push(node)
    st.remove(node)
    again = st.new_node(st.nodes[ROOT_INO], "x.md", is_dir=False, mode=0o100644, uid=0,
                        gid=0)
    assert again.memory_id == MID and again.sent_sha == sha256(b"v1")
    st.push_not_applied(ticket)
    assert again.sent_sha is None


def test_a_create_not_applied_is_sent_again_as_a_create(st):
    node = _file(st, "x.md", b"v1", memory_id=None)
    ticket = st.begin_push(node)
    st.push_not_applied(ticket)
    assert node.sent_sha is None and st.doubt_of(node) is None and node.memory_id is None


def test_a_local_rename_sent_home_claims_its_own_path_too(st):
    """t.md was renamed here onto y.md, and a new file was then made at t.md. The server
    puts x's memory at y.md: t goes home, and the new file standing there yields to it
    (kept as a conflict of t's memory)."""
    node = _mem(st, "/x.md", b"x", MID)
    other = _mem(st, "/t.md", b"t", "mem_t")
    st.rename(other, st.nodes[ROOT_INO], "y.md", None)
    new = _file(st, "t.md", b"new here", memory_id=None)
    assert st.remote_moved(node, "/y.md")
    assert st.lookup_path("/y.md") is node and st.lookup_path("/t.md") is other
    assert new.ino not in st.nodes
    assert [(c["path"], c["memory_id"], c["local_sha"], c["remote_sha"])
            for c in st.conflicts()] == [("/t.md", "mem_t", sha256(b"new here"), sha256(b"t"))]


def test_a_request_applied_and_written_over_since_is_no_longer_in_flight(st, tmp_path):
    """doubts.py's SUPERSEDED row: v1's answer was lost, the server took v1 and then
    another writer's v2, which a listing showed and this file took (the same bytes as
    ours: adopted). v1 is in the memory's history, so the request was applied; it ends
    its doubt and nothing it sent is in flight any more (a later listing showing v1
    again is another writer's); the base v2 stands."""
    node = _file(st, "x.md", b"base")
    st.set_content(node, sha256(b"v1"), 2)
    ticket = st.begin_push(node)
    st.set_content(node, sha256(b"v2"), 2)
    st.adopt_own_write(node, Remote(MID, "/x.md", sha256(b"v2"), 2))
    assert node.sent_sha == sha256(b"v1") and node.base_sha == sha256(b"v2")
    st.push_superseded(ticket)
    assert (st.doubts, node.sent_sha, node.base_sha, st.is_dirty(node)) == \
        ({}, None, sha256(b"v2"), False)
    again = _reopened(st, tmp_path)
    back = again.lookup_path("/x.md")
    assert (back.sent_sha, back.base_sha, again.doubts) == (None, sha256(b"v2"), {})
    again.close()


def test_an_earlier_send_stays_in_flight_only_when_the_request_never_took_effect(st):
    """Two sends journaled for one file (v1, then v2 while v1's answer was unknown):
    v2 not applied puts v1 back in flight (push_not_applied); v2 applied and written
    over leaves nothing in flight (push_superseded): v1's own doubt decides for v1."""
    for superseded in (False, True):
        node = _file(st, f"x{superseded}.md", b"base", memory_id=f"mem_{superseded}")
        st.set_content(node, sha256(b"v1"), 2)
        st.begin_push(node)
        st.set_content(node, sha256(b"v2"), 2)
        second = st.begin_push(node)
        assert second.previous_sent == sha256(b"v1")
        (st.push_superseded if superseded else st.push_not_applied)(second)
        assert node.sent_sha == (None if superseded else sha256(b"v1"))
