"""attention: flash forward and backward kernels with grouped kv heads, a causal mask and
a sliding window, against float64 references."""

import jax
import jax.numpy as jnp
import pytest
import torch

from tests.helpers import assert_close, rand
from tests.kernels.base import KernelFamilyTests
from tests.kernels.checks import lowers_for_tpu, opcheck
from tpu_kernels.errors import InvalidArgumentError
from tpu_kernels.kernels import attention
from tpu_kernels.kernels.attention import pallas, reference, scaled_dot_product_attention
from tpu_kernels.testing import dot_scale


class TestAttention(KernelFamilyTests):
    family = "attention"  # its registered kwargs call it causal
    kernel_kwargs = {
        "block_q": 64,
        "block_k": 128,
    }  # "tiled" spans 4 x 2 blocks; "longer_keys" pads 200 keys to 256
    small_shape = "grouped"
    gradcheck_shape = (1, 2, 1, 16, 16, 8)
    zero_size_shapes = [(0, 2, 1, 8, 8, 8), (1, 2, 1, 0, 8, 8), (1, 2, 1, 8, 0, 8), (1, 2, 2, 8, 8, 0)]
    compile_shapes = [(1, 2, 1, 64, 64, 32), (1, 4, 2, 100, 100, 16), (2, 2, 2, 40, 40, 16)]

    def out_scale(self, shape, dtype):
        return 3  # weighted means of unit-normal values

    def grad_scales(self, shape, dtype):
        """The project's rule for a K-term sum (`dot_scale`): dq sums over the keys, dk and dv
        over their group's queries (reference.CHECK's grad_reduces)."""
        _, h, hk, sq, sk, d = shape
        return [3 * dot_scale(max(sk, d), dtype)] + [3 * dot_scale(max(sq * h // hk, d), dtype)] * 2


def _qkv(b, h, hk, sq, sk, d, dtype=torch.float32, requires_grad=False):
    return (
        rand(b, h, sq, d, dtype=dtype, requires_grad=requires_grad),
        rand(b, hk, sk, d, dtype=dtype, requires_grad=requires_grad),
        rand(b, hk, sk, d, dtype=dtype, requires_grad=requires_grad),
    )


def _check_against_float64(shape, dtype=torch.float32, **kw):
    """Forward and every gradient against the float64 reference, with a fresh cotangent."""
    q, k, v = _qkv(*shape, dtype=dtype, requires_grad=True)
    statics = {name: kw.pop(name) for name in ("causal", "scale", "window") if name in kw}
    out = attention(q, k, v, **statics, **kw)
    wide = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    want = reference.attention(*wide, **statics)
    assert_close(out, want, dtype, scale=3, what=f"out {shape} {statics}")
    g = torch.randn(out.shape, dtype=torch.float64)
    got = torch.autograd.grad((out * g.to(dtype)).sum(), (q, k, v))
    ref = torch.autograd.grad((want * g.to(dtype).double()).sum(), wide)
    group = shape[1] // shape[2]
    for name, a, b in zip("qkv", got, ref):
        scale = 3 * (group * shape[3] / shape[4]) ** 0.5 if name != "q" else 3
        assert a.shape == b.shape and a.dtype == dtype
        assert_close(a, b, dtype, scale=max(scale, 3), what=f"d{name} {shape} {statics}")


@pytest.mark.parametrize(
    "shape, statics",
    [
        ((1, 2, 2, 128, 128, 32), {"causal": False}),
        ((1, 4, 2, 256, 256, 32), {"causal": True, "window": 100}),  # window inside one block
        ((1, 4, 1, 256, 256, 32), {"causal": True, "window": 200}),  # MQA, window across blocks
        ((1, 2, 1, 300, 300, 16), {"causal": True, "window": 7}),  # padded, a narrow band
        ((2, 6, 2, 72, 72, 64), {"causal": True, "scale": 0.3}),
        ((1, 2, 1, 96, 200, 32), {"causal": False}),  # padded keys, not causal
    ],
    ids=str,
)
def test_masks_groups_and_padding_against_float64(shape, statics):
    _check_against_float64(shape, **statics, block_q=64, block_k=128)


@pytest.mark.parametrize(
    "shape, statics",
    [
        ((1, 4, 1, 264, 264, 32), {"causal": True, "window": 200}),  # MQA, a band across blocks
        ((1, 2, 1, 308, 308, 16), {"causal": True}),  # padded q and keys
        ((1, 2, 2, 64, 328, 32), {"causal": True}),  # keys past every query: zero gradients
    ],
    ids=str,
)
def test_a_causal_call_too_long_for_a_table_walks_the_rectangle(shape, statics, monkeypatch):
    """Past MAX_STEPS a causal call walks the rectangle grid (steps past a block's band skip the
    body): right against float64 there too. (Shapes no other test takes: the op caches its
    programs by shape.)"""
    monkeypatch.setattr(pallas, "MAX_STEPS", 0)
    _check_against_float64(shape, **statics, block_q=64, block_k=128)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_head_dims_against_float64(head_dim, dtype):
    _check_against_float64((1, 4, 2, 128, 128, head_dim), dtype, causal=True, block_q=64)


@pytest.mark.parametrize(
    "seq, expected, backward",
    [
        (1000, (1000, 1000), 1000),  # up to 1024: one whole block
        (4096, (1024, 4096), 1024),
        (1536, (512, 1536), 768),  # the backward: the widest multiple of 128 that divides, if wider
        (2560, (512, 2560), 640),
        (3584, (512, 3584), 896),
        (1408, (512, 1536), 512),  # 11 x 128: padded to 512-blocks, not run in 128-blocks
        (2944, (1024, 3072), 1024),  # 23 x 128
        (4352, (512, 4608), 512),  # 17 x 256
        (1100, (512, 1536), 512),
    ],
)
def test_default_blocks_pad_rather_than_take_small_blocks(seq, expected, backward):
    shape = (1, 2, seq, 256)  # head_dim 256: a causal square up to 1536 is not one block (`_whole`)
    for causal in (False, True):  # the backward's blocks, and any call's over a non-square
        blocks = pallas.Config.default(shape, shape, causal=causal, backward=True)
        assert blocks == pallas.Config(backward, backward)
    assert pallas.Config.default(shape, shape) == pallas.Config(expected[0], expected[0])
    q = jax.ShapeDtypeStruct(shape, jnp.bfloat16)
    assert pallas._plan(q, q, False, None, None, None, forward=True).sq == expected[1]
    assert pallas._plan(q, q, True, None, None, None, forward=False).bq == backward


@pytest.mark.parametrize(
    "seq, expected",
    [
        (1000, (1000, 1000)),
        (8192, (1024, 8192)),  # 1024-blocks divide, and 512's triangle saves less than its cost
        (9472, (512, 9728)),  # 1024-blocks would cover 10240: the diagonal's waste decides
        (4352, (512, 4608)),
    ],
)
def test_a_causal_forward_prices_the_triangle_of_blocks_it_walks(seq, expected):
    shape = (1, 2, seq, 64)
    assert pallas.Config.default(shape, shape, causal=True) == pallas.Config(expected[0], expected[0])
    q = jax.ShapeDtypeStruct(shape, jnp.bfloat16)
    plan = pallas._plan(q, q, True, None, None, None, forward=True)
    assert (plan.bq, plan.sq) == expected


def test_only_a_causal_forward_over_a_square_prices_the_triangle():
    q = jax.ShapeDtypeStruct((1, 2, 9472, 64), jnp.bfloat16)
    k = jax.ShapeDtypeStruct((1, 2, 9472, 64), jnp.bfloat16)
    assert pallas._plan(q, k, True, None, None, None, forward=True).bq == 512
    assert pallas._plan(q, k, True, None, None, None, forward=False).bq == 1024  # the backward
    assert pallas._plan(q, k, False, None, None, None, forward=True).bq == 1024
    assert pallas._plan(q, k, True, 4096, None, None, forward=True).bq == 1024  # a band, not a triangle


def test_a_padded_default_call_matches_float64():
    """1100 keys and queries: padded to 1536 in 512-blocks, the padded keys masked."""
    _check_against_float64((1, 1, 1, 1100, 1100, 8), causal=True, window=300)


def test_the_residual_is_each_rows_log_sum_exp():
    q, k, v = _qkv(1, 4, 2, 64, 128, 32)
    out, lse = attention.overload(q, k, v, causal=True)
    s = (q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2)) / 32**0.5
    s = s.masked_fill(~reference.visible(64, 128, causal=True, window=None), float("-inf"))
    assert lse.dtype == torch.float32 and lse.shape == (1, 4, 64)
    assert_close(lse, torch.logsumexp(s, -1), torch.float32, scale=3)


# ---- SDPA's call shape ----------------------------------------------------------------------


@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_call_shape_matches_torch(is_causal):
    q, k, v = _qkv(2, 4, 2, 48, 48, 16)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=is_causal, scale=0.2, enable_gqa=True
    )
    got = scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.2, enable_gqa=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"attn_mask": torch.ones(8, 8, dtype=torch.bool)}, "argument 'attn_mask' must be None"),
        ({"dropout_p": 0.1}, "argument 'dropout_p' must be 0.0"),
        ({}, "pass enable_gqa=True"),
    ],
)
def test_sdpa_refuses_what_it_would_otherwise_ignore(kwargs, match):
    q, k, v = _qkv(1, 4, 2, 8, 8, 8)
    with pytest.raises(InvalidArgumentError, match=match):
        scaled_dot_product_attention(q, k, v, **kwargs)


# ---- argument errors name the op and what it expected -------------------------------------


@pytest.mark.parametrize(
    "shapes, kwargs, match",
    [
        (((1, 3, 8, 8), (1, 2, 8, 8), (1, 2, 8, 8)), {}, "k and v have 2 heads, which must divide q's 3"),
        (((1, 2, 8, 8), (1, 2, 8, 8), (1, 2, 9, 8)), {}, "of one shape"),
        (((1, 2, 8, 8), (1, 2, 8, 16), (1, 2, 8, 16)), {}, "differ in batch or head_dim"),
        (((1, 2, 8, 8),) * 3, {"window": 4}, "window=4 needs causal=True"),
        (((1, 2, 8, 8),) * 3, {"causal": True, "window": 0}, "window must be a positive int"),
        (((1, 2, 16, 8), (1, 2, 8, 8), (1, 2, 8, 8)), {"causal": True, "window": 4}, "needs seq_q <= seq_k"),
        (((1, 2, 256, 8),) * 3, {"block_q": 12}, "block_q=12 must be a positive multiple of 8"),
        (((1, 2, 256, 8),) * 3, {"block_k": 64}, "block_k=64 must be a positive multiple of 128"),
    ],
)
def test_argument_errors(shapes, kwargs, match):
    with pytest.raises(InvalidArgumentError, match=f"attention: .*{match}"):
        attention(*(rand(*s) for s in shapes), **kwargs)


def test_opcheck_grouped_with_a_window():
    q, k, v = _qkv(1, 4, 2, 64, 64, 16, requires_grad=True)
    opcheck(attention, (q, k, v), {"causal": True, "window": 24, "block_q": 32})


# ---- the TPU lowering, at the shapes the model tables draw ----------------------------------


@pytest.mark.parametrize(
    "shape, kwargs",
    [
        ((1, 32, 8, 2048, 2048, 64), {"causal": True}),
        ((1, 16, 2, 4096, 4096, 256), {"causal": True, "window": 1024}),
        ((2, 8, 8, 1000, 1000, 128), {}),
        ((1, 8, 1, 1500, 1500, 128), {"causal": True}),  # padded to 1536, 512-blocks
    ],
    ids=str,
)
def test_forward_and_backward_lower_for_tpu(shape, kwargs):
    b, h, hk, sq, sk, d = shape
    q = jax.ShapeDtypeStruct((b, h, sq, d), "bfloat16")
    kv = jax.ShapeDtypeStruct((b, hk, sk, d), "bfloat16")
    lowers_for_tpu(attention, q, kv, kv, **kwargs)
    lse = jax.ShapeDtypeStruct((b, h, sq), "float32")
    lowers_for_tpu(attention.backward_op, q, kv, kv, q, lse, q, **kwargs)
