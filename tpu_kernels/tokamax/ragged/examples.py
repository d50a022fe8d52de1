"""Representative TPU calls of ragged_dot and ragged_dot_general, for `tpu-kernels check`
(see `_examples.py`)."""

from __future__ import annotations

from tpu_kernels.tokamax._examples import BF16, I32, Calls, S, on_tpu


def _ragged_inputs() -> tuple:
    return S((512, 256), BF16), S((4, 256, 512), BF16), S((4,), I32)


def ragged_dot() -> Calls:
    return [(_ragged_inputs(), dict(implementation=on_tpu("ragged_dot")))]


def ragged_dot_general() -> Calls:
    dims = dict(lhs_contracting_dims=[1], rhs_contracting_dims=[1], lhs_ragged_dims=[0], rhs_group_dims=[0])
    return [(_ragged_inputs(), dict(dims, implementation=on_tpu("ragged_dot")))]
