"""Property-based numerics: every shipped op and five Tokamax ops against float64 references.

Hypothesis draws shapes (0, 1, odd and non-block-multiple sizes), dtypes (float32,
bfloat16, float16), layouts (contiguous, transposed, sliced) and the values' seed;
each case checks the forward and the gradient (for a random incoming gradient)
against the float64 torch reference with the tolerance table of
`tpu_kernels.testing`, scaled as checked mode scales it (`op.check_reference`'s reductions and scales),
so these tests also hold checked mode's tolerances to account.

Example counts are small (each new shape compiles a kernel: about 0.3-1 s here)
so the file runs in about a minute. Profiles (HYPOTHESIS_PROFILE=<name>):

- "tpu_kernels" (default): fresh random cases each run, like the rest of the suite;
  a failure prints the falsifying example and a `@reproduce_failure(...)` blob
  that replays it exactly.
- "derandomized": the same cases every run (derandomize=True).
- "thorough": 200 cases per test, for a local hunt:
  `HYPOTHESIS_PROFILE=thorough pytest tests/test_properties.py`.

Each shipped op is also drawn at size 0 in every dimension it has (the "zero" cases).
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpu_kernels import tokamax as tk
from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax
from tpu_kernels.kernels.matmul import reference as matmul_ref
from tpu_kernels.kernels.rmsnorm import reference as rmsnorm_ref
from tpu_kernels.kernels.scale_add import reference as scale_add_ref
from tpu_kernels.kernels.softmax import reference as softmax_ref
from tpu_kernels.op import KernelOp
from tpu_kernels.testing import assert_close
from tpu_kernels.tokamax.attention import reference as attention_ref
from tpu_kernels.tokamax.glu import reference as glu_ref
from tpu_kernels.tokamax.normalization import reference as norm_ref
from tpu_kernels.tokamax.ragged import reference as ragged_ref

_COMMON = dict(
    deadline=None,  # the first call of a shape compiles: seconds, not a performance bug
    print_blob=True,
    database=None,  # no .hypothesis/ directory in the tree; replay with the printed blob
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("tpu_kernels", max_examples=8, **_COMMON)
settings.register_profile("derandomized", max_examples=8, derandomize=True, **_COMMON)
settings.register_profile("thorough", max_examples=200, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "tpu_kernels"))

DTYPES = st.sampled_from([torch.float32, torch.bfloat16, torch.float16])
LAYOUTS = st.sampled_from(["contiguous", "transposed", "sliced"])
SEEDS = st.integers(0, 2**32 - 1)
# 1, odd, a sublane multiple, and sizes that are not a multiple of 8 or 128
ROWS = st.sampled_from([1, 3, 8, 13, 37, 130])
COLS = st.sampled_from([1, 5, 16, 128, 130])


def _zero_or(zero: bool, sizes: st.SearchStrategy[int]) -> st.SearchStrategy[int]:
    return st.just(0) if zero else sizes


def make(shape: tuple[int, ...], dtype: torch.dtype, layout: str, gen: torch.Generator, scale: float = 1.0):
    """Standard-normal values (drawn in float64, rounded to dtype) in the given memory layout."""

    def draw(s: tuple[int, ...]) -> torch.Tensor:
        return (torch.randn(s, dtype=torch.float64, generator=gen) * scale).to(dtype)

    if layout == "transposed" and len(shape) >= 2:
        t = draw(shape[:-2] + (shape[-1], shape[-2])).transpose(-1, -2)
    elif layout == "sliced" and len(shape) >= 1:
        t = draw(shape[:-1] + (2 * shape[-1] + 1,))[..., 1::2]
    else:
        t = draw(shape)
    assert tuple(t.shape) == tuple(shape)
    return t


def check(op_fn, ref_fn, inputs: list, dtype: torch.dtype, op: KernelOp, args: dict, what: str) -> None:
    """op_fn(*inputs) against ref_fn(*inputs in float64), forward and gradient, with the
    tolerance checked mode gives `args` (`op.check_reference`: its reductions and scales;
    `inputs` are the op's first parameters, in order)."""
    tolerance, names = op.check_reference, [p.name for p in op.signature.params]
    live = [t.detach().requires_grad_() if _diff(t) else t for t in inputs]
    wide = [t.detach().double().requires_grad_() if _diff(t) else t for t in inputs]
    out, want = op_fn(*live), ref_fn(*wide)
    assert out.dtype == dtype and out.shape == want.shape, (what, out.dtype, out.shape, want.shape)
    scale = tolerance.atol_scale(args, out.dtype, name=op.output_names[0])
    assert_close(out, want, dtype, scale=scale, what=f"{what} forward")
    g = torch.randn(out.shape, dtype=torch.float64).to(dtype)
    diff = [(n, t) for n, t in zip(names, live) if _diff(t)]
    got = (
        torch.autograd.grad(out, [t for _, t in diff], g, allow_unused=True)
        if out.requires_grad
        else [None] * len(diff)
    )
    wide_diff = [t for t in wide if _diff(t)]
    # An output that depends on no input (ragged_dot with empty groups) has zero gradients.
    exp = (
        torch.autograd.grad(want, wide_diff, g.double(), allow_unused=True)
        if want.requires_grad
        else [None] * len(diff)
    )
    for i, (a, b, (name, t)) in enumerate(zip(got, exp, diff)):
        b = torch.zeros(t.shape, dtype=torch.float64) if b is None else b
        a = torch.zeros_like(t) if a is None and not out.requires_grad else a
        assert a is not None and a.dtype == t.dtype and a.shape == t.shape, (what, i)
        grad_scale = tolerance.atol_scale(args, t.dtype, grad=True, name=name)
        assert_close(a, b, t.dtype, scale=grad_scale, what=f"{what} gradient of input {i}")


def _diff(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


# ---- shipped ops --------------------------------------------------------------------------------

# "zero": the case drawn with a size-0 dimension, beside the one with sizes
ZERO = pytest.mark.parametrize("zero", [False, True], ids=["sizes", "zero"])


def _matrix(zero: bool, data: st.DataObject, seed: int) -> tuple[int, int, torch.Generator]:
    """The [rows, cols] of a 2-D shipped op's case (rows 0 in the "zero" case) and its generator."""
    return data.draw(_zero_or(zero, ROWS)), data.draw(COLS), torch.Generator().manual_seed(seed)


# the row-wise kernels (softmax, rmsnorm): rows x cols, with one-block and multi-block grids
ROWWISE = given(
    data=st.data(), dtype=DTYPES, layout=LAYOUTS, block_rows=st.sampled_from([8, 256]), seed=SEEDS
)


@ZERO
@given(
    data=st.data(),
    dtype=DTYPES,
    layout=LAYOUTS,
    alpha=st.sampled_from([1.0, -0.5, 3.0]),
    broadcast=st.booleans(),
    seed=SEEDS,
)
def test_scale_add(zero, data, dtype, layout, alpha, broadcast, seed):
    rows, cols, gen = _matrix(zero, data, seed)
    x = make((rows, cols), dtype, layout, gen)
    y = make((cols,) if broadcast else (rows, cols), dtype, layout, gen)
    check(
        lambda a, b: scale_add(a, b, alpha=alpha, block_rows=8),
        lambda a, b: scale_add_ref.scale_add(a, b, alpha=alpha),
        [x, y],
        dtype,
        scale_add,
        {"x": x, "y": y, "alpha": alpha},
        f"scale_add {tuple(x.shape)}+{tuple(y.shape)} {layout}",
    )


@ZERO
@ROWWISE
def test_softmax(zero, data, dtype, layout, block_rows, seed):
    rows, cols, gen = _matrix(zero, data, seed)
    x = make((rows, cols), dtype, layout, gen, scale=3.0)
    check(
        lambda a: softmax(a, block_rows=block_rows),
        softmax_ref.softmax,
        [x],
        dtype,
        softmax,
        {"x": x},
        f"softmax {tuple(x.shape)} {layout}",
    )


@ZERO
@ROWWISE
def test_rmsnorm(zero, data, dtype, layout, block_rows, seed):
    rows, cols, gen = _matrix(zero, data, seed)
    x, w = make((rows, cols), dtype, layout, gen), make((cols,), dtype, layout, gen)
    check(
        lambda a, b: rmsnorm(a, b, eps=1e-5, block_rows=block_rows),
        lambda a, b: rmsnorm_ref.rmsnorm(a, b, eps=1e-5),
        [x, w],
        dtype,
        rmsnorm,
        {"x": x, "weight": w, "eps": 1e-5},
        f"rmsnorm {tuple(x.shape)} {layout}",
    )


@ZERO
@given(data=st.data(), dtype=DTYPES, layout=LAYOUTS, seed=SEEDS)
def test_matmul(zero, data, dtype, layout, seed):
    # Any shape with any legal block: dimensions up to a block take one, others are padded
    # to a multiple of it (37 rows with block_m=8: five blocks, the last padded; K=300 and
    # N=260 with 128-wide blocks: three blocks each).
    m = data.draw(st.sampled_from([1, 3, 24, 37]))
    k = data.draw(_zero_or(zero, st.sampled_from([1, 5, 16, 130, 300])))
    n = data.draw(st.sampled_from([1, 7, 128, 130, 260]))
    block_m = data.draw(st.sampled_from([8, 256]))
    gen = torch.Generator().manual_seed(seed)
    a, b = make((m, k), dtype, layout, gen), make((k, n), dtype, layout, gen)
    check(
        lambda x, y: matmul(x, y, block_m=block_m, block_n=128, block_k=128),
        matmul_ref.matmul,
        [a, b],
        dtype,
        matmul,
        {"a": a, "b": b},
        f"matmul {tuple(a.shape)}@{tuple(b.shape)} {layout}",
    )


# ---- Tokamax ops ------------------------------------------------------------------------------

# each op, for its checked-mode reference (check_reference= in its family's op.py): its tolerances
REF = {op.short_name: op for f in tk.FAMILIES.values() for op in f.ops}
# Tokamax's XLA path compiles slower than the shipped kernels: 5 cases where the profile has 8
FEW = settings(max_examples=max(1, settings.default.max_examples * 5 // 8))


@FEW
@given(
    rows=st.sampled_from([0, 1, 3, 16]),
    cols=st.sampled_from([1, 5, 128]),
    dtype=DTYPES,
    layout=LAYOUTS,
    rms=st.booleans(),
    seed=SEEDS,
)
def test_tokamax_layer_and_rms_norm(rows, cols, dtype, layout, rms, seed):
    gen = torch.Generator().manual_seed(seed)
    x, w, b = (make(s, dtype, layout, gen) for s in ((rows, cols), (cols,), (cols,)))
    args = {"x": x, "weight": w, "bias": b, "dim": -1}
    if rms:
        op, ref, inputs = tk.rms_norm, norm_ref.rms_norm, [x, w]
    else:
        op, ref, inputs = tk.layer_norm, norm_ref.layer_norm, [x, w, b]
    name = "rms_norm" if rms else "layer_norm"
    check(op, ref, inputs, dtype, REF["layer_norm"], args, f"tokamax.{name} {tuple(x.shape)} {layout}")


@FEW
@given(
    m=st.sampled_from([0, 1, 5]),
    k=st.sampled_from([1, 16]),
    n=st.sampled_from([1, 7]),
    dtype=DTYPES,
    layout=LAYOUTS,
    activation=st.sampled_from(["silu", "gelu"]),
    seed=SEEDS,
)
def test_tokamax_gated_linear_unit(m, k, n, dtype, layout, activation, seed):
    gen = torch.Generator().manual_seed(seed)
    x, w = make((m, k), dtype, layout, gen), make((k, 2, n), dtype, layout, gen, scale=k**-0.5)
    args = {"x": x, "weight": w}
    check(
        lambda a, b: tk.gated_linear_unit(a, b, activation=activation),
        lambda a, b: glu_ref.gated_linear_unit(a, b, activation=activation),
        [x, w],
        dtype,
        REF["gated_linear_unit"],
        args,
        f"tokamax.gated_linear_unit {tuple(x.shape)} {layout} {activation}",
    )


@FEW
@given(
    t=st.sampled_from([0, 1, 5]),
    s=st.sampled_from([1, 6]),  # s=0: a softmax over no keys is undefined
    heads=st.sampled_from([(2, 1), (2, 2)]),
    # float16 attention refuses to run on CPU (XLA:CPU has no float16 dot with float32
    # accumulation; tpu_kernels.tokamax says so): bfloat16 and float32 here.
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    layout=LAYOUTS,
    causal=st.booleans(),
    seed=SEEDS,
)
def test_tokamax_dot_product_attention(t, s, heads, dtype, layout, causal, seed):
    gen = torch.Generator().manual_seed(seed)
    n, kv = heads
    q = make((1, t, n, 8), dtype, layout, gen)
    k, v = (make((1, s, kv, 8), dtype, layout, gen) for _ in range(2))
    args = {"query": q, "key": k, "value": v}
    check(
        lambda a, b, c: tk.dot_product_attention(a, b, c, is_causal=causal),
        lambda a, b, c: attention_ref.dot_product_attention(a, b, c, is_causal=causal),
        [q, k, v],
        dtype,
        REF["dot_product_attention"],
        args,
        f"tokamax.dot_product_attention q{tuple(q.shape)} kv{tuple(k.shape)} {layout} causal={causal}",
    )


@FEW
@given(
    sizes=st.sampled_from([(0, 0), (1, 0), (2, 3), (5, 2), (0, 4)]),
    k=st.sampled_from([1, 16]),
    n=st.sampled_from([1, 7]),
    dtype=DTYPES,
    layout=LAYOUTS,
    seed=SEEDS,
)
def test_tokamax_ragged_dot(sizes, k, n, dtype, layout, seed):
    gen = torch.Generator().manual_seed(seed)
    m = sum(sizes) + 1  # one row past the groups: zero in the output
    lhs, rhs = make((m, k), dtype, layout, gen), make((len(sizes), k, n), dtype, layout, gen, scale=k**-0.5)
    gs = torch.tensor(sizes, dtype=torch.int32)
    args = {"lhs": lhs, "rhs": rhs}
    check(
        lambda a, b: tk.ragged_dot(a, b, gs),
        lambda a, b: ragged_ref.ragged_dot(a, b, gs),
        [lhs, rhs],
        dtype,
        REF["ragged_dot"],
        args,
        f"tokamax.ragged_dot {tuple(lhs.shape)} groups {sizes} {layout}",
    )
