"""The FUSE mount: the daemon, one engine per store, the request handlers."""
