"""Fault injection for `memfs serve` (off by default; for tests).

Faults apply to ``/v1/`` routes only, in this order per request:

1. ``latency`` seconds of added delay;
2. with probability ``rate_429``: 429 ``rate_limit_error`` with ``retry-after``
   (nothing is processed);
3. with probability ``error_rate``: ``error_status`` (500/503 ``api_error``,
   529 ``overloaded_error``; nothing is processed);
4. with probability ``drop_rate``: the request is processed and committed,
   then the connection is reset (SO_LINGER 0) with no response;
5. with probability ``error_after_rate``: the request is processed and committed,
   then answered ``error_after_status`` (500, 502, 503 or 504 ``api_error``)
   instead of its result: a gateway cut off after the commit.

The random draws come from one ``random.Random(seed)`` behind a lock.
"""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass, fields
from typing import Any

ERROR_TYPES = {500: "api_error", 503: "api_error", 529: "overloaded_error"}
#: The statuses of an error answered after the request was applied.
AFTER_STATUSES = (500, 502, 503, 504)


@dataclass
class FaultConfig:
    error_rate: float = 0.0
    error_status: int = 503
    rate_429: float = 0.0
    retry_after: float = 1.0
    latency: float = 0.0
    drop_rate: float = 0.0
    error_after_rate: float = 0.0
    error_after_status: int = 502

    def validate(self) -> None:
        for name in ("error_rate", "rate_429", "drop_rate", "error_after_rate"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")
        if self.error_status not in ERROR_TYPES:
            raise ValueError("error_status must be 500, 503 or 529")
        if self.error_after_status not in AFTER_STATUSES:
            raise ValueError("error_after_status must be 500, 502, 503 or 504")
        if self.retry_after < 0 or self.latency < 0:
            raise ValueError("retry_after and latency must not be negative")


@dataclass
class Decision:
    latency: float = 0.0
    status: int | None = None  # an injected error response instead of processing
    error_type: str = ""
    retry_after: float | None = None
    drop: bool = False  # process, commit, then reset the connection
    error_after: int | None = None  # process, commit, then answer this status


class Faults:
    def __init__(self, config: FaultConfig | None = None, seed: int | None = None) -> None:
        self._config = config or FaultConfig()
        self._config.validate()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return asdict(self._config)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply a partial update (keys of FaultConfig); ValueError if invalid."""
        known = {f.name: f.type for f in fields(FaultConfig)}
        with self._lock:
            values = asdict(self._config)
            for key, value in changes.items():
                if key not in known:
                    raise ValueError(f"unknown fault setting {key!r}")
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"{key} must be a number")
                values[key] = (int(value) if key in ("error_status", "error_after_status")
                               else float(value))
            cfg = FaultConfig(**values)
            cfg.validate()
            self._config = cfg
            return asdict(cfg)

    def decide(self) -> Decision:
        with self._lock:
            cfg = self._config
            d = Decision(latency=cfg.latency)
            if cfg.rate_429 and self._rng.random() < cfg.rate_429:
                d.status, d.error_type, d.retry_after = 429, "rate_limit_error", cfg.retry_after
            elif cfg.error_rate and self._rng.random() < cfg.error_rate:
                d.status, d.error_type = cfg.error_status, ERROR_TYPES[cfg.error_status]
            elif cfg.drop_rate and self._rng.random() < cfg.drop_rate:
                d.drop = True
            elif cfg.error_after_rate and self._rng.random() < cfg.error_after_rate:
                d.error_after = cfg.error_after_status
            return d
