"""Every change the sync side makes to identity, base, tombstones and conflicts.

`State` inherits these methods; nothing else in memfs writes a memory id, a
base, a tombstone or a conflict row. Each method is one synchronous SQLite
transaction with no checkpoint inside, so it is atomic against other trio
tasks and against a crash (a conflict row and the base that made it are
committed together, or neither is).

The pusher and the reconciler decide (memfs/core/decide.py); these methods
apply the decision to whoever holds the identity *now*: an answer to a request
sent for one node may arrive after that node was renamed, replaced by an
editor's rename-over, unlinked, or edited again.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from dataclasses import replace

from memfs.core import decide, paths
from memfs.core.backoff import doubled
from memfs.core.nodes import EMPTY_SHA, Node, PushTicket, Remote, Tombstone, is_parked
from memfs.state.schema import DOUBT_COLUMNS

log = logging.getLogger(__name__)

#: How many earlier contents of memories `State.former_sources` remembers.
FORMER_SOURCES_KEPT = 4096
#: How many memory ids `State.known` remembers (a store holds at most 2,000 memories;
#: what matters is every one known in the last minutes, see the `known` table).
KNOWN_KEPT = 8192

#: Per-file retry after a refusal that is neither transient nor about content
#: (403, 404 of the store, 422...): doubling from 2 s, at most this long.
MAX_FILE_BACKOFF = 600.0


def _refused_wait(fail_count: int) -> float:
    """Seconds a refused file or delete waits before its next try: 2, 4, 8 … up to ten
    minutes, also at a refusal repeated every ten minutes for a week (its 1,024th try
    would overflow a float without `doubled`'s bound, raised in the pusher's pass)."""
    return doubled(1.0, MAX_FILE_BACKOFF, fail_count)


class Deferred(Exception):
    """The file changed locally (or holds unsaved writes) since the decision was
    made: nothing was applied; the next pass decides again."""


class _NotFree(Exception):
    """A ring of moves met a place that is not free: undo them all."""


class SyncTransitions:
    # -- helpers (inside a transaction) --------------------------------------------

    def _mark_base(self, node: Node, remote: Remote) -> None:
        if node.memory_id and node.memory_id != remote.id:
            self._by_memory.pop(node.memory_id, None)
        elif node.base_sha and node.base_sha != remote.sha:
            self._note_source(node.base_sha, remote.id)  # its versions still hold it
        node.memory_id, node.base_path, node.base_sha = remote.id, remote.path, remote.sha
        self._by_memory[remote.id] = node.ino
        self._note_known(remote.id, remote.version)
        self.epoch += 1
        node.base_epoch = self.epoch
        if node.sha == remote.sha and node.dirty_since is not None \
                and self.in_tree(node) and self.path_of(node) == remote.path:
            node.dirty_since = None  # clean again: the next change starts the clock
        if remote.id in self._parks and not is_parked(remote.path):
            self._end_park(remote.id)

    def _end_park(self, memory_id: str) -> None:
        self._parks.pop(memory_id, None)
        self.db.execute("DELETE FROM parks WHERE memory_id=?", (memory_id,))

    def successor(self, ino: int) -> Node | None:
        """The node now standing for ino (itself, or whatever renamed over it)."""
        seen = set()
        while ino not in self._nodes and ino in self._replaced and ino not in seen:
            seen.add(ino)
            ino = self._replaced[ino]
        return self._nodes.get(ino)

    def _add_tombstone(self, remote: Remote) -> None:
        tomb = Tombstone(remote.id, remote.path, remote.sha, time.time())
        self._tombstones[remote.id] = tomb
        self._save_tombstone(tomb)

    def _add_conflict(self, path: str, memory_id: str | None, local_sha: str,
                      remote_sha: str | None, reason: str) -> int:
        cur = self.db.execute(
            "INSERT INTO conflicts (path, memory_id, local_sha, remote_sha, reason, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (path, memory_id, local_sha, remote_sha, reason, time.time()),
        )
        if memory_id:
            self._conflicted[memory_id] = self._conflicted.get(memory_id, 0) + 1
        return int(cur.lastrowid)

    def _remove_conflict(self, row: dict) -> None:
        self.db.execute("DELETE FROM conflicts WHERE id=?", (row["id"],))
        mid = row["memory_id"]
        if mid and mid in self._conflicted:
            self._conflicted[mid] -= 1
            if self._conflicted[mid] <= 0:
                del self._conflicted[mid]

    def _set_remote_content(self, node: Node, remote: Remote) -> None:
        self.on_content(node.ino)
        node.sha, node.size = remote.sha, remote.size
        node.mtime_ns = node.ctime_ns = time.time_ns()
        node.gen += 1
        node.refused_sha = node.refused_reason = None

    @staticmethod
    def _clear_error(item: Node | Tombstone) -> None:
        item.fail_count, item.retry_at, item.error = 0, None, None

    # -- pushes ---------------------------------------------------------------------

    def begin_push(self, node: Node, *, content: bool = True,
                   path: bool = True, to: str | None = None) -> PushTicket:
        """Record the request about to be sent: its sha on the node, and the request
        itself as in doubt until its answer is applied (a lost answer is then looked
        up on the server, memfs/sync/doubts.py). `content`/`path`: whether the
        request carries the content / the path; `to`: the path it sends when that is
        not the file's own (a park), which is where a lost answer is looked for."""
        assert node.sha is not None
        ticket = PushTicket(node.ino, node.memory_id, node.sha, to or self.path_of(node),
                            node.base_sha, node.gen, node.sent_sha, content, path,
                            time.time(), self.seen_version(node.memory_id or ""))
        with self.transaction():
            node.sent_sha = node.sha
            self._save(node)
            cur = self.db.execute(
                f"INSERT INTO doubts ({', '.join(DOUBT_COLUMNS[:-1])}) "
                f"VALUES ({', '.join('?' * (len(DOUBT_COLUMNS) - 1))})",
                [getattr(ticket, c) for c in DOUBT_COLUMNS[:-1]])
            ticket = replace(ticket, doubt=int(cur.lastrowid))
            self._doubts[ticket.doubt] = ticket
        return ticket

    def _end_doubt(self, ticket: PushTicket) -> None:
        if ticket.doubt is not None and self._doubts.pop(ticket.doubt, None) is not None:
            self.db.execute("DELETE FROM doubts WHERE id=?", (ticket.doubt,))

    def _move_doubts(self, ino: int, to: int) -> None:
        """ino's file was replaced by `to` (a rename over it): its doubts go with it."""
        for key, ticket in list(self._doubts.items()):
            if ticket.ino == ino:
                self._doubts[key] = replace(ticket, ino=to)
                self.db.execute("UPDATE doubts SET ino=? WHERE id=?", (to, key))

    def doubt_of(self, node: Node) -> PushTicket | None:
        """The request for node's file (or its memory) whose outcome is unknown."""
        for ticket in self._doubts.values():
            if ticket.ino == node.ino or (ticket.memory_id is not None
                                          and ticket.memory_id == node.memory_id):
                return ticket
        return None

    def push_answered(self, ticket: PushTicket) -> None:
        """The server answered ticket's request with a refusal: it was not applied
        (what the refusal means is applied by the caller)."""
        with self.transaction():
            self._end_doubt(ticket)

    def push_superseded(self, ticket: PushTicket) -> None:
        """ticket's request was applied and a later write came over it, which this file
        has taken since (its base is neither what the request was sent against nor what
        it wrote): the base stands, and what the request sent is no longer in flight."""
        with self.transaction():
            self._end_doubt(ticket)
            self._end_send(ticket, None)

    def push_unanswered(self, ticket: PushTicket, *, maybe_applied: bool) -> None:
        """No answer came. Unless the request provably never reached the server (the
        connection was refused), its row stays: the request is in doubt."""
        if maybe_applied:
            return
        self.push_not_applied(ticket)

    def push_overtaken(self, ticket: PushTicket, remote: Remote, remote_sha: str | None,
                       reason: str) -> tuple[int, str] | None:
        """ticket's request is taken as having written `remote` (a create's memory as
        created; an update's version holding its bytes), which another writer has changed
        since (to remote_sha) or deleted (None): whether the write there was ours, the
        server cannot tell (`decide.created_row`, `decide.doubt_row`). Its answer is
        applied, so the memory's state stands and nothing deleted comes back; the file,
        if it still holds what the request wrote, first has those bytes kept as a
        conflict, so that what the user wrote survives another writer's bytes taken for
        ours. (conflict id, path) or None when nothing needed keeping."""
        kept = None
        with self.batch():
            if ticket.memory_id is None:
                node = self.ticket_node(ticket)
                node = node if node is not None and node.memory_id is None else None
            else:
                node = self.holder(ticket.memory_id)
            if node is not None and self.in_tree(node) and node.sha == ticket.sha:
                path = self.path_of(node)
                kept = (self._add_conflict(path, remote.id, ticket.sha, remote_sha, reason),
                        path)
            # A memory the server shows deleted is not given back to a file moved over
            # the created path: their delete would take that file, which holds a
            # memory of its own (`_take_back`).
            self.push_landed(ticket, remote, take_back=remote_sha is not None)
        return kept

    def push_not_applied(self, ticket: PushTicket) -> None:
        """The request of ticket never took effect (the server shows no trace of it):
        forget it; whatever its file holds now goes out as if it had never been sent."""
        with self.transaction():
            self._end_doubt(ticket)
            self._end_send(ticket, ticket.previous_sent)

    def _end_send(self, ticket: PushTicket, sent: str | None) -> None:
        """What ticket's request sent is no longer in flight for its file (or pending
        delete): `sent` is in flight instead (the send before it, or none)."""
        item = self.ticket_node(ticket)
        if item is None and ticket.memory_id is not None:
            item = self._tombstones.get(ticket.memory_id)
        if item is not None and item.sent_sha == ticket.sha:
            item.sent_sha = sent
            if isinstance(item, Node):
                self._save(item)
            else:
                self._save_tombstone(item)

    def push_landed(self, ticket: PushTicket, remote: Remote, *,
                    take_back: bool = True) -> Node | None:
        """The server now holds `remote` because of ticket's request.

        An update settles on the memory's holder now, whoever that is; a create
        on the node (or its rename-over successor) if it still has no memory.
        A memory that nothing can hold any more (the file was unlinked, or its
        successor has a memory of its own) becomes a tombstone: deleted after the
        delay, preconditioned on exactly what we wrote; a file at the created path that
        holds its bytes takes it back (`_take_back`) unless `take_back` is False."""
        with self.transaction():
            self._end_doubt(ticket)
            update = ticket.memory_id is not None
            known = self.holder(remote.id) if update else None
            path, sha = decide.answer_base(
                (remote.path, remote.sha),
                (known.base_path, known.base_sha) if known else (None, None),
                update=update, path_sent=ticket.path_sent, ours=_ours(ticket, remote.sha))
            remote = replace(remote, path=path, sha=sha)
            self._note_known(remote.id, remote.version)
            if ticket.memory_id is not None:
                holder = self.holder(remote.id)
                if holder is not None:
                    return self._landed_on(holder, ticket, remote)
                tomb = self._tombstones.get(remote.id)
                if tomb is not None:
                    tomb.base_path, tomb.base_sha, tomb.sent_sha = remote.path, remote.sha, None
                    self._save_tombstone(tomb)
                else:
                    # Nothing holds it: the file let the memory go while the request was
                    # in doubt (another writer deleted it, and a listing kept the edited
                    # file as a new one, `Absent.KEEP_AS_NEW`). Were it still there, the
                    # next listing would add it back.
                    log.info("memory %s answered for no local file; a listing shows it "
                             "if it is still there", remote.id)
                return None
            holder = self.successor(ticket.ino)
            if (holder is not None and holder.memory_id is None
                    and not self.is_local_only_name(holder)):
                return self._landed_on(holder, ticket, remote)
            if remote.id in self._by_memory:
                return None
            # The file is gone (unlinked, or its directory removed or moved: then its
            # successor lives elsewhere). A new file at the created path, not sent
            # yet, revives the memory, as at a tombstoned path; else it is deleted
            # after the delay, preconditioned on exactly what we wrote.
            again = self.lookup_path(remote.path)
            if (again is not None and not again.is_dir and again.memory_id is None
                    and not self.is_local_only_name(again) and self.doubt_of(again) is None):
                self._mark_base(again, remote)
                self._save(again)
                return again
            self._add_tombstone(remote)
            if (take_back and again is not None and not again.is_dir
                    and again.memory_id is not None):
                # The file that made it, moved over another file (taking that one's
                # memory) and back: if it holds what it created, it is that memory
                # again (docs/SEMANTICS.md, rename), as had the answer come first.
                self._take_back(again)
                self._save(again)
            return None

    def _landed_on(self, holder: Node, ticket: PushTicket, remote: Remote) -> Node:
        self._mark_base(holder, remote)
        if holder.sent_sha in (ticket.sha, remote.sha):
            holder.sent_sha = None
        # Changed since it was sent: the next push is due max_push_delay from now.
        holder.dirty_since = time.time() if self.is_dirty(holder) else None
        self._clear_error(holder)
        self._save(holder)
        return holder

    def push_refused(self, ticket: PushTicket, reason: str) -> None:
        """The server refused this content (400/413): retried only once it changes."""
        with self.transaction():
            node = self._ticket_holder(ticket)
            if node is not None:
                node.refused_sha, node.refused_reason = ticket.sha, reason
                node.sent_sha = ticket.previous_sent
                self._save(node)

    def refuse_locally(self, node: Node, reason: str) -> None:
        """Content or path that can never be a memory (checked before sending)."""
        with self.transaction():
            node.refused_sha, node.refused_reason = node.sha, reason
            self._save(node)

    def push_failed(self, ticket: PushTicket, message: str, *,
                    transient: bool) -> None:
        """One file's request failed. A transient failure only forgets nothing (its
        sent sha stays: the request may have landed); any other refusal also makes
        this file wait, doubling, while every other change goes out."""
        with self.transaction():
            node = self._ticket_holder(ticket)
            if node is None:
                return
            if not transient:
                self._wait_refused(node, message)
            self._save(node)

    def content_unreadable(self, node: Node, message: str) -> None:
        """A file whose content must be read back from the server before it can be
        pushed (taken from it and never read, then moved over another file), and that
        read was refused: it waits as a refused request does."""
        with self.transaction():
            self._wait_refused(node, message)
            self._save(node)

    def _wait_refused(self, node: Node, message: str) -> None:
        node.fail_count += 1
        node.retry_at = time.time() + _refused_wait(node.fail_count)
        node.error = message

    def _ticket_holder(self, ticket: PushTicket) -> Node | None:
        """Who a failure of ticket's request belongs to: the memory's holder, or the
        created node (or its successor) while it still has no memory."""
        if ticket.memory_id is not None:
            return self.holder(ticket.memory_id)
        node = self.successor(ticket.ino)
        return node if node is not None and node.memory_id is None else None

    def ticket_node(self, ticket: PushTicket) -> Node | None:
        """The file ticket's request was for, now: the memory's holder, or the created
        node or the node that took its place."""
        if ticket.memory_id is not None:
            return self.holder(ticket.memory_id)
        return self.successor(ticket.ino)

    def forget_memory(self, node: Node) -> None:
        """The server no longer has node's memory (confirmed): node becomes a new,
        unsynced file; its next push is a create."""
        with self.transaction():
            self._forget(node)

    def _forget(self, node: Node) -> None:
        """node's memory is gone from the server: node becomes a new file. The memory's
        versions still hold its base content: remembered as a source of that sha."""
        if node.memory_id:
            self._by_memory.pop(node.memory_id, None)
            if node.base_sha:
                self._note_source(node.base_sha, node.memory_id)
        node.memory_id = node.base_path = node.base_sha = node.sent_sha = None
        self._save(node)

    def _note_source(self, sha: str, memory_id: str) -> None:
        """memory_id held sha once (its versions keep it): a source for a file whose
        content was taken from the server and never read, after that memory moved on
        or went (fetcher.recover). The newest few thousand, kept across restarts."""
        self._former_sources.pop(sha, None)
        self._former_sources[sha] = memory_id
        self.db.execute("INSERT OR REPLACE INTO sources VALUES (?, ?)", (sha, memory_id))
        if len(self._former_sources) > FORMER_SOURCES_KEPT:
            oldest = next(iter(self._former_sources))
            del self._former_sources[oldest]
            self.db.execute("DELETE FROM sources WHERE sha=?", (oldest,))

    def _note_known(self, memory_id: str, version: str | None = None) -> None:
        """This mount holds memory_id: never taken for what a lost create made. `version`:
        one of its versions, seen now, so the newest seen (a request sent from now on is
        newer, `begin_push`); None leaves the one noted before."""
        if memory_id in self._known:
            if version is not None and self._known[memory_id] != version:
                self._known[memory_id] = version
                self.db.execute("UPDATE known SET version=? WHERE memory_id=?",
                                (version, memory_id))
            return
        self._known[memory_id] = version
        self.db.execute("INSERT OR IGNORE INTO known VALUES (?, ?)", (memory_id, version))
        if len(self._known) > KNOWN_KEPT:
            oldest = next(iter(self._known))
            del self._known[oldest]
            self.db.execute("DELETE FROM known WHERE memory_id=?", (oldest,))

    def begin_park(self, memory_id: str, path: str) -> None:
        """Journal a park before its request goes out (see the parks table)."""
        with self.transaction():
            self._parks[memory_id] = path
            self.db.execute("INSERT OR REPLACE INTO parks VALUES (?, ?, ?)",
                            (memory_id, path, time.time()))

    # -- tombstones -------------------------------------------------------------------

    def tombstone_settled(self, memory_id: str) -> None:
        """The delete went out, the memory was already gone, or the server changed it
        (then the reconciler brings the server's version back)."""
        with self.transaction():
            self._drop_tombstone(memory_id)

    def tombstone_sending(self, memory_id: str) -> None:
        """Its DELETE goes out now: from here the memory may be gone before we hear so
        (a lost answer), and a file made at its path no longer revives it."""
        with self.transaction():
            tomb = self._tombstones[memory_id]
            tomb.delete_sent_at = time.time()
            self._save_tombstone(tomb)

    def tombstone_failed(self, memory_id: str, message: str) -> None:
        """The server refused the DELETE (it deleted nothing): retried after a backoff."""
        with self.transaction():
            tomb = self._tombstones.get(memory_id)
            if tomb is None:
                return
            tomb.fail_count += 1
            tomb.retry_at = time.time() + _refused_wait(tomb.fail_count)
            tomb.error = message
            self._not_deleted(tomb)

    def tombstone_moved(self, memory_id: str, path: str) -> None:
        """The server shows a memory our delete waits for at another path (another
        writer moved it, or a rename of ours whose answer was lost did): the pending
        delete follows it there, so that a file made at its old path is not taken for
        it (`_revive`): that file would hold a memory the server keeps elsewhere, and
        neither would ever be pushed. (Asked of every pending delete a listing meets:
        one where it was opens no transaction.)"""
        tomb = self._tombstones.get(memory_id)
        if tomb is None or tomb.base_path == path:
            return
        with self.transaction():
            tomb.base_path = path
            self._save_tombstone(tomb)

    def tombstone_rebased(self, memory_id: str, sha: str, path: str) -> None:
        """The DELETE met `sha` (at `path`), which we wrote ourselves (a lost answer):
        not deleted."""
        with self.transaction():
            tomb = self._tombstones.get(memory_id)
            if tomb is not None:
                tomb.base_sha, tomb.sent_sha, tomb.base_path = sha, None, path
                self._not_deleted(tomb)

    def _not_deleted(self, tomb: Tombstone) -> None:
        """The server kept tomb's memory (it refused the DELETE): revivable again. A file
        made at its path while the DELETE was out (so without a memory of its own) takes
        it now, as it would have had the DELETE not gone out yet."""
        tomb.delete_sent_at = None
        node = self.lookup_path(tomb.base_path)
        if node is not None and not node.is_dir and node.memory_id is None \
                and not self.is_local_only_name(node):
            self._give(node, tomb)
            self._save(node)
        else:
            self._save_tombstone(tomb)

    # -- what the server says ----------------------------------------------------------

    def adopt_own_write(self, node: Node, remote: Remote) -> None:
        """The server holds what we sent (or what we hold): our answer was lost."""
        with self.transaction():
            self._mark_base(node, remote)
            if node.sent_sha == remote.sha:
                node.sent_sha = None
            self._save(node)

    def remote_content(self, node: Node, remote: Remote, *, gen: int | None = None) -> None:
        """A clean file changed on the server: take the new content (lazily fetched).

        Raises Deferred when the file is no longer clean, or (with `gen`) changed
        locally since the caller looked."""
        with self.transaction():
            if (not self.in_tree(node) or node.ino in self._open_dirty
                    or node.sha != node.base_sha or (gen is not None and node.gen != gen)):
                raise Deferred
            self._set_remote_content(node, remote)
            self._mark_base(node, Remote(remote.id, node.base_path or remote.path, remote.sha))
            node.sent_sha = None
            self._save(node)

    def take_remote(self, node: Node, remote: Remote, reason: str, *, gen: int,
                    tombstone_own: bool = False) -> int | None:
        """Conflict: the server's version wins in the tree, the local one is kept.

        Compare-and-set on `gen`: the caller fetched `remote` at gen; if the file
        changed since, or holds unsaved writes, nothing happens (Deferred). The
        conflict row, the new content and the new base commit together. Returns
        the conflict id (None when only a rename was lost: no content lost).
        `tombstone_own`: node's own memory (a rename that lost its target path to
        a stranger) is deleted after the delay."""
        with self.transaction():
            if not self.in_tree(node) or node.gen != gen or node.ino in self._open_dirty:
                raise Deferred
            cid = None
            # Only local *content* can lose: a file merely renamed here (its sha
            # still its base) takes the server's content with no conflict. Against
            # a stranger's memory (tombstone_own) all of ours is local content, kept
            # even when its bytes are theirs: our memory is deleted, the file is theirs
            # now, and their delete of it would leave our content nowhere live.
            ours = node.sha != node.base_sha or tombstone_own
            if (node.sha and (node.sha != remote.sha or tombstone_own) and ours
                    and not (node.memory_id is None and node.sha == EMPTY_SHA)):
                cid = self._add_conflict(self.path_of(node), remote.id, node.sha, remote.sha,
                                         reason)
            if tombstone_own:
                self._tombstone(node)
            self._set_remote_content(node, remote)
            self._mark_base(node, remote)
            node.sent_sha = None
            self._clear_error(node)
            self._save(node)
            return cid

    def remote_moved(self, node: Node, path: str) -> bool:
        """Follow the server's rename; False when the place is taken locally.

        The server decided who holds `path`, so a local claim on it yields: a file
        that never reached the server (and has no unsaved writes) leaves the tree,
        its content kept as a conflict row, as for a create that lost its path; one
        of our memories renamed there locally (not pushed yet) goes back to its own
        path (claimed the same way), its content changes kept. All in one
        transaction."""
        with self.transaction():
            if not self._claim(path, node, set()):
                return False
            if not self._move(node, path):
                return False
            node.base_path = path
            self._save(node)
            return True

    def remote_moved_in_a_ring(self, moves: list[tuple[Node, str]]) -> bool:
        """Follow the server's renames of files that each hold the next one's new place
        (a ring: another writer's swap a↔b, through a third name, seen at once), all in
        one transaction: each first to a name aside in its own directory, then to its
        place. False, and nothing moved, when a place is not free even so."""
        try:
            with self.transaction():
                for node, _path in moves:
                    if not self._move(node, self._aside(node)):
                        raise _NotFree
                for node, path in moves:
                    if not self._move(node, path):
                        raise _NotFree
                    node.base_path = path
                    self._save(node)
        except _NotFree:
            return False  # (the transaction undid every move)
        return True

    def _aside(self, node: Node) -> str:
        """A name beside node no one else uses, for the instant of a swap."""
        return self.path_of(node).rsplit("/", 1)[0] + f"/.memfs-swap-{node.ino}"

    def _claim(self, path: str, winner: Node, seen: set[int]) -> bool:
        """Free `path` for winner's memory, which the server placed there."""
        dir_path, name = paths.split(path)
        parent = self.ensure_dir(dir_path)
        if parent is None:
            return False
        taker = self.child(parent, name)
        if taker is None or taker is winner:
            return True
        if taker.is_dir or taker.ino in self._open_dirty or self.is_local_only_name(taker) \
                or taker.ino in seen:
            return False
        server_placed = not seen  # winner is where the server put it, not one sent back
        seen.add(taker.ino)
        if taker.memory_id is not None:
            back = taker.base_path
            if server_placed and back and back != path and self.lookup_path(back) is winner:
                return self._swap(winner, taker, path, back)
            if not back or back == path or not self._claim(back, taker, seen) \
                    or not self._move(taker, back):
                return False
            log.warning("%s: renamed here, but the server gave that path to another "
                        "memory first; moved back to %s", path, back)
            return True
        if taker.sha and taker.sha != EMPTY_SHA and taker.sha != winner.sha:
            self._add_conflict(path, winner.memory_id, taker.sha, winner.base_sha,
                               "the server gave this path to another memory")
        self._drop(taker)
        return True

    def _swap(self, winner: Node, taker: Node, path: str, back: str) -> bool:
        """A swap of places (our a→c not pushed; their b→c and a→b): winner, which the
        server put at `path` where taker is, stands at `back`, where taker's memory
        belongs. Winner steps aside (a fresh name in its own directory), taker goes back
        to the place winner left; the caller then puts winner at path. Neither move can
        fail, and no await runs between them: no one sees the name aside."""
        self._move(winner, self._aside(winner))
        self._move(taker, back)
        log.warning("%s: renamed here, but the server gave that path to another memory, "
                    "whose place was %s; the two swapped, moved back", path, back)
        return True

    def _move(self, node: Node, path: str) -> bool:
        """Move node to path if that place is free (inside a transaction)."""
        dir_path, name = paths.split(path)
        parent = self.ensure_dir(dir_path)
        if parent is None or name in parent.children:
            return False
        old_parent = self._nodes[node.parent]
        del old_parent.children[node.name]
        node.parent, node.name = parent.ino, name
        parent.children[name] = node.ino
        node.ctime_ns = time.time_ns()
        self._save(node)
        self.prune(old_parent)
        return True

    def remote_base_path(self, node: Node, path: str) -> None:
        """Renamed on both sides: the server's path becomes the base, ours goes out."""
        with self.transaction():
            node.base_path = path
            self._save(node)

    def remote_deleted(self, node: Node, *, keep: bool) -> None:
        """The server deleted node's memory (confirmed by a 404). `keep` (the file
        changed here: content, a local rename or unsaved writes): the file stays
        and becomes a create (on a read-only mount, local only); else it goes."""
        with self.transaction():
            if keep:
                self._forget(node)
                return
            if node.memory_id:
                self._by_memory.pop(node.memory_id, None)
            parent = self._nodes[node.parent]
            self._drop(node)
            self.prune(parent)

    def add_remote(self, remote: Remote) -> Node | None:
        """A memory new to this mount: add its file (content fetched lazily).
        A tombstone of the same memory (deleted here, changed there) is cancelled."""
        with self.transaction():
            dir_path, name = paths.split(remote.path)
            parent = self.ensure_dir(dir_path)
            if parent is None or name in parent.children:
                return None
            self._drop_tombstone(remote.id)
            now = time.time_ns()
            node = Node(self._next_ino, parent.ino, name, False, stat.S_IFREG | 0o644,
                        os.getuid(), os.getgid(), now, now, now, sha=remote.sha,
                        size=remote.size)
            self._next_ino += 1
            self._nodes[node.ino] = node
            parent.children[name] = node.ino
            self._mark_base(node, remote)
            self._save(node)
            self.on_added(node.ino)
            return node

    # -- conflicts ------------------------------------------------------------------------

    def restore_conflict(self, cid: int, size: int) -> tuple[Node, bool]:
        """Put conflict cid's local content back as an ordinary local change.

        A newer local edit that is not on the server is never overwritten: it
        becomes a conflict row of its own in the same transaction. Returns
        (node, created). Raises LookupError / ValueError with the reason."""
        with self.transaction():
            row = self.get_conflict(cid)
            if row is None:
                raise LookupError(f"no conflict #{cid}")
            node = self.holder(row["memory_id"]) if row["memory_id"] else None
            if node is None:
                node = self.lookup_path(row["path"])
            if node is not None and node.is_dir:
                raise ValueError(f"{row['path']} is a directory now; move it away to restore "
                                 f"conflict #{cid}")
            if node is not None and node.ino in self._open_dirty:
                raise ValueError(f"{self.path_of(node)} is open with unsaved changes; close "
                                 "it and try again")
            created = node is None
            if node is None:
                dir_path, name = paths.split(row["path"])
                parent = self.ensure_dir(dir_path)
                if parent is None:
                    raise ValueError(f"cannot restore {row['path']}: a file stands where its "
                                     "directory should be")
                now = time.time_ns()
                node = Node(self._next_ino, parent.ino, name, False, stat.S_IFREG | 0o644,
                            parent.uid, parent.gid, now, now, now, sha=EMPTY_SHA)
                self._next_ino += 1
                self._nodes[node.ino] = node
                parent.children[name] = node.ino
                self._revive(node)
            elif (node.sha not in (row["local_sha"], node.base_sha)
                  and not self.is_refused(node)):
                newer = self._add_conflict(
                    self.path_of(node), node.memory_id, node.sha, row["local_sha"],
                    f"your pending edit, replaced by restoring conflict #{cid}")
                log.info("restore #%d: the pending edit of %s is kept as conflict #%d",
                         cid, self.path_of(node), newer)
            self._remove_conflict(row)
            self.on_content(node.ino)
            node.sha, node.size = row["local_sha"], size
            node.mtime_ns = node.ctime_ns = time.time_ns()
            node.refused_sha = node.refused_reason = None
            self._touch(node)
            self._save(node)
            return node, created

    def discard_conflict(self, cid: int) -> dict:
        with self.transaction():
            row = self.get_conflict(cid)
            if row is None:
                raise LookupError(f"no conflict #{cid}")
            self._remove_conflict(row)
            return row

    def import_conflicts(self, rows: list[tuple]) -> None:
        """Preserved versions carried over from another state directory (adoption):
        (path, memory_id, local_sha, remote_sha, reason) each, in one transaction."""
        with self.transaction():
            for path, memory_id, local_sha, remote_sha, reason in rows:
                self._add_conflict(path, memory_id, local_sha, remote_sha, reason)


def _ours(ticket: PushTicket, sha: str) -> bool:
    """Whether an answer holding `sha` is what ticket's request (or an earlier one of ours)
    wrote: the table's question asked of a ticket."""
    return decide.written_by_us(sha, sent=ticket.sha, previous_sent=ticket.previous_sent,
                                base_sha=ticket.base_sha, content_sent=ticket.content_sent)
