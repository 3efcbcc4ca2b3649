"""memfs: mount Memory Stores as filesystems."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["SessionMounts", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy: `import memfs` (every CLI command) must not pay for anyio.
    if name == "SessionMounts":
        from .session_mounts import SessionMounts

        return SessionMounts
    raise AttributeError(f"module 'memfs' has no attribute {name!r}")
