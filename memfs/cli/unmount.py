"""`memfs unmount`: flush what is pending, unmount, and name what stays local."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from memfs.cli import progress
from memfs.cli.completion import complete_mountpoints
from memfs.core.shown import shown
from memfs.local.pids import alive, wait_gone
from memfs.local.registry import is_mounted, read_registry, registry_file
from memfs.state.report import LOCAL_BY_NAME, kept_here


@click.command()
@click.argument("mountpoint", type=click.Path(), shell_complete=complete_mountpoints)
@click.option("--timeout", type=click.FloatRange(0), default=30.0, show_default=True,
              help="Bound on the flush of pending changes.")
def unmount(mountpoint, timeout):
    """Flush pending changes, unmount MOUNTPOINT and wait for its daemon to exit.

    Names every file that stays local, and why. Exit status 3: unmounted, but some
    change did not reach the server (the server refused a file, or it could not be
    reached in time: kept in the journal for the next mount); 1: not unmounted."""
    mountpoint = os.path.abspath(mountpoint)
    info = read_registry(mountpoint)
    if info is None:
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", mountpoint], check=False)
            if is_mounted(mountpoint):
                subprocess.run(["fusermount3", "-uz", mountpoint], check=False)
            click.echo(f"unmounted {mountpoint} (no memfs daemon was registered for it)")
            _report_journaled(mountpoint)
            return
        raise click.ClickException(f"{mountpoint} is not a memfs mount")
    from memfs.local import control

    state_dir, pid = Path(info["state_dir"]), int(info["pid"])
    try:
        with progress.live(f"flushing {mountpoint}", progress.flush_poller(state_dir)):
            reply = control.request(state_dir, {"cmd": "unmount", "timeout": timeout},
                                    timeout=timeout + 30)
    except (OSError, ValueError) as exc:
        if alive(pid):
            raise click.ClickException(f"the daemon (pid {pid}) does not answer: {exc}") from None
        subprocess.run(["fusermount3", "-uz", mountpoint], check=False)
        registry_file(mountpoint).unlink(missing_ok=True)
        click.echo(f"the daemon was gone; cleared the stale mount at {mountpoint}")
        _report_journaled(mountpoint)
        return
    if not wait_gone(pid, 30):
        raise click.ClickException(f"the daemon (pid {pid}) did not exit")
    if is_mounted(mountpoint):
        subprocess.run(["fusermount3", "-uz", mountpoint], check=False)
    pushed, left = reply.get("pushed", 0), reply.get("left", 0)
    click.echo(f"unmounted {mountpoint}: pushed {pushed} change(s), {left} left")
    stranded = 0  # left in the journal of a store that is gone: no mount sends them
    for store in reply.get("stores", []):
        click.echo(f"  {store['name']} ({store['store_id']}): pushed {store['pushed']}, "
                   f"{store['left']} left"
                   + (f" ({store['offline']})" if store.get("offline") else ""))
        stranded += _stranded(store, "    ")
    stranded += _stranded(reply, "  ")  # a plain mount's store
    if left > stranded:
        offline = reply.get("offline") or ""
        click.echo(f"  {left - stranded} change(s) stay journaled and go out on the next mount"
                   + (f" ({offline})" if offline else ""))
        if "HTTP 401" in offline:  # the key refused (a session archived: a helper)
            click.echo("  the server refuses this mount's key: they go out with a mount whose "
                       "key it takes (a session's root whose session was archived or "
                       "deleted: `memfs mount STORE DIR` with the account's key)")
    if not report_kept(reply) or left:
        sys.exit(NOT_ALL_PUSHED)


def _stranded(store: dict, indent: str) -> int:
    """Say where the changes of a store archived or deleted on the server stay (pending,
    refused, conflicts), and the command that takes them out; how many of `left` they
    are (all: no mount sends them)."""
    held = store.get("left") or any(store.get(k) for k in ("not_pushed", "waiting",
                                                            "conflicts"))
    if not (store.get("gone") and held):
        return 0
    click.echo(f"{indent}the store was {store['gone']} on the server: what was written there "
               f"and is not on the server stays in its journal ({store['state_dir']}), "
               f"which no mount will send; `memfs salvage {store['state_dir']} DIR` writes "
               "its files out")
    return store.get("left", 0)


#: `memfs unmount`'s exit status when it unmounted but something written there did
#: not reach the server (each file named); 1 means it did not unmount.
NOT_ALL_PUSHED = 3


def _report_journaled(mountpoint: str) -> None:
    """No daemon flushed at the exit (it died): what its state.db still holds is not on
    the server. Said, with status 3, as a flush that could not push it says it; a
    mount memfs knows nothing of says nothing."""
    from memfs.cli.status import mount_status

    try:
        found = mount_status(mountpoint)  # no daemon registered now: from state.db
    except click.ClickException:
        return
    left = stranded = doubted = 0
    several = bool(found.get("stores"))
    for one in found.get("stores") or [found]:
        pending = one.get("pending") or {}
        held, doubts = _journaled(pending)
        held += len(one.get("conflicts") or [])
        doubted += doubts
        if one.get("gone"):  # its edits are listed as local: the store takes none
            held += sum(i["reason"] != LOCAL_BY_NAME
                        for i in pending.get("local_only", []))
            if held:  # under a root: which store (a helper, 6 December)
                who = (f"{shown(one.get('store_name') or one.get('store_id'))}: "
                       if several else "")
                click.echo(f"  {who}{held} change(s) written there are NOT on the server "
                           f"(memfs status {mountpoint} names each, and why)")
            stranded += _stranded({**one, "left": held}, "  ")
        left += held
    if left > stranded:
        click.echo(f"  {left - stranded} change(s) written there are NOT on the server, kept "
                   f"in its journal for the next mount (memfs status {mountpoint} names "
                   "each, and why)")
    if doubted:
        click.echo(f"  {doubted} request(s) whose answer was lost may have been applied by "
                   "the server: the next mount asks it, and sends what it did not apply "
                   f"(memfs status {mountpoint} names each)")
    if left or doubted:
        sys.exit(NOT_ALL_PUSHED)


def _journaled(pending: dict) -> tuple[int, int]:
    """(changes not on the server, requests in doubt) of a status's `pending`, each
    counted once: a file is listed both as an update and a rename, or as a create and
    a request in doubt, and a request in doubt may be on the server already (a kill
    after a lost answer was said as "2 change(s) NOT on the server": a helper)."""
    changed = [(item.get("path") or item["to"], item.get("memory_id"), item.get("in_doubt"))
               for kind in ("creates", "updates", "renames", "refused")
               for item in pending.get(kind, [])]
    files = {path for path, _mid, doubt in changed if not doubt}
    doubted = {path for path, _mid, doubt in changed if doubt} - files
    memories = {mid for path, mid, _doubt in changed if path in files} - {None}
    doubts = len(doubted) + sum(
        1 for item in pending.get("unconfirmed", [])
        if item["path"] not in files | doubted and item.get("memory_id") not in memories)
    return len(files) + len(pending.get("deletes", [])), doubts


def report_kept(reply: dict) -> bool:
    """Name each file a flush could not push, and why, and each conflict that keeps
    what was written here aside; True when nothing the user wrote stays here only
    (editor temp files are local by design)."""
    for sentence, items in kept_here(reply):
        click.echo(f"  {sentence}:")
        for item in items:
            click.echo(f"    {item}")
    temp = reply.get("local_only", [])
    if temp:
        click.echo(f"  {len(temp)} file(s) local-only by name (temp files, --local-only) stay "
                   "here by design: "
                   + ", ".join(i["path"] for i in temp[:5]) + (", ..." if len(temp) > 5 else ""))
    return not reply.get("not_pushed") and not reply.get("conflicts")
