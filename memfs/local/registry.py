"""The mount registry: which memfs daemons run on this machine, and where memfs keeps its files.

``<cache root>/mounts/<hash>.json`` is written by each running daemon (one per mountpoint);
`memfs status`, `memfs unmount`, `memfs conflicts` and the shell completion read it to find a
mount's control socket and state directory without touching the mountpoint (stat-ing a FUSE
mountpoint of a hung daemon blocks).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from memfs.core.private import private_dir


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "memfs"


def registry_dir() -> Path:
    private_dir(cache_root())
    return private_dir(cache_root() / "mounts")


def canonical_mountpoint(mountpoint: str) -> str:
    """The mountpoint's real path, resolved WITHOUT touching the mountpoint itself:
    stat-ing a FUSE mountpoint from its own daemon (or of a hung daemon) blocks."""
    path = os.path.abspath(mountpoint)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def is_mounted(path: str) -> bool:
    """Whether a filesystem is mounted at `path` (read from /proc/mounts: stat-ing the
    mountpoint of a hung daemon would block)."""
    real = canonical_mountpoint(path)
    with open("/proc/mounts") as f:
        return any(line.split()[1].encode().decode("unicode_escape") == real for line in f)


def mount_hash(mountpoint: str) -> str:
    return hashlib.sha256(canonical_mountpoint(mountpoint).encode()).hexdigest()[:16]


def registry_file(mountpoint: str) -> Path:
    return registry_dir() / (mount_hash(mountpoint) + ".json")


def read_registry(mountpoint: str) -> dict | None:
    """The live daemon's registry entry for mountpoint, or None."""
    try:
        return json.loads(registry_file(mountpoint).read_text())
    except (OSError, ValueError):
        return None


def root_store(path: str) -> tuple[str, dict, str] | None:
    """(the root, its live daemon's registry entry, the store's directory name) when
    `path` is a store's directory right under a live session root: `memfs status`,
    `watch` and `mcp --mount` take it for that store of the root's daemon."""
    root, name = os.path.split(os.path.abspath(path))
    info = read_registry(root)
    if info and info.get("state_dir") and any(
            s.get("name") == name for s in info.get("stores", [])):
        return root, info, name
    return None


def write_private_json(path: Path, data: dict) -> None:
    """Write data as JSON to path, atomically (temp file + rename) and 0600."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def all_mounts() -> list[str]:
    out = []
    for f in sorted(registry_dir().glob("*.json")):
        try:
            out.append(json.loads(f.read_text())["mountpoint"])
        except (OSError, ValueError, KeyError):
            continue
    return out
