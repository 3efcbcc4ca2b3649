"""One API exchange from synchronous code (the CLI): a fresh client, closed after it.

The CLI's one-shot exchanges go through :func:`call_with_client`, so they wait and
retry alike (`memfs history` keeps a client of its own, with its own retries). trio
and httpx load only when it is called: importing this module stays as light as
`memfs.api.errors`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from memfs.api.client import MemoryStoresClient

T = TypeVar("T")

#: A command's request waits this long (one retry): a person is waiting at the prompt.
TIMEOUT = 15.0


def call_with_client(base_url: str, api_key: str | None,
                     fn: Callable[[MemoryStoresClient], Awaitable[T]]) -> T:
    """`fn(client)` run to completion under trio with its own short-lived client."""
    import trio

    from memfs.api.client import MemoryStoresClient

    async def go() -> T:
        async with MemoryStoresClient(base_url, api_key, max_retries=1, timeout=TIMEOUT) as c:
            return await fn(c)

    return trio.run(go)
