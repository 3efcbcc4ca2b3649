"""Where the client connects, and with which key.

Flags override the environment (the official SDKs' conventions):

* base URL: ``base_url`` flag, else ``ANTHROPIC_BASE_URL``, else ``None``
  (the caller then uses the embedded local server). A trailing ``/`` is
  stripped.
* API key: ``api_key`` flag, else the ``api_key_file`` flag (file contents,
  stripped), else ``ANTHROPIC_API_KEY``, else the file named by
  ``ANTHROPIC_API_KEY_FILE``, else a bearer token from ``ANTHROPIC_AUTH_TOKEN``
  (the SDK's name for it; an environment worker's sessions token), carried as
  ``"Bearer <token>"`` and sent in ``Authorization`` instead of ``x-api-key``,
  else ``None`` (no credential is sent).

The key is never part of ``repr()`` / ``str()`` of :class:`ClientConfig`, and
errors about an unreadable key file name the file, never its contents.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ClientConfig", "ConfigError", "resolve_config"]


#: A credential given as ``"Bearer <token>"`` goes in ``Authorization``, not ``x-api-key``.
BEARER = "Bearer "


class ConfigError(ValueError):
    """The configuration cannot be used (e.g. the key file cannot be read)."""


@dataclass
class ClientConfig:
    base_url: str | None
    api_key: str | None = field(default=None, repr=False)

    @property
    def has_api_key(self) -> bool:
        return bool(self.api_key)


def _read_key_file(path: str) -> str | None:
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            key = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        # Name the file and the reason, never any content.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"cannot read API key file {path!r}: {reason}") from None
    return _checked(key, f"the API key file {path!r}") or None


def _checked(key: str, source: str) -> str:
    """A key goes into a header as it is: one that a header cannot carry (a second line
    in its file, a space, a control or a non-ASCII character) made the HTTP library's
    error quote it, and memfs printed, logged and showed that error in `memfs status`
    (found by a helper). Refused here, once, naming where it came from, never it."""
    if all("!" <= c <= "~" for c in key):
        return key
    what = "more than one line" if "\n" in key or "\r" in key else \
        "a space, a control or a non-ASCII character"
    raise ConfigError(f"{source} holds {what}: an API key is one word of printable "
                      "ASCII characters (the key is not shown)")


def resolve_config(
    base_url: str | None = None,
    api_key: str | None = None,
    api_key_file: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> ClientConfig:
    """Combine flags and environment into a :class:`ClientConfig` (flags win)."""
    env = os.environ if env is None else env

    url = base_url or env.get("ANTHROPIC_BASE_URL") or None
    if url is not None:
        url = url.strip().rstrip("/") or None

    key: str | None
    if api_key:
        key = _checked(api_key.strip(), "the --api-key value") or None
    elif api_key_file:
        key = _read_key_file(api_key_file)
    elif env.get("ANTHROPIC_API_KEY"):
        key = _checked(env["ANTHROPIC_API_KEY"].strip(), "$ANTHROPIC_API_KEY") or None
    elif env.get("ANTHROPIC_API_KEY_FILE"):
        key = _read_key_file(env["ANTHROPIC_API_KEY_FILE"])
    elif token := env.get("ANTHROPIC_AUTH_TOKEN", "").strip():
        key = BEARER + _checked(token, "$ANTHROPIC_AUTH_TOKEN")
    else:
        key = None
    return ClientConfig(base_url=url, api_key=key)
