"""Build hook for the C extensions (the XSpace wire decoder, the ftrace text reader, the Kineto
JSON reader, the column kernels every parser shares); metadata is in pyproject.toml.

They are optional: without a C compiler the install still succeeds (the agent and the capture
client never import them), and parsing then stops with one line saying what to install
(``podscope.trace_parsers.compiled``). `make wheel` builds the platform wheel that carries them.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            f"podscope.trace_parsers.{name}",
            sources=[f"trace_parsers/{name}.c"],
            depends=["trace_parsers/_cols.h", "trace_parsers/_hash.h"],
            # A function this Python lacks fails the build (then skipped, see above) rather
            # than an import of the built module.
            extra_compile_args=[
                "-O3",
                "-std=gnu99",
                "-Wall",
                "-Wno-unused-function",
                "-Werror=implicit-function-declaration",
            ],
            optional=True,
        )
        for name in ("_xplane_fast", "_ftrace_fast", "_kineto_fast", "_column_kernels")
    ]
)
