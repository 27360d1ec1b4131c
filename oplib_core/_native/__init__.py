"""Native kernels: the C ABI (``include/oplib.h``) in ctypes, loading shared libraries,
calling their kernels on DLPack views, and opaque classes.

One module per concept: ``_abi`` (the structs), ``_dtypes`` (numpy dtype <-> DLDataType),
``_marshal`` (arguments and outputs of a call), ``_classes`` (opaque classes),
``_library`` (``load_library`` and the registration callbacks). This ``__init__`` imports
nothing, so the low layers (schema binding) can use ``_classes`` without a cycle, and
``import oplib_core`` does not load the ctypes layer until a library is loaded.
"""

#: The paths of the libraries loaded so far (``oplib.ops.loaded_libraries``).
loaded_libraries: set[str] = set()
