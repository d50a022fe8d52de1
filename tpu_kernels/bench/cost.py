"""FLOP and byte counts of a kernel, for the roofline, when a benchmark gives no formula.

First choice: the `pl.CostEstimate`s the kernel passes to its `pallas_call`s,
read from the traced jaxpr (so it works on a machine without the target
device). Otherwise XLA's `cost_analysis()` of the function compiled for the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax


def _sub_jaxprs(params: dict) -> list:
    """Jaxprs nested in an equation's parameters (pjit, cond, scan, custom_vjp_call, ...)."""
    subs = []
    for v in params.values():
        for item in v if isinstance(v, (list, tuple)) else [v]:
            if hasattr(item, "eqns"):
                subs.append(item)
            elif hasattr(getattr(item, "jaxpr", None), "eqns"):
                subs.append(item.jaxpr)
    return subs


def pallas_cost(jaxpr: Any) -> tuple[float, float] | None:
    """Sum of (flops, bytes_accessed) over the pallas_calls with a CostEstimate."""
    flops = nbytes = 0.0
    found = False
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            est = eqn.params.get("cost_estimate")
            if est is not None:
                flops += est.flops
                nbytes += est.bytes_accessed
                found = True
            continue
        for sub in _sub_jaxprs(eqn.params):
            inner = pallas_cost(sub)
            if inner:
                flops += inner[0]
                nbytes += inner[1]
                found = True
    return (flops, nbytes) if found else None


def kernel_cost(fn: Callable, *specs: Any) -> tuple[tuple[float, float] | None, str | None]:
    """-> ((flops, bytes), source) for `fn` at these ShapeDtypeStructs."""
    closed = jax.make_jaxpr(fn)(*specs)
    cost = pallas_cost(closed.jaxpr)
    if cost:
        return cost, "pallas CostEstimate"
    analysis = jax.jit(fn).lower(*specs).compile().cost_analysis()
    if isinstance(analysis, list):
        analysis = analysis[0] if analysis else None
    if analysis and "flops" in analysis:
        return (float(analysis["flops"]), float(analysis.get("bytes accessed", 0.0))), "xla cost_analysis"
    return None, None
