"""The `memfs` command line."""
