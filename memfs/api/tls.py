"""The TLS context of a process's API clients: one per process, made once.

httpx loads the CA bundle for every client it makes: 20-60 ms of CPU on a small
machine, spent even for an ``http://`` server. Two ways to pay it once:

* `memfs mount` and its daemon call :func:`prepare` early, so the load (it releases
  the GIL) runs in a thread beside their other start-up work (imports, waiting for
  the configuration); :class:`MemoryStoresClient` then passes the context made
  (:func:`verify`) instead of having httpx build its own. A process that never
  calls :func:`prepare` is unchanged there.
* the memory tool, which makes a client per command, takes :func:`context`: the
  same context, made on first use when nothing prepared it.

Either way it is the one httpx would build (``httpx.create_ssl_context``: the CA
bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``).
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_thread: threading.Thread | None = None
_made: list[Any] = []


def _make() -> Any:
    import httpx

    return httpx.create_ssl_context(verify=True, trust_env=True)


def prepare() -> None:
    """Start making the context (once per process)."""
    global _thread
    if _thread is not None:
        return

    def make() -> None:
        try:
            _made.append(_make())
        except Exception:  # noqa: S110 - the client then makes its own and reports it
            pass

    _thread = threading.Thread(target=make, name="memfs-tls", daemon=True)
    _thread.start()


def verify() -> Any:
    """httpx's `verify` for a client: the context prepared, else True (httpx makes one)."""
    if _thread is None:
        return True
    _thread.join()
    return _made[0] if _made else True


def context() -> Any:
    """The process's one context (an ``ssl.SSLContext``): the one prepared, else made
    now (once; an error making it is raised, as httpx would)."""
    with _lock:
        if _thread is not None:
            _thread.join()
        if not _made:
            _made.append(_make())
        return _made[0]
