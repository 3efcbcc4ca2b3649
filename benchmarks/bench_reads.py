#!/usr/bin/env python3
"""Read benchmark: warm `grep -r`, `cat` of every file and `ls -lR` over a memfs mount, side by
side with the same tree on native disk and through bindfs (C passthrough FUSE: the practical
ceiling for a FUSE filesystem), plus cold reads (first read after a mount).

    .venv/bin/python benchmarks/bench_reads.py            # 2,000 files of ~2 kB, median of 5
    .venv/bin/python benchmarks/bench_reads.py --quick    # smoke-test sizes
"""

from __future__ import annotations

import subprocess
import sys
import time

from common import (
    Bench,
    cat_cmd,
    finish_args,
    fmt_s,
    grep_cmd,
    ls_cmd,
    machine_line,
    make_tree,
    median_time,
    new_store,
    parser,
    ratio,
    ratio_line,
    seed_store,
    sh,
    table,
    write_tree,
)


def count_matches(root) -> int:
    r = subprocess.run([*grep_cmd(root), "-l"], capture_output=True, text=True)
    return len(r.stdout.splitlines())


def main() -> int:
    args = finish_args(parser(__doc__.splitlines()[0], files=2000, quick_files=40).parse_args())
    print(f"# bench_reads: {args.files} files of ~{args.size} B, median of {args.repeat}")
    print(f"# {machine_line()}")
    tree = make_tree(args.files, args.size)
    with Bench("reads", keep_tmp=args.keep_tmp) as b:
        server = b.server()
        store = new_store(server, "bench-reads")
        t0 = time.perf_counter()
        seed_store(server, store, tree)
        print(f"# seeded {len(tree)} memories through the SDK (8 threads) in "
              f"{fmt_s(time.perf_counter() - t0)}")

        native = b.path("native")
        write_tree(native, tree)
        bind = b.bindfs(native)

        # Cold: the very first grep after the mount (content fetched from the server on a
        # cache miss, racing the background prefetch), then the first grep after remounts
        # (kernel caches empty, blobs in the mount's disk cache).
        m = b.mount(server, store)
        first, _ = median_time(lambda: sh(grep_cmd(m.path)), 1)
        cold_reps = max(1, min(3, args.repeat))

        def remount() -> None:
            m.unmount()
            m.mount()

        cold_mount, _ = median_time(lambda: sh(grep_cmd(m.path)), cold_reps, before=remount)

        bind_cold_dirs = []

        def fresh_bindfs() -> None:
            bind_cold_dirs.append(b.bindfs(native))

        cold_bind, _ = median_time(lambda: sh(grep_cmd(bind_cold_dirs[-1])), cold_reps,
                                   before=fresh_bindfs)

        # Warm up every target (page cache, FUSE attr/entry/page caches, blob LRU).
        targets = {"native": native, "bindfs": bind, "memfs": m.path}
        for root in targets.values():
            sh(cat_cmd(root))
            sh(grep_cmd(root))
            sh(ls_cmd(root))
        counts = {k: count_matches(v) for k, v in targets.items()}
        if len(set(counts.values())) != 1:
            print(f"# WARNING: grep found different files per target: {counts}")

        ops = {"grep -r": grep_cmd, "cat all": cat_cmd, "ls -lR": ls_cmd}
        results: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeat):  # interleaved, so drift hits every target alike
            for op, cmd in ops.items():
                for name, root in targets.items():
                    argv = cmd(root)
                    t, _ = median_time(lambda argv=argv: sh(argv), 1)
                    results.setdefault((op, name), []).append(t)
        med = {k: sorted(v)[len(v) // 2] for k, v in results.items()}

        rows = []
        for op in ops:
            n, bf, mf = med[(op, "native")], med[(op, "bindfs")], med[(op, "memfs")]
            rows.append([f"warm {op}", fmt_s(n), fmt_s(bf), fmt_s(mf), ratio(mf, n),
                         ratio(bf, n), ratio(mf, bf)])
        n = med[("grep -r", "native")]
        rows.append(["cold grep -r (first after remount)", fmt_s(n), fmt_s(cold_bind),
                     fmt_s(cold_mount), ratio(cold_mount, n), ratio(cold_bind, n),
                     ratio(cold_mount, cold_bind)])
        rows.append(["first grep -r after first mount", fmt_s(n), "-", fmt_s(first),
                     ratio(first, n), "-", "-"])
        table(f"reads: {args.files} files, {sum(len(t) for t in tree.values()) // 1024} KiB "
              f"(grep matches {counts['memfs']} files)",
              ["operation", "native", "bindfs", "memfs", "memfs/native", "bindfs/native",
               "memfs/bindfs"], rows)
        for op in ops:
            key = op.split()[0]
            n, bf, mf = med[(op, "native")], med[(op, "bindfs")], med[(op, "memfs")]
            ratio_line(f"warm {key} memfs/native", mf, n)
            ratio_line(f"warm {key} bindfs/native", bf, n)
            ratio_line(f"warm {key} memfs/bindfs", mf, bf)
        ratio_line("cold grep memfs/bindfs", cold_mount, cold_bind)
        m.unmount()
    return 0


if __name__ == "__main__":
    sys.exit(main())
