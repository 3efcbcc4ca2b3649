"""The sync decisions as pure functions over (local, base, remote, in flight).

The pusher and the reconciler ask these what to do and then apply the answer
through `State`'s transitions; nothing here does I/O or touches state, so
each table is tested row by row (tests/test_decide.py). docs/SYNC.md prints
the same tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memfs.core.nodes import is_meta, is_parked


@dataclass(frozen=True)
class Local:
    """One file as the decision sees it."""

    sha: str
    path: str
    memory_id: str | None
    base_sha: str | None
    base_path: str | None
    sent_sha: str | None = None
    open_dirty: bool = False
    #: Written here since the pass began reading the server: what the pass read may be
    #: older than that write.
    written_since: bool = False

    @property
    def content_changed(self) -> bool:
        return self.memory_id is None or self.sha != self.base_sha

    @property
    def renamed(self) -> bool:
        return self.memory_id is not None and self.path != self.base_path


# -- the reconciler: a memory we know (by id) as the listing shows it -----------------


class Content(Enum):
    NOTHING = "nothing"            # server sha is still the base
    WAIT = "wait"                  # unsaved writes are open: settle after the close; or
    #                                the same bytes, written here since the pass read
    #                                them: read the memory again (`adopts`)
    ADOPT = "adopt"                # the server holds our own write (an answer was lost)
    TAKE = "take"                  # clean file: the server's content becomes ours
    CONFLICT = "conflict"          # both changed: server wins the tree, ours is kept


def adopts(local: Local, remote_sha: str) -> bool:
    """Whether the server holding remote_sha is the file's own bytes, taken as synced: what
    we sent (an answer lost), or what the file holds, unless only by a write made since
    the pass read the server. That read may be older than the write, and another writer
    may have changed or deleted the memory since: taken as synced, their delete would
    take the user's write, made after it."""
    if remote_sha == local.sent_sha:
        return True
    return remote_sha == local.sha and not local.written_since


def content_row(local: Local, remote_sha: str) -> Content:
    if remote_sha == local.base_sha:
        return Content.NOTHING
    if local.open_dirty:
        return Content.WAIT
    if remote_sha in (local.sha, local.sent_sha):
        return Content.ADOPT if adopts(local, remote_sha) else Content.WAIT
    if local.sha == local.base_sha:
        return Content.TAKE
    return Content.CONFLICT


class Place(Enum):
    NOTHING = "nothing"            # server path is still the base path
    FOLLOW = "follow"              # renamed there only: move the file
    KEEP_OURS = "keep-ours"        # renamed here too (or it is our own park): ours goes out
    SAME = "same"                  # both sides moved it to the same path: base follows
    IN_TRANSIT = "in-transit"      # another client parked it mid-swap: wait for it to land


def place_row(local: Local, remote_path: str, *, ours_parked: bool) -> Place:
    if remote_path == local.base_path:
        return Place.NOTHING
    if local.path == remote_path:
        return Place.SAME
    if local.renamed or ours_parked:
        return Place.KEEP_OURS
    if is_parked(remote_path) or is_meta(remote_path):
        return Place.IN_TRANSIT  # a memory under /.memfs is never shown: it stays put
    return Place.FOLLOW


class Absent(Enum):
    DROP = "drop"                  # confirmed deleted there, clean here: remove the file
    KEEP_AS_NEW = "keep-as-new"    # confirmed deleted there, changed here: re-create it
    REAPPEARED = "reappeared"      # not in the listing but the GET found it: apply it


def absent_row(local: Local, found: bool) -> Absent:
    """A known memory missing from a listing, after the confirming GET."""
    if found:
        return Absent.REAPPEARED
    if local.content_changed or local.renamed or local.open_dirty:
        return Absent.KEEP_AS_NEW
    return Absent.DROP


# -- the reconciler: a memory we do not hold ---------------------------------------------


class Unknown(Enum):
    HIDDEN = "hidden"              # parked by a swap in progress, or under /.memfs: not shown
    DELETE_PENDING = "delete-pending"  # our delete of it waits out its delay
    REBASE_DELETE = "rebase-delete"    # it holds what we last sent: our delete follows it
    RESTORE = "restore"            # deleted here, changed there: the server's edit wins
    ADD = "add"                    # a new memory: show it
    COLLIDE = "collide"            # a local directory or another memory holds the path
    ADOPT = "adopt"                # a local file not pushed yet holds the same bytes
    WAIT = "wait"                  # a local file at that path has unsaved writes, or
    #                                its bytes, written since the pass read them (`adopts`)
    DOUBT = "doubt"                # a create of ours in doubt wrote that path: it may
    #                                have made this memory; its doubt is resolved first
    CONFLICT = "conflict"          # a local file not pushed yet, different bytes


@dataclass(frozen=True)
class PendingDelete:
    base_sha: str
    sent_sha: str | None


def unknown_row(remote_path: str, remote_sha: str, tomb: PendingDelete | None,
                at_path: Local | None, at_path_is_dir: bool, *,
                create_in_doubt: bool = False) -> Unknown:
    """`create_in_doubt`: a create of ours whose answer was lost wrote `remote_path` and
    is not resolved yet (the server showed no trace of it, and may still apply it)."""
    if is_parked(remote_path) or is_meta(remote_path):
        return Unknown.HIDDEN
    if tomb is not None:
        if remote_sha == tomb.base_sha:
            return Unknown.DELETE_PENDING
        if remote_sha == tomb.sent_sha:
            return Unknown.REBASE_DELETE
        if at_path is not None or at_path_is_dir:
            return Unknown.COLLIDE  # the server's edit wins, but its path is taken here
        return Unknown.RESTORE
    if create_in_doubt:
        return Unknown.DOUBT
    if at_path is None and not at_path_is_dir:
        return Unknown.ADD
    if at_path_is_dir or at_path is None or at_path.memory_id is not None:
        return Unknown.COLLIDE
    if remote_sha in (at_path.sha, at_path.sent_sha):
        return Unknown.ADOPT if adopts(at_path, remote_sha) else Unknown.WAIT
    if at_path.open_dirty:
        return Unknown.WAIT
    return Unknown.CONFLICT


# -- the pusher: what one dirty file sends --------------------------------------------------


class Send(Enum):
    NOTHING = "nothing"            # clean, or refused content with no rename to carry
    CREATE = "create"
    UPDATE = "update"              # content and/or path, preconditioned on the base sha
    REFUSE = "refuse"              # content or path that can never be a memory
    MISSING = "missing"            # content not in the cache (cannot happen; reported)


@dataclass(frozen=True)
class PushPlan:
    send: Send
    content: bool = False          # the request carries content
    path: bool = False             # the request carries a new path
    reason: str | None = None


def push_plan(local: Local, *, refused_sha: str | None, have_content: bool,
              content_problem: str | None, path_problem: str | None) -> PushPlan:
    """`content_problem`/`path_problem`: why the bytes/path can never be a memory."""
    if local.memory_id is not None and not local.content_changed and not local.renamed:
        return PushPlan(Send.NOTHING)
    if path_problem is not None:
        return PushPlan(Send.REFUSE, reason=path_problem)
    content_refused = refused_sha == local.sha
    wants_content = local.content_changed and not content_refused
    if wants_content and not have_content:
        return PushPlan(Send.MISSING)
    if wants_content and content_problem is not None:
        if local.renamed:  # the memory still follows the rename
            return PushPlan(Send.UPDATE, path=True, reason=content_problem)
        return PushPlan(Send.REFUSE, reason=content_problem)
    if local.memory_id is None:
        if content_refused:
            return PushPlan(Send.NOTHING)
        return PushPlan(Send.CREATE, content=True)
    if not wants_content and not local.renamed:
        return PushPlan(Send.NOTHING)
    return PushPlan(Send.UPDATE, content=wants_content, path=local.renamed)


def push_due_at(changed_at: float | None, dirty_since: float | None, *,
                write_back_delay: float, max_push_delay: float) -> float:
    """When a dirty file goes out: `write_back_delay` after its last change, but no
    later than `max_push_delay` after the first change not yet pushed (a file that
    never stops changing, a log or an autosaving editor, still reaches the server).
    The pusher waits for it and `memfs status` shows it: one rule for both."""
    due = (changed_at or 0) + write_back_delay
    if dirty_since is not None:
        due = min(due, dirty_since + max(max_push_delay, write_back_delay))
    return due


# -- the pusher: what an answer means ---------------------------------------------------------


class Answer(Enum):
    LANDED = "landed"              # 2xx: the base becomes the answer
    OWN_WRITE = "own-write"        # 409, but the server holds what we sent: adopt it
    CONFLICT = "conflict"          # 409, the server moved: server wins, ours is kept
    GONE = "gone"                  # 404 confirmed: the file becomes a create
    REFUSED = "refused"            # 400/413: never resent until the content changes
    FAILED = "failed"              # 403, 422, other 4xx: this file waits (backoff)
    TRANSIENT = "transient"        # 429, 5xx, network: retried, the mount goes offline


def precondition_row(remote_sha: str | None, sent: str | None,
                     previous_sent: str | None) -> Answer:
    """After a 409 precondition failure (of an update, or of a delete: `sent` is then the
    sha of our last update of the memory), the memory's current sha (None: 404)."""
    if remote_sha is None:
        return Answer.GONE
    if remote_sha in (sent, previous_sent):
        return Answer.OWN_WRITE
    return Answer.CONFLICT


# -- what of an update's answer becomes the base ------------------------------------------------


def written_by_us(sha: str, *, sent: str, previous_sent: str | None, base_sha: str | None,
                  content_sent: bool) -> bool:
    """Whether an answer holding `sha` is what our request (or an earlier one of ours whose
    answer was lost) wrote; anything else is another writer's. A rename sent no content:
    the memory then holds our base."""
    if sha in (sent, previous_sent):
        return True
    return not content_sent and sha == base_sha


def answer_base(answer: tuple[str, str], base: tuple[str | None, str | None], *,
                update: bool, path_sent: bool, ours: bool) -> tuple[str, str]:
    """(path, sha) to record as the base from a 2xx answer, given the holder's base now.

    An update that sent no path, answered with the memory elsewhere, met another client's
    rename: that is the reconciler's row to follow (it moves the file), so the base path
    stays; taking it here would turn their rename into a pending rename of ours, pushed
    back over theirs. An answer whose content is not ours (`ours`: what we sent, or an
    earlier request of ours) is the API's no-op rule: an update that changes nothing is
    answered 200 without its precondition being checked, e.g. a rename whose earlier
    answer was lost, after another writer edited the memory; only the path is ours, so
    the base sha stays and the next listing shows their change (taken, or a conflict)
    instead of our next push overwriting it."""
    path, sha = answer
    base_path, base_sha = base
    if update and not path_sent and base_path and path != base_path:
        path = base_path
    if update and not ours and base_sha:
        sha = base_sha
    return path, sha


# -- a create or rename refused because the path is taken (409 path conflict) ----------------


class PathHeld(Enum):
    UNKNOWN = "unknown"            # the answer names no memory: this file waits (backoff)
    OUR_DELETE = "our-delete"      # one of our deleted files holds it: delete it now, go again
    NOTHING = "nothing"            # the file is gone meanwhile: nothing to send
    OUR_MOVE = "our-move"          # another of our files holds it (a rename not pushed yet):
    #                                that one moves first, this one goes next pass
    PARK = "park"                  # ... and that one waits on this one (a swap): park ours
    NEAR = "near"                  # a stranger's memory is an ancestor or descendant: waits
    STRANGER = "stranger"          # a stranger's memory holds this very path: read it


def path_held_row(memory_id: str | None, *, ours_deleted: bool, file_gone: bool,
                  ours_elsewhere: bool, in_cycle: bool, same_path: bool) -> PathHeld:
    """What holds the path our create or rename asked for, by what we know of it."""
    if memory_id is None:
        return PathHeld.UNKNOWN
    if ours_deleted:
        return PathHeld.OUR_DELETE
    if file_gone:
        return PathHeld.NOTHING
    if ours_elsewhere:
        return PathHeld.PARK if in_cycle else PathHeld.OUR_MOVE
    if not same_path:
        return PathHeld.NEAR
    return PathHeld.STRANGER


class Stranger(Enum):
    GONE = "gone"                  # deleted since: the next pass tries again
    OWN_CREATE = "own-create"      # it holds what our create sent: its answer was lost
    CREATED = "created"            # another writer created the path: theirs wins, ours kept
    TAKEN = "taken"                # our rename onto their path: theirs wins, ours kept, and
    #                                our own memory (no file holds it now) is deleted


def stranger_row(is_create: bool, remote_sha: str | None, sent: str,
                 previous_sent: str | None) -> Stranger:
    """The memory that holds our path, read after the 409 (None: 404)."""
    if remote_sha is None:
        return Stranger.GONE
    if is_create and remote_sha in (sent, previous_sent):
        return Stranger.OWN_CREATE
    return Stranger.CREATED if is_create else Stranger.TAKEN


class Refused(Enum):
    """A push the server refused for good (400, 413): what of it will never be taken."""

    NO_ROOM = "no-room"            # the store holds its 2,000 memories: waits for a delete
    CONTENT = "content"            # the content sent: refused until the file changes
    MOVE = "move"                  # only a move was sent, so not the content: the file
    #                                waits with backoff and says why (an archived store, a
    #                                path the server's rules refuse), as any refusal does


def refused_row(*, store_full: bool, content_sent: bool) -> Refused:
    """What a refusal of our create or update settles."""
    if store_full:
        return Refused.NO_ROOM
    return Refused.CONTENT if content_sent else Refused.MOVE


# -- a request whose answer was lost: what the server shows decides ----------------------


class Doubt(Enum):
    APPLIED = "applied"            # the memory holds what the request wrote: that is the answer
    APPLIED_BEFORE = "applied-before"  # a version since it was sent is its write; another
    #                                    writer (or a delete) came after: base := our write
    NOT_APPLIED = "not-applied"    # no trace of it, and too old to land now: it never
    #                                took effect
    NOT_YET = "not-yet"            # no trace of it yet, but the server may still apply it:
    #                                ask again (nothing more is sent for its file meanwhile)
    SUPERSEDED = "superseded"      # applied before, but the base was set since from a
    #                                later read (a conflict settled on it): that stands
    OVERTAKEN = "overtaken"        # its bytes there, then changed or deleted by another
    #                                writer, and whose they were the server cannot tell
    #                                (a create's `created_row`; an update's only version
    #                                holding them another writer's): their state stands,
    #                                ours is kept


@dataclass(frozen=True)
class Seen:
    """A memory (or one of its versions) as the server shows it: path and sha."""

    path: str | None
    sha: str | None
    operation: str = "modified"  # a version's operation ("created", "modified", "deleted")
    version: str | None = None  # a version's id
    theirs: bool = False  # the server records it as another writer's (`by_another_writer`)


def holds(written: tuple[str | None, str], path: str | None, sha: str | None) -> bool:
    """Whether a memory at path holding sha shows a write of `written` (its path None:
    content only, any path will do)."""
    want_path, want_sha = written
    return sha == want_sha and want_path in (None, path)


def doubt_row(written: tuple[str | None, str], head: Seen | None, since_sent: list[Seen], *,
              base_moved: bool = False, young: bool = False, base: str | None = None,
              after: str | None = None) -> Doubt:
    """A request in doubt wrote `written` (path, sha). `head`: the memory now (None: it
    is gone, or a create, whose memory we cannot name); `since_sent`: the versions
    written since shortly before the request went out, newest first (a create's: every
    memory created since); `base_moved`: the file's base is neither what the request was
    sent against nor what it wrote (a later read of the server set it); `young`: its
    answer was lost less than `SyncOptions.lost_answer_wait` ago; `base`: the content
    its precondition named, when it sent other content; `after`: the newest version of
    the memory this mount had seen when the request went out.

    Only what the server shows counts. A memory that holds exactly our write now got it
    from our request, or from another writer who wrote the same bytes to the same path,
    which comes to the same: adopting it loses nothing and duplicates nothing. A version
    since that holds it is our write too, unless it is another writer's (below), and
    not one older than the newest holding `base`: the request, had it been applied,
    came after the memory held that (its precondition), so those bytes there are an
    earlier write (the user's own A, then B, then A again: the last A's request never
    applied is not the first A's version).
    Nor `after`, nor any older one: seen before the request went out, none of them is
    its version (a file moved to b.md, back, and to b.md again: the last move never
    applied is not the first one's version, which another writer's move back would leave
    just as well, so only the version ids tell the two apart).

    No trace is not proof while the request is young: a server may apply a request after
    its client gave up on the answer (a proxy's timeout while the server still works on
    it). Sent again, or forgotten under a local change, it would land later and undo that
    change (a deleted file back, a renamed one twice), so it is asked about again until
    the wait is over.

    Nor is a version holding our write that the server records as another writer's
    (`theirs`, `by_another_writer`): an update that finds its bytes already there is
    applied without a version of its own (the API's no-op, whatever its precondition),
    so ours may have met theirs, or never arrived. While the memory holds those bytes
    that is the same (APPLIED), but once it changed or went since, taken as ours their
    change wins over the file, which loses what the user wrote if ours never arrived
    (their delete, then the user's edit of the file they had not heard of yet), and
    taken as not applied ours is sent again, which brings back what they deleted if it
    did. Neither is safe: OVERTAKEN, as for a create (`created_row`), once the request
    can no longer land. Before this mount knows its own writer (`SyncContext.writer`: a
    mount that has only edited, never created or deleted, has no write to learn it from)
    no version is known to be its own either, and `theirs` says so
    (`maybe_another_writer`): such a version, changed or gone since, keeps the user's
    write as a conflict. That conflict is needless when ours did land before their
    change (the tree is the same either way: their state stands), but taking the
    version as ours would lose the write when it was theirs."""
    if head is not None and holds(written, head.path, head.sha):
        return Doubt.APPLIED
    for v in since_sent:
        if after is not None and v.version == after:
            break  # it and older ones were seen before our request went out
        if v.operation == "deleted":
            continue
        if holds(written, v.path, v.sha):
            if base_moved:
                return Doubt.SUPERSEDED
            if not v.theirs:
                return Doubt.APPLIED_BEFORE
            return Doubt.NOT_YET if young else Doubt.OVERTAKEN
        if base is not None and v.sha == base:
            break  # older ones came before the memory held what our request was sent against
    return Doubt.NOT_YET if young else Doubt.NOT_APPLIED


def by_another_writer(ours: dict | None, created_by: dict | None) -> bool:
    """Whether a version was written by another writer than this mount, as far as the
    server's record tells: `created_by` (an actor) against `ours`, the actor of a memory
    this mount created (None while it has read none back). Only two known, different actors
    tell: a version with no writer recorded may be anyone's, and two machines with one
    key are one writer."""
    return ours is not None and created_by is not None and created_by != ours


def maybe_another_writer(ours: dict | None, created_by: dict | None) -> bool:
    """Whether a version the server records as someone's may be another writer's than
    this mount's: unless it is known to be ours (`ours`, this mount's actor, equal to
    it), even while `ours` is unknown. A version with no writer recorded is not counted
    as another's, as in `by_another_writer` (a server that records no writer would
    otherwise make a conflict of every such lost answer). It gives `doubt_row` its
    `theirs` for an edit in doubt; a creation is offered to a create in doubt only while
    `by_another_writer` says no, and `created_row` keeps a changed one as a conflict
    anyway."""
    return created_by is not None and created_by != ours


def created_row(written: tuple[str | None, str], created: Seen | None, now: Seen | None, *,
                young: bool = False) -> Doubt:
    """A create in doubt wrote `written`; `created`: a memory this mount never knew,
    created since the request went out with those bytes at that path (None: none);
    `now`: that memory as the server holds it now (None: deleted).

    Its creation is our create's, or another writer's of the same bytes at the same
    path a little earlier (`models.SKEW`): a creation the server records as another
    writer's (`by_another_writer`) is not offered here, but one with the same key, or
    before this mount knows its own writer, cannot be told apart. While the memory
    holds those bytes adopting it loses nothing, unless the file is deleted here since:
    the delete then goes to that memory (the price `by_another_writer` narrows).
    Once another writer changed or deleted it, it does: taken as ours, their change
    wins over the file (an edit replaces it, a delete removes it), which for a
    stranger's create silently loses what the user wrote; taken as theirs, our create
    is sent again, and for our own create that brings back what another writer
    deleted. Neither is safe, so the memory's state stands in the tree and the file's
    bytes are kept as a conflict (OVERTAKEN). While the request is young, our own
    create may still land: it is asked about again."""
    if created is None:
        return Doubt.NOT_YET if young else Doubt.NOT_APPLIED
    if now is not None and now.sha == written[1]:  # holds our bytes (where it went, too)
        return Doubt.APPLIED if holds(written, now.path, now.sha) else Doubt.APPLIED_BEFORE
    return Doubt.NOT_YET if young else Doubt.OVERTAKEN
