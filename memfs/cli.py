"""The `memfs` command line."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="memfs")
def main() -> None:
    """Mount Memory Stores as filesystems."""


# --------------------------------------------------------------------------
# memfs serve


@main.command()
@click.option(
    "--db",
    "db_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="SQLite database file (created 0600, its directory 0700, if missing).",
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
@click.option("--verbose", "-v", is_flag=True, help="Log requests to stderr.")
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
@click.option("--fault-seed", type=int, default=None, help="Seed for the fault RNG.")
@click.option(
    "--fault-control",
    is_flag=True,
    help="Enable GET/POST /_memfs/faults to change faults at runtime.",
)
def serve(
    db_path: str,
    host: str,
    port: int,
    api_key: str | None,
    api_key_file: str | None,
    verbose: bool,
    fault_error_rate: float,
    fault_error_status: str,
    fault_429_rate: float,
    fault_retry_after: float,
    fault_latency: float,
    fault_drop_rate: float,
    fault_seed: int | None,
    fault_control: bool,
) -> None:
    """Run the embedded local Memory Stores server (SQLite, hosted wire format)."""
    import logging
    import signal
    import sys
    import threading

    from memfs.server import Database, FaultConfig, Faults, MemfsHTTPServer

    if api_key_file is not None and not api_key:
        with open(api_key_file, encoding="utf-8") as f:
            api_key = f.readline().strip()
        if not api_key:
            raise click.UsageError("--api-key-file is empty")
    api_key = api_key or None

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    faults = Faults(
        FaultConfig(
            error_rate=fault_error_rate,
            error_status=int(fault_error_status),
            rate_429=fault_429_rate,
            retry_after=fault_retry_after,
            latency=fault_latency,
            drop_rate=fault_drop_rate,
        ),
        seed=fault_seed,
    )
    db = Database(db_path)
    try:
        server = MemfsHTTPServer(
            (host, port),
            db,
            api_key=api_key,
            faults=faults,
            fault_control=fault_control,
            verbose=verbose,
        )
    except OSError as exc:
        db.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None

    stop = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"memfs serve: listening on http://{shown}:{server.server_address[1]}")
    sys.stdout.flush()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.gate.clear()  # release held requests (test control) so they can finish
        server.shutdown()
        server.server_close()
        db.close()  # waits for an in-flight transaction


# --------------------------------------------------------------------------
# mount, unmount, status, stores (memfs/cli_mount.py)

from memfs.cli_mount import mount, status, stores, unmount  # noqa: E402

for _command in (mount, unmount, status, stores):
    main.add_command(_command)

# --------------------------------------------------------------------------
# conflicts: list / restore / discard preserved local versions (memfs/cli_conflicts.py)

from memfs.cli_conflicts import conflicts  # noqa: E402

main.add_command(conflicts)

# --------------------------------------------------------------------------
# tool: the memory tool straight over a store, JSON lines (memfs/cli_tool.py)

from memfs.cli_tool import tool  # noqa: E402

main.add_command(tool)
