"""The shortest real-mount round trip: write through the mount, see it on the server."""

from mountutil import needs_fuse, server_memories

pytestmark = needs_fuse


def test_write_unmount_server_has_it(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    (m.path / "a.md").write_text("hello\n")
    (m.path / "dir").mkdir()
    (m.path / "dir" / "b.md").write_text("b\n")
    out = m.unmount()
    assert "left" in out
    assert server_memories(server, store) == {"/a.md": "hello\n", "/dir/b.md": "b\n"}
