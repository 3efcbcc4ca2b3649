"""The options every command that talks to a server shares (`--base-url`,
`--api-key-file`, `--json`), kept apart so that a command's module need not import
another command's to have them."""

from __future__ import annotations

import click

BASE_URL_HELP = ("API base URL (default: $ANTHROPIC_BASE_URL, else the embedded local "
                 "server).")
KEY_FILE_HELP = "Read the API key from this file (default: $ANTHROPIC_API_KEY)."
JSON_HELP = "Machine-readable output."


def server_options(fn):
    """--base-url and --api-key-file, as every command that talks to a server has them."""
    fn = click.option("--api-key-file", default=None, help=KEY_FILE_HELP)(fn)
    return click.option("--base-url", default=None, help=BASE_URL_HELP)(fn)
