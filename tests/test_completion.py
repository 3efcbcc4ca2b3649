"""Shell completion through click's environment-variable protocol (bash, zsh, fish):
store names from the server, live mountpoints from the registry, nothing when offline."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from mountutil import mount_env, needs_fuse


def complete(env: dict, shell: str, words: str, cword: int | None = None,
             ) -> subprocess.CompletedProcess:
    env = {**env, "_MEMFS_COMPLETE": f"{shell}_complete", "COMP_WORDS": words}
    if shell == "fish":
        env["COMP_CWORD"] = words.split(" ")[-1]
    else:
        env["COMP_CWORD"] = str(len(words.split(" ")) - 1 if cword is None else cword)
    return subprocess.run([sys.executable, "-m", "memfs"], env=env, capture_output=True,
                          text=True, timeout=60)


def values(shell: str, out: str) -> list[str]:
    if shell == "bash":
        return [line.split(",", 1)[1] for line in out.splitlines()]
    if shell == "zsh":
        lines = out.splitlines()
        return [lines[i + 1] for i in range(0, len(lines), 3)]
    return [line.split(",", 1)[1].split("\t")[0] for line in out.splitlines()]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_source_scripts(shell: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "memfs"], env={"_MEMFS_COMPLETE":
                          f"{shell}_source", "PATH": "/usr/bin:/bin",
                          "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "_MEMFS_COMPLETE" in proc.stdout, proc.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_store_names_from_the_server(server, tmp_path, shell: str) -> None:
    sdk = server.sdk()
    notes = sdk.beta.memory_stores.create(name="notes").id
    sdk.beta.memory_stores.create(name="research")
    env = mount_env(server, tmp_path)
    for words in ("memfs mount ", "memfs stores archive ", "memfs tool "):
        proc = complete(env, shell, words)
        assert proc.returncode == 0 and proc.stderr == ""
        assert sorted(values(shell, proc.stdout)) == ["notes", "research"], (words, proc.stdout)
    proc = complete(env, shell, "memfs mount no")
    assert values(shell, proc.stdout) == ["notes"]
    proc = complete(env, shell, "memfs mount memstore_")  # an id prefix completes ids
    assert notes in values(shell, proc.stdout)
    if shell == "zsh":  # the id goes along as the description
        assert notes in proc.stdout


def test_offline_completes_nothing_quietly(tmp_path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
           "XDG_CACHE_HOME": str(tmp_path / "c"), "XDG_DATA_HOME": str(tmp_path / "d")}
    started = time.monotonic()
    proc = complete(env, "bash", "memfs mount ")
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "", "")
    assert time.monotonic() - started < 10
    # no base URL and no embedded server running: nothing, and no server is started
    env.pop("ANTHROPIC_BASE_URL")
    proc = complete(env, "bash", "memfs mount ")
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "", "")
    assert not (tmp_path / "d" / "memfs" / "local-server.json").exists()


@needs_fuse
@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_live_mountpoints(server, mounts, shell: str) -> None:
    m = mounts.mount(mounts.new_store("m"))
    for words in ("memfs unmount ", "memfs status "):
        proc = complete(m.env, shell, words)
        assert values(shell, proc.stdout) == [str(m.path)], proc.stdout
    proc = complete(m.env, shell, f"memfs unmount {str(m.path)[:-2]}")
    assert values(shell, proc.stdout) == [str(m.path)]
    proc = complete(m.env, shell, "memfs unmount /nonexistent/x")  # falls back to directories
    assert values(shell, proc.stdout) == ["/nonexistent/x"]
    if shell == "bash":
        assert proc.stdout.startswith("dir,")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_a_name_with_a_space_is_one_argument_and_slugs_are_offered(server, tmp_path, shell):
    sdk = server.sdk()
    team = sdk.beta.memory_stores.create(name="Team Notes").id
    env = mount_env(server, tmp_path)
    got = values(shell, complete(env, shell, "memfs mount T").stdout)
    # bash inserts what it gets as it is (after its `read` takes one backslash off);
    # zsh's compadd and fish quote it themselves
    assert got == (["Team\\\\ Notes"] if shell == "bash" else ["Team Notes"]), got
    got = values(shell, complete(env, shell, "memfs mount te").stdout)
    assert got == ["team-notes"], got
    assert sorted(values(shell, complete(env, shell, "memfs tool ").stdout)) == sorted(
        ["Team\\\\ Notes" if shell == "bash" else "Team Notes", "team-notes"])
    assert team in complete(env, shell, "memfs mount memstore_").stdout


def test_bash_itself_gets_one_word_for_a_name_with_spaces(server, tmp_path):
    """The bash script click generates, run by bash: the completion is one word."""
    if not shutil.which("bash"):
        pytest.skip("no bash")
    server.sdk().beta.memory_stores.create(name="Team Notes")
    env = {**mount_env(server, tmp_path),
           "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    script = ('eval "$(_MEMFS_COMPLETE=bash_source memfs)"\n'
              "COMP_WORDS=(memfs mount Te); COMP_CWORD=2\n"
              "_memfs_completion memfs\n"
              'eval "set -- ${COMPREPLY[0]}"; echo "$#:$1"\n')
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip() == "1:Team Notes", (proc.stdout, proc.stderr)


@needs_fuse
def test_a_mountpoint_with_a_space_is_one_argument_in_bash(server, mounts) -> None:
    m = mounts.mount(mounts.new_store("m"), name="my notes")
    proc = complete(m.env, "bash", "memfs unmount ")
    assert values("bash", proc.stdout) == [str(m.path).replace(" ", "\\\\ ")], proc.stdout
