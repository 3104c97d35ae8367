"""The lines XProf derives from others (standard library only: the op tables of host captures
read them without pandas, ``analyzers.host_ops``)."""

from __future__ import annotations

#: Device lines that repeat other lines' events (TF/XLA derived lines): not counted twice.
DERIVED_LINES = frozenset(
    {
        "Steps",
        "TensorFlow Ops",
        "TensorFlow Name Scope",
        "XLA Ops",
        "XLA Modules",
        "Framework Ops",
        "Framework Name Scope",
        "Launch Stats",
        "Source code",
        "XLA TraceMe",
        "Async XLA Ops",
    }
)
