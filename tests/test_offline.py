"""Offline and back: the server fails (503s, 429s with retry-after, dropped
responses) or dies; the mount reads from its cache, journals writes, says
offline and why in `memfs status`, and converges by itself when the server
returns. Also: `memfs status` from a live daemon and from state.db."""

from __future__ import annotations

import os
import re
import stat
import time

import pytest
import trio

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import cat, sdk_by_path, sdk_create, versions, wait_for

from memfs.api import errors as api_errors
from memfs.state.blobs import BlobCache
from memfs.state.state import State
from memfs.sync.common import Backoff, SyncContext, SyncOptions

CONVERGE = 90.0  # generous: backoff with jitter (capped at 10 s for a 1 s poll)


def offline_status(m, what: str):
    return wait_for(lambda: (s := m.live_status())["online"] is False and s, what=what)


def converged(m, server, store, expected: dict[str, str]):
    wait_for(lambda: m.live_status()["online"] is True and m.pending_total() == 0,
             timeout=CONVERGE, what="back online, nothing pending")
    assert server_memories(server, store) == expected
    assert m.status()["conflicts"] == []


def seeded_mount(mounts, server):
    store = mounts.new_store()
    sdk_create(server, store, "/seed.md", "from the server\n")
    m = mounts.mount(store)
    (m.path / "a.md").write_text("a1\n")
    m.wait_synced()
    assert cat(m.path / "seed.md") == "from the server\n"  # now cached
    return store, m


@needs_fuse
def test_503_everywhere_then_back(mounts, server):
    store, m = seeded_mount(mounts, server)
    server.set_faults(error_rate=1.0, error_status=503)
    st = offline_status(m, "offline after 503s")
    assert "503" in st["offline_reason"] and st["offline_since"]
    # Reads come from the cache; writes are journaled.
    assert cat(m.path / "seed.md") == "from the server\n"
    assert cat(m.path / "a.md") == "a1\n"
    (m.path / "a.md").write_text("a2\n")
    (m.path / "new.md").write_text("written offline\n")
    wait_for(lambda: m.live_status()["pending"]["creates"], what="journaled create")
    st = m.status()
    assert [c["path"] for c in st["pending"]["creates"]] == ["/new.md"]
    assert [u["path"] for u in st["pending"]["updates"]] == ["/a.md"]
    assert st["last_error"] and "503" in st["last_error"]
    text = m.memfs("status", str(m.path)).stdout
    assert "OFFLINE" in text and "503" in text
    server.clear_faults()
    converged(m, server, store, {"/seed.md": "from the server\n", "/a.md": "a2\n",
                                 "/new.md": "written offline\n"})


@needs_fuse
def test_429_with_retry_after_then_back(mounts, server):
    store, m = seeded_mount(mounts, server)
    server.set_faults(rate_429=1.0, retry_after=2)
    (m.path / "a.md").write_text("a2\n")
    st = offline_status(m, "offline after 429s")
    assert "RateLimit" in st["offline_reason"] or "429" in st["offline_reason"]
    assert cat(m.path / "a.md") == "a2\n"
    server.clear_faults()
    converged(m, server, store, {"/seed.md": "from the server\n", "/a.md": "a2\n"})


@needs_fuse
def test_dropped_responses_no_duplicates_no_false_conflicts(mounts, server):
    store, m = seeded_mount(mounts, server)
    a_id = sdk_by_path(server, store)["/a.md"].id
    server.set_faults(drop_rate=1.0)  # every request commits, every response is lost
    (m.path / "a.md").write_text("a2\n")
    for i in range(3):
        (m.path / f"n{i}.md").write_text(f"n{i}\n")
    offline_status(m, "offline after lost responses")
    server.clear_faults()
    expected = {"/seed.md": "from the server\n", "/a.md": "a2\n",
                **{f"/n{i}.md": f"n{i}\n" for i in range(3)}}
    converged(m, server, store, expected)
    assert sdk_by_path(server, store)["/a.md"].id == a_id
    # One memory per file (no duplicate create landed anywhere).
    created = [v for v in versions(server, store) if v.operation == "created"]
    assert sorted(v.content for v in created) == sorted(
        ["from the server\n", "a1\n", "n0\n", "n1\n", "n2\n"])
    assert m.memfs("conflicts", str(m.path), "--json").stdout.strip() == "[]"


@needs_fuse
def test_server_killed_then_started(mounts, server):
    store, m = seeded_mount(mounts, server)
    (m.path / "gone.md").write_text("to delete\n")
    m.wait_synced()
    server.kill()
    st = offline_status(m, "offline after the server died")
    assert "Connect" in st["offline_reason"] or "connect" in st["offline_reason"]
    assert cat(m.path / "seed.md") == "from the server\n"
    (m.path / "while-down.md").write_text("journaled\n")
    (m.path / "gone.md").unlink()
    st = wait_for(lambda: (s := m.live_status())["pending"]["deletes"] and s, what="pending delete")
    [d] = st["pending"]["deletes"]
    assert d["path"] == "/gone.md" and d["due_at"] >= d["deleted_at"]
    assert [c["path"] for c in st["pending"]["creates"]] == ["/while-down.md"]
    server.start()
    converged(m, server, store, {"/seed.md": "from the server\n", "/a.md": "a1\n",
                                 "/while-down.md": "journaled\n"})


@needs_fuse
def test_a_server_that_stops_answering_shows_in_status(mounts, server):
    """The server stopped (SIGSTOP: it takes connections and never answers): no request
    fails until its timeout, so the mount stayed "online" with nothing said (found by a
    helper). Status now counts how long requests have waited for an answer."""
    import signal

    from memfs.cli.status import UNANSWERED_SHOWN, format_status

    _store, m = seeded_mount(mounts, server)
    assert m.live_status()["unanswered_seconds"] is None  # nothing waits
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        st = wait_for(lambda: ((s := m.live_status())["unanswered_seconds"] or 0) >= 1 and s,
                      what="the poll's request waiting")
        assert st["online"] is True  # nothing failed yet
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    shown = format_status({**st, "unanswered_seconds": UNANSWERED_SHOWN + 15})
    assert "  no answer from the server for 25s (requests are waiting" in shown, shown
    assert "no answer" not in format_status(st)  # a second's wait is not news
    wait_for(lambda: m.live_status()["unanswered_seconds"] is None, what="answered again")


@needs_fuse
def test_status_live_and_from_state_db(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store, "--delete-delay", "60")
    (m.path / "a.md").write_text("a\n")
    (m.path / "b.md").write_text("b\n")
    (m.path / ".x.swp").write_text("swap\n")
    m.wait_synced()
    m.sync_now()
    (m.path / "b.md").unlink()
    st = m.status()
    assert st["running"] is True and st["online"] is True
    assert st["store_id"] == store and st["server"] == server.base_url
    assert st["last_sync_at"] and st["last_sync_seconds"] is not None
    assert [d["path"] for d in st["pending"]["deletes"]] == ["/b.md"]
    assert st["pending"]["deletes"][0]["due_at"] > st["pending"]["deletes"][0]["deleted_at"]
    assert [x["path"] for x in st["pending"]["local_only"]] == ["/.x.swp"]
    sock = m.state_dir / "control.sock"
    assert stat.S_ISSOCK(os.stat(sock).st_mode) and stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    text = m.memfs("status", str(m.path)).stdout
    assert "online" in text and "delete /b.md due in" in text

    # A killed daemon (stale socket and registry): status comes from state.db.
    m.kill9()
    st = m.status()
    assert st["running"] is False and st["store_id"] == store
    assert [d["path"] for d in st["pending"]["deletes"]] == ["/b.md"]
    assert st["pending"]["deletes"][0]["due_at"] is not None
    assert st["last_sync_at"]
    assert "not running" in m.memfs("status", str(m.path)).stdout

    # A clean unmount (no registry at all): still found through its state.db.
    m2 = mounts.mount(store, "--delete-delay", "60", name="mnt")
    m2.unmount("--timeout", "0", kept=True)
    st = m2.status()
    assert st["running"] is False and st["mountpoint"] == str(m2.path)


# -- backoff without a mount ----------------------------------------------------------


def test_backoff_jitter_and_retry_after():
    b = Backoff(base=1.0, cap=8.0)
    delays = [b.next_delay() for _ in range(12)]
    assert all(0 <= d <= 8.0 for d in delays)
    assert len({round(d, 6) for d in delays}) > 1  # jittered
    assert b.next_delay(retry_after=30.0) >= 30.0  # the server's hint wins
    b.reset()
    assert b.failures == 0


def test_went_offline_honours_retry_after_and_came_online_wakes_pusher(tmp_path):
    async def main():
        state = State(tmp_path / "state.db")
        ctx = SyncContext(state, BlobCache(tmp_path / "objects"), None, "memstore_x",
                          SyncOptions(poll_interval=1.0))
        exc = api_errors.RateLimitError("slow down", status=429, retry_after=7.0)
        assert ctx.went_offline(exc) >= 7.0
        assert ctx.status.online is False and "429" in ctx.status.offline_reason
        assert state.get_meta("last_error") == ctx.status.offline_reason
        assert abs(float(state.get_meta("last_error_at")) - time.time()) < 60
        assert state.get_meta("last_error_at") == str(ctx.status.last_error_at)
        woke = ctx.online_wakeup
        ctx.came_online()
        assert woke.is_set() and ctx.status.online and ctx.status.offline_reason is None
        assert ctx.backoff.failures == 0
        state.close()

    trio.run(main)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-v"])


@needs_fuse
def test_status_of_a_mount_no_listing_has_reached_does_not_say_online(mounts, server):
    """Found by a helper, 6 December: a mount whose every listing failed for another
    reason than an outage (a 403, an answer it cannot read) said "online"."""
    from gate import Gate

    store = mounts.new_store()
    with Gate(server) as gate:
        gate.refuse("GET", rf"/v1/memory_stores/{store}/memories$", 403)
        m = mounts.mount(store)
        status = m.memfs("status", str(m.path)).stdout
        assert "  starting: no listing completed yet\n" in status, status
        assert re.search(r"\n  last error, .* \(\d+s ago\): listing failed", status), status
    m.sync_now()
    assert "\n  online\n" in m.memfs("status", str(m.path)).stdout
    m.unmount()


@needs_fuse
def test_status_of_a_mount_whose_passes_fail_says_so(mounts, server):
    """Found by a helper, 6 December: a server that refused every listing (an answer
    memfs cannot use, a 403), after one good one, left `memfs status` saying "online",
    the error two lines below (old errors stay there: it did not say it was current)."""
    from gate import Gate

    store = mounts.new_store()
    m = mounts.mount(store)
    assert "\n  online\n" in m.memfs("status", str(m.path)).stdout
    with Gate(server) as gate:
        gate.refuse("GET", rf"/v1/memory_stores/{store}/memor", 403)
        status = wait_for(lambda: "but no sync got through since" in (
            out := m.memfs("status", str(m.path)).stdout) and out, what="failing said")
        assert "  online, but no sync got through since " in status, status
        assert ": the server answers, with an error (the last one below)\n" in status
        # (with its time: an error long over read as today's: a helper)
        assert re.search(r"\n  last error, .* \(\d+s ago\): listing failed: "
                         r"PermissionDeniedError", status), status
        assert m.live_status()["failing_since"] is not None
    m.sync_now()
    assert "\n  online\n" in m.memfs("status", str(m.path)).stdout
    assert m.live_status()["failing_since"] is None
    m.unmount()


def test_status_names_twenty_pending_changes_of_a_kind_and_counts_the_rest():
    """What is pending is named (the unmount of a dead daemon's mount says status names
    each: a reviewer found it counted them only), twenty of a kind, the rest counted."""
    from memfs.cli.status import format_status

    creates = [{"path": f"/n{i:02d}.md"} for i in range(25)]
    text = format_status({"running": False, "mountpoint": "/m", "store_id": "memstore_1",
                          "pending": {"creates": creates, "renames": [
                              {"from": "/a.md", "to": "/b.md", "in_doubt": True}]}})
    assert "\n    create /n00.md\n" in text and "\n    create /n19.md\n" in text, text
    assert "/n20.md" not in text and "\n    ... and 5 more creates (--json names each)\n" \
        in text, text
    assert "\n    rename /a.md -> /b.md (sent, its answer lost: the server is asked " \
        "first)\n" in text, text


def test_the_last_error_s_time_is_read_from_state_db_without_a_daemon(tmp_path):
    """`memfs status` of a mount with no daemon says when its last error was, from
    state.db (an outage long over read as current: a helper)."""
    from memfs.cli.status import format_status
    from memfs.cli.status import offline_status as read_offline

    async def main():
        state = State(tmp_path / "state.db")
        ctx = SyncContext(state, BlobCache(tmp_path / "objects"), None, "memstore_x",
                          SyncOptions(poll_interval=1.0))
        ctx.went_offline(api_errors.APIConnectionError("connection refused"))
        state.close()
        return ctx.status.last_error_at

    at = trio.run(main)
    status = read_offline(tmp_path)
    assert status["last_error_at"] == at and status["last_error"]
    text = format_status(status)
    assert re.search(r"\n  last error, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d+s ago\): ", text), text
