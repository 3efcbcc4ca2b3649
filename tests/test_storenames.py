"""Store names everywhere: `memfs mount NAME`, `stores archive SLUG`, `tool NAME` against a
real `memfs serve`; the resolution rules (id, then name, then slug) on their own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mountutil import is_mounted, mount_env, needs_fuse

from memfs.api.models import MemoryStore
from memfs.api.oneshot import call_with_client
from memfs.cli.storenames import AmbiguousStore, StoreNotFound, choose, resolve_sync
from memfs.core.slug import slug


def test_slug() -> None:
    assert slug("Team Notes") == "team-notes"
    assert slug("  Café -- déjà vu!! ") == "caf-d-j-vu"  # memfs/core/slug.py's rule: ASCII only
    assert slug("--Ünïcode  Notes!--") == "n-code-notes"
    assert slug("a__b..c") == "a-b-c"
    assert slug("日本") == ""


def _s(i: str, name: str, archived: bool = False) -> MemoryStore:
    return MemoryStore(id=i, name=name, archived_at="2026-01-01T00:00:00Z" if archived else None)


def test_choose_order_and_errors() -> None:
    stores = [_s("memstore_a", "Notes"), _s("memstore_b", "notes"), _s("memstore_c", "memstore_a"),
              _s("memstore_d", "Old", archived=True)]
    assert choose("memstore_a", stores).store.id == "memstore_a"  # an id beats a name
    assert choose("Notes", stores).how == "name"
    assert choose("Old", stores).archived
    with pytest.raises(AmbiguousStore) as e:
        choose("NOTES", stores)  # no exact name; the slug matches two
    assert "memstore_a" in e.value.message and "memstore_b" in e.value.message
    with pytest.raises(StoreNotFound):
        choose("nothing", stores)
    with pytest.raises(StoreNotFound):
        choose("!!!", stores)  # an empty slug matches nothing


def test_a_store_is_found_by_the_directory_mcp_and_all_give_it() -> None:
    """Stores whose names share a slug show as beta, beta-2, beta-3 in `memfs mcp` and
    `memfs mount --all`; every command refused `beta-2` back (a helper)."""
    def made(i: str, name: str, at: str, archived: bool = False) -> MemoryStore:
        return MemoryStore(id=i, name=name, created_at=at,
                           archived_at="2026-12-01T00:00:00Z" if archived else None)

    stores = [made("memstore_c", "Beta!", "2026-12-03T00:00:00Z"),
              made("memstore_a", "Beta", "2026-12-01T00:00:00Z"),
              made("memstore_x", "BETA", "2026-12-01T12:00:00Z", archived=True),
              made("memstore_b", "beta", "2026-12-02T00:00:00Z")]
    assert choose("beta-2", stores).store.id == "memstore_b"  # oldest first, archived out
    assert choose("beta-3", stores).how == "directory"
    assert choose("beta-3", stores).store.id == "memstore_c"
    assert choose("beta", stores).store.id == "memstore_b"  # a name still beats it
    with pytest.raises(StoreNotFound):
        choose("beta-4", stores)
    # A slug and a directory naming two stores: an error, never a guess (a review:
    # `beta-2` was "Beta 2" by its slug, the second "beta" by its directory).
    clash = [made("memstore_a", "Beta", "2026-12-01T00:00:00Z"),
             made("memstore_b", "beta!", "2026-12-02T00:00:00Z"),
             made("memstore_c", "Beta 2", "2026-12-03T00:00:00Z")]
    with pytest.raises(AmbiguousStore) as e:
        choose("beta-2", clash)
    assert "memstore_b" in e.value.message and "memstore_c" in e.value.message
    assert choose("beta", clash).store.id == "memstore_a"  # its directory settles the slug
    assert choose("beta-2-2", clash).store.id == "memstore_c"


def test_resolve_sync_uses_the_commands_one_shot_client(server) -> None:
    """`resolve_sync` and every CLI command's request share call_with_client."""
    sdk = server.sdk()
    a = sdk.beta.memory_stores.create(name="One Shot").id
    found = resolve_sync(server.base_url, server.api_key, "one-shot")
    assert (found.id, found.how) == (a, "slug")
    got = call_with_client(server.base_url, server.api_key, lambda c: c.get_store(a))
    assert got.name == "One Shot"
    with pytest.raises(StoreNotFound):
        resolve_sync(server.base_url, server.api_key, "no-such-store")


def memfs(env: dict, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memfs", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_archive_and_tool_by_name(server, tmp_path) -> None:
    env = mount_env(server, tmp_path)
    sdk = server.sdk()
    a = sdk.beta.memory_stores.create(name="Team Notes").id
    out = memfs(env, "tool", "team-notes",
                stdin=json.dumps({"command": "create", "path": "/memories/x.md",
                                  "file_text": "hello"}) + "\n")
    assert out.returncode == 0, out.stderr
    assert "ok" in json.loads(out.stdout)
    mems = list(sdk.beta.memory_stores.memories.list(a, view="full", limit=20))
    assert [m.content for m in mems if m.type == "memory"] == ["hello"]
    out = memfs(env, "stores", "archive", "team-notes")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"archived {a}"
    out = memfs(env, "stores", "archive", "Team Notes")  # archived stores still resolve
    assert out.returncode == 0, out.stderr
    assert "already archived" in out.stdout and a in out.stdout
    # The tool on an archived store: every change refused alike, as `memfs mcp` does.
    out = memfs(env, "tool", "team-notes", stdin="\n".join(json.dumps(c) for c in (
        {"command": "create", "path": "/memories/y.md", "file_text": "y"},
        {"command": "str_replace", "path": "/memories/x.md", "old_str": "hello",
         "new_str": "bye"})) + "\n")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line) for line in out.stdout.splitlines()] == [
        {"error": f"/memories/{p} was not changed: the memory store at /memories is "
                  "read-only."} for p in ("y.md", "x.md")]
    out = memfs(env, "stores", "archive", "no-such-store")
    assert out.returncode != 0
    assert "unknown store 'no-such-store'" in out.stderr
    # A deleted store's id: said so, not "not an id, a name or a name's slug" (a helper).
    gone = sdk.beta.memory_stores.create(name="Gone").id
    sdk.beta.memory_stores.delete(gone)
    out = memfs(env, "stores", "archive", gone)
    assert out.returncode == 1
    assert f"unknown store {gone} on {server.base_url}: no store has this id (deleted, " \
        "or never made there;" in out.stderr, out.stderr


@needs_fuse
def test_mount_by_name_and_ambiguous(server, tmp_path, mounts) -> None:
    store = mounts.new_store("Research Log")
    m = mounts.mount("research-log")  # the slug
    assert m.registry()["store_id"] == store
    (m.path / "a.md").write_text("x")
    m.wait_synced()
    m.unmount()
    m2 = mounts.mount("Research Log", name="mnt2")  # the exact name
    assert m2.registry()["store_id"] == store
    m2.unmount()

    old = mounts.new_store("Old Notes")
    server.sdk().beta.memory_stores.archive(old)
    m3 = mounts.mount("old-notes", "--read-only", name="mnt3")
    assert m3.registry()["store_id"] == old
    assert f"store {old} (Old Notes) is archived" in m3.outputs[0].stderr
    m3.unmount()

    one = mounts.new_store("dup")
    two = mounts.new_store("dup")
    (tmp_path / "amb").mkdir()
    out = memfs(mount_env(server, tmp_path), "mount", "dup", str(tmp_path / "amb"))
    assert out.returncode != 0
    assert "matches 2 stores" in out.stderr
    assert one in out.stderr and two in out.stderr
    assert not is_mounted(tmp_path / "amb")


@needs_fuse
def test_mount_by_name_offline_from_the_cache(server, mounts) -> None:
    store = mounts.new_store("Field Notes")
    m = mounts.mount("field-notes")
    (m.path / "a.md").write_text("cached")
    m.wait_synced()
    m.unmount()
    server.stop()  # now only the cache knows the name
    m2 = mounts.mount("Field Notes", name="mnt-offline")
    assert m2.registry()["store_id"] == store
    assert "unreachable; mounting from the cache" in m2.outputs[0].stderr
    assert (m2.path / "a.md").read_text() == "cached"
    # the name the cache kept, in the status too (it was null: found by a helper)
    assert m2.live_status()["store_name"] == "Field Notes"
    m2.unmount("--timeout", "2")
