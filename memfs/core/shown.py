"""Text a server gave, as it may be printed: on a terminal a control character in a store's
name or an error message is a command (ESC [2J clears the screen, OSC sets the title, a
newline forges an `Error:` line of its own, U+202E turns the line around). Each such
character is shown escaped (``\\x1b``), and a message past its length is cut."""

from __future__ import annotations

import unicodedata


def shown(text: object, limit: int = 300) -> str:
    text = str(text)  # every log line comes here: a printable one (most) is left whole
    out = text if text.isprintable() else "".join(_escaped(ch) for ch in text)
    return out if len(out) <= limit else out[:limit] + "…"


def _escaped(ch: str) -> str:
    if ch == " " or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp"):
        return ch
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
