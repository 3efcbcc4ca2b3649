"""Smoke test for benchmarks/: each one runs in --quick mode and prints its ratio lines.

Never asserts on timings: the benchmarks report numbers, they do not judge them. The three
run at once (about 15 s in all) since each mostly waits on mounts and polls.
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
    "bench_sync.py": ["ratio idle-poll requests memfs/sdk:",
                      "ratio local->remote latency / write-back-delay 0.1s:"],
}


@needs_fuse
def test_benchmarks_quick() -> None:
    procs = {
        name: subprocess.Popen([sys.executable, str(BENCH / name), "--quick"], cwd=str(BENCH),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name in EXPECTED
    }
    outputs = {}
    try:
        for name, proc in procs.items():
            outputs[name] = proc.communicate(timeout=120)[0]
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
