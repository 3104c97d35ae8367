"""Diagnostics: findings ranked by severity and time at stake, each with its evidence."""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
import plotly.graph_objects as go
from dash import dcc, html

from podscope.analyzers.diagnostics import Finding
from podscope.app.figures.margins import reserve
from podscope.app.pages._common import card, device_summary, load_session
from podscope.app.units import fmt_evidence, fmt_value

dash.register_page(__name__, path="/diagnostics", name="Diagnostics", order=4)

COLOR = {"high": "danger", "moderate": "warning", "none": "success"}


#: Evidence of more items than this (a pod's workers) shows its largest.
EVIDENCE_ROWS = 20


def evidence_figure(f: Finding) -> go.Figure | None:
    """A small bar chart of the first per-worker (or per-item) evidence mapping, if any."""
    for key, value in f.evidence.items():
        if (
            isinstance(value, dict)
            and value
            and all(isinstance(v, int | float) for v in value.values())
        ):
            total = len(value)
            if total > EVIDENCE_ROWS:  # a pod: its largest, not 512 bars
                value = dict(sorted(value.items(), key=lambda kv: -abs(kv[1]))[:EVIDENCE_ROWS])
            fig = go.Figure(
                go.Bar(
                    x=list(value.values()),
                    y=[str(k)[:60] for k in value],
                    orientation="h",
                    marker_color="#4c78a8",
                )
            )
            unit = (
                {"tickformat": ".0%"}
                if "share" in key
                else {"ticksuffix": " µs" if key.endswith("_us") else " ms"}
                if key.endswith(("_us", "_ms"))
                else {}
            )
            fig.update_xaxes(**unit)
            fig.update_layout(
                title=key.removesuffix("_us").removesuffix("_ms").replace("_", " ")
                + (f" ({len(value)} largest of {total})" if total > len(value) else ""),
                height=100 + 24 * len(value),
                margin={"l": 10, "r": 10, "t": 40, "b": 20},
            )
            return reserve(fig)
    return None


def finding_card(f: Finding, session: str) -> Any:
    link = f"{f.page}{'&' if '?' in f.page else '?'}session={session}"
    fig = evidence_figure(f)
    value = "" if f.value is None else f" — {fmt_value(f.value, f.unit)}"
    return card(
        html.Div(
            [
                dbc.Badge(f.severity, color=COLOR[f.severity], className="me-2"),
                html.Strong(f.title + value),
            ]
        ),
        html.P(f.recommendation, className="mt-2 mb-1") if f.severity != "none" else None,
        html.Div(
            [
                dcc.Link("show the evidence", href=link),
                " · ",
                html.A("guide", href=f.doc, target="_blank"),
            ],
            className="podscope-muted",
        ),
        dcc.Graph(figure=fig, config={"displayModeBar": False})
        if fig is not None and f.severity != "none"
        else None,
        html.Details(
            [
                html.Summary("details: evidence and how to reproduce the number"),
                _evidence_list(f.evidence, f.unit),
                html.Code(f.expression, className="podscope-mono"),
            ]
        ),
    )


def _evidence_list(evidence: dict[str, Any], unit: str) -> Any:
    """Evidence as a list, numbers with their units (``app.units.fmt_evidence``; the rule's
    thresholds in the unit of its value)."""
    items = []
    for key, value in evidence.items():
        shown = (
            [fmt_value(v, unit) for v in value] if key == "thresholds" else fmt_evidence(key, value)
        )
        if isinstance(shown, dict):
            text = ", ".join(f"{k}: {v}" for k, v in list(shown.items())[:EVIDENCE_ROWS]) or "none"
            if len(shown) > EVIDENCE_ROWS:
                text += f" and {len(shown) - EVIDENCE_ROWS} more (the evidence link lists them all)"
        elif isinstance(shown, list):
            text = ", ".join(map(str, shown)) or "none"
        else:
            text = str(shown)
        items.append(html.Li([html.Strong(key.replace("_", " ")), f": {text}"]))
    return html.Ul(items, className="podscope-mono")


def layout(session: str | None = None, **_: str) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None or session is None:
        return alert
    findings = analysis.findings
    flagged = [f for f in findings if f.applies and f.severity != "none"]
    passed = [f for f in findings if f.applies and f.severity == "none"]
    skipped = [f for f in findings if not f.applies]
    devices = device_summary(analysis)
    return html.Div(
        [
            html.H5(
                f"{len(flagged)} findings · {len(passed)} checks passed · {len(skipped)} not applicable"
            ),
            card(devices) if devices is not None else None,
            *[finding_card(f, session) for f in flagged],
            card(
                html.H6("Checked, nothing to fix"),
                html.Ul(
                    [
                        html.Li(
                            f.title
                            + ("" if f.value is None else f" ({fmt_value(f.value, f.unit)})")
                        )
                        for f in passed
                    ]
                ),
            ),
            card(
                html.H6("Not applicable"),
                html.Ul([html.Li([html.Strong(f.rule_id), f": {f.reason}"]) for f in skipped]),
            ),
        ]
    )
