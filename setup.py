"""Build hook for the one C extension (the XSpace wire decoder); metadata is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trace_parsers._xplane_fast",
            sources=["trace_parsers/_xplane_fast.c"],
            extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wno-unused-function"],
        )
    ]
)
