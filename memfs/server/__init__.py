"""`memfs serve`: the embedded local Memory Stores server.

SQLite storage (``db.py``), the HTTP wire format of the hosted API
(``http.py``) and fault injection for tests (``faults.py``). See
``docs/SERVER.md``.
"""

from __future__ import annotations

from memfs.server.db import Actor, ApiError, Database
from memfs.server.faults import FaultConfig, Faults
from memfs.server.http import MemfsHTTPServer

__all__ = ["Actor", "ApiError", "Database", "FaultConfig", "Faults", "MemfsHTTPServer"]
