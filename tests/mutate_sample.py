"""Mutation testing of a uniform random sample of mutants (docs/TESTING.md, "A sample").

mutmut runs the mutants it is given in order of their tests' time, function by function:
a run stopped early has decided whole functions and none of the others, which says
nothing about the module. This driver gives mutmut every mutant of the chosen modules in
one order shuffled with a fixed seed (mutmut's own sort key replaced by the place in that
order): whatever is decided when the run is stopped is a prefix of that order (with
MEMFS_MUTATE_JOBS=2 workers, a prefix and a few mutants past it), a uniform random sample
of the modules' mutants. `report` prints, per module, the mutants in all, the sample (the
longest decided prefix), killed, survived and the score with its 95 % Wilson interval.

    .venv/bin/python tests/mutate_sample.py run memfs.sync.pusher memfs.sync.reconciler ...
    .venv/bin/python tests/mutate_sample.py report memfs.sync.pusher memfs.sync.reconciler ...

`run` starts where the last run stopped (the undecided mutants, in the same order); stop it
with Ctrl-C (or a SIGINT to its pid). mutants/ must exist: `./dev.sh mutate` creates it.
Run from the repository root with .venv's Python (mutmut installed by `./dev.sh mutate`).
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
from pathlib import Path

SEED = 21
ORDER_FILE = Path("mutants") / "sample-order.json"
DETECTED = {"killed", "timeout", "caught by type check", "segfault"}


def _meta(module: str) -> Path:
    return Path("mutants") / (module.replace(".", "/") + ".py.meta")


def _codes(modules: list[str]) -> dict[str, int | None]:
    codes: dict[str, int | None] = {}
    for module in modules:
        meta = _meta(module)
        if not meta.exists():
            sys.exit(f"mutate_sample: no {meta}: run ./dev.sh mutate once to create mutants/")
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    return codes


def order(modules: list[str]) -> list[str]:
    """Every mutant of the modules, shuffled with SEED, in the order the first run fixed
    (kept in mutants/sample-order.json): a change to a sampled module makes mutmut name
    that function's mutants anew, and a fresh shuffle of the new list would put every
    decided mutant elsewhere. Names gone are dropped; new ones go last, shuffled."""
    names = set(_codes(modules))
    key = " ".join(modules)
    saved = json.loads(ORDER_FILE.read_text()) if ORDER_FILE.exists() else {}
    kept = [n for n in saved.get(key, []) if n in names]
    new = sorted(names - set(kept))
    random.Random(SEED).shuffle(new)
    if new or len(kept) != len(saved.get(key, [])):
        saved[key] = kept + new
        ORDER_FILE.write_text(json.dumps(saved))
    return kept + new


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % interval of a proportion k/n (Wilson): sane at 0, n and small n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, mid - half), min(1.0, mid + half)


def run(modules: list[str]) -> None:
    import mutmut.__main__ as mm

    names = order(modules)
    codes = _codes(modules)
    todo = [n for n in names if codes[n] is None]
    place = {name: i for i, name in enumerate(names)}
    # mutmut sorts the mutants by this key (their tests' time): our order instead.
    mm.estimated_worst_case_time = lambda name: place.get(name, len(place))
    print(f"mutate_sample: {len(todo)} of {len(names)} mutants left, in the shuffled order")
    jobs = os.environ.get("MEMFS_MUTATE_JOBS", "1")
    sys.argv = ["mutmut", "run", "--max-children", jobs, *todo]
    mm.cli()


def report(modules: list[str]) -> None:
    from mutmut.stats import status_by_exit_code

    names = order(modules)
    codes = _codes(modules)
    prefix = 0
    while prefix < len(names) and codes[names[prefix]] is not None:
        prefix += 1
    sample = names[:prefix]
    print(f"sample: the first {prefix} of {len(names)} mutants in the shuffled order (seed {SEED})")
    print(f"{'module':26} {'mutants':>7} {'sampled':>7} {'killed':>6} {'survived':>8}"
          f" {'score':>6}  95 % interval")
    for module in modules:
        everyone = [n for n in names if n.startswith(module + ".")]
        mine = [n for n in sample if n.startswith(module + ".")]
        killed = sum(status_by_exit_code[codes[n]] in DETECTED for n in mine)
        low, high = wilson(killed, len(mine))
        score = f"{100 * killed / len(mine):5.1f}%" if mine else "    -"
        print(f"{module:26} {len(everyone):7} {len(mine):7} {killed:6} {len(mine) - killed:8}"
              f" {score}  {100 * low:.1f}-{100 * high:.1f} %")
    for n in sample:
        status = status_by_exit_code[codes[n]]
        if status not in DETECTED:
            print(f"  {status}: {n}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("run", "report"):
        sys.exit(__doc__)
    {"run": run, "report": report}[sys.argv[1]](sys.argv[2:])
