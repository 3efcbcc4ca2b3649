"""mount_helpers/*.service (systemd-analyze verify; the template's commands run for real)
and the documented fstab lines, through `mount -a -T FILE` and the mount.memfs helper."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import anthropic
import pytest
from mountutil import MountProc, mount_env, needs_fuse, server_memories

REPO = pathlib.Path(__file__).resolve().parent.parent
HELPERS = REPO / "mount_helpers"
UNITS = ("memfs@.service", "memfs-serve.service")
INSTALLED = "/opt/memfs/bin/memfs"


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


def unit_environment(text: str, specifiers: dict[str, str], etc: pathlib.Path) -> dict:
    """The environment systemd gives the unit's commands: its default PATH, then
    Environment= (specifiers expanded), then each EnvironmentFile= (``-``: optional)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LANG": "C.UTF-8"}
    for line in directives(text, "Environment"):
        for word in shlex.split(_specifiers(line, specifiers)):
            key, value = word.split("=", 1)
            env[key] = value
    for name in directives(text, "EnvironmentFile"):
        path = pathlib.Path(_specifiers(name.lstrip("-"), specifiers)
                            .replace("/etc/memfs", str(etc)))
        if not path.exists() and name.startswith("-"):
            continue
        for raw in path.read_text().splitlines():
            raw = raw.strip()
            if raw and not raw.startswith("#"):
                key, value = raw.split("=", 1)
                env[key.strip()] = value.strip()
    return env


def _specifiers(text: str, specifiers: dict[str, str]) -> str:
    for spec, value in specifiers.items():
        text = text.replace(spec, value)
    return text


@pytest.fixture(autouse=True)
def admin_umask():
    """The units' files and directories as an admin makes them (umask 022), whatever an
    earlier test in this process left (memfs's daemon makes its own umask private)."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture(scope="module")
def opt_install():
    """docs/INSTALL.md's install for the units, into a directory standing for /opt/memfs:
    a venv of the system Python and a real `pip install` of the checkout's files,
    world-readable (the dynamic user of memfs-serve.service must run it)."""
    python = "/usr/bin/python3"
    if not os.path.exists(python) or os.geteuid() != 0:
        pytest.skip("needs root and the system Python")
    base = pathlib.Path(tempfile.mkdtemp(prefix="memfs-opt-"))
    try:
        base.chmod(0o755)
        src = base / "src"  # the checkout's package files, not its .venv nor build leftovers
        src.mkdir()
        for name in ("pyproject.toml", "setup.py", "README.md"):
            shutil.copy2(REPO / name, src / name)
        shutil.copytree(REPO / "memfs", src / "memfs",
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        venv = base / "opt" / "memfs"
        # umask 022 as an admin's shell has: another test in this process may have left a
        # private one (memfs makes its state 0700), and the unit's user must read the venv.
        subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120,
                       umask=0o022)
        proc = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(src)],
                              capture_output=True, text=True, timeout=600, umask=0o022)
        if proc.returncode != 0:
            pytest.skip(f"pip install failed here (no package index?): {proc.stderr[-500:]}")
        yield venv / "bin" / "memfs"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_fuse
@pytest.mark.mount
def test_the_documented_units_run_as_installed(opt_install, tmp_path: pathlib.Path) -> None:
    """memfs-serve.service's ExecStart as an unprivileged user in its StateDirectory, then
    memfs@.service's ExecStartPre/ExecStart/ExecStop with the env file docs/INSTALL.md
    shows, both with the unit's environment: a store made by name, mounted by its slug,
    and a file written there reaching the server at the stop's flush."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="memfs-units-"))  # nobody must reach it
    serve = mount = None
    try:
        base.chmod(0o755)
        state, cache, etc = base / "var-lib", base / "var-cache", base / "etc-memfs"
        for d in (state, cache):
            d.mkdir()
        etc.mkdir(mode=0o700)
        key = "k-" + os.urandom(8).hex()
        (etc / "serve.env").write_text(f"MEMFS_SERVE_API_KEY={key}\n")
        (etc / "api-key").write_text(key + "\n")
        for f in ("serve.env", "api-key"):
            (etc / f).chmod(0o600)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with open(etc / "serve.env", "a") as f:
            f.write(f"MEMFS_SERVE_PORT={port}\n")  # 8765 may be taken here

        text = (HELPERS / "memfs-serve.service").read_text().replace(INSTALLED, str(opt_install))
        assert directives(text, "DynamicUser") == ["yes"]
        (state / directives(text, "StateDirectory")[0]).mkdir()
        os.chown(state / "memfs-serve", 65534, 65534)  # as systemd makes it for the user
        env = {**unit_environment(text, {"%S": str(state)}, etc), "HOME": "/"}
        argv = _expand(directives(text, "ExecStart")[0], env, "")
        serve = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534",
                                  "--clear-groups", "--", *argv], env=env, cwd="/",
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = serve.stdout.readline()
        assert line == f"memfs serve: listening on http://127.0.0.1:{port}\n", \
            (line, serve.poll() is not None and serve.communicate())
        assert (state / "memfs-serve" / "memfs.db").stat().st_uid == 65534

        shell = {**os.environ, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
                 "ANTHROPIC_API_KEY_FILE": str(etc / "api-key"),
                 "XDG_CACHE_HOME": str(base / "shell-cache")}
        shell.pop("ANTHROPIC_API_KEY", None)
        made = subprocess.run([str(opt_install), "stores", "create", "Team Notes"], env=shell,
                              capture_output=True, text=True, timeout=60)
        assert made.returncode == 0 and made.stderr == "", made.stderr
        store = made.stdout.split()[-1]

        point = base / "mnt" / "notes"
        documented = re.search(r"cat > /etc/memfs/mnt-notes.env <<'ENV'\n(.*?\n)ENV\n",
                               (REPO / "docs" / "INSTALL.md").read_text(), re.S).group(1)
        assert "STORE=team-notes\n" in documented and "127.0.0.1:8765" in documented
        (etc / "mnt-notes.env").write_text(documented.replace("8765", str(port))
                                           .replace("/etc/memfs", str(etc)))
        text = (HELPERS / "memfs@.service").read_text().replace(INSTALLED, str(opt_install))
        specifiers = {"%i": "mnt-notes", "%S": str(state), "%C": str(cache)}
        env = {**unit_environment(text, specifiers, etc), "HOME": "/root"}
        for d in ("CacheDirectory", "StateDirectory"):
            (pathlib.Path(env["XDG_CACHE_HOME" if d == "CacheDirectory" else "XDG_DATA_HOME"])
             / directives(text, d)[0]).mkdir(exist_ok=True)
        pre = _expand(directives(text, "ExecStartPre")[0], env, str(point))
        subprocess.run(pre, env=env, check=True, timeout=30)
        m = MountProc(point, store, env, ())
        start = _expand(directives(text, "ExecStart")[0], env, str(point))
        mount = subprocess.Popen(start, env=env, cwd="/", stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                m.pid = int(m.registry()["pid"])
                break
            except AssertionError:
                assert mount.poll() is None, mount.communicate()
                assert time.monotonic() < deadline, "the foreground mount never came up"
                time.sleep(0.1)
        assert m.pid == mount.pid  # the service's main process is the mount itself
        (point / "note.md").write_text("from a service")
        stop = _expand(directives(text, "ExecStop")[0], env, str(point))
        out = subprocess.run(stop, env=env, capture_output=True, text=True, timeout=90)
        assert out.returncode == 0, out.stdout + out.stderr
        # The stop's flush pushes the note, unless the write-back delay ran out first (a
        # loaded machine): either way nothing is left, and the server has it (below).
        assert re.search(rf"unmounted {re.escape(str(point))}: pushed [01] change\(s\), 0 left",
                         out.stdout), out.stdout
        assert mount.wait(timeout=30) == 0  # Restart=on-failure: a clean stop is not restarted
        sdk = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=key,
                                  max_retries=0)
        assert {x.path: x.content for x in sdk.beta.memory_stores.memories.list(
            store, view="full")} == {"/note.md": "from a service"}
    finally:
        for proc in (mount, serve):
            if proc is not None and proc.poll() is None:
                proc.terminate()  # SIGTERM, as systemctl stop sends
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if mount is not None and os.path.ismount(base / "mnt" / "notes"):
            subprocess.run(["fusermount3", "-uz", str(base / "mnt" / "notes")], check=False)
        shutil.rmtree(base, ignore_errors=True)


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
