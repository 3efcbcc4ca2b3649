#!/usr/bin/env python3
"""Write benchmark: `cp -r` of a tree of small files into a memfs mount plus the `memfs unmount`
flush that pushes it, side by side with `cp -r` to native disk, through bindfs, and the SDK's
reference folder sync (`SessionMemoryStores`: download of the empty store, copy into its
folder, one sync pass that uploads every new file). Also the download of the filled store by
the SDK vs a fresh memfs mount plus `cat` of every file.

    .venv/bin/python benchmarks/bench_writes.py            # 500 files of ~2 kB, median of 5
    .venv/bin/python benchmarks/bench_writes.py --quick    # smoke-test sizes
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import time

from common import (
    Bench,
    async_sdk,
    cat_cmd,
    finish_args,
    fmt_s,
    machine_line,
    make_tree,
    new_store,
    parser,
    ratio,
    ratio_line,
    sdk_session,
    sh,
    table,
    unmount_timed,
    write_tree,
)


def count_memories(server, store_id: str) -> int:
    client = server.sdk()
    try:
        return sum(1 for m in client.beta.memory_stores.memories.list(store_id, limit=100)
                   if m.type == "memory")
    finally:
        client.close()


def sdk_round(server, store_id: str, src, workdir) -> dict[str, float]:
    """One run of the reference sync: download (empty store), copy in, sync pass (uploads)."""
    from anthropic.lib.tools._memories import SessionMemoryStores

    root = workdir / "store"

    async def go() -> dict[str, float]:
        client = async_sdk(server)
        try:
            sms = SessionMemoryStores(client, workdir=workdir)
            t0 = time.perf_counter()
            await sms.download(sdk_session(store_id, root))  # type: ignore[arg-type]
            t1 = time.perf_counter()
            await asyncio.to_thread(sh, ["cp", "-r", str(src), str(root)])
            t2 = time.perf_counter()
            await sms.finish()  # the last sync pass: uploads every new file
            t3 = time.perf_counter()
            await sms.dispose()
            return {"download": t1 - t0, "cp": t2 - t1, "sync": t3 - t2}
        finally:
            await client.close()

    return asyncio.run(go())


def sdk_download(server, store_id: str, workdir) -> float:
    from anthropic.lib.tools._memories import SessionMemoryStores

    async def go() -> float:
        client = async_sdk(server)
        try:
            sms = SessionMemoryStores(client, workdir=workdir)
            t0 = time.perf_counter()
            await sms.download(sdk_session(store_id, workdir / "store"))  # type: ignore[arg-type]
            t = time.perf_counter() - t0
            await sms.dispose()
            return t
        finally:
            await client.close()

    return asyncio.run(go())


def med(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def main() -> int:
    args = finish_args(parser(__doc__.splitlines()[0], files=500, quick_files=20).parse_args())
    logging.basicConfig(level=logging.ERROR)  # the SDK sync logs a line per store at INFO
    n = args.files
    print(f"# bench_writes: {n} files of ~{args.size} B, median of {args.repeat}")
    print(f"# {machine_line()}")
    tree = make_tree(n, args.size, seed=2)
    with Bench("writes", keep_tmp=args.keep_tmp) as b:
        server = b.server()
        src = b.path("src") / "tree"
        write_tree(src, tree)
        native = b.path("native")
        bind_src = b.path("bind-src")
        bind = b.bindfs(bind_src)

        t: dict[str, list[float]] = {}

        def add(key: str, value: float) -> None:
            t.setdefault(key, []).append(value)

        filled: list[str] = []
        for rep in range(args.repeat):
            # native disk
            shutil.rmtree(native / "tree", ignore_errors=True)
            sh("sync")
            t0 = time.perf_counter()
            sh(["cp", "-r", str(src), str(native)])
            add("native cp", time.perf_counter() - t0)
            # bindfs
            shutil.rmtree(bind_src / "tree", ignore_errors=True)
            sh("sync")
            t0 = time.perf_counter()
            sh(["cp", "-r", str(src), str(bind)])
            add("bindfs cp", time.perf_counter() - t0)
            # memfs: a fresh store each time, cp, then the unmount flush
            store = new_store(server, f"bench-writes-{rep}")
            m = b.mount(server, store)
            sh("sync")
            t0 = time.perf_counter()
            sh(["cp", "-r", str(src), str(m.path)])
            add("memfs cp", time.perf_counter() - t0)
            add("memfs unmount", unmount_timed(m))
            got = count_memories(server, store)
            if got != n:
                print(f"# WARNING: memfs pushed {got} of {n} files (rep {rep})")
            filled.append(store)
            # the SDK's reference folder sync, on its own fresh store
            sstore = new_store(server, f"bench-writes-sdk-{rep}")
            r = sdk_round(server, sstore, src, b.path("sdk"))
            for k, v in r.items():
                add(f"sdk {k}", v)
            got = count_memories(server, sstore)
            if got != n:
                print(f"# WARNING: the SDK sync pushed {got} of {n} files (rep {rep})")

        # Materializing the filled store: SDK download vs a fresh memfs mount + cat of all.
        for rep in range(args.repeat):
            store = filled[rep % len(filled)]
            add("sdk download filled", sdk_download(server, store, b.path("sdk-dl")))
            t0 = time.perf_counter()
            m = b.mount(server, store, "--read-only")
            sh(cat_cmd(m.path))
            add("memfs mount+cat filled", time.perf_counter() - t0)
            m.unmount()

        md = {k: med(v) for k, v in t.items()}
        nat, bf, mcp, mun = md["native cp"], md["bindfs cp"], md["memfs cp"], md["memfs unmount"]
        sdk_total = md["sdk download"] + md["sdk cp"] + md["sdk sync"]
        rows = [
            ["native disk: cp -r", fmt_s(nat), "-", fmt_s(nat), f"{n / nat:.0f}", "1.00x"],
            ["bindfs: cp -r", fmt_s(bf), "-", fmt_s(bf), f"{n / bf:.0f}", ratio(bf, nat)],
            ["memfs: cp -r + memfs unmount (flush)", fmt_s(mcp), fmt_s(mun), fmt_s(mcp + mun),
             f"{n / mcp:.0f}", ratio(mcp + mun, nat)],
            ["SDK sync: download + cp -r + sync pass", fmt_s(md["sdk download"] + md["sdk cp"]),
             fmt_s(md["sdk sync"]), fmt_s(sdk_total), f"{n / md['sdk cp']:.0f}",
             ratio(sdk_total, nat)],
        ]
        table(f"writes: cp -r of {n} files (~{args.size} B each) and upload",
              ["path", "local part", "upload part", "total", "creates/s (local)",
               "total/native"], rows)
        table(f"materialize the filled {n}-file store",
              ["path", "time"],
              [["SDK SessionMemoryStores.download", fmt_s(md["sdk download filled"])],
               ["memfs mount (read-only) + cat of every file",
                fmt_s(md["memfs mount+cat filled"])]])
        ratio_line("cp memfs/native", mcp, nat)
        ratio_line("cp bindfs/native", bf, nat)
        ratio_line("cp memfs/bindfs", mcp, bf)
        ratio_line("cp+flush memfs/native", mcp + mun, nat)
        ratio_line("cp+upload memfs/sdk-sync", mcp + mun, sdk_total)
        ratio_line("upload memfs-unmount/sdk-sync-pass", mun, md["sdk sync"])
        ratio_line("materialize memfs/sdk-download", md["memfs mount+cat filled"],
                   md["sdk download filled"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
