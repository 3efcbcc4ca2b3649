"""Edges of `memfs mount` a user hits: a non-empty mountpoint (refused unless
--allow-non-empty, in plain, session and --all mounts alike) and a second mount of a
session whose stores are all mounted already (refused, even with --allow-partial)."""

from __future__ import annotations

import os

import pytest
from mountutil import MountProc, mount_env, mounts, needs_fuse  # noqa: F401

pytestmark = [needs_fuse, pytest.mark.timeout(180)]


def test_a_non_empty_mountpoint_is_refused_unless_asked(server, mounts, tmp_path):  # noqa: F811
    store = mounts.new_store("Notes")
    cli = MountProc(tmp_path, "", mount_env(server, tmp_path), ())
    sid = cli.memfs("sessions", "create", "--store", store).stdout.split()[-1]
    for name, select in (("plain", (store,)), ("session", ("--session", sid)),
                         ("all", ("--all",))):
        point = tmp_path / name
        point.mkdir()
        (point / "mine.txt").write_text("mine\n")
        proc = cli.memfs("mount", *select, str(point), check=False)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.strip() == (
            f"Error: {point} is not empty (1 entry: mine.txt): a mount would hide them until "
            "unmounted; use an empty directory, or --allow-non-empty"), proc.stderr
        assert not os.path.ismount(point)
        assert (point / "mine.txt").read_text() == "mine\n"
    m = mounts.mount(store, "--allow-non-empty", name="plain")
    assert os.path.ismount(m.path) and os.listdir(m.path) == []
    m.unmount()
    assert (m.path / "mine.txt").read_text() == "mine\n"  # back once unmounted
    g = mounts.mount_group("--session", sid, args=("--allow-non-empty",), name="session")
    assert os.listdir(g.path) == ["notes"]


def test_a_second_mount_of_a_session_is_refused(server, mounts, tmp_path):  # noqa: F811
    a = mounts.new_store("A")
    b = mounts.new_store("B")
    cli = MountProc(tmp_path, "", mount_env(server, tmp_path), ())
    sid = cli.memfs("sessions", "create", "--store", a, "--store", b).stdout.split()[-1]
    first = mounts.mount_group("--session", sid, name="first")
    second = tmp_path / "second"
    second.mkdir()
    for extra in ((), ("--allow-partial",)):
        proc = cli.memfs("mount", "--session", sid, str(second), *extra, check=False)
        assert proc.returncode == 1, proc.stderr
        assert f"2 of 2 store(s) of {second} cannot be mounted" in proc.stderr
        assert f"already mounted at {first.path}/a by another memfs daemon" in proc.stderr
        assert "nothing mounted" in proc.stderr and not os.path.ismount(second)
