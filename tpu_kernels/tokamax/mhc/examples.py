"""Representative TPU calls of mhc_pre, mhc_post and mhc_fused_post_pre, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

import torch

from tpu_kernels.tokamax._examples import BF16, F32, Calls, S, on_tpu, randn

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
    return [(inputs, dict(_MHC_STATICS, implementation=on_tpu("mhc_pre")))]


def mhc_post() -> Calls:
    return [(_mhc_post_tensors(), dict(implementation=on_tpu("mhc_post")))]


def mhc_fused_post_pre() -> Calls:
    inputs = (*_mhc_post_tensors(), *_mhc_pre_tensors())
    return [(inputs, dict(_MHC_STATICS, implementation=on_tpu("mhc_fused_post_pre")))]


def _small_post(rn) -> tuple:
    t, m, h = 7, 4, 32
    bf = torch.bfloat16
    return (
        rn(t, h, dtype=bf),
        rn(t, m * h, dtype=bf),
        rn(t, m),
        torch.rand(t, m, m, generator=torch.Generator()),
    )


def _small_pre(rn) -> tuple:
    m, h = 4, 32
    return rn(m * (m + 2), m * h, scale=(m * h) ** -0.5), rn(3).abs() + 0.5, rn(m * (m + 2))


def mhc_pre_small() -> Calls:
    rn = randn()
    return [((rn(7, 4 * 32, dtype=torch.bfloat16), *_small_pre(rn)), dict(_MHC_STATICS))]


def mhc_post_small() -> Calls:
    return [(_small_post(randn()), {})]


def mhc_fused_post_pre_small() -> Calls:
    rn = randn()
    return [((*_small_post(rn), *_small_pre(rn)), dict(_MHC_STATICS))]
