"""The control socket: how `memfs unmount`, `status` and `conflicts` talk to a daemon.

One JSON object per line each way, over a Unix socket in the mount's state
directory (mode 0600). A request is answered by one line, except a stream (the
`events` command of `memfs watch`): its handler returns a :class:`Stream`, whose
objects go out one line each until the client closes the connection.

AF_UNIX paths are limited to 108 bytes and state directories can be deeper
than that, so both ends reach the socket through
``/proc/self/fd/<dirfd>/control.sock``: short, and still inside the 0700
state directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import trio

SOCKET_NAME = "control.sock"


@dataclass
class Stream:
    """A reply of many lines: each object `lines` yields, until the client leaves."""

    lines: AsyncIterator[dict]


Handler = Callable[[dict], Awaitable["dict | Stream"]]


@contextlib.contextmanager
def _short_path(state_dir: Path) -> Iterator[str]:
    fd = os.open(state_dir, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET_NAME}"
    finally:
        os.close(fd)


async def serve(state_dir: Path, handler: Handler,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Accept connections forever; each line is a request answered by handler."""
    path = state_dir / SOCKET_NAME
    path.unlink(missing_ok=True)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        with _short_path(state_dir) as short:
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
    async with stream:
        buf = b""
        while b"\n" not in buf:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            buf += chunk
        try:
            request = json.loads(buf.split(b"\n", 1)[0])
            reply = await handler(request)
        except Exception as exc:  # a bad request must not take the daemon down
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        try:
            if isinstance(reply, Stream):
                await _send_stream(stream, reply)
            else:
                await stream.send_all(json.dumps(reply).encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


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


@contextlib.contextmanager
def _sent(state_dir: Path, payload: dict, timeout: float) -> Iterator[socket.socket]:
    """A blocking connection to the daemon's socket, the request sent on it."""
    if not (state_dir / SOCKET_NAME).exists():
        raise FileNotFoundError("no control socket (is the daemon running?)")
    with _short_path(state_dir) as short, socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        sock.connect(short)
        sock.sendall(json.dumps(payload).encode() + b"\n")
        yield sock


def request(state_dir: Path, payload: dict, *, timeout: float = 10.0) -> dict:
    """Blocking client for the CLI; raises OSError when no daemon answers."""
    with _sent(state_dir, payload, timeout) as sock:
        buf = b""
        while b"\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
    if not buf:
        raise ConnectionError("the daemon closed the connection without answering")
    return json.loads(buf.split(b"\n", 1)[0])


async def stream_async(state_dir: Path, payload: dict) -> AsyncIterator[dict]:
    """:func:`stream` for async code (anyio: trio or asyncio), with no thread that could
    outlive its caller blocked on a read."""
    import anyio

    if not (state_dir / SOCKET_NAME).exists():
        raise FileNotFoundError("no control socket (is the daemon running?)")
    with _short_path(state_dir) as short:
        conn = await anyio.connect_unix(short)
    async with conn:
        await conn.send(json.dumps(payload).encode() + b"\n")
        buf = b""
        while True:
            try:
                buf += await conn.receive(65536)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield json.loads(line)


def stream(state_dir: Path, payload: dict, *, timeout: float = 10.0) -> Iterator[dict]:
    """Blocking client of a stream command: its objects as they come (no timeout
    once connected); ends when the daemon closes. Raises OSError when no daemon
    answers."""
    with _sent(state_dir, payload, timeout) as sock:
        sock.settimeout(None)
        with sock.makefile("rb") as lines:
            for line in lines:
                yield json.loads(line)
