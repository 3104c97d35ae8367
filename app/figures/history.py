"""The History page's figure: step time over wall time, from the step heartbeats (per minute)
and from each capture, with each capture's verdict on the same axis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from podscope.analyzers.history import named
from podscope.app.figures.hosts import median_band

#: Up to this many workers get a line each; a pod gets its median, its spread and its slowest.
LINES_PER_WORKER = 12
SLOWEST_DRAWN = 5
CULPRIT_RED = "#dc3545"
#: Marker per capture reason.
SYMBOLS = {
    "scheduled": "circle",
    "requested": "square",
    "rise": "triangle-up",
    "spread": "diamond",
    "manual": "circle-open",  # captured by hand (podscope capture, the Capture page)
}


def _time(unix_s: pd.Series | float) -> Any:
    if isinstance(unix_s, pd.Series):
        return pd.to_datetime(unix_s, unit="s", utc=True).dt.tz_convert(None)
    return datetime.utcfromtimestamp(float(unix_s))


def history_figure(
    entries: Sequence[Mapping[str, Any]],
    heartbeats: pd.DataFrame,
    changes: Mapping[str, str],
) -> go.Figure:
    """``entries``: history summaries, oldest first (``analyzers.history``); ``heartbeats``:
    ``collectors.watch.HEARTBEAT_COLUMNS`` rows; ``changes``: per session, what changed
    since the capture before it (the hover's last line). A capture's point carries its
    session (``customdata``): clicking it shows what changed there.

    Two axes: the heartbeats' step time (the loop's own, between ``step()`` calls) on the
    left, each capture's (from its trace, the profiler's cost included) on the right. On one
    axis a capture's "rose 166 %" sat beside a heartbeat trigger of "+939 %"."""
    fig = go.Figure()
    if len(heartbeats):
        # the heartbeats name workers by their agent's label; the captures say their tasks
        tasks = {w: t for e in entries for w, t in (e.get("tasks") or {}).items()}
        culprits = {w for e in entries for w in e.get("culprits") or ()}
        _heartbeat_lines(fig, heartbeats, tasks, culprits)
    _step_beats(fig, entries)
    for e in entries:
        window = e.get("window")
        if window:
            fig.add_vrect(
                x0=_time(window[0] / 1e9),
                x1=_time(window[1] / 1e9),
                fillcolor="#dc3545",
                opacity=0.12,
                line_width=0,
            )
    if entries:
        x = [_time(e["start_unix_s"]) for e in entries]
        y = [(e.get("metrics") or {}).get("step_time (p50)") for e in entries]
        color = [
            "#dc3545" if e["culprits"] else "#fd7e14" if e.get("top") else "#198754"
            for e in entries
        ]
        text = [_hover(e, changes.get(e["session"], "")) for e in entries]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="markers",
                name="captures: step time from the trace (click: what changed)",
                yaxis="y2",
                marker={
                    "size": 13,
                    "color": color,
                    "symbol": [SYMBOLS.get(e["reason"], "circle-open") for e in entries],
                    "line": {"width": 1, "color": "#212529"},
                },
                customdata=[e["session"] for e in entries],
                hovertext=text,
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Step time over wall time: heartbeats per minute, and each capture "
        "(▲ triggered, ● scheduled, ■ requested, ○ by hand; red: a culprit)",
        xaxis_title="time (UTC)",
        yaxis={"title": {"text": "heartbeat step time (ms)"}, "rangemode": "tozero"},
        yaxis2={
            "title": {"text": "capture step time, p50 from the trace (ms)"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "showgrid": False,
        },
        height=460,
        margin={"l": 10, "r": 10, "t": 60, "b": 40},
        legend={"orientation": "h", "y": -0.18},
        uirevision="history",
        hovermode="closest",
    )
    return fig


def _hover(e: Mapping[str, Any], changed: str) -> str:
    culprits = ", ".join(
        f"{named(e, w)}: {(e.get('causes') or {}).get(w) or 'cause unknown'}" for w in e["culprits"]
    )
    top = (e.get("top") or {}).get("title", "none")
    lines = [
        f"<b>{e['session']}</b> · {e.get('detail') or e['reason']}",
        f"culprit: {culprits or 'none'}",
        f"top finding: {top}",
    ]
    if changed:
        lines.append(f"changed: {changed}")
    return "<br>".join(lines)


def _heartbeat_lines(
    fig: go.Figure, hb: pd.DataFrame, tasks: Mapping[str, str], culprits: set[str]
) -> None:
    """One line per worker (a pod: its median, p5–p95 and slowest); a culprit of any capture
    drawn last, on top, in red (under the others' it was hidden)."""
    hb = hb.assign(t=_time(hb["minute_unix_s"].astype("float64")))
    workers = hb["worker"].astype(str).unique()

    def name(w: str) -> str:
        return named({"tasks": tasks}, w) + (", culprit" if w in culprits else "")

    if len(workers) <= LINES_PER_WORKER:
        for w in sorted(workers, key=lambda w: (w in culprits, name(w))):
            line = {"width": 3, "color": CULPRIT_RED} if w in culprits else {"width": 1.5}
            fig.add_trace(_worker_line(hb, w, name(w), line))
        return
    per_minute = hb.groupby("t")["median_ms"].agg(
        median="median", low=lambda s: s.quantile(0.05), high=lambda s: s.quantile(0.95)
    )
    median_band(
        fig,
        per_minute.index,
        (per_minute["low"], per_minute["median"], per_minute["high"]),
        band=f"{len(workers)} workers: p5–p95",
        median="median worker",
        color="#0d6efd",
        hover="%{x}: %{y:.1f} ms",
    )
    ratio = hb.assign(r=hb["median_ms"] / hb["t"].map(per_minute["median"]))
    slowest = ratio.groupby(ratio["worker"].astype(str))["r"].mean().nlargest(SLOWEST_DRAWN)
    for w in sorted(set(slowest.index) - culprits):
        fig.add_trace(_worker_line(hb, w, f"{name(w)}, slowest", {"width": 1, "dash": "dot"}))
    for w in sorted(culprits & set(workers)):
        fig.add_trace(_worker_line(hb, w, name(w), {"width": 3, "color": CULPRIT_RED}))


def _step_beats(fig: go.Figure, entries: Sequence[Mapping[str, Any]]) -> None:
    """Each watched capture's heartbeats before it, one point per step (the minute medians
    made an onset a minute-long ramp): where a trigger fired, the step it began at. The
    workers the capture names culprit (or its trigger names) in red, the others grey."""
    for e in entries:
        beats = e.get("beats") or {}
        marked = set(e.get("culprits") or ()) | set(e.get("trigger_workers") or ())
        for w in sorted(beats, key=lambda w: w in marked):  # the marked ones on top
            pairs = beats[w]
            name = named(e, w)
            fig.add_trace(
                go.Scatter(
                    x=_time(pd.Series([t for t, _ in pairs], dtype="float64")),
                    y=[ms for _, ms in pairs],
                    mode="lines+markers",
                    name=f"{name}: each step before {e['session']}",
                    legendgroup=f"steps-{e['session']}",
                    showlegend=w in marked,
                    line={"width": 1, "color": CULPRIT_RED if w in marked else "#adb5bd"},
                    marker={"size": 3},
                    hovertemplate=f"{name}<br>%{{x}}: %{{y:.1f}} ms (one step)<extra></extra>",
                )
            )


def _worker_line(hb: pd.DataFrame, worker: str, name: str, line: dict[str, Any]) -> go.Scatter:
    """One worker's median step time per minute."""
    mine = hb[hb["worker"].astype(str) == worker].sort_values("t")
    return go.Scatter(
        x=mine["t"],
        y=mine["median_ms"],
        mode="lines+markers",  # a watch shorter than two minutes has one point
        name=name,
        line=line,
        marker={"size": 5},
        hovertemplate=f"{name}<br>%{{x}}: %{{y:.1f}} ms (median of the minute)<extra></extra>",
    )
