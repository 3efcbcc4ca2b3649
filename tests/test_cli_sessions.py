"""`memfs sessions create|list|show` against a real `memfs serve`, then a session mount
of what it made (the README's first screen does exactly this)."""

from __future__ import annotations

import json
import os

from mountutil import MountProc, mount_env


def test_sessions_create_list_show_and_mount(server, mounts, tmp_path):
    sdk = server.sdk()
    notes = sdk.beta.memory_stores.create(name="Team Notes").id
    sdk.beta.memory_stores.create(name="Style Guide")
    cli = MountProc(tmp_path, "", mount_env(server, tmp_path), ())
    made = cli.memfs("sessions", "create", "--store", "team-notes",
                     "--store", "Style Guide:read_only")
    sid = made.stdout.strip().splitlines()[-1]
    assert sid.startswith("sesn_")
    assert "/mnt/memory/style-guide\tread_only" in made.stderr
    shown = json.loads(cli.memfs("sessions", "show", sid, "--json").stdout)
    assert [(s["name"], s["access"]) for s in shown["memory_stores"]] == [
        ("Team Notes", "read_write"), ("Style Guide", "read_only")]
    listed = json.loads(cli.memfs("sessions", "list", "--store", notes, "--json").stdout)
    assert [s["id"] for s in listed] == [sid]
    # --store resolves and lists on one client, with resolve_for_cli's messages.
    by_slug = json.loads(cli.memfs("sessions", "list", "--store", "team-notes", "--json").stdout)
    assert [s["id"] for s in by_slug] == [sid]
    unknown = cli.memfs("sessions", "list", "--store", "nope", check=False)
    assert unknown.returncode == 1 and "unknown store 'nope' on " in unknown.stderr
    if server.api_key:
        cli.env = dict(cli.env, ANTHROPIC_API_KEY="wrong-key")
        refused = cli.memfs("sessions", "list", "--store", "nope", check=False)
        assert refused.returncode == 1, refused.stderr
        assert f"Error: bad credentials for {server.base_url}: " in refused.stderr
        cli.env = mount_env(server, tmp_path)
    bad = cli.memfs("sessions", "create", "--store", "nope", check=False)
    assert bad.returncode != 0 and "nope" in bad.stderr
    if not os.path.exists("/dev/fuse") or os.geteuid() != 0:
        return  # no FUSE here: the CLI part above is still tested
    m = mounts.mount_group("--session", sid)
    assert sorted(os.listdir(m.path)) == ["style-guide", "team-notes"]
