"""Only `State` (memfs/state/state.py, memfs/state/transitions.py) changes what state.db holds
(docs/ARCHITECTURE.md, "Who may change what").

A source check over the package, in three parts; any other module that breaks one
fails this test, so the rule cannot be broken by accident:

- it assigns a persisted field of a `Node` or a `Tombstone` (every column of
  `schema.NODE_COLUMNS` and `schema.TOMBSTONE_COLUMNS`);
- it writes one of State's tables (every table of state.db but `staged`, which the
  blob cache, memfs/state/blobs.py, owns);
- it changes one of State's containers in place (`nodes`, `tombstones`, `by_memory`,
  `parks`, `open_dirty`, `doubts`, ...): item assignment or deletion, a mutating method
  call, an augmented assignment, or rebinding the attribute.

`find_violations` is the check itself; the self-test feeds it a planted module."""

from __future__ import annotations

import ast
import pathlib
import re

import memfs
from memfs.state.schema import NODE_COLUMNS, SCHEMA, STAGED_SCHEMA, TOMBSTONE_COLUMNS

PACKAGE = pathlib.Path(memfs.__file__).parent
OWNERS = {"state/state.py", "state/transitions.py", "state/schema.py"}
#: memfs serve has its own database (memories, not a mount's state): not ours.
SKIP_DIRS = {"server", "api"}

FIELDS = frozenset(NODE_COLUMNS) | frozenset(TOMBSTONE_COLUMNS)
#: Tables of state.db and the one module other than State that may write each.
TABLE_OWNER = {"staged": "state/blobs.py"}
TABLES = frozenset(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA + STAGED_SCHEMA))
TABLE_WRITE = re.compile(
    r"\b(INSERT|UPDATE|DELETE|REPLACE)\b[^\"']*?\b(" + "|".join(sorted(TABLES)) + r")\b",
    re.IGNORECASE)
#: State's in-memory mirrors of state.db (and its bookkeeping of them).
CONTAINERS = frozenset({"nodes", "tombstones", "by_memory", "parks", "open_dirty", "doubts",
                        "replaced", "conflicted"})
MUTATORS = frozenset({"pop", "popitem", "clear", "add", "discard", "remove", "update",
                      "setdefault", "append", "extend", "insert", "__setitem__",
                      "__delitem__"})


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


def _own_field(attr: ast.Attribute) -> bool:
    """`self.x`: an object's own field. Outside the owners no class is a Node or a
    Tombstone, so it is never one of theirs."""
    return isinstance(attr.value, ast.Name) and attr.value.id == "self"


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
    return re.search(r"^\s*from memfs\.(state\.state|state\.transitions|core\.nodes) import|"
                     r"^\s*from memfs\.(state|core) import (state|transitions|nodes)\b|"
                     r"^\s*import memfs\.(state|core\.nodes)", text, re.MULTILINE) is not None


def _container(expr: ast.expr) -> str | None:
    """The State container an expression reaches into: `<x>.nodes` (not `self.nodes`),
    `<x>.nodes[i]`, `<x>.nodes[i].children[n]` → "nodes"."""
    while isinstance(expr, (ast.Subscript, ast.Attribute)):
        if isinstance(expr, ast.Attribute) and expr.attr in CONTAINERS \
                and not _own_field(expr):
            return expr.attr
        expr = expr.value
    return None


def find_violations(rel: str, text: str) -> list[str]:
    """Every place in module `rel` (its source `text`) that changes State's data."""
    tree = ast.parse(text)
    out = []
    # A module with its own class of the same field name (tool_text's `_Node.size`) and
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
                if isinstance(t, ast.Subscript) and (name := _container(t)):
                    out.append(f"{rel}:{t.lineno} deletes from .{name}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATORS and (name := _container(node.func.value)):
            out.append(f"{rel}:{node.lineno} calls .{name}.{node.func.attr}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in TABLE_WRITE.finditer(node.value):
                if TABLE_OWNER.get(m.group(2).lower()) != rel:
                    out.append(f"{rel}:{node.lineno} writes table {m.group(2)}: "
                               f"{node.value[:60]!r}")
        for target in targets:
            for t in _assigned(target):
                if isinstance(t, ast.Attribute) and t.attr in FIELDS and not _own_field(t) \
                        and t.attr not in local:
                    out.append(f"{rel}:{t.lineno} assigns .{t.attr}")
                elif isinstance(t, ast.Subscript) and (name := _container(t)):
                    out.append(f"{rel}:{t.lineno} assigns into .{name}")
                elif isinstance(t, ast.Attribute) and (name := _container(t)):
                    out.append(f"{rel}:{t.lineno} rebinds .{name}")
    return out


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in SKIP_DIRS or str(rel) in OWNERS:
            continue
        yield str(rel), path.read_text()


def test_no_module_but_state_changes_state_data():
    offenders = [v for rel, text in _modules() for v in find_violations(rel, text)]
    assert offenders == []


def test_every_persisted_field_and_table_is_covered():
    """The lists the check uses are the schema's, so a new column or table is covered
    the day it is added."""
    assert {"sha", "size", "parent", "name", "error", "refused_reason", "memory_id",
            "base_sha", "gen", "deleted_at"} <= FIELDS
    assert {"nodes", "tombstones", "conflicts", "parks", "doubts", "meta", "staged"} <= TABLES


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
    del ctx.state.nodes[1].children["x"]
    self.name = "own"
    return state.nodes.get(1), state.by_memory[node.memory_id]
'''


def test_the_check_sees_a_planted_violation():
    """The real check, fed a planted module: every kind of violation is flagged, on its
    own line, and reads are not."""
    found = find_violations("planted.py", PLANTED)
    lines = PLANTED.splitlines()
    flagged = {int(v.split(":")[1].split()[0]) for v in found}
    # Every line of the body but the reads: the index `seen[node.base_path]`, an own
    # field `self.name`, and the `return` of two lookups.
    expected = {i + 1 for i, line in enumerate(lines) if line.startswith("    ")
                and not any(read in line for read in ("seen[", "self.", "return"))}
    assert flagged == expected, sorted(found)

    def at(text: str) -> int:
        return next(i + 1 for i, line in enumerate(lines) if text in line)

    assert f"planted.py:{at('base_sha')} assigns .base_sha" in found
    assert f"planted.py:{at('by_memory.pop')} calls .by_memory.pop()" in found
    assert f"planted.py:{at('children')} deletes from .nodes" in found
    assert f"planted.py:{at('state.doubts = ')} rebinds .doubts" in found
    # The blob cache may write its own table, and only that one.
    assert find_violations("state/blobs.py", 'db.execute("INSERT INTO staged VALUES (1, 2)")') == []
    assert find_violations("state/blobs.py", 'db.execute("DELETE FROM nodes")') != []
    # A module that cannot reach a Node may name its own fields like a Node's.
    own = "@dataclass\nclass _Node:\n    size: int = 0\n\ndef f(n):\n    n.size += 1\n"
    assert find_violations("tool/text.py", own) == []
    assert find_violations("x.py", "from memfs.core.nodes import Node\n" + own) != []
