"""The `memfs` command line."""

from __future__ import annotations

import importlib

import click

#: The commands defined in other modules, imported only when run (or listed by --help
#: or completion): `memfs mount` must not import the history or tool code, nor
#: `memfs status` trio and httpx.
LAZY_COMMANDS = {
    "mount": "memfs.cli.mount:mount",        # a store, a session's, a server's
    "unmount": "memfs.cli.unmount:unmount",  # flush, unmount, name what stays local
    "status": "memfs.cli.status:status",
    "stores": "memfs.cli.stores:stores",     # list / create / archive
    "conflicts": "memfs.cli.conflicts:conflicts",  # list / restore / discard local versions
    "tool": "memfs.cli.tool:tool",           # the memory tool straight over a store
    "mcp": "memfs.cli.mcp:mcp",              # the memory tool and memories as an MCP server
    "watch": "memfs.cli.watch:watch",            # a store's changes as they are applied
    "history": "memfs.cli.history:history",  # a file's versions, from the versions API
    "show": "memfs.cli.history:show",
    "restore": "memfs.cli.history:restore",
    "sessions": "memfs.cli.sessions:sessions",  # create / list / show sessions
    "salvage": "memfs.cli.salvage:salvage",  # a journal's files out, for a store gone
}


class LazyGroup(click.Group):
    """A group whose LAZY_COMMANDS load on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            module, attr = LAZY_COMMANDS[cmd_name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context):
        """Any API error a command did not word itself is still one line, not a
        traceback (commands say more through `memfs.cli.errors`); so is a state,
        cache or data directory that is not the user's own."""
        from memfs.api import errors as api_errors
        from memfs.cli.errors import describe
        from memfs.core.private import UnsafeDirectory

        try:
            return super().invoke(ctx)
        except api_errors.APIError as exc:
            raise click.ClickException(describe(None, exc)) from None
        except UnsafeDirectory as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=LazyGroup)
@click.version_option(package_name="memfs-fuse")  # the distribution's name
def main() -> None:
    """Mount Memory Stores as filesystems."""


# --------------------------------------------------------------------------
# memfs serve


@main.group(invoke_without_command=True)
@click.option(
    "--db",
    "db_path",
    default=None,
    help="SQLite database file (created 0600, its directory 0700, if missing), or a"
    " PostgreSQL URL (postgresql://user@host/dbname).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=0, show_default=True, type=int, help="Port (0 picks a free one).")
@click.option(
    "--api-key",
    envvar="MEMFS_SERVE_API_KEY",
    default=None,
    show_default=False,
    help="Require this key (x-api-key or Authorization: Bearer). Env: MEMFS_SERVE_API_KEY.",
)
@click.option(
    "--api-key-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Read the required API key from this file (first line).",
)
@click.option("--verbose", "-v", is_flag=True, help="Log requests (INFO).")
@click.option("--log-file", type=click.Path(dir_okay=False), default=None,
              help="Log to this file (0600, rotated by size) instead of stderr.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: one object per line, for log shippers.")
@click.option("--log-max-bytes", type=click.IntRange(4096), default=10 * 1024 * 1024,
              show_default=True, help="Rotate the log file at this size.")
@click.option("--log-backups", type=click.IntRange(0, 100), default=3, show_default=True,
              help="Rotated log files kept.")
@click.option("--header-timeout", type=click.FloatRange(0.1), default=10.0, show_default=True,
              help="Seconds a client has to send a complete request head (408 after).")
@click.option("--body-timeout", type=click.FloatRange(0.1), default=60.0, show_default=True,
              help="Seconds a client has to send a request body (408 after).")
@click.option("--send-timeout", type=click.FloatRange(0.1), default=60.0, show_default=True,
              help="Seconds a client has to take a response (the connection is reset after).")
@click.option("--max-connections", type=click.IntRange(1), default=None,
              help="Open connections at most (default: 1000, or fewer if the fd limit is low).")
@click.option("--max-connections-per-client", type=click.IntRange(1), default=None,
              help="Near the connection cap (from 90%), a client address's share (an IPv6"
              " /64): it gets no more (default: a tenth of --max-connections, at least 8)."
              " Behind a load balancer, raise it to --max-connections.")
@click.option("--metrics", "metrics", is_flag=True,
              help="Serve Prometheus metrics on GET /_memfs/metrics (needs the API key).")
@click.option("--allow-unauthenticated", is_flag=True,
              help="Listen on a non-loopback --host without an API key (anyone who reaches"
              " the port can read and write every store). Refused otherwise.")
@click.option(
    "--fault-error-rate", type=click.FloatRange(0, 1), default=0.0, help="P(injected 5xx)."
)
@click.option(
    "--fault-error-status",
    type=click.Choice(["500", "503", "529"]),
    default="503",
    show_default=True,
    help="Status of injected errors.",
)
@click.option("--fault-429-rate", type=click.FloatRange(0, 1), default=0.0, help="P(injected 429).")
@click.option(
    "--fault-retry-after",
    type=click.FloatRange(0),
    default=1.0,
    show_default=True,
    help="retry-after seconds sent with injected 429s.",
)
@click.option(
    "--fault-latency", type=click.FloatRange(0), default=0.0, help="Seconds added per request."
)
@click.option(
    "--fault-drop-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    help="P(process + commit, then reset the connection without a response).",
)
@click.option(
    "--fault-error-after-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    help="P(process + commit, then answer --fault-error-after-status instead of the result).",
)
@click.option(
    "--fault-error-after-status",
    type=click.Choice(["500", "502", "503", "504"]),
    default="502",
    show_default=True,
    help="Status of errors answered after the commit.",
)
@click.option("--fault-seed", type=int, default=None, help="Seed for the fault RNG.")
@click.option(
    "--fault-control",
    is_flag=True,
    help="Enable /_memfs/faults and /_memfs/gate (test controls).",
)
@click.pass_context
def serve(
    ctx: click.Context,
    db_path: str | None,
    host: str,
    port: int,
    api_key: str | None,
    api_key_file: str | None,
    verbose: bool,
    log_file: str | None,
    log_format: str,
    log_max_bytes: int,
    log_backups: int,
    header_timeout: float,
    body_timeout: float,
    send_timeout: float,
    max_connections: int | None,
    max_connections_per_client: int | None,
    metrics: bool,
    allow_unauthenticated: bool,
    fault_error_rate: float,
    fault_error_status: str,
    fault_429_rate: float,
    fault_retry_after: float,
    fault_latency: float,
    fault_drop_rate: float,
    fault_error_after_rate: float,
    fault_error_after_status: str,
    fault_seed: int | None,
    fault_control: bool,
) -> None:
    """Run the Memory Stores server (SQLite or PostgreSQL, hosted wire format).

    `memfs serve stop` / `memfs serve status` manage the embedded local server."""
    if ctx.invoked_subcommand is not None:
        return
    if db_path is None:
        raise click.UsageError("--db is required (a SQLite file or a postgresql:// URL)")
    import logging
    import sys

    from memfs.local import logs
    from memfs.server import FaultConfig, Faults, open_database
    from memfs.server.app import Limits, MemfsApp
    from memfs.server.runner import bind, is_loopback
    from memfs.server.runner import serve as run_server

    if api_key_file is not None and not api_key:
        from memfs.cli.errors import warn_open_key_file

        warn_open_key_file(api_key_file)
        try:
            with open(api_key_file, encoding="utf-8") as f:
                api_key = f.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise click.ClickException(f"cannot read --api-key-file {api_key_file}: {reason}") \
                from None
        if not api_key:
            raise click.UsageError("--api-key-file is empty")
    api_key = api_key or None
    if api_key is None and not allow_unauthenticated and not is_loopback(host):
        raise click.UsageError(
            f"--host {host} is reachable from other machines and no API key is set: anyone"
            " who reaches it could read and write every store. Set --api-key-file (or"
            " MEMFS_SERVE_API_KEY), or pass --allow-unauthenticated to serve it anyway.")

    try:
        logs.configure(level=logging.INFO if verbose else logging.WARNING, log_file=log_file,
                       fmt=log_format, max_bytes=log_max_bytes, backups=log_backups)
    except OSError as exc:  # a symbolic link (ELOOP), another user's file, ...
        import errno

        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise click.ClickException(f"cannot write the log file {log_file}: {why}") from None
    if not verbose:  # one warning line per malformed request would be noise
        logging.getLogger("uvicorn.error").setLevel(logging.ERROR)
    faults = Faults(
        FaultConfig(
            error_rate=fault_error_rate,
            error_status=int(fault_error_status),
            rate_429=fault_429_rate,
            retry_after=fault_retry_after,
            latency=fault_latency,
            drop_rate=fault_drop_rate,
            error_after_rate=fault_error_after_rate,
            error_after_status=int(fault_error_after_status),
        ),
        seed=fault_seed,
    )
    try:
        db = open_database(db_path)
    except Exception as exc:  # no traceback with a password-bearing URL in it
        raise click.ClickException(f"cannot open the database: {exc}") from None
    try:
        sock = bind(host, port)
    except OSError as exc:
        db.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    app = MemfsApp(db, api_key=api_key, faults=faults, fault_control=fault_control,
                   verbose=verbose, limits=Limits(body_timeout=body_timeout,
                                                 send_timeout=send_timeout),
                   metrics=metrics)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}"

    from memfs.local.titles import serve_title, set_title

    set_title(serve_title(db_path, url))  # `ps`: never the key, nor a database password

    def on_listening() -> None:
        click.echo(f"memfs serve: listening on {url}")
        sys.stdout.flush()

    try:
        run_server(app, sock, on_listening=on_listening, header_timeout=header_timeout,
                   send_timeout=send_timeout, max_connections=max_connections,
                   max_per_client=max_connections_per_client)
    finally:
        db.close()  # waits for an in-flight transaction


@serve.command("stop")
@click.option("--timeout", type=click.FloatRange(0), default=10.0, show_default=True,
              help="Seconds to wait for it to exit.")
@click.option("--force", is_flag=True, help="Stop it even while live mounts use it (they go "
              "offline, keep their changes journaled, and follow it when it starts again).")
def serve_stop(timeout: float, force: bool) -> None:
    """Stop the embedded local server (the one `memfs mount` starts); refused while
    live mounts use it, unless --force."""
    from memfs.local import server as local_server

    try:
        result = local_server.stop(timeout=timeout, force=force)
    except local_server.InUse as exc:
        raise click.ClickException(
            f"the embedded server ({exc.url}) serves {len(exc.mountpoints)} live mount(s): "
            + ", ".join(exc.mountpoints) + "; unmount them first (memfs unmount), or "
            "--force (they go offline and catch up when it runs again)") from None
    click.echo(result)


@serve.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def serve_status(as_json: bool) -> None:
    """Is the embedded local server running? Its URL, pid, server id and log."""
    import json as _json

    from memfs.local import server as local_server

    st = local_server.status()
    if as_json:
        click.echo(_json.dumps(st))
        return
    if st["running"]:
        click.echo(f"running: {st['url']} (pid {st['pid']}, server_id {st['server_id']})")
    else:
        click.echo("not running")
    click.echo(f"database: {st['db']}")
    click.echo(f"log: {st['log']}")
