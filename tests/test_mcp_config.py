"""The configuration lines of docs/MCP.md, started exactly as Claude Code and Claude
Desktop start them: the command they name answers `initialize` and `tools/list`."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mountutil import mount_env

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "MCP.md"
TOOLS = {"view", "create", "str_replace", "insert", "delete", "rename", "search"}


def doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)


def claude_code_line() -> list[str]:
    line = next(line for block in doc_blocks("sh") for line in block.splitlines()
                if line.startswith("claude mcp add "))
    words = shlex.split(line)
    return words[words.index("--") + 1:]  # `claude mcp add NAME -- COMMAND ARGS...`


def desktop_entry() -> dict:
    config = json.loads(doc_blocks("json")[0])
    [entry] = config["mcpServers"].values()
    return entry


def environment(server, tmp_path: pathlib.Path, extra: dict | None = None) -> dict:
    """What the harness passes: the user's environment (the test server in place of the
    hosted API), `memfs` on PATH, plus the entry's own `env` with the key file made."""
    env = mount_env(server, tmp_path)
    env.pop("MEMFS_LOG_LEVEL", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    for name, value in (extra or {}).items():
        assert name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY_FILE"), name
        if name == "ANTHROPIC_BASE_URL":  # the hosted API in the doc, the test server here
            value = server.base_url
        if name == "ANTHROPIC_API_KEY_FILE":  # the doc's path, made here with the test key
            value = str(tmp_path / "api-key")
            pathlib.Path(value).write_text(server.api_key + "\n")
            os.chmod(value, 0o600)
            env.pop("ANTHROPIC_API_KEY", None)
        env[name] = value
    return env


async def initialize_and_list(command: str, args: list[str], env: dict) -> set[str]:
    params = StdioServerParameters(command=command, args=args, env=env)
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                assert init.server_info.name == "memfs"
                assert init.capabilities.resources.subscribe is True
                assert init.capabilities.resources.list_changed is True
                return {t.name for t in (await session.list_tools()).tools}


async def test_the_claude_code_line(server, tmp_path):
    server.sdk().beta.memory_stores.create(name="Team Notes")
    command, *args = claude_code_line()
    assert (command, args) == ("memfs", ["mcp", "team-notes"])
    assert await initialize_and_list(command, args, environment(server, tmp_path)) == TOOLS


async def test_the_claude_desktop_entry(server, tmp_path):
    server.sdk().beta.memory_stores.create(name="Team Notes")
    entry = desktop_entry()
    assert set(entry) == {"command", "args", "env"}
    env = environment(server, tmp_path, entry["env"])
    assert await initialize_and_list(entry["command"], entry["args"], env) == TOOLS


def test_without_the_mcp_sdk_the_hint_names_the_checkout_not_pypi(monkeypatch):
    """`pip install 'memfs[mcp]'` installs PyPI's unrelated `memfs` (a newcomer)."""
    import sys

    from click.testing import CliRunner

    from memfs.cli.mcp import mcp

    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp: ImportError
    result = CliRunner().invoke(mcp, ["some-store"])
    assert result.exit_code == 1
    assert "pip install -e '.[mcp]' in the memfs checkout" in result.output, result.output
