"""The daemon's end of the control socket (the protocol: `memfs.local.control`).

Each connection is served in its own task: a slow or stuck client (`memfs watch`
not reading) holds only its own connection.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from pathlib import Path

import trio

from memfs.local.control import SOCKET_NAME, Handler, Stream, short_path

log = logging.getLogger(__name__)


async def serve(state_dir: Path, handler: Handler,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Accept connections forever; each line is a request answered by handler."""
    path = state_dir / SOCKET_NAME
    path.unlink(missing_ok=True)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        with short_path(state_dir) as short:
            await sock.bind(short)
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.listen(8)
    listener = trio.SocketListener(sock)
    task_status.started()
    try:
        async with trio.open_nursery() as nursery:
            while True:
                stream = await listener.accept()
                nursery.start_soon(_serve_one, stream, handler)
    finally:
        path.unlink(missing_ok=True)


async def _serve_one(stream: trio.SocketStream, handler: Handler) -> None:
    """One connection. Whatever fails here ends this connection only: its task runs in
    the accept loop's nursery, so an exception let out (a stream's comes as a group,
    from its nursery) would end the daemon, and its mount with it."""
    try:
        async with stream:
            await _answer(stream, handler)
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client left
    except* Exception:
        log.exception("control socket: a connection failed")


async def _answer(stream: trio.SocketStream, handler: Handler) -> None:
    buf = b""
    while b"\n" not in buf:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        buf += chunk
    try:
        request = json.loads(buf.split(b"\n", 1)[0])
        reply = await handler(request)
    except Exception as exc:  # a bad request is answered as one
        reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if isinstance(reply, Stream):
        await _send_stream(stream, reply)
    else:
        await stream.send_all(json.dumps(reply).encode() + b"\n")


async def _send_stream(stream: trio.SocketStream, reply: Stream) -> None:
    """Send the stream's lines until it ends or the client closes its end (seen at
    once, not at the next line: a quiet stream must not hold a finished reader)."""
    async with trio.open_nursery() as nursery:

        async def until_closed() -> None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                while await stream.receive_some(4096):
                    pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(until_closed)
        try:
            async for line in reply.lines:
                await stream.send_all(json.dumps(line).encode() + b"\n")
        finally:
            aclose = getattr(reply.lines, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True):
                    await aclose()
        nursery.cancel_scope.cancel()
