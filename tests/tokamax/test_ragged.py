"""ragged_dot and ragged_dot_general against grouped matmuls by loops, in float64."""

import pytest
import torch

from tests.helpers import FLOAT_DTYPES, assert_close, rand
from tests.kernels.checks import opcheck
from tests.tokamax.base import TokamaxFamilyTests
from tests.tokamax.util import check_against_reference
from tpu_kernels import tokamax as tk
from tpu_kernels.tokamax import ragged
from tpu_kernels.tokamax.ragged import reference, shapes


class TestRagged(TokamaxFamilyTests):
    family = "ragged"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(shapes.TEST))
def test_ragged_dot_matches_loops(name, dtype):
    m, k, n, sizes = shapes.TEST[name]
    gs = torch.tensor(sizes)
    check_against_reference(
        "ragged_dot",
        name,
        lambda a, b: tk.ragged_dot(a, b, gs),
        lambda a, b: reference.ragged_dot(a, b, gs),
        [rand(m, k, dtype=dtype), rand(len(sizes), k, n, dtype=dtype, scale=k**-0.5)],
        dtype,
        out_scale=2,
        grad_scale=[2, 2 * max(sizes)],  # d(rhs[g]) sums over the group's rows
    )


def test_rows_past_the_groups_are_zero_and_empty_groups_get_zero_gradient():
    a = rand(10, 8, dtype=torch.float64, requires_grad=True)
    b = rand(3, 8, 4, dtype=torch.float64, requires_grad=True)
    out = tk.ragged_dot(a, b, torch.tensor([3, 0, 4]))
    assert out[7:].abs().max() == 0
    out.sum().backward()
    assert b.grad[1].abs().max() == 0 and a.grad[7:].abs().max() == 0


def test_preferred_element_type():
    a, b = rand(6, 8, dtype=torch.bfloat16), rand(2, 8, 4, dtype=torch.bfloat16)
    out = tk.ragged_dot(a, b, torch.tensor([2, 4]), preferred_element_type=torch.float32)
    assert out.dtype == torch.float32
    assert_close(
        out, reference.ragged_dot(a.double(), b.double(), torch.tensor([2, 4])), torch.float32, scale=4
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_general_non_contracting_is_ragged_dot(dtype):
    gs = torch.tensor([4, 1, 7])
    dims = dict(lhs_contracting_dims=[1], rhs_contracting_dims=[1], lhs_ragged_dims=[0], rhs_group_dims=[0])
    check_against_reference(
        "ragged_dot_general",
        "non_contracting",
        lambda a, b: tk.ragged_dot_general(a, b, gs, **dims),
        lambda a, b: reference.ragged_dot(a, b, gs),
        [rand(12, 16, dtype=dtype), rand(3, 16, 8, dtype=dtype, scale=0.25)],
        dtype,
        grad_scale=[2, 16],
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_general_ragged_contracting_gives_per_group_products(dtype):
    # The weight gradient of a MoE layer: out[g] = lhs[rows_g].T @ rhs[rows_g]. JAX has no
    # gradient for this mode (its transpose rule is unimplemented), so forward only.
    gs = torch.tensor([5, 0, 9])
    dims = dict(lhs_contracting_dims=[0], rhs_contracting_dims=[0], lhs_ragged_dims=[0])
    check_against_reference(
        "ragged_dot_general",
        "contracting",
        lambda a, b: tk.ragged_dot_general(a, b, gs, **dims),
        lambda a, b: reference.ragged_dot_contracting(a, b, gs),
        [rand(14, 6, dtype=dtype), rand(14, 4, dtype=dtype)],
        dtype,
        out_scale=8,
        grads=False,
    )


def test_opcheck_preferred_element_type_empty_group_and_ragged_contracting():
    # what the small calls (TestRagged) lack: a dtype static, an empty group, the
    # ragged-contracting mode (no gradient)
    a, b = rand(12, 16, requires_grad=True), rand(3, 16, 8, requires_grad=True)
    gs = torch.tensor([4, 0, 6], dtype=torch.int32)
    opcheck(
        ragged.ragged_dot_op,
        (a.detach().bfloat16(), b.detach().bfloat16(), gs),
        {"preferred_element_type": torch.float32},
    )
    opcheck(ragged.ragged_dot_op, (a, b, gs), {"implementation": "xla"})
    dims = dict(lhs_contracting_dims=[0], rhs_contracting_dims=[0], lhs_ragged_dims=[0])
    opcheck(ragged.ragged_dot_general_op, (a.detach(), rand(12, 5), gs), dims)


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match=r"group_sizes must have shape \(3,\)"):
        tk.ragged_dot(rand(6, 4), rand(3, 4, 2), torch.tensor([3, 3]))
    with pytest.raises(TypeError, match="group_sizes must be an integer tensor"):
        tk.ragged_dot(rand(6, 4), rand(2, 4, 2), torch.tensor([3.0, 3.0]))
    with pytest.raises(ValueError, match=r"needs lhs \[M, K\] and rhs \[G, K, N\]"):
        tk.ragged_dot(rand(6, 4), rand(2, 5, 2), torch.tensor([3, 3]))
