"""Test-side helper for `memfs serve`'s request gate (server started with --fault-control).

    gate = Gate(server)
    gate.hold("POST", r"/memories/mem_", when="before")   # or when="after"
    ... start the request in a thread / let the mount push ...
    held = gate.wait_held(1)       # [{"seq", "method", "path", "when", "since", ...}]
    ... act while the request is provably in flight ...
    gate.release()                 # all, or gate.release(held[0]["seq"])
    gate.clear()                   # drop every rule and release everything

`with Gate(server) as gate:` clears on exit, so a failing test never leaves
requests held (the server would release them after the rule's timeout anyway).
"""

from __future__ import annotations

import time

import httpx


class Gate:
    def __init__(self, server) -> None:
        self.server = server

    @property
    def url(self) -> str:
        return f"{self.server.base_url}/_memfs/gate"

    def hold(self, method: str = "*", path: str = "", when: str = "before",
             count: int | None = None, timeout: float | None = None,
             drop: bool = False) -> dict:
        """Hold requests matching method ("*" = any) and path (regex, searched in the
        URL path) before they are applied or after they committed; returns the rule.
        `drop` (with when="after"): once released, the connection is reset instead of
        answered (the request applied, its answer lost)."""
        body: dict = {"method": method, "path": path, "when": when, "count": count}
        if drop:
            body["drop"] = True
        if timeout is not None:
            body["timeout"] = timeout
        r = httpx.post(self.url, json=body, timeout=10)
        r.raise_for_status()
        return r.json()

    def refuse(self, method: str, path: str, status: int, count: int | None = None,
               when: str = "before") -> dict:
        """Answer matching requests with `status` (403, 404, 422...) instead of applying
        them; everything else goes through. With when="after": apply them, then answer
        `status` instead of the result (a 5xx whose request landed)."""
        body = {"method": method, "path": path, "when": when, "count": count,
                "respond": status}
        r = httpx.post(self.url, json=body, timeout=10)
        r.raise_for_status()
        return r.json()

    def garble(self, method: str, path: str, count: int | None = None) -> dict:
        """Apply matching requests, then answer 200 with their JSON cut in half (a
        gateway's page, a body cut short with no length to tell)."""
        body = {"method": method, "path": path, "when": "after", "count": count,
                "garble": True}
        r = httpx.post(self.url, json=body, timeout=10)
        r.raise_for_status()
        return r.json()

    def snapshot(self) -> dict:
        r = httpx.get(self.url, timeout=10)
        r.raise_for_status()
        return r.json()

    def held(self) -> list[dict]:
        return self.snapshot()["held"]

    def caught(self, rule: dict) -> int:
        """How many requests `rule` (as `hold` or `refuse` returned it) has caught."""
        return next(r for r in self.snapshot()["rules"] if r["id"] == rule["id"])["caught"]

    def wait_held(self, n: int = 1, timeout: float = 30) -> list[dict]:
        """The held requests once at least n are held; AssertionError after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            r = httpx.get(self.url, params={"min_held": n, "timeout": min(left, 10)},
                          timeout=min(left, 10) + 10)
            r.raise_for_status()
            held = r.json()["held"]
            if len(held) >= n:
                return held
            if time.monotonic() >= deadline:
                raise AssertionError(f"{len(held)} request(s) held after {timeout}s, "
                                     f"wanted {n}: {r.json()}")

    def release(self, seq: int | None = None) -> list[int]:
        """Release one held request (by seq) or all of them; returns the released seqs."""
        r = httpx.post(f"{self.url}/release", json={} if seq is None else {"seq": seq},
                       timeout=10)
        r.raise_for_status()
        return r.json()["released"]

    def clear(self) -> list[int]:
        r = httpx.delete(self.url, timeout=10)
        r.raise_for_status()
        return r.json()["released"]

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.server.proc is not None and self.server.proc.poll() is None:
                self.clear()
        except httpx.HTTPError:
            pass
