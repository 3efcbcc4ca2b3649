#!/usr/bin/env python3
"""What reading each answer within a size and a time (`MemoryStoresClient._receive`)
costs a request, against httpx reading it whole (the client before 6 December): the same
client, the same `memfs serve`, the two reads alternated in one process, rounds of GETs of
one 2 kB memory and of a full page (20 memories of 50 kB); medians and the ratio.

    .venv/bin/python benchmarks/bench_answers.py
    .venv/bin/python benchmarks/bench_answers.py --rounds 11 --requests 800
"""

from __future__ import annotations

import argparse
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import trio

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import memfs.api.client as client_module  # noqa: E402

BOUNDED = client_module.MemoryStoresClient._receive


async def whole(self, request):
    """httpx's own read of the answer (what the client did before)."""
    return await self._http.send(request)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def measure(url: str, rounds: int, requests: int) -> None:
    async with client_module.MemoryStoresClient(url, "bench") as c:
        store = (await c.create_store("bench answers")).id
        one = await c.create_memory(store, "/a.md", "x" * 2000)
        for i in range(20):
            await c.create_memory(store, f"/p/{i}.md", "y" * 50_000)

        async def get_one(n: int) -> float:
            t = time.perf_counter()
            for _ in range(n):
                await c.get_memory(store, one.id)
            return (time.perf_counter() - t) / n * 1e6

        async def full_page(n: int) -> float:
            t = time.perf_counter()
            for _ in range(n):
                await c.list_memories_page(store, path_prefix="/p/", view="full", limit=20)
            return (time.perf_counter() - t) / n * 1e6

        for name, fn, n in (("GET one memory", get_one, requests),
                            ("full page 20x50kB", full_page, max(10, requests // 7))):
            bounded, read_whole, ratios = [], [], []
            for _ in range(rounds):
                client_module.MemoryStoresClient._receive = BOUNDED
                a = await fn(n)
                client_module.MemoryStoresClient._receive = whole
                b = await fn(n)
                client_module.MemoryStoresClient._receive = BOUNDED
                bounded.append(a)
                read_whole.append(b)
                ratios.append(a / b)
            print(f"{name}: bounded {statistics.median(bounded):,.0f} us, whole "
                  f"{statistics.median(read_whole):,.0f} us a request ({rounds} rounds of {n})")
            print(f"  spread of {name} bounded/whole: min {min(ratios):.3f}, "
                  f"max {max(ratios):.3f}")
            print(f"ratio {name} bounded/whole: {statistics.median(ratios):.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--quick", action="store_true", help="2 rounds of 40 (the smoke test)")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.requests = 2, 40
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [sys.executable, "-m", "memfs", "serve", "--db", f"{tmp}/memfs.db", "--port",
             str(port)], env=dict(os.environ, MEMFS_SERVE_API_KEY="bench"), cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            server.stdout.readline()  # listening
            trio.run(measure, f"http://127.0.0.1:{port}", args.rounds, args.requests)
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
