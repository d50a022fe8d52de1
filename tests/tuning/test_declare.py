"""What `tune=` and `tune_key=` accept, and the errors for what they do not."""

import helion
import helion.language as hl
import jax
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_kernels import OpDefinitionError, tpu_kernel
from tpu_kernels.tunables import bucket, default_key

from ..helpers import uname
from .kernels import make_op


def _body(x: torch.Tensor, *, block_rows: int = 64, mode: str = "a", eps: float = 1e-6) -> torch.Tensor:
    return jax.numpy.asarray(x) * 2


def test_a_dict_of_candidate_lists_is_every_combination_the_default_first():
    op = tpu_kernel(uname(), tune={"mode": ["a", "b"], "block_rows": [128, 64, 128]})(_body)
    t = op.tunables
    assert t.names == ("block_rows", "mode")  # signature order
    assert t.default == (64, "a")
    assert t.configs[0] == t.default  # the default is a candidate, the first one
    assert set(t.configs) == {(64, "a"), (64, "b"), (128, "a"), (128, "b")}
    assert len(t.configs) == 4  # no repeats
    assert t.space() == {"block_rows": [64, 128], "mode": ["a", "b"]}


def test_a_list_of_configs_leaves_unnamed_tunables_at_their_defaults():
    op = tpu_kernel(uname(), tune=[{"block_rows": 256}, {"mode": "b"}, {"block_rows": 32, "mode": "b"}])(
        _body
    )
    assert op.tunables.names == ("block_rows", "mode")
    assert op.tunables.configs == ((64, "a"), (256, "a"), (64, "b"), (32, "b"))


def test_float_candidates_take_ints_as_floats():
    op = tpu_kernel(uname(), tune={"eps": [1, 1e-5]})(_body)
    assert op.tunables.configs == ((1e-6,), (1.0,), (1e-5,))
    assert all(type(c[0]) is float for c in op.tunables.configs)


@pytest.mark.parametrize(
    ("tune", "message"),
    [
        ({"nope": [1]}, r"tune= names 'nope', which is not a parameter.*x, block_rows, mode, eps"),
        ({"x": [1]}, r"tune= names 'x', a tensor parameter; only statics"),
        ({"block_rows": []}, r"tune\['block_rows'\] must be a non-empty list"),
        ({"block_rows": 64}, r"tune\['block_rows'\] must be a non-empty list"),
        ({"block_rows": ["64"]}, r"gives 'block_rows' the candidate '64'; block_rows is a int static"),
        ({"block_rows": [True]}, r"gives 'block_rows' the candidate True"),
        ({"eps": [float("nan")]}, r"non-finite candidate"),
        ({}, r"tune=\{\} declares no tunable"),
        ([], r"tune= must be a dict of candidate lists"),
        ("block_rows", r"tune= must be a dict of candidate lists or a list of config dicts"),
    ],
)
def test_bad_declarations_name_the_op_and_what_to_fix(tune, message):
    name = uname()
    with pytest.raises(OpDefinitionError, match=name.split("::")[1] + r".*" + message):
        tpu_kernel(name, tune=tune)(_body)


def test_a_tunable_needs_a_default():
    def body(x: torch.Tensor, *, block_rows: int) -> torch.Tensor:
        return x

    with pytest.raises(OpDefinitionError, match=r"tunable 'block_rows' has no default"):
        tpu_kernel(uname(), tune={"block_rows": [8]})(body)


def test_tune_key_must_take_the_ops_parameters_by_name():
    with pytest.raises(OpDefinitionError, match=r"tune_key.*'rows', which is not a parameter"):
        tpu_kernel(uname(), tune={"block_rows": [8]}, tune_key=lambda rows: (rows,))(_body)
    with pytest.raises(OpDefinitionError, match=r"tune_key= without tune="):
        tpu_kernel(uname(), tune_key=lambda x: (x.shape[0],))(_body)
    op = tpu_kernel(uname(), tune={"block_rows": [8]}, tune_key=lambda x, mode: (x.shape[-1], mode))(_body)
    assert op.tunables.key is not None


@helion.kernel(backend="pallas", config=helion.Config(block_sizes=[16]))
def _helion_double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :] * 2
    return out


def test_a_helion_kernel_tunes_through_helions_autotuner_not_tune():
    with pytest.raises(OpDefinitionError, match=r"a helion kernel tunes through its own autotuner"):
        tpu_kernel(uname(), tune={"block_rows": [8]})(_helion_double)


def test_the_reference_ignores_the_tunables():
    op = make_op(uname())
    assert "block_rows" in op.check_reference.ignore


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**40))
def test_bucket_is_the_smallest_power_of_two_at_least_n(n):
    b = bucket(n)
    if n <= 1:
        assert b == n
    else:
        assert b >= n and b & (b - 1) == 0 and b // 2 < n


def test_the_default_key_buckets_every_tensor_dim():
    x, w = torch.empty(300, 96), torch.empty(96)
    assert default_key((x, w, None, [torch.empty(3)])) == ((512, 128), (128,), None, ((4,),))
