"""What one listing or one feed poll did, checked right after it: the rows it applied (new,
renamed, changed, deleted memories; conflicts with local files), what `memfs watch` hears
and `memfs status` shows, what it asked the server. Each test pins a mutant of the
reconciler that no test killed (docs/TESTING.md, "Mutation testing"); some found defects
(a change the feed showed while the file had unsaved writes waited for the next full
listing; a new memory under a file the same listing moved away was not shown).
"""

from __future__ import annotations

import itertools
import logging
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import trio
import trio.testing
from interleave import ORIGIN, FaultRule, Hold, age_tombstones
from onepass import data, harness, held_pass, parked_by_another, refused_update, sent, synced, until

from memfs.api.models import format_time, parse_time
from memfs.core.nodes import PARK_DIR
from memfs.mount.engine import store_status
from memfs.state.blobs import sha256
from memfs.sync import feed as feed_mod
from memfs.sync import reconciler as reconciler_mod
from memfs.sync.events import Subscriber
from memfs.sync.reconciler import PARK_PATIENCE


async def waited_change(eng) -> None:
    """a.md synced at v1 and open with unsaved writes (v1 again) when a poll meets another
    writer's v2: the row waits for the close (content WAIT)."""
    await synced(eng, a="v1")
    await eng.op_poll()  # the feed's starting point
    await eng.op_open_write("/a.md", "v1")
    await eng.op_r_edit("/a.md", "v2")
    await eng.op_poll()


async def test_each_feed_poll_is_counted_and_a_full_listing_is_not_one(tmp_path):
    """`memfs_feed_polls` (the metrics endpoint): one per poll of the change feed."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        assert eng.ctx.metrics.feed_polls == 0
        await eng.op_poll()
        await eng.op_poll()
        assert eng.ctx.metrics.feed_polls == 2


async def test_a_change_the_feed_let_wait_is_not_counted_as_missed(tmp_path):
    """A change the feed named while the file had unsaved writes waits; the safety net's
    full listing then applies it. The feed missed nothing (it named the change), and the
    count that must stay 0 stays 0."""
    async with harness(tmp_path) as eng:
        await waited_change(eng)
        await eng.op_close("/a.md")
        eng.reconciler.last_full -= eng.ctx.options.full_resync  # the safety net is due
        listed = eng.ctx.status.last_full_listing_at
        await eng.op_poll()
        assert eng.ctx.status.last_full_listing_at != listed  # (a full listing)
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert eng.ctx.status.feed_missed == 0
        assert not any("missed" in note for note in eng.ctx.status.warnings)


async def test_a_listing_saves_when_it_last_synced(tmp_path):
    """For `memfs status` of an unmounted store (it reads state.db): when the last pass
    ended, and how long it took (no longer than the listing, seen from outside)."""
    async with harness(tmp_path) as eng:
        before = time.time()
        await eng.op_reconcile()
        after = time.time()
        at, seconds = (float(eng.state.get_meta(k)) for k in ("last_sync_at",
                                                               "last_sync_seconds"))
        assert before <= at <= after and 0 <= seconds <= after - before
        assert (at, seconds) == (eng.ctx.status.last_sync_at, eng.ctx.status.last_sync_seconds)


async def test_a_full_listing_leaves_a_file_deleted_here_deleted(tmp_path):
    """a.md unlinked: its delete waits out the delay, the memory still on the server. A
    full listing shows that memory (no file holds it): it stays a pending delete, not a
    new memory to show (the file must not come back)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_reconcile()
        assert eng.node("/a.md") is None and mid in eng.state.tombstones


async def test_a_listing_that_meets_an_unpushed_edit_keeps_it_as_a_conflict(tmp_path):
    """a.md edited here (not pushed yet) and there: the listing puts the server's version
    in the tree and keeps ours as a conflict that says why (`memfs conflicts` shows it)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="base")
        await eng.op_write("/a.md", "mine")
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("theirs"))
        [row] = eng.state.conflicts()
        assert (row["local_sha"], row["reason"]) == \
            (sha256(data("mine")), "changed on the server and here at the same time")


async def test_a_new_memory_from_the_server_is_told_as_created(tmp_path):
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.op_r_create("/n.md", "new")
        await eng.op_reconcile()
        event = sub.receive.receive_nowait()
        assert (event.kind, event.path) == ("created", "/n.md")


async def test_a_feed_batch_goes_on_past_a_memory_made_and_deleted_elsewhere(tmp_path):
    """One poll's changes: x made and deleted by another writer (nothing to do here),
    then an edit of a.md and a new z.md: both applied in that poll."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()  # the feed's first poll: its starting point
        await eng.op_r_create("/x.md", "x")
        x_mid = eng.server()["/x.md"][0]
        await eng.op_r_delete("/x.md")
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_r_create("/z.md", "z")
        await eng.op_r_create("/y.md", "y")
        y_mid = eng.server()["/y.md"][0]
        await eng.op_r_delete("/y.md")
        first = len(eng.transport.records)
        await eng.op_poll()
        assert not {f"GET {x_mid}", f"GET {y_mid}"} & set(sent(eng, first))  # never here
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert eng.tree_sha("/z.md") == sha256(data("z"))


async def test_a_remote_rename_is_told_as_renamed(tmp_path):
    """`memfs watch` hears a memory moved on the server as "renamed", with both paths."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.op_r_rename("/a.md", "/b.md")
        await eng.op_reconcile()
        event = sub.receive.receive_nowait()
        assert (event.kind, event.path, event.old_path) == ("renamed", "/b.md", "/a.md")
        assert eng.tree_sha("/b.md") == sha256(data("v1"))


async def test_a_change_seen_while_the_file_had_unsaved_writes_is_read_again(tmp_path):
    """A poll met another writer's v2 while a.md was open with unsaved writes: the row
    waits (content WAIT). Those writes were v1 again (nothing to push at the close), so
    no push meets the change either: the next poll names a.md once more and takes v2."""
    async with harness(tmp_path) as eng:
        await waited_change(eng)
        assert eng.tree_sha("/a.md") == sha256(data("v1"))  # waits for the close
        await eng.op_close("/a.md")
        await eng.op_push()
        await eng.op_poll()
        assert eng.tree_sha("/a.md") == sha256(data("v2"))


async def test_a_feed_read_older_than_a_fetch_does_not_roll_the_file_back(tmp_path):
    """The feed names a.md (another writer's v2); while its read of a.md is on the way back,
    the writer makes v3 and a read here (a cache miss) fetches v3, which the file takes.
    The poll's answer (v2) is older than that base: it is skipped, and a.md stays v3."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/a.md", "v1")
        await eng.op_reconcile()  # a.md listed, its content not fetched
        mid = eng.node("/a.md").memory_id
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_edit("/a.md", "v2")
        first = len(eng.transport.records)

        async def meanwhile() -> None:
            await eng.op_r_edit("/a.md", "v3")
            await eng.op_read("/a.md")
            assert eng.node("/a.md").base_sha == sha256(data("v3"))

        await held_pass(eng, "after", meanwhile, index=1, action=eng.op_poll)
        assert sent(eng, first)[:2] == ["GET memory_versions", f"GET {mid}"]  # (held: 1)
        assert eng.tree_sha("/a.md") == sha256(data("v3"))
        assert eng.node("/a.md").base_sha == sha256(data("v3"))


async def test_a_memory_deleted_here_and_changed_there_is_restored_and_said_so(tmp_path):
    """a.md unlinked here (its delete waits out the delay); another writer changes it. The
    listing restores the server's version and says so in `memfs status`."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_unlink("/a.md")
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("v2")) and eng.state.tombstones == {}
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == \
            ["/a.md was deleted here but changed on the server; restoring the server's version"]


async def test_a_remote_rename_onto_unsaved_writes_waits_and_follows_at_the_next_poll(
        tmp_path):
    """Another writer renamed a.md to b.md while a new b.md, not pushed yet, is open here
    with unsaved writes: the listing cannot move a.md onto it (no later row frees the
    place), leaves a.md where it is and says why in `memfs status`. Then the writes are
    saved: the feed had shown the rename already, so the listing asked that the next poll
    name the memory again (`Reconciler._waited`). That poll reads it (one GET), a.md
    follows to b.md and the user's b.md is a conflict; without it nothing would show the
    rename until a 409 or the next full listing."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        mid = eng.node("/a.md").memory_id
        await eng.op_write("/b.md", "mine")
        await eng.op_open_write("/b.md", "mine, more")
        await eng.op_r_rename("/a.md", "/b.md")
        await eng.op_reconcile()
        a = eng.node("/a.md")
        assert (a.base_path, eng.state.is_dirty(a)) == ("/a.md", False)
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "cannot move /a.md to /b.md (renamed on the server): the place is taken locally"]
        await eng.op_close("/b.md")
        first = len(eng.transport.records)
        await eng.op_poll()
        assert f"GET {mid}" in sent(eng, first)
        assert eng.user_tree() == {"/b.md": sha256(data("A"))}
        assert [(c["path"], c["local_sha"]) for c in eng.state.conflicts()] == [
            ("/b.md", sha256(data("mine, more")))]


async def test_their_new_file_met_by_mine_moved_away_while_read_comes_at_the_next_poll(
        tmp_path):
    """Their new c.md meets my c.md, not pushed yet; while their memory is read for the
    conflict, mine moves to d.md. The conflict is put off (the place changed), and the
    feed will not show their c.md again: the next poll names it (`Reconciler._waited`)
    and it comes, beside my d.md."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        await eng.op_write("/c.md", "mine")
        await eng.op_r_create("/c.md", "theirs")

        async def moved_away() -> None:
            await eng.op_rename("/c.md", "/d.md")

        first = len(eng.transport.records)
        await held_pass(eng, "before", moved_away, index=2, action=eng.op_poll)
        theirs = eng.server()["/c.md"][0]
        assert sent(eng, first)[-1] == f"GET {theirs}"  # the read the move overtook
        assert "/c.md" not in eng.user_tree()
        first = len(eng.transport.records)
        await eng.op_poll()
        assert f"GET {theirs}" in sent(eng, first)
        assert eng.user_tree() == {"/a.md": sha256(data("A")), "/c.md": sha256(data("theirs")),
                                   "/d.md": sha256(data("mine"))}
        assert eng.state.conflicts() == []


async def test_a_pending_delete_of_a_memory_deleted_elsewhere_is_settled_by_a_listing(
        tmp_path):
    """a.md unlinked here (its delete waits out the delay) and deleted on the server by
    another writer: the listing confirms it gone (404) and nothing is left to send."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_r_delete("/a.md")
        first = len(eng.transport.records)
        await eng.op_reconcile()
        assert f"GET {mid}" in sent(eng, first)
        assert eng.state.tombstones == {} and eng.pusher.pending_total() == 0
        first = len(eng.transport.records)
        age_tombstones(eng)
        await eng.op_push()
        assert sent(eng, first) == []


async def test_status_shows_a_feed_anchored_at_an_empty_stores_start(tmp_path):
    """A listing of a store that never had a version anchors the feed at its start:
    `memfs status` says "the store's start", not a time."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        assert store_status(eng.store)["feed"]["position"] == "the store's start"
        await eng.op_r_create("/n.md", "new")
        await eng.op_poll()
        assert store_status(eng.store)["feed"]["position"] != "the store's start"


async def test_another_clients_park_is_left_alone_until_it_is_abandoned(tmp_path):
    """Another client moved a.md's memory to a park place (its swap under way): the
    listing leaves the file alone (nothing to push). Once that park has stood longer
    than PARK_PATIENCE, it is abandoned: our place wins and the push moves it back."""
    async with harness(tmp_path) as eng:
        mid, park = await parked_by_another(eng)
        assert eng.node("/a.md").base_path == "/a.md" and eng.pusher.pending_total() == 0
        eng.reconciler._parked_since[mid] -= PARK_PATIENCE + 1.0
        await eng.op_reconcile()
        assert eng.node("/a.md").base_path == park and eng.pusher.pending_total() == 1
        await eng.op_push()
        assert eng.server() == {"/a.md": (mid, sha256(data("v1")))}


async def test_a_listing_takes_a_memory_holding_a_new_files_bytes_as_its_own(tmp_path):
    """a.md written here, not pushed yet; another writer creates /a.md with the very same
    bytes. The listing makes their memory this file's (no conflict, nothing to push)."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/a.md", "same")
        await eng.op_r_create("/a.md", "same")
        [(mid, _sha)] = eng.server().values()
        await eng.op_reconcile()
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_path, node.base_sha) == \
            (mid, "/a.md", sha256(data("same")))
        assert eng.state.conflicts() == [] and eng.pusher.pending_total() == 0


async def test_a_poll_reads_our_own_writes_as_ours(tmp_path):
    """The feed's cost per poll (`memfs status`): the versions our own pushes wrote are
    counted as ours, no news to apply."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()  # the feed's starting point
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        await eng.op_poll()
        cost = eng.ctx.status.feed_polls[-1]
        assert (cost["versions"], cost["own"]) == (2, 2)


async def test_a_poll_after_our_own_deletes_reads_them_as_no_news(tmp_path, monkeypatch):
    """`rm` of many files: their deletes pushed, the next poll reads those versions. No
    file and no pending delete holds them: already applied here, they are no news, and
    the poll does not fall back to a full listing (as it does when too many are)."""
    monkeypatch.setattr(feed_mod, "MAX_VERSIONS", 2)
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B", c="C")
        await eng.op_poll()  # the feed's starting point
        for name in ("a", "b", "c"):
            await eng.op_unlink(f"/{name}.md")
        age_tombstones(eng)
        await eng.op_push()
        assert eng.server() == {} and eng.state.tombstones == {}
        listed = eng.ctx.status.last_full_listing_at
        first = len(eng.transport.records)
        await eng.op_poll()
        assert eng.ctx.status.last_full_listing_at == listed
        assert not any(r.is_listing for r in eng.transport.records[first:])


async def test_a_listing_shows_a_new_memory_where_one_of_ours_moved_away(tmp_path):
    """Another writer moves the file /notes to /old-notes and creates /notes/today.md
    (a directory where the file was). One listing moves our file first, then shows the
    new memory in the new directory; nothing is said to collide."""
    async with harness(tmp_path) as eng:
        await eng.op_write("/notes", "N")
        await eng.op_push()
        mid = eng.node("/notes").memory_id
        await eng.op_r_rename("/notes", "/old-notes")
        await eng.op_r_create("/notes/today.md", "T")
        await eng.op_reconcile()
        assert eng.node("/old-notes").memory_id == mid
        assert eng.tree_sha("/notes/today.md") == sha256(data("T"))
        assert not any("overlaps" in note for note in eng.ctx.status.warnings)


async def test_a_listing_shows_a_new_memory_where_a_chain_of_ours_moved_away(tmp_path):
    """As test_a_listing_shows_a_new_memory_where_one_of_ours_moved_away, but our /notes
    moves to /old-notes, which our other file leaves for /older later in the pass (a
    chain): /notes moves only once the rest of the pass is applied, and the new
    /notes/today.md is tried again after it, in the same listing. (It was not: the file
    was missing, the status said it overlapped a local file, and the feed's next polls
    did not bring it either, the listing having shown it: it waited for the next full
    listing, `full_resync`, 10 minutes.)"""
    async with harness(tmp_path) as eng:
        await eng.op_write("/notes", "N")
        await eng.op_write("/old-notes", "O")
        await eng.op_push()
        await eng.op_r_rename("/old-notes", "/older")
        await eng.op_r_rename("/notes", "/old-notes")
        await eng.op_r_create("/notes/today.md", "T")
        await eng.op_reconcile()
        assert (eng.tree_sha("/old-notes"), eng.tree_sha("/older")) == \
            (sha256(data("N")), sha256(data("O")))
        assert eng.tree_sha("/notes/today.md") == sha256(data("T"))
        assert not any("overlaps" in note for note in eng.ctx.status.warnings)


async def test_a_full_listing_lists_the_root_then_each_directory_at_once(tmp_path):
    """A store with memories at the root and in two directories: a full listing asks for
    the root's own entries (`depth=1`: its files, and one marker per directory), then
    lists the directories by prefix, both at once (a store of many directories is listed
    in the time of its largest one, not page after page); every memory is shown."""
    async with harness(tmp_path) as eng:
        for path in ("/r.md", "/a/x.md", "/b/c/y.md"):
            await eng.op_r_create(path, path)
        first = len(eng.transport.records)

        def listings() -> list[tuple[str | None, str | None]]:
            return sorted(((r.query.get("depth"), r.query.get("path_prefix"))
                           for r in eng.transport.records[first:] if r.is_listing), key=str)

        async def meanwhile() -> None:  # the first directory's listing held: both went
            assert listings() == [("1", None), (None, "/a/"), (None, "/b/")]

        # (requests 0 and 1: the root's listing and the feed's head, read alongside it)
        await held_pass(eng, "before", meanwhile, index=2, action=eng.op_reconcile)
        assert listings() == [("1", None), (None, "/a/"), (None, "/b/")]
        assert {p: eng.tree_sha(p) for p in ("/r.md", "/a/x.md", "/b/c/y.md")} == \
            {p: sha256(data(p)) for p in ("/r.md", "/a/x.md", "/b/c/y.md")}


async def test_a_new_memory_met_while_a_new_file_there_had_unsaved_writes_is_read_again(
        tmp_path):
    """a.md is new here (not pushed yet) and open with unsaved writes when the feed shows
    another writer's new /a.md: that row waits for the close. The feed will not show the
    memory again, so the next poll names it once more (no push in between): their a.md
    takes the tree and ours is kept as a conflict."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()  # the feed's starting point
        await eng.op_write("/a.md", "mine")
        await eng.op_open_write("/a.md", "mine, more")
        await eng.op_r_create("/a.md", "theirs")
        [(mid, _sha)] = eng.server().values()
        await eng.op_poll()
        assert eng.node("/a.md").memory_id is None and eng.state.conflicts() == []
        await eng.op_close("/a.md")
        first = len(eng.transport.records)
        await eng.op_poll()
        assert f"GET {mid}" in sent(eng, first)
        node = eng.node("/a.md")
        assert (node.memory_id, eng.tree_sha("/a.md")) == (mid, sha256(data("theirs")))
        [row] = eng.state.conflicts()
        assert (row["local_sha"], row["reason"]) == \
            (sha256(data("mine, more")), "another writer created the same path")


async def test_a_memory_deleted_here_and_moved_there_onto_a_new_file_is_a_conflict(tmp_path):
    """a.md unlinked here (its delete waits out the delay) and a new b.md written here (not
    pushed yet); another writer edits a.md and moves it to /b.md. Their edit wins over our
    delete, which is dropped; /b.md is taken here, so once the rest of the listing is
    applied their b.md takes the tree and ours is kept as a conflict: nothing is left to
    delete."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        mid = eng.node("/a.md").memory_id
        await eng.op_unlink("/a.md")
        await eng.op_write("/b.md", "mine")
        await eng.op_r_edit("/a.md", "theirs")
        await eng.op_r_rename("/a.md", "/b.md")
        await eng.op_reconcile()
        assert eng.state.tombstones == {}
        node = eng.node("/b.md")
        assert (node.memory_id, eng.tree_sha("/b.md")) == (mid, sha256(data("theirs")))
        assert [r["local_sha"] for r in eng.state.conflicts()] == [sha256(data("mine"))]
        assert eng.node("/a.md") is None


async def test_a_remote_edit_a_listing_takes_drops_the_kernels_cached_pages(tmp_path):
    """a.md was read here (the kernel may hold its pages); another writer edits it. The
    listing that takes their version queues an invalidation of a.md's inode (the daemon
    sends it outside any FUSE request): the next read shows their bytes, not the old
    pages."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_reconcile()
        eng.ctx.take_invalidations()
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_reconcile()
        assert eng.ctx.take_invalidations() == [("inode", eng.node("/a.md").ino)]
        assert eng.tree_sha("/a.md") == sha256(data("v2"))


async def test_a_pending_delete_of_a_memory_deleted_elsewhere_is_settled_by_a_poll(tmp_path):
    """As test_a_pending_delete_of_a_memory_deleted_elsewhere_is_settled_by_a_listing, but
    the feed names the delete: the poll confirms it gone (404) and the pending delete is
    settled in that poll, nothing left to send."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_poll()  # the feed's starting point
        await eng.op_unlink("/a.md")
        await eng.op_r_delete("/a.md")
        first = len(eng.transport.records)
        await eng.op_poll()
        assert f"GET {mid}" in sent(eng, first)
        assert eng.state.tombstones == {} and eng.pusher.pending_total() == 0


async def test_a_file_edited_here_and_deleted_there_is_kept_and_said_so(tmp_path):
    """a.md edited here (not pushed yet) while another writer deletes it: the listing keeps
    the file, to be re-created, and `memfs status` says so."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_write("/a.md", "mine")
        await eng.op_r_delete("/a.md")
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("mine"))
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "/a.md was deleted on the server but edited here; re-creating it from the file"]


async def test_a_poll_applies_the_deletes_it_names_before_the_other_changes(tmp_path):
    """One poll names a memory deleted by another writer and an edit of another one (the
    delete's memory the newer of the two): `memfs watch` hears the delete first (deletes
    go first, they free paths the other rows may need), then the edit. The delete's
    event names the version that deleted it (read by the poll)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B")
        by_id = sorted((eng.node(p).memory_id, p) for p in ("/a.md", "/b.md"))
        (_older, edited), (gone_mid, gone) = by_id
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_delete(gone)
        await eng.op_r_edit(edited, "theirs")
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.op_poll()
        events = [sub.receive.receive_nowait() for _ in range(2)]
        assert [(e.kind, e.path) for e in events] == [("deleted", gone), ("modified", edited)]
        assert events[0].memory_id == gone_mid
        # (the delete's version, which the poll read: the event names it)
        versions = [v async for v in eng.ctx.client.list_versions(
            eng.store_id, memory_id=gone_mid)]
        assert events[0].version_id == next(
            v.id for v in versions if v.operation == "deleted")


async def test_a_first_listing_goes_on_past_a_new_memory_that_collides_here(tmp_path):
    """A first listing: a.md new (shown at once), b.md new but a file of ours not pushed
    yet holds its path (a collision), then c.md new: c.md is shown by that listing too,
    not left for the next one."""
    async with harness(tmp_path) as eng:
        for name in ("a", "b", "c"):
            await eng.op_r_create(f"/{name}.md", name)
        await eng.op_write("/b.md", "mine")
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("a"))
        assert eng.tree_sha("/c.md") == sha256(data("c"))


async def test_the_safety_net_counts_each_change_the_feed_missed(tmp_path):
    """Two memories changed by another writer in versions the feed vouched for (its
    settled edge past them) but never delivered: the safety net's full listing applies
    both and `memfs status` counts two changes missed, not one."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1", b="v1")
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_r_edit("/b.md", "v2")
        eng.reconciler.feed.confirmed = datetime.now(UTC) + timedelta(seconds=1)
        eng.reconciler.last_full -= eng.ctx.options.full_resync  # the safety net is due
        await eng.op_poll()
        assert [eng.tree_sha(p) for p in ("/a.md", "/b.md")] == [sha256(data("v2"))] * 2
        assert eng.ctx.status.feed_missed == 2


async def test_a_poll_that_meets_a_burst_lists_the_store_instead(tmp_path, monkeypatch):
    """More changes by another writer since the last poll than a poll reads (a burst):
    that poll lists the whole store instead, and applies every one of them; the listing
    is not the safety net, so nothing is counted as missed."""
    monkeypatch.setattr(feed_mod, "MAX_VERSIONS", 2)
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        await eng.op_poll()  # the feed's starting point
        for name in ("x", "y", "z"):
            await eng.op_r_create(f"/{name}.md", name)
        listed = eng.ctx.status.last_full_listing_at
        await eng.op_poll()
        assert eng.ctx.status.last_full_listing_at != listed
        assert [eng.tree_sha(f"/{n}.md") for n in "xyz"] == [sha256(data(n)) for n in "xyz"]
        assert eng.ctx.status.feed_missed == 0


async def test_a_poll_reads_the_head_of_a_changed_memory_without_its_content(tmp_path):
    """A poll names a.md, edited by another writer: the poll re-reads that memory's head
    (basic view: path and sha, not the content, which a read of the file fetches when
    it is wanted)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_edit("/a.md", "v2")
        first = len(eng.transport.records)
        await eng.op_poll()
        [head] = [r for r in eng.transport.records[first:]
                  if (r.method, r.path.rsplit("/", 1)[-1]) == ("GET", mid)]
        assert head.query["view"] == "basic"
        assert eng.tree_sha("/a.md") == sha256(data("v2"))


# -- wave w1b --


async def test_the_safety_net_says_which_change_the_feed_missed(tmp_path):
    """A change of a.md the feed vouched for but never delivered: the safety net's full
    listing applies it and `memfs status` says which file, its memory and when it was
    updated."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_edit("/a.md", "v2")
        [memory] = [m async for m in eng.ctx.client.list_memories(eng.store_id)]
        eng.reconciler.feed.confirmed = datetime.now(UTC) + timedelta(seconds=1)
        eng.reconciler.last_full -= eng.ctx.options.full_resync  # the safety net is due
        await eng.op_poll()
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            f"the change feed missed a change of /a.md ({mid}, updated {memory.updated_at}); "
            "the full listing applied it"]


async def test_a_new_memory_at_the_place_of_one_of_ours_renamed_here_is_said_to_collide(
        tmp_path):
    """x.md renamed to b.md here (not pushed yet) while another writer creates /b.md: our
    rename keeps its place (no row of the listing frees it), their memory is not shown,
    and `memfs status` says it collides with a local file."""
    async with harness(tmp_path) as eng:
        await synced(eng, x="X")
        await eng.op_rename("/x.md", "/b.md")
        await eng.op_r_create("/b.md", "theirs")
        theirs = eng.server()["/b.md"][0]
        await eng.op_reconcile()
        assert eng.tree_sha("/b.md") == sha256(data("X"))
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            f"the server's /b.md ({theirs}) collides with a local file; not shown"]


async def deleted_here_moved_there_onto_ours(eng, *, poll: bool = False) -> str:
    """a.md unlinked here (its delete waits out the delay); another writer moves our b.md
    to /c.md, then edits a.md and moves it to /b.md. a.md's memory id. (`poll`: the
    feed's starting point taken first.)"""
    await synced(eng, a="A", b="B")
    if poll:
        await eng.op_poll()
    mid = eng.node("/a.md").memory_id
    await eng.op_unlink("/a.md")
    await eng.op_r_rename("/b.md", "/c.md")
    await eng.op_r_edit("/a.md", "theirs")
    await eng.op_r_rename("/a.md", "/b.md")
    return mid


async def test_a_memory_deleted_here_and_moved_there_where_ours_left_is_restored(tmp_path):
    """a.md unlinked here; another writer moves our b.md away, then edits a.md and moves it
    to /b.md. One listing moves our b.md first (the memories we hold go first), so their
    edit, which wins over our delete, finds /b.md free: it is restored there, and
    `memfs status` says so (it is not first taken for a collision with our b.md)."""
    async with harness(tmp_path) as eng:
        mid = await deleted_here_moved_there_onto_ours(eng)
        await eng.op_reconcile()
        assert eng.node("/b.md").memory_id == mid and eng.state.tombstones == {}
        assert (eng.tree_sha("/b.md"), eng.tree_sha("/c.md")) == \
            (sha256(data("theirs")), sha256(data("B")))
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "/b.md was deleted here but changed on the server; restoring the server's version"]


async def test_a_poll_restores_a_memory_deleted_here_and_moved_where_ours_left(tmp_path):
    """As test_a_memory_deleted_here_and_moved_there_where_ours_left_is_restored, but the
    feed names both memories: the poll applies our b.md's move first, then restores a.md's
    memory at /b.md, and says so."""
    async with harness(tmp_path) as eng:
        mid = await deleted_here_moved_there_onto_ours(eng, poll=True)
        await eng.op_poll()
        assert eng.ctx.metrics.feed_polls == 1  # (a poll, not a listing)
        assert eng.node("/b.md").memory_id == mid and eng.state.tombstones == {}
        assert (eng.tree_sha("/b.md"), eng.tree_sha("/c.md")) == \
            (sha256(data("theirs")), sha256(data("B")))
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "/b.md was deleted here but changed on the server; restoring the server's version"]


async def test_a_poll_reads_the_version_of_a_lost_answer_found_applied_as_no_news(
        tmp_path, monkeypatch):
    """a.md's update reached the server, its answer lost; the next pass finds it applied
    and sets a.md's base to it. The feed then reads that version: not known as ours (its
    answer never came), but the mount holds what it wrote, so it is no news and does
    not count toward the poll's limit (here none is allowed: any news is a burst, and
    a burst makes the poll list the whole store instead)."""
    monkeypatch.setattr(feed_mod, "MAX_VERSIONS", 0)
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()  # the feed's starting point
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="lose", origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        assert eng.state.doubts
        listed = eng.ctx.status.last_full_listing_at
        first = len(eng.transport.records)
        await eng.op_poll()
        assert not eng.state.doubts and eng.node("/a.md").base_sha == sha256(data("v2"))
        assert eng.ctx.status.last_full_listing_at == listed
        assert not any(r.is_listing for r in eng.transport.records[first:])


async def test_a_listing_skips_a_missing_memorys_head_older_than_a_fetch(tmp_path):
    """d/a.md moves to /a.md between the listing's pages (on none of them): the listing
    reads its head (a GET). While that answer is on the way back, another writer makes
    v2 and a read here (a cache miss) fetches v2, which the file takes. The GET's answer
    (v1, at /a.md) is older than that base: it is skipped, and the file keeps v2 (the
    next pass moves it)."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/d/a.md", "v1")
        await eng.op_reconcile()  # d/a.md listed, its content not fetched
        mid = eng.node("/d/a.md").memory_id
        # (requests 0 and 1: the root's listing and the feed's head; 2: /d/'s listing;
        # 3: the GET of the memory on no page)
        holds = {2: Hold(2, "before"), 3: Hold(3, "after")}
        eng.transport.holds, eng.transport.action_count = holds, 0
        eng.transport.reached = trio.Event()

        async def act() -> None:
            ORIGIN.set("action")
            try:
                await eng.op_reconcile()
            finally:
                eng.transport.reached.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(act)
            await eng.transport.reached.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert holds[2].rec is not None and holds[2].rec.query["path_prefix"] == "/d/"
            await eng.op_r_rename("/d/a.md", "/a.md")
            eng.transport.reached = trio.Event()
            holds[2].release.set()
            await eng.transport.reached.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert holds[3].rec is not None and sent(eng)[holds[3].rec.seq] == f"GET {mid}"
            await eng.op_r_edit("/a.md", "v2")
            await eng.op_read("/d/a.md")
            assert eng.node("/d/a.md").base_sha == sha256(data("v2"))
            holds[3].release.set()
        eng.transport.holds = {}
        node = eng.state.holder(mid)
        assert (eng.state.path_of(node), node.base_sha, node.sha) == \
            ("/d/a.md", sha256(data("v2")), sha256(data("v2")))


# -- wave w2b --


async def test_another_clients_park_exactly_park_patience_old_is_still_left_alone(
        tmp_path, monkeypatch):
    """Another client's park has stood exactly PARK_PATIENCE (the reconciler's monotonic
    clock stopped there): it is still waited for, nothing to push; a moment later it is
    abandoned and our place wins."""
    now = [1000.0]
    monkeypatch.setattr(reconciler_mod, "time", SimpleNamespace(
        monotonic=lambda: now[0], time=time.time))
    async with harness(tmp_path) as eng:
        mid, park = await parked_by_another(eng)
        assert eng.reconciler._parked_since[mid] == 1000.0
        now[0] += PARK_PATIENCE
        await eng.op_reconcile()
        assert eng.node("/a.md").base_path == "/a.md" and eng.pusher.pending_total() == 0
        now[0] += 0.5
        await eng.op_reconcile()
        assert eng.node("/a.md").base_path == park and eng.pusher.pending_total() == 1


async def test_the_first_poll_after_a_listing_does_not_count_what_it_showed_as_news(
        tmp_path, monkeypatch):
    """Three memories written twice each just before a full listing: the listing showed
    them. When the feed's first poll after it reads their versions, the older ones are
    not news (the listing applied what came after them): they do not count toward the
    limit (2 here) that would send the poll back to a full listing. Without the feed
    (no head read), the listing still takes every memory."""
    monkeypatch.setattr(feed_mod, "MAX_VERSIONS", 2)
    async with harness(tmp_path) as eng:
        for name in ("a", "b", "c"):
            await eng.op_r_create(f"/{name}.md", f"{name}1")
            await eng.op_r_edit(f"/{name}.md", f"{name}2")
        # A slow listing (the feed's clock 5 s on at each reading): the position it gives
        # the feed is before all six versions, which the poll then reads. (With the real
        # clock a listing quicker than the six writes left some of them before it.)
        eng.reconciler.feed.clock = itertools.count(1000.0, 5.0).__next__
        await eng.op_reconcile()
        listed = eng.ctx.status.last_full_listing_at
        first = len(eng.transport.records)
        await eng.op_poll()
        assert eng.ctx.status.feed_polls[-1]["versions"] == 6
        assert eng.ctx.status.last_full_listing_at == listed
        assert not any(r.is_listing for r in eng.transport.records[first:])
    async with harness(tmp_path / "nofeed") as eng:
        eng.ctx.options.feed = False
        await eng.op_r_create("/a.md", "a")
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("a"))


async def test_a_memory_renamed_between_two_directory_listings_takes_its_new_place(
        tmp_path):
    """The directories /a/ and /b/ are listed at once; /a/'s listing is answered last.
    Between the two, another writer moves /b/x.md to /a/x.md: the memory is on both
    pages, the newer (/a/) first in the listing's order. The file follows to /a/x.md,
    and the older row (/b/x.md) does not move it back."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/a/y.md", "y")
        await eng.op_r_create("/b/x.md", "x")
        await eng.op_reconcile()
        mid = eng.node("/b/x.md").memory_id
        await _listing_while_b_x_moves_to_a(eng)
        node = eng.state.holder(mid)
        assert (eng.state.path_of(node), node.base_path) == ("/a/x.md", "/a/x.md")
        assert eng.node("/b/x.md") is None


async def _listing_while_b_x_moves_to_a(eng) -> None:
    """A full listing (a root holding the directories /a/ and /b/) whose /a/ page is
    answered last: between the two pages another writer moves /b/x.md to /a/x.md, so
    the memory is on both pages, the newer (/a/) first in the listing's order."""
    # (requests 0 and 1: the root's listing and the feed's head; 2 and 3: /a/ and /b/)
    holds = {2: Hold(2, "before"), 3: Hold(3, "before")}
    eng.transport.holds, eng.transport.action_count = holds, 0
    eng.transport.reached = trio.Event()

    async def act() -> None:
        ORIGIN.set("action")
        await eng.op_reconcile()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(act)
        await until(lambda: all(h.rec is not None for h in holds.values()))
        by_prefix = {h.rec.query["path_prefix"]: h for h in holds.values()}
        by_prefix["/b/"].release.set()
        await trio.testing.wait_all_tasks_blocked()
        await eng.op_r_rename("/b/x.md", "/a/x.md")
        by_prefix["/a/"].release.set()
    eng.transport.holds = {}


async def test_a_new_memory_under_a_local_file_is_not_shown_and_said_so(tmp_path):
    """/notes is a file here, not pushed yet; another writer creates /notes/today.md.
    The listing cannot show it (no directory can stand where the file is): `memfs
    status` says which memory and why it waits."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/notes", "N")
        await eng.op_r_create("/notes/today.md", "T")
        await eng.op_reconcile()
        assert eng.tree_sha("/notes") == sha256(data("N"))
        assert [note.split(" ", 1)[1] for note in eng.ctx.status.warnings] == [
            "the server's /notes/today.md overlaps a local directory or file; not shown "
            "until that is resolved"]


# -- wave w3b --


async def test_a_remote_rename_drops_the_kernels_cached_entries_of_both_names(tmp_path):
    """Another writer renames a.md to b.md: the listing that follows queues the kernel's
    entries of both names to be dropped (the old name must not resolve any more, a
    cached "no such file" of the new one must not hide it)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_reconcile()
        root = eng.node("/a.md").parent
        eng.ctx.take_invalidations()
        await eng.op_r_rename("/a.md", "/b.md")
        await eng.op_reconcile()
        assert eng.ctx.take_invalidations() == [("entry", root, "a.md"),
                                                ("entry", root, "b.md")]


async def test_a_new_memory_at_the_place_of_a_local_directory_is_said_to_collide(tmp_path):
    """A directory /d made here; another writer creates a memory /d (a file). The listing
    cannot show it (a directory stands there): `memfs status` says it collides with a
    local directory."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_mkdir("/d")
        await eng.op_r_create("/d", "theirs")
        theirs = eng.server()["/d"][0]
        await eng.op_reconcile()
        assert eng.node("/d").is_dir
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            f"the server's /d ({theirs}) collides with a local directory; not shown"]


async def test_the_safety_net_does_not_count_a_change_at_the_feeds_settled_edge(tmp_path):
    """A change of a.md made exactly at the time the feed has settled (its `confirmed`
    edge): the next poll still reads versions of that very time (`created_at[gte]`), so
    the safety net's full listing, which applies it, does not count it as missed."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_edit("/a.md", "v2")
        [memory] = [m async for m in eng.ctx.client.list_memories(eng.store_id)]
        eng.reconciler.feed.confirmed = parse_time(memory.updated_at)
        eng.reconciler.last_full -= eng.ctx.options.full_resync  # the safety net is due
        await eng.op_poll()
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert eng.ctx.status.feed_missed == 0 and eng.ctx.status.warnings == []


# -- wave w4b --


async def test_a_listing_that_finds_our_unsent_bytes_there_takes_them_as_the_base(tmp_path):
    """a.md is written "mine" here (not pushed yet) while another writer writes the same
    bytes: the listing takes the server's version as a.md's base (path and sha), so the
    file is clean and nothing is sent. (Written before the pass began: had it been
    written while the pass read the server, the row would wait for a fresh read,
    `test_a_listing_read_before_a_write_of_its_bytes_does_not_take_them_as_synced`.)"""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_write("/a.md", "mine")
        await eng.op_r_edit("/a.md", "mine")
        await eng.op_reconcile()
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_path, node.base_sha) == (
            mid, "/a.md", sha256(data("mine")))
        assert not eng.state.is_dirty(node) and eng.pusher.pending_total() == 0


async def test_a_new_memory_a_listing_shows_drops_a_cached_negative_entry(tmp_path):
    """b.md was looked up here and not found (the kernel may cache that); another writer
    creates it. The listing that shows it queues an invalidation of the name b.md in the
    root (sent outside any FUSE request), so the next lookup finds it."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_reconcile()
        eng.ctx.take_invalidations()
        await eng.op_r_create("/b.md", "theirs")
        await eng.op_reconcile()
        root = eng.node("/a.md").parent
        assert eng.ctx.take_invalidations() == [("entry", root, "b.md")]
# -- wave w5b --


async def test_a_file_edited_here_and_deleted_there_on_a_read_only_mount_is_kept_unsynced(
        tmp_path):
    """a.md edited here (not pushed), then the mount became read-only (the store's access
    changed, it was archived) while another writer deleted a.md: the listing keeps the
    file, which a read-only mount cannot re-create, and `memfs status` says so."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_write("/a.md", "mine")
        eng.ctx.options.read_only = True
        await eng.op_r_delete("/a.md")
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("mine"))
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "/a.md was deleted on the server but edited here; kept locally, unsynced "
            "(read-only mount)"]


async def test_a_file_deleted_there_drops_the_kernels_cached_entry(tmp_path):
    """Another writer deletes a.md, unchanged here: the listing removes it and queues the
    kernel's cached entry of the name to be dropped (a stale entry would still resolve
    a.md to a file that is gone)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_reconcile()
        root = eng.node("/a.md").parent
        eng.ctx.take_invalidations()
        await eng.op_r_delete("/a.md")
        await eng.op_reconcile()
        assert eng.node("/a.md") is None
        assert eng.ctx.take_invalidations() == [("entry", root, "a.md")]


async def test_a_listing_goes_on_past_a_memory_listed_twice(tmp_path):
    """Another writer moves /b/x.md to /a/x.md between the listing's two directory pages
    (the memory on both), and has created /n.md before the listing. Rows of memories
    held here come first: x.md (twice), y.md, then /n.md. The second x.md row is
    skipped, and the rows after it are still applied: /n.md is shown."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/a/y.md", "y")
        await eng.op_r_create("/b/x.md", "x")
        await eng.op_reconcile()
        await eng.op_r_create("/n.md", "n")
        await _listing_while_b_x_moves_to_a(eng)
        assert eng.tree_sha("/a/x.md") == sha256(data("x")) and eng.node("/b/x.md") is None
        assert eng.tree_sha("/n.md") == sha256(data("n"))
        assert eng.node("/n.md").memory_id == eng.server()["/n.md"][0]


# -- wave w6b --


async def test_a_burst_of_another_writers_edits_or_deletes_of_our_files_lists_the_store(
        tmp_path, monkeypatch):
    """Another writer edits (or deletes) more of our files since the last poll than a
    poll reads (a burst; the limit 2 here): each version differs from what the mount
    holds, so each is news, and that poll lists the whole store instead of re-reading
    the memories one by one. Every change is applied."""
    monkeypatch.setattr(feed_mod, "MAX_VERSIONS", 2)
    for kind in ("edit", "delete"):
        async with harness(tmp_path / kind) as eng:
            await synced(eng, a="A", b="B", c="C")
            await eng.op_poll()  # the feed's starting point
            for name in "abc":
                if kind == "edit":
                    await eng.op_r_edit(f"/{name}.md", name * 2)
                else:
                    await eng.op_r_delete(f"/{name}.md")
            listed = eng.ctx.status.last_full_listing_at
            first = len(eng.transport.records)
            await eng.op_poll()
            assert eng.ctx.status.last_full_listing_at != listed, kind
            assert any(r.is_listing for r in eng.transport.records[first:]), kind
            want = [sha256(data(n * 2)) for n in "abc"] if kind == "edit" else [None] * 3
            assert [eng.tree_sha(f"/{n}.md") for n in "abc"] == want, kind


# -- wave w8b --


async def test_a_full_listing_asked_for_or_after_a_failed_poll_is_not_the_safety_net(tmp_path):
    """Two memories changed by another writer in versions the feed vouched for (its
    settled edge past them) but never delivered. A full listing asked for (`memfs sync`
    with `full`, the feed trusted) applies both and `memfs status` counts none as missed:
    only the periodic safety net checks the feed. Nor does the listing a poll makes once
    the feed is not trusted (a poll failed: its position is unknown)."""
    for how in ("asked", "untrusted"):
        async with harness(tmp_path / how) as eng:
            await synced(eng, a="v1", b="v1")
            await eng.op_poll()  # the feed's starting point
            await eng.op_r_edit("/a.md", "v2")
            await eng.op_r_edit("/b.md", "v2")
            eng.reconciler.feed.confirmed = datetime.now(UTC) + timedelta(seconds=1)
            if how == "asked":
                await eng.op_reconcile()
            else:
                eng.reconciler.feed.reset(None)  # what a failed poll leaves
                assert not eng.reconciler.feed.trusted()
                await eng.op_poll()
            assert [eng.tree_sha(p) for p in ("/a.md", "/b.md")] == \
                [sha256(data("v2"))] * 2, how
            assert eng.ctx.status.feed_missed == 0 and eng.ctx.status.warnings == [], how


# -- wave w9b --


async def test_a_listing_applies_the_memories_held_here_in_its_order_then_new_ones(tmp_path):
    """Another writer edits a.md, b.md and c.md and creates n.md: the full listing applies
    the rows of the memories held here first, in the listing's order, then the new one
    (a held memory's move may free the path a new one needs): `memfs watch` hears a, b,
    c modified, then n created."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B", c="C")
        await eng.op_reconcile()
        for name in "abc":
            await eng.op_r_edit(f"/{name}.md", name * 2)
        await eng.op_r_create("/n.md", "n")
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        await eng.op_reconcile()
        events = [sub.receive.receive_nowait() for _ in range(4)]
        assert [(e.kind, e.path) for e in events] == [
            ("modified", "/a.md"), ("modified", "/b.md"), ("modified", "/c.md"),
            ("created", "/n.md")]


async def test_a_new_memory_listed_twice_under_a_local_file_is_not_shown_at_its_old_place(
        tmp_path):
    """/a is a file here, not pushed yet; another writer has made /a/y.md and /b/x.md, and
    moves /b/x.md to /a/x.md between the listing's two directory pages (the memory on
    both, the newer /a/x.md first). Neither row can be shown (/a is a file); the older
    row (/b/x.md) is skipped, not shown at the place the memory left, and `memfs status`
    says why each waits."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        await eng.op_write("/a", "A")
        await eng.op_r_create("/a/y.md", "y")
        await eng.op_r_create("/b/x.md", "x")
        await _listing_while_b_x_moves_to_a(eng)
        assert eng.node("/b/x.md") is None and eng.node("/b") is None
        assert eng.tree_sha("/a") == sha256(data("A"))
        assert sorted(w.split(" ", 1)[1] for w in eng.ctx.status.warnings) == [
            f"the server's {p} overlaps a local directory or file; not shown until that "
            "is resolved" for p in ("/a/x.md", "/a/y.md")]


# -- wave w11c --


async def feed_vouches_then_safety_net(eng) -> None:
    """The feed vouches for every change up to now (its settled edge past them) though
    it delivered none, and the safety net's full listing is due: the next poll is it."""
    eng.reconciler.feed.confirmed = datetime.now(UTC) + timedelta(seconds=1)
    eng.reconciler.last_full -= eng.ctx.options.full_resync


async def test_the_safety_net_counts_only_the_memories_the_feed_missed(tmp_path):
    """a.md changed by another writer in a version the feed vouched for but never
    delivered; b.md, as old, unchanged. The safety net's full listing applies a.md's
    change and counts one change missed, a.md's: b.md, which it left as it was, is not
    counted."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1", b="v1")
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_edit("/a.md", "v2")
        await feed_vouches_then_safety_net(eng)
        await eng.op_poll()
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert eng.ctx.status.feed_missed == 1
        missed = [n for n in eng.ctx.status.warnings if "the change feed missed" in n]
        assert len(missed) == 1 and "missed a change of /a.md (" in missed[0]


async def test_the_safety_net_counts_a_missed_change_of_a_file_deleted_here(tmp_path):
    """a.md deleted here (its delete not sent yet), b.md a new file of ours. Another writer
    edited a.md's memory and moved it to b.md, in versions the feed vouched for but never
    delivered. The safety net's listing finds our delete no longer applies (the server
    changed the memory: the pending delete is dropped; no file of ours changed by that
    row) and counts the change missed, once; their b.md then takes the tree, ours kept as
    a conflict."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_poll()  # the feed's starting point
        await eng.op_unlink("/a.md")
        await eng.op_write("/b.md", "mine")
        assert mid in eng.state.tombstones
        await eng.op_r_rename("/a.md", "/b.md")
        await eng.op_r_edit("/b.md", "theirs")
        await feed_vouches_then_safety_net(eng)
        await eng.op_poll()
        assert mid not in eng.state.tombstones
        assert eng.node("/b.md").memory_id == mid
        assert eng.tree_sha("/b.md") == sha256(data("theirs"))
        [row] = eng.state.conflicts()
        assert (row["path"], row["local_sha"]) == ("/b.md", sha256(data("mine")))
        assert eng.ctx.status.feed_missed == 1
        assert any(f"missed a change of /b.md ({mid}," in n for n in eng.ctx.status.warnings)


async def test_memfs_status_counts_the_versions_the_feed_read_out_of_order(tmp_path):
    """Another writer's edit of a.md commits after the feed read a newer version (b.md's
    create) though it was created before it (a distributed server may do that): the next
    poll reads it out of order, applies it, and `memfs status` counts one late version."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()  # the feed's starting point (a full listing)
        await eng.op_r_create("/b.md", "b")
        await eng.op_poll()  # the feed's position passes b.md's create
        assert eng.tree_sha("/b.md") == sha256(data("b"))
        conn = eng.db._conn
        [newer] = [row[0] for row in conn.execute(
            "SELECT created_at FROM versions WHERE path = '/b.md'")]
        await eng.op_r_edit("/a.md", "v2")
        mid = eng.node("/a.md").memory_id
        stamp = format_time(parse_time(newer) - timedelta(milliseconds=1))
        [vid] = [row[0] for row in conn.execute(
            "SELECT version_id FROM memories WHERE id = ?", (mid,))]
        conn.execute("UPDATE versions SET created_at = ? WHERE id = ?", (stamp, vid))
        conn.execute("UPDATE memories SET updated_at = ? WHERE id = ?", (stamp, mid))
        await eng.op_poll()
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert eng.reconciler.feed.costs[-1].late == 1
        assert eng.ctx.status.feed_late == 1
        assert store_status(eng.store)["feed"]["late"] == 1


# -- wave w12b --


async def test_the_safety_net_does_not_count_a_memory_it_left_unchanged(tmp_path):
    """The safety net's full listing applies a change the feed missed (a.md) and meets
    b.md, unchanged since before the feed's settled edge: `memfs status` counts one
    change missed and names a.md only."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1", b="B")
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_edit("/a.md", "v2")
        eng.reconciler.feed.confirmed = datetime.now(UTC) + timedelta(seconds=1)
        eng.reconciler.last_full -= eng.ctx.options.full_resync  # the safety net is due
        await eng.op_poll()
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert eng.ctx.status.feed_missed == 1
        missed = [w for w in eng.ctx.status.warnings if "feed missed" in w]
        assert len(missed) == 1 and "/a.md" in missed[0]


async def test_edits_elsewhere_of_files_deleted_here_are_news_to_a_poll(tmp_path, monkeypatch):
    """Three files deleted here (their deletes still waiting) that another writer then
    edits: the poll reads three versions the mount does not hold, more than it reads
    (a burst), and lists the whole store instead, which restores the three (their
    edits win over our deletes)."""
    monkeypatch.setattr(feed_mod, "MAX_VERSIONS", 2)
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B", c="C")
        await eng.op_poll()  # the feed's starting point
        for name in "abc":
            await eng.op_unlink(f"/{name}.md")
        assert len(eng.state.tombstones) == 3
        for name in "abc":
            await eng.op_r_edit(f"/{name}.md", name * 2)
        listed = eng.ctx.status.last_full_listing_at
        await eng.op_poll()
        assert eng.ctx.status.last_full_listing_at != listed
        assert [eng.tree_sha(f"/{n}.md") for n in "abc"] == [sha256(data(n * 2)) for n in "abc"]


async def test_a_first_listing_adds_its_new_files_in_one_commit(tmp_path):
    """A first listing of a store of many memories adds their files in one commit of
    state.db (one disk sync), not one per file: a large store mounts in seconds."""
    async with harness(tmp_path) as eng:
        for i in range(6):
            await eng.op_r_create(f"/n{i}.md", f"{i}")
        commits: list[str] = []
        eng.state.db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT"
                                        else None)
        await eng.op_reconcile()
        eng.state.db.set_trace_callback(None)
        assert [eng.tree_sha(f"/n{i}.md") for i in range(6)] == [sha256(data(f"{i}"))
                                                                  for i in range(6)]
        assert len(commits) == 1, commits



# -- wave w13b --


async def test_own_bytes_renamed_elsewhere_onto_a_held_place_keep_the_old_base_path(tmp_path):
    """a.md edited here to "mine" (not pushed yet); another writer renames it to b.md and
    writes the same bytes, while a new b.md is open here with unsaved writes. The listing
    adopts the bytes (ours) but cannot move a.md onto b.md: its base path stays /a.md, so
    the next listing tries the move again and the next push does not send a.md back from
    /b.md to /a.md (undoing the other writer's rename)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A")
        mid = eng.node("/a.md").memory_id
        await eng.op_write("/a.md", "mine")
        await eng.op_write("/b.md", "new")
        await eng.op_open_write("/b.md", "new, more")
        await eng.op_r_rename("/a.md", "/b.md")
        await eng.op_r_edit("/b.md", "mine")
        await eng.op_reconcile()
        a = eng.node("/a.md")
        assert (a.memory_id, a.base_path, a.base_sha) == (mid, "/a.md", sha256(data("mine")))
        assert [w.split(" ", 1)[1] for w in eng.ctx.status.warnings] == [
            "cannot move /a.md to /b.md (renamed on the server): the place is taken locally"]
        first = len(eng.transport.records)
        await eng.op_push()
        assert f"POST {mid}" not in sent(eng, first)
        assert eng.server()["/b.md"][0] == mid
        await eng.op_close("/b.md")


# -- wave w14b --


async def test_a_burst_listing_older_than_a_fetch_does_not_roll_the_file_back(
        tmp_path, monkeypatch):
    """A poll meets a burst (more news than a poll reads: here any) and lists the store
    instead. While the listing of /d/ (showing another writer's v2 of d/a.md) is on the
    way back, the writer makes v3 and a read here (a cache miss) fetches v3, which the
    file takes. The listing's row (v2) is older than that base: it is skipped, and
    d/a.md stays v3, as in a full listing of its own."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/d/a.md", "v1")
        await eng.op_reconcile()  # d/a.md listed, its content not fetched
        await eng.op_poll()  # the feed's starting point
        monkeypatch.setattr(feed_mod, "MAX_VERSIONS", 0)
        await eng.op_r_edit("/d/a.md", "v2")
        listed = eng.ctx.status.last_full_listing_at
        first = len(eng.transport.records)

        async def meanwhile() -> None:
            await eng.op_r_edit("/d/a.md", "v3")
            await eng.op_read("/d/a.md")
            assert eng.node("/d/a.md").base_sha == sha256(data("v3"))

        # (action requests 0: the poll; 1 and 2: the root's listing and the feed's head;
        # 3: /d/'s listing, held with v2 in it)
        await held_pass(eng, "after", meanwhile, index=3, action=eng.op_poll)
        assert eng.transport.records[first + 3].query["path_prefix"] == "/d/"
        assert eng.ctx.status.last_full_listing_at != listed  # (the burst's listing)
        node = eng.node("/d/a.md")
        assert (node.base_sha, node.sha) == (sha256(data("v3")), sha256(data("v3")))
        assert eng.tree_sha("/d/a.md") == sha256(data("v3"))


async def test_a_poll_reads_a_lost_answer_of_a_file_deleted_since_as_no_news(
        tmp_path, monkeypatch):
    """As test_a_poll_reads_the_version_of_a_lost_answer_found_applied_as_no_news, but
    a.md was unlinked after its update's answer was lost: the next pass finds the update
    applied and sets the pending delete's base to it. The feed then reads that version:
    no file holds it, but the pending delete holds what it wrote, so it is no news (no
    burst: the poll does not list the whole store)."""
    monkeypatch.setattr(feed_mod, "MAX_VERSIONS", 0)
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_poll()  # the feed's starting point
        eng.transport.rules = [FaultRule(lambda r: r.method == "POST" and r.memory_id,
                                         kind="lose", origins=("setup",), times=1)]
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        [ticket] = eng.state.doubts.values()
        mid = ticket.memory_id
        await eng.op_unlink("/a.md")
        listed = eng.ctx.status.last_full_listing_at
        first = len(eng.transport.records)
        await eng.op_poll()
        assert not eng.state.doubts and eng.state.tombstones[mid].base_sha == sha256(data("v2"))
        assert eng.ctx.status.last_full_listing_at == listed
        assert not any(r.is_listing for r in eng.transport.records[first:])


async def test_a_poll_re_reads_another_writers_change_but_not_our_own_write(tmp_path):
    """A poll that reads our own update of a.md and another writer's update of b.md:
    a.md's version is exactly its base (its answer already applied), so only b.md is
    read again (its head), and the mount then shows both."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="a1", b="b1")
        await eng.op_poll()  # the feed's starting point
        a_mid, b_mid = eng.node("/a.md").memory_id, eng.node("/b.md").memory_id
        await eng.op_write("/a.md", "a2")
        await eng.op_push()
        await eng.op_r_edit("/b.md", "b2")
        first = len(eng.transport.records)
        await eng.op_poll()
        reads = [r for r in sent(eng, first) if not r.endswith("memory_versions")]
        assert reads == [f"GET {b_mid}"] and f"GET {a_mid}" not in sent(eng, first)
        assert eng.tree_sha("/a.md") == sha256(data("a2"))
        assert eng.tree_sha("/b.md") == sha256(data("b2"))


async def test_a_listing_without_the_feed_reads_no_feed_head(tmp_path):
    """With the change feed off (`feed = false`), a listing is only the listing: no
    request for the feed's head, and `memfs status` shows no feed position."""
    async with harness(tmp_path) as eng:
        eng.ctx.options.feed = False
        await eng.op_r_create("/a.md", "a")
        first = len(eng.transport.records)
        await eng.op_reconcile()
        assert sent(eng, first) == ["GET memories"]
        assert eng.ctx.status.feed_position is None
        assert eng.tree_sha("/a.md") == sha256(data("a"))


async def test_a_sync_asked_for_during_a_pass_makes_a_pass_of_its_own(tmp_path):
    """`memfs sync` while the mount's first listing runs: it waits for that pass, then
    makes its own, so another writer's memory created after that listing read the root
    is there when the sync returns (the loop's periodic pass would count the finished
    pass as its own; a sync request never does)."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/d/x.md", "x")
        first = len(eng.transport.records)
        done = trio.Event()

        async def sync() -> None:
            await eng.reconciler.reconcile_pass()  # StoreEngine.sync: never coalesced
            done.set()

        async with trio.open_nursery() as nursery:
            async def meanwhile() -> None:
                await eng.op_r_create("/b.md", "late")
                nursery.start_soon(sync)
                await trio.testing.wait_all_tasks_blocked()  # queued on the sync lock
                assert not done.is_set()

            # (action requests 0 and 1: the root's listing and the feed's head, at once;
            # 2: /d/'s listing, held after the server answered it)
            await held_pass(eng, "after", meanwhile, index=2, action=lambda: (
                eng.reconciler.reconcile_pass(coalesce=True)))  # StoreEngine's first listing
            assert eng.transport.records[first + 2].query["path_prefix"] == "/d/"
            assert eng.tree_sha("/d/x.md") == sha256(data("x"))
            assert eng.node("/b.md") is None  # after the first listing read the root
        assert done.is_set()
        assert eng.tree_sha("/b.md") == sha256(data("late"))


# -- wave r6w2 --


async def test_a_listing_showing_our_refused_bytes_written_by_another_adopts_them(tmp_path):
    """a.md's update to v2 was refused (403: it waits); another writer then writes v2,
    the very bytes we sent, and a.md is written again here (v3). A listing shows the
    memory at v2, our own last send: the base takes it, with no conflict, and v3 is
    what is left to push."""
    async with harness(tmp_path) as eng:
        mid = await refused_update(eng)
        assert eng.node("/a.md").sent_sha == sha256(data("v2"))
        await eng.op_r_edit("/a.md", "v2")
        await eng.op_write("/a.md", "v3")
        await eng.op_reconcile()
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_sha, node.sha) == (
            mid, sha256(data("v2")), sha256(data("v3")))
        assert eng.state.conflicts() == [] and eng.state.is_dirty(node)


async def test_a_pass_that_outlasts_the_feeds_retention_shows_no_feed_position(tmp_path):
    """A poll's reads outlast the feed's retention (its clock passes it while the pass
    re-reads the memory another writer changed): the feed can no longer be trusted (the
    next pass lists everything), so `memfs status` shows no feed position, not a stale
    one. The change read is applied all the same."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_poll()  # a listing: the feed's starting point
        assert eng.ctx.status.feed_position is not None
        await eng.op_r_edit("/a.md", "v2")
        feed = eng.reconciler.feed
        late = feed_mod.RETENTION.total_seconds()

        async def meanwhile() -> None:
            feed.clock = lambda: time.monotonic() + late

        first = len(eng.transport.records)
        await held_pass(eng, "before", meanwhile, index=1,
                        action=eng.reconciler.reconcile_pass)
        assert sent(eng, first) == ["GET memory_versions", f"GET {mid}"]
        assert eng.tree_sha("/a.md") == sha256(data("v2"))
        assert not feed.trusted() and eng.ctx.status.feed_position is None


# -- wave r6w4 --


async def test_another_clients_second_park_is_waited_for_from_its_own_start(
        tmp_path, monkeypatch):
    """Another client parked a.md's memory, then moved it back (its swap done); much
    later it parks it again. The second park is waited for from when it was seen, not
    from the first: nothing to push, the file stays at its place."""
    now = [1000.0]
    monkeypatch.setattr(reconciler_mod, "time", SimpleNamespace(
        monotonic=lambda: now[0], time=time.time))
    async with harness(tmp_path) as eng:
        mid, park = await parked_by_another(eng)
        assert eng.reconciler._parked_since == {mid: 1000.0}
        await eng.op_r_rename(park, "/a.md")
        await eng.op_reconcile()
        assert eng.node("/a.md").base_path == "/a.md"
        now[0] += PARK_PATIENCE + 1.0
        await eng.op_r_rename("/a.md", park)
        await eng.op_reconcile()
        assert eng.node("/a.md").base_path == "/a.md" and eng.pusher.pending_total() == 0
        assert eng.reconciler._parked_since == {mid: now[0]}


async def test_a_poll_naming_our_own_write_to_a_file_since_unlinked_applies_the_rest(
        tmp_path):
    """Another writer edits b.md; then our update of a.md lands and a.md is unlinked here
    (its delete waits). The next poll names both, a.md's newest: our own write, exactly
    the pending delete's base, needs no request; b.md's edit is still read and shown."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1", b="b1")
        await eng.op_poll()  # the feed's starting point
        await eng.op_r_edit("/b.md", "b2")
        await eng.op_write("/a.md", "v2")
        await eng.op_push()
        mid_a, mid_b = eng.node("/a.md").memory_id, eng.node("/b.md").memory_id
        await eng.op_unlink("/a.md")
        assert (eng.state.tombstones[mid_a].base_path,
                eng.state.tombstones[mid_a].base_sha) == ("/a.md", sha256(data("v2")))
        first = len(eng.transport.records)
        await eng.op_poll()
        reads = [r for r in sent(eng, first) if r != "GET memory_versions"]
        assert reads == [f"GET {mid_b}"]  # none for a.md: the poll's change is our write
        assert eng.tree_sha("/b.md") == sha256(data("b2"))
        assert mid_a in eng.state.tombstones and eng.tree_sha("/a.md") is None


async def test_a_safety_net_listing_from_the_stores_start_adds_new_files_in_one_commit(
        tmp_path):
    """A store empty when mounted (the feed starts at the store's start: it vouches for
    nothing yet); another client then creates many memories, and the periodic full
    listing (the safety net) comes first: it adds their files in one commit of
    state.db, as a first listing does, and counts nothing as missed."""
    async with harness(tmp_path) as eng:
        await eng.op_reconcile()
        assert eng.ctx.status.feed_position == "the store's start"
        for i in range(6):
            await eng.op_r_create(f"/n{i}.md", f"{i}")
        assert eng.reconciler.feed.trusted()
        eng.reconciler.last_full = None  # the safety net is due
        listed = eng.ctx.status.last_full_listing_at
        commits: list[str] = []
        eng.state.db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT"
                                        else None)
        await eng.op_poll()
        eng.state.db.set_trace_callback(None)
        assert [eng.tree_sha(f"/n{i}.md") for i in range(6)] == [sha256(data(f"{i}"))
                                                                  for i in range(6)]
        assert eng.ctx.status.last_full_listing_at != listed
        assert eng.ctx.status.feed_missed == 0
        assert len(commits) == 1, commits


# -- wave r6w6 --


async def test_a_first_listing_does_not_show_another_clients_park_after_new_files(tmp_path):
    """A first listing: /a.md is new (shown at once, with the other new files in one
    commit), then another client's park, a new memory under the private park place
    (listed after the root's own files): it is never shown, though it comes right
    after a run of new files."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/a.md", "a")
        await eng.op_r_create(f"{PARK_DIR}/mem_other.0badcafe", "parked")
        await eng.op_reconcile()
        assert eng.tree_sha("/a.md") == sha256(data("a"))
        assert eng.node(PARK_DIR) is None
        assert eng.node(f"{PARK_DIR}/mem_other.0badcafe") is None


async def test_a_listing_leaves_a_memory_changed_exactly_a_lookback_before_the_head_unread(
        tmp_path):
    """Three memories written just before a full listing, the first exactly one lookback
    before the newest (the feed's head): the window the listing leaves unread starts
    after that write, so the listing counts two of them changed in it, not three. Two
    (at most MERGE) lets the first poll ask whether the window is that small: one
    request for one small page, not the two reads of a window known to be dense."""
    async with harness(tmp_path) as eng:
        for name in "abc":
            await eng.op_r_create(f"/{name}.md", name)
        times = {m.path: parse_time(m.updated_at)
                 async for m in eng.ctx.client.list_memories(eng.store_id)}
        assert times["/a.md"] < times["/b.md"] < times["/c.md"]
        lookback = times["/c.md"] - times["/a.md"]  # the head is c.md's write
        eng.reconciler.feed.lookback = lookback
        await eng.op_reconcile()
        feed = eng.reconciler.feed
        assert feed.position is not None and feed.unread_until == times["/c.md"]
        assert sorted(feed.listed.values()) == [times["/b.md"], times["/c.md"]]
        first = len(eng.transport.records)
        await eng.op_poll()
        polls = [r for r in eng.transport.records[first:]
                 if r.path.endswith("memory_versions")]
        assert [r.query.get("limit") for r in polls] == [str(feed_mod.MERGE + 1)]


async def test_their_swap_seen_at_once_is_followed_as_one_move(tmp_path, caplog):
    """Another writer swapped /a.md and /b.md through /t.md, and this listing sees only
    the end: each file's new place is held by the other, so neither rename can follow
    alone. They move together (an edit not pushed yet goes with its file), `memfs watch`
    hears both, and nothing is left waiting. Before, both waited for ever ("the place is
    taken locally") and the mount never showed the swap. Three in a ring too, seen by a
    poll of the feed."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B", c="C")
        ids = {p: eng.node(p).memory_id for p in ("/a.md", "/b.md", "/c.md")}
        await eng.op_write("/a.md", "A2")                  # not pushed
        for src, dst in (("/a.md", "/t.md"), ("/b.md", "/a.md"), ("/t.md", "/b.md")):
            await eng.op_r_rename(src, dst)
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        eng.ctx.take_invalidations()
        caplog.set_level(logging.INFO, logger="memfs.sync.reconciler")
        await eng.op_reconcile()
        said = "followed the server's renames of {} at once (they held each other's places)"
        assert said.format("/b.md, /a.md") in caplog.messages or \
            said.format("/a.md, /b.md") in caplog.messages
        root = eng.node("/").ino                           # both names, cached by the kernel
        assert sorted(set(eng.ctx.take_invalidations())) == [("entry", root, "a.md"),
                                                              ("entry", root, "b.md")]
        assert {p: eng.node(p).memory_id for p in ("/a.md", "/b.md")} == {
            "/a.md": ids["/b.md"], "/b.md": ids["/a.md"]}
        assert (eng.tree_sha("/a.md"), eng.tree_sha("/b.md")) == \
            (sha256(data("B")), sha256(data("A2")))
        heard = {(e.kind, e.path, e.old_path) for e in
                 (sub.receive.receive_nowait(), sub.receive.receive_nowait())}
        assert heard == {("renamed", "/a.md", "/b.md"), ("renamed", "/b.md", "/a.md")}
        assert not any("taken locally" in w for w in eng.ctx.status.warnings)
        for src, dst in (("/a.md", "/t.md"), ("/b.md", "/a.md"), ("/c.md", "/b.md"),
                         ("/t.md", "/c.md")):
            await eng.op_r_rename(src, dst)                # a→b→c→a, by their ids
        await eng.op_poll()                                # the feed sees the end too
        assert {p: eng.node(p).memory_id for p in ("/a.md", "/b.md", "/c.md")} == {
            "/a.md": ids["/a.md"], "/b.md": ids["/c.md"], "/c.md": ids["/b.md"]}
        await eng.op_push()
        assert {p: mid for p, (mid, _sha) in eng.server().items()} == {
            p: eng.node(p).memory_id for p in ("/a.md", "/b.md", "/c.md")}
        assert eng.server()["/a.md"] == (ids["/a.md"], sha256(data("A2")))  # the edit too


async def test_a_ring_waits_for_a_file_with_unsaved_writes_and_past_a_rename_blocked(tmp_path):
    """A ring of the server's renames moves only when none of its files holds unsaved
    writes (no rename of the server's takes a place from one): it waits for the close.
    Renames blocked for good in the same listing (/c.md onto a new file open with unsaved
    writes, listed first; /e.md into a directory where a new file stands) neither stop
    the ring nor keep the pass going round."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="A", b="B", c="C", e="E")
        ids = {p: eng.node(p).memory_id for p in ("/a.md", "/b.md", "/c.md")}
        await eng.op_write("/0.md", "new here")               # not pushed
        await eng.op_open_write("/0.md", "more here")
        await eng.op_r_rename("/c.md", "/0.md")            # listed first; it must wait
        await eng.op_write("/f.md", "a file here")            # not pushed either
        await eng.op_r_rename("/e.md", "/f.md/e.md")       # no directory can be made
        for src, dst in (("/a.md", "/t.md"), ("/b.md", "/a.md"), ("/t.md", "/b.md")):
            await eng.op_r_rename(src, dst)
        await eng.op_open_write("/b.md", "unsaved")
        await eng.op_reconcile()
        assert eng.node("/a.md").memory_id == ids["/a.md"]  # the ring waits for b's close
        await eng.op_close("/b.md")
        await eng.op_reconcile()
        assert {p: eng.node(p).memory_id for p in ("/a.md", "/b.md", "/c.md")} == {
            "/a.md": ids["/b.md"], "/b.md": ids["/a.md"], "/c.md": ids["/c.md"]}
        assert eng.tree_sha("/a.md") == sha256(data("unsaved"))  # b's file, saved, moved
        assert eng.node("/e.md") is not None                     # still waiting


# -- bytes written here while the listing read the server (decide.adopts) -----------


async def test_a_listing_read_before_a_write_of_its_bytes_does_not_take_them_as_synced(
        tmp_path):
    """Another writer wrote 'same' to a.md; a full listing reads it, and before its answer
    is applied they delete a.md and the user, not having heard, writes 'same' too. The
    listing's row (their 'same', equal to the file) is older than the user's write: taken
    as synced, their delete would then take a clean file, the user's write with it. It
    waits: the next poll reads the memory again (gone), and the file is kept as new and
    created again (found with the random search's violation, 6 December)."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        mid = eng.node("/a.md").memory_id
        await eng.op_r_edit("/a.md", "same")

        async def meanwhile() -> None:
            await eng.op_r_delete("/a.md")
            await eng.op_write("/a.md", "same")

        await held_pass(eng, "after", meanwhile, action=eng.op_reconcile)
        node = eng.node("/a.md")
        assert (node.memory_id, node.base_sha) == (mid, sha256(data("v1")))  # not taken
        assert mid in eng.reconciler.feed.rechecks
        await eng.op_poll()                    # read again: gone, the file kept as new
        await eng.op_push()
        assert eng.user_tree() == {"/a.md": sha256(data("same"))}
        [(new, sha)] = eng.server().values()
        assert new != mid and sha == sha256(data("same"))


async def test_a_new_memory_listed_before_a_new_file_of_its_bytes_is_not_adopted(tmp_path):
    """Another writer created c.md holding 'same'; a full listing reads it, and before its
    answer is applied they delete it and the user creates c.md with 'same'. Adopting
    their memory for the new file on the listing's word would let their delete take it:
    the row waits, and the next poll finds no memory; the file goes out as a create."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="v1")
        await eng.op_r_create("/c.md", "same")

        async def meanwhile() -> None:
            await eng.op_r_delete("/c.md")
            await eng.op_write("/c.md", "same")

        await held_pass(eng, "after", meanwhile, action=eng.op_reconcile)
        assert eng.node("/c.md").memory_id is None               # not adopted
        await eng.op_poll()
        await eng.op_push()
        assert eng.user_tree()["/c.md"] == sha256(data("same"))
        assert sha256(data("same")) in {sha for _mid, sha in eng.server().values()}
