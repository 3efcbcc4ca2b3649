"""Async (trio) httpx client for the Memory Stores API.

See docs/CLIENT.md. Public names are re-exported here::

    from memfs.api import MemoryStoresClient, resolve_config, PathConflictError

The client's names load on first use: `from memfs.api import errors` (every CLI
command) must not pay for httpx and trio.
"""

from typing import Any

from memfs.api.config import ClientConfig, ConfigError, resolve_config
from memfs.api.errors import (
    REFUSED,
    TRANSIENT,
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    NotFoundError,
    PathConflictError,
    PermissionDeniedError,
    PreconditionFailedError,
    RateLimitError,
    RequestTimeoutError,
    RequestTooLargeError,
    ServerError,
)
from memfs.api.models import (
    Memory,
    MemoryPrefix,
    MemoryStore,
    MemoryVersion,
    Page,
    Session,
    SessionResource,
    content_sha256,
)

__all__ = [
    "ANTHROPIC_VERSION",
    "MEMORY_BETA",
    "SESSIONS_BETA",
    "MemoryStoresClient",
    "parse_retry_after",
    "ClientConfig",
    "ConfigError",
    "resolve_config",
    "REFUSED",
    "TRANSIENT",
    "APIError",
    "APIStatusError",
    "APIResponseValidationError",
    "APIConnectionError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "NotFoundError",
    "PathConflictError",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "RateLimitError",
    "RequestTimeoutError",
    "RequestTooLargeError",
    "ServerError",
    "Memory",
    "MemoryPrefix",
    "MemoryStore",
    "MemoryVersion",
    "Session",
    "SessionResource",
    "Page",
    "content_sha256",
]

_CLIENT_NAMES = ("ANTHROPIC_VERSION", "MEMORY_BETA", "SESSIONS_BETA", "MemoryStoresClient",
                 "parse_retry_after")


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        from memfs.api import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
