#!/usr/bin/env python3
"""Network benchmark (issue 9): memfs vs the SDK's SessionMemoryStores, with latency per request.

Every `/v1/` request of `memfs serve` is delayed by the server's own latency fault
(`--fault-control`, `POST /_memfs/faults {"latency": s}`): memfs and the SDK see the same delay.
Each network phase runs at every `--latency` (default 0 and 50 ms), memfs and its reference side
by side, interleaved:

  cold   `memfs mount` (first mount, empty cache) + `grep -r` of every file, vs the SDK's
         `SessionMemoryStores.download` + the same grep over its folder;
  ls     `memfs mount` (first mount) until `ls -R` lists every file, vs the SDK download;
  push   500 creates + 500 edits + 40 deletes in a mounted 1,500-memory store until the server
         holds exactly the result (polled with the SDK), vs the SDK's `finish()` of the same
         changes in its downloaded folder;
  creates  `cp -r` of 500 new files into a mount of an empty store and of a 1,500-memory store,
         in creates/s, vs native disk; then a second `cp -r` of 500 into the first mount while
         its pusher sends the first 500 (a pass seen under way by `memfs status`);
then at 0 ms only:
  warm   warm `grep -r` over a mounted 2,000-memory store vs bindfs over the same files on disk;
  rss    the daemon's peak RSS (VmHWM) after that mount has read every file.

Prints the figures, a table of ratios against the issue's targets, `ratio <name>: <x>x` lines;
`--markdown FILE` writes the tables for docs/BENCHMARKS.md, `--json FILE` the raw samples,
`--plot FILE.png` a chart of every figure against its target (matplotlib; skipped if missing).

    .venv/bin/python benchmarks/bench_network.py                      # full: ~6-10 min on 2 cores
    .venv/bin/python benchmarks/bench_network.py --quick              # tiny sizes (smoke test)
    .venv/bin/python benchmarks/bench_network.py --latency 50 --phases cold,push --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import pathlib
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from common import (
    REPO,
    SOMEWORD,
    Bench,
    async_sdk,
    fmt_s,
    grep_cmd,
    machine_line,
    make_tree,
    new_store,
    run_timed,
    sdk_session,
    seed_store,
    write_tree,
)

PHASES = ("cold", "ls", "push", "creates", "warm", "rss")
SIZE_RANGE = (500, 3500)
MARKER = ".anthropic-memory-store"  # the SDK's trust marker in its folder: not a memory


# -- arguments ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes, one repetition, for the smoke test")
    p.add_argument("--files", "--notes", dest="notes", type=int, default=None,
                   help="memories in the store of the network phases (default 1500)")
    p.add_argument("--size", type=int, default=2000,
                   help="mean bytes per memory; sizes are uniform in [size/4, 7*size/4] "
                        "(default 2000: 500-3500)")
    p.add_argument("--warm-files", type=int, default=None,
                   help="memories for the warm grep and RSS phases (default 2000)")
    p.add_argument("--creates", type=int, default=None, help="push phase creates (default 500)")
    p.add_argument("--edits", type=int, default=None, help="push phase edits (default 500)")
    p.add_argument("--deletes", type=int, default=None, help="push phase deletes (default 40)")
    p.add_argument("--create-files", type=int, default=None,
                   help="files per cp -r in the creates/s phase (default 500)")
    p.add_argument("--latency", default="0,50",
                   help="comma-separated ms added per /v1/ request (default 0,50)")
    p.add_argument("--phases", default=",".join(PHASES),
                   help=f"comma-separated subset of {','.join(PHASES)}")
    p.add_argument("--repeat", type=int, default=None,
                   help="max repetitions per phase and latency (default 3, 1 with --quick); "
                        "the warm grep runs max(repeat, 15) times (3 with --quick): a run "
                        "takes a fraction of a second and this VM's times come in steps")
    p.add_argument("--budget", type=float, default=60.0,
                   help="stop repeating a phase at one latency once its runs took this many "
                        "seconds (default 60; at least one run)")
    p.add_argument("--markdown", type=pathlib.Path, help="write the result tables to FILE")
    p.add_argument("--json", type=pathlib.Path, help="write the raw samples to FILE")
    p.add_argument("--plot", type=pathlib.Path, help="write the chart (PNG) to FILE")
    p.add_argument("--keep-tmp", action="store_true", help="leave the temp directory behind")
    p.add_argument("--from-json", type=pathlib.Path, metavar="FILE",
                   help="measure nothing: print, --markdown and --plot the run saved by --json")
    a = p.parse_args(argv)
    q = a.quick
    for name, full, quick in (("notes", 1500, 60), ("warm_files", 2000, 80),
                              ("creates", 500, 20), ("edits", 500, 20), ("deletes", 40, 4),
                              ("create_files", 500, 40), ("repeat", 3, 1)):
        if getattr(a, name) is None:
            setattr(a, name, quick if q else full)
    a.latencies = [float(x) for x in a.latency.split(",") if x.strip()]
    a.phase_set = {x.strip() for x in a.phases.split(",") if x.strip()}
    unknown = a.phase_set - set(PHASES)
    if unknown:
        p.error(f"unknown phases: {', '.join(sorted(unknown))}")
    a.size_range = (max(1, a.size // 4), max(2, a.size * 7 // 4))
    a.warm_files = max(a.warm_files, a.notes)
    a.edits = min(a.edits, a.notes // 2)
    a.deletes = min(a.deletes, a.notes // 4)
    if a.notes + a.creates > 2000 or a.notes + a.create_files > 2000:
        p.error("a store holds at most 2,000 memories: notes + creates and "
                "notes + create-files must stay within it")
    return a


# -- data and checks ---------------------------------------------------------------------------


def grep_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if SOMEWORD in line)


def grep_count(root: pathlib.Path) -> dict[str, int]:
    """`grep -rc SOMEWORD root`: reads every byte of every file; {relative path: lines}."""
    r = subprocess.run(["grep", "-rc", SOMEWORD, str(root)], capture_output=True, text=True,
                       timeout=1800)
    if r.returncode > 1:
        raise RuntimeError(f"grep -r {root} failed ({r.returncode}): {r.stderr[-2000:]}")
    out = {}
    prefix = str(root).rstrip("/") + "/"
    for line in r.stdout.splitlines():
        path, _, n = line.rpartition(":")
        rel = path[len(prefix):] if path.startswith(prefix) else path
        if rel != MARKER:
            out[rel] = int(n)
    return out


def ls_r_count(root: pathlib.Path) -> int:
    """Files (`*.md`) that `ls -R` lists under root."""
    r = subprocess.run(["ls", "-R", str(root)], capture_output=True, text=True, timeout=600)
    return sum(1 for line in r.stdout.splitlines() if line.endswith(".md"))


def expected_grep(tree: dict[str, str]) -> dict[str, int]:
    return {rel: grep_lines(text) for rel, text in tree.items()}


def sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Changes:
    creates: dict[str, str]
    edits: dict[str, str]
    deletes: list[str]
    final: dict[str, str]  # the whole store afterwards: {"/path": sha256}


def make_changes(base: dict[str, str], a: argparse.Namespace) -> Changes:
    """Creates spread over the 20 directories, edits of every third memory, deletes of others."""
    creates = make_tree(a.creates, 0, seed=7, size_range=a.size_range, name="new")
    paths = sorted(base)
    edited = paths[::3][: a.edits]
    edits = {rel: base[rel] + f"edited: {rel}\n" for rel in edited}
    rest = [p for p in paths if p not in edits]
    step = max(1, len(rest) // max(1, a.deletes))
    deletes = rest[::step][: a.deletes]
    final = {rel: text for rel, text in base.items() if rel not in deletes}
    final.update(edits)
    final.update(creates)
    return Changes(creates, edits, deletes, {"/" + k: sha(v) for k, v in final.items()})


def apply_changes(root: pathlib.Path, ch: Changes) -> None:
    for rel, text in ch.creates.items():
        (root / rel).write_text(text)
    for rel, text in ch.edits.items():
        (root / rel).write_text(text)  # O_TRUNC + write: no read of the old content
    for rel in ch.deletes:
        (root / rel).unlink()


def server_shas(client, store_id: str, prefix: str | None = None) -> dict[str, str]:
    kw = {"path_prefix": prefix} if prefix else {}
    return {m.path: m.content_sha256
            for m in client.beta.memory_stores.memories.list(store_id, limit=100, **kw)
            if m.type == "memory"}


def wait_server(server, store_id: str, want: dict[str, str], *, since: float,
                timeout: float) -> float | None:
    """Poll the server (SDK listings of each top-level directory, in parallel) until it holds
    exactly `want`; the perf_counter time of the last confirming response, None on timeout.
    A directory once confirmed is not polled again (the final check re-lists everything). The
    pause between polls is 5% of the time since `since` (at least 0.2 s): the resolution stays
    about 5% of the figure while the polls' own load on the server stays small."""
    by_dir: dict[str, dict[str, str]] = {}
    for path, s in want.items():
        by_dir.setdefault("/" + path.strip("/").split("/", 1)[0] + "/", {})[path] = s
    client = server.sdk(max_retries=3, timeout=60.0)
    pending = set(by_dir)
    last = time.perf_counter()
    deadline = last + timeout

    def check(d: str) -> tuple[str, bool, float]:
        got = server_shas(client, store_id, d)
        return d, got == by_dir[d], time.perf_counter()

    try:
        with ThreadPoolExecutor(min(20, len(by_dir)) or 1) as pool:
            while pending:
                for d, ok, t in list(pool.map(check, sorted(pending))):
                    if ok:
                        pending.discard(d)
                        last = max(last, t)
                if not pending:
                    break
                now = time.perf_counter()
                if now > deadline:
                    return None
                time.sleep(max(0.2, 0.05 * (now - since)))
        return last
    finally:
        client.close()


def delete_prefix(server, store_id: str, prefix: str, threads: int = 8) -> int:
    """Delete every memory under prefix (SDK, in threads); returns how many."""
    client = server.sdk(max_retries=3)
    try:
        ids = [m.id for m in client.beta.memory_stores.memories.list(
            store_id, limit=100, path_prefix=prefix) if m.type == "memory"]

        def rm(mid: str) -> None:
            client.beta.memory_stores.memories.delete(mid, memory_store_id=store_id)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(rm, ids))
        return len(ids)
    finally:
        client.close()


def set_latency(server, ms: float) -> None:
    server.set_faults(latency=ms / 1000.0)


@contextlib.contextmanager
def no_latency(server, ms: float):
    """Seeding and cleanup run at 0 ms, then the phase's latency is back."""
    set_latency(server, 0)
    try:
        yield
    finally:
        set_latency(server, ms)


def finished(m, res: Results, what: str) -> None:
    """`memfs unmount`, then forget the pid so the exit cleanup never signals a reused pid. A
    failed unmount is a problem of the run; the exit cleanup still ends that mount."""
    try:
        m.unmount()
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        res.problem(f"{what}: memfs unmount failed: {str(exc).strip()[-500:]}")
        return
    m.pid = None


def vm_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# -- samples -----------------------------------------------------------------------------------


@dataclass
class Results:
    """Samples (seconds, or a unit of their own) per figure; problems found on the way."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, key: str, value: float, unit: str = "s") -> None:
        self.samples.setdefault(key, []).append(value)
        self.units[key] = unit

    def med(self, key: str) -> float | None:
        xs = self.samples.get(key)
        return statistics.median(xs) if xs else None

    def n(self, key: str) -> int:
        return len(self.samples.get(key, []))

    def spread(self, key: str) -> str:
        xs = self.samples.get(key) or []
        if len(xs) < 2:
            return "1 run"
        m = statistics.median(xs)
        return f"{len(xs)} runs, {min(xs) / m:.2f}-{max(xs) / m:.2f}x median" if m else "-"

    def problem(self, text: str) -> None:
        print(f"# PROBLEM: {text}")
        sys.stdout.flush()
        self.problems.append(text)


def code_version() -> str:
    """The commit measured, and whether memfs/ had uncommitted changes."""
    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "memfs")
    return head + (" + uncommitted changes in memfs/" if dirty else "")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def lat_key(ms: float) -> str:
    return f"{ms:g}ms"


def say(text: str) -> None:
    print(f"# {time.strftime('%H:%M:%S')} {text}")
    sys.stdout.flush()


def repeats(a: argparse.Namespace, what: str):
    """Yield rep numbers: up to a.repeat, stopping once the phase used a.budget seconds."""
    t0 = time.perf_counter()
    for rep in range(max(1, a.repeat)):
        if rep and time.perf_counter() - t0 > a.budget:
            say(f"{what}: stopping after {rep} runs (--budget {a.budget:g} s)")
            return
        yield rep


# -- phases ------------------------------------------------------------------------------------


def sdk_download_grep(server, store_id: str, workdir: pathlib.Path,
                      expect: dict[str, int]) -> tuple[float, float, bool]:
    """(download s, download + grep s, grep result right)."""
    from anthropic.lib.tools._memories import SessionMemoryStores

    async def go() -> tuple[float, float, bool]:
        client = async_sdk(server)
        try:
            sms = SessionMemoryStores(client, workdir=workdir)
            root = workdir / "store"
            t0 = time.perf_counter()
            await sms.download(sdk_session(store_id, root))  # type: ignore[arg-type]
            t1 = time.perf_counter()
            got = grep_count(root)
            t2 = time.perf_counter()
            await sms.dispose()
            return t1 - t0, t2 - t0, got == expect
        finally:
            await client.close()

    return asyncio.run(go())


def phase_cold_ls(b: Bench, server, a, res: Results, ms: float, store_id: str,
                  tree: dict[str, str]) -> None:
    expect = expected_grep(tree)
    lk = lat_key(ms)
    for _rep in repeats(a, f"cold/ls at {lk}"):
        if "cold" in a.phase_set or "ls" in a.phase_set:
            dl, dlg, ok = sdk_download_grep(server, store_id, b.path("sdk-dl"), expect)
            if not ok:
                res.problem(f"SDK download + grep at {lk}: wrong grep result")
            res.add(f"sdk download {lk}", dl)
            res.add(f"sdk download+grep {lk}", dlg)
        if "cold" in a.phase_set:
            t0 = time.perf_counter()
            m = b.mount(server, store_id)
            t1 = time.perf_counter()
            got = grep_count(m.path)
            t2 = time.perf_counter()
            if got != expect:
                missing = len(set(expect) - set(got))
                res.problem(f"memfs cold grep at {lk}: wrong result ({len(got)} files, "
                            f"{missing} missing, {sum(got.values())} matching lines, "
                            f"want {sum(expect.values())})")
            res.add(f"memfs mount {lk}", t1 - t0)
            res.add(f"memfs cold grep {lk}", t2 - t1)
            res.add(f"memfs mount+cold grep {lk}", t2 - t0)
            finished(m, res, f"cold grep at {lk}")
        if "ls" in a.phase_set:
            t0 = time.perf_counter()
            m = b.mount(server, store_id)
            deadline = t0 + 300
            n = -1
            while time.perf_counter() < deadline:
                n = ls_r_count(m.path)
                if n >= len(tree):
                    break
                time.sleep(0.01)
            t1 = time.perf_counter()
            if n != len(tree):
                res.problem(f"memfs ls -R at {lk}: {n} of {len(tree)} files listed")
            res.add(f"memfs mount+ls-R {lk}", t1 - t0)
            finished(m, res, f"ls -R at {lk}")


def sdk_finish(server, store_id: str, workdir: pathlib.Path, ch: Changes) -> float:
    from anthropic.lib.tools._memories import SessionMemoryStores

    async def go() -> float:
        client = async_sdk(server)
        try:
            sms = SessionMemoryStores(client, workdir=workdir)
            root = workdir / "store"
            await sms.download(sdk_session(store_id, root))  # type: ignore[arg-type]
            apply_changes(root, ch)  # native disk, untimed
            t0 = time.perf_counter()
            await sms.finish()
            t = time.perf_counter() - t0
            await sms.dispose()
            return t
        finally:
            await client.close()

    return asyncio.run(go())


def check_store(server, store_id: str, want: dict[str, str], res: Results, what: str) -> None:
    client = server.sdk(max_retries=3)
    try:
        got = server_shas(client, store_id)
    finally:
        client.close()
    if got != want:
        extra, missing = set(got) - set(want), set(want) - set(got)
        stale = sum(1 for k in set(got) & set(want) if got[k] != want[k])
        res.problem(f"{what}: server differs ({len(missing)} missing, {len(extra)} extra, "
                    f"{stale} with other content)")


def phase_push(b: Bench, server, a, res: Results, ms: float, base: dict[str, str]) -> None:
    ch = make_changes(base, a)
    lk = lat_key(ms)
    for rep in repeats(a, f"push at {lk}"):
        with no_latency(server, ms):
            s_memfs = new_store(server, f"push-memfs-{lk}-{rep}")
            s_sdk = new_store(server, f"push-sdk-{lk}-{rep}")
            seed_store(server, s_memfs, base)
            seed_store(server, s_sdk, base)
        # memfs: a settled first mount (no background prefetch competing), then the changes.
        m = b.mount(server, s_memfs, "--no-prefetch", "--delete-delay", "0")
        t0 = time.perf_counter()
        apply_changes(m.path, ch)
        t_local = time.perf_counter() - t0
        done = wait_server(server, s_memfs, ch.final, since=t0, timeout=600)
        if done is None:
            res.problem(f"memfs push at {lk}: the server did not hold the changes after 600 s")
        else:
            res.add(f"memfs push local {lk}", t_local)
            res.add(f"memfs push {lk}", done - t0)
        check_store(server, s_memfs, ch.final, res, f"memfs push at {lk}")
        finished(m, res, f"push at {lk}")
        # the SDK: download, the same changes on disk, finish() timed
        res.add(f"sdk finish {lk}", sdk_finish(server, s_sdk, b.path("sdk-push"), ch))
        check_store(server, s_sdk, ch.final, res, f"SDK finish at {lk}")


def phase_creates(b: Bench, server, a, res: Results, ms: float, full_store: str,
                  n_full: int) -> None:
    lk = lat_key(ms)
    src = b.path("create-src") / "tree"
    write_tree(src, make_tree(a.create_files, 0, seed=9, size_range=a.size_range, name="cp"))
    src2 = b.path("create-src") / "tree2"
    write_tree(src2, make_tree(a.create_files, 0, seed=10, size_range=a.size_range, name="cp"))
    n = a.create_files

    def cp_into(root: pathlib.Path, tree: pathlib.Path = src, *, sync: bool = True) -> float:
        if sync:
            subprocess.run(["sync"], check=True)
        return run_timed(["cp", "-r", str(tree), str(root)])

    for rep in repeats(a, f"creates at {lk}"):
        native = b.path("native-cp")
        res.add(f"native creates/s {lk}", n / cp_into(native), "/s")
        shutil.rmtree(native, ignore_errors=True)
        empty = new_store(server, f"creates-empty-{lk}-{rep}")
        m = b.mount(server, empty, "--no-prefetch")
        res.add(f"memfs creates/s empty {lk}", n / cp_into(m.path), "/s")
        left = push_under_way(m, n)
        if 0 < left < n:  # at once: the pass is under way (src2 is on disk since the first)
            took = cp_into(m.path, src2, sync=False)
            res.add(f"memfs creates/s while pushing {lk}", n / took, "/s")
            say(f"  cp while pushing: {left} of {n} pending at its start, {n / took:,.0f}/s")
        else:  # small --quick sizes: a pass may end before `memfs status` answers
            say(f"  cp while pushing not measured: no pass of the first {n} seen under way "
                f"({left} pending)")
        finished(m, res, f"creates into the empty store at {lk}")
        m = b.mount(server, full_store, "--no-prefetch")
        res.add(f"memfs creates/s full {lk}", n / cp_into(m.path), "/s")
        finished(m, res, f"creates into the full store at {lk}")  # pushes the creates
        with no_latency(server, ms):
            gone = delete_prefix(server, full_store, "/tree/")
            if gone != n:
                res.problem(f"creates into the {n_full}-memory store at {lk}: "
                            f"{gone} of {n} reached the server by the end of memfs unmount")


def push_under_way(m, n: int, timeout: float = 120.0) -> int:
    """Wait (polling `memfs status`) until the pusher has sent some but not all of the n
    files just written; returns how many are still pending (0: the pass ended unseen)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = m.pending_total()
        if left < n:
            return left
        time.sleep(0.02)
    return n


def warm_runs(a) -> int:
    return 3 if a.quick else max(15, a.repeat)


def phase_warm_rss(b: Bench, server, a, res: Results, store_id: str,
                   tree: dict[str, str]) -> None:
    native = b.path("warm-native")
    write_tree(native, tree)
    bind = b.bindfs(native)
    m = b.mount(server, store_id)
    expect = expected_grep(tree)
    for root in (native, bind, m.path):  # warm-up: page cache, FUSE caches, blob cache
        subprocess.run(f"find '{root}' -type f -print0 | xargs -0 cat >/dev/null", shell=True,
                       check=True, timeout=1800)
        got = grep_count(root)
        if got != expect:
            res.problem(f"warm grep: wrong result over {root}")
    targets = {"native": native, "bindfs": bind, "memfs": m.path}
    for _ in range(warm_runs(a)):  # interleaved: drift hits every target alike
        for name, root in targets.items():
            res.add(f"warm grep {name}", run_timed(grep_cmd(root),
                                                    timeout=600, ok=(0, 1),
                                                    stdout=subprocess.DEVNULL))
    if "rss" in a.phase_set and m.pid:
        hwm, rss = vm_kib(m.pid, "VmHWM"), vm_kib(m.pid, "VmRSS")
        if hwm is None:
            res.problem("rss: could not read /proc/<daemon pid>/status")
        else:
            res.add("daemon VmHWM", hwm / 1024, "MB")
            res.add("daemon VmRSS", (rss or 0) / 1024, "MB")
    finished(m, res, "warm grep")


# -- report ------------------------------------------------------------------------------------


@dataclass
class Row:
    key: str  # short name: the `ratio <key> @ <latency>:` lines and the plot's labels
    what: str
    latency: str
    memfs: str
    reference: str
    value: float | None  # the figure compared with the target
    shown: str  # how the value is printed
    target: str
    #: value / target limit, oriented so that <= 1 means met; None: no target
    score: float | None


def build_rows(a, res: Results) -> list[Row]:
    rows: list[Row] = []

    def lower(key, what, lk, mem_key, ref_key, limit):
        mv, rv = res.med(mem_key), res.med(ref_key)
        if mv is None or not rv:
            return
        r = mv / rv
        rows.append(Row(key, what, lk, fmt_s(mv), fmt_s(rv), r, f"{r:.2f}x",
                        f"<= {limit:g}x" if limit else "-", r / limit if limit else None))

    for ms in a.latencies:
        lk = lat_key(ms)
        lk_s = f"{ms:g} ms"
        lower("cold-grep memfs/sdk",
              f"cold `grep -r` of {a.notes} right after the first mount (`memfs mount` + grep) "
              "vs SDK download + grep", lk_s, f"memfs mount+cold grep {lk}",
              f"sdk download+grep {lk}", {0.0: 1.0, 50.0: 0.35}.get(ms))
        lower("cold-grep-only memfs/sdk",
              "  the grep alone (after `memfs mount` returned) vs SDK download + grep", lk_s,
              f"memfs cold grep {lk}", f"sdk download+grep {lk}", None)
        lower("mount-ls memfs/sdk-download",
              "`memfs mount` until `ls -R` lists every file vs SDK download", lk_s,
              f"memfs mount+ls-R {lk}", f"sdk download {lk}", {50.0: 0.15}.get(ms))
        lower("push memfs/sdk-finish",
              f"{a.creates} creates + {a.edits} edits + {a.deletes} deletes until the server "
              "holds them vs SDK `finish()`", lk_s, f"memfs push {lk}", f"sdk finish {lk}",
              {50.0: 0.15}.get(ms))
        nat = res.med(f"native creates/s {lk}")
        emp = res.med(f"memfs creates/s empty {lk}")
        ful = res.med(f"memfs creates/s full {lk}")
        if emp and nat:
            rows.append(Row("creates-empty memfs/native",
                            f"creates/s through the mount ({a.create_files} by `cp -r`), empty "
                            "store, vs native disk", lk_s, f"{emp:,.0f}/s", f"{nat:,.0f}/s",
                            emp / nat, f"{emp / nat:.2f}x", "-", None))
        if ful and nat:
            rows.append(Row("creates-full per-second",
                            f"creates/s through the mount, store holding {a.notes}", lk_s,
                            f"{ful:,.0f}/s", f"{nat:,.0f}/s (native)", ful, f"{ful:,.0f}/s",
                            ">= 1,000/s", 1000.0 / ful))
        if ful and emp:
            r = ful / emp
            rows.append(Row("creates full/empty",
                            f"  creates/s into the store holding {a.notes} vs into an empty one",
                            lk_s, f"{ful:,.0f}/s", f"{emp:,.0f}/s", r, f"{r:.2f}x",
                            ">= 0.9x (as fast, within noise)", 0.9 / r))
        busy = res.med(f"memfs creates/s while pushing {lk}")
        if busy and emp:
            r = busy / emp
            rows.append(Row("creates pushing/idle",
                            f"  creates/s while a push pass of the first {a.create_files} runs "
                            "vs into the idle empty store", lk_s, f"{busy:,.0f}/s",
                            f"{emp:,.0f}/s", r, f"{r:.2f}x", "-", None))
    mv, bv = res.med("warm grep memfs"), res.med("warm grep bindfs")
    if mv and bv:
        rows.append(Row("warm-grep memfs/bindfs",
                        f"warm `grep -r` over {a.warm_files} files vs bindfs over them on disk",
                        "0 ms", fmt_s(mv), fmt_s(bv), mv / bv, f"{mv / bv:.2f}x", "<= 0.7x",
                        (mv / bv) / 0.7))
    hwm = res.med("daemon VmHWM")
    if hwm:
        rows.append(Row("rss daemon-peak",
                        f"daemon peak RSS (VmHWM), {a.warm_files} memories mounted and read",
                        "0 ms", f"{hwm:.0f} MB", "-", hwm, f"{hwm:.0f} MB", "<= 100 MB",
                        hwm / 100.0))
    return rows


def met(row: Row) -> str:
    if row.score is None:
        return "-"
    return "met" if row.score <= 1.0 else "NOT met"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
            for r in rows]
    return out


def raw_rows(res: Results) -> list[list[str]]:
    out = []
    for key in res.samples:
        unit = res.units[key]
        m = res.med(key)
        if unit == "s":
            val = fmt_s(m)
        elif unit == "/s":
            val = f"{m:,.0f}/s"
        else:
            val = f"{m:.1f} {unit}"
        out.append([key, val, res.spread(key)])
    return out


DEFAULT_SIZES = {"notes": 1500, "size": 2000, "warm_files": 2000, "creates": 500,
                 "edits": 500, "deletes": 40, "create_files": 500}


def reduced_note(a: argparse.Namespace) -> str:
    """A warning when the sizes are not the issue's (the ratios depend on them)."""
    if all(getattr(a, k) == v for k, v in DEFAULT_SIZES.items()):
        return ""
    return "REDUCED SIZES, not comparable with the issue's targets. "


def report(a, res: Results, rows: list[Row], run: dict) -> list[str]:
    lines = [
        f"**Run:** {run['machine']}; load average {run['load'][0]} at the start, "
        f"{run['load'][-1]} at the end; {run['wall'] / 60:.1f} min in all. "
        f"memfs at {run.get('code', '?')}. Command: `{run['command']}`.",
        "",
        f"Store: {a.notes} memories of {a.size_range[0]}-{a.size_range[1]} bytes in 20 "
        f"top-level directories; warm grep and RSS: {a.warm_files}. Latency: the server's "
        f"own fault (`--fault-control`, `latency`) on every `/v1/` request, for memfs and the "
        f"SDK alike. Each figure is the median of up to {a.repeat} runs per latency "
        f"(fewer once a phase took {a.budget:g} s; the warm grep {warm_runs(a)} runs); "
        "the spread is min-max over median, in the second table.",
        "",
    ]
    if reduced_note(a):
        lines += [f"**{reduced_note(a).strip()}**", ""]
    lines += md_table(["what", "latency", "memfs", "reference", "ratio / value", "target",
                       "target"],
                      [[r.what, r.latency, r.memfs, r.reference, r.shown, r.target, met(r)]
                       for r in rows])
    lines += ["", "Raw figures (median, and the spread of the runs):", ""]
    lines += md_table(["figure", "median", "runs and spread"], raw_rows(res))
    if res.problems:
        lines += ["", "**Problems found during the run (a figure next to one is not valid):**"]
        lines += [f"- {p}" for p in res.problems]
    return lines


def plot(path: pathlib.Path, rows: list[Row], title: str) -> None:
    """One chart: each figure that has a target, as measured / target (oriented so that <= 1
    meets it), a bar from the target line towards the value, log scale."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# no matplotlib: no plot (pip install matplotlib, or ./dev.sh bench)")
        return
    rows = [r for r in rows if r.score is not None]
    if not rows:
        return
    first = {r.key: i for i, r in reversed(list(enumerate(rows)))}
    rows.sort(key=lambda r: first[r.key])  # each figure's latencies next to each other
    scores = [min(max(r.score, 0.01), 1000.0) for r in rows]
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 1.9))
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [s - 1.0 for s in scores], left=1.0, height=0.55,
            color=["#2e7d32" if s <= 1 else "#c62828" for s in scores])
    ax.axvline(1.0, color="black", linewidth=1.2)
    ax.set_xscale("log")
    lo, hi = min(min(scores) / 4, 0.25), max(max(scores) * 6, 4.0)
    ax.set_xlim(lo, hi)
    ax.set_yticks(y)
    ax.set_yticklabels([f"{r.key} @ {r.latency}" for r in rows], fontsize=9)
    for yi, r, s in zip(y, rows, scores, strict=True):
        x, ha = (s * 1.1, "left") if s >= 1 else (s / 1.1, "right")
        ax.text(x, yi, f"{r.shown} (target {r.target.split(' (')[0]})", va="center", ha=ha,
                fontsize=8)
    ax.text(0.99, 0.01, "green: target met / red: not met", transform=ax.transAxes,
            ha="right", va="bottom", fontsize=8, color="#555555")
    ax.set_xlabel("measured / target (inverted for 'at least' targets): <= 1 meets the target; "
                  "log scale")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", which="major", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"# plot written to {path}")


# -- main --------------------------------------------------------------------------------------


def measure(a: argparse.Namespace, res: Results) -> None:
    base = make_tree(a.notes, 0, seed=11, size_range=a.size_range)
    big = make_tree(a.warm_files, 0, seed=11, size_range=a.size_range)  # base is its prefix
    with Bench("network", keep_tmp=a.keep_tmp) as b:
        server = b.server("--fault-control")
        set_latency(server, 0)
        store_a = new_store(server, "network-a")
        t0 = time.perf_counter()
        seed_store(server, store_a, base)
        say(f"seeded {len(base)} memories through the SDK in {fmt_s(time.perf_counter() - t0)}")
        store_c = None
        if "creates" in a.phase_set:
            store_c = new_store(server, "network-creates")
            seed_store(server, store_c, base)
        for ms in a.latencies:
            set_latency(server, ms)
            if a.phase_set & {"cold", "ls"}:
                say(f"cold grep / ls -R at {ms:g} ms")
                phase_cold_ls(b, server, a, res, ms, store_a, base)
            if "push" in a.phase_set:
                say(f"push at {ms:g} ms")
                phase_push(b, server, a, res, ms, base)
            if "creates" in a.phase_set:
                say(f"creates/s at {ms:g} ms")
                phase_creates(b, server, a, res, ms, store_c, len(base))
        set_latency(server, 0)
        if a.phase_set & {"warm", "rss"}:
            say(f"warm grep / RSS over {a.warm_files} memories at 0 ms")
            extra = {k: v for k, v in big.items() if k not in base}
            seed_store(server, store_a, extra)
            phase_warm_rss(b, server, a, res, store_a, big)


#: what --from-json takes back from a saved run
SAVED_ARGS = ("notes", "size", "warm_files", "creates", "edits", "deletes", "create_files",
              "latency", "latencies", "repeat", "budget", "size_range")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the SDK sync logs a line per store at INFO
    if a.from_json:
        doc = json.loads(a.from_json.read_text())
        for k in SAVED_ARGS:
            if k in doc["args"]:
                setattr(a, k, doc["args"][k])
        a.size_range = tuple(a.size_range)
        res = Results(doc["samples"], doc["units"], doc["problems"])
        run = {"machine": doc["machine"], "load": ["?", "?"], "wall": 0.0, "command": "?",
               **doc.get("run", {})}
    else:
        started = time.perf_counter()
        run = {"machine": machine_line(), "load": [loadavg()], "code": code_version(),
               "command": " ".join(["benchmarks/bench_network.py", *sys.argv[1:]])}
        say(f"bench_network: {a.notes} memories ({a.size_range[0]}-{a.size_range[1]} B), "
            f"latencies {a.latency} ms, phases "
            f"{','.join(p for p in PHASES if p in a.phase_set)}, up to {a.repeat} runs per "
            f"phase (budget {a.budget:g} s)")
        print(f"# {run['machine']}")
        res = Results()
        measure(a, res)
        run["wall"] = time.perf_counter() - started
        run["load"].append(loadavg())
    rows = build_rows(a, res)
    lines = report(a, res, rows, run)
    print()
    print("\n".join(lines))
    print()
    for r in rows:
        kind = "ratio" if r.shown.endswith("x") else "value"
        print(f"{kind} {r.key} @ {r.latency}: {r.shown}")
    sys.stdout.flush()
    if a.markdown:
        a.markdown.parent.mkdir(parents=True, exist_ok=True)
        a.markdown.write_text("\n".join(lines) + "\n")
        print(f"# markdown written to {a.markdown}")
    if a.json and not a.from_json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({
            "machine": run["machine"], "run": run,
            "args": {k: getattr(a, k) for k in SAVED_ARGS},
            "samples": res.samples, "units": res.units, "problems": res.problems}, indent=1))
        print(f"# raw samples written to {a.json}")
    if a.plot:
        title = (f"memfs vs the issue 9 targets: {a.notes} memories ({a.warm_files} for warm "
                 f"grep/RSS), {a.latency.replace(',', ' and ')} ms per request\n{run['machine']}")
        plot(a.plot, rows, reduced_note(a).strip() + "\n" * bool(reduced_note(a)) + title)
    return 1 if res.problems else 0


if __name__ == "__main__":
    sys.exit(main())
