from typing import Any

def nest(group: Any, start: Any, end: Any, depth: Any, parent: Any, self_t: Any, /) -> bool: ...
def lookup(
    plane_of: Any, ids: Any, table_plane: Any, table_ids: Any, owner: Any, out: Any, /
) -> None: ...
def sweep(
    starts: Any,
    ends: Any,
    step_start: Any,
    step_end: Any,
    step_end_sorted: Any,
    bits: int,
    out: Any,
    /,
) -> None: ...
def group_stats(
    gid: Any, dur: Any, self_t: Any, eager: Any, flops: Any, bytes_: Any, ints: Any, floats: Any, /
) -> None: ...
def gather(table: Any, codes: Any, out: Any, /) -> None: ...
