"""What one mount is configured with, as `memfs mount` hands it to the daemon.

Kept apart from the daemon so that commands which do not mount (status,
unmount, stores...) never import pyfuse3 or the sync machinery.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

#: Editor and tool temp files: kept in the mount, never uploaded.
DEFAULT_LOCAL_ONLY_PATTERNS = (
    ".*.swp", ".*.swo", ".*.swx", ".*.swpx", "*~", ".#*", "#*#", "4913",
)


@dataclass
class SyncOptions:
    write_back_delay: float = 1.0
    delete_delay: float = 30.0
    poll_interval: float = 2.0  # a feed poll: one request, an empty page when idle
    feed: bool = True           # follow the change feed between full listings
    full_resync: float = 600.0  # a full listing at least this often (the safety net)
    deletes: str = "enabled"  # enabled | log-only | disabled
    prefetch: bool = True
    read_only: bool = False
    push_concurrency: int = 32  # requests in flight at once, each kind (the SDK uses 32)


@dataclass
class MountConfig:
    store_id: str
    mountpoint: str
    base_url: str
    state_dir: str
    options: SyncOptions = field(default_factory=SyncOptions)
    flush_timeout: float = 30.0
    #: The server is memfs's embedded local server: if it comes back on another
    #: port while we are mounted, the daemon follows it (local-server.json).
    embedded: bool = False
    local_only_patterns: list[str] = field(
        default_factory=lambda: list(DEFAULT_LOCAL_ONLY_PATTERNS))
    #: The store's name as `memfs mount` resolved it ("" when mounted offline): the
    #: daemon's process title shows it (memfs/proctitle.py).
    store_name: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> MountConfig:
        d = json.loads(text)
        d["options"] = SyncOptions(**d["options"])
        return cls(**d)
