"""The FUSE mount: the daemon, one engine per store, the router and its parts.

Importing any module of this package loads the fast-open shim first (fastopen.py): the
parts import pyfuse3, which must bind to the shim's symbols.
"""

from memfs.mount import fastopen  # noqa: F401
