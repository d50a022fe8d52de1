"""The VMEM a Pallas TPU kernel's body needs for its own values, from the kernel's jaxpr.

Mosaic unrolls each vector operation of the body into operations on (8, 128) registers, and the
TPU compiler keeps what does not fit in the 64 registers in VMEM, inside the kernel's scoped
VMEM limit beside the blocks. An elementwise chain streams through registers; a value that must
outlive a reduction or a matmul (the float32 upcast of a block read before a row mean and again
after it; attention's scores, needed by the row max and again by exp) is held whole.

`body_values` lists the body's array values in program order (branches of `pl.when` and loop
bodies inlined) with where each is defined and last used; `estimate` gives the bytes the
compiler holds for them under the rule calibrated against the chip (docs/tpu-lowering-check.md,
"Calibration"): the largest set of values live across one reduction or matmul, each rounded up
to whole tiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpu_kernels.check import tiling
from tpu_kernels.lowering import pallas_grid

# Operations that need their whole operand before their result exists: values computed before
# one and used after it cannot stream through registers.
BARRIERS = frozenset(
    {
        "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or",
        "argmax", "argmin", "dot_general", "cumsum", "cumlogsumexp", "cummax", "cummin",
        "transpose",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Value:
    """One array value of the kernel body."""

    primitive: str  # the operation that makes it ("convert_element_type", "get" for a block read)
    shape: tuple[int, ...]
    dtype: str
    bytes: int  # rounded up to whole tiles
    start: int  # position of the operation that makes it
    end: int  # position of its last use (start if unused)


@dataclass(frozen=True)
class Body:
    values: tuple[Value, ...]
    barriers: tuple[tuple[int, str], ...]  # (position, primitive) of each reduction or matmul


def _nbytes(aval: Any) -> int | None:
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or dtype is None or not shape or type(aval).__name__ != "ShapedArray":
        return None  # a scalar, a ref, a token
    if any(not isinstance(d, int) for d in shape):
        return None
    return tiling.tile_bytes(tuple(shape), dtype)


def _sub_jaxprs(eqn: Any) -> list[Any]:
    return [j for value in eqn.params.values() for j in pallas_grid.sub_jaxprs(value)]


def _is_var(atom: Any) -> bool:
    return not hasattr(atom, "val")  # a Literal holds its value


def _linear(jaxpr: Any, alias: dict, steps: list[tuple[str, list, list]]) -> None:
    """Append (primitive, used vars, defined vars) for each operation, sub-jaxprs inlined: their
    inputs bound to the operands they receive (the trailing ones), their results used where the
    enclosing operation stands."""

    def outer(v: Any) -> Any:
        return alias.get(v, v)

    for eqn in jaxpr.eqns:
        used = [outer(v) for v in eqn.invars if _is_var(v)]
        for sub in _sub_jaxprs(eqn):
            operands = list(eqn.invars)[-len(sub.invars) :] if sub.invars else []
            inner = dict(alias)
            if len(operands) == len(sub.invars):
                inner.update((iv, outer(ov)) for iv, ov in zip(sub.invars, operands) if _is_var(ov))
            _linear(sub, inner, steps)
            used += [inner.get(v, v) for v in sub.outvars if _is_var(v)]
        steps.append((eqn.primitive.name, used, list(eqn.outvars)))


def body_values(eqn: Any) -> Body:
    """The array values of a `pallas_call`'s kernel body, in program order."""
    steps: list[tuple[str, list, list]] = []
    _linear(eqn.params["jaxpr"], {}, steps)
    defined: dict[Any, tuple[int, str]] = {}
    last: dict[Any, int] = {}
    barriers = []
    for pos, (prim, used, outs) in enumerate(steps):
        for v in used:
            last[v] = pos
        for v in outs:
            defined[v] = (pos, prim)
        if prim in BARRIERS:
            barriers.append((pos, prim))
    values = []
    for v, (pos, prim) in defined.items():
        nbytes = _nbytes(v.aval)
        if nbytes is None:
            continue
        values.append(
            Value(prim, tuple(v.aval.shape), str(v.aval.dtype), nbytes, pos, max(pos, last.get(v, pos)))
        )
    return Body(tuple(values), tuple(barriers))


def live_peak(body: Body, *, loads: bool = True) -> int:
    """The most bytes of values alive at once in program order (an upper bound: no streaming)."""
    ends = sorted({v.start for v in body.values} | {v.end for v in body.values})
    best = 0
    for p in ends:
        best = max(
            best,
            sum(v.bytes for v in body.values if v.start <= p <= v.end and (loads or v.primitive != "get")),
        )
    return best


def across_barriers(body: Body, *, loads: bool = False, outputs: bool = False, inputs: bool = False) -> int:
    """The most bytes of values that live across one reduction or matmul (made before it, used
    after it); with `outputs`, the barrier's own result is added (a matmul's whole product);
    with `inputs`, values last used by the barrier itself (its operands) count too."""
    best = 0
    for pos, _ in body.barriers:
        held = sum(
            v.bytes
            for v in body.values
            if v.start < pos
            and (pos < v.end or (inputs and pos == v.end))
            and (loads or v.primitive != "get")
        )
        if outputs:
            held += sum(v.bytes for v in body.values if v.start == pos)
        best = max(best, held)
    return best


def estimate(eqn: Any) -> int:
    """Bytes of VMEM the body's values take, by the calibrated rule (module docstring)."""
    return across_barriers(body_values(eqn))
