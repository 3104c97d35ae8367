from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class XEvent(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class XLine(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[XEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[XEvent, _Mapping]]] = ...) -> None: ...

class XPlane(_message.Message):
    __slots__ = ("lines",)
    LINES_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[XLine]
    def __init__(self, lines: _Optional[_Iterable[_Union[XLine, _Mapping]]] = ...) -> None: ...

class XSpace(_message.Message):
    __slots__ = ("planes",)
    PLANES_FIELD_NUMBER: _ClassVar[int]
    planes: _containers.RepeatedCompositeFieldContainer[XPlane]
    def __init__(self, planes: _Optional[_Iterable[_Union[XPlane, _Mapping]]] = ...) -> None: ...
