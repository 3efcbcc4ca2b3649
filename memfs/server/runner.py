"""uvicorn, configured and hardened for `memfs serve`.

uvicorn (h11) parses HTTP, chunked bodies and keep-alive. What it does not do
on its own, and this module adds through a small subclass of its h11
protocol:

* **A header deadline.** A request head must be complete within
  ``header_timeout`` seconds of the connect or of its own first byte, or the
  connection gets 408 and is closed: a slowloris holds nothing for long.
* **A send deadline.** A response the client has not taken ``send_timeout``
  seconds after it was written (a reader that never reads keeps it in the
  server's buffers) resets the connection.
* **A connection cap, fair per client.** Past ``max_connections`` open
  connections, or past a client address's share, a new one is closed at once
  with 503 instead of taking a file descriptor and memory; near the cap, idle
  connections of the busiest clients are closed first (``connections.py``).
* **The request-head limit, enforced.** h11 checks its 16 KiB only on a head
  that arrives in pieces; a whole head in one read was parsed at any size. A
  head over ``MAX_HEAD`` gets 400 before h11 parses it, however it arrives.
* **Errors in the API's envelope.** A request h11 cannot parse (an HTTP/0.9
  request line, a bad chunk size, oversized headers) gets 400 with the usual
  ``{"type": "error", ...}`` body, not uvicorn's plain text.
* **A real connection reset.** The app can drop a connection after a commit
  (the ``drop`` fault): ``scope["extensions"]["memfs.abort"]`` sets SO_LINGER 0
  and aborts the transport, so the client sees an RST and no response.

:class:`MemfsServer` also releases every request the test gate holds as soon
as shutdown begins, exits 0 on SIGTERM/SIGINT (uvicorn would re-raise the
signal), and reports the listening URL only once it is serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import re
import resource
import signal
import socket
import struct
import time
from collections.abc import Callable, Generator
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from memfs.server.app import MemfsApp
from memfs.server.connections import ConnectionLedger, client_key
from memfs.server.http import new_request_id
from memfs.server.metrics import ServerMetrics

log = logging.getLogger("memfs.server")


#: The documented request-head limit (request line and headers), bytes.
MAX_HEAD = 16 * 1024
# The end of a head, as h11 finds it (bare LF line ends are accepted too).
_HEAD_END = re.compile(rb"\n\r?\n")


def default_max_connections() -> int:
    """Leave file descriptors for the database, logs and the listener."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1000
    return max(16, min(1000, soft - 64))


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    try:
        return bool(infos) and all(
            ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]).is_loopback
            for info in infos)
    except ValueError:
        return False


def default_per_client(max_connections: int) -> int:
    """A client address's share: a tenth of the cap, at least 8."""
    return max(8, max_connections // 10)


def _error_bytes(status: int, reason: str, etype: str, message: str) -> bytes:
    rid = new_request_id()
    body = json.dumps({"type": "error", "error": {"type": etype, "message": message},
                       "request_id": rid}, separators=(",", ":")).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nrequest-id: {rid}\r\nconnection: close\r\n\r\n")
    return head.encode() + body


class MemfsProtocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline, a connection cap, enveloped
    parse errors and an abort hook (see the module docstring)."""

    header_timeout: float = 10.0
    send_timeout: float = 60.0
    ledger: ConnectionLedger  # one per server, set by serve()
    metrics: ServerMetrics | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        inner = self.app
        abort = self._abort

        async def app(scope: Any, receive: Any, send: Any) -> None:
            scope.setdefault("extensions", {})["memfs.abort"] = abort
            await inner(scope, receive, send)

        self.app = app
        self._header_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self.client_key = "-"
        self.last_active = time.monotonic()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:  # h11 writes the head and the body apart: no Nagle stall
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_key = client_key(transport.get_extra_info("peername"))
        refused = self.ledger.admit(self)
        self._count_open()
        if refused is not None:
            message = ("too many connections from your address; retry"
                       if refused == "per_client" else "too many connections; retry")
            transport.write(_error_bytes(503, "Service Unavailable", "overloaded_error",
                                         message))
            transport.close()
            return
        self._arm_header_timer()

    def _count_open(self) -> None:
        if self.metrics is not None:
            self.metrics.connections_open.set(self.ledger.total)

    def is_idle(self) -> bool:
        """No request in progress: kept alive between requests, or still short of
        a complete request head."""
        return (not self.transport.is_closing() and self.conn.their_state is h11.IDLE
                and (self.cycle is None or self.cycle.response_complete))

    def close_idle(self) -> None:
        """Closed by the ledger to make room near the cap (no answer: nothing was asked)."""
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.ledger.release(self)
        self._count_open()
        self._disarm_header_timer()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self.last_active = time.monotonic()
        # asyncio buffers whatever the client has not taken yet: a client that never
        # reads would keep the response in memory forever. It gets send_timeout.
        if self.transport.get_write_buffer_size() > 0 and self._send_timer is None:
            self._send_timer = self.loop.call_later(self.send_timeout, self._send_deadline)
        super().on_response_complete()

    def _send_deadline(self) -> None:
        self._send_timer = None
        if not self.transport.is_closing() and self.transport.get_write_buffer_size() > 0:
            log.warning("a client did not take its response in %gs: connection reset",
                        self.send_timeout)
            self._abort()

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        # The deadline runs from the first byte of a request head (or from the
        # connect); an idle keep-alive connection is uvicorn's keep-alive timeout's.
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_header_timer()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is complete
            self._disarm_header_timer()

    def handle_events(self) -> None:
        # Also runs for a pipelined request's head once the previous answer is out.
        if self.conn.their_state is h11.IDLE and self._head_too_large():
            self._refused_head("too_large")
            self._reply_and_close(400, "Bad Request", "invalid_request_error",
                                  f"request head is larger than {MAX_HEAD} bytes")
            return
        super().handle_events()

    def _head_too_large(self) -> bool:
        """Whether the request head waiting in h11's buffer is (or will be) over
        MAX_HEAD, whether or not it is complete."""
        buffered, _ = self.conn.trailing_data
        if len(buffered) <= MAX_HEAD:
            return False
        return _HEAD_END.search(buffered, 0, MAX_HEAD) is None

    def _refused_head(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.heads_refused.labels(reason).inc()

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._header_deadline)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_deadline(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        waiting_for_head = self.conn.their_state is h11.IDLE and (
            self.cycle is None or self.cycle.response_complete)
        if waiting_for_head:
            self._refused_head("timeout")
            self._reply_and_close(408, "Request Timeout", "invalid_request_error",
                                  "request headers not received in time")

    def send_400_response(self, msg: str) -> None:
        self._refused_head("malformed")
        self._reply_and_close(400, "Bad Request", "invalid_request_error",
                              "malformed HTTP request")

    def _reply_and_close(self, status: int, reason: str, etype: str, message: str) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # The app is still on this request: it must not answer a second time.
            started = cycle.response_started
            cycle.disconnected = True
            cycle.message_event.set()
            if started:
                self.transport.close()
                return
        if not self.transport.is_closing():
            self.transport.write(_error_bytes(status, reason, etype, message))
            self.transport.close()

    def _abort(self) -> None:
        """RST the connection: SO_LINGER 0, then close without flushing."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()


class MemfsServer(uvicorn.Server):
    """uvicorn's server with memfs's start report and shutdown rules."""

    def __init__(self, config: uvicorn.Config, app: MemfsApp,
                 on_listening: Callable[[], None]) -> None:
        super().__init__(config)
        self.memfs_app = app
        self.on_listening = on_listening

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """SIGTERM/SIGINT stop the server gracefully and the process exits 0
        (uvicorn's own version re-raises the signal after shutdown)."""
        original = {sig: signal.signal(sig, self.handle_exit)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.on_listening()

    async def main_loop(self) -> None:
        """uvicorn's loop, woken at once by SIGTERM/SIGINT. uvicorn's own looks at
        `should_exit` every 0.1 s: every `memfs serve stop` (and every test's server)
        waited out half a tick on average."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # a signal handler runs between two bytecodes of this thread: only a thread-safe
        # call may touch the loop from there
        self._wake = lambda: loop.call_soon_threadsafe(stop.set)
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000  # on_tick refreshes the Date header every 10
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.1):
                    await stop.wait()

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        wake = getattr(self, "_wake", None)
        if wake is not None:
            wake()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown (listeners closed, each connection told to close once its
        response is out, requests given `timeout_graceful_shutdown` to finish, then
        cancelled), but watching for the last connection every 10 ms: uvicorn's sleeps
        0.1 s first whatever is open. Lifespan is off: no event to send."""
        self.memfs_app.gate.clear()  # held requests (test control) finish now
        state = self.server_state
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(state.connections):
            connection.shutdown()
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                while (state.connections or state.tasks) and not self.force_exit:
                    await asyncio.sleep(0.01)
        except TimeoutError:
            log.error("shutdown: cancelling %d request(s) still running after %s s",
                      len(state.tasks), self.config.timeout_graceful_shutdown)
            for task in state.tasks:
                task.cancel(msg="memfs serve: graceful shutdown timed out")
        for server in self.servers:
            await server.wait_closed()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (OSError when that is impossible)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def serve(app: MemfsApp, sock: socket.socket, *, on_listening: Callable[[], None],
          header_timeout: float = 10.0, send_timeout: float = 60.0,
          max_connections: int | None = None, max_per_client: int | None = None,
          keep_alive: int = 75) -> None:
    """Serve ``app`` on ``sock`` until SIGTERM/SIGINT."""
    cap = max_connections or default_max_connections()
    metrics = app.metrics
    ledger = ConnectionLedger(
        cap, max_per_client or default_per_client(cap),
        on_refused=lambda reason: metrics.connections_refused.labels(reason).inc(),
        on_shed=metrics.idle_closed.inc)
    protocol = type("BoundMemfsProtocol", (MemfsProtocol,), {
        "header_timeout": header_timeout,
        "send_timeout": send_timeout,
        "ledger": ledger,
        "metrics": metrics,
    })
    config = uvicorn.Config(
        app,
        http=protocol,  # type: ignore[arg-type]
        interface="asgi3",
        lifespan="off",
        log_config=None,  # our logging setup (memfs.local.logs) stays in charge
        access_log=False,
        server_header=False,
        proxy_headers=False,
        ws="none",
        loop="asyncio",
        timeout_keep_alive=keep_alive,
        timeout_graceful_shutdown=10,
    )
    MemfsServer(config, app, on_listening).run(sockets=[sock])
