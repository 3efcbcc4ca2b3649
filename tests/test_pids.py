"""memfs.local.pids: a process that ended (a zombie included) is gone, a running one is
not, and waiting on one returns when it ends, with or without a pidfd."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from memfs.local import pids


def _sleeper(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


@pytest.fixture(params=["pidfd", "polling"])
def mode(request, monkeypatch) -> str:
    if request.param == "polling":
        def no_pidfd(pid: int, flags: int = 0) -> int:
            raise OSError(38, "Function not implemented")
        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    return request.param


def test_a_running_process_is_waited_for_until_the_timeout(mode):
    proc = _sleeper(30)
    try:
        assert pids.alive(proc.pid)
        assert pids.wait_gone(proc.pid, 0.2) is False
        assert pids.alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_an_exit_ends_the_wait_and_a_zombie_counts_as_gone(mode):
    proc = _sleeper(0.3)
    try:
        assert pids.wait_gone(proc.pid, 30) is True
        # not reaped yet: the pid is a zombie, which has exited
        stat = pathlib.Path(f"/proc/{proc.pid}/stat").read_text()
        assert stat.rsplit(")", 1)[1].split()[0] == "Z"
        assert not pids.alive(proc.pid)
        assert pids.wait_gone(proc.pid, 0) is True
    finally:
        proc.wait()
    # reaped: no such process
    assert not pids.alive(proc.pid)
    assert pids.wait_gone(proc.pid, 0) is True
