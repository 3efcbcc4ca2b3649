"""`memfs salvage`: a journal's files written out (memfs/state/salvage.py), on state
directories made as a mount leaves them; the real mount's case (a store deleted on the
server while mounted) is in tests/test_group_mount.py."""

from __future__ import annotations

import fcntl
import os
import sqlite3

import pytest
from click.testing import CliRunner
from test_statedir import _state

from memfs.cli.salvage import NOT_ALL_WRITTEN
from memfs.cli.salvage import salvage as salvage_command
from memfs.state.blobs import sha256
from memfs.state.salvage import SalvageError, salvage


def _tree(dest) -> dict[str, str]:
    return {str(p.relative_to(dest)): p.read_text() for p in sorted(dest.rglob("*"))
            if p.is_file()}


def _journal(tmp_path, **more: tuple[str, str | None, str | None]):
    """A created file, an edited one, a renamed one, a conflict; `more`: files at
    "/<name>" (content, memory id, base content)."""
    d = tmp_path / "state"
    _state(d, {"/new.md": ("created here\n", None, None),
               "/notes/edited.md": ("v2\n", "mem_e", "v1\n"),
               "/synced.md": ("same\n", "mem_s", "same\n"),
               **{f"/{name}": file for name, file in more.items()}},
           conflicts=[("/synced.md", "mine, aside\n", "changed on the server meanwhile")])
    conn = sqlite3.connect(d / "state.db")  # a rename not pushed: the base path differs
    conn.execute("UPDATE nodes SET base_path='/old.md' WHERE name='synced.md'")
    conn.commit()
    conn.close()
    return d


def test_salvage_writes_the_tree_and_conflicts_and_names_what_the_server_lacks(tmp_path):
    d = _journal(tmp_path)
    before = (d / "state.db").read_bytes()
    done = salvage(d, tmp_path / "out")
    assert _tree(tmp_path / "out") == {
        ".conflicts/1/synced.md": "mine, aside\n", "new.md": "created here\n",
        "notes/edited.md": "v2\n", "synced.md": "same\n"}
    assert done.unsent == [("/new.md", "not yet created on the server"),
                           ("/notes/edited.md", "edited, not yet pushed"),
                           ("/synced.md", "renamed from /old.md, not yet pushed")]
    assert done.conflicts == [("/.conflicts/1/synced.md", "changed on the server meanwhile")]
    assert (d / "state.db").read_bytes() == before  # the journal is left as it was
    assert os.stat(tmp_path / "out" / "new.md").st_mode & 0o777 == 0o600


def test_salvage_says_which_content_it_never_held_and_what_is_lost(tmp_path):
    """A synced file whose content the mount never fetched is on the server (named,
    status 0); a change whose blob is gone from the journal is lost (status 3)."""
    d = tmp_path / "state"
    _state(d, {"/listed.md": ("never read\n", "mem_l", "never read\n"),
               "/kept.md": ("here\n", None, None)})
    sha = sha256(b"never read\n")
    (d / "objects" / sha[:2] / sha).unlink()
    out = CliRunner().invoke(salvage_command, [str(d), str(tmp_path / "a")])
    assert out.exit_code == 0, out.output
    assert "1 file(s) not written: this mount never held their content" in out.output
    assert (tmp_path / "a" / "kept.md").read_text() == "here\n"
    sha = sha256(b"here\n")
    (d / "objects" / sha[:2] / sha).unlink()
    out = CliRunner().invoke(salvage_command, [str(d), str(tmp_path / "b")])
    assert out.exit_code == NOT_ALL_WRITTEN, out.output
    assert "NOT written, and not on the server: /kept.md" in out.output


def test_salvage_refuses_a_used_destination_a_live_daemon_and_no_state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # no mountpoint known
    d = _journal(tmp_path)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep\n")
    with pytest.raises(SalvageError, match="not an empty directory"):
        salvage(d, tmp_path / "full")
    assert os.listdir(tmp_path / "full") == ["mine.txt"]
    fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a running daemon holds it
        with pytest.raises(SalvageError, match="a memfs daemon runs on"):
            salvage(d, tmp_path / "out")
    finally:
        os.close(fd)
    assert not (tmp_path / "out").exists()
    with pytest.raises(SalvageError, match="holds no memfs state"):
        salvage(tmp_path / "full", tmp_path / "out")
    out = CliRunner().invoke(salvage_command, [str(tmp_path / "nowhere"), str(tmp_path / "o")])
    assert out.exit_code == 1 and "nor a mountpoint memfs knows" in out.output


def test_salvage_writes_nothing_outside_the_destination(tmp_path):
    """Paths come from state.db: a name that climbs out is refused (status 3), and a
    file of the tree named like the conflicts' directory moves that directory aside."""
    d = _journal(tmp_path, **{".conflicts": ("of the tree\n", "mem_c", "of the tree\n")})
    conn = sqlite3.connect(d / "state.db")
    conn.execute("UPDATE nodes SET name='..' WHERE name='notes'")
    conn.commit()
    conn.close()
    out = CliRunner().invoke(salvage_command, [str(d), str(tmp_path / "out")])
    assert out.exit_code == NOT_ALL_WRITTEN, out.output
    assert "NOT written: '/../edited.md' is not a safe path" in out.output
    assert not (tmp_path / "edited.md").exists()
    tree = _tree(tmp_path / "out")
    assert tree[".conflicts"] == "of the tree\n"
    assert tree[".conflicts_/1/synced.md"] == "mine, aside\n"


def test_salvage_finds_the_journal_of_a_mountpoint_mounted_before(tmp_path, monkeypatch):
    """SOURCE may be the mountpoint (the known index `memfs mount` keeps), not only the
    state directory `memfs unmount` names."""
    from memfs.state.statedir import remember

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    d = _journal(tmp_path)
    (tmp_path / "mnt").mkdir()
    remember(str(tmp_path / "mnt"), d, "memstore_x", "http://127.0.0.1:1")
    out = CliRunner().invoke(salvage_command, [str(tmp_path / "mnt"), str(tmp_path / "out")])
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"wrote 3 file(s) of {d} to {tmp_path / 'out'}\n")
    assert (tmp_path / "out" / "notes" / "edited.md").read_text() == "v2\n"


def test_salvage_says_one_line_for_a_destination_it_cannot_use(tmp_path):
    """A DEST under a file, or inside the journal itself: one line, nothing written
    (a traceback before, found by a helper)."""
    d = _journal(tmp_path)
    (tmp_path / "afile").write_text("x\n")
    for dest, says in ((tmp_path / "afile" / "sub", "cannot "),
                       (d / "sub", "is inside the state directory")):
        out = CliRunner().invoke(salvage_command, [str(d), str(dest)])
        assert out.exit_code == 1 and "Traceback" not in out.output, out.output
        assert says in out.output, out.output
    assert not (d / "sub").exists()


def test_salvage_tells_content_the_server_holds_from_content_that_is_gone(tmp_path):
    """A file renamed here whose content was never read (its bytes are the memory's, on
    the server) is "never held", not lost; a refused file says the refusal's reason."""
    d = tmp_path / "state"
    _state(d, {"/moved.md": ("never read\n", "mem_m", "never read\n"),
               "/bad.bin": ("x\n", None, None)})
    conn = sqlite3.connect(d / "state.db")
    conn.execute("UPDATE nodes SET base_path='/before.md' WHERE name='moved.md'")
    conn.execute("UPDATE nodes SET refused_sha=sha, refused_reason='content is not valid "
                 "UTF-8 (byte 0)' WHERE name='bad.bin'")
    conn.commit()
    conn.close()
    sha = sha256(b"never read\n")
    (d / "objects" / sha[:2] / sha).unlink()
    done = salvage(d, tmp_path / "out")
    assert done.missing == ["/moved.md"] and done.lost == []
    assert done.unsent == [("/bad.bin", "not yet created on the server; refused: content is "
                                        "not valid UTF-8 (byte 0)")]
