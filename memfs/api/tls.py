"""The TLS context of a process's API clients, made ahead in a thread.

httpx loads the CA bundle for every client it makes: 20-60 ms of CPU on a small
machine, spent even for an ``http://`` server. `memfs mount` and its daemon call
:func:`prepare` early, so the load (it releases the GIL) runs beside their other
start-up work (imports, waiting for the configuration); :class:`MemoryStoresClient`
then passes the context made (:func:`verify`) instead of having httpx build its own,
the same one httpx would build (``httpx.create_ssl_context``: the CA bundle, or
``SSL_CERT_FILE`` / ``SSL_CERT_DIR``). A process that never calls :func:`prepare`
is unchanged.
"""

from __future__ import annotations

import threading
from typing import Any

_thread: threading.Thread | None = None
_made: list[Any] = []


def prepare() -> None:
    """Start making the context (once per process)."""
    global _thread
    if _thread is not None:
        return

    def make() -> None:
        try:
            import httpx

            _made.append(httpx.create_ssl_context(verify=True, trust_env=True))
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
