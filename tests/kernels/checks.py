"""Checks every shipped kernel gets: opcheck, compile parity, TPU lowering."""

from __future__ import annotations

from typing import Any

from tpu_kernels import KernelOp
from tpu_kernels.testing import compile_matches_eager, opcheck

__all__ = ["compile_matches_eager", "lowers_for_tpu", "opcheck"]


def lowers_for_tpu(op: KernelOp, *args: Any, **kwargs: Any) -> str:
    """The kernel exports for platform 'tpu' and contains a Mosaic custom call."""
    mlir = op.lower(*args, **kwargs).mlir_module()
    assert "tpu_custom_call" in mlir, f"{op.name}: no Mosaic kernel in the TPU lowering"
    return mlir
