"""Numbers with units and grid columns with readable titles."""

from __future__ import annotations

from podscope.app.units import (
    first_of,
    fmt_bytes,
    fmt_duration,
    fmt_evidence,
    fmt_share,
    fmt_value,
    grid_columns,
)


def test_durations_shares_bytes_and_finding_values() -> None:
    assert [fmt_duration(x) for x in (950, 12_345, 400_000, 4_560_000, 1.5e9)] == [
        "950 ns",
        "12.3 µs",
        "400 µs",
        "4.560 ms",
        "1.500 s",
    ]
    assert (
        fmt_share(0.768) == "76.8 %" and fmt_share(0.0004) == "0.04 %" and fmt_share(0) == "0.0 %"
    )
    assert fmt_bytes(512) == "512 B" and fmt_bytes(3 * 2**20) == "3.0 MiB"
    assert fmt_bytes(15.75 * 2**30) == "15.75 GiB"
    assert fmt_value(0.768, "share") == "76.8 %"
    assert fmt_value(20_900.0, "count") == "20,900"
    assert fmt_value(52.34, "us") == "52.3 µs"
    assert fmt_value(12.46, "per_step") == "12.5 per step"
    assert fmt_value(1.0, "flag") == "yes"


def test_evidence_by_key() -> None:
    shown = fmt_evidence("gap_share_by_worker", {"w0": 0.0925, "w1": 0.1})
    assert shown == {"w0": "9.2 %", "w1": "10.0 %"}
    assert fmt_evidence("eager_ms", 1.23456) == "1.235 ms"
    assert fmt_evidence("peak_bytes", {"w0 GPU_0_bfc": 2.5 * 2**30}) == {"w0 GPU_0_bfc": "2.50 GiB"}
    assert fmt_evidence("calls", 1200) == "1,200" and fmt_evidence("mode", "sync") == "sync"


def test_grid_columns_titles_formats_and_pins() -> None:
    cols = grid_columns(["op_name", "self_ms", "self_share", "timeline"], "op_name", ["timeline"])
    assert [c["headerName"] for c in cols] == ["op", "self time (ms)", "self share", "timeline"]
    assert cols[0]["pinned"] == "left" and "type" not in cols[0]  # text: left-aligned, as is
    assert (
        "typeof params.value !== 'number' ? params.value" in cols[0]["valueFormatter"]["function"]
    )
    other = grid_columns(["transfer_ms_per_step", "peak_at_ms", "anything"])
    assert "',.3f'" in other[0]["valueFormatter"]["function"]  # 0.062918 → 0.063
    assert other[1]["headerName"] == "peak at (ms since the session start)"
    assert "',.4~r'" in other[2]["valueFormatter"]["function"]  # no float shown unrounded
    assert "d3.format('.1%')" in cols[2]["valueFormatter"]["function"]
    assert cols[1]["type"] == "rightAligned" and cols[3]["cellRenderer"] == "markdown"


def test_a_long_list_shows_its_first_items_and_how_many_more() -> None:
    blocks = ", ".join(f"op_{i} [4,384,1] half ×1 3,072 B" for i in range(40))
    assert first_of(blocks, 5) == (
        ", ".join(f"op_{i} [4,384,1] half ×1 3,072 B" for i in range(5)) + ", … 35 more"
    )  # shapes' and numbers' commas are not separators
    assert first_of("a, b", 5) == "a, b" and first_of("", 5) == ""
    nan = float("nan")
    assert first_of(nan, 5) is nan and first_of(None, 5) is None
