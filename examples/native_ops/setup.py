"""Builds csrc/native_ops.c into native_ops/libnative_ops.so with the system C compiler.

The library is plain C against oplib.h (no Python C-API): oplib dlopens it, Python never
imports it. setuptools' build_ext does the compiling; only the file name and the exported
symbols differ from a Python extension.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

import oplib_core


class BuildNativeLibrary(build_ext):
    def get_ext_filename(self, fullname: str) -> str:
        *package, name = fullname.split(".")
        suffix = ".dll" if sys.platform == "win32" else ".so"
        return os.path.join(*package, f"lib{name}{suffix}")

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return ext.export_symbols  # not a Python module: no PyInit_ symbol


setup(
    ext_modules=[
        Extension(
            "native_ops.native_ops",
            sources=["csrc/native_ops.c"],
            include_dirs=[oplib_core.get_include()],
            extra_compile_args=["-O3"] if sys.platform != "win32" else [],
        )
    ],
    cmdclass={"build_ext": BuildNativeLibrary},
)
