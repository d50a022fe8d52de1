"""deepseek_rope against the GPT-J rotation written in torch, in float64."""

import pytest
import torch

from tests.helpers import rand
from tests.kernels.checks import opcheck
from tests.tokamax.base import TokamaxFamilyTests
from tests.tokamax.util import check_against_reference
from tpu_kernels.tokamax import rope
from tpu_kernels.tokamax.rope import reference, shapes


class TestRope(TokamaxFamilyTests):
    family = "rope"
    keep_dtype = frozenset({"cos_sin_cache"})  # Tokamax requires a float32 cos/sin table


I32 = torch.int32


def _shape(name: str) -> tuple[int, ...]:
    tokens, heads, head_dim, _ = shapes.TEST[name]
    return (tokens, heads, head_dim) if heads else (tokens, head_dim)


@pytest.mark.parametrize(
    ("shape", "mode", "dtype"),
    [
        ((6, 2, 128), "rope", torch.float32),
        ((6, 256), "rope", torch.bfloat16),
        ((6, 3, 128), "qnorm_rope", torch.float32),
        ((6, 2, 128), "qnorm_rope", torch.float64),
    ],
    ids=str,
)
def test_deepseek_rope_matches_the_gptj_rotation(shape, mode, dtype):
    positions = torch.randint(0, 16, (shape[0],))
    cache = rand(16, 64)
    inverse = mode == "rope"
    check_against_reference(
        "deepseek_rope",
        f"{mode}_{len(shape)}d",
        lambda x: rope.deepseek_rope(x, positions, cache, mode=mode, inverse=inverse),
        lambda x: reference.deepseek_rope(x, positions, cache.double(), mode=mode, inverse=inverse),
        [rand(*shape, dtype=dtype)],
        dtype,
        # Tokamax rotates in float32 whatever the dtype: float64 agrees to float32's tolerance.
        tol_dtype=torch.float32 if dtype == torch.float64 else None,
        out_scale=4,
        grad_scale=4,
    )


@pytest.mark.parametrize("name", list(shapes.TEST))
def test_the_named_shapes(name):
    shape, rotary = _shape(name), shapes.TEST[name][3]
    positions, cache = torch.randint(0, 16, (shape[0],)), rand(16, rotary)
    check_against_reference(
        "deepseek_rope",
        name,
        lambda x: rope.deepseek_rope(x, positions, cache),
        lambda x: reference.deepseek_rope(x, positions, cache.double()),
        [rand(*shape)],
        torch.float32,
        out_scale=4,
        grad_scale=4,
    )


def test_opcheck_qnorm_rope():  # the small calls (TestRope) use mode="rope"
    opcheck(
        rope.deepseek_rope_op,
        (rand(6, 2, 128, requires_grad=True), torch.arange(6, dtype=I32), rand(16, 64)),
        {"mode": "qnorm_rope"},
    )


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="mode='rope_quant'"):
        rope.deepseek_rope(rand(4, 128), torch.arange(4), rand(4, 64), mode="rope_quant")
