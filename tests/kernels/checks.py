"""Checks every shipped kernel gets: opcheck, compile parity, TPU lowering."""

from __future__ import annotations

from typing import Any

from tpu_kernels import KernelOp
from tpu_kernels.testing import compile_matches_eager, opcheck

__all__ = ["compile_matches_eager", "grid_semantics", "lowers_for_tpu", "opcheck"]


def lowers_for_tpu(op: KernelOp, *args: Any, **kwargs: Any) -> str:
    """The kernel exports for platform 'tpu' and contains a Mosaic custom call."""
    mlir = op.lower(*args, **kwargs).mlir_module()
    assert "tpu_custom_call" in mlir, f"{op.name}: no Mosaic kernel in the TPU lowering"
    return mlir


def grid_semantics(fn: Any, *specs: Any) -> list[tuple[str, ...] | None]:
    """The dimension_semantics each pallas_call in `fn` (traced at `specs`) declares."""
    from tpu_kernels.check.semantics import declared_semantics
    from tpu_kernels.check.vmem import traced_pallas_calls

    return [declared_semantics(eqn) for eqn in traced_pallas_calls(fn, *specs)]
