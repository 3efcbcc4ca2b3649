"""mount_helpers/mount.memfs: option parsing only (MEMFS_BIN points at a fake memfs; no mount)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HELPER = Path(__file__).resolve().parent.parent / "mount_helpers" / "mount.memfs"


@pytest.fixture
def fake_memfs(tmp_path: Path) -> Path:
    """A stand-in for `memfs` that prints its argv (one per line) and the key-file variable."""
    script = tmp_path / "fake-memfs"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "for a in sys.argv[1:]:\n"
        "    print(a)\n"
        "print('KEYFILE=' + os.environ.get('ANTHROPIC_API_KEY_FILE', ''))\n"
    )
    script.chmod(0o755)
    return script


def run(fake: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY_FILE"}
    env["MEMFS_BIN"] = str(fake)
    return subprocess.run(
        ["sh", str(HELPER), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def argv_of(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("KEYFILE=")
    return lines[:-1]


def test_helper_is_executable() -> None:
    assert os.access(HELPER, os.X_OK)


def test_plain_mount(fake_memfs: Path) -> None:
    assert argv_of(run(fake_memfs, "memstore_01", "/mnt/x")) == ["mount", "memstore_01", "/mnt/x"]


def test_ro_and_generic_options(fake_memfs: Path) -> None:
    proc = run(fake_memfs, "memstore_01", "/mnt/x", "-o", "ro,noauto,user,defaults,_netdev,rw")
    assert argv_of(proc) == ["mount", "memstore_01", "/mnt/x", "--read-only"]


def test_value_options_pass_through(fake_memfs: Path) -> None:
    proc = run(
        fake_memfs,
        "memstore_01",
        "/mnt/my notes",
        "-o",
        "base_url=http://127.0.0.1:8765,cache_dir=/var/cache/it's here,poll_interval=2",
        "-o",
        "write_back_delay=0.5,delete_delay=5,no_prefetch,x-systemd.automount",
        "-o",
        "metrics_addr=127.0.0.1:9464",
    )
    assert argv_of(proc) == [
        "mount",
        "memstore_01",
        "/mnt/my notes",
        "--base-url",
        "http://127.0.0.1:8765",
        "--cache-dir",
        "/var/cache/it's here",
        "--poll-interval",
        "2",
        "--write-back-delay",
        "0.5",
        "--delete-delay",
        "5",
        "--no-prefetch",
        "--metrics-addr",
        "127.0.0.1:9464",
    ]


def test_mount8_calling_convention(fake_memfs: Path) -> None:
    # mount(8) may pass -n/-v, -t TYPE and a glued -oOPTS.
    proc = run(fake_memfs, "memstore_01", "/mnt/x", "-n", "-t", "memfs", "-oro")
    assert argv_of(proc) == ["mount", "memstore_01", "/mnt/x", "--read-only"]


def test_glob_characters_are_not_expanded(fake_memfs: Path, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    proc = run(fake_memfs, "memstore_01", "/mnt/x", "-o", f"cache_dir={tmp_path}/*")
    assert argv_of(proc)[-2:] == ["--cache-dir", f"{tmp_path}/*"]


def test_api_key_file_goes_to_env_not_argv(fake_memfs: Path) -> None:
    proc = run(fake_memfs, "memstore_01", "/mnt/x", "-o", "api_key_file=/etc/memfs/key")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["mount", "memstore_01", "/mnt/x", "KEYFILE=/etc/memfs/key"]


def test_api_key_in_options_is_refused(fake_memfs: Path) -> None:
    proc = run(fake_memfs, "memstore_01", "/mnt/x", "-o", "api_key=sk-secret")
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert "sk-secret" not in proc.stderr


def test_a_line_break_in_an_option_is_refused_and_runs_nothing(
        fake_memfs: Path, tmp_path: Path) -> None:
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\n")
    evil.chmod(0o755)
    for opts in (f"cache_dir=a\n{evil}", f"ro,base_url=http://x/\n{evil}\n"):
        proc = run(fake_memfs, "memstore_01", "/mnt/x", "-o", opts)
        assert proc.returncode == 32 and "an option holds a line break" in proc.stderr
        assert proc.stdout == "" and not (tmp_path / "ran").exists()


def test_unknown_option_fails_unless_sloppy(fake_memfs: Path) -> None:
    proc = run(fake_memfs, "memstore_01", "/mnt/x", "-o", "bogus=1")
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert "bogus" in proc.stderr
    proc = run(fake_memfs, "-s", "memstore_01", "/mnt/x", "-o", "bogus=1,ro")
    assert argv_of(proc) == ["mount", "memstore_01", "/mnt/x", "--read-only"]


def test_fake_mount_runs_nothing(fake_memfs: Path) -> None:
    proc = run(fake_memfs, "-f", "memstore_01", "/mnt/x", "-o", "ro")
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert "--read-only" in proc.stderr


def test_missing_arguments(fake_memfs: Path) -> None:
    proc = run(fake_memfs, "memstore_01")
    assert proc.returncode != 0
    assert "usage" in proc.stderr


def test_session_and_all_sources(fake_memfs: Path) -> None:
    proc = run(fake_memfs, "session:sesn_01", "/mnt/memory", "-o", "allow_other,uid=1000")
    assert argv_of(proc) == ["mount", "--session", "sesn_01", "/mnt/memory",
                             "--allow-other", "--uid", "1000"]
    proc = run(fake_memfs, "all", "/mnt/stores", "-o", "ro,gid=7")
    assert argv_of(proc) == ["mount", "--all", "/mnt/stores", "--read-only", "--gid", "7"]
    bad = run(fake_memfs, "session:", "/mnt/memory")
    assert bad.returncode == 32 and "needs a session id" in bad.stderr


def test_a_mount_that_fails_exits_32_as_mount_8_expects(tmp_path: Path) -> None:
    """`memfs mount`'s own exit status (1) is not mount(8)'s "mount failure" (32):
    found by a helper, 6 December."""
    failing = tmp_path / "failing-memfs"
    failing.write_text("#!/bin/sh\necho 'Error: unknown store memstore_01' >&2\nexit 1\n")
    failing.chmod(0o755)
    proc = run(failing, "memstore_01", "/mnt/x")
    assert proc.returncode == 32 and "unknown store" in proc.stderr, proc


def test_help_shows_every_option_the_helper_takes(fake_memfs: Path) -> None:
    """`--help` printed a fixed range of lines and stopped after `nonempty` (a newcomer)."""
    proc = run(fake_memfs, "--help")
    assert proc.returncode == 0
    handled = re.findall(r"^    ([a-z_]+)(?:=\*)?\)", HELPER.read_text(), re.M)
    assert {"ro", "allow_partial", "uid", "metrics_addr", "api_key_file"} <= set(handled)
    for option in handled:
        if option != "api_key":  # refused, said under api_key_file
            assert re.search(rf"\b{option}\b", proc.stdout), (option, proc.stdout)
    assert proc.stdout.rstrip().endswith("script lives in (so a symlink from /sbin into a "
                                         "checkout works).")
