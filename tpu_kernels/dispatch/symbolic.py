"""torch's symbolic sizes as JAX's, and the equalities a trace needs as torch guards.

Under torch.compile with dynamic shapes a fake function sees torch `SymInt`s. Each
distinct torch expression becomes a JAX symbolic dimension (`jax.export.symbolic_shape`)
and the output sizes JAX derives come back as `SymInt`s. Dynamo gives each dynamic size
its own symbol (after a recompile under automatic dynamic shapes, x of (s77, s27) and y
of (s17, s94)), so a kernel that adds x to y cannot be traced: JAX cannot prove that
s77 == s17. torch's own ops establish such an equality with a guard on the sizes of the
example inputs (the hints); `plan` does the same for a kernel:

1. trace with one JAX symbol per torch expression; when that works, nothing is assumed;
2. else trace with the expressions whose hints are equal sharing one symbol (never two
   whose hints differ: the equality would be false for the very inputs being traced);
3. keep only the merges the trace needs: split each class by the axis its sizes sit at
   (counted from the right, then from the left), then try each member on its own, and
   keep every split under which the trace still succeeds;
4. `Plan.apply` calls `torch._check(a == b)` for each remaining merge. For sizes with a
   hint (Dynamo's backed sizes) that is a guard, not a run-time assert: a later call
   where they differ recompiles instead of failing (tests/test_compile_dynamic.py).

A plan depends only on the statics, the dtypes, which sizes are concrete (and their
values), which share a torch expression and which share a hint, so it is cached on
that (`Sizes.key`): a retrace (AOTAutograd's, a recompile) costs no JAX trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tpu_kernels import _compat

Partition = tuple[int, ...]
"""One entry per distinct torch expression: the index of its class's first expression."""

Trace = Callable[[Callable[[Any], Any]], tuple]
"""(torch sizes -> JAX sizes) -> ((JAX output shape, torch dtype), ...); raises if the
kernel cannot be traced with those sizes."""


class Sizes:
    """The sizes of one call's tensors: each distinct symbolic expression once, with its
    hint (None when torch has none: an unbacked size) and the axes it sits at."""

    def __init__(self, tensors: Sequence[Any]) -> None:
        self.symbols: list[torch.SymInt] = []
        self.hints: list[int | None] = []
        self._index: dict[str, int] = {}
        self._from_right: list[int] = []  # the axis (from the right) of each first appearance
        self._from_left: list[int] = []
        pattern = tuple(self._pattern(v) for v in tensors)
        first: dict[int, int] = {}  # the sizes whose hints are equal, one class each
        self.equal_hints: Partition = tuple(
            i if h is None else first.setdefault(h, i) for i, h in enumerate(self.hints)
        )
        self.key = (pattern, self.equal_hints)  # what a plan depends on

    def _pattern(self, v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return tuple(self._pattern(t) for t in v)
        if not isinstance(v, torch.Tensor):
            return None
        dims = []
        for axis, d in enumerate(v.shape):
            value = _concrete(d)
            if value is not None:
                dims.append(value)
                continue
            expr = str(d.node.expr)
            if expr not in self._index:
                self._index[expr] = len(self.symbols)
                self.symbols.append(d)
                self.hints.append(_hint(d))
                self._from_right.append(v.dim() - axis)
                self._from_left.append(axis)
            dims.append(("s", self._index[expr]))
        return (v.dtype, tuple(dims))

    def distinct(self) -> Partition:
        return tuple(range(len(self.symbols)))

    def dims(self, partition: Partition) -> Callable[[Any], Any]:
        """torch sizes -> JAX sizes, one JAX symbol per class of `partition`, all in one scope."""
        from jax import export

        scope = export.SymbolicScope()

        def dims(shape: Any) -> Any:
            parts = []
            for d in shape:
                value = _concrete(d)
                if value is not None:
                    parts.append(str(value))
                else:
                    parts.append(f"d{partition[self._index[str(d.node.expr)]]}")
            return export.symbolic_shape(",".join(parts), scope=scope) if parts else ()

        return dims

    def axes(self) -> tuple[list[int], list[int]]:
        """Where each expression first sits: its axis from the right (x's last dim and a
        weight's only dim agree), and from the left."""
        return self._from_right, self._from_left


@dataclass(frozen=True)
class Plan:
    """How a call's symbolic sizes were traced: which share a JAX symbol, and what came out."""

    partition: Partition
    outs: tuple  # ((JAX output shape, torch dtype), ...)

    def apply(self, sizes: Sizes) -> tuple:
        """Guard the equalities the trace assumed; the output shapes as torch sizes."""
        env: dict[str, Any] = {}
        check = _compat.get("torch_check")
        for i, cls in enumerate(self.partition):
            if cls == i:
                env[f"d{i}"] = sizes.symbols[i]
            else:
                check(sizes.symbols[cls] == sizes.symbols[i])
        return tuple((tuple(_to_torch_dim(d, env) for d in shape), dt) for shape, dt in self.outs)


def plan(sizes: Sizes, trace: Trace) -> Plan:
    """The finest sharing of JAX symbols found under which `trace` succeeds (the module
    docstring's steps); the error of the trace with every equal-hint merge when none does."""
    distinct = sizes.distinct()
    try:
        return Plan(distinct, trace(sizes.dims(distinct)))
    except Exception:
        merged = sizes.equal_hints
        if merged == distinct:
            raise  # no two sizes could be equal: the kernel's own error
    outs = trace(sizes.dims(merged))  # raises: no sound merge makes the kernel traceable
    best = Plan(merged, outs)
    tried = {distinct, merged}

    def attempt(partition: Partition) -> None:
        nonlocal best
        if partition in tried:  # a class of two split by axis is each member alone
            return
        tried.add(partition)
        try:
            best = Plan(partition, trace(sizes.dims(partition)))
        except Exception:  # the trace needs an equality this split undid: keep the coarser plan
            pass

    for axes in sizes.axes():  # split each class by where its sizes sit, one class at a time
        for cls in sorted(set(best.partition)):
            p = best.partition
            candidate = _split(p, lambda i: (p[i], axes[i] if p[i] == cls else None))  # noqa: B023
            attempt(candidate)
    for i in range(len(distinct)):
        p = best.partition
        if sum(c == p[i] for c in p) > 1:  # a member of a merged class: try it alone
            attempt(_alone(p, i))
    return best


def _split(partition: Partition, by: Callable[[int], Any]) -> Partition:
    """`partition`'s classes split by `by(index)`: each new class named by its first index."""
    first: dict[Any, int] = {}
    return tuple(first.setdefault(by(i), i) for i in range(len(partition)))


def _alone(partition: Partition, i: int) -> Partition:
    """`partition` with expression `i` in a class of its own."""
    return _split(partition, lambda j: (partition[j], j == i))


def _concrete(d: Any) -> int | None:
    """A size's value when it is not symbolic (an int, or a SymInt torch knows the value of)."""
    value = d.node.maybe_as_int() if isinstance(d, torch.SymInt) else d
    return None if value is None else int(value)


def _hint(d: torch.SymInt) -> int | None:
    hint = d.node.hint
    return None if hint is None else int(hint)


def _to_torch_dim(d: Any, env: dict[str, Any]) -> Any:
    """A JAX symbolic dimension (a polynomial of the input symbols) -> a torch SymInt.

    JAX's own `_evaluate` calls operator.index on its operands, which would make
    torch specialise every symbol to its current value; this walks the
    polynomial with plain arithmetic instead.
    """
    if isinstance(d, int):
        return d
    total: Any = 0
    for term, coeff in _compat.symbolic_terms(d):
        value: Any = coeff
        for factor, exponent in _compat.term_factors(term):
            value = value * _factor_value(factor, env) ** exponent
        total = total + value
    return total


def _factor_value(f: Any, env: dict[str, Any]) -> Any:
    if f.var is not None:
        return env[f.var]
    a, b = (_to_torch_dim(o, env) for o in f.operands)
    op = f.operation
    if op == "floordiv":
        return a // b
    if op == "mod":
        return a % b
    if op == "max":
        return torch.sym_max(a, b)
    if op == "min":
        return torch.sym_min(a, b)
    raise NotImplementedError(f"symbolic dimension operation {op!r}")


__all__ = ["Plan", "Sizes", "plan"]
