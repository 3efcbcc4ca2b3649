"""Shell completion (bash, zsh, fish) through click's protocol, with two custom sources.

    eval "$(_MEMFS_COMPLETE=bash_source memfs)"      # ~/.bashrc
    eval "$(_MEMFS_COMPLETE=zsh_source memfs)"       # ~/.zshrc
    _MEMFS_COMPLETE=fish_source memfs | source       # ~/.config/fish/completions/memfs.fish

* a STORE argument completes store names (the id as help text) from the server the
  command would use: ``--base-url`` if already typed, else ``$ANTHROPIC_BASE_URL``, else
  the embedded local server *if it is running* (completion never starts it). Any failure
  (offline, bad key, slow server) completes nothing and prints nothing.
* a MOUNTPOINT argument (unmount, status) completes the live memfs mounts from the mount
  registry, falling back to directory completion when none matches.
"""

from __future__ import annotations

import os

from click.shell_completion import CompletionItem

#: A completion must feel instant: give up on the server after this long.
TIMEOUT = 2.0


def store_names(ctx) -> list[tuple[str, str]]:
    """(name, id) of the stores on the server the command would use; [] on any failure."""
    try:
        from memfs.local.server_choice import choose_server

        params = getattr(ctx, "params", None) or {}
        # Never start the embedded server from a completion (not running: RuntimeError).
        server = choose_server(params.get("base_url"), None, params.get("api_key_file"),
                               start=False)
        import trio

        from memfs.api.client import MemoryStoresClient

        async def go():
            async with MemoryStoresClient(server[0], server[1], max_retries=0,
                                          timeout=TIMEOUT) as c:
                with trio.fail_after(TIMEOUT * 2):
                    return [(s.name, s.id) async for s in c.list_stores()]

        return trio.run(go)
    except BaseException:  # offline, bad key, timeout, anything: complete nothing
        return []


def complete_stores(ctx, param, incomplete: str) -> list[CompletionItem]:
    """Ids (for an id prefix), names and the slugs of names (`team-notes` for "Team
    Notes", when no other store has it), each quoted as the shell needs it."""
    from collections import Counter

    from memfs.cli.storenames import ID_PREFIX
    from memfs.core.slug import slug

    stores = store_names(ctx)
    slugs = Counter(slug(name) for name, _ in stores)
    out = []
    for name, store_id in stores:
        if incomplete.startswith(ID_PREFIX):
            if store_id.startswith(incomplete):
                out.append(CompletionItem(_quoted(store_id), help=name))
            continue
        if name.startswith(incomplete):
            out.append(CompletionItem(_quoted(name), help=store_id))
        short = slug(name)
        if short and short != name and slugs[short] == 1 and short.startswith(incomplete):
            out.append(CompletionItem(short, help=f"{name} ({store_id})"))
    return out


def _quoted(value: str) -> str:
    """bash inserts a completion as it is (`Team Notes` would be two arguments): escape
    what its parser splits on, twice, since click's bash script reads each line with
    `read` (no -r), which takes one backslash off. zsh's compadd and fish quote what
    they insert themselves."""
    if not os.environ.get("_MEMFS_COMPLETE", "").startswith("bash"):
        return value
    import re

    return re.sub(r"([^\w@%+=:,./-])", r"\\\\\1", value)


def complete_mountpoints(ctx, param, incomplete: str) -> list[CompletionItem]:
    try:
        from memfs.local.registry import all_mounts

        mounts = all_mounts()
    except Exception:
        mounts = []
    if incomplete and not incomplete.startswith("/"):
        full = os.path.abspath(incomplete)
        found = [m for m in mounts if m.startswith(full)]
        # keep what was typed relative: offer the mount relative to the cwd
        items = [CompletionItem(_quoted(incomplete + m[len(full):])) for m in found]
    else:
        items = [CompletionItem(_quoted(m)) for m in mounts if m.startswith(incomplete)]
    return items or [CompletionItem(incomplete, type="dir")]
