"""`memfs mount`: a store (or a session's or a server's stores) mounted, its daemon
started and handed its configuration."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import click

from memfs.api import errors as api_errors
from memfs.api import tls
from memfs.api.oneshot import call_with_client

# Light imports only: `memfs mount` starts the daemon process before it imports trio
# and httpx (its own lookups need them), so the two processes import side by side.
from memfs.cli import progress, spawn, storenames
from memfs.cli.completion import complete_stores
from memfs.cli.errors import command_server, describe, unreachable
from memfs.cli.options import server_options
from memfs.core import paths
from memfs.core.mountconfig import (
    DEFAULT_LOCAL_ONLY_PATTERNS,
    GroupConfig,
    GroupStore,
    MountConfig,
    SyncOptions,
    is_loopback,
    parse_metrics_addr,
)
from memfs.core.shown import shown
from memfs.local.registry import is_mounted
from memfs.state.statedir import Unreachable, key_from_probe, offline_key, open_state_dir, remember


def _preflight(mountpoint: str, allow_non_empty: bool = False) -> None:
    if not os.path.exists("/dev/fuse"):
        raise click.ClickException("/dev/fuse is missing: load the fuse module (modprobe fuse)")
    if shutil.which("fusermount3") is None:
        raise click.ClickException("fusermount3 not found: install the fuse3 package")
    if is_mounted(mountpoint):  # checked first: stat-ing a hung mount would block
        raise click.ClickException(f"{mountpoint} is busy: something is already mounted there")
    if not os.path.isdir(mountpoint):
        raise click.ClickException(f"mountpoint {mountpoint} does not exist or is not a directory")
    if not allow_non_empty:
        _refuse_non_empty(mountpoint)


def _refuse_non_empty(mountpoint: str) -> None:
    """A mount hides what the directory holds until it is unmounted (rclone's rule:
    refuse unless asked), so files there seem lost. Empty directories hide nothing:
    a session root whose store folders were made beforehand (/mnt/memory/<slug>, as
    in an agent's container) mounts."""
    try:
        names = sorted(e.name for e in _entries(mountpoint) if _holds_something(e))
    except OSError as exc:
        raise click.ClickException(f"cannot read {mountpoint}: {exc.strerror}") from None
    if names:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise click.ClickException(
            f"{mountpoint} is not empty ({len(names)} entr{'y' if len(names) == 1 else 'ies'}: "
            f"{shown}): a mount would hide them until unmounted; use an empty directory, "
            "or --allow-non-empty")


def _entries(path: str) -> list[os.DirEntry]:
    with os.scandir(path) as it:
        return list(it)


def _holds_something(entry: os.DirEntry) -> bool:
    """Anything but a directory tree with no file in it (stops at the first file)."""
    if not entry.is_dir(follow_symlinks=False):
        return True
    return any(_holds_something(e) for e in _entries(entry.path))


# -- mount -------------------------------------------------------------------------------


def _metrics_addr(ctx, param, value: str | None) -> str | None:
    """--metrics-addr as HOST:PORT; a non-loopback HOST is the user's explicit choice,
    said out loud."""
    if value is None:
        return None
    try:
        host, port = parse_metrics_addr(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if not is_loopback(host):
        click.echo(f"memfs: metrics at {host}:{port} are served to the network, without "
                   "authentication", err=True)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@click.command()
@click.argument("store_id", metavar="[STORE|ROOT]", required=False,
                shell_complete=complete_stores)
@click.argument("mountpoint", type=click.Path(file_okay=False), required=False)
@click.option("--session", "session_id", default=None, metavar="SESSION_ID",
              help="Mount every memory store attached to this session under one root "
              "(`memfs mount --session ID [ROOT]`; ROOT defaults to the parent of the "
              "stores' mount paths, /mnt/memory).")
@click.option("--all", "all_stores", is_flag=True,
              help="Mount every non-archived store of the account under ROOT "
              "(`memfs mount --all ROOT`); new stores appear on the next poll.")
@click.option("--allow-other", is_flag=True, help="Let other users use the mount (FUSE "
              "allow_other, with default_permissions; non-root needs user_allow_other "
              "in /etc/fuse.conf).")
@click.option("--uid", type=click.IntRange(0), default=None,
              help="Show every file as owned by this uid (default: as created).")
@click.option("--gid", type=click.IntRange(0), default=None,
              help="Show every file as owned by this gid (default: --uid's group, or as "
              "created).")
@server_options
@click.option("--read-only", is_flag=True, help="Mount read-only: nothing is ever pushed.")
@click.option("--foreground", "-f", is_flag=True, help="Stay in the foreground.")
@click.option("--cache-dir", default=None, help="State and cache root "
              "(default: $XDG_CACHE_HOME/memfs).")
@click.option("--write-back-delay", type=click.FloatRange(0), default=1.0, show_default=True,
              help="Seconds after the last close before a change is pushed.")
@click.option("--max-push-delay", type=click.FloatRange(0), default=5.0, show_default=True,
              help="A file that keeps changing is pushed at least this often (seconds "
              "after its first change not yet pushed).")
@click.option("--delete-delay", type=click.FloatRange(0), default=30.0, show_default=True,
              help="Seconds a file must stay deleted before its memory is deleted.")
@click.option("--poll-interval", type=click.FloatRange(0.2), default=2.0, show_default=True,
              help="Seconds between polls for remote changes (a change-feed poll: one "
              "request, an empty page when nothing changed).")
@click.option("--full-resync", type=click.FloatRange(1), default=600.0, show_default=True,
              help="A full listing of the store at least this often (the feed's safety net).")
@click.option("--no-feed", is_flag=True, help="Poll with full listings only (no change feed).")
@click.option("--deletes", type=click.Choice(["enabled", "log-only", "disabled"]),
              default="enabled", show_default=True, help="Whether local deletes reach the server.")
@click.option("--no-prefetch", is_flag=True, help="Do not fill the cache in the background.")
@click.option("--flush-timeout", type=click.FloatRange(0), default=30.0, show_default=True,
              help="Bound on the flush at unmount or SIGTERM.")
@click.option("--lost-answer-wait", type=click.FloatRange(0), default=30.0, show_default=True,
              help="Seconds after a change's answer was lost (a reset, a timeout, a 502 or 504) "
              "before the change, if the server shows no trace of it, is taken as not "
              "applied and sent again (the server may still be at work on it; meanwhile "
              "nothing more is sent for that file or its path).")
@click.option("--feed-lookback", type=click.FloatRange(0), default=30.0, show_default=True,
              help="Seconds the server may take to commit a write after newer ones: the "
              "change feed (and the .memfs/versions tree) reads each stretch of time once "
              "more when it is this old. Lower it only for a server that commits in "
              "order (`memfs serve` does); a write committed later than this is found by "
              "the next full listing (--full-resync).")
@click.option("--show-meta", is_flag=True, help="List the read-only .memfs directory "
              "(version history) in the root; it is always reachable by name.")
@click.option("--allow-non-empty", is_flag=True, help="Mount over a directory that holds "
              "files (hidden until unmount); refused by default.")
@click.option("--allow-partial", is_flag=True, help="--session/--all: mount the stores that "
              "can be mounted when others cannot (each one left out is named); without it "
              "nothing is mounted and the exit status is 1.")
@click.option("--local-only", "local_only", multiple=True, metavar="GLOB",
              help="Another file-name pattern kept local-only, never uploaded (repeatable; "
              "added to: " + " ".join(DEFAULT_LOCAL_ONLY_PATTERNS) + ").")
@click.option("--metrics-addr", default=None, metavar="[HOST:]PORT", callback=_metrics_addr,
              help="Serve Prometheus metrics at http://HOST:PORT/metrics (HOST defaults to "
              "127.0.0.1; any other address serves the network, without authentication).")
def mount(store_id, mountpoint, session_id, all_stores, allow_other, uid, gid, base_url,
          api_key_file, read_only, foreground, cache_dir, write_back_delay, max_push_delay,
          delete_delay, poll_interval, full_resync, no_feed, deletes, no_prefetch, flush_timeout,
          lost_answer_wait, feed_lookback, show_meta, allow_non_empty, allow_partial, local_only,
          metrics_addr):
    """Mount STORE (an id, a name or a name's slug) at MOUNTPOINT; returns once the
    mount is live.

    `--session ID [ROOT]` and `--all ROOT` mount several stores under ROOT instead."""
    options = SyncOptions(write_back_delay=write_back_delay, max_push_delay=max_push_delay,
                          delete_delay=delete_delay,
                          poll_interval=poll_interval, deletes=deletes,
                          feed=not no_feed, full_resync=full_resync,
                          prefetch=not no_prefetch, read_only=read_only,
                          show_meta=show_meta, lost_answer_wait=lost_answer_wait,
                          feed_lookback=feed_lookback)
    owner = _owner(uid, gid)
    common = dict(flush_timeout=flush_timeout, allow_other=allow_other, owner=owner,
                  local_only_patterns=[*DEFAULT_LOCAL_ONLY_PATTERNS, *local_only],
                  metrics_addr=metrics_addr)
    if session_id or all_stores:
        if session_id and all_stores:
            raise click.UsageError("--session and --all exclude each other")
        if mountpoint is not None:
            raise click.UsageError("with --session/--all, give only ROOT")
        if all_stores and store_id is None:
            raise click.UsageError("--all needs ROOT")
        _mount_group(session_id, store_id, base_url, api_key_file, cache_dir, options,
                     read_only, foreground, common,
                     allow=dict(non_empty=allow_non_empty, partial=allow_partial))
        return
    if allow_partial:
        raise click.UsageError("--allow-partial goes with --session or --all")
    if store_id is None or mountpoint is None:
        raise click.UsageError("give STORE and MOUNTPOINT (or --session / --all)")
    mountpoint = os.path.abspath(mountpoint)
    _preflight(mountpoint, allow_non_empty)
    with _Handover.start(foreground) as daemon:  # importing while the store is looked up
        tls.prepare()
        url, api_key, embedded = command_server(base_url, api_key_file)
        store_name = ""
        try:
            found, reported = _resolve_store(url, api_key, store_id)  # an id, a name or a slug
            store_id, store_name = found.id, found.store.name
            if found.archived:
                click.echo(f"memfs: store {found.describe()} is archived: the server refuses "
                           "changes to it; mounting it read-only", err=True)
                options = replace(options, read_only=True)
                read_only = True
            state_dir = open_state_dir(url, store_id, cache_dir, _to_stderr,
                                       key=key_from_probe(url, store_id, cache_dir, reported))
        except storenames.StoreNotFound as exc:
            exc.message += _left_behind(mountpoint, store_id)
            raise
        except api_errors.NotFoundError:
            raise click.ClickException(f"unknown store {store_id} on {url}"
                                       + _left_behind(mountpoint, store_id)) from None
        except (api_errors.AuthenticationError, api_errors.PermissionDeniedError) as exc:
            raise click.ClickException(f"bad credentials for {url}: {exc.message}") from None
        except (*api_errors.TRANSIENT,) as exc:
            store_id = storenames.cached_id(store_id, url, cache_dir) or store_id  # offline
            # (a name the cache does not know is no id: there is no state to open)
            state_dir = open_state_dir(url, store_id, cache_dir, _to_stderr) \
                if paths.is_id(store_id) else None
            if state_dir is None or not _has_cache(state_dir):
                raise click.ClickException(
                    f"{unreachable(url, exc)} and nothing of {store_id} is cached") from None
            click.echo(f"memfs: {url} is unreachable; mounting from the cache (offline)",
                       err=True)
        except api_errors.APIError as exc:
            raise click.ClickException(describe(url, exc, f"cannot mount {store_id}")) \
                from None
        cfg = MountConfig(store_id=store_id, mountpoint=mountpoint, base_url=url,
                          state_dir=str(state_dir), options=options, embedded=embedded,
                          store_name=store_name, **common)
        if foreground:
            from memfs.mount.daemon import run

            remember(mountpoint, state_dir, store_id, url)
            sys.exit(run(cfg, foreground=True, api_key=api_key))
        daemon.hand_over(cfg, api_key)
    remember(mountpoint, state_dir, store_id, url)  # status/conflicts find it after unmount
    said = f"{shown(store_name)} ({store_id})" if store_name else store_id
    click.echo(f"mounted {said} at {mountpoint}" + (" (read-only)" if read_only else ""))
    _done()


def _left_behind(mountpoint: str, store: str) -> str:
    """What the unknown store's last mount here left not on the server, and the way out
    (a store deleted on the server: no mount will send it)."""
    from memfs.state.statedir import left_behind

    found = left_behind(mountpoint, store)
    if found is None:
        return ""
    state_dir, held = found
    return (f"; its journal from the last mount at {mountpoint} ({state_dir}) holds {held} "
            f"change(s) not on the server: `memfs salvage {state_dir} DIR` writes its files "
            "out")


def _resolve_store(url: str, api_key: str | None, text: str):
    """(the store `text` names, the server's health probe: its id, None or the
    Unreachable it raised), both asked at once on one client."""
    import trio

    from memfs.state.statedir import reported_server_id_async

    out: dict = {}

    async def go(c) -> None:
        async def probe() -> None:
            try:
                out["reported"] = await reported_server_id_async(c._http, url)
            except Exception as exc:  # Unreachable, or a URL httpx refuses
                out["reported"] = exc if isinstance(exc, Unreachable) else \
                    Unreachable(str(exc))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe)
            try:
                out["found"] = await storenames.resolve(c, text)
            except Exception as exc:  # raised as itself, not in an exception group
                out["error"] = exc
                nursery.cancel_scope.cancel()

    call_with_client(url, api_key, go)
    if "error" in out:
        raise out["error"]
    return out["found"], out["reported"]


def _done() -> None:
    """`memfs mount` is done once the mount is live: leave without the interpreter's
    teardown (about 0.1 s of garbage collection over every module imported), which
    would only hold up the caller's next command. Nothing is left to write."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


def _owner(uid: int | None, gid: int | None) -> list[int] | None:
    if uid is None and gid is None:
        return None
    if uid is None:
        uid = os.getuid()
    if gid is None:
        import pwd

        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = uid
    return [uid, gid]


def _mount_group(session_id, root, base_url, api_key_file, cache_dir, options, read_only,
                 foreground, common, allow: dict) -> None:
    """`--session` / `--all`: plan the root, then start one daemon for all its stores."""
    with _Handover.start(foreground) as daemon:  # importing while the root is planned
        tls.prepare()
        cfg, key = _plan_group(session_id, root, base_url, api_key_file, cache_dir, options,
                               read_only, common)
        cfg.allow_partial = allow["partial"]
        if not os.path.exists(cfg.root) and not is_mounted(cfg.root):
            try:
                os.makedirs(cfg.root, mode=0o755)
            except OSError as exc:
                raise click.ClickException(f"cannot create {cfg.root}: {exc.strerror}") \
                    from None
        _preflight(cfg.root, allow["non_empty"])
        for store in cfg.stores:
            remember(f"{cfg.root}/{store.name}", Path(store.state_dir), store.store_id,
                     cfg.base_url)
        _say_left_behind(cfg)
        if foreground:
            from memfs.mount.daemon import run

            sys.exit(run(cfg, foreground=True, api_key=key))
        daemon.hand_over(cfg, key)
    skipped = _left_out(cfg)
    gone = {s["store_id"] for s in skipped}
    what = f"session {session_id}" if session_id else "every store"
    click.echo(f"mounted {what} at {cfg.root}: " + (", ".join(
        f"{s.name}" + (" (read-only)" if s.read_only or cfg.read_only else "")
        for s in cfg.stores if s.store_id not in gone) or "no stores"))
    for s in skipped:  # only with --allow-partial: else the daemon refused to mount
        click.echo(f"memfs: left out {s['name']} ({s['store_id']}): {s['error']}", err=True)
    _done()


def _say_left_behind(cfg: GroupConfig) -> None:
    """Each store mounted under this root before and not now whose journal still holds
    changes: said at every mount until they are dealt with, never dropped unsaid."""
    from memfs.state.statedir import left_behind_under

    for mountpoint, state_dir, held in left_behind_under(
            cfg.root, {s.store_id for s in cfg.stores},
            {Path(s.state_dir).parent.parent for s in cfg.stores}):
        click.echo(f"memfs: {mountpoint} is not mounted now (its store was deleted on the "
                   f"server, or is no longer in the session), and its journal ({state_dir}) "
                   f"holds {held} change(s) not on the server: `memfs salvage {state_dir} "
                   "DIR` writes its files out (then removing that directory forgets them)",
                   err=True)


def _left_out(cfg: GroupConfig) -> list[dict]:
    """The stores of a live root its daemon could not open (--allow-partial)."""
    from memfs.local import control

    if not cfg.allow_partial:
        return []
    try:
        return control.request(Path(cfg.group_dir), {"cmd": "status"})["status"]["skipped"]
    except (OSError, ValueError, KeyError) as exc:
        return [{"name": "?", "store_id": "?", "error": f"the daemon does not say ({exc})"}]


def _plan_group(session_id, root, base_url, api_key_file, cache_dir, options, read_only,
                common) -> tuple[GroupConfig, str | None]:
    """The root's configuration and the key its daemon uses."""
    from memfs.cli.group import SESSION_ROOT, cached_plan, plan_all, plan_session

    url, api_key, embedded = command_server(base_url, api_key_file)
    key = api_key

    def call(fn):
        return call_with_client(url, key, fn)

    try:
        if session_id:
            cfg = plan_session(call, session_id, root, url=url, cache_dir=cache_dir,
                               options=options, say=_to_stderr, embedded=embedded, **common)
            # Writes through a session are attributed to it: memfs serve issues a
            # session-scoped token (the hosted API: None, and the account key is used).
            try:
                token = call(lambda c: c.session_token(session_id))
            except api_errors.PermissionDeniedError:
                token = None  # the key is a session token already (a worker's)
            if token:
                key = token
        else:
            cfg = plan_all(call, root, url=url, cache_dir=cache_dir, options=options,
                           read_only=read_only, say=_to_stderr, embedded=embedded, **common)
    except (api_errors.AuthenticationError, api_errors.PermissionDeniedError) as exc:
        raise click.ClickException(f"bad credentials for {url}: {exc.message}") from None
    except (*api_errors.TRANSIENT,) as exc:
        where = os.path.abspath(root or SESSION_ROOT)
        cached = cached_plan(where, cache_dir)
        if cached is None:
            raise click.ClickException(
                f"{unreachable(url, exc)} and this root was never mounted here before") \
                from None
        click.echo(f"memfs: {url} is unreachable; mounting {where} from the cache "
                   "(offline)", err=True)
        cfg = _offline_group(session_id, where, cached, url=url, cache_dir=cache_dir,
                             options=options, read_only=read_only, embedded=embedded,
                             **common)
    except api_errors.APIError as exc:
        raise click.ClickException(describe(url, exc, "cannot plan the mount")) from None
    return cfg, key


def _offline_group(session_id: str | None, root: str,
                   cached: tuple[list[GroupStore], str | None], *, url: str,
                   cache_dir: str | None, **common) -> GroupConfig:
    """The root as its last mount had it (group.json), keyed as it was then: a store
    `--all` finds once the server answers must land beside the others, not under a
    URL key. A group.json of an older memfs has no key: found as a plain offline
    mount finds its own (the state dir of a store last mounted from this URL)."""
    from memfs.cli.group import group_config

    stores, state_key = cached
    key = state_key or offline_key(url, stores[0].store_id if stores else "-", cache_dir)
    return group_config("session" if session_id else "all", root, stores, url=url,
                        cache_dir=cache_dir, key=key, session_id=session_id, **common)


def _to_stderr(text: str) -> None:
    click.echo(text, err=True)


def _has_cache(state_dir: Path) -> bool:
    db = state_dir / "state.db"
    return db.exists() and db.stat().st_size > 0


class _Handover:
    """The mount's daemon process (``python -m memfs.mount.daemon``), started before the
    store is looked up (by `memfs.cli.spawn.main` before this module even loaded, when it
    could), so that its imports (pyfuse3, trio, httpx: about 0.2 s) run beside the
    lookup instead of after it. It waits for its configuration and the API key on a
    pipe (never argv nor its environment); when none comes (the lookup failed, or
    `memfs mount` was interrupted or killed) it exits, having touched nothing."""

    def __init__(self, process: spawn.DaemonProcess) -> None:
        self.process = process
        self.handed_over = False

    @classmethod
    @contextlib.contextmanager
    def start(cls, foreground: bool) -> Iterator[_Handover]:
        """The waiting daemon (`foreground`: none, the mount runs in this process);
        ended on leaving unless `hand_over` ran."""
        if foreground:
            yield None  # type: ignore[misc]
            return
        daemon = cls(spawn.take())
        try:
            yield daemon
        finally:
            daemon._close()

    def _close(self) -> None:
        if self.handed_over:
            self.process.close_pipes()
        else:
            self.process.kill()  # still importing or waiting: nothing to clean up

    def hand_over(self, cfg: MountConfig | GroupConfig, api_key: str | None) -> None:
        """Send the configuration, then wait until the daemon reports the mount live
        (``READY``) or its error (``ERROR <message>``, raised as a click error)."""
        self.handed_over = True
        deadline = time.monotonic() + 60
        payload = memoryview(json.dumps({"config": cfg.to_json(),
                                         "api_key": api_key}).encode())
        os.set_blocking(self.process.config_w, False)
        while payload and time.monotonic() < deadline:  # larger than a pipe: in parts
            if select.select([], [self.process.config_w], [], 0.5)[1]:
                try:
                    payload = payload[os.write(self.process.config_w, payload):]
                except BlockingIOError:
                    continue
                except OSError:
                    break  # the daemon is gone: reported below
        self.process.close_config()
        buf = b""
        if isinstance(cfg, GroupConfig):
            what, control_dir = f"{len(cfg.stores)} store(s)", Path(cfg.group_dir)
        else:
            what, control_dir = cfg.store_name or cfg.store_id, Path(cfg.state_dir)
        waiting = progress.live(f"mounting {what} at {cfg.mountpoint}",
                                progress.mount_poller(control_dir))  # on a terminal only
        with waiting:
            while b"\n" not in buf and time.monotonic() < deadline:
                ready, _, _ = select.select([self.process.ready_r], [], [], 0.5)
                if ready:
                    chunk = os.read(self.process.ready_r, 4096)
                    if not chunk:
                        break
                    buf += chunk
        self.process.close_ready()
        line = buf.decode(errors="replace").strip()
        if line == "READY" or line.startswith("READY "):
            said = json.loads(line[len("READY "):] or "{}")
            for note in said.get("notes", []):
                click.echo(f"memfs: {note}", err=True)
            for why in said.get("unlisted", []):
                click.echo(f"memfs: warning: {why}: the mount shows what the cache holds "
                           "until the server answers (memfs status says when it has)",
                           err=True)
            return
        if self.process.proc.poll() is None and not line:
            self.process.proc.terminate()
        log = Path(getattr(cfg, "group_dir", None) or cfg.state_dir) / "daemon.log"
        msg = line[len("ERROR "):] if line.startswith("ERROR ") else (
            f"the daemon did not start (see {log})")
        raise click.ClickException(msg)


