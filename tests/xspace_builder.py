"""Builds XSpace protobufs for tests, with the project's compiled schema (no TensorFlow)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from podscope.trace_parsers.proto import xplane_pb2 as xp


@dataclass
class PlaneBuilder:
    """One XPlane; event and stat metadata are interned by name."""

    plane: xp.XPlane
    _events: dict[str, int] = field(default_factory=dict)
    _stats: dict[str, int] = field(default_factory=dict)

    def event_meta(
        self, name: str, display_name: str = "", stats: dict[str, Any] | None = None
    ) -> int:
        if name not in self._events:
            mid = len(self._events) + 1
            self._events[name] = mid
            md = self.plane.event_metadata[mid]
            md.id, md.name, md.display_name = mid, name, display_name
            for k, v in (stats or {}).items():
                self.set_stat(md.stats.add(), k, v)
        return self._events[name]

    def stat_meta(self, name: str) -> int:
        if name not in self._stats:
            sid = len(self._stats) + 1
            self._stats[name] = sid
            sm = self.plane.stat_metadata[sid]
            sm.id, sm.name = sid, name
        return self._stats[name]

    def set_stat(self, stat: xp.XStat, key: str, value: Any) -> None:
        """Sets a stat; ``("ref", "text")`` makes a ref stat, bytes a bytes stat."""
        stat.metadata_id = self.stat_meta(key)
        if isinstance(value, tuple) and value[0] == "ref":
            stat.ref_value = self.stat_meta(value[1])
        elif isinstance(value, bool | int):
            if value >= 2**63:
                stat.uint64_value = value
            else:
                stat.int64_value = int(value)
        elif isinstance(value, float):
            stat.double_value = value
        elif isinstance(value, bytes):
            stat.bytes_value = value
        else:
            stat.str_value = str(value)

    def line(self, line_id: int, name: str, timestamp_ns: int = 0) -> xp.XLine:
        line = self.plane.lines.add()
        line.id, line.name, line.timestamp_ns = line_id, name, timestamp_ns
        return line

    def event(
        self, line: xp.XLine, name: str, offset_ps: int, duration_ps: int, **stats: Any
    ) -> xp.XEvent:
        ev = line.events.add()
        ev.metadata_id = self.event_meta(name)
        ev.offset_ps, ev.duration_ps = offset_ps, duration_ps
        for k, v in stats.items():
            self.set_stat(ev.stats.add(), k, v)
        return ev

    def events(self, line: xp.XLine, rows: Iterable[tuple[str, int, int]]) -> None:
        for name, off, dur in rows:
            self.event(line, name, off, dur)


@dataclass
class SpaceBuilder:
    space: xp.XSpace = field(default_factory=xp.XSpace)

    def plane(self, name: str, plane_id: int = 0, **stats: Any) -> PlaneBuilder:
        p = self.space.planes.add()
        p.id, p.name = plane_id, name
        b = PlaneBuilder(p)
        for k, v in stats.items():
            b.set_stat(p.stats.add(), k, v)
        return b

    def bytes(self) -> bytes:
        return self.space.SerializeToString()
