"""What one mount is configured with, as `memfs mount` hands it to the daemon.

Kept apart from the daemon so that commands which do not mount (status,
unmount, stores...) never import pyfuse3 or the sync machinery.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import timedelta

#: Editor and tool temp files: kept in the mount, never uploaded.
DEFAULT_LOCAL_ONLY_PATTERNS = (
    ".*.swp", ".*.swo", ".*.swx", ".*.swpx", "*~", ".#*", "#*#", "4913",
)


@dataclass
class SyncOptions:
    write_back_delay: float = 1.0
    #: A file that keeps changing goes out at least this long after its first change
    #: not yet pushed (the write-back delay alone would wait for a quiet second).
    max_push_delay: float = 5.0
    delete_delay: float = 30.0
    poll_interval: float = 2.0  # a feed poll: one request, an empty page when idle
    feed: bool = True           # follow the change feed between full listings
    full_resync: float = 600.0  # a full listing at least this often (the safety net)
    deletes: str = "enabled"  # enabled | log-only | disabled
    prefetch: bool = True
    read_only: bool = False
    push_concurrency: int = 32  # requests in flight at once, each kind (the SDK uses 32)
    #: A request whose answer was lost and of which the server shows no trace may still
    #: be applied (a server that has not finished it yet): it is taken as never applied
    #: only this many seconds after its answer was lost (docs/SYNC.md, "Lost answers").
    lost_answer_wait: float = 30.0
    #: How late (in `created_at` terms) the server may commit a version after newer ones:
    #: the change feed reads each stretch of time once more when it is this old
    #: (memfs/sync/feed.py). 30 s for the hosted API; shorter only for a server known to
    #: commit sooner (a benchmark that must not sit through 30 s of the feed's clock).
    feed_lookback: float = 30.0
    show_meta: bool = False  # list the virtual `.memfs` directory in the root's readdir

    #: Options added after the JSON's first form: written only when not their default,
    #: so that the JSON of a mount that does not set them is what an older memfs reads.
    LATER = ("lost_answer_wait", "feed_lookback")

    @property
    def lookback(self) -> timedelta:
        """`feed_lookback` as the feed and the versions tree compare it with `created_at`."""
        return timedelta(seconds=self.feed_lookback)

    def to_dict(self) -> dict:
        d = asdict(self)
        for name in self.LATER:
            if d[name] == getattr(SyncOptions, name):
                del d[name]
        return d


@dataclass(kw_only=True)
class MountSettings:
    """What a store mount and a session root (several stores, one mount) are both
    configured with; a session root hands its settings to each of its stores
    (:meth:`GroupConfig.store_config`).

    Its fields stand flat in the JSON of either (``asdict``), so the JSON crossing the
    pipe to the daemon keeps its keys: a memfs from before this class reads it, and
    reads an older one.
    """

    base_url: str
    options: SyncOptions = field(default_factory=SyncOptions)
    flush_timeout: float = 30.0
    #: The server is memfs's embedded local server: if it comes back on another
    #: port while we are mounted, the daemon follows it (local-server.json).
    embedded: bool = False
    local_only_patterns: list[str] = field(
        default_factory=lambda: list(DEFAULT_LOCAL_ONLY_PATTERNS))
    #: FUSE allow_other (with default_permissions): other users may use the mount
    allow_other: bool = False
    #: [uid, gid] every file is shown as owned by (`--uid`/`--gid`); None: as created
    owner: list[int] | None = None
    #: "HOST:PORT" the daemon serves Prometheus metrics on (`--metrics-addr`), or None;
    #: a session root serves every store's metrics on one endpoint
    metrics_addr: str | None = None

    @staticmethod
    def _parsed(text: str, *drop: str) -> dict:
        """The JSON's fields, ``options`` as SyncOptions, the markers ``drop`` left out."""
        d = json.loads(text)
        for key in drop:
            d.pop(key, None)
        d["options"] = SyncOptions(**d["options"])
        return d


@dataclass
class MountConfig(MountSettings):
    store_id: str
    mountpoint: str
    state_dir: str
    #: The store's name as `memfs mount` resolved it ("" when mounted offline): the
    #: daemon's process title shows it (memfs/local/titles.py).
    store_name: str = ""

    def to_json(self) -> str:
        return json.dumps({"kind": "store", **asdict(self), "options": self.options.to_dict()})

    @classmethod
    def from_json(cls, text: str) -> MountConfig:
        return cls(**cls._parsed(text, "kind"))


@dataclass
class GroupStore:
    """One store under a session root, at ``root/name``."""

    store_id: str
    name: str
    state_dir: str
    read_only: bool = False
    display_name: str = ""


@dataclass
class GroupConfig(MountSettings):
    """`memfs mount --session ID ROOT` / `--all ROOT`: several stores, one mount."""

    kind: str  # "session" | "all"
    root: str
    group_dir: str  # the group's own state: control socket, lock, group.json
    stores: list[GroupStore]
    session_id: str | None = None
    #: --all: where the state of a store that appears later goes
    cache_dir: str | None = None
    state_key: str | None = None
    read_only: bool = False  # --all --read-only: every store read-only
    #: --allow-partial: mount the stores that open even when others cannot
    allow_partial: bool = False

    @property
    def mountpoint(self) -> str:
        return self.root

    def store_config(self, store: GroupStore) -> MountConfig:
        settings = {f.name: getattr(self, f.name) for f in fields(MountSettings)}
        settings.update(
            options=replace(self.options, read_only=(store.read_only or self.read_only
                                                     or self.options.read_only)),
            local_only_patterns=list(self.local_only_patterns))
        return MountConfig(
            store_id=store.store_id, mountpoint=f"{self.root.rstrip('/')}/{store.name}",
            state_dir=store.state_dir, store_name=store.display_name, **settings)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "options": self.options.to_dict(),
                           "kind": self.kind, "group": True})

    @classmethod
    def from_json(cls, text: str) -> GroupConfig:
        d = cls._parsed(text, "group")
        d["stores"] = [GroupStore(**s) for s in d["stores"]]
        return cls(**d)


def config_from_json(text: str) -> MountConfig | GroupConfig:
    if json.loads(text).get("group"):
        return GroupConfig.from_json(text)
    return MountConfig.from_json(text)


def parse_metrics_addr(text: str) -> tuple[str, int]:
    """(host, port) of `--metrics-addr`: HOST:PORT, [IPv6]:PORT, :PORT or PORT. With
    no host, 127.0.0.1: serving the network must be asked for by naming its address.
    Raises ValueError with a one-line reason."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = "", text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{text!r}: give HOST:PORT, e.g. 127.0.0.1:9464") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"{text!r}: the port must be 0-65535")
    if any(c.isspace() or c in "/[]" for c in host):
        raise ValueError(f"{text!r}: not a host name or address")
    return host or "127.0.0.1", number


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
