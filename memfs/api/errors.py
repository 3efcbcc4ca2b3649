"""Typed errors raised by :class:`memfs.api.client.MemoryStoresClient`.

Every error carries ``status`` (HTTP status, or ``None`` when no response was
received), ``type`` (the API's ``error.type``), ``message`` and ``request_id``.

Two tuples group them by what the caller should do:

* :data:`REFUSED` -- permanent refusals (invalid path/content, oversize).
  Retrying the same request will fail the same way; keep the data locally and
  retry only once it changes.
* :data:`TRANSIENT` -- network trouble, rate limits, server errors. The client
  has already retried (``max_retries``); the caller should go offline and try
  again later.

Anything else (401/403/404/409, ...) needs a specific decision by the caller.

Messages never contain the API key: the client scrubs it from any text the
server sends back before building an error.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "APIError",
    "APIStatusError",
    "APIResponseValidationError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "PreconditionFailedError",
    "PathConflictError",
    "RequestTooLargeError",
    "RequestTimeoutError",
    "RateLimitError",
    "ServerError",
    "APIConnectionError",
    "NotTheAPIError",
    "UnreadableAnswerError",
    "REFUSED",
    "TRANSIENT",
    "error_for_status",
]


class APIError(Exception):
    """Base class of every error raised by the Memory Stores client."""

    status: int | None
    type: str
    message: str
    request_id: str | None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        type: str = "api_error",  # mirrors the wire field name
        request_id: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.request_id = request_id
        # The ``error`` object of the response envelope (or ``{}``).
        self.body: dict[str, Any] = body or {}

    def __str__(self) -> str:
        parts = []
        if self.status is not None:
            parts.append(f"HTTP {self.status}")
        if self.type:
            parts.append(self.type)
        if self.request_id:
            parts.append(f"request_id={self.request_id}")
        suffix = f" ({', '.join(parts)})" if parts else ""
        return f"{self.message}{suffix}"

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(status={self.status!r}, type={self.type!r}, "
            f"message={self.message!r}, request_id={self.request_id!r})"
        )


class APIStatusError(APIError):
    """The server answered with an HTTP error status."""

    status: int


class APIResponseValidationError(APIError):
    """A 2xx response whose body is not the JSON object we expected."""


class BadRequestError(APIStatusError):
    """400 ``invalid_request_error``.

    Also raised *client-side*, before anything is sent, for paths, content or
    parameters the server would refuse (``client_side`` is then True and
    ``path_error`` holds the :class:`memfs.core.paths.PathError`, if any, so the
    filesystem can choose ENAMETOOLONG vs EINVAL).
    """

    def __init__(self, message: str, **kw: Any) -> None:
        self.client_side: bool = kw.pop("client_side", False)
        self.path_error = kw.pop("path_error", None)
        kw.setdefault("status", 400)
        kw.setdefault("type", "invalid_request_error")
        super().__init__(message, **kw)


class AuthenticationError(APIStatusError):
    """401: missing or invalid API key."""


class PermissionDeniedError(APIStatusError):
    """403: the key may not act on this resource."""


class NotFoundError(APIStatusError):
    """404: unknown (or deleted) store, memory or version."""


class ConflictError(APIStatusError):
    """409 of a type other than the two memory-specific ones below."""


class PreconditionFailedError(ConflictError):
    """409 ``memory_precondition_failed_error``: the stored sha moved.

    Raised for an update whose ``precondition`` did not match and for a
    delete whose ``expected_content_sha256`` did not match.
    """


class PathConflictError(ConflictError):
    """409 ``memory_path_conflict_error``: the path (or an ancestor or
    descendant of it) is occupied by another memory.

    ``conflicting_path`` / ``conflicting_memory_id`` identify the blocker
    (``conflicting_memory_id`` may be ``None`` or ``""`` when the server
    cannot tell).
    """

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.conflicting_path: str | None = self.body.get("conflicting_path")
        self.conflicting_memory_id: str | None = self.body.get("conflicting_memory_id")


class RequestTooLargeError(APIStatusError):
    """413: request body too large."""


class RequestTimeoutError(APIStatusError):
    """408: the server gave up waiting for the request (after our retries)."""


class RateLimitError(APIStatusError):
    """429 (after our retries). ``retry_after`` is the server's hint in seconds."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ServerError(APIStatusError):
    """Any status >= 500 (including 529 ``overloaded_error``), after retries."""


class APIConnectionError(APIError):
    """No usable response: connect/read/write error, reset, timeout (after retries)."""

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("type", "connection_error")
        super().__init__(message, **kw)


class UnreadableAnswerError(APIConnectionError):
    """A 2xx whose body is not JSON: the server applied the request (it said so) and
    its answer did not arrive whole (a gateway's page, a body cut short with no
    length to tell). It is a lost answer (`maybe_applied`): taken for a refusal, a
    create whose answer was cut short was sent again as new while the user deleted
    the file, which came back (found by a helper)."""

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("type", "unreadable_answer")
        super().__init__(message, **kw)


class NotTheAPIError(APIConnectionError):
    """A 404 that is not the API's (no ``error`` object): a web server, a balancer
    between deploys, a URL that is not a memory store server. The API was not reached:
    nothing was applied, and nothing is known of the store, memory or version asked
    for (`maybe_applied` says what earlier attempts may have done). Taking it for the
    API's 404 turned a live mount read-only as if its store had been deleted."""

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("type", "not_the_api")
        super().__init__(message, **kw)


#: Permanent refusals: don't retry until the content changes.
REFUSED = (BadRequestError, RequestTooLargeError)
#: Temporary trouble: go offline, retry later.
TRANSIENT = (APIConnectionError, RateLimitError, ServerError, RequestTimeoutError)


def may_have_applied(exc: BaseException) -> bool:
    """Whether the request that raised `exc` may have been applied all the same.

    An answer that refuses (any 4xx, a 429) means it was not. No answer (a reset, a
    timeout while waiting) or a 5xx (a proxy's 502/504 may come after the server
    committed) leaves it unknown, unless no attempt reached the server at all (every
    connection refused): the client sets ``maybe_applied`` on what it raises."""
    if isinstance(exc, RateLimitError) or not isinstance(exc, TRANSIENT):
        return bool(getattr(exc, "maybe_applied", False))
    return bool(getattr(exc, "maybe_applied", True))


def may_land_later(exc: BaseException) -> bool:
    """Whether the server may still be at work on the request that raised `exc`, and so
    apply it later: no answer came (a reset, a timeout while waiting), or a gateway's
    answer (502: its connection to the server broke; 504: it stopped waiting), which a
    server behind it may still finish. Any other answer, a 5xx included (a 500, a 503),
    came from the server once done with the request, or from a gateway that never
    reached it."""
    if not may_have_applied(exc):
        return False
    status = getattr(exc, "status", None)
    return status is None or status in (502, 504)


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    408: RequestTimeoutError,
    409: ConflictError,
    413: RequestTooLargeError,
    429: RateLimitError,
}

_BY_409_TYPE: dict[str, type[ConflictError]] = {
    "memory_precondition_failed_error": PreconditionFailedError,
    "memory_path_conflict_error": PathConflictError,
}


def error_for_status(status: int, error_type: str) -> type[APIStatusError]:
    """The exception class for an HTTP status and ``error.type``."""
    if status == 409:
        return _BY_409_TYPE.get(error_type, ConflictError)
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, APIStatusError)
