"""The memory tool's text rules: paths under ``/memories``, views, and the two edits.

Everything here is pure (no I/O, no ``anthropic`` import), so the tool classes, the
``memfs tool`` command and the tests share one definition of what the tool answers.

The answers and error texts follow the ``anthropic`` SDK's
``BetaLocalFilesystemMemoryTool`` character for character, because agents' prompts are
tuned to that reference implementation. The rules are re-derived from its observable
behaviour (which this module documents where it is surprising), not copied.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ROOT",
    "MAX_VIEW_LINES",
    "ToolFailure",
    "ToolPath",
    "resolve",
    "format_size",
    "render_directory",
    "render_file",
    "replace_once",
    "insert_lines",
    "missing",
    "missing_short",
    "not_a_file",
    "read_only",
]

#: What the agent calls the store's root.
ROOT = "/memories"
#: The reference refuses to show files with more lines than this (a store's 102,400-byte
#: limit keeps every memory far below it, but the rule is kept for parity).
MAX_VIEW_LINES = 999_999
_NUMBER_WIDTH = len(str(MAX_VIEW_LINES))


class ToolFailure(Exception):
    """A command that fails with a message meant for the model.

    The tool classes turn it into the SDK's ``ToolError`` (``is_error: true``); the
    ``memfs tool`` command prints it as ``{"error": ...}``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --------------------------------------------------------------------------- paths

# Stands for everything above the folder that holds ``memories`` on the reference's disk:
# a path that climbs into it can only come back into /memories through a name we cannot
# know, so it stays outside (the reference's answer would depend on its base folder).
_ABOVE = object()


@dataclass(frozen=True)
class ToolPath:
    """A path the agent sent (``raw``, echoed verbatim in every answer) and where it lands.

    ``segments`` are the names below the store root, so ``()`` is ``/memories`` itself.
    """

    raw: str
    segments: tuple[str, ...]
    root: str = "/memories"  # where the store is: ``/memories/<slug>`` for one of several

    @property
    def is_root(self) -> bool:
        return not self.segments

    @property
    def memory_path(self) -> str:
        """The memory path in the store: ``/memories/<p>`` is ``/<p>``."""
        return "/" + "/".join(self.segments)

    def shown(self, memory_path: str) -> str:
        """How the agent would name another memory path (``/p`` is ``/memories/p``)."""
        return self.root + memory_path


def resolve(path: object, base: tuple[str, ...] = ()) -> ToolPath:
    """Check a tool path and find the memory path it names.

    The reference tests ``startswith("/memories")`` on the raw string (so
    ``/memoriesX/a`` names ``X/a`` inside the root), drops leading slashes, and resolves
    the rest the way the OS would: empty and ``.`` segments vanish and ``..`` climbs,
    even above the root and back (``/memories/../memories/a`` is ``/a``). A store has
    no symlinks, so that resolution is purely lexical here.

    ``base``: the store is the directory ``/memories/<base...>`` (several stores served
    together, each under its slug, as in a session mount); the path must land in it.
    """
    if not isinstance(path, str) or not path.startswith(ROOT):
        raise ToolFailure(f"Path must start with {ROOT}, got: {path}")
    where: list[object] = [_ABOVE, "memories"]
    for name in path[len(ROOT) :].split("/"):
        if name in ("", "."):
            continue
        if name == "..":
            if where:
                where.pop()
            continue
        where.append(name)
    if where[:2] != [_ABOVE, "memories"]:
        raise ToolFailure(f"Path {path} would escape {ROOT} directory")
    segments = tuple(str(n) for n in where[2:])
    if not base:
        return ToolPath(raw=path, segments=segments)
    root = "/".join((ROOT, *base))
    if segments[: len(base)] != base:
        raise ToolFailure(f"Path {path} is not in the memory store at {root}")
    return ToolPath(raw=path, segments=segments[len(base) :], root=root)


# --------------------------------------------------------------------------- messages


def missing(path: str) -> str:
    """The 'does not exist' of view, str_replace and insert."""
    return f"The path {path} does not exist. Please provide a valid path."


def missing_short(path: str) -> str:
    """The 'does not exist' of delete and rename (the reference words them differently)."""
    return f"The path {path} does not exist"


def not_a_file(path: str) -> str:
    return f"The path {path} is not a file."


def read_only(path: str, root: str) -> str:
    """The refusal of every change in a read-only store (a session's ``read_only``
    resource, an archived store), made before anything is sent."""
    return f"{path} was not changed: the memory store at {root} is read-only."


# --------------------------------------------------------------------------- view


def format_size(size: int) -> str:
    """Sizes as the reference prints them: ``0B``, ``1023B``, ``1K``, ``1.5K``, ``4K``."""
    if size <= 0:
        return "0B"
    units = ("B", "K", "M", "G")
    unit = min((size.bit_length() - 1) // 10, len(units) - 1)
    scaled = size / 1024**unit
    if scaled == int(scaled):
        return f"{int(scaled)}{units[unit]}"
    return f"{scaled:.1f}{units[unit]}"


@dataclass
class _Node:
    size: int = 0
    is_file: bool = False
    children: dict[str, _Node] = field(default_factory=dict)


def render_directory(path: str, below: Iterable[tuple[Sequence[str], int]],
                     directories: Iterable[Sequence[str]] = ()) -> str:
    """The listing of a directory: its children and grandchildren, hidden names skipped.

    ``below`` holds every memory under the directory as (names relative to it, size in
    bytes). Directories exist only through the memories below them, and their size is
    the total of those memories: a store has no folder size to report (the reference
    shows the folder's inode size, e.g. ``4K``). ``directories`` are shown even when
    empty (the stores under ``/memories`` of `memfs mcp` with several stores).
    """
    top = _Node()
    for names in directories:
        node = top
        for name in names:
            node = node.children.setdefault(name, _Node())
    for names, size in below:
        node = top
        node.size += size
        for name in names:
            node = node.children.setdefault(name, _Node())
            node.size += size
        node.is_file = True

    rows = [f"{format_size(top.size)}\t{path}"]

    def walk(node: _Node, prefix: str, depth: int) -> None:
        for name in sorted(node.children):
            if name.startswith("."):
                continue
            child = node.children[name]
            rel = f"{prefix}{name}"
            if child.is_file:
                rows.append(f"{format_size(child.size)}\t{path}/{rel}")
            else:
                rows.append(f"{format_size(child.size)}\t{path}/{rel}/")
                if depth < 2:
                    walk(child, f"{rel}/", depth + 1)

    walk(top, "", 1)
    header = (
        f"Here're the files and directories up to 2 levels deep in {path}, "
        "excluding hidden items:"
    )
    return header + "\n" + "\n".join(rows)


def _numbered(lines: Sequence[str], first_number: int) -> str:
    return "\n".join(
        f"{str(first_number + i).rjust(_NUMBER_WIDTH)}\t{line}" for i, line in enumerate(lines)
    )


def render_file(path: str, content: str, view_range: object = None) -> str:
    """A file with line numbers; ``view_range`` as the reference reads it.

    Only a two-item range counts. It is 1-based and inclusive, ``-1`` as the end means
    the last line, and nothing is out of range: Python slicing decides (a start below 1
    is 1, an end past the file is the file's end, a negative end counts from the back).
    """
    lines = content.split("\n")
    if len(lines) > MAX_VIEW_LINES:
        raise ToolFailure(f"File {path} exceeds maximum line limit of 999,999 lines.")
    first = 0
    shown: Sequence[str] = lines
    if view_range and isinstance(view_range, (list, tuple)) and len(view_range) == 2:
        start, end = view_range
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            raise ToolFailure(
                f"Invalid `view_range` parameter: {list(view_range)}. "
                "It should be two integers [start_line, end_line]."
            )
        first = max(1, start) - 1
        shown = lines[first:] if end == -1 else lines[first:end]
    return f"Here's the content of {path} with line numbers:\n" + _numbered(shown, first + 1)


# --------------------------------------------------------------------------- edits


def replace_once(path: str, content: str, old: str, new: str) -> tuple[str, str]:
    """(edited content, answer) for ``str_replace``; ToolFailure unless ``old`` occurs once.

    Occurrences are counted without overlap (``str.count``) to decide, but the lines of a
    duplicate are listed with overlapping matches: that mismatch is the reference's, and
    its messages are kept exactly, including the missing final period of the second.
    """
    count = content.count(old)
    if count == 0:
        raise ToolFailure(
            f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
        )
    if count > 1:
        line_numbers = []
        at = content.find(old)
        while at != -1:
            line_numbers.append(content.count("\n", 0, at) + 1)
            at = content.find(old, at + 1)
        raise ToolFailure(
            f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines: "
            f"{', '.join(str(n) for n in line_numbers)}. Please ensure it is unique"
        )
    at = content.find(old)
    edited = content[:at] + new + content[at + len(old) :]
    changed = content.count("\n", 0, at)  # 0-based line of the change
    lines = edited.split("\n")
    first = max(0, changed - 2)
    last = min(len(lines), changed + 3)
    answer = (
        "The memory file has been edited. Here is the snippet showing the change "
        "(with line numbers):\n" + _numbered(lines[first:last], first + 1)
    )
    return edited, answer


def insert_lines(path: str, content: str, line: object, text: str) -> tuple[str, str]:
    """(edited content, answer) for ``insert``: ``text`` goes after line ``line`` (0 = top).

    Lines are split on ``\\n`` only (a ``\\r`` stays part of its line) and a final newline
    does not make an extra line. The inserted text loses its trailing newlines, and the
    result always ends with exactly the newline the join leaves plus one if missing.
    """
    if not isinstance(line, int) or isinstance(line, bool):
        raise ToolFailure(f"Invalid `insert_line` parameter: {line}. It should be an integer.")
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    if line < 0 or line > len(lines):
        raise ToolFailure(
            f"Invalid `insert_line` parameter: {line}. "
            f"It should be within the range [0, {len(lines)}]."
        )
    lines.insert(line, text.rstrip("\n"))
    edited = "\n".join(lines)
    if not edited.endswith("\n"):
        edited += "\n"
    return edited, f"The file {path} has been edited."


def as_sdk_reads(args: dict[str, Any]) -> dict[str, Any]:
    """The memory tool's integer fields (`insert_line`, `view_range`) read as the SDK
    reads a model's tool call (its pydantic models, lax: "4" and 5.0 are 4 and 5), so
    `memfs mcp` and `memfs tool` answer as `memfs.tool` and the SDK's own tool do; a
    value that cannot be read is left for the tool's own word on it (and every value,
    where pydantic is not installed)."""
    adapters = _sdk_adapters()
    if adapters is None:
        return args
    from pydantic import ValidationError

    out = dict(args)
    for key, adapter in adapters.items():
        if key in out:
            try:
                out[key] = adapter.validate_python(out[key])
            except ValidationError:
                pass
    return out


@functools.cache
def _sdk_adapters() -> dict[str, Any] | None:
    """The readers `as_sdk_reads` uses, built once (a TypeAdapter is built from the type
    at each construction); None without pydantic."""
    try:
        from pydantic import TypeAdapter
    except ImportError:
        return None
    return {"insert_line": TypeAdapter(int), "view_range": TypeAdapter(list[int])}
