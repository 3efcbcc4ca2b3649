"""Smoke test for benchmarks/: each one runs in --quick mode and prints its ratio lines.

Never asserts on timings: the benchmarks report numbers, they do not judge them. They
run at once (45 s in all on 4 December, 56 s before bench_feed.py asked for its polls
instead of waiting for them) since each mostly waits on mounts, polls and the server's
injected latency.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

from mountutil import needs_fuse

BENCH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"
EXPECTED = {
    "bench_reads.py": ["ratio warm grep memfs/bindfs:", "ratio warm cat memfs/native:",
                       "ratio warm ls memfs/bindfs:"],
    "bench_writes.py": ["ratio cp memfs/native:", "ratio cp+upload memfs/sdk-sync:"],
    # --quick: 100 memories, 0 and 50 ms per request; feed vs full listing vs SDK, markdown
    "bench_sync.py": ["ratio idle-poll requests feed/full-listing @ 0 ms:",
                      "ratio idle-poll requests memfs/sdk @ 50 ms:",
                      "value idle-mount requests/hour feed @ 50 ms:",
                      "ratio remote->visible feed/no-feed @ 50 ms:",
                      "ratio local->remote latency / write-back-delay 0.1s:"],
    # --quick: 60 memories, 0 and 50 ms per request; every phase, plot and markdown included
    "bench_network.py": ["ratio cold-grep memfs/sdk @ 0 ms:", "ratio cold-grep memfs/sdk @ 50 ms:",
                         "ratio mount-ls memfs/sdk-download @ 50 ms:",
                         "ratio push memfs/sdk-finish @ 50 ms:",
                         "ratio creates full/empty @ 0 ms:", "ratio warm-grep memfs/bindfs @ 0 ms:",
                         "value rss daemon-peak @ 0 ms:"],
    # --quick: 60 creates, a burst of 150 (a copy 1 s after it), 100 changes (issue 22)
    "bench_feed.py": ["ratio creates after-burst-1s/empty:",
                      "value idle-after-burst bytes/poll max (2nd poll on):",
                      "value quiet-store requests/poll max:"],
    # --quick: 2 stores of 40 memories in one --all daemon vs a daemon each
    # --quick: 2 rounds of 40 GETs, the bounded read of answers against the whole read
    "bench_answers.py": ["ratio GET one memory bounded/whole:",
                         "ratio full page 20x50kB bounded/whole:"],
    "bench_session.py": ["ratio session root RSS vs one single-store daemon:",
                         "ratio session root RSS vs 2 single-store daemons:"],
}


@needs_fuse
def test_benchmarks_quick(tmp_path: pathlib.Path) -> None:
    extra = {"bench_network.py": ["--markdown", str(tmp_path / "network.md"),
                                  "--plot", str(tmp_path / "network.png")],
             "bench_sync.py": ["--markdown", str(tmp_path / "sync.md")]}
    procs = {
        name: subprocess.Popen([sys.executable, str(BENCH / name), "--quick",
                                *extra.get(name, [])], cwd=str(BENCH),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name in EXPECTED
    }
    outputs = {}
    try:
        for name, proc in procs.items():
            outputs[name] = proc.communicate(timeout=200)[0]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()  # SIGTERM: the benchmark's cleanup (unmounts) still runs
                proc.wait(30)
    for name, expected in EXPECTED.items():
        out = outputs[name]
        assert procs[name].returncode == 0, f"{name} failed:\n{out[-3000:]}"
        for line in expected:
            assert line in out, f"{name} did not print {line!r}:\n{out[-3000:]}"
        ratios = [ln for ln in out.splitlines() if ln.startswith("ratio ")]
        assert all(ln.rstrip().endswith("x") for ln in ratios), ratios
    md = (tmp_path / "network.md").read_text()
    assert "| what" in md and "target" in md, md
    md = (tmp_path / "sync.md").read_text()
    assert "memfs feed poll, idle" in md and "requests per hour" in md, md
    try:
        import matplotlib  # noqa: F401  (the `bench` extra; the plot is skipped without it)
    except ImportError:
        return
    assert (tmp_path / "network.png").stat().st_size > 1000
