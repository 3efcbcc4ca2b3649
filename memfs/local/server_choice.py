"""Which server, with which key, a memfs command or the memory tool talks to.

From the same places for every caller: an argument wins over ``ANTHROPIC_BASE_URL``
/ ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_API_KEY_FILE`` (:func:`memfs.api.config.resolve_config`);
with no base URL anywhere, the embedded local server (:mod:`memfs.local.server`)
with its own private key. Light: no httpx or trio until the embedded server is asked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

from memfs.api.config import resolve_config


class ServerChoice(NamedTuple):
    url: str
    key: str | None
    #: The embedded local server (its key is its own, whatever was configured).
    embedded: bool

    @property
    def locate(self) -> Callable[[], Awaitable[str | None]] | None:
        """For a long-lived command's clients (`MemoryStoresClient(locate=…)`): the
        embedded server followed to the port it restarted on; a configured server is
        where it was configured."""
        if not self.embedded:
            return None
        from memfs.local.server import located

        return located


def choose_server(base_url: str | None, api_key: str | None = None,
                  api_key_file: str | None = None, *, start: bool = True) -> ServerChoice:
    """The server to use. ``start``: start the embedded server when it is needed and
    not running (False: shell completion, which never starts it, gets RuntimeError).

    Raises ConfigError (an unreadable key file) and RuntimeError (the embedded server
    cannot be started, or is not running and ``start`` is False).
    """
    cfg = resolve_config(base_url, api_key, api_key_file)
    if cfg.base_url:
        return ServerChoice(cfg.base_url, cfg.api_key, False)
    from memfs.local import server as local_server

    if start:
        return ServerChoice(*local_server.ensure_local_server(), True)
    url = local_server.running_url()
    if url is None:
        raise RuntimeError("the embedded local server is not running")
    return ServerChoice(url, local_server.api_key(), True)
