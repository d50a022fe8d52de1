"""triangle_multiplication against the AlphaFold formula written in torch, in float64."""

import pytest
import torch

from tests.helpers import rand
from tests.kernels.checks import compile_matches_eager, opcheck
from tests.tokamax.base import TokamaxFamilyTests
from tests.tokamax.util import check_against_reference
from tpu_kernels import tokamax as tk
from tpu_kernels.tokamax import triangle
from tpu_kernels.tokamax.triangle import reference, shapes


class TestTriangle(TokamaxFamilyTests):
    family = "triangle"


def _inputs(n: int, c: int, h: int, d: int, dtype: torch.dtype) -> list:
    return [
        rand(n, n, c, dtype=dtype),
        torch.rand(n, n) > 0.2,
        rand(c, 2, h, dtype=dtype, scale=c**-0.5),
        rand(c, 2, h, dtype=dtype, scale=c**-0.5),
        rand(h, d, dtype=dtype, scale=h**-0.5),
        rand(c, d, dtype=dtype, scale=c**-0.5),
        rand(c, dtype=dtype),
        rand(c, dtype=dtype),
        rand(h, dtype=dtype),
        rand(h, dtype=dtype),
    ]


# Every dtype with both triangle types, without the full product: one case compiles a
# forward and a nine-gradient backward, seconds each on two cores.
SLOW = pytest.mark.slow  # the second half of the matrix: CI runs it too (the default run includes slow tests)
CASES = [
    ("small", torch.float32, "outgoing"),
    ("small", torch.float64, "incoming"),
    ("small", torch.bfloat16, "outgoing"),
    pytest.param("small", torch.float16, "incoming", marks=SLOW),
    pytest.param("wide_hidden", torch.float32, "incoming", marks=SLOW),
    ("wide_hidden", torch.float64, "outgoing"),
    pytest.param("wide_hidden", torch.bfloat16, "incoming", marks=SLOW),
]


@pytest.mark.parametrize(
    ("name", "dtype", "triangle_type"), CASES, ids=lambda v: str(v).removeprefix("torch.")
)
def test_matches_the_formula(name, dtype, triangle_type):
    n, c, h, d = shapes.TEST[name]
    # The 16-bit types set these scales: they round the projections before both layer norms,
    # and the output layer norm divides by a small spread, which gives the errors a long tail.
    # Measured without checked mode over 1000 seeds for each 16-bit dtype, shape and triangle
    # type (7 cases, 7000 draws; a test draws once): outputs within 10.4 atol, the x gradient
    # within 113 (p99 14), projection_in_weights within 6.8*N*N (it sums over all N*N pairs;
    # 438 at N=8), the other weight gradients within 2.1*N*N; the scales are about 2x above.
    # float32 (3000 draws): outputs 0.55, x 2.2, weights 18 atol: its scales stay at 16 / 48 /
    # 8*N*N. The checked-mode declaration in triangle/op.py has its own measurement.
    sixteen = dtype in (torch.bfloat16, torch.float16)
    weights = 8 * n * n
    x_scale, projection_in = (256, 16 * n * n) if sixteen else (48, weights)
    check_against_reference(
        "triangle_multiplication",
        f"{name}_{triangle_type}",
        lambda *a: tk.triangle_multiplication(*a, triangle_type),
        lambda *a: reference.triangle_multiplication(*a, triangle_type),
        _inputs(n, c, h, d, dtype),
        dtype,
        out_scale=24 if sixteen else 16,
        grad_scale=[x_scale, projection_in, *[weights] * 7],
    )


@SLOW
def test_opcheck_incoming():
    # the small call (TestTriangle) is "outgoing"
    args = [t.requires_grad_() if t.is_floating_point() else t for t in _inputs(6, 8, 4, 5, torch.float32)]
    kwargs = {"triangle_type": "incoming", "eps": 1e-5, "implementation": "xla"}
    opcheck(triangle.triangle_multiplication_op, tuple(args), kwargs)


def test_compile_fullgraph_matches_eager_with_no_graph_breaks():
    args = _inputs(6, 8, 4, 5, torch.float32)
    mask = args.pop(1)

    def model(x, *weights):
        out = tk.triangle_multiplication(x * 2, mask, *weights, "outgoing")
        return out.square().mean() + tk.triangle_multiplication(x, mask, *weights, "incoming").mean()

    compile_matches_eager(model, [t.requires_grad_() for t in args])


def test_bad_arguments_say_what_to_do():
    args = _inputs(4, 8, 4, 5, torch.float32)
    with pytest.raises(ValueError, match="triangle_type='both'"):
        tk.triangle_multiplication(*args, "both")
    with pytest.raises(ValueError, match=r"needs x \[N, N, C\] and mask \[N, N\] \(no batch dimension\)"):
        tk.triangle_multiplication(args[0][None], *args[1:], "outgoing")
