"""`memfs serve`: the embedded local Memory Stores server.

Storage (``db.py``: SQLite or PostgreSQL), the operations and routes of the
hosted API (``http.py``), the ASGI application (``app.py``) served by uvicorn
(``runner.py``), and the test controls (``faults.py``, ``gate.py``). See
``docs/SERVER.md``.
"""

from __future__ import annotations

from memfs.server.db import Actor, ApiError, Database, open_database
from memfs.server.faults import FaultConfig, Faults

__all__ = ["Actor", "ApiError", "Database", "FaultConfig", "Faults", "open_database"]
