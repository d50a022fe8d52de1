"""Activation checkpointing recomputes kernel ops correctly; torch.export with a dynamic
batch dimension gives a program that runs and matches eager at other batch sizes."""

import pytest
import torch
from torch.export import Dim
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from tests.helpers import needs_tokamax, rand
from tpu_kernels.kernels import matmul, rmsnorm, softmax


class CountOps(TorchDispatchMode):
    """Counts calls of each operator that reach the dispatcher below autograd."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


class Block(torch.nn.Module):
    """matmul -> rmsnorm (with its weight) -> softmax -> matmul, the shipped Pallas ops."""

    def __init__(self, d: int = 128):
        super().__init__()
        self.w_in = torch.nn.Parameter(rand(d, d) / d**0.5)
        self.g = torch.nn.Parameter(1 + 0.1 * rand(d))
        self.w_out = torch.nn.Parameter(rand(d, d) / d**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = rmsnorm(matmul(x, self.w_in), self.g, eps=1e-6)
        return matmul(softmax(h), self.w_out)


def helion_block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    from tpu_kernels.kernels.helion_ops import matmul_helion, softmax_helion

    return softmax_helion(matmul_helion(x, w))


def tokamax_block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    from tpu_kernels.tokamax import gated_linear_unit

    return gated_linear_unit(x, w, activation="silu")


def grads_and_counts(fn, inputs, use_checkpoint: bool):
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    with CountOps() as counter:
        out = checkpoint(fn, *inputs, use_reentrant=False) if use_checkpoint else fn(*inputs)
        (out.double() ** 2).sum().backward()
    return out.detach(), [t.grad for t in inputs], counter.counts


def test_checkpointed_pallas_block_recomputes_and_matches():
    block = Block()
    x = rand(32, 128)
    params = list(block.parameters())

    def fn(x, *ps):
        return torch.func.functional_call(block, dict(zip(["w_in", "g", "w_out"], ps)), (x,))

    out, grads, plain = grads_and_counts(fn, [x, *params], use_checkpoint=False)
    out_ck, grads_ck, ck = grads_and_counts(fn, [x, *params], use_checkpoint=True)
    torch.testing.assert_close(out_ck, out, rtol=0, atol=0)  # same kernels, same inputs: bit-equal
    for a, b in zip(grads_ck, grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for op, n in (("tpu_kernels::matmul", 2), ("tpu_kernels::rmsnorm", 1), ("tpu_kernels::softmax", 1)):
        assert plain[op] == n, plain
        assert ck[op] == 2 * n, ck  # the forward ran again in backward
    for bwd in ("tpu_kernels::matmul_backward", "tpu_kernels::rmsnorm_backward", "tpu_kernels::softmax_backward"):
        assert ck[bwd] == plain[bwd] >= 1


@pytest.mark.parametrize(
    "fn,shapes,ops",
    [
        # Helion's code generation for the forward and backward ops: about 25 s here
        pytest.param(
            helion_block,
            [(16, 128), (128, 128)],
            ["tpu_kernels::matmul_helion", "tpu_kernels::softmax_helion"],
            id="helion",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            tokamax_block,
            [(2, 8, 64), (64, 2, 32)],
            ["tokamax::gated_linear_unit"],
            id="tokamax",
            marks=needs_tokamax,
        ),
    ],
)
def test_checkpointed_helion_and_tokamax_ops(fn, shapes, ops):
    inputs = [rand(*s) for s in shapes]
    out, grads, plain = grads_and_counts(fn, inputs, use_checkpoint=False)
    out_ck, grads_ck, ck = grads_and_counts(fn, inputs, use_checkpoint=True)
    torch.testing.assert_close(out_ck, out, rtol=0, atol=0)
    for a, b in zip(grads_ck, grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for op in ops:
        assert ck[op] == 2 * plain[op] == 2, (plain, ck)


def check_export(module: torch.nn.Module, example: tuple, dims: dict, batches: tuple[int, ...]):
    ep = torch.export.export(module, example, dynamic_shapes=dims)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    runner = ep.module()
    for b in batches:
        args = (rand(b, *example[0].shape[1:]),) + tuple(example[1:])
        torch.testing.assert_close(runner(*args), module(*args), rtol=0, atol=0)
    return targets


def test_export_pallas_block_with_dynamic_batch():
    targets = check_export(Block(), (rand(16, 128),), {"x": {0: Dim("batch", max=1024)}}, (16, 40, 8))
    # the kernels stay single ops in the exported program (not decomposed)
    assert {"tpu_kernels.matmul.default", "tpu_kernels.rmsnorm.default", "tpu_kernels.softmax.default"} <= targets


class HelionBlock(torch.nn.Module):
    def forward(self, x, w):
        return helion_block(x, w)


class TokamaxBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(rand(64, 2, 32) / 8)

    def forward(self, x):
        return tokamax_block(x, self.w)


def test_export_helion_ops_with_dynamic_batch():
    targets = check_export(
        HelionBlock(), (rand(16, 128), rand(128, 128)), {"x": {0: Dim("batch", max=512)}, "w": None}, (16, 24)
    )
    assert "tpu_kernels.matmul_helion.default" in targets


@needs_tokamax
def test_export_tokamax_op_with_dynamic_batch():
    targets = check_export(TokamaxBlock(), (rand(4, 8, 64),), {"x": {0: Dim("batch", max=512)}}, (4, 24))
    assert "tokamax.gated_linear_unit.default" in targets
