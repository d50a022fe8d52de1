"""torch.compile(fullgraph=True) and torch._dynamo.explain over every shipped op, on each torch
tpu_kernels supports (2.14.1 in requirements/lock.txt, 2.13.0 in requirements/lock-py311.txt:
scripts/test-py311 runs this file too). Issue 57's failure 4: Dynamo 2.13 could not trace the
tuning lookup's `_MISSING not in given` ("Missing richcompare_impl override"), so every shipped
op broke the graph there, with or without its tunables given."""

import pytest
import torch

from tests.helpers import compile_counted, rand
from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax

# (the op, its other statics, inputs at (m, n)); matmul's k is n
OPS = {
    "scale_add": (scale_add, {"alpha": 0.5}, lambda m, n: [rand(m, n), rand(m, n)]),
    "softmax": (softmax, {}, lambda m, n: [rand(m, n)]),
    "rmsnorm": (rmsnorm, {"eps": 1e-5}, lambda m, n: [rand(m, n), rand(n)]),
    "matmul": (matmul, {}, lambda m, n: [rand(m, n), rand(n, m + 8)]),
}
SHAPES = [(8, 256), (24, 512)]
# every tunable given: the lookup's other branch (nothing to look up)
GIVEN = {
    "scale_add": {"block_rows": 8},
    "softmax": {"block_rows": 8},
    "rmsnorm": {"block_rows": 8},
    "matmul": {"block_m": 8, "block_n": 128, "block_k": 256},
}


def _model(name: str, **tunables):
    op, statics, _ = OPS[name]
    torch._dynamo.reset()  # each test's `model` is one code object: no recompile limit reached

    def model(first, *rest):  # torch ops on both sides: a break at the op would split the graph
        return (op(first.tanh(), *rest, **statics, **tunables) * 1.5).square().mean()

    return model


@pytest.mark.parametrize("given", [False, True], ids=["looked-up", "given"])
@pytest.mark.parametrize("name", list(OPS))
def test_fullgraph_compile_of_every_shipped_op_at_two_shapes_matches_eager(name, given):
    model = _model(name, **(GIVEN[name] if given else {}))
    compiled, counter = compile_counted(model)  # fullgraph=True, dynamic=False: a graph per shape
    for shape in SHAPES:
        inputs = OPS[name][2](*shape)
        torch.testing.assert_close(compiled(*inputs), model(*inputs), rtol=1e-5, atol=1e-6)
    assert counter.frame_count == len(SHAPES)


@pytest.mark.parametrize("name", list(OPS))
def test_explain_over_every_shipped_op_finds_one_graph_and_no_break(name):
    for shape in SHAPES:
        explained = torch._dynamo.explain(_model(name))(*OPS[name][2](*shape))
        reasons = [str(r.reason).splitlines()[0] for r in explained.break_reasons]
        assert (explained.graph_count, explained.graph_break_count, reasons) == (1, 0, []), shape


def test_explain_with_dynamic_sizes_hands_jax_symbolic_dimensions():
    """After a default torch.compile saw a second shape (automatic dynamic sizes), the fake
    traces the kernel with JAX symbolic dimensions, not torch SymInts; explain of the same
    function then still finds one graph."""
    model = _model("matmul")
    compiled = torch.compile(model, backend="aot_eager")
    for m in (16, 24, 40):
        inputs = OPS["matmul"][2](m, 256)
        torch.testing.assert_close(compiled(*inputs), model(*inputs), rtol=1e-5, atol=1e-6)
    x = rand(32, 256)
    torch._dynamo.mark_dynamic(x, 0)
    explained = torch._dynamo.explain(model)(x, rand(256, 40))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
