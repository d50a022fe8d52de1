"""mhc_pre, mhc_post and mhc_fused_post_pre (bfloat16 streams, as Tokamax requires) against
DeepSeek-V4's formulas written in torch, in float64."""

import torch

from tests.helpers import rand
from tests.tokamax.base import TokamaxFamilyTests
from tests.tokamax.util import check_against_reference
from tpu_kernels.tokamax import mhc
from tpu_kernels.tokamax.mhc import reference, shapes


class TestMhc(TokamaxFamilyTests):
    family = "mhc"
    # Tokamax requires bfloat16 streams and float32 mixes: the calls' own dtypes only
    reference_dtypes = (None,)


MHC_CONSTANTS = dict(
    rms_eps=1e-6, hc_pre_eps=1e-6, hc_sinkhorn_eps=1e-6, hc_post_mult_value=2.0, sinkhorn_repeat=4
)


def _mhc_pre_inputs(t: int, m: int, h: int) -> list:
    return [
        rand(t, m * h, dtype=torch.bfloat16),
        rand(m * (m + 2), m * h, scale=(m * h) ** -0.5),
        torch.rand(3) + 0.5,
        rand(m * (m + 2)),
    ]


def _mhc_post_inputs(t: int, m: int, h: int) -> list:
    return [rand(t, h, dtype=torch.bfloat16), rand(t, m * h, dtype=torch.bfloat16), rand(t, m), rand(t, m, m)]


def test_mhc_post_matches_the_stream_mix():
    check_against_reference(
        "mhc_post",
        "t5_m4",
        mhc.mhc_post,
        reference.mhc_post,
        _mhc_post_inputs(*shapes.TEST["t5_m4"]),
        torch.bfloat16,
        out_scale=4,
        grad_scale=[4, 4, 16, 16],
    )


def test_mhc_pre_matches_gates_sinkhorn_and_collapse():
    c = MHC_CONSTANTS
    check_against_reference(
        "mhc_pre",
        "t5_m4",
        lambda *a: mhc.mhc_pre(*a, *c.values()),
        lambda *a: reference.mhc_pre(*a, *c.values()),
        _mhc_pre_inputs(*shapes.TEST["t5_m4"]),
        torch.bfloat16,
        out_scale=[2, 1, 4],
        grad_scale=[4, 4, 40, 8],
    )


def test_mhc_fused_post_pre_is_post_then_pre():
    t, m, h = 4, 4, 32
    c = MHC_CONSTANTS
    residual, fn, scale, base = _mhc_pre_inputs(t, m, h)
    post_inputs = [rand(t, h, dtype=torch.bfloat16), residual, rand(t, m), torch.rand(t, m, m)]

    def fused_reference(x, r, plm, crm, fn, scale, base):
        new_residual = reference.mhc_post(x, r, plm, crm).bfloat16().double()  # Tokamax rounds it to bf16
        return (new_residual, *reference.mhc_pre(new_residual, fn, scale, base, *c.values()))

    check_against_reference(
        "mhc_fused_post_pre",
        "t4_m4",
        lambda *a: mhc.mhc_fused_post_pre(*a, *c.values()),
        fused_reference,
        [*post_inputs, fn, scale, base],
        torch.bfloat16,
        out_scale=[4, 2, 1, 4],
        grads=False,
    )
