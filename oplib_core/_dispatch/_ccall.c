/* The dispatcher's cached call, compiled: FastCall.__call__ (oplib_core/_dispatch/fastpath.py)
 * for its common case, as the base type of every FastCall. Optional: setup.py builds it when
 * a C compiler is there, and fastpath.py falls back to the Python __call__ when this module
 * is missing or OPLIB_NATIVE_SPEEDUPS=0.
 *
 * A call with no keyword arguments and no dispatch mode active, whose positional arguments
 * the op's plan accepts as they are (its tensor arguments of one class, its scalars of the
 * types the schema takes, no int[] argument to check), runs the kernel the op's cache holds
 * for that class: by_type[type(args[key0])](*args, *tails[n]). Everything else (a mode, a
 * keyword, an int[] argument, a cache miss) goes to the Python __call__ unchanged, which
 * decides as it always did. The fields are the ones the Python __call__ reads (FAST_FIELDS),
 * as members of this type, so that both read the same values.
 *
 * Only the limited API of Python 3.10 (setup.py defines Py_LIMITED_API: one abi3 build
 * serves every Python from 3.10 on), as _native/_cfastcall.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>

typedef struct {
  PyObject_HEAD
  Py_ssize_t npos, nmin, key0;
  PyObject *tails, *key_rest, *checks, *lists, *multi, *by_type, *opcache, *modes;
  /* a packet of several overloads (_OverloadedPacket): its routes by argument types */
  PyObject *routes;
  char routed;
} FastCallBase;

/* Set once by setup(): the dispatch stack's ACTIVE list, the Python __call__, and the
   function that reports a kernel's exception as the fast path does (OpCache.failed). */
static PyObject *g_active = NULL, *g_call_py = NULL, *g_failed = NULL;

/* The Python __call__ on the call as it came: FastCall's, or a routed packet's own
   (its class's _call_py). */
static PyObject *call_py(PyObject *self, PyObject *args, PyObject *kwargs) {
  PyObject *call = g_call_py;
  if (((FastCallBase *)self)->routed) {
    call = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "_call_py");
    if (call == NULL) return NULL;
  } else {
    Py_INCREF(call);
  }
  Py_ssize_t n = PyTuple_Size(args);
  PyObject *with_self = PyTuple_New(n + 1);
  if (with_self == NULL) {
    Py_DECREF(call);
    return NULL;
  }
  Py_INCREF(self);
  PyTuple_SetItem(with_self, 0, self);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *a = PyTuple_GetItem(args, i);
    Py_INCREF(a);
    PyTuple_SetItem(with_self, i + 1, a);
  }
  PyObject *out = PyObject_Call(call, with_self, kwargs);
  Py_DECREF(with_self);
  Py_DECREF(call);
  return out;
}

/* 1: every argument at the positions in `positions` (a tuple of ints) has type `t`; 0: not;
   -1: an error. */
static int same_types(PyObject *args, PyObject *positions, PyTypeObject *t) {
  Py_ssize_t k = PyTuple_Size(positions);
  for (Py_ssize_t j = 0; j < k; j++) {
    Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GetItem(positions, j));
    if (i == -1 && PyErr_Occurred()) return -1;
    PyObject *a = PyTuple_GetItem(args, i);
    if (a == NULL) return -1;
    if (Py_TYPE(a) != t) return 0;
  }
  return 1;
}

/* 1: each (i, ok) of `checks` has type(args[i]) in the frozenset ok; 0: not; -1: an error. */
static int scalars_fit(PyObject *args, PyObject *checks) {
  Py_ssize_t k = PyTuple_Size(checks);
  for (Py_ssize_t j = 0; j < k; j++) {
    PyObject *pair = PyTuple_GetItem(checks, j);
    if (pair == NULL) return -1;
    Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GetItem(pair, 0));
    if (i == -1 && PyErr_Occurred()) return -1;
    PyObject *a = PyTuple_GetItem(args, i);
    if (a == NULL) return -1;
    int found = PySet_Contains(PyTuple_GetItem(pair, 1), (PyObject *)Py_TYPE(a));
    if (found != 1) return found;
  }
  return 1;
}

/* The kernel raised: report it as the Python __call__ does (failed(opcache, exc, fn, args),
   which notes on exc what ran or raises the dtype's error from it), then raise it. */
static void kernel_raised(PyObject *opcache, PyObject *fn, PyObject *args) {
  if (opcache == NULL || !PyErr_ExceptionMatches(PyExc_Exception)) return;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != NULL) PyException_SetTraceback(value, tb);
  PyObject *r = PyObject_CallFunctionObjArgs(g_failed, opcache, value, fn, args, NULL);
  if (r == NULL) { /* it raised its own (from exc) */
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return;
  }
  Py_DECREF(r);
  PyErr_Restore(type, value, tb);
}

/* args + tail (the defaults a call left out), a new reference. */
static PyObject *with_tail(PyObject *args, PyObject *tail) {
  return PyTuple_Size(tail) == 0 ? Py_NewRef(args) : PySequence_Concat(args, tail);
}

/* The kernel on the whole call, held while it runs (it may change the cache it came
   from); its exception reported through `owner` (the op's OpCache, held by the caller) as
   the Python __call__ reports it. */
static PyObject *run_kernel(PyObject *fn, PyObject *full, PyObject *owner) {
  Py_INCREF(fn);
  PyObject *out = PyObject_Call(fn, full, NULL);
  if (out == NULL) kernel_raised(owner, fn, full);
  Py_DECREF(fn);
  return out;
}

/* A packet of several overloads (_OverloadedPacket._call_py's first case): the route its
   call shape (the arguments' types) was given, run as the chosen overload's fast path
   would run it: route = (by_type, t, tail, opcache), by_type[t](*args, *tail). */
static PyObject *routed_call(FastCallBase *self, PyObject *args, PyObject *kwargs) {
  PyObject *op = (PyObject *)self;
  if (self->routes == NULL || !PyDict_Check(self->routes)) return call_py(op, args, kwargs);
  Py_ssize_t n = PyTuple_Size(args);
  PyObject *shape = PyTuple_New(n);
  if (shape == NULL) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *t = (PyObject *)Py_TYPE(PyTuple_GetItem(args, i));
    Py_INCREF(t);
    PyTuple_SetItem(shape, i, t);
  }
  PyObject *route = PyDict_GetItemWithError(self->routes, shape); /* borrowed */
  Py_DECREF(shape);
  if (route == NULL) return PyErr_Occurred() ? NULL : call_py(op, args, kwargs);
  if (!PyTuple_Check(route) || PyTuple_Size(route) != 4) return call_py(op, args, kwargs);
  Py_INCREF(route); /* the call may replace the routes */
  PyObject *by_type = PyTuple_GetItem(route, 0), *tail = PyTuple_GetItem(route, 2);
  PyObject *fn = PyDict_Check(by_type) ? PyDict_GetItemWithError(by_type, PyTuple_GetItem(route, 1))
                                       : NULL;
  if (fn == NULL) {
    Py_DECREF(route);
    return PyErr_Occurred() ? NULL : call_py(op, args, kwargs);
  }
  PyObject *full = with_tail(args, tail);
  PyObject *out = full == NULL ? NULL : run_kernel(fn, full, PyTuple_GetItem(route, 3));
  Py_XDECREF(full);
  Py_DECREF(route);
  return out;
}

static PyObject *fc_call(PyObject *op, PyObject *args, PyObject *kwargs) {
  FastCallBase *self = (FastCallBase *)op;
  if (g_call_py == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "oplib_core._dispatch._ccall: setup() was not called");
    return NULL;
  }
  if (kwargs != NULL && PyDict_Size(kwargs) != 0) return call_py(op, args, kwargs);
  PyObject *active = PyList_GetItem(g_active, 0);
  if (active == NULL) return NULL;
  int on = PyObject_IsTrue(active);
  if (on != 0) return on < 0 ? NULL : call_py(op, args, kwargs);
  if (self->routed) return routed_call(self, args, kwargs);
  Py_ssize_t n = PyTuple_Size(args);
  if (n > self->npos || n < self->nmin || self->multi == NULL) return call_py(op, args, kwargs);
  PyObject *m_obj = PyTuple_GetItem(self->multi, n);
  if (m_obj == NULL) return NULL;
  long m = PyLong_AsLong(m_obj);
  if (m == -1 && PyErr_Occurred()) return NULL;
  PyObject *full;
  if (n == self->npos) {
    full = Py_NewRef(args);
  } else { /* the defaults appended: args + tails[n] */
    PyObject *tail = self->tails == NULL ? NULL : PyTuple_GetItem(self->tails, n);
    if (tail == NULL) return NULL;
    full = with_tail(args, tail);
    if (full == NULL) return NULL;
  }
  PyObject *first = PyTuple_GetItem(full, self->key0);
  if (first == NULL) goto error;
  PyTypeObject *t = Py_TYPE(first);
  if (m) {
    int ok = self->key_rest == NULL ? 0 : same_types(full, self->key_rest, t);
    if (ok < 0) goto error;
    if (!ok) goto python;
    if (m > 1) {
      PyObject *checks = self->checks == NULL ? NULL : PyTuple_GetItem(self->checks, n);
      PyObject *lists = self->lists == NULL ? NULL : PyTuple_GetItem(self->lists, n);
      if (checks == NULL || lists == NULL) goto error;
      if (PyTuple_Size(lists) != 0) goto python; /* int[] arguments: as Python checks them */
      ok = scalars_fit(full, checks);
      if (ok < 0) goto error;
      if (!ok) goto python;
    }
  }
  /* read now: the checks above may run a metaclass's __hash__ or __eq__ (PySet_Contains),
     which could replace the op's caches */
  PyObject *by_type = self->by_type;
  if (by_type == NULL || !PyDict_Check(by_type)) goto python;
  PyObject *fn = PyDict_GetItemWithError(by_type, (PyObject *)t); /* borrowed */
  if (fn == NULL) {
    if (PyErr_Occurred()) goto error;
    goto python;
  }
  PyObject *owner = Py_XNewRef(self->opcache); /* held: the kernel may replace it */
  PyObject *out = run_kernel(fn, full, owner);
  Py_XDECREF(owner);
  Py_DECREF(full);
  return out;
python:
  Py_DECREF(full);
  return call_py(op, args, kwargs);
error:
  Py_DECREF(full);
  return NULL;
}

/* The object fields, once for traverse and clear. */
#define FC_OBJECTS(X) X(tails) X(key_rest) X(checks) X(lists) X(multi) X(by_type) X(opcache) \
    X(modes) X(routes)

static int fc_traverse(PyObject *op, visitproc visit, void *arg) {
  FastCallBase *self = (FastCallBase *)op;
#define FC_VISIT(field) Py_VISIT(self->field);
  FC_OBJECTS(FC_VISIT)
  return 0;
}

static int fc_clear(PyObject *op) {
  FastCallBase *self = (FastCallBase *)op;
#define FC_CLEAR(field) Py_CLEAR(self->field);
  FC_OBJECTS(FC_CLEAR)
  return 0;
}

static void fc_dealloc(PyObject *op) {
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  fc_clear(op);
  freefunc free_slot = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  free_slot(op);
  Py_DECREF(tp);
}

static PyMemberDef fc_members[] = {
    {"_npos", T_PYSSIZET, offsetof(FastCallBase, npos), 0, NULL},
    {"_nmin", T_PYSSIZET, offsetof(FastCallBase, nmin), 0, NULL},
    {"_key0", T_PYSSIZET, offsetof(FastCallBase, key0), 0, NULL},
#define FC_MEMBER(field) {"_" #field, T_OBJECT_EX, offsetof(FastCallBase, field), 0, NULL},
    FC_OBJECTS(FC_MEMBER)
    {"_routed", T_BOOL, offsetof(FastCallBase, routed), 0, NULL},
    {NULL},
};

static PyType_Slot fc_slots[] = {
    {Py_tp_doc, "The dispatcher's cached call, compiled (see oplib_core/_dispatch/_ccall.c)."},
    {Py_tp_dealloc, fc_dealloc},
    {Py_tp_traverse, fc_traverse},
    {Py_tp_clear, fc_clear},
    {Py_tp_call, fc_call},
    {Py_tp_members, fc_members},
    {0, NULL},
};

static PyType_Spec fc_spec = {
    "oplib_core._dispatch._ccall.FastCallBase",
    sizeof(FastCallBase),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    fc_slots,
};

static PyObject *setup(PyObject *Py_UNUSED(module), PyObject *args) {
  PyObject *active, *call, *failed;
  if (!PyArg_ParseTuple(args, "O!OO:setup", &PyList_Type, &active, &call, &failed)) return NULL;
  PyObject *old_active = g_active, *old_call = g_call_py, *old_failed = g_failed;
  g_active = Py_NewRef(active);
  g_call_py = Py_NewRef(call);
  g_failed = Py_NewRef(failed);
  Py_XDECREF(old_active);
  Py_XDECREF(old_call);
  Py_XDECREF(old_failed);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(active, call_py, failed): the ACTIVE list, the Python __call__ and the report of "
     "a kernel's exception."},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *module) {
  PyObject *type = PyType_FromModuleAndSpec(module, &fc_spec, NULL);
  if (type == NULL) return -1;
  int rc = PyModule_AddObjectRef(module, "FastCallBase", type);
  Py_DECREF(type);
  return rc;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_ccall",
    "The dispatcher's cached call, compiled (optional; see oplib_core/_dispatch/fastpath.py).",
    0, methods, module_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ccall(void) { return PyModuleDef_Init(&module_def); }
