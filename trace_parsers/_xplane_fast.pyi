from typing import Any

def decode_xspace(data: bytes | bytearray | memoryview, /) -> dict[str, Any]: ...
def nest(group: Any, start: Any, end: Any, depth: Any, parent: Any, self_t: Any, /) -> bool: ...
def lookup(
    plane_of: Any, ids: Any, table_plane: Any, table_ids: Any, owner: Any, out: Any, /
) -> None: ...
def long_stats(
    promoted: Any,
    kind: Any,
    key_row: Any,
    ival: Any,
    sid: Any,
    owner: Any,
    key_code: Any,
    str_code: Any,
    keep_all: bool,
    key_width: int,
    str_width: int,
    imask: Any,
    dval: Any,
    dmask: Any,
    targets: tuple[Any, ...],
    written: Any,
    /,
) -> int: ...
