"""linear_softmax_cross_entropy_loss against F.cross_entropy of a linear layer, in float64."""

import pytest
import torch

from tests.helpers import assert_close, rand
from tests.tokamax.base import TokamaxFamilyTests
from tests.tokamax.util import check_against_reference
from tpu_kernels import tokamax as tk
from tpu_kernels.tokamax.loss import reference, shapes


class TestLoss(TokamaxFamilyTests):
    family = "loss"


DTYPES = [torch.float32, torch.float64, torch.bfloat16]


# Every reduction in float32, and each other dtype with two of them; the odd vocabulary twice.
CASES = [("small", torch.float32, reduction) for reduction in ("sum", "mean", "none")] + [
    ("small", torch.float64, "sum"),
    ("small", torch.float64, "none"),
    ("small", torch.bfloat16, "mean"),
    ("small", torch.bfloat16, "none"),
    ("odd_vocab", torch.float32, "mean"),
    ("odd_vocab", torch.bfloat16, "sum"),
]


@pytest.mark.parametrize(("name", "dtype", "reduction"), CASES, ids=lambda v: str(v).removeprefix("torch."))
def test_matches_cross_entropy_of_a_linear_layer(name, dtype, reduction):
    b, h, v = shapes.TEST[name]
    labels = torch.randint(0, v, (b,))
    per_row = b if reduction == "sum" else 1
    check_against_reference(
        "linear_softmax_cross_entropy_loss",
        f"{name}_{reduction}",
        lambda x, w: tk.linear_softmax_cross_entropy_loss(x, labels, w, reduction=reduction),
        lambda x, w: reference.linear_softmax_cross_entropy_loss(x, labels, w, reduction=reduction),
        [rand(b, h, dtype=dtype), rand(h, v, dtype=dtype, scale=h**-0.5)],
        dtype,
        # Tokamax computes the logsumexp and the loss in float32 even for float64 inputs,
        # so float64 agrees to float32's tolerance (measured: loss 8.7e-6 for a sum of 16
        # rows, gradients 5.9e-8).
        tol_dtype=torch.float32 if dtype == torch.float64 else None,
        out_scale=per_row * 4,
        grad_scale=[2, 2 * b],
    )


def test_the_loss_is_float32_for_every_input_dtype():
    labels = torch.randint(0, 10, (4,))
    for dtype in DTYPES:
        out = tk.linear_softmax_cross_entropy_loss(rand(4, 8, dtype=dtype), labels, rand(8, 10, dtype=dtype))
        assert out.dtype == torch.float32 and out.shape == ()


def test_chunked_xla_is_refused_where_tokamax_is_wrong_and_right_where_it_is_not():
    x, labels = rand(8, 16), torch.randint(0, 100, (8,))
    with pytest.raises(ValueError, match="chunked_xla.*V % 2048 == 0.*V = 100"):
        tk.linear_softmax_cross_entropy_loss(x, labels, rand(16, 100), implementation="chunked_xla")
    w = rand(16, 2048, scale=0.25)
    got = tk.linear_softmax_cross_entropy_loss(x, labels, w, reduction="mean", implementation="chunked_xla")
    want = reference.linear_softmax_cross_entropy_loss(x.double(), labels, w.double(), reduction="mean")
    assert_close(got, want, torch.float32, scale=4)


def test_bad_arguments_say_what_to_do():
    x, labels = rand(4, 8), torch.randint(0, 10, (4,))
    with pytest.raises(
        ValueError, match=r"needs x \[B, H\], labels \[B\], weight \[H, V\] \(Tokamax's argument order\)"
    ):
        tk.linear_softmax_cross_entropy_loss(x, rand(8, 10), labels)
    with pytest.raises(ValueError, match="reduction='avg'"):
        tk.linear_softmax_cross_entropy_loss(x, labels, rand(8, 10), reduction="avg")
