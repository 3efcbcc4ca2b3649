"""`memfs conflicts`: list, restore and discard preserved local versions.

    memfs conflicts [MOUNTPOINT] [--json]
    memfs conflicts restore ID [--mountpoint M]
    memfs conflicts discard ID [--mountpoint M]

With a daemon running, every command goes through its control socket (the
daemon owns the tree). Without one, the command works on state.db directly,
holding the state directory's lock so a daemon cannot start meanwhile; a
restored file is then pushed by the next mount.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import click

from memfs.cli.status import locate
from memfs.local import control
from memfs.local.registry import read_registry
from memfs.state import conflicts as core
from memfs.state.blobs import BlobCache, StagedUnreadable
from memfs.state.schema import STATE_DB
from memfs.state.state import State


def _expand(mountpoint: str) -> list[str]:
    """A session root stands for its stores' directories (conflicts are per store)."""
    info = read_registry(mountpoint)
    if info and "stores" in info:
        return [os.path.join(mountpoint, s["name"]) for s in info["stores"]]
    return [mountpoint]


def _group_store(mountpoint: str) -> tuple[Path, str] | None:
    """(the session root's control dir, the store's name) for ROOT/<name> of a live
    session root (`memfs mount --session|--all`)."""
    root, name = os.path.split(mountpoint)
    info = read_registry(root)
    if info and any(s["name"] == name for s in info.get("stores", [])):
        return Path(info["state_dir"]), name
    return None


def _mountpoints(mountpoint: str | None) -> list[str]:
    """MOUNTPOINT's; without one, every live mount's, and every mount no longer
    mounted whose journal keeps a conflict (an unmount that named one points here)."""
    if mountpoint:
        return _expand(os.path.abspath(mountpoint))
    from memfs.local.registry import all_mounts
    from memfs.state.statedir import known_mountpoints, known_state_dir
    from memfs.state.view import StateView

    points = [p for mp in all_mounts() for p in _expand(mp)]
    for mp in known_mountpoints():
        state_dir = known_state_dir(mp)
        if mp in points or state_dir is None:
            continue
        try:
            view = StateView(state_dir / STATE_DB)
        except sqlite3.Error:  # StateUnreadable: `memfs conflicts MOUNTPOINT` says so
            continue
        try:
            if view.conflicts():
                points.append(mp)
        finally:
            view.close()
    if not points:
        raise click.ClickException("no memfs mounts are running, and none keeps a "
                                   "conflict; name the MOUNTPOINT")
    return points


def _state_dir(mountpoint: str) -> tuple[Path, bool]:
    """(state_dir, whether a daemon is registered for it)."""
    found = locate(mountpoint)
    if found is None:
        raise click.ClickException(f"{mountpoint} is not a memfs mount")
    state_dir, info = found
    return state_dir, info is not None


@contextlib.contextmanager
def _offline(state_dir: Path) -> Iterator[tuple[State, BlobCache]]:
    """state.db and objects/ with no daemon, under the daemon's own lock."""
    with contextlib.ExitStack() as opened:
        lock = opened.enter_context(open(state_dir / "lock", "a"))
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise click.ClickException(
                f"a memfs daemon holds {state_dir} but does not answer; try again") from None
        state = State(state_dir / "state.db")
        opened.callback(state.close)
        try:
            cache = BlobCache(state_dir / "objects")
        except StagedUnreadable as exc:
            raise click.ClickException(str(exc)) from None
        opened.callback(cache.close)
        yield state, cache


def _run(mountpoint: str, request: dict, offline) -> dict:
    """Ask the daemon; with none running, do it on state.db (offline(state, cache))."""
    group = _group_store(mountpoint)
    if group is not None:  # a store of a live session root: its daemon owns the tree
        try:
            return control.request(group[0], {**request, "store": group[1]}, timeout=60)
        except (OSError, ValueError):
            pass  # the daemon is gone: the store's own state.db below
    state_dir, registered = _state_dir(mountpoint)
    if registered:
        try:
            return control.request(state_dir, request, timeout=60)
        except (OSError, ValueError):
            pass  # the daemon is gone (killed): fall back to state.db
    with _offline(state_dir) as (state, cache):
        try:
            return {"ok": True, **offline(state, cache)}
        except core.ConflictError as exc:
            return {"ok": False, "error": str(exc)}


def _list(mountpoint: str) -> list[dict]:
    reply = _run(mountpoint, {"cmd": "conflicts"},
                 lambda st, cache: {"conflicts": core.describe(st, cache)})
    if not reply.get("ok"):
        raise click.ClickException(f"{mountpoint}: {reply.get('error')}")
    rows = reply["conflicts"]
    for row in rows:
        row["mountpoint"] = mountpoint
    return rows


def _when(ts: float) -> str:
    return (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
            + f" ({time.time() - ts:.0f}s ago)")


class _Group(click.Group):
    """`memfs conflicts [MOUNTPOINT]` lists; `restore` / `discard` are subcommands."""

    def parse_args(self, ctx, args):
        args = list(args)
        for i, arg in enumerate(args):
            if not arg.startswith("-"):  # the group's only option (--json) takes no value
                if arg not in self.commands:
                    ctx.meta["conflicts_mountpoint"] = args.pop(i)
                break
        return super().parse_args(ctx, args)


@click.group(cls=_Group, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def conflicts(ctx, as_json):
    """List conflicts of MOUNTPOINT (or of every mount): local versions that lost to a
    concurrent server change, each with a diff against the server's version.

    \b
    memfs conflicts [MOUNTPOINT] [--json]
    memfs conflicts restore ID [--mountpoint M]   put your version back (pushed next)
    memfs conflicts discard ID [--mountpoint M]   forget your version
    """
    if ctx.invoked_subcommand is not None:
        return
    rows = []
    for mp in _mountpoints(ctx.meta.get("conflicts_mountpoint")):
        rows.extend(_list(mp))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no conflicts")
        return
    for row in rows:
        click.echo(f"#{row['id']} {row['path']}  ({row['mountpoint']})")
        click.echo(f"  when:   {_when(row['created_at'])}")
        click.echo(f"  why:    {row['reason']}")
        click.echo(f"  yours:  {row['local_sha']}")
        click.echo(f"  server: {row['remote_sha'] or '(deleted)'}")
        click.echo("")
        click.echo(row["diff"].rstrip("\n"))
        click.echo("")


def _find(cid: int, mountpoint: str | None) -> str:
    """The mount that has conflict cid (ids are per mount)."""
    if mountpoint:
        return os.path.abspath(mountpoint)
    holders = [mp for mp in _mountpoints(None) if any(r["id"] == cid for r in _list(mp))]
    if not holders:
        raise click.ClickException(f"no conflict #{cid} on any running mount")
    if len(holders) > 1:
        raise click.ClickException(f"conflict #{cid} exists on several mounts "
                                   f"({', '.join(holders)}); pass --mountpoint")
    return holders[0]


@conflicts.command("restore")
@click.argument("cid", metavar="ID", type=int)
@click.option("--mountpoint", "-m", default=None, type=click.Path(),
              help="The mount (default: the one running mount that has this id).")
def restore_cmd(cid, mountpoint):
    """Put conflict ID's local version back into the tree.

    It becomes an ordinary local change, pushed as an update over the server's
    current version (which stays in the memory's history)."""
    mp = _find(cid, mountpoint)
    reply = _run(mp, {"cmd": "conflict_restore", "id": cid},
                 lambda st, cache: core.restore(st, cache, cid))
    if not reply.get("ok"):
        raise click.ClickException(reply.get("error") or "restore failed")
    click.echo(f"restored conflict #{cid}: {reply['path']} holds your version again"
               " (it is pushed as an update)")


@conflicts.command("discard")
@click.argument("cid", metavar="ID", type=int)
@click.option("--mountpoint", "-m", default=None, type=click.Path(),
              help="The mount (default: the one running mount that has this id).")
def discard_cmd(cid, mountpoint):
    """Forget conflict ID's local version (the server's version stays)."""
    mp = _find(cid, mountpoint)
    reply = _run(mp, {"cmd": "conflict_discard", "id": cid},
                 lambda st, cache: core.discard(st, cid))
    if not reply.get("ok"):
        raise click.ClickException(reply.get("error") or "discard failed")
    click.echo(f"discarded conflict #{cid} ({reply['path']})")
