"""What a capture file is, from its first bytes: each format's content sniffer (standard
library only, so a file's format is known before any parser, pandas or numpy is imported)."""

from __future__ import annotations

import re
import zlib


def plain(head: bytes) -> bytes | None:
    """A file's first bytes, gunzipped when they are gzip's (None: broken gzip)."""
    if head[:2] != b"\x1f\x8b":
        return head
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 65536)
    except zlib.error:
        return None


#: JSON text's start: an object or array whose first member begins (a protobuf stream that
#: begins with field 1 has 0x0a, a newline, first: a JSON file may too).
_JSON_START = re.compile(rb"\s*[\[{]\s*[\"{\[\]}]")


def proto_kind(head: bytes) -> str | None:
    """``xplane`` or ``perfetto`` for a protobuf stream (either may be gzip-compressed): an
    XSpace's first plane names itself ("/host:CPU", "/device:…", "Task Environment"), a
    Perfetto trace's first packet does not."""
    unzipped = plain(head)
    if unzipped is None or unzipped[:1] != b"\x0a" or _JSON_START.match(unzipped):
        return None
    window = unzipped[:4096]
    for marker in (b"/host:", b"/device:", b"Task Environment", b"/host:metadata"):
        k = window.find(marker)
        if 0 < k < 64 and window[k - 2 : k - 1] == b"\x12":
            return "xplane"
    return "perfetto"


def looks_like_xplane(head: bytes) -> bool:
    return proto_kind(head) == "xplane"


def looks_like_perfetto(head: bytes) -> bool:
    return proto_kind(head) == "perfetto" or head[:4] == b"\x28\xb5\x2f\xfd"


def looks_like_kineto(head: bytes) -> bool:
    """A JSON object whose first keys are Kineto's (``schemaVersion`` leads its header)."""
    text = head.lstrip()[:2048]
    return text.startswith(b"{") and b'"schemaVersion"' in text


def looks_like_atrace(head: bytes) -> bool:
    """Content sniffing: ftrace text, ``TRACE:`` + zlib, or systrace HTML."""
    text = head[:4096].lstrip()
    return (
        text.startswith((b"# tracer:", b"TRACE:"))
        or b"tracing_mark_write" in text
        or (
            text[:15].lower().startswith((b"<!doctype html", b"<html"))
            and (b"linuxPerfData" in head or b"trace-data" in head)
        )
    )


def looks_like_chrome_json(head: bytes) -> bool:
    text = head.lstrip()[:4096]
    return text.startswith(b"[") or (
        text.startswith(b"{") and (b'"traceEvents"' in head or b'"systemTraceEvents"' in head)
    )
