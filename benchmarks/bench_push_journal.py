"""What `State` spends on one push: begin_push + push_landed over 500 new files, median of
7 rounds (issue 20: each push journals its request in `doubts` and ends it with its answer).
Run it from a checkout; for code from before the package layers (issue 21), run the script of
that time placed in that checkout (docs/BENCHMARKS.md section 7 gives the commands):

    .venv/bin/python benchmarks/bench_push_journal.py this
"""

import pathlib
import stat
import statistics
import sys
import tempfile
import time

from memfs.core.nodes import Remote
from memfs.state.state import State


def round_() -> float:
    with tempfile.TemporaryDirectory() as d:
        st = State(pathlib.Path(d) / "state.db")
        root = st.nodes[1]
        nodes = [st.new_node(root, f"f{i}.md", is_dir=False, mode=stat.S_IFREG | 0o644,
                             uid=0, gid=0) for i in range(500)]
        t = time.perf_counter()
        for i, n in enumerate(nodes):
            tk = st.begin_push(n)
            st.push_landed(tk, Remote(f"mem_{i}", f"/f{i}.md", n.sha, 0))
        dt = time.perf_counter() - t
        st.close()
        return dt / 500 * 1e6


if __name__ == "__main__":
    label = sys.argv[1] if len(sys.argv) > 1 else "this"
    print(label, "µs per push (State only):",
          round(statistics.median(round_() for _ in range(7)), 1))
