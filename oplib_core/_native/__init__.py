"""Native kernels: the C ABI (``include/oplib.h``) in ctypes, loading shared libraries,
calling their kernels on DLPack views, and opaque classes.

One module per concept: ``_abi`` (the structs), ``_dtypes`` (numpy dtype <-> DLDataType),
``_marshal`` (arguments and outputs of a call), ``_fastcall`` (the fast path, generated
Python or the compiled ``_cfastcall``), ``_classes`` (opaque classes), ``_library``
(``load_library`` and the registration callbacks). This ``__init__`` imports nothing of
oplib's, so the low layers (schema binding) can use ``_classes`` without a cycle, and
``import oplib_core`` does not load the ctypes layer until a library is loaded.
"""

#: The paths of the libraries loaded so far (``oplib.ops.loaded_libraries``).
loaded_libraries: set[str] = set()


def speedups_off() -> bool:
    """``OPLIB_NATIVE_SPEEDUPS=0``: native calls skip the compiled fast call, and op calls
    the dispatcher's compiled cached call (``_dispatch/_ccall.c``)."""
    from .._discovery import switched_on  # (read as every OPLIB_* switch is)

    return not switched_on("OPLIB_NATIVE_SPEEDUPS")


def fast_call_build() -> str:
    """Which fast call native kernels get, as ``oplib --version`` says it (without loading
    the ctypes layer)."""
    from importlib.util import find_spec  # (not at import: it costs the first op call)

    if speedups_off():
        return "generated Python, OPLIB_NATIVE_SPEEDUPS=0"
    if find_spec(f"{__name__}._cfastcall") is None:
        return "generated Python, oplib-core was built without a C compiler"
    return "compiled"
