"""The one compiled piece of oplib-core: the native fast call (oplib_core/_native/_cfastcall.c),
optional. Where no C compiler is found the build warns and goes on, and oplib runs the same
calls through generated Python (see docs/native-kernels.md, "What a call costs")."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "oplib_core._native._cfastcall",
            sources=["oplib_core/_native/_cfastcall.c"],
            include_dirs=["oplib_core/include"],
            optional=True,
        )
    ]
)
