"""A stable digest of what a kernel function computes, for the on-disk kernel cache.

The on-disk cache (`tpu_kernels.disk_cache`) may reuse a kernel lowered by another
process only if the kernel is the same. Two functions are taken as the same when
their digests are equal; the digest covers:

- the code object, recursively (nested functions, lambdas, comprehensions):
  bytecode, constants, names, argument layout; not file names or line numbers,
  so moving a function in its file keeps its entries;
- default and keyword-default arguments, and the values in closure cells;
- every global the code (or its nested code) names, looked up in the function's
  globals: helper functions are digested the same way, constants by value, modules
  of a versioned package (JAX, NumPy, the standard library...) by name and version,
  other modules by their source file and the attributes the code names;
- classes by their module's source file, or by name and version for a versioned
  package; `functools.partial`, bound methods, `jax.custom_vjp`/`custom_jvp` and
  `jax.jit`-wrapped functions by their parts.

Anything else - an object whose value cannot be read reliably (an open file, a
class instance without a file or a dataclass layout, a repr carrying an address) -
makes `digest` return None, and the op is then not cached on disk at all: a
spurious miss costs a compile, a wrong hit would cost wrong results.
"""

from __future__ import annotations

import dataclasses
import dis
import enum
import functools
import hashlib
import importlib.metadata
import os
import sys
import time
import types
from typing import Any

import numpy as np

# Packages whose code is pinned by their version: their modules, functions and classes
# are digested by name plus version instead of by source. tpu_kernels is not among
# them: its version does not change while it is being developed.
_VERSIONED = {
    "jax": "jax",
    "jaxlib": "jaxlib",
    "numpy": "numpy",
    "ml_dtypes": "ml_dtypes",
    "scipy": "scipy",
    "opt_einsum": "opt_einsum",
    "torch": "torch",
    "helion": "helion",
    "tokamax": "tokamax",
    "triton": "triton",
    "einops": "einops",
    "absl": "absl-py",
}
# Library types digested by repr: the repr is the whole value.
_VALUE_TYPES = {
    "torch.dtype",
    "torch.Size",
    "torch.device",
    "jax._src.mesh.AbstractMesh",
    "jax._src.core.ShapeDtypeStruct",
    "jax._src.api.ShapeDtypeStruct",
    "ml_dtypes._finfo.finfo",
}
_MAX_OBJECTS = 5000  # a walk that reaches this many objects is not one kernel: give up


class Unhashable(Exception):
    """An object in the kernel's reach whose value cannot be digested reliably."""


@functools.cache
def _package_version(top: str) -> str | None:
    if top in sys.stdlib_module_names or top == "builtins":
        return "python-" + sys.version
    dist = _VERSIONED.get(top)
    if dist is None:
        return None
    # the package's own __version__ when it has one: importlib.metadata parses the
    # distribution's METADATA file, about 3 ms a package here
    version = getattr(sys.modules.get(top), "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _versioned(module_name: str | None) -> str | None:
    if not module_name:
        return None
    return _package_version(module_name.partition(".")[0])


@functools.cache
def _process_start() -> float:
    try:  # Linux: /proc/<pid> is created when the process starts
        return os.stat(f"/proc/{os.getpid()}").st_ctime
    except OSError:
        return _IMPORTED_AT


_IMPORTED_AT = time.time()


@functools.cache
def _file_digest(path: str) -> str:
    """A source file's digest, standing for the module loaded from it. A file changed
    since this process started may no longer be what was loaded: not digested."""
    if os.stat(path).st_mtime > _process_start():
        raise Unhashable(f"{path} changed after this process started")
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _module_file(module: types.ModuleType) -> str:
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        raise Unhashable(f"module {module.__name__} has no Python source file")
    return _file_digest(path)


_GLOBAL_OPS = {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_FROM_DICT_OR_GLOBALS"}
_ATTR_OPS = {"LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "LOAD_SUPER_ATTR", "IMPORT_FROM"}


@functools.lru_cache(maxsize=4096)
def _names(code: types.CodeType) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(globals, attribute names, imported modules) the code and its nested code use.

    Read from the bytecode rather than co_names, which mixes globals with attribute
    names: `tokamax.layer_norm(...)` in a module that also defines a global
    `layer_norm` would otherwise drag that global in."""
    globals_, attrs, imports = set(), set(), set()
    for ins in dis.get_instructions(code):
        if ins.opname in _GLOBAL_OPS:
            globals_.add(ins.argval)
        elif ins.opname in _ATTR_OPS:
            attrs.add(ins.argval)
        elif ins.opname == "IMPORT_NAME":
            imports.add(ins.argval)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            g, a, m = _names(c)
            globals_ |= g
            attrs |= a
            imports |= m
    return frozenset(globals_), frozenset(attrs), frozenset(imports)


class _Walker:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.seen: dict[int, int] = {}  # id -> visit number (cycles, shared helpers)
        self.keep: list[Any] = []  # keeps ids valid during the walk

    def put(self, *parts: Any) -> None:
        for p in parts:
            b = p if isinstance(p, bytes) else str(p).encode()
            self.h.update(len(b).to_bytes(8, "little"))
            self.h.update(b)

    def visit(self, obj: Any, names: set[str] | None = None) -> None:
        """Digest `obj`; `names` are the attribute names the referring code uses (modules)."""
        if obj is None or obj is Ellipsis or obj is NotImplemented:
            self.put("singleton", repr(obj))
            return
        t = type(obj)
        if t in (bool, int, float, complex, str, bytes):
            self.put(t.__name__, obj if t is bytes else repr(obj))
            return
        if isinstance(obj, types.ModuleType):
            # before the seen check: the same module reached through different code
            # must also cover the attributes that code names
            self._module(obj, names or set())
            return
        key = id(obj)
        if key in self.seen:
            self.put("seen", self.seen[key])
            return
        self.seen[key] = len(self.seen)
        self.keep.append(obj)
        if len(self.seen) > _MAX_OBJECTS:
            raise Unhashable(f"more than {_MAX_OBJECTS} objects in the kernel's reach")
        if t in (tuple, list):
            self.put(t.__name__, len(obj))
            for v in obj:
                self.visit(v)
        elif t in (set, frozenset):
            self.put(t.__name__, len(obj))
            for d in sorted(_digest_of(v) for v in obj):
                self.put(d)
        elif t is dict:
            self.put("dict", len(obj))
            for d in sorted(_digest_of(k) + _digest_of(v) for k, v in obj.items()):
                self.put(d)
        elif t is slice:
            self.put("slice")
            self.visit((obj.start, obj.stop, obj.step))
        elif isinstance(obj, types.CodeType):
            self._code(obj)
        elif isinstance(obj, types.FunctionType):
            self._function(obj)
        elif isinstance(obj, functools.partial):
            self.put("partial")
            self.visit(obj.func)
            self.visit(obj.args)
            self.visit(obj.keywords)
        elif isinstance(obj, types.MethodType):
            self.put("method")
            self.visit(obj.__func__)
            self.visit(obj.__self__)
        elif isinstance(obj, type):
            self._class(obj)
        elif isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)):
            owner = getattr(obj, "__self__", None)
            if owner is not None and not isinstance(owner, types.ModuleType):
                self.put("builtin-method", obj.__name__)
                self.visit(owner)
                return
            version = _versioned(getattr(obj, "__module__", None))
            if version is None:
                raise Unhashable(f"builtin {obj!r} of an unversioned module")
            self.put("builtin", obj.__module__, obj.__qualname__, version)
        elif isinstance(obj, enum.Enum):
            self.put("enum", obj.name)
            self.visit(type(obj))
        elif isinstance(obj, np.dtype):
            self.put("np.dtype", obj.str, obj.name)
        elif isinstance(obj, (np.ndarray, np.generic)):
            a = np.asarray(obj)
            if a.dtype.hasobject:
                raise Unhashable("an object array")
            self.put("ndarray", a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes())
        else:
            self._other(obj)

    def _code(self, code: types.CodeType) -> None:
        self.put(
            "code",
            code.co_name,
            code.co_qualname,
            code.co_argcount,
            code.co_posonlyargcount,
            code.co_kwonlyargcount,
            code.co_flags,
            code.co_code,
            code.co_names,
            code.co_varnames,
            code.co_freevars,
            code.co_cellvars,
        )
        self.visit(code.co_consts)

    def _function(self, fn: types.FunctionType) -> None:
        version = _versioned(fn.__module__)
        if version is not None:
            self.put("versioned-function", fn.__module__, fn.__qualname__, version)
            return
        self.put("function", fn.__module__, fn.__qualname__)
        self._code(fn.__code__)
        self.visit(fn.__defaults__)
        self.visit(fn.__kwdefaults__)
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                self.put("empty-cell")
                continue
            self.visit(value)
        globals_ = fn.__globals__
        names, attrs, imports = _names(fn.__code__)
        for name in sorted(names):
            if name in globals_:
                self.put("global", name)
                self.visit(globals_[name], set(attrs))
        for module_name in sorted(imports):  # `import x` / `from x import y` inside the function
            self.put("import", module_name)
            module = sys.modules.get(module_name)
            if module is None:
                if _versioned(module_name) is None:
                    raise Unhashable(f"{fn.__qualname__} imports {module_name}, which is not loaded yet")
                self.put("versioned-module", module_name, _versioned(module_name))
                continue
            self.visit(module, set(attrs))

    def _module(self, module: types.ModuleType, names: set[str]) -> None:
        version = _versioned(module.__name__)
        if version is not None:
            self.put("versioned-module", module.__name__, version)
            return
        marker = ("module", module.__name__, frozenset(names))
        if marker in self.seen:
            self.put("seen-module", module.__name__)
            return
        self.seen[marker] = len(self.seen)  # type: ignore[index]
        self.put("module", module.__name__, _module_file(module))
        attrs = vars(module)
        for name in sorted(names):
            if name in attrs:
                self.put("attr", name)
                self.visit(attrs[name], names)

    def _class(self, cls: type) -> None:
        version = _versioned(cls.__module__)
        if version is not None:
            self.put("versioned-class", cls.__module__, cls.__qualname__, version)
            return
        self.put("class", cls.__module__, cls.__qualname__)
        for base in cls.__mro__:
            if base is object:
                continue
            if _versioned(base.__module__) is not None:
                self.put("base", base.__module__, base.__qualname__, _versioned(base.__module__))
                continue
            module = sys.modules.get(base.__module__)
            if module is None:
                raise Unhashable(f"class {base.__qualname__}: its module is not loaded")
            self.put("base-file", base.__qualname__, _module_file(module))

    def _other(self, obj: Any) -> None:
        t = type(obj)
        if (
            type(obj).__name__ in ("PjitFunction", "JitWrapped")
            or hasattr(obj, "_fun")
            and hasattr(obj, "lower")
        ):
            self._jitted(obj)
            return
        if hasattr(obj, "fun") and t.__name__ in ("custom_vjp", "custom_jvp"):
            self.put(t.__name__)
            for attr in ("fun", "fwd", "bwd", "jvp", "nondiff_argnums", "symbolic_zeros"):
                self.visit(getattr(obj, attr, None))
            return
        if dataclasses.is_dataclass(obj):
            self.put("dataclass")
            self.visit(t)
            fields = [f.name for f in dataclasses.fields(obj)]
            if set(getattr(obj, "__dict__", {})) - set(fields):
                raise Unhashable(f"a {t.__qualname__} with attributes beyond its fields")
            for name in fields:
                self.put("field", name)
                self.visit(getattr(obj, name))
            return
        name = f"{t.__module__}.{t.__qualname__}"
        if name in _VALUE_TYPES:
            # values of a versioned library whose repr is their whole value; other library
            # objects (a helion.Kernel, a BlockSpec holding a lambda...) may hold user code
            # that a repr does not show, so they are not digested
            self.put("versioned-value", name, _versioned(t.__module__), repr(obj))
            return
        raise Unhashable(f"a {t.__module__}.{t.__qualname__} object")

    def _jitted(self, obj: Any) -> None:
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is None:
            raise Unhashable("a jitted function without __wrapped__")
        # jit's options (static_argnums, ...) are not all readable from the object;
        # its repr does not carry them either. The wrapped code is what computes;
        # static_argnums only decide what is traced, which the wrapped code's result
        # for the same inputs does not depend on unless it inspects tracers.
        self.put("jit")
        self.visit(wrapped)


def _digest_of(obj: Any) -> str:
    w = _Walker()
    w.visit(obj)
    return w.h.hexdigest()


def digest(*objs: Any) -> str | None:
    """A hex digest of `objs` (kernel functions, statics...), or None if any cannot be digested."""
    w = _Walker()
    try:
        for o in objs:
            w.visit(o)
    except Unhashable:
        return None
    except (OSError, RecursionError, TypeError, ValueError, AttributeError):
        return None
    return w.h.hexdigest()


def explain(obj: Any) -> str | None:
    """Why `obj` cannot be digested (None if it can): for `tpu-kernels cache info` and tests."""
    try:
        _Walker().visit(obj)
    except Unhashable as e:
        return str(e)
    except (OSError, RecursionError, TypeError, ValueError, AttributeError) as e:
        return f"{type(e).__name__}: {e}"
    return None


__all__ = ["Unhashable", "digest", "explain"]
