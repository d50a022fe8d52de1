"""Each template's rendered kernel against the shipped family it mirrors: the same op on the
same inputs gives the same forward and gradients (float32, a TPU-aligned and a ragged shape).

flash_attention mirrors no shipped family: attention ships as Tokamax's
`dot_product_attention` (tpu_kernels/tokamax/attention/), which the template does not copy.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from tpu_kernels import scaffold
from tpu_kernels.kernels import matmul, rmsnorm, scale_add
from tpu_kernels.testing import assert_close

# template -> (the shipped op, its positional tensor shapes per case, keyword arguments for
# both, the atol scale: the values' magnitude, sqrt(K) = 16 for matmul's K-long dot products,
# as tests/kernels/test_matmul.py scales it)
MIRRORS = {
    # the template is axpy (alpha * x + y) and scale_add is x + alpha * y: the same kernel with
    # x and y swapped, so scale_add is called with them swapped (ORDER)
    "elementwise": (scale_add, [((64, 256), (64, 256)), ((13, 100), (13, 100))], {"alpha": 0.5}, 1.0),
    "row_reduction": (rmsnorm, [((64, 256), (256,)), ((13, 100), (100,))], {"eps": 1e-6}, 1.0),
    "matmul": (matmul, [((256, 256), (256, 128)), ((13, 100), (100, 7))], {}, 16.0),
}
NOT_MIRRORED = {"flash_attention"}  # see the module docstring
ORDER = {"elementwise": (1, 0)}  # the shipped op's tensor arguments as indices of the template's


def test_every_template_is_compared_or_said_not_to_mirror_a_family():
    assert set(scaffold.list_templates()) == set(MIRRORS) | NOT_MIRRORED


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    dest = tmp_path_factory.mktemp("mirrors")
    for template in MIRRORS:
        scaffold.new(f"mirror_{template}", template, backend="pallas", dest=dest, namespace="tpl_mirrors")
    sys.path.insert(0, str(dest))
    try:
        yield {t: getattr(importlib.import_module(f"mirror_{t}"), f"mirror_{t}") for t in MIRRORS}
    finally:
        sys.path.remove(str(dest))


@pytest.mark.parametrize("template", sorted(MIRRORS))
def test_the_rendered_kernel_matches_the_shipped_family(rendered, template):
    shipped, cases, kwargs, scale = MIRRORS[template]
    generated = rendered[template]
    for shapes in cases:
        gen = torch.Generator().manual_seed(0)
        inputs = [torch.randn(s, generator=gen, requires_grad=True) for s in shapes]
        twins = [t.detach().clone().requires_grad_(True) for t in inputs]
        order = ORDER.get(template, range(len(inputs)))
        got, want = generated(*inputs, **kwargs), shipped(*[twins[i] for i in order], **kwargs)
        what = f"{template} at {shapes}"
        assert_close(got, want.detach().double(), torch.float32, scale=scale, what=what)
        cotangent = torch.randn(got.shape, generator=gen)
        got.backward(cotangent)
        want.backward(cotangent)
        for a, b in zip(inputs, twins):
            assert_close(a.grad, b.grad.double(), torch.float32, scale=scale, what=f"{what}, gradient")
