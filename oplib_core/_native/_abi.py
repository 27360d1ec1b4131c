"""The C ABI of ``include/oplib.h`` mirrored in ctypes: DLPack's structs, the argument
union, kernels, shape functions, classes and the API table. Keep in step with the header
(``tests/test_native_abi.py`` compiles a probe that checks sizes and offsets)."""

from __future__ import annotations

import ctypes as C

ABI_MAJOR = 1
ABI_MINOR = 0
ABI_VERSION = (ABI_MAJOR << 16) | ABI_MINOR
MAX_DIMS = 16
ERROR_MESSAGE_SIZE = 1024
OK = 0
INVALID_ARGUMENT = 2

#: The exported data symbol read before any library code runs, and the entry function.
VERSION_SYMBOL = "oplib_library_abi_version"
INIT_SYMBOL = "oplib_library_init"

# DLPack device types oplib uses.
KDL_CPU = 1
KDL_EXT_DEV = 12


class DLDevice(C.Structure):
    _fields_ = (("device_type", C.c_int32), ("device_id", C.c_int32))


class DLDataType(C.Structure):
    _fields_ = (("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16))


class DLTensor(C.Structure):
    _fields_ = (
        ("data", C.c_void_p),
        ("device", DLDevice),
        ("ndim", C.c_int32),
        ("dtype", DLDataType),
        ("shape", C.POINTER(C.c_int64)),
        ("strides", C.POINTER(C.c_int64)),
        ("byte_offset", C.c_uint64),
    )


class IntList(C.Structure):
    _fields_ = (("data", C.POINTER(C.c_int64)), ("size", C.c_int64))


class FloatList(C.Structure):
    _fields_ = (("data", C.POINTER(C.c_double)), ("size", C.c_int64))


class TensorList(C.Structure):
    _fields_ = (("data", C.POINTER(C.POINTER(DLTensor))), ("size", C.c_int64))


class Value(C.Union):
    _fields_ = (
        ("tensor", C.POINTER(DLTensor)),
        ("i", C.c_int64),
        ("f", C.c_double),
        ("s", C.c_char_p),
        ("dtype", DLDataType),
        ("device", DLDevice),
        ("ints", IntList),
        ("floats", FloatList),
        ("tensors", TensorList),
        ("object", C.c_void_p),
    )


class Arg(C.Structure):
    _fields_ = (("is_none", C.c_int32), ("reserved", C.c_int32), ("v", Value))


class Error(C.Structure):
    _fields_ = (("message", C.c_char * ERROR_MESSAGE_SIZE),)


class TensorMeta(C.Structure):
    _fields_ = (("ndim", C.c_int32), ("dtype", DLDataType), ("shape", C.c_int64 * MAX_DIMS))


ArgP = C.POINTER(Arg)
KernelFn = C.CFUNCTYPE(C.c_int, ArgP, C.c_int64, C.POINTER(DLTensor), C.c_int64, C.POINTER(Error))
ShapeFn = C.CFUNCTYPE(C.c_int, ArgP, C.c_int64, C.POINTER(TensorMeta), C.c_int64, C.POINTER(Error))
CreateFn = C.CFUNCTYPE(C.c_void_p, ArgP, C.c_int64, C.POINTER(Error))
DestroyFn = C.CFUNCTYPE(None, C.c_void_p)


class ClassDef(C.Structure):
    _fields_ = (
        ("qualname", C.c_char_p),
        ("init_schema", C.c_char_p),
        ("create", CreateFn),
        ("destroy", DestroyFn),
    )


DefineCb = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_char_p, C.c_char_p)
ImplCb = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_char_p, C.c_char_p, KernelFn)
ShapeCb = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_char_p, ShapeFn)
ClassCb = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(ClassDef))
MethodCb = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_char_p, C.c_char_p, C.c_char_p, KernelFn)
LastErrorCb = C.CFUNCTYPE(C.c_char_p, C.c_void_p)
DefineTaggedCb = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_char_p, C.c_char_p, C.c_char_p)


class Api(C.Structure):
    _fields_ = (
        ("abi_major", C.c_uint32),
        ("abi_minor", C.c_uint32),
        ("size", C.c_uint64),
        ("ctx", C.c_void_p),
        ("define", DefineCb),
        ("impl", ImplCb),
        ("register_shape_fn", ShapeCb),
        ("register_class", ClassCb),
        ("register_method", MethodCb),
        ("last_error", LastErrorCb),
        ("define_tagged", DefineTaggedCb),
    )


InitFn = C.CFUNCTYPE(C.c_int, C.POINTER(Api))


def version_str(v: int) -> str:
    return f"{v >> 16}.{v & 0xFFFF}"
