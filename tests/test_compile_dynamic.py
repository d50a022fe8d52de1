"""torch.compile's dynamic shapes for every shipped op and the derived fake: the default
(automatic dynamic after a second size), dynamic=True and mark_dynamic, at three sizes,
forward and backward, with the graphs counted (tpu_kernels.testing.compile_dynamic_matches_eager).
The Tokamax ops: tests/tokamax/test_compile_dynamic.py."""

import jax.numpy as jnp
import pytest
import torch
from torch import Tensor

from tests.helpers import compile_counted, rand, uname
from tpu_kernels import tpu_kernel
from tpu_kernels.dispatch import symbolic
from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax
from tpu_kernels.testing import MARK_DYNAMIC, compile_dynamic_matches_eager


def _g(*shape):
    return rand(*shape, requires_grad=True)


# (model, inputs at a size); the sizes: no two dims equal by chance in the first (dynamic=True
# gives equal sizes one symbol), every dim that changes changes in the second.
SHIPPED = {
    "scale_add": (lambda x, y: scale_add(x, y, alpha=0.5) * 2, lambda m, n: [_g(m, n), _g(m, n)]),
    "softmax": (lambda x: softmax(x) * 2, lambda m, n: [_g(m, n)]),
    "rmsnorm": (lambda x, w: rmsnorm(x, w, eps=1e-5) * 2, lambda m, n: [_g(m, n), _g(n)]),
    "matmul": (lambda a, b: matmul(a, b) * 2, lambda m, n: [_g(m, n), _g(n, m + 8)]),
}
SIZES = [(8, 128), (16, 256), (24, 384)]
MODES = {"default": None, "dynamic": True, "mark_dynamic": MARK_DYNAMIC}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", list(SHIPPED))
def test_every_shipped_op_compiles_at_three_sizes_forward_and_backward(name, mode):
    model, make = SHIPPED[name]
    sizes = [(m, 2 * n) for m, n in SIZES] if name == "matmul" else SIZES  # matmul: k a multiple of 256
    compile_dynamic_matches_eager(model, [make(*s) for s in sizes], dynamic=MODES[mode], rtol=1e-4, atol=1e-4)


def test_every_helion_twin_compiles_at_three_sizes_forward_and_backward():
    from tpu_kernels.kernels.helion_ops import add_helion, matmul_helion, rmsnorm_helion, softmax_helion
    from tpu_kernels.runtime.sources.helion import helion_cpu_mode

    def model(x, y, w, b):  # the four in one graph: each compile of a Helion op takes seconds here
        return add_helion(x, y, alpha=0.5) + softmax_helion(x) + rmsnorm_helion(
            x, w, eps=1e-5
        ), matmul_helion(x, b)

    calls = [[_g(m, n), _g(m, n), _g(n), _g(n, m + 8)] for m, n in SIZES]
    # Helion's eager CPU mode (its interpreter takes about 0.3 s a call); the fake, Helion's
    # own shape inference, is the same in both modes
    with helion_cpu_mode("eager"):
        compile_dynamic_matches_eager(model, calls, rtol=1e-4, atol=1e-4)


def test_the_issue_repro_two_tensors_of_one_size_after_a_recompile():
    f = torch.compile(lambda x, y: scale_add(x, y, alpha=0.5) * 2, backend="aot_eager")
    f(torch.randn(8, 128), torch.randn(8, 128))
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    torch.testing.assert_close(f(x, y), (x + 0.5 * y) * 2)


def _counting_plans(monkeypatch):
    """Every plan symbolic.plan makes: (the merges it kept, how many traces it took)."""
    made = []
    original = symbolic.plan

    def plan(sizes, trace):
        calls = []

        def counted(dims):
            calls.append(1)
            return trace(dims)

        result = original(sizes, counted)
        made.append((result.partition, len(calls)))
        return result

    monkeypatch.setattr(symbolic, "plan", plan)
    return made


def test_sizes_equal_only_by_chance_are_not_assumed_equal(monkeypatch):
    # matmul at M == N, then at M != N: only K == K is needed, so M == N is never guarded
    # and the third call reuses the dynamic graph.
    plans = _counting_plans(monkeypatch)
    compiled, counter = compile_counted(lambda a, b: matmul(a, b) * 2, dynamic=None)
    for m, k, n in [(8, 256, 8), (16, 512, 16), (40, 512, 24)]:
        a, b = rand(m, k), rand(k, n)
        torch.testing.assert_close(compiled(a, b), (a @ b) * 2, rtol=1e-4, atol=1e-4)
    assert counter.frame_count == 2
    # x (s0, s1) and w (s2, s3), hints (16, 512) and (512, 16): s1 and s2 share a symbol, s0 and s3 do not
    assert plans[0][0] == (0, 1, 1, 3)


def _add_op():
    @tpu_kernel(uname("add"))
    def add(x: Tensor, y: Tensor) -> Tensor:
        return x + y  # broadcasts: y may have one row

    return add


def test_a_needed_equality_is_a_guard_so_a_call_where_it_fails_recompiles():
    # x + y at (16, 4) + (16, 4) needs x's rows == y's rows, guarded; a later legitimate
    # call with one row in y breaks the guard and recompiles (a run-time assert would fail).
    add = _add_op()
    compiled, counter = compile_counted(lambda x, y: add(x, y) * 2, dynamic=None)
    for rows_x, rows_y in [(8, 8), (16, 16), (24, 24), (24, 1), (32, 1)]:
        x, y = rand(rows_x, 4), rand(rows_y, 4)
        torch.testing.assert_close(compiled(x, y), (x + y) * 2)
    assert counter.frame_count == 3  # static, dynamic with rows equal, dynamic x with one-row y


def test_mark_dynamic_sizes_the_kernel_needs_equal_are_guarded_equal():
    add = _add_op()
    compiled, counter = compile_counted(lambda x, y: add(x, y) * 2, dynamic=None)
    for rows in (8, 16, 24):
        x, y = rand(rows, 4), rand(rows, 4)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(y, 0)
        torch.testing.assert_close(compiled(x, y), (x + y) * 2)
    assert counter.frame_count == 1


def test_sizes_whose_hints_differ_are_never_merged_and_the_kernel_error_is_kept():
    add = _add_op()
    fn = torch.compile(lambda x, y: add(x, y), backend="aot_eager", fullgraph=True, dynamic=True)
    # the rows (5 and 5) may be one symbol, the columns (6 and 3) never: eager fails too
    with pytest.raises(  # dynamo's fake-tensor failure, quoting ours
        torch._dynamo.exc.TorchRuntimeError,
        match=r"add_\d+: deriving output shapes.*broadcasting: \(d0, d1\), \(d0, d2\)",
    ):
        fn(rand(5, 6), rand(5, 3))


def test_the_equalities_become_torch_guards_and_each_plan_is_traced_once(monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, statically_known_true

    plans = _counting_plans(monkeypatch)
    add = _add_op()
    real = torch.empty(6, 4), torch.empty(6, 4)
    # no duck sizing: equal sizes get symbols of their own, as automatic dynamic gives them
    with FakeTensorMode(shape_env=ShapeEnv(duck_shape=False)) as mode:
        x, y = (_symbolic(mode, name, t) for name, t in zip("xy", real))
        assert not statically_known_true(x.shape[0] == y.shape[0])
        for _ in range(3):
            out = add(x, y)
    # rows with rows, columns with columns (not all four: their hints are 6, 4, 6, 4)
    assert plans[0][0] == (0, 1, 0, 1)
    assert statically_known_true(x.shape[0] == y.shape[0]) and statically_known_true(x.shape[1] == y.shape[1])
    assert out.shape == x.shape
    # after the guards x and y share their symbols: one more plan, one trace, then cache hits
    assert [n for _, n in plans[1:]] == [1]


def _symbolic(mode, name, t):
    """A fake of `t` with every size a symbol of its own."""
    from torch._dynamo.source import LocalSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim())
    return mode.from_tensor(t, source=LocalSource(name), symbolic_context=context)


def test_a_kernel_that_needs_concrete_sizes_still_says_how_to_fix_it():
    @tpu_kernel(uname("needs_int"))
    def needs_int(x: Tensor, y: Tensor) -> Tensor:
        return jnp.zeros((int(x.shape[0]) // 2, 3), x.dtype) + y[:1, :1]

    fn = torch.compile(lambda x, y: needs_int(x, y), backend="aot_eager", fullgraph=True, dynamic=True)
    with pytest.raises(  # dynamo's fake-tensor failure, quoting ours
        torch._dynamo.exc.TorchRuntimeError,
        match=r"needs_int_\d+: deriving output shapes.*symbolic sizes.*register_fake",
    ):
        fn(rand(6, 3), rand(6, 3))
