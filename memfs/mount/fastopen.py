"""Fast opens: warm read-only opens answered in C, below pyfuse3 (memfs/_fastopen.c).

A warm `grep -r` otherwise costs OPEN, FLUSH and RELEASE per file, each a trip through
pyfuse3's trio loop into a Python handler, while the bytes already sit in the page cache.
The shim answers OPEN (keep_cache, no FLUSH on close) and RELEASE itself for inodes marked
*fast* here, and hands every other request to pyfuse3 unchanged.

The contract with the handlers (memfs/mount/open_files.py) is one rule: an inode is in the set
only while a read-only open of it would be answered exactly as the shim answers it, i.e.
Python's last read-only open of it kept the cache and nothing about its content has changed
since. So `OpenFiles.open` adds an inode after such an answer, and every change of content,
every local writer, unlink and rename-over discards it first (`State.on_content`,
`OpenFiles.unfast`). Reads and fsyncs on a fast handle (``FAST_BIT | inode``) reach Python
(the router decodes them) and act by inode: reads happen only after the kernel dropped the
cached pages.

This module must be imported before pyfuse3 (it loads the library with RTLD_GLOBAL, so that
pyfuse3's fuse_session_new binds to the shim's); the memfs.mount package imports it first.
Whether it took effect is known only after `pyfuse3.init`: `active()`. If it did not (no
compiler at install time, MEMFS_FAST_OPEN=0, pyfuse3 already imported), add/discard do
nothing useful and every open goes through Python, exactly as before.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)

FAST_BIT = 1 << 62
"""Set in the file handle of an open the shim answered; the rest is the kernel inode."""

ENV = "MEMFS_FAST_OPEN"


def _library_path() -> Path | None:
    here = Path(__file__).parent.parent  # setup.py builds it as memfs._fastopen
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = here / f"_fastopen{suffix}"
        if candidate.exists():
            return candidate
    return None


def _load() -> tuple[ctypes.CDLL | None, str]:
    if os.environ.get(ENV, "1") == "0":
        return None, f"off ({ENV}=0)"
    path = _library_path()
    if path is None:
        return None, "off (memfs/_fastopen was not built: no C compiler or libfuse3 headers?)"
    try:
        lib = ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as exc:
        return None, f"off (cannot load {path.name}: {exc})"
    for name, res, args in (("memfs_fast_add", ctypes.c_int, [ctypes.c_uint64]),
                            ("memfs_fast_has", ctypes.c_int, [ctypes.c_uint64]),
                            ("memfs_fast_discard", None, [ctypes.c_uint64]),
                            ("memfs_fast_clear", None, []),
                            ("memfs_fast_count", ctypes.c_size_t, []),
                            ("memfs_fast_answered", ctypes.c_uint64, []),
                            ("memfs_fastopen_active", ctypes.c_int, [])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib, "loaded"


_preimported = "pyfuse3" in sys.modules  # then pyfuse3 is bound to libfuse's own symbols
_lib, _why = _load()
if _lib is not None:
    add = _lib.memfs_fast_add
    has = _lib.memfs_fast_has
    discard = _lib.memfs_fast_discard
    clear = _lib.memfs_fast_clear
    count = _lib.memfs_fast_count
else:
    def add(ino: int) -> int:
        return -1

    def has(ino: int) -> int:
        return 0

    def discard(ino: int) -> None:
        return None

    def clear() -> None:
        return None

    def count() -> int:
        return 0


#: Reads that reached Python on a fast handle (the kernel had dropped the pages), and
#: fsyncs (always Python's: they make the file's content power-safe).
reads = 0
fsyncs = 0


def active() -> bool:
    """True once pyfuse3's session was created through the shim (after `pyfuse3.init`)."""
    return bool(_lib is not None and _lib.memfs_fastopen_active())


def describe() -> str:
    """One line for the log and `memfs status`: on, or off and why."""
    if active():
        return "on"
    if _lib is None:
        return _why
    if _preimported:
        return "off (pyfuse3 was imported before memfs.mount.fastopen)"
    return "off (no FUSE session made through it yet, or an unknown pyfuse3 op table)"


def stats() -> dict:
    """For `memfs status --json`: whether the shim is on, and what it did."""
    return {"state": describe(),
            "answered_opens": int(_lib.memfs_fast_answered()) if _lib is not None else 0,
            "fast_inodes": int(count()), "reads": reads, "fsyncs": fsyncs}
