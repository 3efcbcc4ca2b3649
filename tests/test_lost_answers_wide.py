"""Lost answers, the cross product widened: more request kinds, more local operations,
and another writer in the window.

tests/test_interleavings.py's `test_lost_answers` crosses 4 request kinds with 7 local
operations. Those were the cases the fix of issue 20 was written for; this file crosses
the ones it was not (docs/TESTING.md, "Lost answers"):

* 4 more request kinds for `/d/x.md`: a rename and an edit in one request, a create in a
  new directory, an editor's save over a synced file, a rename over a synced sibling
  (the sibling's memory takes the content, the file's own is deleted);
* 8 more local operations in the window: unlink and re-create, rename away and back,
  rename onto the sibling, the sibling renamed onto the file, an open file's unsaved
  writes, a write then an unlink, a swap with the sibling through a temporary name, a
  move out of the directory; and for the 4 first kinds, 3 that make the file again
  holding exactly what its memory holds (`same_bytes`);
* another writer in the window (10 remote operations, alone or with a local one; three
  end with the versions our requests wrote redacted, the lost answer's own among them):
  the oracle then checks that nothing is lost instead of the sole writer's exact tree, and
  that no conflict keeps a write of ours the server took (`Oracle.applied_not_in_conflict`);
* the daemon killed after an operation that takes the file (or its place) away, and new
  files made after the restart, before the restarted daemon asks what happened (crash
  runs only: a doubt names its file by inode, and a new file must never get that number).

Every scenario is explored as `test_lost_answers` explores its own: every hold point and
every outcome (answered, lost, unapplied, refused) of every request of its action, and the
daemon killed while each request is on the wire (the server applied it or not; the
operation before the kill or after the restart).
`MEMFS_INTERLEAVE_LONG=1` adds 248 more (`LONG_RUN`): a second request in the pass, the
unmount's flush, the operations on the sibling, a delete sent early for a rename onto
its path. This file is separate so that
pytest-xdist (`--dist loadfile`) runs it beside tests/test_interleavings.py rather than
after it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# ruff: noqa: F811  (the harness_tmp fixture imported below is redefined as an argument)
from interleave import (
    AFTER_CONFLICT,
    AFTER_GONE,
    AFTER_MOVE,
    ANSWERED_BADLY,
    CRASHES,
    FAULT_ROUND,
    LATE_CRASHES,
    OUTCOMES,
    SETTLES_IN,
    FaultRule,
    Kind,
    Scenario,
    explore,
)
from test_interleavings import (
    LOCAL_OPS,
    LONG,
    REQUEST_KINDS,
    SIBLING,
    _report_count,  # noqa: F401 - the count, printed at the end
    harness_tmp,  # noqa: F401 - the fixture: the explorations' state on tmpfs
)

from memfs.mount.daemon import CLIENT_RETRIES

MORE_KINDS = {  # kind -> (setup, the file's path when the action starts)
    "rename_and_edit": ([*SIBLING, ("write", "/d/x.md", "v1"), ("push",),
                         ("rename", "/d/x.md", "/d/y.md"), ("write", "/d/y.md", "v2")],
                        "/d/y.md"),
    "create_in_new_dir": ([*SIBLING, ("write", "/d/n/x.md", "v1")], "/d/n/x.md"),
    "editor_save": ([*SIBLING, ("write", "/d/x.md", "v1"), ("push",),
                     ("save_as", "/d/x.md", "v2")], "/d/x.md"),
    "rename_over_sibling": ([*SIBLING, ("write", "/d/x.md", "v1"), ("push",),
                             ("rename", "/d/x.md", "/d/k.md")], "/d/k.md"),
}
MORE_OPS = {  # operation -> steps on the file at path f (the sibling is /d/k.md)
    "recreate": lambda f: [("unlink", f), ("write", f, "again")],
    "rename_back": lambda f: [("rename", f, "/d/z.md"), ("rename", "/d/z.md", f)],
    "onto_sibling": lambda f: [("rename", f, "/d/k.md")],
    "sibling_onto": lambda f: [("rename", "/d/k.md", f)],
    "open_unsaved": lambda f: [("open_write", f, "mine")],  # closed when the run settles
    "write_then_unlink": lambda f: [("write", f, "mine"), ("unlink", f)],
    "swap_with_sibling": lambda f: [("rename", f, "/d/t.md"), ("rename", "/d/k.md", f),
                                    ("rename", "/d/t.md", "/d/k.md")],
    "out_of_dir": lambda f: [("rename", f, "/top.md")],
}
REMOTE_OPS = {  # another client, alone or with a local operation
    "their_edit": lambda f: [("r_edit", f, "theirs")],
    "their_delete": lambda f: [("r_delete", f)],
    "their_rename": lambda f: [("r_rename", f, "/d/r.md")],
    "their_create": lambda f: [("r_create", f, "theirs new")],
    "their_edit_my_write": lambda f: [("r_edit", f, "theirs"), ("write", f, "mine")],
    "their_delete_my_write": lambda f: [("r_delete", f), ("write", f, "mine")],
    "their_rename_my_rename": lambda f: [("r_rename", f, "/d/r.md"), ("rename", f, "/d/z.md")],
    # our file moved over the sibling and back while they edit it (docs/SEMANTICS.md,
    # rename: it takes its own memory back, and the sibling's goes)
    "their_edit_in_my_round_trip": lambda f: [("rename", f, "/d/k.md"), ("r_edit", f, "theirs"),
                                              ("rename", "/d/k.md", f)],
    # ... and the versions our requests wrote redacted after it (what a lost answer's
    # doubt then finds: tests/test_doubt_history_gone.py, one run each)
    "their_edit_redact": lambda f: [("r_edit", f, "theirs"), ("r_redact", f)],
    "their_rename_redact": lambda f: [("r_rename", f, "/d/r.md"), ("r_redact", "/d/r.md")],
    "their_redact_my_write": lambda f: [("r_edit", f, "theirs"), ("r_redact", f),
                                        ("write", f, "mine")],
}
ALL_KINDS = {**REQUEST_KINDS, **MORE_KINDS}
#: What the memory holds when each kind's request goes out (the file's bytes).
HELD = {"create": "v1", "update": "v2", "rename": "v1", "delete": "v1"}


def same_bytes(kind: str, f: str) -> dict[str, list]:
    """The file made again at its path holding exactly what its memory holds: the
    operations an unchanged-bytes shortcut (revive, take back) could get wrong."""
    c = HELD[kind]
    if kind == "delete":  # `git checkout x`, `cp` from elsewhere, the sibling renamed over
        return {"write_same": [("write", f, c)],
                "copy_back": [("write", "/d/q.md", c), ("rename", "/d/q.md", f)],
                "sibling_same": [("write", "/d/k.md", c), ("rename", "/d/k.md", f)]}
    return {"recreate_same": [("unlink", f), ("write", f, c)],
            "cp_rm_mv": [("write", "/d/q.md", c), ("unlink", f), ("rename", "/d/q.md", f)],
            "mv_away_cp_back": [("rename", f, "/d/z.md"), ("write", f, c)]}


def applies(kind: str, op: str) -> bool:
    """Whether the operation has something to act on once the kind's setup ran (its
    steps must run in some interleaving; `_explore` checks that they do)."""
    if kind == "delete":  # the file is gone: only a file made at its path is an operation
        return op in ("sibling_onto", "write_then_unlink") or (
            op.startswith("their_") and op not in ("their_rename_my_rename",
                                                   "their_edit_in_my_round_trip"))
    if kind == "rename_over_sibling":  # the sibling is the file now, its memory at f
        return op not in ("onto_sibling", "sibling_onto", "swap_with_sibling", "their_create",
                          "their_edit_in_my_round_trip")
    if op == "their_create":  # another client's create needs the path free on the server
        return kind not in ("update", "editor_save")
    return True


#: The operations whose scenarios may settle a round late, and why (tests/interleave.py):
#: a file moved off its path while a new one takes it, both sent in one pass (the new
#: one waits for the move); a memory deleted there (the file is new, created next pass);
#: a 409 settled as a conflict (the delete or move it leaves goes next pass).
LATE_OPS = {"swap_with_sibling": AFTER_MOVE, "mv_away_cp_back": AFTER_MOVE,
            "away_then_deleted_bytes": AFTER_MOVE,
            "their_delete": AFTER_GONE, "their_delete_my_write": AFTER_GONE,
            "their_create": AFTER_CONFLICT, "their_edit_in_my_round_trip": AFTER_CONFLICT,
            "their_rename_redact": AFTER_CONFLICT}


def late(op: str) -> int:
    """The settle bound of a scenario of operation `op`."""
    return LATE_OPS.get(op, SETTLES_IN)


def scenario(kind: str, op: str, setup: list, steps: list, **kw) -> Scenario:
    """`{kind}_then_{op}`, pushed, with its operation's settle bound."""
    return Scenario(f"{kind}_then_{op}", setup, "push", steps, settles_in=late(op), **kw)


SOLE = (
    [scenario(kind, op, setup, steps(path), sole_writer=True)
     for kind, (setup, path) in REQUEST_KINDS.items() for op, steps in MORE_OPS.items()
     if applies(kind, op)]
    + [scenario(kind, op, setup, steps(path), sole_writer=True)
       for kind, (setup, path) in MORE_KINDS.items()
       for op, steps in {**LOCAL_OPS, **MORE_OPS}.items() if applies(kind, op)])
# The same bytes again (4 December evening: a file made again with what its memory held
# while that memory's DELETE was out took the memory back, and was removed with it).
SOLE += [scenario(kind, op, setup, steps, sole_writer=True)
         for kind, (setup, path) in REQUEST_KINDS.items()
         for op, steps in same_bytes(kind, path).items()]
SHARED = [scenario(kind, op, setup, steps(path))
          for kind, (setup, path) in ALL_KINDS.items() for op, steps in REMOTE_OPS.items()
          if applies(kind, op)]

# New after a restart (4 December, late night: a file unlinked while its create was out,
# the daemon killed, and the restarted one gave the doubt's inode to the next directory
# made, on which the answer then landed): each operation that takes the file (or its
# place) away, the daemon killed with each request on the wire, and after the restart
# the user makes a directory and two files in it (new numbers) before anything settles.
# Crash runs only: the holds and outcomes of the same operations run above.
AFTER_RESTART = ("unlink", "remove_parent_tree", "write_then_unlink", "recreate",
                 "onto_sibling", "sibling_onto", "rename", "out_of_dir")
NEW_AFTER_RESTART = [
    Scenario(f"{kind}_then_{op}_then_new_after_a_restart", setup, "push", steps(path),
             second=[("write", "/e/n.md"), ("write", "/e/o.md")], sole_writer=True)
    for kind, (setup, path) in ALL_KINDS.items()
    for op, steps in {**LOCAL_OPS, **MORE_OPS}.items()
    if op in AFTER_RESTART and applies(kind, op)]

# The aftermath (5 December): what follows a lost answer meets a fault too. The action's
# request gets its outcome (applied with the answer lost, never applied and no answer, or
# applied and answered 500 or 504: memfs cannot tell which), then the first request of
# what comes after it (the passes of the lost-answer wait, a restarted daemon's first
# pass, settling: the read that resolves the doubt, the retry, a listing) and the two
# after it lose their answers as well, are never applied, or fail (503): three, every
# attempt of a read the client retries. The long run adds every operation, the fault
# from the second or third request on, the late outcome and the crashes (the restarted
# daemon's first pass meeting the fault).
AFTER_FAULTS = ("lose", "unapplied", "fail")
AFTER_OPS = ("none", "write", "unlink")
AFTERMATH = [
    Scenario(f"{kind}_then_{op}_then_request_{j}_after_{fault}", setup, "push", steps(path),
             faults=[FaultRule(Kind("any"), kind=fault, origins=("after", "settle"),
                               times=CLIENT_RETRIES + 1, skip=j)], sole_writer=True,
             settles_in=late(op) + FAULT_ROUND)
    for kind, (setup, path) in ALL_KINDS.items()
    for op, steps in {**LOCAL_OPS, **MORE_OPS}.items()
    if (LONG or op in AFTER_OPS) and applies(kind, op)
    for j in range(3 if LONG else 1) for fault in AFTER_FAULTS]

#: One more kind, for the long run: the sibling (a memory of its own) moved onto the path
#: of x's pending delete, its delay not over: the push's rename meets x's memory (409),
#: sends x's DELETE at once, then moves the sibling (3 requests).
EARLY = ([*SIBLING, ("write", "/d/x.md", "v1"), ("push",), ("unlink", "/d/x.md"),
          ("rename", "/d/k.md", "/d/x.md")], "/d/x.md")
EARLY_OPS = {**{op: steps for op, steps in {**LOCAL_OPS, **MORE_OPS}.items()
                if op not in ("onto_sibling", "sibling_onto", "swap_with_sibling")},
             "write_deleted_bytes": lambda f: [("write", f, "v1")],
             "away_then_deleted_bytes": lambda f: [("rename", f, "/d/z.md"), ("write", f, "v1")]}
#: x's early DELETE meets their edit (409): their version takes x's path back, so the
#: sibling's move onto it is a conflict, and the sibling's memory goes next pass.
EARLY_LATE = dict.fromkeys(("their_edit", "their_edit_my_write", "their_edit_redact",
                            "their_redact_my_write"), AFTER_CONFLICT)

# With MEMFS_INTERLEAVE_LONG (the developers' long run, docs/TESTING.md), four more
# families, 248 scenarios: each kind's pass carrying a second request (the sibling
# edited too: `pushes`, outcomes for either request), each kind under the unmount's
# `flush`, every operation on the sibling instead of the file, and the early delete
# above under every operation.
LONG_RUN: list[Scenario] = [] if not LONG else (
    [Scenario(f"two_requests_{kind}_then_{op}", [*setup, ("write", "/d/k.md", "k2")],
              "pushes", steps(path), sole_writer=True, settles_in=late(op))
     for kind, (setup, path) in ALL_KINDS.items() if kind != "rename_over_sibling"
     for op, steps in {**LOCAL_OPS, **MORE_OPS}.items() if applies(kind, op)]
    + [Scenario(f"flush_{kind}_then_{op}", setup, "flush", steps(path), sole_writer=True,
                settles_in=late(op))
       for kind, (setup, path) in ALL_KINDS.items()
       for op, steps in LOCAL_OPS.items() if applies(kind, op)]
    + [Scenario(f"on_sibling_{kind}_then_{op}", setup, "push", steps("/d/k.md"),
                sole_writer=True, settles_in=late(op))
       for kind, (setup, _path) in ALL_KINDS.items() if kind != "rename_over_sibling"
       for op, steps in {**LOCAL_OPS, **MORE_OPS}.items()
       if op not in ("onto_sibling", "sibling_onto", "swap_with_sibling")]
    + [Scenario(f"early_delete_then_{op}", EARLY[0], "push", steps(EARLY[1]),
                sole_writer=True, settles_in=late(op)) for op, steps in EARLY_OPS.items()]
    + [Scenario(f"early_delete_then_{op}", EARLY[0], "push", steps(EARLY[1]),
                settles_in=EARLY_LATE.get(op, late(op)))
       for op, steps in REMOTE_OPS.items()
       if op not in ("their_create", "their_edit_in_my_round_trip")])


def _explore(scenario: Scenario, tmp: Path) -> None:
    # The long run also kills the restarted daemon again (`twice`, docs/TESTING.md), and
    # has the server apply the killed daemon's request after the kill (`LATE_CRASHES`).
    result = explore(scenario, tmp, outcomes=OUTCOMES + (ANSWERED_BADLY if LONG else ()),
                     crashes=CRASHES + (LATE_CRASHES if LONG else ()), twice=LONG)
    print(f"\n{scenario.name}: {len(result.runs)} interleavings")
    assert len(result.runs) >= 15  # alone, before, 4 hold points, after, 4 outcomes, 4 crashes
    if result.failures:
        pytest.fail(result.summary(), pytrace=False)
    # Each step of the operation runs in some interleaving (a step that does not apply
    # is skipped: a scenario whose steps all skip would be a copy of `..._then_none`).
    ran = {line.removeprefix("interference: ").removesuffix(" ok")
           for run in result.runs for line in run.trace
           if line.startswith("interference: ") and line.endswith(" ok")}
    never = [step for step in scenario.interference if repr(step) not in ran]
    assert not never, f"{never} ran in no interleaving"


@pytest.mark.parametrize("scenario", SOLE, ids=lambda s: s.name)
def test_lost_answers_more_kinds_and_operations(scenario: Scenario, harness_tmp: Path) -> None:
    _explore(scenario, harness_tmp)


@pytest.mark.parametrize("scenario", SHARED, ids=lambda s: s.name)
def test_lost_answers_with_another_writer(scenario: Scenario, harness_tmp: Path) -> None:
    _explore(scenario, harness_tmp)


@pytest.mark.skipif(not LONG, reason="the long run: MEMFS_INTERLEAVE_LONG=1")
@pytest.mark.parametrize("scenario", LONG_RUN, ids=lambda s: s.name)
def test_lost_answers_long_run(scenario: Scenario, harness_tmp: Path) -> None:
    result = explore(scenario, harness_tmp, outcomes=OUTCOMES + ANSWERED_BADLY,
                     crashes=CRASHES + LATE_CRASHES, twice=True)
    print(f"\n{scenario.name}: {len(result.runs)} interleavings")
    if result.failures:
        pytest.fail(result.summary(), pytrace=False)


@pytest.mark.parametrize("scenario", NEW_AFTER_RESTART, ids=lambda s: s.name)
def test_lost_answers_then_a_crash_then_new_files(scenario: Scenario,
                                                  harness_tmp: Path) -> None:
    result = explore(scenario, harness_tmp, crashes=CRASHES + (LATE_CRASHES if LONG else ()),
                     holds=False)
    print(f"\n{scenario.name}: {len(result.runs)} interleavings")
    assert any(run.crashed for run in result.runs)
    if result.failures:
        pytest.fail(result.summary(), pytrace=False)


@pytest.mark.parametrize("scenario", AFTERMATH, ids=lambda s: s.name)
def test_lost_answers_then_their_aftermath_faulted(scenario: Scenario,
                                                   harness_tmp: Path) -> None:
    result = explore(scenario, harness_tmp,
                     outcomes=("lost", "unapplied", *ANSWERED_BADLY, *(("late3",) if LONG else ())),
                     crashes=CRASHES if LONG else (), holds=False)
    print(f"\n{scenario.name}: {len(result.runs)} interleavings")
    assert all(run.faulted for run in result.runs)  # the aftermath reached its j-th request
    if result.failures:
        pytest.fail(result.summary(), pytrace=False)


def test_the_widened_product_is_new() -> None:
    """Every scenario here is one test_interleavings.py does not run, and none twice."""
    from test_interleavings import CROSS

    names = [s.name for s in (*SOLE, *SHARED, *NEW_AFTER_RESTART, *AFTERMATH, *LONG_RUN)]
    assert len(names) == len(set(names))
    assert not set(names) & {s.name for s in CROSS}
