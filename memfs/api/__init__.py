"""Async (trio) httpx client for the Memory Stores API.

See docs/CLIENT.md. Public names are re-exported here::

    from memfs.api import MemoryStoresClient, resolve_config, PathConflictError
"""

from .client import (
    ANTHROPIC_VERSION,
    MEMORY_BETA,
    SESSIONS_BETA,
    MemoryStoresClient,
    parse_retry_after,
)
from .config import ClientConfig, ConfigError, resolve_config
from .errors import (
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
from .models import (
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
