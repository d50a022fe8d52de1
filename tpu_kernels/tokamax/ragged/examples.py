"""Representative TPU calls of ragged_dot and ragged_dot_general, for `tpu-kernels check`, and small CPU calls
(`<op>_small`) for the sharding simulation (see `_examples.py`)."""

from __future__ import annotations

import torch

from tpu_kernels.tokamax._examples import BF16, I32, Calls, S, on_tpu, randn


def _ragged_inputs() -> tuple:
    return S((512, 256), BF16), S((4, 256, 512), BF16), S((4,), I32)


def ragged_dot() -> Calls:
    return [(_ragged_inputs(), dict(implementation=on_tpu("ragged_dot")))]


def ragged_dot_general() -> Calls:
    dims = dict(lhs_contracting_dims=[1], rhs_contracting_dims=[1], lhs_ragged_dims=[0], rhs_group_dims=[0])
    return [(_ragged_inputs(), dict(dims, implementation=on_tpu("ragged_dot")))]


def _small_inputs() -> tuple:
    rn = randn()
    return rn(9, 16), rn(3, 16, 7, scale=0.25), torch.tensor([3, 4, 1], dtype=torch.int32)


def ragged_dot_small() -> Calls:
    return [(_small_inputs(), {})]


def ragged_dot_general_small() -> Calls:
    dims = dict(lhs_contracting_dims=[1], rhs_contracting_dims=[1], lhs_ragged_dims=[0], rhs_group_dims=[0])
    return [(_small_inputs(), dims)]
