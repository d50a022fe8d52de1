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


def kernel_name(eqn: Any) -> str:
    """A pallas_call's kernel function name (or the call's `name=`)."""
    debug = getattr(eqn.params.get("jaxpr"), "debug_info", None)
    return str(getattr(debug, "func_name", None) or eqn.params.get("name") or "kernel")
