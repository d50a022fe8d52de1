"""The Helion twins of the shipped ops on TPU tensors (Helion's Pallas backend through
torch_tpu), forward and backward against float64 on the host, at torch's "highest" after a call
at "medium" (float32 matmul: about 1e-7 and 2e-3 normwise, the figures kept in the record)."""

from __future__ import annotations

import pytest
import torch

from tpu_kernels.kernels import FAMILIES
from tpu_kernels.testing import assert_close

pytest.importorskip("helion")

TWINS = sorted(n for n, f in FAMILIES.items() if f.helion)
SHAPES = {
    "matmul": (256, 512, 256),
    "rmsnorm": (256, 512),
    "scale_add": ((256, 512), (256, 512)),
    "softmax": (256, 512),
}


@pytest.mark.parametrize("family", TWINS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_helion_twin_forward_and_backward(family, dtype, tpu, figures):
    from tests.tpu.test_ops import SUITES

    fam, suite = FAMILIES[family], SUITES[family]
    op = fam.helion_op()
    shape = SHAPES[family]
    host = suite.inputs(shape, dtype)
    leaves = [t.to(tpu).requires_grad_(True) for t in host]
    before = torch.get_float32_matmul_precision()
    try:
        # one bf16 pass first, then "highest" at the same shape: each precision runs its own
        # Helion kernel (runtime/sources/helion_pallas.py), never the one torch_tpu compiled
        # first. Helion wrote precision='default' on every dot: float32 matmul was 0.25 off here.
        torch.set_float32_matmul_precision("medium")
        at_one_pass = op(*leaves, **fam.kwargs).detach()
        torch.set_float32_matmul_precision("highest")
        out = op(*leaves, **fam.kwargs)
        wide = [t.double().requires_grad_(True) for t in host]
        expected = suite.reference(*wide)
        figures.update(
            {
                f"normwise_{name}": float(
                    (o.cpu().double() - expected.detach()).norm() / expected.detach().norm()
                )
                for name, o in (("medium", at_one_pass), ("highest", out.detach()))
            }
        )
        assert_close(
            out.cpu(), expected.detach(), dtype, scale=suite.out_scale(shape, dtype), what=f"{op.name}"
        )
        if op.backward_op is None and not getattr(op, "_backward", None):
            return
        g = torch.randn(expected.shape, dtype=torch.float64)
        got = torch.autograd.grad((out * g.to(dtype).to(tpu)).sum(), leaves)
        want = torch.autograd.grad((expected * g.to(dtype).double()).sum(), wide)
        for i, (a, b, s) in enumerate(zip(got, want, suite.grad_scales(shape, dtype))):
            assert_close(a.cpu(), b, dtype, scale=s, what=f"{op.name} grad {i}")
    finally:
        torch.set_float32_matmul_precision(before)
