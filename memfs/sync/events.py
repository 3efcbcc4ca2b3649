"""A store's changes as events: what `memfs watch` and `memfs mcp` follow.

A FUSE sync filesystem applies remote changes without inotify ever firing, so a
watcher has nothing to wait on. The sync code knows each change the moment it
applies it: the reconciler's rows (created, modified, renamed, deleted), the
pusher's answers (pushed) and conflicts each call one method of the mount's
:class:`EventBus` (one line at each place). The bus costs nothing while no one
listens: with no subscriber an event is not even built.

A slow reader never slows the mount: every subscriber has a bounded queue, an
event that does not fit is dropped and counted, and the count is reported to
the reader with the next event it gets (:data:`DROPPED`).

The same events are made from the versions list (:func:`version_events`): a
replay (`memfs watch --since`) and the watcher without a mount, which polls the
store's change feed itself.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import trio

from memfs.api.models import Memory, MemoryVersion, parse_time

__all__ = ["Event", "EventBus", "Subscriber", "KINDS", "DROPPED", "version_events"]

#: The kinds of change, in the words `memfs watch --json` prints.
KINDS = ("created", "modified", "renamed", "deleted", "conflict", "pushed")
#: The kind of the line that reports events dropped for a slow reader.
DROPPED = "dropped"
#: Events a subscriber may have waiting before newer ones are dropped.
QUEUE_LIMIT = 1000
#: Authors remembered from the feed's versions (version id -> created_by).
AUTHORS_KEPT = 4096


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Event:
    """One change applied to (or pushed from) a store."""

    time: str
    store: str                      # the store's directory name (slug), else its id
    store_id: str
    kind: str                       # one of KINDS, or DROPPED
    path: str | None = None
    old_path: str | None = None     # renamed: where it was
    author: dict[str, Any] | None = None  # the version's created_by
    version_id: str | None = None
    memory_id: str | None = None
    dropped: int | None = None      # DROPPED: how many events the reader missed

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k in (
            "path", "author", "version_id")}


class Subscriber:
    """One reader's bounded queue (it may follow several stores' buses)."""

    def __init__(self, limit: int = QUEUE_LIMIT) -> None:
        self._send, self.receive = trio.open_memory_channel[Event](limit)
        self.dropped = 0  # since the last report

    def offer(self, event: Event) -> None:
        """Queue without waiting: a full queue drops the event and counts it."""
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            self.dropped += 1
        except trio.ClosedResourceError:
            pass

    def take_dropped(self) -> Event | None:
        """The DROPPED report for what was lost since the last one, if anything was."""
        if not self.dropped:
            return None
        count, self.dropped = self.dropped, 0
        return Event(_now(), "", "", DROPPED, dropped=count)

    def close(self) -> None:
        self._send.close()


class EventBus:
    """The events of one store of a mount (`SyncContext.events`)."""

    def __init__(self, store_id: str, store: str | None = None) -> None:
        self.store_id = store_id
        self.store = store or store_id
        self.subscribers: set[Subscriber] = set()
        self.ended = False  # `end`: the mount is going away
        self.authors: OrderedDict[str, dict[str, Any] | None] = OrderedDict()
        #: memory id -> (created_at, id) of its newest version seen
        self.latest: OrderedDict[str, tuple[str, str]] = OrderedDict()

    # -- what the sync code calls (one line each) ---------------------------------------

    def learn(self, version: MemoryVersion) -> None:
        """A version the feed read: its author, for the event that applies it (read in
        the same pass, so nothing is kept while nobody listens)."""
        if not self.subscribers:
            return
        self.authors[version.id] = version.created_by
        self.authors.move_to_end(version.id)
        mark = (version.created_at, version.id)
        if mark > self.latest.get(version.memory_id, ("", "")):
            self.latest[version.memory_id] = mark
        for cache in (self.authors, self.latest):
            while len(cache) > AUTHORS_KEPT:
                cache.popitem(last=False)

    def remote(self, kind: str, memory: Memory, old_path: str | None = None) -> None:
        """The reconciler applied a server row for `memory` (created, modified, renamed)."""
        if self.subscribers:
            self._emit(kind, memory.path, old_path=old_path,
                       version_id=memory.memory_version_id or None, memory_id=memory.id)

    def deleted(self, path: str, memory_id: str | None) -> None:
        """The reconciler removed a file whose memory is gone from the server."""
        if self.subscribers:
            self._emit("deleted", path, memory_id=memory_id,
                       version_id=self.latest.get(memory_id or "", ("", ""))[1] or None)

    def pushed(self, path: str, memory: Memory | None = None, memory_id: str | None = None,
               ) -> None:
        """The server accepted a local change (`memory`: its answer; None for a delete)."""
        if self.subscribers:
            self._emit("pushed", path, memory_id=memory.id if memory else memory_id,
                       version_id=memory.memory_version_id if memory else None)

    def conflict(self, path: str, memory_id: str, version_id: str | None) -> None:
        """The server's version (`version_id`; None: the memory was deleted) won a
        conflict at `path`; the local one was kept aside."""
        if self.subscribers:
            self._emit("conflict", path, memory_id=memory_id, version_id=version_id)

    # -- readers -------------------------------------------------------------------------

    def _emit(self, kind: str, path: str | None, *, old_path: str | None = None,
              version_id: str | None = None, memory_id: str | None = None) -> None:
        event = Event(_now(), self.store, self.store_id, kind, path, old_path,
                      self.authors.get(version_id) if version_id else None, version_id,
                      memory_id)
        for sub in list(self.subscribers):
            sub.offer(event)

    def attach(self, sub: Subscriber) -> None:
        self.subscribers.add(sub)
        if self.ended:  # came during the final flush: told at once
            sub.close()

    def end(self) -> None:
        """The mount is going away after its final flush: each reader's stream ends
        with what is queued, then says so (`watch.follow_buses`), so a reader tells an
        unmount from a daemon that died."""
        self.ended = True
        for sub in list(self.subscribers):
            sub.close()

    def detach(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)


def version_events(versions: Iterable[MemoryVersion], paths: dict[str, str], *,
                   store: str, store_id: str) -> list[Event]:
    """Events for versions read from the versions list, oldest first.

    `paths` (memory id -> its last known path) tells a rename from an edit: a
    `modified` version whose path differs from the memory's last one is a rename.
    It is updated as the versions are read."""
    out = []
    for v in sorted(versions, key=lambda v: (v.created_at, v.id)):
        before = paths.get(v.memory_id)
        kind = v.operation
        path = v.path or before
        old = None
        if kind == "modified" and before is not None and v.path and v.path != before:
            kind, old = "renamed", before
        if kind == "deleted":
            paths.pop(v.memory_id, None)
        elif v.path:
            paths[v.memory_id] = v.path
        when = parse_time(v.created_at).strftime("%Y-%m-%dT%H:%M:%S.%fZ") \
            if v.created_at else _now()
        out.append(Event(when, store, store_id, kind, path, old, v.created_by, v.id,
                         v.memory_id))
    return out


def author(actor: dict | None) -> str:
    """An actor as one word: api:<key id>, session:<id>, user:<id>, service:<id>."""
    if not actor:
        return "-"
    kind = actor.get("type", "")
    for key, short in (("session_id", "session"), ("api_key_id", "api"),
                       ("user_id", "user"), ("service_account_id", "service")):
        if actor.get(key):
            return f"{short}:{actor[key]}"
    return kind or "-"
