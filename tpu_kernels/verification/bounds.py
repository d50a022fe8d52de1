"""Block indices outside their array, in a real call of an op whose index maps read scalar prefetch.

An index map that reads a scalar-prefetch operand (`pltpu.PrefetchScalarGridSpec`) picks its
block from data (a gather's indices, a block-sparse kernel's block list), so no look at the
BlockSpecs can bound it: the check's static coverage pass (`lowering_check/coverage.py`) leaves such
kernels out. Given a call's values, this module finds a block index outside `[0, n)` (n =
`pl.cdiv(size, block)` along that dimension), which on a TPU reads or writes memory outside
the array, with no error.

What the interpreters do with such an index (measured here, jax 0.12, an 8-block table):

- the default ("fast") interpreter raises nothing: an index past the end reads the last block
  (8 and 1000 read block 7), a negative one counts from the end (-1 reads block 7, -8 block 0)
  and one below -n reads block 0. A gather with a bad index returns a plausible row.
- the TPU interpreter (`pltpu.InterpretParams`, `out_of_bounds_reads="raise"`) raises
  `IndexError: Out-of-bounds block index (8, 0, 0) for input "t_ref" ...` inside an
  io_callback, which JAX re-raises as a 1.9 KB `JaxRuntimeError: INTERNAL: CpuCallback error`.
  It slices with NumPy, so most negative indices pass silently (-2 read block 6); only -1 on
  a blocked (not squeezed) dimension raised.

Hence two steps. First each scalar-prefetch kernel's index maps are evaluated
here, at every grid point, on the prefetched values the call computes (the op's jaxpr is
evaluated equation by equation to reach them): exact, negative indices included, and fast.
Then the call runs in the TPU interpreter, which also sees the kernel body's own accesses
(`x_ref[pl.ds(i, 8)]` past the block, a DMA from an HBM ref). `call_problem` does both for one
call and says what it found in one line: "index map of input 0 reads block (8, 0, 0) outside
[0, 8) along dimension 0 ...". `tpu-kernels check --bounds` runs it on the op's examples,
checked mode on every call when `TPU_KERNELS_CHECK_BOUNDS=1` (`tpu_kernels.verification.checked_mode`).
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import torch
from jax.experimental.pallas import tpu as pltpu
from jax.extend import core as jex_core

from tpu_kernels.definition import dtypes
from tpu_kernels.lowering import jaxprs
from tpu_kernels.lowering.pallas_grid import block_indices, grid_points
from tpu_kernels.runtime import bridge, interpret

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op

MAX_POINTS = 1_000_000  # grid points of one kernel whose index maps are evaluated (vectorised)

# Call-like equations whose body is evaluated equation by equation to reach the pallas_calls
# inside; any other equation (cond, scan, while) runs as a whole, and pallas_calls inside it
# are left to the TPU interpreter.
_BODY_PARAMS = {
    "pjit": "jaxpr",
    "jit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat": "jaxpr",
    "remat2": "jaxpr",  # jax.checkpoint
    "checkpoint": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
}


@dataclass(frozen=True)
class Problem:
    """A block or buffer access outside its array: `message` is one line, `raw` the
    interpreter's own message when the interpreter found it."""

    message: str
    raw: str = ""


# ---- one call's values ------------------------------------------------------------------------


def split_call(op: Op, call: tuple[tuple, dict]) -> tuple[list[Any], dict[str, Any], bool]:
    """(tensor arguments, statics by name, whether JAX's x64 is needed) of one call."""
    args, kwargs = call
    sig = op.signature
    values = sig.bind(args, kwargs)
    tensors = [v for p, v in zip(sig.params, values) if p.is_tensor]
    statics = {p.name: v for p, v in zip(sig.params, values) if not p.is_tensor}
    return tensors, statics, dtypes.needs_x64(tensors, statics)


def _x64(on: bool) -> contextlib.AbstractContextManager:
    return jax.enable_x64(True) if on else contextlib.nullcontext()


def run_call(op: Op, call: tuple[tuple, dict], params: pltpu.InterpretParams) -> None:
    """Run one call (concrete JAX arrays) in the TPU interpreter `params`; its errors propagate."""
    tensors, statics, x64 = split_call(op, call)

    def run() -> None:
        with _x64(x64):
            jax.block_until_ready(op.jax_function(interpret=params, **statics)(*tensors))

    interpret.run_in_tpu_interpreter(params, run)


# ---- the interpreter's messages ------------------------------------------------------------------

_BLOCK_ERROR = re.compile(
    r"Out-of-bounds block index \((?P<block>[^)]*)\) for (?P<kind>input|output) \"(?P<name>[^\"]*)\" "
    r"in iteration \((?P<point>[^)]*)\).*?: (?:reading|writing) \[(?P<range>.*?)\] but "
    r"(?:input|output) has shape \((?P<shape>[^)]*)\)"
)
_BODY_ERROR = re.compile(
    r"Out-of-bounds (?P<kind>read|write) of \(\d+ \d+ (?P<space>\w+) \d+\): (?:reading|writing) \[(?P<range>.*?)\] "
    r"but buffer has shape \((?P<shape>[^)]*)\)"
)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"-?\d+", text))


def _range_sizes(text: str) -> tuple[int, ...]:
    """Block sizes from the interpreter's read range: `(8, slice(0, 8, 1))` -> (1, 8)."""
    sizes = []
    for m in re.finditer(r"slice\((-?\d+), (-?\d+), \d+\)|(-?\d+)", text):
        sizes.append(int(m[2]) - int(m[1]) if m[1] is not None else 1)
    return tuple(sizes)


def interpreter_line(text: str) -> str:
    """The interpreter's own out-of-bounds line inside JAX's CpuCallback error, if any."""
    m = re.search(r"(?:IndexError|ValueError): (Out-of-bounds [^\n]*)", text)
    return m[1] if m else ""


def explain_interpreter_error(text: str, names: dict[str, str] | None = None) -> str | None:
    """The TPU interpreter's out-of-bounds error in one line, or None for any other error.

    `names`: kernel parameter name -> "input 0" / "output 0" (`operand_names`); the
    interpreter names operands by the kernel's parameters."""
    m = _BLOCK_ERROR.search(text)
    if m:
        shape, block = _ints(m["shape"]), _ints(m["block"])
        sizes = _range_sizes(m["range"])
        nblocks = tuple(-(-s // b) for s, b in zip(shape, sizes)) if len(sizes) == len(shape) else shape
        d = next((d for d, (b, n) in enumerate(zip(block, nblocks)) if not 0 <= b < n), 0)
        what = (names or {}).get(m["name"]) or f"the {m['kind']} {m['name']!r} (kernel parameter)"
        verb = "reads" if m["kind"] == "input" else "writes"
        return (
            f"index map of {what} {verb} block {_tuple(block)} outside [0, {nblocks[d]}) along "
            f"dimension {d} at grid point ({m['point']}) (array {_shape(shape)})"
            + _consequence(verb, block[d], nblocks[d])
        )
    m = _BODY_ERROR.search(text)
    if m:
        where = re.sub(r"slice\((-?\d+), (-?\d+), 1\)", r"\1:\2", m["range"]).strip("()")
        return (
            f"the kernel body {'reads' if m['kind'] == 'read' else 'writes'} [{where}] of the "
            f"{m['space'].upper()} buffer of shape ({m['shape']}), outside it; on a TPU that access "
            "is undefined. Check the indices of the body's ref accesses and copies (.at[...], "
            "pl.ds) against the buffer."
        )
    return None


def operand_names(jaxpr: Any) -> dict[str, str]:
    """Kernel parameter name -> "input k" / "output k" over the pallas_calls in `jaxpr`, for
    the names the TPU interpreter's messages use (a name two operands share is left out)."""
    seen: dict[str, set[str]] = {}
    for eqn in jaxprs.pallas_calls(jaxpr):
        gm = eqn.params["grid_mapping"]
        arg_names = getattr(getattr(eqn.params.get("jaxpr"), "debug_info", None), "arg_names", None)
        if not arg_names:
            continue
        block_names = list(arg_names)[gm.slice_block_ops]
        for k, name in enumerate(block_names):
            what = f"input {k}" if k < gm.num_inputs else f"output {k - gm.num_inputs}"
            seen.setdefault(name, set()).add(what)
    return {name: next(iter(whats)) for name, whats in seen.items() if len(whats) == 1}


def _consequence(verb: str, block: int, n: int) -> str:
    """What a TPU and the default interpreter do with block index `block` of `n`."""
    used = min(max(block + n if block < 0 else block, 0), n - 1)
    return (
        f"; on a TPU that {verb[:-1]} is undefined, and the default CPU interpreter silently {verb} "
        f"block {used} instead. Keep the block indices the index map computes in [0, {n})."
    )


def _tuple(values: tuple[int, ...]) -> str:
    return f"({', '.join(map(str, values))}{',' if len(values) == 1 else ''})"


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


# ---- reaching each pallas_call with the call's values ------------------------------------------


def _body(eqn: Any) -> tuple[Any, list[Any]] | None:
    name = _BODY_PARAMS.get(eqn.primitive.name)
    sub = eqn.params.get(name) if name else None
    if sub is None:
        return None
    if hasattr(sub, "jaxpr") and hasattr(sub, "consts"):  # a ClosedJaxpr
        return sub.jaxpr, list(sub.consts)
    return (sub, []) if hasattr(sub, "eqns") else None


def _evaluate(jaxpr: Any, consts: list[Any], args: list[Any], visit: Callable[[Any, list], None]) -> list:
    """`jax.core.eval_jaxpr`, descending into call-like equations, with `visit(eqn, values)`
    before each pallas_call runs."""
    env: dict[Any, Any] = {}

    def read(atom: Any) -> Any:
        return atom.val if isinstance(atom, jex_core.Literal) else env[atom]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        values = [read(a) for a in eqn.invars]
        if eqn.primitive.name == "pallas_call":
            visit(eqn, values)
        body = _body(eqn)
        if body is not None:
            outs = _evaluate(*body, values, visit)
        else:
            params = eqn.primitive.get_bind_params(eqn.params)
            subfuns, params = params if isinstance(params, tuple) else ((), params)  # older JAX: a pair
            with eqn.ctx.manager:
                outs = eqn.primitive.bind(*subfuns, *values, **params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        for v, x in zip(eqn.outvars, outs):
            if not isinstance(v, jex_core.DropVar):
                env[v] = x
    return [read(a) for a in jaxpr.outvars]


def reads_scalar_prefetch(jaxpr: Any) -> bool:
    """Does any pallas_call in `jaxpr` (nested ones too) have index maps that read scalar prefetch?"""
    return any(eqn.params["grid_mapping"].num_index_operands for eqn in jaxprs.pallas_calls(jaxpr))


def traced(op: Op, tensors: list[Any], statics: dict[str, Any], x64: bool) -> Any:
    """The op's jaxpr at these arguments, its Pallas calls in the fast interpreter."""
    with _x64(x64):
        return jax.make_jaxpr(op.jax_function(interpret=True, **statics))(*tensors)


# ---- index maps at every grid point --------------------------------------------------------------


def _block_sizes(bm: Any) -> tuple[int, ...] | None:
    """Elements per block index along each dimension; None when an index map gives element
    offsets (pl.Element, pl.BoundedSlice), which this does not model."""
    sizes = []
    for d in bm.block_shape:
        name = type(d).__name__
        if d is None or name == "Squeezed":
            sizes.append(1)
        elif name == "Blocked":
            sizes.append(int(d.block_size))
        elif isinstance(d, (int, np.integer)):
            sizes.append(int(d))
        else:
            return None
    return tuple(sizes)


def _in_hbm(bm: Any) -> bool:
    space = str(getattr(bm.block_aval, "memory_space", "")).lower()
    return any(s in space for s in ("any", "hbm", "semaphore"))


def _block_words(bm: Any, sizes: tuple[int, ...]) -> str:
    dims = [
        "None" if d is None or type(d).__name__ == "Squeezed" else str(s)
        for d, s in zip(bm.block_shape, sizes)
    ]
    return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"


def _kernel_problem(eqn: Any, values: list[Any]) -> str | None:
    gm = eqn.params["grid_mapping"]
    if not gm.num_index_operands or gm.num_dynamic_grid_bounds:
        return None  # nothing data-dependent; or a dynamic grid (left to the TPU interpreter)
    grid = tuple(int(g) for g in gm.grid)
    if math.prod(grid) > MAX_POINTS:
        return None  # left to the TPU interpreter
    prefetched = values[: gm.num_index_operands]
    points = grid_points(grid)
    for k, bm in enumerate(gm.block_mappings):
        sizes = _block_sizes(bm)
        shape = tuple(int(s) for s in bm.array_aval.shape)
        if sizes is None or _in_hbm(bm) or math.prod(shape) == 0:
            continue
        idx = block_indices(bm, points, prefetched)
        nblocks = np.asarray([-(-s // b) for s, b in zip(shape, sizes)])
        bad = (idx < 0) | (idx >= nblocks)
        if not bad.any():
            continue
        row, d = (int(v) for v in np.argwhere(bad)[0])
        is_input = k < gm.num_inputs
        what = f"input {k}" if is_input else f"output {k - gm.num_inputs}"
        n = int(nblocks[d])
        verb = "reads" if is_input else "writes"
        return (
            f"index map of {what} {verb} block {_tuple(tuple(int(v) for v in idx[row]))} outside "
            f"[0, {n}) along dimension {d} at grid point {_tuple(tuple(int(v) for v in points[row]))}, "
            f"from this call's scalar-prefetch values (kernel {jaxprs.kernel_name(eqn)}, array "
            f"{_shape(shape)}, block {_block_words(bm, sizes)})" + _consequence(verb, int(idx[row, d]), n)
        )
    return None


def reads_scalar_prefetch_in(op: Op, call: tuple[tuple, dict]) -> bool:
    """Does this call of `op` run a Pallas kernel whose index maps read scalar prefetch?"""
    tensors, statics, x64 = split_call(op, call)
    return reads_scalar_prefetch(traced(op, tensors, statics, x64).jaxpr)


def _index_map_problem(closed: Any, tensors: list[Any], x64: bool) -> str | None:
    found: list[str] = []

    def visit(eqn: Any, values: list[Any]) -> None:
        if not found:
            problem = _kernel_problem(eqn, values)
            if problem:
                found.append(problem)

    with _x64(x64):
        _evaluate(closed.jaxpr, list(closed.consts), jax.tree_util.tree_leaves(tensors), visit)
    return found[0] if found else None


BOUNDS_PARAMS = pltpu.InterpretParams(out_of_bounds_reads="raise")


def call_problem(op: Op, call: tuple[tuple, dict]) -> Problem | None:
    """Out-of-bounds accesses of one call (concrete JAX arrays): the scalar-prefetch index
    maps evaluated on the values this call computes, then the call in the TPU interpreter.
    None when everything is in bounds, or when the op reads no scalar prefetch (its index maps
    depend on the grid alone: the check's static coverage pass bounds them). Other errors of
    the interpreter run propagate."""
    tensors, statics, x64 = split_call(op, call)
    closed = traced(op, tensors, statics, x64)
    if not reads_scalar_prefetch(closed.jaxpr):
        return None
    found = _index_map_problem(closed, tensors, x64)
    if found is not None:
        return Problem(found)
    try:
        run_call(op, call, BOUNDS_PARAMS)
    except Exception as e:
        text = str(e)
        message = explain_interpreter_error(text, operand_names(closed.jaxpr))
        if message is None:
            raise
        return Problem(message, interpreter_line(text))
    return None


def torch_call_problem(op: Op, args: tuple, kwargs: dict) -> Problem | None:
    """`call_problem` for a call with torch tensors (checked mode): CPU copies of its tensors
    as JAX arrays, the caller's tensors untouched. A bounds run that fails otherwise (an op
    the TPU interpreter cannot run) warns, naming the op and the error, and checks nothing."""
    try:
        return _torch_call_problem(op, args, kwargs)
    except Exception as e:
        warnings.warn(
            f"{op.name}: block indices not checked (TPU_KERNELS_CHECK_BOUNDS): the bounds run failed "
            f"with {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
            stacklevel=3,
        )
        return None


def _torch_call_problem(op: Op, args: tuple, kwargs: dict) -> Problem | None:
    def to_jax(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return bridge.to_jax_cpu(v.detach().to("cpu", copy=True).contiguous())
        if isinstance(v, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in v):
            return type(v)(to_jax(t) for t in v)
        return v

    with jax.default_device(bridge.cpu_device()):
        return call_problem(op, (tuple(to_jax(a) for a in args), {k: to_jax(v) for k, v in kwargs.items()}))
