"""layer_norm and rms_norm against F.layer_norm and F.rms_norm in float64."""

import pytest
import torch

from tests.helpers import FLOAT_DTYPES, rand
from tests.kernels.checks import compile_matches_eager, opcheck
from tests.tokamax.base import TokamaxFamilyTests
from tests.tokamax.util import check_against_reference
from tpu_kernels import tokamax as tk
from tpu_kernels.tokamax import normalization
from tpu_kernels.tokamax.normalization import reference, shapes


class TestNormalization(TokamaxFamilyTests):
    family = "normalization"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(shapes.TEST))
def test_layer_norm_matches_torch(name, dtype):
    shape = shapes.TEST[name]
    c = shape[-1]
    inputs = [rand(*shape, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype)]
    check_against_reference(
        "layer_norm",
        name,
        lambda x, w, b: tk.layer_norm(x, w, b, eps=1e-5),
        lambda x, w, b: reference.layer_norm(x, w, b, eps=1e-5),
        inputs,
        dtype,
        out_scale=4,
        grad_scale=[4, 2 * len(shape) * shape[0], 2 * len(shape) * shape[0]],  # weight/bias grads sum rows
    )


# rms_norm is layer_norm(subtract_mean=False), the same op: every dtype on one shape,
# and the other shapes in float32.
RMS_CASES = [("batched", dtype) for dtype in FLOAT_DTYPES] + [("rows", torch.float32), ("odd", torch.float32)]


@pytest.mark.parametrize(("name", "dtype"), RMS_CASES, ids=lambda v: str(v).removeprefix("torch."))
def test_rms_norm_matches_torch(name, dtype):
    shape = shapes.TEST[name]
    inputs = [rand(*shape, dtype=dtype), rand(shape[-1], dtype=dtype)]
    check_against_reference(
        "rms_norm",
        name,
        lambda x, w: tk.rms_norm(x, w, eps=1e-5),
        lambda x, w: reference.rms_norm(x, w, eps=1e-5),
        inputs,
        dtype,
        out_scale=4,
        grad_scale=[4, 2 * len(shape) * shape[0]],
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_other_axis_scale_offset_and_missing_parameters(dtype):
    x, w = rand(6, 10, 4, dtype=dtype), rand(10, dtype=dtype)
    kw = dict(dim=1, scale_offset=1.0)
    check_against_reference(
        "layer_norm",
        "dim1_no_bias",
        lambda x, w: tk.layer_norm(x, w, **kw),
        lambda x, w: reference.layer_norm(x, w, **kw),
        [x, w],
        dtype,
        out_scale=4,
        grad_scale=[4, 20],
    )
    check_against_reference(
        "rms_norm",
        "no_weight",
        lambda x: tk.rms_norm(x, dim=0),
        lambda x: reference.rms_norm(x, dim=0),
        [x],
        dtype,
        out_scale=4,
        grad_scale=4,
    )


def test_opcheck_scale_offset_and_eps():
    # the small calls (TestNormalization) leave scale_offset and eps at their defaults
    x, w, b = rand(4, 6, 32, requires_grad=True), rand(32, requires_grad=True), rand(32, requires_grad=True)
    opcheck(normalization.layer_norm_op, (x, w, b), {"eps": 1e-5, "implementation": "xla"})
    opcheck(normalization.layer_norm_op, (x, w), {"subtract_mean": False, "dim": -1, "scale_offset": 0.5})


def test_compile_fullgraph_matches_eager_with_no_graph_breaks():
    def model(x, w, b):
        return tk.rms_norm(tk.layer_norm(x * 2, w, b), w).square().mean()

    compile_matches_eager(
        model,
        [rand(4, 6, 32, requires_grad=True), rand(32, requires_grad=True), rand(32, requires_grad=True)],
    )


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match=r"weight must have shape \(x.shape\[-1\],\) = \(8,\), got \(4,\)"):
        tk.layer_norm(rand(3, 8), rand(4))
    with pytest.raises(ValueError, match="dim=2 is out of range"):
        tk.rms_norm(rand(3, 8), dim=2)
