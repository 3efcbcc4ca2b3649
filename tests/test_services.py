"""mount_helpers/*.service (systemd-analyze verify; the template's commands run for real)
and the documented fstab lines, through `mount -a -T FILE` and the mount.memfs helper."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest
from mountutil import MountProc, mount_env, needs_fuse, server_memories

REPO = pathlib.Path(__file__).resolve().parent.parent
HELPERS = REPO / "mount_helpers"
UNITS = ("memfs@.service", "memfs-serve.service")
INSTALLED = "/usr/local/bin/memfs"


def memfs_wrapper(tmp_path: pathlib.Path) -> pathlib.Path:
    """An executable `memfs` that runs this checkout (what /usr/local/bin/memfs would be)."""
    script = tmp_path / "bin" / "memfs"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} "
                      f"exec {shlex.quote(sys.executable)} -m memfs \"$@\"\n")
    script.chmod(0o755)
    return script


def unit_text(name: str, memfs: pathlib.Path) -> str:
    return (HELPERS / name).read_text().replace(INSTALLED, str(memfs))


def directives(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (apt-get install systemd)")
def test_units_verify(tmp_path: pathlib.Path) -> None:
    memfs = memfs_wrapper(tmp_path)
    units = tmp_path / "units"
    units.mkdir()
    for name in UNITS:
        (units / name).write_text(unit_text(name, memfs))
    (units / "memfs@mnt-notes.service").write_text(unit_text("memfs@.service", memfs))
    for name in ("memfs@mnt-notes.service", "memfs-serve.service"):
        proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(units / name)],
                              capture_output=True, text=True, timeout=60)
        ours = [line for line in proc.stderr.splitlines() if "memfs" in line]
        assert proc.returncode == 0 and not ours, proc.stderr
    # and it does complain about a broken unit
    (units / "broken.service").write_text(unit_text("memfs-serve.service", memfs)
                                          .replace("Restart=on-failure", "Restart=sometimes"))
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(units / "broken.service")],
                          capture_output=True, text=True, timeout=60)
    assert "restart specifier" in proc.stderr


def test_escaped_instance_is_the_mountpoint() -> None:
    if shutil.which("systemd-escape") is None:
        pytest.skip("systemd-escape is not installed")
    out = subprocess.run(["systemd-escape", "--path", "/mnt/my notes"], capture_output=True,
                         text=True, check=True).stdout.strip()
    back = subprocess.run(["systemd-escape", "--unescape", "--path", out], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert back == "/mnt/my notes"


def _expand(command: str, env: dict[str, str], mountpoint: str) -> list[str]:
    """An Exec line as systemd runs it: %f the mountpoint, ${VAR} one word, $VAR split."""
    words = []
    command = command.lstrip("-")  # "-": a failure of this command is ignored
    for word in shlex.split(command.replace("%f", mountpoint)):
        if re.fullmatch(r"\$\{\w+\}", word):
            words.append(env.get(word[2:-1], ""))
        elif re.fullmatch(r"\$\w+", word):
            words.extend(env.get(word[1:], "").split())
        else:
            words.append(word)
    return words


@needs_fuse
def test_template_commands_mount_and_flush(server, mounts, tmp_path: pathlib.Path) -> None:
    """ExecStart (foreground mount, store by name) and ExecStop (flush + unmount), as the
    template runs them with its EnvironmentFile."""
    memfs = memfs_wrapper(tmp_path)
    text = unit_text("memfs@.service", memfs)
    store = mounts.new_store("Service Notes")
    path = tmp_path / "svc"
    path.mkdir()
    env_file = {"STORE": "Service Notes", "MEMFS_OPTIONS": "--write-back-delay 30"}
    env = {**mount_env(server, tmp_path), **env_file}
    m = MountProc(path, store, env, ())
    mounts.made.append(m)
    start = _expand(directives(text, "ExecStart")[0], env, str(path))
    stop = _expand(directives(text, "ExecStop")[0], env, str(path))
    assert start[1:4] == ["mount", "--foreground", "--write-back-delay"]
    proc = subprocess.Popen(start, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                m.pid = int(m.registry()["pid"])
                break
            except AssertionError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the foreground mount never came up"
                time.sleep(0.1)
        assert m.pid == proc.pid  # the service's main process is the mount itself
        (path / "note.md").write_text("from a service")  # pushed only by the stop's flush
        out = subprocess.run(stop, env=env, capture_output=True, text=True, timeout=90)
        assert out.returncode == 0, out.stderr
        assert "pushed 1 change(s), 0 left" in out.stdout
        assert proc.wait(timeout=30) == 0  # Restart=on-failure: a clean stop is not restarted
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert server_memories(server, store) == {"/note.md": "from a service"}


# -- fstab -----------------------------------------------------------------------------------

SBIN_HELPER = pathlib.Path("/sbin/mount.memfs")


@pytest.fixture
def mount_helper_installed():
    """/sbin/mount.memfs pointing at this checkout's helper, for the test only. The
    tests that use it may run at once (./dev.sh test runs two processes): an exclusive
    lock keeps one from removing the link under another."""
    if shutil.which("mount") is None:
        pytest.skip("mount(8) is not installed")
    import fcntl

    lock = open("/tmp/memfs-tests-sbin-mount-helper.lock", "a")  # noqa: SIM115
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        yield from _helper_linked()
    finally:
        lock.close()


def _helper_linked():
    made = False
    if not SBIN_HELPER.exists():
        try:
            SBIN_HELPER.symlink_to(HELPERS / "mount.memfs")
            made = True
        except FileExistsError:
            pass
    if SBIN_HELPER.resolve() != (HELPERS / "mount.memfs").resolve():
        pytest.skip(f"{SBIN_HELPER} is another helper ({SBIN_HELPER.resolve()})")
    try:
        yield
    finally:
        if made:
            SBIN_HELPER.unlink(missing_ok=True)


def documented_fstab_lines() -> list[str]:
    """The fstab lines the README and docs/INSTALL.md show (backticked or in a block)."""
    lines = []
    for doc in (REPO / "README.md", REPO / "docs" / "INSTALL.md"):
        for m in re.finditer(r"^(\S+\s+/mnt/\S+\s+memfs\s+\S+\s+0\s+0)\s*$|`(STORE_ID /mnt/x "
                             r"memfs [^`]+)`", doc.read_text(), re.M):
            lines.append(m.group(1) or m.group(2))
    return lines


@needs_fuse
def test_fstab_examples_through_mount(server, mounts, tmp_path: pathlib.Path,
                                      mount_helper_installed) -> None:
    examples = documented_fstab_lines()
    assert len(examples) >= 3 and any(e.startswith("team-notes ") for e in examples), examples
    env = {**mount_env(server, tmp_path), "MEMFS_BIN": str(memfs_wrapper(tmp_path))}
    store = mounts.new_store("Team Notes")  # docs/INSTALL.md names it by its slug
    for i, example in enumerate(examples):
        source, _point, fstype, options, _d, _p = example.split()
        assert fstype == "memfs"
        path = tmp_path / f"fstab{i}"
        path.mkdir()
        m = MountProc(path, store, env, ())
        mounts.made.append(m)
        fstab = tmp_path / f"fstab{i}.txt"
        # The documented options, with this test's store and mountpoint; `mount -a` skips
        # noauto lines, so those are mounted by their mountpoint, as a user would.
        named = source if source == "team-notes" else store  # an id placeholder: the id
        fstab.write_text(f"# test\n{named} {path} memfs {options} 0 0\n")
        cmd = (["mount", "-T", str(fstab), str(path)] if "noauto" in options.split(",")
               else ["mount", "-a", "-T", str(fstab)])
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (example, out.stdout, out.stderr)
        m.pid = int(m.registry()["pid"])
        assert m.status()["read_only"] == ("ro" in options.split(","))
        m.unmount()
    # a line without noauto, through `mount -a`
    path = tmp_path / "auto"
    path.mkdir()
    m = MountProc(path, store, env, ())
    mounts.made.append(m)
    fstab = tmp_path / "fstab-auto.txt"
    fstab.write_text(f"Team\\040Notes {path} memfs rw,_netdev,poll_interval=5 0 0\n")
    out = subprocess.run(["mount", "-a", "-T", str(fstab)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    m.pid = int(m.registry()["pid"])
    (path / "via-fstab.md").write_text("hi")
    m.wait_synced()
    assert server_memories(server, store)["/via-fstab.md"] == "hi"
    assert os.path.ismount(path)
    m.unmount()
