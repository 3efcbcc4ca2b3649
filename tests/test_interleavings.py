"""Every hold point of every request: named scenarios, then Hypothesis-chosen ones.

See tests/interleave.py for the harness and docs/TESTING.md for how to run the long
exploration. Each named scenario is one test: its sync action runs alone once to count
its requests n, then its interference is injected before the action, at (k, point) for
every k < n and every point, and after it; every run settles and meets the oracle.

    MEMFS_INTERLEAVE_LONG=1     2,000 random Hypothesis cases, not derandomized (or give
                                the count: MEMFS_INTERLEAVE_LONG=20000)
    MEMFS_INTERLEAVE_SETUP=20:60  20 to 60 setup steps a case (0:8 by default)
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from interleave import (
    AFTER_CONFLICT,
    AFTER_GONE,
    AFTER_MOVE,
    AFTER_READ,
    AFTER_WRITTEN,
    ANSWERED_BADLY,
    CRASHES,
    EXPLORED,
    FAULT_POINTS,
    FAULT_ROUND,
    LATE_CRASHES,
    OUTCOMES,
    POINTS,
    RESERVED_PREFIX,
    Engine,
    FaultRule,
    HeldTransport,
    Kind,
    RunResult,
    Scenario,
    explore,
    run_one,
    scratch,
    scratch_root,
)

from memfs.mount.daemon import CLIENT_RETRIES

_LONG = os.environ.get("MEMFS_INTERLEAVE_LONG", "").strip()
LONG = _LONG not in ("", "0")
HYPOTHESIS_EXAMPLES = (int(_LONG) if _LONG.isdigit() and int(_LONG) > 1 else 2000) if LONG \
    else int(os.environ.get("MEMFS_INTERLEAVE_EXAMPLES", "300"))
#: How many setup steps a drawn case takes after its start, at least and at most
#: (MEMFS_INTERLEAVE_SETUP=20:60 for deeper states: a long run whose starts grew by
#: accident found a defect the default never drew; "30" alone: at most 30, though
#: Hypothesis draws short lists far more often than long ones).
_SETUP = os.environ.get("MEMFS_INTERLEAVE_SETUP", "0:8").split(":")
SETUP_MIN, SETUP_MAX = (int(_SETUP[0]), int(_SETUP[1])) if len(_SETUP) > 1 else (0, int(_SETUP[0]))


# -- the count, at the end of the session ---------------------------------------------


class _Summary:
    def pytest_terminal_summary(self, terminalreporter):
        if EXPLORED:
            total = sum(EXPLORED.values())
            parts = ", ".join(f"{n} {kind}" for kind, n in sorted(EXPLORED.items()))
            terminalreporter.write_sep("-", f"interleavings explored: {total} ({parts})")


@pytest.fixture
def harness_tmp(tmp_path: Path) -> Iterator[Path]:
    """Where an exploration keeps its engines' state: a tmpfs when there is one with
    room (`interleave.scratch`), a failing run's directory copied to tmp_path."""
    with scratch(tmp_path) as d:
        yield d


@pytest.fixture(scope="module", autouse=True)
def _report_count(request):
    if not request.config.pluginmanager.has_plugin("memfs-interleavings"):
        request.config.pluginmanager.register(_Summary(), "memfs-interleavings")
    yield


# -- scenario-specific checks -------------------------------------------------------------


def _faulted(result: RunResult) -> bool:
    """A request lost or failed, or the daemon killed: the pass did not finish."""
    return result.crashed or "lose" in result.label or "fail" in result.label


def others_went_out(eng: Engine, result: RunResult) -> list[str]:
    """Defect 2: a refused delete must not keep any other change from going out."""
    if _faulted(result):
        return []
    server = eng.server()
    out = []
    if "/new.md" not in server:
        out.append("a refused delete kept /new.md (a create) from going out in the same pass")
    keep = server.get("/keep.md")
    if keep is None or eng.label(keep[1]) != "'k2'":
        out.append("a refused delete kept /keep.md's update (k2) from going out in the same "
                   "pass")
    return out


def _is_delete(rec) -> bool:
    return rec.method == "DELETE"


REFUSE_DELETES = FaultRule(_is_delete, message="no delete scope", origins=("action", "settle"))


# -- the named scenarios --------------------------------------------------------------------

PUSHED_X = [("write", "/x.md", "v1"), ("push",), ("write", "/x.md", "v2")]
REFUSED = [("write", "/old.md", "old"), ("write", "/keep.md", "k1"), ("push",),
           ("unlink", "/old.md"), ("age",), ("write", "/new.md", "new"),
           ("write", "/keep.md", "k2")]
PAGES = [("r_create", "/b.md", "b"), ("r_create", "/c.md", "c"), ("r_create", "/m.md", "m"),
         ("r_create", "/z.md", "z"), ("reconcile",)]
SWAP = [("write", "/a.md", "A"), ("write", "/b.md", "B"), ("push",)]
SWAP_RENAMES = [("rename", "/a.md", "/t.md"), ("rename", "/b.md", "/a.md"),
                ("rename", "/t.md", "/b.md")]

def _is_create(rec) -> bool:
    return rec.method == "POST" and rec.path.endswith("/memories")


def newer_edit_kept(eng: Engine, result: RunResult) -> list[str]:
    """The local save made after the conflict's fetch is not settled against a version
    it never saw: the server deleted the memory, so the save re-creates it."""
    if result.label == "alone":  # no interference: the conflict is the whole story
        return []
    tree, server = eng.user_tree(), eng.server()
    out = []
    if eng.label(tree.get("/x.md")) != "'newer'":
        out.append(f"the tree's /x.md is {eng.label(tree.get('/x.md'))}, not the local save "
                   "'newer'")
    if "/x.md" not in server or eng.label(server["/x.md"][1]) != "'newer'":
        out.append("the local save 'newer' did not reach the server")
    return out


def their_move_back_stands(eng: Engine, result: RunResult) -> list[str]:
    """Their move back, once made (the user's move applied before it), is the last word:
    the file ends at /a.md, on the server and in the tree."""
    if not any("('r_rename', '/b.md', '/a.md') ok" in line for line in eng.log):
        return []  # made before the user's move reached the server: there was no b.md
    tree, server = eng.user_tree(), eng.server()
    if set(tree) == set(server) == {"/a.md"}:
        return []
    return [f"their move back to /a.md was undone: the tree has {sorted(tree)}, the "
            f"server {sorted(server)}"]


SCENARIOS = [
    Scenario(
        "never_read_content_saved_over_then_its_memory_rewritten",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_create", "/c.md"),
         ("reconcile",)],
        "push", [("rename", "/c.md", "/a.md"), ("write", "/c.md")],
        doc="found by the long Hypothesis run: another client's c.md, never read here, is "
            "renamed over a.md (a.md's memory takes its content); a new c.md revives c's "
            "memory and overwrites it; the content a.md needs is then only in c's versions"),
    Scenario(
        "remote_rename_chain", [("write", "/a.md"), ("write", "/b.md"), ("push",)],
        "reconcile", [("r_rename", "/a.md", "/c.md"), ("r_rename", "/b.md", "/a.md")],
        doc="found by the long Hypothesis run (on e2119b4 too): another client renames a to "
            "c, then b to a; b's row may come first, when a still holds its place here: it "
            "follows once a has moved (before: b stayed at its old path for good, the feed "
            "having applied the version)"),
    Scenario(
        "renamed_never_read_then_deleted_remotely",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_edit", "/a.md")], "reconcile",
        [("rename", "/a.md", "/c.md"), ("r_delete", "/a.md")],
        doc="found by the long Hypothesis run (on e2119b4 too): a file takes another "
            "client's edit (content never read), is renamed here, and its memory is deleted "
            "there; the file is kept as new, and its content, only on the server, comes "
            "from the deleted memory's versions (before: 'content missing', never pushed)",
        settles_in=AFTER_GONE),
    Scenario(
        "deleted_here_changed_there_onto_a_new_local_file",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("unlink", "/a.md"),
         ("r_edit", "/a.md"), ("r_rename", "/a.md", "/d/e.md")], "reconcile",
        [("write", "/d/e.md")],
        doc="found by the long Hypothesis run: a file deleted here is edited and renamed "
            "there onto the path of a new local file; the delete is cancelled and the memory "
            "collides like any other (the oracle called that a drop: the local create's 409 "
            "shows the server's file and keeps the local one as a conflict)"),
    Scenario(
        "conflict_restored_while_the_push_is_out",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_create", "/c.md"),
         ("rename", "/a.md", "/c.md"), ("write", "/a.md")], "push", [("restore", "/c.md")],
        doc="found by the long Hypothesis run: a rename onto a path another client created "
            "loses it (a conflict) while a create of the same pass is held, and the user "
            "restores that conflict: the restored row explains the path's new memory (the "
            "oracle forgot rows a restore consumed)",
        settles_in=AFTER_CONFLICT),
    Scenario(
        "deleted_while_open_changed_there_comes_back",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("open_write", "/b.md"),
         ("r_edit", "/b.md")], "reconcile", [("write", "/a.md")],
        second=[("unlink", "/b.md")],
        doc="found by the long Hypothesis run: a file with unsaved writes (the listing "
            "defers its change there) is unlinked; its delete meets the change (409), the "
            "server's version wins, and the feed, which had shown that version already, "
            "names the memory again so that it comes back (before: absent until the next "
            "full listing). Settling takes 2 rounds: the push's 409 restores it and the "
            "poll reads it, the next finds nothing to do"),
    Scenario(
        "renamed_there_onto_a_new_file_with_unsaved_writes",
        [("write", "/a.md"), ("push",), ("write", "/c.md"), ("r_rename", "/a.md", "/c.md")],
        "reconcile", [("open_write", "/c.md")],
        doc="found by the long Hypothesis run (4 December): another writer renames our "
            "/a.md onto the path of our new, unpushed /c.md while /c.md has unsaved writes; "
            "the listing cannot move /a.md there (the writes win the place), and once they "
            "were saved the feed, which had shown that rename already, never named it "
            "again: our create of /c.md met our own memory there (409) on every pass until "
            "the next full listing. Now the feed names the memory again while a file has "
            "unsaved writes; saved, /c.md yields to the server's rename and its content "
            "is a conflict. Settling takes 2 rounds: the poll after the save follows the "
            "rename, the next finds nothing to do (a feed that forgot the memory follows "
            "it a push and a poll later: 3)"),
    Scenario(
        "their_rename_then_our_lost_edit_answer_then_edited_again",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("write", "/a.md"),
         ("r_rename", "/a.md", "/c.md")], "push", [("write", "/a.md")],
        doc="found by the long Hypothesis run (4 December): another writer renames /a.md "
            "to /c.md, then our content-only update of it lands with its answer lost, and "
            "the file is edited again. The doubt looked for our write at /a.md, the path "
            "the update never sent: not found, the next edit went out against the old "
            "base and was filed as a conflict with our own write. A content-only update "
            "is now found by its content, wherever the memory is"),
    Scenario(
        "moved_over_their_file_and_back_while_they_edit_it",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_create", "/c.md"),
         ("reconcile",), ("rename", "/a.md", "/c.md"), ("write", "/b.md")], "push",
        [("r_edit", "/a.md")], second=[("rename", "/c.md", "/a.md")],
        doc="found by the long Hypothesis run (4 December): /a.md moved over /c.md (c's "
            "memory takes a's bytes, a's is to be deleted) and back while another writer "
            "edits /a.md. The file at /a.md kept c's memory: a's delete met the edit "
            "(restored), c's rename to /a.md met a's memory there, and a's bytes, which "
            "the server had, were filed as a conflict. A file moved onto the path of a "
            "pending delete, holding exactly what that memory held, now takes it back. "
            "The push sends c's new bytes and b's; the move back comes after either"),
    Scenario(
        "moved_over_their_file_and_back_as_the_long_run_shrank_it",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_create", "/c.md"),
         ("reconcile",)], "push", [("rename", "/a.md", "/c.md")],
        second=[("r_edit", "/a.md"), ("rename", "/c.md", "/a.md")],
        doc="the same round trip as Hypothesis shrank it: all of it before anything is "
            "pushed (the action finds nothing to send)"),
    Scenario(
        "never_read_moved_over_a_file_while_its_memory_changes_there",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_create", "/c.md"),
         ("reconcile",), ("r_edit", "/c.md")], "reconcile", [("rename", "/c.md", "/a.md")],
        doc="found by the long Hypothesis run (4 December afternoon): /c.md, taken from "
            "the server and never read, moved over /a.md while another writer edits it: "
            "c's memory comes back with the edit, and nothing remembered where the moved "
            "file's bytes were (it read EIO and was never pushed). A pending delete, once "
            "dropped, is remembered as a source of what it held (its versions keep it)",
        settles_in=AFTER_READ),
    Scenario(
        "their_swap_meets_our_pending_rename_into_it",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("rename", "/a.md", "/c.md"),
         ("r_rename", "/b.md", "/c.md"), ("r_rename", "/a.md", "/b.md")], "push",
        [("write", "/a.md")],
        doc="found by the long Hypothesis run (4 December afternoon): our a→c not pushed, "
            "their b→c and a→b: the server put b's memory where our a's file is and a's "
            "where b's file is. Each waited on the other for ever; now they swap places "
            "(our rename yields to the server's, as it does onto a free place)"),
    Scenario(
        "deleted_there_kept_here_open_then_their_rename_onto_it",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_delete", "/a.md")],
        "reconcile", [("open_write", "/a.md")], second=[("r_rename", "/b.md", "/a.md")],
        doc="found by the long Hypothesis run (4 December), the same hole from the other "
            "side: /a.md deleted there while it has unsaved writes here (re-created from "
            "the file), and another writer renames /b.md onto /a.md; the listing cannot "
            "follow that rename while the writes hold the place, and the feed never "
            "showed it again"),
    Scenario(
        "deleted_here_moved_there_then_its_bytes_written_at_the_old_path",
        [("write", "/a.md"), ("write", "/b.md", "same"), ("push",), ("unlink", "/b.md"),
         ("r_rename", "/b.md", "/e/e.md"), ("poll",), ("age",)], "push",
        [("write", "/b.md", "same")],
        doc="found by the long Hypothesis run (6 December, from an adopting start): /b.md "
            "deleted here and moved to /e/e.md there (its bytes unchanged: our delete "
            "still applies), then the same bytes written at /b.md. The pending delete "
            "kept the old path, so the new file took that memory back as unchanged: the "
            "tree showed it at /b.md, the server kept it at /e/e.md, and nothing was ever "
            "pushed. The pending delete now follows its memory's path on the server"),
    Scenario(
        "deleted_here_changed_there_path_held_by_our_rename_then_freed",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("unlink", "/a.md"),
         ("r_edit", "/a.md"), ("rename", "/b.md", "/a.md")],
        "reconcile", [("write", "/a.md")], second=[("unlink", "/a.md")],
        doc="found by the long Hypothesis run (4 December): /a.md deleted here and edited "
            "there (the server's edit wins) while our /b.md, renamed to /a.md, holds the "
            "path; the listing cannot show /a.md's memory there (a collision), then "
            "/a.md (our /b.md) is deleted too. The feed had shown the edit already: the "
            "memory stayed away until the next full listing. Now the feed names a memory "
            "that collided with another memory of ours on the next poll",
        settles_in=AFTER_CONFLICT),
    Scenario(
        "renamed_into_a_chain_and_edited_there",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_rename", "/a.md", "/c.md"),
         ("r_rename", "/b.md", "/a.md")], "push", [("r_edit", "/a.md")],
        doc="found by the long Hypothesis run: the server renamed a→c, then b→a and edited "
            "the new /a.md; the listing takes b's content while its place is still held, "
            "and the retry once a→c moved must not take that for a newer answer (before: b "
            "stayed at /b.md until a later listing)"),
    Scenario(
        "created_where_a_chain_moves_away",
        [("write", "/a.md"), ("write", "/b.md"), ("push",)], "push",
        [("r_rename", "/b.md", "/c.md")],
        second=[("r_rename", "/a.md", "/b.md"), ("r_create", "/a.md")],
        doc="found by the long Hypothesis run: the server renamed b→c and a→b, then "
            "created a new /a.md; that new memory's row meets /a.md still held here (a "
            "moves later in the pass) and is tried again with the chain's renames (before: "
            "not shown until a later listing)"),
    Scenario(
        "two_lost_creates_then_edits", [("write", "/x.md", "v1")], "push",
        [("write", "/x.md", "v2")],
        faults=[FaultRule(_is_create, kind="lose", origins=("action", "settle"), times=2)],
        sole_writer=True,
        doc="issue 20: the answers of two creates of one file are lost, with an edit between "
            "them; before, the second create's 409 forgot the first's sha and the edit "
            "became a false conflict (\"another writer created the same path\")"),
    # Two held requests in one run (`second`): every later request's hold after each one's.
    Scenario(
        "two_lost_answers_to_one_file", [("write", "/x.md", "v1")], "pushes",
        [("write", "/x.md", "v2")], second=[("write", "/x.md", "v3")], sole_writer=True,
        doc="issue 21: a file's create is held (v2 saved meanwhile), then the update that "
            "sends v2 (v3 saved meanwhile); at (lose, lose) both answers are lost, and the "
            "second pass must read the first lost answer before it sends anything"),
    Scenario(
        "two_creates_in_flight", [("write", "/a.md", "a1"), ("write", "/b.md", "b1")], "push",
        [("rename", "/b.md", "/c.md")], second=[("write", "/a.md", "a2"), ("unlink", "/c.md")],
        sole_writer=True,
        doc="issue 21: one pass creates two files, both requests on the wire at once; each "
            "is held in turn, with a local change to the other's file and to its own while "
            "it is, their answers delivered (or lost) one after the other"),
    Scenario(
        "save_and_remote_delete_during_conflict_fetch",
        [*PUSHED_X[:2], ("r_edit", "/x.md", "theirs"), ("write", "/x.md", "mine")], "push",
        [("write", "/x.md", "newer"), ("r_delete", "/x.md")], settled_check=newer_edit_kept,
        doc="issue 21, the gen compare-and-set of State.take_remote: the push meets a "
            "precondition failure and fetches the server's version for the conflict; a save "
            "here and a delete there land before that fetch is applied. The fetched version "
            "is stale for this file (its gen moved): applying it would turn the save into a "
            "conflict row and let the delete take the file",
        settles_in=AFTER_GONE),
    Scenario(
        "editor_save_during_update", PUSHED_X, "push", [("save_as", "/x.md", "v3")],
        doc="defect 1: temp file renamed over x.md while x.md's update is on the wire"),
    Scenario(
        "editor_save_during_flush", PUSHED_X, "flush", [("save_as", "/x.md", "v3")],
        doc="defect 1 during an unmount flush: the memory must keep its id"),
    Scenario(
        "editor_save_during_create", [("write", "/x.md", "v1")], "push",
        [("save_as", "/x.md", "v2")]),
    Scenario(
        "save_during_create", [("write", "/x.md", "v1")], "push",
        [("write", "/x.md", "v2")],
        doc="a plain save (open, truncate, write, close) while the create is in flight"),
    Scenario(
        "save_during_update", PUSHED_X, "push", [("write", "/x.md", "v3")]),
    Scenario(
        "rename_during_update", PUSHED_X, "push", [("rename", "/x.md", "/y.md")]),
    Scenario(
        "unlink_during_update", PUSHED_X, "push", [("unlink", "/x.md")]),
    Scenario(
        "refused_delete_others_go_out", REFUSED, "push", [("write", "/other.md", "o")],
        faults=[REFUSE_DELETES], check=others_went_out, may_stay=("/old.md",),
        doc="defect 2: every DELETE answered 403 (no delete scope, for good); every other "
            "change still goes out in that pass, and status keeps reporting old.md"),
    Scenario(
        "refused_delete_during_flush", REFUSED, "flush", [("write", "/other.md", "o")],
        faults=[REFUSE_DELETES], check=others_went_out, may_stay=("/old.md",),
        doc="defect 2 in flush(): the refusal must not escape (it would end MountDaemon.run)"),
    Scenario(
        "restore_over_pending_edit",
        [("write", "/a.md", "base"), ("push",), ("r_edit", "/a.md", "theirs"),
         ("write", "/a.md", "mine"), ("push",), ("write", "/a.md", "newer")],
        "push", [("restore", "/a.md")],
        doc="defect 3: `conflicts restore` over a closed, unpushed (or in-flight) edit"),
    Scenario(
        "made_again_with_the_bytes_of_a_memory_deleted_before",
        [("write", "/a.md", "v1"), ("push",), ("unlink", "/a.md"), ("age",), ("push",),
         ("write", "/a.md", "v1")], "push", [("write", "/b.md", "b")],
        doc="found by the widened product (4 December evening): `rm a; git checkout a`, "
            "the delete gone out and settled, and the create of the same bytes at the same "
            "path gets no answer: the deleted memory's creation, listed among the versions "
            "since, was taken for the create's (a.md then held a deleted memory, and the "
            "next listing removed it). A memory this mount held is never the one a lost "
            "create made (the `known` table)"),
    Scenario(
        "their_swap_seen_at_once",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_rename", "/a.md", "/t.md"),
         ("r_rename", "/b.md", "/a.md"), ("r_rename", "/t.md", "/b.md")], "reconcile",
        [("write", "/a.md")],
        doc="found by the long Hypothesis run (4 December evening): another writer swapped "
            "a and b through a third name, and a listing saw only the end. Each file's new "
            "place was held by the other: neither followed, for ever. The ring moves at "
            "once now (Reconciler._follow_rings)"),
    Scenario(
        "delete_meets_their_edit_and_its_read_is_refused",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("unlink", "/a.md"),
         ("r_edit", "/a.md"), ("age",)], "push", [("write", "/a.md")],
        faults=[FaultRule(lambda r: r.method == "GET" and bool(r.memory_id), times=1)],
        doc="found by the long Hypothesis run (4 December evening): the DELETE meets their "
            "edit (409), and the read of the memory that follows is refused (403): the "
            "refusal escaped the delete, logged as a bug. Now the delete waits, refused"),
    Scenario(
        "made_with_the_bytes_of_their_create_deleted_since",
        [("write", "/a.md"), ("push",), ("r_create", "/c.md", "same"), ("r_delete", "/c.md"),
         ("write", "/c.md", "same")], "push", [("write", "/a.md")],
        doc="found by Hypothesis drawing another writer's writes of bytes a file holds "
            "(5 December): they create c.md and delete it, the user makes c.md with the "
            "same bytes, and its create gets no answer (not applied): their creation, listed "
            "among the versions since, was taken for ours, and the file went with their "
            "delete. The server cannot tell the two creations apart; once the memory "
            "changed or went, the file's bytes are kept as a conflict "
            "(`decide.created_row`, OVERTAKEN)"),
    Scenario(
        "made_with_the_bytes_of_their_create_edited_since",
        [("write", "/a.md"), ("push",), ("r_create", "/c.md", "same"), ("r_edit", "/c.md"),
         ("write", "/c.md", "same")], "push", [("write", "/a.md")],
        doc="as above, their memory edited since: their edit replaced the user's file, "
            "with no conflict (the answered 409 keeps ours as one)"),
    Scenario(
        "made_with_the_bytes_of_their_create_deleted_since_writer_unknown",
        [("r_create", "/a.md"), ("reconcile",), ("r_create", "/c.md", "same"),
         ("r_delete", "/c.md"), ("write", "/c.md", "same")], "push", [("write", "/a.md")],
        doc="the two above on a mount that has created nothing: with no creation of its "
            "own to learn its writer from, their creation may be ours, and is decided as "
            "such (the way the two above went before the writer's witness, 6 December)"),
    Scenario(
        "made_with_the_bytes_of_their_create_edited_since_writer_unknown",
        [("r_create", "/a.md"), ("reconcile",), ("r_create", "/c.md", "same"),
         ("r_edit", "/c.md"), ("write", "/c.md", "same")], "push", [("write", "/a.md")],
        doc="as above, their memory edited since"),
    Scenario(
        "their_create_meets_my_new_file_moved_away_while_read",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("write", "/c.md"),
         ("r_create", "/c.md"), ("r_delete", "/a.md")], "reconcile",
        [("rename", "/c.md", "/a.md")],
        doc="found by Hypothesis (4 December, late): their new c.md meets our c.md not "
            "pushed yet, and while their memory is read for the conflict our c.md moves "
            "away: the conflict is deferred, and nothing showed their c.md again (the feed "
            "had shown it) until the next full listing, minutes later. Now the next poll "
            "reads it again (`Reconciler._waited`). Settling takes 2 rounds: the first "
            "poll reads their c.md, the next finds nothing to do (a poll that forgot it "
            "reads it a round later: 3)"),
    Scenario(
        "unlinked_and_made_again_alike_after_they_delete_it",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("write", "/a.md", "same")],
        "push", [("unlink", "/a.md")], second=[("r_delete", "/a.md"), ("write", "/a.md", "same")],
        doc="found by the long Hypothesis run (5 December, night), a fault of the oracle: "
            "our update to 'same' is out, the user unlinks /a.md, another writer deletes "
            "the memory, and the user makes /a.md again with 'same'. The new file revives "
            "the memory of the pending delete, its base included (docs/SEMANTICS.md, "
            "create): a save of the bytes the memory held, no change to sync, so their "
            "delete goes over it, as over the file left as it was. The oracle took the "
            "base of a file it made as none and counted the bytes lost",
        settles_in=AFTER_GONE),
    Scenario(
        "unlinked_and_moved_back_alike_after_they_delete_it",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("write", "/a.md", "same")],
        "push", [("unlink", "/a.md")],
        second=[("r_delete", "/a.md"), ("write", "/c.md", "same"), ("rename", "/c.md", "/a.md")],
        doc="the same, the file made again by an editor's save (c.md written, moved onto "
            "a.md): the move revives the memory (docs/SEMANTICS.md, rename), at the bytes "
            "it holds, and their delete goes over it. The oracle, which had counted the "
            "write to c.md, did not see that the move made it the memory's file at its "
            "synced bytes",
        settles_in=AFTER_GONE),
    Scenario(
        "deleted_there_while_open_then_the_daemon_killed",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_delete", "/b.md"),
         ("r_create", "/b.md"), ("open_write", "/b.md"), ("reconcile",)], "push",
        [("write", "/a.md")],
        doc="found by the random search (5 December, late night), a fault of the oracle: "
            "their delete of b.md meets the file open with unsaved writes, so it stays as "
            "a new file; the daemon is killed, the unsaved writes with it, and the file, "
            "holding b's old bytes, meets their new b.md: its bytes kept as a conflict, "
            "nothing lost. The oracle took those bytes as still standing at /b.md, where "
            "our request once wrote them, and the row as false: their delete ends that"),
    Scenario(
        "renamed_onto_their_same_bytes_then_they_delete_it",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("write", "/a.md", "same"),
         ("push",), ("r_create", "/d/e.md", "same"), ("rename", "/a.md", "/d/e.md")], "push",
        [("r_delete", "/d/e.md")],
        doc="found by the random search (5 December, late night): our a→/d/e.md meets their new "
            "memory there with the same bytes; theirs wins the path, the file becomes "
            "theirs and our memory is deleted. No conflict row was kept (the bytes were "
            "equal), so their delete of /d/e.md, read just before or after, took the "
            "user's moved file: nothing of it live. The row is kept now"),
    Scenario(
        "their_like_bytes_deleted_then_mine_written_its_answer_lost",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("reconcile",), ("poll",),
         ("r_edit", "/b.md", "same"), ("r_delete", "/b.md"), ("write", "/b.md", "same")],
        "push", [],
        doc="found by the random search (6 December): another writer wrote 'same' to b.md and "
            "deleted it; the user, not having heard, writes 'same', and the update's answer "
            "is lost. The memory's versions hold 'same', but the server records that version "
            "as another writer's (the mount knows its own, read back by the poll): taken "
            "as ours, their delete took the user's file. Kept as a conflict now, the delete "
            "standing (`decide.doubt_row`, `mine`)"),
    Scenario(
        "their_like_bytes_deleted_then_mine_written_its_answer_lost_writer_unknown",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_edit", "/b.md", "same"),
         ("r_delete", "/b.md"), ("write", "/b.md", "same")], "push", [],
        doc="the same before the mount has read a creation of its own back (no poll): it "
            "did not know its writer, so their version looked like ours (6 of 19 runs lost "
            "the write, 4 still after the first fix, the daemon killed and restarted). "
            "The doubt learns it from the version a create of its own made (one GET; "
            "`SyncContext.writer_witness`, kept in state.db)"),
    Scenario(
        "their_like_bytes_deleted_then_mine_written_its_answer_lost_by_a_mount_that_deletes",
        [("r_create", "/a.md"), ("r_create", "/b.md"), ("r_create", "/c.md"), ("reconcile",),
         ("unlink", "/c.md"), ("age",), ("push",), ("r_edit", "/b.md", "same"),
         ("r_delete", "/b.md"), ("write", "/b.md", "same")], "push", [],
        doc="the same on a mount that has created nothing, only adopted their files and "
            "deleted one (6 of 19 runs lost the write): no create to learn its writer "
            "from, but a delete of its own is a witness too (the memory's one deleted "
            "version)"),
    Scenario(
        "mine_written_then_theirs_over_it_on_a_mount_that_only_edits",
        [("r_create", "/a.md"), ("r_create", "/b.md"), ("reconcile",), ("write", "/a.md")],
        "push", [("r_edit", "/a.md")],
        doc="found by the random search (6 December, later): a mount that adopted its files "
            "and never created or deleted one has no witness of who it writes as. Its update "
            "lands, another writer edits over it, the answer is lost: the version holding "
            "the user's bytes may be another writer's of the same bytes, so memfs keeps "
            "them as a conflict that says so (`decide.maybe_another_writer`), their edit "
            "standing. The oracle had excused that keep for a create only"),
    Scenario(
        "their_bytes_back_under_my_delete_of_them",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_edit", "/b.md", "same"),
         ("reconcile",), ("unlink", "/b.md"), ("r_edit", "/b.md"), ("write", "/a.md")],
        "push", [("r_edit", "/b.md", "same")],
        doc="the oracle's, found by the deep random search (6 December, later): the user "
            "deletes b.md holding 'same'; another writer writes other bytes, then 'same' "
            "again. The delete, sent on the sha of 'same', applies, as a three-way merge "
            "takes theirs = base for no change: those bytes are the user's to delete, "
            "as under an edit (`their_bytes_back_under_my_edit_of_them`)"),
    Scenario(
        "my_synced_bytes_written_again_under_their_edit_beside_a_copy",
        [("write", "/a.md"), ("write", "/b.md", "same"), ("push",), ("r_edit", "/b.md"),
         ("write", "/a.md", "same"), ("write", "/b.md", "same")], "push", [("write", "/a.md")],
        doc="the oracle's, found by the deep random search (6 December, later): b.md synced "
            "with 'same', another writer edits it, the user writes 'same' to a.md and again "
            "to b.md (no change: ours = base, so their edit wins), then a.md again. Its "
            "'same' went with that last write; the oracle took b.md's unchanged bytes for "
            "a write of the user's that still owed them (the rewrite had moved its gen)"),
    Scenario(
        "moved_over_my_like_file_that_they_deleted",
        [("write", "/a.md"), ("write", "/b.md", "same"), ("write", "/c.md", "same"), ("push",),
         ("r_delete", "/c.md"), ("rename", "/b.md", "/c.md"), ("write", "/a.md", "same")],
        "push", [("write", "/a.md")],
        doc="the oracle's, found by the deep random search (6 December, later): b.md and c.md "
            "both synced with 'same'; another writer deletes c.md; the user, not having "
            "heard, moves b.md over c.md. The moved file takes c's memory (an editor's "
            "save) with the bytes c held: no change, so their delete goes over it (ours = "
            "base) and b's memory goes with the move. The user writes 'same' to a.md, then "
            "other bytes: the oracle still owed 'same', taking the moved file's for a write "
            "of the user's"),
    Scenario(
        "their_like_bytes_listed_then_deleted_while_mine_are_written",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_edit", "/b.md", "same")],
        "reconcile", [("r_delete", "/b.md"), ("write", "/b.md", "same")],
        doc="found beside the random search's defect (6 December): the listing reads their "
            "'same' in b.md; before its answer is applied they delete b.md and the user "
            "writes 'same'. Taken as synced (equal bytes), their delete then took the "
            "user's write, made after it (5 of 19 runs lost it). Bytes written here since "
            "the pass began are not taken on its word: the next poll reads the memory again",
        settles_in=AFTER_WRITTEN),
    Scenario(
        "their_new_like_bytes_listed_then_deleted_while_mine_are_created",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_create", "/c.md", "same")],
        "reconcile", [("r_delete", "/c.md"), ("write", "/c.md", "same")],
        doc="the same for a new memory and a new file (5 or 6 of 19 runs lost it): adopting "
            "their memory on the listing's word, the file went with their delete"),
    Scenario(
        "my_create_in_doubt_replaced_by_a_like_synced_file",
        [("r_create", "/d.md", "same"), ("reconcile",), ("r_create", "/c.md", "same"),
         ("r_delete", "/c.md"), ("write", "/c.md", "same")], "push",
        [("rename", "/d.md", "/c.md")],
        doc="found by a mutant that survived (`push_overtaken` #7, 6 December): c.md's "
            "create in doubt beside their like creation, deleted since; d.md, synced with "
            "the same bytes, moved over c.md. The answer gave the created memory back to "
            "the file that holds its bytes, their delete took it, and d's memory went "
            "with the move: the moved file was lost (3 of 11 runs). A memory the server "
            "shows deleted is no longer given back. (The mount creates nothing first: it "
            "cannot learn its writer, so their creation looks like its own)"),
    Scenario(
        "their_edit_alike_while_mine_is_out_then_mine_again",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("write", "/a.md", "same")],
        "push", [("write", "/a.md")], second=[("r_edit", "/a.md"), ("r_edit", "/a.md", "same")],
        doc="found by Hypothesis (4 December, night), a fault of the oracle: our update to "
            "'same' is out, the user writes again, another writer edits the memory and then "
            "writes 'same' too; ours meets bytes equal to its own (200 whatever its "
            "precondition, no version: the API's no-op) and the user's next edit goes over "
            "them without conflict, as over ours. By content their 'same' is ours: not "
            "lost"),
    Scenario(
        "their_bytes_back_under_my_edit_of_them",
        [("write", "/a.md"), ("push",), ("write", "/a.md"), ("r_edit", "/a.md", "same"),
         ("push",), ("r_edit", "/a.md")], "push", [("write", "/a.md")],
        second=[("r_edit", "/a.md", "same")],
        doc="found by the deep random search (6 December, evening: 20 to 60 setup steps), "
            "a fault of the oracle: our edit lost to theirs ('same', a conflict); they "
            "change it again, the user edits the file (over 'same'), and they put 'same' "
            "back. Our update, preconditioned on 'same', goes over it: theirs equals the "
            "base the user's edit was made over, which a three-way merge, like the API's "
            "precondition on the content, takes for no change. The oracle owed their "
            "second 'same'; the user wrote over those very bytes"),
    Scenario(
        "my_create_lost_then_removed_beside_their_like_create",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("poll",), ("poll",),
         ("write", "/d/e.md", "same")], "push",
        [("rmtree", "/d"), ("r_create", "/d/e.md", "same")],
        doc="found by Hypothesis (4 December, night): our create of /d/e.md gets no answer, "
            "the user removes /d, another writer creates /d/e.md with the same bytes; their "
            "creation was taken for ours and the user's delete went to it: their file gone, "
            "nothing kept. The feed has read a creation of ours (the polls), so the mount "
            "knows its writer, and the server records theirs as another's "
            "(`decide.by_another_writer`); before it knows (no poll), or under one key, the "
            "two cannot be told apart"),
    Scenario(
        "my_bytes_alike_in_their_file_they_delete_after_my_save_over_mine",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_create", "/c.md", "same"),
         ("reconcile",)], "push", [("r_delete", "/c.md")],
        second=[("write", "/a.md", "same"), ("save_as", "/a.md")],
        doc="found by Hypothesis (4 December, night), a fault of the oracle: the user writes "
            "'same' to a.md, which their c.md holds too, then saves a.md over with an "
            "editor; their delete of c.md (made meanwhile) then removes the last 'same' here. "
            "The user's write was "
            "written over by the user; their file alike did not stand for it: not lost"),
    Scenario(
        "my_a_then_b_then_a_again_never_applied",
        [("write", "/a.md", "A"), ("push",), ("write", "/a.md", "B"), ("push",),
         ("write", "/a.md", "A")],
        "push", [("write", "/b.md")],
        faults=[FaultRule(Kind("update"), kind="unapplied", times=1)], sole_writer=True,
        doc="found by Hypothesis (5 December), a defect that loses the user's last write: "
            "a.md is written A, then B, then A again, each pushed; the last update is never "
            "applied and gets no answer (a reset, or a 503: the client cannot tell). Its "
            "doubt read the versions since shortly before it was sent, found the first A's "
            "and took the update as applied and written over since: the tree went back to "
            "B, the user's A gone, no conflict. A version older than the newest holding "
            "what the request's precondition named is not the request's "
            "(`decide.doubt_row`, `base`)"),
    Scenario(
        "my_rename_back_and_forth_the_last_never_applied",
        [("write", "/a.md"), ("push",), ("rename", "/a.md", "/b.md"), ("push",),
         ("rename", "/b.md", "/a.md"), ("push",), ("rename", "/a.md", "/b.md")],
        "push", [("write", "/c.md")],
        faults=[FaultRule(Kind("update"), kind="unapplied", times=1)], sole_writer=True,
        doc="SEMANTICS known gap 11 until 5 December: a.md is moved to b.md, back, and to "
            "b.md again, each pushed; the last rename is never applied and gets no answer. "
            "Its doubt found the first move's version at b.md, took the last rename for "
            "applied and written over since, and the file went back to a.md. The versions "
            "the mount had seen before the request went out (an answer's "
            "`memory_version_id`) are not the request's (`decide.doubt_row`, `after`)"),
    Scenario(
        "their_move_back_after_my_rename",
        [("write", "/a.md"), ("push",), ("rename", "/a.md", "/b.md")],
        "push", [("r_rename", "/b.md", "/a.md")], settled_check=their_move_back_stands,
        doc="the case the version seen must not break (5 December): the user's a.md -> b.md "
            "is applied; another writer moves it back before the answer comes, or the "
            "answer is lost. The version at b.md is newer than any the mount had seen "
            "when the move went out: it is the move's, applied and moved since, and their "
            "move back stands (a bound on the bytes alone would take it for the move never "
            "applied and send it again over theirs)"),
    Scenario(
        "my_create_moved_and_moved_back_never_applied",
        [("write", "/a.md"), ("push",), ("rename", "/a.md", "/b.md"), ("push",),
         ("rename", "/b.md", "/a.md")],
        "push", [("write", "/c.md")],
        faults=[FaultRule(Kind("update"), kind="unapplied", times=1)], sole_writer=True,
        doc="the shorter variant: a.md created and moved to b.md, then moved back; the move "
            "back is never applied and gets no answer. The creation's version holds the "
            "same bytes at a.md: it came before the move the mount saw answered"),
    Scenario(
        "their_bytes_and_theirs_over_them_then_mine_alike_out",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_edit", "/b.md", "same"),
         ("r_edit", "/b.md"), ("write", "/b.md", "same")],
        "push", [("write", "/a.md")],
        doc="found by Hypothesis (5 December), a fault of the oracle: another writer writes "
            "'same' to b.md and then edits it again; the user, not having seen either, "
            "writes 'same' too. The update's 409 is lost: its doubt finds b.md held the "
            "user's bytes and went on from them, and takes the update as applied and "
            "written over (answered, the 409 makes a conflict). By content that is a history "
            "the server allows (an update to the bytes a memory holds is a no-op, answered "
            "200 whatever its precondition; their edit went on from them): nothing lost. "
            "The oracle had the user's 'same' as lost; it now lets go of bytes both wrote "
            "that the other writer then wrote over in the memory of the user's file "
            "(`Engine.over_there`, `mine_in`)"),
    Scenario(
        "their_edit_of_a_file_i_delete_and_move_another_onto_during_a_listing",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("r_edit", "/a.md")],
        "reconcile", [("unlink", "/a.md"), ("rename", "/b.md", "/a.md")],
        doc="found by Hypothesis (5 December, just after midnight), a fault of the oracle: "
            "another writer edits a.md; the user removes a.md and moves b.md onto its path "
            "while a listing runs. Their edit cancels the user's delete, and their a.md, "
            "meeting the user's file at its path, is not shown until the path frees (the "
            "merge table); b.md's rename then meets it and the user's bytes are kept as a "
            "conflict. The oracle excused that only for a delete made before the pass "
            "began, and now also for one made while it ran (`Engine.removed_here`)",
        settles_in=AFTER_CONFLICT),
    Scenario(
        "their_delete_of_my_synced_bytes_then_my_write_of_them_over_mine",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("write", "/b.md", "same"),
         ("push",), ("write", "/a.md")], "push",
        [("r_delete", "/b.md"), ("write", "/a.md", "same"), ("write", "/a.md")],
        doc="found by Hypothesis (4 December, late night), a fault of the oracle: b.md's "
            "'same' is synced, another writer deletes b.md, the user writes 'same' to a.md "
            "and then writes a.md over. b.md still held 'same' here (their delete not "
            "applied yet), so the oracle kept the user's 'same' owed through it, and "
            "called it lost when the delete was applied. A file's synced bytes another "
            "writer has deleted or written over since stand for no write of the user's "
            "(`Engine.taken_there`)"),
    Scenario(
        "my_create_unlinked_in_flight_then_a_new_directory_after_a_restart",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("write", "/d/e.md")], "push",
        [("unlink", "/d/e.md")], second=[("rename", "/a.md", "/e/x.md")],
        doc="found by Hypothesis (4 December, late night): our create of /d/e.md is applied, "
            "the user unlinks it, the daemon dies before the answer; restarted, it gave the "
            "next new node (the directory /e the rename makes) the unlinked file's inode, "
            "which the doubt still names: the create's answer landed on the directory and "
            "the memory the user deleted stayed on the server. State's load now numbers "
            "past every inode a doubt names"),
    Scenario(
        "restore_after_the_conflicted_file_moved",
        [("write", "/a.md"), ("write", "/b.md"), ("push",), ("write", "/a.md"),
         ("r_edit", "/a.md")], "push", [("rename", "/a.md", "/c.md")],
        second=[("restore", "/a.md")],
        doc="found by the long Hypothesis run (4 December evening), a fault of the oracle: "
            "the push's conflict keeps ours, the server's edit in the tree; the file moved "
            "to /c.md, then the conflict restored: ours goes into the memory's file at "
            "/c.md (docs/SYNC.md), over the server's edit (kept in its versions), not to "
            "/a.md",
        settles_in=AFTER_CONFLICT),
    Scenario(
        "dirty_buffer_vs_precondition_failure",
        [("write", "/a.md", "base"), ("push",), ("r_edit", "/a.md", "theirs"),
         ("write", "/a.md", "mine")],
        "push", [("open_write", "/a.md", "buffer")], after=[("close", "/a.md")],
        doc="defect 4: an open dirty buffer while the pusher meets a precondition failure; "
            "closed after the pass"),
    Scenario(
        "remote_rename_to_earlier_page_clean", PAGES, "reconcile",
        [("r_rename", "/z.md", "/a.md")], list_limit=2,
        doc="defect 5: listings are 2 a page here; z.md moves to a.md between pages"),
    Scenario(
        "remote_rename_to_earlier_page_dirty", [*PAGES, ("write", "/z.md", "mine")],
        "reconcile", [("r_rename", "/z.md", "/a.md")], list_limit=2,
        doc="defect 5 with a local edit pending on z.md: no duplicate memory"),
    Scenario(
        "fetch_moves_base_between_pages",
        [("r_create", "/a.md", "a"), ("r_create", "/x.md", "x1"), ("r_create", "/y.md", "y"),
         ("r_create", "/z.md", "z"), ("reconcile",), ("r_edit", "/x.md", "x2")],
        "reconcile",
        [("r_edit", "/x.md", "x3"), ("read", "/x.md"), ("write", "/x.md", "mine")],
        list_limit=2,
        doc="defect 6: a cache-miss read moves x.md's base to x3 mid-pass and the user saves "
            "on top of it; the page read earlier (x2) must not turn that into a conflict"),
    Scenario(
        "swap_pushed", [*SWAP, *SWAP_RENAMES], "push", [("r_edit", "@/a.md", "theirs")],
        doc="defect 8: a↔b swap goes out while another client edits one side",
        settles_in=AFTER_MOVE + FAULT_ROUND),  # a failed move, retried the next pass
    Scenario(
        "swap_park_path_taken",
        [*SWAP, ("r_create_park", "@/a.md", "stranger"), ("r_create_park", "@/b.md",
                                                          "stranger2"), *SWAP_RENAMES],
        "flush", [("write", "/c.md", "c")],
        doc="defect 8: the parking path is taken by someone else's memory"),
    Scenario(
        "remote_edit_during_update", PUSHED_X, "push", [("r_edit", "/x.md", "theirs")]),
    Scenario(
        "remote_delete_during_update", PUSHED_X, "push", [("r_delete", "/x.md")],
        settles_in=AFTER_GONE),
    Scenario(
        "remote_edit_during_delete",
        [("write", "/x.md", "v1"), ("push",), ("unlink", "/x.md"), ("age",)], "push",
        [("r_edit", "@/x.md", "theirs")]),
    Scenario(
        "local_create_vs_remote_rename_onto_it",
        [*SWAP, ("write", "/c.md", "mine")], "push", [("r_rename", "/a.md", "/c.md")],
        doc="found by Hypothesis: another client renames one of our memories onto the path "
            "of a local file not created yet; the create meets our own memory, which "
            "cannot follow the rename because the local path is taken"),
    Scenario(
        "local_rename_vs_remote_rename_onto_it",
        [*SWAP, ("rename", "/b.md", "/c.md")], "push", [("r_rename", "/a.md", "/c.md")],
        doc="the rename form of the case above: both sides move a different memory to c.md"),
    Scenario(
        "local_edit_of_remotely_deleted_during_reconcile",
        [*SWAP, ("r_delete", "/a.md")], "reconcile", [("write", "/a.md", "mine")],
        doc="found by Hypothesis: a file deleted on the server is edited here while the "
            "reconcile pass confirms the absence (a lost answer must mean offline)"),
    Scenario(
        "local_edit_during_reconcile",
        [("r_create", "/x.md", "x1"), ("reconcile",), ("r_edit", "/x.md", "x2")],
        "reconcile", [("write", "/x.md", "mine")]),
    # The change feed (issue 13): after a full listing anchors it, a poll asks for the
    # versions since, then re-reads the memories they name.
    Scenario(
        "feed_remote_edit_during_poll",
        [*SWAP, ("reconcile",), ("r_edit", "/a.md", "theirs")], "poll",
        [("r_edit", "/b.md", "theirs b"), ("write", "/a.md", "mine")],
        doc="remote edits before and during a feed poll, with a local edit in the window"),
    Scenario(
        "feed_remote_rename_and_recreate",
        [*SWAP, ("reconcile",), ("r_rename", "/a.md", "/c.md"), ("r_create", "/a.md", "new")],
        "poll", [("r_delete", "/b.md"), ("write", "/c.md", "mine")],
        doc="a rename and a re-create at the same path, a delete while the poll runs"),
    Scenario(
        "feed_two_writes_in_one_poll",
        [*SWAP, ("poll",), ("r_edit", "/a.md", "one"), ("r_edit", "/a.md", "two")],
        "poll", [("r_rename", "/a.md", "/d/a.md"), ("save_as", "/b.md", "saved")],
        doc="two writes to one memory between polls (the feed's newest wins), then more"),
]

def test_the_harness_runs_the_blob_writer(tmp_path: Path, monkeypatch) -> None:
    """The daemon's blob writer runs in every interleaving, and the oracle sees what it
    does: planted, a writer that forgets a staged blob instead of writing it is caught
    (the content is in memory only; the read-back alone would not see it)."""
    from memfs.state.blobs import BlobCache

    scenario = next(s for s in SCENARIOS if s.name == "save_during_update")
    assert not run_one(scenario, tmp_path / "real", ("hold", 0, "after")).violations
    written: list[str] = []
    def forget(self, blobs, stop=None, *, fsync=True) -> int:  # claims all written, writes none
        written.extend(sha for sha, _ in blobs)
        return len(blobs)

    monkeypatch.setattr(BlobCache, "write_staged", forget)
    result = run_one(scenario, tmp_path / "planted", ("hold", 0, "after"))
    assert written, "the blob writer never ran"
    assert "/x.md: 'v3' is in memory only, a restart would lose it" in result.violations


def test_a_scenario_s_settle_bound_counts_the_rounds(tmp_path: Path) -> None:
    """`settles_in` fails a run that settles right but late. The bound's scenarios fail
    with their defects planted (docs/TESTING.md, "The oracle"); here the count itself:
    a run that takes 2 rounds passes a bound of 2 and fails a bound of 1, with that
    violation only."""
    from dataclasses import replace

    scenario = next(s for s in SCENARIOS
                    if s.name == "their_create_meets_my_new_file_moved_away_while_read")
    where = ("hold", 0, "after")
    kept = run_one(scenario, tmp_path / "kept", where)
    assert kept.settle_rounds == 2 and not kept.violations
    tight = run_one(replace(scenario, settles_in=1), tmp_path / "tight", where)
    assert tight.violations == ["settled in 2 push+reconcile rounds, more than the 1 it "
                                "takes (a change came a round late)"]


def test_a_run_killed_twice_may_settle_a_round_later(tmp_path: Path) -> None:
    """A run whose restarted daemon is killed again in its first pass: settling's first
    round does that pass's work, and the run may take `FAULT_ROUND` more than its
    scenario's bound (here their listing, killed, leaves the deletion of a.md's memory
    for the push to meet: 3 rounds, `AFTER_GONE`'s)."""
    from dataclasses import replace

    scenario = next(s for s in SCENARIOS
                    if s.name == "their_create_meets_my_new_file_moved_away_while_read")
    where = ("crash", 0, "before", "then_crash", 0, "before")
    twice = run_one(scenario, tmp_path / "twice", where)
    assert twice.crashed and twice.settle_rounds == 3 and not twice.violations
    tight = run_one(replace(scenario, settles_in=1), tmp_path / "tight", where)
    assert tight.violations == ["settled in 3 push+reconcile rounds, more than the 2 it "
                                "takes (a change came a round late)"]


def _watch_restarts(monkeypatch) -> list[tuple[bool, list[str]]]:
    """Each restart as it happens: (a new engine, the paths of its requests in doubt)."""
    seen: list[tuple[bool, list[str]]] = []
    restart = Engine.restart

    async def watched(self, snapshot, nursery):
        old = self.store
        await restart(self, snapshot, nursery)
        seen.append((old is not self.store, [t.path for t in self.state.doubts.values()]))

    monkeypatch.setattr(Engine, "restart", watched)
    return seen


def _lose_the_journal_at(monkeypatch, kill: int) -> None:
    """Planted: the copy the `kill`-th kill leaves has no `doubts` rows."""
    snapshot = Engine.snapshot

    def forgetful(self) -> Path:
        dest = snapshot(self)
        if self.restarts == kill:
            with contextlib.closing(sqlite3.connect(dest / "state.db")) as db, db:
                db.execute("DELETE FROM doubts")
        return dest

    monkeypatch.setattr(Engine, "snapshot", forgetful)


def test_a_crash_run_restarts_the_daemon_from_disk_alone(tmp_path: Path, monkeypatch) -> None:
    """The crash runs (`explore(crashes=CRASHES)`) kill the daemon with a request on the
    wire and start a new one on what the old one committed: the restarted daemon knows
    of the request only from its journal. Planted, a restart whose journal lost the
    request (its `doubts` rows deleted from the copy) re-sends a create the server had
    applied, and the run fails: the file the user removed comes back."""
    scenario = next(s for s in CROSS if s.name == "create_then_unlink")
    where = ("crash", 0, "after", "restarted")
    seen = _watch_restarts(monkeypatch)
    real = run_one(scenario, tmp_path / "real", where)
    assert not real.violations and real.reached
    assert seen == [(True, ["/d/x.md"])]  # a new engine, the request in doubt from disk
    assert any("the daemon killed and started again" in line for line in real.trace)

    _lose_the_journal_at(monkeypatch, kill=1)
    planted = run_one(scenario, tmp_path / "planted", where)
    assert "the tree has /d/x.md = 'v1', the user left nothing" in planted.violations


def test_a_hold_on_a_request_a_fault_leaves_unapplied_is_reached(tmp_path: Path) -> None:
    """A request held "after" (or "lose") that a fault then leaves unapplied, with no
    answer, is held on the wire all the same: the hold is reached and the run goes on to
    the next one. (Before, the fault's reset came first; the hold was never reached while
    the action was parked on the later one: a run that never ended, found by the random
    search drawing both.) And a crash run leaves no state directory behind once it
    passes, the restarted daemon's included."""
    scenario = Scenario("unapplied_held", [("write", "/a.md", "a1"), ("write", "/b.md", "b1")],
                        "push", [("write", "/a.md", "a2")], second=[("write", "/b.md", "b2")],
                        faults=[FaultRule(Kind("create"), kind="unapplied", times=1)],
                        sole_writer=True)
    result = run_one(scenario, tmp_path / "run", ("holds", (0, "lose"), (1, "before")))
    assert result.reached and result.together and result.faulted == 1, result.label
    assert not result.violations, result.violations
    crash = next(s for s in CROSS if s.name == "create_then_unlink")
    assert not run_one(crash, tmp_path / "crash", ("crash", 0, "after", "restarted")).violations
    assert list(tmp_path.iterdir()) == []


def test_a_second_crash_kills_the_restarted_daemon_in_its_first_pass(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """`explore(twice=True)` kills the restarted daemon too, while its first pass (the one
    that settles the first daemon's requests in doubt) has a request on the wire. The
    crash run counts that pass's requests; each is then held at each point and the
    daemon killed again: a third engine starts on what the second one left, and still
    finds the request in doubt (the second one never learned its outcome). Planted, a
    second restart whose journal lost the doubt fails as the first one does."""
    scenario = next(s for s in CROSS if s.name == "create_then_unlink")
    once = run_one(scenario, tmp_path / "once", ("crash", 0, "after", "restarted"))
    assert not once.violations and once.recovery >= 1  # the doubt's read, at least
    where = ("crash", 0, "after", "restarted", 0, "before")
    seen = _watch_restarts(monkeypatch)
    twice = run_one(scenario, tmp_path / "twice", where)
    assert not twice.violations and twice.reached, twice.violations
    assert seen == [(True, ["/d/x.md"]), (True, ["/d/x.md"])]
    assert "killed again at its first pass's request 0, not applied" in twice.label

    _lose_the_journal_at(monkeypatch, kill=2)  # the second kill's copy only
    planted = run_one(scenario, tmp_path / "planted", where)
    assert "the tree has /d/x.md = 'v1', the user left nothing" in planted.violations


def _record_transports(monkeypatch) -> list[HeldTransport]:
    """Every run's transport, as it is made (its records: what was sent, what landed)."""
    transports: list[HeldTransport] = []
    init = HeldTransport.__init__

    def recorded(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        transports.append(self)

    monkeypatch.setattr(HeldTransport, "__init__", recorded)
    return transports


def test_a_late_request_lands_among_a_full_listings_pages(tmp_path: Path,
                                                        monkeypatch) -> None:
    """The "late_page<j>" outcomes land the request inside the full listing pass the
    mount runs while it waits: after that pass asked about it, before the listing (1)
    and before the file's directory is read (2). And the oracle looks at the tree after
    every pass of the wait, not only once the run has settled: planted, the defect
    afe411a fixed (a full listing taking the memory a late create made for a new one of
    another writer's, so the file the user removed comes back until the wait is over)
    fails those runs, and no run of the exploration saw it before."""
    from memfs.sync.reconciler import Reconciler

    scenario = next(s for s in CROSS if s.name == "create_then_unlink")
    transports = _record_transports(monkeypatch)
    for j in (1, 2):
        assert not run_one(scenario, tmp_path / f"page{j}",
                           ("outcome", 0, f"late_page{j}")).violations
        records = transports[-1].records
        create = next(r for r in records if r.index == 0)  # "applied late (200) before #n"
        landed = int(create.outcome.rsplit("#", 1)[1])
        listings = [r.seq for r in records if r.origin == "after" and r.is_listing]
        assert landed == listings[j - 1], (create.outcome, listings)
        if j == 1:  # the pass asked about the create first
            assert records[landed - 1].path.endswith("/memory_versions")

    monkeypatch.setattr(Reconciler, "_create_in_doubt", lambda self, path: False)
    for outcome in ("late_page1", "late_page2"):
        planted = run_one(scenario, tmp_path / f"planted-{outcome}", ("outcome", 0, outcome))
        assert "after the wait's listing pass, the tree has /d/x.md = 'v1', the user left " \
               "nothing" in planted.violations, (outcome, planted.violations)


def test_a_request_applied_after_the_kill_lands_among_the_restarted_daemons_passes(
        tmp_path: Path, monkeypatch) -> None:
    """A "late3" crash: the daemon killed before the server applied the request, which
    the server then applies all the same, among the passes the restarted daemon runs
    within its lost-answer wait; that daemon knows of it only from its journal. The
    same plant as above fails it: the unlinked file comes back while the wait lasts."""
    from memfs.sync.reconciler import Reconciler

    scenario = next(s for s in CROSS if s.name == "create_then_unlink")
    transports = _record_transports(monkeypatch)
    seen = _watch_restarts(monkeypatch)
    where = ("crash", 0, "late3", "restarted")
    real = run_one(scenario, tmp_path / "real", where)
    assert not real.violations and real.reached and real.crashed
    assert seen == [(True, ["/d/x.md"])]  # a new engine, the request in doubt from disk
    records = transports[-1].records
    create = next(r for r in records if r.index == 0)
    landed = int(create.outcome.rsplit("#", 1)[1])
    assert [r.origin for r in records[create.seq + 1:landed + 1]] == ["after"] * 3

    monkeypatch.setattr(Reconciler, "_create_in_doubt", lambda self, path: False)
    planted = run_one(scenario, tmp_path / "planted", where)
    assert "after the wait's poll pass, the tree has /d/x.md = 'v1', the user left " \
           "nothing" in planted.violations, planted.violations


def test_a_hold_past_a_varying_count_is_excused_only_then(monkeypatch, tmp_path: Path) -> None:
    """`conflict_restored_while_the_push_is_out` sends 4 requests alone, and 6 in about
    1 run of 30 on a loaded machine (its pass's concurrent sends in the other order).
    When its run alone took the longer path, the runs holding requests 4 and 5 never
    reach them; `explore` excuses them only once two more runs alone show the count
    varies, and only a run that sent one of the shorter counts seen."""
    import interleave

    scenario = next(s for s in SCENARIOS if s.name == "conflict_restored_while_the_push_is_out")
    alone = RunResult("alone", requests=6)
    usual = RunResult("k=4 before", requests=4, reached=False)
    short = RunResult("k=2 before", requests=2, reached=False)  # no run alone sent 2
    monkeypatch.setattr(interleave, "run_one", lambda *a, **k: RunResult("alone", requests=4))
    interleave._excuse_a_varying_count(scenario, tmp_path, [alone, usual, short])
    assert usual.excused and "excused: the action alone sends [4, 6]" in usual.label
    assert not short.excused
    steady = RunResult("k=4 before", requests=4, reached=False)
    monkeypatch.setattr(interleave, "run_one", lambda *a, **k: RunResult("alone", requests=6))
    interleave._excuse_a_varying_count(scenario, tmp_path, [alone, steady])
    assert not steady.excused  # always 6: a hold not reached is a failure


# -- lost answers: every request kind x every outcome x every local operation -------------
#
# The action sends one request for /d/x.md (a sibling, /d/k.md, is on the server). Each
# (kind, operation) pair is explored at every hold point (the operation while the request
# is on the wire), with every outcome (the operation after the action, while memfs does
# not know what the server did) and with the daemon killed while the request is on the
# wire, applied or not (the operation just before the kill, or after the restart). The
# mount is the only writer: settling must leave exactly the tree the user made.

SIBLING = [("write", "/d/k.md", "k"), ("push",)]
REQUEST_KINDS = {  # kind -> (setup, the file's path when the action starts)
    "create": ([*SIBLING, ("write", "/d/x.md", "v1")], "/d/x.md"),
    "update": ([*SIBLING, ("write", "/d/x.md", "v1"), ("push",), ("write", "/d/x.md", "v2")],
               "/d/x.md"),
    "rename": ([*SIBLING, ("write", "/d/x.md", "v1"), ("push",),
                ("rename", "/d/x.md", "/d/y.md")], "/d/y.md"),
    "delete": ([*SIBLING, ("write", "/d/x.md", "v1"), ("push",), ("unlink", "/d/x.md"),
                ("age",)], "/d/x.md"),
}
LOCAL_OPS = {  # operation -> steps on the file at path f
    "none": lambda f: [],
    "write": lambda f: [("write", f, "mine")],
    "editor_save": lambda f: [("save_as", f, "saved")],
    "rename": lambda f: [("rename", f, "/d/z.md")],
    "unlink": lambda f: [("unlink", f)],
    "rename_parent": lambda f: [("rename", "/d", "/e")],
    "remove_parent_tree": lambda f: [("rmtree", "/d")],
}
CROSS = [Scenario(f"{kind}_then_{op}", setup, "push", steps(path), sole_writer=True)
         for kind, (setup, path) in REQUEST_KINDS.items()
         for op, steps in LOCAL_OPS.items()]

# The park: a.md and b.md swap names (a→c, b→a, c→b), plain or both edited first; push
# passes run in a row. a's rename to /b.md meets b's memory (409), so a's memory is
# parked at /.memfs-moving/… (a path-only update), then b's goes to /a.md and a's to
# /b.md. Every one of those 4 requests is explored at every hold point and with every
# outcome, a local operation on one swapped file meanwhile.
SWAP_CYCLE = [("rename", "/a.md", "/c.md"), ("rename", "/b.md", "/a.md"),
              ("rename", "/c.md", "/b.md")]
SWAP_KINDS = {
    "swap": [("write", "/a.md", "A"), ("write", "/b.md", "B"), ("push",), *SWAP_CYCLE],
    "edited_swap": [("write", "/a.md", "A"), ("write", "/b.md", "B"), ("push",),
                    ("write", "/a.md", "A2"), ("write", "/b.md", "B2"), *SWAP_CYCLE],
}
SWAP_OPS = {"none": lambda f: [], **{op: LOCAL_OPS[op] for op in ("write", "unlink")},
            "rename": lambda f: [("rename", f, "/z.md")]}


def parked_once(eng: Engine, result: RunResult) -> list[str]:
    """A park the server applied (answered or not) is the memory's last: the next pass
    finds it applied and moves the memory on from there (before 55a1a71 a lost park
    answer was judged not applied: a history read, a 409 and a second park)."""
    applied: dict[str, int] = {}
    for rec in eng.transport.records:
        if rec.method == "POST" and rec.memory_id and rec.status == 200 \
                and str((rec.body or {}).get("path", "")).startswith(RESERVED_PREFIX):
            applied[rec.memory_id] = applied.get(rec.memory_id, 0) + 1
    return [f"{eng.mname(mid)} was parked {n} times" for mid, n in sorted(applied.items())
            if n > 1]


PARK = [Scenario(f"{kind}_then_{op}" + ("" if op == "none" else f"_{f[1]}"), setup, "pushes",
                 steps(f), settled_check=parked_once, sole_writer=True,
                 settles_in=AFTER_MOVE)
        for kind, setup in SWAP_KINDS.items() for op, steps in SWAP_OPS.items()
        for f in (("/a.md",) if op == "none" else ("/a.md", "/b.md"))]


@pytest.mark.parametrize("scenario", [*CROSS, *PARK], ids=lambda s: s.name)
def test_lost_answers(scenario: Scenario, harness_tmp: Path) -> None:
    """Each scenario with every outcome and the daemon killed (the request applied
    before the kill, never, or after it: `LATE_CRASHES`); the request kinds x local
    operations (CROSS) also with the restarted daemon killed again in its first pass (the
    swaps too in the long run, docs/TESTING.md)."""
    twice = scenario in CROSS or LONG
    result = explore(scenario, harness_tmp, outcomes=OUTCOMES + (ANSWERED_BADLY if LONG else ()),
                     crashes=CRASHES + LATE_CRASHES, twice=twice)
    print(f"\n{scenario.name}: {len(result.runs)} interleavings")
    if result.failures:
        pytest.fail(result.summary(), pytrace=False)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_scenario(scenario: Scenario, harness_tmp: Path) -> None:
    result = explore(scenario, harness_tmp, crashes=CRASHES + (LATE_CRASHES if LONG else ()),
                     twice=LONG)
    pairs = ", and pairs of holds" if scenario.second else ""
    print(f"\n{scenario.name}: {len(result.runs)} interleavings ({result.n} action "
          f"requests x ({len(scenario.points)} points + 4 crashes) + 3{pairs})")
    if result.failures:
        pytest.fail(result.summary(), pytrace=False)


# -- Hypothesis on top ------------------------------------------------------------------------

PATHS = ("/a.md", "/b.md", "/c.md", "/d/e.md")
_path = st.sampled_from(PATHS)
#: Where a file may be moved: /e/e.md is a directory's file that only a move makes.
_to = st.sampled_from((*PATHS, "/e/e.md"))
#: Directories are moved onto directory names only: a file where another writer's memory
#: sits below (a file /d, their /d/e.md) waits, reported, until the user moves one
#: (docs/SYNC.md), which a settled run cannot show.
_dirs = st.sampled_from(("/d", "/e"))
LOCAL = st.one_of(
    st.tuples(st.just("write"), _path),
    # the same bytes again, in any file (`git checkout`, `cp`): identity shortcuts on
    # identical content (a revive, a take-back, a lost create named by path and sha)
    st.tuples(st.just("write"), _path, st.just("same")),
    st.tuples(st.just("save_as"), _path),
    st.tuples(st.just("rename"), _to, _to),
    st.tuples(st.just("rename"), _dirs, st.sampled_from(("/d", "/e", "/e/d"))),
    st.tuples(st.just("rmtree"), _dirs),
    st.tuples(st.just("unlink"), _path),
    st.tuples(st.just("open_write"), _path),
    st.tuples(st.just("close"), _path),
    st.tuples(st.just("restore"), _path),
    st.tuples(st.just("discard")),  # the newest conflict, wherever it is
    st.tuples(st.just("read"), _path),
)
REMOTE = st.one_of(
    st.tuples(st.just("r_edit"), _path),
    st.tuples(st.just("r_create"), _path),
    # bytes a file already holds (a copy, an edit both sides made alike)
    st.tuples(st.just("r_edit"), _path, st.just("same")),
    st.tuples(st.just("r_create"), _path, st.just("same")),
    st.tuples(st.just("r_delete"), _path),
    st.tuples(st.just("r_rename"), _path, _to),
    st.tuples(st.just("r_redact"), _path),
)
SYNC = st.sampled_from([("push",), ("reconcile",), ("poll",), ("age",)])


#: What happens to the requests that clean up after the action (the passes of the
#: lost-answer wait, a restarted daemon's first pass, settling), or to the action's own
#: as well: one to three of one kind (or of any; three: every attempt of a read the
#: client retries), the first or a later one, lose their answer too, are never applied
#: (no answer) or fail (503). A retry of the lost request, the read that resolves its
#: doubt, the delete of what it left; another request of the same pass.
AFTERMATH = st.one_of(st.none(), st.builds(
    lambda kind, fault, times, skip, origins: FaultRule(
        Kind(kind), kind=fault, origins=origins, times=times, skip=skip),
    st.sampled_from(["any", "create", "update", "delete", "read", "list"]),
    st.sampled_from(["lose", "unapplied", "fail"]), st.integers(1, CLIENT_RETRIES + 1),
    st.integers(0, 2),
    st.sampled_from([("after", "settle"), ("action", "after", "settle")])))


#: How a drawn case's mount may start: it created a.md and b.md (so it can learn who it
#: writes as from its own creation); or it adopted them from another writer and created
#: nothing (it cannot, the path of a mount that only edits); or it adopted three and
#: deleted one (a delete of its own is its witness).
BASES = [
    [("write", "/a.md"), ("write", "/b.md"), ("push",)],
    [("r_create", "/a.md"), ("r_create", "/b.md"), ("reconcile",)],
    [("r_create", "/a.md"), ("r_create", "/b.md"), ("r_create", "/c.md"), ("reconcile",),
     ("unlink", "/c.md"), ("age",), ("push",)],
]


@st.composite
def cases(draw) -> tuple[Scenario, tuple]:
    setup = list(draw(st.sampled_from(BASES)))  # a copy: `+=` below must not grow BASES
    setup += draw(st.lists(st.one_of(LOCAL, REMOTE, SYNC), min_size=SETUP_MIN,
                           max_size=SETUP_MAX))
    scenario = Scenario(
        "hypothesis", setup,
        draw(st.sampled_from(["push", "pushes", "flush", "reconcile", "poll"])),
        draw(st.lists(st.one_of(LOCAL, REMOTE), min_size=1, max_size=3)),
        second=draw(st.lists(st.one_of(LOCAL, REMOTE), max_size=2)),
        list_limit=draw(st.sampled_from([None, 2])), settles_in=None)
    fault = draw(AFTERMATH)
    if fault is not None:
        scenario.faults = [fault]
    hold = st.tuples(st.integers(0, 3), st.sampled_from(FAULT_POINTS))
    where = draw(st.one_of(
        st.tuples(st.just("hold"), st.integers(0, 3), st.sampled_from(FAULT_POINTS)),
        st.tuples(st.just("outcome"), st.integers(0, 3),
                  st.sampled_from(OUTCOMES + ANSWERED_BADLY)),
        st.tuples(st.just("crash"), st.integers(0, 3), st.sampled_from(CRASHES + LATE_CRASHES)).map(
            lambda w: (w[0], w[1], *w[2])),
        st.tuples(st.just("crash"), st.integers(0, 3), st.sampled_from(CRASHES + LATE_CRASHES),
                  st.integers(0, 3), st.sampled_from(POINTS)).map(  # killed twice
            lambda w: (w[0], w[1], *w[2], w[3], w[4])),
        st.tuples(st.sampled_from(["holds", "nested"]), hold, hold).filter(
            lambda w: w[1][0] < w[2][0])))
    return scenario, where


@settings(max_examples=HYPOTHESIS_EXAMPLES, deadline=None, derandomize=not LONG,
          database=None, phases=[p for p in Phase if p is not Phase.explain],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases())
def test_random_interleavings(case: tuple[Scenario, tuple]) -> None:
    scenario, where = case
    with tempfile.TemporaryDirectory(prefix="memfs-interleave-", dir=scratch_root()) as d:
        result = run_one(scenario, Path(d), where, kind="hypothesis")
    if result.violations:
        replay = (f"run_one(Scenario('replay', {scenario.setup!r}, {scenario.action!r}, "
                  f"{scenario.interference!r}, second={scenario.second!r}, "
                  f"list_limit={scenario.list_limit!r}, faults={scenario.faults!r}), "
                  f"tmp, {where!r})")
        pytest.fail("\n".join([f"{scenario.action} at {result.label} (the action sent "
                               f"{result.requests} requests):", *result.violations,
                               f"replay: {replay}", "trace:", *result.trace]),
                    pytrace=False)

