"""Every template's op, rendered with `tpu-kernels new` (Pallas, and Helion where the template
has a Helion variant), on TPU tensors: forward and backward against float64 on the host."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from tpu_kernels import scaffold
from tpu_kernels.testing import assert_close, dot_scale

# template -> (tensor shapes from its first TEST shape, statics, output scale)
CASES = {
    "elementwise": (lambda s: list(s), {"alpha": 0.5}, lambda s: 2.0),
    "row_reduction": (lambda s: [s, (s[-1],)], {}, lambda s: 3.0),
    "matmul": (lambda s: [(s[0], s[1]), (s[1], s[2])], {}, lambda s: dot_scale(s[1], torch.float32)),
    "flash_attention": (
        lambda s: [(s[0], s[1], s[2], s[4]), (s[0], s[1], s[3], s[4]), (s[0], s[1], s[3], s[4])],
        {"causal": True},
        lambda s: 1.0,
    ),
}


def grad_scale(template, shape):
    """Each gradient's scale: the project's rule for a K-term sum (`dot_scale`), K the length of
    the sums behind it (attention's gradients sum over the keys, matmul's over M or N; the
    elementwise and row templates' are short, given their output's scale x 4)."""
    if template == "flash_attention":
        return dot_scale(shape[3], torch.float32)
    if template == "matmul":
        return dot_scale(max(shape[0], shape[2]), torch.float32)
    return CASES[template][2](shape) * 4


VARIANTS = sorted((t, b) for t, tpl in scaffold.list_templates().items() for b in tpl.backends if t in CASES)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    root = tmp_path_factory.mktemp("templates")
    for template, backend in VARIANTS:
        scaffold.new(f"tpl_{template}_{backend}", template, backend=backend, dest=root, namespace="tpl_tpu")
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))


@pytest.mark.parametrize("template, backend", VARIANTS, ids=[f"{t}-{b}" for t, b in VARIANTS])
def test_template_op_forward_and_backward_on_tpu(template, backend, rendered, tpu, figures):
    name = f"tpl_{template}_{backend}"
    package = importlib.import_module(name)
    op = getattr(package, name)
    reference = getattr(importlib.import_module(f"{name}.reference"), name)
    shapes = importlib.import_module(f"{name}.shapes")
    shape = next(iter(shapes.TEST.values()))
    tensor_shapes, statics, scale = CASES[template]
    host = [torch.randn(*s, dtype=torch.float64).float() for s in tensor_shapes(shape)]
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        leaves = [t.to(tpu).requires_grad_(True) for t in host]
        out = op(*leaves, **statics)
        out = out[0] if isinstance(out, tuple) else out
        wide = [t.double().requires_grad_(True) for t in host]
        expected = reference(*wide, **statics)
        assert out.device == leaves[0].device
        assert_close(out.cpu(), expected.detach(), torch.float32, scale=scale(shape), what=name)
        g = torch.randn(expected.shape, dtype=torch.float64)
        got = torch.autograd.grad((out * g.float().to(tpu)).sum(), leaves)
        want = torch.autograd.grad((expected * g).sum(), wide)
        errs = []
        for i, (a, b) in enumerate(zip(got, want)):
            errs.append(float((a.cpu().double() - b).norm() / b.norm()))
            assert_close(
                a.cpu(), b, torch.float32, scale=grad_scale(template, shape), what=f"{name} grad {i}"
            )
        figures.update(shape=str(shape), grad_normwise=max(errs))
    finally:
        torch.set_float32_matmul_precision(before)
