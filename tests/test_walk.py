"""A reader's walk, traced (docs/ARCHITECTURE.md, "A reader's walk: one local write").

One local write to a synced file, from the FUSE handlers (the router, as the daemon mounts
it) to the push's answer applied, over the interleaving harness's engine (the daemon's
`StoreEngine`, its blob writer running) and its in-process server: which memfs modules
run, and every call from code of one module into another's. The import contract
(tests/test_layers.py) cannot see a call made through a callback; this trace does. No call
goes up a layer of that contract but the one observer the design keeps: State telling
the fast-open set that a file's content changed (`State.on_content`, which the C shim of
memfs/mount/fastopen.py needs: it answers opens without asking Python).
"""

from __future__ import annotations

import inspect
import sys
import threading
import tomllib
from pathlib import Path

import trio
from interleave import Database, HeldTransport, make_engine

REPO = Path(__file__).resolve().parent.parent

#: The calls up a layer the design keeps: (caller module, callee module, function).
KEPT_UP_CALLS = {("state/state.py", "mount/open_files.py", "unfast")}
#: The modules the walk in docs/ARCHITECTURE.md names (its count is this test's ceiling).
WALK_CEILING = 17


def layers() -> list[str]:
    """The packages of the import contract, top first: memfs/<package>/ → its rank."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = config["tool"]["importlinter"]["contracts"][0]
    return [name.split(".", 1)[1] for name in contract["layers"]]


def module_of(filename: str) -> str | None:
    """memfs/sync/pusher.py → "sync/pusher.py"; None outside memfs (or in its server,
    which the harness runs in-process in the place of `memfs serve`)."""
    if "/memfs/" not in filename:
        return None
    module = filename.split("/memfs/", 1)[1]
    return None if module.startswith("server/") else module


def rank(module: str, order: list[str]) -> int:
    top = module.split("/", 1)[0].removesuffix(".py")
    return order.index(top)


def lines_read(codes: set) -> int:
    """The source lines of the functions that ran (comprehensions are inside them):
    what a reader following the walk reads."""
    return sum(len(inspect.getsourcelines(code)[0]) for code in codes
               if not code.co_name.startswith("<"))


async def _walk(tmp: Path, plant=None, codes: set | None = None,
                ) -> tuple[list[str], set[tuple[str, str, str]]]:
    db = Database(":memory:")
    transport = HeldTransport(db, db.create_store(name="walk")["id"])
    eng = make_engine(tmp, transport)
    if plant is not None:
        plant(eng)
    modules: list[str] = []
    calls: set[tuple[str, str, str]] = set()

    def profile(frame, event, _arg) -> None:
        if event != "call":
            return
        module = module_of(frame.f_code.co_filename)
        if module is None:
            return
        if module not in modules:
            modules.append(module)
        if codes is not None:
            codes.add(frame.f_code)
        caller = frame.f_back  # the nearest memfs frame below (library frames skipped)
        while caller is not None and module_of(caller.f_code.co_filename) is None:
            caller = caller.f_back
        if caller is not None and module_of(caller.f_code.co_filename) != module:
            calls.add((module_of(caller.f_code.co_filename), module, frame.f_code.co_name))

    try:
        async with trio.open_nursery() as background:
            await eng.store.start_content(background)
            await eng.op_write("/a.md", "v1")
            await eng.op_push()
            await eng.quiet()
            threading.setprofile(profile)
            sys.setprofile(profile)
            try:
                await eng.op_write("/a.md", "v2")  # open, write, flush, release
                await eng.op_push()                 # the pass: request, answer, applied
                await eng.quiet()                   # the blob writer's turn
            finally:
                sys.setprofile(None)
                threading.setprofile(None)
            background.cancel_scope.cancel()
        assert eng.server()["/a.md"][1] == eng.tree_sha("/a.md")  # the walk ran to the end
    finally:
        await eng.store.client.aclose()
        eng.store.close()
    return modules, calls


def test_the_write_walk_calls_no_layer_above_but_the_kept_observer(tmp_path):
    codes: set = set()
    modules, calls = trio.run(_walk, tmp_path, None, codes)
    order = layers()
    up = {c for c in calls if rank(c[1], order) < rank(c[0], order)}
    print(f"{len(modules)} modules: {', '.join(modules)}")
    print(f"{len({c for c in codes if not c.co_name.startswith('<')})} functions run, "
          f"{lines_read(codes)} lines")
    print("calls up a layer:", sorted(up))
    assert up == KEPT_UP_CALLS
    assert len(modules) <= WALK_CEILING, modules


def test_the_trace_sees_a_callback_planted_up_a_layer(tmp_path):
    """The check on a violation: State's content hook made to wake the pusher as well
    (a callback from the state package into the sync package, as the handlers' `kick`
    and the blob cache's `on_pending` were) is a call up a layer, and the test above
    would fail on it."""

    def plant(eng) -> None:
        hook = eng.state.on_content
        eng.state.on_content = lambda ino, gone=None: (hook(ino, gone), eng.ctx.kick())

    _modules, calls = trio.run(_walk, tmp_path, plant)
    order = layers()
    up = {c for c in calls if rank(c[1], order) < rank(c[0], order)}
    assert ("state/state.py", "sync/common.py", "kick") in up and up != KEPT_UP_CALLS
