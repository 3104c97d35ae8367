from typing import Any

# Codes of the decoder's stat kind column (trace_parsers.xplane.StatKind holds them as an enum).
KIND_NONE: int
KIND_DOUBLE: int
KIND_UINT64: int
KIND_INT64: int
KIND_STR: int
KIND_BYTES: int
KIND_REF: int

def decode_xspace(
    data: bytes | bytearray | memoryview, max_rows: int = -1, /
) -> dict[str, Any]: ...
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
    keep_key: Any,
    /,
) -> int: ...
