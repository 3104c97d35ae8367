"""Build hook for the C extensions (the XSpace wire decoder, the ftrace text reader, the column
kernels every parser shares); metadata is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            f"trace_parsers.{name}",
            sources=[f"trace_parsers/{name}.c"],
            depends=["trace_parsers/_cols.h", "trace_parsers/_hash.h"],
            extra_compile_args=["-O3", "-std=gnu99", "-Wall", "-Wno-unused-function"],
        )
        for name in ("_xplane_fast", "_ftrace_fast", "_column_kernels")
    ]
)
