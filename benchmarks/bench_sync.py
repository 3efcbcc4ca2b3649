#!/usr/bin/env python3
"""Sync benchmark: what an idle poll of a store costs, and how fast changes cross the wire.

1. Idle poll of a store (nothing changed): requests, bytes and time of one memfs
   `Reconciler.reconcile_pass()` run in this process (the client's `stats`), side by side with
   the SDK's reference folder sync (`SessionMemoryStores`: the download, then an idle sync
   pass), counted with a wrapping httpx transport.
2. The same, measured at the server for a real mount: the daemon's list requests per poll,
   from the server's request log (`memfs serve --verbose`).
3. Latency of a remote edit (SDK update) until `cat` in the mount shows it (--poll-interval 1).
4. Latency of a local close in the mount until the server has the content
   (--write-back-delay 1, the default, and 0.1).

    .venv/bin/python benchmarks/bench_sync.py            # 2,000 memories of ~2 kB, 5 repeats
    .venv/bin/python benchmarks/bench_sync.py --quick    # smoke-test sizes
"""

from __future__ import annotations

import asyncio
import logging
import re
import statistics
import sys
import time

import trio
from common import (
    Bench,
    async_sdk,
    finish_args,
    fmt_s,
    machine_line,
    make_tree,
    new_stats,
    new_store,
    parser,
    ratio_line,
    sdk_session,
    seed_store,
    table,
)

LIST_RE = re.compile(r'"GET /v1/memory_stores/[^/]+/memories\?([^ ]*) HTTP')


def memfs_idle_passes(server, store_id: str, workdir, passes: int) -> dict:
    """Requests/bytes/time of idle `reconcile_pass()`es, after a first one that learns the tree."""
    from memfs.api.client import MemoryStoresClient
    from memfs.cache import BlobCache
    from memfs.state import State
    from memfs.sync.common import SyncContext, SyncOptions
    from memfs.sync.reconciler import Reconciler

    async def go() -> dict:
        state = State(workdir / "state.db")
        cache = BlobCache(workdir / "objects")
        client = MemoryStoresClient(server.base_url, server.api_key, max_retries=2)
        try:
            rec = Reconciler(SyncContext(state, cache, client, store_id, SyncOptions()))
            before = dict(client.stats)
            t0 = time.perf_counter()
            await rec.reconcile_pass()
            first = {k: client.stats[k] - before[k] for k in before}
            first["seconds"] = time.perf_counter() - t0
            first["files"] = len(list(state.files()))
            idle = []
            for _ in range(passes):
                before = dict(client.stats)
                t0 = time.perf_counter()
                await rec.reconcile_pass()
                d = {k: client.stats[k] - before[k] for k in before}
                d["seconds"] = time.perf_counter() - t0
                idle.append(d)
            return {"first": first, "idle": idle}
        finally:
            await client.aclose()
            state.close()

    return trio.run(go)


def sdk_idle_pass(server, store_id: str, workdir) -> dict:
    """The SDK's download (counted), then one sync pass with nothing changed (counted)."""
    from anthropic.lib.tools._memories import SessionMemoryStores

    async def go() -> dict:
        stats = new_stats()
        client = async_sdk(server, stats)
        try:
            sms = SessionMemoryStores(client, workdir=workdir)
            t0 = time.perf_counter()
            await sms.download(sdk_session(store_id, workdir / "store"))  # type: ignore[arg-type]
            download = dict(stats, seconds=time.perf_counter() - t0)
            before = dict(stats)
            t0 = time.perf_counter()
            await sms.finish()  # a sync pass; nothing changed on either side
            idle = {k: stats[k] - before[k] for k in before}
            idle["seconds"] = time.perf_counter() - t0
            await sms.dispose()
            return {"download": download, "idle": idle}
        finally:
            await client.close()

    return asyncio.run(go())


def list_requests(log_path, start: int) -> list[str]:
    """Query strings of the memory list requests logged after byte offset `start`."""
    with open(log_path, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    return LIST_RE.findall(text)


def memory_ids(server, store_id: str) -> dict[str, str]:
    client = server.sdk()
    try:
        return {m.path: m.id for m in client.beta.memory_stores.memories.list(store_id, limit=100)
                if m.type == "memory"}
    finally:
        client.close()


def remote_to_local(server, store_id: str, mount, rel: str, mid: str, reps: int) -> list[float]:
    client = server.sdk(max_retries=2)
    out = []
    try:
        for i in range(reps):
            text = f"remote edit {i} at {time.time()}\n"
            client.beta.memory_stores.memories.update(mid, memory_store_id=store_id, content=text)
            t0 = time.perf_counter()
            deadline = t0 + 30
            while time.perf_counter() < deadline:
                with open(mount.path / rel) as f:
                    if f.read() == text:
                        break
                time.sleep(0.005)
            else:
                print(f"# WARNING: remote edit {i} not visible after 30 s")
                continue
            out.append(time.perf_counter() - t0)
            time.sleep(0.3)
    finally:
        client.close()
    return out


def local_to_remote(server, store_id: str, mount, rel: str, mid: str, reps: int) -> list[float]:
    client = server.sdk(max_retries=2)
    out = []
    try:
        for i in range(reps):
            text = f"local edit {i} at {time.time()}\n"
            with open(mount.path / rel, "w") as f:
                f.write(text)
            t0 = time.perf_counter()  # the close returned
            deadline = t0 + 30
            while time.perf_counter() < deadline:
                m = client.beta.memory_stores.memories.retrieve(mid, memory_store_id=store_id,
                                                                view="full")
                if m.content == text:
                    break
                time.sleep(0.01)
            else:
                print(f"# WARNING: local edit {i} not on the server after 30 s")
                continue
            out.append(time.perf_counter() - t0)
            time.sleep(0.2)
    finally:
        client.close()
    return out


def kib(n: float) -> str:
    return f"{n / 1024:.1f} KiB"


def main() -> int:
    args = finish_args(parser(__doc__.splitlines()[0], files=2000, quick_files=100).parse_args())
    logging.basicConfig(level=logging.ERROR)
    print(f"# bench_sync: {args.files} memories of ~{args.size} B, {args.repeat} repeats")
    print(f"# {machine_line()}")
    tree = make_tree(args.files, args.size, seed=3)
    with Bench("sync", keep_tmp=args.keep_tmp) as b:
        server = b.server("--verbose")
        store = new_store(server, "bench-sync")
        seed_store(server, store, tree)

        # 1. idle pass, in process
        mf = memfs_idle_passes(server, store, b.path("reconciler"), args.repeat)
        sdk_runs = [sdk_idle_pass(server, store, b.path("sdk")) for _ in range(args.repeat)]

        def med(rows: list[dict], key: str) -> float:
            return statistics.median(r[key] for r in rows)

        idle = mf["idle"]
        sdk_idle = [r["idle"] for r in sdk_runs]
        sdk_dl = [r["download"] for r in sdk_runs]
        rows = [
            ["memfs reconcile_pass, idle", f"{med(idle, 'requests'):.0f}",
             kib(med(idle, "bytes_sent")), kib(med(idle, "bytes_received")),
             fmt_s(med(idle, "seconds"))],
            ["memfs reconcile_pass, first (learns the tree)", mf["first"]["requests"],
             kib(mf["first"]["bytes_sent"]), kib(mf["first"]["bytes_received"]),
             fmt_s(mf["first"]["seconds"])],
            ["SDK SessionMemoryStores sync pass, idle", f"{med(sdk_idle, 'requests'):.0f}",
             kib(med(sdk_idle, "bytes_sent")), kib(med(sdk_idle, "bytes_received")),
             fmt_s(med(sdk_idle, "seconds"))],
            ["SDK SessionMemoryStores.download", f"{med(sdk_dl, 'requests'):.0f}",
             kib(med(sdk_dl, "bytes_sent")), kib(med(sdk_dl, "bytes_received")),
             fmt_s(med(sdk_dl, "seconds"))],
        ]
        table(f"idle poll of a {args.files}-memory store (in process, median of {args.repeat})",
              ["pass", "requests", "sent", "received", "time"], rows)
        ratio_line("idle-poll requests memfs/sdk", med(idle, "requests"),
                   med(sdk_idle, "requests"))
        ratio_line("idle-poll bytes-received memfs/sdk", med(idle, "bytes_received"),
                   med(sdk_idle, "bytes_received"))
        ratio_line("idle-poll time memfs/sdk", med(idle, "seconds"), med(sdk_idle, "seconds"))

        # 2. + 3. a real mount polling every second
        ids = memory_ids(server, store)
        files = sorted(tree)
        m = b.mount(server, store, "--poll-interval", "1")
        time.sleep(1.0 if args.quick else 4)  # let the first pass and the prefetch go by
        start = server.log_path.stat().st_size
        window = 2.2 if args.quick else 10.2
        time.sleep(window)
        queries = list_requests(server.log_path, start)
        basic = [q for q in queries if "view=basic" in q]
        passes = sum(1 for q in basic if "page=" not in q)
        per_pass = len(basic) / passes if passes else float("nan")
        table(f"a real mount, --poll-interval 1, idle for {window:.0f} s (server request log)",
              ["list requests", "poll passes started", "requests per pass", "other list requests"],
              [[len(basic), passes, f"{per_pass:.1f}", len(queries) - len(basic)]])

        reps = args.repeat
        r2l = remote_to_local(server, store, m, files[0], ids["/" + files[0]], reps)
        l2r_1 = local_to_remote(server, store, m, files[1], ids["/" + files[1]], reps)
        m.unmount()
        m2 = b.mount(server, store, "--write-back-delay", "0.1")
        l2r_01 = local_to_remote(server, store, m2, files[2], ids["/" + files[2]], reps)
        m2.unmount()

        def lat(xs: list[float]) -> list[str]:
            if not xs:
                return ["-", "-", "-"]
            return [fmt_s(statistics.median(xs)), fmt_s(min(xs)), fmt_s(max(xs))]

        table(f"change latency ({reps} samples each)", ["direction", "median", "min", "max"], [
            ["remote SDK update -> visible in mount (--poll-interval 1)", *lat(r2l)],
            ["local close -> on the server (--write-back-delay 1, default)", *lat(l2r_1)],
            ["local close -> on the server (--write-back-delay 0.1)", *lat(l2r_01)],
            ["SDK folder sync, either direction", "next sync pass", "5 s (min interval)",
             "15 s default interval"],
        ])
        ratio_line("remote->local latency / poll interval",
                   statistics.median(r2l) if r2l else None, 1.0)
        ratio_line("local->remote latency / write-back-delay 1s",
                   statistics.median(l2r_1) if l2r_1 else None, 1.0)
        ratio_line("local->remote latency / write-back-delay 0.1s",
                   statistics.median(l2r_01) if l2r_01 else None, 0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
