/* The native fast call, compiled: what oplib_core/_native/_fastcall.py generates in Python
 * for each kernel, as one C type. Optional: setup.py builds it when a C compiler is there,
 * and _fastcall.py falls back to its generated Python when this module is missing, when
 * OPLIB_NATIVE_SPEEDUPS=0, or when numpy's array layout is not the one checked below.
 *
 * A call whose arguments are exact numpy arrays and plain scalars (int, bool, float) reads
 * the arrays' metadata straight from numpy's public PyArrayObject_fields, looks it up (as a
 * bytes key) in the kernel's cache, which Python fills on a miss, allocates the outputs with
 * np.empty, writes the whole call (oplib_args, DLTensors, error) on the C stack and calls
 * the kernel with the GIL released. Everything else (another argument type, an int out of
 * int64, a very large call) goes to the Python slow path unchanged. The cached entries are
 * the same tuples the generated Python reads: (input DLTensor tails..., [out shape, out
 * dtype, out DLTensor tail] per output when a fake kernel sizes them, keep).
 *
 * No numpy headers: the array struct below is numpy's public ABI (unchanged since numpy
 * 1.7, the same in numpy 2), and _fastcall.py checks it against a probe array first.
 *
 * Only the limited API (setup.py defines Py_LIMITED_API as 3.10: one abi3 wheel per
 * platform for every Python from 3.10). The vectorcall protocol joined the limited API in
 * 3.12; before that (and in the abi3 build) the type is called through tp_call, whose
 * argument tuple is the one extra allocation. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <string.h>

#include "oplib.h"

#if !defined(Py_LIMITED_API) || Py_LIMITED_API + 0 >= 0x030C0000
#define FC_VECTORCALL 1
#endif

/* numpy's PyArrayObject_fields, as far as the fast call reads it. */
typedef struct {
  PyObject_HEAD
  char *data;
  int nd;
  Py_ssize_t *dimensions;
  Py_ssize_t *strides;
  PyObject *base;
  PyObject *descr;
  int flags;
} ArrayFields;

#define WRITEABLE 0x0400 /* NPY_ARRAY_WRITEABLE */

#define TAIL_SIZE (sizeof(DLTensor) - offsetof(DLTensor, device))
#define MAX_KEY_WORDS 512
#define STACK_BYTES 8192

typedef struct {
  PyObject_HEAD
#ifdef FC_VECTORCALL
  vectorcallfunc vectorcall;
#endif
  Py_ssize_t nargs, ntensors, nouts;
  int by_fake;
  char *kinds; /* per argument: 't', 'i' or 'f' */
  oplib_kernel_fn fn;
  oplib_shape_fn shape_fn;
  PyObject *ndarray, *cache, *miss, *slow, *empty, *fail, *out_metas, *out_meta;
  PyObject *wrapped; /* __wrapped__: the kernel object a failure's note names */
} FastCall;

/* The call's arguments as the tuple the Python side (slow, miss) takes. */
static PyObject *args_tuple(PyObject *const *args, Py_ssize_t n) {
  PyObject *tuple = PyTuple_New(n);
  if (tuple == NULL) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (PyTuple_SetItem(tuple, i, Py_NewRef(args[i])) < 0) {
      Py_DECREF(tuple);
      return NULL;
    }
  }
  return tuple;
}

static PyObject *fc_slow(FastCall *self, PyObject *const *args, Py_ssize_t n) {
  PyObject *tuple = args_tuple(args, n);
  if (tuple == NULL) return NULL;
  PyObject *result = PyObject_CallFunctionObjArgs(self->slow, tuple, NULL);
  Py_DECREF(tuple);
  return result;
}

/* Raises the kernel's (or shape function's) error through Python's fail(). */
static void fc_fail(FastCall *self, int status, const oplib_error *err, const char *what) {
  PyObject *copy = PyByteArray_FromStringAndSize(err->message, sizeof(*err));
  if (copy == NULL) return;
  PyObject *r = PyObject_CallFunction(self->fail, "iOis", status, copy, 0, what);
  Py_DECREF(copy);
  if (r != NULL) {
    Py_DECREF(r);
    PyErr_Format(PyExc_SystemError, "native call failed with status %d", status);
  }
}

static PyObject *dict_get(PyObject *dict, PyObject *key) { /* a new reference, or NULL */
#if !defined(Py_LIMITED_API) && PY_VERSION_HEX >= 0x030D0000
  PyObject *found = NULL;
  PyDict_GetItemRef(dict, key, &found);
  return found;
#else
  PyObject *found = PyDict_GetItemWithError(dict, key);
  Py_XINCREF(found);
  return found;
#endif
}

/* The hit tuple's DLTensor tail at index i, or NULL (with SystemError). */
static const char *tail_at(PyObject *hit, Py_ssize_t i) {
  PyObject *b = PyTuple_GetItem(hit, i);
  if (b == NULL || !PyBytes_Check(b) || PyBytes_Size(b) != (Py_ssize_t)TAIL_SIZE) {
    PyErr_SetString(PyExc_SystemError, "native fast call: malformed cache entry");
    return NULL;
  }
  return PyBytes_AsString(b);
}

/* The call itself: n positional arguments. */
static PyObject *fc_run(FastCall *self, PyObject *const *args, Py_ssize_t n) {
  if (n != self->nargs) return fc_slow(self, args, n);

  uint64_t key[MAX_KEY_WORDS];
  Py_ssize_t nkey = 0;
  /* the call's buffer: oplib_arg[nargs], the inputs' DLTensors, the outputs', metas, error */
  size_t ins_at = sizeof(oplib_arg) * (size_t)n;
  size_t outs_at = ins_at + sizeof(DLTensor) * (size_t)self->ntensors;
  size_t metas_at = outs_at + sizeof(DLTensor) * (size_t)self->nouts;
  size_t err_at = metas_at + (self->shape_fn ? sizeof(oplib_tensor_meta) * self->nouts : 0);
  size_t size = err_at + sizeof(oplib_error);
  _Alignas(16) char stack[STACK_BYTES];
  if (size > STACK_BYTES) return fc_slow(self, args, n);
  oplib_arg *cargs = (oplib_arg *)stack;
  DLTensor *ins = (DLTensor *)(stack + ins_at);
  DLTensor *outs = (DLTensor *)(stack + outs_at);
  oplib_tensor_meta *metas = (oplib_tensor_meta *)(stack + metas_at);
  oplib_error *err = (oplib_error *)(stack + err_at);

  memset(cargs, 0, ins_at); /* as the plain path: the unused bytes of each union zero */
  Py_ssize_t t = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *v = args[i];
    oplib_arg *a = &cargs[i];
    char kind = self->kinds[i];
    if (kind == 't' || kind == 'w') { /* 'w': a Tensor(a!), which must be writable */
      if (Py_TYPE(v) != (PyTypeObject *)self->ndarray) return fc_slow(self, args, n);
      ArrayFields *arr = (ArrayFields *)v;
      if (kind == 'w' && !(arr->flags & WRITEABLE)) return fc_slow(self, args, n);
      int nd = arr->nd;
      if (nd < 0 || nkey + 2 + 2 * (Py_ssize_t)nd > MAX_KEY_WORDS) return fc_slow(self, args, n);
      key[nkey++] = (uint64_t)(uintptr_t)arr->descr;
      key[nkey++] = (uint64_t)nd;
      for (int d = 0; d < nd; d++) key[nkey++] = (uint64_t)arr->dimensions[d];
      for (int d = 0; d < nd; d++) key[nkey++] = (uint64_t)arr->strides[d];
      ins[t].data = arr->data;
      a->v.tensor = &ins[t++];
      continue;
    }
    PyTypeObject *tp = Py_TYPE(v);
    if (tp != &PyLong_Type && tp != &PyBool_Type && (kind == 'i' || tp != &PyFloat_Type))
      return fc_slow(self, args, n);
    uint64_t bits;
    if (tp == &PyFloat_Type) {
      a->v.f = PyFloat_AsDouble(v);
      memcpy(&bits, &a->v.f, sizeof(double));
    } else {
      int overflow = 0;
      long long value = PyLong_AsLongLongAndOverflow(v, &overflow);
      if (overflow) return fc_slow(self, args, n); /* the plain path says what it does */
      if (value == -1 && PyErr_Occurred()) return NULL;
      if (kind == 'i')
        a->v.i = (int64_t)value;
      else
        a->v.f = (double)value;
      bits = (uint64_t)value;
    }
    if (self->by_fake) { /* a fake kernel may depend on scalar values (and types) */
      if (nkey + 2 > MAX_KEY_WORDS) return fc_slow(self, args, n);
      key[nkey++] = (uint64_t)(uintptr_t)tp;
      key[nkey++] = bits;
    }
  }

  PyObject *key_bytes = PyBytes_FromStringAndSize((const char *)key, nkey * 8);
  if (key_bytes == NULL) return NULL;
  PyObject *hit = dict_get(self->cache, key_bytes);
  if (hit == NULL) {
    if (PyErr_Occurred()) {
      Py_DECREF(key_bytes);
      return NULL;
    }
    PyObject *tuple = args_tuple(args, n);
    if (tuple == NULL) {
      Py_DECREF(key_bytes);
      return NULL;
    }
    hit = PyObject_CallFunctionObjArgs(self->miss, tuple, key_bytes, NULL);
    if (hit == Py_None) {
      Py_DECREF(hit);
      PyObject *result = PyObject_CallFunctionObjArgs(self->slow, tuple, NULL);
      Py_DECREF(tuple);
      Py_DECREF(key_bytes);
      return result;
    }
    Py_DECREF(tuple);
  }
  Py_DECREF(key_bytes);
  if (hit == NULL) return NULL;
  Py_ssize_t want = self->ntensors + (self->by_fake ? 3 * self->nouts : 0) + 1;
  if (!PyTuple_Check(hit) || PyTuple_Size(hit) != want) {
    Py_DECREF(hit);
    PyErr_SetString(PyExc_SystemError, "native fast call: malformed cache entry");
    return NULL;
  }
  for (Py_ssize_t j = 0; j < self->ntensors; j++) {
    const char *tail = tail_at(hit, j);
    if (tail == NULL) goto fail_hit;
    memcpy((char *)&ins[j] + offsetof(DLTensor, device), tail, TAIL_SIZE);
  }

  PyObject *results[8];
  PyObject **out_objs = results;
  if (self->nouts > 8) {
    out_objs = PyMem_Calloc((size_t)self->nouts, sizeof(PyObject *));
    if (out_objs == NULL) {
      PyErr_NoMemory();
      goto fail_hit;
    }
  } else {
    memset(results, 0, sizeof(results));
  }
  int status;
  if (self->shape_fn) {
    memset(metas, 0, sizeof(oplib_tensor_meta) * (size_t)self->nouts);
    err->message[0] = '\0';
    Py_BEGIN_ALLOW_THREADS
    status = self->shape_fn(cargs, n, metas, self->nouts, err);
    Py_END_ALLOW_THREADS
    if (status) {
      fc_fail(self, status, err, " shape function");
      goto fail_outs;
    }
  }
  for (Py_ssize_t j = 0; j < self->nouts; j++) {
    PyObject *shape, *dtype;
    const char *tail;
    PyObject *meta = NULL;
    if (self->shape_fn) {
      PyObject *raw = PyBytes_FromStringAndSize((const char *)&metas[j], sizeof(metas[j]));
      if (raw == NULL) goto fail_outs;
      meta = dict_get(self->out_metas, raw);
      if (meta == NULL && !PyErr_Occurred())
        meta = PyObject_CallFunctionObjArgs(self->out_meta, raw, NULL);
      Py_DECREF(raw);
      if (meta == NULL) goto fail_outs;
      if (!PyTuple_Check(meta) || PyTuple_Size(meta) < 3) {
        Py_DECREF(meta);
        PyErr_SetString(PyExc_SystemError, "native fast call: malformed output meta");
        goto fail_outs;
      }
      shape = PyTuple_GetItem(meta, 0);
      dtype = PyTuple_GetItem(meta, 1);
      tail = tail_at(meta, 2);
    } else {
      shape = PyTuple_GetItem(hit, self->ntensors + 3 * j);
      dtype = PyTuple_GetItem(hit, self->ntensors + 3 * j + 1);
      tail = tail_at(hit, self->ntensors + 3 * j + 2);
    }
    if (tail == NULL) {
      Py_XDECREF(meta);
      goto fail_outs;
    }
    PyObject *o = PyObject_CallFunctionObjArgs(self->empty, shape, dtype, NULL);
    if (o != NULL && Py_TYPE(o) != (PyTypeObject *)self->ndarray) {
      Py_DECREF(o);
      o = NULL;
      PyErr_SetString(PyExc_SystemError, "native fast call: np.empty gave no ndarray");
    }
    if (o == NULL) {
      Py_XDECREF(meta);
      goto fail_outs;
    }
    out_objs[j] = o;
    outs[j].data = ((ArrayFields *)o)->data;
    memcpy((char *)&outs[j] + offsetof(DLTensor, device), tail, TAIL_SIZE);
    Py_XDECREF(meta); /* the tail's bytes stay in out_metas or hit, both alive */
  }

  err->message[0] = '\0';
  Py_BEGIN_ALLOW_THREADS
  status = self->fn(cargs, n, outs, self->nouts, err);
  Py_END_ALLOW_THREADS
  if (status) {
    fc_fail(self, status, err, "");
    goto fail_outs;
  }
  Py_DECREF(hit);
  PyObject *result;
  if (self->nouts == 0) {
    result = Py_NewRef(Py_None);
  } else if (self->nouts == 1) {
    result = out_objs[0];
  } else {
    result = PyTuple_New(self->nouts);
    if (result != NULL)
      for (Py_ssize_t j = 0; j < self->nouts; j++) PyTuple_SetItem(result, j, out_objs[j]);
    else
      for (Py_ssize_t j = 0; j < self->nouts; j++) Py_DECREF(out_objs[j]);
  }
  if (out_objs != results) PyMem_Free(out_objs);
  return result;

fail_outs:
  for (Py_ssize_t j = 0; j < self->nouts; j++) Py_XDECREF(out_objs[j]);
  if (out_objs != results) PyMem_Free(out_objs);
fail_hit:
  Py_DECREF(hit);
  return NULL;
}

static PyObject *positional_only(void) {
  PyErr_SetString(PyExc_TypeError, "a native fast call takes positional arguments only");
  return NULL;
}

#ifdef FC_VECTORCALL
static PyObject *fc_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  if (kwnames != NULL && PyTuple_Size(kwnames)) return positional_only();
  return fc_run((FastCall *)op, args, PyVectorcall_NARGS(nargsf));
}
#else
/* tp_call: the tuple's items as the array fc_run reads (borrowed, as vectorcall's). */
static PyObject *fc_tp_call(PyObject *op, PyObject *args, PyObject *kwargs) {
  if (kwargs != NULL && PyDict_Size(kwargs)) return positional_only();
  Py_ssize_t n = PyTuple_Size(args);
  PyObject *items[16];
  if (n < 0) return NULL;
  if (n > 16) return PyObject_CallFunctionObjArgs(((FastCall *)op)->slow, args, NULL);
  for (Py_ssize_t i = 0; i < n; i++) items[i] = PyTuple_GetItem(args, i);
  return fc_run((FastCall *)op, items, n);
}
#endif

static int fc_traverse(PyObject *op, visitproc visit, void *arg) {
  FastCall *self = (FastCall *)op;
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(self->ndarray);
  Py_VISIT(self->cache);
  Py_VISIT(self->miss);
  Py_VISIT(self->slow);
  Py_VISIT(self->empty);
  Py_VISIT(self->fail);
  Py_VISIT(self->out_metas);
  Py_VISIT(self->out_meta);
  Py_VISIT(self->wrapped);
  return 0;
}

static int fc_clear(PyObject *op) {
  FastCall *self = (FastCall *)op;
  Py_CLEAR(self->ndarray);
  Py_CLEAR(self->cache);
  Py_CLEAR(self->miss);
  Py_CLEAR(self->slow);
  Py_CLEAR(self->empty);
  Py_CLEAR(self->fail);
  Py_CLEAR(self->out_metas);
  Py_CLEAR(self->out_meta);
  Py_CLEAR(self->wrapped);
  return 0;
}

static void fc_dealloc(PyObject *op) {
  FastCall *self = (FastCall *)op;
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  fc_clear(op);
  PyMem_Free(self->kinds);
  freefunc free_slot = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  free_slot(op);
  Py_DECREF(tp);
}

static PyObject *fc_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  PyObject *kinds_str;
  const char *kinds;
  Py_ssize_t nkinds, nouts;
  int by_fake;
  unsigned long long fn, shape_fn;
  PyObject *ndarray, *cache, *miss, *slow, *empty, *fail, *out_metas, *out_meta;
  static char *names[] = {"kinds", "nouts", "by_fake", "fn", "shape_fn", "ndarray", "cache",
                          "miss", "slow", "empty", "fail", "out_metas", "out_meta", NULL};
  /* "U", not "s#": a '#' format of an abi3 module built with 3.13's headers raises
     SystemError (PY_SSIZE_T_CLEAN) on 3.10-3.12, whatever the module defines */
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UnpKKO!O!OOOOO!O:FastCall", names,
                                   &kinds_str, &nouts, &by_fake, &fn, &shape_fn, &PyType_Type,
                                   &ndarray, &PyDict_Type, &cache, &miss, &slow, &empty, &fail,
                                   &PyDict_Type, &out_metas, &out_meta))
    return NULL;
  kinds = PyUnicode_AsUTF8AndSize(kinds_str, &nkinds);
  if (kinds == NULL) return NULL;
  if (fn == 0 || nouts < 0) {
    PyErr_SetString(PyExc_ValueError, "FastCall needs a kernel address and nouts >= 0");
    return NULL;
  }
  Py_ssize_t ntensors = 0;
  for (Py_ssize_t i = 0; i < nkinds; i++) {
    if (kinds[i] == 't' || kinds[i] == 'w')
      ntensors++;
    else if (kinds[i] != 'i' && kinds[i] != 'f') {
      PyErr_Format(PyExc_ValueError, "FastCall: unknown argument kind %c", kinds[i]);
      return NULL;
    }
  }
  allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
  FastCall *self = (FastCall *)alloc(type, 0);
  if (self == NULL) return NULL;
  self->kinds = PyMem_Malloc((size_t)nkinds + 1);
  if (self->kinds == NULL) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  memcpy(self->kinds, kinds, (size_t)nkinds + 1);
#ifdef FC_VECTORCALL
  self->vectorcall = fc_call;
#endif
  self->nargs = nkinds;
  self->ntensors = ntensors;
  self->nouts = nouts;
  self->by_fake = by_fake;
  self->fn = (oplib_kernel_fn)(uintptr_t)fn;
  self->shape_fn = (oplib_shape_fn)(uintptr_t)shape_fn;
  self->ndarray = Py_NewRef(ndarray);
  self->cache = Py_NewRef(cache);
  self->miss = Py_NewRef(miss);
  self->slow = Py_NewRef(slow);
  self->empty = Py_NewRef(empty);
  self->fail = Py_NewRef(fail);
  self->out_metas = Py_NewRef(out_metas);
  self->out_meta = Py_NewRef(out_meta);
  return (PyObject *)self;
}

static PyMemberDef fc_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(FastCall, wrapped), 0, NULL},
#ifdef FC_VECTORCALL
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastCall, vectorcall), READONLY, NULL},
#endif
    {NULL},
};

static PyType_Slot fc_slots[] = {
    {Py_tp_doc, "A native kernel's compiled fast call (see oplib_core/_native/_fastcall.py)."},
    {Py_tp_new, fc_new},
    {Py_tp_dealloc, fc_dealloc},
    {Py_tp_traverse, fc_traverse},
    {Py_tp_clear, fc_clear},
#ifdef FC_VECTORCALL
    {Py_tp_call, PyVectorcall_Call},
#else
    {Py_tp_call, fc_tp_call},
#endif
    {Py_tp_members, fc_members},
    {0, NULL},
};

static PyType_Spec fc_spec = {
    "oplib_core._native._cfastcall.FastCall",
    sizeof(FastCall),
    0,
#ifdef FC_VECTORCALL
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
#else
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
#endif
    fc_slots,
};

/* What the fast call reads of an array, for _fastcall.py's layout check. */
static PyObject *probe(PyObject *Py_UNUSED(module), PyObject *arr) {
  ArrayFields *a = (ArrayFields *)arr;
  if (a->nd < 0 || a->nd > 64) Py_RETURN_NONE;
  PyObject *shape = PyTuple_New(a->nd), *strides = PyTuple_New(a->nd);
  if (shape == NULL || strides == NULL) {
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return NULL;
  }
  for (int d = 0; d < a->nd; d++) {
    PyTuple_SetItem(shape, d, PyLong_FromSsize_t(a->dimensions[d]));
    PyTuple_SetItem(strides, d, PyLong_FromSsize_t(a->strides[d]));
  }
  return Py_BuildValue("(KNNOO)", (unsigned long long)(uintptr_t)a->data, shape, strides,
                       a->flags & WRITEABLE ? Py_True : Py_False, a->descr ? a->descr : Py_None);
}

static PyMethodDef methods[] = {
    {"probe", probe, METH_O,
     "(data, shape, strides, writeable, dtype) as the fast call reads an array."},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *module) {
  PyObject *type = PyType_FromModuleAndSpec(module, &fc_spec, NULL);
  if (type == NULL) return -1;
  int rc = PyModule_AddObjectRef(module, "FastCall", type);
  Py_DECREF(type);
  if (rc < 0) return -1;
  return PyModule_AddIntConstant(module, "TAIL_SIZE", (long)TAIL_SIZE);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cfastcall",
    "The native fast call, compiled (optional; see oplib_core/_native/_fastcall.py).",
    0, methods, module_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cfastcall(void) { return PyModuleDef_Init(&module_def); }
