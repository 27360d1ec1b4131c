/* The dispatcher's cached call, compiled: FastCall.__call__ (oplib_core/_dispatch/fastpath.py)
 * for its common case, as the base type of every FastCall. Optional: setup.py builds it when
 * a C compiler is there, and fastpath.py falls back to the Python __call__ when this module
 * is missing or OPLIB_NATIVE_SPEEDUPS=0.
 *
 * A call with no dispatch mode active, whose positional arguments the op's plan accepts
 * (its tensor arguments of one class, its scalars of the types the schema takes, its int[]
 * arguments lists, tuples or ints of ints, given to the kernel as lists), its keywords, if
 * any, naming positional parameters it did not give (placed as binding.by_position places
 * them), runs the kernel the op's cache holds for that class:
 * by_type[type(args[key0])](*args, *tails[n]); for oplib Tensors recording no autograd,
 * the kernel OpCache.tensor holds for the arrays they wrap, its result made a Tensor here
 * (tensor_call). Keyword-only arguments (t.sum(dtype=...)) take the cache of kernels with
 * their values bound (keyed_call). Everything else (a mode, a Tensor requiring grad, a
 * cache miss) goes to the Python __call__ as it came, which decides as it always did. An
 * op with lists of tensors (cat) runs a call from its ListedPlan the same way. A factory
 * (zeros: no tensor argument, placed by its device= keyword) runs a call whose device an
 * earlier call placed from its plan (FactoryPlan), keywords and int[] sizes included, as
 * factory_call in fastpath.py does; the Tensor factories' common case is one call here
 * too (sized_tensor). The fields are the ones the Python __call__ reads (FAST_FIELDS), as
 * members of this type, so that both read the same values.
 *
 * Only the limited API (setup.py defines Py_LIMITED_API), built twice from this file: as
 * _ccall for Python 3.10's (one abi3 build serves every Python from 3.10 on, as
 * _native/_cfastcall.c), called by tp_call with an argument tuple and a keyword dict; and,
 * where the build runs on Python 3.12 or later, as _ccall312 for 3.12's, whose calls come
 * by vectorcall and call their kernels so: no argument tuple or keyword dict is made for a
 * call (issue 30; fastpath.py imports _ccall312 first on 3.12 and later). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>

/* the module's name: _ccall, or _ccall312 (setup.py's CCALL_MODULE) */
#ifndef CCALL_MODULE
#define CCALL_MODULE _ccall
#endif
#define CCALL_STR2(x) #x
#define CCALL_STR(x) CCALL_STR2(x)
#define CCALL_CAT2(a, b) a##b
#define CCALL_CAT(a, b) CCALL_CAT2(a, b)

/* built for the limited API of 3.12 or later: calls come, and go to kernels, by vectorcall */
#if defined(Py_LIMITED_API) && Py_LIMITED_API + 0 >= 0x030C0000
#define VECTORCALL 1
#else
#define VECTORCALL 0
#endif

/* the most arguments a routed call's last-hit cache compares (routed_call) */
#define HIT_ARITY 4
/* the most positional arguments, the defaults appended included, a call runs in C (a
   call with more goes to the Python call) */
#define MAX_ARGS 24
/* the most int[] arguments one call gives its kernel as lists made for them */
#define MAX_MADE 8

typedef struct {
  PyObject_HEAD
  Py_ssize_t npos, nmin, key0;
  PyObject *tails, *key_rest, *checks, *lists, *multi, *by_type, *opcache, *modes;
  /* a packet of several overloads (_OverloadedPacket): its routes by argument types */
  PyObject *routes;
  /* a factory's plan (FactoryPlan), or NULL or None */
  PyObject *fplan;
  /* an op's with lists of tensors (ListedPlan), or NULL or None */
  PyObject *lplan;
  /* the positional parameters' names and defaults (Signature.params): a call's keywords
     placed by them (place_keywords, and the Python call's by_position) */
  PyObject *params;
  /* an op's OpCache.tensor (array class -> kernel) where it returns one plain Tensor, or
     NULL or None: its calls with Tensors run in C (tensor_call) */
  PyObject *tensor;
  /* the keyword-only arguments that key the op's OpCache.keyed (Signature.kwplan:
     (name, the types taken, the dtype classes among them) each), and that dict */
  PyObject *kwplan, *keyed;
  /* the routed call's last hit (routed_call): the routes dict it came from, the call
     shape's arity and argument types, and the route; held, so that none of them can be
     freed and another object take its address */
  PyObject *hit_routes, *hit_route, *hit_types[HIT_ARITY];
  Py_ssize_t hit_n;
#if VECTORCALL
  vectorcallfunc vectorcall; /* fc_vectorcall, set by fc_new */
#endif
  char routed;
} FastCallBase;

/* Set once by setup(): the dispatch stack's ACTIVE list, the Python __call__, the
   function that reports a kernel's exception as the fast path does (OpCache.failed),
   oplib's Device class and the set of numpy dtype classes factories have met. */
static PyObject *g_active = NULL, *g_call_py = NULL, *g_failed = NULL, *g_device = NULL,
                *g_dtype_classes = NULL, *g_default_dtype = NULL, *g_required = NULL;
/* "type" and "index", a Device's fields, and "dtype", a factory_entry's keyword (made once:
   a name made per read costs a str) */
static PyObject *g_type_name = NULL, *g_index_name = NULL, *g_dtype_name = NULL;
/* "by_type" and "tensor", a keyed OpCache's dicts, and "metadata", a numpy dtype's */
static PyObject *g_by_type_name = NULL, *g_tensor_name = NULL, *g_metadata_name = NULL;

/* oplib's Tensor class, its slots' member descriptors (setup()'s order: TENSOR_SLOTS in
   fastpath.py) and their get and set functions, and the int 0 (a new Tensor's _out_nr):
   set by setup(). The descriptors are read and written through their own functions, the
   way attribute access reaches them, without the name lookup. */
enum { T_DATA, T_RG, T_GRAD, T_GRAD_FN, T_OUT_NR, T_VC, T_SLOTS };
static PyObject *g_tensor = NULL, *g_slots[T_SLOTS], *g_zero = NULL;
static descrgetfunc g_slot_get = NULL;
static descrsetfunc g_slot_set = NULL;
static allocfunc g_tensor_alloc = NULL;

static int has_plan(FastCallBase *self) { return self->fplan != NULL && self->fplan != Py_None; }

/* Whether a device= value is one a factory's cache holds calls under (fastpath.py's
   DEVICE_KEYS): None, a str, an int (a bool is refused by binding) or a Device. */
static int is_device_key(PyObject *device) {
  return device == Py_None || PyUnicode_CheckExact(device) || PyLong_CheckExact(device) ||
         (PyObject *)Py_TYPE(device) == g_device;
}

/* A call as it came: its n positional arguments, either the tuple and the keyword dict
   (or NULL) of a tp_call (tuple set, argv NULL: its items are read from the tuple, never
   copied), or the array argv and the keyword names (or NULL) of a vectorcall, whose
   values follow argv[n - 1] (tuple NULL). orig: the call as it came, when this one is
   its keywords placed as positional arguments (place_keywords), else NULL. */
typedef struct Call {
  PyObject *const *argv;
  Py_ssize_t n;
  PyObject *tuple, *kwargs, *kwnames;
  const struct Call *orig;
} Call;

/* c's positional argument i (0 <= i < c->n), borrowed. */
static PyObject *arg_at(const Call *c, Py_ssize_t i) {
  return c->argv != NULL ? c->argv[i] : PyTuple_GetItem(c->tuple, i);
}

static Py_ssize_t kw_count(const Call *c) {
  if (c->tuple != NULL) return c->kwargs == NULL ? 0 : PyDict_Size(c->kwargs);
  return c->kwnames == NULL ? 0 : PyTuple_Size(c->kwnames);
}

/* The value of keyword `name`, borrowed; NULL with no error: not given. */
static PyObject *kw_get(const Call *c, PyObject *name) {
  if (c->tuple != NULL)
    return c->kwargs == NULL ? NULL : PyDict_GetItemWithError(c->kwargs, name);
  Py_ssize_t k = kw_count(c);
  for (Py_ssize_t i = 0; i < k; i++) {
    int same = PyObject_RichCompareBool(PyTuple_GetItem(c->kwnames, i), name, Py_EQ);
    if (same < 0) return NULL;
    if (same) return c->argv[c->n + i];
  }
  return NULL;
}

/* The keyword at *pos (name and value borrowed), *pos moved past it: 1; 0 after the last. */
static int kw_next(const Call *c, Py_ssize_t *pos, PyObject **name, PyObject **value) {
  if (c->tuple != NULL) return c->kwargs != NULL && PyDict_Next(c->kwargs, pos, name, value);
  if (*pos >= kw_count(c)) return 0;
  *name = PyTuple_GetItem(c->kwnames, *pos);
  *value = c->argv[c->n + *pos];
  (*pos)++;
  return 1;
}

/* The Python __call__ on the call as it came: FastCall's, or a routed packet's or a
   factory's own (its class's _call_py). */
static PyObject *call_py(PyObject *self, const Call *c) {
  if (c->orig != NULL) c = c->orig;
  PyObject *call = g_call_py;
  if (((FastCallBase *)self)->routed || has_plan((FastCallBase *)self)) {
    call = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "_call_py");
    if (call == NULL) return NULL;
  } else {
    Py_INCREF(call);
  }
  PyObject *out;
#if VECTORCALL
  if (c->tuple == NULL) { /* call(self, *argv, **kw), by vectorcall as it came */
    Py_ssize_t total = c->n + kw_count(c);
    PyObject *small[MAX_ARGS + 1], **with_self = small;
    if (total > MAX_ARGS) { /* (small holds self and MAX_ARGS more) */
      with_self = PyMem_Malloc((size_t)(total + 1) * sizeof(PyObject *));
      if (with_self == NULL) {
        Py_DECREF(call);
        return PyErr_NoMemory();
      }
    }
    with_self[0] = self;
    for (Py_ssize_t i = 0; i < total; i++) with_self[i + 1] = c->argv[i];
    out = PyObject_Vectorcall(call, with_self, (size_t)(c->n + 1), c->kwnames);
    if (with_self != small) PyMem_Free(with_self);
    Py_DECREF(call);
    return out;
  }
#endif
  Py_ssize_t n = PyTuple_Size(c->tuple);
  PyObject *with_self = PyTuple_New(n + 1);
  if (with_self == NULL) {
    Py_DECREF(call);
    return NULL;
  }
  Py_INCREF(self);
  PyTuple_SetItem(with_self, 0, self);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *a = PyTuple_GetItem(c->tuple, i);
    Py_INCREF(a);
    PyTuple_SetItem(with_self, i + 1, a);
  }
  out = PyObject_Call(call, with_self, c->kwargs);
  Py_DECREF(with_self);
  Py_DECREF(call);
  return out;
}

/* A kernel's positional arguments: the call's, then the defaults it left out (its tail,
   held), an int[] given as a tuple or an int replaced by a list made for it (held). item
   is the call's own array (NULL for a tp_call's: its tuple, base) until an argument is
   appended or replaced (then buf). */
typedef struct {
  PyObject *const *item;
  Py_ssize_t n, nmade;
  PyObject *base; /* the call's tuple (tp_call), borrowed, or NULL */
  PyObject *tail, *made[MAX_MADE];
  PyObject *buf[MAX_ARGS];
} Full;

/* 1: f holds c's positional arguments and then tail's items (tail may be NULL); 0: too
   many for f, with no error. full_clear(f) releases it either way. */
static int full_init(Full *f, const Call *c, PyObject *tail) {
  Py_ssize_t m = tail == NULL ? 0 : PyTuple_Size(tail);
  f->item = c->argv;
  f->n = c->n;
  f->nmade = 0;
  f->base = c->tuple;
  f->tail = NULL;
  if (c->n + m > MAX_ARGS) return 0;
  if (m == 0) return 1;
  for (Py_ssize_t i = 0; i < c->n; i++) f->buf[i] = arg_at(c, i);
  for (Py_ssize_t j = 0; j < m; j++) f->buf[c->n + j] = PyTuple_GetItem(tail, j);
  f->item = f->buf;
  f->n = c->n + m;
  f->tail = Py_NewRef(tail);
  return 1;
}

static void full_clear(Full *f) {
  Py_CLEAR(f->tail);
  for (Py_ssize_t i = 0; i < f->nmade; i++) Py_DECREF(f->made[i]);
  f->nmade = 0;
}

/* f's arguments as a tuple, a new reference: the call's own while nothing was replaced
   (with its tail appended, if any). (item is buf whenever base is NULL or a list was
   made.) */
static PyObject *full_tuple(const Full *f) {
  if (f->base != NULL && f->nmade == 0)
    return f->tail == NULL ? Py_NewRef(f->base) : PySequence_Concat(f->base, f->tail);
  PyObject *t = PyTuple_New(f->n);
  if (t == NULL) return NULL;
  for (Py_ssize_t i = 0; i < f->n; i++) PyTuple_SetItem(t, i, Py_NewRef(f->item[i]));
  return t;
}

/* f->item[i], borrowed; NULL with IndexError when i is out of range (a plan that does
   not fit its call: the Python call raises the same). */
static PyObject *full_item(const Full *f, Py_ssize_t i) {
  if (i < 0 || i >= f->n) {
    PyErr_SetString(PyExc_IndexError, "oplib_core._dispatch._ccall: argument index out of range");
    return NULL;
  }
  return f->item != NULL ? f->item[i] : PyTuple_GetItem(f->base, i);
}

/* f's argument i (0 <= i < f->n) replaced by `made`, a new reference f now holds:
   1; 0 (made released): f holds no more. */
static int full_replace(Full *f, Py_ssize_t i, PyObject *made) {
  if (f->nmade == MAX_MADE) {
    Py_DECREF(made);
    return 0;
  }
  f->made[f->nmade++] = made;
  if (f->item != f->buf) { /* the call's own arguments: copied before a write */
    for (Py_ssize_t a = 0; a < f->n; a++) f->buf[a] = full_item(f, a);
    f->item = f->buf;
  }
  f->buf[i] = made;
  return 1;
}

/* fn(*f, **kw): by vectorcall where built so and no keyword is passed. */
static PyObject *invoke(PyObject *fn, const Full *f, PyObject *kw) {
#if VECTORCALL
  if (kw == NULL && f->item != NULL) return PyObject_Vectorcall(fn, f->item, (size_t)f->n, NULL);
#endif
  PyObject *args = full_tuple(f);
  if (args == NULL) return NULL;
  PyObject *out = PyObject_Call(fn, args, kw);
  Py_DECREF(args);
  return out;
}

/* 1: every argument at the positions in `positions` (a tuple of ints) has type `t`; 0: not;
   -1: an error. */
static int same_types(const Full *f, PyObject *positions, PyTypeObject *t) {
  Py_ssize_t k = PyTuple_Size(positions);
  for (Py_ssize_t j = 0; j < k; j++) {
    Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GetItem(positions, j));
    if (i == -1 && PyErr_Occurred()) return -1;
    PyObject *a = full_item(f, i);
    if (a == NULL) return -1;
    if (Py_TYPE(a) != t) return 0;
  }
  return 1;
}

/* For pair j of `pairs` ((position, x) tuples): f's argument at the position, borrowed,
   the position into *at and x into *x (borrowed); NULL with an error when one is
   missing. */
static PyObject *pair_item(const Full *f, PyObject *pairs, Py_ssize_t j, Py_ssize_t *at,
                           PyObject **x) {
  PyObject *pair = PyTuple_GetItem(pairs, j);
  if (pair == NULL) return NULL;
  *at = PyLong_AsSsize_t(PyTuple_GetItem(pair, 0));
  if (*at == -1 && PyErr_Occurred()) return NULL;
  *x = PyTuple_GetItem(pair, 1);
  return *x == NULL ? NULL : full_item(f, *at);
}

/* 1: each (i, ok) of `checks` has type(f[i]) in the frozenset ok; 0: not; -1: an error. */
static int scalars_fit(const Full *f, PyObject *checks) {
  Py_ssize_t k = PyTuple_Size(checks);
  for (Py_ssize_t j = 0; j < k; j++) {
    Py_ssize_t i;
    PyObject *ok, *a = pair_item(f, checks, j, &i, &ok);
    if (a == NULL) return -1;
    int found = PySet_Contains(ok, (PyObject *)Py_TYPE(a));
    if (found != 1) return found;
  }
  return 1;
}

/* 1: each int[] of `lists` ((i, nullable) pairs) is None where allowed, a list or a tuple
   of ints, or an int; a tuple is given to the kernel as a list and an int as a list of
   it (sum(t, 0) as sum(t, [0])), as binding gives them (f's item replaced by a list it
   holds); 0: not; -1: an error. */
static int lists_fit(Full *f, PyObject *lists) {
  Py_ssize_t k = PyTuple_Size(lists);
  for (Py_ssize_t j = 0; j < k; j++) {
    Py_ssize_t i;
    PyObject *can_be_none, *v = pair_item(f, lists, j, &i, &can_be_none);
    if (v == NULL) return -1;
    if (v == Py_None) {
      int nullable = PyObject_IsTrue(can_be_none);
      if (nullable <= 0) return nullable;
      continue;
    }
    int is_list = PyList_CheckExact(v), is_int = PyLong_CheckExact(v);
    if (!is_list && !is_int && !PyTuple_CheckExact(v)) return 0;
    Py_ssize_t m = is_int ? 0 : is_list ? PyList_Size(v) : PyTuple_Size(v);
    for (Py_ssize_t e = 0; e < m; e++) {
      PyObject *item = is_list ? PyList_GetItem(v, e) : PyTuple_GetItem(v, e);
      if (item == NULL) return -1;
      if (!PyLong_CheckExact(item)) return 0;
    }
    if (is_list) continue;
    PyObject *made = is_int ? PyList_New(1) : PySequence_List(v);
    if (made == NULL) return -1;
    if (is_int) PyList_SetItem(made, 0, Py_NewRef(v));
    if (!full_replace(f, i, made)) return 0;
  }
  return 1;
}

/* The kernel raised: report it as the Python call does, then raise it. An op's kernel:
   report is NULL and owner its OpCache (OpCache.failed(owner, exc, fn, args)); a
   factory's: report is its plan's failed (failed(exc, fn, args, kw, owner), owner the
   backend). Either notes on exc what ran, or raises the dtype's error from it. */
static void kernel_raised(PyObject *report, PyObject *owner, PyObject *fn, const Full *f,
                          PyObject *kw) {
  if (owner == NULL || !PyErr_ExceptionMatches(PyExc_Exception)) return;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != NULL) PyException_SetTraceback(value, tb);
  PyObject *args = full_tuple(f), *r = NULL;
  if (args != NULL)
    r = report == NULL ? PyObject_CallFunctionObjArgs(g_failed, owner, value, fn, args, NULL)
                       : PyObject_CallFunctionObjArgs(report, value, fn, args, kw, owner, NULL);
  Py_XDECREF(args);
  if (r == NULL) { /* it raised its own (from exc) */
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return;
  }
  Py_DECREF(r);
  PyErr_Restore(type, value, tb);
}

/* The kernel on the whole call, held while it runs (it may change the cache it came
   from); its exception reported as the Python call reports it (kernel_raised: report and
   owner are held by the caller). */
static PyObject *run_kernel(PyObject *fn, const Full *f, PyObject *kw, PyObject *report,
                            PyObject *owner) {
  Py_INCREF(fn);
  PyObject *out = invoke(fn, f, kw);
  if (out == NULL) kernel_raised(report, owner, fn, f, kw);
  Py_DECREF(fn);
  return out;
}

/* A new Tensor over data, a new reference: Tensor._wrap's (no grad, no history), every
   slot set as _init sets it. */
static PyObject *wrap_tensor(PyObject *data) {
  if (g_tensor == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "oplib_core._dispatch._ccall: setup() was not called");
    return NULL;
  }
  PyObject *t = g_tensor_alloc((PyTypeObject *)g_tensor, 0);
  if (t == NULL) return NULL;
  PyObject *values[T_SLOTS] = {data, Py_False, Py_None, Py_None, g_zero, Py_None};
  for (int i = 0; i < T_SLOTS; i++)
    if (g_slot_set(g_slots[i], t, values[i]) < 0) {
      Py_DECREF(t);
      return NULL;
    }
  return t;
}

/* The module's wrap(data): wrap_tensor (fastpath.py's _make_tensor). */
static PyObject *wrap(PyObject *Py_UNUSED(module), PyObject *data) { return wrap_tensor(data); }

/* The keyword names a Tensor factory passes (sized_tensor): none, dtype, device, both. */
static PyObject *g_factory_kwnames[4];

/* The module's sized_tensor(op, size, dtype, device): the Tensor factories' common case
   (oplib.zeros(2, 3, dtype=..., device=...), _factories.py's _sized), op (a factory
   op, such as oplib::zeros) called on the shape `size` gives (the tuple of a call's
   positional arguments: ints, or one list or tuple), with dtype= and device= passed
   where not None, as _made passes them, its array wrapped in a Tensor. None: the Python
   function's call (a size of another form, a device given as another object). */
static PyObject *sized_tensor(PyObject *Py_UNUSED(module), PyObject *const *args,
                              Py_ssize_t nargs) {
  if (nargs != 4 || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "sized_tensor(op, size, dtype, device): a size tuple");
    return NULL;
  }
  PyObject *op = args[0], *size = args[1], *dtype = args[2], *device = args[3];
  if (!is_device_key(device)) Py_RETURN_NONE;
  Py_ssize_t n = PyTuple_Size(size);
  PyObject *shape = NULL, *first = n == 1 ? PyTuple_GetItem(size, 0) : NULL;
  if (first != NULL && (PyList_CheckExact(first) || PyTuple_CheckExact(first))) {
    shape = Py_NewRef(first); /* (the op's call checks its items) */
  } else {
    for (Py_ssize_t i = 0; i < n; i++)
      if (!PyLong_CheckExact(PyTuple_GetItem(size, i))) Py_RETURN_NONE;
    shape = PySequence_List(size);
    if (shape == NULL) return NULL;
  }
  int which = (dtype != Py_None) | (device != Py_None) << 1;
  PyObject *kwnames = g_factory_kwnames[which], *argv[3] = {shape, NULL, NULL};
  Py_ssize_t nkw = 0;
  if (dtype != Py_None) argv[1 + nkw++] = dtype;
  if (device != Py_None) argv[1 + nkw++] = device;
  PyObject *out;
#if VECTORCALL
  out = PyObject_Vectorcall(op, argv, 1, nkw ? kwnames : NULL);
#else
  PyObject *kwargs = NULL, *call_args = PyTuple_Pack(1, shape);
  if (call_args != NULL && nkw) {
    kwargs = PyDict_New();
    for (Py_ssize_t j = 0; kwargs != NULL && j < nkw; j++)
      if (PyDict_SetItem(kwargs, PyTuple_GetItem(kwnames, j), argv[1 + j]) < 0) Py_CLEAR(kwargs);
  }
  out = call_args == NULL || (nkw && kwargs == NULL) ? NULL : PyObject_Call(op, call_args, kwargs);
  Py_XDECREF(call_args);
  Py_XDECREF(kwargs);
#endif
  Py_DECREF(shape);
  if (out == NULL) return NULL;
  PyObject *t = wrap_tensor(out);
  Py_DECREF(out);
  return t;
}

/* The array Tensor t wraps, a new reference, where t records no autograd; NULL (no error
   set) where it requires grad, or a slot is not set (the Python call then decides, and
   raises as it always did). */
static PyObject *array_of(PyObject *t) {
  PyObject *rg = g_slot_get(g_slots[T_RG], t, g_tensor);
  if (rg == NULL) {
    PyErr_Clear();
    return NULL;
  }
  Py_DECREF(rg); /* (only its identity is compared) */
  if (rg != Py_False) return NULL;
  PyObject *d = g_slot_get(g_slots[T_DATA], t, g_tensor);
  if (d == NULL) PyErr_Clear();
  return d;
}

/* A call whose tensor arguments passed the plan's checks as oplib Tensors (their class
   exactly Tensor), of an op whose `tensors` (OpCache.tensor) is held: where none of them
   requires grad and the arrays they wrap are of one class (cls's, where not NULL: the
   class of the arrays in its lists, unwrap_listed) that `tensors` holds a kernel for, that
   kernel on f with each Tensor replaced by its array, its result wrapped (tensor_entry's
   case without autograd): 1, *out the result (NULL: an error). 0: f's arguments are
   unchanged and the call is the Python entry's (a Tensor requiring grad, arrays of several
   classes, no kernel yet, more Tensors than f can replace). */
static int tensor_call(PyObject *tensors, PyObject *owner, Full *f, PyTypeObject *cls,
                       PyObject **out) {
  Py_ssize_t at[MAX_MADE];
  PyObject *data[MAX_MADE];
  int k = 0, served = 0;
  *out = NULL;
  for (Py_ssize_t i = 0; i < f->n; i++) {
    PyObject *a = full_item(f, i);
    if (a == NULL) {
      PyErr_Clear();
      goto done;
    }
    if ((PyObject *)Py_TYPE(a) != g_tensor) continue;
    if (k + f->nmade == MAX_MADE) goto done;
    PyObject *d = array_of(a);
    if (d == NULL) goto done;
    at[k] = i;
    data[k++] = d;
    if (cls == NULL) cls = Py_TYPE(d);
    else if (Py_TYPE(d) != cls) goto done;
  }
  if (cls == NULL) goto done;
  PyObject *fn = PyDict_GetItemWithError(tensors, (PyObject *)cls); /* borrowed */
  if (fn == NULL) {
    if (PyErr_Occurred()) served = 1; /* *out NULL: the lookup's error */
    goto done;
  }
  Py_INCREF(fn);
  served = 1;
  for (int j = 0; j < k; j++) full_replace(f, at[j], data[j]); /* (room checked above) */
  k = 0;
  PyObject *result = run_kernel(fn, f, NULL, NULL, owner);
  Py_DECREF(fn);
  if (result != NULL) {
    *out = wrap_tensor(result);
    Py_DECREF(result);
  }
done:
  for (int j = 0; j < k; j++) Py_DECREF(data[j]);
  return served;
}

/* The route of routed_call's call shape, a new reference (NULL with no error: none yet). The
   last hit is compared first, type by type: a routes dict maps a shape to one route for
   as long as it lives (_OverloadedPacket._pick adds, _set replaces the dict), so a hit
   of the same dict and the same types is that route, without the shape's tuple made and
   hashed per call (issue 30: a binary op's packet call). */
static PyObject *route_of(FastCallBase *self, const Call *c) {
  Py_ssize_t n = c->n;
  PyObject *routes = self->routes;
  if (routes == self->hit_routes && n == self->hit_n) {
    Py_ssize_t i = 0;
    while (i < n && (PyObject *)Py_TYPE(arg_at(c, i)) == self->hit_types[i]) i++;
    if (i == n) return Py_NewRef(self->hit_route);
  }
  PyObject *shape = PyTuple_New(n);
  if (shape == NULL) return NULL;
  Py_INCREF(routes); /* a metaclass's __eq__ run by the lookup may replace the routes */
  for (Py_ssize_t i = 0; i < n; i++)
    PyTuple_SetItem(shape, i, Py_NewRef((PyObject *)Py_TYPE(arg_at(c, i))));
  PyObject *route = Py_XNewRef(PyDict_GetItemWithError(routes, shape));
  if (route != NULL && n <= HIT_ARITY && routes == self->routes) {
    PyObject *old_routes = self->hit_routes, *old_route = self->hit_route;
    PyObject *old_types[HIT_ARITY];
    Py_ssize_t old_n = self->hit_n < 0 ? 0 : self->hit_n;
    for (Py_ssize_t i = 0; i < old_n; i++) old_types[i] = self->hit_types[i];
    for (Py_ssize_t i = 0; i < n; i++) self->hit_types[i] = Py_NewRef(PyTuple_GetItem(shape, i));
    self->hit_routes = Py_NewRef(routes);
    self->hit_route = Py_NewRef(route);
    self->hit_n = n;
    /* released last: a finalizer they run sees the new hit, whole */
    for (Py_ssize_t i = 0; i < old_n; i++) Py_DECREF(old_types[i]);
    Py_XDECREF(old_routes);
    Py_XDECREF(old_route);
  }
  Py_DECREF(shape);
  Py_DECREF(routes);
  return route;
}

/* A packet of several overloads (_OverloadedPacket._call_py's first case): the route its
   call shape (the arguments' types) was given, run as the chosen overload's fast path
   would run it: route = (by_type, t, tail, opcache, tensors), by_type[t](*args, *tail)
   (for Tensors, tensor_call first, where the overload's tensors is a dict). */
static PyObject *routed_call(FastCallBase *self, const Call *c) {
  PyObject *op = (PyObject *)self;
  if (self->routes == NULL || !PyDict_Check(self->routes)) return call_py(op, c);
  PyObject *route = route_of(self, c); /* held: the call may replace the routes */
  if (route == NULL) return PyErr_Occurred() ? NULL : call_py(op, c);
  PyObject *out = NULL;
  Full f;
  if (!PyTuple_Check(route) || PyTuple_Size(route) != 5 ||
      !full_init(&f, c, PyTuple_GetItem(route, 2))) {
    out = call_py(op, c);
    goto done;
  }
  PyObject *by_type = PyTuple_GetItem(route, 0), *t = PyTuple_GetItem(route, 1);
  PyObject *owner = PyTuple_GetItem(route, 3), *tensors = PyTuple_GetItem(route, 4);
  if (t == g_tensor && PyDict_Check(tensors) && tensor_call(tensors, owner, &f, NULL, &out)) {
    full_clear(&f);
    goto done;
  }
  PyObject *fn = PyDict_Check(by_type) ? PyDict_GetItemWithError(by_type, t) : NULL;
  if (fn != NULL) out = run_kernel(fn, &f, NULL, NULL, owner);
  else if (!PyErr_Occurred()) out = call_py(op, c);
  full_clear(&f);
done:
  Py_DECREF(route);
  return out;
}

/* FactoryPlan's fields (oplib_core/_dispatch/fastpath.py), in order. */
enum { P_SERVED, P_DNAME, P_DTYPE_NAMES, P_NPOS, P_NMIN, P_TAILS, P_CHECKS, P_LISTS, P_API,
       P_FAILED, P_FIELDS };

/* The key a factory's cache holds a call's device= value under: None, a str or an int
   as it is, a Device as (type, index); NULL with no error: not one of those. */
static PyObject *device_key(PyObject *device) {
  if (!is_device_key(device)) return NULL;
  if ((PyObject *)Py_TYPE(device) != g_device) return Py_NewRef(device);
  PyObject *type = PyObject_GetAttr(device, g_type_name);
  PyObject *index = type == NULL ? NULL : PyObject_GetAttr(device, g_index_name);
  PyObject *key = index == NULL ? NULL : PyTuple_Pack(2, type, index);
  Py_XDECREF(type);
  Py_XDECREF(index);
  return key;
}

/* The dtype keywords of a factory call into kw (a copy of the served defaults) when it is
   not NULL, and its "dtype" into *dtype (borrowed) when that is not NULL: each among the
   op's dtype arguments, None or a numpy dtype of a class met before, checked by the
   backend when it lacks dtypes (check is not None) unless held (a frozenset, or None)
   has it. 1: all taken; 0: not; -1: an error (the check's included). */
static int dtypes_fit(PyObject *plan, const Call *c, PyObject *check, PyObject *held,
                      PyObject *kw, PyObject **dtype) {
  PyObject *dname = PyTuple_GetItem(plan, P_DNAME);
  PyObject *names = PyTuple_GetItem(plan, P_DTYPE_NAMES), *api = PyTuple_GetItem(plan, P_API);
  PyObject *name, *d;
  Py_ssize_t pos = 0;
  while (kw_next(c, &pos, &name, &d)) {
    int skip = PyObject_RichCompareBool(name, dname, Py_EQ);
    if (skip != 0) {
      if (skip < 0) return -1;
      continue;
    }
    int ok = PySet_Contains(names, name);
    if (ok <= 0) return ok;
    if (d == Py_None) continue;
    ok = PySet_Contains(g_dtype_classes, (PyObject *)Py_TYPE(d));
    if (ok <= 0) return ok; /* (the Python call checks a class it has not met) */
    ok = held == Py_None ? 0 : PySet_Contains(held, d);
    if (ok < 0) return -1;
    if (!ok && check != Py_None) {
      PyObject *r = PyObject_CallFunctionObjArgs(check, d, api, NULL);
      if (r == NULL) return -1;
      Py_DECREF(r);
    }
    if (kw != NULL && PyDict_SetItem(kw, name, d) < 0) return -1;
    if (dtype != NULL) {
      int is_dtype = PyObject_RichCompareBool(name, g_dtype_name, Py_EQ);
      if (is_dtype < 0) return -1;
      if (is_dtype) *dtype = d;
    }
  }
  return 1;
}

/* A factory_entry's call (factory_call in fastpath.py): entry(tuple(size), dtype), the
   default dtype for None; NULL with no error when it raised an Exception (the kernel
   then runs the call and raises it as its own). */
static PyObject *entry_call(PyObject *entry, const Full *f, PyObject *dtype) {
  PyObject *first = full_item(f, 0);
  PyObject *size = first == NULL ? NULL : PySequence_Tuple(first);
  if (size == NULL) return NULL;
  if (dtype == Py_None) dtype = PyList_GetItem(g_default_dtype, 0);
  PyObject *out = NULL;
  if (dtype != NULL) {
#if VECTORCALL
    PyObject *argv[2] = {size, dtype};
    out = PyObject_Vectorcall(entry, argv, 2, NULL);
#else
    out = PyObject_CallFunctionObjArgs(entry, size, dtype, NULL);
#endif
  }
  Py_DECREF(size);
  if (out == NULL && PyErr_ExceptionMatches(PyExc_Exception)) PyErr_Clear();
  return out;
}

/* A factory's call (factory_call in fastpath.py): a call whose device= value an earlier
   call placed runs the kernel served for it, fn(*args, *tail, **kw); the rest goes to
   the factory's Python call. The plan is held while the call runs (it may be replaced). */
static PyObject *factory_call(FastCallBase *self, const Call *c) {
  PyObject *op = (PyObject *)self, *plan = self->fplan;
  if (!PyTuple_Check(plan) || PyTuple_Size(plan) != P_FIELDS) return call_py(op, c);
  Py_INCREF(plan);
  PyObject *key = NULL, *served = NULL, *kw = NULL, *out = NULL;
  Full f;
  f.n = f.nmade = 0;
  f.tail = NULL;
  int ok = 0, keywords = kw_count(c) != 0;
  Py_ssize_t n = c->n;
  Py_ssize_t npos = PyLong_AsSsize_t(PyTuple_GetItem(plan, P_NPOS));
  Py_ssize_t nmin = PyLong_AsSsize_t(PyTuple_GetItem(plan, P_NMIN));
  if (PyErr_Occurred()) goto done;
  if (n > npos || n < nmin) goto python;
  PyObject *device = Py_None;
  if (keywords) {
    device = kw_get(c, PyTuple_GetItem(plan, P_DNAME));
    if (device == NULL) {
      if (PyErr_Occurred()) goto done;
      device = Py_None;
    }
  }
  key = device_key(device);
  if (key == NULL) {
    if (PyErr_Occurred()) goto done;
    goto python;
  }
  PyObject *cache = PyTuple_GetItem(plan, P_SERVED);
  served = PyDict_Check(cache) ? PyDict_GetItemWithError(cache, key) : NULL;
  if (served == NULL) {
    if (PyErr_Occurred()) goto done;
    goto python;
  }
  Py_INCREF(served); /* (fn, backend, kw, check, entry, held) */
  if (!PyTuple_Check(served) || PyTuple_Size(served) != 6) goto python;
  PyObject *defaults = PyTuple_GetItem(served, 2), *check = PyTuple_GetItem(served, 3);
  PyObject *entry = PyTuple_GetItem(served, 4), *held = PyTuple_GetItem(served, 5);
  PyObject *dtype = Py_None;
  if (!PyDict_Check(defaults)) goto python;
  if (entry == Py_None) { /* the kernel's keywords, filled once (an entry takes none) */
    kw = PyDict_Copy(defaults);
    if (kw == NULL) goto done;
  }
  if (keywords) {
    ok = dtypes_fit(plan, c, check, held, kw, entry == Py_None ? NULL : &dtype);
    if (ok < 0) goto done;
    if (ok == 0) goto python;
  }
  PyObject *tail = PyTuple_GetItem(PyTuple_GetItem(plan, P_TAILS), n);
  if (tail == NULL) goto done;
  if (!full_init(&f, c, tail)) goto python;
  ok = scalars_fit(&f, PyTuple_GetItem(plan, P_CHECKS));
  if (ok > 0) ok = lists_fit(&f, PyTuple_GetItem(plan, P_LISTS));
  if (ok < 0) goto done;
  if (ok == 0) goto python;
  if (entry != Py_None) {
    Py_INCREF(dtype); /* (the call's keyword value: a check above ran Python) */
    out = entry_call(entry, &f, dtype);
    Py_DECREF(dtype);
    if (out != NULL || PyErr_Occurred()) goto done;
    /* it raised: the kernel runs the call (its keywords filled now, checked above) */
    kw = PyDict_Copy(defaults);
    if (kw == NULL) goto done;
    if (keywords && dtypes_fit(plan, c, Py_None, Py_None, kw, NULL) < 0) goto done;
  }
  out = run_kernel(PyTuple_GetItem(served, 0), &f, kw, PyTuple_GetItem(plan, P_FAILED),
                   PyTuple_GetItem(served, 1));
  goto done;
python:
  out = call_py(op, c);
done:
  full_clear(&f);
  Py_XDECREF(kw);
  Py_XDECREF(served);
  Py_XDECREF(key);
  Py_DECREF(plan);
  return out;
}

/* The kernel by_type holds for class t, run on f (for Tensors, the kernel of the arrays
   they wrap first, tensor_call), or the Python call on c where it holds none: the op's
   by_type and tensor, or, where `keyed` is not NULL, that OpCache's (of kernels with
   keyword-only values bound: keyed_call). They are read only now: the checks before may
   run a metaclass's __hash__ or __eq__ (PySet_Contains), which could replace the op's
   caches. */
static PyObject *run_by_type(FastCallBase *self, PyTypeObject *t, Full *f, const Call *c,
                             PyObject *keyed) {
  int tensors_held = self->tensor != NULL && PyDict_Check(self->tensor);
  PyObject *by_type, *tensors = NULL, *owner, *out = NULL;
  if (keyed == NULL) {
    by_type = Py_XNewRef(self->by_type);
    tensors = tensors_held ? Py_NewRef(self->tensor) : NULL;
    owner = Py_XNewRef(self->opcache); /* held: the kernel may replace it */
  } else {
    by_type = PyObject_GetAttr(keyed, g_by_type_name);
    tensors = tensors_held && by_type != NULL ? PyObject_GetAttr(keyed, g_tensor_name) : NULL;
    owner = Py_NewRef(keyed);
    if (by_type == NULL || (tensors_held && tensors == NULL)) goto done;
  }
  if ((PyObject *)t == g_tensor && tensors != NULL && PyDict_Check(tensors) &&
      tensor_call(tensors, owner, f, NULL, &out))
    goto done;
  if (by_type == NULL || !PyDict_Check(by_type)) {
    out = call_py((PyObject *)self, c);
    goto done;
  }
  PyObject *fn = PyDict_GetItemWithError(by_type, (PyObject *)t); /* borrowed */
  if (fn == NULL) out = PyErr_Occurred() ? NULL : call_py((PyObject *)self, c);
  else out = run_kernel(fn, f, NULL, NULL, owner);
done:
  Py_XDECREF(by_type);
  Py_XDECREF(tensors);
  Py_XDECREF(owner);
  return out;
}

/* ListedPlan's fields (oplib_core/_dispatch/fastpath.py), in order. */
enum { L_NMIN, L_NMAX, L_TAILS, L_KEY_POS, L_CHECKS, L_LISTS, L_TENSOR_LISTS, L_FIELDS };

/* 1: each tensor list of `tensor_lists` ((i, optional) pairs) in f is a list or a tuple
   whose items (None where optional) are of one class with the plain tensor arguments, *t
   (NULL until one is met); f's item replaced by a new list of them (the kernel may keep
   it: never the caller's); 0: not; -1: an error. */
static int tensor_lists_fit(Full *f, PyObject *tensor_lists, PyTypeObject **t) {
  Py_ssize_t k = PyTuple_Size(tensor_lists);
  for (Py_ssize_t j = 0; j < k; j++) {
    Py_ssize_t i;
    PyObject *can_be_none, *v = pair_item(f, tensor_lists, j, &i, &can_be_none);
    if (v == NULL) return -1;
    int is_list = PyList_CheckExact(v);
    if (!is_list && !PyTuple_CheckExact(v)) return 0;
    int optional = PyObject_IsTrue(can_be_none);
    if (optional < 0) return -1;
    Py_ssize_t m = is_list ? PyList_Size(v) : PyTuple_Size(v);
    for (Py_ssize_t e = 0; e < m; e++) {
      PyObject *item = is_list ? PyList_GetItem(v, e) : PyTuple_GetItem(v, e);
      if (item == NULL) return -1;
      if (item == Py_None) {
        if (!optional) return 0;
        continue;
      }
      if (*t == NULL) *t = Py_TYPE(item);
      else if (Py_TYPE(item) != *t) return 0;
    }
    PyObject *made = PySequence_List(v);
    if (made == NULL) return -1;
    if (!full_replace(f, i, made)) return 0;
  }
  return 1;
}

/* Each Tensor in f's tensor lists (the lists tensor_lists_fit made: f's own) replaced by
   the array it wraps, in place: 1, *cls the arrays' class (NULL: no Tensor in them); 0:
   one requires grad, or the arrays differ in class (the Python call's); -1: an error. */
static int unwrap_listed(Full *f, PyObject *tensor_lists, PyTypeObject **cls) {
  Py_ssize_t k = PyTuple_Size(tensor_lists);
  for (Py_ssize_t j = 0; j < k; j++) {
    Py_ssize_t i;
    PyObject *optional, *v = pair_item(f, tensor_lists, j, &i, &optional);
    if (v == NULL) return -1;
    if (!PyList_CheckExact(v)) return 0;
    for (Py_ssize_t e = 0; e < PyList_Size(v); e++) {
      PyObject *item = PyList_GetItem(v, e);
      if (item == NULL) return -1;
      if (item == Py_None) continue;
      PyObject *d = (PyObject *)Py_TYPE(item) == g_tensor ? array_of(item) : NULL;
      if (d == NULL) return 0;
      if (*cls == NULL) *cls = Py_TYPE(d);
      if (Py_TYPE(d) != *cls) {
        Py_DECREF(d);
        return 0;
      }
      if (PyList_SetItem(v, e, d) < 0) return -1; /* (d stolen, the Tensor released) */
    }
  }
  return 1;
}

/* A positional call of an op with lists of tensors (cat([a, b], 0)) whose tensors, in the
   lists or not, are native arrays of one class (the kernel by_type holds for it) or
   Tensors recording no autograd over arrays of one class (the kernel OpCache.tensor holds
   for that, the result wrapped), on the call with its lists copied and its defaults
   appended (OpCache.listed_route's checks; a Tensor requiring grad and the rest go to the
   Python call, OpCache.call_listed). */
static PyObject *listed_call(FastCallBase *self, const Call *c) {
  PyObject *op = (PyObject *)self, *plan = self->lplan;
  if (!PyTuple_Check(plan) || PyTuple_Size(plan) != L_FIELDS) return call_py(op, c);
  Py_INCREF(plan);
  PyObject *out = NULL;
  Full f;
  f.n = f.nmade = 0;
  f.tail = NULL;
  Py_ssize_t n = c->n;
  Py_ssize_t nmin = PyLong_AsSsize_t(PyTuple_GetItem(plan, L_NMIN));
  Py_ssize_t nmax = PyLong_AsSsize_t(PyTuple_GetItem(plan, L_NMAX));
  if (PyErr_Occurred()) goto done;
  if (n > nmax || n < nmin) goto python;
  PyObject *tail = PyTuple_GetItem(PyTuple_GetItem(plan, L_TAILS), n);
  if (tail == NULL) goto done;
  if (!full_init(&f, c, tail)) goto python;
  int ok = scalars_fit(&f, PyTuple_GetItem(plan, L_CHECKS));
  if (ok > 0) ok = lists_fit(&f, PyTuple_GetItem(plan, L_LISTS));
  if (ok < 0) goto done;
  if (ok == 0) goto python;
  PyTypeObject *t = NULL; /* the plain tensor arguments' class, if the op has some */
  PyObject *key_pos = PyTuple_GetItem(plan, L_KEY_POS);
  if (key_pos == NULL) goto done;
  if (PyTuple_Size(key_pos) != 0) {
    Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GetItem(key_pos, 0));
    PyObject *first = i == -1 && PyErr_Occurred() ? NULL : full_item(&f, i);
    if (first == NULL) goto done;
    t = Py_TYPE(first);
    ok = same_types(&f, key_pos, t);
    if (ok < 0) goto done;
    if (ok == 0) goto python;
  }
  PyObject *tensor_lists = PyTuple_GetItem(plan, L_TENSOR_LISTS);
  ok = tensor_lists_fit(&f, tensor_lists, &t);
  if (ok < 0) goto done;
  if (ok == 0 || t == NULL) goto python;
  if ((PyObject *)t != g_tensor) {
    out = run_by_type(self, t, &f, c, NULL);
    goto done;
  }
  if (self->tensor == NULL || !PyDict_Check(self->tensor)) goto python;
  PyTypeObject *cls = NULL;
  ok = unwrap_listed(&f, tensor_lists, &cls);
  if (ok < 0) goto done;
  if (ok == 0) goto python;
  PyObject *tensors = Py_NewRef(self->tensor), *owner = Py_XNewRef(self->opcache);
  int served = tensor_call(tensors, owner, &f, cls, &out);
  Py_DECREF(tensors);
  Py_XDECREF(owner);
  if (served) goto done;
  goto python;
python:
  out = call_py(op, c);
done:
  full_clear(&f);
  Py_DECREF(plan);
  return out;
}

/* A call with keywords that name positional parameters the call did not give, as the
   positional call of every one of them, the defaults of the rest appended (t.clamp(min=0.0)
   as clamp(t, 0.0, None)), into *placed (its arguments in buf, borrowed from c and from
   params, the op's (names, defaults)), `skip` keywords of c left out (the keyword-only
   ones keyed_call took): 1; 0: binding must judge (a keyword-only or
   unknown name, one given twice, a required one missing); -1: an error.
   binding.by_position's rule. */
static int place_keywords(PyObject *params, const Call *c, Py_ssize_t skip, PyObject **buf,
                          Call *placed) {
  if (params == NULL || !PyTuple_Check(params) || PyTuple_Size(params) != 2) return 0;
  PyObject *names = PyTuple_GetItem(params, 0), *defaults = PyTuple_GetItem(params, 1);
  Py_ssize_t n = c->n, total = PyTuple_Size(names), named = 0;
  if (n >= total || total > MAX_ARGS || PyTuple_Size(defaults) != total) return 0;
  for (Py_ssize_t i = 0; i < n; i++) buf[i] = arg_at(c, i);
  for (Py_ssize_t i = n; i < total; i++) {
    PyObject *v = kw_get(c, PyTuple_GetItem(names, i));
    if (v == NULL) {
      if (PyErr_Occurred()) return -1;
      v = PyTuple_GetItem(defaults, i);
      if (v == NULL || v == g_required) return v == NULL ? -1 : 0;
    } else {
      named++;
    }
    buf[i] = v;
  }
  if (named + skip != kw_count(c)) return 0;
  Call p = {buf, total, NULL, NULL, NULL, c};
  *placed = p;
  return 1;
}

static PyObject *run_positional(FastCallBase *self, const Call *c, PyObject *keyed);
static PyObject *keyed_call(FastCallBase *self, const Call *c);

/* Every call, however it came: the cached kernel for the plain case, the route for a
   routed packet, the factory's call, the listed call; the rest to the Python call as it
   came. */
static PyObject *dispatch(PyObject *op, const Call *c) {
  FastCallBase *self = (FastCallBase *)op;
  if (g_call_py == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "oplib_core._dispatch._ccall: setup() was not called");
    return NULL;
  }
  int keywords = kw_count(c) != 0;
  int factory = has_plan(self);
  if (keywords && self->routed && !factory) return call_py(op, c);
  PyObject *active = PyList_GetItem(g_active, 0);
  if (active == NULL) return NULL;
  int on = PyObject_IsTrue(active);
  if (on != 0) return on < 0 ? NULL : call_py(op, c);
  if (factory) return factory_call(self, c);
  if (self->routed) return routed_call(self, c);
  if (!keywords) return run_positional(self, c, NULL);
  /* held: the defaults placed are its items, passed to the kernel as they are */
  PyObject *params = Py_XNewRef(self->params), *buf[MAX_ARGS];
  Call placed;
  int ok = place_keywords(params, c, 0, buf, &placed);
  PyObject *out = ok < 0    ? NULL
                  : ok == 0 ? keyed_call(self, c) /* keyword-only arguments, maybe */
                            : run_positional(self, &placed, NULL);
  Py_XDECREF(params);
  return out;
}

/* A positional call (c, or a call's keywords placed: the Python call gets c->orig): the
   listed call for an op with lists of tensors, else the kernel by_type holds for the class
   of its tensor arguments once the op's plan takes them. */
static PyObject *run_positional(FastCallBase *self, const Call *c, PyObject *keyed) {
  PyObject *op = (PyObject *)self;
  if (self->npos < 0 && self->lplan != NULL && self->lplan != Py_None)
    return listed_call(self, c);
  Py_ssize_t n = c->n;
  if (n > self->npos || n < self->nmin || self->multi == NULL) return call_py(op, c);
  PyObject *m_obj = PyTuple_GetItem(self->multi, n);
  if (m_obj == NULL) return NULL;
  long m = PyLong_AsLong(m_obj);
  if (m == -1 && PyErr_Occurred()) return NULL;
  PyObject *tail = NULL; /* the defaults appended: args + tails[n] */
  if (n != self->npos) {
    tail = self->tails == NULL ? NULL : PyTuple_GetItem(self->tails, n);
    if (tail == NULL) return NULL;
  }
  Full f;
  if (!full_init(&f, c, tail)) {
    full_clear(&f);
    return call_py(op, c);
  }
  PyObject *out = NULL;
  PyObject *first = full_item(&f, self->key0);
  if (first == NULL) goto done;
  PyTypeObject *t = Py_TYPE(first);
  if (m) {
    int ok = self->key_rest == NULL ? 0 : same_types(&f, self->key_rest, t);
    if (ok < 0) goto done;
    if (!ok) goto python;
    if (m > 1) {
      PyObject *checks = self->checks == NULL ? NULL : PyTuple_GetItem(self->checks, n);
      PyObject *lists = self->lists == NULL ? NULL : PyTuple_GetItem(self->lists, n);
      if (checks == NULL || lists == NULL) goto done;
      ok = scalars_fit(&f, checks);
      if (ok > 0) ok = lists_fit(&f, lists);
      if (ok < 0) goto done;
      if (!ok) goto python;
    }
  }
  out = run_by_type(self, t, &f, c, keyed);
  goto done;
python:
  out = call_py(op, c);
done:
  full_clear(&f);
  return out;
}

/* Signature.kwplan's fields, in order. */
enum { K_NAME, K_TYPES, K_DTYPES, K_FIELDS };
/* the most keyword-only arguments a keyed call gives (more: the Python call) */
#define MAX_KEYED_ARGS 8

/* A call with keyword-only arguments (t.sum(dtype=...), _to_copy(t, dtype=...)): run from
   the cache of kernels with their values bound (OpCache.keyed, filled by the slow path),
   found by the key keyword_split makes ((name, type, value) of each given, in the
   schema's order; each value of a type kwplan takes, a numpy dtype without metadata), the
   call's other keywords placed as place_keywords places them, as a positional call of
   that cache's kernels (OpCache.call_keyed). Anything else goes to the Python call as it
   came, which decides as it always did. */
static PyObject *keyed_call(FastCallBase *self, const Call *c) {
  PyObject *op = (PyObject *)self, *plan = self->kwplan, *keyed = self->keyed;
  if (self->npos < 0 || plan == NULL || !PyTuple_Check(plan) || keyed == NULL ||
      !PyDict_Check(keyed) || PyDict_Size(keyed) == 0)
    return call_py(op, c);
  Py_ssize_t nk = PyTuple_Size(plan), given = 0;
  if (nk > MAX_KEYED_ARGS) return call_py(op, c);
  PyObject *parts[MAX_KEYED_ARGS], *out = NULL, *key = NULL, *cache = NULL;
  Py_INCREF(plan);
  for (Py_ssize_t j = 0; j < nk; j++) {
    PyObject *entry = PyTuple_GetItem(plan, j);
    if (entry == NULL || !PyTuple_Check(entry) || PyTuple_Size(entry) != K_FIELDS) goto done;
    PyObject *name = PyTuple_GetItem(entry, K_NAME), *v = kw_get(c, name);
    if (v == NULL) {
      if (PyErr_Occurred()) goto done;
      continue;
    }
    PyObject *t = (PyObject *)Py_TYPE(v);
    int fits = PySet_Contains(PyTuple_GetItem(entry, K_TYPES), t);
    int dtype = fits > 0 ? PySet_Contains(PyTuple_GetItem(entry, K_DTYPES), t) : 0;
    if (fits < 0 || dtype < 0) goto done;
    if (fits == 0) goto python;
    if (dtype) { /* a dtype with metadata keys nothing: it compares equal to one without */
      PyObject *metadata = PyObject_GetAttr(v, g_metadata_name);
      if (metadata == NULL) goto done;
      Py_DECREF(metadata);
      if (metadata != Py_None) goto python;
    }
    PyObject *part = PyTuple_Pack(3, name, t, v);
    if (part == NULL) goto done;
    parts[given++] = part;
  }
  if (given == 0) goto python;
  key = PyTuple_New(given);
  if (key == NULL) goto done;
  for (Py_ssize_t j = 0; j < given; j++) PyTuple_SetItem(key, j, parts[j]); /* (stolen) */
  given = 0;
  cache = Py_XNewRef(PyDict_GetItemWithError(keyed, key));
  if (cache == NULL) {
    if (!PyErr_Occurred()) out = call_py(op, c);
    goto done;
  }
  Py_ssize_t kw_only = PyTuple_Size(key);
  if (kw_only == kw_count(c)) { /* no other keyword: the positional arguments as they are */
    Call p = {c->argv, c->n, c->tuple, NULL, NULL, c};
    out = run_positional(self, &p, cache);
    goto done;
  }
  PyObject *params = Py_XNewRef(self->params), *buf[MAX_ARGS];
  Call placed;
  int ok = place_keywords(params, c, kw_only, buf, &placed);
  out = ok < 0 ? NULL : ok == 0 ? call_py(op, c) : run_positional(self, &placed, cache);
  Py_XDECREF(params);
  goto done;
python:
  out = call_py(op, c);
done:
  for (Py_ssize_t j = 0; j < given; j++) Py_DECREF(parts[j]);
  Py_XDECREF(key);
  Py_XDECREF(cache);
  Py_DECREF(plan);
  return out;
}

/* tp_call: the call's tuple and keyword dict. */
static PyObject *fc_call(PyObject *op, PyObject *args, PyObject *kwargs) {
  Call c = {NULL, PyTuple_Size(args), args, kwargs, NULL, NULL};
  return dispatch(op, &c);
}

#if VECTORCALL
/* vectorcall: the arguments as the caller holds them, no tuple or dict made. */
static PyObject *fc_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  Call c = {args, PyVectorcall_NARGS(nargsf), NULL, NULL, NULL, NULL};
  if (kwnames != NULL && PyTuple_Size(kwnames) != 0) c.kwnames = kwnames;
  return dispatch(op, &c);
}

/* Every instance is called by vectorcall (its Python subclasses inherit the protocol). */
static PyObject *fc_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwds)) {
  allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
  PyObject *self = alloc(type, 0);
  if (self != NULL) ((FastCallBase *)self)->vectorcall = fc_vectorcall;
  return self;
}
#endif

/* The object fields, once for traverse and clear. */
#define FC_OBJECTS(X) X(tails) X(key_rest) X(checks) X(lists) X(multi) X(by_type) X(opcache) \
    X(modes) X(routes) X(fplan) X(lplan) X(params) X(tensor) X(kwplan) X(keyed)

static int fc_traverse(PyObject *op, visitproc visit, void *arg) {
  FastCallBase *self = (FastCallBase *)op;
#define FC_VISIT(field) Py_VISIT(self->field);
  FC_OBJECTS(FC_VISIT)
  Py_VISIT(self->hit_routes);
  Py_VISIT(self->hit_route);
  for (Py_ssize_t i = 0; i < self->hit_n; i++) Py_VISIT(self->hit_types[i]);
  Py_VISIT(Py_TYPE(op)); /* a heap type's instances hold it (subtype_traverse leaves it here) */
  return 0;
}

static int fc_clear(PyObject *op) {
  FastCallBase *self = (FastCallBase *)op;
#define FC_CLEAR(field) Py_CLEAR(self->field);
  FC_OBJECTS(FC_CLEAR)
  Py_CLEAR(self->hit_routes);
  Py_CLEAR(self->hit_route);
  Py_ssize_t n = self->hit_n;
  self->hit_n = -1;
  for (Py_ssize_t i = 0; i < n; i++) Py_CLEAR(self->hit_types[i]);
  return 0;
}

/* A GC-tracked instance of one of this module's heap types, cleared by `clear`, freed. */
static void dealloc_cleared(PyObject *op, inquiry clear) {
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  clear(op);
  freefunc free_slot = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  free_slot(op);
  Py_DECREF(tp);
}

static void fc_dealloc(PyObject *op) { dealloc_cleared(op, fc_clear); }

static PyMemberDef fc_members[] = {
    {"_npos", T_PYSSIZET, offsetof(FastCallBase, npos), 0, NULL},
    {"_nmin", T_PYSSIZET, offsetof(FastCallBase, nmin), 0, NULL},
    {"_key0", T_PYSSIZET, offsetof(FastCallBase, key0), 0, NULL},
#define FC_MEMBER(field) {"_" #field, T_OBJECT_EX, offsetof(FastCallBase, field), 0, NULL},
    FC_OBJECTS(FC_MEMBER)
    {"_routed", T_BOOL, offsetof(FastCallBase, routed), 0, NULL},
#if VECTORCALL
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastCallBase, vectorcall), READONLY, NULL},
#endif
    {NULL},
};

static PyType_Slot fc_slots[] = {
    {Py_tp_doc, "The dispatcher's cached call, compiled (see oplib_core/_dispatch/_ccall.c)."},
    {Py_tp_dealloc, fc_dealloc},
    {Py_tp_traverse, fc_traverse},
    {Py_tp_clear, fc_clear},
    {Py_tp_call, fc_call},
    {Py_tp_members, fc_members},
#if VECTORCALL
    {Py_tp_new, fc_new},
#endif
    {0, NULL},
};

static PyType_Spec fc_spec = {
    "oplib_core._dispatch." CCALL_STR(CCALL_MODULE) ".FastCallBase",
    sizeof(FastCallBase),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE
#if VECTORCALL
        | Py_TPFLAGS_HAVE_VECTORCALL
#endif
    ,
    fc_slots,
};

/* SizeRoutedBase(small, large, min_size, among=1): a kernel calling `large` where one of its
   first `among` positional arguments has a `size` that is an int of at least `min_size`,
   else `small` (oplib_core.backends.by_size: a backend's own kernel for large arrays, with
   no Python frame added to the small calls, which are launch-bound). */
typedef struct {
  PyObject_HEAD
#if VECTORCALL
  vectorcallfunc vectorcall;
#endif
  PyObject *small, *large;
  Py_ssize_t min_size, among;
} SizeRouted;

static PyObject *g_size_name = NULL;

/* 1 where `item.size` is an int of at least min_size, 0 where not or where it has no `size`,
   -1 with the error where reading `size` raised other than AttributeError. */
static int sr_is_large(SizeRouted *self, PyObject *item) {
  PyObject *size = PyObject_GetAttr(item, g_size_name);
  if (size == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
  }
  Py_ssize_t n = PyLong_Check(size) ? PyLong_AsSsize_t(size) : PY_SSIZE_T_MIN;
  if (n == -1 && PyErr_Occurred()) { /* beyond Py_ssize_t: larger than any min_size, or less */
    PyErr_Clear();
    n = PyObject_RichCompareBool(size, g_zero, Py_GT) == 1 ? PY_SSIZE_T_MAX : PY_SSIZE_T_MIN;
  }
  Py_DECREF(size);
  return n >= self->min_size;
}

/* What call c goes to, borrowed: `large` where one of its first `among` positional
   arguments is large, else `small`; NULL with the error sr_is_large met. */
static PyObject *sr_target(SizeRouted *self, const Call *c) {
  for (Py_ssize_t i = 0; i < c->n && i < self->among; i++) {
    int large = sr_is_large(self, arg_at(c, i));
    if (large != 0) return large < 0 ? NULL : self->large;
  }
  return self->small;
}

static PyObject *sr_call(PyObject *op, PyObject *args, PyObject *kwargs) {
  Call c = {NULL, PyTuple_Size(args), args, kwargs, NULL, NULL};
  PyObject *target = sr_target((SizeRouted *)op, &c);
  return target == NULL ? NULL : PyObject_Call(target, args, kwargs);
}

#if VECTORCALL
static PyObject *sr_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  Call c = {args, PyVectorcall_NARGS(nargsf), NULL, NULL, kwnames, NULL};
  PyObject *target = sr_target((SizeRouted *)op, &c);
  return target == NULL ? NULL : PyObject_Vectorcall(target, args, nargsf, kwnames);
}
#endif

static PyObject *sr_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *names[] = {"small", "large", "min_size", "among", NULL};
  PyObject *small, *large;
  Py_ssize_t min_size, among = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOn|n:SizeRoutedBase", names, &small, &large,
                                   &min_size, &among))
    return NULL;
  if (!PyCallable_Check(small) || !PyCallable_Check(large)) {
    PyErr_SetString(PyExc_TypeError, "SizeRoutedBase(): small and large must be callable");
    return NULL;
  }
  allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
  SizeRouted *self = (SizeRouted *)alloc(type, 0);
  if (self == NULL) return NULL;
#if VECTORCALL
  self->vectorcall = sr_vectorcall;
#endif
  self->small = Py_NewRef(small);
  self->large = Py_NewRef(large);
  self->min_size = min_size;
  self->among = among;
  return (PyObject *)self;
}

static int sr_traverse(PyObject *op, visitproc visit, void *arg) {
  SizeRouted *self = (SizeRouted *)op;
  Py_VISIT(self->small);
  Py_VISIT(self->large);
  Py_VISIT(Py_TYPE(op));
  return 0;
}

static int sr_clear(PyObject *op) {
  SizeRouted *self = (SizeRouted *)op;
  Py_CLEAR(self->small);
  Py_CLEAR(self->large);
  return 0;
}

static void sr_dealloc(PyObject *op) { dealloc_cleared(op, sr_clear); }

static PyMemberDef sr_members[] = {
    {"small", T_OBJECT_EX, offsetof(SizeRouted, small), READONLY, NULL},
    {"large", T_OBJECT_EX, offsetof(SizeRouted, large), READONLY, NULL},
    {"min_size", T_PYSSIZET, offsetof(SizeRouted, min_size), READONLY, NULL},
    {"among", T_PYSSIZET, offsetof(SizeRouted, among), READONLY, NULL},
#if VECTORCALL
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(SizeRouted, vectorcall), READONLY, NULL},
#endif
    {NULL},
};

static PyType_Slot sr_slots[] = {
    {Py_tp_doc, "SizeRoutedBase(small, large, min_size, among=1): calls large where one of "
                "the first among arguments has a size of at least min_size, else small (see "
                "backends.by_size)."},
    {Py_tp_new, sr_new},
    {Py_tp_call, sr_call},
    {Py_tp_dealloc, sr_dealloc},
    {Py_tp_traverse, sr_traverse},
    {Py_tp_clear, sr_clear},
    {Py_tp_members, sr_members},
    {0, NULL},
};

static PyType_Spec sr_spec = {
    "oplib_core._dispatch." CCALL_STR(CCALL_MODULE) ".SizeRoutedBase",
    sizeof(SizeRouted),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE
#if VECTORCALL
        | Py_TPFLAGS_HAVE_VECTORCALL
#endif
    ,
    sr_slots,
};

static PyObject *setup(PyObject *Py_UNUSED(module), PyObject *args) {
  PyObject *active, *call, *failed, *device, *dtype_classes, *default_dtype, *required, *tensor,
      *slots;
  if (!PyArg_ParseTuple(args, "O!OOO!O!O!OO!O!:setup", &PyList_Type, &active, &call, &failed,
                        &PyType_Type, &device, &PySet_Type, &dtype_classes, &PyList_Type,
                        &default_dtype, &required, &PyType_Type, &tensor, &PyTuple_Type, &slots))
    return NULL;
  if (PyTuple_Size(slots) != T_SLOTS) {
    PyErr_Format(PyExc_ValueError, "setup(): %d slot descriptors expected", T_SLOTS);
    return NULL;
  }
  PyTypeObject *descr_type = Py_TYPE(PyTuple_GetItem(slots, 0));
  descrgetfunc get = (descrgetfunc)PyType_GetSlot(descr_type, Py_tp_descr_get);
  descrsetfunc set = (descrsetfunc)PyType_GetSlot(descr_type, Py_tp_descr_set);
  allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)tensor, Py_tp_alloc);
  for (int i = 0; i < T_SLOTS; i++)
    if (Py_TYPE(PyTuple_GetItem(slots, i)) != descr_type) get = NULL;
  if (get == NULL || set == NULL || alloc == NULL) {
    PyErr_SetString(PyExc_TypeError, "setup(): the Tensor slots must be its member descriptors");
    return NULL;
  }
  PyObject **fields[] = {&g_active, &g_call_py, &g_failed, &g_device, &g_dtype_classes,
                         &g_default_dtype, &g_required, &g_tensor};
  PyObject *given[] = {active, call, failed, device, dtype_classes, default_dtype, required,
                       tensor};
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
    PyObject *old = *fields[i];
    *fields[i] = Py_NewRef(given[i]);
    Py_XDECREF(old);
  }
  for (int i = 0; i < T_SLOTS; i++) {
    PyObject *old = g_slots[i];
    g_slots[i] = Py_NewRef(PyTuple_GetItem(slots, i));
    Py_XDECREF(old);
  }
  g_slot_get = get;
  g_slot_set = set;
  g_tensor_alloc = alloc;
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(active, call_py, failed, device, dtype_classes, default_dtype, required, tensor, "
     "slots): the ACTIVE list, the Python __call__, the report of a kernel's exception, the "
     "Device class, the set of the numpy dtype classes factories have met, the list holding "
     "the default dtype, binding's REQUIRED (a parameter without a default), the Tensor "
     "class and its slots' descriptors (_data, _rg, grad, grad_fn, _out_nr, _vc)."},
    {"wrap", wrap, METH_O, "wrap(data): a new Tensor over data, as Tensor._wrap makes it."},
    {"sized_tensor", (PyCFunction)(void (*)(void))sized_tensor, METH_FASTCALL,
     "sized_tensor(op, size, dtype, device): op(shape, dtype=, device=) as a Tensor, or "
     "None: a call the Python factory makes itself."},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *module) {
  if (g_type_name == NULL) g_type_name = PyUnicode_InternFromString("type");
  if (g_index_name == NULL) g_index_name = PyUnicode_InternFromString("index");
  if (g_dtype_name == NULL) g_dtype_name = PyUnicode_InternFromString("dtype");
  if (g_by_type_name == NULL) g_by_type_name = PyUnicode_InternFromString("by_type");
  if (g_tensor_name == NULL) g_tensor_name = PyUnicode_InternFromString("tensor");
  if (g_metadata_name == NULL) g_metadata_name = PyUnicode_InternFromString("metadata");
  if (g_zero == NULL) g_zero = PyLong_FromLong(0);
  if (g_type_name == NULL || g_index_name == NULL || g_dtype_name == NULL || g_zero == NULL ||
      g_by_type_name == NULL || g_tensor_name == NULL || g_metadata_name == NULL)
    return -1;
  if (g_factory_kwnames[3] == NULL) {
    PyObject *device = PyUnicode_InternFromString("device");
    if (device == NULL) return -1;
    g_factory_kwnames[0] = PyTuple_New(0);
    g_factory_kwnames[1] = PyTuple_Pack(1, g_dtype_name);
    g_factory_kwnames[2] = PyTuple_Pack(1, device);
    g_factory_kwnames[3] = PyTuple_Pack(2, g_dtype_name, device);
    Py_DECREF(device);
    for (int i = 0; i < 4; i++)
      if (g_factory_kwnames[i] == NULL) return -1;
  }
  if (g_size_name == NULL) g_size_name = PyUnicode_InternFromString("size");
  if (g_size_name == NULL) return -1;
  PyObject *type = PyType_FromModuleAndSpec(module, &fc_spec, NULL);
  if (type == NULL) return -1;
  int rc = PyModule_AddObjectRef(module, "FastCallBase", type);
  Py_DECREF(type);
  if (rc < 0) return -1;
  type = PyType_FromModuleAndSpec(module, &sr_spec, NULL);
  if (type == NULL) return -1;
  rc = PyModule_AddObjectRef(module, "SizeRoutedBase", type);
  Py_DECREF(type);
  return rc;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, CCALL_STR(CCALL_MODULE),
    "The dispatcher's cached call, compiled (optional; see oplib_core/_dispatch/fastpath.py).",
    0, methods, module_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC CCALL_CAT(PyInit_, CCALL_MODULE)(void) { return PyModuleDef_Init(&module_def); }
