"""The change feed through a real mount (issue 22): what `memfs status` says the polls
cost, our own writes skipped by id, and a write committed out of order caught by the
feed rather than by a full listing."""

from __future__ import annotations

import os
import sqlite3
import time
from datetime import timedelta

import pytest
from synchelpers import sdk_create, wait_for

from memfs.api.models import format_time, parse_time
from memfs.mount import versions


def backdate(server, version_id: str, memory_id: str, when) -> None:
    """A version made to look committed out of order (see tests/test_feed.py)."""
    conn = sqlite3.connect(server.db)
    try:
        stamp = format_time(when)
        conn.execute("UPDATE versions SET created_at = ? WHERE id = ?", (stamp, version_id))
        conn.execute("UPDATE memories SET updated_at = ? WHERE id = ? AND version_id = ?",
                     (stamp, memory_id, version_id))
        conn.commit()
    finally:
        conn.close()


def test_status_shows_what_the_last_polls_cost(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    for i in range(3):
        (m.path / f"mine{i}.md").write_text(f"mine {i}\n")
    m.wait_synced()
    sdk_create(server, store, "/theirs.md", "theirs\n")
    wait_for(lambda: (m.path / "theirs.md").exists(), what="the other writer's file")
    m.sync_now()
    status = m.status()
    polls = status["feed"]["polls"]
    assert polls and all(p["requests"] >= 1 and p["bytes"] > 0 for p in polls)
    assert sum(p["own"] for p in polls) == 3          # our creates, skipped by id
    assert status["feed"]["late"] == 0 and status["feed"]["missed"] == 0
    text = m.memfs("status", str(m.path)).stdout
    last = polls[-1]
    assert f"feed polls: last {last['requests']} request(s)" in text


def test_a_write_committed_out_of_order_reaches_the_mount_through_the_feed(mounts, server):
    """Another writer's create commits 29 s (of the 30 s lookback) behind a version the
    mount's feed already read, in a busy window (the poll reads the head and the settling
    slice apart): the feed brings it about a second later, no full listing involved."""
    store = mounts.new_store()
    m = mounts.mount(store)
    for i in range(4):
        sdk_create(server, store, f"/busy/n{i}.md", f"{i}\n")
    newer = sdk_create(server, store, "/newer.md", "newer\n")
    wait_for(lambda: (m.path / "newer.md").exists(), what="the newer file")
    listed_at = m.status()["feed"]["last_full_listing_at"]
    late = sdk_create(server, store, "/late.md", "committed late\n")
    backdate(server, late.memory_version_id, late.id,
             parse_time(newer.created_at.isoformat()) - timedelta(seconds=29))
    wait_for(lambda: (m.path / "late.md").exists(), what="the late file")
    assert (m.path / "late.md").read_text() == "committed late\n"
    status = m.status()
    assert status["feed"]["late"] == 1 and status["feed"]["missed"] == 0
    assert status["feed"]["last_full_listing_at"] == listed_at


@pytest.mark.parametrize("lookback", ["30", "2"])
def test_the_mounts_feed_lookback_bounds_how_late_a_write_is_caught(mounts, server, lookback):
    """`--feed-lookback` reaches the daemon's feed. A write committed 20 s behind one the
    feed already read: inside the default 30 s lookback the next poll brings it; behind
    a 2 s lookback (what a benchmark sets, not to sit through 30 s of the feed's clock)
    no poll does, and the next full listing does. Polls are asked for (the interval is
    left long): none runs between the write and its backdating. The `.memfs/versions`
    tree's incremental refresh reads the same lookback again: it shows the late write
    under 30 s and not under 2 s (its next full listing is a minute away)."""
    store = mounts.new_store()
    sdk_create(server, store, "/first.md", "first\n")
    m = mounts.mount(store, "--poll-interval", "600", "--feed-lookback", lookback)
    newer = sdk_create(server, store, "/newer.md", "newer\n")
    m.sync_now()
    assert (m.path / "newer.md").read_text() == "newer\n"
    history = m.path / ".memfs" / "versions"
    assert sorted(os.listdir(history)) == ["first.md", "newer.md"]  # a full listing
    late = sdk_create(server, store, "/late.md", "committed late\n")
    backdate(server, late.memory_version_id, late.id,
             parse_time(newer.created_at.isoformat()) - timedelta(seconds=20))
    time.sleep(versions.LISTING_TTL + 0.2)  # the listing ages: the next one is incremental
    assert ("late.md" in os.listdir(history)) == (lookback == "30")
    for _ in range(3):
        m.sync_now()
    if lookback == "2":
        assert not (m.path / "late.md").exists()
        m.sync_now(full=True)
        # The kernel keeps the miss above for 1 s (docs/SEMANTICS.md, lookup).
        wait_for(lambda: (m.path / "late.md").exists(), what="the late file")
    assert (m.path / "late.md").read_text() == "committed late\n"
