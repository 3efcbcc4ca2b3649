"""One store's filesystem: its parts, put together, for the router (router.py) to mount.

A plain mount's router holds one `StoreFS`; a session root's holds one per store. The
parts share the store's `State` and blob cache; what they share besides (whether the
store is read-only, where its inode numbers start in the kernel) is set here once.
"""

from __future__ import annotations

from memfs.core.metrics import FuseTiming, StoreMetrics
from memfs.mount.marker import Marker
from memfs.mount.open_files import FastHandles, Fetch, OpenFiles
from memfs.mount.tree import Tree
from memfs.mount.versions import VersionsTree
from memfs.state.blobs import BlobCache
from memfs.state.state import State


class StoreFS:
    """The tree, the open files (and the shim's handles on them), and when given the
    marker and the versions tree.

    Args:
        fetch: async callable returning a clean file's content from the server.
        marker: the content of the store marker at the root (marker.py), or None.
        owner: (uid, gid) every entry is shown as owned by (`--uid`/`--gid`), or None.
        versions: the read-only `.memfs` tree (versions.py), or None for none.
        metrics: the store's counters (the engine shares its sync context's).
    """

    #: Each request's latency and errno, while the mount exports metrics (the engine sets it).
    timing: FuseTiming | None = None

    def __init__(self, state: State, cache: BlobCache, *, read_only: bool = False,
                 fetch: Fetch | None = None,
                 timeout: float = 300.0, marker: bytes | None = None,
                 owner: tuple[int, int] | None = None,
                 versions: VersionsTree | None = None,
                 metrics: StoreMetrics | None = None) -> None:
        self.state = state
        self.files = OpenFiles(state, cache, fetch=fetch, metrics=metrics)
        self.fast = FastHandles(self.files)
        self.marker = (None if marker is None
                       else Marker(marker, state, owner=owner, timeout=timeout))
        self.versions = versions
        self.tree = Tree(state, self.files, timeout=timeout, owner=owner,
                         marker=self.marker, versions=versions)
        self.read_only = read_only

    @property
    def read_only(self) -> bool:
        return self.tree.read_only

    @read_only.setter
    def read_only(self, read_only: bool) -> None:
        """A store archived under an `--all` mount turns read-only while mounted."""
        self.tree.read_only = self.files.read_only = read_only

    @property
    def ino_base(self) -> int:
        """Added to this store's inode numbers in the kernel (its slot, router.py)."""
        return self.files.ino_base

    @ino_base.setter
    def ino_base(self, base: int) -> None:
        self.files.ino_base = base

    def prime_fast_opens(self) -> None:
        """Every file is new to the kernel when the store is mounted (open_files.py)."""
        self.files.prime_fast_opens()
