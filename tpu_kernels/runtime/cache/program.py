"""The digest of a traced program: what the on-disk cache keys an executable by.

A kernel's Python source cannot say what its trace reads (a class attribute set at run
time, a monkeypatched helper, a value read from a file), so the key is taken from what the
trace produced, the program that runs: the jaxpr, walked equation by equation, with every
primitive's parameters (nested jaxprs, Pallas' grid and block mappings with their index
maps, compiler parameters), every literal and constant by value, and every variable's type.
Two traces that lower to different programs differ here; variable names, source locations
and debug information do not count.

What the walk cannot read exactly is refused (`Undigestible`): a Python callable among the
parameters that lowering could call (a host callback), an object of a type it does not know,
a repr that names a memory address, effects. The kernel is then cached in the process only.
Parameters that lowering never reads are skipped by name (`_NOT_LOWERED`): the derivative
rules that `custom_jvp`/`custom_vjp` calls carry (forward lowering runs `call_jaxpr` only).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")

# Parameters of these primitives that lowering does not read: the JVP/VJP rules, which
# only differentiation uses (jax/_src/custom_derivatives.py lowers `call_jaxpr`), and the
# batching rule of a custom_vmap and its trees (jax/_src/custom_batching.py: `custom_vmap_impl` drops them),
# and remat_opt's thunk of the undifferentiated function (`_remat_opt_impl` lowers `fwd_jaxpr`).
_NOT_LOWERED: dict[str, frozenset[str]] = {
    "custom_vmap_call": frozenset({"rule", "in_tree", "out_tree"}),
    "remat_opt": frozenset({"fun_jaxpr_thunk"}),
    "custom_jvp_call": frozenset({"jvp_jaxpr_fun", "jvp_jaxpr_thunk"}),
    "custom_vjp_call": frozenset({"fwd_jaxpr_thunk", "bwd", "out_trees"}),
    "custom_vjp_call_jaxpr": frozenset({"fwd_jaxpr_thunk", "bwd", "out_trees"}),
    "custom_lin": frozenset({"bwd", "out_avals"}),
}

# Types read by their repr: each prints every field that decides its meaning (checked
# in tests/cache/test_program.py for the ones the shipped kernels use).
_BY_REPR_MODULES = ("jax.", "jaxlib.", "numpy", "ml_dtypes")


_BY_REPR_TYPES = (jax.sharding.Mesh, jax.sharding.AbstractMesh, jax.sharding.Sharding)


class Undigestible(Exception):
    """The program holds something the digest cannot read exactly; `str()` says what."""


def digest(closed: Any, *extra: Any) -> str:
    """A SHA-256 of a ClosedJaxpr (and of `extra`, values of the types the walk reads).

    Raises Undigestible when the program cannot be read exactly."""
    h = hashlib.sha256()
    _Walker(h).value(closed, "program")
    for i, v in enumerate(extra):
        _Walker(h).value(v, f"extra[{i}]")
    return h.hexdigest()


def value_digest(v: Any) -> str:
    """A SHA-256 of a plain value (settings, keys) under the same rules as `digest`."""
    h = hashlib.sha256()
    _Walker(h).value(v, "value")
    return h.hexdigest()


class _Walker:
    def __init__(self, h: Any) -> None:
        self.h = h

    def put(self, *parts: Any) -> None:
        for p in parts:
            b = p if isinstance(p, bytes) else str(p).encode()
            self.h.update(len(b).to_bytes(8, "little"))
            self.h.update(b)

    # ---- jaxprs ---------------------------------------------------------------------
    def closed_jaxpr(self, c: Any, where: str) -> None:
        self.put("closed_jaxpr", len(c.consts))
        for i, const in enumerate(c.consts):
            self.value(const, f"{where}.consts[{i}]")
        self.jaxpr(c.jaxpr, where)

    def jaxpr(self, j: Any, where: str) -> None:
        # A nested jaxpr's effects (a kernel body reading and writing its refs) follow from
        # its equations; the program's own (host callbacks, ordered effects) cannot be stored.
        if where == "program" and j.effects:
            raise Undigestible(
                f"the program has effects ({sorted(map(str, j.effects))}), which a stored executable cannot carry"
            )
        names: dict[int, int] = {}

        def bind(v: Any) -> None:
            names[id(v)] = len(names)
            self.aval(v.aval)

        self.put("jaxpr", len(j.constvars), len(j.invars), len(j.eqns))
        for v in (*j.constvars, *j.invars):
            bind(v)
        for k, eqn in enumerate(j.eqns):
            name = eqn.primitive.name
            at = f"{where}.eqns[{k}]({name})"
            self.put("eqn", name, len(eqn.invars), len(eqn.outvars))
            for v in eqn.invars:
                self.atom(v, names, at)
            skip = _NOT_LOWERED.get(name, frozenset())
            params = sorted(eqn.params.items())
            self.put(len(params))
            for pname, pvalue in params:
                self.put(pname)
                if pname in skip:
                    self.put("<not lowered>")
                    continue
                self.value(pvalue, f"{at}.{pname}")
            for v in eqn.outvars:
                if isinstance(v, jcore.DropVar):
                    self.put("drop")
                    self.aval(v.aval)
                else:
                    bind(v)
        self.put("out", len(j.outvars))
        for v in j.outvars:
            self.atom(v, names, f"{where}.outvars")

    def atom(self, v: Any, names: dict[int, int], where: str) -> None:
        if isinstance(v, jcore.Literal):
            self.put("literal")
            self.aval(v.aval)
            self.value(v.val, where)
            return
        n = names.get(id(v))
        if n is None:
            raise Undigestible(f"{where}: a variable used before it is bound")
        self.put("var", n)

    def aval(self, a: Any) -> None:
        text = repr(a)
        if _ADDRESS.search(text):
            raise Undigestible(f"a type whose repr names an address: {text}")
        self.put("aval", type(a).__qualname__, text, getattr(a, "weak_type", None))
        inner = getattr(a, "inner_aval", None)  # a Ref's element type
        if inner is not None:
            self.aval(inner)

    # ---- parameter values -----------------------------------------------------------
    def value(self, v: Any, where: str) -> None:  # noqa: C901 - one case per kind of value
        t = type(v)
        if v is None or t in (bool, int, float, complex, str, bytes):
            self.put(t.__name__, repr(v))
        elif isinstance(v, jcore.ClosedJaxpr):
            self.closed_jaxpr(v, where)
        elif isinstance(v, jcore.Jaxpr):
            self.jaxpr(v, where)
        elif isinstance(v, (np.ndarray, np.generic, jax.Array)):
            a = np.asarray(v)
            self.put("array", a.dtype.str, str(a.dtype), a.shape, np.ascontiguousarray(a).tobytes())
        elif isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
            self.put("dtype", str(np.dtype(v)))
        elif isinstance(v, enum.Enum):
            self.put("enum", _qualname(t), v.name)
        elif isinstance(v, tuple) and hasattr(v, "_fields"):  # a NamedTuple
            self.put("namedtuple", _qualname(t), len(v))
            for f in v._fields:
                self.put(f)
                self.value(getattr(v, f), f"{where}.{f}")
        elif isinstance(v, (tuple, list, frozenset, set)):
            items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
            self.put(t.__name__, len(items))
            for i, item in enumerate(items):
                self.value(item, f"{where}[{i}]")
        elif isinstance(v, Mapping):
            self.put("mapping", _qualname(t), len(v))
            for k in sorted(v, key=repr):
                self.value(k, f"{where}.key")
                self.value(v[k], f"{where}[{k!r}]")
        elif isinstance(v, jax.core.AbstractValue):
            self.aval(v)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            fields = dataclasses.fields(v)
            self.put("dataclass", _qualname(t), len(fields))
            for f in fields:
                self.put(f.name)
                self.value(getattr(v, f.name), f"{where}.{f.name}")
        elif isinstance(v, jax.tree_util.PyTreeDef):
            self._repr(v, "treedef", where)
        elif isinstance(v, _BY_REPR_TYPES):  # (a Mesh is callable: before the check below)
            self._repr(v, _qualname(t), where)
        elif callable(v):
            raise Undigestible(f"{where}: a Python callable ({_qualname(t)}) that lowering may call")
        elif t.__module__.startswith(_BY_REPR_MODULES):
            self._repr(v, _qualname(t), where)
        else:
            raise Undigestible(f"{where}: an object of type {_qualname(t)}, which the digest cannot read")

    def _repr(self, v: Any, tag: str, where: str) -> None:
        text = repr(v)
        if _ADDRESS.search(text) or text.startswith("<"):
            raise Undigestible(f"{where}: {tag} has no exact repr ({text[:80]})")
        self.put(tag, text)


def _qualname(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


__all__ = ["Undigestible", "digest", "value_digest"]
