"""Starting the mount's daemon process, as early as `memfs mount` can.

The daemon (``python -m memfs.mount.daemon``) spends about 0.2 s importing pyfuse3, trio
and httpx before it can mount, which is most of what `memfs mount` waits for. So the
`memfs` command starts it first thing, before click and the CLI's own modules load
(`main`), when its arguments are a background `memfs mount`; `cli/mount.py` then takes
that process (`take`) instead of starting one. The daemon waits for its
configuration on a pipe: a mount that fails before handing it over (bad arguments,
an unknown store) kills the process it no longer needs, or the process sees end of
file and exits, having touched nothing.

This module imports nothing heavy: it runs before everything else.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys

#: `memfs mount` options after which no daemon is started early: they run no
#: background daemon (foreground, help) or only print.
_NO_EARLY = {"--foreground", "-f", "--help", "-h"}


class DaemonProcess:
    """A started daemon waiting for its configuration: the process, the write end of
    its configuration pipe and the read end of its ready pipe."""

    def __init__(self, proc: subprocess.Popen, config_w: int, ready_r: int) -> None:
        self.proc, self.config_w, self.ready_r = proc, config_w, ready_r

    def close_config(self) -> None:
        """The configuration is sent (or cannot be): the daemon reads its end."""
        if self.config_w >= 0:
            os.close(self.config_w)
            self.config_w = -1

    def close_ready(self) -> None:
        if self.ready_r >= 0:
            os.close(self.ready_r)
            self.ready_r = -1

    def close_pipes(self) -> None:
        self.close_config()
        self.close_ready()

    def kill(self) -> None:
        """End a daemon that will not be configured (nothing to clean up yet)."""
        self.close_pipes()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start() -> DaemonProcess:
    """Start ``python -m memfs.mount.daemon`` with its two pipes. The API key in use goes
    through the configuration pipe later, so it is not in the daemon's environment."""
    config_r, config_w = os.pipe()
    ready_r, ready_w = os.pipe()
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    env["MEMFS_CONFIG_FD"], env["MEMFS_READY_FD"] = str(config_r), str(ready_w)
    try:
        # -P: the current directory is not put on the import path (a folder named
        # `memfs` there must not stand in for the package).
        proc = subprocess.Popen([sys.executable, "-P", "-m", "memfs.mount.daemon"], env=env,
                                pass_fds=(config_r, ready_w), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    except BaseException:
        os.close(config_w)
        os.close(ready_r)
        raise
    finally:
        os.close(config_r)
        os.close(ready_w)
    return DaemonProcess(proc, config_w, ready_r)


_early: DaemonProcess | None = None


def take() -> DaemonProcess:
    """The daemon started early for this command, else a new one."""
    global _early
    daemon, _early = _early, None
    return daemon if daemon is not None else start()


def _kill_untaken() -> None:
    if _early is not None:
        _early.kill()


def wants_early_daemon(args: list[str]) -> bool:
    """A background `memfs mount ...` (the plain form only: anything else starts its
    daemon when `cli/mount.py` gets there, as before)."""
    return (bool(args) and args[0] == "mount" and not _NO_EARLY.intersection(args)
            and "_MEMFS_COMPLETE" not in os.environ)


def main() -> None:
    """The `memfs` command (and `python -m memfs`)."""
    global _early
    if wants_early_daemon(sys.argv[1:]):
        try:
            _early = start()
            atexit.register(_kill_untaken)
        except OSError:
            _early = None  # cli/mount.py starts one and reports what fails
    from memfs.cli.main import main as cli_main

    cli_main(prog_name="memfs")
