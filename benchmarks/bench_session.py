#!/usr/bin/env python3
"""Session-root resources: peak RSS of one daemon serving 8 stores of 500 memories each
(`memfs mount --all`, every file read), against one single-store daemon and against 8
single-store daemons (what mounting the stores one by one costs).

    .venv/bin/python benchmarks/bench_session.py            # 8 stores x 500 files of ~2 kB
    .venv/bin/python benchmarks/bench_session.py --quick    # 2 stores x 40 files
"""

from __future__ import annotations

import subprocess
import sys
import time

from common import (
    Bench,
    finish_args,
    fmt_s,
    grep_cmd,
    machine_line,
    make_tree,
    new_store,
    parser,
    ratio_line,
    seed_store,
    sh,
    table,
)

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "tests"))
from mountutil import GroupMountProc, mount_env  # noqa: E402


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the daemon's peak resident set, in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def main() -> int:
    p = parser(__doc__.splitlines()[0], files=500, quick_files=40)
    p.add_argument("--stores", type=int, default=None, help="stores (default 8; --quick 2)")
    args = finish_args(p.parse_args())
    n_stores = args.stores or (2 if args.quick else 8)
    print(f"# bench_session: {n_stores} stores x {args.files} files of ~{args.size} B")
    print(f"# {machine_line()}")
    with Bench("session", keep_tmp=args.keep_tmp) as b:
        server = b.server()
        stores = []
        t0 = time.perf_counter()
        for i in range(n_stores):
            sid = new_store(server, f"Bench Store {i}")
            seed_store(server, sid, make_tree(args.files, args.size, seed=i + 1))
            stores.append(sid)
        print(f"# seeded {n_stores * args.files} memories in {fmt_s(time.perf_counter() - t0)}")

        # One daemon for every store, each file read once.
        base = b.path("group")
        root = base / "root"
        g = GroupMountProc(root, "", mount_env(server, base), (), select=("--all",))
        b.callback(g.cleanup)
        t0 = time.perf_counter()
        g.mount()
        sh(grep_cmd(root))
        group_s = time.perf_counter() - t0
        group_rss = peak_rss_mb(g.pid)
        files = int(subprocess.run(f"find {root} -type f | wc -l", shell=True,
                                   capture_output=True, text=True).stdout)
        g.unmount()

        # One daemon per store, each file read once.
        singles = []
        t0 = time.perf_counter()
        for sid in stores:
            m = b.mount(server, sid)
            sh(grep_cmd(m.path))
            singles.append((m, peak_rss_mb(m.pid)))
        singles_s = time.perf_counter() - t0
        one_rss = singles[0][1]
        sum_rss = sum(r for _, r in singles)
        for m, _ in singles:
            m.unmount()

        table("Peak RSS (VmHWM) after mounting and reading every file", [
            "what", "daemons", "files", "peak RSS", "mount + grep -r"], [
            [f"`--all`: {n_stores} stores in one daemon", 1, files, f"{group_rss:.0f} MB",
             fmt_s(group_s)],
            ["one store, one daemon", 1, args.files + 1, f"{one_rss:.0f} MB", ""],
            [f"{n_stores} stores, one daemon each", n_stores, n_stores * (args.files + 1),
             f"{sum_rss:.0f} MB", fmt_s(singles_s)],
        ])
        ratio_line("session root RSS vs one single-store daemon", group_rss, one_rss)
        ratio_line(f"session root RSS vs {n_stores} single-store daemons", group_rss, sum_rss)
    return 0


if __name__ == "__main__":
    sys.exit(main())
