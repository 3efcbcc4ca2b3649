"""The SDK's own tool runner drives MemoryStoreTool unchanged.

A stand-in for the Messages API (a tiny local HTTP server) answers each request with a
scripted assistant turn of `memory` tool_use blocks, and records what the runner sends
back. The runner is the SDK's `client.beta.messages.tool_runner` (sync, and async on
asyncio), pointed at the stand-in; the tool is ours, on a real `memfs serve` store. The
same script is replayed with the SDK's BetaLocalFilesystemMemoryTool: the tool_result
blocks the runner sends must be the same, directory sizes aside.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import pytest
from anthropic.tools.memory import BetaLocalFilesystemMemoryTool
from test_tool_differential import without_directory_sizes
from toolutil import async_tool, new_store, store_files, sync_tool

pytestmark = pytest.mark.timeout(60)

SCRIPT: list[list[dict[str, Any]]] = [  # one assistant turn per list; then "Done."
    [
        {"command": "view", "path": "/memories"},
        {"command": "create", "path": "/memories/notes.md", "file_text": "- likes tea\n"},
    ],
    [
        {"command": "str_replace", "path": "/memories/notes.md", "old_str": "tea",
         "new_str": "coffee"},
        {"command": "view", "path": "/memories/nope.md"},
        {"command": "insert", "path": "/memories/notes.md", "insert_line": 1,
         "insert_text": "- early riser\n"},
        {"command": "view", "path": "/memories/notes.md"},
    ],
    [
        {"command": "rename", "old_path": "/memories/notes.md",
         "new_path": "/memories/profile/notes.md"},
        {"command": "create", "path": "/memories/profile/notes.md", "file_text": "again"},
        {"command": "view", "path": "/memories"},
        {"command": "view", "path": "/memories/../etc/passwd"},
    ],
]
FINAL = "Done."


class StandInMessagesAPI:
    """POST /v1/messages: the next scripted turn; every request body is kept."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.requests.append(body)
                reply = json.dumps(outer.turn(len(outer.requests) - 1)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("request-id", f"req_standin_{len(outer.requests)}")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def turn(n: int) -> dict[str, Any]:
        if n < len(SCRIPT):
            content: list[dict[str, Any]] = [{"type": "text", "text": "Checking memory."}]
            content += [
                {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": "memory", "input": command}
                for i, command in enumerate(SCRIPT[n])
            ]
            stop = "tool_use"
        else:
            content, stop = [{"type": "text", "text": FINAL}], "end_turn"
        return {
            "id": f"msg_{n}", "type": "message", "role": "assistant",
            "model": "claude-stand-in", "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 10},
        }

    def tool_results(self) -> list[tuple[str, Any, bool]]:
        """(tool_use_id, content, is_error) of every tool_result the runner sent."""
        out = []
        for body in self.requests[1:]:
            for block in body["messages"][-1]["content"]:
                if block.get("type") == "tool_result":
                    out.append((block["tool_use_id"], block["content"],
                                bool(block.get("is_error"))))
        return out

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stand_in() -> Iterator[StandInMessagesAPI]:
    api = StandInMessagesAPI()
    try:
        yield api
    finally:
        api.close()


def run_sync(stand_in: StandInMessagesAPI, tool: Any) -> str:
    client = anthropic.Anthropic(base_url=stand_in.url, api_key="stand-in", max_retries=0)
    runner = client.beta.messages.tool_runner(
        model="claude-stand-in", max_tokens=1024, tools=[tool],
        messages=[{"role": "user", "content": "I switched from tea to coffee."}],
    )
    return runner.until_done().content[0].text


def comparable(results: list[tuple[str, Any, bool]]) -> list[tuple[str, Any, bool]]:
    return [
        (uid, without_directory_sizes(("ok", content))[1], is_error)
        for uid, content, is_error in results
    ]


def reference_results() -> list[tuple[str, Any, bool]]:
    api = StandInMessagesAPI()
    try:
        with tempfile.TemporaryDirectory(prefix="memfs-ref-") as base:
            assert run_sync(api, BetaLocalFilesystemMemoryTool(base_path=base)) == FINAL
        return api.tool_results()
    finally:
        api.close()


EXPECTED_FILES = {"/profile/notes.md": "- likes coffee\n- early riser\n"}


def test_sync_tool_runner_drives_the_store_tool(server, stand_in):
    store = new_store(server)
    assert run_sync(stand_in, sync_tool(server, store)) == FINAL

    assert stand_in.requests[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    results = stand_in.tool_results()
    assert len(results) == sum(len(turn) for turn in SCRIPT)
    by_id = {uid: (content, is_error) for uid, content, is_error in results}
    assert by_id["toolu_0_1"] == ("File created successfully at: /memories/notes.md", False)
    assert by_id["toolu_1_1"] == (
        "The path /memories/nope.md does not exist. Please provide a valid path.", True)
    assert by_id["toolu_1_3"] == (
        "Here's the content of /memories/notes.md with line numbers:\n"
        "     1\t- likes coffee\n     2\t- early riser\n     3\t", False)
    assert by_id["toolu_2_3"] == (
        "Path /memories/../etc/passwd would escape /memories directory", True)
    assert comparable(results) == comparable(reference_results())
    assert store_files(server, store) == EXPECTED_FILES


def test_async_tool_runner_on_asyncio_drives_the_async_store_tool(server, stand_in):
    store = new_store(server)
    tool = async_tool(server, store)

    async def main() -> str:
        client = anthropic.AsyncAnthropic(base_url=stand_in.url, api_key="stand-in",
                                          max_retries=0)
        runner = client.beta.messages.tool_runner(
            model="claude-stand-in", max_tokens=1024, tools=[tool],
            messages=[{"role": "user", "content": "I switched from tea to coffee."}],
        )
        final = await runner.until_done()
        return final.content[0].text

    assert asyncio.run(main()) == FINAL
    assert comparable(stand_in.tool_results()) == comparable(reference_results())
    assert store_files(server, store) == EXPECTED_FILES


async def test_async_tool_also_runs_under_trio(server):
    store = new_store(server)
    tool = async_tool(server, store)
    assert await tool.call({"command": "create", "path": "/memories/t.md", "file_text": "t"}) == (
        "File created successfully at: /memories/t.md")
    with pytest.raises(anthropic.lib.tools.ToolError) as caught:
        await tool.call({"command": "delete", "path": "/memories"})
    assert caught.value.content == "Cannot delete the /memories directory itself"
    assert store_files(server, store) == {"/t.md": "t"}


def test_sync_tool_called_from_inside_an_event_loop(server):
    """A sync tool called from async code (a loop is running in this thread) still works:
    its trio run moves to a helper thread."""
    store = new_store(server)
    tool = sync_tool(server, store)

    async def main() -> str:
        return tool.call({"command": "create", "path": "/memories/a.md", "file_text": "a"})

    assert asyncio.run(main()) == "File created successfully at: /memories/a.md"
    assert store_files(server, store) == {"/a.md": "a"}
