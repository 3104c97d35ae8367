"""Vectorized ftrace/atrace text reader (the fast path of ``trace_parsers.atrace``).

Lines are tokenized with Arrow's RE2 ``extract_regex`` in C++, and the begin/end matching that
a per-line stack would do is computed with array arithmetic: per thread, the running depth is
the reflected walk ``S_k = C_k - min(0, min_{j<=k} C_j)`` of the cumulative +1/-1 sum ``C``
(an ``E`` that would go below zero is an unmatched end), and a begin at depth ``d`` pairs with
the next end that leaves depth ``d + 1`` — consecutive rows once sorted by (thread, depth).
Async S/F pairs are few and matched in Python.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from trace_parsers._slices import SliceBuilder

LINE_RE2 = (
    r"^\s*(?P<task>.+?)-(?P<tid>\d+)\s+(?:\(\s*(?P<tgid>\d+|-----)\)\s+)?\[(?P<cpu>\d+)\]\s+"
    r"(?:(?P<flags>[\w.]{4,5})\s+)?(?P<ts>\d+(?:\.\d+)?):\s+(?P<event>[\w.]+):\s?(?P<payload>.*)$"
)
MARKER_RE2 = r"^\s*(?P<k>[A-Za-z])(?:\|(?P<pid>-?\d*)(?:\|(?P<rest>.*?))?)?\s*$"
LAST_FIELD_RE2 = r"^(?P<name>.*)\|(?P<last>[^|]*)$"
SCHED_RE2 = (
    r"prev_state=(?P<prev_state>\S*).*next_comm=(?P<next_comm>.*?)\s+next_pid=(?P<next_pid>\d+)"
)
CPU_RE2 = r"state=(?P<state>\d+)\s+cpu_id=(?P<cpu_id>\d+)"
MARKER_EVENTS = ["tracing_mark_write", "0", "print"]


def _np(arr: pa.Array, dtype: object = None) -> np.ndarray:
    return (
        arr.to_numpy(zero_copy_only=False)
        if dtype is None
        else arr.to_numpy(zero_copy_only=False).astype(dtype)
    )


def _int(arr: pa.Array, default: int = -1) -> np.ndarray:
    """Digit strings → int64; empty, missing or too long to fit → ``default``."""
    length = pc.utf8_length(arr)
    fits = pc.and_(pc.greater(length, 0), pc.less_equal(length, 18))
    clean = pc.if_else(fits, arr, None)
    return _np(pc.fill_null(pc.cast(clean, pa.int64()), default), np.int64)


def _float(arr: pa.Array) -> np.ndarray:
    """Number strings → float64; anything else → NaN (counter values may be garbage)."""
    return pd.to_numeric(pd.Series(_np(pc.fill_null(arr, ""), object)), errors="coerce").to_numpy(
        np.float64
    )


def read_text(sb: SliceBuilder, text: str) -> None:
    """Adds one ftrace text block to the builder (same counts and slices as a line loop)."""
    lines = pa.array(text.splitlines(), type=pa.large_string())
    parsed = pc.extract_regex(lines, LINE_RE2)
    valid = _np(parsed.is_valid(), bool)
    stripped = pc.utf8_trim_whitespace(lines)
    blank = _np(pc.or_(pc.equal(stripped, ""), pc.starts_with(stripped, "#")), bool)
    sb.notes["skipped_lines"] += int((~valid & ~blank).sum())
    rows = pc.filter(parsed, pa.array(valid))
    if not len(rows):
        return
    f = {
        name: rows.field(i)
        for i, name in enumerate(["task", "tid", "tgid", "cpu", "flags", "ts", "event", "payload"])
    }
    tid = _int(f["tid"])
    tgid = _int(pc.if_else(pc.equal(f["tgid"], "-----"), "", f["tgid"]))
    ts = np.round(_np(pc.cast(f["ts"], pa.float64()), np.float64) * 1e9).astype(np.int64)
    event = f["event"]
    payload = f["payload"]
    task = _np(pc.utf8_trim_whitespace(f["task"]), object)
    _threads(sb, tid, tgid, task)
    tgid = _fill_tgid(tid, tgid)
    sb.notes["events"] += len(rows)

    is_marker = _np(pc.is_in(event, pa.array(MARKER_EVENTS)), bool)
    clock_sync = is_marker & _np(pc.match_substring(payload, "trace_event_clock_sync"), bool)
    sb.notes["clock_sync"] += int(clock_sync.sum())
    timed = ~clock_sync
    if timed.any():
        sb.time(int(ts[timed].min()))
        sb.time(int(ts[timed].max()))
    counts = pd.Series(_np(event, object)[~is_marker]).value_counts()
    for name, count in counts.items():
        if name != "sched_switch":
            sb.notes[str(name)] += int(count)
    markers = np.flatnonzero(is_marker & ~clock_sync)
    if len(markers):
        _markers(sb, tid[markers], tgid[markers], ts[markers], pc.take(payload, pa.array(markers)))
    _sched(sb, f, ts)
    _cpu_counters(sb, f, ts)


def _threads(sb: SliceBuilder, tid: np.ndarray, tgid: np.ndarray, task: np.ndarray) -> None:
    named = pd.DataFrame({"tid": tid, "task": task})
    named = named[named["task"] != "<...>"].drop_duplicates("tid", keep="last")
    sb.tasks.update(dict(zip(named["tid"].tolist(), named["task"].tolist(), strict=True)))
    known = pd.DataFrame({"tid": tid, "tgid": tgid})
    known = known[known["tgid"] >= 0].drop_duplicates("tid")
    sb.tgid_of.update(dict(zip(known["tid"].tolist(), known["tgid"].tolist(), strict=True)))


def _fill_tgid(tid: np.ndarray, tgid: np.ndarray) -> np.ndarray:
    """Missing tgid (``-----`` / old kernels): the thread's tgid seen elsewhere, else its tid."""
    out = tgid.copy()
    missing = out < 0
    if missing.any():
        known = pd.Series(tgid[~missing], index=tid[~missing])
        known = known[~known.index.duplicated()]
        filled = pd.Series(tid[missing]).map(known).to_numpy()
        out[missing] = np.where(pd.isna(filled), tid[missing], filled).astype(np.int64)
    return out


def _markers(
    sb: SliceBuilder, tid: np.ndarray, tgid: np.ndarray, ts: np.ndarray, payload: pa.Array
) -> None:
    m = pc.extract_regex(payload, MARKER_RE2)
    ok = _np(m.is_valid(), bool)
    sb.notes["unknown_marker"] += int((~ok).sum())
    kind = _np(pc.fill_null(m.field(0), ""), object)
    pid_field = _int(m.field(1), -1)
    pid = np.where(pid_field >= 0, pid_field, tgid)
    rest = m.field(2)
    known = ok & np.isin(kind, ["B", "E", "C", "S", "F", "I", "N", "G", "H"])
    sb.notes["unknown_marker"] += int((ok & ~known).sum())
    sb.notes["markers"] += int(known.sum())
    _begin_end(sb, tid, pid, ts, kind, rest)
    last = pc.extract_regex(rest, LAST_FIELD_RE2)
    name_of_last = _np(pc.fill_null(last.field(0), ""), object)
    last_val = last.field(1)
    # Counters: C|pid|name|value
    c = np.flatnonzero(kind == "C")
    if len(c):
        vals = _float(pc.take(last_val, pa.array(c)))
        bad = np.isnan(vals) | ~_np(pc.is_valid(pc.take(last, pa.array(c))), bool)
        sb.notes["bad_counter"] += int(bad.sum())
        good = c[~bad]
        sb.add_counters(pid[good], name_of_last[good], ts[good], vals[~bad])
    # Async S/F (few): match in Python on (pid, name, cookie).
    for i in np.flatnonzero(np.isin(kind, ["S", "F"])):
        key = (int(pid[i]), str(name_of_last[i]), str(last_val[i].as_py()))
        if kind[i] == "S":
            sb.async_open[key] = int(ts[i])
        elif key in sb.async_open:
            sb.slices.append((key[0], -1, sb.async_open.pop(key), int(ts[i]), key[1], 1))
        else:
            sb.notes["unmatched_async_finish"] += 1
    # Instants: I|pid|name, and N/G/H track markers (name before the last field).
    inst = np.flatnonzero(np.isin(kind, ["I", "N", "G", "H"]))
    if len(inst):
        rest_np = _np(pc.fill_null(rest, ""), object)
        names = np.where(kind[inst] == "I", rest_np[inst], name_of_last[inst])
        sb.add_slices(pid[inst], tid[inst], ts[inst], ts[inst], names, 2)


def _begin_end(
    sb: SliceBuilder,
    tid: np.ndarray,
    pid: np.ndarray,
    ts: np.ndarray,
    kind: np.ndarray,
    rest: pa.Array,
) -> None:
    be = np.flatnonzero((kind == "B") | (kind == "E"))
    if not len(be):
        return
    order = be[np.argsort(tid[be], kind="stable")]  # per thread, in file order
    t = tid[order]
    step = np.where(kind[order] == "B", 1, -1)
    starts = np.r_[0, np.flatnonzero(np.diff(t)) + 1]
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(t)]))
    csum = np.cumsum(step)
    csum -= np.r_[0, csum[starts[1:] - 1]][group]  # restart the sum per thread
    low = pd.Series(csum).groupby(group).cummin().to_numpy()
    floor = np.minimum(0, low)
    depth_after = csum - floor
    prev_floor = np.r_[0, floor[:-1]]
    prev_floor[starts] = 0
    unmatched = (step == -1) & (floor < prev_floor)
    sb.notes["unmatched_end"] += int(unmatched.sum())
    level = np.where(step == 1, depth_after - 1, depth_after)
    keep = ~unmatched
    o, g, lv, st = order[keep], group[keep], level[keep], step[keep]
    pos = np.arange(len(o))
    srt = np.lexsort((pos, lv, g))
    o, g, lv, st = o[srt], g[srt], lv[srt], st[srt]
    same = np.r_[(g[1:] == g[:-1]) & (lv[1:] == lv[:-1]), False]
    pair = (st == 1) & np.r_[st[1:] == -1, False] & same
    b_rows, e_rows = o[pair], o[np.flatnonzero(pair) + 1]
    names = (
        _np(pc.fill_null(pc.take(rest, pa.array(b_rows)), ""), object)
        if len(b_rows)
        else np.array([], dtype=object)
    )
    sb.add_slices(pid[b_rows], tid[b_rows], ts[b_rows], ts[e_rows], names, 0)
    paired_b = np.zeros(len(o), dtype=bool)
    paired_b[np.flatnonzero(pair)] = True
    open_b = o[(st == 1) & ~paired_b]
    for i in open_b:  # unclosed B: closed at the end of the trace by SliceBuilder users
        sb.stacks[int(tid[i])].append(
            (int(ts[i]), str(pc.fill_null(rest[int(i)], "").as_py()), int(pid[i]))
        )


def _sched(sb: SliceBuilder, f: dict[str, pa.Array], ts: np.ndarray) -> None:
    idx = np.flatnonzero(_np(pc.equal(f["event"], "sched_switch"), bool))
    if not len(idx):
        return
    m = pc.extract_regex(pc.take(f["payload"], pa.array(idx)), SCHED_RE2)
    ok = _np(m.is_valid(), bool)
    sb.notes["bad_sched_switch"] += int((~ok).sum())
    sb.notes["sched_switch"] += int(ok.sum())
    idx = idx[ok]
    m = pc.filter(m, pa.array(ok))
    cpu = _int(pc.take(f["cpu"], pa.array(idx)))
    frame = pd.DataFrame(
        {
            "cpu": cpu,
            "ts": ts[idx],
            "prev_state": _np(m.field(0), object),
            "comm": _np(m.field(1), object),
            "tid": _int(m.field(2)),
        }
    )
    frame = frame.sort_values(["cpu", "ts"], kind="stable")
    nxt = frame.groupby("cpu")[["ts", "prev_state"]].shift(-1)
    closed = nxt["ts"].notna().to_numpy()
    done = frame[closed]
    sb.add_sched(
        done["cpu"].to_numpy(),
        done["ts"].to_numpy(),
        nxt["ts"][closed].to_numpy(dtype=np.int64) - done["ts"].to_numpy(),
        done["tid"].to_numpy(),
        done["comm"].to_numpy(),
        nxt["prev_state"][closed].to_numpy(),
    )
    for row in frame[~closed].itertuples():  # still running at the end of the trace (one per CPU)
        sb.running[int(row.cpu)] = (int(row.ts), int(row.tid), str(row.comm))


def _cpu_counters(sb: SliceBuilder, f: dict[str, pa.Array], ts: np.ndarray) -> None:
    for event in ("cpu_frequency", "cpu_idle"):
        idx = np.flatnonzero(_np(pc.equal(f["event"], event), bool))
        if not len(idx):
            continue
        m = pc.extract_regex(pc.take(f["payload"], pa.array(idx)), CPU_RE2)
        ok = _np(m.is_valid(), bool)
        m = pc.filter(m, pa.array(ok))
        names = np.array([f"{event} cpu{c}" for c in _np(m.field(1), object)], dtype=object)
        sb.add_counters(
            np.full(int(ok.sum()), -1), names, ts[idx[ok]], _int(m.field(0)).astype(np.float64)
        )
