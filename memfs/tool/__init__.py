"""Claude's memory tool over a store: the SDK classes (`sdk`), the six commands (`store`),
their text rules (`text`) and the MCP server (`mcp`).

``from memfs.tool import MemoryStoreTool`` is the public name. It is resolved lazily so that
``memfs tool`` and ``memfs mcp``, which use `store` alone, never import the ``anthropic``
package (the ``tool`` extra).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AsyncMemoryStoreTool", "MemoryStoreTool"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from memfs.tool import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'memfs.tool' has no attribute {name!r}")
