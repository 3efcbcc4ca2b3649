"""The state package owns state.db, its writes and its reads (docs/ARCHITECTURE.md,
"Who may change what"): only `State` (memfs/state/state.py, memfs/state/transitions.py)
changes what state.db holds, and only the state package speaks SQL to it.

`check` is the rule, run over the package's source; any module that breaks it fails
`test_no_module_but_state_owns_state_db`, so the rule cannot be broken by accident.
The self-test runs the same `check` over a copy of the package with planted modules.
Two parts, each by `ast`:

- ownership (`find_violations`), every module but the owners (and memfs serve's, whose
  database is not state.db): it assigns a persisted field of a `Node` or a `Tombstone`
  (every column of `schema.NODE_COLUMNS` and `schema.TOMBSTONE_COLUMNS`), by assignment
  or `setattr`; it writes one of State's tables (every table of state.db; `staged`
  belongs to the blob cache, memfs/state/blobs.py); it changes one of State's
  containers (`nodes`, `tombstones`, `by_memory`, `parks`, `open_dirty`, `doubts`, ...,
  a node's `children`) in place: item assignment or deletion, a mutating method call,
  an augmented assignment, or rebinding the attribute.
- SQL (`find_sql`), every module outside the state package's owners and the blob cache
  (and memfs serve's): it calls into `sqlite3` (its exception types and constants may
  be named: they catch what a State call raised), reaches State's connection (`.db`),
  or holds an SQL statement.

The rest is held at run time (`test_state_data_is_read_only_from_outside`): State's
containers are read-only views from outside, a `PushTicket` (a `doubts` row) is frozen,
and a conflict row is handed out as a copy.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re
import shutil

import pytest

import memfs
from memfs.core.nodes import Node, PushTicket, Tombstone
from memfs.state.schema import (
    CONFLICT_COLUMNS,
    DOUBT_COLUMNS,
    NODE_COLUMNS,
    SCHEMA,
    STAGED_SCHEMA,
    TOMBSTONE_COLUMNS,
)
from memfs.state.state import State

PACKAGE = pathlib.Path(memfs.__file__).parent
#: The modules that own state.db: State, its transitions, its read side, the schema.
OWNERS = frozenset({"state/state.py", "state/transitions.py", "state/view.py",
                    "state/schema.py"})
#: The modules that may speak SQL: the owners and the blob cache (its own staged.db).
SQL_OWNERS = OWNERS | {"state/blobs.py"}
#: memfs serve has its own database (memories, not a mount's state): not ours. The API
#: layer sits below the state package (tests/test_layers.py): it cannot hold a Node.
SKIP_DIRS = frozenset({"server", "api"})
SQL_SKIP_DIRS = frozenset({"server"})

FIELDS = frozenset(NODE_COLUMNS) | frozenset(TOMBSTONE_COLUMNS)
#: Tables of state.db and the one module other than State that may write each.
TABLE_OWNER = {"staged": "state/blobs.py"}
TABLES = frozenset(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA + STAGED_SCHEMA))
TABLE_WRITE = re.compile(
    r"\b(INSERT|UPDATE|DELETE|REPLACE)\b[^\"']*?\b(" + "|".join(sorted(TABLES)) + r")\b",
    re.IGNORECASE)
#: State's in-memory mirrors of state.db (and its bookkeeping of them), and a node's
#: children (the tree's links, derived from the persisted `parent` and `name`)...
_STATE_CONTAINERS = ("nodes", "tombstones", "by_memory", "parks", "open_dirty", "doubts",
                     "replaced", "conflicted", "former_sources", "known", "maybe_dirty")
#: ... by their public names (read-only views from outside) and their private ones.
CONTAINERS = frozenset(_STATE_CONTAINERS) | {f"_{c}" for c in _STATE_CONTAINERS} | {"children"}
MUTATORS = frozenset({"pop", "popitem", "clear", "add", "discard", "remove", "update",
                      "setdefault", "append", "extend", "insert", "__setitem__",
                      "__delitem__", "difference_update", "intersection_update",
                      "symmetric_difference_update"})
#: An SQL statement in a string (SQL keywords are upper case in this code base; prose
#: such as "the DELETE request" is not a statement).
SQL = re.compile(r"\b(SELECT\b[\s\S]*?\bFROM\s+\w+|INSERT\s+(OR\s+\w+\s+)?INTO\s+\w+"
                 r"|UPDATE\s+\w+\s+SET\b|DELETE\s+FROM\s+\w+|REPLACE\s+INTO\s+\w+"
                 r"|PRAGMA\s+\w+|(CREATE|ALTER|DROP)\s+(TEMP\s+)?(TABLE|TRIGGER|INDEX)\b)")


def _assigned(target: ast.expr):
    """The expressions an assignment target writes (a tuple's elements, not the index
    of a subscript: `d[node.memory_id] = x` reads the field, it does not assign it)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _assigned(elt)
    elif isinstance(target, ast.Starred):
        yield from _assigned(target.value)
    else:
        yield target


def _own(expr: ast.expr) -> bool:
    """`self`: an object's own field. Outside the owners no class is a Node, a
    Tombstone or a State, so it is never one of theirs."""
    return isinstance(expr, ast.Name) and expr.id == "self"


def _local_classes_with(tree: ast.Module) -> set[str]:
    """Fields of classes the module defines itself (a dataclass's annotated fields)."""
    fields = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                fields.add(stmt.target.id)
    return fields


def _reaches_state(text: str) -> bool:
    """Whether the module can hold a memfs Node at all (it imports the model)."""
    return re.search(r"^\s*from memfs\.(state|core\.nodes)\b|^\s*from \.+(state|nodes)\b|"
                     r"^\s*import memfs\.(state|core\.nodes)\b", text, re.MULTILINE) is not None


def _container(expr: ast.expr, local: set[str]) -> str | None:
    """The State container an expression reaches into: `<x>.nodes` (not `self.nodes`),
    `<x>.nodes[i]`, `<x>.nodes[i].children[n]` → "nodes"."""
    while isinstance(expr, (ast.Subscript, ast.Attribute)):
        if isinstance(expr, ast.Attribute) and expr.attr in CONTAINERS \
                and expr.attr not in local and not _own(expr.value):
            return expr.attr
        expr = expr.value
    return None


def find_violations(rel: str, text: str) -> list[str]:
    """Every place in module `rel` (its source `text`) that changes State's data."""
    tree = ast.parse(text)
    out = []
    # A module with its own class of the same field name (tool/text's `_Node.size`) and
    # no way to reach a memfs Node assigns its own objects' fields.
    local = set() if _reaches_state(text) else _local_classes_with(tree)
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and (name := _container(t, local)):
                    out.append(f"{rel}:{t.lineno} deletes from .{name}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATORS and (name := _container(node.func.value, local)):
            out.append(f"{rel}:{node.lineno} calls .{name}.{node.func.attr}()")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "setattr" and len(node.args) >= 2 \
                and not _own(node.args[0]) and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value in FIELDS and node.args[1].value not in local:
            out.append(f"{rel}:{node.lineno} assigns .{node.args[1].value} by setattr")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in TABLE_WRITE.finditer(node.value):
                if TABLE_OWNER.get(m.group(2).lower()) != rel:
                    out.append(f"{rel}:{node.lineno} writes table {m.group(2)}: "
                               f"{node.value[:60]!r}")
        for target in targets:
            for t in _assigned(target):
                if isinstance(t, ast.Attribute) and t.attr in FIELDS and not _own(t.value) \
                        and t.attr not in local:
                    out.append(f"{rel}:{t.lineno} assigns .{t.attr}")
                elif isinstance(t, ast.Subscript) and (name := _container(t, local)):
                    out.append(f"{rel}:{t.lineno} assigns into .{name}")
                elif isinstance(t, ast.Attribute) and (name := _container(t, local)):
                    out.append(f"{rel}:{t.lineno} rebinds .{name}")
    return out


def _sqlite_name_allowed(name: str) -> bool:
    """What a module outside the state package may name of sqlite3: the exception
    types and the constants it reads off them (`SQLITE_FULL`), never a way in."""
    return name.endswith(("Error", "Warning")) or name.isupper()


def find_sql(rel: str, text: str) -> list[str]:
    """Every place in module `rel` that speaks SQL or reaches a database connection."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out += [f"{rel}:{node.lineno} imports sqlite3 as {a.asname}" for a in node.names
                    if a.name.split(".")[0] == "sqlite3" and (a.asname or "." in a.name)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlite3":
            out += [f"{rel}:{node.lineno} imports sqlite3.{a.name}" for a in node.names
                    if not _sqlite_name_allowed(a.name)]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "sqlite3" and not _sqlite_name_allowed(node.attr):
            out.append(f"{rel}:{node.lineno} uses sqlite3.{node.attr}")
        elif isinstance(node, ast.Attribute) and node.attr == "db" and not _own(node.value):
            out.append(f"{rel}:{node.lineno} reaches a connection (.db)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and (m := SQL.search(node.value)):
            out.append(f"{rel}:{node.lineno} holds SQL: {m.group(0)[:60]!r}")
    return out


def check(package: pathlib.Path) -> list[str]:
    """The rule over a package tree: every violation of either part, by module."""
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        text = path.read_text()
        top = rel.split("/")[0]
        if rel not in OWNERS and top not in SKIP_DIRS:
            out += find_violations(rel, text)
        if rel not in SQL_OWNERS and top not in SQL_SKIP_DIRS:
            out += find_sql(rel, text)
    return out


def test_no_module_but_state_owns_state_db():
    assert check(PACKAGE) == []


def test_every_persisted_field_and_table_is_covered():
    """The lists the check uses are the schema's, so a new column or table is covered
    the day it is added."""
    assert {"sha", "size", "parent", "name", "error", "refused_reason", "memory_id",
            "base_sha", "gen", "deleted_at", "sent_sha", "retry_at"} <= FIELDS
    assert {"nodes", "tombstones", "conflicts", "parks", "doubts", "meta", "sources",
            "known", "staged"} <= TABLES
    assert {f.name for f in dataclasses.fields(PushTicket)} >= set(DOUBT_COLUMNS) - {"id"}
    assert all(f.name in FIELDS for f in dataclasses.fields(Tombstone))
    assert {f.name for f in dataclasses.fields(Node)} >= set(NODE_COLUMNS)


def test_state_data_is_read_only_from_outside(tmp_path):
    """What the source check cannot see (an alias of a container, a field set through
    one) fails at run time: State hands out read-only views and frozen or copied rows."""
    state = State(tmp_path / "state.db")
    try:
        root = state.nodes[1]
        node = state.new_node(root, "a", is_dir=False, mode=0o100644, uid=0, gid=0)
        state.set_open_dirty(node.ino, True)
        # No public attribute of State holds a container it could change in place.
        mutable = (dict, set, list, bytearray)
        public = {name: getattr(state, name) for name in dir(state) if not name.startswith("_")}
        assert [n for n, v in public.items() if isinstance(v, mutable)] == []
        for name in ("nodes", "tombstones", "by_memory", "parks", "doubts", "former_sources",
                     "known"):
            view = getattr(state, name)
            with pytest.raises(TypeError):
                view[1] = None
            with pytest.raises(AttributeError):
                view.pop(1)
            with pytest.raises(AttributeError):  # a property: no rebinding either
                setattr(state, name, {})
        with pytest.raises(AttributeError):
            state.open_dirty.add(5)
        with pytest.raises(AttributeError):
            state.open_dirty = set()
        assert node.ino in state.open_dirty and len(state.open_dirty) == 1
        assert state.nodes[node.ino] is node and state.by_memory == {}
        # A doubts row is a frozen PushTicket.
        ticket = state.begin_push(node)
        with pytest.raises(dataclasses.FrozenInstanceError):
            ticket.sha = "x"  # type: ignore[misc]
        # A conflict row is a copy: changing it changes nothing State holds.
        state.import_conflicts([("/a", None, node.sha, None, "kept")])
        row = state.conflicts()[0]
        assert set(row) == set(CONFLICT_COLUMNS)
        row["path"] = "/elsewhere"
        assert state.conflicts()[0]["path"] == "/a"
    finally:
        state.close()


PLANTED = '''
from memfs.state.state import State

def f(state, node, tomb, ctx):
    node.base_sha = 'x'
    a, node.memory_id = 1, 2
    node.sha, node.size = "s", 1
    node.parent = 3
    node.name = "n"
    node.error = "e"
    node.refused_reason = "r"
    setattr(node, "sent_sha", "s")
    tomb.deleted_at += 1
    seen[node.base_path] = 1
    db.execute('DELETE FROM tombstones')
    db.execute("INSERT INTO doubts (ino) VALUES (1)")
    db.execute("UPDATE meta SET value=1")
    db.execute("INSERT INTO staged VALUES (1, 2)")
    state.nodes[1] = node
    del state.tombstones["m"]
    state.by_memory.pop("m")
    ctx.state.parks.clear()
    state.open_dirty.add(3)
    state.open_dirty.discard(3)
    state.doubts[7] = None
    state.doubts = {}
    state._nodes[2] = node
    node.children["x"] = 4
    del ctx.state.nodes[1].children["x"]
    self.name = "own"
    setattr(self, "size", 1)
    return state.nodes.get(1), state.by_memory[node.memory_id], getattr(node, "sha")
'''

PLANTED_SQL = '''
import sqlite3
import sqlite3 as lite
from sqlite3 import connect
from sqlite3 import OperationalError

def g(state, path):
    try:
        conn = sqlite3.connect(path)
    except sqlite3.Error as exc:
        full = exc.sqlite_errorcode == sqlite3.SQLITE_FULL
    opener = sqlite3.connect
    rows = state.db.execute("x")
    q = "SELECT value FROM meta WHERE key=?"
    self.db = None
    return "the DELETE request", "select a name from the list", full
'''


def _flagged(found: list[str], rel: str) -> set[int]:
    return {int(v.split(":")[1].split()[0]) for v in found if v.startswith(rel + ":")}


def _lines(text: str, *reads: str) -> set[int]:
    """The lines of a planted function's body, but those holding one of `reads`."""
    return {i + 1 for i, line in enumerate(text.splitlines()) if line.startswith("    ")
            and not any(read in line for read in reads)}


def test_the_check_sees_planted_violations(tmp_path):
    """The real check, over a copy of the package with planted modules: each one's
    every violation is flagged on its own line, its reads are not, and nothing else in
    the package is."""
    copy = tmp_path / "memfs"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "mount" / "planted.py").write_text(PLANTED)
    (copy / "cli" / "planted_sql.py").write_text(PLANTED_SQL)
    # The state package's own modules are held to it too, but for the owners.
    (copy / "state" / "planted_reader.py").write_text(PLANTED_SQL)
    (copy / "state" / "view.py").write_text((copy / "state" / "view.py").read_text()
                                            + PLANTED + PLANTED_SQL)
    found = check(copy)
    planted = {"mount/planted.py", "cli/planted_sql.py", "state/planted_reader.py"}
    assert {v.split(":")[0] for v in found} == planted, found

    # Every line of the body but the reads: the index `seen[node.base_path]`, an own
    # field `self.name`, `setattr(self, ...)`, and the `return` of three lookups.
    assert _flagged(found, "mount/planted.py") == _lines(PLANTED, "seen[", "self", "return")
    lines = PLANTED.splitlines()

    def at(text: str) -> int:
        return next(i + 1 for i, line in enumerate(lines) if text in line)

    assert f"mount/planted.py:{at('base_sha')} assigns .base_sha" in found
    assert f"mount/planted.py:{at('setattr(node')} assigns .sent_sha by setattr" in found
    assert f"mount/planted.py:{at('by_memory.pop')} calls .by_memory.pop()" in found
    assert f"mount/planted.py:{at('del ctx')} deletes from .children" in found
    assert f"mount/planted.py:{at('state.doubts = ')} rebinds .doubts" in found

    # SQL: all but the exception types and constants, and prose.
    sql = PLANTED_SQL.splitlines()
    imports = {i + 1 for i, line in enumerate(sql) if " as lite" in line or "connect" in line}
    for rel in ("cli/planted_sql.py", "state/planted_reader.py"):
        assert _flagged(found, rel) == (_lines(PLANTED_SQL, "try:", "except", "full =",
                                               "self.db", "return") | imports), found
    select = next(i + 1 for i, line in enumerate(sql) if "SELECT" in line)
    assert any(v.startswith(f"cli/planted_sql.py:{select} holds SQL: 'SELECT value FROM meta")
               for v in found)

    # The blob cache may write its own table, and only that one.
    assert find_violations("state/blobs.py", 'db.execute("INSERT INTO staged VALUES (1)")') == []
    assert find_violations("state/blobs.py", 'db.execute("DELETE FROM nodes")') != []
    # A module that cannot reach a Node may name its own fields like a Node's.
    own = ("@dataclass\nclass _Node:\n    size: int = 0\n    children: dict = None\n\n"
           "def f(n):\n    n.size += 1\n    n.children['x'] = n\n")
    assert find_violations("tool/text.py", own) == []
    assert len(find_violations("x.py", "from memfs.core.nodes import Node\n" + own)) == 2
