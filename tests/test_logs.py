"""memfs.local.logs: the size-rotated, private log files of `memfs serve` and the mount daemon."""

from __future__ import annotations

import json
import logging
import logging.handlers
import stat

import pytest

from memfs.local import logs


@pytest.fixture
def root_logger():
    """Restore the root logger after a test reconfigures it."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        yield root
    finally:
        for h in root.handlers:
            if h not in saved[0]:
                h.close()
        root.handlers[:], root.level = saved[0], saved[1]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_rotates_by_size_and_stays_private(tmp_path, root_logger, fmt):
    path = tmp_path / "sub" / "x.log"
    logs.configure(level=logging.INFO, log_file=path, fmt=fmt, max_bytes=2048, backups=2)
    log = logging.getLogger("memfs.test")
    for i in range(200):
        log.info("line %d %s", i, "é" * 20)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("with a traceback")
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["x.log", "x.log.1", "x.log.2"]  # bounded: never more files
    for p in path.parent.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
        assert p.stat().st_size <= 2048 + 400
    text = path.read_text()
    if fmt == "json":
        recs = [json.loads(line) for line in text.splitlines()]
        assert recs[-1]["level"] == "ERROR" and "ValueError: boom" in recs[-1]["exc"]
        assert {"ts", "level", "logger", "msg"} <= set(recs[0])
    else:
        assert "Traceback" in text and "memfs.test" in text


def test_daemon_log_rotates(tmp_path, root_logger, monkeypatch):
    """The mount daemon's daemon.log goes through the same rotating handler."""
    pytest.importorskip("pyfuse3")
    from memfs.mount.daemon import setup_logging

    monkeypatch.setenv("MEMFS_LOG_FORMAT", "json")
    setup_logging(tmp_path, foreground=False)
    (handler,) = root_logger.handlers
    assert isinstance(handler, logging.handlers.RotatingFileHandler)
    assert handler.maxBytes == logs.DEFAULT_MAX_BYTES and handler.backupCount > 0
    logging.getLogger("memfs.mount.daemon").warning("hello")
    handler.flush()
    line = (tmp_path / "daemon.log").read_text().splitlines()[-1]
    assert json.loads(line)["msg"] == "hello"
    assert stat.S_IMODE((tmp_path / "daemon.log").stat().st_mode) == 0o600


def test_unknown_format_is_refused():
    with pytest.raises(ValueError):
        logs.formatter("xml")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_servers_text_cannot_drive_a_terminal_or_forge_a_line(tmp_path, root_logger, fmt):
    """A store's name (the server's text) with an escape sequence and a newline: one
    line in the log, every control character shown escaped; a traceback stays whole."""
    path = tmp_path / "x.log"
    logs.configure(level=logging.INFO, log_file=path, fmt=fmt)
    log = logging.getLogger("memfs.test")
    log.warning("store %s", "evil\x1b]0;owned\x07\n2026-01-01 FAKE line")
    try:
        raise ValueError("boom \x1b]0;PWNED\x07 from the server")
    except ValueError:
        log.exception("with a traceback")
    text = path.read_text()
    assert "\x1b" not in text and "\x07" not in text
    first = text.splitlines()[0]
    assert "FAKE line" in first
    if fmt == "text":
        assert first.endswith("store evil\\x1b]0;owned\\x07\\x0a2026-01-01 FAKE line")
        assert "\nTraceback (most recent call last):\n" in text
