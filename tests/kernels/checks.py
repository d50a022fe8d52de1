"""Checks every shipped kernel gets: opcheck, compile parity, TPU lowering (thin names for
tpu_kernels.testing's helpers)."""

from __future__ import annotations

from typing import Any

from tpu_kernels import KernelOp
from tpu_kernels.testing import assert_lowers_for_tpu, compile_matches_eager, opcheck

__all__ = ["compile_matches_eager", "grid_semantics", "lowers_for_tpu", "opcheck"]


def lowers_for_tpu(op: KernelOp, *args: Any, **kwargs: Any) -> None:
    """This call of `op` lowers for the TPU with a Mosaic kernel and fits in VMEM
    (`testing.assert_lowers_for_tpu` for one call, on the default chip)."""
    assert_lowers_for_tpu(op, call=(args, kwargs))


def grid_semantics(fn: Any, *specs: Any) -> list[tuple[str, ...] | None]:
    """The dimension_semantics each pallas_call in `fn` (traced at `specs`) declares."""
    from tpu_kernels.lowering_check.semantics import declared_semantics
    from tpu_kernels.lowering_check.vmem import traced_pallas_calls

    return [declared_semantics(eqn) for eqn in traced_pallas_calls(fn, *specs)]
