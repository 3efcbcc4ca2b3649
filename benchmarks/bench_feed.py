#!/usr/bin/env python3
"""Feed benchmark (issue 22): what the change feed costs during and after a burst of writes.

Side by side in one run, against one `memfs serve` (--latency ms added per request):

1. creates/s (`cp -r` of --creates files through the mount, default 400) into an empty store;
   then the same again while that mount's push pass of the first copy is under way (its own
   versions in the feed); then a third copy once that pass ended and the mount is quiet
   again ("idle again": the same mount, the same size of state, nothing running). The same
   with `--no-feed` as a reference (A/B, interleaved).
2. creates/s into a store of --burst memories (default 1,500) written through the SDK just
   before the mount, at each of --at seconds after the burst's end (default 0.1, 0.4 and
   0.8 of the lookback: inside it; the last one where the burst's versions start to settle),
   a fresh store each time. The empty store of 1. is the baseline, measured in the same
   repetition.

The feed's lookback is --lookback (default 10 s; a mount's default is 30, `--feed-lookback`),
so that a burst settles in 10 s of the feed's clock rather than 30: what a poll costs, and
what a copy meets, depend on where in the window the burst lies, not on how long the window
is, as long as the burst fits inside it (the script says when one did not).

Creates/s on a shared 2-core machine moves 2-fold between repetitions: every ratio is taken
within one repetition (the copy and its reference a few seconds apart, the order of the
variants alternating), and the report gives the median of those ratios with their spread
(min-max), beside the daemon's CPU per create (the nanoseconds its threads ran during the
copy, `cpu_seconds`), which other load disturbs far less than wall time.
3. An idle mount (--poll-interval 1) right after --changes creates made through it (default
   1,000): each poll's requests and response bytes, as the mount itself counts them (`memfs
   status --json`, feed.polls), for --watch seconds after its push pass ended (default the
   lookback and 10 s: through the moment the burst settles, and after). With --polls N
   (--quick: 8) the benchmark asks for N polls at once instead (the mount's `sync` control
   request, as `memfs mcp` sends it): a poll inside the lookback costs the same whenever it
   runs, so there is no interval to sit through; only the settling, the lookback of the
   feed's own clock, needs the watch.
4. A quiet store, its newest write alone in its lookback window: requests and bytes of 6
   polls of a fresh mount (--poll-interval 1), asked for at once.
5. What one push costs the daemon and the server (CPU per file over a pass, nothing else
   running), in each repetition: what a copy meets while a pass runs.
6. How many push answers the daemon takes in during a copy begun while its pass runs (its
   `pushed` events inside the copy's window, through `memfs watch --json`), in each
   repetition (and for --baseline).

    .venv/bin/python benchmarks/bench_feed.py                  # ~5 min on 2 cores
    .venv/bin/python benchmarks/bench_feed.py --quick          # smoke-test sizes (~30 s)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

from bench_network import code_version, finished, loadavg, push_under_way, say
from common import (
    REPO,
    Bench,
    MountProc,
    machine_line,
    make_tree,
    mount_env,
    new_store,
    run_timed,
    seed_store,
    write_tree,
)

KIB = 1024
TARGET_RATIO = 0.9
IDLE_AGAIN_S = 2.0  # after a push pass ended, before the "idle again" copy
#: The feed's lookback of this code's mounts: --lookback's default, and what main sets.
LOOKBACK_S = 10.0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    p.add_argument("--creates", "--files", dest="creates", type=int, default=None,
                   help="files per cp -r (default 400)")
    p.add_argument("--burst", type=int, default=None,
                   help="memories written just before the mount in 2. (default 1500)")
    p.add_argument("--at", default=None,
                   help="seconds after the burst's end of each cp in 2. (default 0.1, 0.4 "
                        "and 0.8 of the lookback)")
    p.add_argument("--changes", type=int, default=None,
                   help="creates made through the idle mount of 3. (default 1000)")
    p.add_argument("--watch", type=float, default=None,
                   help="seconds of polls watched after 3.'s push pass (default: the "
                        "lookback and 10 s)")
    p.add_argument("--polls", type=int, default=None,
                   help="instead of --watch, this many polls asked for at once after 3.'s "
                        "push pass (default: watch; 8 with --quick and no --watch)")
    p.add_argument("--burst-watch", type=float, default=None,
                   help="seconds after the burst the first burst store's mount is kept, its "
                        "CPU and polls counted (default: the lookback and 2 s)")
    p.add_argument("--lookback", type=float, default=LOOKBACK_S,
                   help="the feed's lookback in this code's mounts (`--feed-lookback`; a "
                        "mount's default is 30 s; default 10)")
    p.add_argument("--repeat", type=int, default=None, help="repetitions of 1. and 2. "
                   "(default 5, 1 with --quick)")
    p.add_argument("--latency", type=float, default=0.0, help="ms added to every request")
    p.add_argument("--baseline", type=pathlib.Path, default=None, metavar="CHECKOUT",
                   help="also measure the creates of 1. and 2. with the memfs of another "
                        "checkout (e.g. `git archive` of the code before issue 22), "
                        "interleaved; the benchmark then runs from its temp directory. Its "
                        "mounts keep their own lookback (30 s: the option may be unknown "
                        "there), so its copies after a burst lie earlier in their window; "
                        "give --lookback 30 to compare those")
    p.add_argument("--keep-tmp", action="store_true")
    a = p.parse_args()
    if a.polls is None and a.watch is not None:
        a.polls = 0  # a --watch asked for is watched, --quick too
    at = ",".join(f"{a.lookback * f:g}" for f in (0.1, 0.4, 0.8))
    for name, full, quick in (("creates", 400, 60), ("burst", 1500, 150),
                              ("at", at, f"{a.lookback * 0.1:g}"),
                              ("changes", 1000, 100), ("watch", a.lookback + 10, 8.0),
                              ("repeat", 5, 1), ("burst_watch", a.lookback + 2, 4.0),
                              ("polls", 0, 8)):
        if getattr(a, name) is None:
            setattr(a, name, quick if a.quick else full)
    a.at_list = [float(x) for x in str(a.at).split(",") if x.strip()]
    if a.baseline is not None:
        a.baseline = a.baseline.resolve()
    if max(a.burst + a.creates, 3 * a.creates) > 2000:
        p.error("a store holds at most 2,000 memories: --burst + --creates and 3 x --creates "
                "must stay within it")
    return a


class Samples(dict):
    """Samples by key; `rep` also files each by repetition, for ratios within one."""

    def __init__(self) -> None:
        super().__init__()
        self.reps: dict[str, dict[int, float]] = {}

    def add(self, key: str, value: float, rep: int | None = None) -> None:
        self.setdefault(key, []).append(value)
        if rep is not None:
            self.reps.setdefault(key, {})[rep] = value

    def med(self, key: str) -> float | None:
        return statistics.median(self[key]) if self.get(key) else None

    def ratios(self, key: str, ref: str, *, inverse: bool = False) -> list[float]:
        """key / ref (ref / key with `inverse`) within each repetition that has both."""
        mine, theirs = self.reps.get(key, {}), self.reps.get(ref, {})
        return [(theirs[r] / mine[r] if inverse else mine[r] / theirs[r])
                for r in sorted(mine) if r in theirs and mine[r] and theirs[r]]


class _Problems:
    """The `res.problem` that bench_network's `finished` reports to."""

    def __init__(self, s: Samples) -> None:
        self.s = s

    def problem(self, text: str) -> None:
        print(f"# PROBLEM: {text}")
        self.s.setdefault("problems", []).append(text)


def cp(src, m, s: Samples | None = None, key: str = "", rep: int | None = None,
       server=None) -> float:
    """`cp -r` of src into the mount: its wall time; with `s`, also files its creates/s and
    the daemon's (and the server's) CPU per file during it (µs), which other load on the
    machine disturbs far less."""
    run_timed(["sync"])
    before = cpu_seconds(m.pid)
    sbefore = cpu_seconds(server.proc.pid, precise=False) if server is not None else 0.0
    took = run_timed(["cp", "-r", str(src), str(m.path)])
    if s is not None:
        files = sum(1 for _ in src.rglob("*.md"))
        s.add(key, files / took, rep)
        s.add(f"{key} cpu", (cpu_seconds(m.pid) - before) / files * 1e6, rep)
        if server is not None:
            spent = cpu_seconds(server.proc.pid, precise=False) - sbefore
            s.add(f"{key} server cpu", spent / files * 1e6, rep)
    return took


def polls_of(m, seen: dict[float, dict]) -> None:
    """Collect the mount's last polls (it keeps ten) into `seen`, by time."""
    for p in m.status()["feed"].get("polls") or []:
        seen[p["at"]] = p


def polls_asked(m, n: int, seen: dict[float, dict]) -> None:
    """n feed polls, each asked for as the last ends (the `sync` control request) and
    collected at once (the mount keeps its last ten). What a poll costs is its requests
    and bytes, not the interval between two: waiting out --poll-interval measured nothing."""
    for _ in range(n):
        m.sync_now(full=False)
        polls_of(m, seen)


def wait_pushed(m, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while m.pending_total() and time.monotonic() < deadline:
        time.sleep(0.1)
    return time.time()


def set_latency(server, ms: float) -> None:
    server.set_faults(latency=ms / 1000)


# -- 1 and 2: creates/s ------------------------------------------------------------------------


def mount(b, server, store: str, *args: str, code: pathlib.Path | None = None) -> MountProc:
    """`memfs mount` as Bench.mount does, running the memfs of checkout `code` (its daemon
    too: the benchmark runs from a directory holding no memfs, see --baseline)."""
    base = b.path("mount")
    mnt = base / "mnt"
    mnt.mkdir()
    env = mount_env(server, base)
    env["MEMFS_LOG_LEVEL"] = "INFO"
    if code is not None:
        env["PYTHONPATH"] = str(code)
    else:  # a baseline checkout may not know the option (and, before issue 22, no feed)
        args = (*args, "--feed-lookback", f"{LOOKBACK_S:g}")
    m = MountProc(mnt, store, env, tuple(args))
    b.callback(m.cleanup)
    m.mount()
    if code is not None and (pathlib.Path.cwd() / "memfs").exists():
        raise SystemExit(f"the mount would not run the memfs of {code}: run the benchmark "
                         "from a directory holding no memfs package")
    return m


def creates_empty(b, server, a, s: Samples, srcs, rep: int, variant: str,
                  code: pathlib.Path | None, *flags: str) -> None:
    store = new_store(server, f"feed-empty-{rep}-{variant}")
    m = mount(b, server, store, "--no-prefetch", *flags, code=code)
    cp(srcs[0], m, s, f"{variant} empty", rep, server)
    left = push_under_way(m, a.creates)
    if 0 < left < a.creates:
        cp(srcs[1], m, s, f"{variant} while pushing", rep, server)
    else:
        say(f"  cp while pushing not measured ({left} of {a.creates} pending)")
    wait_pushed(m)
    time.sleep(IDLE_AGAIN_S)  # the blob writer's turn (0.3 s of quiet, then its fsyncs)
    cp(srcs[2], m, s, f"{variant} idle again", rep, server)
    finished(m, _Problems(s), f"empty store ({variant})")


def answers_during_copy(b, server, a, s: Samples, srcs, rep: int, variant: str,
                        code: pathlib.Path | None) -> None:
    """How many push answers the daemon takes in during a copy that begins while its
    pass runs: its `pushed` events, timestamped by the daemon (`memfs watch --json`), inside
    the copy's window. Apart from 1. (a subscriber costs the daemon a little per event)."""
    store = new_store(server, f"feed-answers-{rep}-{variant}")
    m = mount(b, server, store, "--no-prefetch", code=code)
    heard: list[tuple[float, str]] = []
    watch = subprocess.Popen([sys.executable, "-m", "memfs", "watch", str(m.path), "--json"],
                             env=m.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True)
    b.callback(lambda: (watch.kill(), watch.wait()))

    def listen() -> None:
        for line in watch.stdout:
            event = json.loads(line)
            at = datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
            heard.append((at.replace(tzinfo=UTC).timestamp(), event["kind"]))

    threading.Thread(target=listen, daemon=True).start()
    run_timed(["cp", "-r", str(srcs[0]), str(m.path)])
    left = push_under_way(m, a.creates)
    if not 0 < left < a.creates:
        say(f"  answers during a copy not measured ({left} of {a.creates} pending)")
    else:
        t0 = time.time()
        run_timed(["cp", "-r", str(srcs[1]), str(m.path)])
        t1 = time.time()
        wait_pushed(m)
        s.add(f"{variant} answers during copy",
              sum(1 for at, kind in heard if kind == "pushed" and t0 <= at <= t1), rep)
    finished(m, _Problems(s), f"answers during a copy ({variant})")


def push_cost(b, server, a, s: Samples, src, rep: int) -> None:
    """What one push costs, nothing else running: a mount whose write-back delay lets the
    blob writer finish first (`--write-back-delay 4`), its daemon's and the server's CPU
    over the pass of a copy, per file pushed (`memfs status` every 0.5 s meanwhile: a few
    ms of the daemon's each)."""
    store = new_store(server, f"feed-push-cost-{rep}")
    m = mount(b, server, store, "--no-prefetch", "--write-back-delay", "4")
    run_timed(["cp", "-r", str(src), str(m.path)])
    time.sleep(3.0)
    d0, s0 = cpu_seconds(m.pid), cpu_seconds(server.proc.pid, precise=False)
    deadline = time.monotonic() + 120
    while m.pending_total() and time.monotonic() < deadline:
        time.sleep(0.5)
    if not m.pending_total():
        s.add("push daemon cpu", (cpu_seconds(m.pid) - d0) / a.creates * 1e6, rep)
        spent = cpu_seconds(server.proc.pid, precise=False) - s0
        s.add("push server cpu", spent / a.creates * 1e6, rep)
    finished(m, _Problems(s), "push cost")


def creates_after_burst(b, server, a, s: Samples, src, rep: int, at: float, variant: str,
                        code: pathlib.Path | None) -> None:
    """A copy into a store right after a burst, and beside it (A/B, order alternating by
    repetition) the same copy into an empty store mounted at the same time: the pair a
    second apart, its ratio free of the machine's drift."""
    pair = mount(b, server, new_store(server, f"feed-pair-{rep}-{at:g}-{variant}"),
                 "--no-prefetch", code=code)
    store = new_store(server, f"feed-burst-{rep}-{at:g}-{variant}")
    burst = make_tree(a.burst, 0, seed=20 + rep, size_range=(500, 3500), name="burst")
    began = time.monotonic()
    seed_store(server, store, burst)
    ended = time.monotonic()
    if ended - began > a.lookback:
        _Problems(s).problem(f"the burst took {ended - began:.1f} s, longer than the "
                             f"{a.lookback:g} s lookback: part of it had settled (a longer "
                             "--lookback measures it whole)")
    m = mount(b, server, store, "--no-prefetch", code=code)
    wait = ended + at - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    since = time.monotonic() - ended
    key = f"{variant} after burst at {at:g}"
    copies = [(m, key), (pair, f"{key} pair")]
    for mnt, k in (copies if rep % 2 == 0 else copies[::-1]):
        cp(src, mnt, s, k, rep, server)
    finished(pair, _Problems(s), f"empty store beside the burst store at {at:g} s ({variant})")
    s.add(f"{variant} after burst at {at:g} since", since)
    seen: dict[float, dict] = {}
    polls_of(m, seen)
    if seen:
        s.add(f"{variant} after burst at {at:g} poll bytes",
              max(p["bytes"] for p in seen.values()))
    if at == a.at_list[0] and rep == 0:
        # The whole lookback after the burst (--burst-watch): what the mount spent (CPU
        # seconds of its daemon from its start: the listing, this cp and every poll), and
        # its polls.
        while time.monotonic() < ended + a.burst_watch:
            polls_of(m, seen)
            time.sleep(min(3.0, max(0.0, ended + a.burst_watch - time.monotonic())))
        polls_of(m, seen)
        s.add(f"{variant} window cpu", cpu_seconds(m.pid))
        if seen:
            s.add(f"{variant} window polls", len(seen))
            s.add(f"{variant} window requests", sum(p["requests"] for p in seen.values()))
            s.add(f"{variant} window bytes", sum(p["bytes"] for p in seen.values()))
    finished(m, _Problems(s), f"burst store at {at:g} s ({variant})")


def _ticks(path: str) -> int:
    """User + system clock ticks of /proc/.../stat."""
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cpu_seconds(pid: int | None, *, precise: bool = True) -> float:
    """CPU seconds a process used so far: the nanoseconds each live thread ran
    (/proc/PID/task/TID/schedstat; user + system time comes in 10 ms ticks, which moved a
    400-file copy's CPU per create in 25 µs steps), plus, in ticks, what threads that
    exited used (the process's ticks less its live threads'). For the daemon, whose
    threads live on. Not `precise`: user + system ticks only, for the server, whose
    request threads come and go (ticks and nanoseconds of an ended thread disagree: its
    CPU over a copy came out negative)."""
    hz = os.sysconf("SC_CLK_TCK")
    if not precise:
        return _ticks(f"/proc/{pid}/stat") / hz
    try:
        ns = live = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                ns += int(f.read().split()[0])
            live += _ticks(f"/proc/{pid}/task/{task}/stat")
        return ns / 1e9 + max(0, _ticks(f"/proc/{pid}/stat") - live) / hz
    except (OSError, ValueError, IndexError):  # a thread ended meanwhile, no schedstat...
        return _ticks(f"/proc/{pid}/stat") / hz


# -- 3 and 4: bytes per poll -------------------------------------------------------------------


def idle_after_changes(b, server, a, s: Samples, src_changes,
                       code: pathlib.Path | None) -> list[dict]:
    store = new_store(server, "feed-idle-after")
    m = mount(b, server, store, "--no-prefetch", "--poll-interval", "1", code=code)
    started = time.time()
    cp(src_changes, m)
    pushed = wait_pushed(m)
    seen: dict[float, dict] = {}
    if a.polls:
        say(f"  {a.changes} creates pushed {pushed - started:.1f} s after the cp began; "
            f"{a.polls} polls asked for")
        polls_asked(m, a.polls, seen)
    else:
        say(f"  {a.changes} creates pushed {pushed - started:.1f} s after the cp began; "
            f"watching polls for {a.watch:g} s")
        end = time.monotonic() + a.watch
        while time.monotonic() < end:
            polls_of(m, seen)
            time.sleep(3)
        polls_of(m, seen)
    finished(m, _Problems(s), "idle mount after the changes")
    polls = [dict(p, since=p["at"] - started) for t, p in sorted(seen.items()) if t > pushed]
    return polls


def quiet_store(b, server, s: Samples, code: pathlib.Path | None) -> list[dict]:
    store = new_store(server, "feed-quiet")
    client = server.sdk()
    try:
        client.beta.memory_stores.memories.create(store, path="/only.md", content="quiet\n")
    finally:
        client.close()
    m = mount(b, server, store, "--no-prefetch", "--poll-interval", "1", code=code)
    seen: dict[float, dict] = {}
    polls_asked(m, 6, seen)
    finished(m, _Problems(s), "quiet store")
    return [p for _t, p in sorted(seen.items())]


# -- report --------------------------------------------------------------------------------


def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}/s"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    global LOOKBACK_S
    a = parse_args()
    LOOKBACK_S = a.lookback
    started = time.perf_counter()
    say(f"bench_feed: {a.creates} creates per cp, burst {a.burst}, at {a.at} s of a "
        f"{a.lookback:g} s lookback, "
        f"{a.changes} changes, " + (f"{a.polls} polls" if a.polls else f"watch {a.watch:g} s")
        + f", {a.repeat} repetitions, {a.latency:g} ms")
    machine, load0 = machine_line(), loadavg()
    s = Samples()
    with Bench("feed", keep_tmp=a.keep_tmp) as b:
        if a.baseline:  # `python -m memfs` puts the current directory first on sys.path
            os.chdir(b.tmp)
        server = b.server("--fault-control")
        set_latency(server, a.latency)
        src = b.path("src") / "tree"
        write_tree(src, make_tree(a.creates, 0, seed=9, size_range=(500, 3500), name="cp"))
        src2 = b.path("src2") / "tree2"
        write_tree(src2, make_tree(a.creates, 0, seed=10, size_range=(500, 3500), name="cp"))
        changes = b.path("changes") / "changes"
        write_tree(changes, make_tree(a.changes, 0, seed=12, size_range=(200, 800),
                                      name="change"))
        srcs = [src, src2, b.path("src3") / "tree3"]
        write_tree(srcs[2], make_tree(a.creates, 0, seed=11, size_range=(500, 3500),
                                      name="cp"))
        here = REPO if a.baseline else None
        variants = [("feed", here), ("no-feed", here)] + (
            [("before", a.baseline)] if a.baseline else [])
        flags = {"no-feed": ("--no-feed",)}
        for rep in range(a.repeat):
            order = variants if rep % 2 == 0 else variants[::-1]  # drift hits all alike
            say(f"repetition {rep + 1}: creates into an empty store, while it pushes, idle "
                f"again ({', '.join(v for v, _c in order)}), then into burst stores at "
                f"{a.at} s (feed{', before' if a.baseline else ''})")
            for variant, code in order:
                creates_empty(b, server, a, s, srcs, rep, variant, code,
                              *flags.get(variant, ()))
            push_cost(b, server, a, s, src, rep)
            for variant, code in order:
                if variant != "no-feed":
                    answers_during_copy(b, server, a, s, srcs, rep, variant, code)
            for at in a.at_list:
                for variant, code in order:
                    if variant != "no-feed":
                        creates_after_burst(b, server, a, s, src, rep, at, variant, code)
        say(f"idle mount after {a.changes} changes made through it")
        after = idle_after_changes(b, server, a, s, changes, here)
        say("quiet store")
        quiet = quiet_store(b, server, s, here)
    wall = time.perf_counter() - started

    ratios: list[tuple[str, float]] = []
    values: list[tuple[str, float]] = []
    base = bool(a.baseline)
    names = {"feed": "this code", "no-feed": "`--no-feed`", "before": "before"}
    lines = [f"Run: {time.strftime('%Y-%m-%d')}, commit {code_version()}, {machine}, load "
             f"{load0} -> {loadavg()}, {wall:.0f} s, `benchmarks/bench_feed.py "
             f"{' '.join(sys.argv[1:])}`, {a.latency:g} ms added per request; "
             f"{a.repeat} repetition(s)" + (f"; before: the memfs of {a.baseline}"
                                            if base else "") + ".", "",
             f"Creates (`cp -r` of {a.creates} files through the mount). Each ratio is taken "
             "within one repetition, then the median (min-max) over repetitions; the CPU "
             "ratio is the reference's daemon CPU per create over this one's (1: the copy "
             "cost the daemon nothing more).", "",
             "| copy | code | creates/s, median (min-max) | ratio to its reference | "
             "daemon CPU per create, µs | CPU ratio | target |",
             "|---|---|---|---|---|---|---|"]

    def spread(xs: list[float], f: str = "{:.2f}") -> str:
        if not xs:
            return "-"
        mid = f.format(statistics.median(xs))
        return mid if len(xs) == 1 else f"{mid} ({f.format(min(xs))}-{f.format(max(xs))})"

    def both(key: str, ref: str) -> tuple[list[float], list[float]]:
        """Per repetition: key over ref in creates/s, and ref over key in CPU per create;
        ref may be a "+"-joined bracket (its mean)."""
        refs = ref.split("+")
        for suffix in ("", " cpu"):
            s.reps[ref + suffix] = {
                r: statistics.mean(s.reps[x + suffix][r] for x in refs)
                for r in s.reps.get(refs[0] + suffix, {})
                if all(r in s.reps.get(x + suffix, {}) for x in refs)}
        return s.ratios(key, ref), s.ratios(f"{key} cpu", f"{ref} cpu", inverse=True)

    def row(what: str, variant: str, key: str, ref: str | None, name: str | None) -> None:
        k = f"{variant} {key}"
        if not s.get(k):
            return
        rate = spread(s[k], "{:,.0f}") + "/s"
        cpu = spread(s.get(f"{k} cpu", []), "{:.0f}")
        if ref is None:
            lines.append(f"| {what} | {names[variant]} | {rate} | 1 | {cpu} | 1 | |")
            return
        wall, cpu_r = both(k, "+".join(f"{variant} {r}" for r in ref.split("+")))
        target = ""
        if name:
            if wall:
                ratios.append((name if variant == "feed" else f"{name} ({variant})",
                               statistics.median(wall)))
            if variant == "feed":
                met_w = bool(wall) and statistics.median(wall) >= TARGET_RATIO
                met_c = bool(cpu_r) and statistics.median(cpu_r) >= TARGET_RATIO
                target = (f">= {TARGET_RATIO}: {verdict(met_w)} (creates/s), "
                          f"{verdict(met_c)} (CPU)")
        lines.append(f"| {what} | {names[variant]} | {rate} | {spread(wall)} | {cpu} | "
                     f"{spread(cpu_r)} | {target} |")

    shown = [v for v, _c in variants]
    for variant in shown:
        row("empty store", variant, "empty", None, None)
    for variant in shown:
        row("the same mount while it pushes the first copy; reference: its copies before "
            "and after the pass", variant, "while pushing", "empty+idle again",
            "creates while-pushing/idle")
    for variant in shown:
        row("the same mount once that pass ended (idle again); reference: the empty store",
            variant, "idle again", "empty", None)
    for at in a.at_list:
        since = s.med(f"feed after burst at {at:g} since") or at
        biggest = s.med(f"feed after burst at {at:g} poll bytes")
        for variant in shown:
            row(f"{a.burst:,} memories written just before the mount, cp {since:.0f} s after "
                f"the burst (biggest poll by then: "
                f"{'-' if biggest is None else f'{biggest / KIB:.1f} KiB'}); reference: an "
                "empty store mounted beside it, copied into a second apart", variant,
                f"after burst at {at:g}", f"after burst at {at:g} pair",
                f"creates after-burst-{at:g}s/empty")
    for variant in shown:
        if s.get(f"{variant} answers during copy"):
            got = s[f"{variant} answers during copy"]
            lines += ["", f"Push answers the daemon took in during a {a.creates}-file copy "
                      f"begun while its pass ran ({names[variant]}): median "
                      f"{statistics.median(got):g} ({min(got):g}-{max(got):g})."]
            values.append((f"answers during copy ({variant})", statistics.median(got)))
    if s.get("push daemon cpu"):
        lines += ["", f"One push, nothing else running (a pass of {a.creates} files): the "
                  f"daemon's CPU {spread(s['push daemon cpu'], '{:.0f}')} µs, the server's "
                  f"{spread(s['push server cpu'], '{:.0f}')} µs, per file."]
        values.append(("push daemon cpu us", statistics.median(s["push daemon cpu"])))
    first_at = a.at_list[0] if a.at_list else None
    cpu, cpu_b = s.med("feed window cpu"), s.med("before window cpu")
    if cpu is not None and first_at is not None:
        lines += ["", f"The mount of the first burst store (cp at {first_at:g} s), kept until "
                  f"{a.burst_watch:g} s after the burst: its daemon's CPU since it started "
                  f"(listing, cp, polls): {cpu:.2f} s" + (f" (before: {cpu_b:.2f} s)"
                                                          if cpu_b is not None else "")
                  + (f"; its polls by then: {s.med('feed window polls'):g} polls seen, "
                     f"{s.med('feed window requests'):g} requests, "
                     f"{s.med('feed window bytes') / KIB:.1f} KiB"
                     if s.med("feed window polls") else "") + "."]
        values.append(("after-burst daemon cpu s", cpu))
    lines += ["", f"Idle mount (`--poll-interval 1`) after {a.changes:,} creates made through it, "
              "each poll after its push pass ended (s: since the copy began):", "",
              "| polls | requests/poll | bytes/poll (max) | versions read | target |",
              "|---|---|---|---|---|"]
    inside = [p for p in after if p["since"] < a.lookback]
    outside = [p for p in after if p["since"] >= a.lookback]
    if inside:
        first, rest = inside[0], inside[1:]
        lines.append(f"| first (at {first['since']:.0f} s) | {first['requests']} | "
                     f"{first['bytes']:,} | {first['versions']} | |")
        if rest:
            worst = max(p["bytes"] for p in rest)
            values.append(("idle-after-burst bytes/poll max (2nd poll on)", worst))
            lines.append(f"| 2nd to {len(inside)}th, within {a.lookback:g} s of the burst | "
                         f"{statistics.median(p['requests'] for p in rest):g} | {worst:,} | "
                         f"{max(p['versions'] for p in rest)} | <= 1 KiB: "
                         f"{verdict(worst <= KIB)} |")
    settling = [p for p in outside if p["versions"] > 2]
    quiet_after = [p for p in outside if settling and p["at"] > settling[-1]["at"]]
    if settling:
        lines.append(f"| {len(settling)} poll(s) where the burst settles ("
                     f"{settling[0]['since']:.0f} to {settling[-1]['since']:.0f} s) | "
                     f"{max(p['requests'] for p in settling)} | "
                     f"{max(p['bytes'] for p in settling):,} | "
                     f"{sum(p['versions'] for p in settling)} in all | (each version read a "
                     "second time, once) |")
    if quiet_after:
        lines.append(f"| {len(quiet_after)} poll(s) after it settled | "
                     f"{statistics.median(p['requests'] for p in quiet_after):g} | "
                     f"{max(p['bytes'] for p in quiet_after):,} | "
                     f"{max(p['versions'] for p in quiet_after)} | |")
    if quiet:
        worst_q = max(p["bytes"] for p in quiet)
        reqs = max(p["requests"] for p in quiet)
        values += [("quiet-store requests/poll max", reqs),
                   ("quiet-store bytes/poll max", worst_q)]
        lines += ["", f"Quiet store (newest write alone in its lookback window), fresh mount: "
                  f"{len(quiet)} polls, {reqs} request(s) per poll at most, {worst_q:,} bytes "
                  f"at most: 1 request and <= 1 KiB: {verdict(reqs == 1 and worst_q <= KIB)}."]
    for p in s.get("problems", []):
        lines.append(f"PROBLEM: {p}")
    print()
    print("\n".join(lines))
    print()
    for name, value in ratios:
        print(f"ratio {name}: {value:.2f}x")
    for name, value in values:
        print(f"value {name}: {value:g}")
    print("# raw: " + json.dumps({k: v for k, v in s.items() if k != "problems"}))
    print("# polls after the changes: " + json.dumps(after))
    return 1 if s.get("problems") else 0


if __name__ == "__main__":
    sys.exit(main())
