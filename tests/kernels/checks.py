"""Checks every shipped kernel gets: opcheck, compile parity, TPU lowering."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tests.helpers import compile_counted
from tpu_kernels import KernelOp


def opcheck(op: KernelOp, args: tuple, kwargs: dict | None = None) -> None:
    """torch.library.opcheck with all its default tests; fails on any non-SUCCESS."""
    results = torch.library.opcheck(op.overload, args, kwargs or {}, raise_exception=True)
    assert set(results.values()) == {"SUCCESS"}, results


def compile_matches_eager(
    model: Callable[..., torch.Tensor], inputs: list[torch.Tensor], *, rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    """compile(fullgraph=True) gives one graph, and the same loss and gradients as eager."""
    compiled, counter = compile_counted(model)
    eager_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    comp_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    eager_loss, comp_loss = model(*eager_in), compiled(*comp_in)
    eager_loss.backward()
    comp_loss.backward()
    torch.testing.assert_close(comp_loss, eager_loss, rtol=rtol, atol=atol)
    for a, b in zip(comp_in, eager_in):
        if b.requires_grad:
            torch.testing.assert_close(a.grad, b.grad, rtol=rtol, atol=atol)
    assert counter.frame_count == 1, f"graph breaks: {counter.frame_count} graphs"


def lowers_for_tpu(op: KernelOp, *args: Any, **kwargs: Any) -> str:
    """The kernel exports for platform 'tpu' and contains a Mosaic custom call."""
    mlir = op.lower(*args, **kwargs).mlir_module()
    assert "tpu_custom_call" in mlir, f"{op.name}: no Mosaic kernel in the TPU lowering"
    return mlir
