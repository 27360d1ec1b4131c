/* Native kernels of the native_ops example: plain C against oplib.h (no Python C-API).
 *
 * Ops (namespace native_ops):
 *   scaled_add(Tensor a, Tensor b, float alpha=1.0) -> Tensor      elementwise, a + alpha*b
 *   sum_dim(Tensor x, int dim, bool keepdim=False) -> Tensor       a reduction
 *   tile(Tensor x, int[] reps) -> Tensor                           an int-list argument
 *   apply_affine(native_ops::Affine f, Tensor x) -> Tensor         an opaque object
 *   minmax(Tensor x) -> (Tensor, Tensor)                           two outputs
 * Class native_ops::Affine(float scale, float shift) with method apply(Tensor x).
 * Kernels accept float32 and float64, any strides; outputs are C-contiguous.
 */
#include <stdlib.h>
#include <string.h>

#include "oplib.h"

/* ---- helpers -------------------------------------------------------------------- */

static int64_t numel(const DLTensor *t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

static int is_contiguous(const DLTensor *t) {
  int64_t expected = 1;
  for (int32_t i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != expected) return 0;
    expected *= t->shape[i];
  }
  return 1;
}

/* element offset (in elements) of the linear index i of t */
static int64_t offset_of(const DLTensor *t, int64_t i) {
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; d--) {
    off += (i % t->shape[d]) * t->strides[d];
    i /= t->shape[d];
  }
  return off;
}

static int is_float(const DLTensor *t) {
  return t->dtype.code == kDLFloat && t->dtype.lanes == 1 &&
         (t->dtype.bits == 32 || t->dtype.bits == 64);
}

static int check_float(const DLTensor *t, const char *name, oplib_error *err) {
  if (!is_float(t))
    return oplib_set_error(err, "%s must be float32 or float64, got dtype code %d bits %d", name,
                           (int)t->dtype.code, (int)t->dtype.bits);
  return OPLIB_OK;
}

static double load(const DLTensor *t, int64_t off) {
  const char *base = (const char *)t->data + t->byte_offset;
  return t->dtype.bits == 32 ? (double)((const float *)base)[off] : ((const double *)base)[off];
}

static void store(DLTensor *t, int64_t i, double v) {
  char *base = (char *)t->data + t->byte_offset;
  if (t->dtype.bits == 32)
    ((float *)base)[i] = (float)v;
  else
    ((double *)base)[i] = v;
}

static int same_shape(const DLTensor *a, const DLTensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int32_t i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}

/* ---- scaled_add ------------------------------------------------------------------ */

/* numpy's ufuncs pick AVX2 (or AVX-512) loops at run time; a wheel built with plain -O3
 * targets the baseline x86-64 (SSE2) only. target_clones makes the compiler emit the loop
 * twice, for AVX2 and for the baseline, and the dynamic loader picks one when the library
 * is loaded (an ifunc): fast where AVX2 exists, still correct where it does not. It needs
 * GCC >= 6 or Clang >= 14 on an ELF platform with ifunc support (Linux, glibc); elsewhere
 * the plain loop is built. */
#if defined(__has_attribute)
#if __has_attribute(target_clones) && defined(__x86_64__) && defined(__linux__) && \
    defined(__GLIBC__)
#define NATIVE_OPS_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef NATIVE_OPS_CLONES
#define NATIVE_OPS_CLONES
#endif

/* The contiguous float32 loop. restrict: the output is a fresh array oplib allocated, so it
 * never overlaps an input (a and b may overlap each other: both are only read). */
NATIVE_OPS_CLONES
static void scaled_add_f32(float *restrict po, const float *restrict pa,
                           const float *restrict pb, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; i++) po[i] = pa[i] + alpha * pb[i];
}

static int scaled_add(const oplib_arg *args, int64_t nargs, DLTensor *outs, int64_t nouts,
                      oplib_error *err) {
  const DLTensor *a = args[0].v.tensor, *b = args[1].v.tensor;
  double alpha = args[2].v.f;
  DLTensor *out = &outs[0];
  if (check_float(a, "a", err) || check_float(b, "b", err)) return OPLIB_ERROR;
  if (!same_shape(a, b)) return oplib_set_error(err, "a and b must have the same shape");
  if (a->dtype.bits != b->dtype.bits) return oplib_set_error(err, "a and b must have one dtype");
  int64_t n = numel(a);
  if (a->dtype.bits == 32 && is_contiguous(a) && is_contiguous(b)) {
    const float *pa = (const float *)((const char *)a->data + a->byte_offset);
    const float *pb = (const float *)((const char *)b->data + b->byte_offset);
    float *po = (float *)((char *)out->data + out->byte_offset);
    scaled_add_f32(po, pa, pb, (float)alpha, n);
    return OPLIB_OK;
  }
  for (int64_t i = 0; i < n; i++)
    store(out, i, load(a, offset_of(a, i)) + alpha * load(b, offset_of(b, i)));
  return OPLIB_OK;
}

/* ---- sum_dim ----------------------------------------------------------------------- */

static int norm_dim(int64_t dim, int32_t ndim, int64_t *out, oplib_error *err) {
  if (dim < -ndim || dim >= (ndim ? ndim : 1))
    return oplib_set_error(err, "dim %lld is out of range for a %d-d tensor", (long long)dim,
                           (int)ndim);
  *out = dim < 0 ? dim + ndim : dim;
  return OPLIB_OK;
}

static int sum_dim_shape(const oplib_arg *args, int64_t nargs, oplib_tensor_meta *outs,
                         int64_t nouts, oplib_error *err) {
  const DLTensor *x = args[0].v.tensor;
  int64_t dim = 0;
  if (check_float(x, "x", err) || norm_dim(args[1].v.i, x->ndim, &dim, err)) return OPLIB_ERROR;
  int keepdim = (int)args[2].v.i;
  int32_t k = 0;
  for (int32_t d = 0; d < x->ndim; d++) {
    if (d == dim) {
      if (keepdim) outs[0].shape[k++] = 1;
    } else {
      outs[0].shape[k++] = x->shape[d];
    }
  }
  outs[0].ndim = k;
  outs[0].dtype = x->dtype;
  return OPLIB_OK;
}

static int sum_dim(const oplib_arg *args, int64_t nargs, DLTensor *outs, int64_t nouts,
                   oplib_error *err) {
  const DLTensor *x = args[0].v.tensor;
  int64_t dim = 0;
  if (norm_dim(args[1].v.i, x->ndim, &dim, err)) return OPLIB_ERROR;
  int64_t outer = 1, inner = 1, len = x->ndim ? x->shape[dim] : 1;
  for (int32_t d = 0; d < dim; d++) outer *= x->shape[d];
  for (int32_t d = (int32_t)dim + 1; d < x->ndim; d++) inner *= x->shape[d];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      double acc = 0;
      for (int64_t j = 0; j < len; j++)
        acc += load(x, offset_of(x, (o * len + j) * inner + in));
      store(&outs[0], o * inner + in, acc);
    }
  return OPLIB_OK;
}

/* ---- tile ------------------------------------------------------------------------ */

static int tile_shape(const oplib_arg *args, int64_t nargs, oplib_tensor_meta *outs,
                      int64_t nouts, oplib_error *err) {
  const DLTensor *x = args[0].v.tensor;
  oplib_int_list reps = args[1].v.ints;
  if (check_float(x, "x", err)) return OPLIB_ERROR;
  if (reps.size != x->ndim)
    return oplib_set_error(err, "reps must have one entry per dimension (%d), got %lld",
                           (int)x->ndim, (long long)reps.size);
  for (int32_t d = 0; d < x->ndim; d++) {
    if (reps.data[d] < 0) return oplib_set_error(err, "reps must be >= 0, got %lld",
                                                 (long long)reps.data[d]);
    outs[0].shape[d] = x->shape[d] * reps.data[d];
  }
  outs[0].ndim = x->ndim;
  outs[0].dtype = x->dtype;
  return OPLIB_OK;
}

static int tile(const oplib_arg *args, int64_t nargs, DLTensor *outs, int64_t nouts,
                oplib_error *err) {
  const DLTensor *x = args[0].v.tensor;
  DLTensor *out = &outs[0];
  int64_t n = numel(out);
  for (int64_t i = 0; i < n; i++) {
    /* map the output's multi-index back to x's, modulo x's sizes */
    int64_t rest = i, off = 0;
    for (int32_t d = out->ndim - 1; d >= 0; d--) {
      int64_t idx = rest % out->shape[d];
      rest /= out->shape[d];
      off += (idx % x->shape[d]) * x->strides[d];
    }
    store(out, i, load(x, off));
  }
  return OPLIB_OK;
}

/* ---- the Affine class ---------------------------------------------------------------- */

typedef struct {
  double scale, shift;
} affine;

static void *affine_create(const oplib_arg *args, int64_t nargs, oplib_error *err) {
  if (args[0].v.f == 0.0) {
    oplib_set_error(err, "scale must be non-zero");
    return NULL;
  }
  affine *self = (affine *)malloc(sizeof(affine));
  if (!self) {
    oplib_set_error(err, "out of memory");
    return NULL;
  }
  self->scale = args[0].v.f;
  self->shift = args[1].v.f;
  return self;
}

static void affine_destroy(void *self) { free(self); }

static int same_as_x_shape(const oplib_arg *args, int64_t nargs, oplib_tensor_meta *outs,
                           int64_t nouts, oplib_error *err) {
  const DLTensor *x = args[1].v.tensor;
  if (check_float(x, "x", err)) return OPLIB_ERROR;
  if (x->ndim > OPLIB_MAX_DIMS) return oplib_set_error(err, "too many dimensions");
  outs[0].ndim = x->ndim;
  outs[0].dtype = x->dtype;
  memcpy(outs[0].shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  return OPLIB_OK;
}

/* apply_affine(native_ops::Affine f, Tensor x) and the method Affine.apply(self, x) */
static int apply_affine(const oplib_arg *args, int64_t nargs, DLTensor *outs, int64_t nouts,
                        oplib_error *err) {
  const affine *f = (const affine *)args[0].v.object;
  const DLTensor *x = args[1].v.tensor;
  int64_t n = numel(x);
  for (int64_t i = 0; i < n; i++) store(&outs[0], i, f->scale * load(x, offset_of(x, i)) + f->shift);
  return OPLIB_OK;
}

/* ---- minmax -------------------------------------------------------------------------- */

static int minmax_shape(const oplib_arg *args, int64_t nargs, oplib_tensor_meta *outs,
                        int64_t nouts, oplib_error *err) {
  const DLTensor *x = args[0].v.tensor;
  if (check_float(x, "x", err)) return OPLIB_ERROR;
  if (numel(x) == 0) return oplib_set_error(err, "minmax of an empty tensor");
  outs[0].ndim = outs[1].ndim = 0;
  outs[0].dtype = outs[1].dtype = x->dtype;
  return OPLIB_OK;
}

static int minmax(const oplib_arg *args, int64_t nargs, DLTensor *outs, int64_t nouts,
                  oplib_error *err) {
  const DLTensor *x = args[0].v.tensor;
  int64_t n = numel(x);
  if (n == 0) return oplib_set_error(err, "minmax of an empty tensor");
  double lo = load(x, offset_of(x, 0)), hi = lo;
  for (int64_t i = 1; i < n; i++) {
    double v = load(x, offset_of(x, i));
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  store(&outs[0], 0, lo);
  store(&outs[1], 0, hi);
  return OPLIB_OK;
}

/* ---- registration ------------------------------------------------------------------- */

#define CHECK(call)                   \
  do {                                \
    if ((call) != OPLIB_OK) return 1; \
  } while (0)

/* The kernels read memory through data pointers, so they serve the cpu and any device
 * whose memory the host can address: here the private-use software device. */
static int impl_all(const oplib_api *api, const char *op, oplib_kernel_fn fn) {
  CHECK(api->impl(api->ctx, op, "cpu", fn));
  return api->impl(api->ctx, op, "privateuse1", fn);
}

OPLIB_LIBRARY_INIT(api) {
  if (api->abi_major != OPLIB_ABI_VERSION_MAJOR) return 1;
  void *c = api->ctx;
  /* pointwise: Dask maps it onto chunks; its fake kernel is written in Python (plugin.py) */
  CHECK(api->define_tagged(c, "native_ops::scaled_add",
                           "(Tensor a, Tensor b, float alpha=1.0) -> Tensor", "pointwise"));
  CHECK(impl_all(api, "native_ops::scaled_add", scaled_add));

  CHECK(api->define(c, "native_ops::sum_dim", "(Tensor x, int dim, bool keepdim=False) -> Tensor"));
  CHECK(impl_all(api, "native_ops::sum_dim", sum_dim));
  CHECK(api->register_shape_fn(c, "native_ops::sum_dim", sum_dim_shape));

  CHECK(api->define(c, "native_ops::tile", "(Tensor x, int[] reps) -> Tensor"));
  CHECK(impl_all(api, "native_ops::tile", tile));
  CHECK(api->register_shape_fn(c, "native_ops::tile", tile_shape));

  static const oplib_class_def affine_def = {
      "native_ops::Affine", "(float scale, float shift=0.0) -> ()", affine_create, affine_destroy};
  CHECK(api->register_class(c, &affine_def));
  CHECK(api->register_method(c, "native_ops::Affine", "apply",
                             "(native_ops::Affine self, Tensor x) -> Tensor", apply_affine));
  CHECK(api->register_shape_fn(c, "native_ops::Affine.apply", same_as_x_shape));

  CHECK(api->define_tagged(c, "native_ops::apply_affine",
                           "(native_ops::Affine f, Tensor x) -> Tensor", "pointwise"));
  CHECK(impl_all(api, "native_ops::apply_affine", apply_affine));
  CHECK(api->register_shape_fn(c, "native_ops::apply_affine", same_as_x_shape));

  CHECK(api->define(c, "native_ops::minmax", "(Tensor x) -> (Tensor, Tensor)"));
  CHECK(impl_all(api, "native_ops::minmax", minmax));
  CHECK(api->register_shape_fn(c, "native_ops::minmax", minmax_shape));
  return 0;
}
