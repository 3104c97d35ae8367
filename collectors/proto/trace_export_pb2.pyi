from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HelloRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HelloResponse(_message.Message):
    __slots__ = ("host", "pid", "role", "index", "strategy", "repository_root", "tf_version", "profiler_address", "framework", "framework_version")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_ROOT_FIELD_NUMBER: _ClassVar[int]
    TF_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROFILER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    host: str
    pid: int
    role: str
    index: int
    strategy: str
    repository_root: str
    tf_version: str
    profiler_address: str
    framework: str
    framework_version: str
    def __init__(self, host: _Optional[str] = ..., pid: _Optional[int] = ..., role: _Optional[str] = ..., index: _Optional[int] = ..., strategy: _Optional[str] = ..., repository_root: _Optional[str] = ..., tf_version: _Optional[str] = ..., profiler_address: _Optional[str] = ..., framework: _Optional[str] = ..., framework_version: _Optional[str] = ...) -> None: ...

class TraceRequest(_message.Message):
    __slots__ = ("session", "name", "duration_ms", "start_timestamp_ns", "host_tracer_level", "python_tracer_level", "device_tracer_level")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    START_TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_TRACER_LEVEL_FIELD_NUMBER: _ClassVar[int]
    PYTHON_TRACER_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TRACER_LEVEL_FIELD_NUMBER: _ClassVar[int]
    session: str
    name: str
    duration_ms: int
    start_timestamp_ns: int
    host_tracer_level: int
    python_tracer_level: int
    device_tracer_level: int
    def __init__(self, session: _Optional[str] = ..., name: _Optional[str] = ..., duration_ms: _Optional[int] = ..., start_timestamp_ns: _Optional[int] = ..., host_tracer_level: _Optional[int] = ..., python_tracer_level: _Optional[int] = ..., device_tracer_level: _Optional[int] = ...) -> None: ...

class TraceResponse(_message.Message):
    __slots__ = ("empty_trace", "size", "name", "framework")
    EMPTY_TRACE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    empty_trace: bool
    size: int
    name: str
    framework: str
    def __init__(self, empty_trace: bool = ..., size: _Optional[int] = ..., name: _Optional[str] = ..., framework: _Optional[str] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TraceFile(_message.Message):
    __slots__ = ("session", "name", "size")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    session: str
    name: str
    size: int
    def __init__(self, session: _Optional[str] = ..., name: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("files",)
    FILES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[TraceFile]
    def __init__(self, files: _Optional[_Iterable[_Union[TraceFile, _Mapping]]] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("session", "name")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    session: str
    name: str
    def __init__(self, session: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("data", "offset", "total_size", "sha256")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    total_size: int
    sha256: str
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., total_size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class StepsRequest(_message.Message):
    __slots__ = ("after_seq",)
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    def __init__(self, after_seq: _Optional[int] = ...) -> None: ...

class Beat(_message.Message):
    __slots__ = ("seq", "step", "end_unix_ns", "duration_ns")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    END_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    step: int
    end_unix_ns: int
    duration_ns: int
    def __init__(self, seq: _Optional[int] = ..., step: _Optional[int] = ..., end_unix_ns: _Optional[int] = ..., duration_ns: _Optional[int] = ...) -> None: ...

class StepsResponse(_message.Message):
    __slots__ = ("beats", "last_seq", "dropped")
    BEATS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    beats: _containers.RepeatedCompositeFieldContainer[Beat]
    last_seq: int
    dropped: int
    def __init__(self, beats: _Optional[_Iterable[_Union[Beat, _Mapping]]] = ..., last_seq: _Optional[int] = ..., dropped: _Optional[int] = ...) -> None: ...
