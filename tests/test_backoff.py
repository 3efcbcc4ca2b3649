"""The one doubling every retry waits by (memfs/core/backoff.py)."""

from __future__ import annotations

import math

from memfs.core.backoff import doubled


def test_the_wait_doubles_from_its_base_and_stops_at_its_cap():
    assert [doubled(1.0, 600.0, n) for n in range(12)] == \
        [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]
    assert [doubled(0.5, 8.0, n) for n in range(6)] == [0.5, 1, 2, 4, 8, 8]


def test_any_number_of_failures_keeps_the_cap_and_raises_nothing():
    # 2.0 ** 1024 raises OverflowError: a count that large must still give the cap.
    for n in (1023, 1024, 10**6, 10**18):
        assert doubled(1.0, 600.0, n) == 600.0
    assert doubled(1e300, 1e308, 1023) == 1e308  # a product past a float's range: the cap


def test_the_exponent_stops_at_the_largest_a_float_holds():
    assert doubled(1.0, math.inf, 5000) == 2.0 ** 1023
