"""API failures as the one line a person at the prompt reads, never a traceback.

Every command that talks to a server goes through :func:`call` (or wraps its own
client in :func:`api_failures`), so a refused connection, a wrong key, a URL
without ``http://`` or a refusal by the server read alike in every command:

    Error: cannot reach http://127.0.0.1:1: GET /v1/memory_stores failed: ConnectError: ...
    Error: bad credentials for https://api.anthropic.com: invalid x-api-key

`memfs.cli.main` turns any API error that still escapes a command into the same line.
This module stays as light as `memfs.api.errors`: `memfs mount` must not import
trio or httpx before its daemon starts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

import click

from memfs.api import errors as api_errors

if TYPE_CHECKING:
    from memfs.api.client import MemoryStoresClient
    from memfs.local.server_choice import ServerChoice

T = TypeVar("T")

SCHEMES = ("http://", "https://")


def check_url(url: str) -> str:
    """`url` if it can be asked at all; a URL without its scheme (``localhost:8080``)
    is a one-line error naming where the URL came from, before any request."""
    if not url.lower().startswith(SCHEMES):
        raise click.ClickException(
            f"the server URL {url!r} (--base-url or ANTHROPIC_BASE_URL) must start with "
            "http:// or https://")
    return url


def unreachable(url: str, exc: api_errors.APIError) -> str:
    """Why a server counts as unreachable: no answer, or an answer that is trouble (a
    5xx, a 429), which must not read as no answer."""
    if isinstance(exc, api_errors.APIStatusError):
        return f"{url} answered HTTP {exc.status} ({exc.message})"
    return f"cannot reach {url} ({exc.message})"


def describe(url: str | None, exc: api_errors.APIError, doing: str = "") -> str:
    """The line for `exc`: what failed (`doing`), against which server, and why."""
    where = f" {url}" if url else " the server"
    head = f"{doing}: " if doing else ""
    if isinstance(exc, (api_errors.AuthenticationError, api_errors.PermissionDeniedError)):
        return f"{head}bad credentials for{where.rstrip()}: {exc.message}"
    if isinstance(exc, api_errors.TRANSIENT):
        line = (f"{head}{where.strip()} answered HTTP {exc.status}: {exc.message}"
                if isinstance(exc, api_errors.APIStatusError)  # a 5xx, a 429: it answered
                else f"{head}{where.strip()}: {exc.message}"
                if isinstance(exc, api_errors.UnreadableAnswerError)
                else f"{head}cannot reach{where}: {exc.message}")
        if getattr(exc, "method", None) == "POST" and api_errors.may_have_applied(exc):
            # Not sent again (a blind retry can undo another writer's change): say so.
            line += " (it may have been applied all the same: look before trying again)"
        return line
    if isinstance(exc, api_errors.APIResponseValidationError):
        return f"{head}{where.strip()} gave an answer memfs does not understand: {exc.message}"
    status = f" (HTTP {exc.status})" if exc.status else ""
    return f"{head}{where.strip()} refused it{status}: {exc.message}"


@contextmanager
def api_failures(url: str | None, doing: str = "") -> Iterator[None]:
    """API errors raised inside as one-line click errors (see :func:`describe`)."""
    try:
        yield
    except api_errors.APIError as exc:
        raise click.ClickException(describe(url, exc, doing)) from None


def call(url: str, key: str | None, fn: Callable[[MemoryStoresClient], Awaitable[T]],
         doing: str = "") -> T:
    """`call_with_client` for a command: any API failure is one line, not a traceback."""
    from memfs.api.oneshot import call_with_client

    with api_failures(url, doing):
        return call_with_client(url, key, fn)


def command_server(base_url: str | None, api_key_file: str | None) -> ServerChoice:
    """The server a command talks to (:func:`memfs.local.server_choice.choose_server`), as
    every command takes it: a key file that cannot be read or an embedded server that
    cannot start is one line, a key file others can read is used with a warning, and
    a configured URL must start with http:// or https://."""
    from memfs.api.config import ConfigError
    from memfs.local.server_choice import choose_server

    try:
        choice = choose_server(base_url, None, api_key_file)
    except (ConfigError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None
    warn_open_key_file(api_key_file)
    if not choice.embedded:
        check_url(choice.url)
    return choice


def mount_server(info: dict, api_key_file: str | None = None) -> ServerChoice:
    """The server of a live mount (its registry entry) with the key `memfs mount` gave
    it: the embedded server where it runs now (the mount follows it to a new port, and
    its key is its own), else the mount's URL with the key configured (the flag's
    file, else the environment)."""
    if not info.get("embedded"):
        return command_server(info["base_url"], api_key_file)
    from memfs.local import server as local_server
    from memfs.local.server_choice import ServerChoice

    try:
        return ServerChoice(*local_server.ensure_local_server(), True)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None


def warn_open_key_file(flag: str | None) -> None:
    """A key file others can read is used, with a warning naming the fix (the README
    asks for 0600): refusing it would break a working setup without need. The file is
    the one `resolve_config` reads: the flag's, else ANTHROPIC_API_KEY_FILE unless
    ANTHROPIC_API_KEY is set."""
    import os

    path = flag or (None if os.environ.get("ANTHROPIC_API_KEY")
                    else os.environ.get("ANTHROPIC_API_KEY_FILE"))
    if path:
        warn_open_secret(path, "the API key file")


def warn_open_secret(path: str, what: str) -> None:
    """`what` at `path` others can read is used, with a warning naming the fix."""
    import os

    try:
        mode = os.stat(os.path.expanduser(path)).st_mode
    except OSError:
        return  # reading it says what is wrong
    if mode & 0o077:
        click.echo(f"memfs: warning: {what} {path} is readable by others (mode "
                   f"{mode & 0o777:o}): chmod 600 {path}", err=True)
