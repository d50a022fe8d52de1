"""Representative TPU calls of the Tokamax ops, for `tpu-kernels check tpu_kernels.tokamax`.

Each op's examples call it as a TPU tensor would: TPU-sized bfloat16 inputs and
the implementation order `resolve_implementation` picks for a TPU (Tokamax's
Mosaic kernel first where there is one, XLA after). The check lowers them with
`tokamax.config.cross_compile` set, so Tokamax does not refuse its TPU kernels
on a machine without a TPU; the report says per op whether a Mosaic kernel was
lowered or the order fell through to plain XLA (as it does for the SparseCore
kernels before TPU v7: pass `--chip 7x` to check those).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu

from tpu_kernels.tokamax.implementation import resolve_implementation

S, BF16, F32, I32, BOOL = jax.ShapeDtypeStruct, jnp.bfloat16, jnp.float32, jnp.int32, jnp.bool_
Calls = list[tuple[tuple, dict]]


def _on_tpu(op: str) -> str:
    return resolve_implementation(op, "tpu")


def _on_tpu_sparsecore(op: str) -> str:
    """The TPU order of an op whose Mosaic kernel runs on the SparseCore of TPU v7 and
    later. On an earlier chip Tokamax skips that kernel at run time; the check, which
    must bypass Tokamax's device test, asks for XLA there. (The check builds the
    examples under the target chip, so `get_tpu_info` names it.)"""
    try:
        generation = pltpu.get_tpu_info().generation
    except Exception:  # no TPU and no target chip
        generation = 0
    return _on_tpu(op) if generation >= 7 else "xla"


def dot_product_attention() -> Calls:
    mha = [S((1, 512, 4, 128), BF16)] * 3
    gqa = [S((1, 1024, 8, 128), BF16), S((1, 1024, 2, 128), BF16), S((1, 1024, 2, 128), BF16)]
    impl = _on_tpu("dot_product_attention")
    return [
        (tuple(mha), dict(is_causal=True, implementation=impl)),
        (tuple(gqa), dict(implementation=impl)),
    ]


def layer_norm() -> Calls:
    x, w = S((4096, 1024), BF16), S((1024,), BF16)
    impl = _on_tpu("layer_norm")
    return [((x, w, w), dict(implementation=impl)), ((x, w), dict(subtract_mean=False, implementation=impl))]


def gated_linear_unit() -> Calls:
    x, w = S((512, 1024), BF16), S((1024, 2, 2048), BF16)
    return [((x, w), dict(activation="silu", implementation=_on_tpu("gated_linear_unit")))]


def _ragged_inputs() -> tuple:
    return S((512, 256), BF16), S((4, 256, 512), BF16), S((4,), I32)


def ragged_dot() -> Calls:
    return [(_ragged_inputs(), dict(implementation=_on_tpu("ragged_dot")))]


def ragged_dot_general() -> Calls:
    dims = dict(lhs_contracting_dims=[1], rhs_contracting_dims=[1], lhs_ragged_dims=[0], rhs_group_dims=[0])
    return [(_ragged_inputs(), dict(dims, implementation=_on_tpu("ragged_dot")))]


def linear_softmax_cross_entropy_loss() -> Calls:
    inputs = (S((512, 256), BF16), S((512,), I32), S((256, 2048), BF16))
    return [(inputs, dict(implementation=_on_tpu("linear_softmax_cross_entropy_loss")))]


def triangle_multiplication() -> Calls:
    n, c, h, d = 128, 128, 128, 128
    inputs = (
        S((n, n, c), F32),
        S((n, n), BOOL),
        S((c, 2, h), F32),
        S((c, 2, h), F32),
        S((h, d), F32),
        S((c, d), F32),
        S((c,), F32),
        S((c,), F32),
        S((h,), F32),
        S((h,), F32),
        "outgoing",
    )
    return [(inputs, dict(implementation=_on_tpu("triangle_multiplication")))]


def top_k() -> Calls:
    return [((S((8, 1024), F32),), dict(k=16, implementation=_on_tpu_sparsecore("top_k")))]


def router_topk() -> Calls:
    return [((S((512, 64), F32),), dict(k=8, implementation=_on_tpu("router_topk")))]


def ragged_gather() -> Calls:
    inputs = (S((1024, 256), BF16), S((512,), I32), S((1,), I32), S((1,), I32))
    return [(inputs, dict(implementation=_on_tpu_sparsecore("ragged_gather")))]


def ragged_gather_reduce() -> Calls:
    # a real MoE size: inputs that fit in VMEM take Tokamax's XLA path even on TPU v7
    inputs = (S((16384, 4096), BF16), S((8192,), I32), S((8192,), F32), S((8192,), BOOL))
    return [(inputs, dict(reduce_group_size=8, implementation=_on_tpu_sparsecore("ragged_gather_reduce")))]


def deepseek_rope() -> Calls:
    inputs = (S((64, 4, 128), BF16), S((64,), I32), S((128, 64), F32))
    return [(inputs, dict(implementation=_on_tpu("deepseek_rope")))]


_T, _M, _H = 256, 4, 1024  # tokens, hyper-connection streams, hidden
_MHC_STATICS = dict(
    rms_eps=1e-6, hc_pre_eps=1e-6, hc_sinkhorn_eps=1e-6, hc_post_mult_value=2.0, sinkhorn_repeat=4
)


def _mhc_pre_tensors() -> tuple:
    return S((_M * (_M + 2), _M * _H), F32), S((3,), F32), S((_M * (_M + 2),), F32)


def _mhc_post_tensors() -> tuple:
    return S((_T, _H), BF16), S((_T, _M * _H), BF16), S((_T, _M), F32), S((_T, _M, _M), F32)


def mhc_pre() -> Calls:
    inputs = (S((_T, _M * _H), BF16), *_mhc_pre_tensors())
    return [(inputs, dict(_MHC_STATICS, implementation=_on_tpu("mhc_pre")))]


def mhc_post() -> Calls:
    return [(_mhc_post_tensors(), dict(implementation=_on_tpu("mhc_post")))]


def mhc_fused_post_pre() -> Calls:
    inputs = (*_mhc_post_tensors(), *_mhc_pre_tensors())
    return [(inputs, dict(_MHC_STATICS, implementation=_on_tpu("mhc_fused_post_pre")))]


def kimi_delta_attention() -> Calls:
    inputs = (*[S((2, 1, 256, 128), BF16)] * 4, S((2, 1, 256), BF16))
    return [(inputs, dict(implementation=_on_tpu("kimi_delta_attention")))]
