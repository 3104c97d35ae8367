from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HelloRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HelloResponse(_message.Message):
    __slots__ = ("host", "pid", "role", "index", "strategy", "repository_root", "tf_version", "profiler_address")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_ROOT_FIELD_NUMBER: _ClassVar[int]
    TF_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROFILER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    host: str
    pid: int
    role: str
    index: int
    strategy: str
    repository_root: str
    tf_version: str
    profiler_address: str
    def __init__(self, host: _Optional[str] = ..., pid: _Optional[int] = ..., role: _Optional[str] = ..., index: _Optional[int] = ..., strategy: _Optional[str] = ..., repository_root: _Optional[str] = ..., tf_version: _Optional[str] = ..., profiler_address: _Optional[str] = ...) -> None: ...

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
