"""memfs: mount Memory Stores as filesystems."""

from __future__ import annotations

import sys
from typing import Any

from memfs.core.version import VERSION as __version__

__all__ = ["SessionMounts", "__version__"]

# httpx imports its command-line client when `rich` is installed (memfs's progress
# display installs it), and that pulls rich and pygments into every memfs process:
# about 30 ms of each start-up (two per mount), for a tool memfs never runs.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def __getattr__(name: str) -> Any:
    # Lazy: `import memfs` (every CLI command) must not pay for anyio.
    if name == "SessionMounts":
        from memfs.session_mounts import SessionMounts

        return SessionMounts
    raise AttributeError(f"module 'memfs' has no attribute {name!r}")
