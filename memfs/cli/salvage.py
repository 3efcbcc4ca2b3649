"""`memfs salvage`: a journal's files out as plain files, for changes no mount will send."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from memfs.cli.completion import complete_mountpoints
from memfs.state.schema import STATE_DB

#: The exit status when something written there and not on the server could not be
#: written out (as `memfs unmount`'s 3: something the user wrote is not safe yet).
NOT_ALL_WRITTEN = 3


@click.command()
@click.argument("source", type=click.Path(), shell_complete=complete_mountpoints)
@click.argument("dest", type=click.Path())
def salvage(source, dest):
    """Write the files SOURCE's journal holds into DEST, a new or empty directory.

    SOURCE is a state directory (the one `memfs unmount` names for a store deleted or
    archived on the server) or a mountpoint memfs mounted before. DEST gets the tree as
    that mount last held it, and under DEST/.conflicts/ID/ the local version each
    conflict kept aside; the files not on the server are named. The journal is left as
    it was. Exit status 3: something written there and not on the server could not be
    written out (named)."""
    from memfs.state.salvage import SalvageError
    from memfs.state.salvage import salvage as write_out

    state_dir = _state_dir(source)
    try:
        done = write_out(state_dir, Path(dest))
    except SalvageError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {len(done.written)} file(s) of {state_dir} to {dest}")
    if done.unsent:
        click.echo(f"  {len(done.unsent)} of them not on the server:")
        for path, why in done.unsent:
            click.echo(f"    {path}: {why}")
    for where, why in done.conflicts:
        click.echo(f"  a conflict's local version: {os.path.join(dest, where[1:])} ({why})")
    if done.missing:
        click.echo(f"  {len(done.missing)} file(s) not written: this mount never held their "
                   f"content (the server had it): {', '.join(done.missing)}")
    for path in done.lost:
        click.echo(f"  NOT written, and not on the server: {path} (its content is gone "
                   "from the journal)")
    for path in done.unsafe:
        click.echo(f"  NOT written: {path!r} is not a safe path")
    for path, why in done.failed:
        click.echo(f"  NOT written: {path} ({why}); the journal still holds it")
    if done.lost or done.unsafe or done.failed:
        sys.exit(NOT_ALL_WRITTEN)


def _state_dir(source: str) -> Path:
    """SOURCE as a state directory: itself when it holds a state.db, else where the
    mountpoint's state lives (the mount may be a dead daemon's: ENOTCONN)."""
    try:
        if (Path(source) / STATE_DB).is_file():
            return Path(source)
    except OSError:
        pass
    from memfs.cli.status import locate

    found = locate(os.path.abspath(source))
    if found is None:
        raise click.ClickException(
            f"{source} is neither a memfs state directory nor a mountpoint memfs knows")
    if not (found[0] / STATE_DB).is_file():
        raise click.ClickException(
            f"{source} is a session or --all root: name one store's directory under it, "
            "or the state directory `memfs unmount` named")
    return found[0]
