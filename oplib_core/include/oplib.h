/*
 * oplib.h -- the C ABI for native oplib kernels.
 *
 * A native library is a plain shared object (no Python C-API) that oplib opens with
 * oplib.ops.load_library(path). It exports two symbols, both written by the macro
 * OPLIB_LIBRARY_INIT below:
 *
 *   const uint32_t oplib_library_abi_version;          data, read before any code runs
 *   int oplib_library_init(const oplib_api *api);      called once with the API table
 *
 * oplib reads oplib_library_abi_version first and refuses a library whose major version
 * differs from OPLIB_ABI_VERSION_MAJOR, naming both versions, without calling into it.
 * The init function declares operators, kernels, shape functions and classes through the
 * table; every call returns OPLIB_OK (0) or an error status, and an init that returns
 * non-zero (or after which any call failed) makes oplib undo everything the library
 * registered and raise a Python exception naming the library.
 *
 * Tensors are DLPack DLTensor views (layout below, identical to dlpack.h v0.8+/1.x).
 * Kernels never allocate Python objects: oplib allocates the outputs from the op's fake
 * kernel or the library's shape function and passes them in. Calls run without the GIL,
 * so kernels must be thread-safe and must not call back into Python.
 *
 * Errors: a kernel returns 0 on success; otherwise it fills err with oplib_set_error()
 * and returns non-zero. oplib raises NativeKernelError("<op> (library <path>): <message>").
 * A kernel that crashes (segfault, abort) ends the process: that cannot be caught. Use
 * `oplib check --isolate` to run checks in subprocesses.
 */
#ifndef OPLIB_H
#define OPLIB_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OPLIB_ABI_VERSION_MAJOR 1
#define OPLIB_ABI_VERSION_MINOR 0
/* major in the high 16 bits, minor in the low 16 bits */
#define OPLIB_ABI_VERSION ((uint32_t)((OPLIB_ABI_VERSION_MAJOR << 16) | OPLIB_ABI_VERSION_MINOR))

#if defined(_WIN32)
#define OPLIB_EXPORT __declspec(dllexport)
#else
#define OPLIB_EXPORT __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------------------
 * DLPack data structures.
 * Vendored from DLPack's include/dlpack/dlpack.h (https://github.com/dmlc/dlpack),
 * Copyright (c) 2017 by Contributors, Apache License 2.0. Only the plain structs oplib
 * passes are reproduced; the layout is the same, so a kernel may include dlpack.h instead
 * (define OPLIB_HAVE_DLPACK_H before including this header).
 * ---------------------------------------------------------------------------------- */
#ifndef OPLIB_HAVE_DLPACK_H
#ifndef DLPACK_EXTERN_C /* dlpack.h not included */
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12, /* oplib's private-use devices */
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
} DLDeviceType;

typedef struct {
  int32_t device_type; /* a DLDeviceType */
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;

typedef struct {
  uint8_t code; /* a DLDataTypeCode */
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;          /* start of the allocation; the first element is at data + byte_offset */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;      /* ndim sizes */
  int64_t *strides;    /* ndim strides in elements (never NULL when oplib passes a tensor) */
  uint64_t byte_offset;
} DLTensor;
#endif
#endif

/* ------------------------------------------------------------------------------------
 * Arguments. A kernel receives one oplib_arg per schema argument, in schema order
 * (positional arguments, then keyword-only ones), defaults filled in.
 *
 *   schema type            field             C type
 *   Tensor, Tensor(a!)     tensor            const DLTensor *  (writable for a!)
 *   Tensor?                tensor            NULL when None
 *   int, SymInt            i                 int64_t
 *   bool                   i                 int64_t (0 or 1)
 *   float, Scalar          f                 double
 *   str                    s                 const char * (UTF-8, NUL-terminated)
 *   ScalarType             dtype             DLDataType
 *   Device                 device            DLDevice
 *   int[], SymInt[], bool[] ints             oplib_int_list
 *   float[]                floats            oplib_float_list
 *   Tensor[], Tensor?[]    tensors           oplib_tensor_list (NULL entries for None)
 *   ns::Class (native)     object            void * (the handle the class's create made)
 *
 * For any optional type (T?) is_none is 1 when the value is None and the field is unset.
 * A shape function running under fake mode gets object == NULL (there is no native object).
 * Pointers are valid for the duration of the call only.
 * ---------------------------------------------------------------------------------- */
typedef struct {
  const int64_t *data;
  int64_t size;
} oplib_int_list;

typedef struct {
  const double *data;
  int64_t size;
} oplib_float_list;

typedef struct {
  const DLTensor *const *data;
  int64_t size;
} oplib_tensor_list;

typedef union {
  const DLTensor *tensor;
  int64_t i;
  double f;
  const char *s;
  DLDataType dtype;
  DLDevice device;
  oplib_int_list ints;
  oplib_float_list floats;
  oplib_tensor_list tensors;
  void *object;
} oplib_value;

typedef struct {
  int32_t is_none;
  int32_t reserved;
  oplib_value v;
} oplib_arg;

/* ------------------------------------------------------------------------------------
 * Errors.
 * ---------------------------------------------------------------------------------- */
enum {
  OPLIB_OK = 0,
  OPLIB_ERROR = 1,           /* generic failure; the message says why */
  OPLIB_INVALID_ARGUMENT = 2 /* raised as a ValueError subclass */
};

#define OPLIB_ERROR_MESSAGE_SIZE 1024
typedef struct {
  char message[OPLIB_ERROR_MESSAGE_SIZE];
} oplib_error;

/* Format an error message into err (printf-style) and return OPLIB_ERROR, so a kernel can
 * write `return oplib_set_error(err, "expected %d dims, got %d", 2, (int)x->ndim);`. */
static inline int oplib_set_error(oplib_error *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, OPLIB_ERROR_MESSAGE_SIZE, fmt, ap);
  va_end(ap);
  return OPLIB_ERROR;
}

/* ------------------------------------------------------------------------------------
 * Kernels and shape functions.
 * ---------------------------------------------------------------------------------- */

/* A kernel: reads args, writes the outputs oplib allocated (one DLTensor per Tensor the
 * schema returns, C-contiguous, on the device of the inputs). */
typedef int (*oplib_kernel_fn)(const oplib_arg *args, int64_t nargs, DLTensor *outs,
                               int64_t nouts, oplib_error *err);

#define OPLIB_MAX_DIMS 16
typedef struct {
  int32_t ndim;
  DLDataType dtype;
  int64_t shape[OPLIB_MAX_DIMS];
} oplib_tensor_meta;

/* A shape function: fills one oplib_tensor_meta per returned Tensor from the arguments.
 * Tensors passed to it may have data == NULL (fake/meta mode): read only their metadata.
 * A library that registers one gets it as the op's fake kernel too. */
typedef int (*oplib_shape_fn)(const oplib_arg *args, int64_t nargs, oplib_tensor_meta *outs,
                              int64_t nouts, oplib_error *err);

/* ------------------------------------------------------------------------------------
 * Classes (opaque objects usable as schema types "ns::Name").
 * ---------------------------------------------------------------------------------- */

/* Builds the object from the arguments of init_schema (e.g. "(Tensor weight, int n) -> ()");
 * returns NULL and fills err on failure. */
typedef void *(*oplib_create_fn)(const oplib_arg *args, int64_t nargs, oplib_error *err);
typedef void (*oplib_destroy_fn)(void *self);

typedef struct {
  const char *qualname;    /* "ns::Name" */
  const char *init_schema; /* arguments of create, "(Tensor w, int n) -> ()" */
  oplib_create_fn create;
  oplib_destroy_fn destroy;
} oplib_class_def;

/* ------------------------------------------------------------------------------------
 * The API table passed to oplib_library_init. Check api->abi_major; newer minors only
 * append fields, so test api->size before using a field added after 1.0.
 * ---------------------------------------------------------------------------------- */
typedef struct oplib_api {
  uint32_t abi_major;
  uint32_t abi_minor;
  uint64_t size; /* sizeof(oplib_api) as oplib built it */
  void *ctx;     /* pass back as the first argument of every call */
  /* define(ctx, "ns::op", "(Tensor x, int n=1) -> Tensor") */
  int (*define)(void *ctx, const char *qualname, const char *schema);
  /* impl(ctx, "ns::op", "cpu", kernel): device_type is a device type ("cpu", "privateuse1"
   * or its renamed name) or "default" (every backend; arrays without DLPack, such as
   * Dask's, then get NoKernelError, so prefer device types and tag pointwise ops) */
  int (*impl)(void *ctx, const char *qualname, const char *device_type, oplib_kernel_fn fn);
  /* optional: register_shape_fn(ctx, "ns::op", fn) */
  int (*register_shape_fn)(void *ctx, const char *qualname, oplib_shape_fn fn);
  /* register_class(ctx, &def): the class becomes a schema type and oplib.classes.ns.Name */
  int (*register_class)(void *ctx, const oplib_class_def *def);
  /* register_method(ctx, "ns::Name", "method", "(ns::Name self, Tensor x) -> Tensor", fn):
   * fn is a kernel whose args[0].v.object is the object */
  int (*register_method)(void *ctx, const char *class_qualname, const char *name,
                         const char *schema, oplib_kernel_fn fn);
  /* the message of the last failed call, for logging */
  const char *(*last_error)(void *ctx);
  /* define_tagged(ctx, "ns::op", schema, "pointwise"): define with oplib.Tag names,
   * comma-separated (backends such as Dask map pointwise ops onto chunks) */
  int (*define_tagged)(void *ctx, const char *qualname, const char *schema, const char *tags);
} oplib_api;

typedef int (*oplib_init_fn)(const oplib_api *api);

/* Writes the two exported symbols of a library: OPLIB_LIBRARY_INIT(api) { ...; return 0; } */
#define OPLIB_LIBRARY_INIT(api)                                                   \
  OPLIB_EXPORT const uint32_t oplib_library_abi_version = OPLIB_ABI_VERSION;     \
  OPLIB_EXPORT int oplib_library_init(const oplib_api *api)

#ifdef __cplusplus
}
#endif

#endif /* OPLIB_H */
