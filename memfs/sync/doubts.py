"""Requests whose answer was lost: ask the server what happened, then apply that.

A request can reach the server and be applied while its answer never arrives (a
connection reset after the commit, a proxy timeout, a laptop going to sleep, a
daemon killed while waiting). `State.begin_push` journals every request in the
`doubts` table before it goes out, and the transaction that applies its answer
removes the row; a row left over is a request in doubt.

Until a doubt is resolved nothing more is sent for its file: a push pass and a
reconcile pass both resolve every doubt first (under the sync lock), so a local
change made meanwhile is applied to whatever the server did. The lost answer is
recovered from the server (`decide.doubt_row`) and applied exactly as if it had
arrived (`State.push_landed`, to whoever holds the identity now): after an
unlink the memory the create made becomes a pending delete preconditioned on
what we wrote; after a rename, or a rename of a directory above, it is moved; after
an edit, it is updated. A request with no trace on the server is forgotten
(`State.push_not_applied`), and the file's state goes out as if it had never
been sent, but only `SyncOptions.lost_answer_wait` after its answer was lost: a
server may apply a request after its client gave up on the answer, and one applied
after memfs forgot it would undo the local change made since (a deleted file back,
a renamed one twice). Until then it is asked about again at every pass, and nothing
is sent for its file, nor for a file at the path it wrote.

What it costs: one `GET` per update in doubt (plus the memory's versions since it
was sent when the memory no longer holds our write), and for all the creates in
doubt together one listing of the versions created since the oldest was sent
(`operation=created`, newest first, `models.SKEW` earlier to allow for the server's
clock), plus one `GET` of the memory each such creation of a create's bytes at its
path made: another writer's create of the same bytes there a little earlier looks
the same, which matters only once that memory changed or went (`decide.created_row`).
An update's bytes in a version the server records as another writer's look the same
too (an update that finds its bytes there makes no version): once that memory changed
or went, its state stands and the file's bytes are kept as a conflict.
Doubts are rare: only a request that got no answer makes one.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from memfs.api import errors as api_errors
from memfs.api.models import Memory, MemoryVersion, versions_since
from memfs.core import decide
from memfs.core.nodes import PushTicket, Remote
from memfs.sync.common import SyncContext, gather_bounded, remote_of

log = logging.getLogger(__name__)
T = TypeVar("T")

@dataclass
class Resolved:
    """What one resolution did: requests resolved, and of those, applied (their change
    reached the server: a push, counted as one)."""

    resolved: int = 0
    applied: int = 0
    #: Memories whose state the next poll must read again, whatever the feed has shown:
    #: a write there taken as ours once another writer had changed or deleted it
    #: (OVERTAKEN).
    reread: list[str] = field(default_factory=list)


async def resolve(ctx: SyncContext, done: Resolved) -> None:
    """Resolve every request in doubt, telling `done` as each one is. Called with the
    sync lock held. A transient error propagates (the pass goes offline and the doubts
    not resolved yet stay); `done` then holds what was resolved before it, which the
    caller still counts and passes on. Any other refusal leaves that doubt for the next
    pass."""
    st = ctx.state
    for gone in set(ctx.doubt_lost_at) - set(st.doubts):  # (a row id may be given again)
        del ctx.doubt_lost_at[gone]
    if not st.doubts:
        return
    tickets = list(st.doubts.values())
    creates = [t for t in tickets if t.memory_id is None]
    updates = [t for t in tickets if t.memory_id is not None]

    async def one_update(ticket: PushTicket) -> None:
        await _resolve_update(ctx, ticket, done)

    await gather_bounded(updates, one_update, ctx.options.push_concurrency)
    if creates:
        await _resolve_creates(ctx, creates, done)


def _seen(v: Memory | MemoryVersion, writer: dict | None) -> decide.Seen:
    """`writer`: this mount's (`SyncContext.writer`), to tell versions that may be
    another writer's (`decide.maybe_another_writer`: all but ours, while it is unknown)."""
    if isinstance(v, Memory):  # the memory now: `doubt_row` reads its path and sha only
        return decide.Seen(v.path, v.content_sha256)
    return decide.Seen(v.path, v.content_sha256, v.operation, v.id,
                       decide.maybe_another_writer(writer, v.created_by))


async def _learn_writer(ctx: SyncContext, holding: list[MemoryVersion]) -> None:
    """A version holding our write, recorded as someone's, is ours or another writer's:
    before deciding, learn who this mount writes as if the feed has not told it yet (one
    read of its witness, a creation or deletion of its own, once). Unknown, such a
    version may be theirs (`decide.maybe_another_writer`): changed or gone since, the
    user's write is kept as a conflict, perhaps needlessly."""
    if ctx.writer is None and any(v.created_by for v in holding):
        await ctx.learn_writer_now()


def _young(ctx: SyncContext, ticket: PushTicket) -> bool:
    """Whether the server may still apply the request: its answer was lost (no answer,
    or a gateway's timeout) less than `SyncOptions.lost_answer_wait` ago. A request
    whose send was cut short (cancelled) or that a previous daemon left counts from when
    it was sent or this daemon started, whichever is later."""
    return _left(ctx, ticket) > 0


def _left(ctx: SyncContext, ticket: PushTicket) -> float:
    """Seconds the request may still land in (<= 0: no longer)."""
    lost = ctx.doubt_lost_at.get(ticket.doubt, max(ticket.sent_at, ctx.started_at))
    return -1.0 if lost is None else ctx.options.lost_answer_wait - (ctx.wall() - lost)


def wait_left(ctx: SyncContext) -> float | None:
    """Seconds until the first request in doubt that may still land no longer may (its
    lost-answer wait over); None when none may."""
    left = [s for s in (_left(ctx, t) for t in ctx.state.doubts.values()) if s > 0]
    return min(left) if left else None


def _apply(ctx: SyncContext, ticket: PushTicket, row: decide.Doubt,
           remote: Remote | None, done: Resolved, *, now: Memory | None = None) -> None:
    st = ctx.state
    if row is decide.Doubt.NOT_YET:
        # No trace of it yet, or (a create) only a like creation changed since, which it
        # may still turn out not to be: the wait decides.
        log.info("request in doubt for %s: not settled yet; asked again until "
                 "%g s after its answer was lost", ticket.path,
                 ctx.options.lost_answer_wait)
        return
    done.resolved += 1
    if row is decide.Doubt.SUPERSEDED:  # applied; a later version, taken since, stands
        log.info("request in doubt for %s: applied on the server, and written over since",
                 ticket.path)
        st.push_superseded(ticket)
        return
    if row is decide.Doubt.NOT_APPLIED or remote is None:
        log.info("request in doubt for %s: not applied on the server", ticket.path)
        st.push_not_applied(ticket)
        return
    if row is decide.Doubt.OVERTAKEN:
        what = "deleted" if now is None else "changed"
        if ticket.memory_id is None:
            why = (f"created here, its answer lost; a memory created with the same bytes "
                   f"at that path was {what} by another writer since, and the server "
                   "cannot tell whether it was ours")
            told = f"its create made the memory another writer has {what} since"
        elif ctx.writer is not None:
            why = (f"written here, its answer lost; another writer wrote the same bytes "
                   f"to the memory and {what} it since, and the server cannot tell "
                   "whether ours was applied")
            told = f"its write reached the memory another writer has {what} since"
        else:  # `decide.maybe_another_writer`: not known to be ours, so perhaps theirs
            why = (f"written here, its answer lost; the memory held the same bytes, "
                   f"another writer {what} it since, and this mount, which has not "
                   "learned who it writes as, cannot tell whether those bytes were ours")
            told = f"its write reached the memory another writer has {what} since"
        kept = st.push_overtaken(ticket, remote, None if now is None else now.content_sha256,
                                 why)
        if kept is not None:
            ctx.events.conflict(kept[1], remote.id, now.memory_version_id if now else None)
            ctx.status.note(f"conflict #{kept[0]} at {kept[1]}: could not tell whether "
                            f"{told}; the server's state is in the tree, yours is kept "
                            "(memfs conflicts)")
        done.reread.append(remote.id)
        ctx.kick_reconcile()
        return
    log.info("request in doubt for %s: applied on the server (%s); its lost answer is "
             "applied now", ticket.path, remote.id)
    st.push_landed(ticket, remote)
    done.applied += 1
    ctx.events.pushed(remote.path, memory_id=remote.id)
    ctx.kick()


def _base_moved(ctx: SyncContext, ticket: PushTicket) -> bool:
    """Whether the base of the request's memory is neither what the request was sent
    against nor what it wrote: then a later read of the server set it."""
    st = ctx.state
    item = st.holder(ticket.memory_id) or st.tombstones.get(ticket.memory_id)
    return item is not None and item.base_sha not in (ticket.base_sha, ticket.written[1])


async def _ask(ctx: SyncContext, what: str, read: Callable[[], Awaitable[T]]) -> T | None:
    """`await read()`. A transient error propagates (the pass goes offline); any other
    refusal is noted and gives None: that doubt waits for the next pass."""
    try:
        return await read()
    except (*api_errors.TRANSIENT, api_errors.AuthenticationError):
        raise
    except api_errors.APIError as exc:
        ctx.status.note(f"cannot tell whether {what} reached the server ({exc}); it waits")
        return None


async def _resolve_update(ctx: SyncContext, ticket: PushTicket, done: Resolved) -> None:
    assert ticket.memory_id is not None
    client, store = ctx.client, ctx.store_id
    written = ticket.written

    async def read() -> tuple[Memory | None, list[MemoryVersion]]:
        head = await client.find_memory(store, ticket.memory_id, view="basic")
        if head is not None and decide.holds(written, head.path, head.content_sha256):
            return head, []
        history = [v async for v in client.list_versions(
            store, memory_id=ticket.memory_id, created_gte=versions_since(ticket.sent_at))]
        await _learn_writer(ctx, [v for v in history if decide.holds(
            written, v.path, v.content_sha256)])
        return head, history

    got = await _ask(ctx, f"the change to {ticket.path}", read)
    if got is None:
        return
    head, history = got
    row = decide.doubt_row(written, _seen(head, ctx.writer) if head else None,
                           [_seen(v, ctx.writer) for v in history],
                           base_moved=_base_moved(ctx, ticket),
                           young=_young(ctx, ticket),
                           base=ticket.base_sha if written[1] != ticket.base_sha else None,
                           after=ticket.after_version)
    remote = None
    if row is decide.Doubt.APPLIED:
        assert head is not None
        remote = remote_of(head)
    elif row in (decide.Doubt.APPLIED_BEFORE, decide.Doubt.OVERTAKEN):
        v = next(v for v in history if v.operation != "deleted"
                 and decide.holds(written, v.path, v.content_sha256))
        remote = Remote(ticket.memory_id, v.path, v.content_sha256, v.content_size_bytes or 0,
                        v.id)
    _apply(ctx, ticket, row, remote, done, now=head)


async def _resolve_creates(ctx: SyncContext, tickets: list[PushTicket],
                           done: Resolved) -> None:
    """One read of the versions created since the oldest create in doubt was sent, and
    of each memory found there, its head (`decide.created_row`)."""
    since = versions_since(min(t.sent_at for t in tickets))

    async def read() -> list[MemoryVersion]:
        created = [v async for v in ctx.client.list_versions(
            ctx.store_id, operation="created", created_gte=since)]
        await _learn_writer(ctx, [v for v in created if any(
            decide.holds(t.written, v.path, v.content_sha256) for t in tickets)])
        return created

    created = await _ask(ctx, f"{len(tickets)} create(s)", read)
    if created is None:
        return
    st = ctx.state
    for ticket in tickets:
        # A memory this mount knows, or knew, is not the one a lost create made (an
        # earlier create of the same bytes at the same path, deleted since: a pending
        # delete, or gone, its creation still listed: `rm x; git checkout x`).
        # Nor is one the server records as another writer's.
        mine = [v for v in created if decide.holds(ticket.written, v.path, v.content_sha256)
                and v.memory_id not in st.by_memory and v.memory_id not in st.tombstones
                and v.memory_id not in st.known
                and not decide.by_another_writer(ctx.writer, v.created_by)]
        found = await _ask(ctx, f"the create of {ticket.path}", functools.partial(
            _first_holding, ctx, mine, ticket.sha)) if mine else (None, None)
        if found is None:
            continue
        version, head = found
        row = decide.created_row(ticket.written, _seen(version, ctx.writer) if version else None,
                                 _seen(head, ctx.writer) if head else None,
                                 young=_young(ctx, ticket))
        remote = None
        if version is not None:
            remote = Remote(version.memory_id, version.path, version.content_sha256,
                            version.content_size_bytes or 0)
        _apply(ctx, ticket, row, remote, done, now=head)


async def _first_holding(ctx: SyncContext, versions: list[MemoryVersion], sha: str,
                         ) -> tuple[MemoryVersion | None, Memory | None]:
    """The first (newest) creation whose memory still holds sha, with that memory;
    else the newest, with its memory now (None: deleted)."""
    first: tuple[MemoryVersion | None, Memory | None] = (None, None)
    for v in versions:
        head = await ctx.client.find_memory(ctx.store_id, v.memory_id, view="basic")
        if head is not None and head.content_sha256 == sha:
            return v, head
        if first[0] is None:
            first = (v, head)
    return first
