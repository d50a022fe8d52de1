"""gated_linear_unit against a SwiGLU/GEGLU/... written in torch, in float64."""

import pytest
import torch

from tests.helpers import FLOAT_DTYPES, rand
from tests.tokamax.base import TokamaxFamilyTests
from tests.tokamax.util import check_against_reference
from tpu_kernels import tokamax as tk
from tpu_kernels.tokamax.glu import reference, shapes


class TestGlu(TokamaxFamilyTests):
    family = "glu"


ACTIVATION_OF = {"rows": "silu", "batched": "gelu"}  # SwiGLU and GEGLU; the rest below


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(shapes.TEST))
def test_fused_weights_match_torch(name, dtype):
    x_shape, n = shapes.TEST[name]
    k = x_shape[-1]
    act = ACTIVATION_OF[name]
    check_against_reference(
        "gated_linear_unit",
        f"{name}_{act}",
        lambda x, w: tk.gated_linear_unit(x, w, activation=act),
        lambda x, w: reference.gated_linear_unit(x, w, activation=act),
        [rand(*x_shape, dtype=dtype), rand(k, 2, n, dtype=dtype, scale=k**-0.5)],
        dtype,
        out_scale=2,
        grad_scale=[4, 2 * x_shape[-2]],  # dW sums over the M rows
    )


@pytest.mark.parametrize("activation", [None, "swish", "gelu_tanh", "relu", "sigmoid", "tanh"])
def test_unfused_weights_and_every_activation(activation):
    dtype = torch.float64
    x, wg, wu = rand(2, 5, 16, dtype=dtype), rand(16, 12, dtype=dtype), rand(16, 12, dtype=dtype)
    check_against_reference(
        "gated_linear_unit",
        f"unfused_{activation}",
        lambda x, a, b: tk.gated_linear_unit(x, a, b, activation=activation),
        lambda x, a, b: reference.gated_linear_unit(x, a, b, activation=activation),
        [x, wg, wu],
        dtype,
        out_scale=8,
        grad_scale=16,
    )


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="activation='swiglu'; choose from silu, swish"):
        tk.gated_linear_unit(rand(4, 8), rand(8, 2, 4), activation="swiglu")
    with pytest.raises(ValueError, match=r"needs weight \[K=8, 2, N\]; got \(4, 2, 4\)"):
        tk.gated_linear_unit(rand(4, 8), rand(4, 2, 4))
