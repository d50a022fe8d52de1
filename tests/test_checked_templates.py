"""Every template's generated op declares a checked-mode reference, and passes strict checked
mode (`tpu_kernels.checked(strict=True)`), forward and backward, including the generated
Helion matmul at K=384 and 768, where the plain float32 tolerance raised false alarms."""

from __future__ import annotations

import importlib
import sys

import jax.numpy as jnp
import pytest
import torch

from tpu_kernels import CheckFailure, Reference, checked, scaffold, tpu_kernel

VARIANTS = [(t, b) for t, tpl in sorted(scaffold.list_templates().items()) for b in tpl.backends]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    dest = tmp_path_factory.mktemp("checked_templates")
    for t, b in VARIANTS:
        scaffold.new(f"chk_{t}_{b}", t, backend=b, dest=dest, namespace="tpl_checked")
    sys.path.insert(0, str(dest))
    try:
        yield {(t, b): getattr(importlib.import_module(f"chk_{t}_{b}"), f"chk_{t}_{b}") for t, b in VARIANTS}
    finally:
        sys.path.remove(str(dest))


def _rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64).to(dtype).requires_grad_()


# one small call per template (helion's elementwise takes a 2-D y; Pallas matmul's K must
# be a multiple of its block_k)
CALLS = {
    "elementwise": lambda b: (
        (_rand(64, 256), _rand(1, 256) if b == "helion" else _rand(256)),
        {"alpha": 0.5},
    ),
    "row_reduction": lambda b: ((_rand(128, 256), _rand(256)), {}),
    "matmul": lambda b: ((_rand(64, 384), _rand(384, 128)), {} if b == "helion" else {"block_k": 128}),
    "flash_attention": lambda b: (
        (_rand(1, 2, 128, 64), _rand(1, 2, 256, 64), _rand(1, 2, 256, 64)),
        {"causal": True},
    ),
}


def test_every_template_declares_a_torch_reference(generated):
    assert set(CALLS) == {t for t, _ in VARIANTS}
    for (t, b), op in generated.items():
        ref = op.check_reference
        assert isinstance(ref, Reference) and not ref.jax, (t, b)
        if t in ("matmul", "flash_attention"):  # the templates whose outputs sum many terms
            assert callable(ref.reduces), (t, b)
        if t in ("elementwise", "row_reduction"):  # gradients summed over broadcast copies / rows
            assert callable(ref.grad_reduces), (t, b)


@pytest.mark.slow
@pytest.mark.parametrize(("template", "backend"), VARIANTS, ids=lambda v: v)
def test_every_generated_op_passes_strict_checked_mode(generated, template, backend):
    op = generated[(template, backend)]
    args, kwargs = CALLS[template](backend)
    with checked(strict=True):
        out = op(*args, **kwargs)
        out.backward(torch.randn(out.shape, dtype=out.dtype))


@pytest.mark.slow
def test_the_generated_helion_matmul_passes_at_large_k_and_a_wrong_kernel_fails(generated):
    op = generated[("matmul", "helion")]
    with checked(strict=True):
        for k in (384, 768):
            for seed in range(3):
                gen = torch.Generator().manual_seed(seed)
                a = torch.randn(64, k, generator=gen).requires_grad_()
                b = torch.randn(k, 128, generator=gen).requires_grad_()
                out = op(a, b)
                out.backward(torch.randn(out.shape, generator=gen))
        op(_rand(64, 384, dtype=torch.bfloat16), _rand(384, 128, dtype=torch.bfloat16))

    @tpu_kernel("tpl_checked::bf16_inputs_matmul", check_reference=op.check_reference)
    def bf16_inputs_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return jnp.matmul(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), preferred_element_type=jnp.float32)

    with checked(), pytest.raises(CheckFailure, match="bf16_inputs_matmul output differs"):
        bf16_inputs_matmul(torch.randn(64, 768), torch.randn(768, 128))
