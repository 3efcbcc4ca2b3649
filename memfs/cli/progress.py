"""Live progress on a terminal while a command waits for a daemon (rich).

Only when stderr is a terminal: without one, these helpers print nothing at all, so
scripts and logs see exactly the output they always did.

    with progress.live("flushing /mnt/notes", progress.flush_poller(state_dir)):
        reply = control.request(state_dir, {"cmd": "unmount"}, ...)

`live` takes any callable returning a snapshot (or None when nothing is known yet)::

    {"done": items done, "total": items in all (None: unknown),
     "bytes_done": int, "bytes_left": int, "error": the current error or None,
     "label": optional text shown before the counts}

and polls it from a thread while the body runs, so `memfs mount --all` can hand it a
callable summing over several mounts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

Snapshot = dict
Poll = Callable[[], "Snapshot | None"]


def is_terminal() -> bool:
    """Whether progress may be drawn: stderr is a terminal (and not a dumb one)."""
    try:
        return sys.stderr.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def describe(snap: Snapshot) -> str:
    """One line for a snapshot: items and bytes done and left, and the current error."""
    done, total = snap.get("done", 0) or 0, snap.get("total")
    parts = []
    if snap.get("label"):
        parts.append(str(snap["label"]))
    if total is None:
        parts.append(f"{done} item(s)")
    else:
        parts.append(f"{done}/{total} item(s), {max(0, total - done)} left")
    parts.append(f"{human_bytes(snap.get('bytes_done') or 0)} done, "
                 f"{human_bytes(snap.get('bytes_left') or 0)} left")
    text = "; ".join(parts)
    if snap.get("error"):
        text += f" | {snap['error']}"
    return text


@contextlib.contextmanager
def live(title: str, poll: Poll, *, interval: float = 0.2, delay: float = 0.3) -> Iterator[None]:
    """Draw `title` with a bar and `poll()`'s counts on stderr while the body runs, if
    stderr is a terminal; shown only once the wait lasts `delay` seconds, and erased at
    the end (the command's own summary follows)."""
    if not is_terminal():
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    task = progress.add_task(title, total=None, detail="")
    stop = threading.Event()
    shown = threading.Event()

    def loop() -> None:
        started = time.monotonic()
        while not stop.is_set():
            try:
                snap = poll()
            except Exception:
                snap = None
            if snap:
                total = snap.get("total")
                progress.update(task, total=total if total else None,
                                completed=snap.get("done", 0) or 0, detail=describe(snap))
            if not shown.is_set() and time.monotonic() - started >= delay:
                progress.start()
                shown.set()
            stop.wait(interval)

    thread = threading.Thread(target=loop, name="memfs-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        if shown.is_set():
            progress.stop()


# -- what a daemon reports -----------------------------------------------------------------

PENDING_KINDS = ("creates", "updates", "renames", "deletes", "unconfirmed")


def _status(state_dir: Path) -> dict | None:
    from memfs.local import control

    try:
        reply = control.request(state_dir, {"cmd": "status"}, timeout=2.0)
    except (OSError, ValueError):
        return None
    return reply.get("status") if reply.get("ok") else None


def current_error(status: dict) -> str | None:
    """Why the mount is not making progress: offline, else a change the server refuses."""
    if status.get("online") is False:
        return f"offline: {status.get('offline_reason')}"
    for kind in PENDING_KINDS:
        for item in (status.get("pending") or {}).get(kind, []):
            if item.get("error"):
                return f"{item.get('path') or item.get('to')}: {item['error']}"
    return None


def _stores(status: dict) -> list[dict]:
    """A plain mount's status, or each store's of a session root (`--session`/`--all`)."""
    return status["stores"] if status.get("group") else [status]


def _per_store(state_dir: Path, one: Callable[[int, dict], Snapshot]) -> Poll:
    """A poll of one daemon, summed over its stores (one for a plain mount)."""

    def poll() -> Snapshot | None:
        status = _status(state_dir)
        if status is None:
            return None
        snaps = [one(i, s) for i, s in enumerate(_stores(status))]
        return _sum(snaps, len(snaps)) if snaps else None

    return poll


def flush_poller(state_dir: Path) -> Poll:
    """A snapshot of a daemon pushing what is pending (its flush at unmount): items and
    bytes pushed since the first poll, and what is left; summed over a session root's
    stores."""
    firsts: dict[int, dict] = {}

    def one(index: int, status: dict) -> Snapshot:
        first = firsts.setdefault(index, {})
        pending = status.get("pending") or {}
        items = {(kind, item.get("path") or item.get("to") or item.get("memory_id")):
                 int(item.get("size") or 0)
                 for kind in PENDING_KINDS for item in pending.get(kind, [])}
        pushed = int(status.get("pushed_total") or 0)
        if not first:
            first.update(items=items, pushed=pushed)
        done = max(0, pushed - first["pushed"])
        return {"done": done, "total": done + len(items),
                "bytes_done": sum(s for k, s in first["items"].items() if k not in items),
                "bytes_left": sum(items.values()), "error": current_error(status)}

    return _per_store(state_dir, one)


def mount_poller(state_dir: Path) -> Poll:
    """A snapshot of a daemon filling a fresh mount: the first listing (files known so
    far) and the prefetch (files and bytes cached, and left); summed over a session
    root's stores."""

    def one(index: int, status: dict) -> Snapshot:
        tree = status.get("tree") or {}
        files, cached = tree.get("files", 0), tree.get("cached_files", 0)
        listed = status.get("last_sync_at") is not None
        return {"label": "fetching" if listed else "listing the store",
                "done": cached, "total": files if listed else None,
                "bytes_done": tree.get("cached_bytes", 0),
                "bytes_left": max(0, tree.get("bytes", 0) - tree.get("cached_bytes", 0)),
                "error": current_error(status)}

    per_store = _per_store(state_dir, one)

    def poll() -> Snapshot | None:
        return per_store() or {"label": "starting", "done": 0, "total": None}

    return poll


def _sum(snaps: list[Snapshot], parts: int) -> Snapshot:
    """Several snapshots (of `parts` asked) as one."""
    totals = [s.get("total") for s in snaps]
    return {"done": sum(s.get("done") or 0 for s in snaps),
            "total": None if any(t is None for t in totals) else sum(totals),
            "bytes_done": sum(s.get("bytes_done") or 0 for s in snaps),
            "bytes_left": sum(s.get("bytes_left") or 0 for s in snaps),
            "error": next((s["error"] for s in snaps if s.get("error")), None),
            "label": f"{len(snaps)} of {parts} reporting" if parts > 1 else
            snaps[0].get("label")}


# -- memfs status --watch ------------------------------------------------------------------


def watch(render: Callable[[], str], *, interval: float = 1.0) -> None:
    """Redraw `render()` every `interval` seconds until Ctrl-C: in place on a terminal
    (stdout), else one block after another, separated by a blank line.

    Ctrl-C sets a flag instead of raising KeyboardInterrupt, which Python drops when it
    is raised inside a finalizer; a CI run once saw the watch still redrawing 90 s after
    its SIGINT (cause not pinned down: this is the one way we know to lose it)."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    try:
        if sys.stdout.isatty():
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text

            console = Console()
            with Live(Text(render()), console=console, auto_refresh=False,
                      screen=False) as view:
                while not stop.wait(interval):
                    view.update(Text(render()), refresh=True)
        else:
            while True:
                print(render(), flush=True)
                if stop.wait(interval):
                    break
                print(flush=True)
    finally:
        signal.signal(signal.SIGINT, previous)
