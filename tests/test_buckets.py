"""Bounded dynamism (tpu_kernels.dispatch.buckets): padded dims, one executable per bucket, true shapes above."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tpu_kernels
from tpu_kernels import bucket_rows, bucket_size, buckets_of, multiple_of, powers_of_two, tpu_kernel
from tpu_kernels.dispatch import buckets as bucketing
from tpu_kernels.errors import InvalidArgumentError, OpDefinitionError
from tpu_kernels.kernels.rmsnorm import rmsnorm
from tpu_kernels.kernels.scale_add import scale_add
from tpu_kernels.kernels.softmax import softmax
from tpu_kernels.testing import compile_counted, opcheck

# Lengths across the boundaries of the shipped schedule, powers_of_two(128) for float64:
# 1 and the sublane tile 8 (bucket 8), 9 (16), 127 and 128 (128), 129 (256).
LENGTHS = (1, 8, 9, 127, 128, 129)
D = 16


# ---- the public helper ----------------------------------------------------------------


def test_bucket_size_multiples_and_lists():
    m = multiple_of(128)
    assert [bucket_size(n, m) for n in (0, 1, 127, 128, 129, 256, 257)] == [0, 128, 128, 128, 256, 256, 384]
    b = buckets_of([512, 128, 256, 128])
    assert b.sizes == (128, 256, 512)
    assert [bucket_size(n, b) for n in (1, 128, 129, 512)] == [128, 128, 256, 512]
    with pytest.raises(ValueError, match="exceeds the largest bucket 512"):
        bucket_size(513, b)
    with pytest.raises(ValueError, match="non-negative int"):
        bucket_size(-1, m)
    with pytest.raises(TypeError, match="multiple_of"):
        bucket_size(3, 128)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        bucket_size(3, m, 4)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: multiple_of(0), "positive int"),
        (lambda: multiple_of(True), "positive int"),
        (lambda: multiple_of(8, pad="zero"), "pad must be"),
        (lambda: buckets_of([]), "non-empty list"),
        (lambda: buckets_of([128, -1]), "positive ints"),
        (lambda: buckets_of(128), "list of positive ints"),
        (lambda: powers_of_two(0), "powers_of_two: multiple must be a positive int, got 0"),
        (lambda: powers_of_two(128.0), "powers_of_two: multiple must be a positive int"),
        (lambda: powers_of_two(128, minimum=0), r"minimum must be a positive int or None \(the dtype's"),
        (lambda: powers_of_two(128, minimum=True), "minimum must be a positive int"),
        (lambda: powers_of_two(128, pad=None), "powers_of_two: pad must be"),
    ],
)
def test_bad_bucketings_are_refused(make, match):
    with pytest.raises(OpDefinitionError, match=match):
        make()


def test_powers_of_two_boundaries():
    rows = powers_of_two(128)
    f32 = [1, 7, 8, 9, 16, 17, 32, 33, 64, 65, 127, 128, 129, 256, 257, 1000]
    assert [bucket_size(n, rows) for n in f32] == [
        8, 8, 8, 16, 16, 32, 32, 64, 64, 128, 128, 128, 256, 256, 384, 1024
    ]  # fmt: skip
    assert bucket_size(0, rows) == 0
    # the smallest bucket is the dtype's sublane tile: 8 rows of 32/64-bit, 16 of 16-bit, 32 of 8-bit
    for dtype, tile in [(torch.float64, 8), (torch.float32, 8), (torch.int32, 8), (torch.bfloat16, 16),
                        (torch.float16, 16), (torch.int8, 32), (torch.float8_e4m3fn, 32), (torch.bool, 32)]:  # fmt: skip
        assert [bucket_size(n, rows, dtype) for n in (1, tile - 1, tile)] == [tile] * 3, dtype
        assert bucket_size(tile + 1, rows, dtype) == 2 * tile, dtype
        assert bucket_size(129, rows, dtype) == 256, dtype
    # an explicit minimum; a multiple that is not a power of two caps the powers; a multiple
    # below the tile caps the tile
    assert [bucket_size(n, powers_of_two(128, minimum=1)) for n in (1, 2, 3, 5, 100)] == [1, 2, 4, 8, 128]
    capped = [bucket_size(n, powers_of_two(96)) for n in (1, 33, 64, 65, 96, 97, 193)]
    assert capped == [8, 64, 64, 96, 96, 192, 288]
    assert bucket_size(1, powers_of_two(8), torch.bfloat16) == 8
    assert bucket_rows("x") == {"x": {-2: powers_of_two(128)}}  # bucket_rows' default
    assert "sublane tile" in repr(powers_of_two(128)) and "minimum=4" in repr(powers_of_two(64, minimum=4))


@pytest.mark.parametrize("multiple", [8, 16, 128, 512, 1024])
@pytest.mark.parametrize("dtype, tile", [(torch.float32, 8), (torch.bfloat16, 16), (torch.int8, 32)])
def test_powers_of_two_bucket_count_is_logarithmic(multiple, dtype, tile):
    """Lengths 1..multiple share log2(multiple / tile) + 1 buckets (1 when the multiple is at
    most the tile), and every further multiple adds one; every bucket holds its lengths
    and is at most twice the length (below the tile: the tile)."""
    rows = powers_of_two(multiple)
    sizes = [bucket_size(n, rows, dtype) for n in range(1, 4 * multiple + 1)]
    small = {s for s in sizes[:multiple]}
    low = min(tile, multiple)
    assert len(small) == (multiple // low).bit_length()  # log2(multiple / low) + 1
    assert len(set(sizes)) == len(small) + 3
    for n, s in enumerate(sizes, start=1):
        assert n <= s <= max(low, 2 * n) if n <= multiple else n <= s < n + multiple


def test_public_names():
    assert tpu_kernels.multiple_of is multiple_of and tpu_kernels.buckets_of is buckets_of
    assert tpu_kernels.bucket_size is bucket_size and tpu_kernels.bucket_rows is bucket_rows
    assert tpu_kernels.powers_of_two is powers_of_two


def test_bucket_rows_gives_every_named_tensor_the_same_dim_and_bucketing():
    rows = powers_of_two(128)
    assert bucket_rows("x", "y", "out") == {"x": {-2: rows}, "y": {-2: rows}, "out": {-2: rows}}
    listed = buckets_of([4, 8], pad=-1)
    assert bucket_rows("x", "r", bucketing=listed, dim=0) == {"x": {0: listed}, "r": {0: listed}}
    # the shipped kernels declare theirs with it: rows (dim -2) of their row-wise tensors
    assert softmax.bucket_plan.declared == bucket_rows("x", "out")
    assert rmsnorm.bucket_plan.declared == bucket_rows("x", "y", "inv_rms")
    assert scale_add.bucket_plan.declared == bucket_rows("x", "y", "out")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: bucket_rows(), r"bucket_rows: name one or more tensors \(strings\), got \(\)"),
        (lambda: bucket_rows("x", 0), r"name one or more tensors \(strings\), got \('x', 0\)"),
        (
            lambda: bucket_rows("x", bucketing=128),
            r"bucket_rows: bucketing must be multiple_of\(...\), powers_of_two\(...\) or buckets_of",
        ),
        (lambda: bucket_rows("x", dim="-2"), r"bucket_rows: dim must be an int, got '-2'"),
        (lambda: bucket_rows("x", dim=True), r"bucket_rows: dim must be an int, got True"),
    ],
)
def test_bad_bucket_rows_arguments_are_refused(call, match):
    with pytest.raises(OpDefinitionError, match=match):
        call()


# ---- bad declarations name the op, the argument and what was expected ----------------


def _body(x: jax.Array, w: jax.Array, *, k: int = 1) -> jax.Array:
    return x * w


def _mutating(x: jax.Array) -> jax.Array:
    return x + 1


@pytest.mark.parametrize(
    "buckets, kwargs, match",
    [
        ([("x", 0)], {}, r"test_buckets::bad0: buckets must be a non-empty dict"),
        (
            {"z": {0: multiple_of(8)}},
            {},
            r"names 'z', which is neither a tensor parameter \(\['x', 'w'\]\) nor an output \(\['out'\]\)",
        ),
        ({"k": {0: multiple_of(8)}}, {}, r"names 'k', a int parameter; only Tensor parameters can be padded"),
        ({"x": {"0": multiple_of(8)}}, {}, r"buckets\['x'\] has dim '0'; dims are ints"),
        ({"x": {0: 128}}, {}, r"buckets\['x'\]\[0\] is 128; expected tpu_kernels.multiple_of"),
        ({"x": {}}, {}, r"buckets\['x'\] must be a non-empty dict"),
        ({"x": {0: multiple_of(8)}, "w": {0: multiple_of(16)}}, {}, r"same buckets"),
        ({"out": {0: multiple_of(8)}}, {}, r"declares only outputs"),
        ({"x": {0: multiple_of(8)}}, {"length": "w"}, r"length='w' must name an optional tensor parameter"),
        (None, {"length": "w"}, r"length='w' needs buckets="),
    ],
)
def test_bad_declarations(buckets, kwargs, match):
    name = f"test_buckets::bad{test_bad_declarations.n}"
    test_bad_declarations.n += 1
    with pytest.raises(OpDefinitionError, match=match):
        tpu_kernel(name, buckets=buckets, **kwargs)(_body)


test_bad_declarations.n = 0


def test_mutating_op_cannot_pad():
    def inc(x: jax.Array) -> jax.Array:
        return x + 1

    with pytest.raises(
        OpDefinitionError, match=r"test_buckets::mut: buckets= cannot be declared on an op that mutates"
    ):
        tpu_kernel("test_buckets::mut", mutates_args=("x",), buckets={"x": {0: multiple_of(8)}})(inc)


# ---- the shipped row-wise kernels: correct across bucket boundaries, forward and backward


def _rmsnorm_ref(x, w, eps=1e-6):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("n", LENGTHS)
def test_rmsnorm_across_bucket_boundaries(n):
    torch.manual_seed(n)
    x = torch.randn(2, n, D, dtype=torch.float64, requires_grad=True)
    w = torch.randn(D, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, n, D, dtype=torch.float64)
    y = rmsnorm(x, w)
    ref = _rmsnorm_ref(x, w)
    assert y.shape == (2, n, D) and y.is_contiguous()
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    gx, gw = torch.autograd.grad(y, (x, w), g)
    rx, rw = torch.autograd.grad(ref, (x, w), g)
    assert gx.shape == x.shape and gw.shape == w.shape
    # weight's gradient sums over every row: padded rows adding anything would show here
    torch.testing.assert_close(gx, rx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gw, rw, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("n", LENGTHS)
def test_softmax_across_bucket_boundaries(n):
    torch.manual_seed(n)
    x = torch.randn(n, D, dtype=torch.float64, requires_grad=True)
    g = torch.randn(n, D, dtype=torch.float64)
    y = softmax(x)
    ref = torch.softmax(x, -1)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    (gx,) = torch.autograd.grad(y, (x,), g)
    (rx,) = torch.autograd.grad(ref, (x,), g)
    torch.testing.assert_close(gx, rx, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("y_shape", ["same", "row", "vector"])
def test_scale_add_across_bucket_boundaries(n, y_shape):
    torch.manual_seed(n)
    x = torch.randn(3, n, D, dtype=torch.float64, requires_grad=True)
    shape = {"same": (n, D), "row": (1, D), "vector": (D,)}[y_shape]  # the last two broadcast
    y = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, n, D, dtype=torch.float64)
    out = scale_add(x, y, alpha=0.5)
    ref = x + 0.5 * y
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    gx, gy = torch.autograd.grad(out, (x, y), g)
    rx, ry = torch.autograd.grad(ref, (x, y), g)
    assert gy.shape == y.shape
    torch.testing.assert_close(gx, rx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gy, ry, rtol=1e-12, atol=1e-12)


def test_empty_rows_are_not_padded():
    x, w = torch.randn(0, D), torch.randn(D)
    assert rmsnorm(x, w).shape == (0, D)
    assert softmax(x).shape == (0, D)


def test_disagreeing_lengths_reach_the_kernel_unpadded():
    # 5 rows against 7: not one length, so nothing is padded and the kernel reports the caller's shapes
    with pytest.raises(InvalidArgumentError, match=r"\(5, 16\).*\(7, 16\)|\(7, 16\).*\(5, 16\)|5.*7"):
        scale_add(torch.randn(5, D), torch.randn(7, D))


# ---- one executable per bucket ----------------------------------------------------------


def _fresh(op):
    op.cache_clear()
    if op.backward_op is not None:
        op.backward_op.cache_clear()


def test_one_executable_per_bucket_forward_and_backward():
    _fresh(rmsnorm)
    w = torch.randn(D, requires_grad=True)
    buckets = [(1, 5, 8), (9, 16), (65, 100, 128), (129, 200, 256)]  # 8, 16, 128 and 256 rows
    for i, lengths in enumerate(buckets, start=1):
        for n in lengths:
            x = torch.randn(n, D, requires_grad=True)
            rmsnorm(x, w).sum().backward()
        assert rmsnorm.cache_info().misses == i and rmsnorm.cache_info().size == i, lengths
        assert rmsnorm.backward_op.cache_info().misses == i, lengths


def test_softmax_and_scale_add_one_executable_per_bucket():
    for op, call in ((softmax, lambda x: softmax(x)), (scale_add, lambda x: scale_add(x, x, alpha=2.0))):
        _fresh(op)
        for n in (3, 90, 128, 129, 250):  # 8, 128 and 256 rows
            call(torch.randn(2, n, D))
        assert op.cache_info().misses == 3, op.name


# A row-wise op that records the shapes its body is traced with: one trace per executable.
_TRACED: list[tuple[tuple[int, ...], str]] = []


def _record_rows(x: jax.Array) -> jax.Array:
    _TRACED.append((tuple(x.shape), str(x.dtype)))
    return x * 2


recorded = tpu_kernel("test_buckets::recorded", buckets=bucket_rows("x", "out"))(_record_rows)


def test_a_decode_step_pads_to_the_sublane_tile():
    """(batch, 1, hidden), generation's most frequent call, runs on the dtype's sublane tile
    (8 rows of float32, 16 of bfloat16, 32 of int8), not the 128 rows of multiple_of(128);
    a small batch of rows likewise; each bucket is traced (compiled) once."""
    recorded.cache_clear()
    _TRACED.clear()
    for dtype, tile in ((torch.float32, 8), (torch.bfloat16, 16), (torch.int8, 32)):
        for shape in ((4, 1, D), (4, 3, D), (4, tile, D)):  # all in the tile's bucket
            x = torch.randint(-9, 9, shape).to(dtype)
            out = recorded(x)
            assert out.shape == x.shape and torch.equal(out, x * 2)
        recorded(torch.ones(4, tile + 1, D, dtype=dtype))  # the next power of two
    j = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.int8: "int8"}
    assert _TRACED == [
        ((4, 8, D), j[torch.float32]), ((4, 16, D), j[torch.float32]),
        ((4, 16, D), j[torch.bfloat16]), ((4, 32, D), j[torch.bfloat16]),
        ((4, 32, D), j[torch.int8]), ((4, 64, D), j[torch.int8]),
    ]  # fmt: skip
    assert recorded.cache_info().misses == 6


def _record_pair(x: jax.Array, y: jax.Array) -> jax.Array:
    _TRACED.append((tuple(x.shape), tuple(y.shape)))
    return x + y


recorded_pair = tpu_kernel("test_buckets::recorded_pair", buckets=bucket_rows("x", "y", "out"))(_record_pair)


def test_a_size_1_dim_broadcasts_and_stays_unpadded():
    """y's one row broadcasts over x's rows: the kernel sees it as it is, (1, D), beside x's
    padded rows, never a row padded to the bucket (the module docstring's rule)."""
    _TRACED.clear()
    recorded_pair.cache_clear()
    x, y = torch.randn(5, D), torch.randn(1, D)
    torch.testing.assert_close(recorded_pair(x, y), x + y)
    assert _TRACED == [((8, D), (1, D))]


def test_shipped_ops_pad_a_decode_step_to_the_tile():
    """A decode step's one row and 8 rows share rmsnorm's 8-row executable (float32; 16 rows
    for bfloat16); 9 rows is the next bucket."""
    w = torch.randn(D)
    for dtype, tile in ((torch.float32, 8), (torch.bfloat16, 16)):
        _fresh(rmsnorm)
        for n in (1, 3, tile):
            x = torch.randn(2, n, D).to(dtype)
            ref = _rmsnorm_ref(x.double(), w.double()).to(dtype)
            torch.testing.assert_close(rmsnorm(x, w.to(dtype)), ref, **_TOL[dtype])
        assert rmsnorm.cache_info().misses == 1, dtype
        rmsnorm(torch.randn(2, tile + 1, D).to(dtype), w.to(dtype))
        assert rmsnorm.cache_info().misses == 2, dtype


_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


# ---- above the device kernel: true shapes --------------------------------------------


def test_fake_gives_unpadded_shapes():
    with FakeTensorMode():
        x, w = torch.empty(2, 37, D), torch.empty(D)
        y, r = torch.ops.tpu_kernels.rmsnorm(x, w)
        assert y.shape == (2, 37, D) and r.shape == (2, 37, 1)
        assert torch.ops.tpu_kernels.softmax(x).shape == (2, 37, D)
    meta = torch.ops.tpu_kernels.scale_add(torch.empty(37, D, device="meta"), torch.empty(D, device="meta"))
    assert meta.shape == (37, D)


def test_compile_dynamic_one_graph_one_executable_per_bucket():
    _fresh(rmsnorm)

    def f(x, w):
        return rmsnorm(x, w) * 2

    compiled, counter = compile_counted(f, dynamic=True)
    w = torch.randn(D, requires_grad=True)
    for n in (3, 50, 127, 130, 200):
        x = torch.randn(2, n, D, requires_grad=True)
        out = compiled(x, w)
        torch.testing.assert_close(out, 2 * _rmsnorm_ref(x, w), rtol=1e-5, atol=1e-5)
        out.sum().backward()
        assert x.grad.shape == x.shape
    assert counter.frame_count == 1  # one graph serves every length
    assert rmsnorm.cache_info().misses == 4  # buckets 8, 64, 128 and 256
    assert rmsnorm.backward_op.cache_info().misses == 4


def test_callers_tensors_untouched():
    x = torch.randn(3, 40, D, requires_grad=True)
    w = torch.randn(D, requires_grad=True)
    before = (x.detach().clone(), w.detach().clone(), x._version, w._version, x.stride())
    y = rmsnorm(x, w)
    y.sum().backward()
    assert torch.equal(x.detach(), before[0]) and torch.equal(w.detach(), before[1])
    assert (x._version, w._version, x.stride(), x.shape) == (before[2], before[3], before[4], (3, 40, D))


@pytest.mark.parametrize("op, args", [
    (rmsnorm, lambda: (torch.randn(5, D, requires_grad=True), torch.randn(D, requires_grad=True))),
    (softmax, lambda: (torch.randn(2, 9, D, requires_grad=True),)),
    (scale_add, lambda: (torch.randn(9, D, requires_grad=True), torch.randn(1, D, requires_grad=True))),
])  # fmt: skip
def test_opcheck(op, args):
    opcheck(op, args())


# ---- a padded reduction: a neutral pad value and the true length ------------------------


def _masked_mean(x: jax.Array, length: jax.Array | None = None) -> jax.Array:
    """Mean over the last dim, which the op pads with zeros: the sum is unchanged (0 is
    neutral), the count is the true length the op passes (None: nothing was padded)."""
    n = x.shape[-1] if length is None else length
    return jnp.sum(x, axis=-1) / n.astype(x.dtype) if length is not None else jnp.mean(x, axis=-1)


masked_mean = tpu_kernel(
    "test_buckets::masked_mean",
    buckets={"x": {-1: multiple_of(16)}, "out": {}},  # the output has no padded dim
    length="length",
    backward="vjp",  # the backward op gets the true length too
)(_masked_mean)


def test_padded_reduction_with_true_length():
    masked_mean.cache_clear()
    for n in (1, 15, 16, 17, 30):
        x = torch.randn(4, n, dtype=torch.float64)
        torch.testing.assert_close(masked_mean(x), x.mean(-1), rtol=1e-12, atol=1e-12)
    assert masked_mean.cache_info().misses == 2  # buckets 16 and 32, every length a runtime value


def test_padded_reduction_backward_and_compile():
    _fresh(masked_mean)
    compiled, counter = compile_counted(lambda x: masked_mean(x) * 2, dynamic=True)
    for n in (3, 16, 17, 9):
        x = torch.randn(4, n, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(masked_mean(x).sum(), x)
        torch.testing.assert_close(g, torch.full_like(x, 1 / n))  # 1/true length, not 1/bucket
        y = compiled(x)
        torch.testing.assert_close(y, 2 * x.detach().mean(-1))
        (g,) = torch.autograd.grad(y.sum(), x)
        torch.testing.assert_close(g, torch.full_like(x, 2 / n))
    assert counter.frame_count == 1
    assert masked_mean.cache_info().misses == 2 and masked_mean.backward_op.cache_info().misses == 2


def test_length_is_not_for_the_caller():
    with pytest.raises(
        ValueError, match=r"test_buckets::masked_mean: argument 'length' is filled in by the op"
    ):
        masked_mean(torch.randn(2, 3), torch.tensor(3))


def _row_max(x: jax.Array) -> jax.Array:
    """Max over the last dim, which the op pads with -inf: the max of the true values,
    whatever the bucket (no true length needed: -inf is neutral for a max)."""
    return jnp.max(x, axis=-1)


row_max = tpu_kernel(
    "test_buckets::row_max", buckets={"x": {-1: multiple_of(16, pad=float("-inf"))}, "out": {}}
)(_row_max)


def test_padding_holds_the_declared_pad_value():
    """Rows of negative values: padded with 0 instead of the declared -inf, each max would
    be 0."""
    row_max.cache_clear()
    for n in (1, 5, 16, 17):
        x = -torch.rand(3, n, dtype=torch.float64) - 0.5
        torch.testing.assert_close(row_max(x), x.amax(-1), rtol=0, atol=0)
    assert row_max.cache_info().misses == 2  # buckets 16 and 32


def _scaled_rows(x: jax.Array, w: jax.Array) -> jax.Array:
    return x * w


# every tensor padded with 1.0 (a pad that is not 0): the incoming gradients must still be 0
# there, or the weight's gradient, a sum over rows, counts the padded rows
ones_padded = tpu_kernel(
    "test_buckets::ones_padded",
    buckets=bucket_rows("x", "out", bucketing=multiple_of(8, pad=1.0)),
    backward="vjp",
)(_scaled_rows)


def test_incoming_gradients_are_padded_with_zero_whatever_the_pad_value():
    for n in (3, 8, 13):
        x = torch.randn(n, D, dtype=torch.float64, requires_grad=True)
        w = torch.randn(D, dtype=torch.float64, requires_grad=True)
        g = torch.randn(n, D, dtype=torch.float64)
        out = ones_padded(x, w)
        torch.testing.assert_close(out, x * w, rtol=0, atol=0)
        gx, gw = torch.autograd.grad(out, (x, w), g)
        torch.testing.assert_close(gx, g * w, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gw, (g * x).sum(0), rtol=1e-12, atol=1e-12)


# ---- explicit bucket lists, and outputs sliced by the derived shapes -----------------


def _double_rows(x: jax.Array) -> jax.Array:
    return x * 2


listed = tpu_kernel("test_buckets::listed", buckets={"x": {0: buckets_of([4, 8])}})(_double_rows)


def test_explicit_buckets_and_undeclared_outputs():
    listed.cache_clear()
    for n in (1, 4, 5, 8):
        x = torch.randn(n, 3)
        out = listed(x)  # the output is not declared: sliced to the shape jax.eval_shape derives
        assert out.shape == (n, 3)
        torch.testing.assert_close(out, 2 * x)
    assert listed.cache_info().misses == 2
    with pytest.raises(ValueError, match=r"test_buckets::listed: arguments \['x'\]: a length of 9 exceeds"):
        listed(torch.randn(9, 3))


def test_the_padding_kernel_keeps_the_device_kernels_api():
    tpu = rmsnorm._kernels["PrivateUse1"]  # the TPU kernel, wrapped to pad
    assert isinstance(tpu, bucketing.PaddedKernel)
    assert tpu.inner_op == tpu.kernel.inner_op  # its own methods stay reachable


@pytest.mark.slow  # Inductor compiles the forward and backward graphs: about a minute here
def test_inductor_dynamic_one_graph_forward_and_backward():
    _fresh(rmsnorm)
    _fresh(softmax)

    def f(x, w):
        return softmax(rmsnorm(x, w) * 2)

    compiled, counter = compile_counted(f, backend="inductor", dynamic=True)
    w = torch.randn(D, requires_grad=True)
    for n in (3, 50, 130, 200, 7):
        x = torch.randn(2, n, D, requires_grad=True)
        out = compiled(x, w)
        ref = torch.softmax(2 * _rmsnorm_ref(x, w), -1)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        g = torch.randn_like(out)
        gx, gw = torch.autograd.grad(out, (x, w), g)
        rx, rw = torch.autograd.grad(ref, (x, w), g)
        torch.testing.assert_close(gx, rx, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(gw, rw, rtol=1e-4, atol=1e-4)
    assert counter.frame_count == 1
    for op in (rmsnorm, rmsnorm.backward_op, softmax, softmax.backward_op):
        assert op.cache_info().misses == 3, op.name  # buckets 8, 64 and 256
