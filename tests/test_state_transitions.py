"""The state transitions one at a time (memfs/state_sync.py, State's local mutations).

Each test builds a State on a real state.db in a temp dir, brings one file into the
situation the transition is for, applies it, and checks what a reader of the tree,
the conflicts and a reopened state.db sees. These pin the guards the interleaving
harness reaches only through rare timings (the mutation run, docs/TESTING.md,
"Mutation testing", found them unpinned).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memfs.cache import sha256
from memfs.nodes import Remote
from memfs.state import ROOT_INO, State
from memfs.state_sync import Deferred

MID = "mem_x"


def _file(st: State, name: str, data: bytes, *, memory_id: str | None = MID):
    """A file as the handlers leave it after a write, pushed as memory_id (or not)."""
    node = st.new_node(st.nodes[ROOT_INO], name, is_dir=False, mode=0o100644, uid=0, gid=0)
    st.set_content(node, sha256(data), len(data))
    if memory_id is not None:
        st.set_base(node, memory_id, st.path_of(node), sha256(data))
    return node


@pytest.fixture
def st(tmp_path: Path):
    state = State(tmp_path / "state.db")
    yield state
    state.close()


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
