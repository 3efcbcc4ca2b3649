"""Two agents, two MemoryStoreTool instances, one memory, two threads, a faulty server.

`memfs serve` injects 429s and dropped responses (the request is applied, then the
connection is reset) while both agents edit the same memory. Every edit is a
read-modify-write with the content_sha256 precondition, re-applied on a conflict, and a
write whose answer was lost is found in the memory's versions instead of being applied
again. So: every edit reported as done is in the memory exactly once, an edit reported
as failed says so honestly, and no version holds an edit twice.
"""

from __future__ import annotations

import threading

import pytest
from toolutil import new_store, outcome, store_files, sync_tool, with_engine

pytestmark = pytest.mark.timeout(120)

FAULTS = {"rate_429": 0.15, "drop_rate": 0.15, "retry_after": 0.01}
EDITS = 15


def fast_tool(server, store):
    """A tool whose client backs off in milliseconds, to keep the test short."""
    return with_engine(sync_tool(server, store), backoff_base=0.005, backoff_max=0.05)


def run_agents(agent, names=("A", "B")) -> None:
    start = threading.Barrier(len(names))
    errors: list[BaseException] = []

    def body(name: str) -> None:
        try:
            start.wait()
            agent(name)
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_concurrent_inserts_are_never_lost_silently(server):
    store = new_store(server)
    sync_tool(server, store).call(
        {"command": "create", "path": "/memories/log.md", "file_text": "# log\n"}
    )
    results: dict[str, tuple[str, object]] = {}

    def agent(name: str) -> None:
        tool = fast_tool(server, store)  # one tool instance per agent
        for i in range(EDITS):
            line = f"{name}-{i}"
            results[line] = outcome(tool, {
                "command": "insert", "path": "/memories/log.md",
                "insert_line": 1, "insert_text": line + "\n",
            })

    server.set_faults(**FAULTS)
    try:
        run_agents(agent)
    finally:
        server.clear_faults()

    lines = store_files(server, store)["/log.md"].split("\n")
    assert lines[0] == "# log" and lines[-1] == ""
    inserted = lines[1:-1]
    assert len(inserted) == len(set(inserted)), "an insert was applied twice"
    assert set(inserted) <= set(results)
    for line, (kind, text) in results.items():
        if kind == "ok":
            assert text == "The file /memories/log.md has been edited."
            assert line in inserted, f"{line} was reported done but is missing"
        else:  # an honest failure: it says whether the edit may have been saved
            assert kind == "error", (line, kind, text)
            if "may or may not have been saved" not in str(text):
                assert line not in inserted, (line, text)
    # Each edit that landed is exactly one version: nothing was written twice.
    versions = server.sdk().beta.memory_stores.memory_versions.list(store)
    modified = [v for v in versions if v.operation == "modified"]
    assert len(modified) == len(inserted)
    done = sum(1 for kind, _ in results.values() if kind == "ok")
    assert done >= EDITS  # the faults leave most edits to succeed


def test_concurrent_counters_end_where_each_agent_believes(server):
    """str_replace races: each agent bumps its own counter line; a lost update would
    leave a counter behind the agent's count of successful edits."""
    store = new_store(server)
    sync_tool(server, store).call(
        {"command": "create", "path": "/memories/c.md", "file_text": "A: 0\nB: 0\n"}
    )
    believed: dict[str, int] = {}

    def agent(name: str) -> None:
        tool = fast_tool(server, store)
        value = 0
        for _ in range(EDITS):
            kind, text = outcome(tool, {
                "command": "str_replace", "path": "/memories/c.md",
                "old_str": f"{name}: {value}\n", "new_str": f"{name}: {value + 1}\n",
            })
            if kind == "ok":
                value += 1
            elif "may or may not" in str(text):
                # What an agent does after an unknown outcome: look, then go on.
                seen = outcome(tool, {"command": "view", "path": "/memories/c.md"})
                if seen[0] == "ok" and f"{name}: {value + 1}" in str(seen[1]):
                    value += 1
        believed[name] = value

    server.set_faults(**FAULTS)
    try:
        run_agents(agent)
    finally:
        server.clear_faults()

    content = store_files(server, store)["/c.md"]
    assert content == f"A: {believed['A']}\nB: {believed['B']}\n"
    assert believed["A"] >= EDITS // 2 and believed["B"] >= EDITS // 2
