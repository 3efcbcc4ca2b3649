"""The control socket: how `memfs unmount`, `status` and `conflicts` talk to a daemon.

One JSON object per line each way, over a Unix socket in the mount's state
directory (mode 0600). This module is the protocol and its clients, standard library
only, so `memfs status` and `unmount` start without trio; the daemon's end is
`memfs.mount.control_server`. A request is answered by one line, except a stream (the
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

SOCKET_NAME = "control.sock"


@dataclass
class Stream:
    """A reply of many lines: each object `lines` yields, until the client leaves."""

    lines: AsyncIterator[dict]


Handler = Callable[[dict], Awaitable["dict | Stream"]]


@contextlib.contextmanager
def short_path(state_dir: Path) -> Iterator[str]:
    fd = os.open(state_dir, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET_NAME}"
    finally:
        os.close(fd)


@contextlib.contextmanager
def _sent(state_dir: Path, payload: dict, timeout: float) -> Iterator[socket.socket]:
    """A blocking connection to the daemon's socket, the request sent on it."""
    if not (state_dir / SOCKET_NAME).exists():
        raise FileNotFoundError("no control socket (is the daemon running?)")
    with short_path(state_dir) as short, socket.socket(socket.AF_UNIX) as sock:
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
    with short_path(state_dir) as short:
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
