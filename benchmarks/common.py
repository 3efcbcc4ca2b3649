"""Shared helpers for the memfs benchmarks (not a benchmark itself).

Everything a benchmark starts (servers, memfs mounts, bindfs mounts, temp dirs) is registered
on a `Bench` (a context manager) and torn down in reverse order even on failure: memfs mounts
with `memfs unmount`, then `fusermount3 -u`/`-uz`, then their daemon is killed by pid.

Timing: every figure is the median of `--repeat` runs (the target machine has 2 noisy cores);
baselines (native disk, bindfs, the SDK's reference folder sync) run side by side in the same
process so the ratios compare like with like. Nothing here ever fails on time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

REPO = pathlib.Path(__file__).resolve().parent.parent
for _p in (REPO, REPO / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from conftest import ServerProc, start_server  # noqa: E402
from mountutil import MountProc, mount_env  # noqa: E402

SOMEWORD = "zyzzogeton"  # present in a few files only: grep must read every byte of every file

WORDS = [
    "memory", "store", "agent", "session", "note", "file", "tree", "sync", "mount", "kernel",
    "cache", "page", "inode", "entry", "attribute", "remote", "local", "server", "client",
    "request", "response", "latency", "budget", "reference", "folder", "write", "read", "flush",
    "close", "open", "lookup", "getattr", "listing", "content", "sha", "prefix", "path",
    "directory",
]


# -- arguments -------------------------------------------------------------------------------


def parser(description: str, *, files: int, quick_files: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true",
                   help=f"tiny sizes, one repetition (smoke test; default files {quick_files})")
    p.add_argument("--files", type=int, default=None, help=f"number of files (default {files})")
    p.add_argument("--size", type=int, default=2048, help="approximate bytes per file")
    p.add_argument("--repeat", type=int, default=None, help="repetitions per figure (median; "
                   "default 5, 1 with --quick)")
    p.add_argument("--keep-tmp", action="store_true", help="leave the temp directory behind")
    p.set_defaults(_files=files, _quick_files=quick_files)
    return p


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    if args.files is None:
        args.files = args._quick_files if args.quick else args._files
    if args.repeat is None:
        args.repeat = 1 if args.quick else 5
    return args


# -- data ------------------------------------------------------------------------------------


def make_tree(n: int, size: int, *, seed: int = 1, word_every: int = 50,
              size_range: tuple[int, int] | None = None, name: str = "note") -> dict[str, str]:
    """n deterministic text files of ~size bytes in 20 directories; every `word_every`-th file
    contains SOMEWORD. Paths are relative, without a leading slash. With `size_range=(lo, hi)`
    each file gets its own size, uniform in [lo, hi]. The first k files of make_tree(n) are
    those of make_tree(k) (same seed and arguments)."""
    rng = random.Random(seed)
    out: dict[str, str] = {}
    for i in range(n):
        if size_range is not None:
            size = rng.randint(*size_range)
        words: list[str] = []
        length = 0
        while length < size:
            w = rng.choice(WORDS)
            words.append(w)
            length += len(w) + 1
        if i % word_every == 0:
            words[len(words) // 2] = SOMEWORD
        text = " ".join(words)
        lines = [text[j:j + 79] for j in range(0, len(text), 80)]
        out[f"d{i % 20:02d}/{name}-{i:04d}.md"] = "\n".join(lines)[:size] + "\n"
    return out


def write_tree(root: pathlib.Path, tree: dict[str, str]) -> None:
    for rel, text in tree.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def seed_store(server: ServerProc, store_id: str, tree: dict[str, str], *,
               threads: int = 8) -> None:
    """Create every file of the tree as a memory, through the official SDK, in threads."""
    items = sorted(tree.items())
    chunks = [items[i::threads] for i in range(threads)]

    def work(chunk: list[tuple[str, str]]) -> None:
        client = server.sdk(max_retries=3)
        try:
            for rel, text in chunk:
                client.beta.memory_stores.memories.create(store_id, path="/" + rel, content=text)
        finally:
            client.close()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, chunks))


def new_store(server: ServerProc, name: str) -> str:
    client = server.sdk()
    try:
        return client.beta.memory_stores.create(name=name).id
    finally:
        client.close()


# -- timing ----------------------------------------------------------------------------------


def median_time(fn: Callable[[], object], repeat: int, *,
                before: Callable[[], object] | None = None) -> tuple[float, list[float]]:
    """Median wall time of fn() over `repeat` runs (before() runs untimed first each time)."""
    times = []
    for _ in range(max(1, repeat)):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def _run(cmd: str | list[str], *, timeout: float, **kw) -> tuple[int, bytes, float]:
    """Run cmd to its end: (exit status, stderr if piped, wall seconds). Never
    `subprocess.run(..., timeout=)` around a measurement: with a timeout Python polls the
    child with sleeps that double up to 50 ms, so every time comes out rounded up to that
    schedule (15.5, 31.5, 63.5, 113.5 ms, then every 50 ms): up to 14% on a 0.35 s
    `cp -r`. Here the wait blocks and a timer kills a child that overruns."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, **kw)
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        _out, err = proc.communicate()
    finally:
        killer.cancel()
        if proc.poll() is None:  # interrupted (Ctrl-C): the child goes too
            proc.kill()
            proc.wait()
    took = time.perf_counter() - t0
    if took >= timeout:
        raise TimeoutError(f"{cmd!r} took longer than {timeout:g} s")
    return proc.returncode, err or b"", took


def sh(cmd: str | list[str], *, check: bool = True, timeout: float = 600) -> None:
    """Run a command with its output thrown away (shell string or argv)."""
    rc, err, _took = _run(cmd, timeout=timeout, shell=isinstance(cmd, str),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # grep exits 1 when nothing matched: only > 1 is an error.
    if check and rc not in (0, 1):
        raise RuntimeError(f"{cmd!r} failed ({rc}): {err.decode(errors='replace')}")


def run_timed(argv: list[str], *, timeout: float = 1800, ok: tuple[int, ...] = (0,),
              **kw) -> float:
    """Run argv to its end and return its wall time (seconds), measured as `_run` says."""
    rc, _err, took = _run(argv, timeout=timeout, **kw)
    if rc not in ok:
        raise RuntimeError(f"{argv!r} failed ({rc})")
    return took


def grep_cmd(root: pathlib.Path) -> list[str]:
    return ["grep", "-r", SOMEWORD, str(root)]


def cat_cmd(root: pathlib.Path) -> str:
    return f"find '{root}' -type f -print0 | xargs -0 cat"


def ls_cmd(root: pathlib.Path) -> list[str]:
    return ["ls", "-lR", str(root)]


# -- output ----------------------------------------------------------------------------------


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "-"
    return f"{a / b:.2f}x"


def table(title: str, header: list[str], rows: Iterable[list[object]]) -> None:
    rows = [[str(c) for c in r] for r in rows]
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i])
              for i in range(len(header))]
    print(f"\n## {title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
    sys.stdout.flush()


def ratio_line(name: str, a: float | None, b: float | None) -> None:
    """One machine-greppable line: `ratio <name>: <a/b>x`."""
    print(f"ratio {name}: {ratio(a, b)}")
    sys.stdout.flush()


def machine_line() -> str:
    cpu = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (f"{time.strftime('%Y-%m-%d %H:%M')} | {os.cpu_count()} cores ({cpu}) | "
            f"kernel {os.uname().release} | Python {sys.version.split()[0]}")


# -- resources -------------------------------------------------------------------------------


def _mounted(path: pathlib.Path) -> bool:
    real = str(path)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == real for line in f)


def fuse_unmount(path: pathlib.Path) -> None:
    for flags in ("-u", "-uz"):
        if _mounted(path):
            subprocess.run(["fusermount3", flags, str(path)], capture_output=True)
            if _mounted(path):
                time.sleep(0.2)


class Bench(contextlib.ExitStack):
    """A benchmark run: a temp dir plus everything started in it, all cleaned up on exit."""

    def __init__(self, name: str, *, keep_tmp: bool = False) -> None:
        super().__init__()
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"memfs-bench-{name}-"))
        if not keep_tmp:
            self.callback(shutil.rmtree, self.tmp, True)
        self._n = 0
        signal.signal(signal.SIGTERM, _sigterm)  # turn SIGTERM into SystemExit: cleanup runs

    def path(self, name: str) -> pathlib.Path:
        self._n += 1
        p = self.tmp / f"{self._n:02d}-{name}"
        p.mkdir(parents=True)
        return p

    def server(self, *extra_args: str) -> ServerProc:
        sp = start_server(self.path("server"), extra_args=tuple(extra_args))
        self.callback(sp.stop)
        return sp

    def mount(self, server: ServerProc, store_id: str, *args: str) -> MountProc:
        """`memfs mount` (via the CLI, as a user runs it); unmounted on exit unless already."""
        base = self.path("mount")
        mnt = base / "mnt"
        mnt.mkdir()
        env = mount_env(server, base)
        env["MEMFS_LOG_LEVEL"] = "INFO"  # DEBUG logging is not what users run
        m = MountProc(mnt, store_id, env, tuple(args))
        self.callback(m.cleanup)
        m.mount()
        return m

    def bindfs(self, src: pathlib.Path) -> pathlib.Path:
        mnt = self.path("bindfs")
        subprocess.run(["bindfs", str(src), str(mnt)], check=True, capture_output=True)
        self.callback(fuse_unmount, mnt)
        return mnt


def _sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def unmount_timed(m: MountProc) -> float:
    """`memfs unmount` (flushes everything pending) and its wall time."""
    t0 = time.perf_counter()
    m.unmount()
    return time.perf_counter() - t0


def sdk_session(store_id: str, mount_path: pathlib.Path | None = None) -> object:
    """The minimal session object `SessionMemoryStores.download` needs: `.resources`."""
    from types import SimpleNamespace

    from anthropic.types.beta.sessions import BetaManagedAgentsMemoryStoreResource

    res = BetaManagedAgentsMemoryStoreResource(
        type="memory_store", memory_store_id=store_id, access="read_write", name="bench",
        mount_path=str(mount_path) if mount_path else None)
    return SimpleNamespace(resources=[res])


class CountingTransport:
    """An httpx async transport wrapper counting requests and body bytes (the SDK's client)."""

    def __new__(cls, stats: dict[str, int]):  # noqa: D102 - builds an httpx transport
        import httpx2 as httpx  # the SDK vendors httpx as httpx2

        class _Counting(httpx.AsyncHTTPTransport):
            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                body = await request.aread()
                stats["requests"] += 1
                stats["bytes_sent"] += len(body)
                resp = await super().handle_async_request(request)
                data = await resp.aread()
                stats["bytes_received"] += len(data)
                headers = [(k, v) for k, v in resp.headers.multi_items()
                           if k.lower() not in ("content-encoding", "transfer-encoding",
                                                "content-length")]
                return httpx.Response(resp.status_code, headers=headers, content=data,
                                      extensions=resp.extensions, request=request)

        return _Counting()


def new_stats() -> dict[str, int]:
    return {"requests": 0, "bytes_sent": 0, "bytes_received": 0}


def async_sdk(server: ServerProc, stats: dict[str, int] | None = None):
    """AsyncAnthropic pointed at the server (optionally counting its traffic)."""
    import anthropic
    import httpx2 as httpx  # the SDK vendors httpx as httpx2

    kw: dict = {}
    if stats is not None:
        kw["http_client"] = httpx.AsyncClient(transport=CountingTransport(stats), timeout=60)
    return anthropic.AsyncAnthropic(base_url=server.base_url, api_key=server.api_key or "no-key",
                                    max_retries=2, timeout=60, **kw)


if __name__ == "__main__":  # `./dev.sh bench` runs benchmarks/*.py: this one is a library
    print("benchmarks/common.py: shared helpers, nothing to run")
