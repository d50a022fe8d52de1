"""The VMEM a Pallas TPU kernel's body needs for its own values, from the kernel's jaxpr.

Mosaic unrolls each vector operation of the body into operations on (8, 128) registers, and the
TPU compiler keeps what does not fit in the 64 registers in VMEM, inside the kernel's scoped
VMEM limit beside the blocks. An elementwise chain streams through registers; a value that must
outlive a reduction or a matmul (the float32 upcast of a block read before a row mean and again
after it; attention's scores, needed by the row max and again by exp) is held.

`body_values` lists the body's array values in program order (branches of `pl.when` and loop
bodies inlined) with where each is defined and last used; `estimate` gives the bytes the
compiler holds for them under the rule calibrated against a v5e's compile verdicts
(`held`; docs/tpu-lowering-check.md, "Calibration against a v5e").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpu_kernels.lowering import pallas_grid
from tpu_kernels.lowering_check import tiling

# Operations that need their whole operand before their result exists: values computed before
# one and used after it cannot stream through registers.
BARRIERS = frozenset(
    {
        "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or",
        "argmax", "argmin", "dot_general", "cumsum", "cumlogsumexp", "cummax", "cummin",
        "transpose",
    }
)  # fmt: skip


# A matmul's float32 result is held up to this many bytes (docs/tpu-lowering-check.md): a 1024x1024
# product (4 MiB) was held in part (2.36 MiB beyond the buffers), products of 8 and 16 MiB not at
# all (the compiler's allocation was the buffers' sum), so the rule counts at most a 4 MiB one.
MATMUL_RESULT_HELD_MAX = 4 * 2**20

# An elementwise body streams through the 64 vector registers while few values are live at once;
# with more than SPILL_AFTER_VALUES live together the compiler spills registers to VMEM (a body of 9
# float32 values live at once was refused with buffers of exactly the limit, one of 5 compiled).
# The spill's size was not measured: the register file's bytes (64 x 4 KiB) stand for it.
SPILL_AFTER_VALUES = 8
SPILL_BYTES = 64 * 4096


@dataclass(frozen=True)
class Value:
    """One array value of the kernel body."""

    primitive: str  # the operation that makes it ("convert_element_type", "get" for a block read)
    shape: tuple[int, ...]
    dtype: str
    bytes: int  # rounded up to whole tiles
    start: int  # position of the operation that makes it
    end: int  # position of its last use (start if unused)
    upcast_of: int = 0  # a widening of a block read (bf16 -> f32): that read's bytes; 0 otherwise


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
        end = max(pos, last.get(v, pos))
        upcast_of = _upcast_of(v, steps, defined)
        values.append(Value(prim, tuple(v.aval.shape), str(v.aval.dtype), nbytes, pos, end, upcast_of))
    return Body(tuple(values), tuple(barriers))


def _upcast_of(v: Any, steps: list[tuple[str, list, list]], defined: dict) -> int:
    """The bytes of the block read `v` widens (`x_ref[...].astype(jnp.float32)`), or 0."""
    pos, prim = defined[v]
    used = steps[pos][1]
    if prim != "convert_element_type" or len(used) != 1 or defined.get(used[0], (0, ""))[1] != "get":
        return 0
    source = used[0].aval
    if source.dtype.itemsize >= v.aval.dtype.itemsize:
        return 0
    return _nbytes(source) or 0


def held(body: Body) -> int:
    """Bytes the compiler holds for the body's values: the most, at any one reduction or matmul,
    of the values made before it and used after it, where

    - a block read (`x_ref[...]`) is not held: its block stays in VMEM for the whole grid step
      and is read again (float32 softmax backward: y and dy outlive the row sum, ~0 held);
    - the largest widening of a block read (bf16 -> f32) is held whole, and any other at the
      width it was read at (softmax backward, bf16: y and dy widened, 1.21-1.23 f32 blocks
      held; counted 1.5);
    - every other value is held whole;
    - a matmul's result is held beside them up to `MATMUL_RESULT_HELD_MAX` (a bf16 1024^3
      matmul: 2.36 MiB beyond its buffers, counted 4 MiB; 2048x1024 and 2048x2048 products
      held at 0, counted 4 MiB).

    An upper bound for the kernels the v5e measured, but for rmsnorm's backward body (3.0 f32
    blocks counted, 3.47 held) and forward (0.15-0.3 MiB more held): docs/tpu-lowering-check.md.
    """
    best = 0
    for pos, prim in body.barriers:
        across = [v for v in body.values if v.start < pos < v.end and v.primitive != "get"]
        upcasts = sorted((v for v in across if v.upcast_of), key=lambda v: v.bytes, reverse=True)
        total = sum(v.bytes for v in across if not v.upcast_of)
        if upcasts:
            total += upcasts[0].bytes + sum(v.upcast_of for v in upcasts[1:])
        if prim == "dot_general":
            total += min(sum(v.bytes for v in body.values if v.start == pos), MATMUL_RESULT_HELD_MAX)
        best = max(best, total)
    return best


def most_live(body: Body) -> int:
    """The most array values (block reads aside) live at once anywhere in the body."""
    values = [v for v in body.values if v.primitive != "get"]
    ends = sorted({v.end for v in values})
    return max((sum(1 for v in values if v.start < p <= v.end) for p in ends), default=0)


def spill(body: Body) -> int:
    """Bytes of registers spilled to VMEM: `SPILL_BYTES` when more than `SPILL_AFTER_VALUES`
    values are live at once, else 0."""
    return SPILL_BYTES if most_live(body) > SPILL_AFTER_VALUES else 0


def estimate(eqn: Any) -> int:
    """Bytes of VMEM the body's values take, by the calibrated rule (`held`), and any register
    spill (`spill`)."""
    body = body_values(eqn)
    return held(body) + spill(body)
