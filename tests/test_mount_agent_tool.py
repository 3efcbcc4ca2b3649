"""An agent's file tools on a mount: the official SDK's local-filesystem memory tool
(atomic temp-file-and-rename writes, fsync, 0600/0700 modes) pointed at memfs."""

from __future__ import annotations

import stat

from anthropic.tools.memory import BetaLocalFilesystemMemoryTool
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)
from mountutil import needs_fuse, server_memories

pytestmark = needs_fuse


def test_sdk_memory_tool_on_a_mount(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    tool = BetaLocalFilesystemMemoryTool(base_path=str(m.path))
    run = tool.execute

    out = run(BetaMemoryTool20250818CreateCommand(
        command="create", path="/memories/prefs.md", file_text="Use tabs.\nBe brief.\n"))
    assert "created" in out
    run(BetaMemoryTool20250818CreateCommand(
        command="create", path="/memories/projects/x.md", file_text="status: draft\n"))
    run(BetaMemoryTool20250818StrReplaceCommand(
        command="str_replace", path="/memories/prefs.md", old_str="tabs", new_str="spaces"))
    run(BetaMemoryTool20250818InsertCommand(
        command="insert", path="/memories/prefs.md", insert_line=0, insert_text="# Prefs\n"))
    run(BetaMemoryTool20250818CreateCommand(
        command="create", path="/memories/scratch.md", file_text="temp\n"))
    run(BetaMemoryTool20250818DeleteCommand(command="delete", path="/memories/scratch.md"))
    run(BetaMemoryTool20250818RenameCommand(
        command="rename", old_path="/memories/projects/x.md", new_path="/memories/x-final.md"))
    view = run(BetaMemoryTool20250818ViewCommand(command="view", path="/memories"))
    assert "prefs.md" in view and "x-final.md" in view

    f = m.path / "memories" / "prefs.md"
    assert stat.S_IMODE(f.stat().st_mode) == 0o600  # the tool's modes are kept locally
    assert f.read_text() == "# Prefs\nUse spaces.\nBe brief.\n"
    m.wait_synced()
    sdk = server.sdk()
    ids = {x.path: x.id for x in sdk.beta.memory_stores.memories.list(store)}
    m.unmount()
    expected = {"/memories/prefs.md": "# Prefs\nUse spaces.\nBe brief.\n",
                "/memories/x-final.md": "status: draft\n"}
    assert server_memories(server, store) == expected
    # The tool's atomic saves (temp file + rename over) kept one memory per file:
    # every version of prefs.md belongs to the same memory, none was deleted.
    versions = [v.operation for v in sdk.beta.memory_stores.memory_versions.list(
        store, memory_id=ids["/memories/prefs.md"])]
    assert versions[-1] == "created" and "deleted" not in versions
