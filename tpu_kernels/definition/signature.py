"""A kernel's Python signature -> a torch operator schema.

Which arguments are tensors (they cross into the kernel as `jax.Array`s) and
which are statics (compile-time constants, passed to the kernel as Python
values and part of the compilation cache key) is decided here, once, from the
annotations. Nothing in this module runs on the hot path except `Signature.split`.
"""

from __future__ import annotations

import collections.abc
import enum
import inspect
import math
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tpu_kernels.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    OpDefinitionError,
    UnsupportedError,
)


class Kind(enum.Enum):
    TENSOR = "Tensor"
    OPTIONAL_TENSOR = "Tensor?"
    TENSOR_LIST = "Tensor[]"
    STATIC = "static"


# Python annotation -> schema type of a static argument.
_STATIC_SCALARS: dict[Any, str] = {
    int: "int",
    float: "float",
    bool: "bool",
    str: "str",
    torch.dtype: "ScalarType",
}
_STATIC_LIST_ELEMENTS = {int: "int", float: "float", bool: "bool"}
_SEQUENCE_ORIGINS = (list, tuple, collections.abc.Sequence)


def _is_tensor_type(t: Any) -> bool:
    if t is torch.Tensor:
        return True
    try:
        import jax

        return t is jax.Array
    except ImportError:  # pragma: no cover - jax is a hard dependency
        return False


def _strip_optional(t: Any) -> tuple[Any, bool]:
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not types.NoneType]
        if len(args) == 1 and len(typing.get_args(t)) == 2:
            return args[0], True
    return t, False


def _sequence_element(t: Any) -> Any | None:
    """`list[X]`, `Sequence[X]` or `tuple[X, ...]` -> X; anything else -> None."""
    origin = typing.get_origin(t)
    if origin not in _SEQUENCE_ORIGINS:
        return None
    args = typing.get_args(t)
    if origin is tuple:
        return args[0] if len(args) == 2 and args[1] is Ellipsis else None
    return args[0] if len(args) == 1 else None


@dataclass(frozen=True)
class Param:
    name: str
    kind: Kind
    schema_type: str  # e.g. "Tensor", "Tensor?", "int[]", "float?"
    default: Any  # inspect.Parameter.empty when required
    keyword_only: bool

    @property
    def is_tensor(self) -> bool:
        return self.kind is not Kind.STATIC


# What an annotation may say, written once for the four errors about annotations (a
# parameter's or the return's, missing or unsupported), so each lists every choice.
_PARAMETER_TYPES = (
    "annotate tensors as torch.Tensor (or jax.Array), Optional[torch.Tensor] or "
    "list[torch.Tensor], and statics as int, float, bool, str, torch.dtype, list[int], "
    "list[float] or list[bool], each optionally Optional[...]"
)
_RETURN_TYPES = (
    "annotate the return as torch.Tensor (or jax.Array), a fixed-length tuple such as "
    "tuple[torch.Tensor, torch.Tensor], or None for an op that only mutates its arguments"
)


def _annotation_error(op: str, problem: str, allowed: str) -> OpDefinitionError:
    return OpDefinitionError(f"{op}: {problem}; {allowed}.")


def _classify(op: str, name: str, annotation: Any) -> tuple[Kind, str]:
    if annotation is inspect.Parameter.empty:
        raise _annotation_error(op, f"parameter '{name}' has no type annotation", _PARAMETER_TYPES)
    inner, optional = _strip_optional(annotation)
    if _is_tensor_type(inner):
        return (Kind.OPTIONAL_TENSOR, "Tensor?") if optional else (Kind.TENSOR, "Tensor")
    element = _sequence_element(inner)
    if element is not None and _is_tensor_type(element) and not optional:
        return Kind.TENSOR_LIST, "Tensor[]"
    if inner in _STATIC_SCALARS:
        base = _STATIC_SCALARS[inner]
    elif element in _STATIC_LIST_ELEMENTS:
        base = _STATIC_LIST_ELEMENTS[element] + "[]"
    else:
        raise _annotation_error(
            op, f"parameter '{name}' has unsupported annotation {annotation!r}", _PARAMETER_TYPES
        )
    return Kind.STATIC, base + ("?" if optional else "")


def _default_literal(op: str, p: Param) -> str:
    d = p.default
    if d is None:
        if not p.schema_type.endswith("?"):
            raise OpDefinitionError(
                f"{op}: parameter '{p.name}' defaults to None, so annotate it Optional[...]."
            )
        return "None"
    if isinstance(d, bool):
        return str(d)
    if isinstance(d, int):
        return str(d)
    if isinstance(d, float):
        if math.isinf(d) or math.isnan(d):
            return {math.inf: "inf", -math.inf: "-inf"}.get(d, "nan")
        return repr(d)
    if isinstance(d, str):
        escaped = d.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(d, torch.dtype):
        return str(d).removeprefix("torch.")
    if isinstance(d, (list, tuple)) and all(isinstance(v, (int, float, bool)) for v in d):
        return "[" + ", ".join(str(v) for v in d) + "]"
    raise OpDefinitionError(
        f"{op}: parameter '{p.name}' has a default {d!r} that a torch schema cannot "
        "express; use None, a number, a bool, a string, a dtype or a list of numbers."
    )


# What a static of each schema type takes, as the error for a wrong value says it.
_EXPECTED = {
    "int": "an int",
    "float": "a float (or an int)",
    "bool": "a bool",
    "str": "a str",
    "ScalarType": "a torch.dtype",
    "int[]": "a list of ints",
    "float[]": "a list of floats",
    "bool[]": "a list of bools",
}


def _expected(schema_type: str) -> str:
    base = schema_type.removesuffix("?")
    return _EXPECTED.get(base, base) + (" or None" if schema_type.endswith("?") else "")


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""What an `int` static holds: torch's schema stores ints as signed 64-bit integers."""
DOUBLE_OVERFLOW = 2**1024 - 2**970

# A float static's -0.0 in a compile-cache key. 0.0 == -0.0 and they hash alike, so as plain
# key parts they would share an executable; but a static is a constant in the trace, and a
# kernel traced with one is not the other's (x / 0.0 is inf, x / -0.0 is -inf).
NEGATIVE_ZERO = ("float", "-0.0")


def static_key(v: Any) -> Any:
    """A static's part of a cache key: the value, a list as a tuple, -0.0 as NEGATIVE_ZERO."""
    if type(v) is float:
        return NEGATIVE_ZERO if v == 0.0 and math.copysign(1.0, v) < 0 else v
    if isinstance(v, (list, tuple)):
        return tuple(static_key(e) for e in v)
    return v


def static_value(k: Any) -> Any:
    """The static a key part stands for (`static_key`'s inverse, lists as tuples)."""
    if k is NEGATIVE_ZERO or k == NEGATIVE_ZERO:
        return -0.0
    if type(k) is tuple:
        return tuple(static_value(e) for e in k)
    return k


"""The smallest int magnitude float() cannot convert (it rounds to 2**1024): a `float` static
(a double) given an int holds it only below this."""


def range_problem(schema_type: str, value: Any) -> str | None:
    """Why `value` is outside what a static of `schema_type` holds, or None. An `int` (and
    each item of an `int[]`) is a signed 64-bit integer; a `float` is a double, which every
    Python float is (inf and nan included), so only an int given for it can fall outside:
    one too large to convert (2**1024 and up). Other types have no range."""
    base = schema_type.removesuffix("?")
    if base not in _RANGED:
        return None
    items = value if base.endswith("[]") and isinstance(value, (list, tuple)) else (value,)
    for v in items:
        if type(v) is not int:
            continue
        if base.startswith("int") and not INT64_MIN <= v <= INT64_MAX:
            return (
                f"{_shown(v)}outside what an int static holds: a signed 64-bit integer (-2**63 to 2**63 - 1)"
            )
        if base.startswith("float") and not -DOUBLE_OVERFLOW < v < DOUBLE_OVERFLOW:
            return f"{_shown(v)}too large for a float static: a double (at most about 1.8e308)"
    return None


def _shown(v: int) -> str:
    # Under torch.compile an int that changed between calls arrives symbolic, and Dynamo cannot
    # trace its str(): the message leaves the value out there (fullgraph quotes it so; without
    # fullgraph the call reruns eagerly and says it).
    if torch.compiler.is_compiling():
        return ""
    text = str(v)
    return (text if len(text) <= 24 else f"an int of {len(text.lstrip('-'))} digits") + ", "


_RANGED = frozenset({"int", "int[]", "float", "float[]"})


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value)


def _kernel_static(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        from tpu_kernels.definition.dtypes import TORCH_TO_JAX

        return TORCH_TO_JAX.get(value, value)
    return value


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


@dataclass(frozen=True)
class Signature:
    """The parsed signature of a kernel function."""

    op: str
    params: tuple[Param, ...]
    n_outputs: int  # 0 when the op only mutates its arguments
    returns_tuple: bool

    def __post_init__(self) -> None:
        # Computed here, not lazily: an attribute first set while torch.compile traces a call
        # is a guard (`'_positional' in __dict__`) that fails at the next call.
        object.__setattr__(
            self,
            "_positional",
            tuple(p for p in self.params if not p.keyword_only),
        )
        object.__setattr__(self, "_by_name", {p.name: p for p in self.params})

    @property
    def tensor_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_tensor)

    @property
    def static_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.is_tensor)

    def pack(self, outs: Sequence[Any], returns_list: bool = False) -> Any:
        """The op's outputs as a call returns them, from the kernel's results (outputs, then
        mutated values, which are dropped): a list for a list-returning op, None without
        outputs, the tensor for one output, else a tuple. The one place this rule lives."""
        if returns_list:
            return list(outs)
        if self.n_outputs == 0:
            return None
        if self.n_outputs == 1 and not self.returns_tuple:
            return outs[0]
        return tuple(outs[: self.n_outputs])

    def index(self, name: str) -> int:
        for i, p in enumerate(self.params):
            if p.name == name:
                return i
        raise KeyError(name)

    def schema(self, *, mutates_args: tuple[str, ...] = (), returns: str | None = None) -> str:
        """The schema string for `torch.library` (without the op name)."""
        parts: list[str] = []
        kw_started = False
        for i, p in enumerate(self.params):
            if p.keyword_only and not kw_started:
                parts.append("*")
                kw_started = True
            t = p.schema_type
            if p.name in mutates_args:
                t = f"Tensor(a{i}!)" + t[len("Tensor") :]
            text = f"{t} {p.name}"
            if p.default is not inspect.Parameter.empty:
                text += "=" + _default_literal(self.op, p)
            parts.append(text)
        if returns is None:
            returns = (
                "()"
                if self.n_outputs == 0
                else (
                    "Tensor" if not self.returns_tuple else "(" + ", ".join(["Tensor"] * self.n_outputs) + ")"
                )
            )
        return f"({', '.join(parts)}) -> {returns}"

    def values(self, args: tuple, kwargs: dict) -> list[Any]:
        """Arguments as torch's dispatcher passes them -> one value per param.

        The dispatcher hands a Python kernel the positional schema arguments
        positionally and the keyword-only ones as kwargs, and drops trailing
        arguments equal to their defaults; this puts the defaults back.
        """
        if len(args) == len(self.params):
            return list(args)
        values = list(args)
        for p in self.params[len(args) :]:
            values.append(kwargs.get(p.name, p.default))
        return values

    def bind(self, args: tuple, kwargs: dict) -> list[Any]:
        """Bind a user's call (any mix of positional and keyword) -> one value per param."""
        n_pos = sum(not p.keyword_only for p in self.params)
        if len(args) > n_pos:
            raise InvalidArgumentTypeError(
                f"{self.op}() takes {n_pos} positional arguments but {len(args)} were given"
            )
        values = list(args)
        for p in self.params[len(args) :]:
            if p.name in kwargs:
                values.append(kwargs[p.name])
            elif p.default is not inspect.Parameter.empty:
                values.append(p.default)
            else:
                raise InvalidArgumentTypeError(f"{self.op}() missing required argument '{p.name}'")
        extra = set(kwargs) - {p.name for p in self.params}
        if extra:
            raise InvalidArgumentTypeError(f"{self.op}() got unexpected keyword arguments {sorted(extra)}")
        return values

    def split(self, values: list[Any]) -> tuple[list[Any], tuple]:
        """-> (the tensor arguments in param order, a hashable tuple of the statics)."""
        tensors = []
        statics = []
        for p, v in zip(self.params, values):
            if p.kind is Kind.STATIC:
                statics.append(_hashable(v))
            else:
                tensors.append(v)
        return tensors, tuple(statics)

    def check_tensors(self, values: Any) -> None:
        """Raise an InvalidArgumentTypeError (a TypeError) naming the first required tensor
        argument that is None.

        torch's dispatcher lets None through for a `Tensor` parameter: to the kernel
        when another argument is a tensor, else as "There were no tensor arguments
        to this function", which names neither the op's argument nor the fix."""
        for p, v in zip(self.params, values):
            if p.kind is Kind.TENSOR and not isinstance(v, torch.Tensor):
                raise InvalidArgumentTypeError(
                    f"{self.op}: argument '{p.name}' must be a Tensor, got {type(v).__name__}."
                )
            if p.kind is Kind.TENSOR_LIST and not all(isinstance(t, torch.Tensor) for t in v or ()):
                raise InvalidArgumentTypeError(
                    f"{self.op}: argument '{p.name}' must be a list of Tensors, got {v!r}."
                )

    def check_call(self, args: tuple, kwargs: dict) -> None:
        """A user's call (as `KernelOp.__call__` gets it), checked before the dispatcher sees it.

        A static that gets a tensor is a TypeError naming the op, the parameter and what it
        takes (InvalidArgumentTypeError): torch's dispatcher would turn a one-element tensor
        into a number in eager and refuse it under torch.compile; a static is a compile-time
        constant, so it is an error on every path. A number outside its schema type's range
        (`range_problem`) is a ValueError naming the op and the parameter
        (InvalidArgumentError), where torch's argument parser would say "Expected a value of
        type 'int' ... but instead found type 'int'". A nested tensor is NotImplementedError
        naming the op and the parameter (UnsupportedError), where torch would say "Internal
        error: NestedTensorImpl doesn't support sizes. Please file an issue" or "Could not
        run ... with arguments from the 'NestedTensorCPU' backend"."""
        for p, v in zip(self._positional, args):
            self._check_argument(p, v)
        for name, v in kwargs.items():
            p = self._by_name.get(name)
            if p is not None:
                self._check_argument(p, v)

    def _check_argument(self, p: Param, value: Any) -> None:
        if not p.is_tensor:
            self._check_static(p, value)
        elif isinstance(value, torch.Tensor):
            if value.is_nested:
                raise self._nested_error(p, value)
        elif isinstance(value, (list, tuple)):  # a Tensor[] parameter
            for t in value:
                if isinstance(t, torch.Tensor) and t.is_nested:
                    raise self._nested_error(p, t)

    def _nested_error(self, p: Param, value: torch.Tensor) -> UnsupportedError:
        return UnsupportedError(
            f"{self.op}: argument '{p.name}' is a nested tensor ({value.layout} layout, "
            f"{value.size(0)} components); tpu_kernels ops take dense tensors. Call the op on each "
            f"component ({p.name}.unbind()) or on a padded tensor "
            f"(torch.nested.to_padded_tensor({p.name}, 0.0), with a mask where the op needs one)."
        )

    def _check_static(self, p: Param, value: Any) -> None:
        if _has_tensor(value):
            raise self._static_error(p, value)
        problem = range_problem(p.schema_type, value)
        if problem is not None:
            raise InvalidArgumentError(
                f"{self.op}: argument '{p.name}' ({p.schema_type}) is {problem}, as torch's schema stores it."
            )

    def _static_error(self, p: Param, value: Any) -> InvalidArgumentTypeError:
        got = (
            f"a {value.dim()}-d Tensor"
            if isinstance(value, torch.Tensor)
            else f"a {type(value).__name__} of Tensors"
        )
        return InvalidArgumentTypeError(
            f"{self.op}: argument '{p.name}' is a static ({p.schema_type}: a compile-time constant "
            f"of the kernel) and takes {_expected(p.schema_type)}, but got {got}. Pass a Python "
            "value (e.g. t.item(), which reads the tensor once), or declare the parameter a "
            "Tensor to pass it as data."
        )

    def static_kwargs(self, statics: tuple) -> dict[str, Any]:
        """Statics (as `split` returns them) -> the kernel's keyword arguments.

        A `torch.dtype` static reaches the kernel as the matching JAX dtype, so
        `x.astype(out_dtype)` works in the body."""
        return {p.name: _kernel_static(v) for p, v in zip(self.static_params, statics)}


def parse(op: str, fn: Callable, *, allow_no_outputs: bool = False) -> Signature:
    """Parse `fn`'s signature; errors name the op and the parameter."""
    try:
        sig = inspect.signature(fn, eval_str=True)
    except NameError as e:
        raise OpDefinitionError(
            f"{op}: could not evaluate the annotations of {fn!r}: {e}. Annotations must "
            "name importable types at module scope."
        ) from e
    params = []
    for name, p in sig.parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise OpDefinitionError(
                f"{op}: parameter '{name}' is {p.kind.description}; a torch operator needs "
                "named parameters (positional-or-keyword or keyword-only)."
            )
        kind, schema_type = _classify(op, name, p.annotation)
        params.append(Param(name, kind, schema_type, p.default, p.kind is p.KEYWORD_ONLY))
        if p.default is not inspect.Parameter.empty:
            _default_literal(op, params[-1])  # validate early
    n_outputs, returns_tuple = _parse_return(op, sig.return_annotation, allow_no_outputs)
    return Signature(op, tuple(params), n_outputs, returns_tuple)


def _parse_return(op: str, ann: Any, allow_none: bool) -> tuple[int, bool]:
    if ann is inspect.Signature.empty:
        raise _annotation_error(op, "the kernel function needs a return annotation", _RETURN_TYPES)
    if ann is None or ann is types.NoneType:
        if not allow_none:
            raise OpDefinitionError(
                f"{op}: returns None but mutates no argument; declare mutates_args=(...) or return tensors."
            )
        return 0, False
    if _is_tensor_type(ann):
        return 1, False
    if typing.get_origin(ann) is tuple:
        args = typing.get_args(ann)
        if args and Ellipsis not in args and all(_is_tensor_type(a) for a in args):
            return len(args), True
    raise _annotation_error(op, f"unsupported return annotation {ann!r}", _RETURN_TYPES)
