"""Numbers as people read them: durations in ns/µs/ms/s, shares in %, bytes in MiB/GiB,
bandwidth in GB/s, and grid columns with readable titles and formatted cells.

    >>> fmt_duration(12_345)          # ns in
    '12.3 µs'
    >>> fmt_value(0.768, "share")
    '76.8 %'
    >>> grid_columns(["op_name", "self_ms", "self_share"], pinned="op_name")[2]["headerName"]
    'self share'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd


def fmt_number(value: float, decimals: int = 3) -> str:
    """``1,234.500``; a value that rounds to zero is ``0.000``, never ``-0.000``."""
    text = f"{value:,.{decimals}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def fmt_duration(ns: float) -> str:
    """``950 ns``, ``12.3 µs``, ``400 µs``, ``4.560 ms``, ``1.234 s``."""
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.3g} µs" if ns < 100_000 else f"{ns / 1e3:.0f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e9:.3f} s"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 worker``, ``3 workers``, ``1,200 steps``; ``many`` for irregular plurals."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def first_of(items: Any, shown: int) -> Any:
    """A ``", "``-separated list cut to its first ``shown`` items and how many more there are
    (anything else as it is): a grid cell's share of a list the table's download has whole.

    >>> first_of("a ×2 8 B, b ×1 4 B, c ×1 2 B", 2)
    'a ×2 8 B, b ×1 4 B, … 1 more'
    """
    names = items.split(", ") if isinstance(items, str) and items else []
    if len(names) <= shown:
        return items
    return ", ".join(names[:shown]) + f", … {len(names) - shown:,} more"


def fmt_share(x: float) -> str:
    """``76.8 %``; ``0.04 %`` keeps two decimals below 1 %."""
    pct = 100 * x
    return f"{pct:.2f} %" if 0 < abs(pct) < 1 else f"{pct:.1f} %"


def fmt_bytes(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``12.3 MiB``, ``15.75 GiB``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}" if unit == "GiB" else f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_value(value: float, unit: str) -> str:
    """A finding's value in its unit (``analyzers.diagnostics.base.UNITS``)."""
    if unit == "share":
        return fmt_share(value)
    if unit == "us":
        return fmt_duration(value * 1000)
    if unit == "per_step":
        return f"{value:,.1f} per step"
    if unit == "flag":
        return "yes" if value else "no"
    if unit == "ratio":
        return f"{value:,.2f}×"
    if unit == "of_step":
        return f"{value:,.2f}× the median step"
    if unit == "bytes_per_step":
        return f"{fmt_bytes(value)} per step"
    if unit == "workers":
        return f"{value:,.0f} worker{'' if value == 1 else 's'}"
    return f"{value:,.0f}"


# --------------------------------------------------------------------------- grid columns

#: Readable titles of frame columns shown in grids.
TITLES = {
    "op_name": "op",
    "op_type": "op type",
    "self_ms": "self time (ms)",
    "self_per_step_ms": "self time per step (ms)",
    "total_ms": "total time (ms)",
    "avg_ms": "mean (ms)",
    "min_ms": "min (ms)",
    "max_ms": "max (ms)",
    "p50_ms": "p50 (ms)",
    "p95_ms": "p95 (ms)",
    "self_share": "self share",
    "cumulative_share": "cumulative share",
    "self_time_percent": "% of device time",
    "xla_time_share": "share of XLA op time",
    "above_peak": "above the device's peak (its peak or cost is wrong)",
    "eager_share": "eager share",
    "flops": "FLOPs",
    "bytes_accessed": "bytes accessed",
    "flops_per_s": "FLOP/s",
    "bytes_per_s": "bandwidth",
    "intensity": "FLOP per byte",
    "tc_eligible": "Tensor Core eligible",
    "tensor_core": "uses Tensor Cores",
    "step_ms": "step time (ms)",
    "step_time_ms": "step time (ms)",
    "std_ms": "std (ms)",
    "straggler_score": "lateness (× median step)",
    "base_us": "baseline (µs)",
    "new_us": "new (µs)",
    "delta": "change",
    "change": "change (%)",
    "dur_ms": "duration (ms)",
    "hlo_op_name": "XLA op",
    "total_self_time_us": "self time (µs)",
    "avg_time_us": "mean time (µs)",
    "model_flop_rate_gflops": "GFLOP/s",
    "measured_flop_rate_gflops": "GFLOP/s at the device's rate",
    "memory_bw_gibs": "memory bandwidth (GiB/s)",
    "hbm_bw_gibs": "HBM bandwidth (GiB/s)",
    "operational_intensity": "FLOP per byte",
    "bound_by": "bound by",
    "roofline_efficiency": "of its roof",
    "compute_dtype": "computes in",
    "framework_op": "framework op",
    "program_id": "program id",
}

_NULL = "params.value == null ? '' : "
#: dash-ag-grid value formatters (d3-format is in its function namespace).
_SHARE = {"function": _NULL + "d3.format('.1%')(params.value)"}
_MS = {"function": _NULL + "d3.format(',.3f')(params.value)"}
_COUNT = {"function": _NULL + "d3.format(',')(params.value)"}
_SI = {"function": _NULL + "d3.format('.3~s')(params.value)"}
_GBPS = {"function": _NULL + "d3.format(',.1f')(params.value / 1e9) + ' GB/s'"}
_FLOPS = {"function": _NULL + "d3.format('.3~s')(params.value) + 'FLOP/s'"}
_NUMBER = {"function": _NULL + "d3.format(',.3~f')(params.value)"}
_BYTES = {"function": _NULL + "d3.format('.3~s')(params.value) + 'B'"}
_GBPS_VALUE = {"function": _NULL + "d3.format(',.1f')(params.value) + ' GB/s'"}
_PERCENT = {"function": _NULL + "d3.format(',.2f')(params.value) + ' %'"}


#: Any other number: integers as they are (grouped), other floats to 4 significant digits.
_ANY = {
    "function": "typeof params.value !== 'number' ? params.value : "
    "Number.isInteger(params.value) ? d3.format(',')(params.value) : "
    "d3.format(',.4~r')(params.value)"
}


def _formatter(column: str) -> dict[str, str] | None:
    if column.endswith("_share") or column == "share":
        return _SHARE
    if column.endswith("_percent"):  # already ×100 (XProf's percentages)
        return _PERCENT
    if column.endswith(("_ms", "_us")) or "_ms_per_" in column:
        return _MS
    if column in (
        "occurrences",
        "steps",
        "workers",
        "count",
        "n",
        "calls",
        "invokes",
        "participants",
        "measured",
        "late_steps",
        "live_at_peak",
        "variables",
        "reads",
        "updates",
        "sends",
    ):
        return _COUNT
    if column in ("flops", "bytes_accessed"):
        return _SI
    if column.endswith("bytes") or column.endswith("bytes_per_step"):
        return _BYTES
    if column.endswith("_gbps"):
        return _GBPS_VALUE
    if column == "roofline_efficiency":
        return _SHARE
    if column.endswith(("_gflops", "_gibs")):
        return {"function": _NULL + "d3.format(',.1f')(params.value)"}
    if column == "bytes_per_s":
        return _GBPS
    if column == "flops_per_s":
        return _FLOPS
    if column in (
        "intensity",
        "score",
        "straggler_score",
        "lateness",
        "delta",
        "fragmentation_at_peak",
    ):
        return _NUMBER
    return _ANY


def grid_columns(
    columns: Iterable[str], pinned: str | None = None, markdown: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """AG Grid column definitions: a readable title, numbers formatted with their unit and
    right-aligned, ``pinned`` kept on the left, ``markdown`` columns rendered as links."""
    links = set(markdown)
    out = []
    for c in columns:
        title = TITLES.get(c, c.replace("_", " "))
        if c.endswith("_at_ms") and c not in TITLES:
            title = c.removesuffix("_at_ms").replace("_", " ") + " at (ms since the session start)"
        col: dict[str, Any] = {"field": c, "headerName": title}
        fmt = _formatter(c)
        if fmt is _ANY:
            col["valueFormatter"] = fmt  # text stays text, left-aligned
        elif fmt is not None:
            col["valueFormatter"] = fmt
            col["type"] = "rightAligned"
        if c == pinned:
            col["pinned"] = "left"
        if c in links:
            col["cellRenderer"] = "markdown"
        out.append(col)
    return out


def fmt_evidence(key: str, value: Any) -> Any:
    """An evidence value as text by what its key says it is (``…share…`` %, ``…_ms`` ms,
    ``…_us`` µs, ``…bytes…``/``memory_size`` MiB/GiB); mappings and lists item by item."""
    if isinstance(value, dict):
        return {str(k): fmt_evidence(key, v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [fmt_evidence(key, v) for v in value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if "share" in key:
        return fmt_share(value)
    if key.endswith("_ms"):
        return f"{value:,.3f} ms"
    if key.endswith("_us"):
        return fmt_duration(value * 1000)
    if "bytes" in key or key == "memory_size":
        return fmt_bytes(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def in_ms(frame: pd.DataFrame, origin: int | None = None) -> pd.DataFrame:
    """``*_ns`` / ``*_ps`` duration columns → ``*_ms`` (3 decimals). Instants (``start_ns``,
    ``*_start_ns``, ``*_t_ns``) become ``*_at_ms``, ms since ``origin`` (the session start),
    when it is given; else they are kept in ns."""
    out = frame.copy()
    for col in list(out.columns):
        for suffix, scale in (("_ns", 1e6), ("_ps", 1e9)):
            if not col.endswith(suffix):
                continue
            instant = col.startswith("start") or col.endswith(("t_ns", "start_ns"))
            if instant and origin is None:
                continue
            values = pd.to_numeric(out.pop(col), errors="coerce")
            if instant:
                name = col.removesuffix("_ns").removesuffix("_t")
                out[name + "_at_ms"] = ((values - origin) / 1e6).round(3)
            else:
                out[col.removesuffix(suffix) + "_ms"] = (values / scale).round(3)
    return out
