"""`memfs tool STORE_ID`: JSON commands on stdin, one JSON result per line on stdout;
and where the tools find their server and key when given none."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import REPO
from toolutil import new_store, store_files

from memfs.tool import MemoryStoreTool

pytestmark = pytest.mark.timeout(90)


def tool_env(server=None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env["PYTHONPATH"] = str(REPO)
    if server is not None:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        env["ANTHROPIC_API_KEY"] = server.api_key
    env.update(extra)
    return env


def memfs_tool(env: dict[str, str], store: str, lines: list[str], *args: str) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "memfs", "tool", store, *args],
        input="\n".join(lines) + "\n", capture_output=True, text=True, env=env, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_json_lines_in_and_out(server):
    store = new_store(server)
    lines = [
        json.dumps({"command": "create", "path": "/memories/todo.md", "file_text": "- a\n"}),
        "",  # blank lines are skipped
        json.dumps({"command": "insert", "path": "/memories/todo.md", "insert_line": 1,
                    "insert_text": "- b"}),
        json.dumps({"command": "view", "path": "/memories/todo.md", "view_range": [2, 2]}),
        # integers as the SDK (and memfs mcp) read them: "2" and 2.0 are 2
        json.dumps({"command": "view", "path": "/memories/todo.md", "view_range": ["2", 2.0]}),
        json.dumps({"command": "view", "path": "/memories/missing.md"}),
        json.dumps({"command": "view", "path": "/memories"}),
        "not json",
        json.dumps(["view"]),
        json.dumps({"command": "fly"}),
        json.dumps({"command": "rename", "old_path": "/memories/todo.md"}),
    ]
    assert memfs_tool(tool_env(server), store, lines) == [
        {"ok": "File created successfully at: /memories/todo.md"},
        {"ok": "The file /memories/todo.md has been edited."},
        {"ok": "Here's the content of /memories/todo.md with line numbers:\n     2\t- b"},
        {"ok": "Here's the content of /memories/todo.md with line numbers:\n     2\t- b"},
        {"error": "The path /memories/missing.md does not exist. Please provide a valid path."},
        {"ok": "Here're the files and directories up to 2 levels deep in /memories, excluding "
               "hidden items:\n8B\t/memories\n8B\t/memories/todo.md"},
        {"error": "The input line is not JSON: Expecting value: line 1 column 1 (char 0)"},
        {"error": "A command must be a JSON object"},
        {"error": "Unknown command: fly"},
        {"error": "The rename command needs `new_path`"},
    ]
    assert store_files(server, store) == {"/todo.md": "- a\n- b\n"}


def test_read_only_refuses_every_change(server):
    """A session's read-only store, through the tool as through the mount and MCP (the
    tool had no way to say so: found by a helper, 6 December)."""
    store = new_store(server)
    lines = [json.dumps({"command": "create", "path": "/memories/a.md", "file_text": "x"}),
             json.dumps({"command": "view", "path": "/memories"})]
    assert memfs_tool(tool_env(server), store, lines, "--read-only") == [
        {"error": "/memories/a.md was not changed: the memory store at /memories is "
                  "read-only."},
        {"ok": "Here're the files and directories up to 2 levels deep in /memories, "
               "excluding hidden items:\n0B\t/memories"},
    ]
    assert store_files(server, store) == {}


def test_one_answer_per_line_as_soon_as_it_is_asked(server, tmp_path):
    """A caller can hold a conversation over the pipe: each answer comes before the next
    question is written. Flags work too (--base-url, --api-key-file)."""
    store = new_store(server)
    key_file = tmp_path / "key"
    key_file.write_text(server.api_key + "\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "memfs", "tool", store, "--base-url", server.base_url,
         "--api-key-file", str(key_file)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=tool_env(),
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for path in ("/memories/a.md", "/memories/a.md"):
            proc.stdin.write(json.dumps({"command": "create", "path": path, "file_text": ""}))
            proc.stdin.write("\n")
            proc.stdin.flush()
            answer = json.loads(proc.stdout.readline())
            assert answer in ({"ok": "File created successfully at: /memories/a.md"},
                              {"error": "File /memories/a.md already exists"})
        proc.stdin.close()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def embedded_env(tmp_path, monkeypatch):
    """No ANTHROPIC_* anywhere and a private data dir: the embedded server is used."""
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    info = tmp_path / "data" / "memfs" / "local-server.json"
    try:
        yield tool_env(XDG_DATA_HOME=str(tmp_path / "data"))
    finally:
        if info.exists():  # end the server this test started, by its pid
            try:
                os.kill(json.loads(info.read_text())["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass


def test_without_configuration_the_embedded_server_is_used(embedded_env):
    made = subprocess.run(
        [sys.executable, "-m", "memfs", "stores", "create", "notes"], env=embedded_env,
        capture_output=True, text=True, timeout=60,
    )
    assert made.returncode == 0, made.stderr
    store = made.stdout.strip().splitlines()[-1]
    create = json.dumps({"command": "create", "path": "/memories/x.md", "file_text": "x"})
    assert memfs_tool(embedded_env, store, [create]) == [
        {"ok": "File created successfully at: /memories/x.md"}]
    tool = MemoryStoreTool(store)  # the same server and key, in-process
    assert tool.call({"command": "view", "path": "/memories/x.md"}) == (
        "Here's the content of /memories/x.md with line numbers:\n     1\tx")


def test_an_unreadable_key_file_is_a_clean_cli_error(server, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "memfs", "tool", "memstore_x", "--base-url", server.base_url,
         "--api-key-file", str(tmp_path / "missing")],
        input="", capture_output=True, text=True, env=tool_env(), timeout=60,
    )
    assert proc.returncode == 1
    assert "cannot read API key file" in proc.stderr and "Traceback" not in proc.stderr
