// The eager shortcut's per-call checks in C++ (tpu_kernels/dispatch/eager.py reads them
// through tpu_kernels.runtime.native): each is the same test as eager.py's Python code, in one call
// instead of a dozen attribute reads. tests/test_native.py runs both on the same inputs.
//
//   configure(tensor_type, parameter_type, plain_states)
//       the exact tensor types the shortcut takes, and the (included, excluded) raw dispatch
//       key sets in which the dispatcher's choice is the CPU kernel (eager._PLAIN_STATES)
//   modes_active() -> bool
//       eager._modes_active: a torch function mode, a torch dispatch mode, or a thread-local
//       dispatch key set outside the plain states (a functorch transform adds its keys to it)
//   complete(args, kwargs, spec) -> tuple | None
//       eager.EagerCpuCall.complete: one value per parameter (defaults filled, float statics
//       given as ints made floats), or None where the dispatcher must decide
//   recall(refs, static_idx, statics, args, tensor_idx) -> list | None
//       eager.EagerCpuCall._recall's checks: the memo's statics again (same type and value,
//       same sign of a zero), no mode, and each tensor still its view-cache record's (same
//       object, memory, shape, strides, dtype; on the CPU, no conjugate or negative bit, not
//       requiring grad where grad mode is on). The records' arrays, or None: decline.
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <cstdint>

namespace {

PyObject* tensor_type = nullptr;
PyObject* parameter_type = nullptr;
constexpr int kMaxStates = 4;
uint64_t plain_included[kMaxStates];
uint64_t plain_excluded[kMaxStates];
int n_plain = 0;

PyObject *s_ref, *s_ptr, *s_shape, *s_stride, *s_dtype, *s_array;

bool modes_active() {
  if (at::impl::torch_function_mode_enabled() || c10::impl::TorchDispatchModeTLS::stack_len() > 0) {
    return true;
  }
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  const uint64_t included = tls.included_.raw_repr();
  const uint64_t excluded = tls.excluded_.raw_repr();
  for (int i = 0; i < n_plain; i++) {
    if (plain_included[i] == included && plain_excluded[i] == excluded) {
      return false;
    }
  }
  return true;
}

// A new reference to the object `ref` refers to, or to None if it is dead.
PyObject* deref(PyObject* ref) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* target = nullptr;
  if (PyWeakref_GetRef(ref, &target) < 0) {
    return nullptr;
  }
  return target != nullptr ? target : Py_NewRef(Py_None);
#else
  PyObject* target = PyWeakref_GetObject(ref);
  return target == nullptr ? nullptr : Py_NewRef(target);
#endif
}

// Whether the int tuple `values` is `expected`; -1 with an error set if it is not a tuple of ints.
int same_ints(PyObject* values, c10::IntArrayRef expected) {
  if (!PyTuple_Check(values)) {
    PyErr_SetString(PyExc_TypeError, "a cached view's shape or strides is not a tuple");
    return -1;
  }
  if (PyTuple_GET_SIZE(values) != static_cast<Py_ssize_t>(expected.size())) {
    return 0;
  }
  for (size_t i = 0; i < expected.size(); i++) {
    const long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(values, i));
    if (v == -1 && PyErr_Occurred()) {
      return -1;
    }
    if (v != expected[i]) {
      return 0;
    }
  }
  return 1;
}

// An attribute of a record, compared; -1 on error.
template <typename F>
int with_attr(PyObject* record, PyObject* name, F compare) {
  PyObject* value = PyObject_GetAttr(record, name);
  if (value == nullptr) {
    return -1;
  }
  const int result = compare(value);
  Py_DECREF(value);
  return result;
}

// 1 when `obj` is still the tensor `record` (a bridge.CachedView) was made from, unchanged,
// and the shortcut may take it; 0 when not; -1 with an error set.
int holds(PyObject* record, PyObject* obj, bool grad) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(obj));
  if (type != tensor_type && type != parameter_type) {
    return 0;
  }
  int same = with_attr(record, s_ref, [&](PyObject* ref) {
    PyObject* target = deref(ref);
    if (target == nullptr) {
      return -1;
    }
    const int is = target == obj;
    Py_DECREF(target);
    return is;
  });
  if (same != 1) {
    return same;
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.is_cpu() || t.is_conj() || t.is_neg() || (grad && t.requires_grad())) {
    return 0;
  }
  same = with_attr(record, s_dtype, [&](PyObject* dtype) {
    return dtype == reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type())) ? 1 : 0;
  });
  if (same != 1) {
    return same;
  }
  const void* data = nullptr;
  try {
    data = t.const_data_ptr();  // never materializes a copy-on-write tensor's storage
  } catch (const std::exception&) {
    return 0;  // no storage to read: not the cached view's tensor; the dispatcher decides
  }
  same = with_attr(record, s_ptr, [&](PyObject* ptr) {
    const unsigned long long v = PyLong_AsUnsignedLongLong(ptr);
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      return -1;
    }
    return v == reinterpret_cast<uintptr_t>(data) ? 1 : 0;
  });
  if (same != 1) {
    return same;
  }
  same = with_attr(record, s_shape, [&](PyObject* shape) { return same_ints(shape, t.sizes()); });
  if (same != 1) {
    return same;
  }
  return with_attr(record, s_stride, [&](PyObject* stride) { return same_ints(stride, t.strides()); });
}

// 1 when the static `v` is `memo`'s, as Python's `type(v) is type(memo) and not v != memo`
// reads it (no identity shortcut: a NaN is never its own memo), and a float zero of the same
// sign; 0 when not; -1 with an error set.
int same_static(PyObject* v, PyObject* memo) {
  if (Py_TYPE(v) != Py_TYPE(memo)) {
    return 0;
  }
  if (PyFloat_CheckExact(v)) {
    const double a = PyFloat_AS_DOUBLE(v), b = PyFloat_AS_DOUBLE(memo);
    // 0.0 == -0.0, but each traces its own constant
    return a == b && std::signbit(a) == std::signbit(b) ? 1 : 0;
  }
  PyObject* differ = PyObject_RichCompare(v, memo, Py_NE);
  if (differ == nullptr) {
    return -1;
  }
  const int truth = PyObject_IsTrue(differ);
  Py_DECREF(differ);
  return truth < 0 ? -1 : !truth;
}

bool tuple_arg(PyObject* o, const char* what) {
  if (!PyTuple_Check(o)) {
    PyErr_Format(PyExc_TypeError, "recall: %s must be a tuple", what);
    return false;
  }
  return true;
}

PyObject* py_configure(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyTuple_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "configure(tensor_type, parameter_type, plain_states: tuple)");
    return nullptr;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(args[2]);
  if (n > kMaxStates) {
    PyErr_Format(PyExc_ValueError, "configure: at most %d plain states, got %zd", kMaxStates, n);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* state = PyTuple_GET_ITEM(args[2], i);
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 2) {
      PyErr_SetString(PyExc_TypeError, "configure: each plain state is an (included, excluded) pair");
      return nullptr;
    }
    plain_included[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(state, 0));
    plain_excluded[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(state, 1));
    if (PyErr_Occurred()) {
      return nullptr;
    }
  }
  Py_XSETREF(tensor_type, Py_NewRef(args[0]));
  Py_XSETREF(parameter_type, Py_NewRef(args[1]));
  n_plain = static_cast<int>(n);
  Py_RETURN_NONE;
}

PyObject* py_modes_active(PyObject*, PyObject*) {
  return PyBool_FromLong(modes_active());
}

PyObject* py_recall(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "recall(refs, static_idx, statics, args, tensor_idx)");
    return nullptr;
  }
  PyObject *refs = args[0], *static_idx = args[1], *statics = args[2], *values = args[3],
           *tensor_idx = args[4];
  if (!tuple_arg(refs, "refs") || !tuple_arg(static_idx, "static_idx") || !tuple_arg(statics, "statics") ||
      !tuple_arg(values, "args") || !tuple_arg(tensor_idx, "tensor_idx")) {
    return nullptr;
  }
  if (tensor_type == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "recall: configure() first");
    return nullptr;
  }
  const Py_ssize_t n_args = PyTuple_GET_SIZE(values);
  auto arg = [&](PyObject* indices, Py_ssize_t j) -> PyObject* {
    const Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(indices, j));
    if (i < 0 || i >= n_args) {
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_IndexError, "recall: a parameter index outside args");
      }
      return nullptr;
    }
    return PyTuple_GET_ITEM(values, i);
  };
  const Py_ssize_t n_statics = PyTuple_GET_SIZE(statics);
  if (PyTuple_GET_SIZE(static_idx) != n_statics || PyTuple_GET_SIZE(tensor_idx) != PyTuple_GET_SIZE(refs)) {
    PyErr_SetString(PyExc_ValueError, "recall: indices and memo differ in length");
    return nullptr;
  }
  for (Py_ssize_t j = 0; j < n_statics; j++) {
    PyObject* v = arg(static_idx, j);
    if (v == nullptr) {
      return nullptr;
    }
    const int same = same_static(v, PyTuple_GET_ITEM(statics, j));
    if (same < 0) {
      return nullptr;
    }
    if (same == 0) {
      Py_RETURN_NONE;
    }
  }
  if (modes_active()) {
    Py_RETURN_NONE;
  }
  const bool grad = at::GradMode::is_enabled();
  const Py_ssize_t n = PyTuple_GET_SIZE(refs);
  PyObject* arrays = PyList_New(n);
  if (arrays == nullptr) {
    return nullptr;
  }
  for (Py_ssize_t j = 0; j < n; j++) {
    PyObject* t = arg(tensor_idx, j);
    if (t == nullptr) {
      Py_DECREF(arrays);
      return nullptr;
    }
    PyObject* ref = PyTuple_GET_ITEM(refs, j);
    if (ref == Py_None) {  // an Optional[Tensor] the memo's call left out
      if (t != Py_None) {
        Py_DECREF(arrays);
        Py_RETURN_NONE;
      }
      PyList_SET_ITEM(arrays, j, Py_NewRef(Py_None));
      continue;
    }
    if (!PyWeakref_Check(ref)) {
      Py_DECREF(arrays);
      PyErr_SetString(PyExc_TypeError, "recall: refs holds weak references to records, or None");
      return nullptr;
    }
    PyObject* record = deref(ref);
    if (record == nullptr) {
      Py_DECREF(arrays);
      return nullptr;
    }
    const int ok = record == Py_None ? 0 : holds(record, t, grad);
    PyObject* array = ok == 1 ? PyObject_GetAttr(record, s_array) : nullptr;
    Py_DECREF(record);
    if (ok != 1 || array == nullptr) {
      Py_DECREF(arrays);
      if (ok == 0) {
        Py_RETURN_NONE;
      }
      return nullptr;
    }
    PyList_SET_ITEM(arrays, j, array);
  }
  return arrays;
}

// Put `v` (a new reference) at `i` of a tuple this file made, releasing what was there.
void replace_item(PyObject* tuple, Py_ssize_t i, PyObject* v) {
  PyObject* old = PyTuple_GET_ITEM(tuple, i);
  PyTuple_SET_ITEM(tuple, i, v);
  Py_DECREF(old);
}

// A new tuple: `args`, then `defaults` from where args end (one value per parameter).
PyObject* with_defaults(PyObject* args, PyObject* defaults) {
  const Py_ssize_t n = PyTuple_GET_SIZE(args), n_params = PyTuple_GET_SIZE(defaults);
  PyObject* out = PyTuple_New(n_params);
  if (out == nullptr) {
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n_params; i++) {
    PyTuple_SET_ITEM(out, i, Py_NewRef(i < n ? PyTuple_GET_ITEM(args, i) : PyTuple_GET_ITEM(defaults, i)));
  }
  return out;
}

// complete(args, kwargs, spec) -> tuple | None: eager.EagerCpuCall.complete (its Python twin):
// one value per parameter as the dispatcher hands them to the kernel, or None where the
// dispatcher must decide (arity, keywords). spec = EagerCpuCall._spec: (names: dict name ->
// index, n_positional, n_required, defaults: tuple (inspect's empty for a required one),
// required: tuple of indices, floats: tuple of indices of float statics, param_names: tuple,
// double_overflow: int, empty: inspect.Parameter.empty).
PyObject* py_complete(PyObject*, PyObject* const* a, Py_ssize_t nargs) {
  if (nargs != 3 || !PyTuple_Check(a[0]) || !(a[1] == Py_None || PyDict_Check(a[1])) || !PyTuple_Check(a[2]) ||
      PyTuple_GET_SIZE(a[2]) != 9) {
    PyErr_SetString(PyExc_TypeError, "complete(args: tuple, kwargs: dict | None, spec: 9-tuple)");
    return nullptr;
  }
  PyObject *args = a[0], *spec = a[2];
  PyObject* kwargs = (a[1] != Py_None && PyDict_GET_SIZE(a[1]) > 0) ? a[1] : nullptr;
  PyObject* names = PyTuple_GET_ITEM(spec, 0);
  const Py_ssize_t n_positional = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 1));
  const Py_ssize_t n_required = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 2));
  PyObject *defaults = PyTuple_GET_ITEM(spec, 3), *required = PyTuple_GET_ITEM(spec, 4),
           *floats = PyTuple_GET_ITEM(spec, 5), *param_names = PyTuple_GET_ITEM(spec, 6),
           *overflow = PyTuple_GET_ITEM(spec, 7), *empty = PyTuple_GET_ITEM(spec, 8);
  if (PyErr_Occurred()) {
    return nullptr;
  }
  if (!PyDict_Check(names) || !PyTuple_Check(defaults) || !PyTuple_Check(required) || !PyTuple_Check(floats) ||
      !PyTuple_Check(param_names) || PyTuple_GET_SIZE(param_names) != PyTuple_GET_SIZE(defaults)) {
    PyErr_SetString(PyExc_TypeError, "complete: spec is (names, n_positional, n_required, defaults, required, floats, param_names, double_overflow, empty)");
    return nullptr;
  }
  const Py_ssize_t n_params = PyTuple_GET_SIZE(defaults);
  const Py_ssize_t n = PyTuple_GET_SIZE(args);
  PyObject* out = nullptr;  // a new tuple, filled below
  if (kwargs != nullptr) {
    if (n > n_positional || n > n_params) {
      Py_RETURN_NONE;
    }
    out = with_defaults(args, defaults);
    if (out == nullptr) {
      return nullptr;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
      PyObject* index = PyDict_GetItemWithError(names, key);
      if (index == nullptr) {
        Py_DECREF(out);
        if (PyErr_Occurred()) {
          return nullptr;
        }
        Py_RETURN_NONE;  // an unknown keyword
      }
      const Py_ssize_t i = PyLong_AsSsize_t(index);
      if (i < 0 || i >= n_params || i < n) {  // also given positionally
        Py_DECREF(out);
        if (PyErr_Occurred()) {
          return nullptr;
        }
        Py_RETURN_NONE;
      }
      replace_item(out, i, Py_NewRef(value));
    }
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(required); j++) {
      const Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(required, j));
      if (i >= n && i < n_params && PyTuple_GET_ITEM(out, i) == empty) {  // neither given nor named
        Py_DECREF(out);
        Py_RETURN_NONE;
      }
    }
  } else if (n != n_params || n_positional != n_params) {
    if (n < n_required || n > n_positional || n > n_params) {
      Py_RETURN_NONE;
    }
    out = with_defaults(args, defaults);
    if (out == nullptr) {
      return nullptr;
    }
  } else {
    out = Py_NewRef(args);
  }
  // float statics given as ints (positionally or by keyword; a default stays as written)
  for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(floats); j++) {
    const Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(floats, j));
    if (i < 0 || i >= PyTuple_GET_SIZE(out)) {
      Py_DECREF(out);
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_IndexError, "complete: a float index outside the parameters");
      }
      return nullptr;
    }
    PyObject* v = PyTuple_GET_ITEM(out, i);
    if (!PyLong_CheckExact(v)) {
      continue;
    }
    int given = i < n;
    if (!given && kwargs != nullptr) {
      given = PyDict_Contains(kwargs, PyTuple_GET_ITEM(param_names, i));
      if (given < 0) {
        Py_DECREF(out);
        return nullptr;
      }
    }
    if (!given) {
      continue;
    }
    // -double_overflow < v < double_overflow: a double holds it
    PyObject* magnitude = PyNumber_Absolute(v);
    const int fits = magnitude == nullptr ? -1 : PyObject_RichCompareBool(magnitude, overflow, Py_LT);
    Py_XDECREF(magnitude);
    if (fits != 1) {
      Py_DECREF(out);
      if (fits < 0) {
        return nullptr;
      }
      Py_RETURN_NONE;  // no double holds it: Signature.check_statics says so
    }
    PyObject* as_float = PyNumber_Float(v);
    if (as_float == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    if (out == args) {  // the caller's tuple: never written
      PyObject* copy = PyTuple_GetSlice(args, 0, PyTuple_GET_SIZE(args));
      Py_DECREF(out);
      if (copy == nullptr) {
        Py_DECREF(as_float);
        return nullptr;
      }
      out = copy;
    }
    replace_item(out, i, as_float);
  }
  return out;
}

PyMethodDef methods[] = {
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_configure)), METH_FASTCALL,
     "configure(tensor_type, parameter_type, plain_states)"},
    {"modes_active", py_modes_active, METH_NOARGS, "eager._modes_active's test"},
    {"recall", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_recall)), METH_FASTCALL,
     "recall(refs, static_idx, statics, args, tensor_idx) -> list of arrays, or None"},
    {"complete", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_complete)), METH_FASTCALL,
     "complete(args, kwargs, spec) -> tuple, or None"},
    {nullptr, nullptr, 0, nullptr}};

#define TK_STR_(x) #x
#define TK_STR(x) TK_STR_(x)
#define TK_CONCAT_(a, b) a##b
#define TK_CONCAT(a, b) TK_CONCAT_(a, b)

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, TK_STR(TORCH_EXTENSION_NAME), nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC TK_CONCAT(PyInit_, TORCH_EXTENSION_NAME)() {
  s_ref = PyUnicode_InternFromString("ref");
  s_ptr = PyUnicode_InternFromString("ptr");
  s_shape = PyUnicode_InternFromString("shape");
  s_stride = PyUnicode_InternFromString("stride");
  s_dtype = PyUnicode_InternFromString("dtype");
  s_array = PyUnicode_InternFromString("array");
  if (!s_ref || !s_ptr || !s_shape || !s_stride || !s_dtype || !s_array) {
    return nullptr;
  }
  return PyModule_Create(&module_def);
}
