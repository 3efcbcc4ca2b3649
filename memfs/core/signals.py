"""What the mount's layers tell each other without calling upwards.

The FUSE router notes each request on the mount's `IdleClock`; the blob writer and the
pusher (memfs/sync/) read it to wait for a quiet mount. State and the blob cache set a
`Wakeup` when they hold new work (a local change to push, a blob to write); the sync task
that does that work waits on it. Both are objects of this lowest layer, created by the
engine and handed to both sides: no lower layer calls code of a higher one to say so
(docs/ARCHITECTURE.md, "A reader's walk").
"""

from __future__ import annotations

import math
import time

import trio


class IdleClock:
    """When a FUSE request last reached Python, for one mount (`busy_at`, set by the
    router). A clock no mount touches is always quiet."""

    __slots__ = ("busy_at",)

    def __init__(self) -> None:
        self.busy_at = -math.inf  # time.monotonic() of the last request

    def idle_for(self) -> float:
        """Seconds since the last request."""
        return time.monotonic() - self.busy_at


class Wakeup:
    """Level-triggered: `set` by whoever has new work (no checkpoint, no call into the
    waiter), `wait` by the one task that does it, `clear` by that task before it looks
    at the work (a `set` during the look then wakes it again)."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = trio.Event()  # no trio run needed until someone waits

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def clear(self) -> None:
        if self._event.is_set():
            self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()
