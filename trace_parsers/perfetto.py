"""Perfetto protobuf traces (``.perfetto-trace``, ``.pftrace``; plain, gzip or zstd) →
``TraceFrames``, with the protos of the ``perfetto`` PyPI package (no trace_processor binary).

    >>> from podscope.trace_parsers.perfetto import parse_perfetto
    >>> frames = parse_perfetto(open("trace.pftrace", "rb").read(), worker="pixel7")

Read packet by packet, so a truncated file keeps every complete packet (the cut is counted in
``parse_notes``). Handled: ftrace bundles (atrace ``print`` markers → slices/counters,
``sched_switch`` → scheduling slices, ``cpu_frequency``/``cpu_idle`` counters; other events
counted), ``process_tree`` names, ``compressed_packets``, TrackEvent slices / instants /
counters on ``track_descriptor`` tracks with names interned per sequence, and timestamps in
any clock: sequence-scoped clocks (ids 64–127, possibly incremental = delta-encoded) are
converted through the sequence's ``clock_snapshot`` to the trace clock (BOOTTIME).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from podscope.trace_parsers._slices import SliceBuilder
from podscope.trace_parsers.budget import Budget, rows_error
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.schema import TraceFrames, validate

FORMAT = "perfetto"
BOOTTIME = 6
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
#: compressed_packets may hold compressed_packets this deep (Perfetto writes one level).
MAX_NESTING = 8


def _text(value: str | bytes) -> str:
    """Protobuf string fields come back as bytes when they hold invalid UTF-8."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _packets(data: bytes, sb: SliceBuilder) -> list[bytes]:
    """Splits a Trace message into packet payloads; stops (and counts) at a truncated packet."""
    out: list[bytes] = []
    pos, n = 0, len(data)
    while pos < n:
        tag = data[pos]
        pos += 1
        if tag != 0x0A:
            sb.notes["stream_garbage"] += 1
            break
        length, shift = 0, 0
        while True:
            if pos >= n or shift > 63:
                sb.notes["truncated_packets"] += 1
                return out
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if pos + length > n:
            sb.notes["truncated_packets"] += 1
            return out
        out.append(data[pos : pos + length])
        pos += length
    return out


@dataclass
class _Sequence:
    """Per trusted_packet_sequence_id state: interned names, defaults, clocks."""

    names: dict[int, str] = field(default_factory=dict)
    default_clock: int | None = None
    default_track: int | None = None
    clocks: dict[int, tuple[bool, int]] = field(
        default_factory=dict
    )  # id -> (incremental, unit ns)
    last: dict[int, int] = field(default_factory=dict)  # incremental clocks' last value
    sync: dict[int, tuple[int, int]] = field(
        default_factory=dict
    )  # id -> (value in clock units, boottime ns)


class _Reader:
    def __init__(self, sb: SliceBuilder, pb: Any, source: str, budget: Budget) -> None:
        self.sb = sb
        self.pb = pb
        self.source = source
        self.budget = budget  # the file's: nested compressed packets and rows share it
        self.depth = 0  # compressed_packets inside compressed_packets
        self.seqs: dict[int, _Sequence] = {}
        self.tracks: dict[int, tuple[int, int, str]] = {}  # uuid -> (pid, tid, name)
        self.open: dict[int, list[tuple[int, str]]] = {}
        self.global_sync: dict[int, tuple[int, int]] = {}

    def to_boottime(self, seq: _Sequence, clock: int, value: int) -> int | None:
        if clock == BOOTTIME:
            return value
        incremental, unit = seq.clocks.get(clock, (False, 1))
        if incremental:
            value = seq.last.get(clock, 0) + value
            seq.last[clock] = value
        sync = seq.sync.get(clock) or self.global_sync.get(clock)
        if sync is None:
            self.sb.notes["timestamps_without_clock_sync"] += 1
            return None if 64 <= clock <= 127 else value
        return sync[1] + (value - sync[0]) * unit

    def packet(self, raw: bytes) -> None:
        if self.sb.rows() > self.budget.max_rows:  # checked per packet: a packet is small
            raise rows_error(self.source, FORMAT, self.budget.max_rows, self.budget.size)
        p = self.pb.TracePacket.FromString(raw)
        seq = self.seqs.setdefault(p.trusted_packet_sequence_id, _Sequence())
        if p.incremental_state_cleared or p.sequence_flags & 1:
            seq.names.clear()
            seq.last.clear()
        if p.HasField("trace_packet_defaults"):
            d = p.trace_packet_defaults
            seq.default_clock = d.timestamp_clock_id or seq.default_clock
            if d.HasField("track_event_defaults"):
                seq.default_track = d.track_event_defaults.track_uuid or seq.default_track
        if p.HasField("interned_data"):
            for n in p.interned_data.event_names:
                seq.names[n.iid] = _text(n.name)
        which = p.WhichOneof("data")
        self.sb.notes[f"packet_{which}"] += 1
        if which == "clock_snapshot":
            self.clock_snapshot(seq, p.clock_snapshot)
        elif which == "compressed_packets":
            if self.depth >= MAX_NESTING:  # each level is a Python call: no RecursionError
                raise TraceParseError(
                    self.source, FORMAT, f"compressed packets nested over {MAX_NESTING} deep"
                )
            inner_data = self.budget.inflate_zlib(p.compressed_packets)
            self.depth += 1
            try:
                for inner in _packets(inner_data, self.sb):
                    self.packet(inner)
            finally:
                self.depth -= 1
        elif which == "ftrace_events":
            self.ftrace(p.ftrace_events)
        elif which == "process_tree":
            for proc in p.process_tree.processes:
                if proc.cmdline:
                    self.sb.processes[proc.pid] = proc.cmdline[0]
            for th in p.process_tree.threads:
                if th.name:
                    self.sb.tasks[th.tid] = th.name
        elif which == "track_descriptor":
            self.track_descriptor(p.track_descriptor)
        elif which == "track_event":
            clock = p.timestamp_clock_id or seq.default_clock or BOOTTIME
            ts = self.to_boottime(seq, clock, p.timestamp)
            if ts is not None:
                self.track_event(seq, p.track_event, ts)

    def clock_snapshot(self, seq: _Sequence, snap: Any) -> None:
        boot = next((c.timestamp for c in snap.clocks if c.clock_id == BOOTTIME), None)
        for c in snap.clocks:
            unit = c.unit_multiplier_ns or 1
            if 64 <= c.clock_id <= 127:
                seq.clocks[c.clock_id] = (c.is_incremental, unit)
                if c.is_incremental:
                    seq.last[c.clock_id] = c.timestamp
            if boot is not None:
                target = seq.sync if 64 <= c.clock_id <= 127 else self.global_sync
                target[c.clock_id] = (c.timestamp, boot)

    def track_descriptor(self, td: Any) -> None:
        pid = (
            td.thread.pid
            if td.HasField("thread")
            else td.process.pid
            if td.HasField("process")
            else 0
        )
        tid = td.thread.tid if td.HasField("thread") else -1
        if td.HasField("thread") and td.thread.thread_name:
            self.sb.tasks[tid] = td.thread.thread_name
        if td.HasField("process") and td.process.process_name:
            self.sb.processes[pid] = td.process.process_name
        parent = self.tracks.get(td.parent_uuid)
        if parent and not pid:
            pid = parent[0]
        self.tracks[td.uuid] = (pid, tid, td.name or td.static_name or "")

    def track_event(self, seq: _Sequence, te: Any, ts: int) -> None:
        sb = self.sb
        uuid = te.track_uuid or seq.default_track or 0
        pid, tid, track_name = self.tracks.get(uuid, (0, -1, ""))
        name = _text(te.name) or seq.names.get(te.name_iid, "")
        sb.time(ts)
        sb.notes["events"] += 1
        t = te.type
        if t == SLICE_BEGIN:
            self.open.setdefault(uuid, []).append((ts, name))
        elif t == SLICE_END:
            stack = self.open.get(uuid)
            if stack:
                start, bname = stack.pop()
                sb.slices.append(
                    (
                        pid,
                        tid if tid >= 0 else -1,
                        start,
                        ts,
                        bname or track_name,
                        0 if tid >= 0 else 1,
                    )
                )
            else:
                sb.notes["unmatched_end"] += 1
        elif t == INSTANT:
            sb.slices.append((pid, max(tid, 0), ts, ts, name, 2))
        elif t == COUNTER:
            value = (
                te.double_counter_value if te.HasField("double_counter_value") else te.counter_value
            )
            sb.counters.append((pid, track_name or name, ts, float(value)))
        else:
            sb.notes["legacy_or_untyped_events"] += 1

    def ftrace(self, bundle: Any) -> None:
        from podscope.trace_parsers.atrace import _marker, _sched_switch

        sb = self.sb
        cpu = bundle.cpu
        for e in bundle.event:
            kind = e.WhichOneof("event")
            sb.notes["ftrace_events"] += 1
            if kind != "sched_switch":  # _sched_switch counts its own
                sb.notes[kind or "unknown_ftrace"] += 1
            ts = e.timestamp
            if kind == "print":
                sb.time(ts)
                for line in _text(e.print.buf).splitlines():
                    if "trace_event_clock_sync" not in line:
                        _marker(sb, e.pid, e.pid, ts, line)
            elif kind == "sched_switch":
                sb.time(ts)
                s = e.sched_switch
                _sched_switch(
                    sb,
                    cpu,
                    ts,
                    f"prev_comm={s.prev_comm} prev_pid={s.prev_pid} prev_state={s.prev_state} "
                    f"next_comm={s.next_comm} next_pid={s.next_pid} next_prio={s.next_prio}",
                )
            elif kind in ("g2d_tracing_mark_write", "dpu_tracing_mark_write"):
                # Kernel-side atrace markers; type 'C' carries a counter value (as in Perfetto).
                ev = getattr(e, kind)
                if ev.type == ord("C"):
                    sb.time(ts)
                    sb.counters.append((ev.pid, ev.name, ts, float(ev.value)))
            elif kind in ("cpu_frequency", "cpu_idle"):
                sb.time(ts)
                ev = getattr(e, kind)
                sb.counters.append((-1, f"{kind} cpu{ev.cpu_id}", ts, float(ev.state)))


#: The perfetto package's protobuf code refuses runtimes older than the protoc that made it.
OLD_PROTOBUF = (
    "Perfetto protobuf traces need protobuf >= 6.31.1 (the perfetto package's code), and an "
    "older protobuf is installed (a training image may pin it): read the trace where "
    "pip install -U 'protobuf>=6.31.1' is possible"
)


def parse_perfetto(data: bytes, *, worker: str, source: str = "<bytes>") -> TraceFrames:
    """Parses a Perfetto trace.

    Raises:
        TraceParseError: corrupt compression, not a Perfetto trace, or no packet readable.
    """
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    except ImportError as e:  # the package is a dependency; say so if it is missing
        if getattr(e, "name", None) != "perfetto" and "runtime_version" in str(e):
            raise TraceParseError(source, FORMAT, OLD_PROTOBUF) from e  # protobuf 4.x
        raise TraceParseError(
            source, FORMAT, "the 'perfetto' package is not installed (pip install perfetto)"
        ) from e
    except Exception as e:  # protobuf 5 or 6 older than the perfetto code it loads
        if type(e).__name__ != "VersionError":
            raise
        raise TraceParseError(source, FORMAT, f"{OLD_PROTOBUF} ({e})") from e
    from google.protobuf.message import DecodeError

    budget = Budget.for_input(len(data), source, FORMAT)
    data = budget.inflate(data)
    sb = SliceBuilder()
    packets = _packets(data, sb)
    if not packets:
        raise TraceParseError(
            source, FORMAT, "no complete TracePacket (empty, truncated or not a Perfetto trace)"
        )
    reader = _Reader(sb, pb, source, budget)
    for i, raw in enumerate(packets):
        try:
            reader.packet(raw)
        except TraceParseError:
            raise  # a bomb or a nesting attack fails the file, it is not one bad packet
        except (DecodeError, zlib.error, ValueError, TypeError, UnicodeError) as e:
            # A corrupt packet is counted and skipped; the others still parse.
            if i == 0 and len(packets) == 1:
                raise TraceParseError(source, FORMAT, f"packet 0 is not a TracePacket ({e})") from e
            sb.notes["bad_packets"] += 1
    end = sb.last or 0
    for uuid, stack in reader.open.items():
        pid, tid, _ = reader.tracks.get(uuid, (0, -1, ""))
        for start, name in stack:
            sb.slices.append((pid, tid, start, end, name, 3))
            sb.notes["unclosed_begin"] += 1
    for thread, markers in sb.stacks.items():  # atrace B markers without E
        for start, name, pid in markers:
            sb.slices.append((pid, thread, start, end, name, 3))
            sb.notes["unclosed_begin"] += 1
    for cpu, (start, tid, comm) in sb.running.items():
        sb.sched.append((cpu, start, end - start, tid, comm, ""))
    if (
        not sb.notes.get("events")
        and not sb.notes.get("ftrace_events")
        and not sb.slices
        and not sb.counters
    ):
        raise TraceParseError(source, FORMAT, f"no trace events in {len(packets)} packets")
    return validate(sb.frames(worker, source), source)
