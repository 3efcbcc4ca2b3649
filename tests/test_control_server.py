"""The daemon's control socket (memfs/mount/control_server.py), served in process: one
client's failure stays its own connection's, never the daemon's."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import trio

from memfs.local import control
from memfs.local.control import Stream
from memfs.mount import control_server


def handler_of(events) -> Callable[[dict], Awaitable[dict | Stream]]:
    """A daemon's handler: `events` streams what events() yields; any other command is
    answered with one line naming it."""

    async def handler(request: dict) -> dict | Stream:
        if request["cmd"] == "events":
            return Stream(events())
        return {"ok": True, "cmd": request["cmd"]}

    return handler


async def test_a_stream_reader_that_stops_reading_leaves_the_daemon_serving(tmp_path):
    """`memfs watch` (the `events` stream) whose reader shuts its reading end down while
    events keep coming: the next send fails (EPIPE), inside the stream's nursery. That
    failure ended the connection's task with an exception group, which escaped the
    accept loop and took the whole daemon (its mount) down."""
    tick = trio.Event()

    async def events() -> AsyncIterator[dict]:
        n = 0
        while True:
            await tick.wait()
            n += 1
            yield {"n": n}

    async with trio.open_nursery() as nursery:
        await nursery.start(control_server.serve, tmp_path, handler_of(events))
        with control.short_path(tmp_path) as short:
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            await sock.connect(short)
        await sock.send(b'{"cmd": "events"}\n')
        sock.shutdown(socket.SHUT_RD)
        await trio.sleep(0.05)
        tick.set()  # lines go out to a reader that reads no more
        await trio.sleep(0.2)
        # The daemon still answers, on a new connection.
        reply = await trio.to_thread.run_sync(control.request, tmp_path, {"cmd": "status"})
        assert reply == {"ok": True, "cmd": "status"}
        sock.close()
        nursery.cancel_scope.cancel()


async def test_a_stream_that_fails_ends_its_connection_only(tmp_path, caplog):
    """A defect in a stream's lines (an exception while it runs) is logged and ends that
    connection; the daemon goes on answering."""

    async def events() -> AsyncIterator[dict]:
        yield {"n": 1}
        raise RuntimeError("a defect in the stream")

    async with trio.open_nursery() as nursery:
        await nursery.start(control_server.serve, tmp_path, handler_of(events))
        got = [line async for line in control.stream_async(tmp_path, {"cmd": "events"})]
        assert got == [{"n": 1}]
        reply = await trio.to_thread.run_sync(control.request, tmp_path, {"cmd": "status"})
        assert reply == {"ok": True, "cmd": "status"}
        assert "a defect in the stream" in caplog.text
        nursery.cancel_scope.cancel()
