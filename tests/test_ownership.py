"""Only `State` (memfs/state.py, memfs/state_sync.py) changes identity, base,
tombstones and conflict rows (docs/ARCHITECTURE.md, "Who may change what").

A source check over the package: any other module that assigns one of those
fields or writes one of those tables fails this test, so the rule cannot be
broken by accident."""

from __future__ import annotations

import ast
import pathlib
import re

import memfs

OWNERS = {"state.py", "state_sync.py", "schema.py"}
FIELDS = {"memory_id", "base_path", "base_sha", "sent_sha", "gen", "refused_sha",
          "retry_at", "fail_count"}
TABLE_WRITE = re.compile(r"\b(INSERT|UPDATE|DELETE|REPLACE)\b[^\"']*\b(nodes|tombstones|"
                         r"conflicts|parks)\b", re.IGNORECASE)
PACKAGE = pathlib.Path(memfs.__file__).parent
#: memfs serve has its own database (memories, not a mount's state): not ours.
SKIP_DIRS = {"server", "api"}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in SKIP_DIRS or rel.name in OWNERS and len(rel.parts) == 1:
            continue
        yield rel, path.read_text()


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


def test_no_module_but_state_assigns_identity_or_base():
    offenders = []
    for rel, text in _modules():
        for node in ast.walk(ast.parse(text)):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                for t in _assigned(target):
                    if isinstance(t, ast.Attribute) and t.attr in FIELDS:
                        offenders.append(f"{rel}:{t.lineno} assigns .{t.attr}")
    assert offenders == []


def test_no_module_but_state_writes_state_tables():
    offenders = []
    for rel, text in _modules():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and TABLE_WRITE.search(node.value):
                offenders.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    assert offenders == []


def test_the_check_sees_a_violation(tmp_path):
    """The checks above can fail: they flag a module that breaks the rule."""
    bad = "def f(node):\n    node.base_sha = 'x'\n    db.execute('DELETE FROM tombstones')\n"
    bad += "    a, node.memory_id = 1, 2\n    seen[node.base_path] = 1\n"
    tree = ast.parse(bad)
    attrs = [t.attr for n in ast.walk(tree) if isinstance(n, ast.Assign)
             for target in n.targets for t in _assigned(target)
             if isinstance(t, ast.Attribute)]
    assert attrs == ["base_sha", "memory_id"]
    assert TABLE_WRITE.search("DELETE FROM tombstones")
