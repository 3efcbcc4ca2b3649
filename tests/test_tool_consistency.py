"""Read-modify-write, step by step: `memfs serve`'s request gate holds the tool's write
while another writer changes the memory, so each interleaving happens every time.

What the issue asks: on a precondition failure the command is re-read and re-applied to
the fresh content; if it no longer applies, the error says so honestly; a write whose
answer was lost is neither reported as failed nor applied twice.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from gate import Gate
from synchelpers import sdk_by_path, sdk_create
from toolutil import new_store, outcome, store_files, sync_tool, with_engine

from memfs.tool import MemoryStoreTool

pytestmark = pytest.mark.timeout(60)

UPDATE = r"/memories/mem_"  # POST here is an update (a create is POST .../memories)
CREATE = r"/memories$"


class Background:
    """One tool command running in a thread (it blocks while the gate holds it)."""

    def __init__(self, tool: Any, command: dict[str, Any]) -> None:
        self.result: tuple[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, args=(tool, command), daemon=True)
        self._thread.start()

    def _run(self, tool: Any, command: dict[str, Any]) -> None:
        self.result = outcome(tool, command)

    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self) -> tuple[str, Any]:
        self._thread.join(30)
        assert self.result is not None, "the tool command did not finish"
        return self.result


def setup(server, files: dict[str, str]):
    store = new_store(server)
    sdk = server.sdk()
    ids = {
        path: sdk.beta.memory_stores.memories.create(store, path=path, content=text).id
        for path, text in files.items()
    }
    return store, sdk, ids


def meanwhile(server, command: dict[str, Any], method: str, path: str, change) -> tuple:
    """Run ``command`` with its first ``method`` request to ``path`` held before it
    applies; ``change()`` runs while it is held. Returns the command's outcome."""
    with Gate(server) as gate:
        gate.hold(method, path, when="before", count=1)
        job = Background(sync_tool(server, command.pop("_store")), command)
        gate.wait_held(1)
        change()
        gate.release()
        return job.join()


def test_an_edit_is_reapplied_to_the_fresh_content(server):
    store, sdk, ids = setup(server, {"/todo.md": "a\nb\n"})
    result = meanwhile(
        server,
        {"_store": store, "command": "insert", "path": "/memories/todo.md",
         "insert_line": 0, "insert_text": "mine"},
        "POST", UPDATE,
        lambda: sdk.beta.memory_stores.memories.update(
            ids["/todo.md"], memory_store_id=store, content="a\nb\ntheirs\n"),
    )
    assert result == ("ok", "The file /memories/todo.md has been edited.")
    assert store_files(server, store) == {"/todo.md": "mine\na\nb\ntheirs\n"}


def test_a_replacement_whose_text_vanished_fails_honestly(server):
    store, sdk, ids = setup(server, {"/prefs.md": "color: blue\n"})
    result = meanwhile(
        server,
        {"_store": store, "command": "str_replace", "path": "/memories/prefs.md",
         "old_str": "blue", "new_str": "green"},
        "POST", UPDATE,
        lambda: sdk.beta.memory_stores.memories.update(
            ids["/prefs.md"], memory_store_id=store, content="color: red\n"),
    )
    assert result == ("error", "No replacement was performed, old_str `blue` did not appear "
                               "verbatim in /memories/prefs.md.")
    assert store_files(server, store) == {"/prefs.md": "color: red\n"}


def test_a_replacement_that_became_ambiguous_fails_honestly(server):
    store, sdk, ids = setup(server, {"/prefs.md": "color: blue\n"})
    result = meanwhile(
        server,
        {"_store": store, "command": "str_replace", "path": "/memories/prefs.md",
         "old_str": "blue", "new_str": "green"},
        "POST", UPDATE,
        lambda: sdk.beta.memory_stores.memories.update(
            ids["/prefs.md"], memory_store_id=store, content="color: blue\nfont: blue\n"),
    )
    assert result == ("error", "No replacement was performed. Multiple occurrences of old_str "
                               "`blue` in lines: 1, 2. Please ensure it is unique")
    assert store_files(server, store) == {"/prefs.md": "color: blue\nfont: blue\n"}


def test_a_memory_deleted_meanwhile_is_reported_missing(server):
    store, sdk, ids = setup(server, {"/x.md": "x\n"})
    result = meanwhile(
        server,
        {"_store": store, "command": "str_replace", "path": "/memories/x.md",
         "old_str": "x", "new_str": "y"},
        "POST", UPDATE,
        lambda: sdk.beta.memory_stores.memories.delete(ids["/x.md"], memory_store_id=store),
    )
    assert result == ("error", "The path /memories/x.md does not exist. Please provide a valid "
                               "path.")
    assert store_files(server, store) == {}


def test_a_delete_applies_to_what_the_file_became(server):
    store, sdk, ids = setup(server, {"/x.md": "x\n"})
    result = meanwhile(
        server,
        {"_store": store, "command": "delete", "path": "/memories/x.md"},
        "DELETE", UPDATE,
        lambda: sdk.beta.memory_stores.memories.update(
            ids["/x.md"], memory_store_id=store, content="edited\n"),
    )
    assert result == ("ok", "Successfully deleted /memories/x.md")
    assert store_files(server, store) == {}


def test_a_rename_applies_to_what_the_file_became(server):
    store, sdk, ids = setup(server, {"/x.md": "x\n"})
    result = meanwhile(
        server,
        {"_store": store, "command": "rename", "old_path": "/memories/x.md",
         "new_path": "/memories/y.md"},
        "POST", UPDATE,
        lambda: sdk.beta.memory_stores.memories.update(
            ids["/x.md"], memory_store_id=store, content="edited\n"),
    )
    assert result == ("ok", "Successfully renamed /memories/x.md to /memories/y.md")
    assert store_files(server, store) == {"/y.md": "edited\n"}


def test_a_create_that_loses_the_race_says_the_file_exists(server):
    store, sdk, _ = setup(server, {})
    result = meanwhile(
        server,
        {"_store": store, "command": "create", "path": "/memories/n.md", "file_text": "mine"},
        "POST", CREATE,
        lambda: sdk.beta.memory_stores.memories.create(store, path="/n.md", content="theirs"),
    )
    assert result == ("error", "File /memories/n.md already exists")
    assert store_files(server, store) == {"/n.md": "theirs"}


def lost_answer(server, store: str, command: dict[str, Any], path: str, change=None, *,
                method: str = "POST"):
    """Run ``command`` so that its write is applied but the answer never arrives: the
    response is held after the commit (``change()`` runs meanwhile), then the
    connection is reset instead of answered. The client does not send it again
    (memfs/api/client.py); the command reads the history."""
    with Gate(server) as gate:
        gate.hold(method, path, when="after", count=1, drop=True)
        job = Background(sync_tool(server, store), command)
        [first] = gate.wait_held(1)
        assert first["status"] < 300, first  # applied and committed: the window is open
        if change is not None:
            change()
        gate.release(first["seq"])
        return job.join()


def test_an_edit_whose_answer_was_lost_is_not_applied_twice(server):
    store, sdk, ids = setup(server, {"/log.md": "a\n"})
    result = lost_answer(
        server, store,
        {"command": "insert", "path": "/memories/log.md", "insert_line": 1,
         "insert_text": "mine"},
        UPDATE,
        # Another writer builds on our (saved, unanswered) write before we learn of it.
        lambda: sdk.beta.memory_stores.memories.update(
            ids["/log.md"], memory_store_id=store, content="a\nmine\ntheirs\n"),
    )
    assert result == ("ok", "The file /memories/log.md has been edited.")
    assert store_files(server, store) == {"/log.md": "a\nmine\ntheirs\n"}


def test_a_create_whose_answer_was_lost_is_reported_created(server):
    store, _, _ = setup(server, {})
    result = lost_answer(
        server, store,
        {"command": "create", "path": "/memories/n.md", "file_text": "mine"},
        CREATE,
    )
    assert result == ("ok", "File created successfully at: /memories/n.md")
    assert store_files(server, store) == {"/n.md": "mine"}


ANSWERED_AN_ERROR = {
    "create": ({"command": "create", "path": "/memories/n.md", "file_text": "mine"}, "POST",
               CREATE, "File created successfully at: /memories/n.md",
               {"/x.md": "x\n", "/n.md": "mine"}),
    "str_replace": ({"command": "str_replace", "path": "/memories/x.md", "old_str": "x",
                     "new_str": "y"}, "POST", UPDATE,
                    "The memory file has been edited.", {"/x.md": "y\n"}),
    "rename": ({"command": "rename", "old_path": "/memories/x.md",
                "new_path": "/memories/y.md"}, "POST", UPDATE,
               "Successfully renamed /memories/x.md to /memories/y.md", {"/y.md": "x\n"}),
    "delete": ({"command": "delete", "path": "/memories/x.md"}, "DELETE", UPDATE,
               "Successfully deleted /memories/x.md", {}),
}


@pytest.mark.parametrize("status", [500, 502])
@pytest.mark.parametrize("name", list(ANSWERED_AN_ERROR))
def test_a_write_applied_then_answered_an_error_is_reported_done_once(server, name, status):
    """The server applies the write and answers a 5xx instead of its result (a gateway cut
    off after the commit): the command reads the history, finds its write, and says it
    is done; nothing is applied twice."""
    command, method, path, said, after = ANSWERED_AN_ERROR[name]
    store, sdk, ids = setup(server, {"/x.md": "x\n"})
    with Gate(server) as gate:
        rule = gate.refuse(method, path, status, count=1, when="after")
        result = Background(sync_tool(server, store), dict(command)).join()
        assert gate.snapshot()["rules"][0]["caught"] == rule["count"]  # it was answered so
    assert result[0] == "ok" and said in result[1], result
    assert store_files(server, store) == after
    versions = [v.operation for v in sdk.beta.memory_stores.memory_versions.list(store)]
    assert len(versions) == 2, versions  # x.md's creation, then the one write


def test_directory_delete_and_rename_act_on_every_memory_below(server):
    files = {"/d/a.md": "1", "/d/.hidden": "2", "/d/e/f/g/deep.md": "3", "/other.md": "4"}
    store, sdk, ids = setup(server, files)
    tool = sync_tool(server, store)
    assert tool.call({"command": "rename", "old_path": "/memories/d", "new_path": "/memories/n/m"}
                     ) == "Successfully renamed /memories/d to /memories/n/m"
    assert store_files(server, store) == {
        "/n/m/a.md": "1", "/n/m/.hidden": "2", "/n/m/e/f/g/deep.md": "3", "/other.md": "4"}
    moved = {m.path: m.id for m in sdk.beta.memory_stores.memories.list(store)}
    assert moved["/n/m/e/f/g/deep.md"] == ids["/d/e/f/g/deep.md"]  # a rename keeps the id
    deleted = tool.call({"command": "delete", "path": "/memories/n"})
    assert deleted == "Successfully deleted /memories/n"
    assert store_files(server, store) == {"/other.md": "4"}


# -- a lost answer, then another writer, before the command learns what happened -----------
#
# The tool's write is applied, its answer dropped (the connection reset); while the answer
# is held another writer changes the same memory. Each command must report what happened
# to its own write, and nothing another writer did may be undone: before the client stopped
# re-sending such writes blindly, 6 of these 13 failed (a create's retry re-created the file
# they deleted or duplicated the one they moved; a rename's moved theirs back; the rest
# reported a failure for a write that had landed).

def _their(action: str, path: str, to: str | None = None):
    """Another writer's change to the memory at `path` (looked up when it runs)."""

    def run(server, store: str) -> None:
        mems = server.sdk().beta.memory_stores.memories
        mid = sdk_by_path(server, store)[path].id
        if action == "edit":
            mems.update(mid, memory_store_id=store, content="theirs\n")
        elif action == "delete":
            mems.delete(mid, memory_store_id=store)
        else:
            mems.update(mid, memory_store_id=store, path=to)

    return run


def _their_create(path: str):
    def run(server, store: str) -> None:
        sdk_create(server, store, path, "theirs\n")

    return run


CREATED = ("ok", "File created successfully at: /memories/n.md")
RENAMED = ("ok", "Successfully renamed /memories/x.md to /memories/y.md")
EDITED = ("ok", "The memory file has been edited. Here is the snippet showing the change "
                 "(with line numbers):\n     1\tv2\n     2\t")
DELETED = ("ok", "Successfully deleted /memories/x.md")
CREATE_N = {"command": "create", "path": "/memories/n.md", "file_text": "mine\n"}
RENAME_XY = {"command": "rename", "old_path": "/memories/x.md", "new_path": "/memories/y.md"}
REPLACE_X = {"command": "str_replace", "path": "/memories/x.md", "old_str": "v1",
             "new_str": "v2"}
DELETE_X = {"command": "delete", "path": "/memories/x.md"}
LOST_THEN = {  # name -> (command, method, path, their change, answer, the store after)
    "create_then_none": (CREATE_N, "POST", CREATE, None, CREATED, {"/n.md": "mine\n"}),
    "create_then_their_edit": (CREATE_N, "POST", CREATE, _their("edit", "/n.md"), CREATED,
                               {"/n.md": "theirs\n"}),
    "create_then_their_delete": (CREATE_N, "POST", CREATE, _their("delete", "/n.md"),
                                 CREATED, {}),
    "create_then_their_rename": (CREATE_N, "POST", CREATE, _their("rename", "/n.md", "/m.md"),
                                 CREATED, {"/m.md": "mine\n"}),
    "rename_then_none": (RENAME_XY, "POST", UPDATE, None, RENAMED, {"/y.md": "v1\n"}),
    "rename_then_their_edit": (RENAME_XY, "POST", UPDATE, _their("edit", "/y.md"), RENAMED,
                               {"/y.md": "theirs\n"}),
    "rename_then_their_delete": (RENAME_XY, "POST", UPDATE, _their("delete", "/y.md"),
                                 RENAMED, {}),
    "rename_then_their_rename": (RENAME_XY, "POST", UPDATE,
                                 _their("rename", "/y.md", "/z.md"), RENAMED, {"/z.md": "v1\n"}),
    "edit_then_none": (REPLACE_X, "POST", UPDATE, None, EDITED, {"/x.md": "v2\n"}),
    "edit_then_their_delete": (REPLACE_X, "POST", UPDATE, _their("delete", "/x.md"), EDITED,
                               {}),
    "edit_then_their_rename": (REPLACE_X, "POST", UPDATE, _their("rename", "/x.md", "/z.md"),
                               EDITED, {"/z.md": "v2\n"}),
    "delete_then_none": (DELETE_X, "DELETE", UPDATE, None, DELETED, {}),
    "delete_then_their_create": (DELETE_X, "DELETE", UPDATE, _their_create("/x.md"), DELETED,
                                 {"/x.md": "theirs\n"}),
}


@pytest.mark.parametrize("name", LOST_THEN)
def test_a_lost_answer_then_another_writer(server, name):
    command, method, path, change, answer, after = LOST_THEN[name]
    store, _, _ = setup(server, {} if command is CREATE_N else {"/x.md": "v1\n"})
    result = lost_answer(server, store, dict(command), path, method=method,
                         change=change and (lambda: change(server, store)))
    assert (result, store_files(server, store)) == (answer, after)


#: The edit the two tests below hold past the client's timeout (1 s).
INSERT_MINE = {"command": "insert", "path": "/memories/log.md", "insert_line": 1,
               "insert_text": "mine"}


def test_an_unanswered_edit_that_lands_late_is_not_applied_twice(server):
    """The update gets no answer and is not applied yet (the gate's `late` rule): the
    history shows nothing, so the tool reads the file again to send the edit once more
    -- and its first attempt lands just then, while the tool's lookup is held. The edit
    is in the file once, and reported done."""
    store, _, _ = setup(server, {"/log.md": "a\n"})
    tool = with_engine(sync_tool(server, store), timeout=1.0, backoff_base=0.01)
    with Gate(server) as gate:
        gate.hold("POST", UPDATE, when="late", count=1)
        gate.hold("GET", r"/memory_versions$", when="before", count=1)
        job = Background(tool, dict(INSERT_MINE))
        [update] = [h for h in gate.wait_held(1) if h["when"] == "late"]
        [history] = [h for h in gate.wait_held(2) if h["seq"] != update["seq"]]
        gate.hold("GET", r"/memories$", when="before", count=1)  # the next lookup
        gate.release(history["seq"])                              # "not applied"
        [lookup] = [h for h in gate.wait_held(2) if h["seq"] != update["seq"]]
        gate.release(update["seq"])                               # it lands now
        gate.release(lookup["seq"])
        result = job.join()
    assert result == ("ok", "The file /memories/log.md has been edited.")
    assert store_files(server, store) == {"/log.md": "a\nmine\n"}


def test_an_unanswered_edit_not_in_the_history_is_sent_again(server):
    """The update gets no answer and is not applied while the command runs (the gate's
    `late` rule): the history shows nothing, the tool sends the edit again (its
    precondition makes that safe), and it is there once. The first attempt, applied
    after, meets that precondition no longer holding and changes nothing."""
    store, _, _ = setup(server, {"/log.md": "a\n"})
    tool = with_engine(sync_tool(server, store), timeout=1.0, backoff_base=0.01)
    with Gate(server) as gate:
        gate.hold("POST", UPDATE, when="late", count=1)
        result = Background(tool, dict(INSERT_MINE)).join()
        assert len(gate.release()) == 1                           # the first one lands
    assert result == ("ok", "The file /memories/log.md has been edited.")
    assert store_files(server, store) == {"/log.md": "a\nmine\n"}


# -- a write that lands late: not sent again while it still may ------------------------------
#
# The write gets no answer and is not applied yet (the gate's `late` rule: its connection
# reset, the write applied when the test releases it): the server may still apply it
# (api_errors.may_land_later). Sent again at once, the resend lands, the agent (or anyone)
# undoes it, and then the original lands and undoes the undo: a deleted file comes back, a
# file moved back is moved away again. So the tool reads the history again (about once a
# second) until `lost_answer_wait` has passed, and sends the write again only then. Before
# it did, both cases below ended with the original's effect.

VERSIONS = r"/memory_versions$"

LATE = {  # name -> (command, its write's path, answer, the undo, the store after)
    "create": (CREATE_N, CREATE, CREATED, _their("delete", "/n.md"), {}),
    "rename": (RENAME_XY, UPDATE, RENAMED, _their("rename", "/y.md", "/x.md"),
               {"/x.md": "v1\n"}),
}


def _next_look(gate: Gate, job: Background, seen: set[int]) -> dict | None:
    """The tool's next history read once the gate holds it; None if the command finished
    without one."""
    while True:
        looks = [h for h in gate.held() if h["method"] == "GET" and h["seq"] not in seen]
        if looks:
            return looks[0]
        if job.done():
            return None
        time.sleep(0.02)


@pytest.mark.parametrize("name", LATE)
def test_a_write_that_may_land_late_is_not_sent_again_meanwhile(server, name):
    command, path, answer, undo, after = LATE[name]
    store, _, _ = setup(server, {} if command is CREATE_N else {"/x.md": "v1\n"})
    tool = with_engine(sync_tool(server, store), timeout=1.0, backoff_base=0.01,
                       lost_answer_wait=30.0)
    with Gate(server) as gate:
        gate.hold("POST", path, when="late", count=1)
        gate.hold("GET", VERSIONS, when="before", count=2)
        job = Background(tool, dict(command))
        [write] = [h for h in gate.wait_held(1) if h["when"] == "late"]
        first = _next_look(gate, job, {write["seq"]})  # its answer lost
        assert first is not None
        gate.release(first["seq"])  # no trace of the write yet
        second = _next_look(gate, job, {write["seq"], first["seq"]})
        if second is not None:  # it looks again rather than sending the write again:
            gate.release(write["seq"])  # the original lands meanwhile, and is found
            gate.release(second["seq"])
        result = job.join()
        undo(server, store)
        if second is None:  # it was sent again at once: the original lands after the undo
            gate.release(write["seq"])
    assert (result, store_files(server, store)) == (answer, after)


def test_a_create_with_no_trace_once_the_wait_is_over_is_sent_again(server):
    """The create gets no answer and stays held (never applied while the command runs):
    once `lost_answer_wait` has passed with no trace of it, it is sent again, and created
    once (the original, applied at the end, meets the path taken and changes nothing)."""
    store, _, _ = setup(server, {})
    tool = MemoryStoreTool(store, base_url=server.base_url, api_key=server.api_key,
                           lost_answer_wait=1.5)  # the public argument (30 s would time out)
    tool = with_engine(tool, timeout=1.0, backoff_base=0.01)
    with Gate(server) as gate:
        gate.hold("POST", CREATE, when="late", count=1)
        result = Background(tool, dict(CREATE_N)).join()
        assert len(gate.release()) == 1  # the original lands now
    assert (result, store_files(server, store)) == (CREATED, {"/n.md": "mine\n"})


def test_a_lost_answer_the_server_gave_after_its_work_is_not_waited_on(server):
    """A 500 comes once the server is done with the request: no trace of the create in the
    history then means it was not applied, and it is sent again at once (the wait, an
    hour here, would outlast the test's timeout)."""
    store, _, _ = setup(server, {})
    tool = with_engine(sync_tool(server, store), lost_answer_wait=3600.0)
    with Gate(server) as gate:
        gate.refuse("POST", CREATE, 500, count=1)
        result = Background(tool, dict(CREATE_N)).join()
    assert (result, store_files(server, store)) == (CREATED, {"/n.md": "mine\n"})


# -- a directory rename that stops part way ----------------------------------------------------

RENAME_D = {"command": "rename", "old_path": "/memories/d", "new_path": "/memories/n"}


def test_a_directory_rename_that_stops_part_way_says_how_to_finish(server):
    """One memory's move refused: the answer names what is still to move and how (the
    command itself cannot be run again: its destination exists now), and following it
    finishes the rename. (It used to say "run the command again", which then answered
    "The destination /memories/n already exists".)"""
    store, _, ids = setup(server, {"/d/a.md": "1", "/d/b.md": "2"})
    tool = sync_tool(server, store)
    with Gate(server) as gate:
        gate.refuse("POST", ids["/d/b.md"], 403, count=1)
        result = outcome(tool, dict(RENAME_D))
    assert result[0] == "error" and result[1].startswith(
        "/memories/d was only partly renamed: 1 file(s) moved to /memories/n, then it stopped")
    assert result[1].endswith(
        "Still below /memories/d: /memories/d/b.md. Rename each of them to the same place "
        "below /memories/n to finish (renaming /memories/d again would stop at once: "
        "/memories/n exists now).")
    assert outcome(tool, dict(RENAME_D)) == (
        "error", "The destination /memories/n already exists")
    assert outcome(tool, {"command": "rename", "old_path": "/memories/d/b.md",
                          "new_path": "/memories/n/b.md"})[0] == "ok"
    assert store_files(server, store) == {"/n/a.md": "1", "/n/b.md": "2"}


def test_a_directory_rename_that_stops_before_any_move_can_be_run_again(server):
    """The first move refused: nothing moved, so the answer says so, and the command run
    again renames the directory."""
    store, _, ids = setup(server, {"/d/a.md": "1", "/d/b.md": "2"})
    tool = sync_tool(server, store)
    with Gate(server) as gate:
        gate.refuse("POST", ids["/d/a.md"], 403, count=1)
        result = outcome(tool, dict(RENAME_D))
    assert result[0] == "error" and result[1].startswith(
        "/memories/d was not renamed: it stopped (") and result[1].endswith(
        ") before any file moved. Try the command again."), result
    assert store_files(server, store) == {"/d/a.md": "1", "/d/b.md": "2"}
    assert outcome(tool, dict(RENAME_D)) == (
        "ok", "Successfully renamed /memories/d to /memories/n")
    assert store_files(server, store) == {"/n/a.md": "1", "/n/b.md": "2"}


def test_a_directory_rename_waits_out_a_moves_lost_answer(server):
    """One memory's move gets no answer and lands while the tool reads the history: the
    rename is done, each memory moved once (it used to stop part way on the lost answer,
    and the late move then landed anyway)."""
    store, _, ids = setup(server, {"/d/a.md": "1", "/d/b.md": "2"})
    tool = with_engine(sync_tool(server, store), timeout=1.0, backoff_base=0.01,
                       lost_answer_wait=30.0)
    with Gate(server) as gate:
        gate.hold("POST", ids["/d/b.md"], when="late", count=1)
        gate.hold("GET", VERSIONS, when="before", count=1)
        job = Background(tool, dict(RENAME_D))
        [write] = [h for h in gate.wait_held(1) if h["when"] == "late"]
        look = _next_look(gate, job, {write["seq"]})
        assert look is not None, job.join()
        gate.release(write["seq"])  # the move lands while the tool looks
        gate.release(look["seq"])
        result = job.join()
    assert result == ("ok", "Successfully renamed /memories/d to /memories/n")
    assert store_files(server, store) == {"/n/a.md": "1", "/n/b.md": "2"}
