"""Request bodies of `memfs serve`: how large each route's may be, and strict JSON.

Python's ``json`` turns a body into objects worth up to ~26 times its size
(``[{},{},…]``) and recurses once per nesting level, so a body is bounded
three ways before and while it is parsed:

* **Size, per route, before reading.** No body of this API needs more than a
  memory's 102,400 content bytes plus its envelope. JSON escapes may take six
  bytes per content byte (``\\u0001``), so memory writes and session creates
  may send 1 MiB; store writes 128 KiB; every other route (archive, redact,
  delete, reads: no body, or ``{}``) 16 KiB. A larger ``content-length`` is
  refused before a byte of the body is read, a chunked body as soon as it
  passes the bound.
* **Shape, before parsing.** A scan with the strings blanked out counts the
  values (commas and colons) and the nesting depth: at most
  :data:`MAX_VALUES` values and :data:`MAX_DEPTH` levels, so what the parser
  builds stays within a few times the body's size.
* **Numbers.** ``NaN`` and ``Infinity`` (and a float that overflows to it,
  ``1e999``) are not JSON: answers that echo them would not be either.

Large bodies are parsed in a worker thread (:func:`parse_body` is plain and
blocking), so no other request waits on a parse.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from memfs.server.db import ApiError

KIB = 1024
MIB = 1024 * KIB

#: Body bounds by kind of route (bytes as received, chunked or not).
MEMORY_WRITE_BODY_MAX = 1 * MIB  # 102,400 content bytes, escaped at worst 6x, + path
SESSION_CREATE_BODY_MAX = 1 * MIB  # a 64 Ki-character system prompt, tools, 8 resources
STORE_WRITE_BODY_MAX = 128 * KIB  # name 255, description 1,024, 16 × (64 + 512) metadata
OTHER_BODY_MAX = 16 * KIB  # no body, {} or a test control's small object

#: Nesting levels (objects and arrays) a body may have: real bodies use under 10.
MAX_DEPTH = 32
#: JSON values (roughly: commas and colons + 1) in one body.
MAX_VALUES = 20_000
#: Bodies at least this large are parsed in a worker thread.
THREAD_PARSE_MIN = 32 * KIB

# A JSON string, escapes included (unrolled). An unterminated one runs to the end
# instead of failing: a failed match from each of N escaped quotes (`"\"\"\"…`)
# would rescan the rest every time, N² steps.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_KEEP_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN = frozenset(b"[{")


class BodyRefused(ApiError):
    """A body refused for its size or shape: ``reason`` is the metrics label."""

    def __init__(self, status: int, etype: str, message: str, reason: str) -> None:
        super().__init__(status, etype, message)
        self.reason = reason


def too_large(limit: int) -> BodyRefused:
    return BodyRefused(413, "request_too_large",
                       f"request body is too large for this route (at most {limit} bytes)",
                       "too_large")


class _NotFinite(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _check_shape(data: bytes) -> None:
    """Count values and nesting with every string blanked out (a bracket or a
    comma inside a string is text, not structure)."""
    skeleton = _STRING.sub(b'""', data)
    brackets = skeleton.translate(None, _KEEP_BRACKETS)
    # Every object or array is a value too: `[][][]…` has no comma at all.
    if skeleton.count(b",") + skeleton.count(b":") + len(brackets) // 2 >= MAX_VALUES:
        raise BodyRefused(400, "invalid_request_error",
                          f"request body holds more than {MAX_VALUES} JSON values", "values")
    depth = 0
    for byte in brackets:
        if byte in _OPEN:
            depth += 1
            if depth > MAX_DEPTH:
                raise BodyRefused(400, "invalid_request_error",
                                  f"request body nests deeper than {MAX_DEPTH} levels", "depth")
        else:
            depth -= 1


def parse_body(data: bytes) -> Any:
    """The body as JSON (None when empty); 400 for anything that is not strict,
    bounded JSON."""
    if not data.strip():
        return None
    _check_shape(data)
    try:
        # UTF-8 only (RFC 8259, 8.1): json.loads of bytes would also take UTF-16 and -32.
        return json.loads(data.decode("utf-8"), parse_constant=_refuse_constant,
                          parse_float=_finite_float)
    except _NotFinite:
        raise BodyRefused(400, "invalid_request_error",
                          "request body holds NaN or Infinity, which are not JSON numbers",
                          "not_finite") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BodyRefused(400, "invalid_request_error", "request body is not valid JSON",
                          "not_json") from None
