"""`memfs tool STORE_ID`: the memory tool over a store as JSON lines, for any language.

Each stdin line is one tool input, exactly what the model sends in a ``tool_use`` block
(``{"command": "view", "path": "/memories"}``). Each answer is one stdout line:
``{"ok": "<text>"}`` or ``{"error": "<text>"}``, flushed at once so a caller can hold a
conversation over a pipe. Blank lines are skipped. This module does not need the
``anthropic`` package.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, TextIO

import click
import trio

from memfs.cli import storenames
from memfs.cli.completion import complete_stores
from memfs.cli.errors import command_server
from memfs.cli.options import server_options
from memfs.tool.store import StoreMemory
from memfs.tool.text import ToolFailure, as_sdk_reads

log = logging.getLogger("memfs.tool")


def answer(store: StoreMemory, line: bytes) -> dict[str, str]:
    """One input line's result object (never raises for a bad command)."""
    try:
        command: Any = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        return {"error": f"The input line is not JSON: {exc}"}
    try:
        if isinstance(command, dict):
            command = as_sdk_reads(command)  # as `memfs mcp` and the SDK read it
        return {"ok": trio.run(store.execute, command)}
    except ToolFailure as exc:
        return {"error": exc.message}
    except Exception as exc:  # a bug must not end the conversation
        log.exception("memfs tool: command failed")
        return {"error": f"memfs tool failed: {exc!r}"}


def serve_lines(store: StoreMemory, lines: Any, out: TextIO) -> None:
    """Answer every non-blank line of ``lines`` (bytes) on ``out``, one JSON per line."""
    for line in lines:
        if not line.strip():
            continue
        out.write(json.dumps(answer(store, line)) + "\n")
        out.flush()


@click.command("tool")
@click.argument("store_id", metavar="STORE", shell_complete=complete_stores)
@click.option("--read-only", is_flag=True,
              help="Refuse every change before anything is sent (a session's read-only "
                   "store).")
@server_options
def tool(store_id: str, read_only: bool, base_url: str | None,
         api_key_file: str | None) -> None:
    """Run memory tool commands (JSON, one per stdin line) on STORE (id, name or slug).

    Prints one JSON object per command: {"ok": TEXT} or {"error": TEXT}. STORE is
    looked up first: a server that cannot be reached or refuses the key ends the
    command there, with one line and exit status 1.
    """
    server = command_server(base_url, api_key_file)
    found = storenames.resolve_for_cli(server.url, server.key, store_id)
    # An archived store refuses every change: said before anything is sent, as `memfs
    # mcp` says it (each command's refusal by the server read differently: a helper).
    serve_lines(StoreMemory(found.id, server.url, server.key,
                            read_only=read_only or found.archived, locate=server.locate),
                sys.stdin.buffer, sys.stdout)
