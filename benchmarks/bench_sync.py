#!/usr/bin/env python3
"""Sync benchmark (issue 13): what an idle poll costs, feed vs full listing, and change latency.

Every phase runs at each `--latency` (default 0 and 50 ms added to every `/v1/` request by the
server's own fault, `POST /_memfs/faults {"latency": s}`), on one store of 2,000 memories:

1. Idle poll, in process (memfs's client `stats`; the SDK's client wrapped in a counting
   transport): requests, bytes and time of one idle `Reconciler.reconcile_pass()` in feed mode
   (after a first full pass anchored the feed), of a full listing (`SyncOptions(feed=False)`,
   the poll before issue 13), of the feed mode's periodic full listing
   (`reconcile_pass(full=True)`: the safety net every `--full-resync`), and of the SDK's
   reference folder sync (`SessionMemoryStores`: an idle sync pass, and its download).
   The idle feed poll is measured twice: right after the seeding (2,000 writes in a few
   seconds, all within the feed's lookback: the head and the settling slice, two
   requests; issue 22, see also bench_feed.py) and, after the store was left unwritten for
   --settle seconds, after one isolated SDK edit (the newest write alone in its window: the
   usual idle store, one request). The feed's lookback is --lookback (default 10 s, where a
   mount's default is 30: `--feed-lookback`), in process and in the mounts of 2., so that
   the store settles in 11 s rather than 31; the seeding must fit inside it (the script
   says when it did not). What a poll costs does not depend on the lookback's length.
2. Requests per hour of an idle real mount (`memfs mount` with the defaults: feed mode,
   --poll-interval 2; --feed-lookback as above), counted in the server's request log
   (`memfs serve --verbose`) over `--window` seconds after the start-up listing and
   prefetch, extrapolated to an hour, plus the full-resync contribution (a full listing
   every 600 s: 6 an hour, each costing the requests measured in 1.); and the same for
   `--no-feed --poll-interval 2`.
3. Remote edit -> visible in the mount: SDK update of one memory, then `cat` of the file every
   5 ms until the new content shows, in both of those mounts; --samples edits each (default
   10), spread evenly over the poll cycle (stratified random pauses of 0-2 s before each).
4. Local close in the mount -> on the server (at 0 ms only): --write-back-delay 1 (the default)
   and 0.1.

    .venv/bin/python benchmarks/bench_sync.py                 # full: ~3-4 min on 2 cores
    .venv/bin/python benchmarks/bench_sync.py --quick         # smoke-test sizes (~1 min)
    .venv/bin/python benchmarks/bench_sync.py --markdown /tmp/sync.md --latency 0,50
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import random
import re
import statistics
import sys
import time

import trio
from bench_network import code_version, loadavg
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
    ratio,
    sdk_session,
    seed_store,
    table,
)

#: One request line of `memfs serve --verbose` (memfs/server/app.py): client, method, the raw
#: path (no query string), status, time. Older servers logged `"GET /path?query HTTP/1.1"`.
REQ_RE = re.compile(r'memfs\.server: \S+ ([A-Z]+) (/v1/\S*?)(?:\?\S*)? (\d{3}|dropped) [\d.]+ms'
                    r'|"([A-Z]+) (/v1/[^ ?]*)(?:\?\S*)? HTTP')
FEED_INTERVAL = 2.0   # the new default --poll-interval
FULL_RESYNC = 600.0   # the default --full-resync


def say(text: str) -> None:
    print(f"# {time.strftime('%H:%M:%S')} {text}")
    sys.stdout.flush()


# -- 1. idle poll, in process -------------------------------------------------------------------


def delta(client, before: dict, t0: float) -> dict:
    d = {k: client.stats[k] - before[k] for k in before}
    d["seconds"] = time.perf_counter() - t0
    return d


def memfs_idle(server, store_id: str, workdir: pathlib.Path, *, feed: bool, passes: int,
               lookback: float, warmup: int = 0, full_passes: int = 0) -> dict:
    """A first `reconcile_pass()` (a full listing that learns the tree and, in feed mode,
    anchors the feed), `warmup` uncounted passes, then `passes` idle passes; in feed mode also
    `full_passes` of `reconcile_pass(full=True)` (the periodic safety-net listing)."""
    from memfs.api.client import MemoryStoresClient
    from memfs.state.blobs import BlobCache
    from memfs.state.state import State
    from memfs.sync.common import SyncContext, SyncOptions
    from memfs.sync.reconciler import Reconciler

    async def go() -> dict:
        state = State(workdir / "state.db")
        cache = BlobCache(workdir / "objects")
        client = MemoryStoresClient(server.base_url, server.api_key, max_retries=2)
        try:
            opts = SyncOptions(feed=feed, feed_lookback=lookback)
            rec = Reconciler(SyncContext(state, cache, client, store_id, opts))
            before, t0 = dict(client.stats), time.perf_counter()
            await rec.reconcile_pass()
            first = delta(client, before, t0)
            first["files"] = len(list(state.files()))
            for _ in range(warmup):
                await rec.reconcile_pass()
            idle, fulls, listings = [], [], 0
            for _ in range(passes):
                last_full = rec.last_full
                before, t0 = dict(client.stats), time.perf_counter()
                await rec.reconcile_pass()
                idle.append(delta(client, before, t0))
                listings += rec.last_full != last_full
            for _ in range(full_passes):
                before, t0 = dict(client.stats), time.perf_counter()
                await rec.reconcile_pass(full=True)
                fulls.append(delta(client, before, t0))
            return {"first": first, "idle": idle, "full": fulls, "listings": listings}
        finally:
            await client.aclose()
            state.close()

    return trio.run(go)


def sdk_idle_pass(server, store_id: str, workdir: pathlib.Path) -> dict:
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


# -- 2. a real mount, at the server -----------------------------------------------------------


def classify(method: str, path: str) -> str:
    parts = path.strip("/").split("/")  # v1 memory_stores ID memories [MID] ...
    if len(parts) >= 4 and parts[1] == "memory_stores":
        if parts[3] == "memory_versions" and method == "GET":
            return "feed" if len(parts) == 4 else "version get"
        if parts[3] == "memories" and method == "GET":
            return "list" if len(parts) == 4 else "memory get"
    return "other"


def requests_since(log_path: pathlib.Path, start: int) -> dict[str, int]:
    """/v1/ requests in the server's log after byte offset `start`, by kind."""
    with open(log_path, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    out: dict[str, int] = {}
    for m in REQ_RE.finditer(text):
        method, path = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(5))
        kind = classify(method, path)
        out[kind] = out.get(kind, 0) + 1
    return out


def wait_started(m, timeout: float) -> float:
    """Until the daemon logged the end of its start-up prefetch (daemon.log), then 1 s more:
    the idle window must not count the start-up traffic. Returns the seconds waited."""
    t0 = time.perf_counter()
    log = m.state_dir / "daemon.log"
    while time.perf_counter() - t0 < timeout:
        if log.exists() and "prefetch:" in log.read_text(errors="replace"):
            break
        time.sleep(0.2)
    else:
        say(f"no 'prefetch:' line in {log} after {timeout:g} s: counting anyway")
    time.sleep(1.0)
    return time.perf_counter() - t0


def idle_window(server, m, window: float, settle_timeout: float) -> dict:
    wait_started(m, settle_timeout)
    start = server.log_path.stat().st_size
    t0 = time.perf_counter()
    time.sleep(window)
    got = requests_since(server.log_path, start)
    got["_seconds"] = time.perf_counter() - t0
    return got


# -- 3. + 4. change latency -------------------------------------------------------------------


def memory_ids(server, store_id: str) -> dict[str, str]:
    client = server.sdk()
    try:
        return {m.path: m.id for m in client.beta.memory_stores.memories.list(store_id, limit=100)
                if m.type == "memory"}
    finally:
        client.close()


def remote_to_local(server, store_id: str, mount, rel: str, mid: str, reps: int,
                    rng: random.Random, tag: str) -> list[float]:
    client = server.sdk(max_retries=2)
    out = []
    # A change shows just after a poll: the pause before the next edit sets its phase in the
    # poll cycle. Stratified (one pause per 1/reps of the interval, shuffled), so that even a
    # few samples spread evenly over the cycle and their median is not a matter of luck.
    pauses = [(i + rng.random()) / reps * FEED_INTERVAL for i in range(reps)]
    rng.shuffle(pauses)
    try:
        for i in range(reps):
            time.sleep(pauses[i])
            text = f"remote edit {tag} {i} at {time.time()}\n"
            client.beta.memory_stores.memories.update(mid, memory_store_id=store_id, content=text)
            t0 = time.perf_counter()
            deadline = t0 + 30
            while time.perf_counter() < deadline:
                with open(mount.path / rel) as f:
                    if f.read() == text:
                        break
                time.sleep(0.005)
            else:
                print(f"# WARNING: remote edit {tag} {i} not visible after 30 s")
                continue
            out.append(time.perf_counter() - t0)
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


# -- output -----------------------------------------------------------------------------------


def kib(n: float) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n:.0f} B"


class Report:
    """Tables printed as they come, and kept for `--markdown`."""

    def __init__(self) -> None:
        self.md: list[str] = []

    def table(self, title: str, header: list[str], rows: list[list[object]]) -> None:
        rows = [[str(c) for c in r] for r in rows]
        table(title, header, rows)
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
                  for i, h in enumerate(header)]
        self.md += ["", f"**{title}**", "",
                    "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
                    + " |",
                    "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        self.md += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
                    for r in rows]

    def ratio(self, name: str, a: float | None, b: float | None) -> None:
        shown = ratio(a, b)
        if a and b and a / b < 0.01:  # 507 B / 783 KiB: two decimals would print 0.00x
            shown = f"{a / b:.2g}x"
        print(f"ratio {name}: {shown}")
        sys.stdout.flush()
        self._code(f"ratio {name}: {shown}")

    def value(self, name: str, shown: str) -> None:
        print(f"value {name}: {shown}")
        sys.stdout.flush()
        self._code(f"value {name}: {shown}")

    def _code(self, line: str) -> None:
        """An indented (code) line, after a blank line unless it continues such lines."""
        if self.md and not self.md[-1].startswith("    "):
            self.md.append("")
        self.md.append("    " + line)

    def text(self, line: str) -> None:
        print(f"# {line}")
        self.md += ["", line]


def med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows) if rows else float("nan")


def lat(xs: list[float]) -> list[str]:
    if not xs:
        return ["-", "-", "-", "0"]
    return [fmt_s(statistics.median(xs)), fmt_s(min(xs)), fmt_s(max(xs)), str(len(xs))]


# -- main -------------------------------------------------------------------------------------


def main() -> int:
    p = parser(__doc__.splitlines()[0], files=2000, quick_files=100)
    p.add_argument("--latency", default="0,50",
                   help="comma-separated ms added per /v1/ request (default 0,50)")
    p.add_argument("--window", type=float, default=None,
                   help="seconds an idle mount is watched at the server (default 20, 3 quick)")
    p.add_argument("--settle", type=float, default=None,
                   help="seconds the store stays unwritten before the isolated edit and the "
                        "idle feed polls (default --lookback + 1 = 11; 0 with --quick)")
    p.add_argument("--lookback", type=float, default=10.0,
                   help="the feed's lookback, in process and in the mounts (`--feed-lookback`; "
                        "a mount's default is 30 s; default 10)")
    p.add_argument("--samples", type=int, default=None,
                   help="remote edits per mount and latency (default 10, 1 with --quick)")
    p.add_argument("--markdown", type=pathlib.Path, help="write the tables to FILE (for "
                   "docs/BENCHMARKS.md)")
    args = finish_args(p.parse_args())
    from memfs.sync.feed import MAX_VERSIONS

    lookback = args.lookback
    if args.samples is None:
        args.samples = 1 if args.quick else 10
    if args.window is None:
        args.window = 3.0 if args.quick else 20.0
    if args.settle is None:
        args.settle = 0.0 if args.quick else args.lookback + 1
    latencies = [float(x) for x in args.latency.split(",") if x.strip()]
    logging.basicConfig(level=logging.ERROR)  # the SDK sync logs a line per store at INFO
    started = time.perf_counter()
    machine, load0, code = machine_line(), loadavg(), code_version()
    say(f"bench_sync: {args.files} memories of ~{args.size} B in 20 directories, latencies "
        f"{args.latency} ms, {args.repeat} repeats, idle window {args.window:g} s")
    print(f"# {machine}")
    rep = Report()
    rng = random.Random(13)
    sdk_reps = min(args.repeat, 3)
    tree = make_tree(args.files, args.size, seed=3)
    files = sorted(tree)
    with Bench("sync", keep_tmp=args.keep_tmp) as b:
        server = b.server("--verbose", "--fault-control")
        server.set_faults(latency=0)
        store = new_store(server, "bench-sync")
        t0 = time.perf_counter()
        seed_store(server, store, tree)
        quiet_since = time.perf_counter()  # the last write to the store
        say(f"seeded {len(tree)} memories in {fmt_s(quiet_since - t0)}")
        if quiet_since - t0 > lookback:
            rep.text(f"WARNING: the seeding took {quiet_since - t0:.1f} s, longer than the "
                     f"{lookback:g} s lookback: the poll 'right after a burst' had only its last "
                     "part unsettled (a longer --lookback measures it whole)")
        ids = memory_ids(server, store)

        # 1. idle poll, in process -------------------------------------------------------------
        # First, right after the seeding (2,000 writes in a few seconds: the newest version has
        # all of them within the feed's lookback), the SDK, the full listing and the feed;
        # then, once the store was left unwritten for --settle s, one isolated SDK edit (the
        # usual idle store: its newest write alone in its lookback window) and the feed again.
        idle: dict[float, dict] = {}
        for ms in latencies:
            server.set_faults(latency=ms / 1000)
            say(f"idle poll at {ms:g} ms: SDK ({sdk_reps} runs), full listing, feed after the "
                "seeding burst")
            sdk_runs = [sdk_idle_pass(server, store, b.path("sdk")) for _ in range(sdk_reps)]
            full = memfs_idle(server, store, b.path("rec-full"), feed=False, lookback=lookback,
                              passes=args.repeat)
            burst = memfs_idle(server, store, b.path("rec-burst"), feed=True, lookback=lookback,
                               passes=min(args.repeat, 3))
            idle[ms] = {"sdk": [r["idle"] for r in sdk_runs],
                        "sdk_dl": [r["download"] for r in sdk_runs],
                        "full": full, "burst": burst}
        wait = args.settle - (time.perf_counter() - quiet_since)
        if wait > 0:
            say(f"waiting {wait:.0f} s: no write for {args.settle:g} s (the feed's lookback is "
                f"{lookback:g} s), then one isolated SDK edit")
            time.sleep(wait)
        server.set_faults(latency=0)
        isolated = files[-1]
        sdk = server.sdk(max_retries=2)
        try:
            sdk.beta.memory_stores.memories.update(ids["/" + isolated], memory_store_id=store,
                                                   content=tree[isolated] + "one edit\n")
        finally:
            sdk.close()
        for ms in latencies:
            server.set_faults(latency=ms / 1000)
            say(f"idle poll at {ms:g} ms: feed, the newest write alone in its lookback window")
            idle[ms]["feed"] = memfs_idle(server, store, b.path("rec-feed"), feed=True,
                                          lookback=lookback, passes=args.repeat,
                                          full_passes=min(args.repeat, 3))
        for ms in latencies:
            d = idle[ms]
            fi, fu, ff, si = d["feed"]["idle"], d["full"]["idle"], d["feed"]["full"], d["sdk"]
            fb = d["burst"]["idle"]

            def row(name: str, rs: list[dict]) -> list[object]:
                return [name, f"{med(rs, 'requests'):.0f}", kib(med(rs, "bytes_sent")),
                        kib(med(rs, "bytes_received")), fmt_s(med(rs, "seconds"))]

            first = d["feed"]["first"]
            rep.table(f"idle poll of a {args.files}-memory store at {ms:g} ms per request "
                      f"(in process, median of {args.repeat}; SDK: of {sdk_reps})",
                      ["pass", "requests", "sent", "received", "time"], [
                          row("memfs feed poll, idle (the default; newest write alone in its "
                              f"{lookback:g} s lookback)" if args.settle >= lookback else
                              "memfs feed poll, idle (the default; --settle under the lookback: "
                              "the seeding still in it)", fi),
                          row(f"memfs feed poll, idle after a burst ({args.files} writes within "
                              f"{lookback:g} s of the newest)", fb),
                          row("memfs full listing, idle (feed=False, the poll before issue 13)",
                              fu),
                          row("memfs full listing in feed mode (reconcile_pass(full=True), every "
                              f"{FULL_RESYNC:g} s)", ff),
                          row("memfs first pass (learns the tree, anchors the feed)", [first]),
                          row("SDK SessionMemoryStores sync pass, idle", si),
                          row("SDK SessionMemoryStores.download", d["sdk_dl"]),
                      ])
            if d["feed"]["listings"]:
                rep.text(f"WARNING: {d['feed']['listings']} of the {len(fi)} idle feed passes at "
                         f"{ms:g} ms ran a full listing instead of a feed poll")
            if d["burst"]["listings"]:
                rep.text(f"After the burst, {d['burst']['listings']} of the {len(fb)} idle feed "
                         f"passes at {ms:g} ms fell back to a full listing (more than "
                         f"{MAX_VERSIONS} versions within the lookback of the newest one).")
            lk = f"@ {ms:g} ms"
            rep.ratio(f"idle-poll requests feed/full-listing {lk}", med(fi, "requests"),
                      med(fu, "requests"))
            rep.ratio(f"idle-poll bytes-received feed/full-listing {lk}",
                      med(fi, "bytes_received"), med(fu, "bytes_received"))
            rep.ratio(f"idle-poll time feed/full-listing {lk}", med(fi, "seconds"),
                      med(fu, "seconds"))
            rep.ratio(f"idle-poll requests memfs/sdk {lk}", med(fi, "requests"),
                      med(si, "requests"))
            rep.ratio(f"idle-poll bytes-received memfs/sdk {lk}", med(fi, "bytes_received"),
                      med(si, "bytes_received"))
            rep.ratio(f"idle-poll time memfs/sdk {lk}", med(fi, "seconds"), med(si, "seconds"))
            rep.ratio(f"idle-poll requests feed-after-burst/full-listing {lk}",
                      med(fb, "requests"), med(fu, "requests"))
            target = med(fi, "requests") <= 1 and med(fi, "bytes_received") < 1024
            verdict = "met" if target else "NOT met"
            if args.settle < lookback:  # --quick: the seeding still shares the edit's window
                verdict = (f"not measured (--settle {args.settle:g} s is under the {lookback:g} s "
                           "lookback: the seeding is still in the edit's window)")
            rep.text(f"Issue 13 target at {ms:g} ms (idle feed poll: 1 request, under 1 KiB): "
                     f"{verdict} ({med(fi, 'requests'):.0f} request(s), "
                     f"{kib(med(fi, 'bytes_received'))}, against {med(fu, 'requests'):.0f} and "
                     f"{kib(med(fu, 'bytes_received'))} for the full listing).")

        # 2. + 3. + 4. real mounts -------------------------------------------------------------
        hourly: list[list[object]] = []
        latency_rows: list[list[object]] = []
        r2l: dict[tuple[float, str], list[float]] = {}
        per_hour: dict[tuple[float, str], float] = {}
        l2r_1: list[float] = []
        k = 0
        for ms in latencies:
            server.set_faults(latency=ms / 1000)
            full_cost = med(idle[ms]["feed"]["full"], "requests")
            for mode, margs in (("feed", ()), ("no-feed", ("--no-feed", "--poll-interval", "2"))):
                label = (f"feed, defaults (--poll-interval 2; --feed-lookback {lookback:g})"
                         if mode == "feed"
                         else "--no-feed --poll-interval 2")
                say(f"mount ({label}) at {ms:g} ms: idle window {args.window:g} s, then "
                    f"{args.samples} remote edits")
                m = b.mount(server, store, *margs, "--feed-lookback", f"{lookback:g}")
                got = idle_window(server, m, args.window, 60.0)
                secs = got.pop("_seconds")
                n = sum(got.values())
                measured = n * 3600 / secs
                if mode == "feed":
                    resync = 3600 / FULL_RESYNC * full_cost
                    total = measured + resync
                    note = (f"+ {3600 / FULL_RESYNC:.0f} full listings x {full_cost:.0f} = "
                            f"{resync:,.0f}")
                else:
                    total, note = measured, "(every poll is a full listing)"
                per_hour[(ms, mode)] = total
                kinds = ", ".join(f"{v} {kk}" for kk, v in sorted(got.items())) or "none"
                hourly.append([f"{ms:g} ms", label, f"{n} in {secs:.1f} s ({kinds})",
                               f"{measured:,.0f}", note, f"{total:,.0f}"])
                if mode == "feed":  # the same polls, each costing an idle poll after a burst
                    polls = got.get("feed", 0) * 3600 / secs
                    cost = med(idle[ms]["burst"]["idle"], "requests")
                    hourly.append([f"{ms:g} ms", "feed, idle after a burst (computed: polls "
                                   f"of the row above x {cost:.0f} requests, from the idle-poll "
                                   "table)", "-", f"{polls * cost:,.0f}", note,
                                   f"{polls * cost + resync:,.0f}"])
                rel = files[k]
                k += 1
                r2l[(ms, mode)] = remote_to_local(server, store, m, rel, ids["/" + rel],
                                                  args.samples, rng, f"{ms:g}-{mode}")
                latency_rows.append([f"remote SDK update -> visible in the mount ({label})",
                                     f"{ms:g} ms", *lat(r2l[(ms, mode)])])
                if ms == 0 and mode == "feed":
                    rel = files[k]
                    k += 1
                    l2r_1 = local_to_remote(server, store, m, rel, ids["/" + rel], args.repeat)
                m.unmount()
                m.pid = None  # unmounted: the exit cleanup must not signal a reused pid
        server.set_faults(latency=0)
        say("mount --write-back-delay 0.1 at 0 ms: local edits")
        m2 = b.mount(server, store, "--write-back-delay", "0.1")
        rel = files[k]
        l2r_01 = local_to_remote(server, store, m2, rel, ids["/" + rel], args.repeat)
        m2.unmount()
        m2.pid = None

        rep.table(f"requests per hour of an idle mount (server request log over "
                  f"{args.window:g} s after the start-up prefetch, x 3600 / window)",
                  ["latency", "mount", "requests in the window", "per hour, measured",
                   f"full resync (every {FULL_RESYNC:g} s)", "per hour, total"], hourly)
        for ms in latencies:
            rep.value(f"idle-mount requests/hour feed @ {ms:g} ms",
                      f"{per_hour[(ms, 'feed')]:,.0f}")
            rep.ratio(f"idle-mount requests/hour feed/no-feed @ {ms:g} ms",
                      per_hour[(ms, "feed")], per_hour[(ms, "no-feed")])
        latency_rows += [
            ["local close -> on the server (--write-back-delay 1, default)", "0 ms", *lat(l2r_1)],
            ["local close -> on the server (--write-back-delay 0.1)", "0 ms", *lat(l2r_01)],
            ["SDK folder sync, either direction", "-", "next sync pass", "5 s (min interval)",
             "15 s default interval", "-"],
        ]
        rep.table("change latency", ["direction", "latency", "median", "min", "max", "samples"],
                  latency_rows)
        for ms in latencies:
            f, nf = r2l[(ms, "feed")], r2l[(ms, "no-feed")]
            fm = statistics.median(f) if f else None
            rep.ratio(f"remote->visible feed/no-feed @ {ms:g} ms", fm,
                      statistics.median(nf) if nf else None)
            rep.ratio(f"remote->visible feed / poll interval @ {ms:g} ms", fm, FEED_INTERVAL)
        rep.ratio("local->remote latency / write-back-delay 1s",
                  statistics.median(l2r_1) if l2r_1 else None, 1.0)
        rep.ratio("local->remote latency / write-back-delay 0.1s",
                  statistics.median(l2r_01) if l2r_01 else None, 0.1)

    wall = time.perf_counter() - started
    head = [f"**Run:** {machine}; load average {load0} at the start, {loadavg()} at the end "
            f"(2 cores: above ~2 means other work was competing); {wall / 60:.1f} min in all. "
            f"memfs at {code}. Command: `benchmarks/bench_sync.py {' '.join(sys.argv[1:])}`.",
            "",
            f"Store: {args.files} memories of ~{args.size} B in 20 top-level directories. "
            f"Latency: the server's own fault on every `/v1/` request, for memfs and the SDK "
            f"alike. The store was left unwritten for {args.settle:g} s after the seeding before "
            f"the isolated edit and the idle feed polls (the feed's lookback is {lookback:g} s); "
            "the mounts ran after that. Times are noisy on this shared "
            "machine; request and byte counts are exact."]
    if args.quick or args.files != 2000:
        head.append("**REDUCED SIZES (not the issue's 2,000 memories).**")
    print("\n# " + "\n# ".join(x for x in head if x))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text("\n".join(head + rep.md) + "\n")
        print(f"# markdown written to {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
