"""Figures are pure functions frame → go.Figure; asserted on their data and layout."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from podscope.analyzers.attribution import arrivals, lateness
from podscope.analyzers.breakdown import CATEGORIES, step_breakdown
from podscope.analyzers.pod import pod_view
from podscope.analyzers.steps import align_steps, find_steps
from podscope.analyzers.timeline import short_line
from podscope.app.figures.pod import (
    breakdown_bars_figure,
    step_heatmap_figure,
    step_time_lines_figure,
)
from podscope.app.figures.timeline import (
    HIT,
    MAX_SHAPES,
    TimelineIndex,
    colour_of,
    timeline_figure,
)
from podscope.app.units import fmt_duration
from tests.analyzers.test_breakdown import frames_of, worker_trace


def events_2w() -> pd.DataFrame:
    return frames_of(
        ("w_1", worker_trace("w_1", 5, input_us=100)),
        ("w_2", worker_trace("w_2", 5, python_only=True)),
    )


def test_bars_stack_every_category_and_mark_unsplit_workers() -> None:
    ev = events_2w()
    b = step_breakdown(ev, align_steps(find_steps(ev))[0])
    fig = breakdown_bars_figure(b[b["step"] == 0], "Step 0")
    names = [t.name for t in fig.data]
    # every category but host offload and device idle, which only XLA programs have
    assert names[: len(CATEGORIES) - 2] == [
        "Device compute",
        "Device to device",
        "Device collectives",
        "Host compute",
        "Kernel launch",
        "Input",
        "Output",
        "Compilation",
        "All others",
    ]
    assert names[-1].startswith("Not split")
    assert list(fig.data[-1].y) == ["w_2"]
    inp = next(t for t in fig.data if t.name == "Input")
    assert list(inp.x)[list(inp.y).index("w_1")] == 0.1  # 100 µs in ms
    assert fig.layout.barmode == "stack" and fig.layout.title.text == "Step 0"


def test_lines_and_heatmap_have_one_series_per_worker() -> None:
    ev = events_2w()
    pod = pod_view(step_breakdown(ev, align_steps(find_steps(ev))[0]))
    lines = step_time_lines_figure(pod, selected_step=2)
    assert sorted(t.name for t in lines.data) == ["w_1", "w_2"]
    assert any(s.x0 == 2 for s in lines.layout.shapes)
    arr = arrivals(pod)
    heat = step_heatmap_figure(arr[["worker", "step"]].assign(lateness_ns=lateness(arr)))
    assert list(heat.data[0].y) == ["w_1", "w_2"] and len(heat.data[0].x) == 5


def test_timeline_never_sends_more_than_the_shape_budget() -> None:
    n = 300_000
    rng = np.random.default_rng(0)
    start = np.sort(rng.integers(0, 10**9, n))
    ev = pd.DataFrame(
        {
            "worker": pd.Categorical(["w"] * n),
            "plane": pd.Categorical(["/host:CPU"] * n),
            "line": pd.Categorical(rng.choice(["a", "b", "c"], n)),
            "name": pd.Categorical(rng.choice(["x", "y"], n)),
            "start_ns": start,
            "dur_ps": rng.integers(1, 5_000_000, n) * 1000,
            "depth": np.zeros(n, dtype=np.int16),
            "op_type": pd.Categorical([None] * n),
        }
    )
    index = TimelineIndex.build(ev, "w")
    fig = timeline_figure([index], 0, 10**9, 0, max_shapes=MAX_SHAPES)
    tl = fig.layout.meta["tl"]
    assert len(tl["x0"]) + len(tl["dense"]["y"]) <= MAX_SHAPES  # bars and density cells
    assert fig.layout.meta["bars"] == len(tl["x0"]) and fig.layout.meta["dense_tracks"] == 3
    assert not fig.data  # Plotly draws no bar: the canvas does (assets/timeline_canvas.js)
    # a search hit is drawn whatever its width, in the hit colour, the rest dimmed
    hits = timeline_figure([index], 0, 10**9, 0, highlight="X", max_shapes=MAX_SHAPES)
    assert hits.layout.meta["hits"] == int((ev["name"] == "x").sum())
    bars = hits.layout.meta["tl"]
    # more hits than the budget: every bar drawn is a hit (hits go first)
    assert sum(bars["hit"]) == hits.layout.meta["bars"] == len(bars["x0"])
    assert bars["hit_color"] == HIT and bars["dim"]
    zoomed = timeline_figure([index], 0, 2_000_000, 0, highlight="x")
    assert list(zoomed.layout.xaxis.range) == [0, 2.0]
    # bars cover a window's width on each side: a pan that far is drawn in the browser
    near = zoomed.layout.meta["tl"]
    assert near["fetched"] == [-2.0, 4.0] and near["x0"]
    assert all(-2.0 - d <= x <= 4.0 for x, d in zip(near["x0"], near["dx"], strict=True))


def test_the_window_query_returns_what_a_scan_returns() -> None:
    """The multi-resolution index (per duration level, sorted by start) against a full scan,
    on random windows and minimum durations."""
    rng = np.random.default_rng(3)
    n = 50_000
    start = np.sort(rng.integers(0, 10**9, n))
    ev = pd.DataFrame(
        {
            "worker": pd.Categorical(["w"] * n),
            "plane": pd.Categorical(["/host:CPU"] * n),
            "line": pd.Categorical(rng.choice(["a", "b"], n)),
            "name": pd.Categorical(rng.choice(["x", "y"], n)),
            "start_ns": start,
            "dur_ps": (rng.pareto(1.2, n) * 1e4).astype(np.int64) * 1000,
            "depth": np.zeros(n, dtype=np.int16),
            "op_type": pd.Categorical([None] * n),
        }
    )
    index = TimelineIndex.build(ev, "w")
    for _ in range(300):
        t0 = int(rng.integers(-(10**6), 10**9))
        t1 = t0 + int(rng.integers(1, 10**9))
        least = int(rng.choice([0, 1, 7, 1000, int(rng.integers(1, 10**8))]))
        over = (index.start < t1) & (index.end > t0)
        wide = over & (index.end - index.start >= least)
        assert np.array_equal(index.window(t0, t1, least), np.flatnonzero(wide))
        narrow = over & (index.end - index.start < least)
        assert np.array_equal(index.window(t0, t1, least, below=True), np.flatnonzero(narrow))


def test_timeline_is_a_flame_chart_with_short_labels_names_and_colours() -> None:
    ev = pd.DataFrame(
        {
            "worker": pd.Categorical(["w0"] * 3),
            "plane": pd.Categorical(["/host:CPU"] * 3),
            "line": pd.Categorical(["tf_Compute/-1481541789699770605"] * 3),
            "name": pd.Categorical(["train_step", "dense/MatMul", "Iterator::Map"]),
            "start_ns": [0, 100_000, 600_000],
            "dur_ps": [1_000_000_000, 400_000_000, 300_000_000],
            "depth": np.array([0, 1, 1], dtype=np.int16),
            "op_type": pd.Categorical([None, "MatMul", None]),
        }
    )
    index = TimelineIndex.build(ev, "w0")
    assert index.labels == ["w0 › CPU › tf_Compute"]
    assert [index.categories[c] for c in index.category] == ["train_step", "MatMul", "Iterator"]
    fig = timeline_figure([index], 0, 1_000_000, 0)
    bars = fig.layout.meta["tl"]
    order = np.argsort(bars["x0"])
    assert [bars["y"][i] for i in order] == [0, 1, 1]  # children one row below their parent
    assert list(fig.layout.yaxis.ticktext) == ["w0 › CPU › tf_Compute"]
    names = [bars["names"][bars["n"][i]] for i in order]
    assert names == ["train_step", "dense/MatMul", "Iterator::Map"]
    colours = [bars["colors"][bars["c"][i]] for i in order]
    assert colours[1] == colour_of("MatMul") != colours[2]
    assert bars["dx"][order[1]] == 0.4  # the duration (ms), not the end time
    assert [bars["cats"][bars["k"][i]] for i in order] == ["train_step", "MatMul", "Iterator"]
    steps = pd.DataFrame({"worker": ["w0"], "step": [0], "start_ns": [0], "end_ns": [900_000]})
    marked = timeline_figure([index], 0, 1_000_000, 0, steps=steps, selected_step=0)
    assert [sh.type for sh in marked.layout.shapes] == ["rect"]  # the selected step, shaded
    assert marked.layout.meta["tl"]["steps"] == [{"y0": -0.5, "y1": 1.5, "x": [0.0]}]  # dotted
    hidden = timeline_figure([index], 0, 1_000_000, 0, hidden_planes=["CPU"])
    assert hidden.layout.meta["rows"] == 0 and len(hidden.data) == 0


def test_short_line_labels() -> None:
    assert short_line("/device:GPU:0", "Stream #14(MemcpyH2D)") == "GPU:0 › Stream #14(MemcpyH2D)"
    assert short_line("/host:CPU", "tf_Compute/-1481541789699770605") == "CPU › tf_Compute"
    assert short_line("/host:CPU", "python3") == "CPU › python3"
    assert fmt_duration(950) == "950 ns" and fmt_duration(12_345) == "12.3 µs"
    assert fmt_duration(4_560_000) == "4.560 ms" and fmt_duration(1.5e9) == "1.500 s"


def test_compare_figure_has_one_bar_series_per_run() -> None:
    from podscope.analyzers.compare import compare_steps
    from podscope.app.figures.compare import compare_steps_figure
    from tests.analyzers.test_compare import run

    table = compare_steps(run(2, [("a:MatMul", 300)])[0], run(4, [("a:MatMul", 500)])[0])
    fig = compare_steps_figure(table, "2026_01_01", "2026_01_02")
    assert [t.name for t in fig.data] == ["2026_01_01 (baseline)", "2026_01_02 (new)"]
    assert len(fig.data[0].y) == 1 + len(CATEGORIES)
    host = list(fig.data[0].y).index("host compute")
    assert (fig.data[0].x[host], fig.data[1].x[host]) == (0.3, 0.5)
    assert fig.data[1].customdata[host] == "+67%"


def test_top_ops_keep_kernels_apart_whose_names_share_a_long_start() -> None:
    from podscope.app.figures.ops import ops_top_figure

    stem = "void cutlass::Kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::threadblock"
    table = pd.DataFrame(
        {
            "kernel": [f"{stem}<float, 128, 4>>", f"{stem}<half, 64, 8>>", "small"],
            "op_type": ["MatMul", "MatMul", "Relu"],
            "worker": "w",
            "device": "/device:GPU:0",
            "self_ps": [3e9, 2e9, 1e9],
            "occurrences": [10, 10, 5],
        }
    )
    bar = ops_top_figure(table).data[0]
    assert len(set(bar.y)) == 3  # three bars, not two merged ones
    assert bar.y[0].split(" · ")[0].endswith("<float, 128, 4>>")
    assert [c[2] for c in bar.customdata] == table["kernel"].tolist()  # whole names on hover


def test_the_straggler_badge_says_what_names_it() -> None:
    from podscope.app.figures.pod import straggler_evidence

    # synchronous: w2 arrives 0.4 ms late per step (0.27× a 1.5 ms median step)
    s = pd.DataFrame(
        {
            "worker": ["w2", "w1", "w3"],
            "score": [0.2667, -0.13, -0.13],
            "late_ms": [0.4, -0.2, -0.2],
            "last_share": [1.0, 0.0, 0.0],
            "mean_step_time_ns": [1.1e6, 1.5e6, 1.5e6],
            "median_step_ns": 1.5e6,
            "mode": "synchronous",
            "straggler": [True, False, False],
        }
    )
    texts, note = straggler_evidence(s)
    assert texts == [
        "straggler: w2 (arrives 400 µs late per step, its heat-map row's mean; 0.27× the median "
        "step of 1.500 ms; last in 100.0 % of steps)"
    ]
    assert "its own step-time line can be the lowest" in note
    assert straggler_evidence(s.assign(straggler=False)) == ([], "")
    slow = straggler_evidence(s.assign(mode="asynchronous"))[0]
    assert slow == [
        "straggler: w2 (steps 400 µs longer than the others', its heat-map row's mean; 0.27× the "
        "median step of 1.500 ms; slowest in 100.0 % of steps)"
    ]


def test_track_labels_that_shorten_alike_are_numbered_apart() -> None:
    ev = pd.DataFrame(
        {
            "worker": pd.Categorical(["w"] * 2),
            "plane": pd.Categorical(["/host:CPU"] * 2),
            "line": pd.Categorical(["tf_Compute/-1481541789699770605", "tf_Compute/-92233720368"]),
            "name": pd.Categorical(["a", "b"]),
            "start_ns": [0, 10],
            "dur_ps": [1000, 1000],
            "depth": np.zeros(2, dtype=np.int16),
            "op_type": pd.Categorical([None, None]),
        }
    )
    assert TimelineIndex.build(ev, "w").labels == [
        "w › CPU › tf_Compute #1",
        "w › CPU › tf_Compute #2",
    ]


def test_breakdown_legend_sits_above_the_bars_not_on_the_axis_title() -> None:
    rows = pd.DataFrame(
        {
            "worker": ["w0", "w1"],
            "device": ["/host:CPU"] * 2,
            "step_time_ns": [1e6, 2e6],
            "split": [True, True],
            **{f"{c}_ns": [1e5, 2e5] for c in CATEGORIES},
        }
    )
    fig = breakdown_bars_figure(rows, "All steps")
    assert fig.layout.xaxis.title.text == "ms"
    assert fig.layout.legend.y >= 1 and fig.layout.legend.yanchor == "bottom"


def test_the_plotly_bundle_is_used_only_for_figures_of_its_major_version(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import plotly.offline

    from podscope.app.main import plotly_bundle_fits

    assert plotly_bundle_fits()  # the committed bundle matches the plotly installed
    monkeypatch.setattr(plotly.offline, "get_plotlyjs_version", lambda: "99.0.0")
    assert not plotly_bundle_fits()  # a newer plotly's figures: Dash's own plotly.js


def test_the_roofline_has_each_programs_own_point() -> None:
    """XProf's roofline has the program beside its ops: all its ops' FLOPs over their bytes
    and their time (an op without FLOPs still adds its bytes and time); IDLE is no op."""
    from podscope.app.figures.xla import program_points, roofline_figure

    table = pd.DataFrame(
        {
            "program": ["jit_step", "jit_step", "", "jit_init"],
            "program_id": ["1", "1", "", "2"],
            "hlo_op_name": ["dot.1", "copy.2", "IDLE", "fill"],
            "category": ["dot", "copy", "IDLE", "loop fusion"],
            "measured_flop_rate_gflops": [100.0, 0.0, np.nan, 0.0],
            "operational_intensity": [10.0, 0.0, np.nan, 0.0],
            "bytes_accessed": [1e5, 1e5, np.nan, 4e3],
            "total_time_us": [10.0, 10.0, 50.0, 1.0],
            "total_self_time_us": [10.0, 10.0, 50.0, 1.0],
            "bound_by": ["Compute", "HBM", "", "HBM"],
            "roofline_efficiency": [0.5, 0.1, np.nan, 0.1],
            "above_peak": [False, False, False, False],
        }
    )
    points = program_points(table).set_index("program")
    assert list(points.index) == ["jit_step"]  # jit_init computes nothing: no point
    assert points.loc["jit_step", "operational_intensity"] == pytest.approx(1e6 / 2e5)
    assert points.loc["jit_step", "measured_flop_rate_gflops"] == pytest.approx(50.0)
    fig = roofline_figure(table, None)
    star = next(t for t in fig.data if t.name == "program (all its ops)")
    assert list(star.x) == [pytest.approx(5.0)] and list(star.y) == [pytest.approx(50.0)]


def test_the_roofline_has_each_programs_point_per_step() -> None:
    """Two executions of one program: a hollow star for each (the slower step lower), the
    program's overall star between them."""
    from podscope.app.figures.xla import program_points, roofline_figure

    def rows(execution: int | None, time_us: float) -> dict[str, object]:
        row: dict[str, object] = {
            "program_id": "7", "program": "jit_step", "hlo_op_name": "dot.1",
            "category": "convolution", "measured_flop_rate_gflops": 1e6 / time_us,
            "operational_intensity": 10.0, "bytes_accessed": 1e5, "total_time_us": time_us,
            "total_self_time_us": time_us, "bound_by": "Compute", "roofline_efficiency": 0.5,
        }  # fmt: skip
        if execution is not None:
            row["execution"] = execution
        return row

    steps = pd.DataFrame([rows(0, 100.0), rows(1, 300.0)])
    whole = pd.DataFrame([rows(None, 400.0)])
    whole["measured_flop_rate_gflops"] = 2e6 / 400.0  # both executions' FLOPs over their time
    fig = roofline_figure(whole, None, steps=steps)
    per_step = next(t for t in fig.data if t.name == "program, per step")
    assert list(per_step.y) == pytest.approx([1e4, 1e6 / 300.0])
    overall = program_points(whole)["measured_flop_rate_gflops"].iloc[0]
    assert min(per_step.y) < overall < max(per_step.y)


def test_margins_are_reserved_for_labels_legends_and_colour_bars() -> None:
    """``reserve`` widens the margins to what automargin would grow them to (the browser
    test ``test_each_figure_is_laid_out_once`` checks that in plotly.js), never narrows them,
    and leaves turned long category names on x to automargin."""
    import plotly.graph_objects as go

    from podscope.app.figures.margins import CHAR_PX, reserve

    def margins(fig: go.Figure) -> dict[str, int]:
        return {k: getattr(fig.layout.margin, k) for k in "lrtb"}

    given = {"l": 10, "r": 10, "t": 50, "b": 40}
    names = ["host-a", "a-much-longer-host-name"]
    bars = go.Figure(go.Bar(y=names, x=[1.0, 2.0], orientation="h"))
    bars.update_layout(margin=given, xaxis_title="ms")
    got = margins(reserve(bars))
    assert got["l"] >= len(names[1]) * CHAR_PX and got["t"] == 50 and got["b"] > 40
    assert got["r"] < 30  # one trace, no legend: the last x tick's half
    lines = go.Figure([go.Scatter(y=[0.5, 2.25], name=n) for n in names])
    lines.update_layout(margin=given, yaxis_title="ms")
    assert margins(reserve(lines))["r"] >= len(names[1]) * CHAR_PX  # the legend on the right
    heat = go.Figure(go.Heatmap(z=[[1.0, 250.0]], y=names[:1], colorbar={"title": "ms"}))
    heat.update_layout(margin=given)
    assert margins(reserve(heat))["r"] > 60  # the colour bar
    wide = go.Figure(go.Bar(y=[1.0], x=["x"]))
    wide.update_layout(margin={"l": 500, "r": 300, "t": 50, "b": 200})
    assert margins(reserve(wide)) == {"l": 500, "r": 300, "t": 50, "b": 200}  # a floor
    turned = go.Figure(go.Bar(x=["a category name longer than twelve"], y=[1.0]))
    turned.update_layout(margin=given)
    assert margins(reserve(turned))["b"] == 40
