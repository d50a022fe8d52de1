"""The Pallas kernels inside a traced JAX function: its pallas_call equations, and their names.

Shared by the TPU check (`lowering_check/vmem.py`, which reads each kernel's BlockSpecs) and
`bounds.py` (which evaluates scalar-prefetch index maps), so it lives in the core.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jax.extend import core as jex_core


def pallas_calls(jaxpr: Any) -> Iterator[Any]:
    """Every pallas_call equation in `jaxpr` (a Jaxpr or ClosedJaxpr), nested calls (jit,
    custom_vjp, cond, scan) included."""
    jaxpr = jaxpr if hasattr(jaxpr, "eqns") else jaxpr.jaxpr
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
            continue
        for sub in jex_core.jaxprs_in_params(eqn.params):
            yield from pallas_calls(sub)


# Primitives whose body (param "jaxpr" or "call_jaxpr") is called with the equation's operands
_CALLS = {"jit", "pjit", "closed_call", "core_call", "remat2", "checkpoint", "custom_jvp_call", "custom_vjp_call"}


def constant_operands(jaxpr: Any) -> dict[int, list[Any]]:
    """For each pallas_call equation in `jaxpr` (a Jaxpr or ClosedJaxpr; keyed by `id(eqn)`),
    the value of each operand that is a constant of the trace (a literal, a closed jaxpr's
    constant, or a nested call's input bound to one), None for the others: what reading a kernel
    whose scalar-prefetch tables were built at trace time (attention's causal walk) needs."""
    found: dict[int, list[Any]] = {}

    def walk(j: Any, env: dict) -> None:
        inner = j if hasattr(j, "eqns") else j.jaxpr
        consts = getattr(j, "consts", None)  # a closed jaxpr's (or, in newer JAX, a jaxpr's own)
        if consts:
            env = {**env, **dict(zip(inner.constvars, consts))}
        for eqn in inner.eqns:
            values = [v.val if hasattr(v, "val") else env.get(v) for v in eqn.invars]
            if eqn.primitive.name == "pallas_call":
                found[id(eqn)] = values
                continue
            for key, param in eqn.params.items():
                for sub in param if isinstance(param, (tuple, list)) else (param,):
                    if not (hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns")):
                        continue
                    invars = (sub if hasattr(sub, "eqns") else sub.jaxpr).invars
                    # only a call's body takes this equation's operands as its inputs, one for one
                    # (a scan's body takes slices of them, a cond's branches all but the index)
                    passed = eqn.primitive.name in _CALLS and key in ("jaxpr", "call_jaxpr")
                    bound = dict(zip(invars, values)) if passed and len(invars) == len(values) else {}
                    walk(sub, {k: v for k, v in bound.items() if v is not None})

    walk(jaxpr, {})
    return found


def kernel_name(eqn: Any) -> str:
    """A pallas_call's kernel function name (or the call's `name=`)."""
    debug = getattr(eqn.params.get("jaxpr"), "debug_info", None)
    return str(getattr(debug, "func_name", None) or eqn.params.get("name") or "kernel")
