"""Does each argument an op mutates reach the `pallas_call` that writes it through `input_output_aliases`?

An op that declares `mutates_args` returns, after its outputs, the new value of each
mutated argument. When a Pallas kernel produces that value, its `pallas_call` must alias
the argument to the output (`input_output_aliases={input: output}`): the output buffer is
then the argument's, and the elements the kernel does not write keep their values. Without
it the output is a fresh buffer, and every element no grid step writes is undefined (the
TPU interpreter fills it with NaN; on a TPU it holds whatever the buffer held): a KV-cache
append that writes 8 rows of a 32-row cache returns 24 rows of garbage.

From the traced op (the function of its tensor arguments), for each mutated argument:

- its new value is followed back from the traced function's result, through shape-only
  steps (reshape, squeeze, expand_dims) and nested jit/call bodies, to what produced it;
- produced by output j of a `pallas_call` that aliases no input to j, or another input
  than the argument (the unwritten part then holds that input's values): an error, unless
  the coverage check can show that the grid writes every element of that output (no
  scalar-prefetch index maps, no dynamic grid, a VMEM block; it fails the op where one is
  not), where it is a warning (right, but a second buffer and a copy);
- produced by plain JAX (`cache.at[...].set(...)`): nothing to check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
from jax.extend import core as jex_core

from tpu_kernels.lowering.jaxprs import kernel_name

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp

# Primitives that move no values between elements: a value passed through them is the same buffer.
SHAPE_ONLY = frozenset({"reshape", "squeeze", "expand_dims", "copy", "copy_p"})
# Calls whose body's results are the equation's results one to one.
CALLS = frozenset({"pjit", "jit", "closed_call", "core_call", "remat", "checkpoint", "custom_jvp_call"})

FIX = "pass input_output_aliases={{{i}: {j}}} to its pallas_call (docs/writing-a-pallas-kernel.md#ops-that-write-to-their-arguments)"


@dataclass(frozen=True)
class Finding:
    kind: str  # "error" or "warning"
    message: str


@dataclass(frozen=True)
class _Origin:
    """Where a value comes from: a top-level input (`arg`), a pallas_call output (`eqn`, `out`,
    with the jaxpr it sits in and the origins of that jaxpr's inputs, to follow its operands),
    or anything else (`primitive`)."""

    arg: int | None = None
    eqn: Any = None
    out: int | None = None
    primitive: str | None = None
    jaxpr: Any = None
    outer: list | None = None


def _jaxpr(j: Any) -> Any:
    return j if hasattr(j, "eqns") else j.jaxpr


def _origin(var: Any, jaxpr: Any, outer: list[_Origin] | None = None) -> _Origin:
    """Follow `var` of `jaxpr` back to its origin; `outer`: the origins of `jaxpr`'s inputs
    (None at the top level, where input k is the traced function's argument k)."""
    while True:
        if isinstance(var, jex_core.Literal):
            return _Origin(primitive="literal")
        if var in jaxpr.invars:
            k = jaxpr.invars.index(var)
            return _Origin(arg=k) if outer is None else outer[k]
        eqn = next((e for e in jaxpr.eqns if var in e.outvars), None)
        if eqn is None:
            return _Origin(primitive="constant")
        name = eqn.primitive.name
        if name == "pallas_call":
            return _Origin(eqn=eqn, out=eqn.outvars.index(var), jaxpr=jaxpr, outer=outer)
        if name in SHAPE_ONLY:
            var = eqn.invars[0]
            continue
        subs = list(jex_core.jaxprs_in_params(eqn.params))
        if name in CALLS and len(subs) == 1:
            sub = _jaxpr(subs[0])
            if len(sub.outvars) == len(eqn.outvars) and len(sub.invars) == len(eqn.invars):
                inner = [_origin(v, jaxpr, outer) for v in eqn.invars]
                return _origin(sub.outvars[eqn.outvars.index(var)], sub, inner)
        return _Origin(primitive=name)


def _coverage_checkable(eqn: Any, out: int) -> bool:
    """Whether lowering_check/coverage.py can tell if the grid writes every element of output `out`."""
    from tpu_kernels.lowering import pallas_grid
    from tpu_kernels.lowering_check.vmem import _memory_space

    gm = eqn.params["grid_mapping"]
    if gm.num_index_operands or gm.num_dynamic_grid_bounds:
        return False
    bm = gm.block_mappings[gm.num_inputs + out]
    if _memory_space(bm.transformed_block_aval) in ("any", "hbm", "semaphore", "semaphore_mem"):
        return False
    return pallas_grid.block_dims(bm) is not None


def check_aliasing(op: KernelOp, flat: Any, specs: list[Any]) -> list[Finding]:
    """The findings for `op`'s mutated arguments in `flat` (its function of the tensor
    arguments, `export.flat_kernel`) traced at `specs`."""
    if not op.mutates_args:
        return []
    closed = jax.make_jaxpr(flat)(*specs)
    jaxpr = closed.jaxpr
    # flat's arguments are the tensor parameters, each flattened (a list parameter is several)
    first: dict[str, int] = {}
    k = 0
    for p, spec in zip(op.signature.tensor_params, specs):
        first[p.name] = k
        k += len(jax.tree.leaves(spec))
    new_values = jaxpr.outvars[len(jaxpr.outvars) - len(op.mutates_args) :]
    findings = []
    for name, var in zip(op.mutates_args, new_values):
        origin = _origin(var, jaxpr)
        if origin.eqn is None:
            continue  # plain JAX wrote it: every element is defined
        eqn, j = origin.eqn, origin.out
        n_in = len(eqn.invars)
        kernel = kernel_name(eqn)
        aliases = {int(o): int(i) for i, o in eqn.params.get("input_output_aliases", ())}
        own = [
            i for i in range(n_in) if _origin(eqn.invars[i], origin.jaxpr, origin.outer).arg == first[name]
        ]
        at = own[0] if own else None
        where = f"input {at}" if at is not None else "an input"
        fix = FIX.format(i=at, j=j) if at is not None else f"pass '{name}' to its pallas_call and alias it"
        if j in aliases and aliases[j] in own:
            continue
        if j in aliases:
            i = aliases[j]
            what = f"output {j}, which input_output_aliases ties to input {i}, not to '{name}' ({where})"
            unwritten = f"hold input {i}'s values"
        else:
            what = f"output {j}, which input_output_aliases does not tie to '{name}' ({where})"
            unwritten = "are undefined (NaN in the TPU interpreter, whatever the buffer held on a TPU)"
        if _coverage_checkable(eqn, j):
            findings.append(
                Finding(
                    "warning",
                    f"kernel {kernel} returns the new value of the mutated argument '{name}' as {what}: "
                    "the coverage check holds the grid to writing every element of it (it fails the op "
                    f"where one is left), so the result is right, but it costs a second buffer and a copy; {fix}.",
                )
            )
        else:
            findings.append(
                Finding(
                    "error",
                    f"kernel {kernel} returns the new value of the mutated argument '{name}' as {what}: "
                    f"the elements no grid step writes {unwritten} where they should keep the value of "
                    f"'{name}'; {fix}.",
                )
            )
    return findings


__all__ = ["Finding", "check_aliasing"]
