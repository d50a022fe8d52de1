"""What the grid steps of one traced `pallas_call` do, read from its kernel body without running
it: the MXU's dots and the vector unit's work, each counted over the steps that run it.

A body's `pl.when` blocks (`cond` equations) run on some grid steps only: a matmul zeroes its
accumulator at k == 0 and writes it out at the last k, a causal flash attention skips the kv
blocks above the diagonal. Their predicates are computed from the grid indices
(`pl.program_id`, `pl.num_programs`) with scalar arithmetic, so they are evaluated here at every
grid point at once (NumPy arrays, one element per step, `_Grid`): each equation of the body is
counted on the steps whose predicates select it. A scalar-prefetch table whose values the trace
fixed (given to `read`: attention's causal walk builds its step table at trace time) is read
too, at the indices the grid gives. A predicate computed from anything else (a value read from
another ref, a primitive not in `_SCALAR`) is not evaluated, and every branch of that `cond` is
counted on every step it could run (an upper bound). A `scan` counts its body once
per trip; a `while` loop, whose trip count is not known, once.

Vector work is counted in vreg operations: an array op's result (a reduction's operand, a ref
load's or store's value) in native tiles of 8 sublanes (16 for 2-byte, 32 for 1-byte dtypes) by
128 lanes, so an (n, 1) array costs what an (n, 128) one does, as on the chip. A dot's result
is counted once (its pops from the MXU); its flops are the MXU's (`Dot`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpu_kernels.lowering import pallas_grid

LANES, SUBLANES = 128, 8

# Scalar primitives a predicate is evaluated through, on int/bool arrays over the grid.
_SCALAR = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": np.bitwise_and,  # logical on bools, bitwise on ints, as lax's
    "or": np.bitwise_or,
    "neg": np.negative,
    "not": lambda a: np.logical_not(a) if a.dtype == bool else np.invert(a),
    "div": lambda a, b: np.fix(a / b).astype(np.result_type(a, b)) if np.result_type(a, b).kind in "iu" else a / b,
    "rem": np.fmod,
    "shift_right_arithmetic": np.right_shift,
    "shift_right_logical": lambda a, b: (a.astype(np.uint32) >> b).astype(a.dtype),
    "shift_left": np.left_shift,
}
# Array primitives that move no data through the vector unit: shapes only.
_FREE = {"reshape", "squeeze", "expand_dims", "program_id", "num_programs"}
_REF_READ = {"get", "load", "masked_load"}
_REF_WRITE = {"swap", "store", "masked_swap"}


@dataclass(frozen=True)
class Dot:
    m: int
    n: int
    k: int
    batch: int
    dtype: Any
    steps: float  # grid steps that run it
    precision: str = "DEFAULT"  # as traced: "DEFAULT" (one bf16 pass for float32), "HIGH", "HIGHEST"


@dataclass
class Body:
    """One `pallas_call`'s body over its grid: its dots, and its vector work in vreg
    operations summed over the steps that run each one."""

    steps: int
    dots: list[Dot] = field(default_factory=list)
    vreg_ops: float = 0.0
    evaluated: bool = True  # every cond predicate was evaluated over the grid


def read(eqn: Any, operands: list[Any] | None = None) -> Body:
    """The body of one `pallas_call` equation, counted over its grid. `operands`: the values of
    its operands the trace fixed, None for the others (`lowering.jaxprs.constant_operands`);
    its scalar-prefetch tables among them are read where the body reads them."""
    gm = eqn.params["grid_mapping"]
    grid = tuple(int(g) for g in gm.grid)
    g = _Grid(grid)
    body = Body(g.size)
    jaxpr = _jaxpr(eqn.params["jaxpr"])
    env: dict = {}
    for ref, value in zip(jaxpr.invars[: gm.num_index_operands], (operands or [])[: gm.num_index_operands]):
        if value is not None:
            env[ref] = _Table(np.asarray(value))
    _walk(jaxpr, env, np.ones(g.size, bool), g, body)
    return body


@dataclass(frozen=True)
class _Table:
    """A scalar-prefetch ref whose values are known: a read of it at known indices is known."""

    values: np.ndarray


class _Grid:
    """Every grid point's index along each axis, row-major (the last axis fastest), as the
    pipeline visits them."""

    def __init__(self, grid: tuple[int, ...]):
        self.grid = grid
        self.size = math.prod(grid) if grid else 1
        self.index = (
            [a.reshape(-1) for a in np.meshgrid(*(np.arange(n) for n in grid), indexing="ij")] if grid else []
        )


def _jaxpr(j: Any) -> Any:
    return j.jaxpr if hasattr(j, "jaxpr") and not hasattr(j, "eqns") else j


def _walk(jaxpr: Any, env: dict, mask: np.ndarray, g: _Grid, body: Body, times: float = 1.0) -> None:
    """Count `jaxpr`'s equations on the steps in `mask`, `times` per step (a loop's trip count);
    `env` maps the variables whose value over the grid is known (an array, one element per
    step, or a scalar)."""
    runs = float(mask.sum()) * times
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "cond":
            index = _value(eqn.invars[0], env)
            branches = eqn.params["branches"]
            inner = [dict(zip(_jaxpr(b).invars, (_value(v, env) for v in eqn.invars[1:]))) for b in branches]
            for i, b in enumerate(branches):
                if index is None:
                    body.evaluated = False
                    taken = mask
                else:
                    taken = mask & (np.broadcast_to(np.clip(index, 0, len(branches) - 1), mask.shape) == i)
                if taken.any():
                    _walk(_jaxpr(b), {k: v for k, v in inner[i].items() if v is not None}, taken, g, body, times)
            continue
        if name in ("scan", "while"):  # a loop: its body per trip (a while loop's count is unknown: once)
            trips = float(eqn.params.get("length", 1)) if name == "scan" else 1.0
            for sub in pallas_grid.sub_jaxprs(eqn.params["jaxpr" if name == "scan" else "body_jaxpr"]):
                _walk(_jaxpr(sub), {}, mask, g, body, times * trips)
            continue
        if name == "program_id":
            env[eqn.outvars[0]] = g.index[int(eqn.params["axis"])] if g.grid else np.zeros(1, int)
            continue
        if name == "num_programs":
            env[eqn.outvars[0]] = np.asarray(g.grid[int(eqn.params["axis"])] if g.grid else 1)
            continue
        subs = [s for v in eqn.params.values() for s in pallas_grid.sub_jaxprs(v)]
        if subs:  # a nested jit (jnp.where, ...), a scoped allocation: its equations, its known inputs
            for s in subs:
                s = _jaxpr(s)
                inner = {k: v for k, v in zip(s.invars, (_value(v, env) for v in eqn.invars)) if v is not None}
                _walk(s, inner, mask, g, body, times)
                for out, res in zip(eqn.outvars, s.outvars):
                    val = _value(res, inner)
                    if val is not None:
                        env[out] = val
            continue
        if name in _REF_READ and isinstance(env.get(eqn.invars[0]), _Table):
            index = [_value(v, env) for v in eqn.invars[1:]]
            table = env[eqn.invars[0]].values
            if len(index) == table.ndim and all(i is not None for i in index):
                at = tuple(np.clip(np.asarray(i), 0, n - 1) for i, n in zip(index, table.shape))
                env[eqn.outvars[0]] = table[at]
        if name == "dot_general":
            body.dots.append(_dot(eqn, runs))
            body.vreg_ops += runs * _vregs(eqn.outvars[0].aval)
            continue
        _scalar(eqn, env)
        body.vreg_ops += runs * _vector_cost(eqn)


def _scalar(eqn: Any, env: dict) -> None:
    """Evaluate a scalar equation over the grid when its inputs are known."""
    name = eqn.primitive.name
    if len(eqn.outvars) != 1 or getattr(eqn.outvars[0].aval, "shape", None) != ():
        return
    args = [_value(v, env) for v in eqn.invars]
    if any(a is None for a in args):
        return
    args = [np.asarray(a) for a in args]
    if name == "convert_element_type":
        env[eqn.outvars[0]] = args[0].astype(np.dtype(eqn.params["new_dtype"]))
    elif name == "select_n":
        env[eqn.outvars[0]] = np.choose(args[0].astype(int), args[1:])
    elif name == "clamp":
        env[eqn.outvars[0]] = np.clip(args[1], args[0], args[2])
    elif name in _SCALAR:
        with np.errstate(all="ignore"):
            env[eqn.outvars[0]] = _SCALAR[name](*args)


def _value(atom: Any, env: dict) -> Any:
    if hasattr(atom, "val"):  # a literal
        return np.asarray(atom.val)
    return env.get(atom)


def _vector_cost(eqn: Any) -> float:
    """Vreg operations of one non-dot equation (per step that runs it)."""
    name = eqn.primitive.name
    if name in _FREE:
        return 0.0
    if name in _REF_READ:
        return _vregs(eqn.outvars[0].aval)
    if name in _REF_WRITE:
        return _vregs(eqn.invars[1].aval) if len(eqn.invars) > 1 else 0.0
    if name.startswith("reduce_") or name in ("argmax", "argmin", "cumsum"):
        return _vregs(eqn.invars[0].aval)
    return sum(_vregs(v.aval) for v in eqn.outvars)


def _vregs(aval: Any) -> float:
    """Native vector registers an array value occupies: its last two dims in tiles of
    (8 * 4 / itemsize) sublanes by 128 lanes; a scalar, none (the scalar unit's)."""
    shape = tuple(int(d) for d in getattr(aval, "shape", ()))
    if not shape:
        return 0.0
    itemsize = np.dtype(aval.dtype).itemsize if np.dtype(aval.dtype) != np.bool_ else 4
    sub = SUBLANES * max(1, 4 // itemsize)
    rows = shape[-2] if len(shape) >= 2 else 1
    return float(math.prod(shape[:-2]) * -(-rows // sub) * -(-shape[-1] // LANES))


def _dot(eqn: Any, steps: float) -> Dot:
    lhs, rhs = (v.aval for v in eqn.invars[:2])
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    batch = math.prod(int(lhs.shape[d]) for d in lb) if lb else 1
    k = math.prod(int(lhs.shape[d]) for d in lc) if lc else 1
    m = math.prod(int(s) for d, s in enumerate(lhs.shape) if d not in lc and d not in lb)
    n = math.prod(int(s) for d, s in enumerate(rhs.shape) if d not in rc and d not in rb)
    return Dot(m, n, k, batch, lhs.dtype, steps, _precision(eqn.params.get("precision")))


def _precision(p: Any) -> str:
    """A dot's traced precision as one name: the higher of its operands' ("DEFAULT" when none
    was given: JAX's default, one bf16 pass on a TPU; a dot algorithm preset counts as DEFAULT,
    Mosaic refuses them)."""
    names = [getattr(q, "name", None) for q in (p if isinstance(p, tuple) else (p,))]
    for name in ("HIGHEST", "HIGH"):
        if name in names:
            return name
    return "DEFAULT"
