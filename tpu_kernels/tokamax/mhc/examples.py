"""Representative TPU calls of mhc_pre, mhc_post and mhc_fused_post_pre, for `tpu-kernels check`
(see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, F32, Calls, S, on_tpu

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
