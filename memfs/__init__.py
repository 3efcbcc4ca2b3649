"""memfs: mount Memory Stores as filesystems."""

__version__ = "0.1.0"
