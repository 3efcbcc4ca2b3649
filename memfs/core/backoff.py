"""How long to wait before trying again: a wait that doubles with each failure, up to a cap.

The client's retries (memfs/api/client.py), the sync tasks' offline probe
(`sync.common.Backoff`) and a refused file's next try (`state.transitions`) all wait
this way; each adds its own jitter or none.
"""

from __future__ import annotations

#: The largest exponent `2.0 ** n` holds: one more raises OverflowError. A wait that has
#: doubled this often is long past any cap; the count may grow without bound (a server
#: unreachable for a day, a file refused every ten minutes for a week) and the wait
#: must stay the cap.
_MAX_DOUBLINGS = 1023


def doubled(base: float, cap: float, doublings: int) -> float:
    """`base` doubled `doublings` times, at most `cap` (a product past a float's range is
    infinite, so the cap holds for any base)."""
    return min(cap, base * 2.0 ** min(doublings, _MAX_DOUBLINGS))
