"""Margins sized before plotly.js draws a figure.

A figure's margins start at 10 px and plotly.js' automargin grows them to fit the axes'
labels, a colour bar or a legend: after its first layout it finds the room missing and lays
the figure out again. The Pod Viewer's four figures took 0.45-0.65 s of the browser's time on
a pod of 1,024 hosts, about half of it in those second layouts. ``reserve`` sizes the margins
from what the figure holds (the longest category label, the widest tick number, the legend's
longest name, a colour bar), so that the first layout has the room and automargin, kept for
what is not foreseen, finds nothing to grow: a label wider than estimated costs the second
layout, as before, never a cut label.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

#: A 12 px label's width per character, wide enough for the usual fonts (a label of capitals
#: or of a wider fallback font may be wider: automargin then grows the margin, as before).
CHAR_PX = 7.5
#: Tick labels' distance to the plot area, and the figure's edge.
TICK_PX = 14
#: An axis title's line and its standoff.
TITLE_PX = 26
#: A row of tick labels below the plot.
TICK_ROW_PX = 30
#: A vertical legend's symbol, paddings and border, beside its longest name.
LEGEND_PX = 62
#: A horizontal legend's row.
LEGEND_ROW_PX = 30
#: A colour bar's bar, paddings and title, beside its tick labels.
COLORBAR_PX = 80


def labels_px(texts: Iterable[object]) -> int:
    """The margin beside an axis of tick labels ``texts`` (a flame chart's track names)."""
    return math.ceil(_width(texts) + TICK_PX)


def edge_px(texts: Iterable[object]) -> int:
    """The margin at the end of a numeric axis of tick labels ``texts``: its last label is
    centred on the plot's edge."""
    return math.ceil(_width(texts) / 2 + TICK_PX)


def _width(texts: Iterable[object]) -> float:
    """The widest of ``texts`` in pixels (``CHAR_PX`` per character)."""
    return max((len(str(t)) for t in texts), default=0) * CHAR_PX


def ticks(values: Sequence[Any] | np.ndarray | None) -> list[str]:
    """Texts as wide as a tick of an axis over ``values`` may be: the values themselves when
    they are names (a category axis), else a number of the range's integer digits and of as
    many decimals as a tick step of an eighth of the range needs (plotly.js' steps are 1, 2
    or 5 × 10^k, at least five ticks; past 10,000 it writes ``12.5k``)."""
    if values is None or len(values) == 0:
        return []
    arr = np.asarray(values, dtype=object)
    if any(isinstance(v, str) for v in arr[:50]):
        return [str(v) for v in arr]
    try:
        nums = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):  # dates and the like: not foreseen here
        return []
    nums = nums[np.isfinite(nums)]
    if not len(nums):
        return []
    low, high = float(nums.min()), float(nums.max())
    biggest = max(abs(low), abs(high))
    if biggest >= 1e4:
        return ["-12.5k" if low < 0 else "12.5k"]
    span = (high - low) or biggest or 1.0
    decimals = min(6, max(0, -math.floor(math.log10(span / 8))))
    digits = len(str(int(biggest))) + (decimals + 1 if decimals else 0) + (low < 0)
    return ["0" * digits]


def _values(trace: Any, axis: str) -> Sequence[Any] | np.ndarray | None:
    """A trace's values along ``axis`` (``x`` or ``y``), a bar's base added."""
    values = getattr(trace, axis, None)
    if values is None:
        return None
    base = getattr(trace, "base", None)
    orientation = getattr(trace, "orientation", None)
    along = "x" if orientation == "h" else "y"
    if base is not None and axis == along and not isinstance(base, str):
        try:
            return np.asarray(values, dtype=np.float64) + np.asarray(base, dtype=np.float64)
        except (TypeError, ValueError):
            return values
    return values


def reserve(fig: go.Figure) -> go.Figure:
    """``fig`` with its margins widened to hold its y axis' labels and title, its x axis'
    ticks and title, its legend and its colour bar (in place; returned for chaining). The
    margins given stay the least: a figure with more room than it needs keeps it."""
    layout = fig.layout
    given = layout.margin
    left, right = given.l or 0, given.r or 0
    top, bottom = given.t or 0, given.b or 0
    traces = list(fig.data)
    if not traces:
        return fig
    y_texts = _axis_texts(layout.yaxis, [_values(tr, "y") for tr in traces])
    x_values = [_values(tr, "x") for tr in traces]
    x_texts = _axis_texts(layout.xaxis, x_values)
    left = max(left, _width(y_texts) + TICK_PX + (TITLE_PX if layout.yaxis.title.text else 0))
    names = any(any(isinstance(v, str) for v in list(x)[:50]) for x in x_values if x is not None)
    if names and _width(x_texts) > 12 * CHAR_PX:
        return fig  # long category names on x are turned by plotly.js: not foreseen here
    bottom = max(bottom, TICK_ROW_PX + (TITLE_PX if layout.xaxis.title.text else 0))
    if not names:  # the last tick's label is centred on the plot's right edge
        right = max(right, edge_px(x_texts))
    named = [tr for tr in traces if tr.showlegend is not False and tr.name]
    if layout.showlegend is not False and len(named) > 1:
        legend = layout.legend
        if legend.orientation == "h":
            if legend.y is not None and legend.y < 0:  # below the plot, under the x axis
                bottom += LEGEND_ROW_PX
        else:  # beside the plot, on the right
            right = max(right, _width(tr.name for tr in named) + LEGEND_PX)
    for tr in traces:
        if tr.type in ("heatmap", "contour") and tr.showscale is not False:
            right = max(right, _width(ticks(_z(tr))) + COLORBAR_PX)
    margin = {"l": left, "r": right, "t": top, "b": bottom}
    fig.update_layout(margin={k: math.ceil(v) for k, v in margin.items()})
    return fig


def _axis_texts(axis: Any, values: Sequence[Sequence[Any] | np.ndarray | None]) -> list[str]:
    """The tick texts an axis over the traces' ``values`` may show: its ``ticktext`` when it
    names its ticks, else ``ticks`` of each trace with the axis' suffix (a percent format
    writes ``100%``)."""
    if axis.ticktext is not None:
        return [str(t) for t in axis.ticktext]
    suffix = (axis.ticksuffix or "") + ("%" if str(axis.tickformat or "").endswith("%") else "")
    return [t + suffix for v in values for t in ticks(v)]


def _z(trace: Any) -> np.ndarray | None:
    z = getattr(trace, "z", None)
    if z is None:
        return None
    return np.asarray(z, dtype=np.float64).ravel()
