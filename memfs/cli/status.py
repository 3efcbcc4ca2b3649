"""`memfs status`: what it reports, from a live daemon or straight from state.db, and
how it shows it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from memfs.cli import progress
from memfs.cli.completion import complete_mountpoints
from memfs.core.shown import shown
from memfs.local.registry import all_mounts, is_mounted
from memfs.state.report import NAMED, pending
from memfs.state.schema import STATE_DB
from memfs.state.view import StateUnreadable, StateView, read_meta


def locate(mountpoint: str) -> tuple[Path, dict | None] | None:
    """(state_dir, registry entry or None) for a mountpoint, daemon running or not.

    A running daemon is found through the mount registry; without one, through
    the known index `memfs mount` keeps (any --cache-dir), else the state
    directories under the default cache root are searched for the state.db that
    was last mounted there."""
    from memfs.local.registry import cache_root, canonical_mountpoint, read_registry
    from memfs.state.statedir import known_state_dir

    info = read_registry(mountpoint)
    if info is not None and "state_dir" in info:
        return Path(info["state_dir"]), info
    known = known_state_dir(mountpoint)
    if known is not None:
        return known, None
    real = canonical_mountpoint(mountpoint)
    best: tuple[float, Path] | None = None
    for db in cache_root().glob(f"*/*/{STATE_DB}"):
        last = read_meta(db, "mountpoint").get("mountpoint")
        if last and canonical_mountpoint(last) == real:
            mtime = db.stat().st_mtime
            if best is None or mtime > best[0]:
                best = (mtime, db.parent)
    return None if best is None else (best[1], None)


def offline_status(state_dir: Path) -> dict:
    """Status read from state.db when no daemon runs (read-only: status changes nothing)."""
    state = StateView(state_dir / STATE_DB)
    try:
        last = state.get_meta("last_sync_at")
        took = state.get_meta("last_sync_seconds")
        try:
            options = json.loads(state.get_meta("options") or "{}")
        except ValueError:
            options = {}
        read_only = bool(options.get("read_only", False))
        gone = state.store_gone()
        return {
            "running": False,
            "mountpoint": state.get_meta("mountpoint"),
            "store_id": state.get_meta("store_id"),
            "store_name": state.get_meta("store_name"),
            "server": state.get_meta("base_url"),
            "read_only": read_only or gone is not None,
            "gone": gone,
            "online": None,
            "offline_reason": "no daemon is running for this mount",
            "last_sync_at": float(last) if last else None,
            "last_sync_seconds": float(took) if took else None,
            "last_error": state.get_meta("last_error"),
            "last_error_at": _float(state.get_meta("last_error_at")),
            "pending": pending(state, delete_delay=options.get("delete_delay"),
                               delete_mode=options.get("deletes", "enabled"), read_only=read_only,
                               gone=gone),
            "conflicts": state.conflicts(),
            "state_dir": str(state_dir),
        }
    finally:
        state.close()


def mount_status(mountpoint: str) -> dict:
    """The status of one mountpoint: its daemon's, else read from its state.db (a
    session root's stores' each), saying whether a mount is left there, dead."""
    found = _mount_status(mountpoint)
    if not found.get("running"):
        found["dead_mount"] = is_mounted(mountpoint)
    return found


def _mount_status(mountpoint: str) -> dict:
    from memfs.local import control
    from memfs.local.registry import read_registry, root_store

    under = None if read_registry(mountpoint) else root_store(mountpoint)
    if under is not None:  # a store's directory under a live root: that store, live
        try:
            reply = control.request(Path(under[1]["state_dir"]), {"cmd": "status"})
            return next(s for s in reply["status"]["stores"] if s.get("name") == under[2])
        except (OSError, ValueError, KeyError, StopIteration):
            pass  # its daemon died meanwhile: from state.db, as below (a helper found
            # `memfs status ROOT/STORE` said "daemon: not running" of a live root)
    found = locate(mountpoint)  # the registry, else the state.db last mounted there
    if found is None:
        group = _offline_group_status(mountpoint)
        if group is not None:
            return group
        raise click.ClickException(f"{mountpoint} is not a memfs mount")
    state_dir, info = found
    if info is None:
        return _readable_offline_status(state_dir, mountpoint)
    try:
        reply = control.request(state_dir, {"cmd": "status"})
        return reply["status"]
    except (OSError, ValueError, KeyError):
        group = _offline_group_status(mountpoint)  # a root's daemon died: its stores'
        return group if group is not None else _readable_offline_status(state_dir, mountpoint)


def _readable_offline_status(state_dir: Path, mountpoint: str) -> dict:
    try:
        return offline_status(state_dir)
    except StateUnreadable as exc:
        raise click.ClickException(f"{mountpoint}: {exc}") from None


def _offline_group_status(root: str) -> dict | None:
    """A session root with no daemon: each store's status from its state.db."""
    from memfs.cli.group import read_group_json

    data = read_group_json(root, None)
    if data is None:
        return None
    stores = []
    for entry in data.get("stores") or []:
        try:
            one = offline_status(Path(entry["state_dir"]))
        except Exception as exc:  # a damaged state dir: say so, show the others
            one = {"store_id": entry.get("store_id"), "running": False,
                   "last_error": f"cannot read its state: {exc}"}
        stores.append({**one, "name": entry.get("name")})
    return {"running": False, "group": True, "kind": data.get("kind"),
            "mountpoint": data.get("root", root), "session_id": data.get("session_id"),
            "server": stores[0].get("server") if stores else None, "stores": stores,
            "skipped": []}


def dead_mount_lines(s: dict) -> list[str]:
    """A mount whose daemon is gone (killed) is still mounted: every access there fails
    (ENOTCONN) until it is cleared."""
    if not s.get("dead_mount"):
        return []
    return [f"  the mount is still there, dead: its daemon is gone (an access there fails "
            f"with 'Transport endpoint is not connected'); memfs unmount {s['mountpoint']} "
            "clears it and says what its journal holds"]


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _ago(ts: float | None) -> str:
    if not ts:
        return "never"
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(ts))} ({time.time() - ts:.0f}s ago)"


#: How long requests may wait for an answer before `memfs status` says so.
UNANSWERED_SHOWN = 10.0


def format_status(s: dict) -> str:
    p = s.get("pending", {})
    store = (f"{shown(s['store_name'])} ({s.get('store_id')})" if s.get("store_name")
             else s.get("store_id"))
    lines = [f"{s.get('mountpoint')}: store {store} on {s.get('server')}"]
    lines += dead_mount_lines(s)
    if not s.get("running"):
        lines.append("  daemon: not running (from state.db)"
                     + (f"; the store was {s['gone']} on the server: no mount sends what "
                        f"its journal holds (memfs salvage {s.get('state_dir')} DIR writes "
                        "it out)" if s.get("gone") else ""))
    elif s.get("online"):
        # nothing has failed, nor has a listing completed: the first is under way (or
        # every listing fails for another reason than an outage: the last error says)
        state = "online" if s.get("last_sync_at") else "starting: no listing completed yet"
        if s.get("failing_since") and s.get("last_sync_at"):
            state += (f", but no sync got through since {_ago(s['failing_since'])}: the "
                      "server answers, with an error (the last one below)")
        lines.append(f"  {state}" + (f" (read-only: the store was {s['gone']} on the server)"
                                     if s.get("gone") else
                                     " (read-only)" if s.get("read_only") else ""))
    else:
        lines.append(f"  OFFLINE since {_ago(s.get('offline_since'))}: {s.get('offline_reason')}")
    waited = s.get("unanswered_seconds")
    if waited is not None and waited >= UNANSWERED_SHOWN:
        lines.append(f"  no answer from the server for {waited:.0f}s (requests are waiting: a "
                     "stopped server or a network that drops packets shows no error until "
                     "their timeout)")
    secs = s.get("last_sync_seconds")
    if not s.get("last_sync_at") and s.get("synced_before"):  # said "never" (a helper)
        lines.append(f"  last sync: {_ago(s['synced_before'])}, before this mount started")
    else:
        lines.append(f"  last sync: {_ago(s.get('last_sync_at'))}"
                     + (f", took {secs:.2f}s" if secs is not None else ""))
    if s.get("running"):
        feed = s.get("feed") or {}
        lines.append(f"  remote changes: {feed.get('mode', 'full')} mode"
                     + (f", feed at {feed['position']}" if feed.get("position") else "")
                     + f"; last full listing {_ago(feed.get('last_full_listing_at'))}"
                     + (f"; MISSED BY THE FEED: {feed['missed']}" if feed.get("missed") else ""))
        polls = feed.get("polls") or []
        if polls:
            last = polls[-1]
            lines.append(f"  feed polls: last {last['requests']} request(s), "
                         f"{progress.human_bytes(last['bytes'])}, {last['versions']} version(s)"
                         f"; last {len(polls)}: {sum(x['requests'] for x in polls)} request(s), "
                         f"{progress.human_bytes(sum(x['bytes'] for x in polls))}"
                         + (f"; {feed['late']} version(s) read out of order"
                            if feed.get("late") else ""))
    lines.append("  pending: {} create(s), {} update(s), {} rename(s), {} delete(s)".format(
        len(p.get("creates", [])), len(p.get("updates", [])), len(p.get("renames", [])),
        len(p.get("deletes", [])))
        + (f", {len(p['unconfirmed'])} unconfirmed" if p.get("unconfirmed") else ""))
    for kind in ("creates", "updates", "renames"):  # named, as unmount says status does
        items = p.get(kind, [])
        for item in items[:NAMED]:
            what = f"{item['from']} -> {item['to']}" if kind == "renames" else item["path"]
            lines.append(f"    {kind[:-1]} {what}" + (
                " (sent, its answer lost: the server is asked first)"
                if item.get("in_doubt") else ""))
        if len(items) > NAMED:
            lines.append(f"    ... and {len(items) - NAMED} more {kind} (--json names each)")
    for u in p.get("unconfirmed", []):
        lines.append(f"    unconfirmed {u['request']} of {u['path']}: its answer was lost; "
                     "the server is asked what it did before anything else is sent")
    for d in p.get("deletes", []):
        due = d.get("due_at")
        lines.append(f"    delete {d['path']}" + (f" due in {max(0, due - time.time()):.0f}s"
                                                   if due else ""))
    for kind in ("creates", "updates", "renames", "deletes"):
        for item in p.get(kind, []):
            if item.get("error"):
                where = item.get("path") or item.get("to")
                lines.append(f"  failing: {kind[:-1]} {where}: {item['error']} (retried "
                             f"in {max(0, (item.get('retry_at') or 0) - time.time()):.0f}s)")
    for kind in ("refused", "local_only"):
        for item in p.get(kind, []):
            lines.append(f"  {kind.replace('_', '-')}: {item['path']}: {item['reason']}")
    conflicts = s.get("conflicts", [])
    lines.append(f"  conflicts: {len(conflicts)}" + (" (memfs conflicts)" if conflicts else ""))
    for c in conflicts:
        lines.append(f"    #{c['id']} {c['path']}: {c['reason']}")
    if s.get("last_error"):
        when = f", {_ago(s['last_error_at'])}" if s.get("last_error_at") else ""
        lines.append(f"  last error{when}: {s['last_error']}")
    for warning in (s.get("warnings") or [])[-3:]:  # the newest: `--json` has ten
        lines.append(f"  warning: {warning}")
    if s.get("metrics_url"):
        lines.append(f"  metrics: {s['metrics_url']}")
    return "\n".join(lines)


@click.command()
@click.argument("mountpoint", type=click.Path(), required=False,
                shell_complete=complete_mountpoints)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--watch", "-w", is_flag=True, help="Refresh until Ctrl-C (in place on a terminal).")
@click.option("--interval", type=click.FloatRange(0.1), default=1.0, show_default=True,
              help="Seconds between refreshes with --watch.")
def status(mountpoint, as_json, watch, interval):
    """Show sync status of MOUNTPOINT (or of every memfs mount)."""
    if watch:
        if as_json:
            raise click.UsageError("--watch shows the text report; poll --json instead")
        progress.watch(lambda: _status_text(mountpoint), interval=interval)
        return
    click.echo(_status_text(mountpoint, as_json))


def _status_text(mountpoint, as_json=False) -> str:
    points = [os.path.abspath(mountpoint)] if mountpoint else all_mounts()
    if mountpoint:
        results = [mount_status(points[0])]
    else:  # every mount's: one that cannot be read is said, the others shown
        results = []
        for point in points:
            try:
                results.append(mount_status(point))
            except click.ClickException as exc:
                results.append({"mountpoint": point, "running": False,
                                "store_id": "(unreadable)", "server": "?",
                                "last_error": exc.message})
    if as_json:
        return json.dumps(results[0] if mountpoint else results, indent=2)
    if not results:
        return "no memfs mounts"
    out = []
    for s in results:
        if s.get("group"):
            from memfs.cli.group import format_group_status

            out.append(format_group_status(s, format_status, dead_mount_lines(s)))
        else:
            out.append(format_status(s))
    return "\n".join(out)
