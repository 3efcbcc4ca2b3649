"""A deterministic interleaving harness for the sync core (issue 7, "Proof").

The real server code (`memfs.server.db.Database`, in memory) sits behind `HeldTransport`,
an `httpx.AsyncBaseTransport` the memfs client talks to. Every request gets a sequence
number and can be *held*:

    before   the server has not applied it yet
    after    the server has committed it; the response is not delivered yet
    lose     like after, then the response is lost (an httpx transport error)
    fail     like before, then it is never applied (a 503)

Or the action's request k can get an *outcome* (`OUTCOMES`), the interference running
after the action, while memfs does not know what the server did:

    answered    applied, the answer delivered
    lost        applied, the answer lost (a connection reset after the commit)
    unapplied   never applied, and no answer either (a reset before the server read it)
    applied_500, applied_502, applied_504  applied, answered with that 5xx
                (`ANSWERED_BADLY`: the long run's, the random search's and the aftermath's)
    refused     not applied, answered 403
    late<j>     no answer, not applied yet: the server applies it just before the j-th
                request after it (a server still at work when its client gave up). The
                mount's passes during its lost-answer wait (a push, a poll, a push) run
                before settling; the wait ends (`wait_over`) once it has landed. It
                lands at the latest as that wait ends, however far a flush has moved
                the mount's clock on (`HeldTransport.late_deadline`).
    late_page<j>  the same, but the server applies it just before the j-th listing
                request of a full listing pass: the passes during the wait are a push,
                a full listing one memory a page, a push. That pass asks about the
                request in doubt, then lists the root, then /d/ page by page: the
                request lands after the question and before the listing (1), before
                the file's directory (2), or between its pages (3).

A `Scenario` is: setup steps, one *sync action* (a push pass, push passes in a row, a
flush or a reconcile pass) run as a task, and an *interference* (a few local filesystem
operations through the FUSE handlers (the router) and/or other clients' changes made straight
on the `Database`). `explore()` runs the action once alone to count its requests n, then,
on a fresh engine each time, injects the interference at every hold point: before the
action, at (k, point) for every k < n and every point, and after the action. The action's
task is parked on the held request (a `trio.Event`, no sleeps) while the interference runs;
then it is released. A scenario with a `second` interference holds two requests in one
run: the first at k1, then the second at every later k2 the action reaches after it.
Each run then *settles* (push with flush=True and reconcile passes until nothing is
pending), within the rounds its scenario allows (`Scenario.settles_in`: `SETTLES_IN`, or
a named reason for one more), and the oracle (`Oracle`) is checked; state consistency is
checked after every step.

The engine is the daemon's own (`StoreEngine`, memfs/mount/engine.py): its fetcher and
blob writer run through every interleaving under an idle clock the harness holds
(`HarnessClock`: busy while a local operation runs); after each step the harness waits for
the writer, so the blobs closes stage and fetches hold reach their files between steps.

Everything runs in-process in a fresh `trio.run` per interleaving, with trio's scheduler
seeded, so a failure replays exactly: `run_one(scenario, tmp, ("hold", k, point))`. (What
the writer's worker thread does during the action itself is not ordered by the seed:
nothing the oracle checks may depend on whether a blob is staged or in its file.)

The seam the sync core's changes adapt is small and at the top of this file: `make_engine`
(a `StoreEngine` over the held transport) and the few adapter functions below it.
Everything else talks to the router's handlers, `State` queries and the server.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import logging
import math
import os
import re
import shutil
import sqlite3
import stat
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pyfuse3
import trio
import trio.testing

from memfs.api import errors as api_errors
from memfs.api.client import MemoryStoresClient
from memfs.core.mountconfig import MountConfig, SyncOptions
from memfs.core.signals import IdleClock
from memfs.mount.daemon import CLIENT_RETRIES
from memfs.mount.engine import StoreEngine
from memfs.mount.router import Router
from memfs.server.db import ApiError, Database
from memfs.server.db_common import Actor
from memfs.server.http import Request, resolve
from memfs.state.blobs import BlobCache, sha256
from memfs.state.report import pending
from memfs.state.state import ROOT_INO, State

HOUR = 3600.0
EMPTY_SHA = sha256(b"")
#: Where the pusher parks a memory while a rename cycle goes out; never part of a tree.
RESERVED_PREFIX = "/.memfs-moving/"
POINTS = ("before", "after")
FAULT_POINTS = ("before", "after", "lose", "fail")
#: What the server does with one request whose outcome the mount then does not know;
#: "late<j>": not applied when the answer is lost, but later, just before the j-th
#: request after it (the mount's passes during its lost-answer wait run before settling);
#: "late_page<j>": just before the j-th listing request of a full listing pass then.
OUTCOMES = ("answered", "lost", "unapplied", "refused", "late2", "late3", "late5",
            "late_page1", "late_page2", "late_page3")
#: Two more the long run and the random search draw: the server applied the request and
#: the answer is a 5xx all the same (a gateway's 502 or 504 while the server finished; a
#: 500 from a proxy after the commit). memfs cannot tell it from "never applied, a 5xx".
ANSWERED_5XX = ("applied_500", "applied_502", "applied_504")
#: ... or a 200 whose body is cut short (a gateway's page, no length to tell): a lost
#: answer memfs took for a refusal (found by a helper, 6 December).
ANSWERED_BADLY = (*ANSWERED_5XX, "applied_cut")
#: The daemon killed with a request on the wire: (the server applied it first or not, the
#: interference just before the kill or after the restart).
CRASHES = tuple((point, when) for point in ("before", "after")
                for when in ("then_crash", "restarted"))
#: ... or the server applies it later, just before the 3rd request after the kill: among
#: the restarted daemon's passes within its lost-answer wait.
LATE_CRASHES = (("late3", "then_crash"), ("late3", "restarted"))
SETTLE_ROUNDS = 8
#: How many push+reconcile rounds a scenario may take to settle (`Scenario.settles_in`;
#: the count includes the last round, the one that finds nothing left to do): what the
#: run left to send goes out in the first round. A change that comes a round late
#: still settles right, and only this count sees it.
SETTLES_IN = 2
#: One round more where a pass learns what only the next pass can act on. The memory was
#: deleted there (a 404, `decide.Stranger.GONE`, a doubt resolved as gone): the file is
#: new now, and its create goes out in the next pass.
AFTER_GONE = SETTLES_IN + 1
#: A 409 the pass settles as a conflict, or our rename onto their path
#: (`decide.Stranger.TAKEN`): what that leaves to do (the freed memory's delete, the rest
#: of the move) goes in the next pass; a pass sends its deletes first.
AFTER_CONFLICT = SETTLES_IN + 1
#: A move onto a path another of our memories still holds goes after that one has moved
#: (`decide.PathHeld.OUR_MOVE`; a swap, whose one half is parked: `PathHeld.PARK`). The
#: pass sends both at once, so which one waits depends on which the server answers first.
AFTER_MOVE = SETTLES_IN + 1
#: The delete of a memory that is the only source of a file's content (never read, then
#: moved over another file) waits until the pass has fetched that content
#: (`Pusher._due_deletes`).
AFTER_READ = SETTLES_IN + 1
#: A row whose file holds the memory's bytes by a write made while the pass read the
#: server is not taken as synced: the next poll reads that memory again
#: (`decide.adopts`), and what it finds there goes out a round later.
AFTER_WRITTEN = SETTLES_IN + 1
#: A round more on top of a scenario's own bound, where a pass lost its work: a request
#: of the settling itself faulted (lost, never applied, failed: a scenario's `faults` on
#: the "settle" origin), or a failed request of the action is retried; and in every run
#: whose restarted daemon was killed again in its first pass (`explore(twice=True)`),
#: whose work settling's first round then does, what it settles coming a round later.
FAULT_ROUND = 1
#: Who writes, as the server records it: memfs's requests and the other writer's (two
#: keys: memfs tells them apart once it knows its own, `decide.by_another_writer`).
MEMFS = Actor("api_actor", "apikey_memfs")
OTHER = Actor("api_actor", "apikey_other")
#: Push passes the `pushes` action runs at most (one after another, as `Pusher.run` goes on).
PUSH_PASSES = 3
#: How long one interleaving may take (they take from a few ms to about a second): a
#: guard that turns a hang into a failure with its trace, not a measure of speed.
HUNG_AFTER = 120.0
#: How long the blob writer may take to write what waits (a guard against a hang only).
WRITER_PATIENCE = 30.0
BASE_URL = "http://interleave.test"
#: Interleavings run so far in this process, by kind (reported at the end of a session).
EXPLORED: dict[str, int] = {}

# Who sent a request: "setup", "action", "interference", "after", "settle", "oracle".
ORIGIN: contextvars.ContextVar[str] = contextvars.ContextVar("ORIGIN", default="setup")
_MEMORY_ID = re.compile(r"mem_[A-Za-z0-9]+")


# ======================================================================================
# The seam: the engine (the daemon's StoreEngine) and the few State calls the harness
# needs. Adapt these when their signatures change; nothing below should need to.
# ======================================================================================


class HarnessClock(IdleClock):
    """The mount's idle clock (`StoreEngine(clock=...)`), run by the harness: busy while a
    local operation goes through the handlers, quiet at every other moment. The blob
    writer waits for quiet, so it writes between steps, never inside one, and the harness
    waits for it after every step (`Engine.quiet`): where it wrote replays exactly.

    It also keeps the wall clock the lost-answer wait is counted on (`SyncContext.wall`):
    a flush waiting for a request that may still land, or for the server to come back,
    moves it on (`SyncContext.pause`) instead of sleeping, so a run whose request never
    lands does not wait 30 s. What a "late" request does is tied to requests, not time
    (`HeldTransport.apply_late`)."""

    __slots__ = ("requests", "moved_on", "moved")

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0  # local operations under way
        self.moved_on = 0.0  # seconds the wall clock is ahead of time.time()
        #: told the new time whenever the clock is moved on (`HeldTransport.clock_moved`)
        self.moved: Callable[[float], None] | None = None

    def wall(self) -> float:
        return time.time() + self.moved_on

    async def pause(self, seconds: float) -> None:
        if self.moved_on > HOUR:  # a flush that never ends: its deadline (trio's clock) ends it
            await trio.sleep(seconds)
        self.moved_on += seconds
        if self.moved is not None:
            self.moved(self.wall())
        await trio.lowlevel.checkpoint()

    def idle_for(self) -> float:
        return 0.0 if self.requests else math.inf

    @contextlib.contextmanager
    def busy(self):
        self.requests += 1
        try:
            yield
        finally:
            self.requests -= 1


def make_engine(tmp_path: Path, transport: HeldTransport, *, retries: int = 0) -> Engine:
    """One mount's sync machinery, built by `StoreEngine` as the daemon builds it, over the
    held transport and with the harness's idle clock; no FUSE and no sync loop (the harness
    runs the passes; `_run` starts the fetcher and the blob writer). Write-back delay 0,
    delete delay an hour (tests age tombstones). `retries`: the client's, unwaited (the
    explorations run the daemon's, `CLIENT_RETRIES`; tests that count requests, none)."""
    return Engine(tmp_path, transport, *make_store(tmp_path, transport, retries), retries)


async def _no_wait(_delay: float) -> None:
    await trio.lowlevel.checkpoint()


def make_store(tmp_path: Path, transport: HeldTransport,
               retries: int = 0) -> tuple[StoreEngine, HarnessClock]:
    """The `StoreEngine` of `make_engine` on the state directory `tmp_path` (a restarted
    daemon's: `Engine.restart`)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    options = SyncOptions(write_back_delay=0.0, delete_delay=HOUR, poll_interval=1.0,
                          prefetch=False)
    cfg = MountConfig(base_url=BASE_URL, options=options, store_id=transport.store_id,
                      mountpoint=str(tmp_path / "mnt"), state_dir=str(tmp_path))
    client = MemoryStoresClient(BASE_URL, None, max_retries=retries, transport=transport,
                                sleep=_no_wait)
    clock = HarnessClock()
    store = StoreEngine(cfg, client, clock=clock)
    store.ctx.fetcher.quiet_poll = 0.001  # the clock turns quiet at the step's end
    store.ctx.wall, store.ctx.pause = clock.wall, clock.pause
    transport.wall, clock.moved = clock.wall, transport.clock_moved
    transport.lost_answer_wait = options.lost_answer_wait
    return store, clock


def reopen_state(eng: Engine) -> State:
    """A second State on the same state.db (what a restarted daemon would load)."""
    return State(eng.tmp / "state.db")


def age_tombstones(eng: Engine, seconds: float = 2 * HOUR) -> None:
    """Pretend every pending delete happened `seconds` earlier (in memory only)."""
    for tomb in eng.state.tombstones.values():
        tomb.deleted_at -= seconds


def wait_over(eng: Engine) -> None:
    """The lost-answer wait over (`SyncOptions.lost_answer_wait`): a request in doubt
    the server shows no trace of is taken as never applied from now on. A "late" request
    lands before that (the transport's `apply_late`): the wait is what memfs takes for the
    longest a server may still apply a request after its answer was lost. (The wait is
    set to 0 rather than the tickets' `sent_at` moved back: that also bounds the versions
    a create's doubt reads.)"""
    eng.transport.apply_late(now=True)
    eng.ctx.options.lost_answer_wait = 0.0


def is_open_dirty(eng: Engine, ino: int) -> bool:
    """Whether an open handle holds unsaved writes (State's registry)."""
    return ino in eng.state.open_dirty


def restore_conflict(eng: Engine, cid: int) -> None:
    """`memfs conflicts restore` as the daemon's control socket runs it
    (`StoreEngine.conflict_command`)."""
    from memfs.state import conflicts

    conflicts.restore(eng.state, eng.cache, cid, invalidate=eng.ctx.invalidate)


def discard_conflict(eng: Engine, cid: int) -> None:
    """`memfs conflicts discard` as the daemon's control socket runs it."""
    from memfs.state import conflicts

    conflicts.discard(eng.state, cid)


def is_refusal(exc: BaseException) -> bool:
    """A `conflicts restore` refusal (a clear message, nothing changed)."""
    from memfs.state import conflicts

    return isinstance(exc, conflicts.ConflictError)


def pending_paths(state: State) -> dict[str, list[str]]:
    """What `memfs status` reports as not yet on the server, by kind (paths)."""
    out = {}
    for kind, items in pending(state).items():
        if isinstance(items, list) and items and kind != "local_only":
            out[kind] = sorted(i.get("path") or i.get("to") or "?" for i in items)
    return out


def state_snapshot(state: State) -> dict[str, Any]:
    """Everything of a State that must agree with its state.db."""
    columns = [row[1] for row in state.db.execute("PRAGMA table_info(nodes)")]
    nodes = {}
    for ino, node in state.nodes.items():  # persisted fields only (in-memory ones may differ)
        values = {c: getattr(node, c) for c in columns if hasattr(node, c)}
        values["children"] = dict(sorted(node.children.items()))
        nodes[ino] = values
    tombs = {mid: (t.base_path, t.base_sha) for mid, t in state.tombstones.items()}
    conflicted = dict(getattr(state, "conflicted", {}))
    return {"nodes": nodes, "by_memory": dict(state.by_memory), "tombstones": tombs,
            "conflicts": state.conflicts(), "conflicted": conflicted,
            "former_sources": list(state.former_sources.items()),
            "known": [(m, state.seen_version(m)) for m in state.known],
            "doubts": dict(state.doubts)}


# ======================================================================================
# The transport
# ======================================================================================


@dataclass
class Record:
    seq: int
    origin: str
    index: int | None  # position among the action's requests
    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int | None = None
    outcome: str = "pending"  # ok | error | lost | failed | refused

    @property
    def memory_id(self) -> str | None:
        parts = self.path.split("/")
        if len(parts) == 6 and parts[4] == "memories":
            return parts[5]
        return None

    @property
    def is_listing(self) -> bool:
        return self.method == "GET" and self.path.endswith("/memories")

    def flight_key(self) -> str | None:
        """What "one request in flight" is counted per: the memory, or a create's path."""
        if self.method == "POST" and self.path.endswith("/memories"):
            return "create:" + str((self.body or {}).get("path"))
        if self.method in ("POST", "DELETE") and self.memory_id:
            return self.memory_id
        return None

    def short(self) -> str:
        what = self.path.rsplit("/memory_stores/", 1)[-1].split("/", 1)[-1]
        extra = ""
        if isinstance(self.body, dict):
            extra = " " + ",".join(f"{k}={_short(v)}" for k, v in self.body.items())
        if self.query.get("page"):
            extra += " page=…"
        if "expected_content_sha256" in self.query:
            extra += " expected_sha"
        return f"#{self.seq}[{self.origin}{'' if self.index is None else ':' + str(self.index)}]" \
               f" {self.method} {what}{extra} -> {self.status} {self.outcome}"


def _short(v: Any) -> str:
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= 24 else s[:21] + "…"


@dataclass
class FaultRule:
    """A fault for requests matching `match` (by default only the action's requests)."""

    match: Callable[[Record], bool]
    #: refuse (an error response, not applied) | fail | lose | unapplied (no answer, not
    #: applied) | late (no answer, applied just before the `late_after`-th request after
    #: it: `HeldTransport.apply_late`)
    kind: str = "refuse"
    status: int = 403
    error_type: str = "permission_error"
    message: str = "refused by the test"
    origins: tuple[str, ...] = ("action",)
    times: int | None = None  # None: every matching request
    headers: dict[str, str] = field(default_factory=dict)  # on a refusal (retry-after)
    late_after: int = 1
    skip: int = 0  # the first `skip` matching requests go through untouched


@dataclass(frozen=True)
class Kind:
    """A fault's match: one kind of request (its repr is what a replay line shows)."""

    kind: str  # create | update | delete | read (one memory) | list (listings, versions) | any

    def __call__(self, rec: Record) -> bool:
        return self.kind in ("any", {("POST", False): "create", ("POST", True): "update",
                                     ("DELETE", True): "delete", ("GET", True): "read"}.get(
            (rec.method, bool(rec.memory_id)), "list"))


@dataclass
class Hold:
    """Action request `index`, held at `point` until `release` is set."""

    index: int
    point: str
    release: trio.Event = field(default_factory=trio.Event)
    rec: Record | None = None  # the request, once it reached the point


class HeldTransport(httpx.AsyncBaseTransport):
    """The server in-process; every request numbered, recorded, and holdable."""

    def __init__(self, db: Database, store_id: str, *, list_limit: int | None = None) -> None:
        self.db = db
        self.store_id = store_id
        self.list_limit = list_limit
        self.records: list[Record] = []
        self.rules: list[FaultRule] = []
        self.faulted = 0  # requests a rule has taken
        self.holds: dict[int, Hold] = {}  # by action request index
        #: whose requests are numbered (and so holdable): the action's, or a restarted
        #: daemon's first pass ("settle", the crash runs' recovery pass)
        self.counting = "action"
        self.outcome: tuple[int, str] | None = None  # (action request index, OUTCOMES)
        #: a "late<j>" outcome's request: applied just before the j-th request after it
        #: (any origin), or when the run settles: (requests still to come, the record,
        #: whether only the pages of a full listing are counted: "late_page<j>")
        self.late: tuple[int, Record, bool] | None = None
        #: a full listing pass under way (its listing requests are what "late_page<j>"
        #: counts)
        self.full_listing = False
        #: the mount's wall clock and lost-answer wait (`make_store`): a late request lands
        #: at the latest when that wait ends (`late_deadline`), however far a flush has
        #: moved the clock on; one applied after the wait is not what memfs guards against
        self.wall: Callable[[], float] = time.time
        self.lost_answer_wait = SyncOptions.lost_answer_wait
        self.late_deadline = math.inf
        self.reached = trio.Event()  # set when a hold point is reached (the harness renews it)
        self.action_count = 0
        self.in_flight: dict[str, Record] = {}
        self.violations: list[str] = []
        self.created: set[str] = set()  # ids of the memories our creates made
        #: (path, sha) of every version our creates and updates made (the server applied
        #: them: answered, or the answer lost)
        self.wrote: set[tuple[str, str]] = set()
        #: ... of those, the ones whose memory has not moved away from that path since (or
        #: gone) by a request of ours, nor been deleted by another writer: a file brought
        #: back there finds whatever came since, and a conflict it meets there is real
        self.standing: set[tuple[str, str]] = set()

    def apply(self, rec: Record) -> tuple[int, dict]:
        try:
            op, params = resolve(rec.method, rec.path)
            left = self._path_of(rec.memory_id) if rec.memory_id and rec.method in (
                "POST", "DELETE") else None
            payload = op(self.db, Request(params, rec.query, rec.body, MEMFS))
            if left is not None and payload.get("path") != left:
                self.standing = {w for w in self.standing if w[0] != left}
            return 200, payload
        except ApiError as exc:
            return exc.status, {"type": "error", "error": exc.error_object()}

    def _path_of(self, memory_id: str) -> str | None:
        try:
            return self.db.get_memory(self.store_id, memory_id, full=False)["path"]
        except ApiError:
            return None

    async def _park(self, rec: Record, hold: Hold) -> None:
        hold.rec = rec
        self.reached.set()
        await hold.release.wait()

    def _rule(self, rec: Record) -> FaultRule | None:
        for rule in self.rules:
            if rec.origin in rule.origins and (rule.times is None or rule.times > 0) \
                    and rule.match(rec):
                if rule.skip:
                    rule.skip -= 1
                    continue
                if rule.times is not None:
                    rule.times -= 1
                self.faulted += 1
                return rule
        return None

    def apply_late(self, upcoming: Record | None = None, *, now: bool = False) -> None:
        """The late request applied when its turn has come, just before `upcoming` is
        (or `now`; or once the mount's lost-answer wait ends)."""
        if self.late is None:
            return
        left, rec, pages = self.late
        due = self.wall() >= self.late_deadline
        if not now and not due:
            if pages and not (upcoming is not None and upcoming.is_listing
                              and self.full_listing):
                return
            if left > 1:
                self.late = (left - 1, rec, pages)
                return
        self.late = None
        status, payload = self.apply(rec)
        when = "" if now or upcoming is None else f" before #{upcoming.seq}"
        rec.outcome = f"applied late ({status}){' as its wait ended' if due else ''}{when}"
        self._applied(rec, status, payload)

    def clock_moved(self, wall: float) -> None:
        """The mount's clock moved on (a flush's pause): a late request whose wait that
        ends lands now, before the mount can see the wait over."""
        if self.late is not None and wall >= self.late_deadline:
            self.apply_late(now=True)

    def _applied(self, rec: Record, status: int, payload: dict) -> None:
        if status == 200 and rec.method == "POST" and rec.path.endswith("/memories"):
            self.created.add(payload["id"])
        if status == 200 and rec.method == "POST":
            self.wrote.add((payload["path"], payload["content_sha256"]))
            self.standing.add((payload["path"], payload["content_sha256"]))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = urlsplit(str(request.url))
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        raw = request.content
        body = json.loads(raw) if raw else None
        origin = ORIGIN.get()
        rec = Record(len(self.records), origin, None, request.method, url.path, query, body)
        self.apply_late(rec)
        if origin == self.counting:
            rec.index = self.action_count
            self.action_count += 1
        if rec.is_listing and self.list_limit is not None:
            query["limit"] = str(min(int(query.get("limit", "20")), self.list_limit))
        self.records.append(rec)
        key = rec.flight_key()
        if key is not None:
            other = self.in_flight.get(key)
            if other is not None:
                self.violations.append(
                    f"two requests in flight for {key}: {other.short()} and {rec.short()}")
            self.in_flight[key] = rec
        try:
            hold = self.holds.get(rec.index) if rec.index is not None else None
            point = None if hold is None else hold.point
            if point in ("before", "fail"):
                await self._park(rec, hold)
            if point == "fail":
                rec.status, rec.outcome = 503, "failed"
                return _error(503, "api_error", "held request failed by the test")
            fate = None
            if self.outcome is not None and rec.index == self.outcome[0]:
                fate = self.outcome[1]
            rule = None if fate == "unapplied" else self._rule(rec)
            if rule is not None and rule.kind in ("unapplied", "late") \
                    and point in ("after", "lose"):
                await self._park(rec, hold)  # not applied (yet), but held on the wire
            if fate == "unapplied" or (rule is not None and rule.kind == "unapplied"):
                rec.outcome = "lost"
                raise httpx.ReadError("connection reset before the server read it (test)",
                                      request=request)
            if rule is not None and rule.kind == "late":
                fate = f"late{rule.late_after}"
            if fate is not None and fate.startswith("late"):  # the server applies it later
                rec.outcome = "lost"
                pages = fate.startswith("late_page")
                self.late = (int(fate.removeprefix("late_page" if pages else "late")), rec,
                             pages)
                self.late_deadline = self.wall() + self.lost_answer_wait
                raise httpx.ReadError("no answer: the server applies it later (test)",
                                      request=request)
            if fate == "refused":
                rule = FaultRule(lambda r: True)
            if rule is not None and rule.kind in ("refuse", "fail"):  # not applied
                status = rule.status if rule.kind == "refuse" else 503
                payload = {"type": "error", "error": {"type": rule.error_type if
                                                      rule.kind == "refuse" else "api_error",
                                                      "message": rule.message}}
                rec.status = status
                rec.outcome = "refused" if rule.kind == "refuse" else "failed"
                headers = rule.headers if rule.kind == "refuse" else {}
            else:
                headers = {}
                status, payload = self.apply(rec)
                rec.status = status
                rec.outcome = "ok" if status == 200 else "error"
                self._applied(rec, status, payload)
            if point in ("after", "lose"):
                await self._park(rec, hold)
            if point == "lose" or fate == "lost" or (rule is not None and rule.kind == "lose"):
                rec.outcome = "lost"
                raise httpx.ReadError("response lost by the test", request=request)
            if fate in ANSWERED_5XX:  # applied, and the answer an error all the same
                code = int(fate.removeprefix("applied_"))
                rec.outcome = f"applied ({status}), answered {code}"
                return _error(code, "api_error", "a gateway's error after the commit (test)")
            if fate == "applied_cut":  # applied, its 200 cut short
                rec.outcome = f"applied ({status}), answered 200 cut short"
                whole = json.dumps(payload).encode()
                return httpx.Response(200, content=whole[:len(whole) // 2],
                                      headers={"content-type": "application/json"})
            return httpx.Response(status, json=payload, headers=headers)
        finally:
            if key is not None and self.in_flight.get(key) is rec:
                del self.in_flight[key]


def _error(status: int, error_type: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"type": "error",
                                        "error": {"type": error_type, "message": message}})


# ======================================================================================
# The engine: handlers, passes, other clients, and the model the oracle checks against
# ======================================================================================


def _ctx() -> pyfuse3.RequestContext:
    return pyfuse3.RequestContext()


def _split(path: str) -> tuple[str, str]:
    d, _, name = path.rpartition("/")
    return (d or "/"), name


class Skip(Exception):
    """A step that does not apply to the current tree (a missing file, ...)."""


#: Steps that are not the mount's local operations: other clients' and the sync passes.
NOT_LOCAL = ("push", "flush", "reconcile", "poll", "age")


class Engine:
    """One mount (a `StoreEngine`) plus its server, and a model of what every writer did."""

    def __init__(self, tmp: Path, transport: HeldTransport, store: StoreEngine,
                 clock: HarnessClock, retries: int = 0) -> None:
        self.transport = transport
        self.db = transport.db
        self.store_id = transport.store_id
        self._attach(tmp, store, clock)
        self.retries = retries
        self.restarts = 0
        #: The scope the store's fetcher and blob writer run in (`serve_content`).
        self.content_scope: trio.CancelScope | None = None
        self.labels: dict[str, str] = {EMPTY_SHA: "''"}
        # The model.
        self.obligations: dict[str, str] = {}  # sha -> who wrote it (must stay visible)
        # (new sha, the sha it replaced) for every write that saw what it replaced: local
        # writes (the file held what they replaced) and other clients' writes
        self.writes: set[tuple[str, str]] = set()
        #: Contents written more than once, here or by another writer (`("write", path,
        #: "same")`, `("r_edit", path, "same")`, `("r_create", path, "same")`): a conflict
        #: that keeps one may keep an earlier write of them, and a memory that holds one
        #: another write of them, which the false-conflict and duplicate checks, knowing
        #: writes by content only, cannot tell apart.
        self.written: set[str] = set()
        self.rewritten: set[str] = set()
        #: Contents written here (the user) and by the other writer; and those the user
        #: wrote over or removed here (a write, a save, a rename over, an unlink).
        self.written_here: set[str] = set()
        self.written_there: set[str] = set()
        self.replaced_here: set[str] = set()
        #: Files here whose synced bytes another writer deleted or wrote over (not applied
        #: here yet): ino -> (those bytes, the file's gen then). Until the file changes,
        #: they stand for no write of the user's (`_supersede`).
        self.taken_there: dict[int, tuple[str, int]] = {}
        #: Bytes -> the memories another writer wrote over them in, and the memories of
        #: the files the user wrote them to: the user's write of bytes a memory held
        #: before the other writer went on from them (`Oracle.settled`).
        self.over_there: dict[str, set[str]] = {}
        self.mine_in: dict[str, set[str]] = {}
        self.remote_writes: set[tuple[str, str]] = set()
        self.alive: dict[str, str] | None = None  # memory id -> path (from action start)
        self.alive_ino: dict[str, int] = {}  # memory id -> its file's ino, at action start
        self.excused: set[str] = set()  # ids another client deleted
        self.removed_here: set[str] = set()  # ids whose file the user removed (from start)
        self.overtaken: set[str] = set()  # ids another client edited or deleted
        #: contents of ours whose versions another client redacted (`op_r_redact`)
        self.redacted: set[str] = set()
        #: Conflict rows `conflicts restore` consumed: they still explain what they explained.
        self.restored: list[dict] = []
        #: Conflict rows `conflicts discard` dropped: they explain as much.
        self.discarded: list[dict] = []
        self.named: dict[str, str] = {}  # "@/path" -> memory id at the action start
        self.new_names: dict[str, str] = {}
        self.held: dict[str, set[str]] = {}  # memory id -> contents its file has held
        self.removed: set[int] = set()  # inodes the user unlinked or renamed a file over
        self.counter = 0
        self.log: list[str] = []
        self.state_errors: list[str] = []

    def _attach(self, tmp: Path, store: StoreEngine, clock: HarnessClock) -> None:
        """Drive `store`, the daemon's engine on the state directory `tmp`."""
        self.tmp = tmp
        self.store, self.clock = store, clock
        self.state, self.cache = store.state, store.cache
        self.ops = Router()  # what the daemon mounts: a router over the store's parts
        self.ops.add(store.fs)
        self.ctx, self.pusher, self.reconciler = store.ctx, store.pusher, store.reconciler
        # Open handles with unsaved writes, by the path they were opened at:
        # (fh, ino, sha seen at open, data); data None: already made durable.
        self.handles: dict[str, tuple[int, int, str | None, bytes | None]] = {}

    async def serve_content(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The store's fetcher and blob writer (`StoreEngine.start_content`), until the
        run ends or the daemon is killed (a `("crash", …)` run)."""
        with trio.CancelScope() as self.content_scope:
            async with trio.open_nursery() as nursery:
                await self.store.start_content(nursery)
                task_status.started()
                await trio.sleep_forever()

    def snapshot(self) -> Path:
        """What a daemon killed now leaves on disk: its state directory as committed,
        copied to a new one (SQLite's backup of each database: its committed content,
        whatever a connection holds open; the blob files as they are)."""
        self.restarts += 1
        dest = self.tmp.parent / f"{self.tmp.name}-restarted{self.restarts}"
        for src in sorted(self.tmp.rglob("*")):
            if src.is_dir() or src.name == "lock" or src.name.endswith(("-wal", "-shm",
                                                                         "-journal")):
                continue
            out = dest / src.relative_to(self.tmp)
            out.parent.mkdir(parents=True, exist_ok=True)
            if src.suffix == ".db":
                with contextlib.closing(sqlite3.connect(src)) as a, \
                        contextlib.closing(sqlite3.connect(out)) as b:
                    a.backup(b)
            else:
                # The blob writer's thread may be renaming its temporary file as we go (a
                # task waiting on a thread counts as blocked): a file gone is one the kill
                # came before or after, never one state.db names.
                with contextlib.suppress(FileNotFoundError):
                    shutil.copy2(src, out)
        return dest

    async def restart(self, snapshot: Path, nursery: trio.Nursery) -> None:
        """A new daemon on what the killed one left (`snapshot`): its State, cache and
        pusher start from disk alone; the old one's memory (its open handles, the feed's
        versions, timers) is gone. The old engine's tasks must be cancelled already."""
        old = self.store
        if old.failure:
            self.state_errors.append(f"a background task failed: {old.failure}")
        old.close()
        self._attach(snapshot, *make_store(snapshot, self.transport, self.retries))
        # Inode numbers are the old daemon's: the new one may give a number the user had
        # unlinked to a new file (a new mount has a new kernel inode cache: that is fine).
        self.removed.clear()
        self.log.append("crash: the daemon killed and started again")
        await nursery.start(self.serve_content)

    # -- model ---------------------------------------------------------------------

    def mname(self, mid: str | None) -> str:
        """A memory's name that is the same in every run: the path the mount held it at
        when the action started, else the order in which the harness first met it."""
        if mid is None:
            return "no memory"
        for name, known in self.named.items():
            if known == mid:
                return f"memory{name}"
        if mid not in self.new_names:
            self.new_names[mid] = f"new memory #{len(self.new_names) + 1}"
        return self.new_names[mid]

    def label(self, sha: str | None) -> str:
        if sha is None:
            return "nothing"
        return self.labels.get(sha, sha[:10])

    def _content(self, content: str | None, what: str) -> bytes:
        if content is None:
            self.counter += 1
            content = f"{what}{self.counter}"
        data = (content + "\n").encode()
        self.labels[sha256(data)] = repr(content)
        return data

    def _wrote(self, sha: str, replaced: str | None, who: str, *, local: bool = True,
               synced: str | None = None) -> None:
        if local and sha in (replaced, synced):
            # The file's bytes again, or back to what memfs last synced (`synced`, its
            # base): no change to sync. memfs, like the API, knows content by its sha, and
            # a three-way merge takes "ours = base" for unchanged, so a write of theirs made
            # since and not seen yet wins over it. What it replaced goes all the same.
            if replaced != sha:
                self._supersede(replaced)
            return
        if sha in self.written:
            self.rewritten.add(sha)
        self.written.add(sha)
        (self.written_here if local else self.written_there).add(sha)
        if replaced is not None:
            self._supersede(replaced, local=local)
            (self.writes if local else self.remote_writes).add((sha, replaced))
        self.obligations[sha] = who

    def _supersede(self, sha: str | None, *, local: bool = True) -> None:
        """Content no longer has to stay visible (written over, removed here, or by
        another writer). After a local operation (run by then), a file of the tree that
        still holds the same bytes keeps it: two files written alike are two writes of
        one content; but not a file holding them as synced bytes another writer has
        deleted or written over since (`taken_there`: they go with that change). (Not
        after another writer's: which file here stands for the memory they changed is the
        sync's to find out.)"""
        if local and sha is not None:
            self.replaced_here.add(sha)
        if sha is not None and not (local and self._held_here(sha)):
            self.obligations.pop(sha, None)

    def _held_here(self, sha: str) -> bool:
        """A file of the tree holds these bytes as a write of the user's (`_supersede`)."""
        st = self.state
        return any(n.sha == sha and not st.is_local_only_name(n)
                   and self.taken_there.get(n.ino) != (sha, n.gen) for n in st.files())

    def _synced(self, node) -> str | None:
        """The bytes memfs takes as synced for a file: its base, or the bytes a request of
        ours already applied to its memory there, its answer not in yet (or lost): once
        memfs knows, they are the base."""
        path = self.state.path_of(node)
        return node.sent_sha if (path, node.sent_sha) in self.transport.wrote \
            else node.base_sha

    def _taken_there(self, mid: str, old: str) -> None:
        """Another writer deleted or wrote over memory mid, which held `old`."""
        node = self.state.holder(mid)
        if node is not None and node.sha == old:
            self.taken_there[node.ino] = (old, node.gen)

    def _alive_drop(self, mid: str | None) -> None:
        """The user removed the file holding memory mid: it may go."""
        if self.alive is not None and mid is not None:
            self.alive.pop(mid, None)
            self.removed_here.add(mid)

    def start_action(self) -> None:
        st = self.state
        self.alive = {mid: st.path_of(st.nodes[ino]) for mid, ino in st.by_memory.items()}
        self.alive_ino = dict(st.by_memory)
        self.named = {f"@{p}": mid for mid, p in self.alive.items()}
        self.known_at_start = set(st.by_memory) | set(st.tombstones)
        self.tombstones_at_start = set(st.tombstones)

    # -- tree helpers -----------------------------------------------------------------

    def node(self, path: str):
        return self.state.lookup_path(path)

    def tree_sha(self, path: str) -> str | None:
        node = self.node(path)
        return None if node is None or node.is_dir else node.sha

    async def _parent(self, path: str) -> int:
        d, _ = _split(path)
        ino = ROOT_INO
        if d == "/":
            return ino
        for seg in d[1:].split("/"):
            node = self.state.child(self.state.nodes[ino], seg)
            if node is None:
                attr = await self.ops.mkdir(ino, seg.encode(), stat.S_IFDIR | 0o755, _ctx())
                ino = attr.st_ino
            elif not node.is_dir:
                raise Skip(f"{d} is a file")
            else:
                ino = node.ino
        return ino

    async def _put(self, path: str, data: bytes) -> None:
        """create/open(O_TRUNC) + write + flush + release (one close)."""
        node = self.node(path)
        if node is not None and node.is_dir:
            raise Skip(f"{path} is a directory")
        if node is None:
            fi, _ = await self.ops.create(await self._parent(path), _split(path)[1].encode(),
                                          stat.S_IFREG | 0o644, os.O_WRONLY | os.O_CREAT, _ctx())
        else:
            fi = await self.ops.open(node.ino, os.O_WRONLY | os.O_TRUNC, _ctx())
        try:
            await self.ops.write(fi.fh, 0, data)
            await self.ops.flush(fi.fh)
        finally:
            await self.ops.release(fi.fh)

    # -- steps --------------------------------------------------------------------------

    async def do(self, step: tuple) -> str:
        """Run one step; a local operation keeps the mount busy (the idle clock) while it
        runs, and after every step the mount goes quiet and the blob writer writes."""
        op, *args = step
        local = not op.startswith("r_") and op not in NOT_LOCAL
        try:
            with self.clock.busy() if local else contextlib.nullcontext():
                await getattr(self, "op_" + op)(*args)
            outcome = "ok"
        except Skip as exc:
            outcome = f"skipped ({exc})"
        except pyfuse3.FUSEError as exc:
            outcome = f"skipped ({errno.errorcode.get(exc.errno, exc.errno)})"
        except Exception as exc:  # a bug (or a changed API): report it, keep exploring
            outcome = f"raised {type(exc).__name__}: {exc}"
            self.state_errors.append(f"{ORIGIN.get()} step {step!r} {outcome}")
        self.log.append(f"{ORIGIN.get()}: {step!r} {outcome}")
        await self.quiet()
        self.check_state()
        return outcome

    async def quiet(self) -> None:
        """The mount is quiet: wait until the blob writer has written every blob held
        (fetched) or staged (closed) to its file, or waits, as it does while a pass holds
        the sync lock (the action, parked on a held request)."""
        with trio.move_on_after(WRITER_PATIENCE):
            while self.cache.pending_bytes and not self.ctx.fetcher.waits_for_pass():
                await trio.sleep(0.001)  # the writer's worker thread
            return
        self.state_errors.append(f"the blob writer left {self.cache.pending_bytes} bytes "
                                 f"unwritten after {self.log[-1] if self.log else 'start'}")

    # local filesystem operations (through the handlers)

    def _handle(self, path: str, *, by_key: bool = False) -> str | None:
        """The open handle (its key) on the file now at path, wherever it was opened;
        by_key: else the handle opened at path, wherever its file is now."""
        node = self.node(path)
        if node is not None:
            for key, (_fh, ino, _seen, _data) in self.handles.items():
                if ino == node.ino:
                    return key
        return path if by_key and path in self.handles else None

    async def op_write(self, path: str, content: str | None = None) -> None:
        """Open (create or truncate), write, close."""
        data = self._content(content, "w")
        replaced = self.tree_sha(path)
        node = self.node(path)
        synced = node.base_sha if node is not None and not node.is_dir else None
        key = self._handle(path)
        await self._put(path, data)
        made = self.node(path) if node is None else None
        if made is not None and made.memory_id is not None:
            # A new file at the path of a pending delete revives that memory, its base
            # included (docs/SEMANTICS.md, create): the memory's file saved again.
            synced = self._synced(made)
        self._wrote(sha256(data), replaced, f"local write to {path}", synced=synced)
        if node is not None and self.taken_there.get(node.ino, (None,))[0] == sha256(data) \
                == synced:
            # The synced bytes written again, which another writer has changed since: no
            # change ("ours = base", `_wrote`), so the file still holds them as theirs to
            # change, not as a write of the user's (`_held_here`), whatever its gen now.
            self.taken_there[node.ino] = (synced, self.node(path).gen)
        if node is not None and node.memory_id is not None:
            self.mine_in.setdefault(sha256(data), set()).add(node.memory_id)
        if key is not None:
            # One inode, one buffer: the open handle now holds data, made durable by this
            # close; its own close writes nothing more (as after op_read's close). A later
            # change (the server's) may replace data without anything lost.
            fh, ino, _seen, _old = self.handles[key]
            self.handles[key] = (fh, ino, sha256(data), None)

    async def op_save_as(self, path: str, content: str | None = None) -> None:
        """An editor's atomic save: write path.tmp, rename it over path."""
        data = self._content(content, "s")
        tmp = path + ".tmp"
        if self.node(tmp) is not None:
            raise Skip(f"{tmp} exists")
        replaced = self.tree_sha(path)
        await self._put(tmp, data)
        self._wrote(sha256(data), None, f"editor save to {path}")
        await self.op_rename(tmp, path)
        self.writes.add((sha256(data), replaced))

    async def op_rename(self, src: str, dst: str) -> None:
        node = self.node(src)
        if node is None or src == dst:
            raise Skip(f"no {src}")
        target = self.node(dst)
        # Over a file: the target keeps its memory (an editor's save) and the source's
        # memory goes; over a file that has none yet, the source keeps its own.
        gone = taken = None
        if target is not None and not target.is_dir:
            gone = node.memory_id if target.memory_id is not None else target.memory_id
            taken = target.memory_id
        # A file moved onto the path of a pending delete, holding exactly what that
        # memory held (or what our request in doubt wrote to it), takes that memory back
        # (a round trip): its own memory goes.
        st = self.state
        before = {n.ino: n.memory_id for n in st.walk(node) if not n.is_dir}
        pending = set(st.tombstones)
        sp, sn = _split(src)
        dst_parent = await self._parent(dst)
        await self.ops.rename(self.node(sp).ino, sn.encode(), dst_parent,
                              _split(dst)[1].encode(), 0, _ctx())
        if target is not None and not target.is_dir:
            self._supersede(target.sha)
            self.removed.add(target.ino)
        self._alive_drop(gone)
        if taken is not None and node.memory_id == taken:
            self.alive_ino[taken] = node.ino  # the file that holds it now
            if taken in self.overtaken and node.sha == self._synced(node):
                # Over a file whose memory another writer has deleted or written over
                # since, with the very bytes memfs takes as that memory's: no change to
                # sync (ours = base, as for the take-back below), so their change goes
                # over the moved file as over the one it replaced.
                self.taken_there[node.ino] = (node.sha, node.gen)
                if not self._held_here(node.sha):
                    self.obligations.pop(node.sha, None)
        for ino, mid in before.items():
            moved = st.nodes.get(ino)
            back = None if moved is None else moved.memory_id
            if back != mid and back in pending and back in self.overtaken \
                    and moved.sha == self._synced(moved):
                # It revived a memory another writer has deleted or written over since, and
                # holds the bytes memfs takes as that memory's: no change to sync (as
                # `op_write`'s revive), and the user's write of them goes with their change.
                self.taken_there[ino] = (moved.sha, moved.gen)
                if not self._held_here(moved.sha):
                    self.obligations.pop(moved.sha, None)
            if mid is None or moved is None or moved.memory_id == mid or (
                    ino == node.ino and gone is not None):
                continue  # (over a file: the save's rule above)
            back = moved.memory_id
            assert back in pending, f"{st.path_of(moved)}: {mid} -> {back}, not a pending delete"
            self._alive_drop(mid)
            if self.alive is not None:
                self.alive[back] = st.path_of(moved)
                self.alive_ino[back] = ino

    async def op_unlink(self, path: str) -> None:
        node = self.node(path)
        if node is None or node.is_dir:
            raise Skip(f"no file {path}")
        sha, mid = node.sha, node.memory_id
        d, name = _split(path)
        await self.ops.unlink(self.node(d).ino, name.encode(), _ctx())
        self._supersede(sha)
        self._alive_drop(mid)
        self.removed.add(node.ino)

    async def op_open_write(self, path: str, content: str | None = None) -> None:
        """Open and write without closing: a dirty open buffer (closed by `close`)."""
        if self._handle(path) is not None or path in self.handles:
            # (a handle opened at this path whose file moved away is still keyed by it)
            raise Skip(f"{path} already open")
        data = self._content(content, "o")
        node = self.node(path)
        if node is None or node.is_dir:
            raise Skip(f"no file {path}")
        seen = node.sha
        fi = await self.ops.open(node.ino, os.O_WRONLY | os.O_TRUNC, _ctx())
        await self.ops.write(fi.fh, 0, data)
        self.handles[path] = (fi.fh, node.ino, seen, data)

    async def op_close(self, path: str) -> None:
        key = self._handle(path, by_key=True)
        if key is None:
            raise Skip(f"{path} not open")
        fh, ino, seen, data = self.handles.pop(key)
        try:
            await self.ops.flush(fh)
        finally:
            await self.ops.release(fh)
        # A file the user unlinked or replaced meanwhile: its close keeps nothing.
        if data is not None and ino not in self.removed:
            self._wrote(sha256(data), seen, f"local write (closed buffer) to {key}")

    async def close_all(self) -> None:
        for key in sorted(self.handles):
            await self.do(("close", key))

    async def op_read(self, path: str) -> None:
        node = self.node(path)
        if node is None or node.is_dir:
            raise Skip(f"no file {path}")
        fi = await self.ops.open(node.ino, os.O_RDONLY, _ctx())
        try:
            await self.ops.read(fi.fh, 0, 1 << 20)
        finally:
            await self.ops.release(fi.fh)
        key = self._handle(path)
        if key is not None and self.handles[key][3] is not None:
            # One inode, one buffer: this close made the open handle's writes durable.
            fh, ino, seen, data = self.handles[key]
            self._wrote(sha256(data), seen, f"local write (buffer, made durable) to {key}")
            self.handles[key] = (fh, ino, seen, None)

    async def op_mkdir(self, path: str) -> None:
        await self._parent(path + "/x")

    async def op_rmtree(self, path: str) -> None:
        """`rm -r path`: unlink every file below, then remove the directories, deepest
        first."""
        top = self.node(path)
        if top is None or not top.is_dir:
            raise Skip(f"no directory {path}")
        below = sorted((self.state.path_of(n) for n in self.state.walk(top)),
                       key=lambda p: (-p.count("/"), p))
        for p in below:
            node = self.node(p)
            if node is None:
                continue
            if not node.is_dir:
                await self.op_unlink(p)
            else:
                d, name = _split(p)
                await self.ops.rmdir(self.node(d).ino, name.encode(), _ctx())

    def user_tree(self) -> dict[str, str]:
        """What the user sees: path -> content sha of every file that is to be a memory."""
        st = self.state
        return {st.path_of(n): n.sha for n in st.files() if not st.is_local_only_name(n)}

    async def unreadable(self) -> list[str]:
        """Every file of the tree reads back, through the handlers, as its sha says (from
        the files the blob writer wrote, or fetched)."""
        out = []
        for path, sha in sorted(self.user_tree().items()):
            node = self.node(path)
            try:
                fi = await self.ops.open(node.ino, os.O_RDONLY, _ctx())
                try:
                    data = await self.ops.read(fi.fh, 0, 1 << 20)
                finally:
                    await self.ops.release(fi.fh)
            except pyfuse3.FUSEError as exc:
                out.append(f"{path} does not read: {errno.errorcode.get(exc.errno, exc.errno)}")
                continue
            if sha256(data) != sha:
                out.append(f"{path} reads {self.label(sha256(data))}, not {self.label(sha)}")
        return out

    def not_durable(self) -> list[str]:
        """Once the blob writer is quiet, a restarted daemon finds every file's content the
        mount holds (a second BlobCache on the same directory: a blob file, or staged.db)."""
        other = BlobCache(self.cache.root)
        try:
            return [f"{path}: {self.label(sha)} is in memory only, a restart would lose it"
                    for path, sha in sorted(self.user_tree().items())
                    if self.cache.get(sha) is not None and other.get(sha) is None]
        finally:
            other.close()

    async def op_restore(self, path: str) -> None:
        """`memfs conflicts restore` of the newest conflict at path."""
        rows = [r for r in self.state.conflicts() if r["path"] == path]
        if not rows:
            raise Skip(f"no conflict at {path}")
        row = rows[-1]
        # The file restored is the one that holds the memory now (moved since, too), else
        # whatever stands at the row's path (docs/SYNC.md).
        node = self.state.holder(row["memory_id"]) if row["memory_id"] else None
        if node is None:
            node = self.node(path)
        # (By content: a file whose content is the server's but whose rename is pending
        # holds no edit of its own; memfs keeps only such an edit, as a conflict.)
        clean = node is not None and not node.is_dir and node.sha == node.base_sha \
            and not is_open_dirty(self, node.ino)
        replaced = node.sha if node is not None and not node.is_dir else None
        try:
            restore_conflict(self, row["id"])
        except Exception as exc:
            if is_refusal(exc):
                raise Skip(f"restore refused: {exc}") from None
            raise
        # The restorer sees (and replaces) a synced file; a newer pending edit is not theirs.
        if clean:
            self._supersede(replaced)
        self.obligations[row["local_sha"]] = f"restored conflict at {path}"
        self.restored.append(row)

    async def op_discard(self, path: str | None = None) -> None:
        """`memfs conflicts discard` of the newest conflict (at path, if given): the user
        drops the bytes it kept, on purpose, so they are owed no more (unless a file
        here or another conflict still holds them)."""
        rows = [r for r in self.state.conflicts() if path in (None, r["path"])]
        if not rows:
            raise Skip(f"no conflict at {path or 'any path'}")
        row = rows[-1]
        discard_conflict(self, row["id"])
        self.discarded.append(row)
        sha = row["local_sha"]
        if not self._held_here(sha) and sha not in {c["local_sha"] for c in self.state.conflicts()}:
            self.obligations.pop(sha, None)

    # other clients: straight on the server

    def server(self) -> dict[str, tuple[str, str]]:
        """{path: (memory id, content sha)} as the server holds it now."""
        out, page = {}, None
        while True:
            got = self.db.list_memories(self.store_id, limit=100, page=page)
            for m in got["data"]:
                out[m["path"]] = (m["id"], m["content_sha256"])
            page = got["next_page"]
            if not page:
                return out

    def _memory(self, target: str) -> tuple[str, str, str]:
        """(id, path, sha) of the memory at a path, or "@/path": the memory the mount held
        at that path when the action started, wherever it is now."""
        by_id = {mid: (p, sha) for p, (mid, sha) in self.server().items()}
        if target.startswith("@"):
            mid = self.named.get(target)
            if mid is None and self.alive is None:  # during setup: the mount's memory now
                node = self.node(target[1:])
                mid = None if node is None else node.memory_id
            if mid is None or mid not in by_id:
                raise Skip(f"no memory {target}")
            return mid, *by_id[mid]
        got = self.server().get(target)
        if got is None:
            raise Skip(f"no memory at {target}")
        return got[0], target, got[1]

    async def op_r_edit(self, target: str, content: str | None = None) -> None:
        mid, path, old = self._memory(target)
        data = self._content(content, "r")
        if sha256(data) == old:  # the server makes no version: nothing was written
            raise Skip(f"{path} holds those bytes already")
        try:
            self.db.update_memory(self.store_id, mid, content=data.decode(), actor=OTHER)
        except ApiError as exc:
            raise Skip(exc.message) from None
        self.overtaken.add(mid)
        self._taken_there(mid, old)
        self.over_there.setdefault(old, set()).add(mid)
        self._wrote(sha256(data), old, f"remote edit of {path}", local=False)
        # Their bytes are those a pending change of the user's was made over (A, then
        # theirs B, then A again): an edit of the file made over the first A, or its
        # delete (sent on A's sha). A three-way merge takes "theirs = base" for no
        # change, as the API's precondition on the content does, and the user's change
        # goes over them: not owed, the user changed these very bytes (as `_wrote` takes
        # "ours = base"), unless a file here still holds them as a write of the user's.
        node, tomb = self.state.holder(mid), self.state.tombstones.get(mid)
        if node is not None:
            under = self._synced(node) if node.sha != sha256(data) else None
        else:
            under = None if tomb is None else tomb.base_sha
        if under == sha256(data) and not self._held_here(under):
            self.obligations.pop(under, None)

    async def op_r_create(self, path: str, content: str | None = None) -> None:
        data = self._content(content, "c")
        try:
            self.db.create_memory(self.store_id, path=path, content=data.decode(), actor=OTHER)
        except ApiError as exc:
            raise Skip(exc.message) from None
        self._wrote(sha256(data), None, f"remote create of {path}", local=False)

    async def op_r_create_park(self, target: str, content: str | None = None) -> None:
        """A stranger's memory at the place the pusher would park `target` (a swap)."""
        mid, _path, _sha = self._memory(target)
        await self.op_r_create(RESERVED_PREFIX + mid, content)

    async def op_r_delete(self, target: str) -> None:
        mid, path, old = self._memory(target)
        self.db.delete_memory(self.store_id, mid, actor=OTHER)
        # What our requests wrote there no longer stands there: a file of ours kept
        # (its unsaved writes, lost with a killed daemon) and made again at that path
        # meets whatever came since as a real conflict, as after a delete of ours.
        self.transport.standing = {w for w in self.transport.standing if w[0] != path}
        self.overtaken.add(mid)
        self._taken_there(mid, old)
        self._supersede(old, local=False)
        if self.alive is not None:
            self.alive.pop(mid, None)
        self.excused.add(mid)

    async def op_r_rename(self, target: str, new_path: str) -> None:
        mid, path, _sha = self._memory(target)
        try:
            self.db.update_memory(self.store_id, mid, path=new_path, actor=OTHER)
        except ApiError as exc:
            raise Skip(exc.message) from None

    async def op_r_redact(self, target: str) -> None:
        """Another client redacts every version of the memory at `target` that holds
        content this mount's requests wrote there, but its head (which the server will
        not redact): a lost answer's own version may be gone before the doubt is
        resolved (docs/SYNC.md, "Not covered"; on the hosted API versions also age out)."""
        mid, _path, _sha = self._memory(target)
        ours = {sha for _p, sha in self.transport.wrote}
        versions = self.db.list_versions(self.store_id, memory_id=mid, limit=100)["data"]
        head = self.db.get_memory(self.store_id, mid)["memory_version_id"]
        gone = [v for v in versions if v["id"] != head and v.get("content_sha256") in ours]
        if not gone:
            raise Skip(f"no version of ours to redact in {target}")
        for v in gone:
            self.db.redact_version(self.store_id, v["id"], actor=OTHER)
            self.redacted.add(v["content_sha256"])

    # sync passes (setup and settle)

    async def op_push(self) -> None:
        await self.pusher.push_pass()

    async def op_flush(self) -> None:
        await self.pusher.flush(60.0)

    async def op_reconcile(self) -> None:
        await listing_pass(self, full=True)

    async def op_poll(self) -> None:
        await listing_pass(self, full=False)

    async def op_age(self) -> None:
        """Hours pass: every pending delete is due, and the lost-answer wait of every
        request in doubt is over (a late one lands first). Not of a request sent later:
        it has its own wait, which a late outcome of it relies on."""
        age_tombstones(self)
        self.transport.apply_late(now=True)
        for doubt in self.state.doubts:
            self.ctx.doubt_lost_at[doubt] = None  # (None: it can no longer land)

    # -- checks ---------------------------------------------------------------------------

    def check_state(self) -> None:
        """State's in-memory indexes agree with state.db (checked after every step)."""
        for mid in self.alive or ():
            ino = self.state.by_memory.get(mid)
            if ino is not None and ino in self.state.nodes:
                self.held.setdefault(mid, set()).add(self.state.nodes[ino].sha)
        other = reopen_state(self)
        try:
            mine, theirs = state_snapshot(self.state), state_snapshot(other)
        finally:
            other.close()
        for key in mine:
            if mine[key] == theirs[key]:
                continue
            if key == "nodes":
                a, b = mine[key], theirs[key]
                diffs = []
                for ino in sorted(set(a) | set(b)):
                    if a.get(ino) != b.get(ino):
                        if ino not in a or ino not in b:
                            diffs.append(f"ino {ino}: memory {a.get(ino)} / db {b.get(ino)}")
                        else:
                            diffs += [f"ino {ino} {f}: memory {a[ino].get(f)!r} / db "
                                      f"{b[ino].get(f)!r}" for f in a[ino]
                                      if a[ino].get(f) != b[ino].get(f)]
                detail = "; ".join(diffs[:3])
            else:
                detail = f"memory {mine[key]} / db {theirs[key]}"
            where = self.log[-1] if self.log else "start"
            self.state_errors.append(f"state.{key} differs from state.db after {where}: "
                                     f"{detail}")


# ======================================================================================
# The oracle
# ======================================================================================


class Oracle:
    """What must hold; each check returns violation messages (empty: fine)."""

    @staticmethod
    def requests(eng: Engine) -> list[str]:
        out = list(eng.transport.violations)
        for rec in eng.transport.records:
            if rec.method == "POST" and rec.memory_id and isinstance(rec.body, dict):
                pre = rec.body.get("precondition") or {}
                if "content" in rec.body and not pre.get("content_sha256"):
                    out.append(f"content update without a content_sha256 precondition: "
                               f"{rec.short()}")
            if rec.method == "DELETE" and rec.memory_id \
                    and not rec.query.get("expected_content_sha256"):
                out.append(f"delete without expected_content_sha256: {rec.short()}")
        return out

    @staticmethod
    def after_reconcile(eng: Engine) -> list[str]:
        """After a reconcile pass: no memory the server still holds was dropped."""
        st, server = eng.state, {mid: p for p, (mid, _s) in eng.server().items()}
        known = set(st.by_memory) | set(st.tombstones)
        out = []
        for mid in sorted(eng.known_at_start - known):
            if mid not in server:
                continue
            deleted_here = mid in eng.tombstones_at_start or mid in eng.removed_here
            if deleted_here and (st.lookup_path(server[mid]) is not None
                                 or mid in eng.reconciler.feed.rechecks):
                # Deleted here (before the pass or while it ran), changed there, onto a
                # path a local file or directory holds:
                # the delete no longer applies, and the memory is what any memory colliding
                # with a local file is, not shown until the path frees (docs/SYNC.md, the
                # merge table: "its path held here"); held by another memory of ours when
                # the pass met it (freed since by an interference), the next poll names it.
                continue
            out.append(f"the reconcile pass dropped {eng.mname(mid)} (now at {server[mid]}), "
                       "which the server still holds")
        return out

    @staticmethod
    def sole_writer(eng: Engine, made: dict[str, str]) -> list[str]:
        """With no other writer, settling changes nothing the user sees: the tree and the
        server both equal `made` (the user's tree when the last local step ended), with
        no conflict, and no memory held by two files."""
        out = []
        tree = eng.user_tree()
        server = {p: sha for p, (_mid, sha) in eng.server().items()
                  if not p.startswith(RESERVED_PREFIX)}
        for name, got in (("the tree", tree), ("the server", server)):
            for p in sorted(set(got) | set(made)):
                if got.get(p) != made.get(p):
                    out.append(f"{name} has {p} = {eng.label(got.get(p))}, the user left "
                               f"{eng.label(made.get(p))}")
        for c in eng.state.conflicts():
            out.append(f"conflict #{c['id']} at {c['path']} ({c['reason']}) with no other "
                       "writer")
        ids = [n.memory_id for n in eng.state.files() if n.memory_id]
        for mid in sorted({m for m in ids if ids.count(m) > 1}):
            out.append(f"{eng.mname(mid)} is held by two files")
        return out

    @staticmethod
    def untouched(eng: Engine, mine: dict[str, str], when: str) -> list[str]:
        """With no other writer, no pass changes the tree: a file the user deleted does
        not come back, not even for a while (the end state alone would not show it)."""
        tree = eng.user_tree()
        return [f"{when}, the tree has {p} = {eng.label(tree.get(p))}, the user left "
                f"{eng.label(mine.get(p))}"
                for p in sorted(set(tree) | set(mine)) if tree.get(p) != mine.get(p)]

    @staticmethod
    def applied_not_in_conflict(eng: Engine) -> list[str]:
        """A conflict keeps content the server never took there. Content one of this
        mount's own requests wrote at that path (answered, or applied with its answer
        lost; its memory not moved away from there by a request of ours since, nor
        deleted by another writer) is not
        in conflict: another writer who came after it came later (docs/
        SYNC.md, the doubts table: "was applied first"). Filing it as a conflict is the
        false conflict a lost answer judged not applied leaves, which `settled`'s false
        conflict check cannot see when the content it lost to is another writer's. Not checked where
        the run restores a conflict: `conflicts restore` keeps what it replaces, even
        content that reached the server (`restore_over_pending_edit`). One more case
        keeps such a row on purpose, which no run here reaches (the harness never
        refuses the reads that resolve a doubt): a listing that takes another writer's
        version while our doubt cannot be resolved files our write as a conflict, since
        memfs cannot yet tell whether it landed; when the doubt is later found applied
        and written over ("superseded"), the row stays (tests/test_one_doubt.py,
        `test_a_lost_update_written_over_after_a_listing_took_theirs_is_not_sent_again`).
        Nor is content whose version another client redacted (`op_r_redact`): as far as
        the server shows, our request never wrote it, and keeping it is what nothing
        lost asks. Nor a create in doubt whose memory another client edited or deleted
        before memfs heard (`decide.created_row`, OVERTAKEN): the server cannot tell
        that creation from another writer's of the same bytes at the same path, and
        memfs keeps the bytes rather than lose a stranger's case; nor, alike, an update
        in doubt of a mount that has not learned who it writes as (`Oracle.overtaken`)."""
        return [f"false conflict #{c['id']} at {c['path']}: it keeps "
                f"{eng.label(c['local_sha'])}, which this mount's request wrote there "
                f"({c['reason']})"
                for c in eng.state.conflicts()
                if (c["path"], c["local_sha"]) in eng.transport.standing
                and c["local_sha"] not in eng.redacted  # the server no longer shows it
                and c["local_sha"] not in eng.rewritten
                and not Oracle.overtaken(eng, c)]

    @staticmethod
    def overtaken(eng: Engine, c: dict) -> bool:
        """A conflict memfs files for a request in doubt whose memory another client
        changed or deleted since, kept on purpose though the request may have been
        applied: a create (`decide.created_row`, OVERTAKEN), or an update of a mount that
        has not learned who it writes as (`decide.maybe_another_writer`: the version
        holding its bytes may be another writer's)."""
        return c["memory_id"] in eng.overtaken and any(
            why in c["reason"] for why in ("cannot tell whether it was ours",
                                           "cannot tell whether those bytes were ours"))

    @staticmethod
    def tree(eng: Engine) -> list[str]:
        """Never a reserved path in the tree."""
        return [f"reserved path {eng.state.path_of(n)} is in the tree"
                for n in eng.state.files()
                if eng.state.path_of(n).startswith(RESERVED_PREFIX)]

    @staticmethod
    def settled(eng: Engine, may_stay: tuple[str, ...] = ()) -> list[str]:
        """After settling. may_stay: server paths whose changes the server keeps refusing;
        they may differ from the tree only while status reports them."""
        st, out = eng.state, []
        files = {st.path_of(n): n for n in st.files() if not st.is_local_only_name(n)}
        server = eng.server()
        left = pending_paths(st)
        exempt = {p for p in may_stay if any(p in v for v in left.values())}
        visible = {p: v for p, v in server.items() if not p.startswith(RESERVED_PREFIX)}
        ours = set(eng.named.values()) | eng.transport.created
        for p, (mid, _sha) in server.items():
            if p.startswith(RESERVED_PREFIX) and mid in ours:
                out.append(f"our {eng.mname(mid)} is still parked at {p}")
        files = {p: n for p, n in files.items() if not p.startswith(RESERVED_PREFIX)}
        # The tree equals the server: every path, content and memory id.
        for p in sorted(set(files) | set(visible)):
            if p in exempt:
                continue
            node, remote = files.get(p), visible.get(p)
            if node is None:
                out.append(f"server has {p} ({eng.mname(remote[0])}, "
                           f"{eng.label(remote[1])}) that the tree does not")
            elif remote is None:
                out.append(f"tree has {p} ({eng.label(node.sha)}, {eng.mname(node.memory_id)}) "
                           "that the server does not")
            elif (node.memory_id, node.sha) != remote:
                out.append(f"{p}: tree {eng.label(node.sha)} ({eng.mname(node.memory_id)}) != "
                           f"server {eng.label(remote[1])} ({eng.mname(remote[0])})")
        out += Oracle.tree(eng)
        conflicts = st.conflicts()
        kept = {n.sha for n in files.values()} | {s for _i, s in server.values()} \
            | {c["local_sha"] for c in conflicts}
        # Every content a writer left last is in the tree, the server's head or a conflict.
        # But bytes written on both sides that the user then wrote over or removed here:
        # by content (the precondition, memfs's base) the other writer's write of them is
        # ours, which the user's later edit goes over, as it would had it come first (an
        # update to the bytes a memory holds answers 200 whatever its precondition); and
        # a file of theirs holding them alike does not stand for the user's write. Nor
        # bytes both wrote that the other writer then wrote over in the memory of the
        # file the user wrote them to: the user's write met them there (the API's no-op)
        # and their edit went on from it, as had the user's come first.
        for sha, who in sorted(eng.obligations.items(), key=lambda kv: kv[1]):
            if sha in eng.written_here and sha in eng.written_there and (
                    sha in eng.replaced_here
                    or eng.mine_in.get(sha, set()) & eng.over_there.get(sha, set())):
                continue
            if sha not in kept and sha != EMPTY_SHA:
                out.append(f"lost: {eng.label(sha)} ({who}) is not in the tree, on the "
                           "server or in a conflict")
        # A conflict must be real: not a local write filed against what it replaced.
        for c in conflicts:
            if (c["local_sha"], c["remote_sha"]) in eng.writes \
                    and not {c["local_sha"], c["remote_sha"]} & eng.rewritten \
                    and not Oracle.overtaken(eng, c):
                out.append(f"false conflict #{c['id']} at {c['path']}: "
                           f"{eng.label(c['local_sha'])} was written over "
                           f"{eng.label(c['remote_sha'])}, yet filed as losing to it")
        # Never two memories for one file: what a local write replaced in a file is not
        # still the head of another memory beside the one holding the write. (Remote writes
        # are left out: a local rename may have moved what they replaced to another file.)
        heads: dict[str, set[str]] = {}
        for p, (mid, sha) in visible.items():
            if p not in exempt:
                heads.setdefault(sha, set()).add(mid)
        for new, old in sorted(eng.writes, key=lambda w: (w[0] or "", w[1] or "")):
            if old in heads and new in heads and old not in eng.obligations \
                    and old not in eng.rewritten and old != EMPTY_SHA and heads[old] - heads[new]:
                for mid in sorted(heads[old] - heads[new]):
                    path = next(p for p, (m, _s) in visible.items() if m == mid)
                    out.append(f"duplicate: {path} ({eng.mname(mid)}) still holds "
                               f"{eng.label(old)}, which {eng.label(new)} replaced")
        # Saves and renames keep memory ids, but where a conflict (kept, or restored since)
        # or another client's delete explains the change.
        explaining = [*conflicts, *eng.restored, *eng.discarded]
        excused = {c["memory_id"] for c in explaining} | eng.excused
        conflict_paths = {c["path"] for c in explaining}
        conflict_shas = {c["local_sha"] for c in explaining}
        for mid, p in sorted((eng.alive or {}).items(), key=lambda kv: kv[1]):
            if mid in st.by_memory or mid in excused or p in conflict_paths \
                    or eng.held.get(mid, set()) & conflict_shas:
                continue
            took = st.nodes.get(eng.alive_ino.get(mid))
            if took is not None and took.memory_id is not None \
                    and took.memory_id not in eng.alive_ino:
                continue  # its file took back a memory our create made (SEMANTICS, rename)
            now = st.lookup_path(p)
            now_id = None if now is None or now.is_dir else now.memory_id
            out.append(f"memory id of {p} changed: {eng.mname(mid)} -> {eng.mname(now_id)} "
                       "with no remote delete or conflict to explain it")
        # Status is exact: nothing pending once settled (but what is refused for good).
        left = {k: [p for p in v if p not in exempt] for k, v in left.items()}
        left = {k: v for k, v in left.items() if v}
        if left:
            out.append(f"status still reports pending work after settling: {left}")
        tombs = sorted(t.base_path for t in st.tombstones.values() if t.base_path not in exempt)
        if tombs:
            out.append(f"tombstones left after settling: {tombs}")
        return out


# ======================================================================================
# Scenarios and the explorer
# ======================================================================================

Step = tuple
Check = Callable[[Engine, "RunResult"], list[str]]


@dataclass
class Scenario:
    name: str
    setup: list[Step]
    #: push (one pass) | pushes (passes one after another while something is left, at most
    #: PUSH_PASSES) | flush | reconcile (a full listing) | poll (the change feed)
    action: str
    interference: list[Step]
    #: A second interference, for two held requests in one run: at a hold of request k1,
    #: `interference` runs, then k1 goes on; at a later request k2's hold, `second` runs.
    #: `explore` tries every such pair; where one request is held, `second` runs after the
    #: action.
    second: list[Step] = field(default_factory=list)
    after: list[Step] = field(default_factory=list)  # after the action, before settling
    faults: list[FaultRule] = field(default_factory=list)
    points: tuple[str, ...] = FAULT_POINTS
    list_limit: int | None = None
    check: Check | None = None  # scenario-specific, right after the action
    settled_check: Check | None = None  # scenario-specific, once the run has settled
    may_stay: tuple[str, ...] = ()  # see Oracle.settled
    doc: str = ""
    #: The mount is the store's only writer: settling must leave exactly the tree the
    #: user made (nothing deleted comes back, no duplicate, no conflict at all).
    sole_writer: bool = False
    #: At most this many push+reconcile rounds to settle: `SETTLES_IN`, or one of the
    #: reasons above for a round more; None for the random search's scenarios (drawn,
    #: so no reason is known; `SETTLE_ROUNDS` still bounds them).
    settles_in: int | None = SETTLES_IN

    @property
    def restores(self) -> bool:
        """Whether a step restores a conflict (see `Oracle.applied_not_in_conflict`)."""
        return any(step[0] == "restore"
                   for step in (*self.setup, *self.interference, *self.second, *self.after))


@dataclass
class RunResult:
    label: str
    requests: int = 0  # the action's requests
    reached: bool = True
    #: two holds: the second request reached its point while the first was still held
    together: bool = False
    crashed: bool = False  # the daemon was killed and started again ("crash")
    #: a hold not reached because the action's request count varies (see `explore`)
    excused: bool = False
    recovery: int = 0  # a crash run: the requests of the restarted daemon's first pass
    faulted: int = 0  # requests a `FaultRule` took
    settle_rounds: int = 0  # the push+reconcile rounds settling took (see `_settle`)
    action_error: str | None = None
    action_value: Any = None
    violations: list[str] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)


async def _action(eng: Engine, kind: str) -> Any:
    if kind == "push":
        return await eng.pusher.push_pass()
    if kind == "pushes":  # what Pusher.run does after a pass that went offline, unwaited
        results = []
        for _ in range(PUSH_PASSES):
            results.append(await eng.pusher.push_pass())
            if not results[-1].left:
                break
        return results
    if kind == "flush":
        return await eng.pusher.flush(60.0)
    if kind in ("reconcile", "poll"):  # a full listing / a change-feed poll
        return await listing_pass(eng, full=kind == "reconcile")
    raise ValueError(kind)


async def listing_pass(eng: Engine, *, full: bool) -> Any:
    """A reconcile pass as `Reconciler.run` runs it: offline or refused, the pass ends
    there and the loop tries again later."""
    try:
        return await eng.reconciler.reconcile_pass(full=full)
    except (*api_errors.TRANSIENT, api_errors.AuthenticationError) as exc:
        return f"offline: {type(exc).__name__}"  # Reconciler.run backs off: fine
    except api_errors.APIError as exc:  # a refused listing: Reconciler.run reports it
        return f"listing failed: {type(exc).__name__}"


async def _settle(eng: Engine, result: RunResult, may_stay: tuple[str, ...]) -> None:
    token = ORIGIN.set("settle")
    try:
        await eng.close_all()
        for rounds in range(1, SETTLE_ROUNDS + 1):
            before = _fingerprint(eng)
            age_tombstones(eng)
            wait_over(eng)
            pushed = await eng.pusher.push_pass(flush=True, retry_failed=True)
            listed = await listing_pass(eng, full=False)  # a str: it went offline
            eng.check_state()
            left = pending_paths(eng.state)
            quiet = not any(p not in may_stay for v in left.values() for p in v)
            if _fingerprint(eng) == before and quiet and not getattr(pushed, "pushed", 0) \
                    and not isinstance(listed, str):
                result.settle_rounds = rounds  # the last one changed nothing
                return
        result.violations.append(f"did not settle in {SETTLE_ROUNDS} push+reconcile rounds")
    finally:
        ORIGIN.reset(token)


def _fingerprint(eng: Engine) -> Any:
    st = eng.state
    files = sorted((st.path_of(n), n.sha, n.memory_id, n.base_sha, n.base_path)
                   for n in st.files())
    return files, sorted(st.tombstones), [c["id"] for c in st.conflicts()], \
        sorted(eng.server().items())


def _label(where: tuple) -> str:
    fixed = {"none": "alone", "pre": "before the action", "post": "after the action"}
    if where[0] in fixed:
        return fixed[where[0]]
    if where[0] == "holds":
        return ", then ".join(f"k={k} {point}" for k, point in where[1:])
    if where[0] == "nested":
        (k1, p1), (k2, p2) = where[1:]
        return f"k={k1} {p1} answered after k={k2} {p2}"
    if where[0] == "crash":
        applied = {"after": "applied", "before": "not applied"}.get(
            where[2], "applied after the kill (" + where[2] + ")")
        order = ("the operation, then the daemon killed" if where[3] == "then_crash"
                 else "the daemon killed, the operation after its restart")
        again = ""
        if len(where) > 4:
            again = (f"; killed again at its first pass's request {where[4]}, "
                     + ("applied" if where[5] == "after" else "not applied"))
        return f"k={where[1]} {applied}: {order}{again}"
    return f"k={where[1]} {where[2]}"


async def _passes_in_the_wait(eng: Engine, outcome: str, sole_writer: bool,
                              result: RunResult) -> None:
    """The mount's passes while a "late" request may still land (its wait not over):
    they ask, and send nothing for its file; it lands among their requests. A push, a
    poll (for "late_page<j>", a full listing one memory a page), a push; with no other
    writer, none of them changes the user's tree (`Oracle.untouched`)."""
    mine = eng.user_tree()
    for name in ("push", "listing" if outcome.startswith("late_page") else "poll", "push"):
        if name == "listing":  # a "late_page<j>" request lands before its j-th listing request
            transport, limit = eng.transport, eng.transport.list_limit
            transport.list_limit, transport.full_listing = 1, True
            try:
                await eng.do(("reconcile",))
            finally:
                transport.list_limit, transport.full_listing = limit, False
        else:
            await eng.do((name,))
        if sole_writer and not result.violations:
            result.violations += Oracle.untouched(eng, mine, f"after the wait's {name} pass")


async def _run(scenario: Scenario, tmp: Path, where: tuple) -> RunResult:
    """One interleaving. where: ("none",) | ("pre",) | ("post",) | ("hold", k, point) |
    ("holds", (k1, point1), (k2, point2)): the interference at k1's hold, the second at
    k2's (k1 < k2) | ("nested", (k1, point1), (k2, point2)): the same, k1 held until
    k2 was released (both on the wire at once) | ("outcome", k, one of OUTCOMES):
    request k gets that outcome and the interference runs after the action, before memfs
    learns what the server did | ("crash", k, point, when): the daemon killed while
    request k is held, before the server applies it or after ("before", "after"), or
    before, the server applying it later all the same ("late3": among the passes the
    restarted daemon runs within its lost-answer wait, before its first pass), the
    interference just before that ("then_crash") or once a new daemon has started on
    what the killed one left ("restarted"), before its first pass | ("crash", k, point,
    when, j, point2): the same, then the restarted daemon killed too while request j of
    its first pass is held at point2 (`explore(twice=True)`).

    The engine's fetcher and blob writer run throughout, the mount quiet but while a local
    operation runs (`HarnessClock`)."""
    result = RunResult(_label(where))
    db = Database(":memory:")
    store = db.create_store(name="interleave")["id"]
    transport = HeldTransport(db, store, list_limit=scenario.list_limit)
    eng = make_engine(tmp, transport, retries=CLIENT_RETRIES)
    errors = _ErrorLog()
    logging.getLogger("memfs").addHandler(errors)
    try:
        with trio.move_on_after(HUNG_AFTER) as guard:
            async with trio.open_nursery() as background:
                await background.start(eng.serve_content)
                await _interleave(eng, scenario, where, result, background)
                background.cancel_scope.cancel()
        if guard.cancelled_caught:
            result.violations.append(f"the run hung: not over after {HUNG_AFTER:.0f} s")
        if eng.store.failure:
            result.violations.append(f"a background task failed: {eng.store.failure}")
        result.violations.extend(errors.seen)
    finally:
        logging.getLogger("memfs").removeHandler(errors)
        result.faulted = transport.faulted
        trace = [*eng.log, *(r.short() for r in transport.records if r.origin != "setup")]
        if len(trace) > 60:
            trace = [*trace[:50], f"… {len(trace) - 60} more …", *trace[-10:]]
        result.trace = [*trace, *result.trace]
        await eng.store.client.aclose()
        eng.store.close()
    return result


class _ErrorLog(logging.Handler):
    """memfs logs an error where a bug is caught so that one file's failure does not stop
    the rest (`push of … failed`, a handler's EIO): the run goes on and may still satisfy
    the oracle, so each such record is a violation of its own, with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        self.seen.append(f"memfs logged an error ({record.name}): {text}")


async def _until_held(transport: HeldTransport, hold: Hold, done: trio.Event) -> None:
    """Until the held request is on the wire, or the work that would send it is done
    (then `hold.rec` stays None: not reached)."""
    while hold.rec is None and not done.is_set():
        await transport.reached.wait()
        transport.reached = trio.Event()


def _kill(eng: Engine, nursery: trio.Nursery) -> Path:
    """The daemon killed now, a request held on the wire: what it leaves on disk. Its
    blob writer and every task in `nursery` end; no answer is taken in."""
    crashed = eng.snapshot()
    eng.content_scope.cancel()
    nursery.cancel_scope.cancel()
    return crashed


async def _interleave(eng: Engine, scenario: Scenario, where: tuple, result: RunResult,
                      background: trio.Nursery) -> None:
    transport = eng.transport
    crashed: Path | None = None  # ("crash", …): what the killed daemon left on disk
    for step in scenario.setup:
        await eng.do(step)
    eng.start_action()
    segments = [scenario.interference, scenario.second]
    ran = [False, False]

    async def interfere(i: int) -> None:
        ran[i] = True
        token = ORIGIN.set("interference")
        try:
            for step in segments[i]:
                await eng.do(step)
        finally:
            ORIGIN.reset(token)

    if where[0] == "pre":
        await interfere(0)
        await interfere(1)
    transport.rules = [FaultRule(**vars(r)) for r in scenario.faults]
    holds = {"hold": [where[1:]], "holds": list(where[1:]),
             "nested": list(where[1:]), "crash": [where[1:3]]}.get(where[0], [])
    if where[0] == "crash" and where[2].startswith("late"):  # killed before it is applied
        holds = [(where[1], "before")]
    transport.holds = {k: Hold(k, point) for k, point in holds}
    if where[0] == "outcome":
        transport.outcome = (where[1], where[2])
    done = trio.Event()

    async def act() -> None:
        ORIGIN.set("action")
        try:
            result.action_value = await _action(eng, scenario.action)
        except Exception as exc:
            result.action_error = f"{type(exc).__name__}: {exc}"
            result.trace = traceback.format_exception(exc)[-6:]
        finally:
            done.set()
            transport.reached.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(act)
        kept: list[Hold] = []  # "nested": the first request waits for the second's answer
        for i, (k, point) in enumerate(holds):
            hold = transport.holds[k]
            if kept:
                await trio.testing.wait_all_tasks_blocked()
            if not kept:
                await _until_held(transport, hold, done)
            if hold.rec is None:
                result.reached = False
                result.label += f" (k={k} {point} not reached: the rest after the action)"
                for unheld in transport.holds.values():  # should the action send it later
                    unheld.release.set()
                break
            await trio.testing.wait_all_tasks_blocked()
            if where[0] == "crash":  # the daemon killed with request k on the wire
                if where[3] == "then_crash":
                    await interfere(i)
                crashed = _kill(eng, nursery)  # the action dies with it, unanswered
                if where[2].startswith("late"):  # the server applies it after all, later
                    hold.rec.outcome = "lost"
                    transport.late = (int(where[2].removeprefix("late")), hold.rec, False)
                    transport.late_deadline = transport.wall() + transport.lost_answer_wait
                break
            await interfere(i)
            if i == 0 and len(holds) > 1:
                result.together = transport.holds[holds[1][0]].rec is not None
                if where[0] == "nested":
                    kept.append(hold)
                    continue
            hold.release.set()
        for hold in kept:  # once the later request's answer has been taken in
            await trio.testing.wait_all_tasks_blocked()
            hold.release.set()
        await done.wait()
    if crashed is not None:
        result.crashed = True
        await eng.restart(crashed, background)
    result.requests = transport.action_count
    if where[0] != "none":  # what did not run at a hold runs now
        for i in (0, 1):
            if not ran[i]:
                await interfere(i)
    if result.action_error is not None:
        result.violations.append(f"the {scenario.action} raised {result.action_error}")
    if scenario.action in ("reconcile", "poll"):
        result.violations += Oracle.after_reconcile(eng)
    result.violations += Oracle.tree(eng)
    if scenario.check is not None:
        result.violations += scenario.check(eng, result)
    token = ORIGIN.set("after")
    try:
        for step in scenario.after:
            await eng.do(step)
        if where[0] in ("outcome", "crash") and where[2].startswith("late"):
            await _passes_in_the_wait(eng, where[2], scenario.sole_writer, result)
    finally:
        ORIGIN.reset(token)
    await eng.close_all()
    made = eng.user_tree()
    if crashed is not None:
        await _recovery_pass(eng, where[4:6], result, background)
    try:
        await _settle(eng, result, scenario.may_stay)
    except Exception as exc:
        result.violations.append(f"settling raised {type(exc).__name__}: {exc}")
        result.trace = traceback.format_exception(exc)[-6:]
    else:
        result.violations += Oracle.settled(eng, scenario.may_stay)
        bound = scenario.settles_in
        if bound is not None and crashed is not None and len(where) > 4:
            bound += FAULT_ROUND  # killed again in its first pass
        if bound is not None and result.settle_rounds > bound:
            result.violations.append(
                f"settled in {result.settle_rounds} push+reconcile rounds, more than the "
                f"{bound} it takes (a change came a round late)")
        if not scenario.restores:
            result.violations += Oracle.applied_not_in_conflict(eng)
        if scenario.settled_check is not None:
            result.violations += scenario.settled_check(eng, result)
        if scenario.sole_writer:
            result.violations += Oracle.sole_writer(eng, made)
        token = ORIGIN.set("oracle")
        try:
            await eng.quiet()
            result.violations += await eng.unreadable()
            await eng.quiet()  # what those reads fetched, too
            result.violations += eng.not_durable()
        finally:
            ORIGIN.reset(token)
    result.violations += Oracle.requests(eng)
    result.violations += eng.state_errors


async def _recovery_pass(eng: Engine, again: tuple, result: RunResult,
                         background: trio.Nursery) -> None:
    """The restarted daemon's first pass, as settling runs it (every pending delete due),
    its requests numbered; with `again` (j, point), the daemon is killed a second time
    while request j of that pass is held at point, and started again on what it left.
    The pass resolves the first daemon's requests in doubt, so this is a crash while a
    crash is being recovered from. Open handles were closed before: nothing unsaved.

    The pass's requests are counted in the crash run without `again`, and a replay may
    send fewer: a pass's concurrent sends do not always go out in the same order (the
    blob writer's worker thread takes its own time), so the restarted daemon may find
    more or less done (a swap's park, say, of either memory). A hold not reached is
    then a run without the second kill, still checked, not a failure."""
    transport = eng.transport
    transport.counting, transport.action_count, transport.outcome = "settle", 0, None
    transport.holds = {again[0]: Hold(*again)} if again else {}
    transport.reached = trio.Event()
    done = trio.Event()
    crashed: Path | None = None
    token = ORIGIN.set("settle")
    try:
        async with trio.open_nursery() as nursery:
            async def recover() -> None:
                try:
                    age_tombstones(eng)
                    wait_over(eng)  # restarted once the wait was over
                    await eng.pusher.push_pass(flush=True, retry_failed=True)
                except Exception as exc:
                    result.violations.append(f"the restarted daemon's first pass raised "
                                             f"{type(exc).__name__}: {exc}")
                finally:
                    done.set()
                    transport.reached.set()

            nursery.start_soon(recover)
            if again:
                hold = transport.holds[again[0]]
                await _until_held(transport, hold, done)
                if hold.rec is None:  # not a failure: see below
                    result.label += f" (recovery request {again[0]} not reached)"
                else:
                    await trio.testing.wait_all_tasks_blocked()
                    crashed = _kill(eng, nursery)  # the pass dies with the daemon
            await done.wait()
    finally:
        ORIGIN.reset(token)
        result.recovery = transport.action_count
        transport.counting, transport.holds = "action", {}
    if crashed is not None:
        await eng.restart(crashed, background)


#: A tmpfs the explorations may use must have this much room (a run's state directory
#: takes well under 1 MB and is removed once the run passes).
SCRATCH_MIN_FREE = 1 << 30


def scratch_root() -> Path | None:
    """/dev/shm when it is a writable directory with room, else None (the default tmp)."""
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) \
                and shutil.disk_usage(shm).free >= SCRATCH_MIN_FREE:
            return shm
    except OSError:
        pass
    return None


@contextlib.contextmanager
def scratch(keep: Path) -> Iterator[Path]:
    """A directory (0700) for an exploration's state directories: on tmpfs when the
    machine has one with room, else `keep`. SQLite's and the blob writer's fsyncs cost
    nothing there, and the runs take less than half the time on a busy disk; the harness
    checks what each engine committed (its crash runs copy committed state), never what
    a power cut would keep. A failing run leaves its directory behind (`run_one`): what
    is left is copied into `keep` (the test's tmp_path) at the end."""
    root = scratch_root()
    if root is None:
        yield keep
        return
    made = Path(tempfile.mkdtemp(prefix="memfs-interleave-", dir=root))
    try:
        yield made
    finally:
        if any(made.iterdir()):
            shutil.copytree(made, keep, dirs_exist_ok=True, symlinks=True)
        shutil.rmtree(made, ignore_errors=True)


def run_one(scenario: Scenario, tmp: Path, where: tuple, *, seed: int = 0,
            kind: str = "scenario") -> RunResult:
    """One interleaving in a fresh trio run with a seeded scheduler (replays exactly)."""
    import trio._core._run as trio_run  # the scheduler's RNG: fixed for replay

    trio_run._r.seed(seed)
    result = trio.run(_run, scenario, tmp, where)
    EXPLORED[kind] = EXPLORED.get(kind, 0) + 1
    if not result.violations:  # the run's state, and what its daemons killed left beside it
        for path in (tmp, *tmp.parent.glob(f"{tmp.name}-restarted*")):
            shutil.rmtree(path, ignore_errors=True)
    return result


@dataclass
class Exploration:
    scenario: Scenario
    n: int
    runs: list[RunResult]

    @property
    def failures(self) -> list[RunResult]:
        return [r for r in self.runs if r.violations or not (r.reached or r.excused)]

    def summary(self, *, traces: int = 1) -> str:
        """Failing interleavings grouped by message, then the first one's trace."""
        groups: dict[str, list[str]] = {}
        for r in self.failures:
            msgs = r.violations or ["hold point not reached (nondeterministic action)"]
            for m in dict.fromkeys(_MEMORY_ID.sub("mem_…", m) for m in msgs):
                groups.setdefault(m, []).append(r.label)
        lines = [f"{self.scenario.name}: {len(self.failures)} of {len(self.runs)} "
                 f"interleavings fail (the action alone sends {self.n} requests)"]
        for m, labels in groups.items():
            lines.append(f"  - {m}\n      at: {', '.join(labels)}")
        for r in self.failures[:traces]:
            lines.append(f"trace of {r.label}:")
            lines += [f"    {t.rstrip()}" for t in r.trace]
        return "\n".join(lines)


def explore(scenario: Scenario, tmp: Path, *, outcomes: tuple[str, ...] = (),
            crashes: tuple[tuple[str, str], ...] = (), twice: bool = False,
            holds: bool = True) -> Exploration:
    """Every hold point of every request of the action, plus before and after it; and
    with `outcomes`, each of them for every request, the interference after the action
    (while the mount does not know the outcome); with `crashes` (`CRASHES`, and
    `LATE_CRASHES`), the daemon killed while each request is on the wire in each of
    those ways, and with `twice`, each crash run's restarted daemon killed again at every
    point of every request of its first pass (the crash run counted them; not after a
    "late3" kill, whose first pass is the one the other kinds have). With a `second`
    interference, also every pair of holds: each hold run's own later requests, each at
    every point; where both were on the wire at once, also with the later one answered
    first. `holds=False` leaves out the holds (and so the pairs), before and after: a
    family that only asks what a crash does."""
    base = run_one(scenario, tmp / "alone", ("none",))
    n = base.requests
    wheres: list[tuple] = []
    if holds:
        wheres += [("pre",), *[("hold", k, p) for k in range(n) for p in scenario.points],
                   ("post",)]
    wheres += [("outcome", k, o) for k in range(n) for o in outcomes]
    wheres += [("crash", k, *c) for k in range(n) for c in crashes]
    first = [run_one(scenario, tmp / f"run{i}", w) for i, w in enumerate(wheres)]
    runs = [base, *first]
    if twice:
        again = [(*w, j, p) for w, r in zip(wheres, first, strict=True)
                 if w[0] == "crash" and not w[2].startswith("late")
                 for j in range(r.recovery) for p in POINTS]
        runs += [run_one(scenario, tmp / f"again{i}", w) for i, w in enumerate(again)]
    if scenario.second:
        # Two held requests: after request k1's hold (and the interference there), the
        # action sent what the run with that hold alone counted; hold each later one too.
        pairs = [("holds", w[1:], (k2, p2)) for w, r in zip(wheres, first, strict=True)
                 if w[0] == "hold" and r.reached
                 for k2 in range(w[1] + 1, r.requests) for p2 in scenario.points]
        paired = [run_one(scenario, tmp / f"pair{i}", w) for i, w in enumerate(pairs)]
        # Both on the wire at once: their answers in the other order too.
        nested = [("nested", *w[1:]) for w, r in zip(pairs, paired, strict=True) if r.together]
        runs += paired + [run_one(scenario, tmp / f"nested{i}", w)
                          for i, w in enumerate(nested)]
    _excuse_a_varying_count(scenario, tmp, runs)
    return Exploration(scenario, n, runs)


def _excuse_a_varying_count(scenario: Scenario, tmp: Path, runs: list[RunResult]) -> None:
    """A hold the action never reached fails the exploration: the action should send
    the requests its run alone counted. Some actions do not, now and then: a pass's
    concurrent sends do not always go out in the same order (the blob writer's worker
    thread takes its own time), and one order takes a longer path (a rename sent before the create
    it made room for meets a 409 first: 6 requests instead of 4, in about 1 run of 30
    on a loaded machine). When the run alone took such a path, the holds past the usual
    count are never reached. So, only then, the action runs alone twice more: if its
    count differs from run to run, a run whose hold was not reached is excused (labelled,
    not a failure) when it sent one of the shorter counts the action alone was seen to
    send (its interference ran after the action, so the action ran alone). A count that
    is always the same keeps every such failure."""
    unreached = [r for r in runs if not r.reached]
    if not unreached:
        return
    counts = {runs[0].requests}
    counts |= {run_one(scenario, tmp / f"alone-again{i}", ("none",)).requests for i in (1, 2)}
    if len(counts) == 1:
        return
    for r in unreached:
        if r.requests in counts and r.requests < max(counts):
            r.excused = True
            r.label += f" (excused: the action alone sends {sorted(counts)} requests)"

