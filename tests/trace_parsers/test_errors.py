"""Bad input: a typed error naming the file and the reason; good workers survive bad ones."""

from __future__ import annotations

import contextlib
import gzip
import os
from pathlib import Path

import pytest

from podscope.trace_parsers import TraceParseError, load
from tests.xspace_builder import SpaceBuilder


def good_capture() -> bytes:
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "python")
    for i in range(50):
        p.event(line, "train", i * 1000, 900, step_num=i, label=f"step {i}")
    return b.bytes()


GOOD = good_capture()
BAD_INPUTS = {
    "empty": (b"", "empty file"),
    "truncated": (GOOD[: len(GOOD) // 2], "truncated"),
    "truncated_by_one": (GOOD[:-1], "truncated"),
    "random": (os.urandom(0) + bytes((i * 7919 + 13) % 251 for i in range(4096)), ""),
    "gzip_corrupt": (gzip.compress(GOOD)[:40] + b"\x00" * 40, "gzip"),
    "gzip_truncated": (gzip.compress(GOOD)[:-20], "gzip"),
    "json_text": (b'{"traceEvents": []}', ""),
    "png": (b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, ""),
    "zeros": (b"\x00" * 100, ""),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_file_raises_typed_error_naming_file(tmp_path: Path, name: str) -> None:
    data, reason = BAD_INPUTS[name]
    path = tmp_path / f"w_{name}.xplane.pb"
    path.write_bytes(data)
    with pytest.raises(TraceParseError) as err:
        load(path, cache=False)
    assert err.value.path == str(path)
    assert str(path) in str(err.value)
    assert reason in err.value.reason
    assert err.value.reason  # never empty


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233])
def test_every_truncation_is_an_error_or_a_prefix(tmp_path: Path, cut: int) -> None:
    """Cutting anywhere gives TraceParseError (never a crash or a DecodeError)."""
    path = tmp_path / "w.xplane.pb"
    path.write_bytes(GOOD[: len(GOOD) - cut])
    with pytest.raises(TraceParseError):
        load(path, cache=False)


def test_byte_flips_never_escape_as_other_exceptions(tmp_path: Path) -> None:
    path = tmp_path / "w.xplane.pb"
    for i in range(0, len(GOOD), max(1, len(GOOD) // 300)):
        data = bytearray(GOOD)
        data[i] ^= 0xFF
        path.write_bytes(bytes(data))
        with contextlib.suppress(TraceParseError):
            load(path, cache=False)


def test_folder_with_one_bad_worker_loads_the_others(tmp_path: Path) -> None:
    (tmp_path / "h_1.xplane.pb").write_bytes(GOOD)
    (tmp_path / "h_2.xplane.pb").write_bytes(GOOD[:100])
    (tmp_path / "h_3.xplane.pb").write_bytes(GOOD)
    frames = load(tmp_path, cache=False)
    assert sorted(frames.workers["worker"].astype(str)) == ["h_1", "h_3"]
    assert len(frames.events) == 100
    assert [Path(f.path).name for f in frames.failures] == ["h_2.xplane.pb"]  # type: ignore[attr-defined]


def test_folder_where_every_worker_is_bad_lists_each_reason(tmp_path: Path) -> None:
    (tmp_path / "h_1.xplane.pb").write_bytes(b"")
    (tmp_path / "h_2.xplane.pb").write_bytes(b"junk junk")
    with pytest.raises(TraceParseError) as err:
        load(tmp_path, cache=False)
    assert "h_1.xplane.pb: empty file" in err.value.reason and "h_2.xplane.pb" in err.value.reason


def test_missing_path_and_unknown_session(tmp_path: Path) -> None:
    with pytest.raises(TraceParseError, match="no such file"):
        load(tmp_path / "nope", cache=False)
    run = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    (run / "h_1.xplane.pb").write_bytes(GOOD)
    with pytest.raises(TraceParseError, match="known: 2026_01_01_00_00_00"):
        load(tmp_path, session="2025", cache=False)
    assert len(load(tmp_path, cache=False).events) == 50


def test_session_folder_files_that_are_not_captures_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "h_1.xplane.pb").write_bytes(GOOD)
    (tmp_path / "capture.json").write_text('{"session": "s", "workers": []}')
    (tmp_path / "ALL_HOSTS.op_stats_v2.pb").write_bytes(b"\x0a\x00")
    frames = load(tmp_path, cache=False)
    assert frames.workers["worker"].tolist() == ["h_1"] and not frames.failures


def test_deeply_nested_json_is_a_typed_error(tmp_path: Path) -> None:
    """json nests one C call per level: 200,000 brackets raised RecursionError."""
    chrome = tmp_path / "trace.json"
    chrome.write_bytes(b'{"traceEvents": ' + b"[" * 200_000)
    with pytest.raises(TraceParseError) as err:
        load(chrome, cache=False)
    assert "nested too deeply" in err.value.reason or "not valid" in err.value.reason
    html = tmp_path / "trace.html"
    html.write_bytes(
        b'<html><script class="trace-data" type="application/text">'
        + b"[" * 200_000
        + b"</script></html>"
    )
    with pytest.raises(TraceParseError):  # the unreadable JSON block is counted, no trace left
        load(html, cache=False)


class VersionError(Exception):
    """Stands for ``google.protobuf.runtime_version.VersionError`` (protobuf 5 and 6)."""


@pytest.mark.parametrize(
    "refusal",
    [
        VersionError("Detected mismatched Protobuf Gencode/Runtime major versions"),
        ImportError("cannot import name 'runtime_version' from 'google.protobuf'"),  # 4.x
    ],
    ids=["protobuf 5-6", "protobuf 4"],
)
def test_a_perfetto_trace_under_an_old_protobuf_says_which_protobuf_it_needs(
    monkeypatch: pytest.MonkeyPatch, refusal: Exception
) -> None:
    """A training image may pin protobuf < 6.31.1, which the perfetto package's code refuses:
    the parse says so in one line, naming the file (no traceback of protobuf's)."""
    import builtins

    from podscope.trace_parsers.perfetto import OLD_PROTOBUF, parse_perfetto

    real_import = builtins.__import__

    def refusing(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("perfetto.protos"):
            raise refusal
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", refusing)
    with pytest.raises(TraceParseError, match=r"need protobuf >= 6\.31\.1") as err:
        parse_perfetto(b"\n\x00", worker="w", source="phone.perfetto-trace")
    assert "phone.perfetto-trace" in str(err.value) and OLD_PROTOBUF[:40] in str(err.value)
