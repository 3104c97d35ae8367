from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProfileOptions(_message.Message):
    __slots__ = ("version", "device_type", "include_dataset_ops", "host_tracer_level", "device_tracer_level", "python_tracer_level", "enable_hlo_proto", "start_timestamp_ns", "duration_ms", "repository_path")
    class DeviceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[ProfileOptions.DeviceType]
        CPU: _ClassVar[ProfileOptions.DeviceType]
        GPU: _ClassVar[ProfileOptions.DeviceType]
        TPU: _ClassVar[ProfileOptions.DeviceType]
        PLUGGABLE_DEVICE: _ClassVar[ProfileOptions.DeviceType]
    UNSPECIFIED: ProfileOptions.DeviceType
    CPU: ProfileOptions.DeviceType
    GPU: ProfileOptions.DeviceType
    TPU: ProfileOptions.DeviceType
    PLUGGABLE_DEVICE: ProfileOptions.DeviceType
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DATASET_OPS_FIELD_NUMBER: _ClassVar[int]
    HOST_TRACER_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TRACER_LEVEL_FIELD_NUMBER: _ClassVar[int]
    PYTHON_TRACER_LEVEL_FIELD_NUMBER: _ClassVar[int]
    ENABLE_HLO_PROTO_FIELD_NUMBER: _ClassVar[int]
    START_TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_PATH_FIELD_NUMBER: _ClassVar[int]
    version: int
    device_type: ProfileOptions.DeviceType
    include_dataset_ops: bool
    host_tracer_level: int
    device_tracer_level: int
    python_tracer_level: int
    enable_hlo_proto: bool
    start_timestamp_ns: int
    duration_ms: int
    repository_path: str
    def __init__(self, version: _Optional[int] = ..., device_type: _Optional[_Union[ProfileOptions.DeviceType, str]] = ..., include_dataset_ops: bool = ..., host_tracer_level: _Optional[int] = ..., device_tracer_level: _Optional[int] = ..., python_tracer_level: _Optional[int] = ..., enable_hlo_proto: bool = ..., start_timestamp_ns: _Optional[int] = ..., duration_ms: _Optional[int] = ..., repository_path: _Optional[str] = ...) -> None: ...

class ProfileRequest(_message.Message):
    __slots__ = ("duration_ms", "max_events", "tools", "opts", "repository_root", "session_id", "host_name")
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_ROOT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_NAME_FIELD_NUMBER: _ClassVar[int]
    duration_ms: int
    max_events: int
    tools: _containers.RepeatedScalarFieldContainer[str]
    opts: ProfileOptions
    repository_root: str
    session_id: str
    host_name: str
    def __init__(self, duration_ms: _Optional[int] = ..., max_events: _Optional[int] = ..., tools: _Optional[_Iterable[str]] = ..., opts: _Optional[_Union[ProfileOptions, _Mapping]] = ..., repository_root: _Optional[str] = ..., session_id: _Optional[str] = ..., host_name: _Optional[str] = ...) -> None: ...

class ProfileToolData(_message.Message):
    __slots__ = ("name", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    data: bytes
    def __init__(self, name: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class ProfileResponse(_message.Message):
    __slots__ = ("tool_data", "empty_trace")
    TOOL_DATA_FIELD_NUMBER: _ClassVar[int]
    EMPTY_TRACE_FIELD_NUMBER: _ClassVar[int]
    tool_data: _containers.RepeatedCompositeFieldContainer[ProfileToolData]
    empty_trace: bool
    def __init__(self, tool_data: _Optional[_Iterable[_Union[ProfileToolData, _Mapping]]] = ..., empty_trace: bool = ...) -> None: ...

class TerminateRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class TerminateResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
