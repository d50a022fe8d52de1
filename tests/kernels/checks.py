"""Checks every shipped kernel gets: opcheck, compile parity, TPU lowering (thin names for
tpu_kernels.testing's helpers)."""

from __future__ import annotations

from typing import Any

from tpu_kernels import KernelOp
from tpu_kernels.testing import assert_lowers_for_tpu, compile_matches_eager, opcheck

__all__ = ["compile_matches_eager", "lowers_for_tpu", "opcheck"]


def lowers_for_tpu(op: KernelOp, *args: Any, **kwargs: Any) -> None:
    """This call of `op` lowers for the TPU with a Mosaic kernel and fits in VMEM
    (`testing.assert_lowers_for_tpu` for one call, on the default chip)."""
    assert_lowers_for_tpu(op, call=(args, kwargs))
