"""The request gate of `memfs serve` (test control; only with ``--fault-control``).

A test asks the server to *hold* the ``/v1/`` requests that match a rule, so it
can act while a request is provably in flight:

* ``before``: the request is held before anything is applied (before faults,
  auth and the operation). Nothing it would change is visible yet.
* ``after``: the operation has run and committed (or failed); the response is
  not sent yet. Other clients already see the change; the caller still waits.

A held request blocks only itself: the server is asyncio (uvicorn), and a held
request awaits an ``asyncio.Event`` while every other request is served.
Each held request gets a sequence number; the test lists what is held and
releases one (by ``seq``) or all. Nothing is held forever: a request is
released by itself after the rule's ``timeout``
(at most :data:`MAX_HOLD` seconds), so a failing test cannot hang the server.

Rules: ``method`` (``"*"`` or an HTTP method), ``path`` (a regular expression
searched in the URL path, query excluded), ``when`` and ``count`` (how many
requests the rule catches; ``None`` = unlimited).

A ``before`` rule with ``respond`` (an HTTP status from :data:`RESPONSES`)
holds nothing: the request is answered with that error and never applied, so
a test can make the server refuse one particular request (a 403 on one
delete) while every other request goes through. An ``after`` rule with
``respond`` holds nothing either: the request is applied and committed, and
answered with that error instead of its result (a gateway's 502 or 504, a
500 from a server that failed after its commit).

An ``after`` rule with ``garble`` answers the committed request 200 with its JSON
cut in half (a gateway's page, a body cut short with no length to tell).

An ``after`` rule with ``drop`` holds the committed request like any other, and
when it is released resets the connection instead of answering: the request
was applied and its answer is lost (a proxy timeout, a laptop going to sleep).

* ``late``: the request is read and checked whole, its connection is reset (the
  client gets no answer), and it is held; once released (by a test, its timeout
  or the server's shutdown) it is applied: a server still at work when its
  client gave up. The release answers once what it released has been applied,
  so a test knows the landing happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

MAX_HOLD = 120.0
WHEN = ("before", "after", "late")
#: How long a release waits for the late requests it released to be applied.
LATE_APPLY_WAIT = 30.0
#: Statuses a rule may answer with, and their error types.
RESPONSES = {400: "invalid_request_error", 403: "permission_error", 404: "not_found_error",
             409: "conflict_error", 413: "request_too_large", 422: "invalid_request_error",
             500: "api_error", 502: "api_error", 503: "api_error", 504: "api_error"}


@dataclass
class Rule:
    id: int
    method: str  # upper case, or "*"
    path: str  # regex source
    when: str
    count: int | None  # None: unlimited
    timeout: float
    caught: int = 0
    respond: int | None = None  # answer with this status instead of holding
    drop: bool = False  # "after": once released, reset the connection (no answer)
    garble: bool = False  # "after": answer 200 with the result's JSON cut short
    regex: re.Pattern[str] = field(default=None, repr=False)  # type: ignore[assignment]

    def matches(self, method: str, path: str, when: str) -> bool:
        if when != self.when or (self.method != "*" and self.method != method):
            return False
        if self.count is not None and self.caught >= self.count:
            return False
        return self.regex.search(path) is not None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "method": self.method, "path": self.path, "when": self.when,
                "count": self.count, "timeout": self.timeout, "caught": self.caught,
                "respond": self.respond, "drop": self.drop, "garble": self.garble}


@dataclass
class Held:
    seq: int
    rule: int
    method: str
    path: str
    when: str
    since: float  # wall time the hold began
    started: float  # monotonic, for the timeout
    status: int | None = None  # "after": the status of the response being held
    released: bool = False
    event: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    #: "late": set once the request has been applied (or refused) after its release
    applied: asyncio.Event | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "rule": self.rule, "method": self.method, "path": self.path,
                "when": self.when, "since": self.since,
                "held_seconds": round(time.monotonic() - self.started, 3),
                "status": self.status}


class Gate:
    """Rules and held requests. Every method runs on the server's event loop (no
    locks needed): a hold awaits its own event, so it never blocks other requests."""

    def __init__(self) -> None:
        self._rules: list[Rule] = []
        self._held: dict[int, Held] = {}
        self._seq = itertools.count(1)
        self._rule_ids = itertools.count(1)
        self._changed = asyncio.Event()  # set (and replaced) whenever _held grows
        self.timed_out = 0  # requests released by their timeout, not by a test
        self.total_held = 0

    # -- control (the /_memfs/gate endpoints) ---------------------------------

    def add_rule(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Add a rule from a JSON object; ValueError when it is malformed."""
        if not isinstance(spec, dict):
            raise ValueError("body must be a JSON object")
        unknown = sorted(set(spec) - {"method", "path", "when", "count", "timeout", "respond",
                                      "drop", "garble"})
        if unknown:
            raise ValueError(f"unknown gate setting {unknown[0]!r}")
        method = spec.get("method", "*")
        if not isinstance(method, str) or not method:
            raise ValueError("method must be an HTTP method or '*'")
        path = spec.get("path", "")
        if not isinstance(path, str):
            raise ValueError("path must be a regular expression (string)")
        try:
            regex = re.compile(path)
        except re.error as exc:
            raise ValueError(f"path is not a valid regular expression: {exc}") from None
        when = spec.get("when")
        if when not in WHEN:
            raise ValueError("when must be 'before', 'after' or 'late'")
        count = spec.get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                  or count < 1):
            raise ValueError("count must be a positive integer (or null: unlimited)")
        timeout = spec.get("timeout", MAX_HOLD)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not 0 < timeout <= MAX_HOLD:
            raise ValueError(f"timeout must be a number of seconds in (0, {MAX_HOLD:g}]")
        respond = spec.get("respond")
        if respond is not None and (respond not in RESPONSES or when == "late"):
            raise ValueError("respond must be one of "
                             f"{sorted(RESPONSES)} and goes with when='before' or 'after'")
        drop = spec.get("drop", False)
        if not isinstance(drop, bool) or (drop and when != "after"):
            raise ValueError("drop is true or false, and true goes with when='after'")
        garble = spec.get("garble", False)
        if not isinstance(garble, bool) or (garble and (when != "after" or respond or drop)):
            raise ValueError("garble is true or false, and true goes with when='after' alone")
        rule = Rule(next(self._rule_ids), method.upper(), path, when, count,
                    float(timeout), respond=respond, drop=drop, garble=garble, regex=regex)
        self._rules.append(rule)
        return rule.to_json()

    def snapshot(self) -> dict[str, Any]:
        return {"rules": [r.to_json() for r in self._rules],
                "held": [h.to_json() for h in sorted(self._held.values(), key=lambda h: h.seq)],
                "total_held": self.total_held, "timed_out": self.timed_out}

    async def wait_held(self, n: int, timeout: float) -> dict[str, Any]:
        """The snapshot once at least n requests are held, or when timeout passes."""
        deadline = time.monotonic() + min(max(timeout, 0.0), MAX_HOLD)
        while len(self._held) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), left)
            except TimeoutError:
                break
        return self.snapshot()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def release(self, seq: int | None = None) -> list[int]:
        """Release one held request (by seq) or all; returns the released seqs.
        KeyError when seq is not held."""
        return sorted(h.seq for h in self._release(seq))

    async def release_applied(self, seq: int | None = None) -> list[int]:
        """`release`, then wait (at most `LATE_APPLY_WAIT` s) until the late requests
        it released have been applied: the test's next look sees them landed."""
        targets = self._release(seq)
        late = [h.applied for h in targets if h.applied is not None]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LATE_APPLY_WAIT):
                for applied in late:
                    await applied.wait()
        return sorted(h.seq for h in targets)

    def _release(self, seq: int | None) -> list[Held]:
        if seq is None:
            targets = list(self._held.values())
        elif seq in self._held:
            targets = [self._held[seq]]
        else:
            raise KeyError(seq)
        for h in targets:
            h.released = True
            h.event.set()
            del self._held[h.seq]
        return targets

    def clear(self) -> list[int]:
        """Drop every rule and release everything held."""
        self._rules.clear()
        return self.release()

    # -- the hold points (request tasks) ------------------------------------------

    async def hold(self, method: str, path: str, when: str,
                   status: int | None = None) -> Rule | None:
        """Wait while a rule holds the request; returns at once otherwise.
        Returns the rule that caught it: its `respond` status is the answer (instead of
        applying it, or of the result once applied), its `drop` says to reset the
        connection instead of answering."""
        rule = self._catch(method, path, when)
        if rule is None or rule.respond is not None:
            return rule
        await self._wait(self._held_now(rule, method, path, when, status), rule)
        return rule

    async def hold_late(self, method: str, path: str, cut: Callable[[], object],
                        apply: Callable[[], Awaitable[object]]) -> bool:
        """A "late" rule's request: `cut` its connection, hold it, then `apply` it once
        released. False (nothing done) when no rule catches it."""
        rule = self._catch(method, path, "late")
        if rule is None:
            return False
        cut()
        h = self._held_now(rule, method, path, "late", None)
        h.applied = asyncio.Event()
        try:
            await self._wait(h, rule)
            await apply()
        finally:
            h.applied.set()
        return True

    def _catch(self, method: str, path: str, when: str) -> Rule | None:
        if not self._rules:  # fast path: no gate configured
            return None
        rule = next((r for r in self._rules if r.matches(method, path, when)), None)
        if rule is not None:
            rule.caught += 1
        return rule

    def _held_now(self, rule: Rule, method: str, path: str, when: str,
                  status: int | None) -> Held:
        self.total_held += 1
        h = Held(next(self._seq), rule.id, method, path, when, time.time(),
                 time.monotonic(), status)
        self._held[h.seq] = h
        self._notify()  # wake wait_held()
        return h

    async def _wait(self, h: Held, rule: Rule) -> None:
        try:
            await asyncio.wait_for(h.event.wait(), rule.timeout)
        except TimeoutError:
            if not h.released:
                h.released = True
                self._held.pop(h.seq, None)
                self.timed_out += 1
        finally:
            # Cancelled (client gone, shutdown): never leave a ghost in the held list.
            if not h.released:
                h.released = True
                self._held.pop(h.seq, None)
